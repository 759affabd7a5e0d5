//! vLLM's memory use per GPU, restated from the pinned release's source ([`VERSION`]; the unpacked wheel is
//! the reference, each formula cites its file and function there). Pure: takes a [`ModelSpec`] and
//! parameter values, touches nothing.
//!
//! The budget (vllm/v1/worker/gpu_worker.py `Worker.init_device` and `determine_available_memory`):
//! `init_device` creates the CUDA context, NCCL communicators and cuBLAS handles, then takes `init_snapshot`
//! and sets `requested_memory = ceil(total × gpu_memory_utilization)` (vllm/v1/worker/utils.py
//! `request_memory`), refusing to start when the free memory at that point is below it. The profile then
//! measures `non_kv_cache_memory = (init free − free after profiling) + (torch peak − torch allocated)`
//! (vllm/utils/mem_utils.py `memory_profiling`): weights, what the model runner holds for good (its sampler
//! buffers, [`NonKv::runner_buffers_bytes`]) and the profiling pass's transient peak. The runner is Model Runner
//! V2, 0.33's default (see [`activation`]). With CUDA graphs on, `profile_cudagraph_memory`
//! (vllm/v1/worker/gpu/cudagraph_utils.py) is subtracted too
//! (`VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS` defaults to 1, vllm/envs.py):
//! `available_kv = requested − non_kv_cache_memory − cudagraph estimate` ([`available_kv_bytes`]).
//! The non-torch memory created before the snapshot ([`NonKv::non_torch_bytes`]) is therefore outside the
//! budget: vLLM starts only when it fits in `total − requested` (`request_memory`).
//!
//! Exact: weights per rank ([`weights`]), KV pages, grouping, blocks, tokens and concurrency ([`kv`],
//! [`kv_capacity`]), the runner's sampler buffers and the sampler's share of the profiling peak
//! ([`activation`], counted from the source). Modelled: the forward pass's share of the peak, with the constant
//! fitted in [`activation`], and the CUDA graphs, which vLLM measures on the device, with the bound of the
//! captures seen in [`graphs`]. The plan spends that bound where vLLM spends its own estimate (in
//! [`available_kv_bytes`] as in the plan's total), so the KV cache it predicts vLLM would size at a given
//! utilization errs low by the bound's excess over the real capture (0.005-0.29 GiB on the public V2 logs),
//! while the pinned cache never falls short of the capture that follows it. Trade-off: one
//! multiplicative fit over a structural count of the largest intermediates, so the model stays explainable
//! per term at the price of a few percent on activation-heavy configurations.

mod activation;
mod comm;
mod graphs;
mod kv;
mod weights;

use optimizer_model::{Format, ModelSpec};

pub use activation::{
    ACTIVATION_FIT, SamplerPath, TRITON_FP32_BYTES_PER_LOGIT, activation_peak_bytes,
    runner_buffers_bytes, sampler_path,
};
pub(crate) use comm::TpBuffers;
pub use comm::{symm_mem_buffer_bytes, tp_buffers};
pub use graphs::{
    CUDA_GRAPH_BYTES_PER_GRAPH, CUDA_GRAPH_BYTES_PER_NODE, CUDA_GRAPH_DRIVER_SCALE_PERMILLE,
    CudaGraphMode, DEFAULT_MAX_GRAPH_SIZE, ELEMENTWISE_NODE_BYTES, capture_plan, capture_sizes,
    cuda_graph_breakdown, cuda_graph_bytes, driver_bytes, driver_bytes_scaled,
};
pub use kv::enough;
pub(crate) use weights::kv_heads_per_rank;
pub use weights::{is_spec_layer, pad_vocab, trunk_end};

/// The vLLM release every rule here follows.
pub const VERSION: &str = "0.33.0";

/// KV block size in tokens: `CacheConfig.DEFAULT_BLOCK_SIZE` (vllm/config/cache.py), kept on CUDA by
/// FlashAttention's `get_preferred_block_size` (vllm/v1/attention/backends/flash_attn.py) and raised to a
/// backend's only size otherwise (`Platform._preferred_block_size_for_backends`, vllm/platforms/interface.py;
/// FlashMLA takes 64, vllm/v1/attention/backends/mla/flashmla.py `get_supported_kernel_block_sizes`).
pub const DEFAULT_BLOCK_SIZE: u32 = 16;

/// Non-torch device memory of one worker before vLLM's snapshot with TP = 1 (CUDA context, cuBLAS handles and
/// workspace): 623,706,112 B (0.58 GiB), measured on an H100 80GB HBM3 as a torch 2.11 + CUDA 13 process's
/// device memory beyond torch's reserved pool after one bf16 GEMM (tests/fixtures/vllm/device/nontorch.txt).
/// Trade-off: the largest figure seen is taken for every GPU (the RTX 3090 log `vllm-10517-llama31-8b-3090-20k`
/// shows 0.35 GiB on an older CUDA): the plan pins the KV cache, so a context smaller than planned leaves the
/// difference unused, while a larger one would overcommit the GPU.
pub const NON_TORCH_TP1_BYTES: u64 = 623_706_112;
/// What tensor parallelism adds before the snapshot (NCCL communicators, the custom all-reduce buffers):
/// 430 MiB, the largest increase seen at the far ends of its two-decimal rounding: the llm-d H100 sweep logs a
/// non-torch increase of 0.55 GiB at TP 2 against 0.14 GiB at TP 1 for the same checkpoint
/// (`llmd-llama33-70b-fp8-*`), up to 0.555 − 0.135 = 0.42 GiB = 430 MiB, and 0.54 against 0.14 for Qwen3-32B
/// (`llmd-qwen3-32b-*`), where the V0 ranks of `vllm-16570-qwen25-vl-72b-4xa100-40g-v083` show 0.34-0.43 GiB
/// in all. In the plan it stands for NCCL's share (communicators and the channel buffers NCCL sizes itself),
/// and vLLM 0.33's own all-reduce buffers are added from its source ([`tp_buffers`]). Trade-off: the 0.11
/// logs it was read from already held some of those buffers (the symmetric-memory and custom all-reduce
/// ones existed then), so at TP 2 on an H100 the sum may count up to 0.19 GiB twice, outside the budget,
/// where it only tightens the start-up check.
const NON_TORCH_TP_EXTRA_BYTES: u64 = 430 << 20;
/// The same with TP > 1 before vLLM's own all-reduce buffers: [`NON_TORCH_TP1_BYTES`] +
/// [`NON_TORCH_TP_EXTRA_BYTES`]; [`non_kv`] adds [`TpBuffers::before_snapshot_bytes`].
pub const NON_TORCH_TP_BYTES: u64 = NON_TORCH_TP1_BYTES + NON_TORCH_TP_EXTRA_BYTES;

/// `--dtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    Bfloat16,
    Float16,
    Float32,
}

impl Dtype {
    pub fn bytes(self) -> u64 {
        match self {
            Dtype::Bfloat16 | Dtype::Float16 => 2,
            Dtype::Float32 => 4,
        }
    }
}

/// `--kv-cache-dtype`; `fp8` is `fp8_e4m3`, one byte per element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvCacheDtype {
    Auto,
    Fp8,
}

/// What vLLM reads from the GPU that changes its memory: the sampler path and the Triton kernel's rows
/// ([`sampler_path`], [`runner_buffers_bytes`]). `None` where neither the probe nor the profile says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GpuFacts {
    pub compute_capability: Option<(u32, u32)>,
    pub sms: Option<u32>,
}

/// The serving parameters the memory depends on, named as vLLM's flags, and the GPU's facts.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    pub tensor_parallel: u32,
    pub dtype: Dtype,
    pub kv_cache_dtype: KvCacheDtype,
    pub block_size: u32,
    pub max_model_len: u32,
    pub max_num_seqs: u32,
    pub max_num_batched_tokens: u32,
    pub enforce_eager: bool,
    pub gpu: GpuFacts,
}

/// Weights held by one rank.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RankWeights {
    /// What the largest rank allocates while loading ("Model loading took"): its share of every tensor plus
    /// the rope cache and MLA's decompressed copies.
    pub per_rank_bytes: u64,
    /// Whole-model bytes (after the dtype cast) of the tensors vLLM splits.
    pub sharded_bytes: u64,
    /// Bytes every rank holds whole.
    pub replicated_bytes: u64,
    pub sharded_tensors: usize,
    pub replicated_tensors: usize,
    /// The rotary `cos_sin_cache` buffer(s).
    pub rope_cache_bytes: u64,
    /// MLA `W_UK_T` + `W_UV`, made from `kv_b_proj` after loading.
    pub mla_decompressed_bytes: u64,
    /// Tensors whose name matched no vLLM parallel layer: counted replicated (an over-estimate), named here.
    pub unclassified_tensors: Vec<String>,
    /// Stored tensors vLLM never loads (rotary buffers, biases of projections built without one): in no figure.
    pub not_loaded_tensors: Vec<String>,
}

/// What one layer caches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerKind {
    Full,
    Sliding { window: u64 },
    Mla,
}

/// The KV cache of one rank.
#[derive(Debug, Clone, PartialEq)]
pub struct Kv {
    /// One block, all layers, one rank.
    pub page_bytes: u64,
    /// One block of one layer.
    pub layer_page_bytes: u64,
    /// Bytes one block takes from the pool (the largest group's page sum): the divisor of `num_blocks`.
    pub bytes_per_block: u64,
    /// Blocks one `max_model_len` request takes, summed over groups.
    pub blocks_per_request: u64,
    /// What one `max_model_len` request needs, summed over layers (vLLM's start-up check).
    pub min_bytes: u64,
    pub layers: Vec<LayerKind>,
    /// (kind, layers of that kind, groups they form).
    pub groups: Vec<(LayerKind, u64, u64)>,
}

/// Everything but the KV cache, per rank.
#[derive(Debug, Clone, PartialEq)]
pub struct NonKv {
    pub weights: RankWeights,
    /// CUDA context, cuBLAS and (TP > 1) NCCL and the all-reduce buffers of [`TpBuffers::before_snapshot_bytes`],
    /// allocated before vLLM's snapshot: outside the requested budget.
    pub non_torch_bytes: u64,
    /// The tensor-parallel buffers vLLM allocates itself ([`comm`]): those before the snapshot are in
    /// `non_torch_bytes`, FlashInfer's all-reduce workspace is in the budget ([`NonKv::in_budget_bytes`]).
    pub tp_buffers: TpBuffers,
    /// Peak of the profiling pass (forward over `max_num_batched_tokens`, then the sampler); the forward fitted.
    pub activation_peak_bytes: u64,
    /// The model runner's persistent sampler buffers (penalty bins, the Triton kernel's rows): torch memory
    /// allocated after the snapshot, inside the requested budget.
    pub runner_buffers_bytes: u64,
    /// The CUDA graphs' memory ([`graphs`]: the graphs counted from the source, their pool and warm-up from the
    /// model's shapes, the driver's share per graph and node measured on an H100 and scaled to bound the V2
    /// captures seen): what
    /// `profile_cudagraph_memory` estimates and `capture_model` then takes; 0 with `--enforce-eager`.
    pub cuda_graph_bytes: u64,
    /// The sampler path the peak and the buffers were counted for.
    pub sampler: SamplerPath,
}

impl NonKv {
    /// What vLLM's requested budget holds besides the KV cache: weights, the runner's sampler buffers, the
    /// FlashInfer all-reduce workspace (TP > 1), the profiling peak and the CUDA-graph estimate (the non-torch
    /// memory is outside it). `None` on overflow.
    pub fn in_budget_bytes(&self) -> Option<u64> {
        self.weights
            .per_rank_bytes
            .checked_add(self.runner_buffers_bytes)
            .and_then(|v| v.checked_add(self.tp_buffers.flashinfer_workspace_bytes))
            .and_then(|v| v.checked_add(self.activation_peak_bytes))
            .and_then(|v| v.checked_add(self.cuda_graph_bytes))
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KvCapacity {
    pub num_blocks: u64,
    pub tokens: u64,
    pub max_concurrency: f64,
}

/// Quantization methods whose packed tensors this model sizes as stored.
const QUANT_METHODS: &[&str] = &[
    "gptq",
    "awq",
    "bitsandbytes",
    "fp8",
    "compressed-tensors",
    "mxfp4",
];

/// Why the vLLM memory model cannot size a checkpoint at given parameters. The planner refuses such a model
/// (exit 4, naming the file) or, from [`admit`], says vLLM does not serve it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VllmMemoryError {
    /// A size past 64 bits: a hostile or absurd hyper-parameter.
    #[error("{0}")]
    Overflow(&'static str),
    /// A hyper-parameter the sizing needs and the model does not declare.
    #[error("{0}")]
    Missing(&'static str),
    /// A tensor whose bytes per rank cannot be computed.
    #[error("tensor {tensor}: {defect}")]
    Tensor {
        tensor: String,
        defect: &'static str,
    },
    /// Heads, vocabulary or a tensor that does not divide over the tensor-parallel ranks the way vLLM splits it.
    #[error("{0}")]
    Split(String),
    /// What vLLM (or this model of it) does not serve: the format, recurrent layers, a quantization method.
    #[error("{0}")]
    Unsupported(String),
    /// Parameters outside what vLLM accepts (a zero block size or tensor-parallel size, a layer count past
    /// `MAX_BLOCKS`).
    #[error("{0}")]
    Params(String),
    /// The requested memory leaves nothing for the KV cache (vLLM: "No available memory for the cache blocks").
    #[error(
        "requested {requested} bytes leave nothing for the KV cache after weights, activation and CUDA graphs ({used} bytes)"
    )]
    NoRoomForKv { requested: u64, used: u64 },
}

impl VllmMemoryError {
    fn tensor(name: &str, defect: &'static str) -> Self {
        VllmMemoryError::Tensor {
            tensor: name.to_string(),
            defect,
        }
    }
}

/// Whether vLLM (and this model of it) handles the checkpoint: safetensors, attention-only layers with known
/// head counts, and a quantization sized as stored.
pub fn admit(model: &ModelSpec) -> Result<(), VllmMemoryError> {
    if model.format != Format::Safetensors {
        return Err(VllmMemoryError::Unsupported(
            "vLLM plans are made for safetensors checkpoints; a GGUF model runs on llama.cpp"
                .into(),
        ));
    }
    let h = &model.hparams;
    if h.block_count.is_none() {
        return Err(VllmMemoryError::Missing(
            "config.json declares no num_hidden_layers",
        ));
    }
    if h.head_count.is_none() {
        return Err(VllmMemoryError::Missing(
            "config.json declares no num_attention_heads",
        ));
    }
    if h.key_length.is_none() && h.kv_lora_rank.is_none() {
        return Err(VllmMemoryError::Missing(
            "config.json gives no head size (head_dim or hidden_size / num_attention_heads)",
        ));
    }
    if h.recurrent_layers.iter().any(|&r| r) {
        return Err(VllmMemoryError::Unsupported(format!(
            "{}: recurrent (state-space or linear-attention) layers are not modelled for vLLM",
            model.architecture
        )));
    }
    if let Some(q) = &h.quantization
        && !QUANT_METHODS.contains(&q.method.as_str())
    {
        return Err(VllmMemoryError::Unsupported(format!(
            "quantization method {:?} is not one of {QUANT_METHODS:?}",
            q.method
        )));
    }
    Ok(())
}

pub fn weights(model: &ModelSpec, tp: u32, dtype: Dtype) -> Result<RankWeights, VllmMemoryError> {
    weights::weights(model, tp, dtype)
}

pub fn kv(model: &ModelSpec, p: &Params) -> Result<Kv, VllmMemoryError> {
    kv::kv(model, p)
}

pub fn non_kv(model: &ModelSpec, p: &Params) -> Result<NonKv, VllmMemoryError> {
    let weights = weights::weights(model, p.tensor_parallel, p.dtype)?;
    let tp_buffers = comm::tp_buffers(
        p.tensor_parallel,
        &p.gpu,
        model.hparams.embedding_length.unwrap_or(0),
        p.dtype,
        p.max_num_batched_tokens,
    );
    let non_torch_bytes = if p.tensor_parallel > 1 {
        NON_TORCH_TP_BYTES
            .checked_add(tp_buffers.before_snapshot_bytes())
            .ok_or(VllmMemoryError::Overflow("non-torch bytes overflow"))?
    } else {
        NON_TORCH_TP1_BYTES
    };
    let activation_peak_bytes = activation::activation_peak_bytes(model, p)?;
    let runner_buffers_bytes = activation::runner_buffers_bytes(model, p)?;
    let cuda_graph_bytes = if p.enforce_eager {
        0
    } else {
        graphs::cuda_graph_bytes(model, p, graphs::default_max_graph_size(&p.gpu))?
    };
    Ok(NonKv {
        weights,
        non_torch_bytes,
        tp_buffers,
        activation_peak_bytes,
        runner_buffers_bytes,
        cuda_graph_bytes,
        sampler: activation::sampler_path(&p.gpu),
    })
}

/// `request_memory` (vllm/v1/worker/utils.py): `ceil(total × gpu_memory_utilization)`.
pub fn requested_bytes(total_gpu_bytes: u64, gpu_memory_utilization: f64) -> u64 {
    let v = (total_gpu_bytes as f64 * gpu_memory_utilization).ceil();
    if v.is_finite() && v > 0.0 {
        v.min(u64::MAX as f64) as u64
    } else {
        0
    }
}

/// `available_kv_cache_memory_bytes` (gpu_worker.py `determine_available_memory`): requested minus weights,
/// the runner's buffers, activation peak and CUDA graph estimate; Err when nothing is left (vLLM: "No
/// available memory for the cache blocks").
pub fn available_kv_bytes(requested: u64, non_kv: &NonKv) -> Result<u64, VllmMemoryError> {
    let used = non_kv
        .in_budget_bytes()
        .ok_or(VllmMemoryError::Overflow("non-KV bytes overflow"))?;
    match requested.checked_sub(used) {
        Some(v) if v > 0 => Ok(v),
        _ => Err(VllmMemoryError::NoRoomForKv { requested, used }),
    }
}

pub fn kv_capacity(available_kv_bytes: u64, kv: &Kv, p: &Params) -> KvCapacity {
    kv::kv_capacity(available_kv_bytes, kv, p)
}
