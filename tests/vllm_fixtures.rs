//! The header-only safetensors fixtures of real models (`tests/fixtures/vllm/models`) read back through the
//! crate's reader: every fixture is accepted, its parameter count matches the figure the model's publisher
//! states, and its tensor bytes agree with the header's offsets and the file's size.

mod common;

use common::vllm_models::{self, config, data_bytes, header, header_bytes, ids, materialize};
use optimizer::model::{self, Format, Role};

/// Parameter counts the publishers state, in billions, as printed (so a count must round to the figure).
/// Sources: the model card's "Number of Parameters" line (Qwen), or the parameter count the Hugging Face model
/// page shows from the checkpoint (others); see tests/fixtures/vllm/models/README.md.
const PUBLISHED_B: &[(&str, &str)] = &[
    ("Llama-3.1-70B-Instruct", "70.6"),
    ("Llama-3.1-8B", "8.03"),
    ("Llama-3.1-8B-Instruct", "8.03"),
    ("Llama-3.2-1B", "1.23"),
    ("Mistral-7B-v0.3", "7.25"),
    ("Mixtral-8x7B-v0.1", "46.7"),
    ("Qwen2.5-14B", "14.7"),
    ("Qwen2.5-3B-Instruct", "3.09"),
    ("Qwen2.5-7B", "7.61"),
    ("Qwen3-14B", "14.8"),
    ("Qwen3-30B-A3B", "30.5"),
    ("Qwen3-32B", "32.8"),
    ("Qwen3-8B", "8.2"),
    ("gemma-2-9b", "9.24"),
];

/// Whether `count` gives the published figure `b` (billions, as printed) when rounded or truncated to its last
/// digit: publishers do both (Qwen2.5-7B's 7,615,616,512 weights are printed "7.61B").
fn rounds_to(count: u64, b: &str) -> bool {
    let decimals = b.split_once('.').map_or(0, |(_, f)| f.len()) as i32;
    let published: f64 = b.parse().unwrap();
    let unit = 10f64.powi(-decimals);
    let x = count as f64 / 1e9;
    x >= published - unit / 2.0 && x < published + unit
}

#[test]
fn every_fixture_is_read_and_its_bytes_agree_with_the_header() {
    let ids = ids();
    assert!(ids.len() >= 8, "fixtures: {ids:?}");
    for id in &ids {
        let h = header(id);
        let cfg = config(id);
        let dir = materialize(id);
        let spec = model::load(dir.path()).unwrap_or_else(|e| panic!("{id}: {e}"));
        assert_eq!(spec.format, Format::Safetensors, "{id}");
        assert_eq!(
            spec.architecture,
            cfg["model_type"].as_str().unwrap(),
            "{id}"
        );
        let entries = h.as_object().unwrap().len() - 1;
        assert_eq!(spec.tensors.len(), entries, "{id}: tensor count");
        let data = data_bytes(&h);
        assert_eq!(
            spec.tensor_bytes(),
            data,
            "{id}: tensor bytes vs data section"
        );
        let file = 8 + header_bytes(id).len() as u64 + data;
        assert_eq!(spec.file_bytes(), file, "{id}: file size");
        for t in &spec.tensors {
            let e = &h[t.name.as_str()];
            let shape: Vec<u64> = e["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap())
                .collect();
            assert_eq!(t.shape, shape, "{id}: {}", t.name);
            assert_eq!(
                t.dtype.name(),
                e["dtype"].as_str().unwrap(),
                "{id}: {}",
                t.name
            );
            let span =
                e["data_offsets"][1].as_u64().unwrap() - e["data_offsets"][0].as_u64().unwrap();
            assert_eq!(t.bytes, span, "{id}: {}", t.name);
        }
        // Tied embeddings are stored once: no lm_head in the file when the config ties them.
        let tied = cfg["tie_word_embeddings"]
            .as_bool()
            .unwrap_or(cfg["model_type"] == "gemma2");
        assert_eq!(
            spec.tensor("lm_head.weight").is_none(),
            tied,
            "{id}: lm_head"
        );
        assert!(
            spec.tensors.iter().any(|t| t.role == Role::Embedding),
            "{id}: no embedding"
        );
        // The sparse file costs a few KiB of disk however large the model.
        let path = dir.path().join("model.safetensors");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), file, "{id}");
    }
}

#[test]
fn parameter_counts_match_the_published_figures() {
    let ids = ids();
    for (id, b) in PUBLISHED_B {
        assert!(ids.iter().any(|i| i == id), "no fixture {id}");
        let spec = vllm_models::spec(id);
        let n = spec.parameter_count();
        assert!(
            rounds_to(n, b),
            "{id}: {n} parameters do not round to the published {b} B"
        );
    }
    // Every unquantized fixture has a published figure to check against.
    for id in &ids {
        if config(id).get("quantization_config").is_none() {
            assert!(
                PUBLISHED_B.iter().any(|(i, _)| i == id),
                "{id}: no published parameter count in PUBLISHED_B"
            );
        }
    }
}

#[test]
fn rounding_check_rejects_a_count_off_by_one_unit() {
    assert!(rounds_to(7_615_616_512, "7.61"));
    assert!(!rounds_to(7_625_616_512, "7.61"));
    assert!(!rounds_to(7_604_616_512, "7.61"));
    assert!(rounds_to(8_190_735_360, "8.2"));
    assert!(!rounds_to(8_300_000_001, "8.2"));
}
