//! The checks across files, on the whole set in force: unique rule ids, no two rule rows answering one query,
//! hardware profiles against their architecture's per-SM rates, and no device matching two profiles.

use std::collections::{BTreeMap, BTreeSet};

use crate::hardware::parse_capability;
use crate::profile::matching::{candidates, tflops};
use crate::profile::types::{DeviceKind, HardwareProfile, ReserveRole, RuleTable};
use crate::profile::{ProfileSet, RuleRow};

use super::{Diagnostic, TFLOPS_TOLERANCE};

/// The id of every row of a table.
fn row_ids(t: &RuleTable) -> Vec<&str> {
    fn ids<T: RuleRow>(t: &RuleTable) -> impl Iterator<Item = &str> {
        T::of(t).iter().map(T::id)
    }
    ids::<crate::profile::PrecisionRule>(t)
        .chain(ids::<crate::profile::AttentionRule>(t))
        .chain(ids::<crate::profile::ReserveRule>(t))
        .chain(ids::<crate::profile::ThreadRule>(t))
        .chain(ids::<crate::profile::ArchitectureRule>(t))
        .chain(ids::<crate::profile::EfficiencyRule>(t))
        .chain(ids::<crate::profile::KvCacheRule>(t))
        .collect()
}

/// Every row of one kind in force: (file, index in its table, row).
fn rows_of<'a, T: RuleRow + 'a>(set: &'a ProfileSet) -> Vec<(&'a str, usize, &'a T)> {
    set.rules
        .iter()
        .flat_map(|e| {
            T::of(&e.value)
                .iter()
                .enumerate()
                .map(move |(i, r)| (e.origin.path.as_str(), i, r))
        })
        .collect()
}

/// Reports every pair of rows that `clash` says would both answer one query, at the later row, naming the
/// earlier one and its file.
fn conflicts<T>(
    rows: &[(&str, usize, &T)],
    id: impl Fn(&T) -> &str,
    clash: impl Fn(&T, &T) -> Option<String>,
    diags: &mut Vec<Diagnostic>,
) {
    for (j, (path_j, index_j, b)) in rows.iter().enumerate() {
        for (path_i, _, a) in &rows[..j] {
            if let Some(why) = clash(a, b) {
                diags.push(Diagnostic {
                    path: (*path_j).to_string(),
                    instance_path: format!("/rules/{index_j}"),
                    message: format!(
                        "rule {:?} conflicts with rule {:?} in {path_i}: {why}; a query would have two answers (replace the other table by giving yours its id, or narrow one row)",
                        id(b),
                        id(a)
                    ),
                });
            }
        }
    }
}

/// Overlay semantics for rule tables, checked on the set in force (after same-id tables replaced built-in
/// ones): rule ids are unique across every table, and no two rows, in one table or in several, answer the
/// same query.
fn check_rule_set(set: &ProfileSet, diags: &mut Vec<Diagnostic>) {
    let mut seen: BTreeMap<&str, (usize, &str)> = BTreeMap::new();
    for (t, e) in set.rules.iter().enumerate() {
        for (i, id) in row_ids(&e.value).into_iter().enumerate() {
            match seen.get(id) {
                Some((first, path)) if *first != t => diags.push(Diagnostic {
                    path: e.origin.path.clone(),
                    instance_path: format!("/rules/{i}/id"),
                    message: format!(
                        "rule id {id:?} is also defined in {path}: provenance cites a rule by its id alone, so an id names one rule"
                    ),
                }),
                Some(_) => {} // same table: reported by the per-table check
                None => {
                    seen.insert(id, (t, e.origin.path.as_str()));
                }
            }
        }
    }
    let efficiency = rows_of::<crate::profile::EfficiencyRule>(set);
    conflicts(
        &efficiency,
        |r| &r.id,
        |a, b| {
            // A row with a capability range refines one without; two rows at the same level must not overlap.
            (a.device == b.device
                && a.runtime == b.runtime
                && a.phase == b.phase
                && a.compute_capability.is_open() == b.compute_capability.is_open()
                && a.compute_capability.overlaps(&b.compute_capability))
            .then(|| {
                format!(
                    "both give the {} {:?} efficiency on a {:?} for overlapping compute capabilities",
                    a.runtime, a.phase, a.device
                )
            })
        },
        diags,
    );
    let threads = rows_of::<crate::profile::ThreadRule>(set);
    conflicts(
        &threads,
        |r| &r.id,
        |a, b| {
            (a.objective == b.objective)
                .then(|| format!("both set threads for objective {:?}", a.objective))
        },
        diags,
    );
    let precision = rows_of::<crate::profile::PrecisionRule>(set);
    conflicts(
        &precision,
        |r| &r.id,
        |a, b| {
            (a.runtime == b.runtime
                && a.device == b.device
                && a.compute_capability.overlaps(&b.compute_capability))
            .then(|| {
                format!(
                    "both set {} precision on a {:?} for overlapping compute capabilities",
                    a.runtime, a.device
                )
            })
        },
        diags,
    );
    let attention = rows_of::<crate::profile::AttentionRule>(set);
    conflicts(
        &attention,
        |r| &r.id,
        |a, b| {
            (a.runtime == b.runtime
                && a.device == b.device
                && a.min_sequence == b.min_sequence
                && a.compute_capability.overlaps(&b.compute_capability))
            .then(|| {
                format!(
                    "both choose the {} attention kernel on a {:?} for overlapping compute capabilities and the same min_sequence",
                    a.runtime, a.device
                )
            })
        },
        diags,
    );
    let reserves = rows_of::<crate::profile::ReserveRule>(set);
    conflicts(
        &reserves,
        |r| &r.id,
        |a, b| {
            (a.role == ReserveRole::RuntimeOverhead
                && b.role == ReserveRole::RuntimeOverhead
                && a.device == b.device
                && a.runtime == b.runtime)
                .then(|| {
                    format!(
                        "both give {}'s runtime overhead on a {:?}",
                        a.runtime, a.device
                    )
                })
        },
        diags,
    );
    let kv = rows_of::<crate::profile::KvCacheRule>(set);
    conflicts(
        &kv,
        |r| &r.id,
        |a, b| {
            (a.runtime == b.runtime && a.cache_type.eq_ignore_ascii_case(&b.cache_type)).then(
                || {
                    format!(
                        "both give {}'s threshold for a {} KV cache",
                        a.runtime, a.cache_type
                    )
                },
            )
        },
        diags,
    );
}

pub(super) fn check_set(set: &ProfileSet, with_builtin_rules: bool, diags: &mut Vec<Diagnostic>) {
    check_rule_set(set, diags);
    // Architecture rules: from the set, else (for a partial set) from the built-in tables.
    let builtin;
    let mut archs: Vec<&crate::profile::ArchitectureRule> = set.architectures().collect();
    if archs.is_empty() && with_builtin_rules {
        builtin = crate::profile::builtin_set().unwrap_or_default();
        archs = builtin.architectures().collect();
    }
    let mut arch_ids = BTreeSet::new();
    for a in &archs {
        arch_ids.insert(a.id.as_str());
    }
    for e in &set.hardware {
        let h = &e.value;
        let mut d = |instance_path: &str, message: String| {
            diags.push(Diagnostic {
                path: e.origin.path.clone(),
                instance_path: instance_path.into(),
                message,
            });
        };
        let Some(arch_id) = &h.architecture else {
            continue;
        };
        let Some(a) = archs.iter().find(|a| &a.id == arch_id) else {
            if !archs.is_empty() {
                d(
                    "/architecture",
                    format!(
                        "unknown architecture {arch_id:?}; the gpu-architectures rules define {:?}",
                        arch_ids
                    ),
                );
            }
            continue;
        };
        if let Some(cc) = h.compute_capability.as_deref().and_then(parse_capability)
            && !a.compute_capability.contains(cc)
        {
            d(
                "/compute_capability",
                format!(
                    "compute capability {}.{} is outside architecture {arch_id}'s range",
                    cc.0, cc.1
                ),
            );
        }
        let (Some(sms), Some(clk)) = (h.sms, h.boost_clock_mhz) else {
            continue;
        };
        let mut compare = |at: &str, stated: Option<f64>, rate: f64| {
            let Some(stated) = stated else { return };
            let derived = tflops(sms, clk, rate);
            if derived > 0.0 && ((stated - derived) / derived).abs() > TFLOPS_TOLERANCE {
                d(
                    at,
                    format!(
                        "{stated} TFLOPS disagrees with {sms} SMs × {clk} MHz × {rate} FLOP/clk/SM ({arch_id}) = {derived:.1} by more than {:.0} %",
                        TFLOPS_TOLERANCE * 100.0
                    ),
                );
            }
        };
        if let Some(t) = &h.tensor_tflops {
            compare(
                "/tensor_tflops/fp16_fp32acc",
                t.fp16_fp32acc,
                a.fp16_fp32acc_flops_per_clock_per_sm,
            );
            compare(
                "/tensor_tflops/bf16_fp32acc",
                t.bf16_fp32acc,
                a.fp16_fp32acc_flops_per_clock_per_sm,
            );
            compare(
                "/tensor_tflops/fp16_fp16acc",
                t.fp16_fp16acc,
                a.fp16_fp16acc_flops_per_clock_per_sm,
            );
        }
        if let Some(v) = &h.vector_tflops {
            compare("/vector_tflops/fp32", v.fp32, a.fp32_flops_per_clock_per_sm);
        }
    }
    // Overlapping match rules: a device described by a profile itself (its name, each of its PCI ids, its
    // memory) must match that profile and no other.
    let profiles: Vec<&HardwareProfile> = set.hardware.iter().map(|e| &e.value).collect();
    for e in &set.hardware {
        let h = &e.value;
        if h.kind != DeviceKind::Gpu {
            continue;
        }
        let memory = h.matching.memory_bytes.or(h.memory.size_bytes).unwrap_or(0);
        let pcis: Vec<Option<&str>> = if h.matching.pci_ids.is_empty() {
            vec![None]
        } else {
            h.matching
                .pci_ids
                .iter()
                .map(|s| Some(s.as_str()))
                .collect()
        };
        for pci in pcis {
            let (c, _) = candidates(profiles.iter().copied(), &h.name, pci, memory);
            let others: Vec<&str> = c
                .iter()
                .filter(|p| p.id != h.id)
                .map(|p| p.id.as_str())
                .collect();
            let msg = if !c.iter().any(|p| p.id == h.id) {
                Some(format!(
                    "a device named {:?}{} does not match this profile's own rules{}",
                    h.name,
                    pci.map(|p| format!(" with PCI id {p}")).unwrap_or_default(),
                    if others.is_empty() {
                        String::new()
                    } else {
                        format!(" (it matches {others:?})")
                    }
                ))
            } else if !others.is_empty() {
                Some(format!(
                    "match rules overlap: a device named {:?}{} also matches {others:?}",
                    h.name,
                    pci.map(|p| format!(" with PCI id {p}")).unwrap_or_default()
                ))
            } else {
                None
            };
            if let Some(message) = msg {
                diags.push(Diagnostic {
                    path: e.origin.path.clone(),
                    instance_path: "/match".into(),
                    message,
                });
            }
        }
    }
}
