//! GGUF reader: versions 2 and 3, either byte order, split shards; header only.
//!
//! Follows ggml's `gguf.cpp` (ggml@d99724f2), the engine's own reader, where the spec and the engine differ: the
//! alignment must be a non-zero power of two, tensor names are shorter than 64 bytes, and each tensor's offset
//! must equal the running sum of the previous tensors' sizes padded to the alignment. Every limit is checked
//! before anything is allocated, and every size is computed with checked arithmetic.
//!
//! Large metadata (tokenizer tokens, scores, merges; any string over [`MAX_INLINE_STRING`]) is not
//! materialized: the reader walks it to find its end and records its element count and byte span, so a
//! 128k-token vocabulary costs one record, not 128k strings.
//!
//! ## BitNet type ids
//! microsoft/BitNet's llama.cpp fork gave ids 36–39 to I2_S, I8_S, TL1 and TL2; upstream later gave 39 to MXFP4
//! (36–38 are removed upstream, 40–42 are NVFP4, Q1_0, Q2_0) and `general.file_type` 38–40 differ too. A file is
//! read with the BitNet meanings when (1) `general.architecture` starts with `bitnet`, or (2) a tensor uses id 36
//! or 38, which have no upstream meaning, or (3) `general.file_type` is 39 or 40 (BitNet's TL2 / I2_S) and no
//! tensor uses an id above 39. Otherwise the upstream meanings apply. Then the size check: the chosen reading
//! must make every tensor offset equal the running padded size; if it does not and the other reading does
//! (possible only when a tensor uses an ambiguous id), the other reading is used. The chosen reading is reported
//! in [`ModelSpec::type_reading`].
//!
//! Layout of this module, one concern a file: `reader` (the position-tracking bounded reader and metadata
//! value decoding), `header` (one file's header: metadata table, tensor-info table, alignment),
//! [`value_type`] (GGUF's value type ids), `reading` (type ids resolved under one reading, and the offset
//! check that decides between readings), `split` (shard names and split bookkeeping), `hparams` (`{arch}.*`
//! metadata to [`Hparams`](super::Hparams)); this file holds the limits and assembles the [`ModelSpec`].

mod header;
mod hparams;
mod reader;
mod reading;
mod split;
pub mod value_type;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::ggml_type::file_type_name;
use super::{
    Defect, Dtype, Format, MetaValue, ModelError, ModelFile, ModelSpec, TensorInfo, classify_tensor,
};

use header::read_file_header;
pub use header::{Header, RawTensor, parse_header, parse_header_bytes};
use hparams::hparams_from_metadata;
use reading::{meta_str, resolve_model_types};
pub use split::split_name;
use split::{check_split, split_err};

/// Metadata entries per file. Published models carry 20–60; 65,536 leaves three orders of magnitude of room
/// while bounding the key table to a few MiB.
pub const MAX_KV: u64 = 65_536;
/// Tensors per file. The largest published GGUF files (DeepSeek-V3/R1, Llama-3.1-405B) hold about 1,100; 60×
/// that bounds the tensor table, with 63-byte names, to about 20 MiB, inside the 64 MiB peak-memory budget.
pub const MAX_TENSORS: u64 = 65_536;
/// Metadata key length: the GGUF spec caps keys at 65,535 bytes.
pub const MAX_KEY_LEN: u64 = 65_535;
/// Strings up to this length are kept in memory; longer ones (none in published models but chat templates,
/// which stay under 64 KiB) are skipped with their span recorded.
pub const MAX_INLINE_STRING: u64 = 1 << 20;
/// ggml's own cap on any string (`GGUF_MAX_STRING_LENGTH`, gguf.cpp L18).
pub const MAX_STRING_LEN: u64 = 1 << 30;
/// ggml's own cap on array elements (`GGUF_MAX_ARRAY_ELEMENTS`, gguf.cpp L19).
pub const MAX_ARRAY_ELEMENTS: u64 = 1 << 30;
/// Arrays up to this many elements are materialized (per-layer hyper-parameters have one entry per block);
/// longer ones (vocabularies) are skipped with their count and span recorded.
pub const MAX_MATERIALIZED_ARRAY: u64 = 4_096;
/// Nested arrays: the spec allows them, ggml refuses them; three levels is more than any writer produces.
pub const MAX_ARRAY_DEPTH: u32 = 3;
/// Heap spent on materialized metadata per file; past it further values are skipped like long arrays, so a
/// hostile header cannot make the reader allocate more than this however its counts are set.
pub const MAX_METADATA_HEAP: u64 = 16 << 20;
/// Heap spent on metadata keys per file (each key is kept twice: in the table and in the duplicate check).
/// Keys cannot be skipped like values, so a header whose keys exceed this is refused; published models use
/// about 3 KiB.
pub const MAX_KEY_HEAP: u64 = 8 << 20;
/// ggml's `GGML_MAX_NAME` is 64 bytes including the terminating NUL.
pub const MAX_TENSOR_NAME: u64 = 63;
/// ggml's `GGML_MAX_DIMS`.
pub const MAX_DIMS: u32 = 4;
/// ggml's `GGUF_DEFAULT_ALIGNMENT`.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Shards of one split model (`-00001-of-NNNNN`): the name pattern has five digits.
pub(crate) const MAX_SHARDS: u64 = 99_999;

/// Smallest encoding of one metadata entry: u64 key length, a 1-byte key, u32 type, a 1-byte value.
const MIN_KV_BYTES: u64 = 8 + 1 + 4 + 1;
/// Smallest encoding of one tensor info: u64 name length, a 1-byte name, u32 n_dims, u32 type, u64 offset.
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 1 + 4 + 4 + 8;
/// Bytes charged against [`MAX_METADATA_HEAP`] per materialized value, beyond its string bytes.
const VALUE_HEAP_BYTES: u64 = std::mem::size_of::<MetaValue>() as u64;

/// Reads a single-file GGUF model from memory; `path` only names it in messages. The fuzz target and the
/// truncation tests use this: it runs every check [`load`] runs on one file.
pub fn load_bytes(bytes: &[u8], path: &Path) -> Result<ModelSpec, ModelError> {
    let header = parse_header_bytes(bytes).map_err(|e| ModelError::at(path, e))?;
    let paths = [path.to_path_buf()];
    let headers = vec![header];
    check_split(&paths, &headers)?;
    build_spec(&paths, headers)
}

/// Reads a GGUF model from any of its files: a single file, or any shard of a split model, in which case every
/// shard's header is read and checked and one model is presented.
pub fn load(path: &Path) -> Result<ModelSpec, ModelError> {
    let header = read_file_header(path)?;
    let declared = header.get("split.count").and_then(MetaValue::as_u64);
    let (paths, headers) = match split_name(path) {
        Some((prefix, _, count)) if count > 1 => {
            if let Some(d) = declared
                && d != count
            {
                return Err(split_err(
                    path,
                    format!("file name says {count} shards but split.count is {d}"),
                ));
            }
            let dir = path.parent().unwrap_or_else(|| Path::new(""));
            let mut paths = Vec::with_capacity(count as usize);
            let mut headers = Vec::with_capacity(count as usize);
            for i in 1..=count {
                let p = dir.join(format!("{prefix}-{i:05}-of-{count:05}.gguf"));
                let h = if p == path {
                    header.clone()
                } else {
                    if !p.exists() {
                        return Err(split_err(
                            &p,
                            format!("shard {i} of {count} is missing (given {})", path.display()),
                        ));
                    }
                    read_file_header(&p)?
                };
                paths.push(p);
                headers.push(h);
            }
            (paths, headers)
        }
        _ => {
            if let Some(d) = declared
                && d > 1
            {
                return Err(split_err(
                    path,
                    format!(
                        "split.count is {d} but the file name does not follow the shard pattern NAME-00001-of-{d:05}.gguf, so the other shards cannot be found"
                    ),
                ));
            }
            (vec![path.to_path_buf()], vec![header])
        }
    };
    check_split(&paths, &headers)?;
    build_spec(&paths, headers)
}
/// Assembles the model, consuming the headers so tensor names and metadata move rather than copy (the peak
/// memory of a 65,536-tensor header stays one tensor table, not two).
fn build_spec(paths: &[PathBuf], headers: Vec<Header>) -> Result<ModelSpec, ModelError> {
    let (reading, sizes) = resolve_model_types(paths, &headers)?;
    let (version, big_endian) = (headers[0].version, headers[0].big_endian);
    let architecture = meta_str(&headers, "general.architecture")
        .unwrap_or("unknown")
        .to_string();
    let mut tensors = Vec::with_capacity(headers.iter().map(|h| h.tensors.len()).sum());
    let mut files = Vec::with_capacity(headers.len());
    let mut metadata = BTreeMap::new();
    for (i, (h, sizes)) in headers.into_iter().zip(&sizes).enumerate() {
        files.push(ModelFile {
            path: paths[i].clone(),
            bytes: h.file_bytes,
            tensor_count: h.tensors.len() as u64,
        });
        for (t, &(ty, bytes)) in h.tensors.into_iter().zip(sizes) {
            let (role, layer) = classify_tensor(&t.name);
            // Cannot saturate: the byte size, at least elements × bits / 8 for every type, was computed without
            // overflow; saturating keeps that an invariant rather than a panic.
            let elements = t.ne().iter().fold(1u64, |a, &d| a.saturating_mul(d));
            let shape = t.ne().iter().rev().copied().collect();
            tensors.push(TensorInfo {
                name: t.name,
                shape,
                dtype: Dtype::Ggml(ty),
                bytes,
                elements,
                parameters: elements,
                role,
                layer,
                packing: None,
                file: i as u32,
                offset: h.data_offset + t.offset,
            });
        }
        // Shard 1 carries the model's metadata; later shards repeat only the split keys.
        for (k, v) in h.metadata {
            metadata.entry(k).or_insert(v);
        }
    }
    let hparams = hparams_from_metadata(&architecture, &metadata, &tensors);
    if let Some(n) = hparams.block_count.filter(|&n| n > super::MAX_BLOCKS) {
        return Err(ModelError::model(
            &paths[0],
            Defect::TooMany {
                what: "block (layer)",
                count: n,
                limit: super::MAX_BLOCKS,
            },
        ));
    }
    super::check_hparams(Format::Gguf, &architecture, &hparams, &metadata)
        .map_err(|d| ModelError::model(&paths[0], d))?;
    crate::spec::check_attention(Format::Gguf, &architecture, &hparams, &tensors)
        .map_err(|d| ModelError::model(&paths[0], d))?;
    let file_type = metadata
        .get("general.file_type")
        .and_then(MetaValue::as_u64)
        .and_then(|v| u32::try_from(v).ok())
        .map(|id| (id, file_type_name(id, reading)));
    let name = metadata
        .get("general.name")
        .and_then(MetaValue::as_str)
        .map(str::to_string);
    Ok(super::assemble(
        Format::Gguf,
        Some(version),
        big_endian,
        architecture,
        name,
        file_type,
        Some(reading),
        hparams,
        files,
        tensors,
        metadata,
    ))
}
