//! The header-only safetensors fixtures of real models (`tests/fixtures/vllm/models`) read back through the
//! crate's reader: every fixture is accepted, its parameter count matches the figure the model's publisher
//! states, and its tensor bytes agree with the header's offsets and the file's size. The quantized fixtures are
//! checked against what is published about their real checkpoints, and the GPTQ one against what vLLM loads.

mod common;

use common::vllm_models::{self, config, data_bytes, header, header_bytes, ids, materialize};
use optimizer::memory::vllm::{self as vmem, Dtype};
use optimizer::model::{self, Format, Role};

/// Parameter counts the publishers state, in billions, as printed (so a count must round to the figure).
/// Sources: the model card's "Number of Parameters" line (Qwen), or the parameter count the Hugging Face model
/// page shows from the checkpoint (others); see tests/fixtures/vllm/models/README.md.
const PUBLISHED_B: &[(&str, &str)] = &[
    ("Llama-3.1-70B-Instruct", "70.6"),
    ("Llama-3.1-8B", "8.03"),
    ("Llama-3.1-8B-Instruct", "8.03"),
    ("Llama-3.2-1B", "1.23"),
    // Meta's Llama 3.1 model card: "405B" (FP8 weights are one element per parameter).
    ("Meta-Llama-3.1-405B-Instruct-FP8", "405"),
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

/// Qwen3-30B-A3B-FP8 (block FP8) against a real checkpoint of the same layout: a model report of
/// Qwen/Qwen3-30B-A3B-Thinking-2507-FP8 (same shapes and `modules_to_not_convert`; see the fixtures README)
/// lists 37,491 tensors, 30,533,947,392 elements (weights and `weight_scale_inv` blocks) and 29.03 GB (GiB, as
/// its MB column shows). The FP8 weights are the BF16 model's weights one byte each, so the logical parameter
/// count is the BF16 fixture's (published 30.5B).
#[test]
fn block_fp8_moe_matches_the_real_checkpoints_counts() {
    let fp8 = vllm_models::spec("Qwen3-30B-A3B-FP8");
    assert_eq!(fp8.tensors.len(), 37_491);
    assert_eq!(fp8.element_count(), 30_533_947_392);
    assert_eq!(
        (fp8.tensor_bytes() as f64 / (1u64 << 30) as f64 * 100.0).round() / 100.0,
        29.03
    );
    let bf16 = vllm_models::spec("Qwen3-30B-A3B");
    assert_eq!(fp8.parameter_count(), bf16.parameter_count());
    // Every expert and attention projection is FP8 with 128 × 128 block scales; the router, norms,
    // embeddings and lm_head (modules_to_not_convert) stay BF16.
    let dtype = |n: &str| fp8.tensor(n).unwrap().dtype.name();
    assert_eq!(
        dtype("model.layers.7.mlp.experts.99.down_proj.weight"),
        "F8_E4M3"
    );
    assert_eq!(
        fp8.tensor("model.layers.7.mlp.experts.99.down_proj.weight_scale_inv")
            .unwrap()
            .shape,
        [16, 6]
    );
    for n in [
        "model.layers.7.mlp.gate.weight",
        "lm_head.weight",
        "model.embed_tokens.weight",
    ] {
        assert_eq!(dtype(n), "BF16", "{n}");
    }
}

/// Meta-Llama-3.1-405B-Instruct-FP8 (compressed-tensors, static per-tensor): every linear layer of the blocks
/// stores an F8_E4M3 weight, one F32 `weight_scale` and one F32 `input_scale` (`strategy: tensor`,
/// `dynamic: false`); `lm_head` is in `ignore` and stays BF16.
#[test]
fn static_per_tensor_fp8_stores_one_weight_and_input_scale_per_linear() {
    let spec = vllm_models::spec("Meta-Llama-3.1-405B-Instruct-FP8");
    let linears = 126 * 7;
    let count = |suffix: &str| {
        spec.tensors
            .iter()
            .filter(|t| t.name.ends_with(suffix) && t.dtype.name() == "F32" && t.shape == [1])
            .count()
    };
    assert_eq!(count(".weight_scale"), linears);
    assert_eq!(count(".input_scale"), linears);
    assert_eq!(
        spec.tensors
            .iter()
            .filter(|t| t.dtype.name() == "F8_E4M3")
            .count(),
        linears
    );
    assert_eq!(spec.tensor("lm_head.weight").unwrap().dtype.name(), "BF16");
}

/// The GPTQ and AWQ headers agree with the real header samples committed beside them (`tensor_sample.txt`:
/// the checkpoint's first 50 entries by name, dtype and shape, and its total tensor count: 1,219 for the old
/// AutoGPTQ layout, 739 for AWQ).
#[test]
fn quantized_headers_agree_with_the_real_header_samples() {
    let mut samples = 0;
    for id in ids() {
        let path = vllm_models::models_dir()
            .join(&id)
            .join("tensor_sample.txt");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        samples += 1;
        let total: usize = text
            .lines()
            .find_map(|l| l.strip_prefix("# Total tensors: "))
            .unwrap_or_else(|| panic!("{id}: no total"))
            .parse()
            .unwrap();
        let h = header(&id);
        assert_eq!(h.as_object().unwrap().len() - 1, total, "{id}");
        let mut checked = 0;
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (name, rest) = line.split_once(' ').unwrap();
            let (dtype, shape) = rest.split_once(' ').unwrap();
            let shape: Vec<u64> = serde_json::from_str(shape).unwrap();
            let e = &h[name];
            assert_eq!(e["dtype"], dtype, "{id}: {name}");
            assert_eq!(e["shape"], serde_json::json!(shape), "{id}: {name}");
            checked += 1;
        }
        assert_eq!(checked, 50, "{id}");
    }
    assert_eq!(samples, 2, "Llama-2-7B-GPTQ and Llama-2-7B-AWQ");
}

/// Bytes of Llama-2-7B-GPTQ's stored tensors vLLM never loads: per layer the zero F16 bias old AutoGPTQ wrote
/// for each of the 7 quantized projections (q, k, v, o, down 4096 rows; gate, up 11008) and the F32 [64]
/// `rotary_emb.inv_freq`.
const GPTQ_UNLOADED_TENSORS: usize = 32 * 8;
const GPTQ_UNLOADED_BYTES: u64 = 32 * ((5 * 4096 + 2 * 11008) * 2 + 64 * 4);

/// vLLM 0.33.0 allocates parameters from the model's layers and `AutoWeightsLoader` skips what has no parameter
/// (vllm/model_executor/models/utils.py: `REMOVE_UNUSED_ROTARY_EMBEDS_MAPPER`, ignored `.bias`), so "Model
/// loading took" holds neither the zero biases of an old AutoGPTQ checkpoint nor its `inv_freq` buffers.
#[test]
fn gptq_zero_biases_and_rotary_buffers_vllm_never_loads_are_not_counted() {
    let spec = vllm_models::spec("Llama-2-7B-GPTQ");
    let w = vmem::weights(&spec, 1, Dtype::Float16).unwrap();
    assert_eq!(w.not_loaded_tensors.len(), GPTQ_UNLOADED_TENSORS);
    assert!(
        w.unclassified_tensors.is_empty(),
        "{:?}",
        w.unclassified_tensors
    );
    // Everything else is stored F16 or packed, so the file's bytes are what vLLM holds, plus the rope cache
    // (4096 positions × 128 × 2 bytes).
    assert_eq!(w.rope_cache_bytes, 4096 * 128 * 2);
    assert_eq!(
        w.per_rank_bytes,
        spec.tensor_bytes() - GPTQ_UNLOADED_BYTES + w.rope_cache_bytes
    );
    // TP 2: the biases stay out of both shares.
    let w2 = vmem::weights(&spec, 2, Dtype::Float16).unwrap();
    assert_eq!(
        w2.sharded_bytes + w2.replicated_bytes,
        spec.tensor_bytes() - GPTQ_UNLOADED_BYTES
    );
}

/// The same checkpoint declared with `attention_bias: true`: vLLM then builds Q/K/V/O with a bias and loads
/// those four per layer; the MLP biases (no `mlp_bias`) and `inv_freq` stay out.
#[test]
fn a_declared_attention_bias_is_loaded() {
    let dir = materialize("Llama-2-7B-GPTQ");
    let path = dir.path().join("config.json");
    let mut cfg = config("Llama-2-7B-GPTQ");
    cfg["attention_bias"] = serde_json::json!(true);
    std::fs::write(&path, serde_json::to_vec(&cfg).unwrap()).unwrap();
    let spec = model::load(dir.path()).unwrap();
    let w = vmem::weights(&spec, 1, Dtype::Float16).unwrap();
    assert_eq!(w.not_loaded_tensors.len(), 32 * 4);
    let attention_bias = 32 * 4 * 4096 * 2;
    assert_eq!(
        w.per_rank_bytes,
        spec.tensor_bytes() - GPTQ_UNLOADED_BYTES + attention_bias + w.rope_cache_bytes
    );
}

/// Llama-2-7B-AWQ stores nothing vLLM skips (no biases, no rotary buffers): every stored byte is loaded.
#[test]
fn awq_checkpoint_is_loaded_whole() {
    let spec = vllm_models::spec("Llama-2-7B-AWQ");
    let w = vmem::weights(&spec, 1, Dtype::Float16).unwrap();
    assert!(
        w.not_loaded_tensors.is_empty(),
        "{:?}",
        w.not_loaded_tensors
    );
    assert!(
        w.unclassified_tensors.is_empty(),
        "{:?}",
        w.unclassified_tensors
    );
    assert_eq!(w.per_rank_bytes, spec.tensor_bytes() + w.rope_cache_bytes);
}

/// Qwen2's Q/K/V biases are real parameters (qwen2.py builds qkv_proj with bias=True): none is left out.
#[test]
fn qwen2_qkv_biases_are_loaded() {
    let spec = vllm_models::spec("Qwen2.5-7B");
    let w = vmem::weights(&spec, 1, Dtype::Bfloat16).unwrap();
    assert!(
        w.not_loaded_tensors.is_empty(),
        "{:?}",
        w.not_loaded_tensors
    );
    assert_eq!(
        spec.tensors
            .iter()
            .filter(|t| t.name.ends_with("_proj.bias"))
            .count(),
        28 * 3
    );
}
