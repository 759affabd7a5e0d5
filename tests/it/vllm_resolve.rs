//! `optimizer resolve` of safetensors checkpoints: vLLM plans end to end through the binary, on the issue's
//! machines (A100 80GB SXM, 2× RTX 4090, L4, H100, 8× H100 with a 70B model), with the model as a directory of
//! `config.json` and a sparse `model.safetensors` whose header is the real checkpoint's
//! (tests/fixtures/vllm/models). Every figure asserted is derived here from the model's shapes and vLLM's
//! arithmetic, not read back from the planner.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;

use common::vllm_models;
use optimizer::emit::{Deployment, Status, VllmSettings};

const GIB: u64 = 1 << 30;

/// The options `vllm serve` 0.33.0 accepts (extracted from its argument parser).
fn serve_flags() -> BTreeSet<String> {
    let text = std::fs::read_to_string(common::fixture("vllm/serve-flags-0.33.0.txt")).unwrap();
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect()
}

/// Allowed values of the options that have a fixed set.
fn serve_choices() -> serde_json::Value {
    let text = std::fs::read_to_string(common::fixture("vllm/serve-choices-0.33.0.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn resolve(model: &Path, workload: &str, hardware: &str, extra: &[&str]) -> (Deployment, i32) {
    common::resolve_doc("cpu-server.yaml", model, workload, hardware, extra)
}

fn vllm(d: &Deployment) -> &VllmSettings {
    d.settings.vllm().expect("a vLLM plan")
}

/// Every option the vllm artifact passes is one the pinned parser accepts, with an allowed value.
fn check_argv(d: &Deployment) {
    let flags = serve_flags();
    let choices = serve_choices();
    let a = d.artifact("vllm").expect("a vllm artifact");
    assert_eq!(&a.argv[..2], ["vllm", "serve"]);
    let mut i = 3;
    while i < a.argv.len() {
        let f = &a.argv[i];
        assert!(flags.contains(f), "vllm serve 0.33.0 has no option {f}");
        let takes_value = a.argv.get(i + 1).is_some_and(|v| !v.starts_with("--"));
        if takes_value {
            if let Some(allowed) = choices.get(f).and_then(|v| v.as_array()) {
                let v = &a.argv[i + 1];
                assert!(
                    allowed.iter().any(|x| x.as_str() == Some(v)),
                    "{f} {v}: not among {allowed:?}"
                );
            }
            i += 2;
        } else {
            i += 1;
        }
    }
    assert_eq!(a.env["CUDA_DEVICE_ORDER"], "PCI_BUS_ID");
}

/// Per-layer KV page bytes of a full-attention GQA model at TP `tp`: 2 (K and V) × block × KV heads per rank ×
/// head size × dtype bytes (vllm/v1/kv_cache_interface.py `AttentionSpec.page_size_bytes`); fewer KV heads
/// than ranks are replicated, one per rank.
fn page_bytes(layers: u64, kv_heads: u64, head: u64, tp: u64, dtype_bytes: u64) -> u64 {
    let per_rank = (kv_heads / tp).max(1);
    layers * 2 * 16 * per_rank * head * dtype_bytes
}

#[test]
fn qwen2_5_7b_on_an_a100_80gb_is_one_gpu_with_exact_weights_and_kv_blocks() {
    let dir = vllm_models::materialize("Qwen2.5-7B");
    let spec = vllm_models::spec("Qwen2.5-7B");
    let (d, code) = resolve(dir.path(), "chat", "a100-80gb-sxm", &[]);
    assert_eq!(code, 0, "{:?}", d.warnings);
    assert_eq!(d.status, Status::Fits);
    assert_eq!(d.runtime.id.name(), "vllm");
    assert_eq!(d.runtime.version, "0.33.0");
    let s = vllm(&d);
    assert_eq!(s.tensor_parallel_size, 1);
    assert_eq!(s.dtype, "bfloat16");
    assert_eq!(s.max_model_len, 8192, "the chat preset's context");
    assert_eq!(s.max_num_seqs, 4, "the chat preset's concurrency");
    assert_eq!(s.max_num_batched_tokens, 2048, "vLLM's default on an A100");
    // At TP 1 every tensor is on the one GPU: the file's tensor bytes, exactly (Qwen2.5-7B's vocabulary,
    // 152,064, is a multiple of vLLM's padding of 64, so padding adds nothing), plus the rotary embedding's
    // cos/sin cache vLLM allocates with the model (vllm/model_executor/layers/rotary_embedding: a
    // max_position_embeddings × rotary_dim buffer in the model dtype, counted in "Model loading took").
    let m = &d.memory.devices[0];
    assert_eq!(spec.hparams.context_length, Some(131_072));
    let rope = 131_072 * 128 * 2;
    assert_eq!(m.components.weights_bytes, spec.tensor_bytes() + rope);
    assert_eq!(spec.hparams.vocab_size, Some(152_064));
    // 28 layers, 4 KV heads of 128, bf16.
    let page = page_bytes(28, 4, 128, 1, 2);
    assert_eq!(page, 28 * 2 * 16 * 4 * 128 * 2);
    assert_eq!(s.kv_cache_memory_bytes % page, 0, "whole blocks");
    assert_eq!(s.kv_cache_blocks, s.kv_cache_memory_bytes / page);
    assert_eq!(s.kv_cache_tokens, s.kv_cache_blocks * 16);
    assert!(
        s.kv_cache_tokens >= 4 * 8192,
        "the four conversations fit: {}",
        s.kv_cache_tokens
    );
    let conc = s.kv_cache_tokens as f64 / 8192.0;
    assert!(
        (s.max_concurrency - conc).abs() < 1e-3,
        "{} vs {conc}",
        s.max_concurrency
    );
    // vLLM's start-up check (request_memory) needs ceil(total × utilization) bytes free once its CUDA context
    // (the non-torch memory) exists: at most the free share less that, rounded down to 0.01.
    let free_after_context = (80 * GIB - m.components.overhead_bytes) as f64 / (80 * GIB) as f64;
    assert!(s.gpu_memory_utilization <= free_after_context);
    assert!(s.gpu_memory_utilization > free_after_context - 0.011);
    check_argv(&d);
    for key in [
        "settings.tensor_parallel_size",
        "settings.dtype",
        "settings.max_model_len",
        "settings.max_num_seqs",
        "settings.max_num_batched_tokens",
        "settings.kv_cache_dtype",
        "settings.kv_cache_memory_bytes",
        "settings.gpu_memory_utilization",
        "settings.enforce_eager",
        "settings.attention_backend",
        "topology",
    ] {
        assert!(d.provenance.contains_key(key), "no provenance for {key}");
    }
}

#[test]
fn two_rtx_4090s_hold_a_7b_at_tp1_or_split_it_exactly() {
    let dir = vllm_models::materialize("Qwen2.5-7B");
    let spec = vllm_models::spec("Qwen2.5-7B");
    // Pinned TP 2: every sharded tensor is halved, the norms (the only replicated tensors: Qwen2's QKV biases
    // are column-parallel and split with their weights) are whole on both.
    let (d, code) = resolve(
        dir.path(),
        "chat",
        "2x:rtx-4090",
        &["--tensor-parallel", "2"],
    );
    assert_eq!(code, 0, "{:?} {:?}", d.warnings, d.suggestions);
    let s = vllm(&d);
    assert_eq!(s.tensor_parallel_size, 2);
    let norms: u64 = spec
        .tensors
        .iter()
        .filter(|t| t.name.ends_with("norm.weight"))
        .map(|t| t.bytes)
        .sum();
    assert_eq!(norms, (28 * 2 + 1) * 3584 * 2);
    // The rotary cache is whole on every rank (131,072 positions × 128 × 2 bytes).
    let per_rank = (spec.tensor_bytes() - norms) / 2 + norms + 131_072 * 128 * 2;
    for m in &d.memory.devices {
        assert_eq!(m.components.weights_bytes, per_rank, "{}", m.device);
    }
    assert_eq!(d.memory.devices.len(), 2);
    assert_eq!(d.topology.tensor_parallel, 2);
    let page = page_bytes(28, 4, 128, 2, 2);
    assert_eq!(s.kv_cache_memory_bytes % page, 0);
    assert_eq!(s.kv_cache_tokens, s.kv_cache_memory_bytes / page * 16);
    check_argv(&d);
    let a = d.artifact("vllm").unwrap();
    assert_eq!(a.env["CUDA_VISIBLE_DEVICES"], "0,1");
}

#[test]
fn an_l4_serves_a_7b_with_an_fp8_kv_cache_only_if_the_preset_allows_it() {
    let dir = vllm_models::materialize("Qwen2.5-7B");
    let (d, code) = resolve(dir.path(), "chat", "l4", &[]);
    let s = vllm(&d);
    // 24 GB: 15.2 GB of bf16 weights leave room for the chat preset's 4 × 8192 tokens in the model dtype.
    // It fits; the chat preset's 50 ms per output token is missed (`sla-missed`, exit 5).
    assert_eq!(code, 5, "{:?}", d.suggestions);
    assert_eq!(s.tensor_parallel_size, 1);
    assert_eq!(s.dtype, "bfloat16", "an L4 is compute capability 8.9");
    assert!(s.kv_cache_dtype == "auto" || s.kv_cache_dtype == "fp8");
    check_argv(&d);
}

#[test]
fn an_h100_plan_uses_vllms_h100_defaults() {
    let dir = vllm_models::materialize("Qwen2.5-7B");
    let (d, code) = resolve(dir.path(), "chat", "h100-sxm", &[]);
    assert_eq!(code, 0);
    let s = vllm(&d);
    assert_eq!(s.max_num_batched_tokens, 8192, "vLLM's default from 70 GiB");
    assert_eq!(s.attention_backend, "FLASH_ATTN");
    check_argv(&d);
}

#[test]
fn eight_h100s_split_a_70b_over_the_fewest_gpus_that_hold_it() {
    let dir = vllm_models::materialize("Llama-3.1-70B-Instruct");
    let spec = vllm_models::spec("Llama-3.1-70B-Instruct");
    let (d, code) = resolve(dir.path(), "chat", "8x:h100-sxm", &[]);
    assert_eq!(code, 0, "{:?}", d.suggestions);
    let s = vllm(&d);
    // 141 GB of bf16 weights: not on one 80 GB GPU; on two, 70.5 GB each leaves too little for the KV cache
    // and the profiling pass? The plan must take the smallest TP whose per-GPU memory fits.
    let tp = u64::from(s.tensor_parallel_size);
    assert!(tp >= 2, "a 70B does not fit one H100");
    assert!(spec.tensor_bytes() / tp < 80 * GIB);
    // 64 query and 8 KV heads: TP divides both.
    assert_eq!(64 % tp, 0);
    assert_eq!(8 % tp, 0);
    // NVLink between SXM H100s.
    assert!(
        d.provenance["topology"].detail.contains("NVLink"),
        "{}",
        d.provenance["topology"].detail
    );
    // 128,256-entry vocabulary: a multiple of 64, split by rows.
    assert_eq!(spec.hparams.vocab_size, Some(128_256));
    let page = page_bytes(80, 8, 128, tp, 2);
    assert_eq!(s.kv_cache_memory_bytes % page, 0);
    check_argv(&d);
}

#[test]
fn a_gguf_with_runtime_vllm_and_a_safetensors_with_runtime_llama_cpp_are_refused() {
    let dir = vllm_models::materialize("Qwen2.5-7B");
    let refusal = |runtime: &str, model: &Path| {
        let out = common::bin_on("cpu-server.yaml")
            .args([
                "resolve",
                "-w",
                "chat",
                "--hardware",
                "l4",
                "--runtime",
                runtime,
                "-m",
            ])
            .arg(model)
            .output()
            .unwrap();
        common::assert_exit(&out, 2);
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(refusal("llama.cpp", dir.path()).contains("GGUF"));
    assert!(refusal("vllm", &common::fixture("gguf/llama-q4_k_m.gguf")).contains("llama.cpp"));
}

#[test]
fn a_safetensors_checkpoint_without_a_gpu_is_refused_with_a_hint() {
    let dir = vllm_models::materialize("Qwen2.5-7B");
    let out = common::bin_on("cpu-server.yaml")
        .args(["resolve", "-w", "chat", "-m"])
        .arg(dir.path())
        .output()
        .unwrap();
    common::assert_exit(&out, 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--hardware"));
}

/// Kimi-K2-Instruct (1.03T parameters, block FP8, MLA) on 8× H200: 958 GiB of weights need all eight at TP 8,
/// 120.97 GiB a rank (derived in tests/it/common/vllm_models.rs `kimi_k2::rank_weights`), which leaves room for
/// an MLA KV cache of 16-token blocks of 61 × 576 × 2 bytes a token, the same on every rank.
#[test]
fn kimi_k2_fits_eight_h200s_at_tp8_with_an_mla_kv_cache() {
    use vllm_models::kimi_k2 as kimi;
    let dir = vllm_models::materialize("Kimi-K2-Instruct");
    let (d, code) = resolve(dir.path(), "chat", "8x:h200", &[]);
    assert_eq!(code, 0, "{:?} {:?}", d.warnings, d.suggestions);
    assert_eq!(d.status, Status::Fits);
    let s = vllm(&d);
    assert_eq!(s.tensor_parallel_size, 8);
    assert_eq!(s.quantization.as_deref(), Some("fp8"));
    assert!(
        s.attention_backend.contains("MLA"),
        "{}",
        s.attention_backend
    );
    // Weights per rank: the replicated tensors plus an eighth of the sharded, the yarn rope cache and the
    // decompressed W_UK/W_UV.
    let w = kimi::rank_weights(8);
    assert_eq!(w.per_rank, 129_890_453_216);
    let dev = &d.memory.devices[0];
    assert_eq!(dev.components.weights_bytes, w.per_rank);
    assert!(dev.total_bytes <= dev.capacity_bytes);
    // The KV cache is whole MLA blocks: 16 tokens × 61 layers × (512 + 64) × 2 bytes.
    let page = u64::from(s.block_size) * kimi::LAYERS * (kimi::KV_RANK + kimi::ROPE) * 2;
    assert_eq!(page, 16 * 70_272);
    assert_eq!(s.kv_cache_memory_bytes % page, 0);
    assert_eq!(s.kv_cache_blocks, s.kv_cache_memory_bytes / page);
    assert_eq!(s.kv_cache_tokens, s.kv_cache_blocks * 16);
    eprintln!(
        "Kimi-K2 8x H200: TP {}, weights {:.2} GiB/rank, total {:.2} of {:.2} GiB, KV {} blocks = {} tokens, max_model_len {}",
        s.tensor_parallel_size,
        w.per_rank as f64 / GIB as f64,
        dev.total_bytes as f64 / GIB as f64,
        dev.capacity_bytes as f64 / GIB as f64,
        s.kv_cache_blocks,
        s.kv_cache_tokens,
        s.max_model_len
    );
    check_argv(&d);
}

/// A measured vLLM throughput replaces the prediction only for a plan of its tensor-parallel size: a decode rate
/// measured at TP 2 on two RTX 3090s is the figure a TP-2 plan on them reports, and a row that does not say its
/// size (one GPU) is not (before, rows could only ever match one-GPU plans).
#[test]
fn a_measured_vllm_throughput_is_used_at_its_tensor_parallel_size_only() {
    use optimizer::evidence::{Basis, Evidence, ThroughputPoint};
    use optimizer::profile::Phase;
    use optimizer::profile::RuntimeId;
    use optimizer::runtime::Overrides;

    let spec = vllm_models::spec("Qwen2.5-7B");
    let inv = common::inventory("workstation-2x3090.yaml");
    let set = common::profiles();
    let w = set.workload("chat").unwrap().value.clone();
    let over = Overrides {
        runtime: Some(RuntimeId::Vllm),
        tensor_parallel: Some(2),
        ..Overrides::default()
    };
    let plan = |ev: &Evidence| {
        common::plan_workload(&spec, "Qwen2.5-7B", &inv, &set, &w, &over, ev).unwrap()
    };
    let analytic = plan(&Evidence::default());
    let v = analytic.settings.vllm().unwrap();
    assert_eq!(v.tensor_parallel_size, 2);
    let profile = analytic.hardware.gpus[0].profile.clone();
    let row = |tp: Option<u32>| ThroughputPoint {
        row: 11,
        device_profile: profile.clone(),
        runtime: RuntimeId::Vllm,
        phase: Phase::Decode,
        tokens_per_s: 123.5,
        concurrency: Some(u64::from(v.max_num_seqs)),
        threads: None,
        gpu_layers: None,
        ubatch: None,
        tensor_parallel: tp,
        tokens: None,
        what: "test row".into(),
    };
    let with = |tp| Evidence {
        throughput: vec![row(tp)],
        rows: Some(1),
        ..Evidence::default()
    };
    let d = plan(&with(Some(2)));
    assert_eq!(d.performance.basis, Basis::Measured);
    assert_eq!(d.performance.decode_tokens_per_s, 123.5);
    assert_eq!(d.performance.evidence, vec![11]);
    for other in [None, Some(1), Some(4)] {
        let d = plan(&with(other));
        assert_ne!(
            d.performance.decode_tokens_per_s, 123.5,
            "a row at TP {other:?} was used by a TP-2 plan"
        );
    }
}

/// The sampler's path follows the GPU (vLLM 0.33's `flashinfer_sampler_supported`: compute capability 8.0 to
/// 12.1 and more than 16 SMs): FlashInfer on an A100 (8.0, 108 SMs), the Triton kernel on a T4 (7.5), and the
/// plan's KV explanation names the path and the sampler buffers it counted.
#[test]
fn the_sampler_path_follows_the_gpu_and_the_plan_says_which() {
    let dir = vllm_models::materialize("Qwen2.5-3B-Instruct");
    for (hw, path) in [("a100-80gb-sxm", "FlashInfer"), ("t4", "Triton")] {
        let (d, code) = resolve(dir.path(), "chat", hw, &[]);
        assert_eq!(code, 0, "{hw}: {:?}", d.warnings);
        let why = &d.provenance["settings.kv_cache_memory_bytes"].detail;
        assert!(why.contains(&format!("({path} sampler)")), "{hw}: {why}");
        assert!(
            why.contains("GiB sampler buffers (4 sequence slots)"),
            "{hw}: {why}"
        );
    }
}

/// vLLM candidates on the same GPUs all fill them, so their memory differs by less than one KV block: a tie
/// between them is never "more memory" (it printed "uses more memory (21.80 vs 21.80 GiB)"), and the fp8 KV
/// cache that ties the preferred auto one loses to the preference, which the alternative says.
#[test]
fn vllm_ties_are_explained_by_what_broke_them() {
    let dir = vllm_models::materialize("Qwen2.5-7B");
    let mut preferred = 0;
    for hw in ["a100-80gb-sxm", "2x:rtx-4090", "l4", "h100-sxm"] {
        let (d, code) = resolve(dir.path(), "chat", hw, &[]);
        // Fitting plans; the L4's misses the chat preset's per-token SLA (exit 5).
        assert!(code == 0 || code == 5, "{hw}: {code} {:?}", d.warnings);
        assert_eq!(
            code == 5,
            d.status == optimizer::emit::Status::SlaMissed,
            "{hw}"
        );
        assert_eq!(vllm(&d).kv_cache_dtype, "auto");
        for a in &d.alternatives {
            if let Some(i) = a.why.find("uses more memory (") {
                let figures: Vec<f64> = a.why[i + "uses more memory (".len()..]
                    .trim_end_matches(" GiB)")
                    .split(" vs ")
                    .map(|x| x.parse().unwrap())
                    .collect();
                assert!(figures[0] > figures[1], "{hw}: {}", a.why);
            }
            if a.why == "ties on the objective; the workload prefers KV cache type auto" {
                assert_eq!(a.settings.vllm().unwrap().kv_cache_dtype, "fp8");
                preferred += 1;
            }
        }
    }
    assert!(
        preferred >= 3,
        "{preferred} ties decided by the preferred KV type"
    );
}
