//! The header-only safetensors fixtures of real models (`tests/fixtures/vllm/models`) read back through the
//! crate's reader: every fixture is accepted, its parameter count matches the figure the model's publisher
//! states, and its tensor bytes agree with the header's offsets and the file's size. The quantized fixtures are
//! checked against what is published about their real checkpoints, and the GPTQ one against what vLLM loads.

use crate::common;

use common::vllm_models::{self, config, data_bytes, header, ids, kimi_k2 as kimi, materialize};
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
        let file = vllm_models::file_bytes(id);
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
        // The sparse files cost a few KiB of disk however large the model.
        let written: u64 = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
            .map(|p| std::fs::metadata(&p).unwrap().len())
            .sum();
        assert_eq!(written, file, "{id}");
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

/// The Kimi-K2-Instruct header holds what DeepSeek-V3's layout gives its config, and its parameter count is
/// MoonshotAI's published "1T total parameters" (the model card; the figure is given to one significant
/// digit only). The count derived here is 1,026,408,232,448, i.e. 1.03T: the Kimi K2 technical report's
/// "1.04T" (arXiv 2507.20534, as quoted in summaries) is not reproduced by the config's shapes, and the same
/// arithmetic gives DeepSeek-V3 its published 671B (without the MTP layer).
#[test]
fn kimi_k2_header_has_deepseek_v3s_mla_and_moe_layout_and_one_trillion_parameters() {
    use kimi::*;
    let spec = vllm_models::spec("Kimi-K2-Instruct");
    assert_eq!(spec.architecture, "kimi_k2");
    let attn = Q_A + Q_RANK + Q_B + KV_A + KV_RANK + KV_B + O;
    let layer_common = attn + 2 * H;
    let dense = 3 * H * INTER;
    // Router [experts, hidden], its F32 e_score_correction_bias [experts], routed and shared experts.
    let moe = EXPERTS * H + EXPERTS + (EXPERTS + SHARED) * 3 * H * MOE_INTER;
    let total = 2 * VOCAB * H + H + LAYERS * layer_common + DENSE_LAYERS * dense + MOE_LAYERS * moe;
    assert_eq!(total, 1_026_408_232_448);
    assert_eq!(spec.parameter_count(), total);
    assert_eq!((total as f64 / 1e12).round(), 1.0, "MoonshotAI: 1T total");
    // Tensors: embed, final norm, lm_head; per layer 2 norms + q_a_layernorm + kv_a_layernorm and the 5
    // attention linears; the dense MLP's 3 linears; per MoE layer the router and its bias, and 3 linears for
    // each of 385 experts. Every linear of the blocks carries a weight_scale_inv.
    let linears = LAYERS * 5 + DENSE_LAYERS * 3 + MOE_LAYERS * (EXPERTS + SHARED) * 3;
    let tensors = 3 + LAYERS * 4 + MOE_LAYERS * 2 + 2 * linears;
    assert_eq!(spec.tensors.len() as u64, tensors);
    assert_eq!(tensors, 139_583);
    let dtype = |n: &str| spec.tensor(n).unwrap_or_else(|| panic!("{n}")).dtype.name();
    let shape = |n: &str| {
        spec.tensor(n)
            .unwrap_or_else(|| panic!("{n}"))
            .shape
            .clone()
    };
    let p = "model.layers.5";
    for (m, out_f, in_f) in [
        ("self_attn.q_a_proj", Q_RANK, H),
        ("self_attn.q_b_proj", HEADS * (NOPE + ROPE), Q_RANK),
        ("self_attn.kv_a_proj_with_mqa", KV_RANK + ROPE, H),
        ("self_attn.kv_b_proj", HEADS * (NOPE + V), KV_RANK),
        ("self_attn.o_proj", H, HEADS * V),
        ("mlp.experts.383.down_proj", H, MOE_INTER),
        ("mlp.shared_experts.gate_proj", MOE_INTER, H),
    ] {
        assert_eq!(dtype(&format!("{p}.{m}.weight")), "F8_E4M3", "{m}");
        assert_eq!(shape(&format!("{p}.{m}.weight")), [out_f, in_f], "{m}");
        assert_eq!(
            shape(&format!("{p}.{m}.weight_scale_inv")),
            [out_f.div_ceil(BLOCK), in_f.div_ceil(BLOCK)],
            "{m}"
        );
    }
    assert_eq!(shape("model.layers.0.mlp.gate_proj.weight"), [INTER, H]);
    assert!(spec.tensor("model.layers.0.mlp.gate.weight").is_none());
    assert!(
        spec.tensor("model.layers.1.mlp.experts.0.up_proj.weight")
            .is_some()
    );
    // Not converted: embeddings, lm_head, norms, the router; its correction bias is F32.
    for n in [
        "model.embed_tokens.weight",
        "lm_head.weight",
        "model.layers.5.self_attn.q_a_layernorm.weight",
        "model.layers.5.self_attn.kv_a_layernorm.weight",
        "model.layers.5.mlp.gate.weight",
    ] {
        assert_eq!(dtype(n), "BF16", "{n}");
    }
    assert_eq!(
        dtype("model.layers.5.mlp.gate.e_score_correction_bias"),
        "F32"
    );
    // No MTP layer: num_nextn_predict_layers is 0.
    assert!(
        spec.tensors
            .iter()
            .all(|t| !t.name.starts_with("model.layers.61."))
    );
}

/// vLLM's MLA cache holds the latent, not K and V: per token and layer one head of `kv_lora_rank +
/// qk_rope_head_dim` = 576 elements (`MLAAttentionSpec`, head_size_v 0), the same on every rank. At bf16:
/// 61 × 576 × 2 = 70,272 bytes a token, where decompressed K and V would take 61 × 64 heads × (192 + 128) × 2 =
/// 2,498,560.
#[test]
fn kimi_k2_mla_kv_cache_is_70272_bytes_a_token_on_every_rank() {
    use kimi::*;
    let spec = vllm_models::spec("Kimi-K2-Instruct");
    let per_token = LAYERS * (KV_RANK + ROPE) * 2;
    assert_eq!(per_token, 70_272);
    for tp in [1, 8] {
        let p = vmem::Params {
            tensor_parallel: tp,
            dtype: Dtype::Bfloat16,
            kv_cache_dtype: vmem::KvCacheDtype::Auto,
            block_size: 64,
            max_model_len: 131_072,
            max_num_seqs: 256,
            max_num_batched_tokens: 8192,
            enforce_eager: false,
            gpu: vmem::GpuFacts::default(),
        };
        let kv = vmem::kv(&spec, &p).unwrap();
        assert!(kv.layers.iter().all(|k| *k == vmem::LayerKind::Mla));
        assert_eq!(kv.page_bytes, per_token * 64, "tp {tp}");
        assert_eq!(kv.layer_page_bytes, (KV_RANK + ROPE) * 2 * 64, "tp {tp}");
        // One 131,072-token request: 2,048 blocks of 64.
        assert_eq!(kv.blocks_per_request, 2048);
        assert_eq!(kv.min_bytes, per_token * 131_072);
    }
}

/// Weights per rank of Kimi-K2-Instruct at TP 8 (vLLM 0.33.0, `--dtype bfloat16`), derived from the shapes:
/// - replicated (deepseek_v2.py `ReplicatedLinear`, plain parameters): `q_a_proj` and `kv_a_proj_with_mqa`
///   (FP8 + F32 block scales), every norm (bf16), the router (`GateLinear`, bf16) and its
///   `e_score_correction_bias`, which vLLM creates as float32 whatever `--dtype` says;
/// - sharded 8 ways: `q_b_proj`, `kv_b_proj` (column), `o_proj`, the dense MLP, shared experts (merged column +
///   row) and the fused routed experts, FP8 with their scales (every split dimension is a multiple of
///   128 × 8, so block scales split evenly); embeddings and lm_head by rows (163,840 is a multiple of 64);
/// - beyond the file: the yarn `cos_sin_cache` (4096 × 32 positions × 64 rotary dims × 2 B) and MLA's
///   `W_UK_T`/`W_UV` (per layer 512 × 64/8 heads × (128 + 128) × 2 B).
#[test]
fn kimi_k2_weights_per_rank_at_tp8_are_the_replicated_plus_an_eighth_of_the_sharded() {
    let spec = vllm_models::spec("Kimi-K2-Instruct");
    let tp = 8;
    let kimi::RankWeights {
        replicated,
        sharded,
        rope_cache,
        w_uk_uv,
        per_rank,
    } = kimi::rank_weights(tp);
    let w = vmem::weights(&spec, tp as u32, Dtype::Bfloat16).unwrap();
    assert!(
        w.unclassified_tensors.is_empty(),
        "{:?}",
        w.unclassified_tensors
    );
    assert!(
        w.not_loaded_tensors.is_empty(),
        "{:?}",
        w.not_loaded_tensors
    );
    assert_eq!(w.replicated_bytes, replicated);
    assert_eq!(w.sharded_bytes, sharded);
    assert_eq!(w.rope_cache_bytes, rope_cache);
    assert_eq!(w.mla_decompressed_bytes, w_uk_uv);
    assert_eq!(w.per_rank_bytes, per_rank);
    // Every stored byte is loaded once the bias is counted at its stored F32: the whole model is the file.
    assert_eq!(replicated + sharded, spec.tensor_bytes());
    eprintln!(
        "Kimi-K2 TP8: replicated {replicated} B, sharded {sharded} B, per rank {per_rank} B = {:.2} GiB",
        per_rank as f64 / (1u64 << 30) as f64
    );
}

/// Regression: DeepSeek's router correction bias is created float32 by vLLM (deepseek_v2.py
/// `DeepseekV2MoE`), so at `--dtype bfloat16` it costs 4 bytes an element, not 2: Kimi-K2's 60 MoE layers of
/// 384 held 46,080 bytes more than the plan counted.
#[test]
fn e_score_correction_bias_is_held_in_f32_whatever_the_dtype() {
    let spec = vllm_models::spec("Kimi-K2-Instruct");
    let bias = spec
        .tensors
        .iter()
        .filter(|t| t.name.ends_with("e_score_correction_bias"))
        .count() as u64;
    assert_eq!(bias, 60);
    for dtype in [Dtype::Bfloat16, Dtype::Float16, Dtype::Float32] {
        let w = vmem::weights(&spec, 1, dtype).unwrap();
        let norms_and_router: u64 = spec
            .tensors
            .iter()
            .filter(|t| {
                t.name.ends_with("layernorm.weight")
                    || t.name.ends_with("mlp.gate.weight")
                    || t.name == "model.norm.weight"
            })
            .map(|t| t.elements * dtype.bytes())
            .sum();
        let fp8_and_scales: u64 = spec
            .tensors
            .iter()
            .filter(|t| matches!(t.dtype.name(), "F8_E4M3") || t.name.ends_with("weight_scale_inv"))
            .map(|t| t.bytes)
            .sum();
        let vocab = 2 * kimi::VOCAB * kimi::H * dtype.bytes();
        assert_eq!(
            w.replicated_bytes + w.sharded_bytes,
            norms_and_router + fp8_and_scales + vocab + bias * kimi::EXPERTS * 4,
            "{dtype:?}"
        );
    }
}

/// The DeepSeek-V3 header (tests/fixtures/vllm/gen_headers.py from its config.json, MTP layer 61 included) is
/// the released checkpoint's tensor listing: a public listing of DeepSeek-R1's checkpoint (the same
/// `DeepseekV3Config` and shapes) counts 91,991 tensors and 684,531,386,000 elements, which the model card
/// rounds to "685B" (671B of the main model and 14B of the MTP module); the trunk without its F32 block scales
/// is the paper's 671B.
#[test]
fn deepseek_v3_header_is_the_released_checkpoints_listing() {
    let h = header("DeepSeek-V3");
    let tensors: Vec<(&String, &serde_json::Value)> = h
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .collect();
    assert_eq!(tensors.len(), 91_991);
    let elements = |v: &serde_json::Value| -> u64 {
        v["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .product()
    };
    let total: u64 = tensors.iter().map(|(_, v)| elements(v)).sum();
    assert_eq!(total, 684_531_386_000);
    assert!(rounds_to(total, "685"));
    let trunk: u64 = tensors
        .iter()
        .filter(|(k, _)| !k.starts_with("model.layers.61.") && !k.ends_with("weight_scale_inv"))
        .map(|(_, v)| elements(v))
        .sum();
    assert!(rounds_to(trunk, "671"), "{trunk}");
    assert_eq!(data_bytes(&h), 688_574_839_360);
}

/// vLLM 0.33.0 never loads DeepSeek-V3's MTP layer (deepseek_v2.py `load_weights` skips what
/// `get_spec_layer_idx_from_weight_name` names: `model.layers.61.*`): the weights per rank at TP 8 are the
/// trunk's, derived from the shapes (`vllm_models::DEEPSEEK_V3`), and the MTP tensors are listed as not loaded.
/// Before, the 13.46B elements of layer 61 (14.36 GiB) were counted.
#[test]
fn deepseek_v3_mtp_layer_is_not_loaded_and_the_trunk_is_per_rank() {
    let spec = vllm_models::spec("DeepSeek-V3");
    let mtp: Vec<&model::TensorInfo> = spec
        .tensors
        .iter()
        .filter(|t| t.name.starts_with("model.layers.61."))
        .collect();
    let w = vmem::weights(&spec, 8, Dtype::Bfloat16).unwrap();
    assert!(
        w.unclassified_tensors.is_empty(),
        "{:?}",
        w.unclassified_tensors
    );
    assert_eq!(w.not_loaded_tensors.len(), mtp.len());
    assert!(
        w.not_loaded_tensors
            .iter()
            .all(|n| n.starts_with("model.layers.61."))
    );
    let want = vllm_models::DEEPSEEK_V3.rank_weights(8);
    assert_eq!(w.replicated_bytes, want.replicated);
    assert_eq!(w.sharded_bytes, want.sharded);
    assert_eq!(w.rope_cache_bytes, want.rope_cache);
    assert_eq!(w.mla_decompressed_bytes, want.w_uk_uv);
    assert_eq!(w.per_rank_bytes, want.per_rank);
    let mtp_bytes: u64 = mtp.iter().map(|t| t.bytes).sum();
    assert_eq!(
        want.replicated + want.sharded,
        spec.tensor_bytes() - mtp_bytes
    );
    eprintln!(
        "DeepSeek-V3 TP8: {:.2} GiB a rank; the MTP layer's {:.2} GiB not loaded",
        want.per_rank as f64 / (1u64 << 30) as f64,
        mtp_bytes as f64 / (1u64 << 30) as f64
    );
}
