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
//! peak target (measured worst case 54 MiB in `tests/safetensors_reader.rs`). Tensor data is never read.
//!
//! May touch: the model file(s), the index, and `config.json` in the model's directory, with bounded reads.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::hf_config::{self, HfConfig, json_error_message, json_error_offset};
use super::{
    Defect, Dtype, Format, MetaValue, ModelError, ModelFile, ModelSpec, Quantization, Role,
    TensorInfo, classify_tensor,
};

/// Header bytes of one file. Upstream refuses headers over 100,000,000 bytes; our peak-memory target for
/// reading any header is 64 MiB, and the header buffer, its parsed records (at most
/// [`MAX_PARSED_HEADER_BYTES`]) and serde_json's scratch string (at most [`MAX_STRING_BYTES`]) are alive
/// together, so the buffer gets 32 MiB. Real headers are far smaller: a shard of DeepSeek-V3 is about 60 KiB,
/// and all of its 92k tensors in one file would take about 10 MiB.
pub const MAX_HEADER_BYTES: u64 = 32 << 20;
/// Heap the parsed records of one header may take: per tensor the record (80 bytes) plus its name and shape
/// buffers, and every `__metadata__` key and value. A real entry costs about 150 bytes, so a file of
/// [`MAX_TENSORS_PER_FILE`] real tensors fits; with the other bounds it caps one header's cost under 64 MiB
/// whatever the JSON holds (measured worst case 54 MiB, `tests/safetensors_reader.rs`).
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
pub const MAX_TENSORS: u64 = 1 << 18;
/// Dimensions of one tensor: NumPy 2's `NPY_MAXDIMS` is 64, and no framework writes more. Bounds the shape
/// vector (a 32 MiB header could otherwise declare a 16-million-entry shape).
pub const MAX_DIMS: usize = 64;
/// Files in one model. DeepSeek-V3 has 163 shards; 65,536 bounds the file table and the number of headers
/// read.
pub const MAX_FILES: u64 = 65_536;
/// Size of a `*.safetensors.index.json`. DeepSeek-V3's (92k entries of about 95 bytes) is about 9 MiB.
pub const MAX_INDEX_BYTES: u64 = 32 << 20;
/// The little-endian u64 header length that starts every file.
const LENGTH_PREFIX_BYTES: u64 = 8;
/// transformers' names: the sharded index, the single-file checkpoint, the configuration.
pub const INDEX_FILE: &str = "model.safetensors.index.json";
pub const SINGLE_FILE: &str = "model.safetensors";
pub const CONFIG_FILE: &str = "config.json";
const INDEX_SUFFIX: &str = ".safetensors.index.json";
const WEIGHTS_SUFFIX: &str = ".safetensors";
/// The reserved header key for the free-form string map.
const METADATA_KEY: &str = "__metadata__";

/// A safetensors dtype: everything the upstream crate's `Dtype` knows (safetensors 0.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[allow(non_camel_case_types)]
pub enum StDtype {
    BOOL,
    F4,
    F6_E2M3,
    F6_E3M2,
    U8,
    I8,
    F8_E5M2,
    F8_E4M3,
    F8_E8M0,
    F8_E4M3FNUZ,
    F8_E5M2FNUZ,
    I16,
    U16,
    F16,
    BF16,
    I32,
    U32,
    F32,
    C64,
    F64,
    I64,
    U64,
}

impl StDtype {
    pub const ALL: [StDtype; 22] = [
        StDtype::BOOL,
        StDtype::F4,
        StDtype::F6_E2M3,
        StDtype::F6_E3M2,
        StDtype::U8,
        StDtype::I8,
        StDtype::F8_E5M2,
        StDtype::F8_E4M3,
        StDtype::F8_E8M0,
        StDtype::F8_E4M3FNUZ,
        StDtype::F8_E5M2FNUZ,
        StDtype::I16,
        StDtype::U16,
        StDtype::F16,
        StDtype::BF16,
        StDtype::I32,
        StDtype::U32,
        StDtype::F32,
        StDtype::C64,
        StDtype::F64,
        StDtype::I64,
        StDtype::U64,
    ];

    /// The dtype string in the header (`BF16`, `F8_E4M3`).
    pub fn name(self) -> &'static str {
        match self {
            StDtype::BOOL => "BOOL",
            StDtype::F4 => "F4",
            StDtype::F6_E2M3 => "F6_E2M3",
            StDtype::F6_E3M2 => "F6_E3M2",
            StDtype::U8 => "U8",
            StDtype::I8 => "I8",
            StDtype::F8_E5M2 => "F8_E5M2",
            StDtype::F8_E4M3 => "F8_E4M3",
            StDtype::F8_E8M0 => "F8_E8M0",
            StDtype::F8_E4M3FNUZ => "F8_E4M3FNUZ",
            StDtype::F8_E5M2FNUZ => "F8_E5M2FNUZ",
            StDtype::I16 => "I16",
            StDtype::U16 => "U16",
            StDtype::F16 => "F16",
            StDtype::BF16 => "BF16",
            StDtype::I32 => "I32",
            StDtype::U32 => "U32",
            StDtype::F32 => "F32",
            StDtype::C64 => "C64",
            StDtype::F64 => "F64",
            StDtype::I64 => "I64",
            StDtype::U64 => "U64",
        }
    }

    /// Bits per element (upstream `Dtype::bitsize`): F4 is 4, F6_* are 6.
    pub fn bits(self) -> u64 {
        match self {
            StDtype::F4 => 4,
            StDtype::F6_E2M3 | StDtype::F6_E3M2 => 6,
            StDtype::BOOL
            | StDtype::U8
            | StDtype::I8
            | StDtype::F8_E5M2
            | StDtype::F8_E4M3
            | StDtype::F8_E8M0
            | StDtype::F8_E4M3FNUZ
            | StDtype::F8_E5M2FNUZ => 8,
            StDtype::I16 | StDtype::U16 | StDtype::F16 | StDtype::BF16 => 16,
            StDtype::I32 | StDtype::U32 | StDtype::F32 => 32,
            StDtype::C64 | StDtype::F64 | StDtype::I64 | StDtype::U64 => 64,
        }
    }

    /// The dtype for a header string; `None` when unknown.
    pub fn from_name(s: &str) -> Option<StDtype> {
        StDtype::ALL.into_iter().find(|d| d.name() == s)
    }

    /// Whether the dtype is an integer type (packed quantized weights are stored in these).
    pub fn is_integer(self) -> bool {
        matches!(
            self,
            StDtype::U8
                | StDtype::I8
                | StDtype::I16
                | StDtype::U16
                | StDtype::I32
                | StDtype::U32
                | StDtype::I64
                | StDtype::U64
        )
    }

    /// Exact bytes of `elements` elements: `elements × bits / 8`. An error on overflow, or when sub-byte
    /// elements do not fill whole bytes (upstream would round; an exact size is required here).
    pub fn bytes_for(self, elements: u64) -> Result<u64, &'static str> {
        let bits = elements
            .checked_mul(self.bits())
            .ok_or("byte size overflows 64 bits")?;
        if !bits.is_multiple_of(8) {
            return Err("sub-byte elements do not fill whole bytes");
        }
        Ok(bits / 8)
    }
}

/// One tensor entry of a header, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct RawTensor {
    pub name: String,
    pub dtype: StDtype,
    /// Row-major shape as stored.
    pub shape: Vec<u64>,
    /// `data_offsets`, relative to the data section.
    pub begin: u64,
    pub end: u64,
    pub elements: u64,
}

/// The header of one safetensors file.
#[derive(Debug, Clone, PartialEq)]
pub struct Header {
    pub file_bytes: u64,
    /// The declared JSON length.
    pub header_bytes: u64,
    /// Absolute offset of the data section: 8 + header length.
    pub data_offset: u64,
    /// `__metadata__`.
    pub metadata: BTreeMap<String, String>,
    /// In file order as declared (not sorted).
    pub tensors: Vec<RawTensor>,
}

type Res<T> = Result<T, (u64, Defect)>;

/// Parses one whole safetensors file held in memory (fuzzing, tests): length prefix, header, and the check
/// that the tensors tile the data section exactly. Errors carry the byte offset in `bytes`.
pub fn parse_header_bytes(bytes: &[u8]) -> Result<Header, (u64, Defect)> {
    let file_bytes = bytes.len() as u64;
    let prefix: [u8; 8] = bytes.get(..8).and_then(|b| b.try_into().ok()).ok_or((
        0,
        Defect::Truncated {
            needed: LENGTH_PREFIX_BYTES,
            available: file_bytes,
        },
    ))?;
    let header_bytes = u64::from_le_bytes(prefix);
    check_length(header_bytes, file_bytes)?;
    // `check_length` bounded the header by the slice's length, so the range is in bounds; `get` keeps it so.
    let json = usize::try_from(LENGTH_PREFIX_BYTES + header_bytes)
        .ok()
        .and_then(|end| bytes.get(8..end))
        .ok_or((
            LENGTH_PREFIX_BYTES,
            Defect::Truncated {
                needed: header_bytes,
                available: file_bytes.saturating_sub(LENGTH_PREFIX_BYTES),
            },
        ))?;
    parse_json_header(json, file_bytes)
}

/// The length prefix against the limit and the file.
fn check_length(header_bytes: u64, file_bytes: u64) -> Res<()> {
    if header_bytes > MAX_HEADER_BYTES {
        return Err((
            0,
            Defect::TooMany {
                what: "safetensors header bytes",
                count: header_bytes,
                limit: MAX_HEADER_BYTES,
            },
        ));
    }
    let available = file_bytes.saturating_sub(LENGTH_PREFIX_BYTES);
    if header_bytes > available {
        return Err((
            LENGTH_PREFIX_BYTES,
            Defect::Truncated {
                needed: header_bytes,
                available,
            },
        ));
    }
    Ok(())
}

/// Parses and validates the JSON header (`json` is the header, starting at file byte 8) of a file of
/// `file_bytes` bytes.
fn parse_json_header(json: &[u8], file_bytes: u64) -> Res<Header> {
    let header_bytes = json.len() as u64;
    let data_offset = LENGTH_PREFIX_BYTES + header_bytes;
    let at = |pos: u64| LENGTH_PREFIX_BYTES + pos;
    if let Err(e) = std::str::from_utf8(json) {
        return Err((
            at(e.valid_up_to() as u64),
            Defect::SafetensorsHeader("not valid UTF-8".into()),
        ));
    }
    if let Some((start, len)) = longest_string(json)
        && len > MAX_STRING_BYTES
    {
        return Err((
            at(start),
            Defect::StringTooLong {
                len,
                limit: MAX_STRING_BYTES,
            },
        ));
    }
    let mut state = ParseState::default();
    let mut de = serde_json::Deserializer::from_slice(json);
    let parsed = HeaderSeed { st: &mut state }
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v));
    let (metadata, mut tensors) = match parsed {
        Ok(v) => v,
        Err(e) => {
            let offset = at(json_error_offset(json, &e));
            if let Some(d) = state.defect.take() {
                return Err((offset, d));
            }
            let msg = json_error_message(&e);
            let defect = match (e.classify(), state.ctx) {
                (serde_json::error::Category::Data, Ctx::Tensor) => Defect::BadTensor {
                    name: state.current,
                    reason: msg,
                },
                (serde_json::error::Category::Data, Ctx::Metadata) => Defect::SafetensorsHeader(
                    format!("{METADATA_KEY} must be an object of string values: {msg}"),
                ),
                (serde_json::error::Category::Data, Ctx::Top) => Defect::SafetensorsHeader(
                    format!("must be a JSON object of tensor entries: {msg}"),
                ),
                _ => Defect::SafetensorsHeader(format!("invalid JSON: {msg}")),
            };
            return Err((offset, defect));
        }
    };
    let data_bytes = file_bytes.saturating_sub(data_offset);
    validate(json, &mut tensors, data_offset, data_bytes)?;
    Ok(Header {
        file_bytes,
        header_bytes,
        data_offset,
        metadata: metadata.unwrap_or_default(),
        tensors,
    })
}

/// Per-tensor sizes, unique names, and the exact tiling of the data section (upstream `Metadata::validate`).
fn validate(json: &[u8], tensors: &mut [RawTensor], data_offset: u64, data_bytes: u64) -> Res<()> {
    let entry_at = |name: &str| LENGTH_PREFIX_BYTES + locate_entry(json, name);
    for t in tensors.iter_mut() {
        let elements = t
            .shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| {
                (
                    entry_at(&t.name),
                    Defect::SizeOverflow {
                        name: t.name.clone(),
                    },
                )
            })?;
        t.elements = elements;
        let bytes = t.dtype.bytes_for(elements).map_err(|reason| {
            let defect = if reason.contains("overflow") {
                Defect::SizeOverflow {
                    name: t.name.clone(),
                }
            } else {
                Defect::BadTensor {
                    name: t.name.clone(),
                    reason: format!(
                        "{elements} elements of the {}-bit {} fill {} bits, not whole bytes",
                        t.dtype.bits(),
                        t.dtype.name(),
                        elements.saturating_mul(t.dtype.bits())
                    ),
                }
            };
            (entry_at(&t.name), defect)
        })?;
        if t.begin > t.end {
            return Err((
                entry_at(&t.name),
                Defect::BadTensor {
                    name: t.name.clone(),
                    reason: format!("data_offsets [{}, {}] begin after they end", t.begin, t.end),
                },
            ));
        }
        if t.end - t.begin != bytes {
            return Err((
                entry_at(&t.name),
                Defect::BadTensor {
                    name: t.name.clone(),
                    reason: format!(
                        "data_offsets [{}, {}] span {} bytes, but shape {:?} of {} needs {bytes}",
                        t.begin,
                        t.end,
                        t.end - t.begin,
                        t.shape,
                        t.dtype.name()
                    ),
                },
            ));
        }
    }
    // Duplicate names: JSON allows repeated keys; upstream keeps one silently, which would hide a tensor.
    let mut by_name: Vec<&RawTensor> = tensors.iter().collect();
    by_name.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    if let Some(w) = by_name.windows(2).find(|w| w[0].name == w[1].name) {
        let name = w[0].name.clone();
        return Err((entry_at(&name), Defect::DuplicateTensor(name)));
    }
    // In bounds first (the most useful message for a cut file), then the exact tiling.
    if let Some(t) = tensors.iter().find(|t| t.end > data_bytes) {
        return Err((
            entry_at(&t.name),
            Defect::TensorOutOfFile {
                name: t.name.clone(),
                start: data_offset.saturating_add(t.begin),
                end: data_offset.saturating_add(t.end),
                file_bytes: data_offset.saturating_add(data_bytes),
            },
        ));
    }
    let mut order: Vec<&RawTensor> = tensors.iter().collect();
    order.sort_unstable_by_key(|t| (t.begin, t.end));
    let mut expected = 0u64;
    for t in order {
        if t.begin < expected {
            return Err((
                entry_at(&t.name),
                Defect::OverlappingTensor {
                    name: t.name.clone(),
                    offset: t.begin,
                    previous_end: expected,
                },
            ));
        }
        if t.begin > expected {
            return Err((
                entry_at(&t.name),
                Defect::TensorGap {
                    name: t.name.clone(),
                    offset: t.begin,
                    expected,
                },
            ));
        }
        expected = t.end;
    }
    if expected != data_bytes {
        return Err((
            data_offset.saturating_add(expected),
            Defect::SafetensorsHeader(format!(
                "the tensors cover {expected} bytes but the data section holds {data_bytes}: the last offset must be the end of the file"
            )),
        ));
    }
    Ok(())
}

/// Start and raw length (escapes included, quotes excluded) of the longest string token in `json`. A raw
/// length bounds the decoded one. An unterminated string counts to the end; the parser reports it.
fn longest_string(json: &[u8]) -> Option<(u64, u64)> {
    let mut best: Option<(u64, u64)> = None;
    let mut open: Option<usize> = None;
    let mut escaped = false;
    let mut record = |start: usize, end: usize| {
        let len = (end - start) as u64;
        if best.is_none_or(|(_, l)| len > l) {
            best = Some((start as u64, len));
        }
    };
    for (i, &b) in json.iter().enumerate() {
        match open {
            None if b == b'"' => open = Some(i + 1),
            None => {}
            Some(_) if escaped => escaped = false,
            Some(_) if b == b'\\' => escaped = true,
            Some(start) if b == b'"' => {
                record(start, i);
                open = None;
            }
            Some(_) => {}
        }
    }
    if let Some(start) = open {
        record(start, json.len());
    }
    best
}

/// Offset within `json` of the entry `"name":`, for messages; 0 (the header's start) when not found, e.g. when
/// the file escapes the name differently than serde_json does.
fn locate_entry(json: &[u8], name: &str) -> u64 {
    let Ok(quoted) = serde_json::to_string(name) else {
        return 0;
    };
    let needle = quoted.as_bytes();
    if needle.is_empty() || needle.len() > json.len() {
        return 0;
    }
    json.windows(needle.len())
        .position(|w| w == needle)
        .map_or(0, |p| p as u64)
}

// ---------------------------------------------------------------------------------------------------------
// Streaming header parse
// ---------------------------------------------------------------------------------------------------------

/// Where the visitor is, so a type error from serde_json becomes the right [`Defect`].
#[derive(Debug, Default, Clone, Copy, PartialEq)]
enum Ctx {
    #[default]
    Top,
    Metadata,
    Tensor,
}

#[derive(Debug, Default)]
struct ParseState {
    ctx: Ctx,
    /// The tensor being parsed.
    current: String,
    /// A defect with its own variant (limits), which takes precedence over serde_json's error.
    defect: Option<Defect>,
    parsed_bytes: u64,
}

struct HeaderSeed<'s> {
    st: &'s mut ParseState,
}

type Parsed = (Option<BTreeMap<String, String>>, Vec<RawTensor>);

impl<'de> DeserializeSeed<'de> for HeaderSeed<'_> {
    type Value = Parsed;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Parsed, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for HeaderSeed<'_> {
    type Value = Parsed;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object of tensor entries")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Parsed, A::Error> {
        let st = self.st;
        let mut metadata: Option<Option<BTreeMap<String, String>>> = None;
        let mut tensors: Vec<RawTensor> = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == METADATA_KEY {
                if metadata.is_some() {
                    return Err(fail(
                        st,
                        Defect::SafetensorsHeader(format!("{METADATA_KEY} appears twice")),
                    ));
                }
                st.ctx = Ctx::Metadata;
                metadata = Some(map.next_value_seed(MetadataSeed { st: &mut *st })?);
                st.ctx = Ctx::Top;
                continue;
            }
            if tensors.len() as u64 >= MAX_TENSORS_PER_FILE {
                return Err(fail(
                    st,
                    Defect::TooMany {
                        what: "tensors in one safetensors file",
                        count: tensors.len() as u64 + 1,
                        limit: MAX_TENSORS_PER_FILE,
                    },
                ));
            }
            st.ctx = Ctx::Tensor;
            st.current = key;
            let (dtype, shape, (begin, end)) = map.next_value_seed(EntrySeed)?;
            st.ctx = Ctx::Top;
            let name = std::mem::take(&mut st.current);
            // The record, its name and its shape buffer. The vector's spare capacity (up to one record per
            // tensor while it grows) is not charged; `MAX_TENSORS_PER_FILE` bounds it to 10 MiB.
            let cost = std::mem::size_of::<RawTensor>() as u64
                + name.len() as u64
                + 8 * shape.len() as u64;
            charge(st, cost)?;
            tensors.push(RawTensor {
                name,
                dtype,
                shape,
                begin,
                end,
                elements: 0,
            });
        }
        Ok((metadata.flatten(), tensors))
    }
}

/// `__metadata__`: `null` or an object of string values, each key and value charged to the parse budget.
struct MetadataSeed<'s> {
    st: &'s mut ParseState,
}

impl<'de> DeserializeSeed<'de> for MetadataSeed<'_> {
    type Value = Option<BTreeMap<String, String>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for MetadataSeed<'_> {
    type Value = Option<BTreeMap<String, String>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("null or an object of string values")
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let st = self.st;
        let mut out = BTreeMap::new();
        while let Some((k, v)) = map.next_entry::<String, String>()? {
            charge(st, (k.len() + v.len()) as u64)?;
            out.insert(k, v);
        }
        Ok(Some(out))
    }
}

/// Charges `bytes` to the parse budget; past it, the parse stops with [`Defect::TooMany`].
fn charge<E: de::Error>(st: &mut ParseState, bytes: u64) -> Result<(), E> {
    st.parsed_bytes = st.parsed_bytes.saturating_add(bytes);
    if st.parsed_bytes > MAX_PARSED_HEADER_BYTES {
        let count = st.parsed_bytes;
        return Err(fail(
            st,
            Defect::TooMany {
                what: "bytes of parsed safetensors header records",
                count,
                limit: MAX_PARSED_HEADER_BYTES,
            },
        ));
    }
    Ok(())
}

/// Records a defect with its own variant and aborts the parse.
fn fail<E: de::Error>(st: &mut ParseState, defect: Defect) -> E {
    let msg = defect.to_string();
    st.defect = Some(defect);
    E::custom(msg)
}

/// One tensor entry: exactly `dtype`, `shape` and `data_offsets`.
struct EntrySeed;

type Entry = (StDtype, Vec<u64>, (u64, u64));

impl<'de> DeserializeSeed<'de> for EntrySeed {
    type Value = Entry;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Entry, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EntrySeed {
    type Value = Entry;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object {\"dtype\", \"shape\", \"data_offsets\"}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entry, A::Error> {
        let mut dtype = None;
        let mut shape = None;
        let mut offsets = None;
        while let Some(key) = map.next_key::<String>()? {
            let dup = match key.as_str() {
                "dtype" => dtype.replace(map.next_value_seed(DtypeSeed)?).is_some(),
                "shape" => shape.replace(map.next_value_seed(ShapeSeed)?).is_some(),
                "data_offsets" => offsets.replace(map.next_value_seed(OffsetsSeed)?).is_some(),
                other => {
                    return Err(de::Error::custom(format!(
                        "unknown field {other:?}; a tensor entry has exactly dtype, shape and data_offsets"
                    )));
                }
            };
            if dup {
                return Err(de::Error::custom(format!("field {key:?} appears twice")));
            }
        }
        match (dtype, shape, offsets) {
            (Some(d), Some(s), Some(o)) => Ok((d, s, o)),
            (None, _, _) => Err(de::Error::missing_field("dtype")),
            (_, None, _) => Err(de::Error::missing_field("shape")),
            (_, _, None) => Err(de::Error::missing_field("data_offsets")),
        }
    }
}

struct DtypeSeed;

impl<'de> DeserializeSeed<'de> for DtypeSeed {
    type Value = StDtype;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<StDtype, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for DtypeSeed {
    type Value = StDtype;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a dtype string")
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<StDtype, E> {
        StDtype::from_name(s).ok_or_else(|| {
            let short: String = s.chars().take(40).collect();
            E::custom(format!(
                "unknown dtype {short:?}; known: {}",
                StDtype::ALL.map(StDtype::name).join(", ")
            ))
        })
    }
}

/// A non-negative integer (a dimension or an offset), with a clear message for negative and fractional values.
struct Uint(&'static str);

impl<'de> DeserializeSeed<'de> for Uint {
    type Value = u64;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u64, D::Error> {
        d.deserialize_u64(self)
    }
}

impl Visitor<'_> for Uint {
    type Value = u64;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a non-negative integer ({})", self.0)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        Ok(v)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        u64::try_from(v).map_err(|_| E::custom(format!("{} {v} is negative", self.0)))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<u64, E> {
        Err(E::custom(format!(
            "{} {v} is not a non-negative 64-bit integer",
            self.0
        )))
    }
}

struct ShapeSeed;

impl<'de> DeserializeSeed<'de> for ShapeSeed {
    type Value = Vec<u64>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<u64>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ShapeSeed {
    type Value = Vec<u64>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a shape array of non-negative integers")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u64>, A::Error> {
        let mut shape = Vec::new();
        while let Some(d) = seq.next_element_seed(Uint("dimension"))? {
            if shape.len() >= MAX_DIMS {
                return Err(de::Error::custom(format!(
                    "shape has more than {MAX_DIMS} dimensions"
                )));
            }
            shape.push(d);
        }
        Ok(shape)
    }
}

struct OffsetsSeed;

impl<'de> DeserializeSeed<'de> for OffsetsSeed {
    type Value = (u64, u64);
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(u64, u64), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for OffsetsSeed {
    type Value = (u64, u64);
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("data_offsets [begin, end]")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(u64, u64), A::Error> {
        let short = || de::Error::custom("data_offsets must be [begin, end]");
        let begin = seq.next_element_seed(Uint("offset"))?.ok_or_else(short)?;
        let end = seq.next_element_seed(Uint("offset"))?.ok_or_else(short)?;
        if seq.next_element::<IgnoredAny>()?.is_some() {
            return Err(short());
        }
        Ok((begin, end))
    }
}

// ---------------------------------------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------------------------------------

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ModelError + '_ {
    move |source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn invalid(path: &Path, (offset, defect): (u64, Defect)) -> ModelError {
    ModelError::Invalid {
        path: path.to_path_buf(),
        offset,
        defect,
    }
}

fn invalid_model(path: &Path, defect: Defect) -> ModelError {
    ModelError::InvalidModel {
        path: path.to_path_buf(),
        defect,
    }
}

/// Reads a whole small file (index, config) of at most `limit` bytes.
pub(crate) fn read_bounded(
    path: &Path,
    limit: u64,
    what: &'static str,
) -> Result<Vec<u8>, ModelError> {
    let file = crate::input::open_regular(path).map_err(io_err(path))?;
    let len = file.metadata().map_err(io_err(path))?.len();
    let too_big = |count| invalid(path, (0, Defect::TooMany { what, count, limit }));
    if len > limit {
        return Err(too_big(len));
    }
    let mut buf = Vec::with_capacity(len as usize);
    // `take` guards against a file that grew since `metadata`.
    file.take(limit + 1)
        .read_to_end(&mut buf)
        .map_err(io_err(path))?;
    if buf.len() as u64 > limit {
        return Err(too_big(buf.len() as u64));
    }
    Ok(buf)
}

/// Reads the length prefix and header of one file (never its data) and validates them.
pub fn read_header(path: &Path) -> Result<Header, ModelError> {
    let (json, file_bytes) = read_header_json(path)?;
    parse_json_header(&json, file_bytes).map_err(|e| invalid(path, e))
}

fn read_header_json(path: &Path) -> Result<(Vec<u8>, u64), ModelError> {
    // A directory named like a .safetensors file, a FIFO or a device is refused before any read.
    let mut file = crate::input::open_regular(path).map_err(io_err(path))?;
    let meta = file.metadata().map_err(io_err(path))?;
    let file_bytes = meta.len();
    if file_bytes < LENGTH_PREFIX_BYTES {
        return Err(invalid(
            path,
            (
                0,
                Defect::Truncated {
                    needed: LENGTH_PREFIX_BYTES,
                    available: file_bytes,
                },
            ),
        ));
    }
    let mut prefix = [0u8; 8];
    file.read_exact(&mut prefix)
        .map_err(|e| invalid(path, (0, Defect::ReadFailed(e.to_string()))))?;
    let header_bytes = u64::from_le_bytes(prefix);
    check_length(header_bytes, file_bytes).map_err(|e| invalid(path, e))?;
    // Bounded by MAX_HEADER_BYTES and by the file's length, both checked above.
    let mut json = vec![0u8; header_bytes as usize];
    file.read_exact(&mut json).map_err(|e| {
        invalid(
            path,
            (LENGTH_PREFIX_BYTES, Defect::ReadFailed(e.to_string())),
        )
    })?;
    Ok((json, file_bytes))
}

/// Offset of a tensor's entry in a file's header, for a message about a defect found after the header was
/// dropped (a name stored in two shards). 8 when the header cannot be read again.
fn entry_offset(path: &Path, name: &str) -> u64 {
    read_header_json(path).map_or(LENGTH_PREFIX_BYTES, |(json, _)| {
        LENGTH_PREFIX_BYTES + locate_entry(&json, name)
    })
}

// ---------------------------------------------------------------------------------------------------------
// Sharded index
// ---------------------------------------------------------------------------------------------------------

/// A parsed `*.safetensors.index.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct Index {
    /// Shard file names, sorted, unique.
    pub files: Vec<String>,
    /// Tensor name → index into `files`, sorted by name.
    pub weight_map: Vec<(String, u32)>,
    /// `metadata.total_size`, when present.
    pub total_size: Option<u64>,
}

/// Parses index bytes. `path` is for messages.
pub fn parse_index(path: &Path, bytes: &[u8]) -> Result<Index, ModelError> {
    let index_err = |msg: String| invalid_model(path, Defect::Index(msg));
    let mut limit_hit = None;
    let raw = {
        let mut de = serde_json::Deserializer::from_slice(bytes);
        IndexSeed {
            limit_hit: &mut limit_hit,
        }
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v))
    };
    let raw = match raw {
        Ok(r) => r,
        Err(e) => {
            let offset = json_error_offset(bytes, &e);
            let defect = limit_hit.unwrap_or_else(|| {
                Defect::Index(format!("invalid JSON: {}", json_error_message(&e)))
            });
            return Err(invalid(path, (offset, defect)));
        }
    };
    let Some(mut entries) = raw.weight_map else {
        return Err(index_err("no \"weight_map\" object".into()));
    };
    if entries.is_empty() {
        return Err(index_err("\"weight_map\" lists no tensors".into()));
    }
    for (_, file) in &entries {
        check_shard_name(file).map_err(|why| {
            index_err(format!(
                "weight_map names {file:?}, which {why}; shard names must be plain file names in the index's directory"
            ))
        })?;
    }
    entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    if let Some(w) = entries.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(index_err(format!(
            "weight_map lists tensor {:?} twice",
            w[0].0
        )));
    }
    let mut files: Vec<String> = entries.iter().map(|(_, f)| f.clone()).collect();
    files.sort_unstable();
    files.dedup();
    if files.len() as u64 > MAX_FILES {
        return Err(invalid_model(
            path,
            Defect::TooMany {
                what: "shard files",
                count: files.len() as u64,
                limit: MAX_FILES,
            },
        ));
    }
    let weight_map = entries
        .into_iter()
        .map(|(name, file)| {
            // Present by construction; u32 holds MAX_FILES.
            let i = files.binary_search(&file).unwrap_or(0) as u32;
            (name, i)
        })
        .collect();
    Ok(Index {
        files,
        weight_map,
        total_size: raw.total_size,
    })
}

/// Why a weight_map file name is not a plain name in the index's directory.
fn check_shard_name(file: &str) -> Result<(), &'static str> {
    if file.is_empty() {
        return Err("is empty");
    }
    if file.contains(['/', '\\', '\0']) {
        return Err("contains a path separator or NUL");
    }
    if file == "." || file == ".." {
        return Err("is a directory reference");
    }
    if file.len() >= 2 && file.as_bytes().get(1) == Some(&b':') {
        return Err("has a drive prefix");
    }
    Ok(())
}

struct RawIndex {
    weight_map: Option<Vec<(String, String)>>,
    total_size: Option<u64>,
}

struct IndexSeed<'a> {
    limit_hit: &'a mut Option<Defect>,
}

impl<'de> DeserializeSeed<'de> for IndexSeed<'_> {
    type Value = RawIndex;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<RawIndex, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for IndexSeed<'_> {
    type Value = RawIndex;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an index object {\"metadata\", \"weight_map\"}")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawIndex, A::Error> {
        let mut out = RawIndex {
            weight_map: None,
            total_size: None,
        };
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "weight_map" => {
                    if out.weight_map.is_some() {
                        return Err(de::Error::custom("\"weight_map\" appears twice"));
                    }
                    out.weight_map = Some(map.next_value_seed(WeightMapSeed {
                        limit_hit: &mut *self.limit_hit,
                    })?);
                }
                "metadata" => {
                    out.total_size = map.next_value_seed(IndexMetaSeed)?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(out)
    }
}

struct WeightMapSeed<'a> {
    limit_hit: &'a mut Option<Defect>,
}

impl<'de> DeserializeSeed<'de> for WeightMapSeed<'_> {
    type Value = Vec<(String, String)>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for WeightMapSeed<'_> {
    type Value = Vec<(String, String)>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a weight_map object of tensor name → shard file name")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(entry) = map.next_entry::<String, String>()? {
            if out.len() as u64 >= MAX_TENSORS {
                let d = Defect::TooMany {
                    what: "weight_map entries",
                    count: out.len() as u64 + 1,
                    limit: MAX_TENSORS,
                };
                let msg = d.to_string();
                *self.limit_hit = Some(d);
                return Err(de::Error::custom(msg));
            }
            out.push(entry);
        }
        Ok(out)
    }
}

/// The index's `metadata`: only `total_size` is read (an integer; an integral float is accepted, as some
/// writers emit `1.6e10`-style values).
struct IndexMetaSeed;

impl<'de> DeserializeSeed<'de> for IndexMetaSeed {
    type Value = Option<u64>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<u64>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for IndexMetaSeed {
    type Value = Option<u64>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a metadata object")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<u64>, E> {
        Ok(None)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<u64>, A::Error> {
        let mut total = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == "total_size" {
                total = map.next_value_seed(TotalSizeSeed)?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(total)
    }
}

struct TotalSizeSeed;

impl<'de> DeserializeSeed<'de> for TotalSizeSeed {
    type Value = Option<u64>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<u64>, D::Error> {
        d.deserialize_any(self)
    }
}

impl Visitor<'_> for TotalSizeSeed {
    type Value = Option<u64>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("metadata.total_size as a non-negative integer")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<u64>, E> {
        Ok(None)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Option<u64>, E> {
        Ok(Some(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Option<u64>, E> {
        u64::try_from(v)
            .map(Some)
            .map_err(|_| E::custom(format!("metadata.total_size {v} is negative")))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Option<u64>, E> {
        // 2^53: every integer below it is exact in f64.
        const EXACT_LIMIT: f64 = 9_007_199_254_740_992.0;
        if v >= 0.0 && v.fract() == 0.0 && v < EXACT_LIMIT {
            Ok(Some(v as u64))
        } else {
            Err(E::custom(format!(
                "metadata.total_size {v} is not a non-negative integer"
            )))
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Loading a model
// ---------------------------------------------------------------------------------------------------------

/// Where a model's tensors are.
struct Layout {
    dir: PathBuf,
    files: Vec<PathBuf>,
    /// The index and what it says, for a sharded model.
    index: Option<(PathBuf, Index)>,
}

/// Reads a safetensors model: a `.safetensors` file (the whole model when a `*.safetensors.index.json` beside
/// it lists the file), a `*.safetensors.index.json`, `config.json` (its directory), or a directory (preferring
/// `model.safetensors.index.json`, then `model.safetensors`, then every `*.safetensors` in it, sorted).
/// `config.json` is read from the same directory when present.
pub fn load(path: &Path) -> Result<ModelSpec, ModelError> {
    let meta = std::fs::metadata(path).map_err(io_err(path))?;
    let layout = if meta.is_dir() {
        layout_of_dir(path)?
    } else {
        layout_of_file(path)?
    };
    build(layout)
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn file_name_of(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn read_index(path: &Path) -> Result<Index, ModelError> {
    let bytes = read_bounded(path, MAX_INDEX_BYTES, "safetensors index bytes")?;
    parse_index(path, &bytes)
}

fn index_layout(index_path: &Path, index: Index) -> Layout {
    let dir = parent_dir(index_path);
    Layout {
        files: index.files.iter().map(|f| dir.join(f)).collect(),
        dir,
        index: Some((index_path.to_path_buf(), index)),
    }
}

fn layout_of_file(path: &Path) -> Result<Layout, ModelError> {
    let name = file_name_of(path);
    let lower = name.to_ascii_lowercase();
    if lower == CONFIG_FILE {
        return layout_of_dir(&parent_dir(path));
    }
    if lower.ends_with(".json") {
        let index = read_index(path)?;
        return Ok(index_layout(path, index));
    }
    // A shard: the whole model when an index beside it lists it.
    let dir = parent_dir(path);
    for candidate in index_candidates(&dir)? {
        let index = read_index(&candidate)?;
        if index.files.binary_search(&name).is_ok() {
            return Ok(index_layout(&candidate, index));
        }
    }
    Ok(Layout {
        dir,
        files: vec![path.to_path_buf()],
        index: None,
    })
}

/// Index files in `dir`: `model.safetensors.index.json` first, then any other `*.safetensors.index.json`,
/// sorted.
fn index_candidates(dir: &Path) -> Result<Vec<PathBuf>, ModelError> {
    let mut others = Vec::new();
    for name in dir_names(dir)? {
        if name != INDEX_FILE && name.ends_with(INDEX_SUFFIX) {
            others.push(dir.join(name));
        }
    }
    others.sort();
    let preferred = dir.join(INDEX_FILE);
    let mut out = Vec::with_capacity(others.len() + 1);
    if preferred.is_file() {
        out.push(preferred);
    }
    out.extend(others);
    Ok(out)
}

/// Names of the plain files in `dir`, bounded by [`MAX_FILES`] relevant entries.
fn dir_names(dir: &Path) -> Result<Vec<String>, ModelError> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let entry = entry.map_err(io_err(dir))?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if !(name.ends_with(WEIGHTS_SUFFIX) || name.ends_with(INDEX_SUFFIX)) {
            continue;
        }
        if out.len() as u64 >= MAX_FILES {
            return Err(invalid_model(
                dir,
                Defect::TooMany {
                    what: "safetensors files in the directory",
                    count: out.len() as u64 + 1,
                    limit: MAX_FILES,
                },
            ));
        }
        if entry.path().is_file() {
            out.push(name);
        }
    }
    Ok(out)
}

fn layout_of_dir(dir: &Path) -> Result<Layout, ModelError> {
    let index = dir.join(INDEX_FILE);
    if index.is_file() {
        let parsed = read_index(&index)?;
        return Ok(index_layout(&index, parsed));
    }
    let single = dir.join(SINGLE_FILE);
    if single.is_file() {
        return Ok(Layout {
            dir: dir.to_path_buf(),
            files: vec![single],
            index: None,
        });
    }
    let mut files: Vec<PathBuf> = dir_names(dir)?
        .into_iter()
        .filter(|n| n.ends_with(WEIGHTS_SUFFIX))
        .map(|n| dir.join(n))
        .collect();
    if files.is_empty() {
        return Err(invalid_model(
            dir,
            Defect::UnknownFormat(format!(
                "the directory holds no {INDEX_FILE}, no {SINGLE_FILE} and no other *.safetensors file"
            )),
        ));
    }
    files.sort();
    Ok(Layout {
        dir: dir.to_path_buf(),
        files,
        index: None,
    })
}

/// Reads `config.json` in `dir`; `None` when there is none.
pub fn read_config(dir: &Path) -> Result<Option<HfConfig>, ModelError> {
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
                return Err(invalid_model(
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
            return Err(invalid_model(
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
            return Err(invalid_model(&dir, Defect::DuplicateTensor(name)));
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
    let (architecture, name, hparams) = match config {
        Some(c) => (
            c.model_type.unwrap_or_else(|| "unknown".into()),
            c.name,
            c.hparams,
        ),
        None => ("unknown".into(), None, Default::default()),
    };
    super::check_hparams(Format::Safetensors, &architecture, &hparams, &metadata)
        .map_err(|d| invalid_model(&dir.join(CONFIG_FILE), d))?;
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

/// The weight_map and the shards agree both ways, and `metadata.total_size` is the tensors' byte total.
fn check_index(
    index_path: &Path,
    idx: &Index,
    all: &[(u32, &RawTensor)],
) -> Result<(), ModelError> {
    let err = |msg: String| invalid_model(index_path, Defect::Index(msg));
    let file = |i: u32| idx.files.get(i as usize).map_or("?", String::as_str);
    // Both lists are sorted by name and free of duplicates: one merge walk.
    let (mut a, mut b) = (all.iter().peekable(), idx.weight_map.iter().peekable());
    loop {
        match (a.peek(), b.peek()) {
            (None, None) => break,
            (Some((f, t)), None) => {
                return Err(err(format!(
                    "{} holds tensor {:?}, which weight_map does not list",
                    file(*f),
                    t.name
                )));
            }
            (None, Some((name, f))) => {
                return Err(err(format!(
                    "weight_map puts tensor {name:?} in {}, which has no such tensor",
                    file(*f)
                )));
            }
            (Some((tf, t)), Some((name, mf))) => match t.name.as_str().cmp(name.as_str()) {
                std::cmp::Ordering::Less => {
                    return Err(err(format!(
                        "{} holds tensor {:?}, which weight_map does not list",
                        file(*tf),
                        t.name
                    )));
                }
                std::cmp::Ordering::Greater => {
                    return Err(err(format!(
                        "weight_map puts tensor {name:?} in {}, which has no such tensor",
                        file(*mf)
                    )));
                }
                std::cmp::Ordering::Equal => {
                    if tf != mf {
                        return Err(err(format!(
                            "weight_map puts tensor {name:?} in {}, but it is stored in {}",
                            file(*mf),
                            file(*tf)
                        )));
                    }
                    a.next();
                    b.next();
                }
            },
        }
    }
    if let Some(declared) = idx.total_size {
        let sum = all
            .iter()
            .try_fold(0u64, |acc, (_, t)| acc.checked_add(t.end - t.begin));
        if sum != Some(declared) {
            let sum = sum.map_or_else(|| "more than 2^64".to_string(), |s| s.to_string());
            return Err(err(format!(
                "metadata.total_size is {declared} but the shards' tensors hold {sum} bytes"
            )));
        }
    }
    Ok(())
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

/// Logical weights of a tensor, and how they are packed when the dtype does not say. The rules, first match:
///
/// 1. Role [`Role::QuantState`] (GPTQ/AWQ `qzeros`, `scales`, `g_idx`; FP8 `weight_scale(_inv)`; bitsandbytes
///    `absmax`, `quant_map`, `quant_state.*`; compressed-tensors `weight_scale`, `weight_zero_point`,
///    `weight_shape`, …): 0; these hold no weights.
/// 2. GPTQ/AWQ `*.qweight` and compressed-tensors `*.weight_packed` stored in an integer dtype: each element
///    packs `dtype bits / quantization bits` weights (int4 in I32: 8), so `elements × dtype bits / bits`, with
///    bits from `quantization_config` (`bits`, or `config_groups.*.weights.num_bits`), default 4. Packing:
///    `"gptq int4 in I32"`, `"compressed-tensors int4 in I32"`.
/// 3. bitsandbytes 4-bit: a U8 `*.weight` with a `<name>.quant_state.bitsandbytes__nf4` (or `__fp4`) sibling,
///    or, under a `bitsandbytes` 4-bit config, an `<name>.absmax` sibling: two weights per byte.
/// 4. MXFP4 (`quant_method: mxfp4`, gpt-oss): U8 `*_blocks` hold two FP4 weights per byte; the U8 `*_scales`
///    beside them hold none.
/// 5. Everything else: `elements` (F8 weights, F4/F6 whose element count already is the weight count, bnb
///    8-bit I8 weights).
fn parameters(
    t: &RawTensor,
    role: Role,
    quant: Option<&Quantization>,
    exists: &dyn Fn(&str) -> bool,
) -> (u64, Option<String>) {
    if role == Role::QuantState {
        return (0, None);
    }
    let method = quant.map_or("", |q| q.method.as_str());
    let packed_kind = if t.name.ends_with(".qweight") {
        Some(if method.is_empty() { "gptq" } else { method })
    } else if t.name.ends_with(".weight_packed") {
        Some("compressed-tensors")
    } else {
        None
    };
    if let Some(kind) = packed_kind
        && t.dtype.is_integer()
    {
        let bits = quant
            .and_then(|q| q.bits)
            .unwrap_or(hf_config::DEFAULT_PACKED_BITS);
        if bits > 0 && bits < t.dtype.bits() {
            let params = t.elements.saturating_mul(t.dtype.bits()) / bits;
            return (
                params,
                Some(format!("{kind} int{bits} in {}", t.dtype.name())),
            );
        }
    }
    if t.dtype == StDtype::U8 && t.name.ends_with(".weight") {
        let nf4 = exists(&format!("{}.quant_state.bitsandbytes__nf4", t.name));
        let fp4 = exists(&format!("{}.quant_state.bitsandbytes__fp4", t.name));
        let bnb4_config = method == "bitsandbytes"
            && quant.and_then(|q| q.bits) == Some(4)
            && exists(&format!("{}.absmax", t.name));
        if nf4 || fp4 || bnb4_config {
            let kind = if nf4 {
                "nf4".to_string()
            } else if fp4 {
                "fp4".to_string()
            } else {
                quant
                    .and_then(|q| q.format.clone())
                    .unwrap_or_else(|| "4-bit".into())
            };
            return (
                t.elements.saturating_mul(2),
                Some(format!("bitsandbytes {kind}, 2 per U8")),
            );
        }
    }
    if method == "mxfp4" && t.dtype == StDtype::U8 {
        if t.name.ends_with("_blocks") {
            return (t.elements.saturating_mul(2), Some("mxfp4, 2 per U8".into()));
        }
        if t.name.ends_with("_scales") {
            return (0, None);
        }
    }
    (t.elements, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of `data_bytes` zero bytes after `header` (padded with spaces to a multiple of 8, as upstream
    /// writes it).
    fn file(header: &str, data_bytes: usize) -> Vec<u8> {
        let mut h = header.as_bytes().to_vec();
        while !h.len().is_multiple_of(8) {
            h.push(b' ');
        }
        let mut out = (h.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(&h);
        out.resize(out.len() + data_bytes, 0);
        out
    }

    fn defect(bytes: &[u8]) -> Defect {
        match parse_header_bytes(bytes) {
            Ok(h) => panic!("expected an error, got {h:?}"),
            Err((_, d)) => d,
        }
    }

    #[test]
    fn dtype_names_round_trip_and_sizes() {
        for d in StDtype::ALL {
            assert_eq!(StDtype::from_name(d.name()), Some(d));
            assert_eq!(
                serde_json::to_string(&d).ok(),
                Some(format!("\"{}\"", d.name()))
            );
        }
        assert_eq!(StDtype::F4.bytes_for(16), Ok(8));
        assert_eq!(StDtype::F6_E2M3.bytes_for(4), Ok(3));
        assert!(StDtype::F6_E3M2.bytes_for(5).is_err());
        assert!(StDtype::F4.bytes_for(3).is_err());
        assert!(StDtype::F64.bytes_for(u64::MAX / 2).is_err());
        assert_eq!(StDtype::from_name("f32"), None);
    }

    #[test]
    fn parses_a_valid_file() {
        let bytes = file(
            r#"{"__metadata__":{"format":"pt"},"b":{"dtype":"F16","shape":[2,3],"data_offsets":[4,16]},"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"s":{"dtype":"F32","shape":[],"data_offsets":[16,20]},"z":{"dtype":"F4","shape":[0,7],"data_offsets":[20,20]}}"#,
            20,
        );
        let h = parse_header_bytes(&bytes).expect("valid");
        assert_eq!(h.metadata.get("format").map(String::as_str), Some("pt"));
        assert_eq!(h.tensors.len(), 4);
        let s = h.tensors.iter().find(|t| t.name == "s").expect("s");
        assert_eq!((s.elements, s.shape.len()), (1, 0));
        assert_eq!(h.data_offset, 8 + h.header_bytes);
    }

    #[test]
    fn empty_header_object_is_valid() {
        let h = parse_header_bytes(&file("{}", 0)).expect("valid");
        assert!(h.tensors.is_empty());
        assert!(matches!(
            defect(&file("{}", 1)),
            Defect::SafetensorsHeader(_)
        ));
    }

    #[test]
    fn refuses_bad_entries() {
        let cases: &[(&str, usize, &str)] = &[
            (
                r#"{"a":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}}"#,
                1,
                "unknown dtype",
            ),
            (
                r#"{"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}}"#,
                1,
                "negative",
            ),
            (
                r#"{"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}}"#,
                1,
                "integer",
            ),
            (
                r#"{"a":{"dtype":"U8","shape":"1","data_offsets":[0,1]}}"#,
                1,
                "shape",
            ),
            (
                r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0]}}"#,
                1,
                "[begin, end]",
            ),
            (
                r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}"#,
                1,
                "[begin, end]",
            ),
            (r#"{"a":{"dtype":"U8","shape":[1]}}"#, 1, "data_offsets"),
            (
                r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1}}"#,
                1,
                "unknown field",
            ),
            (
                r#"{"a":{"dtype":"U8","dtype":"U8","shape":[1],"data_offsets":[0,1]}}"#,
                1,
                "twice",
            ),
            (
                r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,1]}}"#,
                1,
                "needs 2",
            ),
            (
                r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,0]}}"#,
                1,
                "begin after",
            ),
            (
                r#"{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,1]}}"#,
                1,
                "whole bytes",
            ),
            (r#"{"a":[1,2]}"#, 1, "object"),
        ];
        for (header, data, needle) in cases {
            match defect(&file(header, *data)) {
                Defect::BadTensor { name, reason } => {
                    assert_eq!(name, "a", "{header}");
                    assert!(reason.contains(needle), "{header}: {reason}");
                }
                other => panic!("{header}: {other:?}"),
            }
        }
    }

    #[test]
    fn too_many_dims_is_refused() {
        let dims = vec!["1"; MAX_DIMS + 1].join(",");
        let h = format!(r#"{{"a":{{"dtype":"U8","shape":[{dims}],"data_offsets":[0,1]}}}}"#);
        assert!(matches!(defect(&file(&h, 1)), Defect::BadTensor { .. }));
        let dims = vec!["1"; MAX_DIMS].join(",");
        let h = format!(r#"{{"a":{{"dtype":"U8","shape":[{dims}],"data_offsets":[0,1]}}}}"#);
        assert!(parse_header_bytes(&file(&h, 1)).is_ok());
    }

    #[test]
    fn shape_overflow_is_a_size_overflow() {
        let h = r#"{"a":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,1]}}"#;
        assert!(matches!(defect(&file(h, 1)), Defect::SizeOverflow { .. }));
        let h = r#"{"a":{"dtype":"F64","shape":[4294967296,536870912],"data_offsets":[0,1]}}"#;
        assert!(matches!(defect(&file(h, 1)), Defect::SizeOverflow { .. }));
    }

    #[test]
    fn layout_defects() {
        let two = |a: [u64; 2], b: [u64; 2]| {
            format!(
                r#"{{"a":{{"dtype":"U8","shape":[{}],"data_offsets":[{},{}]}},"b":{{"dtype":"U8","shape":[{}],"data_offsets":[{},{}]}}}}"#,
                a[1] - a[0],
                a[0],
                a[1],
                b[1] - b[0],
                b[0],
                b[1]
            )
        };
        assert!(matches!(
            defect(&file(&two([0, 4], [2, 6]), 6)),
            Defect::OverlappingTensor { .. }
        ));
        assert!(matches!(
            defect(&file(&two([0, 4], [5, 6]), 6)),
            Defect::TensorGap { .. }
        ));
        assert!(matches!(
            defect(&file(&two([1, 4], [4, 6]), 6)),
            Defect::TensorGap { .. }
        ));
        assert!(matches!(
            defect(&file(&two([0, 4], [4, 8]), 6)),
            Defect::TensorOutOfFile { .. }
        ));
        assert!(matches!(
            defect(&file(&two([0, 4], [4, 6]), 7)),
            Defect::SafetensorsHeader(_)
        ));
        assert!(parse_header_bytes(&file(&two([4, 6], [0, 4]), 6)).is_ok());
    }

    #[test]
    fn duplicate_names_in_one_header() {
        let h = r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}"#;
        assert_eq!(defect(&file(h, 2)), Defect::DuplicateTensor("a".into()));
        let h = r#"{"__metadata__":{},"__metadata__":{}}"#;
        assert!(matches!(defect(&file(h, 0)), Defect::SafetensorsHeader(_)));
    }

    #[test]
    fn header_level_defects() {
        assert!(matches!(
            defect(&[1, 0, 0]),
            Defect::Truncated { needed: 8, .. }
        ));
        let mut b = 100u64.to_le_bytes().to_vec();
        b.extend_from_slice(b"{}");
        assert!(matches!(defect(&b), Defect::Truncated { needed: 100, .. }));
        let b = (MAX_HEADER_BYTES + 1).to_le_bytes().to_vec();
        assert!(matches!(defect(&b), Defect::TooMany { .. }));
        for bad in [
            "[]",
            "{",
            "nul",
            "\"x\"",
            "{} x",
            "{\"__metadata__\":{\"k\":1}}",
            "{\"__metadata__\":[]}",
        ] {
            assert!(
                matches!(defect(&file(bad, 0)), Defect::SafetensorsHeader(_)),
                "{bad}"
            );
        }
        let mut b = file("{}", 0);
        b[9] = 0xff;
        assert!(matches!(defect(&b), Defect::SafetensorsHeader(_)));
        // __metadata__: null is accepted, as upstream's Option does.
        assert!(parse_header_bytes(&file(r#"{"__metadata__":null}"#, 0)).is_ok());
    }

    #[test]
    fn too_many_tensors_in_one_file() {
        let mut h = String::from("{");
        for i in 0..=MAX_TENSORS_PER_FILE {
            if i > 0 {
                h.push(',');
            }
            h.push_str(&format!(
                r#""{i}":{{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}"#
            ));
        }
        h.push('}');
        assert!(matches!(
            defect(&file(&h, 0)),
            Defect::TooMany {
                limit: MAX_TENSORS_PER_FILE,
                ..
            }
        ));
    }

    #[test]
    fn parse_budget_bounds_records() {
        // Entries with 64-dimension shapes cost 512 bytes of shape each; 60k of them exceed the budget.
        let dims = vec!["0"; MAX_DIMS].join(",");
        let mut h = String::from("{");
        for i in 0..60_000 {
            if i > 0 {
                h.push(',');
            }
            h.push_str(&format!(
                r#""{i}":{{"dtype":"U8","shape":[{dims}],"data_offsets":[0,0]}}"#
            ));
        }
        h.push('}');
        assert!(matches!(
            defect(&file(&h, 0)),
            Defect::TooMany {
                limit: MAX_PARSED_HEADER_BYTES,
                ..
            }
        ));
    }

    #[test]
    fn error_offsets_point_into_the_header() {
        let h = r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"bad":{"dtype":"U8","shape":[2],"data_offsets":[1,2]}}"#;
        let (offset, d) = parse_header_bytes(&file(h, 2)).expect_err("bad");
        assert!(matches!(d, Defect::BadTensor { .. }));
        let at = h.find("\"bad\"").expect("present") as u64 + 8;
        assert_eq!(offset, at);
    }

    #[test]
    fn index_names_must_be_plain() {
        for bad in [
            "../x.safetensors",
            "a/b.safetensors",
            "..",
            "",
            "C:x",
            "a\\b",
        ] {
            assert!(check_shard_name(bad).is_err(), "{bad}");
        }
        assert!(check_shard_name("model-00001-of-00002.safetensors").is_ok());
    }

    #[test]
    fn index_parsing() {
        let p = Path::new("i.json");
        let idx = parse_index(
            p,
            br#"{"metadata":{"total_size":12.0,"other":[1,{"x":2}]},"weight_map":{"b":"2.st","a":"1.st","c":"2.st"},"x":null}"#,
        )
        .expect("valid");
        assert_eq!(idx.files, vec!["1.st".to_string(), "2.st".into()]);
        assert_eq!(
            idx.weight_map,
            vec![("a".to_string(), 0), ("b".into(), 1), ("c".into(), 1)]
        );
        assert_eq!(idx.total_size, Some(12));
        for bad in [
            &br#"{"weight_map":{"a":"1","a":"2"}}"#[..],
            br#"{"weight_map":{}}"#,
            br#"{"metadata":{}}"#,
            br#"{"weight_map":{"a":1}}"#,
            br#"{"weight_map":{"a":"../b"}}"#,
            br#"{"metadata":{"total_size":-1},"weight_map":{"a":"b"}}"#,
            br#"[]"#,
        ] {
            let e = parse_index(p, bad).expect_err("invalid");
            assert!(
                matches!(e.defect(), Some(Defect::Index(_))),
                "{}: {e}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    fn raw(name: &str, dtype: StDtype, elements: u64) -> RawTensor {
        RawTensor {
            name: name.into(),
            dtype,
            shape: vec![elements],
            begin: 0,
            end: 0,
            elements,
        }
    }

    #[test]
    fn parameter_rules() {
        let none = |_: &str| false;
        let q = |method: &str, bits: Option<u64>| Quantization {
            method: method.into(),
            bits,
            ..Default::default()
        };
        let p = |t: &RawTensor, quant: Option<&Quantization>, exists: &dyn Fn(&str) -> bool| {
            parameters(t, classify_tensor(&t.name).0, quant, exists)
        };
        let gptq = q("gptq", Some(4));
        let t = raw("model.layers.0.mlp.up_proj.qweight", StDtype::I32, 100);
        assert_eq!(
            p(&t, Some(&gptq), &none),
            (800, Some("gptq int4 in I32".into()))
        );
        let gptq8 = q("gptq", Some(8));
        assert_eq!(p(&t, Some(&gptq8), &none).0, 400);
        let awq = q("awq", Some(4));
        assert_eq!(
            p(&t, Some(&awq), &none),
            (800, Some("awq int4 in I32".into()))
        );
        // No config: GPTQ's default of 4 bits.
        assert_eq!(p(&t, None, &none).0, 800);
        for name in [
            "model.layers.0.mlp.up_proj.qzeros",
            "model.layers.0.mlp.up_proj.scales",
            "model.layers.0.mlp.up_proj.g_idx",
            "model.layers.0.mlp.up_proj.weight_scale_inv",
        ] {
            assert_eq!(
                p(&raw(name, StDtype::I32, 10), Some(&gptq), &none),
                (0, None)
            );
        }
        let ct = q("compressed-tensors", Some(4));
        let t = raw("model.layers.0.mlp.up_proj.weight_packed", StDtype::I32, 10);
        assert_eq!(
            p(&t, Some(&ct), &none),
            (80, Some("compressed-tensors int4 in I32".into()))
        );
        let bnb_name = "model.layers.0.mlp.up_proj.weight";
        let t = raw(bnb_name, StDtype::U8, 50);
        let nf4 = |n: &str| n == format!("{bnb_name}.quant_state.bitsandbytes__nf4");
        assert_eq!(
            p(&t, None, &nf4),
            (100, Some("bitsandbytes nf4, 2 per U8".into()))
        );
        let bnb = Quantization {
            format: Some("fp4".into()),
            ..q("bitsandbytes", Some(4))
        };
        let absmax = |n: &str| n == format!("{bnb_name}.absmax");
        assert_eq!(
            p(&t, Some(&bnb), &absmax),
            (100, Some("bitsandbytes fp4, 2 per U8".into()))
        );
        // A U8 weight without any 4-bit sign is plain.
        assert_eq!(p(&t, None, &none), (50, None));
        let mx = q("mxfp4", Some(4));
        let t = raw(
            "model.layers.0.mlp.experts.gate_up_proj_blocks",
            StDtype::U8,
            64,
        );
        assert_eq!(p(&t, Some(&mx), &none).0, 128);
        let t = raw(
            "model.layers.0.mlp.experts.gate_up_proj_scales",
            StDtype::U8,
            4,
        );
        assert_eq!(p(&t, Some(&mx), &none).0, 0);
        let t = raw("model.layers.0.mlp.up_proj.weight", StDtype::F8_E4M3, 64);
        assert_eq!(p(&t, Some(&q("fp8", Some(8))), &none), (64, None));
    }
}
