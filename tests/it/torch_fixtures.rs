//! The torch training fixtures (tests/fixtures/torch, written by benches/torch/*.py from the pinned packages'
//! source) agree with themselves and with the model fixtures they were derived from:
//!
//! - `deepspeed-estimates.json`: each model's `total_params` / `largest_layer_params` is recounted from its
//!   safetensors header fixture (the cases themselves are checked against the crate's estimators in
//!   tests/it/torch_memory.rs).
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
