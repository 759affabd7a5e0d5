//! Format-independent assembly of a [`ModelSpec`]: tensor roles from names, per-layer totals, quantization mix,
//! layer kinds derived from the tensors, and the fingerprint.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use super::{
    Format, Hparams, LayerSummary, MetaValue, ModelFile, ModelSpec, PerLayer, QuantShare, Role,
    TensorInfo,
};

/// Role and block index of a tensor from its name. Understands llama.cpp's GGUF names (`blk.N.attn_q.weight`)
/// and Hugging Face names (`model.layers.N.self_attn.q_proj.weight`).
pub fn classify_tensor(name: &str) -> (Role, Option<u32>) {
    let segments: Vec<&str> = name.split('.').collect();
    let layer = layer_index(&segments);
    let lower = name.to_ascii_lowercase();
    let leaf = segments
        .iter()
        .rev()
        .find(|s| !matches!(**s, "weight" | "bias" | "scale" | "qweight"))
        .copied()
        .unwrap_or("");
    (role_of(&lower, &segments, leaf, layer.is_some()), layer)
}

fn layer_index(segments: &[&str]) -> Option<u32> {
    let mut iter = segments.iter().peekable();
    while let Some(seg) = iter.next() {
        if matches!(*seg, "blk" | "layers" | "h" | "layer" | "blocks" | "block")
            && let Some(next) = iter.peek()
            && let Ok(n) = next.parse::<u32>()
        {
            return Some(n);
        }
    }
    None
}

fn is_quant_state(lower: &str) -> bool {
    const SUFFIXES: &[&str] = &[
        ".qzeros",
        ".scales",
        ".g_idx",
        ".weight_scale",
        ".weight_scale_inv",
        ".input_scale",
        ".output_scale",
        ".k_scale",
        ".v_scale",
        ".weight_zero_point",
        ".weight_g_idx",
        ".weight_shape",
        ".absmax",
        ".quant_map",
        ".nested_absmax",
        ".nested_quant_map",
        ".scb",
        ".weight_format",
    ];
    // gpt-oss stores MXFP4 experts as `*_blocks` (the weights) and `*_scales` (their E8M0 scales).
    SUFFIXES.iter().any(|s| lower.ends_with(s))
        || lower.contains(".quant_state.")
        || lower.ends_with("_scales")
}

fn role_of(lower: &str, segments: &[&str], leaf: &str, in_layer: bool) -> Role {
    if is_quant_state(lower) {
        return Role::QuantState;
    }
    let has = |s: &str| segments.iter().any(|seg| seg.eq_ignore_ascii_case(s));
    let leaf_l = leaf.to_ascii_lowercase();
    if leaf_l.contains("norm") || leaf_l.starts_with("ln_") || leaf_l == "ln" {
        return Role::Norm;
    }
    if !in_layer {
        if leaf_l.contains("embd")
            || leaf_l.contains("embed")
            || matches!(leaf_l.as_str(), "wte" | "wpe" | "word_embeddings")
        {
            // `token_embd_norm` was caught as a norm above.
            return Role::Embedding;
        }
        if matches!(leaf_l.as_str(), "output" | "lm_head") || has("lm_head") {
            return Role::Output;
        }
        return Role::Other;
    }
    // GGUF names inside `blk.N.`.
    if leaf_l.starts_with("ffn_") {
        if leaf_l.starts_with("ffn_gate_inp") || leaf_l.starts_with("ffn_exp_probs") {
            return Role::Router;
        }
        if leaf_l.ends_with("_exps") {
            return Role::Expert;
        }
        return Role::Ffn;
    }
    if leaf_l.starts_with("attn_") {
        return Role::Attention;
    }
    if leaf_l.starts_with("ssm_")
        || leaf_l.starts_with("time_mix")
        || leaf_l.starts_with("channel_mix")
        || leaf_l.starts_with("shortconv")
        || has("shortconv")
    {
        return Role::Recurrent;
    }
    // Hugging Face names inside `layers.N.`.
    if has("experts") {
        return Role::Expert;
    }
    if has("shared_expert") || has("shared_experts") || has("shared_mlp") {
        return if leaf_l.contains("gate") && !leaf_l.contains("proj") {
            Role::Router
        } else {
            Role::Ffn
        };
    }
    if (has("block_sparse_moe") || has("mlp") || has("moe"))
        && matches!(
            leaf_l.as_str(),
            "gate" | "router" | "e_score_correction_bias"
        )
    {
        return Role::Router;
    }
    if has("router") {
        return Role::Router;
    }
    if has("mixer") || has("linear_attn") || has("mamba") || has("ssm") {
        return Role::Recurrent;
    }
    if has("self_attn") || has("attention") || has("attn") || has("cross_attn") {
        return Role::Attention;
    }
    if has("mlp") || has("feed_forward") || has("ffn") || has("block_sparse_moe") {
        return Role::Ffn;
    }
    Role::Other
}

/// Completes a [`ModelSpec`] from its tensors and hyper-parameters: per-layer totals, quantization mix, which
/// layers hold experts or recurrent state, tied embeddings, and the fingerprint.
#[allow(clippy::too_many_arguments)]
pub fn assemble(
    format: Format,
    gguf_version: Option<u32>,
    big_endian: bool,
    architecture: String,
    name: Option<String>,
    file_type: Option<(u32, Option<&'static str>)>,
    type_reading: Option<super::TypeReading>,
    mut hparams: Hparams,
    files: Vec<ModelFile>,
    tensors: Vec<TensorInfo>,
    metadata: BTreeMap<String, MetaValue>,
) -> ModelSpec {
    // Readers refuse a declared block count above MAX_BLOCKS; layer indices parsed from tensor names are
    // capped here too, so no name can size the per-layer tables (such tensors still count in the totals).
    let cap = super::MAX_BLOCKS;
    let max_layer = tensors
        .iter()
        .filter_map(|t| t.layer)
        .map(u64::from)
        .filter(|&l| l < cap)
        .max();
    let n_layers = hparams
        .block_count
        .unwrap_or(0)
        .max(max_layer.map_or(0, |l| l + 1))
        .min(cap) as usize;
    let mut layers: Vec<LayerSummary> = (0..n_layers)
        .map(|i| LayerSummary {
            index: i as u32,
            bytes: 0,
            parameters: 0,
            tensor_count: 0,
        })
        .collect();
    let mut expert_layers = vec![false; n_layers];
    let mut recurrent_layers = vec![false; n_layers];
    let mut mix: BTreeMap<super::Dtype, QuantShare> = BTreeMap::new();
    for t in &tensors {
        if let Some(l) = t.layer.map(|l| l as usize)
            && let Some(s) = layers.get_mut(l)
        {
            s.bytes += t.bytes;
            s.parameters += t.parameters;
            s.tensor_count += 1;
            match t.role {
                Role::Expert => expert_layers[l] = true,
                Role::Recurrent => recurrent_layers[l] = true,
                _ => {}
            }
        }
        let e = mix.entry(t.dtype).or_insert(QuantShare {
            dtype: t.dtype,
            tensor_count: 0,
            bytes: 0,
            parameters: 0,
        });
        e.tensor_count += 1;
        e.bytes += t.bytes;
        e.parameters += t.parameters;
    }
    if expert_layers.iter().any(|&b| b) {
        hparams.expert_layers = expert_layers;
    }
    if recurrent_layers.iter().any(|&b| b) {
        hparams.recurrent_layers = recurrent_layers;
    }
    hparams.tied_embeddings = !tensors.iter().any(|t| t.role == Role::Output)
        && tensors.iter().any(|t| t.role == Role::Embedding);
    let mut quant_mix: Vec<QuantShare> = mix.into_values().collect();
    quant_mix.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.dtype.cmp(&b.dtype)));
    let fingerprint = fingerprint(format, &architecture, &hparams, &metadata, &tensors);
    ModelSpec {
        format,
        gguf_version,
        big_endian,
        architecture,
        name,
        file_type: file_type.map(|f| f.0),
        file_type_name: file_type.and_then(|f| f.1),
        type_reading,
        hparams,
        files,
        tensors,
        layers,
        quant_mix,
        metadata,
        fingerprint,
    }
}

/// Gemma 2's sliding-window layout in both formats: every other layer, starting with a local (SWA) one
/// (llama.cpp `LLM_ARCH_GEMMA2`; transformers `Gemma2Config` alternates the same way).
pub(crate) const GEMMA2_SWA_PERIOD: u64 = 2;
/// Gemma 3's default sliding-window period: five local layers, then one global (llama.cpp
/// `set_swa_pattern(6)` for `LLM_ARCH_GEMMA3`; `Gemma3TextConfig.sliding_window_pattern` default).
pub(crate) const GEMMA3_SWA_PERIOD: u64 = 6;

/// Which of `n` layers use sliding-window attention when every `period`-th layer is global: layer `il` is
/// local unless `il % period == period - 1` (llama.cpp's `set_swa_pattern`, transformers'
/// `sliding_window_pattern`). `period` must be at least 1; each reader decides what 0 means.
pub(crate) fn swa_layers_with_period(n: u64, period: u64) -> Vec<bool> {
    debug_assert!(period > 0);
    (0..n).map(|il| il % period < period - 1).collect()
}

/// The most a hyper-parameter held in one of llama.cpp's `uint32_t` fields can be: the engine reads
/// `context_length`, `embedding_length`, the head counts and sizes, `feed_forward_length`, the expert sizes,
/// `attention.sliding_window`, the MLA ranks and the SSM dimensions into `uint32_t` members of `llama_hparams`
/// (src/llama-hparams.h L43-199) and refuses a key of any other GGUF type (src/llama-model-loader.cpp
/// `GKV::get_kv`), so a larger value describes no model the engine loads. vLLM and PyTorch read the same
/// config.json fields as Python ints, but no published model comes within 2^20 of this bound.
pub const MAX_HPARAM_U32: u64 = u32::MAX as u64;

/// The largest trained context: llama.cpp pads the context to 256 cells in `uint32_t` arithmetic
/// (`GGML_PAD(cparams.n_ctx, 256)`, src/llama-context.cpp L290; `-c 0` takes `n_ctx_train`), so a context above
/// the last multiple of 256 below 2^32 wraps to 0 and the engine fails with `n_ctx_seq == 0`.
pub const MAX_CONTEXT_LENGTH: u64 = (u32::MAX as u64) & !255;

/// The largest vocabulary: token ids are `llama_token`, an `int32_t` (include/llama.h), so ids stop at
/// 2^31 - 1.
pub const MAX_VOCAB_SIZE: u64 = i32::MAX as u64;

/// Routed experts per layer: `LLAMA_MAX_EXPERTS` (src/llama-hparams.h L12), asserted when the engine loads the
/// hyper-parameters (src/llama-model.cpp L1361).
pub const MAX_EXPERTS: u64 = 1024;

/// One hyper-parameter's allowed range and why.
struct Bound {
    /// The name after `{arch}.` in GGUF (the field of [`Hparams`] says which).
    key: &'static str,
    min: u64,
    max: u64,
    why: &'static str,
}

const U32_WHY: &str = "llama.cpp holds it in a uint32_t (llama-hparams.h)";

/// Checks every hyper-parameter that enters a size computation against its bound (see the constants above), so
/// the memory models multiply only values a runtime could hold. A violation is a defect of the model file,
/// naming the key as the file spells it (`{arch}.context_length` in GGUF; the normalized name for config.json).
pub(crate) fn check_hparams(
    format: Format,
    architecture: &str,
    hparams: &Hparams,
    metadata: &BTreeMap<String, MetaValue>,
) -> Result<(), super::Defect> {
    let key_name = |k: &str| match format {
        Format::Gguf => format!("{architecture}.{k}"),
        Format::Safetensors => format!("{k} (from config.json)"),
    };
    let check = |b: &Bound, v: u64, key: String| -> Result<(), super::Defect> {
        if v < b.min || v > b.max {
            return Err(super::Defect::HparamOutOfRange {
                key,
                value: v,
                min: b.min,
                max: b.max,
                why: b.why,
            });
        }
        Ok(())
    };
    let u32_bound = |key: &'static str| Bound {
        key,
        min: 0,
        max: MAX_HPARAM_U32,
        why: U32_WHY,
    };
    let context = Bound {
        key: "context_length",
        min: 1,
        max: MAX_CONTEXT_LENGTH,
        why: "a trained context of 0 cells holds no token, and llama.cpp pads the context to 256 cells in a uint32_t (llama-context.cpp L290)",
    };
    let vocab = Bound {
        key: "vocab_size",
        min: 1,
        max: MAX_VOCAB_SIZE,
        why: "token ids are int32_t (llama.h llama_token), and a model needs at least one token",
    };
    let experts = Bound {
        key: "expert_count",
        min: 0,
        max: MAX_EXPERTS,
        why: "llama.cpp's LLAMA_MAX_EXPERTS (llama-hparams.h L12)",
    };
    let embedding = Bound {
        key: "embedding_length",
        min: 1,
        max: MAX_HPARAM_U32,
        why: "every weight of the model is this wide: llama.cpp finds the tensors the wrong shape (llama-model-loader.cpp check_tensor_dims), vLLM would build layers of width 0, and neither holds it outside a uint32_t (llama-hparams.h)",
    };
    let h = hparams;
    let mut scalars: Vec<(Bound, Option<u64>)> = vec![
        (context, h.context_length),
        (embedding, h.embedding_length),
        (experts, h.expert_count),
        (u32_bound("expert_used_count"), h.expert_used_count),
        (u32_bound("expert_shared_count"), h.expert_shared_count),
        (
            u32_bound("expert_feed_forward_length"),
            h.expert_feed_forward_length,
        ),
        (u32_bound("attention.key_length"), h.key_length),
        (u32_bound("attention.value_length"), h.value_length),
        (u32_bound("attention.sliding_window"), h.sliding_window),
        (u32_bound("attention.kv_lora_rank"), h.kv_lora_rank),
        (u32_bound("attention.q_lora_rank"), h.q_lora_rank),
        (u32_bound("attention.key_length_mla"), h.key_length_mla),
        (u32_bound("attention.value_length_mla"), h.value_length_mla),
    ];
    if let Some(r) = &h.rope {
        scalars.push((u32_bound("rope.dimension_count"), r.dimension_count));
        scalars.push((
            u32_bound("rope.scaling.original_context_length"),
            r.original_context_length,
        ));
    }
    if let Some(s) = &h.ssm {
        scalars.push((u32_bound("ssm.conv_kernel"), s.conv_kernel));
        scalars.push((u32_bound("ssm.inner_size"), s.inner_size));
        scalars.push((u32_bound("ssm.state_size"), s.state_size));
        scalars.push((u32_bound("ssm.time_step_rank"), s.time_step_rank));
        scalars.push((u32_bound("ssm.group_count"), s.group_count));
    }
    for (b, v) in &scalars {
        if let Some(v) = *v {
            check(b, v, key_name(b.key))?;
        }
    }
    // The vocabulary size may come from the key, the token list or the embedding's rows (GGUF reader).
    if let Some(v) = h.vocab_size {
        let key = match format {
            Format::Gguf if metadata.contains_key(&format!("{architecture}.vocab_size")) => {
                key_name("vocab_size")
            }
            Format::Gguf if metadata.contains_key("tokenizer.ggml.tokens") => {
                "tokenizer.ggml.tokens (its length)".to_string()
            }
            Format::Gguf => "token_embd.weight (its rows)".to_string(),
            Format::Safetensors => key_name("vocab_size"),
        };
        check(&vocab, v, key)?;
    }
    let per_layer: [(&'static str, &Option<PerLayer>); 3] = [
        ("feed_forward_length", &h.feed_forward_length),
        ("attention.head_count", &h.head_count),
        ("attention.head_count_kv", &h.head_count_kv),
    ];
    for (k, v) in per_layer {
        if let Some(v) = v {
            check(&u32_bound(k), v.max(), key_name(k))?;
        }
    }
    // llama.cpp asserts that no layer routes to more experts than exist (llama-model.cpp L1362).
    if let (Some(used), Some(n)) = (h.expert_used_count, h.expert_count)
        && used > n
    {
        return Err(super::Defect::HparamOutOfRange {
            key: key_name("expert_used_count"),
            value: used,
            min: 0,
            max: n,
            why: "a token cannot be routed to more experts than the layer has (llama-model.cpp L1362)",
        });
    }
    Ok(())
}

/// Checks the attention heads of every layer that holds attention weights the way the engines would: a layer
/// with query/key/value tensors needs at least one query head, and its query heads must be a whole multiple of
/// its KV heads (each KV head serves a group of query heads). Layers without attention tensors (recurrent,
/// attention-free) may declare 0 heads, as llama.cpp's "non-transformer models do not have attention heads"
/// (llama-model.cpp `load_hparams`) allows; a layer with heads but 0 KV heads is left alone (DeciLM's
/// linear-attention layers). Runs after [`check_hparams`], on the tensors the reader found.
pub(crate) fn check_attention(
    format: Format,
    architecture: &str,
    hparams: &Hparams,
    tensors: &[TensorInfo],
) -> Result<(), super::Defect> {
    let key_name = |k: &str| match format {
        Format::Gguf => format!("{architecture}.{k}"),
        Format::Safetensors => format!("{k} (from config.json)"),
    };
    let mut layers: Vec<u32> = tensors
        .iter()
        .filter(|t| t.role == Role::Attention)
        .filter_map(|t| t.layer)
        .collect();
    layers.sort_unstable();
    layers.dedup();
    let Some(heads) = &hparams.head_count else {
        return Ok(());
    };
    for il in layers {
        let Some(n_head) = heads.get(il as usize) else {
            continue;
        };
        if n_head == 0 {
            return Err(super::Defect::HparamOutOfRange {
                key: key_name("attention.head_count"),
                value: 0,
                min: 1,
                max: MAX_HPARAM_U32,
                why: match format {
                    Format::Gguf => {
                        "a layer with attention weights needs a query head: llama.cpp sizes the layer's Q/K/V tensors by n_embd / n_head and refuses the file when they do not match (llama-model-loader.cpp check_tensor_dims: 'tensor has wrong shape')"
                    }
                    Format::Safetensors => {
                        "a layer with attention weights needs a query head: vLLM sizes the layer's Q projection by num_attention_heads, so the checkpoint's q_proj weight cannot load (its weight loaders assert the shapes agree), and without head_dim it divides hidden_size by 0 (vllm/model_executor/models/llama.py LlamaAttention)"
                    }
                },
            });
        }
        let n_head_kv = hparams
            .head_count_kv
            .as_ref()
            .and_then(|kv| kv.get(il as usize))
            .unwrap_or(n_head);
        if n_head_kv > 0 && n_head % n_head_kv != 0 {
            let engine = match format {
                Format::Gguf => {
                    "llama.cpp's attention asserts ggml_can_mul_mat(k, q) (ggml.c: query heads a multiple of KV heads) and aborts when the context is built"
                }
                Format::Safetensors => {
                    "vLLM's attention layer asserts num_heads % num_kv_heads == 0 (vllm/model_executor/layers/attention/attention.py) and fails at start-up"
                }
            };
            return Err(super::Defect::HparamInvalid {
                key: key_name("attention.head_count_kv"),
                value: n_head_kv,
                why: format!(
                    "layer {il}'s {n_head} query heads are not a whole multiple of its {n_head_kv} KV heads (each KV head serves a group of query heads): {engine}"
                ),
            });
        }
    }
    Ok(())
}

/// Metadata keys that describe the file layout, not the model, and so stay out of the fingerprint.
fn is_layout_key(key: &str) -> bool {
    key.starts_with("split.") || key == "general.alignment"
}

/// A SHA-256 over what identifies the model: format, architecture, hyper-parameters, metadata (GGUF; without the
/// split and alignment keys that only describe the layout, and with skipped arrays by type, count and size, not
/// position), and every tensor's name, type and shape, sorted by name. The same model therefore has the same
/// fingerprint whatever its path or shard layout. Tensor data is never read, so two files whose headers agree but
/// whose weights differ share a fingerprint; the header-only contract of the readers makes that the trade-off.
pub fn fingerprint(
    format: Format,
    architecture: &str,
    hparams: &Hparams,
    metadata: &BTreeMap<String, MetaValue>,
    tensors: &[TensorInfo],
) -> String {
    let mut h = Sha256::new();
    h.update(b"optimizer-fingerprint-v1\0");
    h.update(
        serde_json::to_string(&format)
            .unwrap_or_default()
            .as_bytes(),
    );
    h.update(b"\0");
    h.update(architecture.as_bytes());
    h.update(b"\0");
    h.update(
        serde_json::to_string(hparams)
            .unwrap_or_default()
            .as_bytes(),
    );
    h.update(b"\0");
    if format == Format::Gguf {
        for (k, v) in metadata.iter().filter(|(k, _)| !is_layout_key(k)) {
            h.update(k.as_bytes());
            h.update(b"=");
            hash_meta(&mut h, v);
            h.update(b"\0");
        }
    }
    let mut order: Vec<&TensorInfo> = tensors.iter().collect();
    order.sort_by(|a, b| a.name.cmp(&b.name));
    for t in order {
        h.update(t.name.as_bytes());
        h.update(b":");
        h.update(t.dtype.name().as_bytes());
        for d in &t.shape {
            h.update(b",");
            h.update(d.to_le_bytes());
        }
        h.update(b"\0");
    }
    let digest = h.finalize();
    let mut s = String::with_capacity(64);
    for b in digest.iter() {
        use std::fmt::Write;
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn hash_meta(h: &mut Sha256, v: &MetaValue) {
    match v {
        MetaValue::SkippedArray {
            element_type,
            count,
            bytes,
            ..
        } => {
            h.update(format!("skipped[{element_type};{count};{bytes}]").as_bytes());
        }
        MetaValue::SkippedString { len, .. } => {
            h.update(format!("skipped-string[{len}]").as_bytes())
        }
        MetaValue::Array(items) => {
            h.update(b"[");
            for i in items {
                hash_meta(h, i);
                h.update(b",");
            }
            h.update(b"]");
        }
        other => {
            h.update(other.type_name().as_bytes());
            h.update(b":");
            h.update(serde_json::to_string(other).unwrap_or_default().as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gguf_names_get_roles_and_layers() {
        let cases: &[(&str, Role, Option<u32>)] = &[
            ("token_embd.weight", Role::Embedding, None),
            ("token_embd_norm.weight", Role::Norm, None),
            ("output.weight", Role::Output, None),
            ("output_norm.weight", Role::Norm, None),
            ("blk.0.attn_q.weight", Role::Attention, Some(0)),
            ("blk.12.attn_q.bias", Role::Attention, Some(12)),
            ("blk.3.attn_kv_a_mqa.weight", Role::Attention, Some(3)),
            ("blk.3.attn_norm.weight", Role::Norm, Some(3)),
            ("blk.3.post_ffw_norm.weight", Role::Norm, Some(3)),
            ("blk.7.ffn_up.weight", Role::Ffn, Some(7)),
            ("blk.7.ffn_up_shexp.weight", Role::Ffn, Some(7)),
            ("blk.7.ffn_gate_exps.weight", Role::Expert, Some(7)),
            ("blk.7.ffn_gate_inp.weight", Role::Router, Some(7)),
            ("blk.1.ssm_conv1d.weight", Role::Recurrent, Some(1)),
            ("blk.1.ssm_a", Role::Recurrent, Some(1)),
            ("rope_freqs.weight", Role::Other, None),
        ];
        for (name, role, layer) in cases {
            assert_eq!(classify_tensor(name), (*role, *layer), "{name}");
        }
    }

    #[test]
    fn hugging_face_names_get_roles_and_layers() {
        let cases: &[(&str, Role, Option<u32>)] = &[
            ("model.embed_tokens.weight", Role::Embedding, None),
            ("lm_head.weight", Role::Output, None),
            ("model.norm.weight", Role::Norm, None),
            (
                "model.layers.4.self_attn.q_proj.weight",
                Role::Attention,
                Some(4),
            ),
            (
                "model.layers.4.self_attn.q_proj.qweight",
                Role::Attention,
                Some(4),
            ),
            (
                "model.layers.4.self_attn.q_proj.qzeros",
                Role::QuantState,
                Some(4),
            ),
            (
                "model.layers.4.self_attn.q_proj.weight_scale_inv",
                Role::QuantState,
                Some(4),
            ),
            (
                "model.layers.4.self_attn.k_norm.weight",
                Role::Norm,
                Some(4),
            ),
            ("model.layers.4.input_layernorm.weight", Role::Norm, Some(4)),
            ("model.layers.4.mlp.down_proj.weight", Role::Ffn, Some(4)),
            ("model.layers.4.mlp.gate.weight", Role::Router, Some(4)),
            (
                "model.layers.4.mlp.experts.17.down_proj.weight",
                Role::Expert,
                Some(4),
            ),
            (
                "model.layers.4.block_sparse_moe.gate.weight",
                Role::Router,
                Some(4),
            ),
            (
                "model.layers.4.block_sparse_moe.experts.3.w1.weight",
                Role::Expert,
                Some(4),
            ),
            (
                "model.layers.4.mlp.shared_expert.up_proj.weight",
                Role::Ffn,
                Some(4),
            ),
            (
                "model.layers.4.mlp.shared_expert_gate.weight",
                Role::Ffn,
                Some(4),
            ),
            (
                "backbone.layers.2.mixer.in_proj.weight",
                Role::Recurrent,
                Some(2),
            ),
            (
                "model.layers.3.mlp.experts.gate_up_proj_scales",
                Role::QuantState,
                Some(3),
            ),
            (
                "model.layers.3.mlp.experts.gate_up_proj_blocks",
                Role::Expert,
                Some(3),
            ),
            (
                "transformer.h.5.attn.c_attn.weight",
                Role::Attention,
                Some(5),
            ),
        ];
        for (name, role, layer) in cases {
            assert_eq!(classify_tensor(name), (*role, *layer), "{name}");
        }
    }
}
