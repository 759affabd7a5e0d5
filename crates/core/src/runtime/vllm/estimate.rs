//! `optimizer estimate` for vLLM: what a given `vllm serve` configuration takes per GPU and whether vLLM 0.33
//! would start with it, by the memory model the planner uses ([`optimizer_memory::vllm`], [`super::admission`]).
//!
//! vLLM's start-up, in its order (each failure is reported in vLLM's words): the scheduler's configuration check
//! (vllm/config/scheduler.py `SchedulerConfig.__post_init__`: `max_num_batched_tokens >= max_num_seqs`); the
//! length check (vllm/config/model.py `_get_and_verify_max_len`); the free-memory check once the CUDA context exists
//! (vllm/v1/worker/utils.py `request_memory`: `ceil(total × gpu_memory_utilization)` must be free); the KV budget
//! (vllm/v1/worker/gpu_worker.py `determine_available_memory`: the requested memory less weights, the runner's
//! buffers, the profiling peak and the CUDA-graph estimate, or `--kv-cache-memory-bytes` as given); then the
//! one-request admission check ([`super::admission`]). Trade-off: the GPU's free memory is the fleet's (probe,
//! inventory or profile), so another process that starts on the GPU between the estimate and `vllm serve` is not
//! seen.

use serde::Serialize;

use super::admission::{self, format_gib};
use super::choose::{choose_dtype, pinned_kv_type, quantization_method, serve_defaults};
use super::{MAX_MODEL_LEN, dtype_name, group_facts};
use crate::fleet::{Fleet, FleetGpu};
use crate::runtime::PlanError;
use optimizer_memory::vllm::{self as mem, Dtype, KvCacheDtype};
use optimizer_model::{Format, ModelSpec};

/// vLLM 0.33's `--gpu-memory-utilization` default (vllm/config/cache.py `CacheConfig.gpu_memory_utilization`).
const DEFAULT_GPU_MEMORY_UTILIZATION: f64 = 0.92;

/// The `vllm serve` flags that change memory; `None` is vLLM's default.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServeFlags {
    pub gpu_memory_utilization: Option<f64>,
    pub max_model_len: Option<u32>,
    pub tensor_parallel_size: Option<u32>,
    pub pipeline_parallel_size: Option<u32>,
    pub max_num_seqs: Option<u32>,
    pub max_num_batched_tokens: Option<u32>,
    pub kv_cache_dtype: Option<String>,
    pub enforce_eager: bool,
    pub kv_cache_memory_bytes: Option<u64>,
    pub dtype: Option<String>,
    pub quantization: Option<String>,
    /// `--block-size` (default [`mem::DEFAULT_BLOCK_SIZE`]).
    pub block_size: Option<u32>,
}

/// What `estimate` reports for a vLLM configuration, per GPU of the group (every rank alike).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VllmEstimate {
    pub engine: String,
    pub devices: Vec<String>,
    pub gpu: String,
    pub memory_total_bytes: u64,
    pub memory_free_bytes: u64,
    pub tensor_parallel_size: u32,
    pub pipeline_parallel_size: u32,
    pub dtype: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quantization: Option<String>,
    pub kv_cache_dtype: String,
    pub block_size: u32,
    pub max_model_len: u32,
    pub max_num_seqs: u32,
    pub max_num_batched_tokens: u32,
    pub gpu_memory_utilization: f64,
    pub enforce_eager: bool,
    /// `ceil(total × gpu_memory_utilization)` (vllm/v1/worker/utils.py `request_memory`).
    pub requested_bytes: u64,
    pub weights_bytes: u64,
    /// CUDA context, cuBLAS, NCCL: before vLLM's snapshot, outside the requested budget.
    pub non_torch_bytes: u64,
    pub activation_peak_bytes: u64,
    pub runner_buffers_bytes: u64,
    pub cuda_graph_bytes: u64,
    /// The KV memory: the budget left (or `--kv-cache-memory-bytes`).
    pub kv_cache_bytes: u64,
    pub kv_cache_bytes_per_block: u64,
    pub kv_cache_blocks: u64,
    pub kv_cache_tokens: u64,
    /// Requests at `max_model_len` the pool holds at once, as vLLM logs it.
    pub max_concurrency: f64,
    /// The least KV memory vLLM starts with: one request at `max_model_len` and the null block.
    pub admission_bytes: u64,
    /// Everything on one GPU: non-torch, the budget's torch memory and the KV cache.
    pub total_bytes: u64,
    pub starts: bool,
    /// vLLM's error when it would not start, in its words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// vLLM's capacity log line when it starts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
    pub notes: Vec<String>,
}

fn usage(s: String) -> PlanError {
    PlanError::Usage(s)
}

/// `--dtype` as vLLM takes it (`auto` = the checkpoint's, [`choose_dtype`]).
fn dtype(
    flag: Option<&str>,
    model: &ModelSpec,
    cc: Option<(u32, u32)>,
) -> Result<Dtype, PlanError> {
    match flag.map(str::to_lowercase).as_deref() {
        None | Some("auto") => Ok(choose_dtype(model, cc).0),
        Some("bfloat16") => Ok(Dtype::Bfloat16),
        Some("float16" | "half") => Ok(Dtype::Float16),
        Some("float32" | "float") => Ok(Dtype::Float32),
        Some(d) => Err(usage(format!(
            "--dtype {d}: vLLM 0.33 takes auto, bfloat16, float16 (half) or float32 (float)"
        ))),
    }
}

/// The estimate of `flags` on the fleet's first `tp × pp` CUDA GPUs (most free memory first).
pub fn estimate(
    model: &ModelSpec,
    fleet: &Fleet,
    flags: &ServeFlags,
) -> Result<VllmEstimate, PlanError> {
    if model.format != Format::Safetensors {
        return Err(PlanError::UnsupportedFormat(
            "a GGUF file: the vLLM estimate takes a safetensors checkpoint directory".into(),
        ));
    }
    mem::admit(model).map_err(|e| PlanError::UnsupportedFormat(e.to_string()))?;
    let (gpus, mut notes) = crate::runtime::cuda_gpus(
        fleet,
        "vLLM estimates",
        "a vLLM estimate needs NVIDIA GPUs and this hardware has none: name them (--hardware h100-sxm, --hardware 2x:rtx-4090) or pass an --inventory",
    )?;
    let tp = flags.tensor_parallel_size.unwrap_or(1);
    let pp = flags.pipeline_parallel_size.unwrap_or(1);
    if tp == 0 || pp == 0 {
        return Err(usage(
            "--tensor-parallel-size and --pipeline-parallel-size must be at least 1".into(),
        ));
    }
    if pp > 1 {
        return Err(usage(format!(
            "--pipeline-parallel-size {pp}: the vLLM memory model (optimizer_memory::vllm) sizes one pipeline stage only; estimate at --pipeline-parallel-size 1"
        )));
    }
    let world = tp.saturating_mul(pp) as usize;
    if world > gpus.len() {
        return Err(usage(format!(
            "--tensor-parallel-size {tp} x --pipeline-parallel-size {pp} needs {world} GPUs and this hardware has {}",
            gpus.len()
        )));
    }
    let group: Vec<&FleetGpu> = gpus[..world].to_vec();
    let facts = group_facts(&group);
    let cc = facts.compute_capability;
    let g = group[0];
    let free = group.iter().map(|g| g.capacity_bytes).min().unwrap_or(0);
    let total = group
        .iter()
        .map(|g| g.memory_total_bytes)
        .min()
        .unwrap_or(0);
    let dt = dtype(flags.dtype.as_deref(), model, cc)?;
    let kv_dtype = match flags.kv_cache_dtype.as_deref() {
        None => KvCacheDtype::Auto,
        Some(k) => pinned_kv_type(k, cc)?.0,
    };
    let checkpoint_q = quantization_method(model, cc).map(|q| q.0);
    if let Some(q) = &flags.quantization {
        let stored = model
            .hparams
            .quantization
            .as_ref()
            .map(|q| q.method.to_lowercase());
        let same = stored
            .as_deref()
            .is_some_and(|s| q.to_lowercase().starts_with(s));
        if !same {
            return Err(usage(format!(
                "--quantization {q}: the checkpoint is {}; the vLLM memory model sizes weights as the checkpoint stores them, not quantized at load time",
                stored.map_or("not quantized".to_string(), |s| format!(
                    "quantized with {s}"
                ))
            )));
        }
    }
    let trained = model
        .hparams
        .context_length
        .filter(|&c| c > 0)
        .map(|c| u32::try_from(c).unwrap_or(MAX_MODEL_LEN).min(MAX_MODEL_LEN))
        .ok_or_else(|| PlanError::Model("max_position_embeddings is 0 or missing".into()))?;
    let len = flags.max_model_len.unwrap_or(trained);
    if len == 0 {
        return Err(usage("--max-model-len must be at least 1".into()));
    }
    let (batched_default, seqs_default) = serve_defaults(g);
    let seqs = flags.max_num_seqs.unwrap_or(seqs_default);
    // Chunked prefill is on by default: the default token budget is capped at max_num_seqs × max_model_len
    // (vllm/engine/arg_utils.py `_set_default_max_num_seqs_and_batched_tokens_args`).
    let batched = flags.max_num_batched_tokens.unwrap_or_else(|| {
        u32::try_from(u64::from(seqs) * u64::from(len))
            .unwrap_or(u32::MAX)
            .min(batched_default)
    });
    let util = flags
        .gpu_memory_utilization
        .unwrap_or(DEFAULT_GPU_MEMORY_UTILIZATION);
    if !(util > 0.0 && util <= 1.0) {
        return Err(usage(format!(
            "--gpu-memory-utilization {util}: vLLM takes a value in (0, 1]"
        )));
    }
    let block_size = flags.block_size.unwrap_or(mem::DEFAULT_BLOCK_SIZE);
    if block_size == 0 {
        return Err(usage("--block-size must be at least 1".into()));
    }
    let params = mem::Params {
        tensor_parallel: tp,
        dtype: dt,
        kv_cache_dtype: kv_dtype,
        block_size,
        max_model_len: len,
        max_num_seqs: seqs,
        max_num_batched_tokens: batched,
        enforce_eager: flags.enforce_eager,
        gpu: facts,
    };
    let nk = mem::non_kv(model, &params)?;
    let kv = mem::kv(model, &params)?;
    let in_budget = nk
        .in_budget_bytes()
        .ok_or_else(|| PlanError::Model("the non-KV memory overflows 64 bits".into()))?;
    let requested = mem::requested_bytes(total, util);
    let admission = admission::admission_bytes(&kv).unwrap_or(u64::MAX);
    let device = g.id.to_string();
    let mut error = None;
    if batched < seqs {
        error = Some(format!(
            "max_num_batched_tokens ({batched}) must be greater than or equal to max_num_seqs ({seqs})."
        ));
    } else if len > trained {
        error = Some(format!(
            "User-specified max_model_len ({len}) is greater than the derived max_model_len (max_position_embeddings={trained} or model_max_length=None in model's config.json). To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."
        ));
    }
    let free_after_context = free.saturating_sub(nk.non_torch_bytes);
    if error.is_none() && free_after_context < requested {
        error = Some(format!(
            "Free memory on device {device} ({}/{} GiB) on startup is less than desired GPU memory utilization ({util}, {} GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
            format_gib(free_after_context),
            format_gib(total),
            format_gib(requested)
        ));
    }
    let kv_bytes = match flags.kv_cache_memory_bytes {
        Some(b) => {
            notes.push(format!(
                "--kv-cache-memory-bytes {b}: vLLM skips its memory profiling and gives the KV cache exactly this (vllm/v1/worker/gpu_worker.py determine_available_memory); --gpu-memory-utilization only gates start-up"
            ));
            b
        }
        None => requested.saturating_sub(in_budget),
    };
    if error.is_none() && kv_bytes == 0 {
        error = Some("No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine (this flag also controls CPU memory reservation on the CPU backend, despite its name). See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.".into());
    }
    let check = kv_bytes.saturating_sub(kv.bytes_per_block);
    if error.is_none() && !admission::admits(kv_bytes, &kv) {
        let need = admission.saturating_sub(kv.bytes_per_block);
        let longest = longest_len(model, &params, check)?;
        let estimated = if longest > 0 {
            format!(
                "Based on the available memory, the estimated maximum model length is {longest}. "
            )
        } else {
            String::new()
        };
        error = Some(format!(
            "To serve at least one request with the model's max seq len ({len}), ({} GiB KV cache is needed, which is larger than the available KV cache memory ({} GiB). {estimated}Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing `max_model_len` when initializing the engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.",
            format_gib(need),
            format_gib(check)
        ));
    }
    let cap = mem::kv_capacity(kv_bytes, &kv, &params);
    let total_bytes = nk
        .non_torch_bytes
        .saturating_add(in_budget)
        .saturating_add(kv_bytes);
    if error.is_none() && total_bytes > free {
        notes.push(format!(
            "weights, buffers and the KV cache come to {} GiB per GPU and {} GiB is free: vLLM would start and run out of memory while allocating",
            format_gib(total_bytes),
            format_gib(free)
        ));
    }
    let starts = error.is_none();
    let log = starts.then(|| {
        format!(
            "GPU KV cache size: {} tokens, Maximum concurrency for {} tokens per request: {:.2}x",
            super::document::thousands(cap.tokens),
            super::document::thousands(u64::from(len)),
            cap.max_concurrency
        )
    });
    Ok(VllmEstimate {
        engine: format!("vllm {}", mem::VERSION),
        devices: group.iter().map(|g| g.id.to_string()).collect(),
        gpu: g.name.clone(),
        memory_total_bytes: total,
        memory_free_bytes: free,
        tensor_parallel_size: tp,
        pipeline_parallel_size: pp,
        dtype: dtype_name(dt).into(),
        quantization: flags.quantization.clone().or(checkpoint_q),
        kv_cache_dtype: match kv_dtype {
            KvCacheDtype::Auto => "auto".into(),
            KvCacheDtype::Fp8 => "fp8".into(),
        },
        block_size,
        max_model_len: len,
        max_num_seqs: seqs,
        max_num_batched_tokens: batched,
        gpu_memory_utilization: util,
        enforce_eager: flags.enforce_eager,
        requested_bytes: requested,
        weights_bytes: nk.weights.per_rank_bytes,
        non_torch_bytes: nk.non_torch_bytes,
        activation_peak_bytes: nk.activation_peak_bytes,
        runner_buffers_bytes: nk.runner_buffers_bytes,
        cuda_graph_bytes: nk.cuda_graph_bytes,
        kv_cache_bytes: kv_bytes,
        kv_cache_bytes_per_block: kv.bytes_per_block,
        kv_cache_blocks: cap.num_blocks,
        kv_cache_tokens: cap.tokens,
        max_concurrency: crate::emit::round3(cap.max_concurrency),
        admission_bytes: admission,
        total_bytes,
        starts,
        error,
        log,
        notes,
    })
}

/// vLLM's estimated maximum model length for the error (`_estimate_max_model_len_from_groups`): the longest
/// length whose one request fits `check` bytes, by binary search from 1 to the length asked; 0 when even 1 does
/// not.
fn longest_len(model: &ModelSpec, p: &mem::Params, check: u64) -> Result<u32, PlanError> {
    let fits = |len: u32| -> Result<bool, PlanError> {
        let kv = mem::kv(
            model,
            &mem::Params {
                max_model_len: len,
                ..p.clone()
            },
        )?;
        Ok(kv.bytes_per_block.saturating_mul(kv.blocks_per_request) <= check)
    };
    if !fits(1)? {
        return Ok(0);
    }
    let (mut lo, mut hi, mut best) = (1u32, p.max_model_len, 1u32);
    while lo <= hi {
        let mid = lo + (hi - lo) / 2;
        if fits(mid)? {
            best = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    Ok(best)
}
