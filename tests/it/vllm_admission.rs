//! vLLM 0.33's admission rule in `resolve` (issue 28, item 2): a plan fits when vLLM would start, i.e. its KV cache
//! holds one request at `--max-model-len` beside the null block (vllm/v1/core/kv_cache_planning.py
//! `get_kv_cache_configs`, `_check_enough_kv_cache_memory`), and `--max-num-seqs` is chosen from the KV pool, the
//! workload's concurrency and its SLA. Every figure asserted is derived here from Llama-3.1-8B's shapes and vLLM's
//! arithmetic: 32 layers × K and V × 16 tokens × 8 KV heads × 128 × 2 bytes = 2 MiB per block (bf16).

use crate::common;

use common::vllm_models;
use optimizer::emit::{Deployment, Source, Status, VllmSettings};

/// One KV block of Llama-3.1-8B in bf16 (vllm/v1/kv_cache_interface.py `AttentionSpec.page_size_bytes`, all layers).
const PAGE_BF16: u64 = 32 * 2 * 16 * 8 * 128 * 2;
const FULL: u64 = 131_072;
/// Blocks a batch-inference request holds: 161 + 338 = 499 tokens in blocks of 16.
const REQUEST_BLOCKS: u64 = 499_u64.div_ceil(16);

fn resolve(workload: &str, hardware: &str, extra: &[&str]) -> (Deployment, i32) {
    let dir = vllm_models::materialize("Llama-3.1-8B-Instruct");
    common::resolve_doc("cpu-server.yaml", dir.path(), workload, hardware, extra)
}

fn vllm(d: &Deployment) -> &VllmSettings {
    d.settings.vllm().expect("a vLLM plan")
}

/// vLLM's capacity line for a pool of `blocks` blocks at `len` tokens per request (kv_cache_utils.py
/// `update_kv_cache_capacity`), with Python's `{:,}` and `%.2f`.
fn vllm_log(blocks: u64, len: u64) -> String {
    let sep = |n: u64| {
        let s = n.to_string();
        let mut o = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i).is_multiple_of(3) {
                o.push(',');
            }
            o.push(c);
        }
        o
    };
    let per_request = len.div_ceil(16);
    let conc = blocks as f64 / per_request as f64;
    format!(
        "GPU KV cache size: {} tokens, Maximum concurrency for {} tokens per request: {conc:.2}x",
        sep((conc * len as f64) as u64),
        sep(len)
    )
}

#[test]
fn a_public_configuration_of_256_sequences_at_full_context_plans_instead_of_being_refused() {
    // Llama-3.1-8B BF16 on one H100, --max-model-len 131072, --max-num-seqs 256: 256 full-length requests would
    // need 256 × 16 GiB; vLLM starts with one (16 GiB + the null block) and schedules the rest.
    let (d, code) = resolve(
        "batch-inference",
        "h100-sxm",
        &["-c", "131072", "--parallel", "256", "--kv-type", "auto"],
    );
    assert_eq!(code, 0, "{:?} {:?}", d.warnings, d.suggestions);
    assert_eq!(d.status, Status::Fits);
    let s = vllm(&d);
    assert_eq!((s.max_model_len, s.max_num_seqs), (131_072, 256));
    assert_eq!(s.kv_cache_dtype, "auto");
    assert_eq!(s.kv_cache_memory_bytes % PAGE_BF16, 0, "whole blocks");
    let blocks = s.kv_cache_memory_bytes / PAGE_BF16;
    assert_eq!(s.kv_cache_blocks, blocks);
    assert!(
        blocks > FULL / 16 + 1,
        "one full-length request and the null block"
    );
    // What vLLM logs with this --kv-cache-memory-bytes: tokens = int(blocks / 8192 × 131072) = blocks × 16.
    assert_eq!(s.kv_cache_tokens, blocks * 16);
    assert!((s.max_concurrency - blocks as f64 / 8192.0).abs() < 1e-3);
    let why = &d.provenance["settings.max_concurrency"].detail;
    assert!(why.contains(&vllm_log(blocks, FULL)), "{why}");
    let seqs = &d.provenance["settings.max_num_seqs"];
    assert_eq!(seqs.source, Source::User);
    assert!(
        seqs.detail.contains("at the full --max-model-len 131072"),
        "{}",
        seqs.detail
    );
}

#[test]
fn a_throughput_plan_at_full_context_chooses_max_num_seqs_instead_of_exiting_3() {
    let (d, code) = resolve(
        "batch-inference",
        "h100-sxm",
        &["-c", "131072", "--kv-type", "auto"],
    );
    assert_eq!(code, 0, "{:?}", d.suggestions);
    let s = vllm(&d);
    let blocks = s.kv_cache_blocks;
    // The pool holds (blocks − null block) / 32 of the preset's 499-token requests: more than its 256.
    assert!((blocks - 1) / REQUEST_BLOCKS >= 256);
    assert_eq!(s.max_num_seqs, 256, "the workload's concurrency");
    assert_eq!(
        d.provenance["settings.max_num_seqs"].source,
        Source::Profile
    );
}

#[test]
fn the_public_full_context_logs_vllm_started_plan_on_their_gpus() {
    // v031-llama31-8b-a100-80g-defaults (3.51x) and ilseokoh-llama31-8b-a100-40g-eager-v0151 (1.20x): vLLM started
    // Llama-3.1-8B at 131072 tokens with its default 256 sequences; the plan for the same GPU must fit.
    for (hardware, extra) in [
        ("a100-80gb-sxm", &[][..]),
        ("a100-40gb-sxm", &["--kv-type", "auto"][..]),
    ] {
        let mut args = vec!["-c", "131072", "--parallel", "256"];
        args.extend_from_slice(extra);
        let (d, code) = resolve("batch-inference", hardware, &args);
        assert_eq!(code, 0, "{hardware}: {:?}", d.suggestions);
        assert!(vllm(&d).max_concurrency >= 1.0, "{hardware}");
    }
}

#[test]
fn a_full_length_request_that_does_not_fit_is_refused_and_the_shorter_context_offered_fits() {
    // An L4 (22 GiB) holds 15 GiB of weights and not a 16 GiB request of 131072 tokens.
    let (d, code) = resolve(
        "batch-inference",
        "l4",
        &["-c", "131072", "--kv-type", "auto"],
    );
    assert_eq!(code, 3);
    let shorter = d
        .suggestions
        .iter()
        .find_map(|s| s.split("(resolve -c ").nth(1))
        .and_then(|t| t.trim_end_matches(')').parse::<u64>().ok())
        .expect("a shorter context is offered");
    let c = shorter.to_string();
    let (d2, code2) = resolve("batch-inference", "l4", &["-c", &c, "--kv-type", "auto"]);
    assert_eq!(code2, 0, "{:?}", d2.suggestions);
    let s = vllm(&d2);
    assert!(
        s.kv_cache_blocks > shorter.div_ceil(16),
        "one request and the null block"
    );
}

#[test]
fn a_batch_plan_lowers_max_num_seqs_to_the_requests_the_kv_pool_holds() {
    // Llama-3.1-8B on an L4 at the preset's 4096 tokens with a bf16 cache: the pool holds fewer than 256 of its
    // 499-token requests, so --max-num-seqs is what it holds (null block apart) rather than a preempting 256.
    let (d, code) = resolve("batch-inference", "l4", &["--kv-type", "auto"]);
    assert_eq!(code, 0, "{:?}", d.suggestions);
    let s = vllm(&d);
    let held = (s.kv_cache_blocks - 1) / REQUEST_BLOCKS;
    assert!(held < 256, "{held}");
    // The most slots whose own pool holds them: fewer slots free a little memory (sampler buffers, CUDA-graph
    // sizes), so the pool at the chosen count holds it and at most a couple more.
    let n = u64::from(s.max_num_seqs);
    assert!(n <= held && held - n <= 2, "{n} of {held}");
    let p = &d.provenance["settings.max_num_seqs"];
    assert_eq!(p.source, Source::Computed);
    assert!(
        p.detail.contains("most sequences the KV pool holds"),
        "{}",
        p.detail
    );
}

#[test]
fn a_pinned_max_num_seqs_past_the_pool_plans_with_a_preemption_warning() {
    let (d, code) = resolve(
        "batch-inference",
        "l4",
        &["--kv-type", "auto", "--parallel", "256"],
    );
    assert_eq!(code, 0, "{:?}", d.suggestions);
    assert_eq!(vllm(&d).max_num_seqs, 256);
    assert!(
        d.warnings
            .iter()
            .any(|w| w.contains("preempts running requests")),
        "{:?}",
        d.warnings
    );
}

#[test]
fn a_throughput_workload_with_an_sla_lowers_max_num_seqs_to_meet_it() {
    let overlay = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(overlay.path().join("workloads")).unwrap();
    let dir = vllm_models::materialize("Llama-3.1-8B-Instruct");
    let write = |tpot: &str| {
        let src = if tpot.is_empty() {
            ""
        } else {
            "sla.time_per_output_token_ms: test"
        };
        let w = format!(
            "id: batch-sla\ndescription: batch with a per-token bound\nmode: inference\nobjective: throughput\n\
             context: {{policy: fixed, tokens: 4096}}\nconcurrency: 256\nprompt_tokens: 161\ngeneration_tokens: 338\n\
             {tpot}precision: {{kv_cache: [f16], compute: auto}}\n\
             sources: {{context.tokens: test, concurrency: test, prompt_tokens: test, generation_tokens: test, {src}}}\n"
        );
        std::fs::write(overlay.path().join("workloads/batch-sla.yaml"), w).unwrap();
        common::resolve_doc_with(
            "cpu-server.yaml",
            Some(overlay.path()),
            dir.path(),
            "batch-sla",
            "h100-sxm",
            &[],
        )
    };
    // Without an SLA: the workload's 256. The bound is then set between the one-sequence step and that one.
    let (free, code) = write("");
    assert_eq!(code, 0);
    assert_eq!(vllm(&free).max_num_seqs, 256);
    let at_256 = free.performance.time_per_output_token_ms;
    let bound = at_256 * 0.9;
    let (d, code) = write(&format!("sla: {{time_per_output_token_ms: {bound}}}\n"));
    assert_eq!(code, 0, "{:?}", d.warnings);
    let s = vllm(&d);
    assert!((1..256).contains(&s.max_num_seqs), "{}", s.max_num_seqs);
    assert!(d.performance.time_per_output_token_ms <= bound);
    let p = &d.provenance["settings.max_num_seqs"];
    assert!(p.detail.contains("meets its SLA"), "{}", p.detail);
}
