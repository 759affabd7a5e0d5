//! Helpers shared by the integration tests that rebuild measured models: the engine tables
//! (tests/fixtures/llama-cpp/models.json, tests/fixtures/llama-bench/models.json) describe each model by its GGUF
//! metadata and tensor table, and the tests write it back as a sparse GGUF.

use std::path::Path;

use optimizer::model::gguf_builder::{GgufBuilder, value_type as vt, write_sparse};
use optimizer::model::{self, GgmlType, ModelSpec, TypeReading};
use serde_json::Value;

/// The ggml type id of a type name, as the upstream tables spell it.
pub fn type_id(name: &str) -> u32 {
    (0..64)
        .find(|&id| GgmlType::from_id(id, TypeReading::Upstream).is_some_and(|t| t.name() == name))
        .unwrap_or_else(|| panic!("unknown type {name}"))
}

/// Writes the model described in models.json as a sparse GGUF and reads it back (vocabulary contents are
/// placeholders: only counts and element types enter the memory and speed models).
pub fn build(m: &Value, path: &Path) -> ModelSpec {
    let mut b = GgufBuilder::new();
    for kv in m["metadata"].as_array().unwrap() {
        let key = kv["key"].as_str().unwrap();
        let ty = kv["type"].as_str().unwrap();
        let v = &kv["value"];
        match ty {
            "STRING" => {
                b.kv_str(key, v.as_str().unwrap());
            }
            "UINT32" => {
                b.kv_u32(key, v.as_u64().unwrap() as u32);
            }
            "INT32" => {
                b.kv_i32(key, v.as_i64().unwrap() as i32);
            }
            "FLOAT32" => {
                b.kv_f32(key, v.as_f64().unwrap() as f32);
            }
            "BOOL" => {
                b.kv_raw(key.as_bytes(), vt::BOOL, &[u8::from(v.as_bool().unwrap())]);
            }
            "ARRAY" => {
                // Vocabulary contents do not enter the memory model; counts and element types do.
                let len = kv["length"]
                    .as_u64()
                    .unwrap_or_else(|| v.as_array().map_or(0, |a| a.len() as u64));
                let item = kv["item_type"].as_str().unwrap();
                let (et, elem): (u32, Vec<u8>) = match item {
                    "STRING" => (vt::STRING, b.string_bytes(b"t")),
                    "FLOAT32" => (vt::FLOAT32, 0f32.to_le_bytes().to_vec()),
                    "INT32" => (vt::INT32, 1i32.to_le_bytes().to_vec()),
                    "UINT32" => (vt::UINT32, 1u32.to_le_bytes().to_vec()),
                    "BOOL" => (vt::BOOL, vec![0]),
                    other => panic!("array of {other}"),
                };
                let mut bytes = b.array_header(et, len);
                match v.as_array() {
                    Some(items) if item == "INT32" || item == "UINT32" => {
                        for x in items {
                            bytes.extend_from_slice(&(x.as_i64().unwrap() as u32).to_le_bytes());
                        }
                    }
                    Some(items) if item == "BOOL" => {
                        for x in items {
                            bytes.push(u8::from(x.as_bool().unwrap()));
                        }
                    }
                    _ => {
                        for _ in 0..len {
                            bytes.extend_from_slice(&elem);
                        }
                    }
                }
                b.kv_raw(key.as_bytes(), vt::ARRAY, &bytes);
            }
            other => panic!("value type {other}"),
        }
    }
    for t in m["tensors"].as_array().unwrap() {
        let ne: Vec<u64> = t["ne"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        let id = type_id(t["type"].as_str().unwrap());
        let ty = GgmlType::from_id(id, TypeReading::Upstream).unwrap();
        b.tensor(
            t["name"].as_str().unwrap(),
            &ne,
            id,
            ty.tensor_bytes(&ne).unwrap(),
        );
    }
    write_sparse(&b, path).unwrap();
    model::load(path).unwrap()
}
