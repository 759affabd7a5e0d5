//! YAML input with bounds: serde_yaml_ng refuses alias bombs ("repetition limit exceeded") and deep nesting
//! ("recursion limit exceeded"), but only after libyaml has scanned the whole document, and libyaml's scanner
//! is quadratic in nesting depth (100,000 nested `[` took 80 s in a debug build). A linear pre-scan refuses
//! documents nested deeper than [`MAX_DEPTH`] before the parser sees them. Profiles and inventories are a few
//! levels deep.

use serde::de::DeserializeOwned;

/// Deepest nesting accepted: flow collections (`[`, `{`), block indentation (in columns / 2) and compact block
/// sequences (`- - - x`) each count.
pub const MAX_DEPTH: usize = 64;

/// Refuses text nested deeper than [`MAX_DEPTH`], in one pass, skipping quoted strings and comments.
pub fn check_depth(text: &str) -> Result<(), String> {
    let mut flow = 0usize;
    for (n, line) in text.lines().enumerate() {
        let indent = line.len() - line.trim_start_matches(' ').len();
        let mut dashes = 0usize;
        let rest = line.trim_start_matches(' ');
        let mut chars = rest.chars().peekable();
        // Compact block sequences: `- - - x` nests one level per dash.
        while let Some('-') = chars.peek().copied() {
            let mut probe = chars.clone();
            probe.next();
            if matches!(probe.peek(), Some(' ') | None) {
                dashes += 1;
                chars.next();
                while let Some(' ') = chars.peek() {
                    chars.next();
                }
            } else {
                break;
            }
        }
        if indent / 2 + dashes > MAX_DEPTH {
            return Err(format!(
                "line {}: nested deeper than {MAX_DEPTH} levels",
                n + 1
            ));
        }
        let mut quote: Option<char> = None;
        for c in chars {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '"' | '\'') => quote = Some(c),
                (None, '#') => break,
                (None, '[' | '{') => {
                    flow += 1;
                    if flow > MAX_DEPTH {
                        return Err(format!(
                            "line {}: nested deeper than {MAX_DEPTH} levels",
                            n + 1
                        ));
                    }
                }
                (None, ']' | '}') => flow = flow.saturating_sub(1),
                _ => {}
            }
        }
    }
    Ok(())
}

/// Parses YAML after the depth check. Errors are messages (with line and column where the parser gives them).
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    check_depth(text)?;
    serde_yaml_ng::from_str(text).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shallow_documents_pass() {
        assert!(check_depth("a: {b: [1, 2, {c: \"[[[[\"}]}\n# [[[[[[\n- - x\n").is_ok());
    }

    #[test]
    fn deep_flow_block_and_dash_nesting_are_refused() {
        let flow = format!("a: {}1{}", "[".repeat(65), "]".repeat(65));
        assert!(check_depth(&flow).unwrap_err().contains("deeper than 64"));
        let block: String = (0..70)
            .map(|i| format!("{}k{i}:\n", " ".repeat(2 * i)))
            .collect();
        assert!(check_depth(&block).is_err());
        let dashes = format!("{}x\n", "- ".repeat(70));
        assert!(check_depth(&dashes).is_err());
        assert!(from_str::<serde_json::Value>(&flow).is_err());
    }
}
