//! Hugging Face `config.json`: maps the transformers configuration keys onto [`Hparams`] (named after the GGUF
//! keys) and `quantization_config` onto [`Quantization`].
//!
//! Responsibility: interpret one already-read, size-checked byte buffer; the caller ([`super::safetensors`])
//! reads the file. Touches nothing else.
//!
//! Rules, with the transformers class each one follows:
//! - Every key is looked up at the top level first and then, for multimodal configs (Gemma 3, Llava, Qwen2-VL,
//!   Mistral 3), in the nested `text_config`, so the language model's hyper-parameters are found either way.
//!   `null` counts as absent (transformers writes `"sliding_window": null`).
//! - A known key of the wrong type (a string layer count, a negative head count, …) is a
//!   [`Defect::Config`] naming the key; unknown keys are ignored.
//! - Sliding-window layers: `layer_types` (`"sliding_attention"` entries) wins; then `sliding_window_pattern` N
//!   (layer il is SWA iff `il % N < N - 1`, Gemma 3 / Cohere 2); then Qwen2's `use_sliding_window` with
//!   `max_window_layers` (layers ≥ it use SWA, `Qwen2Config` default 28); then Gemma 2's default (SWA on even
//!   layers) and Gemma 3's / Cohere 2's default periods; otherwise (Mistral, Phi-3) every layer. A window that
//!   no layer uses (Qwen2 with `use_sliding_window: false`) is reported as no window, as transformers does.

use std::path::Path;

use serde_json::{Map, Value};

use super::{
    Defect, GEMMA2_SWA_PERIOD, GEMMA3_SWA_PERIOD, Hparams, LinearBias, ModelError, PerLayer,
    Quantization, Rope, Ssm, swa_layers_with_period,
};

/// Size of `config.json`. Published configs are 1–10 KiB; the largest (vision-language models with label maps
/// and nested sub-configs) stay under 200 KiB. 4 MiB bounds the parsed JSON tree to a few tens of MiB.
pub(crate) const MAX_CONFIG_BYTES: u64 = 4 << 20;
/// Layers a config may declare: the crate-wide [`super::MAX_BLOCKS`].
pub(crate) const MAX_BLOCK_COUNT: u64 = super::MAX_BLOCKS;
/// `Qwen2Config.max_window_layers` default (transformers `configuration_qwen2.py`).
const QWEN2_DEFAULT_MAX_WINDOW_LAYERS: u64 = 28;
/// `Cohere2Config.sliding_window_pattern` default: three local layers, then one global.
const COHERE2_DEFAULT_SWA_PERIOD: u64 = 4;
/// Mamba's `time_step_rank: "auto"` means `ceil(hidden_size / 16)` (`MambaConfig`).
const MAMBA_AUTO_DT_RANK_DIVISOR: u64 = 16;
/// GPTQ, AWQ and compressed-tensors pack-quantized all default to 4-bit weights when the config omits `bits`.
pub(crate) const DEFAULT_PACKED_BITS: u64 = 4;
/// Bits of a quantized weight that any method in use stores: 1 (BitNet) to 8; 16 allows half-precision
/// "quantization" configs. Larger values are a broken config and would make packing arithmetic meaningless.
const MAX_QUANT_BITS: u64 = 16;

/// What `config.json` says about the model.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HfConfig {
    /// `model_type` (top level, else `text_config.model_type`).
    pub model_type: Option<String>,
    /// The first of `architectures` (`LlamaForCausalLM`).
    pub name: Option<String>,
    pub hparams: Hparams,
    /// `tie_word_embeddings`, when given. A cross-check only: the spec derives tied embeddings from the tensors.
    pub tie_word_embeddings: Option<bool>,
}

/// A message about a key, turned into a [`Defect::Config`] with the path by [`parse`].
type R<T> = Result<T, String>;

/// Parses `config.json` bytes. `path` is used for messages only.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<HfConfig, ModelError> {
    let root: Value = serde_json::from_slice(bytes).map_err(|e| {
        let defect = Defect::Config(format!("invalid JSON: {}", json_error_message(&e)));
        ModelError::at(path, (json_error_offset(bytes, &e), defect))
    })?;
    parse_value(&root).map_err(|msg| ModelError::model(path, Defect::Config(msg)))
}

fn parse_value(root: &Value) -> R<HfConfig> {
    let Value::Object(top) = root else {
        return Err(format!("must be a JSON object, found {}", describe(root)));
    };
    let text = match top.get("text_config") {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => Some(m),
        Some(v) => return Err(wrong("text_config", "an object", v)),
    };
    let c = Cfg { top, text };
    let model_type = c.str(&["model_type"])?;
    let name = match top.get("architectures") {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) => match items.first() {
            None => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(v) => return Err(wrong("architectures[0]", "a string", v)),
        },
        Some(v) => return Err(wrong("architectures", "an array of strings", v)),
    };
    let hparams = hparams(&c, model_type.as_deref().unwrap_or(""))?;
    Ok(HfConfig {
        model_type,
        name,
        hparams,
        tie_word_embeddings: c.bool(&["tie_word_embeddings"])?,
    })
}

fn hparams(c: &Cfg, model_type: &str) -> R<Hparams> {
    let is_mamba = matches!(model_type, "mamba" | "mamba2" | "falcon_mamba");
    let embedding_length = c.u64(&["hidden_size", "n_embd", "d_model"])?;
    let block_count = c.u64(&["num_hidden_layers", "n_layer", "num_layers", "n_layers"])?;
    if let Some(n) = block_count
        && n > MAX_BLOCK_COUNT
    {
        return Err(format!(
            "the layer count {n} exceeds the limit of {MAX_BLOCK_COUNT}"
        ));
    }
    let head_count = c.per_layer(&["num_attention_heads", "n_head", "n_heads"])?;
    let head_count_kv = kv_heads(c, head_count.as_ref())?;
    let (key_length, value_length) = head_sizes(c, embedding_length, head_count.as_ref())?;
    // Mamba's `intermediate_size` is the SSM inner size, not a feed-forward width.
    let feed_forward_length = if is_mamba {
        None
    } else {
        c.per_layer(&["intermediate_size", "n_inner", "ffn_dim"])?
    };
    let (sliding_window, sliding_window_layers) = sliding_window(c, model_type, block_count)?;
    Ok(Hparams {
        context_length: c.u64(&[
            "max_position_embeddings",
            "n_positions",
            "max_seq_len",
            "seq_length",
        ])?,
        embedding_length,
        block_count,
        vocab_size: c.u64(&["vocab_size"])?,
        feed_forward_length,
        head_count,
        head_count_kv,
        key_length,
        value_length,
        sliding_window,
        sliding_window_layers,
        expert_count: c.u64(&["num_local_experts", "num_experts", "n_routed_experts"])?,
        expert_used_count: c.u64(&["num_experts_per_tok"])?,
        expert_shared_count: c.u64(&["n_shared_experts"])?,
        expert_feed_forward_length: c.u64(&["moe_intermediate_size"])?,
        expert_layers: Vec::new(),
        recurrent_layers: Vec::new(),
        kv_lora_rank: c.u64(&["kv_lora_rank"])?,
        // The MLA switch is a GGUF convention (converted checkpoints); a config.json never sets it.
        key_length_mla: None,
        value_length_mla: None,
        q_lora_rank: c.u64(&["q_lora_rank"])?,
        // config.json's `num_hidden_layers` already leaves the MTP blocks out; only GGUF counts them in.
        nextn_predict_layers: None,
        kv_layers_from_start: None,
        key_length_swa: None,
        value_length_swa: None,
        rope: rope(c, key_length)?,
        ssm: ssm(c, is_mamba, embedding_length)?,
        tied_embeddings: false,
        torch_dtype: c.str(&["torch_dtype", "dtype"])?,
        quantization: quantization(c)?,
        linear_bias: LinearBias {
            // Either key truthy makes it true, as vLLM's llama.py reads them (`attention_bias or bias`, Python
            // truthiness: a non-empty string or a non-zero number builds the bias too).
            attention: match (c.truthy(&["attention_bias"]), c.truthy(&["bias"])) {
                (None, None) => None,
                (a, b) => Some(a == Some(true) || b == Some(true)),
            },
            qkv: c.truthy(&["qkv_bias"]),
            mlp: c.truthy(&["mlp_bias"]),
        },
    })
}

/// `num_key_value_heads` (Llama), `num_kv_heads` (Falcon's new decoder), ChatGLM's `multi_query_group_num`,
/// `multi_query: true` (Falcon-7B, GPT-BigCode: one KV head); otherwise as many as query heads.
fn kv_heads(c: &Cfg, head_count: Option<&PerLayer>) -> R<Option<PerLayer>> {
    if let Some(kv) = c.per_layer(&["num_key_value_heads", "num_kv_heads"])? {
        return Ok(Some(kv));
    }
    if c.bool(&["multi_query_attention"])? == Some(true)
        && let Some(g) = c.u64(&["multi_query_group_num"])?
    {
        return Ok(Some(PerLayer::Uniform(g)));
    }
    if c.bool(&["multi_query"])? == Some(true) {
        return Ok(Some(PerLayer::Uniform(1)));
    }
    Ok(head_count.cloned())
}

/// Per-head key and value sizes: MLA's `qk_nope_head_dim + qk_rope_head_dim` and `v_head_dim` (DeepSeek-V2/V3),
/// else `head_dim`, else `hidden_size / num_attention_heads`.
fn head_sizes(
    c: &Cfg,
    embedding_length: Option<u64>,
    head_count: Option<&PerLayer>,
) -> R<(Option<u64>, Option<u64>)> {
    let head_dim = c.u64(&["head_dim"])?;
    if let (Some(nope), Some(rope)) = (c.u64(&["qk_nope_head_dim"])?, c.u64(&["qk_rope_head_dim"])?)
    {
        let k = nope
            .checked_add(rope)
            .ok_or_else(|| "qk_nope_head_dim + qk_rope_head_dim overflows".to_string())?;
        return Ok((Some(k), c.u64(&["v_head_dim"])?.or(head_dim)));
    }
    if let Some(h) = head_dim {
        return Ok((Some(h), Some(h)));
    }
    match (embedding_length, head_count) {
        (Some(e), Some(PerLayer::Uniform(h))) if *h > 0 => Ok((Some(e / h), Some(e / h))),
        _ => Ok((None, None)),
    }
}

/// The window size and which layers use it (rules in the module doc).
fn sliding_window(
    c: &Cfg,
    model_type: &str,
    block_count: Option<u64>,
) -> R<(Option<u64>, Vec<bool>)> {
    let Some(window) = c.u64(&["sliding_window"])?.filter(|&w| w > 0) else {
        return Ok((None, Vec::new()));
    };
    let use_swa = c.bool(&["use_sliding_window"])?;
    if use_swa == Some(false) {
        return Ok((None, Vec::new()));
    }
    let Some(n) = block_count else {
        // The window is known but not the layers it applies to.
        return Ok((Some(window), Vec::new()));
    };
    let layers: Vec<bool> = if let Some((key, v)) = c.get("layer_types") {
        let Value::Array(items) = v else {
            return Err(wrong(&key, "an array of strings", v));
        };
        if items.len() as u64 != n {
            return Err(format!(
                "key {key:?} has {} entries but the model has {n} layers",
                items.len()
            ));
        }
        items
            .iter()
            .enumerate()
            .map(|(i, t)| match t {
                Value::String(s) => Ok(s == "sliding_attention"),
                other => Err(wrong(&format!("{key}[{i}]"), "a string", other)),
            })
            .collect::<R<_>>()?
    } else if let Some(period) = c.u64(&["sliding_window_pattern"])? {
        if period == 0 {
            return Err("key \"sliding_window_pattern\" must be at least 1, found 0".into());
        }
        swa_layers_with_period(n, period)
    } else if use_swa == Some(true) {
        let first = c
            .u64(&["max_window_layers"])?
            .unwrap_or(QWEN2_DEFAULT_MAX_WINDOW_LAYERS);
        (0..n).map(|il| il >= first).collect()
    } else {
        match model_type {
            "gemma2" => swa_layers_with_period(n, GEMMA2_SWA_PERIOD),
            "gemma3" | "gemma3_text" => swa_layers_with_period(n, GEMMA3_SWA_PERIOD),
            "cohere2" => swa_layers_with_period(n, COHERE2_DEFAULT_SWA_PERIOD),
            _ => vec![true; n as usize],
        }
    };
    if layers.iter().any(|&b| b) {
        Ok((Some(window), layers))
    } else {
        Ok((None, Vec::new()))
    }
}

/// `rope_theta` and `rope_scaling` (or transformers 5's `rope_parameters`, which holds both).
fn rope(c: &Cfg, head_dim: Option<u64>) -> R<Option<Rope>> {
    let params = c.obj("rope_parameters")?;
    let scaling = c.obj("rope_scaling")?;
    let mut freq_base = c.f64(&["rope_theta"])?;
    if freq_base.is_none()
        && let Some(p) = &params
    {
        freq_base = p.f64(&["rope_theta"])?;
    }
    let mut r = Rope {
        dimension_count: c.u64(&["rotary_dim", "qk_rope_head_dim"])?,
        freq_base,
        ..Rope::default()
    };
    if r.dimension_count.is_none()
        && let (Some(f), Some(h)) = (c.f64(&["partial_rotary_factor"])?, head_dim)
        && f > 0.0
        && f < 1.0
    {
        r.dimension_count = Some((h as f64 * f) as u64);
    }
    if let Some(s) = scaling.as_ref().or(params.as_ref()) {
        r.scaling_type = s.str(&["rope_type", "type"])?;
        r.scaling_factor = s.f64(&["factor"])?;
        r.original_context_length = s.u64(&["original_max_position_embeddings"])?;
    }
    Ok((r != Rope::default()).then_some(r))
}

/// State-space dimensions: Mamba (`conv_kernel`, `intermediate_size`, `state_size`, `time_step_rank`), the
/// original state-spaces names (`d_conv`, `d_inner`, `d_state`, `dt_rank`), Mamba-2's `n_groups`, and the
/// hybrid models' `mamba_*` keys (Jamba, Bamba).
fn ssm(c: &Cfg, is_mamba: bool, embedding_length: Option<u64>) -> R<Option<Ssm>> {
    let state_size = c.u64(&["state_size", "d_state", "mamba_d_state", "ssm_state_size"])?;
    if !is_mamba && state_size.is_none() {
        return Ok(None);
    }
    let mut inner_size = if is_mamba {
        c.u64(&["intermediate_size", "d_inner"])?
    } else {
        c.u64(&["d_inner", "mamba_d_inner"])?
    };
    if inner_size.is_none()
        && let (Some(x), Some(e)) = (c.u64(&["expand", "mamba_expand"])?, embedding_length)
    {
        inner_size = x.checked_mul(e);
    }
    let time_step_rank = match c.first(&["time_step_rank", "dt_rank", "mamba_dt_rank"]) {
        None => None,
        Some((_, Value::String(s))) if s == "auto" => {
            embedding_length.map(|e| e.div_ceil(MAMBA_AUTO_DT_RANK_DIVISOR))
        }
        Some((k, v)) => Some(as_u64(&k, v)?),
    };
    let s = Ssm {
        conv_kernel: c.u64(&["conv_kernel", "d_conv", "mamba_d_conv"])?,
        inner_size,
        state_size,
        time_step_rank,
        group_count: c.u64(&["n_groups", "mamba_n_groups"])?,
        shortconv_cache: None,
    };
    Ok((s != Ssm::default()).then_some(s))
}

/// `quantization_config` (or compressed-tensors' older `compression_config`).
fn quantization(c: &Cfg) -> R<Option<Quantization>> {
    let q = match c.obj("quantization_config")? {
        Some(q) => q,
        None => match c.obj("compression_config")? {
            Some(q) => q,
            None => return Ok(None),
        },
    };
    let load_4 = q.bool(&["load_in_4bit"])? == Some(true);
    let load_8 = q.bool(&["load_in_8bit"])? == Some(true);
    let method = match q.str(&["quant_method"])? {
        Some(m) => m,
        None if load_4 || load_8 => "bitsandbytes".into(),
        None => "unknown".into(),
    };
    let mut out = Quantization {
        bits: q.u64(&["bits", "weight_bits", "w_bit", "nbits"])?,
        group_size: q.i64(&["group_size", "q_group_size"])?,
        block_size: q.u64_list("weight_block_size")?,
        method,
        format: None,
    };
    match out.method.as_str() {
        "bitsandbytes" => {
            if load_4 {
                out.bits = Some(4);
                out.format = q.str(&["bnb_4bit_quant_type"])?;
            } else if load_8 {
                out.bits = Some(8);
            }
        }
        "fp8" | "fbgemm_fp8" => {
            out.bits.get_or_insert(8);
            out.format = q.str(&["fmt"])?;
        }
        "mxfp4" => {
            out.bits.get_or_insert(4);
        }
        "gptq" => {
            let bits = out.bits.unwrap_or(DEFAULT_PACKED_BITS);
            let sym = match q.bool(&["sym"])? {
                Some(false) => "asymmetric",
                _ => "symmetric",
            };
            let mut f = format!("int{bits} {sym}");
            if q.bool(&["desc_act"])? == Some(true) {
                f.push_str(", desc_act");
            }
            out.format = Some(f);
        }
        "awq" => {
            let mut parts = Vec::new();
            if let Some(v) = q.str(&["version"])? {
                parts.push(v);
            }
            if q.bool(&["zero_point"])? == Some(true) {
                parts.push("zero_point".into());
            }
            out.format = (!parts.is_empty()).then(|| parts.join(", "));
        }
        "compressed-tensors" => {
            out.format = q.str(&["format"])?;
            if let Some(groups) = q.obj("config_groups")?
                && let Some((key, first)) = groups.map.iter().next()
            {
                let prefix = format!("{}.{key}", groups.prefix);
                let Value::Object(group) = first else {
                    return Err(wrong(&prefix, "an object", first));
                };
                let group = Obj {
                    map: group,
                    prefix: prefix.clone(),
                };
                if let Some(w) = group.obj("weights")? {
                    out.bits = out.bits.or(w.u64(&["num_bits"])?);
                    out.group_size = out.group_size.or(w.i64(&["group_size"])?);
                    out.block_size = out.block_size.or(w.u64_list("block_structure")?);
                }
                if out.format.is_none() {
                    out.format = group.str(&["format"])?;
                }
            }
        }
        _ => {}
    }
    if let Some(b) = out.bits
        && (b == 0 || b > MAX_QUANT_BITS)
    {
        return Err(format!(
            "quantization_config bits {b} is outside 1..={MAX_QUANT_BITS}"
        ));
    }
    Ok(Some(out))
}

/// Typed lookups over something that maps keys to JSON values, reporting the key's full path on a type error.
trait Lookup {
    /// The value of `key` (absent or `null` → `None`) with the key's path for messages.
    fn get(&self, key: &str) -> Option<(String, &Value)>;

    fn first(&self, keys: &[&str]) -> Option<(String, &Value)> {
        keys.iter().find_map(|k| self.get(k))
    }
    fn u64(&self, keys: &[&str]) -> R<Option<u64>> {
        self.first(keys).map(|(k, v)| as_u64(&k, v)).transpose()
    }
    fn i64(&self, keys: &[&str]) -> R<Option<i64>> {
        self.first(keys)
            .map(|(k, v)| match v {
                Value::Number(n) => n.as_i64().ok_or_else(|| wrong(&k, "an integer", v)),
                _ => Err(wrong(&k, "an integer", v)),
            })
            .transpose()
    }
    fn f64(&self, keys: &[&str]) -> R<Option<f64>> {
        self.first(keys)
            .map(|(k, v)| match v {
                Value::Number(n) => n.as_f64().ok_or_else(|| wrong(&k, "a number", v)),
                _ => Err(wrong(&k, "a number", v)),
            })
            .transpose()
    }
    fn str(&self, keys: &[&str]) -> R<Option<String>> {
        self.first(keys)
            .map(|(k, v)| match v {
                Value::String(s) => Ok(s.clone()),
                _ => Err(wrong(&k, "a string", v)),
            })
            .transpose()
    }
    fn bool(&self, keys: &[&str]) -> R<Option<bool>> {
        self.first(keys)
            .map(|(k, v)| match v {
                Value::Bool(b) => Ok(*b),
                _ => Err(wrong(&k, "true or false", v)),
            })
            .transpose()
    }
    /// A boolean switch, `None` when absent or of another type: keys like `bias` mean other things in other
    /// families, and a switch only refines what is counted, so a non-boolean is no reason to refuse the model.
    /// The first present key's value as Python's `bool()` reads it (how vLLM's model files test config
    /// switches): null, false, 0, "" and empty lists or maps are false, anything else true.
    fn truthy(&self, keys: &[&str]) -> Option<bool> {
        self.first(keys).map(|(_, v)| match v {
            Value::Null => false,
            Value::Bool(b) => *b,
            Value::Number(n) => n.as_f64().is_some_and(|x| x != 0.0),
            Value::String(s) => !s.is_empty(),
            Value::Array(a) => !a.is_empty(),
            Value::Object(o) => !o.is_empty(),
        })
    }
    /// One value for every layer, or a per-layer list.
    fn per_layer(&self, keys: &[&str]) -> R<Option<PerLayer>> {
        self.first(keys)
            .map(|(k, v)| match v {
                Value::Array(items) => {
                    if items.len() as u64 > MAX_BLOCK_COUNT {
                        return Err(format!(
                            "key {k:?} lists {} layers, more than the limit of {MAX_BLOCK_COUNT}",
                            items.len()
                        ));
                    }
                    items
                        .iter()
                        .enumerate()
                        .map(|(i, x)| as_u64(&format!("{k}[{i}]"), x))
                        .collect::<R<Vec<u64>>>()
                        .map(|v| PerLayer::Layers(v).normalized())
                }
                _ => as_u64(&k, v).map(PerLayer::Uniform),
            })
            .transpose()
    }
    fn u64_list(&self, key: &str) -> R<Option<Vec<u64>>> {
        self.get(key)
            .map(|(k, v)| match v {
                Value::Array(items) => items
                    .iter()
                    .enumerate()
                    .map(|(i, x)| as_u64(&format!("{k}[{i}]"), x))
                    .collect(),
                _ => Err(wrong(&k, "an array of integers", v)),
            })
            .transpose()
    }
    fn obj(&self, key: &str) -> R<Option<Obj<'_>>> {
        match self.get(key) {
            None => Ok(None),
            Some((prefix, Value::Object(map))) => Ok(Some(Obj { map, prefix })),
            Some((k, v)) => Err(wrong(&k, "an object", v)),
        }
    }
}

/// The top level with the `text_config` fallback.
struct Cfg<'a> {
    top: &'a Map<String, Value>,
    text: Option<&'a Map<String, Value>>,
}

impl Lookup for Cfg<'_> {
    fn get(&self, key: &str) -> Option<(String, &Value)> {
        if let Some(v) = self.top.get(key).filter(|v| !v.is_null()) {
            return Some((key.to_string(), v));
        }
        let v = self.text?.get(key).filter(|v| !v.is_null())?;
        Some((format!("text_config.{key}"), v))
    }
}

/// A nested object (`quantization_config`, `rope_scaling`) and its key path.
struct Obj<'a> {
    map: &'a Map<String, Value>,
    prefix: String,
}

impl Lookup for Obj<'_> {
    fn get(&self, key: &str) -> Option<(String, &Value)> {
        let v = self.map.get(key).filter(|v| !v.is_null())?;
        Some((format!("{}.{key}", self.prefix), v))
    }
}

/// A non-negative integer; an integral float (`4096.0`, written by some converters) is accepted.
fn as_u64(key: &str, v: &Value) -> R<u64> {
    if let Value::Number(n) = v {
        if let Some(u) = n.as_u64() {
            return Ok(u);
        }
        // 2^64 as f64; every integral f64 below it converts exactly.
        const U64_LIMIT: f64 = 18_446_744_073_709_551_616.0;
        if let Some(f) = n.as_f64()
            && f >= 0.0
            && f.fract() == 0.0
            && f < U64_LIMIT
        {
            return Ok(f as u64);
        }
    }
    Err(wrong(key, "a non-negative integer", v))
}

/// Byte offset in `json` of a serde_json error, from its 1-based line and column (serde_json reports no byte
/// offset); the length of `json` when the position is past the end.
pub(crate) fn json_error_offset(json: &[u8], e: &serde_json::Error) -> u64 {
    let line_start = if e.line() <= 1 {
        0
    } else {
        json.iter()
            .enumerate()
            .filter(|&(_, &b)| b == b'\n')
            .nth(e.line() - 2)
            .map_or(json.len(), |(i, _)| i + 1)
    };
    line_start
        .saturating_add(e.column().saturating_sub(1))
        .min(json.len()) as u64
}

/// A serde_json error's message without its ` at line L column C` suffix (the caller reports a byte offset).
pub(crate) fn json_error_message(e: &serde_json::Error) -> String {
    let full = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    match full.strip_suffix(&suffix) {
        Some(m) => m.to_string(),
        None => full,
    }
}

fn wrong(key: &str, expected: &str, found: &Value) -> String {
    format!("key {key:?} must be {expected}, found {}", describe(found))
}

/// A short description of a JSON value for messages (strings cut to 40 characters).
fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("{b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => {
            let short: String = s.chars().take(40).collect();
            if short.len() < s.len() {
                format!("the string {short:?}…")
            } else {
                format!("the string {short:?}")
            }
        }
        Value::Array(a) => format!("an array of {} items", a.len()),
        Value::Object(_) => "an object".into(),
    }
}

#[cfg(test)]
mod tests;
