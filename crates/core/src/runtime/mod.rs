//! The runtime seam: one [`Runtime`] per engine says which models and workloads it admits, its candidate space
//! (ladders of points plus the monotone size knob the planner bisects), its memory model per device by
//! component, its topology for the speed model, its settings, its launch artifacts and its suggestions when
//! nothing fits. The generic planner (`plan`) searches, fits, scores and explains over any of them.
//!
//! Trade-off: a runtime exposes its candidate space as *ladders*, each ordered from the most to the least put on
//! accelerators, with accelerator memory monotone along it; the planner bisects a ladder instead of evaluating
//! every rung, which loses the rungs below the first that fits (they are never faster) and keeps a plan's cost
//! logarithmic in the layer count.

pub(crate) mod kubernetes;
pub mod llama_cpp;
pub mod torch;
pub mod vllm;

use std::collections::BTreeMap;
use std::fmt;

use crate::emit::{Artifact, MemoryDevice, Provenance, Settings, Source, Topology};
use crate::fleet::Fleet;
use crate::perf;
pub(crate) use crate::profile::RuntimeId;
use crate::profile::{ContextPolicy, Mode, Objective, ProfileSet, WorkloadProfile};
use optimizer_model::ModelSpec;

/// Values the user pins; everything else is re-optimised around them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    /// Tokens per sequence.
    pub context_length: Option<u32>,
    /// llama.cpp's `-ngl`.
    pub gpu_layers: Option<u32>,
    /// Sequences served together.
    pub parallel: Option<u32>,
    pub objective: Option<Objective>,
    /// The engine to plan for (`--runtime`); `None`: the model's format and the workload decide.
    pub runtime: Option<RuntimeId>,
    /// vLLM's `--tensor-parallel-size`.
    pub tensor_parallel: Option<u32>,
    /// The container image of the Kubernetes manifests (`--image`); `None`: the engine's official image.
    pub image: Option<String>,
    /// `--allow-long-context`: a context per sequence past the model's trained length is planned (with the
    /// engine's flag for it) instead of refused.
    pub allow_long_context: bool,
    /// `--model-draft FILE` as given: the app loads it into [`Overrides::draft`].
    pub draft_model: Option<std::path::PathBuf>,
    /// The speculative-decoding draft model (llama-server `-md`), loaded; only llama.cpp plans one.
    pub draft: Option<DraftModel>,
    /// `--mmproj FILE`: the multimodal projector (llama-server `--mmproj`); the CLI sets the path, the app loads
    /// the file into [`Projector::spec`]; only llama.cpp plans one.
    pub mmproj: Option<Projector>,
    /// `--kv-type TYPE`: the KV cache type, pinned (llama.cpp `-ctk`/`-ctv`, vLLM `--kv-cache-dtype`), as given;
    /// each runtime checks it against what its engine accepts. `None`: the workload's preferences decide.
    pub kv_type: Option<String>,
    /// The fabric between a cluster's nodes (`--cluster FILE`'s `fabric`), for plans that span nodes; `None`:
    /// one node, or a cluster file that describes none.
    pub fabric: Option<crate::hardware::Fabric>,
    /// `--distributed-executor-backend ray`: a vLLM replica that spans nodes runs on a Ray cluster the user
    /// starts (`ray start`) instead of vLLM's own multi-node launcher (`--nnodes`); one node is unaffected.
    pub ray: bool,
}

/// A multimodal projector GGUF (`general.architecture` `clip`): its path as given and, once loaded, its
/// description.
#[derive(Debug, Clone, PartialEq)]
pub struct Projector {
    pub path: String,
    pub spec: Option<std::sync::Arc<ModelSpec>>,
}

/// A draft model for speculative decoding: its path as the launch artifacts name it and its description.
#[derive(Debug, Clone, PartialEq)]
pub struct DraftModel {
    pub path: String,
    pub spec: std::sync::Arc<ModelSpec>,
}

/// Inputs the planner cannot work with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    /// A usage error (exit 2).
    #[error(
        "workload {0:?} is a {1} workload: the serving runtimes (llama.cpp, vLLM) plan inference only; training and fine-tuning are planned by the torch runtime, the default for such workloads (leave out --runtime or give --runtime torch)"
    )]
    UnsupportedMode(String, &'static str),
    /// A usage error (exit 2): the runtime asked for does not serve this format.
    #[error("{0}")]
    UnsupportedFormat(String),
    /// The model file has a defect the planner found (exit 4, naming the file).
    #[error("{0}")]
    Model(String),
    /// The hardware description is outside what a plan covers (exit 4, naming the inventory).
    #[error("{0}")]
    Hardware(String),
    /// The rule tables in force cannot be applied (exit 4, naming the rule).
    #[error("{0}")]
    Profile(String),
    /// A pinned value or workload number the planner cannot use (exit 2).
    #[error("{0}")]
    Usage(String),
    /// llama.cpp's memory model refuses the model at a candidate: an out-of-range hyper-parameter or an
    /// overflow at any size, a defect of the model file (exit 4, naming the file).
    #[error(transparent)]
    LlamaCppMemory(#[from] optimizer_memory::llama_cpp::ParamError),
    /// vLLM's memory model cannot size the checkpoint at a candidate: an overflow, a missing or indivisible
    /// hyper-parameter, a defect of the model file (exit 4, naming the file).
    #[error(transparent)]
    VllmMemory(#[from] optimizer_memory::vllm::VllmMemoryError),
}

/// A serving runtime's refusal of training and fine-tuning workloads.
pub(crate) fn serving_only(w: &WorkloadProfile) -> Result<(), PlanError> {
    match w.mode {
        Mode::Training => Err(PlanError::UnsupportedMode(w.id.clone(), "training")),
        Mode::FineTune => Err(PlanError::UnsupportedMode(w.id.clone(), "fine-tune")),
        Mode::Inference | Mode::Embedding => Ok(()),
    }
}

/// Sequences served together: `--parallel`, else the workload's concurrency. `zero` is the runtime's refusal of
/// `--parallel 0` (which server flag would refuse it).
pub(crate) fn sequences(w: &WorkloadProfile, ov: &Overrides, zero: &str) -> Result<u32, PlanError> {
    match ov.parallel {
        Some(0) => Err(PlanError::Usage(format!(
            "--parallel 0: at least one sequence ({zero})"
        ))),
        Some(p) => Ok(p),
        None => u32::try_from(w.concurrency)
            .ok()
            .filter(|&c| c >= 1)
            .ok_or_else(|| {
                PlanError::Usage(format!(
                    "workload {}: concurrency {} is outside 1..={}",
                    w.id,
                    w.concurrency,
                    u32::MAX
                ))
            }),
    }
}

/// The size knob of a serving runtime, the tokens per sequence: pinned by `-c`, else the workload's context
/// policy capped by the model's trained context, in steps of `step` when the largest that fits is searched.
/// With `--allow-long-context` the preset's own context (a fixed size, a largest-fit floor) is not capped, so a
/// long-context preset on a short-context model is planned at its length with the engine's flag for it.
pub(crate) fn context_size(ov: &Overrides, w: &WorkloadProfile, trained: u32, step: u32) -> Size {
    let cap = |tokens: u64| {
        let cap = if ov.allow_long_context {
            u64::from(u32::MAX)
        } else {
            u64::from(trained)
        };
        tokens.min(cap) as u32
    };
    match (ov.context_length, &w.context) {
        (Some(c), _) => Size::Fixed(c),
        (None, ContextPolicy::Fixed { tokens }) => Size::Fixed(cap(*tokens)),
        (None, ContextPolicy::ModelMax) => Size::Fixed(trained),
        (None, ContextPolicy::LargestFit { floor }) => {
            let floor = cap(*floor);
            Size::LargestFit {
                floor,
                max: trained.max(floor),
                step,
            }
        }
    }
}

/// Where the tokens per sequence came from, for the provenance of [`context_size`]'s value; `memory_model`
/// names the model that found the largest fit.
pub(crate) fn context_provenance(
    ov: &Overrides,
    w: &WorkloadProfile,
    trained: u32,
    memory_model: &str,
) -> (Source, String) {
    match (ov.context_length, &w.context) {
        (Some(c), _) => (Source::User, format!("-c {c} tokens per sequence")),
        (None, ContextPolicy::Fixed { tokens }) => (
            Source::Profile,
            format!(
                "workload {}: fixed {tokens} tokens per sequence (model trains {trained})",
                w.id
            ),
        ),
        (None, ContextPolicy::ModelMax) => (
            Source::Profile,
            format!(
                "workload {}: the model's trained context per sequence",
                w.id
            ),
        ),
        (None, ContextPolicy::LargestFit { floor }) => (
            Source::Computed,
            format!(
                "workload {}: the largest context per sequence that fits (floor {floor}), by the {memory_model} memory model",
                w.id
            ),
        ),
    }
}

/// The fleet's CUDA GPUs, most free memory first (ties by ordinal), with a warning for each other GPU left out;
/// `what` names the plans (`vLLM plans`) in the warning and `none` is the refusal when there is no CUDA GPU.
pub(crate) fn cuda_gpus<'a>(
    fleet: &'a Fleet,
    what: &str,
    none: &str,
) -> Result<(Vec<&'a crate::fleet::FleetGpu>, Vec<String>), PlanError> {
    use crate::fleet::DeviceKind;
    let warnings = fleet
        .gpus
        .iter()
        .filter(|g| g.id.kind != DeviceKind::Cuda)
        .map(|g| {
            format!(
                "{} ({}): not used: {what} are modelled for NVIDIA GPUs (CUDA) only",
                g.id, g.name
            )
        })
        .collect();
    let mut gpus: Vec<&crate::fleet::FleetGpu> = fleet
        .gpus
        .iter()
        .filter(|g| g.id.kind == DeviceKind::Cuda)
        .collect();
    if gpus.is_empty() {
        return Err(PlanError::Usage(none.to_string()));
    }
    gpus.sort_by(|a, b| {
        b.capacity_bytes
            .cmp(&a.capacity_bytes)
            .then(a.id.ordinal.cmp(&b.id.ordinal))
    });
    Ok((gpus, warnings))
}

/// What a runtime plans from.
pub struct Request<'a> {
    pub model: &'a ModelSpec,
    /// The model path as the launch artifacts name it.
    pub model_path: &'a str,
    pub fleet: &'a Fleet,
    pub profiles: &'a ProfileSet,
    pub workload: &'a WorkloadProfile,
    pub objective: Objective,
    pub overrides: &'a Overrides,
}

/// The monotone size knob: memory grows with it, so the largest value that fits is found by bisection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    Fixed(u32),
    /// The largest multiple of `step` in `floor..=max` that fits (`floor` itself when it is not a multiple).
    LargestFit {
        floor: u32,
        max: u32,
        step: u32,
    },
}

/// One candidate's memory and speed.
#[derive(Debug, Clone, PartialEq)]
pub struct Eval {
    /// Per device, in the order of the runtime's devices (host first).
    pub memory: Vec<MemoryDevice>,
    pub total_bytes: u64,
    /// Bytes over capacity − reserve on the worst device (0 when it fits).
    pub overflow: u64,
    /// The same over accelerators only: monotone along a ladder.
    pub ladder_overflow: u64,
    pub prediction: perf::Prediction,
    /// Sequences at which decode turns compute-bound on the slowest-to-saturate device.
    pub knee: f64,
    /// What the memory model noted about this configuration (for the document's warnings).
    pub notes: Vec<String>,
}

impl Eval {
    pub fn fits(&self) -> bool {
        self.overflow == 0
    }
}

/// A point fitted and scored.
#[derive(Debug, Clone)]
pub struct Candidate<P> {
    pub point: P,
    /// The size knob's value (tokens per sequence for serving).
    pub size: u32,
    pub eval: Eval,
    pub score: f64,
}

impl<P> Candidate<P> {
    pub fn fits(&self) -> bool {
        self.eval.fits()
    }
}

/// The runtime's share of the document for a chosen candidate.
#[derive(Debug, Clone)]
pub struct Described {
    pub settings: Settings,
    pub topology: Topology,
    /// Devices the candidate uses (identities), host first.
    pub devices: Vec<String>,
    pub launch: Vec<Artifact>,
    pub provenance: BTreeMap<String, Provenance>,
    pub warnings: Vec<String>,
    /// Training runtimes: the step's figures (the document's `performance.training`).
    pub training: Option<crate::emit::TrainingPerformance>,
}

/// One engine.
pub trait Runtime {
    /// One point of the candidate space apart from the size knob.
    type Point: Clone + fmt::Debug + PartialEq;

    fn id(&self) -> RuntimeId;
    /// The engine build the memory model is proven against.
    fn engine(&self) -> (&'static str, &'static str);
    /// The candidate space: ladders, each ordered from the most to the least on accelerators.
    fn ladders(&self) -> Vec<Vec<Self::Point>>;
    /// The size knob every point is fitted on.
    fn size(&self) -> Size;
    /// Memory and speed of a point at a size. `Err`: a defect of the model the memory model found (the plan
    /// stops; it is no candidate that failed to fit).
    fn evaluate(&self, p: &Self::Point, size: u32) -> Result<Eval, PlanError>;
    /// Another ladder worth climbing after `ladder` found `p` (the roofline knee of a throughput workload: the
    /// same rungs at fewer sequences).
    fn follow_up(
        &self,
        ladder: &[Self::Point],
        p: &Self::Point,
        e: &Eval,
    ) -> Option<Vec<Self::Point>>;
    /// The point's value on the axis the workload states a preference for (the KV cache type), lower-case.
    fn variant(&self, p: &Self::Point) -> String;
    /// Whether a throughput the store measured was taken in this point's configuration (beyond device,
    /// runtime, phase and sequences, which the planner checks): it then replaces the prediction.
    fn measured_here(&self, p: &Self::Point, t: &crate::evidence::ThroughputPoint) -> bool;
    /// Sequences served together at this point.
    fn sequences(&self, p: &Self::Point) -> u32;
    /// The point serving `n` sequences instead, where the search chooses the count (a throughput workload
    /// without a pinned `--parallel`): a ladder's own count is then the ceiling, and each rung serves the most
    /// sequences that fit under it. `None` (the default): the count is the point's, fixed.
    fn with_sequences(&self, _p: &Self::Point, _n: u32) -> Option<Self::Point> {
        None
    }
    /// Whether a rung is never faster than the rungs before it at the same sequences (llama.cpp's ladders move
    /// layers to slower devices): a search over sequences then stops a ladder at the first rung that serves its
    /// ceiling, is past its roofline knee, or cannot reach the best score even at the ceiling. `false` (vLLM's
    /// tensor-parallel sizes, where a larger group serves more sequences per replica): every rung up to the first
    /// that serves the ceiling is fitted.
    fn rungs_slow_down(&self) -> bool {
        true
    }
    /// The variant the workload prefers.
    fn preferred_variant(&self) -> String;
    /// The document key the variant decision's provenance is filed under.
    fn variant_key(&self) -> &'static str {
        "settings.cache_type_k"
    }
    /// What the variant axis is, for messages (`KV cache type`).
    fn variant_noun(&self) -> &'static str {
        "KV cache type"
    }
    /// How the workload's wish for a variant is worded: it "prefers" a KV cache type (a preference the
    /// kv-cache rules may trade for speed); a runtime whose variant is never traded says "asks for".
    fn variant_wish(&self) -> &'static str {
        "prefers"
    }
    /// Why a candidate that scores `gain_pct` % better with variant `other` lost to the workload's `preferred`
    /// (an alternative's explanation).
    fn variant_not_traded(&self, other: &str, preferred: &str, gain_pct: f64) -> String {
        format!(
            "scores {gain_pct:.1} % better with a {other} KV cache, but the workload prefers {preferred} and the kv-cache rules do not trade KV precision for this gain",
        )
    }
    /// The decision's reason when the preferred variant is kept and no rule sets a threshold for `other`.
    fn variant_kept(&self, preferred: &str, other: &str, gain_pct: f64) -> String {
        format!(
            "the workload's preferred {preferred} fits; {other} would score {gain_pct:.1} % better, but no kv-cache rule lets {other} trade KV precision for speed",
        )
    }
    /// What a threshold rule (`min_gain`) trades, for the decision's reason.
    fn variant_trade(&self) -> &'static str {
        "giving up KV precision"
    }
    /// How much better (relative score) another variant must be before the preferred one is given up, and the
    /// rule that says so; `None`: the variant is taken for memory only.
    fn min_gain(&self, variant: &str) -> Option<(f64, String)>;
    /// Alternatives are listed one per group (strategy and device count), so the list shows real choices.
    fn group(&self, p: &Self::Point) -> (u8, usize);
    /// Settings and devices, for alternatives.
    fn summary(&self, c: &Candidate<Self::Point>) -> (Settings, Vec<String>);
    /// The document's runtime part for the chosen candidate.
    fn describe(&self, c: &Candidate<Self::Point>) -> Described;
    /// The smallest changes that would make the nearest candidate fit.
    fn suggestions(
        &self,
        near: &Candidate<Self::Point>,
        all: &[Candidate<Self::Point>],
    ) -> Vec<String>;
    /// A one-line description of a candidate for messages (`gpu -ngl 33 on cuda:0`).
    fn label(&self, c: &Candidate<Self::Point>) -> String;
}
