//! safetensors reader: a single file, a sharded model through its `*.safetensors.index.json`, or a directory;
//! header only, with the model's `config.json`.
//!
//! Follows the upstream reader (huggingface/safetensors `safetensors/src/tensor.rs`, `Metadata::validate` and
//! `SafeTensors::read_metadata`): an 8-byte little-endian header length, a UTF-8 JSON object mapping tensor names
//! to `{dtype, shape, data_offsets}` plus an optional `__metadata__` string map; offsets relative to the data
//! section, sorted by begin they must tile it exactly (first begin 0, each begin the previous end, last end the
//! end of the file); each tensor's span must be exactly `elements × bits / 8` bytes. Beyond upstream, this reader
//! refuses unknown keys in a tensor entry, duplicate tensor names (upstream's map keeps the last silently), and
//! sub-byte tensors that do not fill whole bytes.
//!
//! Memory: the header is read into one buffer of at most [`MAX_HEADER_BYTES`]; a linear pre-scan refuses any
//! JSON string longer than [`MAX_STRING_BYTES`] (so serde_json's scratch copy of an escaped string stays small);
//! then a streaming visitor builds compact records charged against [`MAX_PARSED_HEADER_BYTES`]. No JSON tree is
//! built, so one header costs about 32 + 20 + 4 MiB plus the record vector's spare capacity, under the 64 MiB
//! peak target (measured worst case 54 MiB in `tests/it/safetensors_reader.rs`). Tensor data is never read.
//!
//! May touch: the model file(s), the index, `config.json` and the sentence-transformers `modules.json` (with its
//! pooling module's `config.json`, [`pooling`]) in the model's directory, with bounded reads.
//!
//! Layout of this module, one concern a file: `dtype` (the dtype table and exact byte sizes), `header`
//! (one file's length prefix and JSON header, validated), `stream` (the streaming serde visitor that header
//! parsing runs), `index` (the sharded `*.safetensors.index.json` and its agreement with the shards),
//! `layout` (which files make up the model, from a file, an index or a directory), `packing` (logical weights
//! of packed quantized tensors); this file holds the limits and assembles the [`ModelSpec`].

mod dtype;
mod header;
mod index;
mod layout;
mod packing;
pub mod pooling;
mod stream;

use std::collections::BTreeMap;
use std::path::Path;

use super::hf_config::{self, HfConfig};
use super::source::read_bounded;
use super::{
    Defect, Dtype, Format, MetaValue, ModelError, ModelFile, ModelSpec, Quantization, TensorInfo,
    classify_tensor,
};

pub use dtype::StDtype;
use header::entry_offset;
pub use header::{Header, RawTensor, parse_header_bytes, read_header};
pub use index::Index;
use index::check_index;
use layout::{Layout, file_name_of, layout_of_dir, layout_of_file};
use packing::parameters;

/// Header bytes of one file. Upstream refuses headers over 100,000,000 bytes; our peak-memory target for
/// reading any header is 64 MiB, and the header buffer, its parsed records (at most
/// [`MAX_PARSED_HEADER_BYTES`]) and serde_json's scratch string (at most [`MAX_STRING_BYTES`]) are alive
/// together, so the buffer gets 32 MiB. Real headers are far smaller: a shard of DeepSeek-V3 is about 60 KiB,
/// and all of its 92k tensors in one file would take about 10 MiB.
pub const MAX_HEADER_BYTES: u64 = 32 << 20;
/// Heap the parsed records of one header may take: per tensor the record (80 bytes) plus its name and shape
/// buffers, and every `__metadata__` key and value. A real entry costs about 150 bytes, so a file of
/// [`MAX_TENSORS_PER_FILE`] real tensors fits; with the other bounds it caps one header's cost under 64 MiB
/// whatever the JSON holds (measured worst case 54 MiB, `tests/it/safetensors_reader.rs`).
pub const MAX_PARSED_HEADER_BYTES: u64 = 20 << 20;
/// Any JSON string in a header (a tensor name, a `__metadata__` key or value). Names are under 200 bytes; the
/// largest metadata values seen (LoRA trainers' tag-frequency tables) are a few hundred KiB. Checked by a
/// pre-scan before serde_json allocates anything.
pub const MAX_STRING_BYTES: u64 = 4 << 20;
/// Tensors in one file: DeepSeek-V3's 92k tensors would fit in one file; 131,072 leaves room and, with the
/// parse budget, bounds the record vector.
pub const MAX_TENSORS_PER_FILE: u64 = 131_072;
/// Tensors in one model over all shards. The largest published checkpoints (DeepSeek-V3/R1: about 92k tensors
/// in 163 shards; Qwen3-235B-A22B: about 37k) fit with room to spare under 262,144; the limit bounds the
/// merged tensor table (about 230 bytes a tensor with its name) to about 60 MiB however many shards a hostile
/// index names.
pub(crate) const MAX_TENSORS: u64 = 1 << 18;
/// Dimensions of one tensor: NumPy 2's `NPY_MAXDIMS` is 64, and no framework writes more. Bounds the shape
/// vector (a 32 MiB header could otherwise declare a 16-million-entry shape).
pub const MAX_DIMS: usize = 64;
/// Files in one model. DeepSeek-V3 has 163 shards; 65,536 bounds the file table and the number of headers
/// read.
pub(crate) const MAX_FILES: u64 = 65_536;
/// Size of a `*.safetensors.index.json`. DeepSeek-V3's (92k entries of about 95 bytes) is about 9 MiB.
pub(crate) const MAX_INDEX_BYTES: u64 = 32 << 20;
/// The little-endian u64 header length that starts every file.
const LENGTH_PREFIX_BYTES: u64 = 8;
/// transformers' names: the sharded index, the single-file checkpoint, the configuration.
pub(crate) const INDEX_FILE: &str = "model.safetensors.index.json";
pub(crate) const SINGLE_FILE: &str = "model.safetensors";
pub(crate) const CONFIG_FILE: &str = "config.json";
const INDEX_SUFFIX: &str = ".safetensors.index.json";
const WEIGHTS_SUFFIX: &str = ".safetensors";
/// The reserved header key for the free-form string map.
const METADATA_KEY: &str = "__metadata__";

/// Reads a safetensors model: a `.safetensors` file (the whole model when a `*.safetensors.index.json` beside
/// it lists the file), a `*.safetensors.index.json`, `config.json` (its directory), or a directory (preferring
/// `model.safetensors.index.json`, then `model.safetensors`, then every `*.safetensors` in it, sorted).
/// `config.json` is read from the same directory when present.
pub fn load(path: &Path) -> Result<ModelSpec, ModelError> {
    let meta = std::fs::metadata(path).map_err(ModelError::io(path))?;
    let layout = if meta.is_dir() {
        layout_of_dir(path)?
    } else {
        layout_of_file(path)?
    };
    build(layout)
}

/// What a plan of a safetensors checkpoint needs besides what [`load`] requires: its `config.json`. The reader
/// takes a checkpoint without one (`inspect` shows its tensors, and a lone `.safetensors` file need not be a
/// transformers checkpoint), but the layer count, the heads and the trained context a plan rests on are only in
/// the configuration; without it a planner could only say which of them is missing, which misleads (issue 24:
/// "config.json declares no num_hidden_layers", exit 2, for a directory that had no config.json). `path` is
/// what was given to [`load`]. Err names the missing file; a GGUF model needs nothing and passes.
pub fn require_config(path: &Path, spec: &ModelSpec) -> Result<(), ModelError> {
    if spec.format != Format::Safetensors {
        return Ok(());
    }
    // The directory [`load`] read config.json from: the model directory, or the one holding the file given.
    let dir = if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
        path.to_path_buf()
    } else {
        match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => std::path::PathBuf::from("."),
        }
    };
    let config = dir.join(CONFIG_FILE);
    match std::fs::symlink_metadata(&config) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ModelError::model(
            &config,
            Defect::Config(format!(
                "no such file; a safetensors checkpoint is planned from the {CONFIG_FILE} beside its weights (layer count, attention heads, trained context), which transformers' save_pretrained writes with them: copy it from the model's repository"
            )),
        )),
        Err(e) => Err(ModelError::io(&config)(e)),
    }
}

/// Reads `config.json` in `dir`; `None` when there is none.
pub(crate) fn read_config(dir: &Path) -> Result<Option<HfConfig>, ModelError> {
    let path = dir.join(CONFIG_FILE);
    if !path.exists() {
        return Ok(None);
    }
    // Present but a FIFO or a device: `read_bounded` refuses it (regular files only) rather than blocking.
    let bytes = read_bounded(&path, hf_config::MAX_CONFIG_BYTES, "config.json bytes")?;
    hf_config::parse(&path, &bytes).map(Some)
}

fn build(layout: Layout) -> Result<ModelSpec, ModelError> {
    let Layout { dir, files, index } = layout;
    if let Some((index_path, idx)) = &index {
        for (name, f) in idx.files.iter().zip(&files) {
            if !f.is_file() {
                return Err(ModelError::model(
                    index_path,
                    Defect::Index(format!(
                        "weight_map names {name:?}, which is not a file in {}",
                        dir.display()
                    )),
                ));
            }
        }
    }
    let mut headers = Vec::with_capacity(files.len());
    let mut total: u64 = 0;
    for f in &files {
        let h = read_header(f)?;
        total = total.saturating_add(h.tensors.len() as u64);
        if total > MAX_TENSORS {
            return Err(ModelError::model(
                f,
                Defect::TooMany {
                    what: "tensors in the model",
                    count: total,
                    limit: MAX_TENSORS,
                },
            ));
        }
        headers.push(h);
    }
    // All tensors, sorted by name, with their file.
    let mut all: Vec<(u32, &RawTensor)> = headers
        .iter()
        .enumerate()
        .flat_map(|(i, h)| h.tensors.iter().map(move |t| (i as u32, t)))
        .collect();
    all.sort_unstable_by(|a, b| a.1.name.cmp(&b.1.name).then(a.0.cmp(&b.0)));
    if let Some(w) = all.windows(2).find(|w| w[0].1.name == w[1].1.name) {
        let (first, second) = (w[0].0 as usize, w[1].0 as usize);
        let name = w[1].1.name.clone();
        let (Some(first_path), Some(second_path)) = (files.get(first), files.get(second)) else {
            return Err(ModelError::model(&dir, Defect::DuplicateTensor(name)));
        };
        return Err(ModelError::Invalid {
            offset: entry_offset(second_path, &name),
            path: second_path.clone(),
            defect: Defect::BadTensor {
                reason: format!(
                    "stored in both {} and {}; a tensor name must be unique across shards",
                    file_name_of(first_path),
                    file_name_of(second_path)
                ),
                name,
            },
        });
    }
    if let Some((index_path, idx)) = &index {
        check_index(index_path, idx, &all)?;
    }
    let config = read_config(&dir)?;
    let quant = config
        .as_ref()
        .and_then(|c| c.hparams.quantization.as_ref());
    let tensors = tensor_infos(&all, &headers, quant);
    let model_files = files
        .iter()
        .zip(&headers)
        .map(|(p, h)| ModelFile {
            path: p.clone(),
            bytes: h.file_bytes,
            tensor_count: h.tensors.len() as u64,
        })
        .collect();
    let mut metadata = BTreeMap::new();
    for h in &headers {
        for (k, v) in &h.metadata {
            metadata
                .entry(k.clone())
                .or_insert_with(|| MetaValue::String(v.clone()));
        }
    }
    // Not a `__metadata__` key of any file: what the checkpoint's sentence-transformers configuration says.
    if let Some(p) = pooling::read_pooling(&dir)? {
        metadata.insert(
            pooling::POOLING_KEY.to_string(),
            MetaValue::String(p.to_string()),
        );
    }
    let (architecture, name, hparams) = match config {
        Some(c) => (
            c.model_type.unwrap_or_else(|| "unknown".into()),
            c.name,
            c.hparams,
        ),
        None => ("unknown".into(), None, Default::default()),
    };
    super::check_hparams(Format::Safetensors, &architecture, &hparams, &metadata)
        .map_err(|d| ModelError::model(&dir.join(CONFIG_FILE), d))?;
    crate::spec::check_attention(Format::Safetensors, &architecture, &hparams, &tensors)
        .map_err(|d| ModelError::model(&dir.join(CONFIG_FILE), d))?;
    Ok(super::assemble(
        Format::Safetensors,
        None,
        false,
        architecture,
        name,
        None,
        None,
        hparams,
        model_files,
        tensors,
        metadata,
    ))
}

fn tensor_infos(
    all: &[(u32, &RawTensor)],
    headers: &[Header],
    quant: Option<&Quantization>,
) -> Vec<TensorInfo> {
    let exists = |name: &str| {
        all.binary_search_by(|(_, t)| t.name.as_str().cmp(name))
            .is_ok()
    };
    all.iter()
        .map(|&(file, t)| {
            let (role, layer) = classify_tensor(&t.name);
            let (parameters, packing) = parameters(t, role, quant, &exists);
            let data_offset = headers.get(file as usize).map_or(0, |h| h.data_offset);
            TensorInfo {
                name: t.name.clone(),
                shape: t.shape.clone(),
                dtype: Dtype::Safetensors(t.dtype),
                bytes: t.end - t.begin,
                elements: t.elements,
                parameters,
                role,
                layer,
                packing,
                file,
                // data_offset + end was checked against the file length.
                offset: data_offset + t.begin,
            }
        })
        .collect()
}
