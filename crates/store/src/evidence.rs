//! Reading measurements back: [`Evidence`] for the planner (each row filed as a measured efficiency, a
//! throughput point, a CPU figure or a peak memory, or counted and left out), and the rows `measurements list`
//! shows.

use optimizer_core::evidence::Basis;
use optimizer_core::evidence::{
    CpuFigure, Evidence, MeasuredEfficiency, PeakMemory, ThroughputPoint,
};
use optimizer_core::profile::{Phase, RuntimeId};

use crate::{Store, StoreError, classify};

impl Store {
    /// What the store holds for these device profiles and this model fingerprint (rows without a model apply to
    /// every model). Read in one transaction, so a concurrent writer cannot tear the answer.
    pub fn evidence(
        &self,
        device_profiles: &[String],
        fingerprint: &str,
    ) -> Result<Evidence, StoreError> {
        let e = classify(&self.path);
        // Rolled back on drop: it only reads.
        let _snapshot = self.conn.unchecked_transaction().map_err(&e)?;
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT m.id, d.profile, r.runtime, r.tool, m.metric, m.value, m.context, m.model_id IS NULL, \
                 m.sequences, r.status = 'complete', m.threads, m.gpu_layers, m.ubatch, r.id, d.name, \
                 h.physical_cores, m.tensor_parallel \
                 FROM measurement m JOIN device d ON d.id = m.device_id JOIN run r ON r.id = m.run_id \
                 LEFT JOIN model o ON o.id = m.model_id LEFT JOIN host h ON h.id = r.host_id \
                 WHERE d.profile = ?1 AND (m.model_id IS NULL OR o.fingerprint = ?2) ORDER BY m.id",
            )
            .map_err(&e)?;
        let mut ev = Evidence {
            rows: Some(0),
            ..Evidence::default()
        };
        let mut seen = std::collections::BTreeSet::new();
        for p in device_profiles {
            if !seen.insert(p.as_str()) {
                continue;
            }
            let rows = stmt
                .query_map((p, fingerprint), |r| {
                    Ok(Row {
                        id: r.get(0)?,
                        profile: r.get(1)?,
                        runtime: r.get(2)?,
                        tool: r.get(3)?,
                        metric: r.get(4)?,
                        value: r.get(5)?,
                        context: r.get(6)?,
                        any_model: r.get(7)?,
                        sequences: r.get(8)?,
                        complete: r.get(9)?,
                        threads: r.get(10)?,
                        gpu_layers: r.get(11)?,
                        ubatch: r.get(12)?,
                        run: r.get(13)?,
                        name: r.get(14)?,
                        host_cores: r.get(15)?,
                        tensor_parallel: r.get(16)?,
                    })
                })
                .map_err(&e)?;
            for row in rows {
                let row = row.map_err(&e)?;
                ev.rows = ev.rows.map(|n| n.saturating_add(1));
                row.into_evidence(&mut ev);
            }
        }
        Ok(ev)
    }
}

/// A measurement as `measurements list` shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Listed {
    pub row: i64,
    pub run: i64,
    pub tool: String,
    pub runtime: String,
    /// `complete` or `incomplete` (ignored by plans).
    pub status: String,
    pub device_profile: String,
    pub device_name: String,
    /// The model's fingerprint; absent for a device figure that holds for every model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub metric: String,
    pub value: f64,
    pub unit: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sequences: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_layers: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ubatch: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_type: Option<String>,
}

impl Store {
    /// Every measurement, oldest first, with its run and device (one read transaction).
    pub fn list(&self) -> Result<Vec<Listed>, StoreError> {
        let e = classify(&self.path);
        let _snapshot = self.conn.unchecked_transaction().map_err(&e)?;
        let mut stmt = self
            .conn
            .prepare(
                "SELECT m.id, r.id, r.tool, r.runtime, r.status, d.profile, d.name, o.fingerprint, m.metric, \
                 m.value, m.unit, m.threads, m.sequences, m.gpu_layers, m.ubatch, m.kv_type \
                 FROM measurement m JOIN run r ON r.id = m.run_id JOIN device d ON d.id = m.device_id \
                 LEFT JOIN model o ON o.id = m.model_id ORDER BY m.id",
            )
            .map_err(&e)?;
        let rows = stmt
            .query_map([], |r| {
                Ok(Listed {
                    row: r.get(0)?,
                    run: r.get(1)?,
                    tool: r.get(2)?,
                    runtime: r.get(3)?,
                    status: r.get(4)?,
                    device_profile: r.get(5)?,
                    device_name: r.get(6)?,
                    model: r.get(7)?,
                    metric: r.get(8)?,
                    value: r.get(9)?,
                    unit: r.get(10)?,
                    threads: r.get(11)?,
                    sequences: r.get(12)?,
                    gpu_layers: r.get(13)?,
                    ubatch: r.get(14)?,
                    kv_type: r.get(15)?,
                })
            })
            .map_err(&e)?;
        rows.collect::<Result<_, _>>().map_err(&e)
    }
}

/// One measurement row as read.
struct Row {
    id: i64,
    profile: String,
    runtime: String,
    tool: String,
    metric: String,
    value: f64,
    context: String,
    any_model: bool,
    /// The `sequences` column (version 2); older rows say it in the JSON context.
    sequences: Option<i64>,
    /// The run finished; rows of an interrupted run are counted but never used.
    complete: bool,
    threads: Option<i64>,
    gpu_layers: Option<i64>,
    ubatch: Option<i64>,
    run: i64,
    /// The device's name (a CPU's model string).
    name: String,
    /// Physical cores of the run's host, when the run names one.
    host_cores: Option<i64>,
    /// The `tensor_parallel` column (version 2): GPUs one replica spanned.
    tensor_parallel: Option<i64>,
}

/// Largest efficiency a row may claim: achieved over peak above 1 means the peak in the profile is wrong, and
/// 1.5 leaves room for boost clocks above the datasheet's base figures.
const MAX_EFFICIENCY: f64 = 1.5;

impl Row {
    /// Files the row where it belongs; a row the planner cannot use is left out (still counted in `rows`).
    fn into_evidence(self, ev: &mut Evidence) {
        if !self.complete {
            return;
        }
        let Ok(runtime) =
            serde_json::from_value::<RuntimeId>(serde_json::Value::String(self.runtime.clone()))
        else {
            return;
        };
        if !self.value.is_finite() || self.value <= 0.0 {
            return;
        }
        let phase = |m: &str| match m {
            "decode" => Some(Phase::Decode),
            "prefill" => Some(Phase::Prefill),
            _ => None,
        };
        if let Some(ph) = self.metric.strip_suffix("_efficiency").and_then(phase) {
            if self.value <= MAX_EFFICIENCY {
                ev.efficiencies.push(MeasuredEfficiency {
                    row: self.id,
                    device_profile: self.profile,
                    runtime,
                    phase: ph,
                    value: self.value,
                    // A row for every model is a device-class figure (calibration); one for this model was
                    // measured with it.
                    basis: if self.any_model {
                        Basis::Calibrated
                    } else {
                        Basis::Measured
                    },
                    what: self.tool,
                });
            }
        } else if let Some(ph) = self.metric.strip_suffix("_tokens_per_s").and_then(phase) {
            if !self.any_model {
                let context = serde_json::from_str::<serde_json::Value>(&self.context).ok();
                let json = |k: &str| {
                    context
                        .as_ref()
                        .and_then(|v| v.get(k).and_then(serde_json::Value::as_u64))
                };
                let concurrency = self
                    .sequences
                    .and_then(|n| u64::try_from(n).ok())
                    .or_else(|| json("concurrency"));
                let small = |n: Option<i64>| n.and_then(|n| u32::try_from(n).ok());
                // A size the row states but no GPU count can be (a corrupt or foreign row) is not "one GPU".
                if self.tensor_parallel.is_some() && small(self.tensor_parallel).is_none() {
                    return;
                }
                let tokens = json(if ph == Phase::Prefill {
                    "n_prompt"
                } else {
                    "n_gen"
                });
                ev.throughput.push(ThroughputPoint {
                    row: self.id,
                    device_profile: self.profile,
                    runtime,
                    phase: ph,
                    tokens_per_s: self.value,
                    concurrency,
                    threads: small(self.threads),
                    gpu_layers: small(self.gpu_layers),
                    ubatch: small(self.ubatch),
                    tensor_parallel: small(self.tensor_parallel),
                    tokens,
                    what: self.tool,
                });
            }
        } else if self.metric.starts_with("cpu_") && self.any_model {
            // Only the micro-benchmarks of an optimised build describe the CPU (see `DEBUG_BUILD_TOOL`).
            if self.tool != optimizer_core::evidence::CALIBRATE_TOOL {
                return;
            }
            // A calibration figure of a CPU, at a thread count.
            if let Some(threads) = self
                .threads
                .and_then(|t| u32::try_from(t).ok())
                .filter(|t| *t > 0)
            {
                let isa = serde_json::from_str::<serde_json::Value>(&self.context)
                    .ok()
                    .and_then(|v| v.get("isa").and_then(|i| i.as_str().map(str::to_string)));
                ev.cpu.push(CpuFigure {
                    row: self.id,
                    run: self.run,
                    device_profile: self.profile,
                    device_name: self.name,
                    host_cores: self.host_cores.and_then(|c| u32::try_from(c).ok()),
                    metric: self.metric,
                    threads,
                    value: self.value,
                    isa,
                });
            }
        } else if self.metric == "peak_memory_bytes"
            && !self.any_model
            && self.value < 2f64.powi(63)
        {
            let context = serde_json::from_str::<serde_json::Value>(&self.context).ok();
            let estimated_bytes = context
                .as_ref()
                .and_then(|v| v.get("estimated_bytes").and_then(serde_json::Value::as_u64));
            let oom = context
                .as_ref()
                .and_then(|v| v.get("oom").and_then(serde_json::Value::as_bool))
                .unwrap_or(false);
            ev.peak_memory.push(PeakMemory {
                row: self.id,
                device_profile: self.profile,
                runtime,
                bytes: self.value as u64,
                estimated_bytes,
                context: self.context,
                oom,
            });
        }
    }
}
