//! What the measurement store knows about these devices and this model, as values the planner consumes: measured
//! efficiencies, measured throughput points and measured peak memory, each with the store row it came from. The
//! store builds it; the planner decides what it changes and records the basis (`analytic`, `calibrated`,
//! `measured`) and the row ids in the document's provenance.

use serde::{Deserialize, Serialize};

use crate::profile::{Phase, RuntimeId};

/// Where the efficiencies (and so the predictions) come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Basis {
    /// Peak figures from profiles or the probe, efficiencies from the rule tables.
    Analytic,
    /// Efficiencies fitted from measurements of this device class.
    Calibrated,
    /// Measured on this device.
    Measured,
}

/// An achieved share of a device's peak, measured or fitted from measurements.
#[derive(Debug, Clone, PartialEq)]
pub struct MeasuredEfficiency {
    /// The store's measurement row id.
    pub row: i64,
    pub device_profile: String,
    pub runtime: RuntimeId,
    pub phase: Phase,
    pub value: f64,
    /// `calibrated` (a micro-benchmark or fit over a device class) or `measured` (this device, this engine).
    pub basis: Basis,
    /// The run's tool, for the provenance line (`calibrate`, `llama-bench import`).
    pub what: String,
}

/// Tokens per second the engine reached on a device for a model, at a request shape.
#[derive(Debug, Clone, PartialEq)]
pub struct ThroughputPoint {
    pub row: i64,
    pub device_profile: String,
    pub runtime: RuntimeId,
    pub phase: Phase,
    pub tokens_per_s: f64,
    /// Sequences decoded together, when the row says.
    pub concurrency: Option<u64>,
    /// The shape it was taken at, when the row says: CPU threads, `-ngl` (0: the CPU alone), micro-batch, and
    /// the tokens of the test (the prompt for prefill, the generated tokens for decode).
    pub threads: Option<u32>,
    pub gpu_layers: Option<u32>,
    pub ubatch: Option<u32>,
    pub tokens: Option<u64>,
    pub what: String,
}

/// The most memory a run of the engine took on a device for a model.
#[derive(Debug, Clone, PartialEq)]
pub struct PeakMemory {
    pub row: i64,
    pub device_profile: String,
    pub runtime: RuntimeId,
    pub bytes: u64,
    /// What the memory model estimated for that device in that configuration, when the row says (an
    /// observation of a planned deployment records it): the excess is what the model missed.
    pub estimated_bytes: Option<u64>,
    /// The measurement's conditions as recorded (JSON).
    pub context: String,
}

impl PeakMemory {
    /// Bytes the engine used beyond the estimate (0 when the estimate held or none was recorded).
    pub fn excess(&self) -> u64 {
        self.estimated_bytes
            .map_or(0, |e| self.bytes.saturating_sub(e))
    }
}

/// Everything the store returned for one plan.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Evidence {
    pub efficiencies: Vec<MeasuredEfficiency>,
    pub throughput: Vec<ThroughputPoint>,
    pub peak_memory: Vec<PeakMemory>,
    /// Rows the store holds for these devices and this model (whether or not the planner can use them);
    /// `None` when the store was not consulted.
    pub rows: Option<u64>,
    /// Why the store was not consulted, for the document's warnings.
    pub unavailable: Option<String>,
}

impl Evidence {
    /// No store: the plan is analytic, and says why.
    pub fn unavailable(why: impl Into<String>) -> Evidence {
        Evidence {
            unavailable: Some(why.into()),
            ..Evidence::default()
        }
    }

    /// Whether anything here can change a plan.
    pub fn is_empty(&self) -> bool {
        self.efficiencies.is_empty() && self.throughput.is_empty() && self.peak_memory.is_empty()
    }
}
