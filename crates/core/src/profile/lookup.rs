//! Finding a profile by what a person types: the id exactly, then the id in any case or spelling
//! (`RTX 4090` → `rtx-4090`), then a hardware profile's product name as `profiles list` shows it
//! (`NVIDIA GeForce RTX 4090`, or its normalized form `RTX 4090`), and otherwise the nearest id by edit
//! distance as a "did you mean" when it is close. Pure: reads the profile set, touches nothing.
//!
//! Trade-off: a name that several profiles share (`Apple M3 Max` for two GPU core counts) is refused with
//! every id it could mean rather than resolved to one, so a plan is never made for a part the user did not pick.

use super::{Entry, HardwareProfile, NodeProfile, ProfileSet, WorkloadProfile, matching};

/// A suggestion is offered when the edit distance is at most the typed id's length divided by this (at least
/// one edit): `rtx-4900` (8 characters, one swap from `rtx-4090`) is close, `nope` is not close to `l4`. A
/// third keeps one typo in short ids (`chta`) and a few in long ones without suggesting unrelated ids.
const MAX_DISTANCE_DIVISOR: usize = 3;

/// Characters beyond which no distance is computed: ids are short, and a pasted paragraph should not cost a
/// quadratic table.
const MAX_COMPARED_CHARS: usize = 128;

/// Why a typed id found no profile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    #[error("no {kind} {wanted:?}{}", suggestion.as_ref().map(|s| format!("; did you mean {s}?")).unwrap_or_default())]
    Unknown {
        kind: &'static str,
        wanted: String,
        suggestion: Option<String>,
    },
    #[error("{wanted:?} names {} {kind}s: {}; give one id", ids.len(), ids.join(", "))]
    Ambiguous {
        kind: &'static str,
        wanted: String,
        ids: Vec<String>,
    },
}

/// The lower-case, hyphen-joined form of an id or name: `RTX 4090` and `rtx_4090` → `rtx-4090`.
fn spelling(s: &str) -> String {
    matching::slug(s)
}

/// The one entry matching by the first rule that matches any; several at that rule are ambiguous.
fn first_unique<'a, T>(
    kind: &'static str,
    wanted: &str,
    entries: &'a [Entry<T>],
    rules: &[&dyn Fn(&T) -> bool],
) -> Result<Option<&'a Entry<T>>, LookupError>
where
    T: HasId,
{
    for rule in rules {
        let hits: Vec<&Entry<T>> = entries.iter().filter(|e| rule(&e.value)).collect();
        match hits.len() {
            0 => continue,
            1 => return Ok(Some(hits[0])),
            _ => {
                return Err(LookupError::Ambiguous {
                    kind,
                    wanted: wanted.to_string(),
                    ids: hits.iter().map(|e| e.value.id().to_string()).collect(),
                });
            }
        }
    }
    Ok(None)
}

/// A profile with an id.
trait HasId {
    fn id(&self) -> &str;
}

impl HasId for HardwareProfile {
    fn id(&self) -> &str {
        &self.id
    }
}

impl HasId for NodeProfile {
    fn id(&self) -> &str {
        &self.id
    }
}

impl HasId for WorkloadProfile {
    fn id(&self) -> &str {
        &self.id
    }
}

impl ProfileSet {
    /// The hardware profile `wanted` names: its id in any case or spelling, or its product name (see the
    /// module doc).
    pub fn find_hardware(&self, wanted: &str) -> Result<&Entry<HardwareProfile>, LookupError> {
        const KIND: &str = "hardware profile";
        let lower = wanted.trim().to_lowercase();
        let spelled = spelling(wanted);
        let normalized = matching::normalize_name(wanted);
        let found = first_unique(
            KIND,
            wanted,
            &self.hardware,
            &[
                &|p: &HardwareProfile| p.id == wanted,
                &|p: &HardwareProfile| p.id.to_lowercase() == lower,
                &|p: &HardwareProfile| !spelled.is_empty() && p.id == spelled,
                &|p: &HardwareProfile| p.name.to_lowercase() == lower,
                &|p: &HardwareProfile| {
                    !normalized.is_empty()
                        && (matching::normalize_name(&p.name) == normalized
                            || matching::normalize_name(&p.id) == normalized)
                },
            ],
        )?;
        found.ok_or_else(|| unknown(KIND, wanted, self.hardware.iter().map(|e| e.value.id())))
    }

    /// The node profile `wanted` names, by its id in any case or spelling (`DGX H100` → `dgx-h100`); `None`
    /// when none does (then `--hardware` looks for a hardware profile).
    pub fn lookup_node(&self, wanted: &str) -> Option<&Entry<NodeProfile>> {
        let lower = wanted.trim().to_lowercase();
        let spelled = spelling(wanted);
        first_unique(
            "node profile",
            wanted,
            &self.nodes,
            &[
                &|p: &NodeProfile| p.id == wanted,
                &|p: &NodeProfile| p.id.to_lowercase() == lower,
                &|p: &NodeProfile| !spelled.is_empty() && p.id == spelled,
            ],
        )
        .ok()
        .flatten()
    }

    /// The workload preset `wanted` names: its id in any case or spelling (`Chat`, `code generation`).
    pub fn find_workload(&self, wanted: &str) -> Result<&Entry<WorkloadProfile>, LookupError> {
        const KIND: &str = "workload preset";
        let lower = wanted.trim().to_lowercase();
        let spelled = spelling(wanted);
        let found = first_unique(
            KIND,
            wanted,
            &self.workloads,
            &[
                &|p: &WorkloadProfile| p.id == wanted,
                &|p: &WorkloadProfile| p.id.to_lowercase() == lower,
                &|p: &WorkloadProfile| !spelled.is_empty() && p.id == spelled,
            ],
        )?;
        found.ok_or_else(|| unknown(KIND, wanted, self.workloads.iter().map(|e| e.value.id())))
    }
}

/// [`LookupError::Unknown`] with the nearest of `ids` when it is close.
pub fn unknown<'a>(
    kind: &'static str,
    wanted: &str,
    ids: impl Iterator<Item = &'a str>,
) -> LookupError {
    LookupError::Unknown {
        kind,
        wanted: wanted.to_string(),
        suggestion: nearest(wanted, ids).map(str::to_string),
    }
}

/// The id closest to `wanted` (compared in lower case and hyphen-joined, whichever is nearer), when within
/// [`MAX_DISTANCE_DIVISOR`]; the first in order on a tie.
pub(crate) fn nearest<'a>(wanted: &str, ids: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let forms = [wanted.trim().to_lowercase(), spelling(wanted)];
    let len = forms[0].chars().count();
    if len == 0 || len > MAX_COMPARED_CHARS {
        return None;
    }
    let limit = (len / MAX_DISTANCE_DIVISOR).max(1);
    let mut best: Option<(usize, &str)> = None;
    for id in ids {
        if id.chars().count() > MAX_COMPARED_CHARS {
            continue;
        }
        let d = forms
            .iter()
            .filter(|f| !f.is_empty())
            .map(|f| edit_distance(f, &id.to_lowercase()))
            .min()
            .unwrap_or(usize::MAX);
        if d <= limit && best.is_none_or(|(b, _)| d < b) {
            best = Some((d, id));
        }
    }
    best.map(|(_, id)| id)
}

/// Edits (insert, delete, substitute, or swap two adjacent characters) turning `a` into `b`: the optimal
/// string alignment distance, so the common typo of two swapped keys costs one.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // Three rows of the (len(a)+1) × (len(b)+1) table: two back for a transposition.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur: Vec<usize> = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut d = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                d = d.min(before[j - 2] + 1);
            }
            cur[j] = d;
        }
        std::mem::swap(&mut before, &mut prev);
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("", ""), 0);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("abc", ""), 3);
        assert_eq!(edit_distance("chat", "chat"), 0);
        assert_eq!(edit_distance("chta", "chat"), 1, "a swap is one edit");
        assert_eq!(edit_distance("rtx-4900", "rtx-4090"), 1);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("inferense", "inference"), 1);
        assert_eq!(
            edit_distance("ca", "abc"),
            3,
            "OSA does not edit a swapped pair twice"
        );
    }

    #[test]
    fn the_nearest_id_only_when_close() {
        let ids = ["chat", "inference", "code-generation", "l4", "rtx-4090"];
        let near = |w: &str| nearest(w, ids.iter().copied());
        assert_eq!(near("chta"), Some("chat"));
        assert_eq!(near("Inferense"), Some("inference"));
        assert_eq!(near("code generaton"), Some("code-generation"));
        assert_eq!(near("RTX 4900"), Some("rtx-4090"));
        assert_eq!(near("nope"), None);
        assert_eq!(near("training"), None);
        assert_eq!(near(""), None);
        assert_eq!(near(&"x".repeat(MAX_COMPARED_CHARS + 1)), None);
    }

    #[test]
    fn ids_in_any_case_and_product_names_find_their_profile() {
        let set = super::super::builtin_set().unwrap();
        let hw = |w: &str| set.find_hardware(w).map(|e| e.value.id.as_str());
        assert_eq!(hw("rtx-4090"), Ok("rtx-4090"));
        assert_eq!(hw("RTX-4090"), Ok("rtx-4090"));
        assert_eq!(hw("RTX 4090"), Ok("rtx-4090"));
        assert_eq!(hw("NVIDIA GeForce RTX 4090"), Ok("rtx-4090"));
        assert_eq!(hw("nvidia a100-sxm4-80gb"), Ok("a100-80gb-sxm"));
        assert_eq!(hw("H100 80GB HBM3"), Ok("h100-sxm"));
        // The id spelled as words wins over the product name two profiles share.
        assert_eq!(hw("Apple M3 Max"), Ok("apple-m3-max"));
        // Both A100 SXM4 parts are "A100-SXM4" once the memory size is dropped.
        assert_eq!(
            hw("A100 SXM4"),
            Err(LookupError::Ambiguous {
                kind: "hardware profile",
                wanted: "A100 SXM4".into(),
                ids: vec!["a100-40gb-sxm".into(), "a100-80gb-sxm".into()]
            })
        );
        assert_eq!(
            hw("rtx-4900"),
            Err(LookupError::Unknown {
                kind: "hardware profile",
                wanted: "rtx-4900".into(),
                suggestion: Some("rtx-4090".into())
            })
        );
        assert!(matches!(
            hw("nope"),
            Err(LookupError::Unknown {
                suggestion: None,
                ..
            })
        ));
        let wl = |w: &str| set.find_workload(w).map(|e| e.value.id.as_str());
        assert_eq!(wl("Chat"), Ok("chat"));
        assert_eq!(wl("CODE GENERATION"), Ok("code-generation"));
        let e = set.find_workload("chta").unwrap_err();
        assert_eq!(
            e.to_string(),
            "no workload preset \"chta\"; did you mean chat?"
        );
    }
}
