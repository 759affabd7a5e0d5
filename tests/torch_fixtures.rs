//! The torch training fixtures (tests/fixtures/torch, written by benches/torch/*.py from the pinned packages'
//! source) agree with themselves and with the model fixtures they were derived from:
//!
//! - `deepspeed-estimates.json`: every case DeepSpeed's own estimator returned is recomputed here with DeepSpeed's
//!   formula in integer arithmetic (the form the training memory model can reuse), and each model's
//!   `total_params` / `largest_layer_params` is recounted from its safetensors header fixture.
//! - `hf-keys.json`: the keys the launch artifacts will use exist with the values the plan relies on, and every
//!   DeepSpeed key transformers fills from `"auto"` names a key DeepSpeed reads.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

fn fixture(rel: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn u(v: &Value, key: &str) -> u128 {
    u128::from(
        v[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{key} is not an unsigned integer in {v}")),
    )
}

fn flag(v: &Value, key: &str) -> bool {
    v[key]
        .as_bool()
        .unwrap_or_else(|| panic!("{key} is not a bool in {v}"))
}

/// DeepSpeed 0.19.8 `estimate_zero2_model_states_mem_needs` (deepspeed/runtime/zero/stage_1_and_2.py:4017-4034)
/// with `additional_buffer_factor` 1.5 written as 3/2: returns (cpu_bytes, gpu_bytes) per node / per GPU.
/// The Python computes in floats and truncates with `int()`; for these magnitudes (< 2^53, divisors <= 16) the
/// float result is exact or its fraction is at least 1/16 from an integer, so integer floor division agrees
/// (benches/torch/deepspeed_estimates.py asserts the same on every case).
fn zero2(p: u128, gpus_per_node: u128, nodes: u128, cpu_offload: bool) -> (u128, u128) {
    let gpus = gpus_per_node * nodes;
    if cpu_offload {
        // fp16 params stay on every GPU; the CPU holds max(4 * total GPUs, 16) bytes per parameter, x1.5.
        (p * (4 * gpus).max(16) * 3 / 2, 2 * p)
    } else {
        // "18 = 2_grads_16bit + 4_grads_32bit + 4_params_32bit + 8_optimizer_states_32bit", split over all GPUs,
        // plus the 2-byte fp16 params on each GPU; the CPU needs 4 bytes per parameter per local GPU, x1.5.
        (p * 4 * gpus_per_node * 3 / 2, 2 * p + 18 * p / gpus)
    }
}

/// DeepSpeed 0.19.8 `estimate_zero3_model_states_mem_needs` (deepspeed/runtime/zero/stage3.py:4016-4052), factor
/// 1.5 = 3/2 and `gpus_factor = 1 / num_nodes` kept as a division by `nodes` (exact for the 1 and 2 nodes in the
/// fixture): returns (cpu_bytes, gpu_bytes, largest_layer_memory).
fn zero3(
    p: u128,
    largest: u128,
    gpus_per_node: u128,
    nodes: u128,
    offload_optimizer: bool,
    offload_params: bool,
    zero_init: bool,
) -> (u128, u128, u128) {
    let gpus = gpus_per_node * nodes;
    let layer = 4 * largest;
    if offload_optimizer {
        let per_param = if offload_params { 18 } else { 16 };
        let gpu = if offload_params {
            layer
        } else {
            layer + 2 * p / gpus
        };
        let cpu = if zero_init {
            p * per_param * 3 / (2 * nodes)
        } else {
            // max(4 * gpus_per_node, per_param / nodes), both sides scaled by nodes
            p * (4 * gpus_per_node * nodes).max(per_param) * 3 / (2 * nodes)
        };
        (cpu, gpu, layer)
    } else {
        let cpu_params = if zero_init { largest } else { p };
        (
            cpu_params * 4 * gpus_per_node * 3 / 2,
            layer + 18 * p / gpus,
            layer,
        )
    }
}

#[test]
fn every_deepspeed_estimate_matches_the_formula_in_integers() {
    let f = fixture("torch/deepspeed-estimates.json");
    let cases = f["cases"].as_array().unwrap();
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for c in cases {
        let a = &c["args"];
        assert_eq!(a["additional_buffer_factor"].as_f64(), Some(1.5), "{c}");
        let model = &f["models"][c["model"].as_str().unwrap()];
        assert_eq!(u(a, "total_params"), u(model, "total_params"), "{c}");
        let (p, gpn, nodes) = (
            u(a, "total_params"),
            u(a, "num_gpus_per_node"),
            u(a, "num_nodes"),
        );
        let function = c["function"].as_str().unwrap();
        match function {
            "estimate_zero2_model_states_mem_needs" => {
                let (cpu, gpu) = zero2(p, gpn, nodes, flag(a, "cpu_offload"));
                assert_eq!((cpu, gpu), (u(c, "cpu_bytes"), u(c, "gpu_bytes")), "{c}");
            }
            "estimate_zero3_model_states_mem_needs" => {
                assert_eq!(
                    u(a, "largest_layer_params"),
                    u(model, "largest_layer_params"),
                    "{c}"
                );
                let got = zero3(
                    p,
                    u(a, "largest_layer_params"),
                    gpn,
                    nodes,
                    flag(a, "cpu_offload"),
                    flag(a, "cpu_offload_params"),
                    flag(a, "zero_init"),
                );
                let want = (
                    u(c, "cpu_bytes"),
                    u(c, "gpu_bytes"),
                    u(c, "largest_layer_memory"),
                );
                assert_eq!(got, want, "{c}");
            }
            other => panic!("unknown function {other}"),
        }
        *seen.entry(function).or_default() += 1;
    }
    // 4 models x (3 GPU counts x 2 node counts) x (2 zero2 offloads | 3 zero3 offloads x 2 zero_init)
    assert_eq!(seen["estimate_zero2_model_states_mem_needs"], 48);
    assert_eq!(seen["estimate_zero3_model_states_mem_needs"], 144);
}

#[test]
fn deepspeed_estimate_models_are_recounted_from_their_headers() {
    let f = fixture("torch/deepspeed-estimates.json");
    for (id, m) in f["models"].as_object().unwrap() {
        let cfg = fixture(&format!("vllm/models/{id}/config.json"));
        let header = fixture(&format!("vllm/models/{id}/header.json"));
        let mut own: BTreeMap<String, u128> = BTreeMap::new();
        let mut total = 0u128;
        for (name, t) in header.as_object().unwrap() {
            if name == "__metadata__" {
                continue;
            }
            let n: u128 = t["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| u128::from(d.as_u64().unwrap()))
                .product();
            total += n;
            let (module, _) = name.rsplit_once('.').unwrap();
            *own.entry(module.to_string()).or_default() += n;
        }
        // A tied lm_head is not stored but is still a module owning the [vocab, hidden] weight; the total counts
        // the shared tensor once, as DeepSpeed's `model_to_params` does (dedup by data_ptr).
        if cfg["tie_word_embeddings"].as_bool() == Some(true) {
            assert!(!own.contains_key("lm_head"), "{id}");
            let embed = own["model.embed_tokens"];
            own.insert("lm_head".into(), embed);
        }
        let largest = *own.values().max().unwrap();
        assert_eq!(u(m, "total_params"), total, "{id}");
        assert_eq!(u(m, "largest_layer_params"), largest, "{id}");
        let name = m["largest_layer"].as_str().unwrap();
        assert_eq!(own[name], largest, "{id}: {name}");
    }
}

#[test]
fn hf_keys_hold_what_the_launch_artifacts_use() {
    let k = fixture("torch/hf-keys.json");
    for pkg in [
        "transformers",
        "peft",
        "accelerate",
        "bitsandbytes",
        "deepspeed",
        "trl",
    ] {
        assert!(k["versions"][pkg].is_string(), "version of {pkg}");
    }
    let ta = &k["TrainingArguments"];
    let has = |v: &Value, x: &str| v.as_array().unwrap().iter().any(|c| c == x);
    assert!(has(&ta["optim"]["choices"], "paged_adamw_8bit"));
    assert!(has(&ta["optim"]["choices"], "adamw_torch_fused"));
    assert!(has(&ta["lr_scheduler_type"]["choices"], "cosine"));
    assert!(has(&ta["save_strategy"]["choices"], "steps"));
    assert!(has(&ta["report_to"]["choices"], "none"));
    for field in [
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "learning_rate",
        "bf16",
        "deepspeed",
    ] {
        assert!(ta[field].is_object(), "TrainingArguments.{field}");
    }
    assert!(has(&k["LoraConfig"]["bias"]["choices"], "none"));
    assert!(has(&k["LoraConfig"]["task_type"]["choices"], "CAUSAL_LM"));
    let bnb = &k["BitsAndBytesConfig"]["bnb_4bit_quant_type"]["choices"];
    assert!(has(bnb, "nf4") && has(bnb, "fp4"));
    let launch = k["accelerate_launch"].as_array().unwrap();
    let opt = |o: &str| launch.iter().find(|e| has(&e["options"], o));
    assert!(opt("--num_processes").is_some());
    assert!(has(&opt("--mixed_precision").unwrap()["choices"], "bf16"));
    let zero = &k["deepspeed_config"]["zero_optimization"]["fields"];
    let devices: Vec<&str> = zero["offload_optimizer"]["fields"]["device"]["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(devices, ["none", "cpu", "nvme"]);
    assert_eq!(zero["stage"]["choices"], serde_json::json!([0, 1, 2, 3]));
}

#[test]
fn every_key_hf_fills_from_auto_is_one_deepspeed_reads() {
    let k = fixture("torch/hf-keys.json");
    let ds = &k["deepspeed_config"];
    let top = ds["top_level_keys"].as_object().unwrap();
    let zero = ds["zero_optimization"]["fields"].as_object().unwrap();
    let fills = k["hf_deepspeed_auto"]["fill"].as_array().unwrap();
    assert!(fills.len() >= 10, "{fills:?}");
    for f in fills {
        let key = f["ds_key"].as_str().unwrap();
        let mut parts = key.split('.');
        let head = parts.next().unwrap();
        assert!(
            top.contains_key(head),
            "{key}: {head} is not a top-level key DeepSpeed reads"
        );
        if head == "zero_optimization" {
            let sub = parts.next().unwrap();
            // pydantic fields are accepted by name or alias (populate_by_name=True)
            let known = zero
                .iter()
                .any(|(name, e)| name == sub || e["alias"] == sub);
            assert!(known, "{key}: {sub} is neither a field nor an alias");
        }
    }
}
