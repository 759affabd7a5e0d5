//! Launch artifacts of a training plan: `accelerate launch` of a training script with the files it reads. Every
//! key of `training_args.json`, `lora_config.json` and `bnb_config.json` is a keyword argument of transformers'
//! `TrainingArguments`, PEFT's `LoraConfig` and transformers' `BitsAndBytesConfig`; `ds_config.json` is a
//! DeepSpeed configuration (the file `TrainingArguments(deepspeed=...)` and `--deepspeed` take);
//! `accelerate_config.yaml` is an accelerate config file (tests/it/torch_launch.rs checks every key against the
//! pinned packages' own fields, tests/fixtures/torch/hf-keys.json). `train.py` loads the checkpoint as the plan
//! sized it (dtype, attention, NF4 base, LoRA adapters, gradient checkpointing) and runs `Trainer` on a JSON
//! lines file of texts packed into training sequences.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::emit::{Artifact, TorchSettings};
use crate::fleet::DeviceId;

/// The JSON lines file the command reads its texts from (one `{"text": ...}` per line), relative to the
/// directory the command runs in.
const DATA_FILE: &str = "train.jsonl";
/// Where `Trainer` writes checkpoints and the final adapter or model.
const OUTPUT_DIR: &str = "out";

/// The training script: stock transformers, datasets, PEFT and bitsandbytes, configured only by the files
/// beside it.
pub const TRAIN_PY: &str = r#"#!/usr/bin/env python3
"""Training entry point written by `optimizer resolve`: every setting comes from the JSON files beside it.

training_args.json -> transformers.TrainingArguments, lora_config.json -> peft.LoraConfig,
bnb_config.json -> transformers.BitsAndBytesConfig, plan.json -> how the checkpoint is loaded and the
sequence length the plan was sized for. DeepSpeed, when planned, comes from accelerate_config.yaml
(deepspeed_config_file: ds_config.json).
"""
import argparse
import json
import os
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent


def load(name):
    path = HERE / name
    return json.loads(path.read_text()) if path.exists() else None


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True, help="the checkpoint directory (config.json, *.safetensors, tokenizer)")
    ap.add_argument("--data", required=True, help='JSON lines, one {"text": ...} per line')
    a = ap.parse_args()
    if not os.path.isfile(a.data):
        sys.exit(f'--data {a.data}: no such file (JSON lines, one {{"text": ...}} per line)')

    import torch
    from datasets import load_dataset
    from transformers import (AutoModelForCausalLM, AutoTokenizer, BitsAndBytesConfig,
                              DataCollatorForLanguageModeling, Trainer, TrainingArguments)

    plan = load("plan.json")
    args = TrainingArguments(**load("training_args.json"))
    kwargs = {"dtype": getattr(torch, plan["torch_dtype"]), "attn_implementation": plan["attn_implementation"]}
    bnb = load("bnb_config.json")
    if bnb is not None:
        kwargs["quantization_config"] = BitsAndBytesConfig(**bnb)
        kwargs["device_map"] = {"": int(os.environ.get("LOCAL_RANK", "0"))}
    model = AutoModelForCausalLM.from_pretrained(a.model, **kwargs)
    lora = load("lora_config.json")
    if lora is not None:
        from peft import LoraConfig, get_peft_model
        if args.activation_checkpointing:
            model.enable_input_require_grads()
        model = get_peft_model(model, LoraConfig(**lora))
        model.print_trainable_parameters()

    tok = AutoTokenizer.from_pretrained(a.model)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    seq = plan["sequence_length"]
    ds = load_dataset("json", data_files=a.data, split="train")
    ds = ds.map(lambda b: tok(b["text"]), batched=True, remove_columns=ds.column_names)

    def pack(b):
        ids = [t for row in b["input_ids"] for t in row]
        n = len(ids) // seq * seq
        blocks = [ids[i:i + seq] for i in range(0, n, seq)]
        return {"input_ids": blocks, "attention_mask": [[1] * seq for _ in blocks]}

    ds = ds.map(pack, batched=True, remove_columns=ds.column_names)
    if len(ds) == 0:
        sys.exit(f"--data {a.data}: fewer than {seq} tokens in all, not one training sequence")
    trainer = Trainer(model=model, args=args, train_dataset=ds,
                      data_collator=DataCollatorForLanguageModeling(tok, mlm=False))
    trainer.train()
    trainer.save_model()


if __name__ == "__main__":
    main()
"#;

fn pretty(v: &Value) -> String {
    let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
    s.push('\n');
    s
}

/// `TrainingArguments` keyword arguments.
fn training_args(s: &TorchSettings) -> Value {
    let mut m = serde_json::Map::new();
    let mut put = |k: &str, v: Value| {
        m.insert(k.into(), v);
    };
    put("output_dir", json!(OUTPUT_DIR));
    put("per_device_train_batch_size", json!(s.micro_batch));
    put(
        "gradient_accumulation_steps",
        json!(s.gradient_accumulation_steps),
    );
    put("bf16", json!(s.precision == "bf16"));
    put("fp16", json!(s.precision == "fp16"));
    if s.tf32 {
        put("tf32", json!(true));
    }
    // transformers 5.23 names it activation checkpointing (`gradient_checkpointing` is its deprecated alias, which
    // warns at every launch); non-reentrant checkpoints let gradients reach LoRA's adapters through the frozen
    // layers.
    put("activation_checkpointing", json!(s.gradient_checkpointing));
    if s.gradient_checkpointing {
        put(
            "activation_checkpointing_kwargs",
            json!({"use_reentrant": false}),
        );
    }
    put("optim", json!(s.optimizer));
    if s.lora_rank.is_some() {
        // QLoRA's and Unsloth's learning rate for adapters (Dettmers et al. 2023, Appendix B: 2e-4 for 7B-13B).
        put("learning_rate", json!(2e-4));
    }
    put("torch_compile", json!(s.torch_compile));
    put("num_train_epochs", json!(1));
    put("logging_steps", json!(10));
    put("save_strategy", json!("epoch"));
    put("report_to", json!("none"));
    if s.data_parallel > 1 && s.zero_stage == 0 {
        // Every parameter takes part in every step; DDP's search for unused ones costs a pass over the graph.
        put("ddp_find_unused_parameters", json!(false));
    }
    Value::Object(m)
}

/// PEFT `LoraConfig` keyword arguments (LoRA and QLoRA plans).
fn lora_config(s: &TorchSettings) -> Option<Value> {
    Some(json!({
        "r": s.lora_rank?,
        "lora_alpha": s.lora_alpha?,
        "lora_dropout": s.lora_dropout?,
        "target_modules": s.lora_target_modules,
        "bias": "none",
        "task_type": "CAUSAL_LM",
    }))
}

/// transformers `BitsAndBytesConfig` keyword arguments (QLoRA plans).
fn bnb_config(s: &TorchSettings) -> Option<Value> {
    match s.base_quantization.as_deref()? {
        "nf4" => Some(json!({
            "load_in_4bit": true,
            "bnb_4bit_quant_type": "nf4",
            "bnb_4bit_use_double_quant": true,
            "bnb_4bit_compute_dtype": dtype(s),
        })),
        "int8" => Some(json!({"load_in_8bit": true})),
        _ => None,
    }
}

fn dtype(s: &TorchSettings) -> &'static str {
    match s.precision.as_str() {
        "bf16" => "bfloat16",
        "fp16" => "float16",
        _ => "float32",
    }
}

/// The DeepSpeed configuration of a ZeRO plan. Batch sizes and precision are written out and equal the
/// `TrainingArguments` (transformers checks that they match); the optimizer's hyper-parameters are `auto`, which
/// transformers fills from `TrainingArguments` (transformers/integrations/deepspeed.py `trainer_config_process`).
fn ds_config(s: &TorchSettings) -> Option<Value> {
    if s.zero_stage == 0 {
        return None;
    }
    let mut zero = serde_json::Map::new();
    zero.insert("stage".into(), json!(s.zero_stage));
    zero.insert("overlap_comm".into(), json!(true));
    zero.insert("contiguous_gradients".into(), json!(true));
    if s.offload != "none" {
        zero.insert(
            "offload_optimizer".into(),
            json!({"device": "cpu", "pin_memory": true}),
        );
    }
    if s.offload == "optimizer+parameters" {
        zero.insert(
            "offload_param".into(),
            json!({"device": "cpu", "pin_memory": true}),
        );
    }
    if s.zero_stage == 3 {
        zero.insert(
            "stage3_gather_16bit_weights_on_model_save".into(),
            json!(true),
        );
    }
    let mut v = json!({
        "train_micro_batch_size_per_gpu": s.micro_batch,
        "gradient_accumulation_steps": s.gradient_accumulation_steps,
        "train_batch_size": s.global_batch,
        "gradient_clipping": 1.0,
        "bf16": {"enabled": s.precision == "bf16"},
        "fp16": {"enabled": s.precision == "fp16", "loss_scale": 0, "initial_scale_power": 16},
        "zero_optimization": Value::Object(zero),
        "steps_per_print": 10,
        "wall_clock_breakdown": false,
    });
    if s.offload != "none" {
        // ZeRO-Offload steps the optimizer on the CPU with DeepSpeed's own CPU Adam; without this section the
        // Trainer's torch optimizer would be refused (zero_force_ds_cpu_optimizer).
        v["optimizer"] = json!({
            "type": "AdamW",
            "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}
        });
    }
    Some(v)
}

/// The accelerate config file (`accelerate launch --config_file`).
fn accelerate_config(s: &TorchSettings, gpus: &[DeviceId], nodes: u32) -> String {
    let distributed = if s.zero_stage > 0 {
        "DEEPSPEED"
    } else if s.data_parallel > 1 {
        "MULTI_GPU"
    } else {
        "'NO'"
    };
    let mixed = match s.precision.as_str() {
        "bf16" => "bf16",
        "fp16" => "fp16",
        _ => "'no'",
    };
    let ids: Vec<String> = gpus.iter().map(|g| g.ordinal.to_string()).collect();
    let mut y = String::new();
    y.push_str("compute_environment: LOCAL_MACHINE\n");
    y.push_str(&format!("distributed_type: {distributed}\n"));
    if s.zero_stage > 0 {
        y.push_str("deepspeed_config:\n  deepspeed_config_file: ds_config.json\n");
        y.push_str(&format!("  zero3_init_flag: {}\n", s.zero_stage == 3));
    }
    // With a DeepSpeed config file the precision comes from that file: accelerate 1.15 refuses a
    // `mixed_precision` beside it (utils/dataclasses.py `DeepSpeedPlugin._deepspeed_config_checks`), and its own
    // questionnaire writes null there (commands/config/cluster.py).
    if s.zero_stage == 0 {
        y.push_str(&format!("mixed_precision: {mixed}\n"));
    } else {
        y.push_str("mixed_precision: null\n");
    }
    y.push_str("debug: false\n");
    // Quoted: accelerate splits the value as a string (launch.py), and YAML reads a bare `0` as an integer.
    y.push_str(&format!("gpu_ids: '{}'\n", ids.join(",")));
    y.push_str(&format!("num_machines: {nodes}\n"));
    y.push_str("machine_rank: 0\n");
    y.push_str(&format!("num_processes: {}\n", s.data_parallel));
    y.push_str("main_training_function: main\n");
    y.push_str("rdzv_backend: static\n");
    y.push_str("same_network: true\n");
    y.push_str("use_cpu: false\n");
    y
}

/// How `train.py` loads the checkpoint: the dtype the memory model sized (FP32 weights for full training, whose
/// 16-bit compute comes from autocast or DeepSpeed; the compute type for LoRA's frozen base), the attention
/// implementation and the sequence length.
fn plan_file(s: &TorchSettings) -> Value {
    json!({
        "torch_dtype": if s.method == "full" { "float32" } else { dtype(s) },
        "attn_implementation": s.attn_implementation,
        "sequence_length": s.sequence_length,
    })
}

/// The artifacts: `accelerate launch` of `train.py` with its files.
pub(crate) fn artifacts(
    model_dir: &str,
    s: &TorchSettings,
    gpus: &[DeviceId],
    nodes: u32,
) -> Vec<Artifact> {
    let mut files = BTreeMap::new();
    files.insert("train.py".to_string(), TRAIN_PY.to_string());
    files.insert("plan.json".to_string(), pretty(&plan_file(s)));
    files.insert("training_args.json".to_string(), pretty(&training_args(s)));
    if let Some(v) = lora_config(s) {
        files.insert("lora_config.json".to_string(), pretty(&v));
    }
    if let Some(v) = bnb_config(s) {
        files.insert("bnb_config.json".to_string(), pretty(&v));
    }
    if let Some(v) = ds_config(s) {
        files.insert("ds_config.json".to_string(), pretty(&v));
    }
    files.insert(
        "accelerate_config.yaml".to_string(),
        accelerate_config(s, gpus, nodes),
    );
    let mut env = BTreeMap::new();
    let ids: Vec<String> = gpus.iter().map(|g| g.ordinal.to_string()).collect();
    env.insert("CUDA_VISIBLE_DEVICES".to_string(), ids.join(","));
    // Expandable segments let the caching allocator grow one mapping instead of cutting fixed segments, the
    // fragmentation remedy PyTorch's CUDA notes name for out-of-memory errors with reserved-but-unallocated
    // memory.
    env.insert(
        "PYTORCH_CUDA_ALLOC_CONF".to_string(),
        "expandable_segments:True".to_string(),
    );
    let argv: Vec<String> = vec![
        "accelerate".into(),
        "launch".into(),
        "--config_file".into(),
        "accelerate_config.yaml".into(),
        "train.py".into(),
        "--model".into(),
        model_dir.into(),
        "--data".into(),
        DATA_FILE.into(),
    ];
    vec![Artifact {
        name: "accelerate".into(),
        command: Some(crate::emit::shell_command(&env, &argv)),
        description: format!(
            "{} training with transformers' Trainer on {} GPU process(es): write the files, put your texts in {DATA_FILE} (one {{\"text\": ...}} per line) and run the command in that directory",
            s.method, s.data_parallel
        ),
        argv,
        env,
        files,
        resources: None,
    }]
}
