//! The vLLM memory model against the public start-up logs in tests/fixtures/vllm/public-logs.yaml. Every figure
//! compared is parsed from the entry's verbatim `lines`; the model's configuration comes from the published
//! config.json (tests/vllm_builder). Checks, per usable entry:
//! - weights: "Loading model weights took X GB" (V0 prints GiB under the name GB: `float(x / GiB_bytes)`) or
//!   "Model loading took X GiB", within 1 % per rank;
//! - KV arithmetic: blocks and tokens from the logged KV memory ("Available KV cache memory" or V0's
//!   `kv_cache_size`) must equal the logged "GPU KV cache size" / "# GPU blocks" up to the 0.005 GiB rounding of
//!   the logged memory; with TP > 1 the logged memory is one rank's, while vLLM takes the smallest rank's block
//!   count (`get_kv_cache_configs`), so there the logged tokens may sit below ours by the ranks' non-torch spread
//!   (0.09 GiB in `vllm-16570`), and no further;
//! - tokens at the logged utilization (vLLM 0.33-era V1 logs only: V0 subtracted non-torch memory from the
//!   budget, 0.33 does not), within 3 %.
//!
//! The table of per-entry errors is printed (`cargo test --test vllm_public_logs -- --nocapture`).

mod vllm_builder;

use optimizer::memory::vllm::{self, Dtype, KvCacheDtype, Params};
use optimizer::model::safetensors::StDtype;
use vllm_builder::{
    DEEPSEEK_V2_LITE, GIB, LLAMA31_8B, Pack, QWEN3_8B, QWEN3_14B, QWEN3_235B_A22B_FP8, build,
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
    for l in e["lines"].as_sequence().expect("lines") {
        let l = l.as_str().unwrap_or("");
        if let Some(i) = l.find(key) {
            let rest = &l[i + key.len()..];
            let num: String = rest
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ',')
                .filter(|c| *c != ',')
                .collect();
            return num
                .trim_end_matches('.')
                .parse()
                .unwrap_or_else(|_| panic!("{key} in {l}"));
        }
    }
    panic!("{key} not in entry {}", e["id"].as_str().unwrap_or("?"))
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
/// The CUDA graph term is fitted on this entry; the activation term is held out here.
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
            check: "CUDA graph GiB (fit point)",
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
