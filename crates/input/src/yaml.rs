//! YAML in and out.
//!
//! In: [`from_str`] parses with serde-saphyr, whose budgets are checked on the parser's events as they come,
//! before anything is built from them: nesting deeper than [`MAX_DEPTH`], alias replays, anchors, nodes,
//! documents and scalar bytes. serde_yaml_ng refused deep nesting and alias bombs only after libyaml had
//! scanned the whole document (its scanner is quadratic in nesting depth: 100,000 nested `[` took 80 s in a
//! debug build), and it expanded a 203 KB anchor-and-alias document to 6.3 GB before refusing anything; a
//! hand-written pre-check that followed libyaml's scanner covered depth only, and a reader that skipped it
//! (`observe`'s deployment) spent 4.3 s on 40,000 nested `{a: `. The budgets hold while the document is
//! typed; when typing fails, the whole document goes through them once more, untyped, so that a breach or a
//! syntax error further on is reported rather than the first mismatch that hid it. A type error names its
//! field's path (`cpu.physical_cores`, through serde_path_to_error) as serde_yaml_ng's did.
//!
//! The options make saphyr read the project's documents as serde_yaml_ng (YAML 1.2 core schema) did:
//! `strict_booleans` (only `true`/`false`, not `yes`/`on`), leading-zero and underscored numbers
//! (`0777`, `1_000`) as strings, `<<` as an ordinary key, duplicate keys handed to the target type
//! (a struct refuses a repeated field, a map keeps the last) and `.inf`/`.nan` passed on as floats (so the
//! profile validator can name them instead of losing them as null). Differences that remain, all on inputs
//! the project does not write: custom tags are dropped, integers past 64 bits become floats, a quoted `'5'`
//! is accepted for an integer field and `~` is accepted as a key.
//!
//! Out: [`to_string`] writes YAML that YAML 1.1 readers (PyYAML, go-yaml v2 under Kubernetes tooling) read
//! back unchanged: serde_yaml_ng quotes only what a YAML 1.2 reader would retype, so `on`, `yes`, `y`, `0777`,
//! `1:20` or `2001-12-14` went out plain and came back as `True`, 511, 80 or a date.

use serde::de::{DeserializeOwned, IgnoredAny};

mod emit;
mod scanner;
#[cfg(test)]
mod tests;

pub use emit::{to_string, yaml11_retypes};
#[cfg(test)]
use scanner::Scanner;

/// Deepest nesting accepted: sequences and mappings, flow or block, count together (saphyr's `max_depth`,
/// which also counts the levels an alias replays).
pub(crate) const MAX_DEPTH: usize = 64;

/// The libyaml-following depth check that guarded serde_yaml_ng. Input no longer goes through it; its tests
/// keep pinning the scanner that [`to_string`] relies on to libyaml's own tokenization.
#[cfg(test)]
pub(crate) fn check_depth(text: &str) -> Result<(), scanner::TooDeep> {
    Scanner::new(text.as_bytes(), MAX_DEPTH, false)
        .run()
        .map(|_| ())
}

/// serde-saphyr's options for untrusted input: the default budgets with [`MAX_DEPTH`], read as serde_yaml_ng
/// read it (see the module documentation), and errors as one line, without a snippet of the input.
fn options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! { max_depth: MAX_DEPTH, flow_nesting_limit: MAX_DEPTH },
        strict_booleans: true,
        leading_zero_numbers_as_strings: true,
        underscored_numbers_as_strings: true,
        merge_keys: serde_saphyr::MergeKeyPolicy::AsOrdinary,
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::PassThrough,
        non_finite_float_policy: serde_saphyr::NonFiniteFloatPolicy::PassThrough,
        with_snippet: false,
    }
}

/// Why untrusted YAML was not read. Each variant's message is the text [`from_str`] returned before it had a
/// type: saphyr's message, after the field's path for a type error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum YamlError {
    /// Nesting deeper than [`MAX_DEPTH`]: saphyr's depth budget, or its parser's own nesting limit. `line` is
    /// 1-based, `None` where the parser gives none.
    #[error("{}", nested_too_deep(*.line))]
    TooDeep { line: Option<u64> },
    /// Past another of saphyr's budgets (alias replays, anchors, nodes, documents, scalar bytes).
    #[error("{message}")]
    OverBudget { message: String },
    /// Not YAML: a syntax error, with the line and column where the parser gives them.
    #[error("{message}")]
    Malformed { message: String },
    /// Well-formed YAML that is not the type asked for (a wrong type, a missing or unknown field), at `path`
    /// (`cpu.physical_cores`; `None` at the document's root).
    #[error("{}", at_path(path.as_deref(), message))]
    Type {
        path: Option<String>,
        message: String,
    },
}

fn nested_too_deep(line: Option<u64>) -> String {
    match line {
        None => format!("nested deeper than {MAX_DEPTH} levels"),
        Some(line) => format!("line {line}: nested deeper than {MAX_DEPTH} levels"),
    }
}

fn at_path(path: Option<&str>, message: &str) -> String {
    match path {
        Some(p) => format!("{p}: {message}"),
        None => message.to_string(),
    }
}

/// Parses untrusted YAML within saphyr's budgets. A type error names the field's path; saphyr gives the line
/// and column of the others where it has them; nesting past [`MAX_DEPTH`] reads "line N: nested deeper than
/// 64 levels".
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, YamlError> {
    let mut path = None;
    let typed = serde_saphyr::with_deserializer_from_str_with_options(text, options(), |de| {
        serde_path_to_error::deserialize(de).map_err(|e| {
            path = Some(e.path().to_string());
            e.into_inner()
        })
    });
    typed.map_err(|e| {
        if let Some(line) = too_deep(&e) {
            return YamlError::TooDeep { line };
        }
        // Typing stops at the first mismatch (`cpu: [[[…` is "expected a mapping" at `[`), which would hide a
        // document too deep, too big or malformed further on: the whole document goes through the budgets,
        // building nothing, and its defect is the one reported. Only a failed parse pays this second pass.
        if let Err(whole) = serde_saphyr::from_str_with_options::<IgnoredAny>(text, options()) {
            return match too_deep(&whole) {
                Some(line) => YamlError::TooDeep { line },
                None if matches!(unwrapped(&whole), serde_saphyr::Error::Budget { .. }) => {
                    YamlError::OverBudget {
                        message: whole.to_string(),
                    }
                }
                None => YamlError::Malformed {
                    message: whole.to_string(),
                },
            };
        }
        YamlError::Type {
            path: path.filter(|p| p != "."),
            message: e.to_string(),
        }
    })
}

/// The error under the alias that replayed it: a breach while an alias replays its anchor comes wrapped with
/// the alias's location.
fn unwrapped(e: &serde_saphyr::Error) -> &serde_saphyr::Error {
    use serde_saphyr::Error;
    let mut inner = e;
    while let Error::AliasError { error, .. } | Error::WithSnippet { error, .. } = inner {
        inner = error;
    }
    inner
}

/// For a document nested past [`MAX_DEPTH`] (saphyr's depth budget, or the parser's own nesting limit where
/// its scanner, looking ahead for a flow key, reaches [`MAX_DEPTH`] flow levels first), the line it names:
/// `Some(None)` where it names none. `None` for any other error.
fn too_deep(e: &serde_saphyr::Error) -> Option<Option<u64>> {
    use serde_saphyr::granit_parser::ErrorKind;
    use serde_saphyr::{Error, ExternalMessageSource, budget::BudgetBreach};
    let location = match unwrapped(e) {
        Error::Budget {
            breach: BudgetBreach::Depth { .. },
            location,
        } => location,
        Error::ExternalMessage {
            source, location, ..
        } if matches!(&**source, ExternalMessageSource::Parser(p)
                if matches!(p.kind(), ErrorKind::RecursionLimitExceeded)) =>
        {
            location
        }
        _ => return None,
    };
    Some(match location.line() {
        0 => None,
        line => Some(line),
    })
}
