//! The files of a training plan's launch artifact name only what the pinned packages accept: every key of
//! `training_args.json` is a `TrainingArguments` field (and its enum values are among the field's choices), every
//! key of `lora_config.json` a `LoraConfig` field, of `bnb_config.json` a `BitsAndBytesConfig` parameter, of
//! `accelerate_config.yaml` an accelerate config field, of `ds_config.json` a key DeepSpeed reads (its
//! `zero_optimization` keys fields or aliases of its pydantic model), every option of the command an
//! `accelerate launch` option; the batch sizes agree the way transformers checks them. The key lists were read
//! from the packages' own source (tests/fixtures/torch/hf-keys.json, benches/torch/extract_keys.py).

use crate::common;

use std::collections::BTreeSet;

use common::vllm_models;
use optimizer::emit::Deployment;
use serde_json::Value;

fn keys() -> Value {
    let p = common::fixture("torch/hf-keys.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn plan(id: &str, workload: &str, hardware: &str, inventory: &str) -> Deployment {
    let dir = vllm_models::materialize(id);
    common::resolve_doc(inventory, dir.path(), workload, hardware, &[]).0
}

/// A LoRA plan over an 8-bit base, from a preset overlay (no built-in preset asks for one).
fn int8_plan() -> Deployment {
    let overlay = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(overlay.path().join("workloads")).unwrap();
    let preset = std::fs::read_to_string(
        common::root().join("crates/core/profiles/workloads/fine-tune-lora.yaml"),
    )
    .unwrap()
    .replace("id: fine-tune-lora", "id: fine-tune-lora-int8")
    .replace(
        "  lora_rank: 8\n",
        "  lora_rank: 8\n  base_quantization: int8\n",
    );
    assert!(preset.contains("base_quantization: int8"));
    std::fs::write(
        overlay.path().join("workloads/fine-tune-lora-int8.yaml"),
        preset,
    )
    .unwrap();
    let dir = vllm_models::materialize("Llama-3.1-8B");
    let (d, code) = common::resolve_doc_with(
        "cpu-server.yaml",
        Some(overlay.path()),
        dir.path(),
        "fine-tune-lora-int8",
        "rtx-4090",
        &[],
    );
    assert_eq!(code, 0, "{:?}", d.suggestions);
    d
}

/// Plans that between them emit every file and every strategy: LoRA on one GPU, QLoRA, full training with
/// ZeRO-2 over 8 GPUs, ZeRO-2 offload on one GPU, ZeRO-3 offload on two.
fn plans() -> Vec<(String, Deployment)> {
    [
        (
            "Llama-3.1-8B",
            "fine-tune-lora",
            "rtx-4090",
            "cpu-server.yaml",
        ),
        (
            "Llama-3.1-8B",
            "fine-tune-qlora",
            "rtx-3060-12gb",
            "workstation-2x3090.yaml",
        ),
        (
            "Llama-3.1-8B",
            "training",
            "8x:a100-80gb-sxm",
            "cpu-server.yaml",
        ),
        (
            "Llama-3.1-8B",
            "training",
            "a100-80gb-sxm",
            "cpu-server.yaml",
        ),
        ("Llama-3.2-1B", "training", "2x:rtx-4090", "cpu-server.yaml"),
        (
            "Llama-3.2-1B",
            "fine-tune-lora",
            "gtx-1650",
            "workstation-2x3090.yaml",
        ),
    ]
    .into_iter()
    .map(|(m, w, h, i)| (format!("{m} {w} {h}"), plan(m, w, h, i)))
    .chain([("Llama-3.1-8B LoRA int8 rtx-4090".to_string(), int8_plan())])
    .collect()
}

fn choices(field: &Value) -> BTreeSet<String> {
    field["choices"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn check_object(what: &str, obj: &Value, fields: &Value, label: &str) {
    for (k, v) in obj.as_object().unwrap() {
        let f = fields
            .get(k)
            .unwrap_or_else(|| panic!("{label}: {what} has no field {k:?}"));
        let allowed = choices(f);
        if let Some(s) = v.as_str()
            && !allowed.is_empty()
        {
            assert!(
                allowed.contains(s),
                "{label}: {what}.{k} = {s:?} is not among {allowed:?}"
            );
        }
    }
}

#[test]
fn every_emitted_key_is_one_the_pinned_packages_accept() {
    let k = keys();
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    for (label, d) in &plans() {
        let a = common::artifact(d, "accelerate");
        let file = |n: &str| {
            a.files
                .get(n)
                .map(|t| serde_json::from_str::<Value>(t).unwrap())
        };
        let args = file("training_args.json").expect("training_args.json");
        check_object("TrainingArguments", &args, &k["TrainingArguments"], label);
        seen.insert("training_args.json");
        if let Some(l) = file("lora_config.json") {
            check_object("LoraConfig", &l, &k["LoraConfig"], label);
            seen.insert("lora_config.json");
        }
        if let Some(b) = file("bnb_config.json") {
            check_object("BitsAndBytesConfig", &b, &k["BitsAndBytesConfig"], label);
            seen.insert("bnb_config.json");
        }
        // accelerate's config file: top-level fields, and the nested deepspeed_config keys.
        let acc: Value = serde_yaml_ng::from_str(&a.files["accelerate_config.yaml"]).unwrap();
        let names: BTreeSet<&str> = k["accelerate_config"]["field_names"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        for (key, v) in acc.as_object().unwrap() {
            assert!(
                names.contains(key.as_str()),
                "{label}: accelerate config has no field {key:?}"
            );
            if key == "deepspeed_config" {
                for nk in v.as_object().unwrap().keys() {
                    assert!(
                        k["accelerate_config"]["nested_keys"]["deepspeed_config"]
                            .get(nk)
                            .is_some(),
                        "{label}: accelerate deepspeed_config has no key {nk:?}"
                    );
                }
            }
        }
        let dt = acc["distributed_type"].as_str().unwrap();
        let dts = choices(&k["accelerate_config"]["fields"]["BaseConfig"]["distributed_type"]);
        assert!(dts.contains(dt), "{label}: distributed_type {dt}");
        // DeepSpeed: top-level keys it reads; zero_optimization fields or their aliases; offload devices.
        if let Some(ds) = file("ds_config.json") {
            seen.insert("ds_config.json");
            let dc = &k["deepspeed_config"];
            for key in ds.as_object().unwrap().keys() {
                assert!(
                    dc["top_level_keys"].get(key).is_some(),
                    "{label}: DeepSpeed reads no {key:?}"
                );
            }
            let zf = dc["zero_optimization"]["fields"].as_object().unwrap();
            let zero_names: BTreeSet<&str> = zf
                .iter()
                .flat_map(|(n, f)| [Some(n.as_str()), f["alias"].as_str()])
                .flatten()
                .collect();
            for (key, v) in ds["zero_optimization"].as_object().unwrap() {
                assert!(
                    zero_names.contains(key.as_str()),
                    "{label}: zero_optimization.{key}"
                );
                if key.starts_with("offload_") {
                    let devs = choices(&zf[key.as_str()]["fields"]["device"]);
                    assert!(
                        devs.contains(v["device"].as_str().unwrap()),
                        "{label}: {key}.device"
                    );
                    for sub in v.as_object().unwrap().keys() {
                        assert!(
                            zf[key.as_str()]["fields"].get(sub).is_some(),
                            "{label}: {key}.{sub}"
                        );
                    }
                }
            }
            for p in ["bf16", "fp16"] {
                for key in ds[p].as_object().unwrap().keys() {
                    assert!(dc[p]["fields"].get(key).is_some(), "{label}: {p}.{key}");
                }
            }
            // transformers' trainer_config_process: explicit values must equal TrainingArguments'.
            let world = d.settings.torch().unwrap().data_parallel;
            assert_eq!(
                ds["train_micro_batch_size_per_gpu"],
                args["per_device_train_batch_size"]
            );
            assert_eq!(
                ds["gradient_accumulation_steps"],
                args["gradient_accumulation_steps"]
            );
            assert_eq!(
                ds["train_batch_size"].as_u64().unwrap(),
                args["per_device_train_batch_size"].as_u64().unwrap()
                    * args["gradient_accumulation_steps"].as_u64().unwrap()
                    * u64::from(world),
                "{label}"
            );
            assert_eq!(ds["bf16"]["enabled"], args["bf16"]);
            assert_eq!(ds["fp16"]["enabled"], args["fp16"]);
            // "auto" only where transformers fills it.
            let filled: BTreeSet<&str> = k["hf_deepspeed_auto"]["fill"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f["ds_key"].as_str().unwrap())
                .collect();
            if let Some(params) = ds["optimizer"]["params"].as_object() {
                for (key, v) in params {
                    if v == "auto" {
                        let path = format!("optimizer.params.{key}");
                        assert!(
                            filled.contains(path.as_str()),
                            "{label}: {path} auto is never filled"
                        );
                    }
                }
            }
        }
        // The command: accelerate launch's own options, then the script's.
        let launch = k["accelerate_launch"].as_array().unwrap();
        let opts: BTreeSet<&str> = launch
            .iter()
            .flat_map(|e| {
                e["options"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|o| o.as_str().unwrap())
            })
            .collect();
        assert_eq!(&a.argv[..2], ["accelerate", "launch"]);
        let script = a.argv.iter().position(|x| x == "train.py").unwrap();
        for x in a.argv[2..script].iter().filter(|x| x.starts_with("--")) {
            assert!(
                opts.contains(x.as_str()),
                "{label}: accelerate launch has no {x}"
            );
        }
    }
    assert_eq!(
        seen,
        BTreeSet::from([
            "training_args.json",
            "lora_config.json",
            "bnb_config.json",
            "ds_config.json"
        ])
    );
}

/// Regression guard for two defects found by running the files through accelerate 1.15 itself
/// (benches/torch/check_launch.py, tests/fixtures/torch/launch-check.json): a bare `gpu_ids: 0` is a YAML integer,
/// on which `accelerate launch` calls `.split` and crashes; a `mixed_precision` beside a DeepSpeed config file
/// makes `DeepSpeedPlugin` refuse to start.
#[test]
fn accelerate_configs_pass_accelerates_own_launch_checks() {
    for (label, d) in &plans() {
        let a = common::artifact(d, "accelerate");
        let acc: Value = serde_yaml_ng::from_str(&a.files["accelerate_config.yaml"]).unwrap();
        assert!(
            acc["gpu_ids"].is_string(),
            "{label}: gpu_ids {}",
            acc["gpu_ids"]
        );
        // transformers 5.23's current names, not the deprecated aliases that warn at every launch.
        let args: Value = serde_json::from_str(&a.files["training_args.json"]).unwrap();
        assert!(args.get("activation_checkpointing").is_some(), "{label}");
        assert!(args.get("gradient_checkpointing").is_none(), "{label}");
        if acc["distributed_type"] == "DEEPSPEED" {
            assert!(
                acc["mixed_precision"].is_null(),
                "{label}: {}",
                acc["mixed_precision"]
            );
        } else {
            assert!(acc["mixed_precision"].is_string(), "{label}");
        }
    }
}
