//! Header-only safetensors checkpoints of real, well-known models, for the vLLM planning tests.
//!
//! `tests/fixtures/vllm/models/<id>/` holds the model's published `config.json` and `header.json`, the complete
//! safetensors header its checkpoint has (written by `tests/fixtures/vllm/gen_headers.py`; sources and method in
//! that directory's README). [`materialize`] turns one into a model directory the readers accept: the config and
//! a sparse `model.safetensors` whose data section is a hole, so a 140 GB model costs a few KiB of disk.

use std::fs::{self, File};
use std::io::Write;
use std::path::PathBuf;

use optimizer::model::{self, ModelSpec};
use serde_json::Value;

/// Header bytes are padded with spaces to this alignment, as the upstream writer does
/// (huggingface/safetensors `safetensors/src/tensor.rs`, `prepare`: `N_LEN`-aligned so the data section starts
/// 8-byte aligned).
const HEADER_ALIGN: usize = 8;

/// `tests/fixtures/vllm/models`.
pub fn models_dir() -> PathBuf {
    super::fixture("vllm/models")
}

/// Every fixture id (a directory with a `config.json` and a `header.json`), sorted.
pub fn ids() -> Vec<String> {
    let mut ids: Vec<String> = fs::read_dir(models_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("config.json").is_file() && p.join("header.json").is_file())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    ids.sort();
    ids
}

/// The committed header of fixture `id`, parsed.
pub fn header(id: &str) -> Value {
    let path = models_dir().join(id).join("header.json");
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The committed `config.json` of fixture `id`, parsed.
pub fn config(id: &str) -> Value {
    let path = models_dir().join(id).join("config.json");
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Bytes of the data section the header declares: the largest end offset.
pub fn data_bytes(header: &Value) -> u64 {
    header
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .map(|(_, v)| v["data_offsets"][1].as_u64().unwrap())
        .max()
        .unwrap_or(0)
}

/// The header as a checkpoint stores it: compact JSON (the committed file has one tensor per line, and JSON
/// strings hold no raw newlines, so dropping them changes no value), padded with spaces to [`HEADER_ALIGN`].
pub fn header_bytes(id: &str) -> Vec<u8> {
    let path = models_dir().join(id).join("header.json");
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut bytes: Vec<u8> = text.bytes().filter(|&b| b != b'\n').collect();
    while !bytes.len().is_multiple_of(HEADER_ALIGN) {
        bytes.push(b' ');
    }
    bytes
}

/// Writes fixture `id` as a model directory: `config.json` and a sparse `model.safetensors` (8-byte
/// little-endian header length, the header, then the data section as a hole of the declared size).
pub fn materialize(id: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let src = models_dir().join(id);
    fs::copy(src.join("config.json"), dir.path().join("config.json")).unwrap();
    let head = header_bytes(id);
    let data = data_bytes(&header(id));
    let mut f = File::create(dir.path().join("model.safetensors")).unwrap();
    f.write_all(&(head.len() as u64).to_le_bytes()).unwrap();
    f.write_all(&head).unwrap();
    f.set_len(8 + head.len() as u64 + data).unwrap();
    dir
}

/// Fixture `id` read by the crate's safetensors reader (from a directory [`materialize`] wrote and then
/// removed: the spec keeps no handle on the files).
pub fn spec(id: &str) -> ModelSpec {
    let dir = materialize(id);
    model::load(dir.path()).unwrap_or_else(|e| panic!("fixture {id}: {e}"))
}
