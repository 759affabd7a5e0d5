//! The checks on one rule table that its schema cannot express: rule rows within their limits, well-formed
//! compute-capability ranges and PCI ids.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::hardware::parse_capability;
use crate::profile::types::{CapabilityRange, ReserveTarget, RuleTable, RuntimeId};

use super::values::{check_capability, check_positive, is_kebab};
use super::{
    LLAMA_CPP_KV_CACHE_TYPES, MAX_KV_MIN_GAIN, MAX_RESERVE_FIXED_BYTES, MAX_THREADS_PER_CORE,
};

pub(super) fn check_rules(t: &RuleTable, v: &Value, d: &mut impl FnMut(String, String)) {
    check_positive(v, true, &[], d);
    // (row id, compute-capability range) of every row, whatever the table kind.
    let rows: Vec<(&str, Option<&crate::profile::CapabilityRange>)> = match t {
        RuleTable::Precision { rules, .. } => rules
            .iter()
            .map(|r| (r.id.as_str(), Some(&r.compute_capability)))
            .collect(),
        RuleTable::Attention { rules, .. } => rules
            .iter()
            .map(|r| (r.id.as_str(), Some(&r.compute_capability)))
            .collect(),
        RuleTable::GpuArchitectures { rules, .. } => rules
            .iter()
            .map(|r| (r.id.as_str(), Some(&r.compute_capability)))
            .collect(),
        RuleTable::MemoryReserves { rules, .. } => {
            rules.iter().map(|r| (r.id.as_str(), None)).collect()
        }
        RuleTable::CpuThreads { rules, .. } => {
            rules.iter().map(|r| (r.id.as_str(), None)).collect()
        }
        RuleTable::Efficiency { rules, .. } => {
            rules.iter().map(|r| (r.id.as_str(), None)).collect()
        }
        RuleTable::KvCache { rules, .. } => rules.iter().map(|r| (r.id.as_str(), None)).collect(),
    };
    let mut ids = BTreeSet::new();
    for (i, (id, cc)) in rows.into_iter().enumerate() {
        if !is_kebab(id) {
            d(
                format!("/rules/{i}/id"),
                format!("rule id {id:?} is not lower-kebab-case"),
            );
        }
        if !ids.insert(id) {
            d(
                format!("/rules/{i}/id"),
                format!("duplicate rule id {id:?}"),
            );
        }
        let Some(cc) = cc else { continue };
        check_capability(
            cc.min.as_deref(),
            &format!("/rules/{i}/compute_capability/min"),
            d,
        );
        check_capability(
            cc.max.as_deref(),
            &format!("/rules/{i}/compute_capability/max"),
            d,
        );
        if let (Some(a), Some(b)) = (
            cc.min.as_deref().and_then(parse_capability),
            cc.max.as_deref().and_then(parse_capability),
        ) && a > b
        {
            d(
                format!("/rules/{i}/compute_capability"),
                "min is above max".into(),
            );
        }
    }
    // A CPU row has no compute capability; a GPU row may leave it open.
    let device_rows: Vec<(ReserveTarget, &CapabilityRange)> = match t {
        RuleTable::Precision { rules, .. } => rules
            .iter()
            .map(|r| (r.device, &r.compute_capability))
            .collect(),
        RuleTable::Attention { rules, .. } => rules
            .iter()
            .map(|r| (r.device, &r.compute_capability))
            .collect(),
        _ => Vec::new(),
    };
    for (i, (device, cc)) in device_rows.into_iter().enumerate() {
        if device == ReserveTarget::Cpu && !cc.is_open() {
            d(
                format!("/rules/{i}/compute_capability"),
                "a CPU row has no compute capability".into(),
            );
        }
    }
    match t {
        RuleTable::MemoryReserves { rules, .. } => {
            for (i, r) in rules.iter().enumerate() {
                if !(0.0..1.0).contains(&r.fraction) {
                    d(
                        format!("/rules/{i}/fraction"),
                        format!("{} must be in [0, 1)", r.fraction),
                    );
                }
                if r.fixed_bytes > MAX_RESERVE_FIXED_BYTES {
                    d(
                        format!("/rules/{i}/fixed_bytes"),
                        format!(
                            "{} bytes exceeds the limit of {MAX_RESERVE_FIXED_BYTES} bytes (1 TiB) for one reserve",
                            r.fixed_bytes
                        ),
                    );
                }
            }
        }
        RuleTable::KvCache { rules, .. } => {
            for (i, r) in rules.iter().enumerate() {
                if r.runtime == RuntimeId::LlamaCpp
                    && !LLAMA_CPP_KV_CACHE_TYPES.contains(&r.cache_type.as_str())
                {
                    d(
                        format!("/rules/{i}/cache_type"),
                        format!(
                            "{:?} is not a KV cache type of llama.cpp ({LLAMA_CPP_KV_CACHE_TYPES:?})",
                            r.cache_type
                        ),
                    );
                }
                if let Some(g) = r.min_gain
                    && !(g > 0.0 && g <= MAX_KV_MIN_GAIN)
                {
                    d(
                        format!("/rules/{i}/min_gain"),
                        format!("{g} must be in (0, {MAX_KV_MIN_GAIN}]"),
                    );
                }
            }
        }
        RuleTable::Efficiency { rules, .. } => {
            for (i, r) in rules.iter().enumerate() {
                if !(r.efficiency > 0.0 && r.efficiency <= 1.0) {
                    d(
                        format!("/rules/{i}/efficiency"),
                        format!("{} must be in (0, 1]", r.efficiency),
                    );
                }
            }
        }
        RuleTable::CpuThreads { rules, .. } => {
            for (i, r) in rules.iter().enumerate() {
                if r.threads_per_core == 0 || r.threads_per_core > MAX_THREADS_PER_CORE {
                    d(
                        format!("/rules/{i}/threads_per_core"),
                        format!(
                            "{} must be in 1..={MAX_THREADS_PER_CORE}",
                            r.threads_per_core
                        ),
                    );
                }
            }
        }
        _ => {}
    }
}

pub(super) fn table_id(t: &RuleTable) -> &str {
    match t {
        RuleTable::Precision { id, .. }
        | RuleTable::Attention { id, .. }
        | RuleTable::MemoryReserves { id, .. }
        | RuleTable::CpuThreads { id, .. }
        | RuleTable::GpuArchitectures { id, .. }
        | RuleTable::Efficiency { id, .. }
        | RuleTable::KvCache { id, .. } => id,
    }
}
