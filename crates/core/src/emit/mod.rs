//! The deployment document: a versioned, deterministic contract (same inputs, byte-identical output) that
//! orchestration tools consume, with its JSON Schema generated from these types (`schemas/deployment.schema.json`).
//! Version 2 is runtime-neutral: `runtime` names the engine and its pinned version, `settings` and every
//! alternative's settings are tagged by runtime, memory per device is a breakdown by component, `topology` says
//! how devices and nodes cooperate, and `launch` is a list of artifacts (argv, env, files) the runtime wrote.
//! Pure: types and rendering helpers, touches nothing.

pub(crate) mod lws;

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::evidence::Basis;

/// The document's version; a breaking change to the keys bumps it.
pub const API_VERSION: &str = "optimizer/v2";

/// Whether the plan does what the workload asks, one value an orchestrator can act on without reading the
/// rest (the `resolve` exit code says the same: docs/exit-codes.md). When several hold, `no-fit` wins over
/// `workload-unmet`, which wins over `sla-missed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// The plan fits and meets every SLA target of the workload (exit 0).
    Fits,
    /// Nothing fits: the document shows the nearest candidate and `suggestions` says what would make one fit
    /// (exit 3).
    NoFit,
    /// The plan fits and runs, but the workload's request (prompt and generated tokens) is longer than the
    /// context the model allows: `workload.unmet` says by how much, and every figure is for the longest prompt
    /// that fits (exit 6).
    WorkloadUnmet,
    /// The plan fits and runs, but no candidate meets the workload's SLA: `performance.sla` says which target
    /// and by how much (exit 5).
    SlaMissed,
}

impl Status {
    /// The plan can be run as written (it fits), whatever it misses.
    pub fn runnable(self) -> bool {
        self != Status::NoFit
    }
}

/// A workload request longer than the context the model allows: what was asked and what the plan serves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WorkloadUnmet {
    /// The preset's prompt and generated tokens per request.
    pub requested_prompt_tokens: u64,
    pub requested_generation_tokens: u64,
    /// Tokens one sequence may hold: the model's trained context (or `-c`).
    pub context_tokens: u64,
    /// `requested_prompt_tokens + requested_generation_tokens - context_tokens`.
    pub over_by_tokens: u64,
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
    /// `probe`, `inventory`, `cluster` or `profile`.
    pub source: String,
    /// Nodes the description holds (a cluster's identical nodes; 1 for one machine). `cpu`, memory and `gpus`
    /// describe one node.
    pub nodes: u32,
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
    /// Present when the preset's request does not fit the context (`status: workload-unmet`); `prompt_tokens`
    /// and `generation_tokens` above are then the shortened request every figure is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unmet: Option<WorkloadUnmet>,
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

/// One device of the pipeline, in the order a token passes through them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Stage {
    /// The device identity (`cpu`, `cuda:0`).
    pub device: String,
    /// First and last block on the device; absent when it holds none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layers: Option<[u32; 2]>,
    pub output_layer: bool,
}

/// How the devices and nodes of the plan cooperate: every replica (`data_parallel`, one per node for engines
/// that run a process per node) runs the same stages; a stage may be a tensor-parallel group of
/// `tensor_parallel` devices; `pipeline_parallel` counts the devices holding layers in sequence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Topology {
    pub nodes: u32,
    pub data_parallel: u32,
    pub tensor_parallel: u32,
    pub pipeline_parallel: u32,
    pub stages: Vec<Stage>,
}

/// llama.cpp's settings (llama-server flags and what they mean).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LlamaCppSettings {
    pub strategy: Strategy,
    /// `-ngl`: layers on GPUs, the output layer counted.
    pub gpu_layers: u32,
    /// `-ts`: free MiB of each planned GPU, in `-dev` order (layers are split in proportion).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tensor_split: Option<Vec<u64>>,
    /// `-c`: KV cells over all sequences, `context_per_sequence × parallel`. The launch pins `-np`, so the server
    /// splits them evenly among its slots (its unified KV cache is on only when `-np` is auto).
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

/// vLLM's settings (`vllm serve` flags and what they mean). Every byte figure is per GPU (per tensor-parallel
/// rank); a replica is one `vllm serve` process over `tensor_parallel_size` GPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VllmSettings {
    /// `--tensor-parallel-size`: GPUs one replica shards every layer over.
    pub tensor_parallel_size: u32,
    /// Replicas on one node (`vllm serve` processes, each on its own GPUs); the topology's `data_parallel`
    /// counts them over all nodes.
    pub replicas_per_node: u32,
    /// `--dtype`: the activation and unquantized-weight type (`bfloat16`, `float16`).
    pub dtype: String,
    /// `--quantization`: the method vLLM runs the checkpoint's packed weights with; absent when unquantized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantization: Option<String>,
    /// `--kv-cache-dtype`: `auto` (the model dtype) or `fp8` (e4m3).
    pub kv_cache_dtype: String,
    /// `--block-size`: tokens per KV cache block.
    pub block_size: u32,
    /// `--max-model-len`: tokens one sequence may hold (prompt and generation).
    pub max_model_len: u32,
    /// `--max-num-seqs`: sequences scheduled together.
    pub max_num_seqs: u32,
    /// `--max-num-batched-tokens`: tokens one scheduler step may process (chunked prefill's chunk).
    pub max_num_batched_tokens: u32,
    /// `--gpu-memory-utilization`: the share of each GPU's total memory vLLM may take, as vLLM checks it
    /// against the free memory at start-up.
    pub gpu_memory_utilization: f64,
    /// `--kv-cache-memory-bytes`: the KV cache per GPU, fixed by the plan so that vLLM's own profiling cannot
    /// size it differently.
    pub kv_cache_memory_bytes: u64,
    /// KV cache blocks per GPU that `kv_cache_memory_bytes` holds, and the tokens they hold (vLLM's "GPU KV
    /// cache size: N tokens"). Every rank of a tensor-parallel group holds the same blocks, each with its part of
    /// every token's KV (its KV heads, or a copy where heads are replicated or the cache is MLA's latent), so
    /// these are also the tokens one replica holds, not a figure to multiply by its GPUs.
    pub kv_cache_blocks: u64,
    pub kv_cache_tokens: u64,
    /// `kv_cache_tokens / max_model_len`: vLLM's "Maximum concurrency for N tokens per request".
    pub max_concurrency: f64,
    /// `--enforce-eager`: no CUDA graphs (less memory, slower decode).
    pub enforce_eager: bool,
    /// The attention backend vLLM selects for this GPU and model (not pinned on the command line).
    pub attention_backend: String,
    /// `--pipeline-parallel-size`: stages in sequence, one per node, when a replica spans nodes; absent on one
    /// node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline_parallel_size: Option<u32>,
    /// `--nnodes`: the nodes one replica spans (vLLM's multi-node launcher); absent on one node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nnodes: Option<u32>,
    /// `--data-parallel-size` of an expert-parallel replica spanning nodes (engines of `tensor_parallel_size`
    /// GPUs each); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_parallel_size: Option<u32>,
    /// `--data-parallel-size-local`: those engines on each node; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_parallel_size_local: Option<u32>,
    /// `--enable-expert-parallel`: routed experts spread whole over `tensor_parallel_size x data_parallel_size`
    /// GPUs; absent when not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_expert_parallel: Option<bool>,
    /// `--distributed-executor-backend ray` (a tensor/pipeline-parallel replica over a Ray cluster) or
    /// `--data-parallel-backend ray` (an expert-parallel one): `ray` where the plan spans nodes on Ray; absent
    /// with vLLM's own multi-node launcher.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ray_backend: Option<RayBackend>,
}

/// Which vLLM option hands a multi-node replica to Ray (vllm/config/parallel.py: `nnodes > 1` only with the
/// `mp` executor; vllm/engine/arg_utils.py: `--nnodes` requires `--data-parallel-backend mp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RayBackend {
    /// `--distributed-executor-backend ray`: the workers of one engine placed by Ray.
    DistributedExecutor,
    /// `--data-parallel-backend ray`: the data-parallel engines placed by Ray (their workers follow).
    DataParallel,
}

/// PyTorch training settings (Hugging Face `Trainer`, PEFT, bitsandbytes, DeepSpeed) and what they mean. Byte
/// figures are per GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TorchSettings {
    /// `full`, `lora`, `lora-int8` (LoRA over an 8-bit base) or `qlora`.
    pub method: String,
    /// Compute precision: `bf16` (TrainingArguments `bf16`), `fp16` (`fp16`, with dynamic loss scaling) or
    /// `fp32`.
    pub precision: String,
    /// `tf32`: TF32 tensor cores for FP32 matmuls.
    pub tf32: bool,
    /// `attn_implementation` the model is loaded with.
    pub attn_implementation: String,
    /// The kernel that implementation is predicted to dispatch to on these GPUs.
    pub attention_kernel: String,
    /// `per_device_train_batch_size`: sequences per GPU per forward/backward pass.
    pub micro_batch: u32,
    /// `gradient_accumulation_steps`.
    pub gradient_accumulation_steps: u32,
    /// Sequences per optimizer step over all GPUs: micro-batch x accumulation x data-parallel processes.
    pub global_batch: u32,
    /// Tokens per training sequence.
    pub sequence_length: u32,
    /// `gradient_checkpointing` (one checkpoint per decoder layer, non-reentrant).
    pub gradient_checkpointing: bool,
    /// `optim` (TrainingArguments' optimizer name).
    pub optimizer: String,
    /// Training processes (one per GPU) over all nodes.
    pub data_parallel: u32,
    /// DeepSpeed ZeRO stage; 0: no DeepSpeed (plain data parallelism).
    pub zero_stage: u32,
    /// What ZeRO offloads to the CPU: `none`, `optimizer` or `optimizer+parameters`.
    pub offload: String,
    /// `torch_compile`.
    pub torch_compile: bool,
    /// Parameters the optimizer updates.
    pub trainable_parameters: u64,
    /// LoRA rank, alpha, dropout and target modules (LoRA and QLoRA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora_rank: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora_alpha: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora_dropout: Option<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lora_target_modules: Vec<String>,
    /// Quantization of the frozen base: `nf4` with double quantization (QLoRA) or `int8` (LLM.int8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_quantization: Option<String>,
}

/// The runtime's settings, tagged by runtime.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "runtime")]
pub enum Settings {
    #[serde(rename = "llama.cpp")]
    LlamaCpp(LlamaCppSettings),
    #[serde(rename = "vllm")]
    Vllm(VllmSettings),
    #[serde(rename = "torch")]
    Torch(TorchSettings),
}

impl Settings {
    /// llama.cpp's settings, when the plan is llama.cpp's.
    pub fn llama_cpp(&self) -> Option<&LlamaCppSettings> {
        match self {
            Settings::LlamaCpp(s) => Some(s),
            Settings::Vllm(_) | Settings::Torch(_) => None,
        }
    }

    /// vLLM's settings, when the plan is vLLM's.
    pub fn vllm(&self) -> Option<&VllmSettings> {
        match self {
            Settings::Vllm(s) => Some(s),
            Settings::LlamaCpp(_) | Settings::Torch(_) => None,
        }
    }

    /// The training settings, when the plan is torch's.
    pub fn torch(&self) -> Option<&TorchSettings> {
        match self {
            Settings::Torch(s) => Some(s),
            Settings::LlamaCpp(_) | Settings::Vllm(_) => None,
        }
    }
}

fn is_zero(b: &u64) -> bool {
    *b == 0
}

/// Bytes on one device by component. Serving runtimes fill the first six; training-only components are left out
/// of the document when zero.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryComponents {
    pub weights_bytes: u64,
    /// CPU weights repacked for the host's SIMD kernels (llama.cpp's `CPU_REPACK` buffer).
    pub weights_repack_bytes: u64,
    pub kv_cache_bytes: u64,
    /// Activations and the runtime's compute buffers.
    pub compute_bytes: u64,
    pub output_bytes: u64,
    /// Context and driver overhead.
    pub overhead_bytes: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gradients_bytes: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub optimizer_state_bytes: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub adapters_bytes: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cuda_graphs_bytes: u64,
    /// llama.cpp's speculative-decoding draft model (`-md`) on this device: its weights, KV cache, output and
    /// compute buffers (a second model and context in the same process).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub draft_bytes: u64,
    /// llama.cpp's multimodal projector (`--mmproj`) on this device: its weights (the compute buffer is not
    /// charged; `runtime/llama_cpp/mmproj.rs`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub mmproj_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryDevice {
    pub device: String,
    pub components: MemoryComponents,
    /// The components added up.
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

/// A training plan's speed: one optimizer step over all GPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TrainingPerformance {
    /// Tokens trained per second over all GPUs.
    pub tokens_per_s: f64,
    /// Sequences per second over all GPUs.
    pub samples_per_s: f64,
    /// One optimizer step: every micro-batch's forward and backward, the gradient exchange and the update.
    pub step_time_ms: f64,
    /// Of which communication between GPUs (not overlapped with compute in the model) and host transfers.
    pub communication_ms: f64,
    /// FLOPs per trained token (forward, backward, recomputation).
    pub flops_per_token: f64,
    /// The model FLOPs utilization the prediction assumes (the efficiency rule's or the store's value).
    pub efficiency: f64,
}

/// Serving figures are per the workload's prompts and generated tokens; a training plan generates none, so
/// its `prefill_tokens_per_s` is the trained tokens per second and the other serving figures are 0, its own
/// figures being in `training`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Performance {
    pub prefill_tokens_per_s: f64,
    pub decode_tokens_per_s: f64,
    pub time_to_first_token_ms: f64,
    pub time_per_output_token_ms: f64,
    pub basis: Basis,
    /// Store rows the figures rest on (empty when analytic).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<i64>,
    /// The objective's score of this plan (lower is better; comparable only within one document).
    pub score: f64,
    /// Each of the workload's SLA targets against the prediction.
    pub sla: Vec<SlaCheck>,
    /// Training plans: the step's figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub training: Option<TrainingPerformance>,
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

/// Kubernetes quantities (`memory: 6442450944`, `cpu: "8"`, `nvidia.com/gpu: "1"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Resources {
    pub requests: BTreeMap<String, String>,
    pub limits: BTreeMap<String, String>,
}

/// One launch artifact: a command with its environment and the files it reads, written relative to the working
/// directory the command runs in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Artifact {
    /// `llama-server`, `ollama`, `kubernetes`.
    pub name: String,
    /// What it is for, in a sentence.
    pub description: String,
    /// The command, first element the program; empty for an artifact that is only files or resources.
    pub argv: Vec<String>,
    /// Environment the command needs (GPU pinning, server settings); empty when none.
    pub env: BTreeMap<String, String>,
    /// The same command as one POSIX shell line, the environment first (`VAR=value program args`), every word
    /// single-quoted where the shell would otherwise split or expand it; absent for an artifact with no command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Files by relative path and content (a Modelfile, Kubernetes manifests).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub files: BTreeMap<String, String>,
    /// Container resources: requests are what the process needs; limits carry what the device plugins require
    /// (GPUs), see `runtime::kubernetes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,
}

/// One word for a POSIX shell: left as it is when it holds only characters no shell treats specially (`=` is
/// not one: a first word `A=b` would be an assignment), else
/// inside single quotes, where nothing is special but the quote itself, written `'\''` (close, escaped quote,
/// reopen). Newlines, `$`, backquotes and spaces are literal between single quotes (POSIX.1-2017 XCU 2.2.2).
pub fn shell_quote(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./,:@%+".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// `VAR=value ... program args` as one shell line: the environment applies to this command only.
pub(crate) fn shell_command(env: &BTreeMap<String, String>, argv: &[String]) -> String {
    env.iter()
        .map(|(k, v)| format!("{k}={}", shell_quote(v)))
        .chain(argv.iter().map(|a| shell_quote(a)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Where a decided value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Measured,
    /// Fitted from calibration runs of this device class.
    Calibrated,
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
    pub settings: Settings,
    /// The devices it would use.
    pub devices: Vec<String>,
    pub fits: bool,
    pub time_to_first_token_ms: f64,
    pub time_per_output_token_ms: f64,
    pub decode_tokens_per_s: f64,
    pub total_bytes: u64,
    /// The objective's score (lower is better), comparable with `performance.score`.
    pub score: f64,
    pub why: String,
}

/// The engine the plan is for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RuntimeRef {
    pub id: crate::profile::RuntimeId,
    /// The engine build the memory model and the launch artifacts are proven against.
    pub engine: String,
    pub version: String,
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
    pub runtime: RuntimeRef,
    pub topology: Topology,
    pub settings: Settings,
    pub memory: MemoryPlan,
    pub performance: Performance,
    pub launch: Vec<Artifact>,
    pub provenance: BTreeMap<String, Provenance>,
    pub alternatives: Vec<Alternative>,
    /// What would make a configuration fit (only when `status` is `no-fit`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suggestions: Vec<String>,
    pub warnings: Vec<String>,
}

/// Rounds a float for the document so output is stable and readable (3 significant decimals).
pub(crate) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

impl Deployment {
    /// The launch artifact named `name`.
    pub fn artifact(&self, name: &str) -> Option<&Artifact> {
        self.launch.iter().find(|a| a.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hostile words: spaces, both quotes, `$`, backquotes, newlines, globs, a leading `-`, `~`, `=`, empty.
    const HOSTILE: [&str; 12] = [
        "plain-word_1.gguf",
        "two words",
        "it's",
        "'",
        "\"$HOME\"",
        "$(echo pwned)",
        "`id`",
        "line\nbreak",
        "*.gguf",
        "~root",
        "A=b",
        "",
    ];

    #[test]
    fn shell_quote_keeps_plain_words_and_quotes_the_rest() {
        assert_eq!(shell_quote("llama-server"), "llama-server");
        assert_eq!(shell_quote("/m/a.gguf"), "/m/a.gguf");
        assert_eq!(shell_quote("two words"), "'two words'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("A=b"), "'A=b'");
        let env = BTreeMap::from([("K".to_string(), "a b".to_string())]);
        assert_eq!(
            shell_command(&env, &["p".into(), "$x".into()]),
            "K='a b' p '$x'"
        );
    }

    /// The oracle is the system's POSIX shell: each quoted word, and the environment value, must reach the
    /// program byte for byte (the program is itself `sh -c SCRIPT`, a hostile word of its own).
    #[cfg(unix)]
    #[test]
    fn shell_quoted_words_reach_the_program_unchanged() {
        let env_value = "x 'y' $z\n";
        let argv: Vec<String> = ["sh", "-c", "printf '%s\\0' \"$OPT_TEST_ENV\" \"$@\"", "sh"]
            .iter()
            .chain(HOSTILE.iter())
            .map(|s| s.to_string())
            .collect();
        let line = shell_command(
            &BTreeMap::from([("OPT_TEST_ENV".to_string(), env_value.to_string())]),
            &argv,
        );
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&line)
            .env_remove("OPT_TEST_ENV")
            .output()
            .expect("sh runs");
        assert!(out.status.success(), "{line}");
        let text = String::from_utf8(out.stdout).unwrap();
        let parts: Vec<&str> = text.split_terminator('\0').collect();
        assert_eq!(parts[0], env_value, "{line}");
        assert_eq!(parts[1..], HOSTILE, "{line}");
    }
}
