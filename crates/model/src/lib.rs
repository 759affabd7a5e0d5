//! Model readers: GGUF (v2/v3, either byte order, split shards) and safetensors (single file or sharded index,
//! with `config.json`), normalized into one [`ModelSpec`].
//!
//! Responsibility: know the model exactly, from its headers. Tensor data is never read; every byte figure is
//! computed from the declared shapes and types and checked against the file's own offsets. May touch: the model
//! file(s) only, with bounded reads.
//!
//! Shapes in a [`ModelSpec`] are row-major (outermost dimension first), the way safetensors, NumPy and PyTorch
//! write them; GGUF stores ggml's `ne[]` innermost-first, so the GGUF reader reverses it. One convention for both
//! formats keeps the memory model free of format cases.

pub mod error;
pub(crate) mod ggml_type;
pub mod gguf;
pub mod hf_config;
pub mod safetensors;
mod source;
mod spec;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

pub use error::{Defect, ModelError};
pub use ggml_type::{GgmlType, TypeReading};
pub(crate) use spec::check_hparams;
pub(crate) use spec::{GEMMA2_SWA_PERIOD, GEMMA3_SWA_PERIOD, swa_layers_with_period};
pub use spec::{
    MAX_CONTEXT_LENGTH, MAX_EXPERTS, MAX_HPARAM_U32, MAX_VOCAB_SIZE, assemble, classify_tensor,
    fingerprint,
};

/// Transformer blocks a model may declare. The deepest published models have 126 (Llama-3.1-405B); 4,096
/// bounds every per-layer table the readers build from a declared count (a hostile `block_count` of 2^64
/// would otherwise size one), and matches the per-layer arrays GGUF metadata may materialize.
pub const MAX_BLOCKS: u64 = 4_096;

/// The on-disk format a model was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Gguf,
    Safetensors,
}

/// The storage type of one tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dtype {
    Ggml(GgmlType),
    Safetensors(safetensors::StDtype),
}

impl Dtype {
    /// The name as the format's own tools print it (`Q4_K`, `BF16`, `F8_E4M3`).
    pub fn name(self) -> &'static str {
        match self {
            Dtype::Ggml(t) => t.name(),
            Dtype::Safetensors(t) => t.name(),
        }
    }
}

impl Serialize for Dtype {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// What a tensor does in the network, derived from its name (llama.cpp's GGUF names or Hugging Face names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Token (and position/type) embeddings: kept on the host by llama.cpp.
    Embedding,
    /// The output projection (LM head) and its norm's sibling biases.
    Output,
    /// Normalization weights and biases.
    Norm,
    /// Attention projections (Q, K, V, O, fused QKV, MLA down/up projections), their biases and attention sinks.
    Attention,
    /// Dense feed-forward weights (including shared experts).
    Ffn,
    /// Routed expert weights (one tensor for all experts in GGUF, one per expert in safetensors).
    Expert,
    /// The MoE router (gate input) and its bias.
    Router,
    /// Recurrent / state-space layer weights (Mamba, RWKV, hybrid models).
    Recurrent,
    /// Quantization state beside packed weights (GPTQ/AWQ zeros, scales, group indices; FP8 scales).
    QuantState,
    /// Anything not recognised (vision towers, positional tables, custom heads).
    Other,
}

/// One tensor, exactly as the file declares it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TensorInfo {
    pub name: String,
    /// Row-major shape, outermost dimension first.
    pub shape: Vec<u64>,
    pub dtype: Dtype,
    /// Exact bytes of the tensor's data in the file.
    pub bytes: u64,
    /// Elements stored (the product of the shape).
    pub elements: u64,
    /// Logical weights the tensor encodes: `elements` unless the weights are packed (GPTQ/AWQ int4 in I32 holds 8
    /// weights per element); 0 for quantization state, which holds no weights.
    pub parameters: u64,
    pub role: Role,
    /// Transformer block index, for tensors inside a block.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub layer: Option<u32>,
    /// How packed weights are encoded, when the storage dtype does not say it (e.g. `gptq int4 in I32`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub packing: Option<String>,
    /// Index of the file (shard) holding the tensor, in [`ModelSpec::files`].
    pub file: u32,
    /// Byte offset of the tensor's data within that file.
    pub offset: u64,
}

/// A value of GGUF metadata. Large arrays and strings are not materialized: their element count and byte span
/// are recorded instead, so a 128k-token vocabulary costs no allocation per token.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    U64(u64),
    I64(i64),
    F64(f64),
    Array(Vec<MetaValue>),
    /// An array left in the file: element type name, element count, and the span `[offset, offset + bytes)`.
    SkippedArray {
        element_type: &'static str,
        count: u64,
        offset: u64,
        bytes: u64,
    },
    /// A string longer than the inline limit, left in the file.
    SkippedString {
        len: u64,
        offset: u64,
    },
}

impl MetaValue {
    /// The value as an unsigned integer, when it is a non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            MetaValue::U8(v) => Some(v.into()),
            MetaValue::U16(v) => Some(v.into()),
            MetaValue::U32(v) => Some(v.into()),
            MetaValue::U64(v) => Some(v),
            MetaValue::I8(v) => u64::try_from(v).ok(),
            MetaValue::I16(v) => u64::try_from(v).ok(),
            MetaValue::I32(v) => u64::try_from(v).ok(),
            MetaValue::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    pub(crate) fn as_f64(&self) -> Option<f64> {
        match *self {
            MetaValue::F32(v) => Some(v.into()),
            MetaValue::F64(v) => Some(v),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetaValue::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            MetaValue::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// Element count of an array, materialized or skipped.
    pub fn array_len(&self) -> Option<u64> {
        match self {
            MetaValue::Array(v) => Some(v.len() as u64),
            MetaValue::SkippedArray { count, .. } => Some(*count),
            _ => None,
        }
    }

    /// A short type name for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            MetaValue::U8(_) => "UINT8",
            MetaValue::I8(_) => "INT8",
            MetaValue::U16(_) => "UINT16",
            MetaValue::I16(_) => "INT16",
            MetaValue::U32(_) => "UINT32",
            MetaValue::I32(_) => "INT32",
            MetaValue::F32(_) => "FLOAT32",
            MetaValue::Bool(_) => "BOOL",
            MetaValue::String(_) | MetaValue::SkippedString { .. } => "STRING",
            MetaValue::U64(_) => "UINT64",
            MetaValue::I64(_) => "INT64",
            MetaValue::F64(_) => "FLOAT64",
            MetaValue::Array(_) | MetaValue::SkippedArray { .. } => "ARRAY",
        }
    }
}

impl Serialize for MetaValue {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            MetaValue::U8(v) => s.serialize_u8(*v),
            MetaValue::I8(v) => s.serialize_i8(*v),
            MetaValue::U16(v) => s.serialize_u16(*v),
            MetaValue::I16(v) => s.serialize_i16(*v),
            MetaValue::U32(v) => s.serialize_u32(*v),
            MetaValue::I32(v) => s.serialize_i32(*v),
            MetaValue::F32(v) => s.serialize_f32(*v),
            MetaValue::Bool(v) => s.serialize_bool(*v),
            MetaValue::String(v) => s.serialize_str(v),
            MetaValue::U64(v) => s.serialize_u64(*v),
            MetaValue::I64(v) => s.serialize_i64(*v),
            MetaValue::F64(v) => s.serialize_f64(*v),
            MetaValue::Array(v) => v.serialize(s),
            MetaValue::SkippedArray {
                element_type,
                count,
                offset,
                bytes,
            } => {
                let mut m = s.serialize_map(Some(4))?;
                m.serialize_entry("array_count", count)?;
                m.serialize_entry("element_type", element_type)?;
                m.serialize_entry("offset", offset)?;
                m.serialize_entry("bytes", bytes)?;
                m.end()
            }
            MetaValue::SkippedString { len, offset } => {
                let mut m = s.serialize_map(Some(2))?;
                m.serialize_entry("string_bytes", len)?;
                m.serialize_entry("offset", offset)?;
                m.end()
            }
        }
    }
}

/// A hyper-parameter that is either one value for every layer or one value per layer (GGUF allows both).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum PerLayer {
    Uniform(u64),
    Layers(Vec<u64>),
}

impl PerLayer {
    /// The value for `layer`; `None` when a per-layer array is shorter than the layer index.
    pub fn get(&self, layer: usize) -> Option<u64> {
        match self {
            PerLayer::Uniform(v) => Some(*v),
            PerLayer::Layers(v) => v.get(layer).copied(),
        }
    }

    /// The largest value over all layers.
    pub fn max(&self) -> u64 {
        match self {
            PerLayer::Uniform(v) => *v,
            PerLayer::Layers(v) => v.iter().copied().max().unwrap_or(0),
        }
    }

    /// Collapses an array whose entries are all equal into a uniform value.
    pub(crate) fn normalized(self) -> Self {
        match self {
            PerLayer::Layers(v) if !v.is_empty() && v.iter().all(|&x| x == v[0]) => {
                PerLayer::Uniform(v[0])
            }
            other => other,
        }
    }
}

/// Rotary position embedding settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Rope {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dimension_count: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub freq_base: Option<f64>,
    /// `linear`, `yarn`, `llama3`, `longrope`, `dynamic`, … as the file names it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scaling_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scaling_factor: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub original_context_length: Option<u64>,
}

/// State-space (Mamba-style) dimensions for recurrent layers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Ssm {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conv_kernel: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inner_size: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_size: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_step_rank: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_count: Option<u64>,
    /// LFM2's short-convolution length (`{arch}.shortconv.l_cache`): its recurrent layers keep `l_cache - 1`
    /// past rows of width `n_embd` and no SSM state (src/llama-hparams.cpp `n_embd_r`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shortconv_cache: Option<u64>,
}

/// Whether config.json says the attention and MLP projections carry a bias: `attention_bias` or `bias`,
/// `qkv_bias`, `mlp_bias`, each `None` when the key is absent, else its Python truthiness. Runtimes that build the layers
/// from the config (vLLM) read these to tell a real bias from a stored tensor they never load.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LinearBias {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attention: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qkv: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mlp: Option<bool>,
}

/// Weight quantization declared by the checkpoint (safetensors `quantization_config`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Quantization {
    /// `gptq`, `awq`, `bitsandbytes`, `fp8`, `compressed-tensors`, …
    pub method: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bits: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_size: Option<i64>,
    /// Format detail: `e4m3`, `nf4`, `int4 symmetric`, a compressed-tensors format name, …
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block_size: Option<Vec<u64>>,
}

/// Architecture hyper-parameters, named after the GGUF keys (`{arch}.embedding_length`, …) whatever the format.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Hparams {
    pub context_length: Option<u64>,
    pub embedding_length: Option<u64>,
    pub block_count: Option<u64>,
    pub vocab_size: Option<u64>,
    pub feed_forward_length: Option<PerLayer>,
    pub head_count: Option<PerLayer>,
    pub head_count_kv: Option<PerLayer>,
    /// Per-head key size (`attention.key_length`); defaults to embedding_length / head_count when absent.
    pub key_length: Option<u64>,
    pub value_length: Option<u64>,
    /// The attention window the engine applies (its `n_swa`: the file's key, or the architecture's default or
    /// forced value, Llama 4's 8192-token chunk included); the file's key where no layer uses a window.
    pub sliding_window: Option<u64>,
    /// Per layer: whether the layer uses sliding-window (or chunked) attention. Empty when no layer does.
    pub sliding_window_layers: Vec<bool>,
    pub expert_count: Option<u64>,
    pub expert_used_count: Option<u64>,
    pub expert_shared_count: Option<u64>,
    pub expert_feed_forward_length: Option<u64>,
    /// Per layer: whether the layer holds routed experts (derived from the tensors). Empty for dense models.
    pub expert_layers: Vec<bool>,
    /// Per layer: whether the layer is recurrent (SSM/RWKV) rather than attention (derived from the tensors).
    pub recurrent_layers: Vec<bool>,
    /// Multi-head latent attention (DeepSeek-style) ranks.
    pub kv_lora_rank: Option<u64>,
    /// Per-head K and V sizes after MLA decompression (`attention.key_length_mla` / `value_length_mla`). Their
    /// presence is llama.cpp's MLA switch: the KV cache then holds the latent K only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_length_mla: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_length_mla: Option<u64>,
    pub q_lora_rank: Option<u64>,
    /// Multi-token-prediction (NextN) blocks at the end of the block count (`{arch}.nextn_predict_layers`):
    /// llama.cpp's `n_layer_nextn`, outside the trunk (`n_layer() = n_layer_all - n_layer_nextn`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nextn_predict_layers: Option<u64>,
    /// How many leading blocks have a KV cache of their own (llama.cpp `n_layer_kv_from_start`): the later
    /// blocks reuse one of them (Gemma-3n: 20, an engine constant; Gemma 4: the block count less
    /// `attention.shared_kv_layers`). None: every attention block has its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_layers_from_start: Option<u64>,
    /// Per-head K and V sizes of the sliding-window layers (`attention.key_length_swa` / `value_length_swa`,
    /// read for every architecture by src/llama-model.cpp `load_hparams`; default: the full layers' sizes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_length_swa: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_length_swa: Option<u64>,
    pub rope: Option<Rope>,
    pub ssm: Option<Ssm>,
    /// Whether the output projection reuses the token embedding (no separate output tensor).
    pub tied_embeddings: bool,
    /// `torch_dtype` from config.json (safetensors).
    pub torch_dtype: Option<String>,
    pub quantization: Option<Quantization>,
    /// Bias switches from config.json (safetensors only). Not serialised: the model fingerprint is the
    /// serialised hyperparameters, and measurements stored before these were read must keep matching.
    #[serde(skip)]
    pub linear_bias: LinearBias,
}

/// Bytes and weights of one transformer block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LayerSummary {
    pub index: u32,
    pub bytes: u64,
    pub parameters: u64,
    pub tensor_count: u64,
}

/// Share of one storage type in the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QuantShare {
    pub dtype: Dtype,
    pub tensor_count: u64,
    pub bytes: u64,
    pub parameters: u64,
}

/// One file of the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModelFile {
    pub path: PathBuf,
    pub bytes: u64,
    pub tensor_count: u64,
}

/// One normalized description of a model, whatever the format.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelSpec {
    pub format: Format,
    /// GGUF version (2 or 3); absent for safetensors.
    pub gguf_version: Option<u32>,
    /// Byte order of a GGUF file.
    pub big_endian: bool,
    /// `general.architecture` (GGUF) or the Hugging Face `model_type` (safetensors).
    pub architecture: String,
    /// `general.name`, or the first of config.json's `architectures`.
    pub name: Option<String>,
    /// `general.file_type` id and name (GGUF only).
    pub file_type: Option<u32>,
    pub file_type_name: Option<&'static str>,
    /// Which meaning ambiguous ggml type ids took (see [`gguf`] for the rule).
    pub type_reading: Option<TypeReading>,
    pub hparams: Hparams,
    pub files: Vec<ModelFile>,
    pub tensors: Vec<TensorInfo>,
    pub layers: Vec<LayerSummary>,
    pub quant_mix: Vec<QuantShare>,
    /// GGUF metadata (split bookkeeping included) or safetensors `__metadata__`, by key.
    pub metadata: BTreeMap<String, MetaValue>,
    pub fingerprint: String,
}

impl ModelSpec {
    pub fn tensor_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.bytes).sum()
    }

    pub fn file_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.bytes).sum()
    }

    /// Logical weights (packed weights counted unpacked, quantization state not counted).
    pub fn parameter_count(&self) -> u64 {
        self.tensors.iter().map(|t| t.parameters).sum()
    }

    /// Elements stored, as the formats' own readers count them.
    pub fn element_count(&self) -> u64 {
        self.tensors.iter().map(|t| t.elements).sum()
    }

    /// Bits per weight over the whole model: 8 × tensor bytes / parameters (what llama.cpp prints as BPW).
    pub fn bits_per_weight(&self) -> f64 {
        match self.parameter_count() {
            0 => 0.0,
            p => self.tensor_bytes() as f64 * 8.0 / p as f64,
        }
    }

    /// Bytes of tensors outside any block (embeddings, output, final norm).
    pub fn non_layer_bytes(&self) -> u64 {
        self.tensors
            .iter()
            .filter(|t| t.layer.is_none())
            .map(|t| t.bytes)
            .sum()
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }
}

/// Opens a model: a `.gguf` file (any shard of a split model), a `.safetensors` file, a
/// `model.safetensors.index.json`, or a directory holding safetensors weights and `config.json`.
pub fn load(path: &Path) -> Result<ModelSpec, ModelError> {
    let meta = std::fs::metadata(path).map_err(ModelError::io(path))?;
    if meta.is_dir() {
        return safetensors::load(path);
    }
    let mut magic = [0u8; 8];
    let n = {
        use std::io::Read;
        // Regular files only: a FIFO would block this read, a device would feed it without end.
        let (mut f, _) = source::open(path)?;
        let mut n = 0;
        while n < magic.len() {
            match f.read(&mut magic[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ModelError::io(path)(e)),
            }
        }
        n
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    if n >= 4 && &magic[..4] == b"GGUF" || name.ends_with(".gguf") {
        return gguf::load(path);
    }
    if name.ends_with(".safetensors") || name.ends_with(".json") {
        return safetensors::load(path);
    }
    Err(ModelError::model(
        path,
        Defect::UnknownFormat(
            "expected a .gguf file (magic \"GGUF\"), a .safetensors file, a model.safetensors.index.json, or a directory of safetensors weights"
                .into(),
        ),
    ))
}
