//! Checks on a file's values that hold for every kind of profile: numeric leaves and non-finite numbers by
//! field path, sources for every number, positive numbers, well-formed compute capabilities, kebab-case ids.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::hardware::parse_capability;

pub(super) fn file_stem(path: &str) -> &str {
    let name = path.rsplit(['/', '\\']).next().unwrap_or(path);
    let name = name.strip_prefix("builtin:").unwrap_or(name);
    name.strip_suffix(".yaml")
        .or_else(|| name.strip_suffix(".yml"))
        .unwrap_or(name)
}

pub(super) fn is_kebab(id: &str) -> bool {
    !id.is_empty()
        && id.split('-').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        })
}

/// Every numeric leaf of `v` with its dotted path (`memory.bandwidth_gb_s`; array items as `list.0`).
fn numbers(v: &Value, prefix: &str, out: &mut Vec<(String, f64)>) {
    match v {
        Value::Number(n) => out.push((prefix.to_string(), n.as_f64().unwrap_or(f64::NAN))),
        Value::Object(m) => {
            for (k, x) in m {
                if k == "sources" && prefix.is_empty() {
                    continue;
                }
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                numbers(x, &p, out);
            }
        }
        Value::Array(items) => {
            for (i, x) in items.iter().enumerate() {
                numbers(x, &format!("{prefix}.{i}"), out);
            }
        }
        _ => {}
    }
}

/// Every non-finite float (`.nan`, `.inf`, `-.inf`) in a parsed YAML document, by dotted path. JSON has no
/// such numbers, so converting would turn them into `null`, which an optional field reads as absent.
pub(super) fn non_finite(v: &serde_yaml_ng::Value, prefix: &str, out: &mut Vec<(String, f64)>) {
    use serde_yaml_ng::Value as Y;
    let join = |k: &str| {
        if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        }
    };
    match v {
        Y::Number(n) => {
            if let Some(x) = n.as_f64()
                && !x.is_finite()
            {
                out.push((prefix.to_string(), x));
            }
        }
        Y::Mapping(m) => {
            for (k, x) in m {
                let key = match k {
                    Y::String(s) => s.clone(),
                    other => serde_yaml_ng::to_string(other)
                        .map(|s| s.trim().to_string())
                        .unwrap_or_default(),
                };
                non_finite(x, &join(&key), out);
            }
        }
        Y::Sequence(items) => {
            for (i, x) in items.iter().enumerate() {
                non_finite(x, &join(&i.to_string()), out);
            }
        }
        Y::Tagged(t) => non_finite(&t.value, prefix, out),
        _ => {}
    }
}

pub(super) fn pointer(dotted: &str) -> String {
    format!("/{}", dotted.replace('.', "/"))
}

/// Every number has a source (its path or a parent path is a key of `sources`), and every source key names a
/// field of the profile (sourcing a string such as `compute_capability` is welcome; a stale key is not).
pub(super) fn check_sources(
    v: &Value,
    sources: &BTreeMap<String, String>,
    d: &mut impl FnMut(String, String),
) {
    let mut nums = Vec::new();
    numbers(v, "", &mut nums);
    let covers = |key: &str, path: &str| path == key || path.starts_with(&format!("{key}."));
    for (path, _) in &nums {
        if !sources.keys().any(|k| covers(k, path)) {
            d(
                pointer(path),
                format!(
                    "number has no source: add `sources.{path}` (or a parent path) saying where it comes from"
                ),
            );
        }
    }
    for (k, text) in sources {
        let field = k.split('.').try_fold(v, |node, seg| match node {
            Value::Object(m) => m.get(seg),
            Value::Array(items) => seg.parse::<usize>().ok().and_then(|i| items.get(i)),
            _ => None,
        });
        if k == "sources" || field.is_none() {
            d(
                format!("/sources/{k}"),
                format!("source for {k:?}, which is not a field of this profile"),
            );
        }
        if text.trim().is_empty() {
            d(format!("/sources/{k}"), "empty source".into());
        }
    }
}

/// Numbers must be positive and finite; `zero_ok` lists the paths where 0 is meaningful.
pub(super) fn check_positive(
    v: &Value,
    allow_zero: bool,
    zero_ok: &[&str],
    d: &mut impl FnMut(String, String),
) {
    let mut nums = Vec::new();
    numbers(v, "", &mut nums);
    for (path, x) in nums {
        let allow_zero = allow_zero || zero_ok.contains(&path.as_str());
        let ok = x.is_finite() && (x > 0.0 || (allow_zero && x == 0.0));
        if !ok {
            d(
                pointer(&path),
                format!(
                    "{x} must be {}",
                    if allow_zero {
                        "non-negative"
                    } else {
                        "positive"
                    }
                ),
            );
        }
    }
}

pub(super) fn check_capability(cc: Option<&str>, at: &str, d: &mut impl FnMut(String, String)) {
    if let Some(cc) = cc
        && parse_capability(cc).is_none()
    {
        d(
            at.into(),
            format!("compute capability {cc:?} is not MAJOR.MINOR"),
        );
    }
}
