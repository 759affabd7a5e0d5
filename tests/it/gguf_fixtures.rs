//! Every GGUF fixture, written by the official `gguf` Python writer (tests/fixtures/generate.py, gguf==0.19.0),
//! must read back exactly as the official reader (`gguf.GGUFReader`) reported it in tests/fixtures/expected/.

use crate::common;
use common::fixture;

use optimizer::model::{self, Defect, Format, MetaValue, ModelSpec, TypeReading};
use serde_json::Value;

fn expected(id: &str) -> Value {
    let p = fixture("expected").join(format!("{id}.json"));
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

fn load_expected(id: &str) -> (Value, ModelSpec) {
    let e = expected(id);
    let path = fixture(e["path"].as_str().unwrap());
    let spec = model::load(&path).unwrap_or_else(|err| panic!("{id}: {err}"));
    (e, spec)
}

/// Compares one metadata value with what gguf-py decoded. gguf-py widens FLOAT32 to a Python float, so floats
/// compare after narrowing the expected value to f32; arrays longer than 64 are summarised by count and type.
fn meta_matches(ours: &MetaValue, theirs: &Value) -> Result<(), String> {
    let fail = || Err(format!("ours {ours:?}, official {theirs}"));
    match (ours, theirs) {
        (MetaValue::F32(v), Value::Number(n)) => {
            if n.as_f64().map(|x| x as f32) == Some(*v) {
                Ok(())
            } else {
                fail()
            }
        }
        (MetaValue::F64(v), Value::Number(n)) => {
            if n.as_f64() == Some(*v) {
                Ok(())
            } else {
                fail()
            }
        }
        (MetaValue::Bool(b), Value::Bool(t)) if b == t => Ok(()),
        (MetaValue::String(s), Value::String(t)) if s == t => Ok(()),
        (MetaValue::Array(items), Value::Array(theirs)) => {
            if items.len() != theirs.len() {
                return fail();
            }
            for (a, b) in items.iter().zip(theirs) {
                meta_matches(a, b)?;
            }
            Ok(())
        }
        (_, Value::Object(o)) if o.contains_key("array_count") => {
            let count = o["array_count"].as_u64().unwrap();
            let et = o["element_type"].as_str().unwrap();
            let (our_count, our_type) = match ours {
                MetaValue::Array(items) => (
                    items.len() as u64,
                    items.first().map_or("", MetaValue::type_name),
                ),
                MetaValue::SkippedArray {
                    count,
                    element_type,
                    ..
                } => (*count, *element_type),
                _ => return fail(),
            };
            if our_count == count && (our_type == et || our_count == 0) {
                Ok(())
            } else {
                fail()
            }
        }
        (v, Value::Number(n)) => {
            let ours: Option<i128> = match *v {
                MetaValue::I8(x) => Some(x.into()),
                MetaValue::I16(x) => Some(x.into()),
                MetaValue::I32(x) => Some(x.into()),
                MetaValue::I64(x) => Some(x.into()),
                ref other => other.as_u64().map(i128::from),
            };
            let theirs = n.as_i64().map(i128::from).or(n.as_u64().map(i128::from));
            if ours.is_some() && ours == theirs {
                Ok(())
            } else {
                fail()
            }
        }
        _ => fail(),
    }
}

fn assert_matches_official(id: &str) {
    let (e, spec) = load_expected(id);
    assert_eq!(spec.format, Format::Gguf, "{id}");
    assert_eq!(
        spec.gguf_version,
        e["version"].as_u64().map(|v| v as u32),
        "{id}"
    );
    assert_eq!(
        spec.big_endian,
        e["endianness"] == "big",
        "{id}: byte order"
    );
    let tensors = e["tensors"].as_array().unwrap();
    assert_eq!(spec.tensors.len(), tensors.len(), "{id}: tensor count");
    assert_eq!(
        spec.tensors.len() as u64,
        e["tensor_count"].as_u64().unwrap()
    );
    for (ours, theirs) in spec.tensors.iter().zip(tensors) {
        let name = theirs["name"].as_str().unwrap();
        assert_eq!(ours.name, name, "{id}: tensor order");
        let shape: Vec<u64> = theirs["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        assert_eq!(ours.shape, shape, "{id}: {name} shape");
        assert_eq!(
            ours.dtype.name(),
            theirs["dtype"].as_str().unwrap(),
            "{id}: {name} type"
        );
        assert_eq!(
            ours.bytes,
            theirs["n_bytes"].as_u64().unwrap(),
            "{id}: {name} bytes"
        );
        assert_eq!(
            ours.elements,
            theirs["n_elements"].as_u64().unwrap(),
            "{id}: {name} elements"
        );
    }
    assert_eq!(
        spec.tensor_bytes(),
        e["tensor_bytes"].as_u64().unwrap(),
        "{id}: tensor bytes"
    );
    assert_eq!(
        spec.parameter_count(),
        e["parameter_count"].as_u64().unwrap(),
        "{id}: parameter count"
    );
    let meta = e["metadata"].as_object().unwrap();
    assert_eq!(
        spec.metadata.len(),
        meta.len(),
        "{id}: metadata keys: ours {:?}, official {:?}",
        spec.metadata.keys().collect::<Vec<_>>(),
        meta.keys().collect::<Vec<_>>()
    );
    for (k, v) in meta {
        let ours = spec
            .metadata
            .get(k)
            .unwrap_or_else(|| panic!("{id}: missing key {k}"));
        if let Err(msg) = meta_matches(ours, v) {
            panic!("{id}: key {k}: {msg}");
        }
    }
}

#[test]
fn every_gguf_fixture_matches_the_official_reader() {
    let mut checked = 0;
    for entry in std::fs::read_dir(fixture("expected")).unwrap() {
        let path = entry.unwrap().path();
        let id = path.file_stem().unwrap().to_str().unwrap().to_string();
        let e = expected(&id);
        // Per-shard records are covered by `split-llama` (the merged model); quirk-q8_1 is refused on purpose.
        if e["format"] != "gguf" || id.starts_with("split-llama-split-") || id == "quirk-q8_1" {
            continue;
        }
        assert_matches_official(&id);
        checked += 1;
    }
    assert!(checked >= 12, "only {checked} GGUF fixtures checked");
}

#[test]
fn split_model_reads_the_same_from_any_shard_and_matches_unsplit_fingerprint() {
    let dir = fixture("gguf/split");
    let unsplit = model::load(&dir.join("llama-unsplit.gguf")).unwrap();
    let mut fingerprints = Vec::new();
    for i in 1..=3 {
        let spec = model::load(&dir.join(format!("llama-split-{i:05}-of-00003.gguf"))).unwrap();
        assert_eq!(spec.files.len(), 3);
        assert_eq!(spec.tensors.len(), unsplit.tensors.len());
        assert_eq!(spec.tensor_bytes(), unsplit.tensor_bytes());
        assert_eq!(spec.hparams, unsplit.hparams);
        fingerprints.push(spec.fingerprint);
    }
    assert!(fingerprints.iter().all(|f| *f == unsplit.fingerprint));
}

#[test]
fn fingerprint_does_not_depend_on_path() {
    let src = fixture("gguf/llama-q4_k_m.gguf");
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("renamed.gguf");
    std::fs::copy(&src, &copy).unwrap();
    let a = model::load(&src).unwrap();
    let b = model::load(&copy).unwrap();
    assert_eq!(a.fingerprint, b.fingerprint);
    let other = model::load(&fixture("gguf/llama-tied-q8_0.gguf")).unwrap();
    assert_ne!(a.fingerprint, other.fingerprint);
}

#[test]
fn q8_1_sized_as_gguf_py_writes_it_is_refused_as_ggml_would() {
    // gguf-py 0.19.0 sizes a Q8_1 block at 40 bytes; ggml's block_q8_1 is 36, so llama.cpp rejects the next
    // tensor's offset. We follow the engine.
    let err = model::load(&fixture("gguf/quirk-q8_1.gguf")).unwrap_err();
    assert!(
        matches!(
            err.defect(),
            Some(Defect::TensorGap {
                offset: 640,
                expected: 576,
                ..
            })
        ),
        "{err}"
    );
}

#[test]
fn hyper_parameters_from_fixture_metadata() {
    let load = |f: &str| model::load(&fixture("gguf").join(f)).unwrap();
    let llama = load("llama-q4_k_m.gguf");
    let h = &llama.hparams;
    assert_eq!(llama.architecture, "llama");
    assert_eq!(h.head_count.as_ref().map(|p| p.max()), Some(8));
    assert_eq!(h.head_count_kv.as_ref().map(|p| p.max()), Some(2));
    assert!(!h.tied_embeddings);
    assert_eq!(llama.file_type_name, Some("MOSTLY_Q4_K_M"));
    assert_eq!(llama.type_reading, Some(TypeReading::Upstream));
    assert_eq!(llama.layers.len() as u64, h.block_count.unwrap());
    let layer_sum: u64 = llama.layers.iter().map(|l| l.bytes).sum();
    assert_eq!(layer_sum + llama.non_layer_bytes(), llama.tensor_bytes());

    assert!(load("llama-tied-q8_0.gguf").hparams.tied_embeddings);
    assert!(load("gemma2-q5_k.gguf").hparams.tied_embeddings);

    let gemma = load("gemma2-q5_k.gguf");
    let n = gemma.hparams.block_count.unwrap() as usize;
    assert_eq!(gemma.hparams.sliding_window_layers.len(), n);
    assert!(gemma.hparams.sliding_window_layers[0]);
    if n > 1 {
        assert!(!gemma.hparams.sliding_window_layers[1]);
    }

    let moe = load("mixtral-moe-q4_k.gguf");
    assert_eq!(moe.hparams.expert_count, Some(4));
    assert_eq!(moe.hparams.expert_used_count, Some(2));
    assert!(moe.hparams.expert_layers.iter().all(|&b| b));
    assert!(
        moe.tensors
            .iter()
            .any(|t| t.role == model::Role::Expert && t.shape.len() == 3)
    );

    let openelm = load("per-layer-kv.gguf");
    assert!(matches!(
        openelm.hparams.head_count_kv,
        Some(model::PerLayer::Layers(_))
    ));

    let mamba = load("mamba-f16.gguf");
    assert!(mamba.hparams.recurrent_layers.iter().all(|&b| b));
    assert!(mamba.hparams.ssm.is_some());

    let vocab = load("vocab-large.gguf");
    assert_eq!(vocab.hparams.vocab_size, Some(32_000));
    assert!(matches!(
        vocab.metadata.get("tokenizer.ggml.merges"),
        Some(MetaValue::SkippedArray { count: 60_000, .. })
    ));
}
