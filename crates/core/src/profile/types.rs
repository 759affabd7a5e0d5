//! Typed profiles: hardware devices, workload presets and rule tables. These types are the source of the JSON
//! Schemas in `schemas/` (generated with schemars, checked current by a test) and every profile file is
//! validated against them; `deny_unknown_fields` everywhere, so a typo is an error, not a silently ignored key.
//!
//! Every number a profile states carries its source: `sources` maps a field path (`memory.bandwidth_gb_s`) or a
//! parent path (`tensor_tflops`, covering all its fields) to where the figure comes from. `profiles validate`
//! refuses a number without one.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Who makes the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    Nvidia,
    Amd,
    Intel,
    Apple,
    Generic,
}

/// What kind of device a profile describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// A discrete accelerator with its own memory.
    Gpu,
    /// A host CPU class (memory is system RAM).
    Cpu,
    /// A system-on-chip whose CPU and GPU share one unified memory (Apple silicon, Jetson).
    Soc,
}

/// How a probed device is recognised: PCI ids first (exact), then name patterns.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MatchRules {
    /// PCI `vendor:device` ids in lower-case hex, e.g. `10de:2684`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pci_ids: Vec<String>,
    /// Case-insensitive substrings of the device name as the driver reports it; all must occur.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub name_contains: Vec<String>,
    /// Case-insensitive substrings that must not occur (to tell `RTX 4090` from `RTX 4090 Laptop GPU`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub name_excludes: Vec<String>,
    /// Memory size the device must report (tells A100 40 GB from 80 GB when names agree), within 10 %.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
}

/// Device (or system) memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemorySpec {
    /// Capacity in bytes (GPU marketing "GB" are GiB: 24 GB = 25,769,803,776 bytes). Absent for CPU and SoC
    /// classes, whose capacity is the machine's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    /// What programs can allocate on the idle GPU: the CUDA runtime's total (`cudaMemGetInfo`, PyTorch's
    /// `total_memory` and the "total capacity" of its out-of-memory message, vLLM's total GPU memory), below
    /// `size_bytes` by what the driver, ECC and the firmware keep (79.11 to 79.21 GiB of 80 on an H100 80GB HBM3,
    /// by driver).
    /// Plans made from the profile (`--hardware`) take it as the GPU's memory; absent, they take `size_bytes`
    /// and overstate the room by that difference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usable_bytes: Option<u64>,
    /// GDDR6X, HBM3, LPDDR5, DDR5, …
    #[serde(rename = "type")]
    pub kind: String,
    /// Peak bandwidth in GB/s (10^9 bytes per second), as the vendor quotes it.
    pub bandwidth_gb_s: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bus_width_bits: Option<u32>,
    /// CPU and GPU share this memory (count it once).
    #[serde(default)]
    pub unified: bool,
}

impl MemorySpec {
    /// The memory a plan from this profile may use: [`MemorySpec::usable_bytes`] where the profile records it,
    /// else the nominal size.
    pub fn plannable_bytes(&self) -> Option<u64> {
        self.usable_bytes.or(self.size_bytes)
    }
}

/// Dense tensor-core throughput in TFLOPS (TOPS for int8), without 2:4 sparsity, by input type and
/// accumulation. GeForce parts run FP16/BF16 with FP32 accumulation (what cuBLAS and PyTorch use) at half the
/// FP16-accumulate rate; data-center parts at full rate.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TensorTflops {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp16_fp32acc: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp16_fp16acc: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bf16_fp32acc: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tf32: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp8_fp32acc: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub int8: Option<f64>,
}

/// Non-tensor (vector/shader) throughput in TFLOPS.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VectorTflops {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp32: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp16: Option<f64>,
}

/// Links to the host and to peer devices.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Interconnect {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_gen: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_lanes: Option<u32>,
    /// Total NVLink bandwidth per device in GB/s (both directions), when the part has NVLink.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink_gb_s: Option<f64>,
}

/// A CPU class: what a planner needs to know about a host it cannot probe.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CpuSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub physical_cores: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logical_cpus: Option<u32>,
    /// SIMD features as the probe names them (`avx2`, `avx512f`, `neon`, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<String>,
    /// Peak FP32 GFLOPS per core per GHz (FMA width × 2 × units), for compute-bound estimates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp32_flops_per_cycle_per_core: Option<f64>,
    /// DRAM bandwidth in GB/s one core pulls on its own: a CPU's decode is bound by threads × this (up to the
    /// socket's peak), not by the socket's peak alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_per_core_gb_s: Option<f64>,
}

/// One device model, or one class of host CPU or SoC.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HardwareProfile {
    /// Lower-kebab-case of the product name: `rtx-4090`, `a100-80gb-sxm`, `h100-sxm`.
    pub id: String,
    pub name: String,
    pub vendor: Vendor,
    pub kind: DeviceKind,
    /// Micro-architecture id, matching an entry of the `gpu-architectures` rule table (`ada`, `ampere-ga100`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    #[serde(default, rename = "match")]
    pub matching: MatchRules,
    pub memory: MemorySpec,
    /// CUDA compute capability, `"8.9"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_capability: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sms: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boost_clock_mhz: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor_tflops: Option<TensorTflops>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vector_tflops: Option<VectorTflops>,
    /// Capabilities: `bf16`, `tf32`, `fp8`, `int8-tensor`, `flash-attention-2`, `flash-attention-3`, `tensor-cores`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tdp_w: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interconnect: Option<Interconnect>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuSpec>,
    /// How much of a unified memory the GPU may hold at once, by the machine's memory size (Apple silicon:
    /// macOS Metal's `recommendedMaxWorkingSetSize`). The first tier whose `below_memory_bytes` exceeds the
    /// machine's memory applies; a tier without it applies to any size.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_working_set: Vec<WorkingSetTier>,
    /// Where each number comes from, by field path or parent path.
    pub sources: BTreeMap<String, String>,
}

/// One tier of a unified-memory GPU working-set rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkingSetTier {
    /// Applies to machines with less memory than this (bytes); absent: any size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub below_memory_bytes: Option<u64>,
    /// Share of the machine's memory the GPU may hold, in (0, 1].
    pub fraction: f64,
}

/// What a workload optimises for.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Objective {
    Latency,
    Throughput,
    Balanced,
}

/// What the model is run for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    Inference,
    Embedding,
    FineTune,
    Training,
}

/// How the context length is chosen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "policy", rename_all = "kebab-case", deny_unknown_fields)]
pub enum ContextPolicy {
    /// Exactly this many tokens (capped at the model's maximum).
    Fixed { tokens: u64 },
    /// The model's trained maximum.
    ModelMax,
    /// The largest that fits in memory, but no less than `floor` tokens (else the candidate is rejected).
    LargestFit { floor: u64 },
}

/// Service-level targets; absent means no bound.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Sla {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_to_first_token_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_per_output_token_ms: Option<f64>,
}

/// Precision and KV-cache preferences, in order of preference.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PrecisionPrefs {
    /// KV cache types to try, best first (`f16`, `q8_0`, `q4_0`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kv_cache: Vec<String>,
    /// Compute precision override (`auto` lets the precision rules decide).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute: Option<String>,
}

/// Optimizer algorithm for training presets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum TrainOptimizer {
    Adamw,
    Adamw8bit,
    Sgd,
    Adafactor,
}

/// Training settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TrainingSpec {
    pub optimizer: TrainOptimizer,
    pub micro_batch: u64,
    pub sequence_length: u64,
    pub gradient_checkpointing: bool,
    /// LoRA rank; absent for full fine-tuning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora_rank: Option<u64>,
    /// Sequences per optimizer step over all devices (micro-batch x accumulation x data-parallel processes);
    /// absent: the micro-batch (one device, no accumulation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub global_batch: Option<u64>,
    /// Quantization of the frozen base weights: `nf4` (QLoRA) or `int8` (LLM.int8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_quantization: Option<String>,
}

/// A workload preset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkloadProfile {
    pub id: String,
    pub description: String,
    pub mode: Mode,
    pub objective: Objective,
    pub context: ContextPolicy,
    /// Sequences served at once.
    pub concurrency: u64,
    /// Typical prompt length in tokens.
    pub prompt_tokens: u64,
    /// Typical generated tokens per request (0 for embedding and training, which generate none).
    pub generation_tokens: u64,
    #[serde(default)]
    pub sla: Sla,
    #[serde(default)]
    pub precision: PrecisionPrefs,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub training: Option<TrainingSpec>,
    /// Why each number was chosen, by field path or parent path.
    pub sources: BTreeMap<String, String>,
}

/// Compute precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    Fp32,
    Fp16,
    Bf16,
}

/// Attention implementations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum AttentionKernel {
    #[serde(rename = "flash-attention-3")]
    FlashAttention3,
    #[serde(rename = "flash-attention-2")]
    FlashAttention2,
    SdpaFused,
    SdpaMath,
    Chunked,
    /// llama.cpp's CUDA FlashAttention on tensor cores (`fattn-mma-f16`; the vector kernel for one-token decode).
    LlamaCppFattnMma,
    /// llama.cpp's CUDA FlashAttention without tensor cores (`fattn-tile`, `fattn-vec`).
    LlamaCppFattnTile,
    /// llama.cpp's CPU backend FlashAttention (`ggml_compute_forward_flash_attn_ext`).
    LlamaCppFattnCpu,
}

impl AttentionKernel {
    /// Whether the kernel fuses softmax into the matmuls without materialising the score matrix (for
    /// llama.cpp: `-fa on`).
    pub fn fused(self) -> bool {
        !matches!(self, AttentionKernel::SdpaMath)
    }
}

/// Compute capability range `[min, max]` (inclusive), as `"8.0"` strings; absent ends are open.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CapabilityRange {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<String>,
}

/// A compute capability as (major, minor).
pub(crate) type Capability = (u32, u32);

impl CapabilityRange {
    /// No bound on either end.
    pub fn is_open(&self) -> bool {
        self.min.is_none() && self.max.is_none()
    }

    /// Whether two ranges share a capability (unparsable bounds count as open, as in [`Self::contains`]).
    pub(crate) fn overlaps(&self, other: &CapabilityRange) -> bool {
        let (a_lo, a_hi) = self.bounds();
        let (b_lo, b_hi) = other.bounds();
        let below = |hi: Option<Capability>, lo: Option<Capability>| matches!((hi, lo), (Some(h), Some(l)) if h < l);
        !below(a_hi, b_lo) && !below(b_hi, a_lo)
    }

    /// The bounds; an unparsable bound counts as open (validation reports it).
    pub(crate) fn bounds(&self) -> (Option<Capability>, Option<Capability>) {
        let parse = |s: &Option<String>| s.as_deref().and_then(crate::hardware::parse_capability);
        (parse(&self.min), parse(&self.max))
    }

    /// Whether compute capability `cc` (major, minor) lies in the range.
    pub fn contains(&self, cc: Capability) -> bool {
        let (lo, hi) = self.bounds();
        lo.is_none_or(|lo| cc >= lo) && hi.is_none_or(|hi| cc <= hi)
    }
}

/// The engine a rule applies to: `llama.cpp` (llama-server, Ollama: GGUF inference), `vllm` (safetensors
/// serving), `torch` (PyTorch training and fine-tuning: FlashAttention, SDPA), or `any` for a runtime-neutral
/// rule. A query for one runtime takes that runtime's rows first and the `any` rows after (see `ProfileSet`'s
/// queries). The variants carry no doc comments so the schema lists the names as one `enum` and a typo is
/// reported as "not one of" them.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
pub enum RuntimeId {
    #[serde(rename = "llama.cpp")]
    LlamaCpp,
    #[serde(rename = "vllm")]
    Vllm,
    #[serde(rename = "torch")]
    Torch,
    #[serde(rename = "any")]
    Any,
}

impl RuntimeId {
    /// The name as profiles spell it.
    pub fn name(self) -> &'static str {
        match self {
            RuntimeId::LlamaCpp => "llama.cpp",
            RuntimeId::Vllm => "vllm",
            RuntimeId::Torch => "torch",
            RuntimeId::Any => "any",
        }
    }

    /// Whether a rule for `self` applies when planning for `runtime`.
    pub fn applies_to(self, runtime: RuntimeId) -> bool {
        self == RuntimeId::Any || self == runtime
    }
}

impl std::fmt::Display for RuntimeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Compute precision by device (and, for GPUs, compute capability) for one runtime.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PrecisionRule {
    pub id: String,
    pub runtime: RuntimeId,
    pub device: ReserveTarget,
    /// GPU rows only; absent: every compute capability. A CPU row has none.
    #[serde(default, skip_serializing_if = "CapabilityRange::is_open")]
    pub compute_capability: CapabilityRange,
    pub precision: Precision,
    /// Whether TF32 tensor math is enabled for FP32 matmuls.
    pub tf32: bool,
    pub why: String,
}

/// Attention kernel by device (and compute capability) and sequence length for one runtime.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AttentionRule {
    pub id: String,
    pub runtime: RuntimeId,
    pub device: ReserveTarget,
    /// GPU rows only; absent: every compute capability. A CPU row has none.
    #[serde(default, skip_serializing_if = "CapabilityRange::is_open")]
    pub compute_capability: CapabilityRange,
    /// Applies from this sequence length on (tokens); absent: any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_sequence: Option<u64>,
    pub kernel: AttentionKernel,
    pub why: String,
}

/// Which kind of device a rule applies to (memory reserves, efficiencies, precision and attention rows).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum ReserveTarget {
    Gpu,
    Cpu,
}

/// What a memory-reserve row is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ReserveRole {
    /// Memory the plan leaves alone: subtracted from capacity ([`crate::profile::ProfileSet::reserve`]).
    #[default]
    Reserve,
    /// Memory the runtime itself allocates per device (CUDA context, cuBLAS workspace): the runtime's memory
    /// model counts it, so it is not a reserve too. At most one per (device, runtime).
    RuntimeOverhead,
}

impl ReserveRole {
    fn is_reserve(&self) -> bool {
        *self == ReserveRole::Reserve
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReserveRule {
    pub id: String,
    pub device: ReserveTarget,
    /// Runtime the reserve is measured for.
    pub runtime: RuntimeId,
    /// `reserve` (default) or `runtime-overhead`.
    #[serde(default, skip_serializing_if = "ReserveRole::is_reserve")]
    pub role: ReserveRole,
    /// Fixed bytes held per device by the runtime (CUDA context, cuBLAS workspace).
    pub fixed_bytes: u64,
    /// Safety margin as a fraction of the device's capacity.
    pub fraction: f64,
    pub why: String,
    pub source: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThreadRule {
    pub id: String,
    pub objective: Objective,
    /// Threads per physical core used for generation (1: SMT siblings share the core's FMA units).
    pub threads_per_core: u32,
    /// Physical cores left to the system and the runtime's other threads.
    pub reserve_cores: u32,
    pub why: String,
}

impl ThreadRule {
    /// Threads for a host with `usable_cores` physical cores: (cores − reserve) × threads per core, at least 1,
    /// saturating at `u32::MAX` rather than wrapping.
    pub fn threads(&self, usable_cores: u32) -> u32 {
        usable_cores
            .saturating_sub(self.reserve_cores)
            .saturating_mul(self.threads_per_core)
            .max(1)
    }
}

/// Per-micro-architecture rates, to derive a profile for a GPU nobody has profiled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ArchitectureRule {
    /// Architecture id (`ada`, `ampere-ga100`, `hopper`).
    pub id: String,
    pub name: String,
    pub compute_capability: CapabilityRange,
    /// Dense FP16 tensor FLOPs per clock per SM with FP32 accumulation.
    pub fp16_fp32acc_flops_per_clock_per_sm: f64,
    /// Same with FP16 accumulation (equal on data-center parts).
    pub fp16_fp16acc_flops_per_clock_per_sm: f64,
    /// FP32 vector FLOPs per clock per SM (2 × FP32 lanes).
    pub fp32_flops_per_clock_per_sm: f64,
    /// Data transfers per memory clock as NVML reports the clock: 2 on GDDR6/6X and HBM2e/3 (an RTX 4090
    /// reports 10,501 MHz: 10,501 MHz × 2 × 384 bit / 8 = 1,008 GB/s, its published bandwidth).
    pub memory_transfers_per_clock: f64,
    pub features: Vec<String>,
    pub why: String,
    pub source: String,
}

/// Which phase of inference an efficiency applies to.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Token generation: bound by memory bandwidth.
    Decode,
    /// Prompt processing: bound by matrix throughput.
    Prefill,
}

/// The fraction of a device's peak that a runtime reaches in one phase, used until the measurement store has
/// measured figures for the device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EfficiencyRule {
    pub id: String,
    pub device: ReserveTarget,
    pub runtime: RuntimeId,
    pub phase: Phase,
    /// GPU rows only: the compute capabilities the row was measured on; absent: every GPU. A row with a range
    /// is more specific than one without, and wins where both apply.
    #[serde(default, skip_serializing_if = "CapabilityRange::is_open")]
    pub compute_capability: CapabilityRange,
    /// Achieved / peak: bandwidth for decode, dense tensor (GPU) or vector (CPU) FLOPS for prefill.
    pub efficiency: f64,
    pub why: String,
    pub source: String,
}

/// When a runtime may store the KV cache in a type other than the workload's preferred one. Quantizing the KV
/// cache costs quality; the planner keeps the workload's first KV type that fits unless this row's type is
/// predicted to beat it by at least `min_gain` (relative, in the objective's own score). Without a row, or
/// without `min_gain`, a type is used only when the types before it in the workload's list do not fit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KvCacheRule {
    pub id: String,
    pub runtime: RuntimeId,
    /// The KV cache type as the runtime names it (`q8_0`, `q4_0`).
    pub cache_type: String,
    /// Relative perplexity increase over an f16 KV cache, as measured in `source`.
    pub perplexity_increase: f64,
    /// Smallest predicted relative gain that justifies this type over the workload's preferred one; absent:
    /// never for speed, only when memory requires it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_gain: Option<f64>,
    pub why: String,
    pub source: String,
}

/// A rule table: one kind of decision, each row with an id and a one-line why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum RuleTable {
    Precision {
        id: String,
        rules: Vec<PrecisionRule>,
    },
    Attention {
        id: String,
        rules: Vec<AttentionRule>,
    },
    MemoryReserves {
        id: String,
        rules: Vec<ReserveRule>,
    },
    CpuThreads {
        id: String,
        rules: Vec<ThreadRule>,
    },
    GpuArchitectures {
        id: String,
        rules: Vec<ArchitectureRule>,
    },
    Efficiency {
        id: String,
        rules: Vec<EfficiencyRule>,
    },
    KvCache {
        id: String,
        rules: Vec<KvCacheRule>,
    },
}

/// How a node's GPUs talk to each other: through NVSwitch (every GPU at full NVLink bandwidth to every other),
/// point-to-point NVLink, PCIe only, or one unified memory (a single Apple SoC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum NodeLink {
    Nvswitch,
    Nvlink,
    Pcie,
    Unified,
}

/// The GPUs of a node: a hardware profile id and how many.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeGpus {
    /// A hardware profile id (`h100-sxm`, `apple-m2-ultra`).
    pub profile: String,
    pub count: u32,
}

/// The host of a node: what `--host-cores` and `--host-memory` would state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeHost {
    /// CPU model(s) as the vendor names them (`2x AMD EPYC 7742`).
    pub cpu: String,
    pub physical_cores: u32,
    /// Hardware threads (a cloud instance's vCPUs); absent: as many as physical cores (no SMT assumed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logical_cpus: Option<u32>,
    /// System memory in bytes (DIMM and unified-memory "GB" are GiB: 2 TB of 64 GB DIMMs = 2^41 bytes).
    pub memory_bytes: u64,
}

/// The links between a node's GPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeInterconnect {
    pub kind: NodeLink,
    /// NVLink bandwidth per GPU in GB/s, both directions (`nvswitch` and `nvlink` nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlink_gb_s: Option<f64>,
    /// PCIe generation and lanes per GPU (`pcie` nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_gen: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_lanes: Option<u32>,
}

/// A machine the GPUs sit in (a DGX, a cloud instance, a Mac): `--hardware ID` plans its GPUs with its host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeProfile {
    /// Lower-kebab-case of the product or instance name: `dgx-h100`, `p5-48xlarge`.
    pub id: String,
    pub name: String,
    pub gpus: NodeGpus,
    pub host: NodeHost,
    pub interconnect: NodeInterconnect,
    /// The network between nodes of this kind (`resolve --hardware ID --nodes N` plans N of them over it);
    /// absent where no source states it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<NodeFabric>,
    /// Where each number comes from, by field path or parent path (a vendor page per figure).
    pub sources: BTreeMap<String, String>,
}

/// The links a node of this kind has to other nodes: what a cluster file's `fabric` states
/// (`crate::hardware::Fabric`), with its sources in the node's `sources`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeFabric {
    pub kind: crate::hardware::FabricKind,
    /// Links (network cards, ports) per node that carry inter-node traffic.
    pub links_per_node: u32,
    /// Bandwidth of one link, one direction, in GB/s (10^9 bytes per second).
    pub link_gb_s: f64,
    /// One-way latency between two nodes, in microseconds; absent where no source states it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<f64>,
}
