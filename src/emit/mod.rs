//! The deployment document: a versioned, deterministic contract (same inputs, byte-identical output) that
//! orchestration tools consume, with its JSON Schema generated from these types (`schemas/deployment.schema.json`)
//! and the launch sections for llama-server, Ollama and Kubernetes. Pure: renders values, touches nothing.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::perf::Basis;

/// The document's version; a breaking change to the keys bumps it.
pub const API_VERSION: &str = "optimizer/v1";

/// Whether a configuration fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    Fits,
    /// Nothing fits: the document shows the nearest candidate and `suggestions` says what would make one fit.
    NoFit,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ModelRef {
    pub path: String,
    pub format: String,
    pub architecture: String,
    pub parameter_count: u64,
    pub tensor_bytes: u64,
    pub fingerprint: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CpuRef {
    pub model: String,
    pub physical_cores: u32,
    pub logical_cpus: u32,
    pub features: Vec<String>,
    /// Generic CPU class whose bandwidth and FLOP rate the throughput model used.
    pub profile: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GpuRef {
    /// The one identity of this GPU everywhere in the document (placement, memory, launch): `cuda:N`, `rocm:N`
    /// or `metal:N`, N being the inventory index.
    pub device: String,
    pub index: u32,
    pub name: String,
    /// Matched hardware profile id, or `derived-…` for a heuristic profile.
    pub profile: String,
    /// How the profile was found: `profile` (matched), `derived` (from the probe's figures and the
    /// architecture rules) or `heuristic` (a conservative guess; calibrate or add a profile).
    pub basis: String,
    pub memory_total_bytes: u64,
    pub memory_free_bytes: u64,
    /// Whether the chosen plan puts anything on it. A GPU the planner cannot drive (another backend, no memory
    /// figure) is listed unused with a warning saying why; none is dropped silently.
    pub used: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HardwareRef {
    /// `probe`, `inventory` or `profile`.
    pub source: String,
    pub cpu: CpuRef,
    pub memory_total_bytes: u64,
    pub memory_available_bytes: u64,
    pub gpus: Vec<GpuRef>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WorkloadRef {
    pub preset: String,
    pub objective: crate::profile::Objective,
    pub concurrency: u64,
    pub prompt_tokens: u64,
    pub generation_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_to_first_token_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_per_output_token_ms: Option<f64>,
}

/// How the model is spread over the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// Every layer on one GPU.
    Gpu,
    /// Layers split across GPUs.
    MultiGpu,
    /// Some layers on GPUs, the rest on the CPU.
    Hybrid,
    /// Every layer on GPUs but the routed experts, which stay on the CPU.
    MoeCpu,
    /// CPU only.
    Cpu,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PlacementDevice {
    pub device: String,
    /// First and last block on the device; absent when it holds none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layers: Option<[u32; 2]>,
    pub output_layer: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Placement {
    pub strategy: Strategy,
    /// llama.cpp's `-ngl`: layers on GPUs, the output layer counted.
    pub gpu_layers: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tensor_split: Option<Vec<u64>>,
    pub devices: Vec<PlacementDevice>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Settings {
    /// llama.cpp's `-c`: KV cells over all sequences, `context_per_sequence × parallel`. The launch pins `-np`,
    /// so the server splits them evenly among its slots (its unified KV cache is on only when `-np` is auto).
    pub context_length: u32,
    /// Tokens one sequence (one server slot, one conversation) can hold: the workload's context.
    pub context_per_sequence: u32,
    pub batch_size: u32,
    pub ubatch_size: u32,
    pub parallel: u32,
    pub threads: u32,
    pub flash_attention: bool,
    pub cache_type_k: String,
    pub cache_type_v: String,
    pub mmap: bool,
    pub n_cpu_moe: u32,
    /// Compute precision the rules choose for the devices (`bf16`, `fp16`, `fp32`).
    pub precision: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryDevice {
    pub device: String,
    pub weights_bytes: u64,
    pub weights_repack_bytes: u64,
    pub kv_cache_bytes: u64,
    pub compute_bytes: u64,
    pub output_bytes: u64,
    pub overhead_bytes: u64,
    pub total_bytes: u64,
    /// Free memory the plan may use (GPU free memory; host available memory).
    pub capacity_bytes: u64,
    /// Left untouched by the rules (fit margin, OS reserve).
    pub reserve_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryPlan {
    pub devices: Vec<MemoryDevice>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Performance {
    pub prefill_tokens_per_s: f64,
    pub decode_tokens_per_s: f64,
    pub time_to_first_token_ms: f64,
    pub time_per_output_token_ms: f64,
    pub basis: Basis,
    /// The objective's score of this plan (lower is better; comparable only within one document).
    pub score: f64,
    /// Each of the workload's SLA targets against the prediction.
    pub sla: Vec<SlaCheck>,
}

/// Whether a predicted figure meets its SLA target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SlaStatus {
    Met,
    Missed,
}

/// One SLA target of the workload, checked against the prediction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SlaCheck {
    /// `time_to_first_token` or `time_per_output_token`.
    pub target: String,
    pub target_ms: f64,
    pub predicted_ms: f64,
    /// `target_ms - predicted_ms`: negative when missed.
    pub margin_ms: f64,
    pub status: SlaStatus,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Argv {
    pub argv: Vec<String>,
    /// Environment the command needs (GPU pinning); empty when none.
    pub env: BTreeMap<String, String>,
}

/// Ollama Modelfile `PARAMETER`s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Ollama {
    /// Context per sequence (Ollama multiplies it by its parallel setting).
    pub num_ctx: u32,
    pub num_gpu: u32,
    pub num_thread: u32,
    pub num_batch: u32,
    /// Server environment: `OLLAMA_NUM_PARALLEL` (Ollama's parallel requests are a server setting, not a
    /// Modelfile parameter).
    pub env: BTreeMap<String, String>,
}

/// Kubernetes quantities (`memory: 6442450944`, `cpu: "8"`, `nvidia.com/gpu: "1"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Resources {
    pub requests: BTreeMap<String, String>,
    pub limits: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Kubernetes {
    pub resources: Resources,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Launch {
    pub llama_server: Argv,
    pub ollama: Ollama,
    pub kubernetes: Kubernetes,
}

/// Where a decided value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Measured,
    Profile,
    Rule,
    Heuristic,
    Probe,
    User,
    /// Computed by the memory or throughput model from the inputs.
    Computed,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Provenance {
    pub source: Source,
    pub detail: String,
}

/// A candidate that lost, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Alternative {
    pub strategy: Strategy,
    pub gpu_layers: u32,
    pub context_length: u32,
    pub context_per_sequence: u32,
    pub parallel: u32,
    pub ubatch_size: u32,
    pub cache_type_k: String,
    pub cache_type_v: String,
    pub fits: bool,
    pub time_to_first_token_ms: f64,
    pub time_per_output_token_ms: f64,
    pub decode_tokens_per_s: f64,
    pub total_bytes: u64,
    /// The objective's score (lower is better), comparable with `performance.score`.
    pub score: f64,
    pub why: String,
}

/// The resolved, explained configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Deployment {
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    pub kind: String,
    pub status: Status,
    pub model: ModelRef,
    pub hardware: HardwareRef,
    pub workload: WorkloadRef,
    pub runtime: String,
    pub placement: Placement,
    pub settings: Settings,
    pub memory: MemoryPlan,
    pub performance: Performance,
    pub launch: Launch,
    pub provenance: BTreeMap<String, Provenance>,
    pub alternatives: Vec<Alternative>,
    /// What would make a configuration fit (only when `status` is `no-fit`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suggestions: Vec<String>,
    pub warnings: Vec<String>,
}

/// Rounds a float for the document so output is stable and readable (3 significant decimals).
pub fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// How a GPU device of the document maps to llama.cpp: the document's identity prefix, llama.cpp's device
/// name prefix (ggml `GGML_CUDA_NAME` "CUDA"/"ROCm", `GGML_METAL_NAME` "MTL") and the environment variable that
/// restricts the process to the planned devices.
const BACKENDS: &[(&str, &str, Option<&str>)] = &[
    ("cuda", "CUDA", Some("CUDA_VISIBLE_DEVICES")),
    ("rocm", "ROCm", Some("HIP_VISIBLE_DEVICES")),
    ("metal", "MTL", None),
];

/// The llama-server command line for a plan, with the environment that pins the planned GPUs.
///
/// Devices are pinned twice over: the environment hides every GPU the plan does not use (NVML numbers GPUs in PCI
/// bus order, so `CUDA_DEVICE_ORDER=PCI_BUS_ID` makes CUDA agree with the inventory index), and `-dev` names the
/// visible ones in the plan's layer order, so `-ts` lines up with them. A CPU-only plan says `-dev none`, or a
/// GPU build of llama-server would still put its compute buffers and large prompt batches on a GPU.
/// `-c` is the total over slots and `-np` is explicit: the pinned server unifies the KV cache only when `-np` is
/// auto (common/arg.cpp `--kv-unified`), so every slot gets `context_per_sequence` cells.
pub fn llama_server_argv(model_path: &str, s: &Settings, p: &Placement) -> Argv {
    let mut a: Vec<String> = vec![
        "llama-server".into(),
        "-m".into(),
        model_path.into(),
        "-c".into(),
        s.context_length.to_string(),
        "-b".into(),
        s.batch_size.to_string(),
        "-ub".into(),
        s.ubatch_size.to_string(),
        "-np".into(),
        s.parallel.to_string(),
        "-ngl".into(),
        p.gpu_layers.to_string(),
        "-fa".into(),
        if s.flash_attention { "on" } else { "off" }.into(),
        "-ctk".into(),
        s.cache_type_k.clone(),
        "-ctv".into(),
        s.cache_type_v.clone(),
        "-t".into(),
        s.threads.to_string(),
    ];
    let mut env = BTreeMap::new();
    let gpus: Vec<(&str, &str)> = p
        .devices
        .iter()
        .filter_map(|d| d.device.split_once(':'))
        .filter(|(kind, _)| *kind != "cpu")
        .collect();
    let backend = gpus
        .first()
        .and_then(|(kind, _)| BACKENDS.iter().find(|b| b.0 == *kind));
    match backend {
        None => {
            a.push("-dev".into());
            a.push("none".into());
        }
        Some(&(_, llama_name, visible)) => {
            if let Some(var) = visible {
                if var == "CUDA_VISIBLE_DEVICES" {
                    env.insert("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into());
                }
                let ids: Vec<&str> = gpus.iter().map(|g| g.1).collect();
                env.insert(var.to_string(), ids.join(","));
            }
            a.push("-dev".into());
            a.push(
                (0..gpus.len())
                    .map(|i| format!("{llama_name}{i}"))
                    .collect::<Vec<_>>()
                    .join(","),
            );
            if gpus.len() > 1 {
                a.push("-sm".into());
                a.push("layer".into());
            }
        }
    }
    if let Some(ts) = &p.tensor_split {
        a.push("-ts".into());
        a.push(ts.iter().map(u64::to_string).collect::<Vec<_>>().join(","));
    }
    if s.n_cpu_moe > 0 {
        a.push("--n-cpu-moe".into());
        a.push(s.n_cpu_moe.to_string());
    }
    if !s.mmap {
        // The pinned engine has no `--no-mmap`; `-lm none` reads the weights into buffers instead.
        a.push("-lm".into());
        a.push("none".into());
    }
    Argv { argv: a, env }
}
