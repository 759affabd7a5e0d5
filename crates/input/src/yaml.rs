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
pub const MAX_DEPTH: usize = 64;

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

/// Parses untrusted YAML within saphyr's budgets. Errors are messages, with the field's path and the line and
/// column where the parser gives them; nesting past [`MAX_DEPTH`] reads "line N: nested deeper than 64
/// levels".
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    let mut path = None;
    let typed = serde_saphyr::with_deserializer_from_str_with_options(text, options(), |de| {
        serde_path_to_error::deserialize(de).map_err(|e| {
            path = Some(e.path().to_string());
            e.into_inner()
        })
    });
    typed.map_err(|e| {
        if let Some(m) = too_deep(&e) {
            return m;
        }
        // Typing stops at the first mismatch (`cpu: [[[…` is "expected a mapping" at `[`), which would hide a
        // document too deep, too big or malformed further on: the whole document goes through the budgets,
        // building nothing, and its defect is the one reported. Only a failed parse pays this second pass.
        if let Err(whole) = serde_saphyr::from_str_with_options::<IgnoredAny>(text, options()) {
            return too_deep(&whole).unwrap_or_else(|| whole.to_string());
        }
        match path {
            Some(p) if p != "." => format!("{p}: {e}"),
            _ => e.to_string(),
        }
    })
}

/// The message for a document nested past [`MAX_DEPTH`]: saphyr's depth budget, or the parser's own nesting
/// limit where its scanner, looking ahead for a flow key, reaches [`MAX_DEPTH`] flow levels first.
fn too_deep(e: &serde_saphyr::Error) -> Option<String> {
    use serde_saphyr::granit_parser::ErrorKind;
    use serde_saphyr::{Error, ExternalMessageSource, budget::BudgetBreach};
    let mut inner = e;
    // A depth reached while an alias replays its anchor comes wrapped with the alias's location.
    while let Error::AliasError { error, .. } | Error::WithSnippet { error, .. } = inner {
        inner = error;
    }
    let location = match inner {
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
        0 => format!("nested deeper than {MAX_DEPTH} levels"),
        line => format!("line {line}: nested deeper than {MAX_DEPTH} levels"),
    })
}
