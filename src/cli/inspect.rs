//! `optimizer inspect`: the model as the readers see it, as a table or as the JSON/YAML contract of the README.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::PathBuf;

use serde::Serialize;

use super::output::human_bytes;
use super::{Failure, OutputFormat, render, write_stdout};
use crate::model::{
    self, LayerSummary, MetaValue, ModelFile, ModelSpec, PerLayer, QuantShare, Quantization, Role,
    Rope, Ssm, TensorInfo, TypeReading,
};

#[derive(Debug)]
pub(super) struct Settings {
    pub model: PathBuf,
    pub format: OutputFormat,
    pub tensors: bool,
}

/// The `inspect` JSON/YAML document. Key names follow the GGUF keys (`block_count`, `head_count_kv`, …) so users
/// recognise them; a hyper-parameter that varies per layer is an array, as in GGUF, else an integer; absent
/// values are `null`. Adding keys is compatible; renaming or retyping one is not.
#[derive(Debug, Serialize)]
pub(super) struct Report<'a> {
    pub format: model::Format,
    pub gguf_version: Option<u32>,
    pub endianness: Option<&'static str>,
    pub architecture: &'a str,
    pub name: Option<&'a str>,
    /// Logical weights (packed weights counted unpacked, quantization state not counted).
    pub parameter_count: u64,
    /// Elements stored, as the format's own reader counts them.
    pub element_count: u64,
    pub tensor_count: u64,
    pub tensor_bytes: u64,
    pub file_bytes: u64,
    pub bits_per_weight: f64,
    pub file_type: Option<u32>,
    pub file_type_name: Option<&'static str>,
    pub type_reading: Option<TypeReading>,
    pub torch_dtype: Option<&'a str>,
    pub quantization: Option<&'a Quantization>,
    pub block_count: Option<u64>,
    pub context_length: Option<u64>,
    pub embedding_length: Option<u64>,
    pub feed_forward_length: Option<&'a PerLayer>,
    pub head_count: Option<&'a PerLayer>,
    pub head_count_kv: Option<&'a PerLayer>,
    pub key_length: Option<u64>,
    pub value_length: Option<u64>,
    pub vocab_size: Option<u64>,
    pub sliding_window: Option<u64>,
    pub sliding_window_layers: Option<Vec<u32>>,
    pub expert_count: Option<u64>,
    pub expert_used_count: Option<u64>,
    pub expert_shared_count: Option<u64>,
    pub expert_feed_forward_length: Option<u64>,
    pub expert_layers: Option<Vec<u32>>,
    pub recurrent_layers: Option<Vec<u32>>,
    pub kv_lora_rank: Option<u64>,
    pub q_lora_rank: Option<u64>,
    pub rope: Option<&'a Rope>,
    pub ssm: Option<&'a Ssm>,
    pub tied_embeddings: bool,
    pub fingerprint: &'a str,
    pub files: &'a [ModelFile],
    pub quant_mix: &'a [QuantShare],
    /// Bytes of tensors outside the blocks (embeddings, output, final norm).
    pub non_layer_bytes: u64,
    pub layers: &'a [LayerSummary],
    pub metadata: &'a BTreeMap<String, MetaValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tensors: Option<&'a [TensorInfo]>,
}

fn indices(flags: &[bool]) -> Option<Vec<u32>> {
    (!flags.is_empty()).then(|| {
        flags
            .iter()
            .enumerate()
            .filter(|(_, b)| **b)
            .map(|(i, _)| i as u32)
            .collect()
    })
}

impl<'a> Report<'a> {
    pub(super) fn new(m: &'a ModelSpec, with_tensors: bool) -> Self {
        let h = &m.hparams;
        Report {
            format: m.format,
            gguf_version: m.gguf_version,
            endianness: m
                .gguf_version
                .map(|_| if m.big_endian { "big" } else { "little" }),
            architecture: &m.architecture,
            name: m.name.as_deref(),
            parameter_count: m.parameter_count(),
            element_count: m.element_count(),
            tensor_count: m.tensors.len() as u64,
            tensor_bytes: m.tensor_bytes(),
            file_bytes: m.file_bytes(),
            bits_per_weight: (m.bits_per_weight() * 1000.0).round() / 1000.0,
            file_type: m.file_type,
            file_type_name: m.file_type_name,
            type_reading: m.type_reading,
            torch_dtype: h.torch_dtype.as_deref(),
            quantization: h.quantization.as_ref(),
            block_count: h.block_count,
            context_length: h.context_length,
            embedding_length: h.embedding_length,
            feed_forward_length: h.feed_forward_length.as_ref(),
            head_count: h.head_count.as_ref(),
            head_count_kv: h.head_count_kv.as_ref(),
            key_length: h.key_length,
            value_length: h.value_length,
            vocab_size: h.vocab_size,
            sliding_window: h.sliding_window,
            sliding_window_layers: indices(&h.sliding_window_layers),
            expert_count: h.expert_count,
            expert_used_count: h.expert_used_count,
            expert_shared_count: h.expert_shared_count,
            expert_feed_forward_length: h.expert_feed_forward_length,
            expert_layers: indices(&h.expert_layers),
            recurrent_layers: indices(&h.recurrent_layers),
            kv_lora_rank: h.kv_lora_rank,
            q_lora_rank: h.q_lora_rank,
            rope: h.rope.as_ref(),
            ssm: h.ssm.as_ref(),
            tied_embeddings: h.tied_embeddings,
            fingerprint: &m.fingerprint,
            files: &m.files,
            quant_mix: &m.quant_mix,
            non_layer_bytes: m.non_layer_bytes(),
            layers: &m.layers,
            metadata: &m.metadata,
            tensors: with_tensors.then_some(&m.tensors[..]),
        }
    }
}

pub(super) fn run(s: &Settings) -> Result<(), Failure> {
    let spec = model::load(&s.model)?;
    let text = match s.format {
        OutputFormat::Table => table(&spec, s.tensors),
        f => render(&Report::new(&spec, s.tensors), f)?,
    };
    write_stdout(&text)
}

/// `8030261248` → `8.03 B`, as llama.cpp prints parameter counts.
pub(super) fn human_count(n: u64) -> String {
    let v = n as f64;
    if v >= 1e9 {
        format!("{:.2} B", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.2} M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.2} K", v / 1e3)
    } else {
        n.to_string()
    }
}

fn per_layer_text(p: &PerLayer) -> String {
    match p {
        PerLayer::Uniform(v) => v.to_string(),
        PerLayer::Layers(v) => {
            let min = v.iter().min().copied().unwrap_or(0);
            let max = v.iter().max().copied().unwrap_or(0);
            format!("{min}..{max} per layer")
        }
    }
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

fn table(m: &ModelSpec, with_tensors: bool) -> String {
    use super::table::{Table, left, right};
    let h = &m.hparams;
    // Names, paths, dtypes and methods come from the model's files: printed with controls escaped.
    let mut facts = Table::headless(&[left("", 14), left("", 0)]);
    let mut row = |k: &str, v: String| {
        facts.row([k, super::terminal::safe(&v).as_ref()]);
    };
    let where_ = match m.files.as_slice() {
        [one] => one.path.display().to_string(),
        many => format!(
            "{} (+{} more shards)",
            many[0].path.display(),
            many.len() - 1
        ),
    };
    row("model", where_);
    let fmt = match m.gguf_version {
        Some(v) => format!(
            "GGUF v{v}, {}-endian",
            if m.big_endian { "big" } else { "little" }
        ),
        None => "safetensors".into(),
    };
    row(
        "format",
        format!(
            "{fmt}, {} file{}, {}",
            m.files.len(),
            if m.files.len() == 1 { "" } else { "s" },
            human_bytes(m.file_bytes())
        ),
    );
    row(
        "architecture",
        match &m.name {
            Some(n) => format!("{} ({n})", m.architecture),
            None => m.architecture.clone(),
        },
    );
    let params = m.parameter_count();
    row(
        "parameters",
        if params == m.element_count() {
            format!("{} ({params})", human_count(params))
        } else {
            format!(
                "{} ({params}; {} elements stored)",
                human_count(params),
                m.element_count()
            )
        },
    );
    row(
        "size",
        format!(
            "{} in {} tensors ({} bytes), {:.2} BPW",
            human_bytes(m.tensor_bytes()),
            m.tensors.len(),
            m.tensor_bytes(),
            m.bits_per_weight()
        ),
    );
    if let (Some(id), name) = (m.file_type, m.file_type_name) {
        row("file type", format!("{} ({id})", name.unwrap_or("unknown")));
    }
    if m.type_reading == Some(TypeReading::Bitnet) {
        row("type ids", "BitNet fork meanings (I2_S/TL1/TL2)".into());
    }
    if let Some(d) = &h.torch_dtype {
        row("torch dtype", d.clone());
    }
    if let Some(q) = &h.quantization {
        row(
            "quantization",
            format!(
                "{}{}{}",
                q.method,
                q.bits.map(|b| format!(", {b}-bit")).unwrap_or_default(),
                q.group_size
                    .map(|g| format!(", group {g}"))
                    .unwrap_or_default()
            ),
        );
    }
    row(
        "layers",
        format!(
            "{} blocks, context {}, embedding {}, FFN {}",
            opt(h.block_count),
            opt(h.context_length),
            opt(h.embedding_length),
            h.feed_forward_length
                .as_ref()
                .map_or("-".into(), per_layer_text)
        ),
    );
    let mut attn = format!(
        "{} heads, {} KV heads",
        h.head_count.as_ref().map_or("-".into(), per_layer_text),
        h.head_count_kv.as_ref().map_or("-".into(), per_layer_text),
    );
    if h.key_length.is_some() || h.value_length.is_some() {
        let _ = write!(
            attn,
            ", head size {}/{}",
            opt(h.key_length),
            opt(h.value_length)
        );
    }
    if let Some(w) = h.sliding_window.filter(|w| *w > 0) {
        let n = h.sliding_window_layers.iter().filter(|b| **b).count();
        let _ = write!(attn, ", sliding window {w} on {n} layers");
    }
    if let Some(r) = h.kv_lora_rank {
        let _ = write!(attn, ", MLA kv rank {r}");
    }
    row("attention", attn);
    if let Some(e) = h.expert_count.filter(|e| *e > 0) {
        row(
            "experts",
            format!(
                "{e} total, {} per token{}, in {} layers",
                opt(h.expert_used_count),
                h.expert_shared_count
                    .map(|s| format!(", {s} shared"))
                    .unwrap_or_default(),
                h.expert_layers.iter().filter(|b| **b).count()
            ),
        );
    }
    if !h.recurrent_layers.is_empty() {
        row(
            "recurrent",
            format!(
                "{} of {} layers",
                h.recurrent_layers.iter().filter(|b| **b).count(),
                h.recurrent_layers.len()
            ),
        );
    }
    row("vocabulary", opt(h.vocab_size));
    if h.tied_embeddings {
        row("output", "tied to the token embedding".into());
    }
    let total = m.tensor_bytes().max(1) as f64;
    let mix: Vec<String> = m
        .quant_mix
        .iter()
        .map(|q| {
            format!(
                "{} {} ({:.1}%, {} tensors)",
                q.dtype.name(),
                human_bytes(q.bytes),
                q.bytes as f64 * 100.0 / total,
                q.tensor_count
            )
        })
        .collect();
    row("quant mix", mix.join(", "));
    let sizes: Vec<u64> = m.layers.iter().map(|l| l.bytes).collect();
    if let (Some(min), Some(max)) = (sizes.iter().min(), sizes.iter().max()) {
        let mean = sizes.iter().sum::<u64>() / sizes.len() as u64;
        row(
            "per layer",
            format!(
                "min {}, mean {}, max {}",
                human_bytes(*min),
                human_bytes(mean),
                human_bytes(*max)
            ),
        );
    }
    let role_bytes = |r: Role| -> u64 {
        m.tensors
            .iter()
            .filter(|t| t.layer.is_none() && t.role == r)
            .map(|t| t.bytes)
            .sum()
    };
    row(
        "outside layers",
        format!(
            "{} (embedding {}, output {})",
            human_bytes(m.non_layer_bytes()),
            human_bytes(role_bytes(Role::Embedding)),
            human_bytes(role_bytes(Role::Output))
        ),
    );
    row("fingerprint", m.fingerprint.clone());
    let mut o = facts.render();
    if with_tensors {
        let mut tensors = Table::new(&[
            left("name", 4),
            left("type", 8).gap(2),
            left("shape", 24),
            right("bytes", 14),
            left("role", 11).gap(2),
            left("layer", 0),
        ]);
        for t in &m.tensors {
            let role = serde_json::to_string(&t.role).unwrap_or_default();
            tensors.row([
                super::terminal::safe(&t.name).into_owned(),
                t.dtype.name().to_string(),
                format!("{:?}", t.shape),
                t.bytes.to_string(),
                role.trim_matches('"').to_string(),
                opt(t.layer),
            ]);
        }
        o.push('\n');
        o.push_str(&tensors.render());
    }
    o
}
