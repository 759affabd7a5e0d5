//! `optimizer resolve` of training and fine-tuning workloads: torch plans end to end through the binary, on the
//! issue's scenarios (LoRA of an 8B on one RTX 4090, QLoRA of an 8B on a 12 GB RTX 3060, full training of an 8B
//! on one A100 80GB, which does not fit, and on 8× A100 with ZeRO (stage 2 fits, so stage 3's extra gathers are not taken), a 1B full fine-tune on a GTX 1650 in
//! FP16), with the real checkpoints' headers (tests/fixtures/vllm/models). The byte figures asserted are derived
//! here from the shapes and the stack's own arithmetic (parameter bytes, PEFT's adapter count, bitsandbytes'
//! NF4 layout, DeepSpeed's estimator), not read back from the planner; the snapshots guard the rest.

use crate::common;

use std::path::Path;

use common::vllm_models;
use optimizer::emit::{Deployment, Status, TorchSettings};

const GIB: u64 = 1 << 30;

fn resolve(model: &Path, workload: &str, hardware: &str, inventory: &str) -> (Deployment, i32) {
    resolve_with(model, workload, hardware, inventory, &[])
}

fn resolve_with(
    model: &Path,
    workload: &str,
    hardware: &str,
    inventory: &str,
    extra: &[&str],
) -> (Deployment, i32) {
    common::resolve_doc(inventory, model, workload, hardware, extra)
}

fn torch(d: &Deployment) -> &TorchSettings {
    d.settings.torch().expect("a torch plan")
}

/// The GPU's memory entry (after the host's).
fn gpu(d: &Deployment) -> &optimizer::emit::MemoryComponents {
    &d.memory.devices[1].components
}

/// A document with the run-dependent model path replaced and the fixed training script named, for snapshots.
fn snapshot_doc(d: &Deployment, dir: &Path) -> String {
    let mut d = d.clone();
    for a in &mut d.launch {
        if let Some(t) = a.files.get_mut("train.py") {
            assert_eq!(t.as_str(), optimizer::runtime::torch::launch::TRAIN_PY);
            *t = "(runtime::torch::launch::TRAIN_PY)".into();
        }
    }
    let yaml = optimizer::yaml::to_string(&d).unwrap();
    yaml.replace(&dir.display().to_string(), "MODEL")
}

/// Llama-3.1-8B: 8,030,261,248 parameters (the header's element count; meta-llama's model card: 8.03B), of
/// which the embedding and the untied LM head are 128256 × 4096 each.
const LLAMA8B_PARAMS: u64 = 8_030_261_248;
const LLAMA8B_VOCAB_ROWS: u64 = 128_256 * 4096;

#[test]
fn lora_of_an_8b_on_one_rtx_4090_keeps_the_bf16_base_and_fp32_adapters() {
    let dir = vllm_models::materialize("Llama-3.1-8B");
    let (d, code) = resolve(dir.path(), "fine-tune-lora", "rtx-4090", "cpu-server.yaml");
    assert_eq!(code, 0);
    assert_eq!(d.status, Status::Fits);
    let s = torch(&d);
    assert_eq!(
        (s.method.as_str(), s.precision.as_str(), s.tf32),
        ("lora", "bf16", true)
    );
    // PEFT's print_trainable_parameters for Llama-3-8B, r = 8 on q_proj and v_proj: 32 layers × 8 × ((4096 +
    // 4096) + (4096 + 1024)) = 3,407,872.
    assert_eq!(s.trainable_parameters, 3_407_872);
    let m = gpu(&d);
    assert_eq!(
        m.weights_bytes,
        LLAMA8B_PARAMS * 2,
        "the frozen base in BF16"
    );
    assert_eq!(m.adapters_bytes, 3_407_872 * 4, "FP32 adapters");
    assert_eq!(
        m.optimizer_state_bytes,
        3_407_872 * 8,
        "AdamW's two FP32 moments"
    );
    // Global batch 8 = micro-batch × accumulation on one GPU.
    assert_eq!(s.micro_batch * s.gradient_accumulation_steps, 8);
    assert!(d.memory.devices[1].total_bytes <= 24 * GIB);
    insta::assert_snapshot!("lora-8b-rtx4090", snapshot_doc(&d, dir.path()));
}

#[test]
fn qlora_of_an_8b_fits_a_12gb_rtx_3060_with_an_nf4_base() {
    let dir = vllm_models::materialize("Llama-3.1-8B");
    let (d, code) = resolve(
        dir.path(),
        "fine-tune-qlora",
        "rtx-3060-12gb",
        "workstation-2x3090.yaml",
    );
    assert_eq!(code, 0, "{:?}", d.suggestions);
    let s = torch(&d);
    assert_eq!(s.method, "qlora");
    assert_eq!(s.base_quantization.as_deref(), Some("nf4"));
    assert_eq!(s.optimizer, "paged_adamw_8bit");
    // Every linear layer of the blocks in NF4: per layer q, k, v, o 4096×(4096+1024+1024+4096) and gate, up,
    // down 3 × 4096 × 14336; the rest (embedding, LM head, 65 norms of 4096) stays BF16.
    let linears: [u64; 7] = [
        4096 * 4096,
        1024 * 4096,
        1024 * 4096,
        4096 * 4096,
        14336 * 4096,
        14336 * 4096,
        4096 * 14336,
    ];
    // bitsandbytes NF4 with double quantization: 4 bits per weight, an 8-bit absmax per 64, an FP32 absmax
    // per 256 blocks, and per tensor 16 + 256 FP32 code values and one FP32 offset.
    let nf4 = |n: u64| n / 2 + n / 64 + 4 * (n / 64).div_ceil(256) + 4 * (16 + 256 + 1);
    let quantized: u64 = 32 * linears.iter().map(|&n| nf4(n)).sum::<u64>();
    let linear_params: u64 = 32 * linears.iter().sum::<u64>();
    let rest = LLAMA8B_PARAMS - linear_params;
    assert_eq!(rest, 2 * LLAMA8B_VOCAB_ROWS + 65 * 4096);
    assert_eq!(gpu(&d).weights_bytes, quantized + 2 * rest);
    // r = 16 on all seven: 32 × 16 × (8192 + 5120 + 5120 + 8192 + 3 × 18432) = 41,943,040 (the figure PEFT and
    // Unsloth print for Llama-3-8B at r = 16).
    assert_eq!(s.trainable_parameters, 41_943_040);
    assert!(d.memory.devices[1].total_bytes <= 12 * GIB);
    insta::assert_snapshot!("qlora-8b-rtx3060", snapshot_doc(&d, dir.path()));
}

#[test]
fn full_training_of_an_8b_on_one_a100_does_not_fit_and_says_what_would() {
    let dir = vllm_models::materialize("Llama-3.1-8B");
    // A 64 GB workstation host: too little for ZeRO-Offload's optimizer states.
    let (d, code) = resolve(
        dir.path(),
        "training",
        "a100-80gb-sxm",
        "workstation-2x3090.yaml",
    );
    assert_eq!(code, 3);
    assert_eq!(d.status, Status::NoFit);
    // Mixed-precision AdamW: FP32 weights, FP32 gradients, two FP32 moments = 16 bytes per parameter,
    // 128.5 GB before any activation, against 80 GB.
    let m = gpu(&d);
    assert_eq!(
        m.weights_bytes + m.gradients_bytes + m.optimizer_state_bytes,
        16 * LLAMA8B_PARAMS
    );
    let all = d.suggestions.join("\n");
    for what in ["LoRA", "ZeRO-3 over", "CPU offload", "host memory"] {
        assert!(all.contains(what), "no suggestion of {what}:\n{all}");
    }
    insta::assert_snapshot!("full-8b-a100-nofit", snapshot_doc(&d, dir.path()));
}

#[test]
fn full_training_of_an_8b_on_eight_a100s_shards_with_zero() {
    let dir = vllm_models::materialize("Llama-3.1-8B");
    let (d, code) = resolve(
        dir.path(),
        "training",
        "8x:a100-80gb-sxm",
        "cpu-server.yaml",
    );
    assert_eq!(code, 0, "{:?}", d.suggestions);
    let s = torch(&d);
    // ZeRO-2 holds the model states in 2P + 18P/8 = 34.1 GB per GPU, which leaves the activations of a 4096-token
    // sequence room without recomputation; ZeRO-3 would gather the parameters twice per micro-step for no gain.
    assert_eq!(
        (s.method.as_str(), s.zero_stage, s.data_parallel),
        ("full", 2, 8)
    );
    assert!(!s.gradient_checkpointing);
    // DeepSpeed's estimate_zero2_model_states_mem_needs without offload: 2P + int(18 × P / 8 GPUs).
    let m = gpu(&d);
    assert_eq!(
        m.weights_bytes + m.gradients_bytes + m.optimizer_state_bytes,
        2 * LLAMA8B_PARAMS + 18 * LLAMA8B_PARAMS / 8
    );
    // 1024 sequences per step = 8 processes × micro-batch × accumulation.
    assert_eq!(8 * s.micro_batch * s.gradient_accumulation_steps, 1024);
    let files = &common::artifact(&d, "accelerate").files;
    let ds: serde_json::Value = serde_json::from_str(&files["ds_config.json"]).unwrap();
    assert_eq!(ds["zero_optimization"]["stage"], 2);
    assert_eq!(ds["train_batch_size"], 1024);
    insta::assert_snapshot!("full-8b-8xa100-zero", snapshot_doc(&d, dir.path()));
}

#[test]
fn a_1b_full_fine_tune_on_a_gtx_1650_runs_in_fp16_not_bf16() {
    let dir = vllm_models::materialize("Llama-3.2-1B");
    let (d, code) = resolve(
        dir.path(),
        "training",
        "gtx-1650",
        "workstation-2x3090.yaml",
    );
    assert!(code == 0 || code == 3, "exit {code}");
    let s = torch(&d);
    assert_eq!(s.precision, "fp16", "Turing (7.5) has no BF16");
    assert!(!s.tf32);
    let args: serde_json::Value =
        serde_json::from_str(&common::artifact(&d, "accelerate").files["training_args.json"])
            .unwrap();
    assert_eq!(args["fp16"], true);
    assert_eq!(args["bf16"], false);
    assert!(
        args.get("tf32").is_none(),
        "TrainingArguments refuses tf32 before Ampere"
    );
    insta::assert_snapshot!("full-1b-gtx1650", snapshot_doc(&d, dir.path()));
    // At the preset's 4096 tokens the logits alone (4096 × 128256 × 14 bytes) exceed the 4 GB card; the
    // document names the sequence length that fits, and that plan fits, still in FP16.
    assert_eq!(code, 3);
    assert!(
        d.suggestions.iter().any(|s| s.contains("-c 1024")),
        "{:?}",
        d.suggestions
    );
    let (d, code) = resolve_with(
        dir.path(),
        "training",
        "gtx-1650",
        "workstation-2x3090.yaml",
        &["-c", "1024"],
    );
    assert_eq!(code, 0, "{:?}", d.suggestions);
    assert_eq!(torch(&d).precision, "fp16");
    assert!(d.memory.devices[1].total_bytes + d.memory.devices[1].reserve_bytes <= 4 * GIB);
}

#[test]
fn serving_workloads_are_refused_by_torch_and_training_of_a_gguf_is_refused() {
    let dir = vllm_models::materialize("Llama-3.1-8B");
    let o = common::bin_on("cpu-server.yaml")
        .args([
            "resolve",
            "-w",
            "chat",
            "--runtime",
            "torch",
            "--hardware",
            "rtx-4090",
            "-m",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    common::assert_exit(&o, 2);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("torch runtime plans training"), "{e}");

    let tmp = tempfile::tempdir().unwrap();
    let (gguf, _) = common::synth(
        tmp.path(),
        "m.gguf",
        optimizer_testkit::gguf_builder::LlamaShape::LLAMA3_8B,
    );
    let o = common::bin_on("cpu-server.yaml")
        .args([
            "resolve",
            "-w",
            "fine-tune-lora",
            "--hardware",
            "rtx-4090",
            "-m",
        ])
        .arg(&gguf)
        .output()
        .unwrap();
    common::assert_exit(&o, 2);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("safetensors checkpoint"), "{e}");
    assert!(
        !e.contains("convert it to GGUF"),
        "a training refusal suggests no GGUF conversion: {e}"
    );
}

/// A fine-tune preset that names no method (no LoRA rank, no base quantization) leaves it to the plan: full
/// fine-tuning where it fits, else the faster of LoRA and QLoRA (PEFT's default rank 8). On an RTX 4090 with a
/// 64 GB host an 8B model's full fine-tune fits neither the GPU nor, offloaded, the host.
#[test]
fn a_fine_tune_preset_without_a_method_falls_back_to_lora_when_full_does_not_fit() {
    let overlay = tempfile::tempdir().unwrap();
    let workloads = overlay.path().join("workloads");
    std::fs::create_dir_all(&workloads).unwrap();
    std::fs::write(
        workloads.join("fine-tune-open.yaml"),
        r#"id: fine-tune-open
description: "fine-tuning with the method left to the plan"
mode: fine-tune
objective: throughput
context: {policy: fixed, tokens: 2048}
concurrency: 1
prompt_tokens: 2048
generation_tokens: 0
training:
  optimizer: adamw
  micro_batch: 1
  sequence_length: 2048
  global_batch: 16
  gradient_checkpointing: true
sources:
  concurrency: "test"
  context: "test"
  generation_tokens: "test"
  prompt_tokens: "test"
  training: "test"
"#,
    )
    .unwrap();
    let dir = vllm_models::materialize("Llama-3.1-8B");
    let (d, code) = common::resolve_doc_with(
        "workstation-2x3090.yaml",
        Some(overlay.path()),
        dir.path(),
        "fine-tune-open",
        "rtx-4090",
        &[],
    );
    assert_eq!(code, 0, "{:?}", d.suggestions);
    let s = torch(&d);
    // 16-bit LoRA fits (its 16 GB base and 2048-token activations with checkpointing), so no quantized base is
    // taken: quantization is for when the model would not fit otherwise.
    assert_eq!(s.method, "lora");
    assert_eq!(s.lora_rank, Some(8));
    let why = &d.provenance["settings.method"].detail;
    assert!(why.contains("prefers full, which does not fit"), "{why}");
}

/// A global batch the GPUs do not divide is rounded up so every process takes the same number of sequences,
/// and the document says so: 8 sequences over 3 GPUs become 9.
#[test]
fn a_global_batch_the_gpus_do_not_divide_is_rounded_up_with_a_warning() {
    let dir = vllm_models::materialize("Llama-3.1-8B");
    let (d, code) = resolve(
        dir.path(),
        "fine-tune-lora",
        "3x:rtx-4090",
        "cpu-server.yaml",
    );
    assert_eq!(code, 0, "{:?}", d.suggestions);
    let s = torch(&d);
    assert_eq!(s.data_parallel, 3);
    assert_eq!(s.global_batch, 9);
    assert_eq!(s.micro_batch * s.gradient_accumulation_steps * 3, 9);
    assert!(
        d.warnings
            .iter()
            .any(|w| w.contains("not the workload's 8")),
        "{:?}",
        d.warnings
    );
}
