//! The vLLM memory model against the public start-up logs in tests/fixtures/vllm/public-logs.yaml. Every figure
//! compared is parsed from the entry's verbatim `lines`; the model's configuration comes from the published
//! config.json (tests/it/vllm_builder). Checks, per usable entry:
//! - weights: "Loading model weights took X GB" (V0 prints GiB under the name GB: `float(x / GiB_bytes)`) or
//!   "Model loading took X GiB", within 1 % per rank;
//! - KV arithmetic: blocks and tokens from the logged KV memory ("Available KV cache memory" or V0's
//!   `kv_cache_size`) must equal the logged "GPU KV cache size" / "# GPU blocks" up to the 0.005 GiB rounding of
//!   the logged memory; with TP > 1 the logged memory is one rank's, while vLLM takes the smallest rank's block
//!   count (`get_kv_cache_configs`), so there the logged tokens may sit below ours by the ranks' non-torch spread
//!   (0.09 GiB in `vllm-16570`), and no further;
//! - tokens at the logged utilization (vLLM 0.33-era V1 logs only: V0 subtracted non-torch memory from the
//!   budget, 0.33 does not), within 3 %;
//! - round 3 (vLLM 0.27.1-0.31.0 logs that print the ledger line): each ledger term against the plan's, and the
//!   tokens at the logged utilization within 3 % where the logged profile is 0.33's in the terms that matter
//!   (`round_three_ledger_logs_term_by_term` says which and why).
//!
//! The table of per-entry errors is printed (`cargo test --test vllm_public_logs -- --nocapture`).

use crate::vllm_builder;

use optimizer::memory::vllm::{self, Dtype, KvCacheDtype, Params};
use optimizer::model::safetensors::StDtype;
use vllm_builder::{
    DEEPSEEK_V2_LITE, GIB, LLAMA31_8B, LLAMA31_70B, Pack, QWEN3_8B, QWEN3_14B, QWEN3_32B,
    QWEN3_235B_A22B_FP8, QWEN25_7B, build,
};

fn entries() -> Vec<serde_yaml_ng::Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/vllm/public-logs.yaml"
    );
    let text = std::fs::read_to_string(path).expect("public-logs.yaml");
    let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("yaml");
    doc["entries"].as_sequence().expect("entries").clone()
}

fn entry(id: &str) -> serde_yaml_ng::Value {
    entries()
        .into_iter()
        .find(|e| e["id"].as_str() == Some(id))
        .unwrap_or_else(|| panic!("entry {id} missing from public-logs.yaml"))
}

/// The number after `key` in the entry's lines (commas removed).
fn figure(e: &serde_yaml_ng::Value, key: &str) -> f64 {
    let line = lines_with(e, key)
        .next()
        .unwrap_or_else(|| panic!("{key} not in entry {}", e["id"].as_str().unwrap_or("?")));
    number_after(line, key)
}

fn params(tp: u32, max_model_len: u32, max_num_seqs: u32, batched: u32) -> Params {
    Params {
        tensor_parallel: tp,
        dtype: Dtype::Bfloat16,
        kv_cache_dtype: KvCacheDtype::Auto,
        block_size: vllm::DEFAULT_BLOCK_SIZE,
        max_model_len,
        max_num_seqs,
        max_num_batched_tokens: batched,
        enforce_eager: false,
        gpu: vllm::GpuFacts::default(),
    }
}

struct Row {
    id: &'static str,
    check: &'static str,
    logged: f64,
    ours: f64,
}

impl Row {
    fn err(&self) -> f64 {
        (self.ours - self.logged) / self.logged
    }
}

fn print(rows: &[Row]) {
    eprintln!("| entry | check | logged | ours | error |");
    eprintln!("|---|---|---|---|---|");
    for r in rows {
        eprintln!(
            "| {} | {} | {} | {:.4} | {:+.2} % |",
            r.id,
            r.check,
            r.logged,
            r.ours,
            100.0 * r.err()
        );
    }
}

#[test]
fn weights_within_one_percent() {
    let mut rows = Vec::new();
    let llama = build(LLAMA31_8B, StDtype::BF16, Pack::None);
    for id in [
        "vllm-10517-llama31-8b-3090-20k",
        "vllm-10517-llama31-8b-3090-29k",
    ] {
        let e = entry(id);
        let w = vllm::weights(&llama, 1, Dtype::Bfloat16).unwrap();
        rows.push(Row {
            id,
            check: "weights GiB",
            logged: figure(&e, "Loading model weights took"),
            ours: w.per_rank_bytes as f64 / GIB,
        });
    }
    // vLLM 0.5.0 predates MLA in vLLM (no W_UK/W_UV copies), so the comparison leaves them out.
    let e = entry("vllm-pr4650-deepseek-v2-lite-v050");
    let ds = build(DEEPSEEK_V2_LITE, StDtype::BF16, Pack::None);
    let w = vllm::weights(&ds, 1, Dtype::Bfloat16).unwrap();
    rows.push(Row {
        id: "vllm-pr4650-deepseek-v2-lite-v050",
        check: "weights GiB (no MLA copies)",
        logged: figure(&e, "Loading model weights took"),
        ours: (w.per_rank_bytes - w.mla_decompressed_bytes) as f64 / GIB,
    });
    print(&rows);
    for r in &rows {
        assert!(r.err().abs() <= 0.01, "{}: {:+.2} %", r.id, 100.0 * r.err());
    }
}

/// Tokens from the logged KV memory, both rounding ends of its two decimals.
fn tokens_from_logged(kv_gib: f64, k: &vllm::Kv, p: &Params) -> (u64, u64) {
    let lo = ((kv_gib - 0.005) * GIB) as u64;
    let hi = ((kv_gib + 0.005) * GIB) as u64;
    (
        vllm::kv_capacity(lo, k, p).tokens,
        vllm::kv_capacity(hi, k, p).tokens,
    )
}

#[test]
fn kv_arithmetic_from_the_logged_memory() {
    let mut rows = Vec::new();
    let mut check = |id: &'static str,
                     spec: &optimizer::model::ModelSpec,
                     p: Params,
                     mem_key: &str,
                     tok_key: &str,
                     per_block: bool| {
        let e = entry(id);
        let k = vllm::kv(spec, &p).unwrap();
        let mem = figure(&e, mem_key);
        let logged = figure(&e, tok_key);
        let logged_tokens = if per_block {
            logged * f64::from(p.block_size)
        } else {
            logged
        };
        let (lo, hi) = tokens_from_logged(mem, &k, &p);
        let slack = if p.tensor_parallel > 1 {
            0.09 * GIB / k.bytes_per_block as f64 * 16.0
        } else {
            0.0
        };
        assert!(
            (lo as f64 - slack) <= logged_tokens && logged_tokens <= hi as f64,
            "{id}: logged {logged_tokens} tokens outside [{lo}, {hi}] (slack {slack:.0}) from {mem} GiB"
        );
        rows.push(Row {
            id,
            check: "KV tokens from logged memory",
            logged: logged_tokens,
            ours: ((lo + hi) / 2) as f64,
        });
    };
    let llama = build(LLAMA31_8B, StDtype::BF16, Pack::None);
    check(
        "vllm-10517-llama31-8b-3090-20k",
        &llama,
        params(1, 20_000, 256, 20_000),
        "kv_cache_size=",
        "GPU blocks:",
        true,
    );
    check(
        "vllm-10517-llama31-8b-3090-29k",
        &llama,
        params(1, 29_000, 256, 29_000),
        "kv_cache_size=",
        "GPU blocks:",
        true,
    );
    let q14 = build(QWEN3_14B, StDtype::BF16, Pack::None);
    check(
        "lmcache-1739-qwen3-14b",
        &q14,
        params(1, 32_768, 256, 2048),
        "Available KV cache memory:",
        "GPU KV cache size:",
        false,
    );
    let q8 = build(QWEN3_8B, StDtype::BF16, Pack::None);
    check(
        "lmcache-3430-qwen3-8b-24gb-cudagraph-profiling",
        &q8,
        params(1, 16_384, 256, 2048),
        "Available KV cache memory:",
        "GPU KV cache size:",
        false,
    );
    let q235 = build(QWEN3_235B_A22B_FP8, StDtype::BF16, Pack::Fp8Block);
    // max_model_len not passed: the config's 40960.
    check(
        "vllm-21348-qwen3-235b-a22b-fp8-4xh100",
        &q235,
        params(4, 40_960, 1024, 8192),
        "Available KV cache memory:",
        "GPU KV cache size:",
        false,
    );
    print(&rows);
}

/// Qwen3-8B on a 24 GB card at --gpu-memory-utilization 0.9764 (vLLM >= 0.21, the 0.33 budget): defaults for
/// a GPU under 70 GiB behind the OpenAI server are max_num_batched_tokens 2048, max_num_seqs 256
/// (vllm/engine/arg_utils.py). ASSUMPTION: total memory 23.58 GiB, the RTX 3090 figure logged in
/// `vllm-10517` (the entry says only "24 GB GPU"; the logged 0.52 GiB = 0.0221 of total fixes it to 23.5 ± 0.5).
/// The CUDA graph term was first fitted on this entry's V1 estimate; it is now the bound of the V2 captures
/// (`the_cuda_graph_term_covers_every_v2_capture_logged`), 9 % above this estimate. The log is the V1 runner's
/// (`gpu_model_runner.py`), so it does not check the V2 profiling peak the plan now counts (that peak and the
/// sampler buffers come within 0.1 GiB of the V1 figure here); round 3 reads the V2 terms.
#[test]
fn tokens_at_the_logged_utilization() {
    let e = entry("lmcache-3430-qwen3-8b-24gb-cudagraph-profiling");
    let q8 = build(QWEN3_8B, StDtype::BF16, Pack::None);
    let p = params(1, 16_384, 256, 2048);
    let total = (23.58 * GIB) as u64;
    let nk = vllm::non_kv(&q8, &p).unwrap();
    let req = vllm::requested_bytes(total, 0.9764);
    let avail = vllm::available_kv_bytes(req, &nk).unwrap();
    let k = vllm::kv(&q8, &p).unwrap();
    let cap = vllm::kv_capacity(avail, &k, &p);
    let rows = [
        Row {
            id: "lmcache-3430",
            check: "CUDA graph GiB (V1 estimate)",
            logged: figure(&e, "Estimated CUDA graph memory:"),
            ours: nk.cuda_graph_bytes as f64 / GIB,
        },
        Row {
            id: "lmcache-3430",
            check: "available KV GiB",
            logged: figure(&e, "Available KV cache memory:"),
            ours: avail as f64 / GIB,
        },
        Row {
            id: "lmcache-3430",
            check: "KV tokens at util 0.9764",
            logged: figure(&e, "GPU KV cache size:"),
            ours: cap.tokens as f64,
        },
    ];
    // Activation held out on the V0 log too: the 29000-token run of Llama-3.1-8B (fit on the 20000-token run).
    let llama = build(LLAMA31_8B, StDtype::BF16, Pack::None);
    let mut act = Vec::new();
    for (id, tokens) in [
        ("vllm-10517-llama31-8b-3090-20k", 20_000u32),
        ("vllm-10517-llama31-8b-3090-29k", 29_000),
    ] {
        let e = entry(id);
        let peak =
            figure(&e, "peak_torch_memory=") - figure(&e, "Loading model weights took") * 1.0;
        let a = vllm::non_kv(&llama, &params(1, tokens, 256, tokens))
            .unwrap()
            .activation_peak_bytes;
        act.push(Row {
            id,
            check: if tokens == 20_000 {
                "activation GiB (fit point)"
            } else {
                "activation GiB (held out)"
            },
            logged: (peak * 100.0).round() / 100.0,
            ours: a as f64 / GIB,
        });
    }
    print(&rows);
    print(&act);
    assert!(
        rows[2].err().abs() <= 0.03,
        "tokens {:+.2} %",
        100.0 * rows[2].err()
    );
    assert!(
        act[1].err().abs() <= 0.03,
        "held-out activation {:+.2} %",
        100.0 * act[1].err()
    );
}

/// How the logged vLLM version turned the budget into KV memory (vllm/v1/worker/gpu_worker.py
/// `determine_available_memory` at each version).
#[derive(Clone, Copy)]
enum Budget {
    /// V1 before the CUDA-graph estimate: `requested − (weights + torch peak increase + non-torch increase)`;
    /// graphs were captured after the KV cache and not budgeted. The non-torch increase is the log's own where
    /// it prints it, else the plan's constant for the tensor-parallel size.
    BeforeGraphEstimate { non_torch_gib: Option<f64> },
    /// The pinned 0.33: `requested − (weights + the runner's sampler buffers + activation peak + CUDA-graph
    /// estimate)`, [`vllm::available_kv_bytes`].
    Pinned,
}

/// One log of round 2 (the entries after the `round 2` marker in public-logs.yaml).
struct Logged {
    id: &'static str,
    config: &'static str,
    tp: u32,
    /// The GPU's CUDA total in GiB (see the test's doc for each source).
    total_gib: f64,
    util: f64,
    max_model_len: u32,
    max_num_seqs: u32,
    batched: u32,
    block_size: u32,
    enforce_eager: bool,
    budget: Budget,
    weights: At,
    kv: At,
}

/// Column `n` (from 0, after the leading `|`) of the first table row in the entry's lines: the llm-d summary
/// table's rows are `| model | status | weights | activation | non-torch | CUDA graph | available KV | TP | len |`.
fn cell(e: &serde_yaml_ng::Value, n: usize) -> f64 {
    let row = e["lines"]
        .as_sequence()
        .and_then(|l| {
            l.iter()
                .filter_map(|x| x.as_str())
                .find(|x| x.starts_with('|'))
        })
        .unwrap_or_else(|| panic!("no table row in {}", e["id"].as_str().unwrap_or("?")));
    let cells: Vec<&str> = row.split('|').map(str::trim).collect();
    cells[n + 1]
        .parse()
        .unwrap_or_else(|_| panic!("column {n} of {row}"))
}

/// Where an entry's figure is: after a phrase in its lines, or in a column of its table row.
#[derive(Clone, Copy)]
enum At {
    Phrase(&'static str),
    Column(usize),
}

fn at(e: &serde_yaml_ng::Value, a: At) -> f64 {
    match a {
        At::Phrase(k) => figure(e, k),
        At::Column(n) => cell(e, n),
    }
}

/// Round 2: public logs of vLLM V1 0.10.1.1 to 0.27.1 (committed log files, notes and a blog source).
///
/// Asserted: the weights per rank within 1 % of "Model loading took" on ten logs (the plan's own weight
/// model; dense models only: the AWQ, MXFP4 and NVFP4 checkpoints of round 2 are checked for their KV
/// arithmetic below, not their weights), and the failed TP-1 run of Qwen3-32B refused by the plan too.
///
/// Reported, NOT asserted: the KV memory the plan predicts at the logged utilization. The logged versions
/// profile differently from the pinned 0.33, so their non-KV memory is not what the plan models: the llm-d
/// logs (0.11, 1024 sequences) show a sampler pass of about 30-37 bytes per logit (4.76 GiB for Llama-3.1-8B,
/// 5.56 GiB for Qwen3-0.6B), dennislee22's (0.10.1.1, 256 sequences) about 0.56 GiB in all besides the weights,
/// where 0.33's Model Runner V2 sampler keeps 14 on a FlashInfer GPU and holds penalty bins of 4.125 bytes per
/// sequence slot and token for good (crates/memory/src/vllm/activation.rs); and the versions before the
/// CUDA-graph estimate did not budget graphs. The errors (`cargo test --test vllm_public_logs round_two --
/// --nocapture`) are the measure of that gap until a 0.33 start-up is logged. The totals used:
/// - dennislee22 (A100 80GB, Qwen2-7B-Instruct): the log does not print it; two runs at utilizations 0.25
///   and 0.5, otherwise identical, fix it as ΔKV / Δutil (79.28 GiB at TP 1, 79.24 GiB at TP 2; public A100
///   80GB totals are 79.15-79.26 GiB, crates/core/profiles/hardware/a100-80gb-sxm.yaml). Qwen2-7B-Instruct's config.json
///   has the shape keys of Qwen2.5-7B-Instruct's (hidden 3584, 28 layers, 28/4 heads, vocab 152064,
///   max_position_embeddings 32768), so QWEN25_7B stands for it. 256 sequences, 2048 batched tokens (logged).
/// - llm-d-benchmark (H100, 79.18 GiB as the author logged it, --block-size 128): 1024 sequences and 8192
///   batched tokens, the defaults for a ≥ 70 GiB non-A100 GPU behind the API server; the non-torch increase
///   is the author's transcribed figure.
/// - kubesimplify (2× RTX PRO 6000, 95.01 GiB as logged, 0.27.1).
/// - ilseokoh (GCE a2-highgpu-1g = one A100-SXM4-40GB, 0.15.1, offline `LLM()`, eager): the total is the
///   profile's deviceQuery figure for that part (42,298,834,944 B); 8192 batched tokens as logged.
#[test]
fn round_two_logs_weights_within_one_percent() {
    let q2 = |id, tp, util| Logged {
        id,
        config: QWEN25_7B,
        tp,
        total_gib: 0.0,
        util,
        max_model_len: 16_384,
        max_num_seqs: 256,
        batched: 2048,
        block_size: 16,
        enforce_eager: false,
        budget: Budget::BeforeGraphEstimate {
            non_torch_gib: None,
        },
        weights: At::Phrase("Model loading took"),
        kv: At::Phrase("Available KV cache memory:"),
    };
    let llmd = |id, config, tp, non_torch, weights, kv| Logged {
        id,
        config,
        tp,
        total_gib: 79.18,
        util: 0.9,
        max_model_len: 16_000,
        max_num_seqs: 1024,
        batched: 8192,
        block_size: 128,
        enforce_eager: false,
        budget: Budget::BeforeGraphEstimate {
            non_torch_gib: Some(non_torch),
        },
        weights,
        kv,
    };
    // The A100 80GB totals from each pair of runs (ΔKV / Δutil), from the logged figures alone.
    let pair_total = |a: &str, b: &str| {
        let (ka, kb) = (
            figure(&entry(a), "Available KV cache memory:"),
            figure(&entry(b), "Available KV cache memory:"),
        );
        (kb - ka) / 0.25
    };
    let tp1 = pair_total(
        "dennislee-qwen2-7b-a100-80g-util025",
        "dennislee-qwen2-7b-a100-80g-util050",
    );
    let tp2 = pair_total(
        "dennislee-qwen2-7b-2xa100-80g-tp2-util025",
        "dennislee-qwen2-7b-2xa100-80g-tp2-util050",
    );
    let cases = [
        Logged {
            total_gib: tp1,
            ..q2("dennislee-qwen2-7b-a100-80g-util025", 1, 0.25)
        },
        Logged {
            total_gib: tp1,
            ..q2("dennislee-qwen2-7b-a100-80g-util050", 1, 0.5)
        },
        Logged {
            total_gib: tp2,
            ..q2("dennislee-qwen2-7b-2xa100-80g-tp2-util025", 2, 0.25)
        },
        Logged {
            total_gib: tp2,
            ..q2("dennislee-qwen2-7b-2xa100-80g-tp2-util050", 2, 0.5)
        },
        llmd(
            "llmd-llama31-8b-h100-16k",
            LLAMA31_8B,
            1,
            0.13,
            At::Phrase("Model loading took:"),
            At::Phrase("Available KV cache memory:"),
        ),
        llmd(
            "llmd-qwen3-32b-h100-tp1-16k",
            QWEN3_32B,
            1,
            0.14,
            At::Column(2),
            At::Column(6),
        ),
        llmd(
            "llmd-qwen3-32b-2xh100-tp2-16k",
            QWEN3_32B,
            2,
            0.54,
            At::Column(2),
            At::Column(6),
        ),
        Logged {
            id: "kubesimplify-qwen3-32b-2xrtxpro6000-tp2-v0271",
            config: QWEN3_32B,
            tp: 2,
            total_gib: 95.01,
            util: 0.426,
            max_model_len: 32_768,
            max_num_seqs: 1024,
            batched: 8192,
            block_size: 16,
            enforce_eager: false,
            budget: Budget::Pinned,
            weights: At::Phrase("Model loading took"),
            kv: At::Phrase("Available KV cache memory:"),
        },
        Logged {
            id: "ilseokoh-llama31-8b-a100-40g-eager-v0151",
            config: LLAMA31_8B,
            tp: 1,
            total_gib: 42_298_834_944.0 / GIB,
            util: 0.9,
            max_model_len: 131_072,
            max_num_seqs: 256,
            batched: 8192,
            block_size: 16,
            enforce_eager: true,
            budget: Budget::BeforeGraphEstimate {
                non_torch_gib: None,
            },
            weights: At::Phrase("Model loading took"),
            kv: At::Phrase("Available KV cache memory:"),
        },
    ];
    let mut weights = Vec::new();
    let mut at_util = Vec::new();
    for c in &cases {
        let e = entry(c.id);
        let spec = build(c.config, StDtype::BF16, Pack::None);
        let p = Params {
            block_size: c.block_size,
            enforce_eager: c.enforce_eager,
            ..params(c.tp, c.max_model_len, c.max_num_seqs, c.batched)
        };
        let nk = vllm::non_kv(&spec, &p).unwrap();
        let requested = vllm::requested_bytes((c.total_gib * GIB) as u64, c.util);
        let kv = match c.budget {
            Budget::Pinned => vllm::available_kv_bytes(requested, &nk).map_or(0.0, |b| b as f64),
            Budget::BeforeGraphEstimate { non_torch_gib } => {
                let non_torch = non_torch_gib.map_or(nk.non_torch_bytes as f64, |g| g * GIB);
                requested as f64
                    - nk.weights.per_rank_bytes as f64
                    - nk.activation_peak_bytes as f64
                    - non_torch
            }
        };
        weights.push(Row {
            id: c.id,
            check: "weights GiB per rank",
            logged: at(&e, c.weights),
            ours: nk.weights.per_rank_bytes as f64 / GIB,
        });
        at_util.push(Row {
            id: c.id,
            check: "KV GiB at the logged utilization (reported)",
            logged: at(&e, c.kv),
            ours: kv / GIB,
        });
    }
    // The TP-1 run that failed: at 0.426 of 95.01 GiB the plan must leave nothing for the KV cache, as vLLM
    // said ("Available KV cache memory: -24.42 GiB").
    let id = "kubesimplify-qwen3-32b-rtxpro6000-tp1-fail-v0271";
    let spec = build(QWEN3_32B, StDtype::BF16, Pack::None);
    let nk = vllm::non_kv(&spec, &params(1, 32_768, 1024, 8192)).unwrap();
    weights.push(Row {
        id,
        check: "weights GiB (run that does not fit)",
        logged: figure(&entry(id), "Model loading took"),
        ours: nk.weights.per_rank_bytes as f64 / GIB,
    });
    let requested = vllm::requested_bytes((95.01 * GIB) as u64, 0.426);
    assert!(
        vllm::available_kv_bytes(requested, &nk).is_err(),
        "the plan finds KV room where vLLM found -24.42 GiB"
    );
    print(&weights);
    print(&at_util);
    let logs: std::collections::BTreeSet<&str> = weights.iter().map(|r| r.id).collect();
    assert!(logs.len() >= 10, "{} logs", logs.len());
    for r in &weights {
        assert!(r.err().abs() <= 0.01, "{}: {:+.2} %", r.id, 100.0 * r.err());
    }
}

/// Round 2, the page arithmetic: tokens (or blocks) from each log's own KV memory equal the logged count up to
/// the 0.005 GiB rounding of the memory, on ten logs of vLLM 0.10.1.1 to 0.27.1, dense, AWQ and NVFP4
/// checkpoints alike (the KV layout depends on the attention shapes only). Flags as logged; block size 16 (the
/// default) unless the entry says otherwise. Meta-Llama-3-70B (kagaho) has Llama-3.1-70B's attention shapes
/// (80 layers, 64/8 heads of 128); the Qwen3-8B NVFP4 checkpoint (dongjangoon) has Qwen3-8B's.
#[test]
fn round_two_kv_arithmetic_from_the_logged_memory() {
    let mut rows = Vec::new();
    let mut check = |id: &'static str, config: &str, p: Params| {
        let e = entry(id);
        let spec = build(config, StDtype::BF16, Pack::None);
        let k = vllm::kv(&spec, &p).unwrap();
        let mem = figure(&e, "Available KV cache memory:");
        let logged = figure(&e, "GPU KV cache size:");
        let (lo, hi) = tokens_from_logged(mem, &k, &p);
        assert!(
            lo as f64 <= logged && logged <= hi as f64,
            "{id}: logged {logged} tokens outside [{lo}, {hi}] from {mem} GiB"
        );
        rows.push(Row {
            id,
            check: "KV tokens from logged memory",
            logged,
            ours: ((lo + hi) / 2) as f64,
        });
    };
    for (id, tp) in [
        ("dennislee-qwen2-7b-a100-80g-util025", 1),
        ("dennislee-qwen2-7b-a100-80g-util050", 1),
        ("dennislee-qwen2-7b-2xa100-80g-tp2-util025", 2),
        ("dennislee-qwen2-7b-2xa100-80g-tp2-util050", 2),
        ("dennislee-qwen2-7b-2xa100-40g-tp2-2nodes-util050", 2),
    ] {
        check(id, QWEN25_7B, params(tp, 16_384, 256, 2048));
    }
    for (id, config, p) in [
        (
            "kubesimplify-qwen3-32b-2xrtxpro6000-tp2-v0271",
            QWEN3_32B,
            params(2, 32_768, 1024, 8192),
        ),
        (
            "ilseokoh-llama31-8b-a100-40g-eager-v0151",
            LLAMA31_8B,
            params(1, 131_072, 256, 8192),
        ),
        (
            "kagaho-llama3-70b-awq-2xl40s-tp2-v0160",
            LLAMA31_70B,
            params(2, 8192, 256, 2048),
        ),
        (
            "akiyax-qwen25-7b-awq-rtx4080-v0260",
            QWEN25_7B,
            params(1, 32_768, 256, 2048),
        ),
        (
            "dongjangoon-qwen3-8b-nvfp4-rtx5070ti-v0230",
            QWEN3_8B,
            params(1, 8192, 256, 2048),
        ),
    ] {
        check(id, config, p);
    }
    print(&rows);
}

/// The entry's lines that hold `anchor`.
fn lines_with<'a>(e: &'a serde_yaml_ng::Value, anchor: &'a str) -> impl Iterator<Item = &'a str> {
    e["lines"]
        .as_sequence()
        .expect("lines")
        .iter()
        .filter_map(|x| x.as_str())
        .filter(move |l| l.contains(anchor))
}

/// The number right after `key` in `line` (commas removed).
fn number_after(line: &str, key: &str) -> f64 {
    let i = line
        .find(key)
        .unwrap_or_else(|| panic!("{key:?} not in {line}"));
    let num: String = line[i + key.len()..]
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ',')
        .filter(|c| *c != ',')
        .collect();
    num.trim_end_matches('.')
        .parse()
        .unwrap_or_else(|_| panic!("{key:?} in {line}"))
}

mod round_three;
