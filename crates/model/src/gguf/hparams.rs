//! GGUF metadata to [`Hparams`]: the `{arch}.*` keys llama.cpp reads, per-layer arrays kept per layer, the
//! vocabulary size falling back to the token list and then the embedding tensor, and which layers use
//! sliding-window attention (explicit pattern, period, or llama.cpp's per-architecture default).

use std::collections::BTreeMap;

use super::MAX_MATERIALIZED_ARRAY;
use crate::{
    GEMMA2_SWA_PERIOD, GEMMA3_SWA_PERIOD, Hparams, LinearBias, MetaValue, PerLayer, Rope, Ssm,
    TensorInfo, swa_layers_with_period,
};

fn per_layer(v: &MetaValue) -> Option<PerLayer> {
    match v {
        MetaValue::Array(items) => items
            .iter()
            .map(MetaValue::as_u64)
            .collect::<Option<Vec<u64>>>()
            .map(|v| PerLayer::Layers(v).normalized()),
        other => other.as_u64().map(PerLayer::Uniform),
    }
}

/// Hyper-parameters from `{arch}.*` keys, with the vocabulary size falling back to the token list's length and
/// then the embedding tensor's rows.
pub(super) fn hparams_from_metadata(
    arch: &str,
    m: &BTreeMap<String, MetaValue>,
    tensors: &[TensorInfo],
) -> Hparams {
    let key = |k: &str| m.get(&format!("{arch}.{k}"));
    let u = |k: &str| key(k).and_then(MetaValue::as_u64);
    let f = |k: &str| key(k).and_then(MetaValue::as_f64);
    let block_count = u("block_count");
    let vocab_size = u("vocab_size")
        .or_else(|| {
            m.get("tokenizer.ggml.tokens")
                .and_then(MetaValue::array_len)
        })
        .or_else(|| {
            tensors
                .iter()
                .find(|t| t.name == "token_embd.weight")
                .and_then(|t| t.shape.first().copied())
        });
    let sliding_window = u("attention.sliding_window");
    let sliding_window_layers = sliding_window_layers(arch, m, block_count, sliding_window);
    let rope = {
        let r = Rope {
            dimension_count: u("rope.dimension_count"),
            freq_base: f("rope.freq_base"),
            scaling_type: key("rope.scaling.type")
                .and_then(MetaValue::as_str)
                .map(str::to_string),
            scaling_factor: f("rope.scaling.factor"),
            original_context_length: u("rope.scaling.original_context_length"),
        };
        (r != Rope::default()).then_some(r)
    };
    let ssm = {
        let s = Ssm {
            conv_kernel: u("ssm.conv_kernel"),
            inner_size: u("ssm.inner_size"),
            state_size: u("ssm.state_size"),
            time_step_rank: u("ssm.time_step_rank"),
            group_count: u("ssm.group_count"),
        };
        (s != Ssm::default()).then_some(s)
    };
    Hparams {
        context_length: u("context_length"),
        embedding_length: u("embedding_length"),
        block_count,
        vocab_size,
        feed_forward_length: key("feed_forward_length").and_then(per_layer),
        head_count: key("attention.head_count").and_then(per_layer),
        head_count_kv: key("attention.head_count_kv").and_then(per_layer),
        key_length: u("attention.key_length"),
        value_length: u("attention.value_length"),
        sliding_window,
        sliding_window_layers,
        expert_count: u("expert_count"),
        expert_used_count: u("expert_used_count"),
        expert_shared_count: u("expert_shared_count"),
        expert_feed_forward_length: u("expert_feed_forward_length"),
        expert_layers: Vec::new(),
        recurrent_layers: Vec::new(),
        kv_lora_rank: u("attention.kv_lora_rank"),
        key_length_mla: u("attention.key_length_mla"),
        value_length_mla: u("attention.value_length_mla"),
        q_lora_rank: u("attention.q_lora_rank"),
        rope,
        ssm,
        tied_embeddings: false,
        torch_dtype: None,
        quantization: None,
        linear_bias: LinearBias::default(),
    }
}

/// Which layers use sliding-window attention. GGUF says it three ways: a per-layer bool array
/// `{arch}.attention.sliding_window_pattern` (gemma3n, newer converters), an integer period N meaning every N-th
/// layer is global (llama.cpp's `set_swa_pattern`: layer il is SWA unless `il % N == N - 1`), or nothing, in
/// which case llama.cpp's per-architecture default applies (Gemma 2: every other layer, starting with SWA).
fn sliding_window_layers(
    arch: &str,
    m: &BTreeMap<String, MetaValue>,
    block_count: Option<u64>,
    window: Option<u64>,
) -> Vec<bool> {
    let Some(n) = block_count else {
        return Vec::new();
    };
    if window.unwrap_or(0) == 0 {
        return Vec::new();
    }
    let n = usize::try_from(n)
        .unwrap_or(0)
        .min(MAX_MATERIALIZED_ARRAY as usize);
    match m.get(&format!("{arch}.attention.sliding_window_pattern")) {
        Some(MetaValue::Array(items)) => items
            .iter()
            .map(|v| v.as_bool().unwrap_or(v.as_u64().unwrap_or(0) != 0))
            .collect(),
        Some(v) if v.as_u64().is_some() => {
            let period = v.as_u64().unwrap_or(0);
            if period == 0 {
                vec![true; n]
            } else {
                swa_layers_with_period(n as u64, period)
            }
        }
        _ => match arch {
            "gemma2" => swa_layers_with_period(n as u64, GEMMA2_SWA_PERIOD),
            "gemma3" => swa_layers_with_period(n as u64, GEMMA3_SWA_PERIOD),
            _ => vec![true; n],
        },
    }
}
