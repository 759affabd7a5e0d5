//! Peak torch memory of vLLM 0.33's profiling pass, and the model runner's persistent sampler buffers.
//!
//! The runner: 0.33 runs Model Runner V2 unless `VLLM_USE_V2_MODEL_RUNNER=0`, Triton is missing, or a feature V2
//! lacks is asked for with the variable unset (vllm/config/vllm.py `VllmConfig.use_v2_model_runner`,
//! `_get_v2_model_runner_unsupported_features`: the `suffix`/`custom_class` speculative methods, EAGLE parallel
//! drafting, heterogeneous-vocabulary draft models, pipeline parallelism under `external_launcher`, dual-batch
//! overlap); HiSparse and watermarking force V2. None of those is planned, so every formula here is V2's.
//!
//! The pass (vllm/v1/worker/gpu/model_runner.py `GPUModelRunner.profile_run`): `_dummy_run(max_num_batched_tokens,
//! skip_attn=True)` over `min(max_num_seqs, tokens)` requests, then `_dummy_sampler_run` on one hidden row per
//! request, twice: once with no sampling parameters, then with `SamplingParams.for_sampler_warmup()` (top-k 50,
//! top-p 0.9, min-p, penalties, logit bias, bad words, logprobs), "so the profiled peak must" pay for the fp32
//! pipeline the first real steps run.
//!
//! Structural count, per rank, `dt` = `--dtype` bytes, `T` = `max_num_batched_tokens`, `S` = `min(max_num_seqs, T)`,
//! `V` = the vocabulary:
//! - forward: `T × dt × (2 × hidden + max(attention, feed-forward))`: the residual and the hidden stream, plus
//!   the largest layer intermediates alive at once: attention `qkv out + attention out` (heads per rank),
//!   dense MLP `gate_up out [T, 2I/tp] + act out [T, I/tp]`, fused MoE
//!   (vllm/model_executor/layers/fused_moe/fused_moe.py intermediate caches) `top_k × (3 I_moe/tp + hidden)`
//!   plus the shared experts' `3 I_shared/tp`; times [`ACTIVATION_FIT`].
//! - sampler: `(T + S) × hidden × dt` (the forward's hidden states are still referenced, and `_dummy_run`
//!   returns the sampled rows as a gathered copy, `hidden_states[input_batch.logits_indices]`) plus `S ×` the
//!   bytes per logit of the path the GPU takes ([`SamplerPath`]). Counted from the source, not fitted.
//!
//! The transient peak is the larger of the two. FITTED: [`ACTIVATION_FIT`] alone, on the public log
//! `vllm-10517-llama31-8b-3090-20k` (Llama-3.1-8B, 20000 batched tokens: 2.07 GiB = 17.06 peak − 14.99 weights);
//! held out: the 29000-token run of the same model (2.99 GiB, +0.36 %), and two Model Runner V2 logs whose peak is
//! the forward: Qwen3-8B compiled (0.27.1, 0.19 GiB, −1.85 %) and Qwen2.5-1.5B eager (0.28.1, 0.50 GiB, −0.82 %),
//! see tests/it/vllm_public_logs.rs `the_forward_share_is_held_out_on_v2_logs`. The fit point is V0's forward; the fit also absorbs the non-torch memory created during profiling (attention workspaces) that 0.33
//! counts in the same budget line.
//!
//! Persistent ([`runner_buffers_bytes`]), allocated by the V2 `Sampler` in `load_model` whatever the requests
//! ask, per `max_num_seqs` slot: `PenaltiesState` (vllm/v1/worker/gpu/sample/penalties.py)
//! `output_bin_counts [V]` int32 and `prompt_bin_mask [⌈V/32⌉]` int32, and the fixed-width request tables
//! ([`SAMPLER_SLOT_TABLE_BYTES`]); and, on the Triton path, the top-k/top-p kernel's cached fp32 rows of `V`,
//! one per program (vllm/v1/sample/ops/topk_topp_triton.py `apply_top_k_top_p_triton`, `_TRITON_BUFFER_CACHE`).
//! Torch allocations after vLLM's snapshot, inside the requested budget.
//!
//! Trade-offs:
//! - On a FlashInfer GPU the profiling pass never reaches the Triton kernel, so vLLM does not budget its rows;
//!   a batch the fused sampler refuses does, after the KV cache is allocated (a greedy request beside sampled
//!   ones, a per-request seed, processed logprobs: vllm/v1/worker/gpu/sample/sampler.py `Sampler.sample`).
//!   The rows (at most SMs × V × 4 B: 77 MiB on an H100 for a 152k vocabulary) are counted on every path,
//!   because the plan pins the KV cache and such a batch must not run out of memory.
//! - The fit multiplies the forward only, and the peak is the larger of forward and sampler: where the sampler
//!   is the peak, whatever the fit absorbed of the persistent memory made while profiling (at most 8.5 % of
//!   the forward) is not counted. Adding it would count the forward's share twice where the forward is the
//!   peak; the sampler's side is counted from the source instead.

use super::VllmMemoryError;
use optimizer_model::{ModelSpec, Role};

use super::{GpuFacts, Params};

/// Which top-k/top-p implementation the V2 sampler takes (vllm/v1/worker/gpu/sample/sampler.py
/// `Sampler.__init__`: `use_flashinfer = flashinfer_sampler_supported()`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SamplerPath {
    /// FlashInfer's fused sampler (flashinfer-python 0.7.2.post1, the version 0.33 requires): CUDA, a compute
    /// capability the FlashInfer attention backend supports (8.0 to 12.1,
    /// vllm/v1/attention/backends/flashinfer.py `supports_compute_capability`) and more than 16 SMs
    /// (vllm/v1/sample/ops/topk_topp_sampler.py `flashinfer_sampler_supported`). Not modelled: its refusal
    /// when FlashInfer cannot JIT for the GPU (`_flashinfer_jit_unsupported_reason`, e.g. SM 12.x with a CUDA
    /// older than 12.9), which takes the Triton path, the one with fewer bytes.
    FlashInfer,
    /// The Triton top-k/top-p kernel, then Gumbel sampling (vllm/v1/worker/gpu/sample/gumbel.py), elsewhere.
    Triton,
}

impl SamplerPath {
    pub fn name(self) -> &'static str {
        match self {
            SamplerPath::FlashInfer => "FlashInfer",
            SamplerPath::Triton => "Triton",
        }
    }
}

/// FlashInfer needs more than this many SMs (its multi-CTA top-k barrier, `flashinfer_sampler_supported`).
const FLASHINFER_MIN_SMS_EXCLUSIVE: u32 = 16;

/// The path a GPU takes. An unknown compute capability or SM count counts as FlashInfer's, the path with more
/// bytes per logit.
pub fn sampler_path(gpu: &GpuFacts) -> SamplerPath {
    let cc_ok = gpu
        .compute_capability
        .is_none_or(|cc| ((8, 0)..=(12, 1)).contains(&cc));
    let sms_ok = gpu.sms.is_none_or(|s| s > FLASHINFER_MIN_SMS_EXCLUSIVE);
    if cc_ok && sms_ok {
        SamplerPath::FlashInfer
    } else {
        SamplerPath::Triton
    }
}

/// fp32 bytes per logit alive at the sampler's peak beyond the model-dtype logits, FlashInfer path: the fp32
/// copy `apply_sampling_params` makes (`torch.empty_like(logits, dtype=torch.float32).copy_(logits)`), then
/// FlashInfer's `top_k_top_p_sampling_from_logits` with a per-request top-k tensor (so not its integer-k fast
/// path) in its default `top_k_first` order: `top_k_mask_logits`'s output (4) and the softmax probabilities (4).
/// 4 + 4 + 4 = 12.
const FLASHINFER_FP32_BYTES_PER_LOGIT: u64 = 12;
/// The same on the Triton path: the fp32 copy only; the kernel masks in place and Gumbel sampling keeps one
/// value and index per 1024-wide block (`gumbel_sample`).
pub const TRITON_FP32_BYTES_PER_LOGIT: u64 = 4;
/// `output_bin_counts` is int32 per (sequence slot, token).
const BIN_COUNT_BYTES: u64 = 4;
/// `prompt_bin_mask` packs 32 tokens in one int32.
const PROMPT_MASK_TOKENS_PER_WORD: u64 = 32;
/// The Triton kernel's cached rows are fp32.
const TRITON_ROW_BYTES_PER_TOKEN: u64 = 4;
/// The V2 sampler's fixed-width device tables per sequence slot, int32 or fp32 (4 B) each:
/// `LogitBiasState` (vllm/v1/worker/gpu/sample/logit_bias.py) allowed token ids 1024, logit-bias ids 1024 and
/// values 1024, stop ids 128 (12,800 B); `BadWordsState` (bad_words.py) tokens `VLLM_MAX_BAD_WORDS_TOTAL_TOKENS`
/// 1024 and offsets `VLLM_MAX_NUM_BAD_WORDS + 1` = 129 (4,612 B); `LogprobTokenIdsState` (logprob.py)
/// `MAX_LOGPROB_TOKEN_IDS` 128 (512 B). 12,800 + 4,612 + 512 = 17,924.
const SAMPLER_SLOT_TABLE_BYTES: u64 = 17_924;

/// Multiplier on the forward's structural count, fitted (see module doc): 2.07 GiB measured / 1.907 GiB counted
/// for Llama-3.1-8B at 20000 tokens = 1.085.
pub const ACTIVATION_FIT: f64 = 1.085;

fn m(a: u64, b: u64) -> Result<u64, VllmMemoryError> {
    a.checked_mul(b)
        .ok_or(VllmMemoryError::Overflow("activation size overflows"))
}

/// Per-token elements of the largest layer intermediate on one rank.
pub(super) fn layer_elems_per_token(model: &ModelSpec, tp: u64) -> Result<u64, VllmMemoryError> {
    let h = &model.hparams;
    let heads = h.head_count.as_ref().map(|x| x.max()).unwrap_or(0);
    let kvh = h.head_count_kv.as_ref().map(|x| x.max()).unwrap_or(heads);
    let dk = h.key_length.unwrap_or(0);
    let dv = h.value_length.unwrap_or(dk);
    let hq = heads / tp.max(1);
    let kvpr = if kvh == 0 {
        0
    } else {
        super::kv_heads_per_rank(kvh, tp).unwrap_or(1)
    };
    let attn = hq * dk + kvpr * (dk + dv) + hq * dv;
    let dense = h.feed_forward_length.as_ref().map(|x| x.max()).unwrap_or(0);
    let mut mlp = if h.expert_layers.iter().all(|&e| e) && !h.expert_layers.is_empty() {
        0
    } else {
        m(3, dense)? / tp.max(1)
    };
    if h.expert_layers.iter().any(|&e| e) {
        let topk = h.expert_used_count.unwrap_or(1);
        let i_moe = h.expert_feed_forward_length.unwrap_or(dense);
        let hidden = h.embedding_length.unwrap_or(0);
        let shared_i = model
            .tensors
            .iter()
            .find(|t| {
                t.role == Role::Ffn
                    && t.name.contains("shared_expert")
                    && t.name.contains("up_proj")
            })
            .and_then(|t| t.shape.first().copied())
            .unwrap_or(0);
        let moe = m(topk, m(3, i_moe)? / tp.max(1) + hidden)? + m(3, shared_i)? / tp.max(1);
        mlp = mlp.max(moe);
    }
    Ok(attn.max(mlp))
}

/// Bytes per logit at the sampler's peak: the model-dtype logits `compute_logits` returns (all-gathered over
/// the ranks at the padded vocabulary width, vllm/model_executor/layers/logits_processor.py `_gather_logits`)
/// plus the path's fp32 tensors. Per request row: `dt × V_padded + fp32 × V`.
fn sampler_row_bytes(vocab: u64, dt: u64, path: SamplerPath) -> Result<u64, VllmMemoryError> {
    let fp32 = match path {
        SamplerPath::FlashInfer => FLASHINFER_FP32_BYTES_PER_LOGIT,
        SamplerPath::Triton => TRITON_FP32_BYTES_PER_LOGIT,
    };
    m(super::pad_vocab(vocab)?, dt)?
        .checked_add(m(vocab, fp32)?)
        .ok_or(VllmMemoryError::Overflow("activation size overflows"))
}

/// Transient peak of the profiling pass on one rank (see the module doc).
pub fn activation_peak_bytes(model: &ModelSpec, p: &Params) -> Result<u64, VllmMemoryError> {
    let h = &model.hparams;
    let tp = u64::from(p.tensor_parallel.max(1));
    let dt = p.dtype.bytes();
    let t = u64::from(p.max_num_batched_tokens);
    let s = u64::from(p.max_num_seqs).min(t);
    let hidden = h
        .embedding_length
        .ok_or(VllmMemoryError::Missing("no hidden size"))?;
    let vocab = h
        .vocab_size
        .ok_or(VllmMemoryError::Missing("no vocabulary size"))?;
    let per_token = m(2, hidden)?
        .checked_add(layer_elems_per_token(model, tp)?)
        .ok_or(VllmMemoryError::Overflow("activation size overflows"))?;
    let forward = (m(m(t, dt)?, per_token)? as f64 * ACTIVATION_FIT) as u64;
    let path = sampler_path(&p.gpu);
    let rows = t
        .checked_add(s)
        .ok_or(VllmMemoryError::Overflow("activation size overflows"))?;
    let sampler = m(m(rows, hidden)?, dt)?
        .checked_add(m(s, sampler_row_bytes(vocab, dt, path)?)?)
        .ok_or(VllmMemoryError::Overflow("activation size overflows"))?;
    Ok(forward.max(sampler))
}

/// Rows the Triton kernel caches: one per program, `min(next_pow2(min(SMs, S)), SMs)`
/// (`apply_top_k_top_p_triton`); with the SM count unknown, `next_pow2(S)`, its bound.
fn triton_rows(sms: Option<u32>, seqs: u64) -> u64 {
    match sms {
        Some(n) => {
            let n = u64::from(n.max(1));
            n.min(seqs.max(1)).next_power_of_two().min(n)
        }
        None => seqs.max(1).next_power_of_two(),
    }
}

/// The V2 runner's persistent sampler buffers on one rank: the penalty bins and request tables for
/// `max_num_seqs` slots and the Triton kernel's cached rows (see the module doc).
pub fn runner_buffers_bytes(model: &ModelSpec, p: &Params) -> Result<u64, VllmMemoryError> {
    let vocab = model
        .hparams
        .vocab_size
        .ok_or(VllmMemoryError::Missing("no vocabulary size"))?;
    let slots = u64::from(p.max_num_seqs);
    let bins = m(slots, m(vocab, BIN_COUNT_BYTES)?)?;
    let mask = m(
        slots,
        m(vocab.div_ceil(PROMPT_MASK_TOKENS_PER_WORD), BIN_COUNT_BYTES)?,
    )?;
    let triton = m(
        triton_rows(p.gpu.sms, slots),
        m(vocab, TRITON_ROW_BYTES_PER_TOKEN)?,
    )?;
    let tables = m(slots, SAMPLER_SLOT_TABLE_BYTES)?;
    bins.checked_add(mask)
        .and_then(|v| v.checked_add(tables))
        .and_then(|v| v.checked_add(triton))
        .ok_or(VllmMemoryError::Overflow("sampler buffer size overflows"))
}
