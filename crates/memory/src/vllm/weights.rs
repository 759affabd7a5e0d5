//! Weights per tensor-parallel rank, from the checkpoint's exact tensor bytes and vLLM 0.33.0's parallel layers.
//!
//! Which tensors vLLM splits and how, by the Hugging Face module name (the layer class each model file builds):
//! - Column parallel, output rows split (`ColumnParallelLinear`, `MergedColumnParallelLinear`,
//!   vllm/model_executor/layers/linear.py): `q_proj`, `gate_proj`, `up_proj`, `gate_up_proj`, `w1`, `w3`,
//!   `q_b_proj` and `kv_b_proj` (MLA, vllm/model_executor/models/deepseek_v2.py `DeepseekV2MLAAttention`),
//!   and their biases and quantization state.
//! - K and V (`QKVParallelLinear`, linear.py): each rank holds `num_kv_heads / tp` heads when `tp` divides the
//!   KV heads, else exactly one head replicated on `tp / num_kv_heads` ranks (`num_kv_head_replicas`).
//! - Row parallel, input columns split (`RowParallelLinear`): `o_proj`, `down_proj`, `w2`, `dense`,
//!   `out_proj`; their bias is added once after the all-reduce and every rank holds it whole.
//! - Fused MoE experts (vllm/model_executor/layers/fused_moe/layer.py `FusedMoE`, TP without expert
//!   parallelism): every rank holds every expert with `intermediate / tp` rows, so expert bytes divide by `tp`.
//! - Vocabulary (`VocabParallelEmbedding`, `ParallelLMHead`, vllm/model_executor/layers/vocab_parallel_embedding.py):
//!   rows padded to `pad_vocab_size(vocab, DEFAULT_VOCAB_PADDING_SIZE = 64)`, then `padded / tp` rows per rank;
//!   a tied LM head reuses the embedding and costs nothing.
//! - Replicated (`ReplicatedLinear` or plain parameters): norms, the MoE router `gate`, DeepSeek's
//!   `e_score_correction_bias`, Qwen-MoE's `shared_expert_gate`, MLA's `q_a_proj` and `kv_a_proj_with_mqa`
//!   (deepseek_v2.py builds them as `ReplicatedLinear`, or the fused `MergedReplicatedLinear`).
//!
//! Dtype: an unquantized floating tensor is created in `--dtype` and the checkpoint cast into it
//! (`default_weight_loader`), so its bytes are `elements × dtype bytes`; packed quantized weights (GPTQ/AWQ I32,
//! FP8, bitsandbytes U8, MXFP4 blocks) and their quantization state keep the stored bytes. Approximation: GPTQ/AWQ
//! scales stored F16 are created in the model dtype (2 bytes either way unless `--dtype float32`).
//!
//! Not loaded: tensors a checkpoint stores that vLLM never allocates are left out of every figure and counted in
//! [`RankWeights::not_loaded_tensors`]: rotary buffers (`rotary_emb.inv_freq`, the cos/sin caches) and the bias
//! of a projection vLLM builds without one (old AutoGPTQ wrote a zero `bias` for every quantized linear layer).
//! vLLM 0.33.0's `AutoWeightsLoader.load_weights` (vllm/model_executor/models/utils.py) drops the first through
//! `REMOVE_UNUSED_ROTARY_EMBEDS_MAPPER` and ignores the second (`ignore_unexpected_suffixes.append(".bias")`,
//! "Ignore unexpected biases (typically from GPTQ models)"); parameters are allocated from the model's layers,
//! not from the file. Trade-off: a stored bias is left out only for the architectures whose builder's bias
//! switches are read here (llama, qwen2, qwen3); elsewhere it is counted, an over-estimate of a few MiB at most.
//! Nor are a checkpoint's multi-token-prediction blocks: vLLM builds `num_hidden_layers` decoder layers
//! (`make_layers`), and every 0.33 main-model loader skips the layers stored past them
//! (models/utils.py `get_spec_layer_idx_from_weight_name` in deepseek_v2.py `load_weights`, `skip_spec_layers`
//! in glm4_moe.py) and the `mtp.` ones (`WeightsMapper(orig_to_new_prefix={"mtp.": None})`, qwen3_next.py,
//! qwen3_5.py): DeepSeek-V3's layer 61, 14B of its 685B parameters, is loaded only by the MTP drafter.
//!
//! Beyond the file, "Model loading took" (torch bytes allocated by `load_model`, vllm/platforms/cuda.py
//! `get_current_memory_usage`) includes: the rotary `cos_sin_cache` buffer (rotary_embedding/base.py
//! `RotaryEmbedding._compute_cos_sin_cache`: `max_position × rotary_dim` in the model dtype, shared by every layer
//! through `get_rope`'s `_ROPE_DICT`), and for MLA the decompressed `W_UK_T`/`W_UV` copies of `kv_b_proj` made in
//! `MLAAttention.process_weights_after_loading` (layers/attention/mla_attention.py `split_kv_b_proj`), in the
//! activation dtype. Marlin repacking (`gptq_marlin_repack`, `awq_marlin_repack`) permutes packed weights without
//! changing their element count; its small per-layer workspace is not counted (approximation, under 1 MiB).

use super::VllmMemoryError;
use optimizer_model::{
    Dtype as FileDtype, LinearBias, ModelSpec, Role, TensorInfo, safetensors::StDtype,
};

use super::{Dtype, RankWeights};

/// `DEFAULT_VOCAB_PADDING_SIZE` in vllm/model_executor/layers/vocab_parallel_embedding.py.
const VOCAB_PADDING: u64 = 64;

/// How vLLM places one tensor across tensor-parallel ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Split {
    /// Every rank holds it whole.
    Replicated,
    /// Split evenly across ranks (column or row parallel, fused experts).
    Even,
    /// Rows of the vocabulary, padded to [`VOCAB_PADDING`], split evenly.
    Vocab,
    /// K or V projection: whole heads, replicated when there are fewer heads than ranks.
    KvHeads,
    /// Fused QKV projection: the Q rows split, the K/V rows per [`Split::KvHeads`].
    FusedQkv,
}

const COLUMN: &[&str] = &[
    "q_proj",
    "gate_proj",
    "up_proj",
    "gate_up_proj",
    "w1",
    "w3",
    "q_b_proj",
    "kv_b_proj",
    "c_fc",
    "fc1",
    "dense_h_to_4h",
    "wq",
];
const ROW: &[&str] = &[
    "o_proj",
    "down_proj",
    "w2",
    "dense",
    "out_proj",
    "c_proj",
    "fc2",
    "dense_4h_to_h",
    "wo",
];
const KV: &[&str] = &["k_proj", "v_proj", "wk", "wv"];
const FUSED_QKV: &[&str] = &["qkv_proj", "query_key_value", "c_attn", "W_pack"];
const REPLICATED: &[&str] = &[
    "q_a_proj",
    "kv_a_proj_with_mqa",
    "fused_qkv_a_proj",
    "gate",
    "router",
    "shared_expert_gate",
    "e_score_correction_bias",
    "q_a_layernorm",
    "kv_a_layernorm",
];

/// The module a parameter belongs to: the last name segment that names a known layer. gpt-oss names its fused
/// expert tensors `experts.gate_up_proj` / `experts.gate_up_proj_bias` / `…_blocks` / `…_scales`.
fn module_of(name: &str) -> Option<&str> {
    let segs: Vec<&str> = name.split('.').collect();
    for s in segs.iter().rev() {
        let base = s
            .strip_suffix("_bias")
            .or_else(|| s.strip_suffix("_blocks"))
            .or_else(|| s.strip_suffix("_scales"))
            .unwrap_or(s);
        if COLUMN.contains(&base)
            || ROW.contains(&base)
            || KV.contains(&base)
            || FUSED_QKV.contains(&base)
            || REPLICATED.contains(&base)
        {
            return Some(base);
        }
    }
    None
}

/// Rotary buffers some checkpoints carry (transformers before 4.31 saved `inv_freq`; ColossalAI and GPTQModel
/// the cos/sin caches): `AutoWeightsLoader.REMOVE_UNUSED_ROTARY_EMBEDS_MAPPER` in vllm/model_executor/models/utils.py
/// maps them to nothing, and vLLM's rotary layers hold no such tensor (`RotaryEmbedding` registers only its
/// non-persistent `cos_sin_cache`, vllm/model_executor/layers/rotary_embedding/base.py).
const ROTARY_BUFFERS: &[&str] = &[
    "rotary_pos_emb.inv_freq",
    "rotary_emb.inv_freq",
    "rotary_emb.cos_cached",
    "rotary_emb.sin_cached",
];

/// Whether vLLM 0.33.0 builds projection `module` of architecture `arch` with a bias; `None` where the model
/// file's switches are not modelled here (the stored bias is then counted).
fn vllm_builds_bias(arch: &str, module: &str, b: LinearBias) -> Option<bool> {
    let qkv = matches!(module, "q_proj" | "k_proj" | "v_proj");
    let o = module == "o_proj";
    let mlp = matches!(module, "gate_proj" | "up_proj" | "down_proj");
    match arch {
        // llama.py `LlamaDecoderLayer.__init__`: Q/K/V `attention_bias or bias`, replaced by `qkv_bias` when the
        // config has one; o_proj `attention_bias or bias`; `LlamaMLP` `mlp_bias`; each False when absent.
        "llama" if qkv => Some(b.qkv.or(b.attention).unwrap_or(false)),
        "llama" if o => Some(b.attention.unwrap_or(false)),
        "llama" if mlp => Some(b.mlp.unwrap_or(false)),
        // qwen2.py: `Qwen2Attention` qkv_proj bias=True, o_proj bias=False; `Qwen2MLP` bias=False.
        "qwen2" if qkv => Some(true),
        // qwen3.py: `Qwen3Attention` qkv_proj bias=`attention_bias` (False when absent), o_proj bias=False;
        // its MLP is qwen2.py's `Qwen2MLP`.
        "qwen3" if qkv => Some(b.attention.unwrap_or(false)),
        "qwen2" | "qwen3" if o || mlp => Some(false),
        _ => None,
    }
}

/// Whether vLLM never loads stored tensor `t` (see the module doc).
fn never_loaded(model: &ModelSpec, t: &TensorInfo, trunk_end: Option<u64>) -> bool {
    if ROTARY_BUFFERS.iter().any(|b| t.name.contains(b)) || is_spec_layer(t, trunk_end) {
        return true;
    }
    let Some(stem) = t.name.strip_suffix(".bias") else {
        return false;
    };
    let module = stem.rsplit('.').next().unwrap_or(stem);
    vllm_builds_bias(&model.architecture, module, model.hparams.linear_bias) == Some(false)
}

/// The first layer index past the trunk vLLM builds: the lowest layer index stored (0, or a pipeline stage's
/// first, whose tensors keep their checkpoint indices) plus `num_hidden_layers`, which a safetensors config counts
/// without its MTP blocks (a GGUF's block count includes them, and vLLM plans no GGUF).
pub fn trunk_end(model: &ModelSpec) -> Option<u64> {
    if model.format != optimizer_model::Format::Safetensors {
        return None;
    }
    let first = model
        .tensors
        .iter()
        .filter_map(|t| t.layer)
        .min()
        .unwrap_or(0);
    model.hparams.block_count?.checked_add(u64::from(first))
}

/// A multi-token-prediction tensor the main model never loads (see the module doc): under `mtp.`, or in a
/// layer at or past [`trunk_end`].
pub fn is_spec_layer(t: &TensorInfo, trunk_end: Option<u64>) -> bool {
    t.name.starts_with("mtp.")
        || matches!((t.layer, trunk_end), (Some(l), Some(end)) if u64::from(l) >= end)
}

fn is_bias(name: &str) -> bool {
    name.ends_with(".bias") || name.ends_with("_bias")
}

/// The split vLLM applies to one tensor, from its role and name; `None` when the name is not one vLLM's
/// parallel layers are known to take (counted replicated, and reported).
fn split_of(t: &TensorInfo) -> Option<Split> {
    let lower = t.name.to_ascii_lowercase();
    if t.role == Role::Norm {
        return Some(Split::Replicated);
    }
    if matches!(t.role, Role::Embedding | Role::Output) {
        return Some(Split::Vocab);
    }
    // gpt-oss attention sinks: one per query head, sharded with the heads (gpt_oss.py `OAIAttention.sinks`).
    if lower.ends_with(".sinks") {
        return Some(Split::Even);
    }
    let module = module_of(&t.name)?;
    let one_element = t.elements <= 1;
    if one_element || REPLICATED.contains(&module) {
        return Some(Split::Replicated);
    }
    if ROW.contains(&module) {
        // Row-parallel bias: added once after the all-reduce, held whole on each rank. Row-parallel
        // quantization state with a unit dimension (per-output-channel scales, one group) is not split.
        if is_bias(&lower) || (t.role == Role::QuantState && t.shape.contains(&1)) {
            return Some(Split::Replicated);
        }
        return Some(Split::Even);
    }
    if lower.ends_with(".g_idx") || lower.ends_with(".weight_g_idx") {
        // Group indices run over the input dimension, which a column-parallel layer does not split.
        return Some(Split::Replicated);
    }
    if KV.contains(&module) {
        return Some(Split::KvHeads);
    }
    if FUSED_QKV.contains(&module) {
        return Some(Split::FusedQkv);
    }
    Some(Split::Even)
}

/// Parameters vLLM 0.33.0 creates in float32 whatever `--dtype` says: DeepSeek-V2/V3's (and Kimi-K2's)
/// `e_score_correction_bias` (deepseek_v2.py `DeepseekV2MoE.__init__`: `torch.empty(n_routed_experts,
/// dtype=torch.float32)`; only the ROCm AITER path casts it to the router's output dtype).
const F32_PARAMETERS: &[&str] = &["e_score_correction_bias"];

/// Bytes vLLM allocates for a tensor before splitting: floating tensors that are not quantization state are
/// created in `--dtype` (except [`F32_PARAMETERS`], four bytes an element); everything else keeps its stored
/// bytes.
fn loaded_bytes(t: &TensorInfo, dtype: Dtype) -> Result<u64, VllmMemoryError> {
    let floating = matches!(
        t.dtype,
        FileDtype::Safetensors(StDtype::F32 | StDtype::F16 | StDtype::BF16 | StDtype::F64)
    );
    if floating && F32_PARAMETERS.iter().any(|p| t.name.ends_with(p)) {
        return t
            .elements
            .checked_mul(4)
            .ok_or_else(|| VllmMemoryError::tensor(&t.name, "bytes overflow"));
    }
    if floating && t.role != Role::QuantState {
        t.elements
            .checked_mul(dtype.bytes())
            .ok_or_else(|| VllmMemoryError::tensor(&t.name, "bytes overflow"))
    } else {
        Ok(t.bytes)
    }
}

/// Heads of query and key/value per rank, with vLLM's `QKVParallelLinear` rule.
pub(crate) fn kv_heads_per_rank(kv_heads: u64, tp: u64) -> Result<u64, VllmMemoryError> {
    if kv_heads == 0 || tp == 0 {
        return Err(VllmMemoryError::Params(format!(
            "kv heads {kv_heads} and tensor parallel {tp} must be positive"
        )));
    }
    if tp >= kv_heads {
        if !tp.is_multiple_of(kv_heads) {
            return Err(VllmMemoryError::Split(format!(
                "tensor parallel {tp} is not a multiple of the {kv_heads} KV heads (vLLM QKVParallelLinear replicates whole heads)"
            )));
        }
        Ok(1)
    } else if !kv_heads.is_multiple_of(tp) {
        Err(VllmMemoryError::Split(format!(
            "{kv_heads} KV heads do not divide evenly over tensor parallel {tp}"
        )))
    } else {
        Ok(kv_heads / tp)
    }
}

/// `pad_vocab_size` (vocab_parallel_embedding.py).
pub fn pad_vocab(vocab: u64) -> Result<u64, VllmMemoryError> {
    vocab
        .checked_add(VOCAB_PADDING - 1)
        .map(|v| v / VOCAB_PADDING * VOCAB_PADDING)
        .ok_or(VllmMemoryError::Overflow("vocabulary size overflows"))
}

fn scale(bytes: u64, num: u64, den: u64, name: &str) -> Result<u64, VllmMemoryError> {
    if den == 0 {
        return Err(VllmMemoryError::tensor(name, "zero-sized split"));
    }
    let v = u128::from(bytes) * u128::from(num);
    u64::try_from(v.div_ceil(u128::from(den)))
        .map_err(|_| VllmMemoryError::tensor(name, "bytes overflow"))
}

/// Weights per rank; see the module doc for the rules.
pub(super) fn weights(
    model: &ModelSpec,
    tp: u32,
    dtype: Dtype,
) -> Result<RankWeights, VllmMemoryError> {
    let tp = u64::from(tp);
    if tp == 0 {
        return Err(VllmMemoryError::Params(
            "tensor parallel size must be at least 1".into(),
        ));
    }
    let h = &model.hparams;
    let heads = h.head_count.as_ref().map(|p| p.max());
    let kv_heads = h.head_count_kv.as_ref().map(|p| p.max()).or(heads);
    let mut out = RankWeights::default();
    let mut per_rank: u64 = 0;
    let add = |acc: &mut u64, v: u64| -> Result<(), VllmMemoryError> {
        *acc = acc
            .checked_add(v)
            .ok_or(VllmMemoryError::Overflow("per-rank bytes overflow"))?;
        Ok(())
    };
    let trunk_end = trunk_end(model);
    for t in &model.tensors {
        if never_loaded(model, t, trunk_end) {
            out.not_loaded_tensors.push(t.name.clone());
            continue;
        }
        let bytes = loaded_bytes(t, dtype)?;
        let split = match split_of(t) {
            Some(s) => s,
            None => {
                out.unclassified_tensors.push(t.name.clone());
                Split::Replicated
            }
        };
        let rank_bytes = match split {
            Split::Replicated => {
                add(&mut out.replicated_bytes, bytes)?;
                out.replicated_tensors += 1;
                bytes
            }
            Split::Even => {
                if !t.shape.iter().any(|&d| d.is_multiple_of(tp)) {
                    return Err(VllmMemoryError::Split(format!(
                        "tensor {} (shape {:?}) does not split evenly over tensor parallel {tp}",
                        t.name, t.shape
                    )));
                }
                scale(bytes, 1, tp, &t.name)?
            }
            Split::Vocab => {
                let rows = h
                    .vocab_size
                    .or_else(|| t.shape.first().copied())
                    .ok_or_else(|| VllmMemoryError::tensor(&t.name, "no vocabulary size"))?;
                let file_rows = t.shape.first().copied().unwrap_or(0).max(1);
                let padded = pad_vocab(rows)?;
                if !padded.is_multiple_of(tp) {
                    return Err(VllmMemoryError::Split(format!(
                        "padded vocabulary {padded} does not divide over tensor parallel {tp}"
                    )));
                }
                // bytes per row from the file's own rows; rows held per rank from vLLM's padded vocabulary.
                scale(bytes, padded / tp, file_rows, &t.name)?
            }
            Split::KvHeads => {
                let kv =
                    kv_heads.ok_or_else(|| VllmMemoryError::tensor(&t.name, "no KV head count"))?;
                let per = kv_heads_per_rank(kv, tp)?;
                scale(bytes, per, kv, &t.name)?
            }
            Split::FusedQkv => {
                let q = heads.ok_or_else(|| VllmMemoryError::tensor(&t.name, "no head count"))?;
                let kv = kv_heads.unwrap_or(q);
                let per = kv_heads_per_rank(kv, tp)?;
                if !q.is_multiple_of(tp) {
                    return Err(VllmMemoryError::Split(format!(
                        "{q} attention heads do not divide over tensor parallel {tp}"
                    )));
                }
                let total = q + 2 * kv;
                scale(bytes, q / tp + 2 * per, total, &t.name)?
            }
        };
        if split != Split::Replicated {
            add(&mut out.sharded_bytes, bytes)?;
            out.sharded_tensors += 1;
        }
        add(&mut per_rank, rank_bytes)?;
    }
    out.rope_cache_bytes = rope_cache_bytes(model, dtype)?;
    out.mla_decompressed_bytes = mla_decompressed_bytes(model, tp, dtype, trunk_end)?;
    add(&mut per_rank, out.rope_cache_bytes)?;
    add(&mut per_rank, out.mla_decompressed_bytes)?;
    out.per_rank_bytes = per_rank;
    Ok(out)
}

/// The rotary `cos_sin_cache`: `positions × rotary_dim` in the model dtype, one per distinct rope (vLLM's
/// `get_rope` caches instances by their parameters). Positions are `max_position_embeddings` for the default,
/// `llama3`, `dynamic` and `longrope` types; `original_max_position × factor` for `yarn` and DeepSeek's yarn
/// (yarn_scaling_rope.py and deepseek_scaling_rope.py `_compute_cos_sin_cache`) and `max_position × factor`
/// for `linear` (linear_scaling_rope.py). Gemma 3 builds a second rope for its local layers
/// (`rope_local_base_freq`, models/gemma3.py): counted as a second cache of the same length (approximation).
fn rope_cache_bytes(model: &ModelSpec, dtype: Dtype) -> Result<u64, VllmMemoryError> {
    let h = &model.hparams;
    let Some(max_pos) = h.context_length else {
        return Ok(0);
    };
    let rope = h.rope.clone().unwrap_or_default();
    let head = h.key_length.unwrap_or(0);
    let rotary_dim = rope.dimension_count.unwrap_or(head);
    if rotary_dim == 0 {
        return Ok(0);
    }
    let factor = rope.scaling_factor.unwrap_or(1.0);
    let positions = match rope.scaling_type.as_deref() {
        Some("yarn" | "deepseek_yarn") => {
            let orig = rope.original_context_length.unwrap_or(max_pos);
            (orig as f64 * factor) as u64
        }
        Some("linear") => (max_pos as f64 * factor) as u64,
        _ => max_pos,
    };
    let caches = if h.sliding_window_layers.iter().any(|&b| b)
        && h.sliding_window_layers.iter().any(|&b| !b)
        && model.architecture.starts_with("gemma3")
    {
        2
    } else {
        1
    };
    positions
        .checked_mul(rotary_dim)
        .and_then(|v| v.checked_mul(dtype.bytes()))
        .and_then(|v| v.checked_mul(caches))
        .ok_or(VllmMemoryError::Overflow("rope cache bytes overflow"))
}

/// MLA's `W_UK_T` and `W_UV`: per layer `kv_lora_rank × heads_per_rank × (qk_nope + v_head)` elements in the
/// activation dtype, beside `kv_b_proj` which vLLM keeps for prefill.
fn mla_decompressed_bytes(
    model: &ModelSpec,
    tp: u64,
    dtype: Dtype,
    trunk_end: Option<u64>,
) -> Result<u64, VllmMemoryError> {
    let h = &model.hparams;
    let Some(rank) = h.kv_lora_rank else {
        return Ok(0);
    };
    let layers = model
        .tensors
        .iter()
        .filter(|t| {
            t.name.contains("kv_b_proj")
                && t.role != Role::QuantState
                && !is_bias(&t.name)
                && !is_spec_layer(t, trunk_end)
        })
        .count() as u64;
    let heads = h.head_count.as_ref().map(|p| p.max()).unwrap_or(0);
    if !heads.is_multiple_of(tp) {
        return Err(VllmMemoryError::Split(format!(
            "{heads} attention heads do not divide over tensor parallel {tp}"
        )));
    }
    let rope = h.rope.as_ref().and_then(|r| r.dimension_count).unwrap_or(0);
    let nope = h.key_length.unwrap_or(0).saturating_sub(rope);
    let v = h.value_length.unwrap_or(0);
    layers
        .checked_mul(rank)
        .and_then(|x| x.checked_mul(heads / tp))
        .and_then(|x| x.checked_mul(nope.checked_add(v)?))
        .and_then(|x| x.checked_mul(dtype.bytes()))
        .ok_or(VllmMemoryError::Overflow(
            "MLA decompressed weight bytes overflow",
        ))
}
