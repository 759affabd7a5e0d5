//! Text that came from files, the store or the network, made safe to print on a terminal.
//!
//! A model's metadata, a stored device name, a server's reason phrase or model id may hold ESC (`\x1b]0;...\x07`
//! retitles the window, other sequences move the cursor or rewrite what was printed) or the 8-bit C1 forms of
//! the same (U+009B is CSI on terminals that honour C1). Every C0 control (U+0000-U+001F), DEL (U+007F) and C1
//! control (U+0080-U+009F), exactly what [`char::is_control`] matches, is printed as a Rust escape (`\u{1b}`),
//! so it is visible and inert.
//!
//! Trade-off: escaping rather than dropping keeps a defective name recognisable (and distinct from a clean one
//! that differs only by the control), at the cost of a few characters of table alignment. Structured output
//! (JSON, YAML) needs none of this: its writers escape control characters themselves.

use std::borrow::Cow;

/// `text` with every control character escaped (`\x1b` → `\u{1b}`, `\n` → `\u{a}`): for one-line fields such
/// as names, ids and reason phrases.
pub(crate) fn safe(text: &str) -> Cow<'_, str> {
    escape(text, false)
}

/// [`safe`] that keeps line feeds: for messages of several lines (error reports) whose lines were joined on
/// purpose. A carriage return is still escaped, since it would let the rest of a line overwrite its start.
pub(crate) fn safe_lines(text: &str) -> Cow<'_, str> {
    escape(text, true)
}

fn escape(text: &str, keep_newlines: bool) -> Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() && !(keep_newlines && c == '\n');
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_c1_and_del_are_escaped_and_nothing_else() {
        assert_eq!(safe("\x1b]0;pwned\x07"), "\\u{1b}]0;pwned\\u{7}");
        assert_eq!(safe("a\u{9b}2Jb\x7f"), "a\\u{9b}2Jb\\u{7f}");
        assert_eq!(safe("tab\there\nnext\r"), "tab\\u{9}here\\u{a}next\\u{d}");
        // Printable text, non-ASCII included, is borrowed unchanged.
        assert!(matches!(safe("Llama-3 8B · Q4_K_M é"), Cow::Borrowed(_)));
        assert!(matches!(safe(""), Cow::Borrowed(_)));
    }

    #[test]
    fn safe_lines_keeps_line_feeds_only() {
        assert_eq!(
            safe_lines("line 1\nline\r2 \x1b[2J"),
            "line 1\nline\\u{d}2 \\u{1b}[2J"
        );
        for c in (0u32..0x20).chain(0x7f..0xa0).filter_map(char::from_u32) {
            let out = safe(&c.to_string()).into_owned();
            assert!(!out.chars().any(char::is_control), "{c:?} → {out:?}");
        }
    }
}
