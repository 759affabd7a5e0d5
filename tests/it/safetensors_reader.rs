//! The safetensors reader against fixtures written by the official `safetensors` Python package
//! (tests/fixtures/generate.py), and against crafted bytes for every defect it refuses.

use crate::common;
use common::fixture;

use std::path::{Path, PathBuf};

use optimizer::model::safetensors::{self, MAX_HEADER_BYTES, StDtype};
use optimizer::model::{self, Defect, Dtype, ModelError, ModelSpec, PerLayer, Role};
use serde_json::Value;

fn fixture_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(fixture("safetensors"))
        .expect("fixture directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

fn load(path: &Path) -> ModelSpec {
    match model::load(path) {
        Ok(s) => s,
        Err(e) => panic!("{}: {e}", path.display()),
    }
}

fn load_fixture(name: &str) -> ModelSpec {
    load(&fixture("safetensors").join(name))
}

fn as_u64(v: &Value) -> u64 {
    v.as_u64().expect("integer")
}

#[test]
fn every_fixture_matches_the_python_reader() {
    let dirs = fixture_dirs();
    assert!(dirs.len() >= 7, "fixtures missing: {dirs:?}");
    for dir in dirs {
        let name = dir.file_name().and_then(|n| n.to_str()).expect("name");
        let expected_path = fixture(format!("expected/st-{name}.json"));
        let expected: Value =
            serde_json::from_slice(&std::fs::read(&expected_path).expect("expected file"))
                .expect("expected JSON");
        let spec = load(&dir);
        assert_eq!(spec.format, model::Format::Safetensors);
        let tensors = expected["tensors"].as_array().expect("tensors");
        assert_eq!(
            spec.tensors.len() as u64,
            as_u64(&expected["tensor_count"]),
            "{name}"
        );
        assert_eq!(spec.tensors.len(), tensors.len(), "{name}");
        for (got, want) in spec.tensors.iter().zip(tensors) {
            let ctx = format!("{name}: {}", got.name);
            assert_eq!(got.name, want["name"].as_str().expect("name"), "{ctx}");
            let shape: Vec<u64> = want["shape"]
                .as_array()
                .expect("shape")
                .iter()
                .map(as_u64)
                .collect();
            assert_eq!(got.shape, shape, "{ctx}");
            assert_eq!(
                got.dtype.name(),
                want["dtype"].as_str().expect("dtype"),
                "{ctx}"
            );
            assert_eq!(got.bytes, as_u64(&want["n_bytes"]), "{ctx}");
            assert_eq!(got.elements, as_u64(&want["n_elements"]), "{ctx}");
            // The offset is absolute and inside the tensor's file.
            let file = &spec.files[got.file as usize];
            assert!(got.offset + got.bytes <= file.bytes, "{ctx}");
        }
        let names: Vec<&str> = spec.tensors.iter().map(|t| t.name.as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted, "{name}: tensors sorted by name");
        assert_eq!(
            spec.tensor_bytes(),
            as_u64(&expected["tensor_bytes"]),
            "{name}"
        );
        assert_eq!(
            spec.element_count(),
            as_u64(&expected["parameter_count"]),
            "{name}"
        );
        // Every file is fully accounted for: 8 + header + data.
        for f in &spec.files {
            let len = std::fs::metadata(&f.path).expect("file").len();
            assert_eq!(f.bytes, len);
        }
        assert_eq!(
            spec.files.iter().map(|f| f.tensor_count).sum::<u64>(),
            spec.tensors.len() as u64
        );
        assert_eq!(spec.fingerprint.len(), 64);
    }
}

#[test]
fn dtypes_zoo_knows_every_dtype_written() {
    let spec = load_fixture("dtypes-zoo");
    assert_eq!(spec.architecture, "zoo");
    assert_eq!(spec.name.as_deref(), Some("Zoo"));
    let f4 = spec.tensor("zoo.float4_e2m1fn_x2").expect("F4 tensor");
    assert_eq!(f4.dtype, Dtype::Safetensors(StDtype::F4));
    assert_eq!((f4.elements, f4.bytes, f4.parameters), (16, 8, 16));
    assert_eq!(
        spec.metadata.get("format").and_then(|v| v.as_str()),
        Some("pt")
    );
}

#[test]
fn llama_bf16_hparams() {
    let spec = load_fixture("llama-bf16");
    let h = &spec.hparams;
    assert_eq!(spec.architecture, "llama");
    assert_eq!(spec.name.as_deref(), Some("LlamaForCausalLM"));
    assert_eq!(h.embedding_length, Some(128));
    assert_eq!(h.block_count, Some(2));
    assert_eq!(h.head_count, Some(PerLayer::Uniform(8)));
    assert_eq!(h.head_count_kv, Some(PerLayer::Uniform(2)));
    assert_eq!(h.key_length, Some(16));
    assert_eq!(h.feed_forward_length, Some(PerLayer::Uniform(256)));
    assert_eq!(h.vocab_size, Some(256));
    assert_eq!(h.context_length, Some(4096));
    assert_eq!(h.torch_dtype.as_deref(), Some("bfloat16"));
    let rope = h.rope.as_ref().expect("rope");
    assert_eq!(rope.freq_base, Some(500000.0));
    assert_eq!(rope.scaling_type.as_deref(), Some("llama3"));
    assert_eq!(rope.scaling_factor, Some(32.0));
    assert_eq!(rope.original_context_length, Some(8192));
    assert!(!h.tied_embeddings);
    assert_eq!(spec.parameter_count(), spec.element_count());
    assert_eq!(spec.layers.len(), 2);
    let q = spec
        .tensor("model.layers.1.self_attn.q_proj.weight")
        .expect("q_proj");
    assert_eq!((q.role, q.layer), (Role::Attention, Some(1)));
}

#[test]
fn qwen2_sharded_hparams_and_layout() {
    let spec = load_fixture("qwen2-sharded");
    let h = &spec.hparams;
    assert_eq!(spec.architecture, "qwen2");
    assert_eq!(h.head_count_kv, Some(PerLayer::Uniform(2)));
    assert!(h.tied_embeddings, "no lm_head: tied");
    // use_sliding_window is false: no layer uses the window.
    assert_eq!(h.sliding_window, None);
    assert!(h.sliding_window_layers.is_empty());
    assert_eq!(spec.files.len(), 2);
    let embed = spec.tensor("model.embed_tokens.weight").expect("embed");
    let norm = spec.tensor("model.norm.weight").expect("norm");
    assert_eq!((embed.file, norm.file), (0, 1));
    assert_eq!(
        spec.tensor_bytes(),
        164_992,
        "the index's metadata.total_size"
    );
}

#[test]
fn the_same_model_by_directory_index_or_shard() {
    let dir = fixture("safetensors/qwen2-sharded");
    let by_dir = load(&dir);
    let by_index = load(&dir.join("model.safetensors.index.json"));
    let by_shard = load(&dir.join("model-00002-of-00002.safetensors"));
    let by_config = load(&dir.join("config.json"));
    for other in [&by_index, &by_shard, &by_config] {
        assert_eq!(other.fingerprint, by_dir.fingerprint);
        assert_eq!(other.tensors, by_dir.tensors);
        assert_eq!(other.files, by_dir.files);
    }
    let single = fixture("safetensors/llama-bf16");
    assert_eq!(
        load(&single).fingerprint,
        load(&single.join("model.safetensors")).fingerprint
    );
}

#[test]
fn gemma2_sliding_window_layers() {
    let spec = load_fixture("gemma2-swa");
    let h = &spec.hparams;
    assert_eq!(spec.architecture, "gemma2");
    assert_eq!(h.sliding_window, Some(4096));
    assert_eq!(h.sliding_window_layers, vec![true, false]);
    assert_eq!(h.key_length, Some(64));
    assert!(h.tied_embeddings);
}

#[test]
fn mixtral_experts() {
    let spec = load_fixture("mixtral-moe");
    let h = &spec.hparams;
    assert_eq!(h.expert_count, Some(4));
    assert_eq!(h.expert_used_count, Some(2));
    assert_eq!(h.expert_layers, vec![true, true]);
    assert_eq!(h.sliding_window, None);
    let e = spec
        .tensor("model.layers.1.block_sparse_moe.experts.3.w2.weight")
        .expect("expert");
    assert_eq!((e.role, e.layer), (Role::Expert, Some(1)));
    let r = spec
        .tensor("model.layers.0.block_sparse_moe.gate.weight")
        .expect("router");
    assert_eq!(r.role, Role::Router);
}

#[test]
fn gptq_packed_weights() {
    let spec = load_fixture("llama-gptq");
    let q = spec.hparams.quantization.as_ref().expect("quantization");
    assert_eq!(q.method, "gptq");
    assert_eq!(q.bits, Some(4));
    assert_eq!(q.group_size, Some(128));
    let mut packed = 0;
    for t in &spec.tensors {
        if t.name.ends_with(".qweight") {
            packed += 1;
            assert_eq!(t.parameters, t.elements * 8, "{}", t.name);
            assert_eq!(t.packing.as_deref(), Some("gptq int4 in I32"));
        } else if t.role == Role::QuantState {
            assert_eq!(t.parameters, 0, "{}", t.name);
        } else {
            assert_eq!(t.parameters, t.elements, "{}", t.name);
        }
    }
    assert_eq!(packed, 14);
    // 2 layers of q,k,v,o,gate,up,down (in × out, unpacked) + embed + lm_head + norms.
    let linear: u64 = 2 * (256 * 256 + 2 * 256 * 64 + 256 * 256 + 3 * 256 * 256);
    let other: u64 = 2 * 128 * 256 + 256 + 2 * 2 * 256;
    assert_eq!(spec.parameter_count(), linear + other);
}

#[test]
fn fp8_block_quantization() {
    let spec = load_fixture("llama-fp8");
    let q = spec.hparams.quantization.as_ref().expect("quantization");
    assert_eq!(q.method, "fp8");
    assert_eq!(q.format.as_deref(), Some("e4m3"));
    assert_eq!(q.block_size, Some(vec![128, 128]));
    let w = spec
        .tensor("model.layers.0.mlp.up_proj.weight")
        .expect("weight");
    assert_eq!(w.dtype, Dtype::Safetensors(StDtype::F8_E4M3));
    assert_eq!(w.parameters, w.elements);
    let s = spec
        .tensor("model.layers.0.mlp.up_proj.weight_scale_inv")
        .expect("scale");
    assert_eq!((s.role, s.parameters), (Role::QuantState, 0));
}

// -----------------------------------------------------------------------------------------------------------
// Crafted files
// -----------------------------------------------------------------------------------------------------------

/// A safetensors file: the header padded with spaces to a multiple of 8 (as upstream writes it), then
/// `data_bytes` zero bytes.
fn st_bytes(header: &str, data_bytes: usize) -> Vec<u8> {
    let mut h = header.as_bytes().to_vec();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out.resize(out.len() + data_bytes, 0);
    out
}

/// A header of U8 tensors `(name, [begin, end])`.
fn u8_header(tensors: &[(&str, [u64; 2])]) -> String {
    let entries: Vec<String> = tensors
        .iter()
        .map(|(n, [b, e])| {
            format!(
                r#""{n}":{{"dtype":"U8","shape":[{}],"data_offsets":[{b},{e}]}}"#,
                e.saturating_sub(*b)
            )
        })
        .collect();
    format!("{{{}}}", entries.join(","))
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("write");
    p
}

/// Loads `path` expecting an error whose message names `file_name`.
fn load_err(path: &Path, file_name: &str) -> ModelError {
    match safetensors::load(path) {
        Ok(s) => panic!(
            "{}: expected an error, got {} tensors",
            path.display(),
            s.tensors.len()
        ),
        Err(e) => {
            let msg = e.to_string();
            assert!(
                msg.contains(file_name),
                "message does not name {file_name}: {msg}"
            );
            e
        }
    }
}

fn single_file_defect(bytes: &[u8]) -> Defect {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = write(dir.path(), "m.safetensors", bytes);
    let e = load_err(&p, "m.safetensors");
    e.defect()
        .cloned()
        .unwrap_or_else(|| panic!("no defect: {e}"))
}

#[test]
fn header_length_beyond_the_file() {
    let mut b = 1000u64.to_le_bytes().to_vec();
    b.extend_from_slice(b"{}      ");
    assert!(matches!(
        single_file_defect(&b),
        Defect::Truncated {
            needed: 1000,
            available: 8
        }
    ));
    assert!(matches!(
        single_file_defect(&[0, 0, 0]),
        Defect::Truncated {
            needed: 8,
            available: 3
        }
    ));
}

#[test]
fn header_length_over_the_limit() {
    let mut b = (MAX_HEADER_BYTES + 8).to_le_bytes().to_vec();
    b.extend_from_slice(b"{}      ");
    assert!(matches!(
        single_file_defect(&b),
        Defect::TooMany {
            limit: MAX_HEADER_BYTES,
            ..
        }
    ));
}

#[test]
fn invalid_json_and_non_objects() {
    for header in [
        "{\"a\":",
        "[1,2,3]",
        "\"text\"",
        "{} {}",
        "{\"__metadata__\":{\"k\":[1]}}",
    ] {
        assert!(
            matches!(
                single_file_defect(&st_bytes(header, 0)),
                Defect::SafetensorsHeader(_)
            ),
            "{header}"
        );
    }
    let mut b = st_bytes("{}", 0);
    b[8] = 0xc3; // a lone UTF-8 lead byte
    assert!(matches!(
        single_file_defect(&b),
        Defect::SafetensorsHeader(_)
    ));
}

#[test]
fn unknown_dtype_and_bad_shapes() {
    for (header, needle) in [
        (
            r#"{"w":{"dtype":"Q8_0","shape":[4],"data_offsets":[0,4]}}"#,
            "unknown dtype",
        ),
        (
            r#"{"w":{"dtype":"U8","shape":[-4],"data_offsets":[0,4]}}"#,
            "negative",
        ),
        (
            r#"{"w":{"dtype":"U8","shape":[4.0],"data_offsets":[0,4]}}"#,
            "integer",
        ),
        (
            r#"{"w":{"dtype":"U8","shape":[2,2],"data_offsets":[0,3]}}"#,
            "needs 4",
        ),
        (
            r#"{"w":{"dtype":"F4","shape":[7],"data_offsets":[0,4]}}"#,
            "whole bytes",
        ),
    ] {
        match single_file_defect(&st_bytes(header, 4)) {
            Defect::BadTensor { name, reason } => {
                assert_eq!(name, "w");
                assert!(reason.contains(needle), "{header}: {reason}");
            }
            other => panic!("{header}: {other:?}"),
        }
    }
}

#[test]
fn bad_offsets() {
    let d = |tensors: &[(&str, [u64; 2])], data: usize| {
        single_file_defect(&st_bytes(&u8_header(tensors), data))
    };
    // begin > end (the shape from the helper is 0, so the span check does not fire first).
    let begin_after_end = r#"{"w":{"dtype":"U8","shape":[0],"data_offsets":[4,2]}}"#;
    assert!(matches!(
        single_file_defect(&st_bytes(begin_after_end, 4)),
        Defect::BadTensor { .. }
    ));
    assert!(matches!(
        d(&[("a", [0, 4]), ("b", [6, 8])], 8),
        Defect::TensorGap { .. }
    ));
    assert!(matches!(
        d(&[("a", [2, 4])], 4),
        Defect::TensorGap { expected: 0, .. }
    ));
    assert!(matches!(
        d(&[("a", [0, 4]), ("b", [2, 6])], 6),
        Defect::OverlappingTensor { .. }
    ));
    assert!(matches!(
        d(&[("a", [0, 4]), ("b", [4, 16])], 8),
        Defect::TensorOutOfFile { .. }
    ));
    // Trailing bytes after the last tensor: upstream requires the last offset to be the end of the file.
    assert!(matches!(
        d(&[("a", [0, 4])], 5),
        Defect::SafetensorsHeader(_)
    ));
    // Size overflow.
    let overflow = r#"{"w":{"dtype":"U64","shape":[4294967296,4294967296],"data_offsets":[0,4]}}"#;
    assert!(matches!(
        single_file_defect(&st_bytes(overflow, 4)),
        Defect::SizeOverflow { .. }
    ));
}

#[test]
fn errors_carry_the_byte_offset_of_the_entry() {
    let header = u8_header(&[("a", [0, 4]), ("b", [6, 8])]);
    let dir = tempfile::tempdir().expect("tempdir");
    let p = write(dir.path(), "m.safetensors", &st_bytes(&header, 8));
    let e = load_err(&p, "m.safetensors");
    let at = 8 + header.find("\"b\"").expect("b") as u64;
    assert_eq!(e.offset(), Some(at));
    assert!(e.to_string().contains(&format!("at byte {at}")), "{e}");
}

/// A two-shard model in `dir` with an index; returns the index path.
fn sharded(dir: &Path, weight_map: &str, total_size: Option<u64>) -> PathBuf {
    write(
        dir,
        "s-1.safetensors",
        &st_bytes(&u8_header(&[("a", [0, 4]), ("b", [4, 6])]), 6),
    );
    write(
        dir,
        "s-2.safetensors",
        &st_bytes(&u8_header(&[("c", [0, 3])]), 3),
    );
    let meta = total_size.map_or(String::new(), |t| {
        format!(r#""metadata":{{"total_size":{t}}},"#)
    });
    write(
        dir,
        "model.safetensors.index.json",
        format!("{{{meta}\"weight_map\":{weight_map}}}").as_bytes(),
    )
}

const GOOD_MAP: &str = r#"{"a":"s-1.safetensors","b":"s-1.safetensors","c":"s-2.safetensors"}"#;

#[test]
fn a_valid_crafted_sharded_model_loads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let index = sharded(dir.path(), GOOD_MAP, Some(9));
    let spec = load(&index);
    assert_eq!(spec.tensors.len(), 3);
    assert_eq!(spec.architecture, "unknown", "no config.json");
    assert_eq!(spec.tensor_bytes(), 9);
    let c = spec.tensor("c").expect("c");
    assert_eq!(c.file, 1);
    assert_eq!(
        c.offset,
        std::fs::metadata(&spec.files[1].path).expect("f").len() - 3
    );
}

#[test]
fn index_pointing_to_a_missing_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let map = r#"{"a":"s-1.safetensors","b":"s-1.safetensors","c":"s-3.safetensors"}"#;
    let index = sharded(dir.path(), map, None);
    let e = load_err(&index, "model.safetensors.index.json");
    assert!(
        matches!(e.defect(), Some(Defect::Index(m)) if m.contains("s-3.safetensors")),
        "{e}"
    );
}

#[test]
fn index_path_traversal_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let inner = dir.path().join("model");
    std::fs::create_dir(&inner).expect("mkdir");
    write(
        dir.path(),
        "x.safetensors",
        &st_bytes(&u8_header(&[("c", [0, 3])]), 3),
    );
    for bad in ["../x.safetensors", "/etc/passwd", "sub/x.safetensors"] {
        let map = format!(r#"{{"a":"s-1.safetensors","b":"s-1.safetensors","c":"{bad}"}}"#);
        let index = sharded(&inner, &map, None);
        let e = load_err(&index, "model.safetensors.index.json");
        assert!(matches!(e.defect(), Some(Defect::Index(_))), "{bad}: {e}");
    }
}

#[test]
fn weight_map_and_files_must_agree() {
    for (map, needle) in [
        // "b" is stored but not listed.
        (
            r#"{"a":"s-1.safetensors","c":"s-2.safetensors"}"#,
            "does not list",
        ),
        // "d" is listed but stored nowhere.
        (
            r#"{"a":"s-1.safetensors","b":"s-1.safetensors","c":"s-2.safetensors","d":"s-2.safetensors"}"#,
            "no such tensor",
        ),
        // "c" is listed in the wrong shard.
        (
            r#"{"a":"s-1.safetensors","b":"s-1.safetensors","c":"s-1.safetensors","x":"s-2.safetensors"}"#,
            "s-1.safetensors",
        ),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let index = sharded(dir.path(), map, None);
        let e = load_err(&index, "model.safetensors.index.json");
        assert!(
            matches!(e.defect(), Some(Defect::Index(m)) if m.contains(needle)),
            "{map}: {e}"
        );
    }
}

#[test]
fn total_size_mismatch_names_both_numbers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let index = sharded(dir.path(), GOOD_MAP, Some(10));
    let e = load_err(&index, "model.safetensors.index.json");
    match e.defect() {
        Some(Defect::Index(m)) => assert!(m.contains("10") && m.contains('9'), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn duplicate_names_across_shards() {
    // Without an index: every *.safetensors in the directory, and "b" is in both.
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        "p-1.safetensors",
        &st_bytes(&u8_header(&[("a", [0, 1]), ("b", [1, 2])]), 2),
    );
    write(
        dir.path(),
        "p-2.safetensors",
        &st_bytes(&u8_header(&[("b", [0, 1])]), 1),
    );
    let e = load_err(dir.path(), "p-2.safetensors");
    match e.defect() {
        Some(Defect::BadTensor { name, reason }) => {
            assert_eq!(name, "b");
            assert!(reason.contains("p-1.safetensors"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert!(e.offset().is_some_and(|o| o > 8));
    // Within one header.
    let dup = r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}"#;
    assert_eq!(
        single_file_defect(&st_bytes(dup, 2)),
        Defect::DuplicateTensor("a".into())
    );
}

#[test]
fn config_json_is_optional_but_checked() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(
        dir.path(),
        "model.safetensors",
        &st_bytes(&u8_header(&[("a", [0, 1])]), 1),
    );
    let spec = load(dir.path());
    assert_eq!(spec.architecture, "unknown");
    assert_eq!(spec.hparams.block_count, None);
    for (config, key) in [
        (r#"{"num_hidden_layers":"2"}"#, "num_hidden_layers"),
        (
            r#"{"num_attention_heads":[1,"x"]}"#,
            "num_attention_heads[1]",
        ),
        (
            r#"{"quantization_config":{"quant_method":"gptq","bits":"4"}}"#,
            "quantization_config.bits",
        ),
        (r#"{"rope_scaling":{"factor":"x"}}"#, "rope_scaling.factor"),
        (r#"{"sliding_window":"all"}"#, "sliding_window"),
        ("[]", "JSON object"),
        ("{\"a\":", "invalid JSON"),
    ] {
        write(dir.path(), "config.json", config.as_bytes());
        let e = load_err(dir.path(), "config.json");
        match e.defect() {
            Some(Defect::Config(m)) => assert!(m.contains(key), "{config}: {m}"),
            other => panic!("{config}: {other:?}"),
        }
    }
    // An oversized config is refused before it is read.
    let big = format!("{{\"x\":\"{}\"}}", "a".repeat(5 << 20));
    write(dir.path(), "config.json", big.as_bytes());
    let e = load_err(dir.path(), "config.json");
    assert!(matches!(e.defect(), Some(Defect::TooMany { .. })), "{e}");
}

#[test]
fn a_directory_without_weights_is_not_a_model() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "config.json", b"{}");
    let e = safetensors::load(dir.path()).expect_err("no weights");
    assert!(matches!(e.defect(), Some(Defect::UnknownFormat(_))), "{e}");
}

/// Cutting a valid file anywhere must give an error, never a panic and never a model.
#[test]
fn truncated_files_are_always_refused() {
    let src = fixture("safetensors/llama-bf16/model.safetensors");
    let bytes = std::fs::read(&src).expect("fixture");
    let header_len = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let dense_until = (8 + header_len + 64).min(bytes.len());
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("cut.safetensors");
    let mut cuts: Vec<usize> = (0..dense_until).collect();
    cuts.extend((dense_until..bytes.len()).step_by(4099));
    cuts.push(bytes.len() - 1);
    for cut in cuts {
        std::fs::write(&path, &bytes[..cut]).expect("write");
        let result = std::panic::catch_unwind(|| safetensors::load(&path));
        match result {
            Err(_) => panic!("panic at cut {cut}"),
            Ok(Ok(_)) => panic!("cut at {cut} of {} loaded", bytes.len()),
            Ok(Err(e)) => assert!(e.defect().is_some(), "cut {cut}: {e}"),
        }
        // The in-memory entry agrees.
        assert!(
            safetensors::parse_header_bytes(&bytes[..cut]).is_err(),
            "cut {cut}"
        );
    }
    std::fs::write(&path, &bytes).expect("write");
    assert!(safetensors::load(&path).is_ok());
}

// -----------------------------------------------------------------------------------------------------------
// Peak memory of one header
// -----------------------------------------------------------------------------------------------------------

use crate::common::alloc::peak_during;

const PEAK_TARGET_BYTES: u64 = 64 << 20;

/// Reads one crafted header from a file and checks the reader's peak heap.
fn header_peak(header: &str, data_bytes: usize) -> (Result<usize, Defect>, u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = write(dir.path(), "m.safetensors", &st_bytes(header, data_bytes));
    let (r, peak) = peak_during(|| safetensors::read_header(&p));
    let r = r
        .map(|h| h.tensors.len())
        .map_err(|e| e.defect().cloned().expect("defect"));
    (r, peak)
}

#[test]
fn one_header_stays_under_the_peak_memory_target() {
    use optimizer::model::safetensors::{
        MAX_DIMS, MAX_PARSED_HEADER_BYTES, MAX_STRING_BYTES, MAX_TENSORS_PER_FILE,
    };
    let mut cases: Vec<(&str, String)> = Vec::new();
    // The most tensors a file may hold, with names of real length.
    let pad = "x".repeat(50);
    let entries: Vec<String> = (0..MAX_TENSORS_PER_FILE)
        .map(|i| format!(r#""{pad}{i}":{{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}"#))
        .collect();
    cases.push(("max tensors", format!("{{{}}}", entries.join(","))));
    // 64-dimension shapes until the parse budget stops them.
    let dims = vec!["0"; MAX_DIMS].join(",");
    let entries: Vec<String> = (0..200_000)
        .map(|i| format!(r#""{i}":{{"dtype":"U8","shape":[{dims}],"data_offsets":[0,0]}}"#))
        .collect();
    let mut h = format!("{{{}}}", entries.join(","));
    h.truncate(MAX_HEADER_BYTES as usize - 64);
    cases.push(("wide shapes", h));
    // Metadata values of the longest allowed string: escaped (serde_json's scratch path; they decode to half
    // and fit the budget), then plain (past the budget).
    let n_values = (MAX_HEADER_BYTES / MAX_STRING_BYTES) as usize - 1;
    let escaped = "\\n".repeat(MAX_STRING_BYTES as usize / 2);
    let plain = "m".repeat(MAX_STRING_BYTES as usize);
    for (what, value) in [("escaped metadata", &escaped), ("plain metadata", &plain)] {
        let meta: Vec<String> = (0..n_values)
            .map(|i| format!(r#""k{i}":"{value}""#))
            .collect();
        cases.push((
            what,
            format!(r#"{{"__metadata__":{{{}}}}}"#, meta.join(",")),
        ));
    }
    // A header that is nearly all padding.
    cases.push((
        "padding",
        format!("{{}}{}", " ".repeat(MAX_HEADER_BYTES as usize - 16)),
    ));
    for (what, header) in &cases {
        assert!(
            header.len() as u64 <= MAX_HEADER_BYTES,
            "{what}: {}",
            header.len()
        );
        let (result, peak) = header_peak(header, 0);
        eprintln!(
            "{what}: {result:?} peak {:.1} MiB",
            peak as f64 / (1 << 20) as f64
        );
        assert!(peak < PEAK_TARGET_BYTES, "{what}: peak {peak} bytes");
        if *what == "max tensors" || *what == "escaped metadata" {
            assert!(result.is_ok(), "{what}: {result:?}");
        } else if *what != "padding" {
            assert!(
                matches!(result, Err(Defect::TooMany { limit, .. }) if limit == MAX_PARSED_HEADER_BYTES),
                "{what}: {result:?}"
            );
        }
    }
}

#[test]
fn over_long_strings_are_refused_before_parsing() {
    use optimizer::model::safetensors::MAX_STRING_BYTES;
    let name = "n".repeat(MAX_STRING_BYTES as usize + 1);
    let header = format!(r#"{{"{name}":{{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}}}"#);
    assert!(matches!(
        single_file_defect(&st_bytes(&header, 0)),
        Defect::StringTooLong { limit, .. } if limit == MAX_STRING_BYTES
    ));
}
