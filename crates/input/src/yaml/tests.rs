//! Unit tests of [`super`]: the depth check against libyaml's own tokenization (hiding tricks, and libyaml as
//! the oracle on random documents) and the YAML 1.1-safe output.

use super::*;

#[test]
fn shallow_documents_pass() {
    assert!(check_depth("a: {b: [1, 2, {c: \"[[[[\"}]}\n# [[[[[[\n- - x\n").is_ok());
}

#[test]
fn deep_flow_block_and_dash_nesting_are_refused() {
    let flow = format!("a: {}1{}", "[".repeat(65), "]".repeat(65));
    assert!(
        check_depth(&flow)
            .unwrap_err()
            .to_string()
            .contains("deeper than 64")
    );
    let block: String = (0..70)
        .map(|i| format!("{}k{i}:\n", " ".repeat(2 * i)))
        .collect();
    assert!(check_depth(&block).is_err());
    let dashes = format!("{}x\n", "- ".repeat(70));
    assert!(check_depth(&dashes).is_err());
    assert!(from_str::<serde_json::Value>(&flow).is_err());
}

/// Levels hidden in the adversarial documents: far past [`MAX_DEPTH`], few enough that a scan stays
/// instant in a debug build (the scan stops at level 65 anyway; nothing here reaches libyaml).
const HIDDEN: usize = 10_000;

fn hidden(prefix: &str) -> String {
    format!("{prefix}{}{}", "[".repeat(HIDDEN), "]".repeat(HIDDEN))
}

#[test]
fn a_hash_inside_a_plain_scalar_does_not_start_a_comment() {
    // libyaml: `a#b` is one plain scalar (a comment needs a blank before `#`).
    assert!(check_depth(&hidden("[a#b, ")).is_err());
    assert!(check_depth(&hidden("k: a#b\nj: ")).is_err());
    // A real comment still hides what follows it on its line.
    assert!(check_depth(&format!("[a, #{}\n]", "[".repeat(HIDDEN))).is_ok());
    assert!(check_depth(&format!("[#{}\n]", "[".repeat(HIDDEN))).is_ok());
}

#[test]
fn a_quote_inside_a_plain_scalar_does_not_start_a_string() {
    assert!(check_depth(&hidden("[a'b, ")).is_err());
    assert!(check_depth(&hidden("[a\"b, ")).is_err());
    assert!(check_depth(&hidden("k: it's\nj: ")).is_err());
    // Continued on the next line of a block plain scalar, still not a string.
    assert!(check_depth(&hidden("k: a\n 'b\nj: ")).is_err());
}

#[test]
fn escaped_quotes_do_not_end_a_string_early_or_late() {
    assert!(check_depth(&hidden("[\"\\\"\", ")).is_err());
    assert!(check_depth(&hidden("['it''s', ")).is_err());
    assert!(check_depth(&hidden("[\"a\\\\\", ")).is_err());
    // Inside a string, brackets are text.
    assert!(check_depth(&format!("k: '{}'", "[".repeat(HIDDEN))).is_ok());
    assert!(check_depth(&format!("k: \"\\\"{}\"", "[".repeat(HIDDEN))).is_ok());
}

#[test]
fn closers_inside_strings_and_comments_do_not_cancel_openers() {
    let quoted = format!("{}x", "[ ']', ".repeat(100));
    assert!(check_depth(&quoted).is_err());
    let commented = format!("{}x", "[ # ]\n".repeat(100));
    assert!(check_depth(&commented).is_err());
}

#[test]
fn block_scalars_end_where_libyaml_ends_them() {
    // The quote is content of the block scalar; the next key is structure.
    assert!(check_depth(&hidden("a: |\n  it's\nb: ")).is_err());
    // A block scalar's content needs more indentation than its parent mapping (at column 2 here).
    assert!(check_depth(&hidden("- a: |\n  b: ")).is_err());
    // Content lines, however odd, hide nothing.
    assert!(check_depth(&format!("a: |\n  {}\nb: 1\n", "[".repeat(HIDDEN))).is_ok());
    assert!(check_depth(&format!("a: >-\n\n   x\n   {}\n", "[".repeat(HIDDEN))).is_ok());
}

#[test]
fn tags_anchors_and_document_markers_hide_nothing() {
    assert!(check_depth(&hidden("--- !t'x ")).is_err());
    assert!(check_depth(&hidden("- &a x'y\n- ")).is_err());
    assert!(check_depth(&hidden("%YAML 1.1\n--- ")).is_err());
    assert!(check_depth(&hidden("k: \"x\n--- ")).is_err());
}

#[test]
fn line_breaks_of_every_kind_count() {
    for br in ["\r", "\r\n", "\u{85}", "\u{2028}"] {
        assert!(check_depth(&hidden(&format!("# c{br}"))).is_err(), "{br:?}");
    }
}

/// Random documents mixing hiding tricks around 130 real levels (past serde_yaml_ng's recursion limit of
/// 128): whenever the check passes a document, libyaml must not find it nested past the limit. The oracle is
/// libyaml itself, so the scanner cannot agree with itself by construction.
#[test]
fn the_check_never_passes_what_libyaml_finds_deep() {
    const PIECES: &[&str] = &[
        "[", "]", "{", "}", ", ", " ", "\n", "  ", "a", "b: ", "- ", "? ", ": ", "'", "\"", "\\",
        "#", " #", "|", ">", "|-\n", "&x ", "*x", "!t ", "'x'", "\"y\"", "''", "--- ", "\t", "a#b",
        "it's", "\"\\\"\"", "a:b", "%Y\n",
    ];
    let deep = |n: usize, open: &str, close: &str| (open.repeat(n), close.repeat(n));
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut deep_found = 0;
    for _ in 0..3_000 {
        let mut doc = String::new();
        for _ in 0..(next() % 6) {
            doc.push_str(PIECES[(next() % PIECES.len() as u64) as usize]);
        }
        let (open, close) = if next() % 2 == 0 {
            deep(130, "[", "]")
        } else {
            deep(130, "- ", "")
        };
        doc.push_str(&open);
        doc.push('x');
        doc.push_str(&close);
        for _ in 0..(next() % 4) {
            doc.push_str(PIECES[(next() % PIECES.len() as u64) as usize]);
        }
        let libyaml = serde_yaml_ng::from_str::<serde_yaml_ng::Value>(&doc);
        let too_deep = libyaml
            .as_ref()
            .is_err_and(|e| e.to_string().contains("recursion limit"));
        if too_deep {
            deep_found += 1;
            assert!(check_depth(&doc).is_err(), "passed, libyaml nests: {doc:?}");
        }
    }
    assert!(
        deep_found > 300,
        "only {deep_found} documents reached the limit"
    );
}

#[test]
fn real_documents_pass() {
    for text in [
        "a: b\nc:\n  - d\n  - {e: [f, g]}\n# [[[\nh: 'it''s [' # ]\ni: |\n  [[[\n  ]]\n",
        "- - - x\n- ? k\n  : v\n",
        "a: \"x\\\" [ \"\nb: [1, 2]\n",
    ] {
        assert!(check_depth(text).is_ok(), "{text:?}");
    }
}

#[test]
fn output_quotes_what_yaml_1_1_retypes_and_keeps_the_rest() {
    let v = serde_json::json!({"argv": ["-fa", "on", "-c", "8192"], "on": "yes", "n": 1e-5, "x": 1.5e20,
            "t": true, "z": null, "s": "0777", "d": "2001-12-14", "k": "llama-server"});
    let y = to_string(&v).unwrap();
    for want in [
        "- -fa\n",
        "- 'on'\n",
        "- '8192'\n",
        "'on': 'yes'\n",
        "'n': 0.00001\n",
        "x: 1.5e+20\n",
        "t: true\n",
        "z: null\n",
        "s: '0777'\n",
        "d: '2001-12-14'\n",
        "k: llama-server\n",
    ] {
        assert!(y.contains(want), "{want:?} in\n{y}");
    }
    let back: serde_json::Value = serde_yaml_ng::from_str(&y).unwrap();
    assert_eq!(back, v);
    // serde_yaml_ng writes f32 in ryu's shortest form, `1e-7`, which PyYAML reads as a string.
    #[derive(serde::Serialize)]
    struct Eps {
        eps: f32,
        big: f32,
        plain: f32,
    }
    let eps = Eps {
        eps: 1e-7,
        big: 1e20,
        plain: 0.25,
    };
    assert_eq!(
        serde_yaml_ng::to_string(&eps).unwrap(),
        "eps: 1e-7\nbig: 1e20\nplain: 0.25\n"
    );
    assert_eq!(
        to_string(&eps).unwrap(),
        "eps: 1.0e-7\nbig: 1.0e+20\nplain: 0.25\n"
    );
}

#[test]
fn yaml_1_1_scalars_are_recognised() {
    for s in [
        "y",
        "NO",
        "on",
        "Off",
        "~",
        "",
        "0b101",
        "0777",
        "0x_1F",
        "-1_000",
        "1:20",
        "190:20:30.15",
        ".5",
        "1.",
        "-.INF",
        ".NaN",
        "1e3",
        "6.8523015e+5",
        "2001-12-14",
        "2001-12-14 21:59:43.10 -5",
        "2001-12-14t21:59:43.10-05:00",
        "=",
        "<<",
        "+inf",
        "0o17",
    ] {
        assert!(yaml11_retypes(s), "{s:?}");
    }
    for s in [
        "llama", "-fa", "q4_0", "1:60", "0x", "cuda:0", "2001-12", "yes!", "x1e3", "8.9.x",
    ] {
        assert!(!yaml11_retypes(s), "{s:?}");
    }
}

/// Each kind of [`YamlError`] from the defect that makes it, with the message `from_str` gave as text before
/// the error had a type.
mod errors {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)] // only deserialized
    struct Inventory {
        cpu: Cpu,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)] // only deserialized
    struct Cpu {
        physical_cores: u32,
    }

    #[test]
    fn nesting_past_the_limit_is_too_deep_with_its_line() {
        let text = format!("a: 1\nb: {}1{}\n", "[".repeat(65), "]".repeat(65));
        let e = from_str::<serde_json::Value>(&text).unwrap_err();
        assert!(matches!(e, YamlError::TooDeep { line: Some(2) }), "{e:?}");
        assert_eq!(e.to_string(), "line 2: nested deeper than 64 levels");
        // Behind a type mismatch on the first line, the depth is still what is reported.
        let e = from_str::<Inventory>(&format!("cpu: {}1{}\n", "[".repeat(65), "]".repeat(65)))
            .unwrap_err();
        assert!(matches!(e, YamlError::TooDeep { line: Some(1) }), "{e:?}");
    }

    #[test]
    fn an_alias_bomb_is_over_budget() {
        let text = format!(
            "a: &a [{}]\nb: [{}]\n",
            vec!["x"; 100_000].join(","),
            vec!["*a"; 1000].join(",")
        );
        let e = from_str::<serde_json::Value>(&text).unwrap_err();
        let YamlError::OverBudget { message } = &e else {
            panic!("{e:?}");
        };
        assert!(message.contains("budget"), "{message}");
        assert_eq!(&e.to_string(), message);
    }

    #[test]
    fn broken_syntax_is_malformed_even_behind_a_type_error() {
        let e = from_str::<serde_json::Value>("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(matches!(e, YamlError::Malformed { .. }), "{e:?}");
        // `cpu: 5` is a type error, but the unclosed flow further on is the defect reported.
        let e = from_str::<Inventory>("cpu: 5\nb: [1\n").unwrap_err();
        let YamlError::Malformed { message } = &e else {
            panic!("{e:?}");
        };
        assert_eq!(&e.to_string(), message);
    }

    #[test]
    fn a_wrong_type_names_the_fields_path() {
        let e = from_str::<Inventory>("cpu:\n  physical_cores: many\n").unwrap_err();
        let YamlError::Type {
            path: Some(path),
            message,
        } = &e
        else {
            panic!("{e:?}");
        };
        assert_eq!(path, "cpu.physical_cores");
        assert_eq!(e.to_string(), format!("cpu.physical_cores: {message}"));
        // At the document's root there is no path to name.
        let e = from_str::<Inventory>("5\n").unwrap_err();
        let YamlError::Type {
            path: None,
            message,
        } = &e
        else {
            panic!("{e:?}");
        };
        assert_eq!(&e.to_string(), message);
    }
}
