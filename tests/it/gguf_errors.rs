//! The GGUF reader on crafted and damaged files: one test per defect it can report and per limit it enforces,
//! the BitNet/upstream type-id readings, big-endian and v2 files, split models, truncation and mutation sweeps
//! over fixtures, and large-array skipping.
//!
//! Files are written with [`GgufBuilder`]; header byte offsets are computed from the layout (magic 0, version 4,
//! tensor count 8, metadata count 16, first entry 24) so each error is checked at the byte where it is.

use crate::common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use optimizer::model::gguf::{
    DEFAULT_ALIGNMENT, MAX_ARRAY_DEPTH, MAX_ARRAY_ELEMENTS, MAX_DIMS, MAX_INLINE_STRING,
    MAX_KEY_HEAP, MAX_KEY_LEN, MAX_KV, MAX_MATERIALIZED_ARRAY, MAX_METADATA_HEAP, MAX_STRING_LEN,
    MAX_TENSOR_NAME, MAX_TENSORS, load, load_bytes, parse_header, parse_header_bytes, split_name,
};
use optimizer::model::{Defect, Dtype, GgmlType, MetaValue, ModelError, ModelSpec, TypeReading};
use optimizer_testkit::gguf_builder::{GgufBuilder, TensorRecord, value_type as vt};

// ggml type ids used below.
const F32: u32 = 0;
const F16: u32 = 1;
const Q4_K: u32 = 12;
const I8: u32 = 24;

/// Asserts the defect of a `ModelError` with `matches!`, printing the error when it does not match.
macro_rules! assert_defect {
    ($err:expr, $pat:pat $(if $guard:expr)?) => {{
        let e: &ModelError = &$err;
        assert!(
            matches!(e.defect(), Some($pat) $(if $guard)?),
            "unexpected error: {e}\n{:?}",
            e.defect()
        );
    }};
}

fn crafted(name: &str) -> PathBuf {
    PathBuf::from(format!("crafted/{name}.gguf"))
}

/// `load_bytes` must refuse `bytes`. Checks that the message names the path, carries the defect and the offset,
/// and that `parse_header_bytes` reports the same `(offset, defect)` when the defect is in the header itself.
fn fails(bytes: &[u8], name: &str) -> ModelError {
    let path = crafted(name);
    let err = match load_bytes(bytes, &path) {
        Ok(_) => panic!("{name}: expected an error, the file was accepted"),
        Err(e) => e,
    };
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!("{}: ", path.display())),
        "{name}: message does not name the path: {msg}"
    );
    let defect = err.defect().expect("a content error");
    assert!(msg.ends_with(&defect.to_string()), "{msg}");
    if let Some(o) = err.offset() {
        assert!(msg.contains(&format!(": at byte {o}: ")), "{msg}");
    }
    if let Err((o, d)) = parse_header_bytes(bytes) {
        assert_eq!(err.offset(), Some(o), "{name}");
        assert_eq!(err.defect(), Some(&d), "{name}");
    }
    err
}

fn loads(bytes: &[u8], name: &str) -> ModelSpec {
    load_bytes(bytes, &crafted(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn llama() -> GgufBuilder {
    let mut b = GgufBuilder::new();
    b.kv_str("general.architecture", "llama");
    b
}

/// Byte offset where the tensor-info table starts (= the end of the metadata entries).
fn kv_end(b: &GgufBuilder) -> u64 {
    let mut c = b.clone();
    c.tensors.clear();
    c.alignment = 1;
    c.build_header().0.len() as u64
}

fn record_len(t: &TensorRecord) -> u64 {
    8 + t.name.len() as u64 + 4 + 8 * t.ne.len() as u64 + 4 + 8
}

/// Byte offset of tensor-info record `i`.
fn record_offset(b: &GgufBuilder, i: usize) -> u64 {
    kv_end(b) + b.tensors[..i].iter().map(record_len).sum::<u64>()
}

/// Offset of the value of the next metadata entry added to `b` with key `key`.
fn next_value_pos(b: &GgufBuilder, key: &str) -> u64 {
    kv_end(b) + 8 + key.len() as u64 + 4
}

fn le32(v: u32) -> [u8; 4] {
    v.to_le_bytes()
}

fn le64(v: u64) -> [u8; 8] {
    v.to_le_bytes()
}

fn le_str(s: &[u8]) -> Vec<u8> {
    let mut v = le64(s.len() as u64).to_vec();
    v.extend_from_slice(s);
    v
}

/// Fixed 24-byte header with the given version and counts.
fn raw_header(version: u32, n_tensors: u64, n_kv: u64) -> Vec<u8> {
    let mut v = b"GGUF".to_vec();
    v.extend_from_slice(&le32(version));
    v.extend_from_slice(&le64(n_tensors));
    v.extend_from_slice(&le64(n_kv));
    v
}

fn fixture(name: &str) -> (PathBuf, Vec<u8>) {
    let p = common::fixture("gguf").join(name);
    let b = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    (p, b)
}

// ---------------------------------------------------------------------------------------------------------------
// Header structure
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn truncated_files_are_refused_where_they_end() {
    // Empty file, short magic, inside the version, the tensor count and the metadata count.
    let hdr = raw_header(3, 0, 0);
    for (cut, at, needed) in [
        (0usize, 0u64, 4u64),
        (2, 0, 4),
        (6, 4, 4),
        (12, 8, 8),
        (20, 16, 8),
    ] {
        let err = fails(&hdr[..cut], &format!("truncated-{cut}"));
        assert_defect!(err, Defect::Truncated { needed: n, available: a } if *n == needed && *a == cut as u64 - at);
        assert_eq!(err.offset(), Some(at), "cut at {cut}");
    }

    // Inside a key: the 20-byte key "general.architecture" starts at 32.
    let mut b = llama();
    b.tensor("output_norm.weight", &[8, 4], F32, 128);
    let file = b.build();
    // (Cut earlier, fewer than the 14 bytes of the smallest entry are left and the count itself is refused.)
    let err = fails(&file[..32 + 15], "truncated-key");
    assert_defect!(
        err,
        Defect::Truncated {
            needed: 20,
            available: 15
        }
    );
    assert_eq!(err.offset(), Some(32));

    // Inside the value type field (at 52).
    let err = fails(&file[..54], "truncated-type");
    assert_defect!(
        err,
        Defect::Truncated {
            needed: 4,
            available: 2
        }
    );
    assert_eq!(err.offset(), Some(52));

    // Inside a value string: length at 56, bytes "llama" at 64.
    let err = fails(&file[..66], "truncated-value");
    assert_defect!(
        err,
        Defect::Truncated {
            needed: 5,
            available: 2
        }
    );
    assert_eq!(err.offset(), Some(64));

    // Inside the second dimension of a tensor-info record.
    let r = record_offset(&b, 0);
    let dim1 = r + 8 + 18 + 4 + 8;
    let err = fails(&file[..dim1 as usize + 3], "truncated-dims");
    assert_defect!(
        err,
        Defect::Truncated {
            needed: 8,
            available: 3
        }
    );
    assert_eq!(err.offset(), Some(dim1));

    // Inside the type and the offset of the record.
    let ty = dim1 + 8;
    let err = fails(&file[..ty as usize + 1], "truncated-tensor-type");
    assert_defect!(
        err,
        Defect::Truncated {
            needed: 4,
            available: 1
        }
    );
    assert_eq!(err.offset(), Some(ty));
    let err = fails(&file[..ty as usize + 4 + 7], "truncated-tensor-offset");
    assert_defect!(
        err,
        Defect::Truncated {
            needed: 8,
            available: 7
        }
    );
    assert_eq!(err.offset(), Some(ty + 4));

    // Inside an array that is walked, not materialized.
    let mut b = llama();
    let tokens: Vec<String> = (0..5000).map(|i| format!("token{i}")).collect();
    b.kv_str_array("tokenizer.ggml.tokens", &tokens);
    let file = b.build();
    // The last element, "token4999", ends where the metadata ends; cut three bytes into it from the end.
    let end = kv_end(&b) as usize;
    let err = fails(&file[..end - 3], "truncated-skipped-array");
    assert_defect!(
        err,
        Defect::Truncated {
            needed: 9,
            available: 6
        }
    );
    assert_eq!(err.offset(), Some(end as u64 - 9));
}

#[test]
fn bad_magic_is_at_byte_0() {
    let mut f = llama().build();
    f[..4].copy_from_slice(b"GGUG");
    let err = fails(&f, "bad-magic");
    assert_defect!(err, Defect::BadMagic { found } if found == b"GGUG");
    assert_eq!(err.offset(), Some(0));
    // A safetensors file (u64 header length, then JSON) is not mistaken for anything.
    let err = fails(b"\x10\0\0\0\0\0\0\0{\"a\":1}        ", "safetensors");
    assert_defect!(err, Defect::BadMagic { found } if found == b"\x10\0\0\0");
    assert_eq!(err.offset(), Some(0));
}

#[test]
fn version_one_is_refused_at_byte_4() {
    let err = fails(&raw_header(1, 0, 0), "v1");
    assert_defect!(err, Defect::VersionOne);
    assert_eq!(err.offset(), Some(4));
    assert!(err.to_string().contains("version 1"));
    // Written in the other byte order.
    let mut f = raw_header(1, 0, 0);
    f[4..8].copy_from_slice(&1u32.to_be_bytes());
    let err = fails(&f, "v1-be");
    assert_defect!(err, Defect::VersionOne);
    assert_eq!(err.offset(), Some(4));
}

#[test]
fn versions_0_and_4_are_unknown_at_byte_4() {
    for v in [0u32, 4, 0x0001_0000, 0x7fff_ffff] {
        let err = fails(&raw_header(v, 0, 0), &format!("v{v}"));
        let shown = if v & 0xffff == 0 && v != 0 {
            v.swap_bytes()
        } else {
            v
        };
        assert_defect!(err, Defect::UnknownVersion(found) if *found == shown);
        assert_eq!(err.offset(), Some(4), "version {v}");
    }
    // Versions 2 and 3 with nothing in them read.
    for v in [2, 3] {
        let spec = loads(&raw_header(v, 0, 0), &format!("empty-v{v}"));
        assert_eq!(spec.gguf_version, Some(v));
        assert!(spec.tensors.is_empty());
    }
}

#[test]
fn too_many_tensors_limit() {
    let err = fails(&raw_header(3, MAX_TENSORS + 1, 0), "too-many-tensors");
    assert_defect!(err, Defect::TooMany { what: "tensor", count, limit } if *count == MAX_TENSORS + 1 && *limit == MAX_TENSORS);
    assert_eq!(err.offset(), Some(8));
    let err = fails(&raw_header(3, u64::MAX, 0), "tensors-u64-max");
    assert_defect!(err, Defect::TooMany { what: "tensor", .. });

    // Exactly the limit passes the count check; in a short file the count is then refused against the file size.
    let err = fails(&raw_header(3, MAX_TENSORS, 0), "tensors-at-limit-short");
    assert_defect!(err, Defect::CountExceedsFile { what: "tensor info", count, available: 0, .. } if *count == MAX_TENSORS);
    assert_eq!(err.offset(), Some(24));
}

#[test]
fn max_tensors_at_the_limit_is_read() {
    let mut b = GgufBuilder::new();
    for i in 0..MAX_TENSORS {
        // Empty tensors: every one sits at offset 0.
        b.tensor(&format!("t{i}"), &[0], F32, 0);
    }
    let file = b.build();
    let h = parse_header_bytes(&file).unwrap_or_else(|(o, d)| panic!("at {o}: {d}"));
    assert_eq!(h.tensors.len() as u64, MAX_TENSORS);
    assert_eq!(
        h.tensors.last().unwrap().name,
        format!("t{}", MAX_TENSORS - 1)
    );
}

#[test]
fn too_many_metadata_entries_limit() {
    let err = fails(&raw_header(3, 0, MAX_KV + 1), "too-many-kv");
    assert_defect!(err, Defect::TooMany { what: "metadata entry", count, limit } if *count == MAX_KV + 1 && *limit == MAX_KV);
    assert_eq!(err.offset(), Some(16));
    // At the limit the count passes; the short file refuses it.
    let err = fails(&raw_header(3, 0, MAX_KV), "kv-at-limit-short");
    assert_defect!(err, Defect::CountExceedsFile { what: "metadata", count, .. } if *count == MAX_KV);
    assert_eq!(err.offset(), Some(24));

    // A real file with exactly MAX_KV entries reads.
    let mut b = GgufBuilder::new();
    for i in 0..MAX_KV {
        b.kv_raw(format!("k{i:05}").as_bytes(), vt::UINT8, &[i as u8]);
    }
    let h = parse_header_bytes(&b.build()).unwrap_or_else(|(o, d)| panic!("at {o}: {d}"));
    assert_eq!(h.metadata.len() as u64, MAX_KV);
    assert_eq!(h.get("k65535"), Some(&MetaValue::U8(255)));
}

#[test]
fn counts_exceeding_the_file_are_refused_before_allocation() {
    // n_kv = 60,000 in a 100-byte file: 76 bytes left, 14 needed per entry.
    let mut f = raw_header(3, 0, 60_000);
    f.resize(100, 0);
    let err = fails(&f, "kv-count-exceeds-file");
    assert_defect!(
        err,
        Defect::CountExceedsFile {
            what: "metadata",
            count: 60_000,
            min_bytes: 14,
            available: 76
        }
    );
    assert_eq!(err.offset(), Some(24));

    // Tensor count: checked after the metadata, against what is left.
    let mut b = llama();
    b.n_tensors_override = Some(1000);
    let f = b.build();
    let err = fails(&f, "tensor-count-exceeds-file");
    let end = kv_end(&b);
    assert_defect!(
        err,
        Defect::CountExceedsFile { what: "tensor info", count: 1000, min_bytes: 25, available }
            if *available == f.len() as u64 - end
    );
    assert_eq!(err.offset(), Some(end));

    // Array count: a million u32 elements declared in a few bytes.
    let mut b = llama();
    let pos = next_value_pos(&b, "a");
    let mut v = b.array_header(vt::UINT32, 1_000_000);
    v.extend_from_slice(&[0; 16]);
    b.kv_raw(b"a", vt::ARRAY, &v);
    let err = fails(&b.build(), "array-count-exceeds-file");
    assert_defect!(
        err,
        Defect::CountExceedsFile {
            what: "array",
            count: 1_000_000,
            min_bytes: 4,
            ..
        }
    );
    assert_eq!(err.offset(), Some(pos + 12));

    // Strings in an array count at least their 8-byte length.
    let mut b = llama();
    let v = b.array_header(vt::STRING, 100);
    b.kv_raw(b"a", vt::ARRAY, &v);
    let err = fails(&b.build(), "string-array-count-exceeds-file");
    assert_defect!(
        err,
        Defect::CountExceedsFile {
            what: "array",
            count: 100,
            min_bytes: 8,
            ..
        }
    );
}

#[test]
fn max_key_len_limit() {
    let ok_key = vec![b'k'; MAX_KEY_LEN as usize];
    let mut b = llama();
    b.kv_raw(&ok_key, vt::UINT8, &[1]);
    let h = parse_header_bytes(&b.build()).unwrap_or_else(|(o, d)| panic!("at {o}: {d}"));
    assert_eq!(h.metadata[1].0.len() as u64, MAX_KEY_LEN);

    let long_key = vec![b'k'; MAX_KEY_LEN as usize + 1];
    let mut b = llama();
    let at = kv_end(&b);
    b.kv_raw(&long_key, vt::UINT8, &[1]);
    let err = fails(&b.build(), "key-too-long");
    assert_defect!(err, Defect::StringTooLong { len, limit } if *len == MAX_KEY_LEN + 1 && *limit == MAX_KEY_LEN);
    assert_eq!(err.offset(), Some(at));

    // A declared length of u64::MAX is refused before anything is allocated.
    let mut f = raw_header(3, 0, 1);
    f.extend_from_slice(&le64(u64::MAX));
    f.extend_from_slice(&[0; 16]);
    let err = fails(&f, "key-len-u64-max");
    assert_defect!(err, Defect::StringTooLong { len: u64::MAX, .. });
    assert_eq!(err.offset(), Some(24));
}

#[test]
fn max_string_len_limit() {
    // Declared one byte over ggml's cap: refused at the length field, before any read.
    let mut b = llama();
    let pos = next_value_pos(&b, "s");
    b.kv_raw(b"s", vt::STRING, &le64(MAX_STRING_LEN + 1));
    let err = fails(&b.build(), "string-too-long");
    assert_defect!(err, Defect::StringTooLong { len, limit } if *len == MAX_STRING_LEN + 1 && *limit == MAX_STRING_LEN);
    assert_eq!(err.offset(), Some(pos));
    assert!(err.to_string().contains(&MAX_STRING_LEN.to_string()));

    // Exactly the cap is allowed by the limit; this file just does not hold it.
    let mut b = llama();
    let pos = next_value_pos(&b, "s");
    b.kv_raw(b"s", vt::STRING, &le64(MAX_STRING_LEN));
    let err = fails(&b.build(), "string-at-cap-truncated");
    assert_defect!(err, Defect::Truncated { needed, .. } if *needed == MAX_STRING_LEN);
    assert_eq!(err.offset(), Some(pos + 8));

    // The same cap applies to strings inside arrays that are walked rather than materialized.
    let mut b = llama();
    let pos = next_value_pos(&b, "a");
    let n = MAX_MATERIALIZED_ARRAY as usize + 10;
    let mut v = b.array_header(vt::STRING, n as u64);
    for _ in 0..n - 1 {
        v.extend_from_slice(&le_str(b"x"));
    }
    let bad = pos + v.len() as u64;
    v.extend_from_slice(&le64(MAX_STRING_LEN + 1));
    b.kv_raw(b"a", vt::ARRAY, &v);
    let err = fails(&b.build(), "string-too-long-in-skipped-array");
    assert_defect!(err, Defect::StringTooLong { len, .. } if *len == MAX_STRING_LEN + 1);
    assert_eq!(err.offset(), Some(bad));
}

#[test]
fn max_inline_string_limit() {
    let at_limit = "a".repeat(MAX_INLINE_STRING as usize);
    let over = "b".repeat(MAX_INLINE_STRING as usize + 1);
    let mut b = llama();
    b.kv_str("long.at_limit", &at_limit);
    let pos = next_value_pos(&b, "long.over");
    b.kv_str("long.over", &over);
    b.kv_u32("after", 7);
    b.tensor("output_norm.weight", &[4], F32, 16);
    let spec = loads(&b.build(), "inline-string");
    assert_eq!(
        spec.metadata["long.at_limit"].as_str(),
        Some(at_limit.as_str())
    );
    assert_eq!(
        spec.metadata["long.over"],
        MetaValue::SkippedString {
            len: MAX_INLINE_STRING + 1,
            offset: pos + 8
        }
    );
    assert_eq!(spec.metadata["after"], MetaValue::U32(7));
    assert_eq!(spec.tensors[0].bytes, 16);
}

#[test]
fn max_array_elements_limit() {
    let mut b = llama();
    let pos = next_value_pos(&b, "a");
    let mut v = b.array_header(vt::UINT8, MAX_ARRAY_ELEMENTS + 1);
    v.extend_from_slice(&[0; 64]);
    b.kv_raw(b"a", vt::ARRAY, &v);
    let err = fails(&b.build(), "array-too-many");
    assert_defect!(
        err,
        Defect::TooMany { what: "array element", count, limit }
            if *count == MAX_ARRAY_ELEMENTS + 1 && *limit == MAX_ARRAY_ELEMENTS
    );
    // Reported at the array header (its element type field).
    assert_eq!(err.offset(), Some(pos));

    // Exactly the limit passes the element check and is then measured against the file.
    let mut b = llama();
    let pos = next_value_pos(&b, "a");
    let mut v = b.array_header(vt::UINT8, MAX_ARRAY_ELEMENTS);
    v.extend_from_slice(&[0; 64]);
    b.kv_raw(b"a", vt::ARRAY, &v);
    let err = fails(&b.build(), "array-at-limit-short");
    assert_defect!(err, Defect::CountExceedsFile { what: "array", count, .. } if *count == MAX_ARRAY_ELEMENTS);
    assert_eq!(err.offset(), Some(pos + 12));
}

#[test]
fn max_materialized_array_limit() {
    let n = MAX_MATERIALIZED_ARRAY as u32;
    let at_limit: Vec<u32> = (0..n).collect();
    let over: Vec<u32> = (0..=n).collect();
    let mut b = llama();
    b.kv_u32_array("at_limit", &at_limit);
    let pos = next_value_pos(&b, "over");
    b.kv_u32_array("over", &over);
    let next = kv_end(&b);
    b.kv_u32("after", 9);
    let spec = loads(&b.build(), "materialized-array");
    match &spec.metadata["at_limit"] {
        MetaValue::Array(items) => {
            assert_eq!(items.len() as u64, MAX_MATERIALIZED_ARRAY);
            assert_eq!(items[4095], MetaValue::U32(4095));
        }
        other => panic!("at_limit: {other:?}"),
    }
    let skipped = MetaValue::SkippedArray {
        element_type: "UINT32",
        count: MAX_MATERIALIZED_ARRAY + 1,
        offset: pos + 12,
        bytes: 4 * (MAX_MATERIALIZED_ARRAY + 1),
    };
    assert_eq!(spec.metadata["over"], skipped);
    assert_eq!(pos + 12 + 4 * (MAX_MATERIALIZED_ARRAY + 1), next);
    assert_eq!(
        spec.metadata["over"].array_len(),
        Some(MAX_MATERIALIZED_ARRAY + 1)
    );
    assert_eq!(spec.metadata["after"], MetaValue::U32(9));
}

/// An array nested `levels` deep whose innermost arrays hold one u8, with `outer_count` elements at the top
/// level; returns the value bytes and the offset of each level's header in the first element.
fn nested(b: &GgufBuilder, levels: u32, outer_count: u64, value_pos: u64) -> (Vec<u8>, Vec<u64>) {
    let et = |level: u32| {
        if level + 1 == levels {
            vt::UINT8
        } else {
            vt::ARRAY
        }
    };
    let mut inner = Vec::new();
    for level in 1..levels {
        inner.extend_from_slice(&b.array_header(et(level), 1));
    }
    inner.push(5);
    let mut v = b.array_header(et(0), outer_count);
    for _ in 0..outer_count {
        v.extend_from_slice(&inner);
    }
    let headers = (0..levels).map(|l| value_pos + 12 * u64::from(l)).collect();
    (v, headers)
}

#[test]
fn max_array_depth_limit() {
    // At the limit: accepted, materialized.
    let mut b = llama();
    let pos = next_value_pos(&b, "deep");
    let (v, _) = nested(&b, MAX_ARRAY_DEPTH, 1, pos);
    b.kv_raw(b"deep", vt::ARRAY, &v);
    let spec = loads(&b.build(), "depth-at-limit");
    let inner = MetaValue::Array(vec![MetaValue::Array(vec![MetaValue::Array(vec![
        MetaValue::U8(5),
    ])])]);
    assert_eq!(spec.metadata["deep"], inner);

    // One deeper: refused at the innermost array's header.
    let mut b = llama();
    let pos = next_value_pos(&b, "deeper");
    let (v, headers) = nested(&b, MAX_ARRAY_DEPTH + 1, 1, pos);
    b.kv_raw(b"deeper", vt::ARRAY, &v);
    let err = fails(&b.build(), "depth-over-limit");
    assert_defect!(err, Defect::ArrayTooDeep { key, limit } if key == "deeper" && *limit == MAX_ARRAY_DEPTH);
    assert_eq!(err.offset(), Some(headers[MAX_ARRAY_DEPTH as usize]));

    // The same limits when the outer array is long enough to be walked instead of materialized.
    let outer = MAX_MATERIALIZED_ARRAY + 1;
    let mut b = llama();
    let pos = next_value_pos(&b, "deep");
    let (v, _) = nested(&b, MAX_ARRAY_DEPTH, outer, pos);
    let len = v.len() as u64;
    b.kv_raw(b"deep", vt::ARRAY, &v);
    let spec = loads(&b.build(), "skipped-depth-at-limit");
    assert_eq!(
        spec.metadata["deep"],
        MetaValue::SkippedArray {
            element_type: "ARRAY",
            count: outer,
            offset: pos + 12,
            bytes: len - 12
        }
    );
    let mut b = llama();
    let pos = next_value_pos(&b, "deeper");
    let (v, headers) = nested(&b, MAX_ARRAY_DEPTH + 1, outer, pos);
    b.kv_raw(b"deeper", vt::ARRAY, &v);
    let err = fails(&b.build(), "skipped-depth-over-limit");
    assert_defect!(err, Defect::ArrayTooDeep { key, .. } if key == "deeper");
    assert_eq!(err.offset(), Some(headers[MAX_ARRAY_DEPTH as usize]));
}

#[test]
fn max_metadata_heap_skips_later_arrays_without_error() {
    let n = MAX_MATERIALIZED_ARRAY as usize;
    let items: Vec<u8> = (0..n).map(|i| i as u8).collect();
    let arrays = 200;
    let mut b = llama();
    let mut positions = Vec::new();
    for i in 0..arrays {
        let key = format!("heap.{i:03}");
        positions.push(next_value_pos(&b, &key));
        let mut v = b.array_header(vt::UINT8, n as u64);
        v.extend_from_slice(&items);
        b.kv_raw(key.as_bytes(), vt::ARRAY, &v);
    }
    b.kv_u32("after", 3);
    b.tensor("output_norm.weight", &[4], F32, 16);
    let spec = loads(&b.build(), "heap");
    let mut materialized = 0;
    for (i, pos) in positions.iter().enumerate() {
        match &spec.metadata[&format!("heap.{i:03}")] {
            MetaValue::Array(v) => {
                assert_eq!(
                    materialized, i,
                    "array {i} materialized after a skipped one"
                );
                assert_eq!(v.len(), n);
                assert_eq!(v[300], MetaValue::U8(44));
                materialized += 1;
            }
            MetaValue::SkippedArray {
                element_type,
                count,
                offset,
                bytes,
            } => {
                assert_eq!((*element_type, *count), ("UINT8", n as u64), "array {i}");
                assert_eq!((*offset, *bytes), (pos + 12, n as u64), "array {i}");
            }
            other => panic!("array {i}: {other:?}"),
        }
    }
    // Each materialized array costs 4096 values; the heap holds some, but not all 200.
    let per_array = (n * std::mem::size_of::<MetaValue>()) as u64;
    assert!(
        materialized as u64 * per_array <= MAX_METADATA_HEAP,
        "{materialized} materialized"
    );
    assert!(
        materialized as u64 >= MAX_METADATA_HEAP / per_array - 2,
        "{materialized} materialized"
    );
    assert!(materialized < arrays);
    assert_eq!(spec.metadata["after"], MetaValue::U32(3));
    assert_eq!(spec.tensors.len(), 1);
}

/// Keys have their own budget: once arrays have used the value heap, later keys (and their scalar values) still
/// read. (At caa1a60 keys were charged to the value heap and this file was refused.)
#[test]
fn metadata_heap_exhausted_by_arrays_does_not_refuse_later_keys() {
    let n = MAX_MATERIALIZED_ARRAY as usize;
    let mut b = llama();
    for i in 0..128 {
        let mut v = b.array_header(vt::UINT8, n as u64);
        v.resize(v.len() + n, 1);
        b.kv_raw(format!("heap.{i:03}").as_bytes(), vt::ARRAY, &v);
    }
    for i in 0..2000 {
        b.kv_raw(format!("small.{i:04}").as_bytes(), vt::UINT8, &[1]);
    }
    let spec = loads(&b.build(), "heap-then-keys");
    assert_eq!(spec.metadata.len(), 1 + 128 + 2000);
}

#[test]
fn max_key_heap_limit() {
    // Each key costs twice its length plus two values' worth of bookkeeping; the longest keys allowed exhaust
    // the key budget after a few dozen entries, and the entry that would exceed it is refused at its start.
    let key_cost = |len: u64| 2 * (len + std::mem::size_of::<MetaValue>() as u64);
    let len = MAX_KEY_LEN;
    let fit = MAX_KEY_HEAP / key_cost(len);
    let mut b = llama();
    let mut used = key_cost("general.architecture".len() as u64);
    let mut i = 0u64;
    let mut refused_at = None;
    while refused_at.is_none() {
        let mut key = format!("k{i:04}.").into_bytes();
        key.resize(len as usize, b'x');
        if used + key_cost(len) > MAX_KEY_HEAP {
            refused_at = Some((kv_end(&b), used + key_cost(len)));
        }
        used += key_cost(len);
        b.kv_raw(&key, vt::UINT8, &[1]);
        i += 1;
    }
    assert!(i >= fit && i <= fit + 1, "{i} keys, {fit} fit");
    let (at, count) = refused_at.unwrap();
    let err = fails(&b.build(), "key-heap");
    assert_defect!(
        err,
        Defect::TooMany { what: "metadata key heap byte", count: c, limit } if *c == count && *limit == MAX_KEY_HEAP
    );
    assert_eq!(err.offset(), Some(at));

    // One entry fewer reads.
    let mut b = llama();
    for j in 0..i - 1 {
        let mut key = format!("k{j:04}.").into_bytes();
        key.resize(len as usize, b'x');
        b.kv_raw(&key, vt::UINT8, &[1]);
    }
    let h = parse_header_bytes(&b.build()).unwrap_or_else(|(o, d)| panic!("at {o}: {d}"));
    assert_eq!(h.metadata.len() as u64, i);
}

#[test]
fn invalid_utf8_in_key_and_value() {
    let mut b = llama();
    let at = kv_end(&b);
    b.kv_raw(b"general.\xffname", vt::UINT8, &[1]);
    let err = fails(&b.build(), "utf8-key");
    assert_defect!(err, Defect::InvalidUtf8);
    assert_eq!(err.offset(), Some(at + 8));

    let mut b = llama();
    let pos = next_value_pos(&b, "general.name");
    b.kv_raw(b"general.name", vt::STRING, &le_str(b"ab\xc3\x28cd"));
    let err = fails(&b.build(), "utf8-value");
    assert_defect!(err, Defect::InvalidUtf8);
    assert_eq!(err.offset(), Some(pos + 8));

    // Inside a materialized string array: at the bad element's bytes.
    let mut b = llama();
    let pos = next_value_pos(&b, "a");
    b.kv_str_array("a", &[&b"ok"[..], b"\xed\xa0\x80"]);
    let err = fails(&b.build(), "utf8-array-element");
    assert_defect!(err, Defect::InvalidUtf8);
    assert_eq!(err.offset(), Some(pos + 12 + 8 + 2 + 8));
}

#[test]
fn empty_key_is_refused() {
    let mut b = llama();
    let at = kv_end(&b);
    b.kv_raw(b"", vt::UINT8, &[1]);
    let err = fails(&b.build(), "empty-key");
    assert_defect!(err, Defect::EmptyKey);
    assert_eq!(err.offset(), Some(at));
}

#[test]
fn duplicate_key_is_refused_at_the_second() {
    let mut b = llama();
    b.kv_u32("llama.block_count", 2);
    let at = kv_end(&b);
    b.kv_u32("llama.block_count", 3);
    let err = fails(&b.build(), "duplicate-key");
    assert_defect!(err, Defect::DuplicateKey(k) if k == "llama.block_count");
    assert_eq!(err.offset(), Some(at));
    assert!(err.to_string().contains("\"llama.block_count\""));
}

#[test]
fn unknown_value_type_13() {
    // As a scalar: reported where the value would start, right after the type field.
    let mut b = llama();
    let pos = next_value_pos(&b, "k");
    b.kv_raw(b"k", 13, &[0; 8]);
    let err = fails(&b.build(), "value-type-13");
    assert_defect!(err, Defect::UnknownValueType { key, type_id: 13 } if key == "k");
    assert_eq!(err.offset(), Some(pos));

    // As an array element type: reported at the array header.
    let mut b = llama();
    let pos = next_value_pos(&b, "a");
    let mut v = b.array_header(13, 1);
    v.extend_from_slice(&[0; 8]);
    b.kv_raw(b"a", vt::ARRAY, &v);
    let err = fails(&b.build(), "array-type-13");
    assert_defect!(err, Defect::UnknownValueType { key, type_id: 13 } if key == "a");
    assert_eq!(err.offset(), Some(pos));

    // And u32::MAX.
    let mut b = llama();
    b.kv_raw(b"k", u32::MAX, &[0; 8]);
    let err = fails(&b.build(), "value-type-max");
    assert_defect!(
        err,
        Defect::UnknownValueType {
            type_id: u32::MAX,
            ..
        }
    );
}

#[test]
fn bool_value_2_scalar_and_in_arrays() {
    let mut b = llama();
    b.kv_raw(b"t", vt::BOOL, &[1]);
    b.kv_raw(b"f", vt::BOOL, &[0]);
    let spec = loads(&b.build(), "bools");
    assert_eq!(spec.metadata["t"], MetaValue::Bool(true));
    assert_eq!(spec.metadata["f"], MetaValue::Bool(false));

    let mut b = llama();
    let pos = next_value_pos(&b, "flag");
    b.kv_raw(b"flag", vt::BOOL, &[2]);
    let err = fails(&b.build(), "bool-2");
    assert_defect!(err, Defect::InvalidBool { key, value: 2 } if key == "flag");
    assert_eq!(err.offset(), Some(pos));

    // Materialized array: [1, 0, 2].
    let mut b = llama();
    let pos = next_value_pos(&b, "flags");
    let mut v = b.array_header(vt::BOOL, 3);
    v.extend_from_slice(&[1, 0, 2]);
    b.kv_raw(b"flags", vt::ARRAY, &v);
    let err = fails(&b.build(), "bool-2-array");
    assert_defect!(err, Defect::InvalidBool { key, value: 2 } if key == "flags");
    assert_eq!(err.offset(), Some(pos + 12 + 2));

    // Skipped array: 5,000 bools, the 4,500th is 2.
    let mut b = llama();
    let pos = next_value_pos(&b, "flags");
    let mut v = b.array_header(vt::BOOL, 5000);
    let mut bools = vec![1u8; 5000];
    bools[4500] = 2;
    v.extend_from_slice(&bools);
    b.kv_raw(b"flags", vt::ARRAY, &v);
    let err = fails(&b.build(), "bool-2-skipped-array");
    assert_defect!(err, Defect::InvalidBool { key, value: 2 } if key == "flags");
    assert_eq!(err.offset(), Some(pos + 12 + 4500));

    // A valid long bool array is skipped with its span.
    let mut b = llama();
    let pos = next_value_pos(&b, "flags");
    let mut v = b.array_header(vt::BOOL, 5000);
    v.extend_from_slice(&[0u8; 5000]);
    b.kv_raw(b"flags", vt::ARRAY, &v);
    let spec = loads(&b.build(), "bool-skipped-array");
    assert_eq!(
        spec.metadata["flags"],
        MetaValue::SkippedArray {
            element_type: "BOOL",
            count: 5000,
            offset: pos + 12,
            bytes: 5000
        }
    );
}

// ---------------------------------------------------------------------------------------------------------------
// Alignment
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn alignment_must_be_uint32() {
    let mut b = llama();
    b.kv_u64("general.alignment", 32);
    b.tensor("output_norm.weight", &[4], F32, 16);
    let err = fails(&b.build(), "alignment-u64");
    assert_defect!(
        err,
        Defect::WrongValueType { key, expected: "UINT32", found } if key == "general.alignment" && found == "UINT64"
    );
    // Reported at the end of the metadata section, where the alignment is applied.
    assert_eq!(err.offset(), Some(kv_end(&b)));
}

#[test]
fn alignment_0_and_48_are_refused() {
    for a in [0u32, 48, 3, 1 << 31 | 1] {
        let mut b = llama();
        b.kv_u32("general.alignment", a);
        b.tensor("output_norm.weight", &[4], F32, 16);
        let err = fails(&b.build(), &format!("alignment-{a}"));
        assert_defect!(err, Defect::BadAlignment(found) if *found == u64::from(a));
        assert_eq!(err.offset(), Some(kv_end(&b)), "alignment {a}");
    }
}

#[test]
fn alignment_64_is_honoured() {
    // Pad a string until the default alignment and 64 would put the data at different places.
    let mut pad = String::new();
    let (b, infos_end) = loop {
        let mut b = llama();
        b.alignment = 64;
        b.kv_str("general.name", &pad);
        b.kv_u32("general.alignment", 64);
        b.tensor("token_embd.weight", &[32, 4], F32, 512);
        b.tensor("output_norm.weight", &[3], F32, 12);
        b.tensor("output.weight", &[32, 4], F16, 256);
        let end = kv_end(&b) + (0..3).map(|i| record_len(&b.tensors[i])).sum::<u64>();
        if end.next_multiple_of(DEFAULT_ALIGNMENT) != end.next_multiple_of(64) {
            break (b, end);
        }
        pad.push('x');
    };
    let file = b.build();
    let h = parse_header_bytes(&file).unwrap();
    assert_eq!(h.alignment, 64);
    assert_eq!(h.data_offset, infos_end.next_multiple_of(64));
    assert_ne!(h.data_offset, infos_end.next_multiple_of(DEFAULT_ALIGNMENT));
    let spec = loads(&file, "align64");
    let offsets: Vec<u64> = spec.tensors.iter().map(|t| t.offset).collect();
    assert_eq!(
        offsets,
        [h.data_offset, h.data_offset + 512, h.data_offset + 576]
    );
    assert_eq!(spec.tensors[2].offset + 256, file.len() as u64);

    // The same file with offsets packed to 32 instead of 64 is refused.
    let mut b32 = b.clone();
    b32.tensors[2].offset = Some(544);
    let err = fails(&b32.build(), "align64-packed-32");
    assert_defect!(
        err,
        Defect::MisalignedTensor {
            offset: 544,
            alignment: 64,
            ..
        }
    );
}

// ---------------------------------------------------------------------------------------------------------------
// Tensor-info records
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn tensor_name_limit_63_ok_64_refused() {
    let name63 = format!("blk.0.{}", "n".repeat(MAX_TENSOR_NAME as usize - 6));
    let mut b = llama();
    b.tensor(&name63, &[4], F32, 16);
    let spec = loads(&b.build(), "name-63");
    assert_eq!(spec.tensors[0].name.len() as u64, MAX_TENSOR_NAME);

    let name64 = format!("{name63}x");
    let mut b = llama();
    b.tensor("output_norm.weight", &[4], F32, 16);
    b.tensor(&name64, &[4], F32, 16);
    let err = fails(&b.build(), "name-64");
    assert_defect!(err, Defect::TensorNameTooLong { len: 64, limit } if *limit == MAX_TENSOR_NAME);
    assert_eq!(err.offset(), Some(record_offset(&b, 1)));
}

#[test]
fn empty_tensor_name_is_refused() {
    let mut b = llama();
    b.tensor("output_norm.weight", &[4], F32, 16);
    b.tensor("", &[4], F32, 16);
    let err = fails(&b.build(), "empty-tensor-name");
    assert_defect!(err, Defect::EmptyTensorName);
    assert_eq!(err.offset(), Some(record_offset(&b, 1)));
}

#[test]
fn duplicate_tensor_is_refused_at_the_second() {
    let mut b = llama();
    b.tensor("blk.0.attn_q.weight", &[4], F32, 16);
    b.tensor("output_norm.weight", &[4], F32, 16);
    b.tensor("blk.0.attn_q.weight", &[4], F32, 16);
    let err = fails(&b.build(), "duplicate-tensor");
    assert_defect!(err, Defect::DuplicateTensor(n) if n == "blk.0.attn_q.weight");
    assert_eq!(err.offset(), Some(record_offset(&b, 2)));
}

#[test]
fn max_dims_limit() {
    let mut b = llama();
    b.tensor(
        "blk.0.ffn_gate_exps.weight",
        &[4, 3, 2, 2],
        F32,
        4 * 4 * 3 * 2 * 2,
    );
    let spec = loads(&b.build(), "dims-4");
    assert_eq!(spec.tensors[0].shape, [2, 2, 3, 4]);
    assert_eq!(spec.tensors[0].bytes, 192);
    assert_eq!(MAX_DIMS, 4);

    let mut b = llama();
    b.tensor("t", &[1, 1, 1, 1, 1], F32, 4);
    let err = fails(&b.build(), "dims-5");
    assert_defect!(err, Defect::TooManyDims { name, n_dims: 5, limit } if name == "t" && *limit == MAX_DIMS);
    assert_eq!(err.offset(), Some(record_offset(&b, 0) + 8 + 1));

    let mut b = llama();
    b.tensor("t", &[1], F32, 4);
    let mut f = b.build();
    // n_dims = u32::MAX.
    let at = record_offset(&b, 0) as usize + 9;
    f[at..at + 4].copy_from_slice(&le32(u32::MAX));
    let err = fails(&f, "dims-max");
    assert_defect!(
        err,
        Defect::TooManyDims {
            n_dims: u32::MAX,
            ..
        }
    );
}

#[test]
fn dimension_beyond_i64_is_refused() {
    let big = i64::MAX as u64 + 1;
    let mut b = llama();
    b.tensor("t", &[32, big], F32, 0);
    let err = fails(&b.build(), "dim-beyond-i64");
    assert_defect!(err, Defect::DimTooLarge { name, dim: 1, value } if name == "t" && *value == big);
    assert_eq!(err.offset(), Some(record_offset(&b, 0) + 8 + 1 + 4 + 8));

    // i64::MAX itself is a legal dimension; the tensor then cannot fit the file.
    let mut b = llama();
    b.tensor("t", &[i64::MAX as u64], I8, 0);
    let err = fails(&b.build(), "dim-i64-max");
    assert_defect!(err, Defect::TensorOutOfFile { name, .. } if name == "t");
}

#[test]
fn unknown_and_removed_tensor_types_are_refused() {
    for id in [4u32, 5, 31, 32, 33, 37, 43, 1000, u32::MAX] {
        let mut b = llama();
        b.tensor("output_norm.weight", &[4], F32, 16);
        b.tensor("blk.0.attn_q.weight", &[256, 2], id, 64);
        let err = fails(&b.build(), &format!("type-{id}"));
        assert_defect!(
            err,
            Defect::UnknownTensorType { name, type_id, reading: "upstream ggml" }
                if name == "blk.0.attn_q.weight" && *type_id == id
        );
        assert_eq!(err.offset(), Some(record_offset(&b, 1)), "type {id}");
    }
}

#[test]
fn type_37_is_refused_under_both_readings() {
    // Upstream reading first (llama); 37 is ambiguous, so BitNet is tried too, and fails too.
    let mut b = llama();
    b.tensor("blk.0.attn_q.weight", &[256, 2], 37, 160);
    let err = fails(&b.build(), "type-37-llama");
    assert_defect!(
        err,
        Defect::UnknownTensorType {
            type_id: 37,
            reading: "upstream ggml",
            ..
        }
    );

    let mut b = GgufBuilder::new();
    b.kv_str("general.architecture", "bitnet-b1.58");
    b.tensor("blk.0.attn_q.weight", &[256, 2], 37, 160);
    let err = fails(&b.build(), "type-37-bitnet");
    assert_defect!(
        err,
        Defect::UnknownTensorType {
            type_id: 37,
            reading: "BitNet",
            ..
        }
    );
    assert!(err.to_string().contains("BitNet reading"));
}

#[test]
fn partial_block_is_refused() {
    let mut b = llama();
    b.tensor("blk.0.attn_q.weight", &[100, 4], Q4_K, 144 * 4);
    let err = fails(&b.build(), "partial-block");
    assert_defect!(
        err,
        Defect::PartialBlock { name, type_name: "Q4_K", ne0: 100, block: 256 } if name == "blk.0.attn_q.weight"
    );
    assert_eq!(err.offset(), Some(record_offset(&b, 0)));
}

#[test]
fn size_overflow_is_refused() {
    let mut b = llama();
    b.tensor("output_norm.weight", &[4], F32, 16);
    b.tensor("big", &[1 << 40, 1 << 40], F32, 32);
    let err = fails(&b.build(), "size-overflow");
    assert_defect!(err, Defect::SizeOverflow { name } if name == "big");
    assert_eq!(err.offset(), Some(record_offset(&b, 1)));
    // Overflow in the product of the outer dimensions alone.
    let mut b = llama();
    b.tensor("big", &[1, 1 << 32, 1 << 32], I8, 32);
    let err = fails(&b.build(), "size-overflow-rows");
    assert_defect!(err, Defect::SizeOverflow { name } if name == "big");
}

#[test]
fn misaligned_offset_is_refused() {
    let mut b = llama();
    b.tensor_at("output_norm.weight", &[4], F32, 16, 16);
    let err = fails(&b.build(), "misaligned");
    assert_defect!(err, Defect::MisalignedTensor { name, offset: 16, alignment: 32 } if name == "output_norm.weight");
    assert_eq!(err.offset(), Some(record_offset(&b, 0)));
}

#[test]
fn overlapping_tensor_is_refused() {
    let mut b = llama();
    b.tensor("token_embd.weight", &[100], I8, 100);
    b.tensor_at("output_norm.weight", &[4], F32, 16, 96);
    let err = fails(&b.build(), "overlap");
    assert_defect!(
        err,
        Defect::OverlappingTensor { name, offset: 96, previous_end: 128 } if name == "output_norm.weight"
    );
    assert_eq!(err.offset(), Some(record_offset(&b, 1)));
    // Two tensors both at offset 0.
    let mut b = llama();
    b.tensor("token_embd.weight", &[8], F32, 32);
    b.tensor_at("output_norm.weight", &[4], F32, 16, 0);
    let err = fails(&b.build(), "overlap-at-0");
    assert_defect!(
        err,
        Defect::OverlappingTensor {
            offset: 0,
            previous_end: 32,
            ..
        }
    );
}

#[test]
fn gap_between_tensors_is_refused() {
    let mut b = llama();
    b.tensor("token_embd.weight", &[100], I8, 100);
    b.tensor_at("output_norm.weight", &[4], F32, 16, 160);
    let err = fails(&b.build(), "gap");
    assert_defect!(err, Defect::TensorGap { name, offset: 160, expected: 128 } if name == "output_norm.weight");
    assert_eq!(err.offset(), Some(record_offset(&b, 1)));
    // A first tensor not at 0.
    let mut b = llama();
    b.tensor_at("output_norm.weight", &[4], F32, 16, 32);
    let err = fails(&b.build(), "gap-first");
    assert_defect!(
        err,
        Defect::TensorGap {
            offset: 32,
            expected: 0,
            ..
        }
    );
}

#[test]
fn tensor_beyond_end_of_file_is_refused() {
    let mut b = llama();
    b.tensor("token_embd.weight", &[64], F32, 256);
    b.tensor("output_norm.weight", &[64], F32, 256);
    let file = b.build();
    let data = parse_header_bytes(&file).unwrap().data_offset;
    let short = &file[..file.len() - 1];
    let err = fails(short, "tensor-out-of-file");
    assert_defect!(
        err,
        Defect::TensorOutOfFile { name, start, end, file_bytes }
            if name == "output_norm.weight" && *start == data + 256 && *end == data + 512
                && *file_bytes == short.len() as u64
    );
    assert_eq!(err.offset(), Some(record_offset(&b, 1)));
}

#[test]
fn data_section_beyond_end_of_file_is_refused() {
    let mut b = llama();
    b.tensor("output_norm.weight", &[4], F32, 16);
    let file = b.build();
    let infos_end = record_offset(&b, 1);
    let data = infos_end.next_multiple_of(32);
    assert!(
        data > infos_end,
        "test needs padding after the tensor infos"
    );
    let short = &file[..infos_end as usize + 1];
    let err = fails(short, "data-out-of-file");
    assert_defect!(
        err,
        Defect::DataOutOfFile { data_offset, file_bytes } if *data_offset == data && *file_bytes == infos_end + 1
    );
    assert_eq!(err.offset(), Some(infos_end));
    // Without tensors, a file that stops before the padding is fine.
    let mut b = llama();
    b.kv_str("general.name", "x");
    let (h, _) = b.build_header();
    let end = kv_end(&b) as usize;
    assert!(h.len() > end);
    loads(&h[..end], "no-tensors-no-padding");
}

#[test]
fn read_failure_is_reported() {
    // A source shorter than the length it was declared with: the read fails after the length check passed.
    let mut b = llama();
    b.tensor("output_norm.weight", &[4], F32, 16);
    let file = b.build();
    let got = parse_header(std::io::Cursor::new(&file[..40]), file.len() as u64);
    match got {
        Err((at, Defect::ReadFailed(msg))) => {
            assert_eq!(at, 32);
            assert!(!msg.is_empty());
        }
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------------------------
// BitNet and upstream readings of type ids 36-42
// ---------------------------------------------------------------------------------------------------------------

fn bitnet() -> GgufBuilder {
    let mut b = GgufBuilder::new();
    b.kv_str("general.architecture", "bitnet-b1.58");
    b
}

fn tensor_of<'a>(spec: &'a ModelSpec, name: &str) -> &'a optimizer::model::TensorInfo {
    spec.tensor(name)
        .unwrap_or_else(|| panic!("no tensor {name}"))
}

#[test]
fn bitnet_architecture_reads_i2_s_and_tl2_with_fork_sizes() {
    let mut b = bitnet();
    b.kv_u32("general.file_type", 40);
    // I2_S [256 x 8]: n/4 + 32 = 544. TL2 [768 x 8]: 512*8/3*5/8 + 256*8/2*4/8 = 853 + 512 = 1365, padded to
    // 1376, plus 32 = 1408.
    b.tensor("blk.0.attn_q.weight", &[256, 8], 36, 544);
    b.tensor("blk.0.ffn_down.weight", &[768, 8], 39, 1408);
    b.tensor("output_norm.weight", &[256], F32, 1024);
    let spec = loads(&b.build(), "bitnet");
    assert_eq!(spec.type_reading, Some(TypeReading::Bitnet));
    let q = tensor_of(&spec, "blk.0.attn_q.weight");
    assert_eq!(
        (q.dtype, q.bytes),
        (Dtype::Ggml(GgmlType::I2_S), 256 * 8 / 4 + 32)
    );
    let d = tensor_of(&spec, "blk.0.ffn_down.weight");
    assert_eq!((d.dtype, d.bytes), (Dtype::Ggml(GgmlType::TL2), 1408));
    assert_eq!(d.dtype.name(), "TL2");
    assert_eq!(spec.file_type, Some(40));
    assert_eq!(spec.file_type_name, Some("MOSTLY_I2_S"));
    assert_eq!(spec.tensor_bytes(), 544 + 1408 + 1024);
}

#[test]
fn llama_type_39_sized_as_mxfp4_reads_upstream() {
    // [512 x 4] as MXFP4: 16 blocks of 17 bytes per row = 1088; as TL2 it would be 512.
    let mut b = llama();
    b.tensor("blk.0.ffn_up.weight", &[512, 4], 39, 1088);
    b.tensor("output_norm.weight", &[256], F32, 1024);
    let spec = loads(&b.build(), "llama-mxfp4");
    assert_eq!(spec.type_reading, Some(TypeReading::Upstream));
    let t = tensor_of(&spec, "blk.0.ffn_up.weight");
    assert_eq!((t.dtype, t.bytes), (Dtype::Ggml(GgmlType::MXFP4), 1088));
}

#[test]
fn llama_file_type_38_with_tl2_offsets_falls_back_to_bitnet() {
    let mut b = llama();
    b.kv_u32("general.file_type", 38);
    b.tensor("blk.0.ffn_up.weight", &[512, 4], 39, 512);
    b.tensor("output_norm.weight", &[256], F32, 1024);
    let spec = loads(&b.build(), "llama-tl2-fallback");
    assert_eq!(spec.type_reading, Some(TypeReading::Bitnet));
    let t = tensor_of(&spec, "blk.0.ffn_up.weight");
    assert_eq!((t.dtype, t.bytes), (Dtype::Ggml(GgmlType::TL2), 512));
    // general.file_type is named under the reading that was chosen.
    assert_eq!(spec.file_type_name, Some("MOSTLY_TL1"));
}

#[test]
fn type_39_fitting_neither_reading_is_refused() {
    // The tensor is last and the file holds 300 data bytes: neither 1088 (MXFP4) nor 512 (TL2) fits.
    let mut b = llama();
    b.tensor("blk.0.ffn_up.weight", &[512, 4], 39, 300);
    let file = b.build();
    let data = parse_header_bytes(&file).unwrap().data_offset;
    let err = fails(&file, "type-39-neither");
    assert_defect!(
        err,
        Defect::TensorOutOfFile { name, start, end, .. }
            if name == "blk.0.ffn_up.weight" && *start == data && *end == data + 1088
    );
    assert!(err.to_string().contains("blk.0.ffn_up.weight"));
    assert_eq!(err.offset(), Some(record_offset(&b, 0)));

    // Its successor placed where neither size puts it: the upstream reading's error is reported.
    let mut b = llama();
    b.tensor("blk.0.ffn_up.weight", &[512, 4], 39, 512);
    b.tensor_at("output_norm.weight", &[256], F32, 1024, 800);
    let err = fails(&b.build(), "type-39-neither-offsets");
    assert_defect!(
        err,
        Defect::OverlappingTensor {
            offset: 800,
            previous_end: 1088,
            ..
        }
    );

    // A row MXFP4 cannot hold (300 is not a multiple of 32) and an offset TL2 does not give.
    let mut b = llama();
    b.tensor("blk.0.ffn_up.weight", &[300, 4], 39, 1000);
    b.tensor_at("output_norm.weight", &[256], F32, 1024, 1024);
    let err = fails(&b.build(), "type-39-partial-and-gap");
    assert_defect!(err, Defect::PartialBlock { name, type_name: "MXFP4", ne0: 300, block: 32 } if name == "blk.0.ffn_up.weight");
}

#[test]
fn type_38_in_a_llama_file_forces_the_bitnet_reading() {
    // TL1 [256 x 4]: n/4 + 32 = 288.
    let mut b = llama();
    b.tensor("blk.0.attn_q.weight", &[256, 4], 38, 288);
    b.tensor("output_norm.weight", &[256], F32, 1024);
    let spec = loads(&b.build(), "llama-tl1");
    assert_eq!(spec.type_reading, Some(TypeReading::Bitnet));
    let t = tensor_of(&spec, "blk.0.attn_q.weight");
    assert_eq!((t.dtype, t.bytes), (Dtype::Ggml(GgmlType::TL1), 288));

    // And 36 likewise (upstream has no meaning for it).
    let mut b = llama();
    b.tensor("blk.0.attn_q.weight", &[256, 4], 36, 288);
    let spec = loads(&b.build(), "llama-i2s");
    assert_eq!(spec.type_reading, Some(TypeReading::Bitnet));
    assert_eq!(
        tensor_of(&spec, "blk.0.attn_q.weight").dtype,
        Dtype::Ggml(GgmlType::I2_S)
    );
}

#[test]
fn file_type_40_with_q1_0_tensor_reads_upstream() {
    // Q1_0 [128 x 4]: one 18-byte block per row.
    let mut b = llama();
    b.kv_u32("general.file_type", 40);
    b.tensor("blk.0.attn_q.weight", &[128, 4], 41, 72);
    b.tensor("output_norm.weight", &[256], F32, 1024);
    let spec = loads(&b.build(), "llama-q1_0");
    assert_eq!(spec.type_reading, Some(TypeReading::Upstream));
    assert_eq!(spec.file_type_name, Some("MOSTLY_Q1_0"));
    let t = tensor_of(&spec, "blk.0.attn_q.weight");
    assert_eq!((t.dtype, t.bytes), (Dtype::Ggml(GgmlType::Q1_0), 72));

    // Without an id above 39, file_type 40 alone selects the BitNet reading (rule 3).
    let mut b = llama();
    b.kv_u32("general.file_type", 40);
    b.tensor("output_norm.weight", &[256], F32, 1024);
    let spec = loads(&b.build(), "llama-ft40-f32");
    assert_eq!(spec.type_reading, Some(TypeReading::Bitnet));
    assert_eq!(spec.file_type_name, Some("MOSTLY_I2_S"));
}

#[test]
fn bitnet_architecture_with_an_upstream_only_type_falls_back_to_upstream() {
    // NVFP4 (40) has no BitNet meaning: the size check picks the upstream reading.
    let mut b = bitnet();
    b.tensor("blk.0.attn_q.weight", &[64, 4], 40, 144);
    let spec = loads(&b.build(), "bitnet-nvfp4");
    assert_eq!(spec.type_reading, Some(TypeReading::Upstream));
    assert_eq!(
        tensor_of(&spec, "blk.0.attn_q.weight").dtype,
        Dtype::Ggml(GgmlType::NVFP4)
    );
}

// ---------------------------------------------------------------------------------------------------------------
// Byte order and version 2
// ---------------------------------------------------------------------------------------------------------------

fn twin(big_endian: bool, version: u32) -> Vec<u8> {
    let mut b = GgufBuilder::new();
    b.big_endian = big_endian;
    b.version = version;
    b.kv_str("general.architecture", "llama");
    b.kv_str("general.name", "twin é");
    b.kv_u32("llama.block_count", 1);
    b.kv_u64("llama.u64", 1 << 33);
    b.kv_u16("llama.u16", 0x1234);
    b.kv_i32("llama.i32", -7);
    b.kv_f32("llama.rope.freq_base", 10000.5);
    b.kv_raw(b"tokenizer.ggml.add_bos_token", vt::BOOL, &[1]);
    b.kv_raw(b"llama.u8", vt::UINT8, &[0xab]);
    b.kv_u32_array("llama.attention.head_count_kv", &[2, 4]);
    b.kv_f32_array("tokenizer.ggml.scores", &[0.5, -1.25]);
    b.kv_str_array("tokenizer.ggml.tokens", &["<s>", "</s>", "a"]);
    let long: Vec<u32> = (0..5000).collect();
    b.kv_u32_array("long", &long);
    b.tensor("token_embd.weight", &[8, 3], F32, 96);
    b.tensor("blk.0.attn_q.weight", &[256, 2], Q4_K, 288);
    b.tensor("output_norm.weight", &[16], F16, 32);
    b.build()
}

fn same_model(a: &ModelSpec, b: &ModelSpec) {
    assert_eq!(a.architecture, b.architecture);
    assert_eq!(a.hparams, b.hparams);
    assert_eq!(a.tensors, b.tensors);
    assert_eq!(a.metadata.len(), b.metadata.len());
    // Same layout in both byte orders, so even skipped spans agree.
    for (k, v) in &a.metadata {
        assert_eq!(Some(v), b.metadata.get(k), "{k}");
    }
    assert_eq!(a.fingerprint, b.fingerprint);
}

#[test]
fn big_endian_file_reads_like_its_little_endian_twin() {
    let le = loads(&twin(false, 3), "twin-le");
    let be = loads(&twin(true, 3), "twin-be");
    assert!(!le.big_endian);
    assert!(be.big_endian);
    assert_eq!(be.gguf_version, Some(3));
    same_model(&le, &be);
    assert_eq!(be.metadata["llama.u64"], MetaValue::U64(1 << 33));
    assert_eq!(be.metadata["llama.u16"], MetaValue::U16(0x1234));
    assert_eq!(be.metadata["llama.i32"], MetaValue::I32(-7));
    assert_eq!(be.metadata["llama.rope.freq_base"], MetaValue::F32(10000.5));
    assert_eq!(be.metadata["general.name"].as_str(), Some("twin é"));
    assert_eq!(
        be.metadata["tokenizer.ggml.scores"],
        MetaValue::Array(vec![MetaValue::F32(0.5), MetaValue::F32(-1.25)])
    );
    assert_eq!(be.metadata["long"].array_len(), Some(5000));
    assert_eq!(
        be.hparams.head_count_kv,
        Some(optimizer::model::PerLayer::Layers(vec![2, 4]))
    );
    let bytes: Vec<u64> = be.tensors.iter().map(|t| t.bytes).collect();
    assert_eq!(bytes, [96, 288, 32]);
}

#[test]
fn version_2_files_read_like_version_3() {
    let v3 = loads(&twin(false, 3), "twin-v3");
    for big in [false, true] {
        let v2 = loads(&twin(big, 2), "twin-v2");
        assert_eq!(v2.gguf_version, Some(2));
        assert_eq!(v2.big_endian, big);
        same_model(&v3, &v2);
    }
}

#[test]
fn big_endian_errors_are_at_the_same_offsets() {
    let mut b = GgufBuilder::new();
    b.big_endian = true;
    b.kv_str("general.architecture", "llama");
    let pos = next_value_pos(&b, "flag");
    b.kv_raw(b"flag", vt::BOOL, &[7]);
    let err = fails(&b.build(), "be-bool");
    assert_defect!(err, Defect::InvalidBool { value: 7, .. });
    assert_eq!(err.offset(), Some(pos));
    let mut b = GgufBuilder::new();
    b.big_endian = true;
    b.n_kv_override = Some(MAX_KV + 1);
    let err = fails(&b.build(), "be-too-many-kv");
    assert_defect!(err, Defect::TooMany { count, .. } if *count == MAX_KV + 1);
}

// ---------------------------------------------------------------------------------------------------------------
// Split models
// ---------------------------------------------------------------------------------------------------------------

const SHARD_TENSORS: [&[&str]; 3] = [
    &["token_embd.weight", "blk.0.attn_q.weight"],
    &["blk.0.ffn_up.weight", "blk.1.attn_q.weight"],
    &["blk.1.ffn_up.weight", "output.weight"],
];

/// One shard: `no` is 0-based as written in `split.no`.
fn shard(no: u16, count: u16, total: i32, tensors: &[&str]) -> Vec<u8> {
    let mut b = llama();
    b.kv_u32("llama.block_count", 2);
    b.kv_u16("split.no", no);
    b.kv_u16("split.count", count);
    b.kv_i32("split.tensors.count", total);
    for t in tensors {
        b.tensor(t, &[64], F32, 256);
    }
    b.build()
}

fn shard_path(dir: &Path, i: usize, n: usize) -> PathBuf {
    dir.join(format!("model-{i:05}-of-{n:05}.gguf"))
}

/// Writes the three shards, letting `tweak` change shard i's (split.no, split.count, split.tensors.count, tensors).
fn write_split(dir: &Path, tweak: impl Fn(usize, &mut (u16, u16, i32, Vec<&'static str>))) {
    for (i, names) in SHARD_TENSORS.iter().enumerate() {
        let mut s = (i as u16, 3u16, 6i32, names.to_vec());
        tweak(i, &mut s);
        std::fs::write(shard_path(dir, i + 1, 3), shard(s.0, s.1, s.2, &s.3)).unwrap();
    }
}

fn split_err(path: &Path) -> (ModelError, String) {
    let err = match load(path) {
        Ok(_) => panic!("{}: expected an error", path.display()),
        Err(e) => e,
    };
    assert_defect!(err, Defect::Split(_));
    let msg = err.to_string();
    (err, msg)
}

fn error_path(err: &ModelError) -> &Path {
    match err {
        ModelError::InvalidModel { path, .. }
        | ModelError::Invalid { path, .. }
        | ModelError::Io { path, .. } => path,
    }
}

#[test]
fn split_model_reads_as_one_from_any_shard() {
    let dir = tempfile::tempdir().unwrap();
    write_split(dir.path(), |_, _| {});
    let mut fingerprints = Vec::new();
    for i in 1..=3 {
        let spec = load(&shard_path(dir.path(), i, 3)).unwrap_or_else(|e| panic!("shard {i}: {e}"));
        assert_eq!(spec.files.len(), 3);
        assert_eq!(spec.tensors.len(), 6);
        let names: Vec<&str> = spec.tensors.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, SHARD_TENSORS.concat());
        for (j, f) in spec.files.iter().enumerate() {
            assert_eq!(f.path, shard_path(dir.path(), j + 1, 3));
            assert_eq!(f.tensor_count, 2);
        }
        let files: Vec<u32> = spec.tensors.iter().map(|t| t.file).collect();
        assert_eq!(files, [0, 0, 1, 1, 2, 2]);
        assert_eq!(spec.tensor_bytes(), 6 * 256);
        fingerprints.push(spec.fingerprint);
    }
    assert!(fingerprints.iter().all(|f| *f == fingerprints[0]));
    // A shard read alone from memory is not the whole model.
    let bytes = std::fs::read(shard_path(dir.path(), 1, 3)).unwrap();
    let err = fails(&bytes, "shard-alone");
    assert_defect!(err, Defect::Split(m) if m.contains("split.count is 3, expected 1"));
}

#[test]
fn split_missing_shard_is_named() {
    let dir = tempfile::tempdir().unwrap();
    write_split(dir.path(), |_, _| {});
    let missing = shard_path(dir.path(), 2, 3);
    std::fs::remove_file(&missing).unwrap();
    for given in [1, 3] {
        let (err, msg) = split_err(&shard_path(dir.path(), given, 3));
        assert_eq!(error_path(&err), missing);
        assert!(msg.contains("model-00002-of-00003.gguf"), "{msg}");
        assert!(msg.contains("shard 2 of 3 is missing"), "{msg}");
    }
}

#[test]
fn split_count_disagreeing_with_the_name() {
    let dir = tempfile::tempdir().unwrap();
    write_split(dir.path(), |i, s| {
        if i == 0 {
            s.1 = 2;
        }
    });
    let (err, msg) = split_err(&shard_path(dir.path(), 1, 3));
    assert_eq!(error_path(&err), shard_path(dir.path(), 1, 3));
    assert!(
        msg.contains("file name says 3 shards but split.count is 2"),
        "{msg}"
    );
    // Read from another shard, the disagreeing one is found while checking all of them.
    let (err, msg) = split_err(&shard_path(dir.path(), 3, 3));
    assert_eq!(error_path(&err), shard_path(dir.path(), 1, 3));
    assert!(msg.contains("split.count is 2, expected 3"), "{msg}");
}

#[test]
fn split_no_wrong() {
    let dir = tempfile::tempdir().unwrap();
    // The second shard says split.no = 2 (1-based by mistake).
    write_split(dir.path(), |i, s| {
        if i == 1 {
            s.0 = 2;
        }
    });
    let (err, msg) = split_err(&shard_path(dir.path(), 1, 3));
    assert_eq!(error_path(&err), shard_path(dir.path(), 2, 3));
    assert!(
        msg.contains("split.no is 2 but the file is shard 2"),
        "{msg}"
    );
}

#[test]
fn split_tensors_count_wrong() {
    let dir = tempfile::tempdir().unwrap();
    write_split(dir.path(), |_, s| s.2 = 7);
    let (_, msg) = split_err(&shard_path(dir.path(), 2, 3));
    assert!(
        msg.contains("split.tensors.count is 7 but the shards hold 6 tensors"),
        "{msg}"
    );
}

#[test]
fn split_tensor_in_two_shards() {
    let dir = tempfile::tempdir().unwrap();
    write_split(dir.path(), |i, s| {
        if i == 2 {
            s.3 = vec!["blk.1.ffn_up.weight", "blk.0.attn_q.weight"];
        }
    });
    let (err, msg) = split_err(&shard_path(dir.path(), 1, 3));
    assert_eq!(error_path(&err), shard_path(dir.path(), 3, 3));
    assert!(
        msg.contains("\"blk.0.attn_q.weight\" appears in more than one shard"),
        "{msg}"
    );
}

#[test]
fn split_count_on_a_file_without_the_shard_pattern() {
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "model.gguf",
        "model-1-of-2.gguf",
        "model-00000-of-00002.gguf",
    ] {
        let p = dir.path().join(name);
        std::fs::write(&p, shard(0, 2, 2, SHARD_TENSORS[0])).unwrap();
        let (err, msg) = split_err(&p);
        assert_eq!(error_path(&err), p);
        assert!(
            msg.contains("does not follow the shard pattern"),
            "{name}: {msg}"
        );
    }
    // split.count = 1 on a plain name is a complete model.
    let p = dir.path().join("single.gguf");
    std::fs::write(&p, shard(0, 1, 2, SHARD_TENSORS[0])).unwrap();
    assert_eq!(load(&p).unwrap().tensors.len(), 2);
}

#[test]
fn split_names() {
    assert_eq!(
        split_name(Path::new("a/m-00002-of-00003.gguf")),
        Some(("m".into(), 2, 3))
    );
    assert_eq!(
        split_name(Path::new("x-y-00001-of-99999.gguf")),
        Some(("x-y".into(), 1, 99_999))
    );
    for bad in [
        "m-00004-of-00003.gguf",
        "m-00000-of-00003.gguf",
        "m-0001-of-00003.gguf",
        "m-00001-of-100000.gguf",
        "m.gguf",
    ] {
        assert_eq!(split_name(Path::new(bad)), None, "{bad}");
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Truncation and mutation sweeps over fixtures
// ---------------------------------------------------------------------------------------------------------------

/// `load_bytes(&bytes[..n])` for each n: Err below `end`, Ok at and beyond it, never a panic.
fn check_prefixes(bytes: &[u8], path: &Path, end: usize, ns: impl Iterator<Item = usize>) -> usize {
    let mut checked = 0;
    for n in ns {
        let got = catch_unwind(AssertUnwindSafe(|| load_bytes(&bytes[..n], path)));
        match got {
            Err(_) => panic!(
                "{}: load_bytes panicked on the first {n} bytes",
                path.display()
            ),
            Ok(Ok(_)) if n < end => panic!(
                "{}: the first {n} bytes (< {end}) were accepted",
                path.display()
            ),
            Ok(Err(e)) if n >= end => panic!(
                "{}: the first {n} bytes (>= {end}) were refused: {e}",
                path.display()
            ),
            Ok(Err(e)) => assert!(
                e.to_string().starts_with(&path.display().to_string()),
                "{e}"
            ),
            Ok(Ok(_)) => {}
        }
        checked += 1;
    }
    checked
}

fn data_end(bytes: &[u8], path: &Path) -> usize {
    let spec = load_bytes(bytes, path).unwrap();
    spec.tensors
        .iter()
        .map(|t| t.offset + t.bytes)
        .max()
        .unwrap() as usize
}

#[test]
fn truncation_at_every_offset_of_types_zoo() {
    let (path, bytes) = fixture("types-zoo.gguf");
    let end = data_end(&bytes, &path);
    assert!(end <= bytes.len());
    // Two threads: the sweep is ~26k loads.
    let half = bytes.len() / 2;
    let checked = std::thread::scope(|s| {
        let a = s.spawn(|| check_prefixes(&bytes, &path, end, 0..half));
        let b = check_prefixes(&bytes, &path, end, half..=bytes.len());
        a.join().unwrap() + b
    });
    assert_eq!(checked, bytes.len() + 1);
}

#[test]
fn truncation_of_vocab_large() {
    let (path, bytes) = fixture("vocab-large.gguf");
    let h = parse_header_bytes(&bytes).unwrap();
    let end = data_end(&bytes, &path);
    // Where the walked arrays start and end, and where the tensor-info table is.
    let mut spans = Vec::new();
    for (_, v) in &h.metadata {
        if let MetaValue::SkippedArray { offset, bytes, .. } = v {
            spans.push((*offset as usize, (*offset + *bytes) as usize));
        }
    }
    assert_eq!(spans.len(), 3);
    let infos_end = h.tensors.last().unwrap().record_offset as usize + 64;
    let data = h.data_offset as usize;
    // Every offset up to the first walked array and a little into it (cheap), every 7th byte of the tensor
    // infos, windows around each array boundary, and a stride over the arrays and the tensor data. Every offset
    // of the 1.29 MB header is ~10^12 bytes of parsing in a debug build; see `truncation_of_vocab_large_full`.
    let mut ns: Vec<usize> = (0..spans[0].0 + 200).collect();
    for &(s, e) in &spans {
        ns.extend(s.saturating_sub(8)..s + 8);
        ns.extend(e - 8..e + 8);
        ns.extend((s..e).step_by(29_989));
    }
    ns.extend((spans[2].1..infos_end).step_by(7));
    ns.extend(data - 4..data + 4);
    ns.extend((data..bytes.len()).step_by(9_973));
    ns.extend([end - 1, end, bytes.len()]);
    ns.sort_unstable();
    ns.dedup();
    check_prefixes(&bytes, &path, end, ns.into_iter());
}

#[test]
#[ignore = "slow: stride-97 truncation sweep of vocab-large (~19k full header parses, ~35 s in a debug build)"]
fn truncation_of_vocab_large_full() {
    let (path, bytes) = fixture("vocab-large.gguf");
    let end = data_end(&bytes, &path);
    let ns = (0..4096)
        .chain((4096..bytes.len()).step_by(97))
        .chain([end - 1, end, bytes.len()]);
    check_prefixes(&bytes, &path, end, ns);
}

struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn byte_mutations_of_a_header_never_panic() {
    let (path, mut bytes) = fixture("llama-q4_k_m.gguf");
    let header_len = parse_header_bytes(&bytes).unwrap().data_offset as usize;
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let (mut ok, mut err) = (0, 0);
    for round in 0..1000 {
        let mut undo = Vec::new();
        let flips = 1 + rng.below(4);
        for _ in 0..flips {
            let at = rng.below(header_len);
            undo.push((at, bytes[at]));
            bytes[at] = match rng.below(4) {
                0 => 0xff,
                1 => 0,
                _ => bytes[at] ^ (1 << rng.below(8)),
            };
        }
        match catch_unwind(AssertUnwindSafe(|| load_bytes(&bytes, &path))) {
            Ok(Ok(_)) => ok += 1,
            Ok(Err(_)) => err += 1,
            Err(_) => panic!("round {round}: load_bytes panicked after mutating {undo:?}"),
        }
        for (at, old) in undo.into_iter().rev() {
            bytes[at] = old;
        }
    }
    assert!(ok > 0 && err > 0, "ok {ok}, err {err}");
}

#[test]
fn huge_block_count_does_not_panic_or_allocate() {
    let mut b = llama();
    b.kv_u64("llama.block_count", u64::MAX);
    b.tensor("output_norm.weight", &[4], F32, 16);
    let file = b.build();
    let got = catch_unwind(AssertUnwindSafe(|| {
        load_bytes(&file, &crafted("block-count"))
    }));
    match got {
        Err(_) => panic!("load_bytes panicked"),
        // Refusing the file or bounding the layer table are both fixes; a 4,096-entry table is generous.
        Ok(Ok(spec)) => assert!(
            spec.layers.len() as u64 <= MAX_MATERIALIZED_ARRAY,
            "{} layers",
            spec.layers.len()
        ),
        Ok(Err(_)) => {}
    }
    // A u32 count of ten million currently yields a 10,000,000-entry layer table (~320 MB) for a 100-byte file.
    let mut b = llama();
    b.kv_u32("llama.block_count", 10_000_000);
    b.tensor("output_norm.weight", &[4], F32, 16);
    if let Ok(spec) = load_bytes(&b.build(), &crafted("block-count-10m")) {
        assert!(
            spec.layers.len() as u64 <= MAX_MATERIALIZED_ARRAY,
            "{} layers",
            spec.layers.len()
        );
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Large-array skipping
// ---------------------------------------------------------------------------------------------------------------

#[test]
fn llama3_sized_vocabulary_is_recorded_not_materialized() {
    const TOKENS: usize = 128_256;
    const MERGES: usize = 280_147;
    let tokens: Vec<String> = (0..TOKENS).map(|i| format!("tok{i}")).collect();
    let merges: Vec<String> = (0..MERGES)
        .map(|i| format!("m{} n{}", i % 977, i / 977))
        .collect();
    let scores: Vec<f32> = (0..TOKENS).map(|i| -(i as f32)).collect();
    let strings_bytes = |v: &[String]| v.iter().map(|s| 8 + s.len() as u64).sum::<u64>();

    let mut b = llama();
    b.kv_str("tokenizer.ggml.model", "gpt2");
    let tokens_at = next_value_pos(&b, "tokenizer.ggml.tokens");
    b.kv_str_array("tokenizer.ggml.tokens", &tokens);
    let after_tokens = kv_end(&b);
    let scores_at = next_value_pos(&b, "tokenizer.ggml.scores");
    b.kv_f32_array("tokenizer.ggml.scores", &scores);
    let after_scores = kv_end(&b);
    let merges_at = next_value_pos(&b, "tokenizer.ggml.merges");
    b.kv_str_array("tokenizer.ggml.merges", &merges);
    let after_merges = kv_end(&b);
    b.kv_u32("tokenizer.ggml.bos_token_id", 128_000);
    b.tensor("output_norm.weight", &[64], F32, 256);
    let file = b.build();
    let spec = loads(&file, "llama3-vocab");

    let tok = MetaValue::SkippedArray {
        element_type: "STRING",
        count: TOKENS as u64,
        offset: tokens_at + 12,
        bytes: strings_bytes(&tokens),
    };
    assert_eq!(spec.metadata["tokenizer.ggml.tokens"], tok);
    assert_eq!(tokens_at + 12 + strings_bytes(&tokens), after_tokens);
    assert_eq!(
        spec.metadata["tokenizer.ggml.scores"],
        MetaValue::SkippedArray {
            element_type: "FLOAT32",
            count: TOKENS as u64,
            offset: scores_at + 12,
            bytes: 4 * TOKENS as u64
        }
    );
    assert_eq!(scores_at + 12 + 4 * TOKENS as u64, after_scores);
    let m = MetaValue::SkippedArray {
        element_type: "STRING",
        count: MERGES as u64,
        offset: merges_at + 12,
        bytes: strings_bytes(&merges),
    };
    assert_eq!(spec.metadata["tokenizer.ggml.merges"], m);
    assert_eq!(merges_at + 12 + strings_bytes(&merges), after_merges);
    // The next entry's key length field is where the span ends.
    let next = after_merges as usize;
    assert_eq!(
        &file[next..next + 8],
        &le64("tokenizer.ggml.bos_token_id".len() as u64)
    );
    assert_eq!(
        spec.metadata["tokenizer.ggml.bos_token_id"],
        MetaValue::U32(128_000)
    );
    assert_eq!(spec.hparams.vocab_size, Some(TOKENS as u64));
    assert_eq!(spec.tensors.len(), 1);
}

/// `load` reads through a 256 KiB buffer and walks string arrays inside it; on disk, whole or cut anywhere
/// (including strings and length fields straddling the buffer's end), it must agree with `load_bytes`.
#[test]
fn file_reader_agrees_with_memory_reader() {
    let tokens: Vec<Vec<u8>> = (0..6000usize)
        .map(|i| {
            let len = if i % 1500 == 7 { 200_000 + i } else { i % 53 };
            vec![b'a' + (i % 26) as u8; len]
        })
        .collect();
    let mut b = llama();
    b.kv_str_array("tokenizer.ggml.tokens", &tokens);
    b.kv_u32("tokenizer.ggml.bos_token_id", 1);
    b.tensor("token_embd.weight", &[32, 6000], F16, 32 * 6000 * 2);
    let file = b.build();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vocab.gguf");
    std::fs::write(&path, &file).unwrap();
    let from_disk = load(&path).unwrap();
    let from_memory = load_bytes(&file, &path).unwrap();
    assert_eq!(from_disk, from_memory);
    assert!(matches!(
        from_disk.metadata["tokenizer.ggml.tokens"],
        MetaValue::SkippedArray { count: 6000, .. }
    ));

    let header_end = kv_end(&b) as usize;
    let mut cuts: Vec<usize> = (0..header_end).step_by(7919).collect();
    for k in 1..=header_end / (256 << 10) {
        let edge = k * (256 << 10);
        cuts.extend(edge - 12..edge + 12);
    }
    cuts.extend([header_end - 1, header_end, file.len() - 1]);
    for cut in cuts {
        std::fs::write(&path, &file[..cut]).unwrap();
        let disk = load(&path).expect_err("truncated file accepted");
        let memory = load_bytes(&file[..cut], &path).expect_err("truncated bytes accepted");
        assert_eq!(disk.to_string(), memory.to_string(), "cut at {cut}");
    }
}

#[test]
fn tl2_row_shorter_than_256_columns_is_refused_by_name() {
    let mut b = GgufBuilder::new();
    b.kv_str("general.architecture", "bitnet-b1.58");
    b.tensor("blk.0.ffn_up.weight", &[128, 4], 39, 64);
    let err = load_bytes(&b.build(), &crafted("tl2-short")).unwrap_err();
    assert!(
        matches!(err.defect(), Some(Defect::BadTensor { name, reason }) if name == "blk.0.ffn_up.weight" && reason.contains("256")),
        "{err}"
    );
}
