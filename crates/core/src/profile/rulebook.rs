//! The rule book: every rule row in force, indexed once by what a query asks (device kind, phase, objective,
//! cache type) and, within a key, by the runtime the row names, so a query reads the few rows of its own case
//! instead of scanning every table. [`super::ProfileSet`]'s query methods delegate here; the answers are the
//! overlay semantics of [`super`]: the runtime's own rows before runtime-neutral (`any`) rows, then the most
//! specific row, and reserves summed in table order.
//!
//! The runtime is [`RuntimeId`], an enum the rules schema lists, so a misspelt `runtime:` fails validation
//! instead of filing a row under a runtime no query asks for. May touch: nothing (pure data).

use std::collections::BTreeMap;

use super::RuleError;
use super::types::{
    ArchitectureRule, AttentionRule, Capability, CapabilityRange, EfficiencyRule, KvCacheRule,
    Objective, Phase, PrecisionRule, ReserveRole, ReserveRule, ReserveTarget, RuleTable, RuntimeId,
    ThreadRule,
};

/// A kind of rule row: which table holds it, and its id.
pub trait RuleRow: Sized + 'static {
    /// The rows of this kind in `table` (none when the table is of another kind).
    fn of(table: &RuleTable) -> &[Self];
    /// The row's id, as provenance cites it.
    fn id(&self) -> &str;
}

macro_rules! rule_rows {
    ($($row:ty => $variant:ident),* $(,)?) => {$(
        impl RuleRow for $row {
            fn of(table: &RuleTable) -> &[Self] {
                match table {
                    RuleTable::$variant { rules, .. } => rules,
                    _ => &[],
                }
            }
            fn id(&self) -> &str {
                &self.id
            }
        }
    )*};
}

rule_rows!(
    PrecisionRule => Precision,
    AttentionRule => Attention,
    ReserveRule => MemoryReserves,
    ThreadRule => CpuThreads,
    ArchitectureRule => GpuArchitectures,
    EfficiencyRule => Efficiency,
    KvCacheRule => KvCache,
);

/// Rows that answer one key, by the runtime they name, each list in table order.
#[derive(Debug, Clone)]
struct ByRuntime<T> {
    rows: BTreeMap<RuntimeId, Vec<T>>,
}

impl<T> Default for ByRuntime<T> {
    fn default() -> Self {
        ByRuntime {
            rows: BTreeMap::new(),
        }
    }
}

impl<T> ByRuntime<T> {
    fn push(&mut self, runtime: RuntimeId, row: T) {
        self.rows.entry(runtime).or_default().push(row);
    }

    /// The row for `runtime`: among the rows `admits` accepts, the runtime's own before `any` rows, then the
    /// greatest `specificity` (on a tie the later row, which validation rules out for a validated set).
    fn best(
        &self,
        runtime: RuntimeId,
        admits: impl Fn(&T) -> bool,
        specificity: impl Fn(&T) -> u64,
    ) -> Option<&T> {
        let own = self.rows.get(&runtime).into_iter();
        let neutral = (runtime != RuntimeId::Any)
            .then(|| self.rows.get(&RuntimeId::Any))
            .flatten();
        own.chain(neutral).find_map(|rows| {
            rows.iter()
                .filter(|r| admits(r))
                .max_by_key(|r| specificity(r))
        })
    }
}

/// Every rule row in force, indexed for the queries the planner asks. Built once per profile set.
#[derive(Debug, Clone, Default)]
pub(crate) struct RuleBook {
    /// `reserve` rows by device kind, in table order (every runtime: a reserve query sums its own and `any`).
    reserves: BTreeMap<ReserveTarget, Vec<ReserveRule>>,
    /// `runtime-overhead` rows by device kind.
    overheads: BTreeMap<ReserveTarget, ByRuntime<ReserveRule>>,
    efficiency: BTreeMap<(ReserveTarget, Phase), ByRuntime<EfficiencyRule>>,
    /// The first row per objective.
    threads: BTreeMap<Objective, ThreadRule>,
    precision: BTreeMap<ReserveTarget, ByRuntime<PrecisionRule>>,
    attention: BTreeMap<ReserveTarget, ByRuntime<AttentionRule>>,
    /// By cache type, lower-cased (a query matches it ignoring ASCII case).
    kv_cache: BTreeMap<String, ByRuntime<KvCacheRule>>,
}

/// Every row of kind `T` in `tables`, in table order.
pub(crate) fn rows<'a, T: RuleRow + 'a>(
    tables: impl Iterator<Item = &'a RuleTable>,
) -> impl Iterator<Item = &'a T> {
    tables.flat_map(T::of)
}

impl RuleBook {
    /// Indexes the rows of `tables` (in order).
    pub(crate) fn new<'a>(tables: impl Iterator<Item = &'a RuleTable> + Clone) -> Self {
        let mut b = RuleBook::default();
        for r in rows::<ReserveRule>(tables.clone()) {
            match r.role {
                ReserveRole::Reserve => b.reserves.entry(r.device).or_default().push(r.clone()),
                ReserveRole::RuntimeOverhead => b
                    .overheads
                    .entry(r.device)
                    .or_default()
                    .push(r.runtime, r.clone()),
            }
        }
        for r in rows::<EfficiencyRule>(tables.clone()) {
            b.efficiency
                .entry((r.device, r.phase))
                .or_default()
                .push(r.runtime, r.clone());
        }
        for r in rows::<ThreadRule>(tables.clone()) {
            b.threads.entry(r.objective).or_insert_with(|| r.clone());
        }
        for r in rows::<PrecisionRule>(tables.clone()) {
            b.precision
                .entry(r.device)
                .or_default()
                .push(r.runtime, r.clone());
        }
        for r in rows::<AttentionRule>(tables.clone()) {
            b.attention
                .entry(r.device)
                .or_default()
                .push(r.runtime, r.clone());
        }
        for r in rows::<KvCacheRule>(tables) {
            b.kv_cache
                .entry(r.cache_type.to_ascii_lowercase())
                .or_default()
                .push(r.runtime, r.clone());
        }
        b
    }

    /// See [`super::ProfileSet::reserve`].
    pub(crate) fn reserve(
        &self,
        target: ReserveTarget,
        runtime: RuntimeId,
        capacity_bytes: u64,
    ) -> Result<(u64, Vec<String>), RuleError> {
        let mut bytes = 0u64;
        let mut ids = Vec::new();
        let mut overflow = false;
        let rows = self.reserves.get(&target).map_or(&[][..], Vec::as_slice);
        for r in rows.iter().filter(|r| r.runtime.applies_to(runtime)) {
            ids.push(r.id.clone());
            // fraction is in [0, 1) after validation, so the product is at most the capacity; a NaN (never
            // validated) would cast to 0, and `as` saturates.
            let share = (r.fraction * capacity_bytes as f64).floor() as u64;
            match bytes
                .checked_add(r.fixed_bytes)
                .and_then(|b| b.checked_add(share))
            {
                Some(b) => bytes = b,
                None => overflow = true,
            }
        }
        if overflow {
            return Err(RuleError::ReserveOverflow {
                target,
                runtime,
                capacity_bytes,
                rules: ids,
            });
        }
        Ok((bytes, ids))
    }

    /// See [`super::ProfileSet::runtime_overhead`].
    pub(crate) fn runtime_overhead(
        &self,
        target: ReserveTarget,
        runtime: RuntimeId,
    ) -> Option<&ReserveRule> {
        self.overheads.get(&target)?.best(runtime, |_| true, |_| 0)
    }

    /// See [`super::ProfileSet::efficiency`].
    pub(crate) fn efficiency(
        &self,
        device: ReserveTarget,
        runtime: RuntimeId,
        phase: Phase,
        cc: Option<Capability>,
    ) -> Option<&EfficiencyRule> {
        // A GPU of unknown capability (and every CPU) takes only rows without a capability range.
        self.efficiency.get(&(device, phase))?.best(
            runtime,
            |r| match cc {
                Some(cc) => r.compute_capability.contains(cc),
                None => r.compute_capability.is_open(),
            },
            |r| u64::from(!r.compute_capability.is_open()),
        )
    }

    /// See [`super::ProfileSet::cpu_threads`].
    pub(crate) fn cpu_threads(&self, objective: Objective) -> Option<&ThreadRule> {
        self.threads.get(&objective)
    }

    /// See [`super::ProfileSet::precision`].
    pub(crate) fn precision(
        &self,
        runtime: RuntimeId,
        cc: Option<Capability>,
    ) -> Option<&PrecisionRule> {
        self.precision.get(&device_of(cc))?.best(
            runtime,
            |r| admits(&r.compute_capability, cc),
            |_| 0,
        )
    }

    /// See [`super::ProfileSet::attention`].
    pub(crate) fn attention(
        &self,
        runtime: RuntimeId,
        cc: Option<Capability>,
        sequence_tokens: u64,
    ) -> Option<&AttentionRule> {
        self.attention.get(&device_of(cc))?.best(
            runtime,
            |r| {
                admits(&r.compute_capability, cc)
                    && r.min_sequence.is_none_or(|m| sequence_tokens >= m)
            },
            |r| r.min_sequence.unwrap_or(0),
        )
    }

    /// See [`super::ProfileSet::kv_cache`].
    pub(crate) fn kv_cache(&self, runtime: RuntimeId, cache_type: &str) -> Option<&KvCacheRule> {
        self.kv_cache
            .get(&cache_type.to_ascii_lowercase())?
            .best(runtime, |_| true, |_| 0)
    }
}

/// A query with a compute capability is about a GPU, one without about the CPU.
fn device_of(cc: Option<Capability>) -> ReserveTarget {
    if cc.is_some() {
        ReserveTarget::Gpu
    } else {
        ReserveTarget::Cpu
    }
}

/// A GPU case (`cc` given) is admitted by a range that holds it; the CPU case by any CPU row.
fn admits(range: &CapabilityRange, cc: Option<Capability>) -> bool {
    cc.is_none_or(|cc| range.contains(cc))
}
