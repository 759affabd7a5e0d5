//! GGUF metadata to [`Hparams`]: the `{arch}.*` keys llama.cpp reads, per-layer arrays kept per layer, the
//! vocabulary size falling back to the token list and then the embedding tensor, and which layers use
//! sliding-window attention (explicit pattern, period, or llama.cpp's per-architecture default).
//!
//! Windowed attention follows the pinned engine (llama.cpp 0c1e570 as vendored by llama-cpp-python 0.3.36):
//! every layer starts dense (`llama_model::load_hparams`, src/llama-model.cpp: `std::fill(is_swa_impl, 0)`), and
//! only an architecture's `load_arch_hparams` (src/models/<file>.cpp) turns a window on, through
//! `llama_model_base::load_swa_pattern` (a pattern array or integer key wins over the period below). Read so far:
//!
//! | arch (GGUF)    | src/models/        | on when                         | period | dense first | window          |
//! |----------------|--------------------|---------------------------------|--------|-------------|-----------------|
//! | `gemma2`       | gemma2.cpp         | always                          | 2      | no          | key, else 4096  |
//! | `gemma3`       | gemma3.cpp         | key present and > 0             | 6      | no          | key             |
//! | `gemma3n`      | gemma3n.cpp        | always                          | 5      | no          | key             |
//! | `gpt-oss`      | openai-moe.cpp     | always                          | 2      | no          | key             |
//! | `phi3`         | phi3.cpp           | never (`n_swa = 0`, pattern 1)  | -      | -           | none            |
//! | `llama4`       | llama4.cpp         | unless key present and 0        | 4      | no          | 8192 (chunked)  |
//! | `cohere2`      | cohere2.cpp        | always                          | 4      | no          | key             |
//! | `cohere2moe`   | cohere2moe.cpp     | always                          | 4      | yes         | key             |
//! | `olmo2`        | olmo2.cpp          | key present and > 0             | 4      | no          | key             |
//! | `exaone4`      | exaone4.cpp        | 64 layers                       | 4      | no          | key, else 4096  |
//! | `exaone-moe`   | exaone-moe.cpp     | always                          | 4      | no          | key             |
//! | `smallthinker` | smallthinker.cpp   | key present and > 0             | 4      | yes         | 4096 (forced)   |
//! | `afmoe`        | afmoe.cpp          | key > 0                         | 4      | no          | key             |
//! | `mellum`       | mellum.cpp         | key > 0                         | 4      | no          | key             |
//! | `plamo3`       | plamo3.cpp         | key present and > 0             | 8      | no          | key             |
//! | `laguna`       | laguna.cpp         | key > 0                         | 4      | yes         | key             |
//! | `muse-glimmer` | muse-glimmer.cpp   | always                          | 4      | no          | key             |
//!
//! Llama 4's chunked layers are carried as windowed layers with the chunk as the window: the engine sizes their
//! cache exactly as a sliding window's (`llama_kv_cache_iswa` constructor, src/llama-kv-cache-iswa.cpp:
//! `size_swa = GGML_PAD(min(size_base, n_swa * n_stream + n_ubatch), 256)` for any `swa_type`). Any other
//! architecture keeps this reader's earlier rule (a window key makes every layer windowed unless a pattern key
//! says otherwise); in the pinned engine an architecture whose file does not set `swa_type` has no windowed
//! layer, so that rule is only right where a converter writes no window key. The trade-off: unread rules are
//! not guessed.

use std::collections::BTreeMap;

use super::MAX_MATERIALIZED_ARRAY;
use crate::{
    GEMMA2_SWA_PERIOD, GEMMA3_SWA_PERIOD, Hparams, LinearBias, MetaValue, PerLayer, Rope, Ssm,
    TensorInfo,
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
    let (sliding_window, sliding_window_layers) =
        sliding_window(arch, m, block_count, u("attention.sliding_window"));
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
            shortconv_cache: u("shortconv.l_cache"),
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
        nextn_predict_layers: nextn_predict_layers(&u, block_count),
        kv_layers_from_start: kv_layers_from_start(arch, &u, block_count),
        key_length_swa: u("attention.key_length_swa"),
        value_length_swa: u("attention.value_length_swa"),
        rope,
        ssm,
        tied_embeddings: false,
        torch_dtype: None,
        quantization: None,
        linear_bias: LinearBias::default(),
    }
}

/// How an architecture's `load_arch_hparams` (pinned llama.cpp, `src/models/<arch>.cpp`) switches windowed
/// attention on: the engine starts every layer dense (`llama_model::load_hparams` in src/llama-model.cpp fills
/// `is_swa_impl` with 0) and only the architecture's own code sets `swa_type` and a pattern.
#[derive(Debug, Clone, Copy)]
enum SwaGate {
    /// Unconditionally `swa_type = LLAMA_SWA_TYPE_STANDARD`.
    Always,
    /// `found_swa && n_swa > 0`: on when the file's `attention.sliding_window` is present and non-zero.
    IfWindow,
    /// llama4: `found_swa && n_swa == 0` switches it off, anything else is `LLAMA_SWA_TYPE_CHUNKED`.
    UnlessWindowZero,
    /// exaone4: `if (hparams.n_layer() == 64)`.
    AtBlockCount(u64),
    /// phi3: a window in the file is cleared (`n_swa = 0; set_swa_pattern(1)`, every layer dense).
    Never,
}

/// One architecture's windowed-attention rule, read from the pinned engine (table in the module doc).
#[derive(Debug, Clone, Copy)]
struct SwaRule {
    arch: &'static str,
    gate: SwaGate,
    /// The period `load_swa_pattern(ml, period, dense_first)` falls back to when the file has no pattern key.
    period: u64,
    /// `dense_first`: layer il is full iff `il % period == 0`; otherwise iff `il % period == period - 1`.
    dense_first: bool,
    /// `hparams.n_swa` assigned before the key is read: the window of a file without the key.
    default_window: Option<u64>,
    /// `hparams.n_swa` assigned after the key is read: the window whatever the file says.
    forced_window: Option<u64>,
}

const fn rule(arch: &'static str, gate: SwaGate, period: u64, dense_first: bool) -> SwaRule {
    SwaRule {
        arch,
        gate,
        period,
        dense_first,
        default_window: None,
        forced_window: None,
    }
}

/// Llama 4's attention chunk: `hparams.n_swa = 8192` under `LLAMA_SWA_TYPE_CHUNKED`
/// (src/models/llama4.cpp `llama_model_llama4::load_arch_hparams`).
pub(crate) const LLAMA4_ATTN_CHUNK: u64 = 8192;

/// The architectures whose windowed-attention rule was read (see the module doc for the citations).
const SWA_RULES: &[SwaRule] = &[
    SwaRule {
        default_window: Some(4096),
        ..rule("gemma2", SwaGate::Always, GEMMA2_SWA_PERIOD, false)
    },
    rule("gemma3", SwaGate::IfWindow, GEMMA3_SWA_PERIOD, false),
    rule("gemma3n", SwaGate::Always, 5, false),
    rule("gpt-oss", SwaGate::Always, 2, false),
    rule("phi3", SwaGate::Never, 1, false),
    SwaRule {
        forced_window: Some(LLAMA4_ATTN_CHUNK),
        ..rule("llama4", SwaGate::UnlessWindowZero, 4, false)
    },
    rule("cohere2", SwaGate::Always, 4, false),
    rule("cohere2moe", SwaGate::Always, 4, true),
    rule("olmo2", SwaGate::IfWindow, 4, false),
    SwaRule {
        default_window: Some(4096),
        ..rule("exaone4", SwaGate::AtBlockCount(64), 4, false)
    },
    rule("exaone-moe", SwaGate::Always, 4, false),
    SwaRule {
        forced_window: Some(4096),
        ..rule("smallthinker", SwaGate::IfWindow, 4, true)
    },
    rule("afmoe", SwaGate::IfWindow, 4, false),
    rule("mellum", SwaGate::IfWindow, 4, false),
    rule("plamo3", SwaGate::IfWindow, 8, false),
    rule("laguna", SwaGate::IfWindow, 4, true),
    rule("muse-glimmer", SwaGate::Always, 4, false),
];

/// The window the engine applies and which layers use it (chunked layers included). For an architecture in
/// [`SWA_RULES`] the engine's own rule; for any other, the file's window on every layer unless a pattern key
/// says otherwise (this module's behaviour before the rules were read). The window is the file's key where no
/// layer uses one, so its bound is still checked.
fn sliding_window(
    arch: &str,
    m: &BTreeMap<String, MetaValue>,
    block_count: Option<u64>,
    file_window: Option<u64>,
) -> (Option<u64>, Vec<bool>) {
    let Some(n) = block_count else {
        return (file_window, Vec::new());
    };
    let n = n.min(MAX_MATERIALIZED_ARRAY);
    let Some(r) = SWA_RULES.iter().find(|r| r.arch == arch) else {
        if file_window.unwrap_or(0) == 0 {
            return (file_window, Vec::new());
        }
        return (file_window, swa_pattern(arch, m, n, 0, false));
    };
    let on = match r.gate {
        SwaGate::Always => true,
        SwaGate::IfWindow => file_window.is_some_and(|w| w > 0),
        SwaGate::UnlessWindowZero => file_window != Some(0),
        SwaGate::AtBlockCount(c) => n == c,
        SwaGate::Never => false,
    };
    let window = r.forced_window.or(file_window).or(r.default_window);
    match window {
        Some(w) if on && w > 0 => {
            let layers = swa_pattern(arch, m, n, r.period, r.dense_first);
            if layers.iter().any(|&swa| swa) {
                (Some(w), layers)
            } else {
                (file_window, Vec::new())
            }
        }
        _ => (file_window, Vec::new()),
    }
}

/// `llama_model_base::load_swa_pattern` (src/llama-model.cpp): a per-layer bool array
/// `{arch}.attention.sliding_window_pattern` wins; else an integer under the same key replaces `period`; then
/// `llama_hparams::set_swa_pattern(period, dense_first)` (src/llama-hparams.cpp), where period 0 makes every
/// layer SWA.
fn swa_pattern(
    arch: &str,
    m: &BTreeMap<String, MetaValue>,
    n: u64,
    period: u64,
    dense_first: bool,
) -> Vec<bool> {
    let period = match m.get(&format!("{arch}.attention.sliding_window_pattern")) {
        Some(MetaValue::Array(items)) => {
            return items
                .iter()
                .map(|v| v.as_bool().unwrap_or(v.as_u64().unwrap_or(0) != 0))
                .collect();
        }
        Some(v) => v.as_u64().unwrap_or(period),
        None => period,
    };
    (0..n)
        .map(|il| match period {
            0 => true,
            p if dense_first => il % p != 0,
            p => il % p < p - 1,
        })
        .collect()
}

/// `{arch}.nextn_predict_layers`, read for every architecture as llama.cpp does (src/llama-model.cpp
/// `llama_model::load_hparams`: `ml.get_key(LLM_KV_NEXTN_PREDICT_LAYERS, hparams.n_layer_nextn, false)`), kept only
/// when it is non-zero and at most the block count (the engine asserts `n_layer_nextn <= n_layer_all` and refuses
/// the file otherwise; here a larger value is dropped rather than trusted).
fn nextn_predict_layers(u: &dyn Fn(&str) -> Option<u64>, block_count: Option<u64>) -> Option<u64> {
    u("nextn_predict_layers").filter(|&n| n > 0 && block_count.is_some_and(|b| n <= b))
}

/// `hparams.n_layer_kv_from_start`: Gemma-3n's constant 20 (src/models/gemma3n.cpp `load_arch_hparams`) and
/// Gemma 4's `n_layer_all - attention.shared_kv_layers` (src/models/gemma4.cpp, the key optional, default 0);
/// every other architecture leaves it at -1 (every block has its own cache, src/llama-hparams.cpp `has_kv`).
/// The blocks from there on reuse an earlier block's cache (src/llama-model.cpp `create_memory`, the `reuse`
/// callback), so no cache is allocated for them.
fn kv_layers_from_start(
    arch: &str,
    u: &dyn Fn(&str) -> Option<u64>,
    block_count: Option<u64>,
) -> Option<u64> {
    match arch {
        "gemma3n" => Some(GEMMA3N_KV_LAYERS_FROM_START),
        "gemma4" => {
            block_count.map(|n| n.saturating_sub(u("attention.shared_kv_layers").unwrap_or(0)))
        }
        _ => None,
    }
}

/// src/models/gemma3n.cpp `load_arch_hparams`: `hparams.n_layer_kv_from_start = 20`.
const GEMMA3N_KV_LAYERS_FROM_START: u64 = 20;
