//! YAML in and out.
//!
//! In: serde_yaml_ng refuses alias bombs ("repetition limit exceeded") and deep nesting ("recursion limit
//! exceeded"), but only after libyaml has scanned the whole document, and libyaml's scanner is quadratic in
//! nesting depth (100,000 nested `[` took 80 s in a debug build). [`check_depth`] refuses documents nested
//! deeper than [`MAX_DEPTH`] before the parser sees them. It follows libyaml's own scanner (unsafe-libyaml
//! 0.2.11, `scanner.rs`) token by token: where a quoted scalar, a comment, a plain scalar and a block scalar
//! begin and end, and the block indentation stack, so text that libyaml reads as structure is never skipped
//! as a string or a comment (a `#` or `'` inside a plain scalar once hid 100,000 levels from a line-based
//! check). Trade-off: a document libyaml rejects is followed only up to its first error, since libyaml reads
//! no further either. Profiles and inventories are a few levels deep.
//!
//! Out: [`to_string`] writes YAML that YAML 1.1 readers (PyYAML, go-yaml v2 under Kubernetes tooling) read
//! back unchanged: serde_yaml_ng quotes only what a YAML 1.2 reader would retype, so `on`, `yes`, `y`, `0777`,
//! `1:20` or `2001-12-14` went out plain and came back as `True`, 511, 80 or a date.

use serde::de::DeserializeOwned;

mod emit;
mod scanner;
#[cfg(test)]
mod tests;

pub use emit::{to_string, yaml11_retypes};
use scanner::Scanner;

/// Deepest nesting accepted: flow collections (`[`, `{`) and block collections (each deeper indentation
/// libyaml opens, compact `- - x` included) count together.
pub const MAX_DEPTH: usize = 64;

/// Refuses text nested deeper than [`MAX_DEPTH`], in one pass that tokenizes as libyaml does.
pub fn check_depth(text: &str) -> Result<(), String> {
    Scanner::new(text.as_bytes(), MAX_DEPTH, false)
        .run()
        .map(|_| ())
}

/// Parses YAML after the depth check. Errors are messages (with line and column where the parser gives them).
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    check_depth(text)?;
    serde_yaml_ng::from_str(text).map_err(|e| e.to_string())
}
