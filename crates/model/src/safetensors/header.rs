//! One safetensors file's header: the 8-byte little-endian length prefix, the JSON header (parsed by the
//! streaming visitor in `stream` after a pre-scan that bounds every string), and the validation upstream's
//! `Metadata::validate` does plus ours: exact per-tensor sizes, unique names, tensors tiling the data section
//! exactly. Errors carry the byte offset of the offending entry; the file is read header-only, bounded.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use serde::de::DeserializeSeed;

use super::super::hf_config::{json_error_message, json_error_offset};
use super::super::source;
use super::stream::{Ctx, HeaderSeed, ParseState};
use super::{
    Defect, LENGTH_PREFIX_BYTES, MAX_HEADER_BYTES, MAX_STRING_BYTES, METADATA_KEY, ModelError,
    StDtype,
};

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
        source::check_contiguous(&t.name, t.begin, expected).map_err(|d| (entry_at(&t.name), d))?;
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

/// Reads the length prefix and header of one file (never its data) and validates them.
pub fn read_header(path: &Path) -> Result<Header, ModelError> {
    let (json, file_bytes) = read_header_json(path)?;
    parse_json_header(&json, file_bytes).map_err(|e| ModelError::at(path, e))
}

fn read_header_json(path: &Path) -> Result<(Vec<u8>, u64), ModelError> {
    // A directory named like a .safetensors file, a FIFO or a device is refused before any read.
    let (mut file, file_bytes) = source::open(path)?;
    if file_bytes < LENGTH_PREFIX_BYTES {
        return Err(ModelError::at(
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
        .map_err(|e| ModelError::at(path, (0, Defect::ReadFailed(e.to_string()))))?;
    let header_bytes = u64::from_le_bytes(prefix);
    check_length(header_bytes, file_bytes).map_err(|e| ModelError::at(path, e))?;
    // Bounded by MAX_HEADER_BYTES and by the file's length, both checked above.
    let mut json = vec![0u8; header_bytes as usize];
    file.read_exact(&mut json).map_err(|e| {
        ModelError::at(
            path,
            (LENGTH_PREFIX_BYTES, Defect::ReadFailed(e.to_string())),
        )
    })?;
    Ok((json, file_bytes))
}

/// Offset of a tensor's entry in a file's header, for a message about a defect found after the header was
/// dropped (a name stored in two shards). 8 when the header cannot be read again.
pub(super) fn entry_offset(path: &Path, name: &str) -> u64 {
    read_header_json(path).map_or(LENGTH_PREFIX_BYTES, |(json, _)| {
        LENGTH_PREFIX_BYTES + locate_entry(&json, name)
    })
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::safetensors::{MAX_DIMS, MAX_PARSED_HEADER_BYTES, MAX_TENSORS_PER_FILE};

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
}
