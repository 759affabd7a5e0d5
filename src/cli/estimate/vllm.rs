//! `optimizer estimate` for vLLM: `vllm serve`'s own flag names (vllm/engine/arg_utils.py of the pinned 0.33.0),
//! so a pasted `vllm serve MODEL ...` line works; its flags that do not change memory are set aside and named in
//! a note, as the llama.cpp estimate does.

use std::ffi::OsString;
use std::fmt::Write;

use clap::{Args, ValueEnum};

use super::super::output::human_bytes;
use super::super::{Failure, exit};
use crate::runtime::vllm::estimate::{ServeFlags, VllmEstimate};

/// `vllm serve` flags a pasted line may hold that do not change GPU memory, and whether each takes a value
/// (vllm/entrypoints/openai/cli_args.py and vllm/engine/arg_utils.py; tests/fixtures/vllm/serve-flags-0.33.0.txt
/// lists every option the pinned parser has).
pub(super) const NO_MEMORY_EFFECT: &[(&str, bool)] = &[
    ("--host", true),
    ("--port", true),
    ("--served-model-name", true),
    ("--api-key", true),
    ("--uvicorn-log-level", true),
    ("--chat-template", true),
    ("--tool-call-parser", true),
    ("--reasoning-parser", true),
    ("--seed", true),
    ("--tokenizer", true),
    ("--revision", true),
    ("--download-dir", true),
    ("--generation-config", true),
    ("--trust-remote-code", false),
    ("--enable-auto-tool-choice", false),
    ("--enable-prefix-caching", false),
    ("--no-enable-prefix-caching", false),
    ("--disable-log-stats", false),
    ("--disable-log-requests", false),
    ("--enable-log-requests", false),
    ("--disable-uvicorn-access-log", false),
];

/// The `vllm serve` flags with a memory effect that clap takes in short spellings vLLM uses.
pub(super) const SHORT: &[(&str, &str)] = &[
    ("-tp", "--tensor-parallel-size"),
    ("-pp", "--pipeline-parallel-size"),
    ("-q", "--quantization"),
];

/// Whether the arguments after `estimate` are a vLLM estimate: a pasted `vllm serve` line or `--runtime vllm`.
pub(super) fn is_vllm_line(args: &[OsString]) -> bool {
    args.windows(2)
        .any(|w| (w[0] == "vllm" && w[1] == "serve") || (w[0] == "--runtime" && w[1] == "vllm"))
        || args.iter().any(|a| a == "--runtime=vllm")
}

/// A pasted `vllm serve MODEL` becomes `-m MODEL` (unless `-m` was given: then MODEL is noted as ignored).
pub(super) fn paste(args: Vec<OsString>) -> Vec<OsString> {
    let has_m = args.iter().any(|a| a == "-m" || a == "--model");
    let mut out = Vec::with_capacity(args.len());
    let mut it = args.into_iter().peekable();
    while let Some(a) = it.next() {
        if a == "vllm" && it.peek().is_some_and(|n| n == "serve") {
            it.next();
            if let Some(m) = it.next_if(|m| !m.to_string_lossy().starts_with('-')) {
                if has_m {
                    out.push("--ignored".into());
                    out.push(format!("served model {}", m.to_string_lossy()).into());
                } else {
                    out.push("-m".into());
                    out.push(m);
                }
            }
            continue;
        }
        out.push(a);
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum RawRuntime {
    #[value(name = "llama.cpp", alias = "llama-cpp")]
    LlamaCpp,
    Vllm,
}

/// vLLM's flags (`vllm serve` names).
#[derive(Debug, Args)]
pub(super) struct RawVllm {
    /// The engine to estimate: vLLM for a safetensors checkpoint directory (the default for one), llama.cpp for
    /// a GGUF.
    #[arg(long, value_enum)]
    runtime: Option<RawRuntime>,
    /// vLLM: the share of each GPU's total memory vLLM may use (its default 0.92).
    #[arg(long = "gpu-memory-utilization")]
    gpu_memory_utilization: Option<f64>,
    /// vLLM: tokens per request (default: the model's max_position_embeddings); 1k = 1000, 1K = 1024.
    #[arg(long = "max-model-len")]
    max_model_len: Option<String>,
    /// vLLM (-tp).
    #[arg(long = "tensor-parallel-size")]
    tensor_parallel_size: Option<u32>,
    /// vLLM (-pp).
    #[arg(long = "pipeline-parallel-size")]
    pipeline_parallel_size: Option<u32>,
    /// vLLM: sequences per step (default by GPU, vLLM's get_batch_defaults).
    #[arg(long = "max-num-seqs")]
    max_num_seqs: Option<u32>,
    /// vLLM: tokens per step (default by GPU).
    #[arg(long = "max-num-batched-tokens")]
    max_num_batched_tokens: Option<String>,
    /// vLLM: auto or fp8 (fp8_e4m3).
    #[arg(long = "kv-cache-dtype")]
    kv_cache_dtype: Option<String>,
    /// vLLM: no CUDA graphs.
    #[arg(long = "enforce-eager")]
    enforce_eager: bool,
    /// vLLM: the KV cache per GPU in bytes (skips vLLM's profiling); 20G = 20 GiB, 20g = 20e9.
    #[arg(long = "kv-cache-memory-bytes")]
    kv_cache_memory_bytes: Option<String>,
    /// vLLM: auto, bfloat16, float16 (half), float32.
    #[arg(long)]
    dtype: Option<String>,
    /// vLLM (-q): the checkpoint's quantization method.
    #[arg(long)]
    quantization: Option<String>,
    /// vLLM: tokens per KV block (default 16 on CUDA).
    #[arg(long = "block-size")]
    block_size: Option<u32>,
}

/// vLLM's `human_readable_int` (vllm/utils/argparse_utils.py): `k/m/g/t` decimal, `K/M/G/T` binary (no
/// decimals with a binary suffix), else a plain integer.
fn human_int(flag: &str, v: &str) -> Result<u64, Failure> {
    let bad = || {
        Failure::new(
            exit::USAGE,
            anyhow::anyhow!(
                "{flag} {v:?}: an integer, optionally with k, m, g, t (decimal) or K, M, G, T (binary)"
            ),
        )
    };
    let v = v.trim();
    let (num, mult): (&str, Option<(u64, bool)>) = match v.chars().last() {
        Some('k') => (&v[..v.len() - 1], Some((1_000, true))),
        Some('m') => (&v[..v.len() - 1], Some((1_000_000, true))),
        Some('g') => (&v[..v.len() - 1], Some((1_000_000_000, true))),
        Some('t') => (&v[..v.len() - 1], Some((1_000_000_000_000, true))),
        Some('K') => (&v[..v.len() - 1], Some((1 << 10, false))),
        Some('M') => (&v[..v.len() - 1], Some((1 << 20, false))),
        Some('G') => (&v[..v.len() - 1], Some((1 << 30, false))),
        Some('T') => (&v[..v.len() - 1], Some((1 << 40, false))),
        _ => (v, None),
    };
    match mult {
        None => num.parse::<u64>().map_err(|_| bad()),
        Some((m, true)) => {
            let x: f64 = num.parse().map_err(|_| bad())?;
            let r = (x * m as f64).trunc();
            (r.is_finite() && r >= 0.0 && r <= u64::MAX as f64)
                .then_some(r as u64)
                .ok_or_else(bad)
        }
        Some((m, false)) => num
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(m))
            .ok_or_else(bad),
    }
}

fn to_u32(flag: &str, v: u64) -> Result<u32, Failure> {
    u32::try_from(v).map_err(|_| {
        Failure::new(
            exit::USAGE,
            anyhow::anyhow!("{flag} {v}: more than {}", u32::MAX),
        )
    })
}

/// Whether the estimate is vLLM's: `--runtime vllm`, or a model that is a directory or a `.safetensors` file
/// without `--runtime llama.cpp`.
pub(super) fn wanted(raw: &RawVllm, model: &std::path::Path) -> bool {
    match raw.runtime {
        Some(RawRuntime::Vllm) => true,
        Some(RawRuntime::LlamaCpp) => false,
        None => model.is_dir() || model.extension().is_some_and(|e| e == "safetensors"),
    }
}

/// The raw vLLM flags as the core's [`ServeFlags`].
pub(super) fn settle(raw: &RawVllm) -> Result<ServeFlags, Failure> {
    let len = match raw.max_model_len.as_deref() {
        None | Some("auto") | Some("-1") => None,
        Some(v) => Some(to_u32("--max-model-len", human_int("--max-model-len", v)?)?),
    };
    let batched = match raw.max_num_batched_tokens.as_deref() {
        None => None,
        Some(v) => Some(to_u32(
            "--max-num-batched-tokens",
            human_int("--max-num-batched-tokens", v)?,
        )?),
    };
    Ok(ServeFlags {
        gpu_memory_utilization: raw.gpu_memory_utilization,
        max_model_len: len,
        tensor_parallel_size: raw.tensor_parallel_size,
        pipeline_parallel_size: raw.pipeline_parallel_size,
        max_num_seqs: raw.max_num_seqs,
        max_num_batched_tokens: batched,
        kv_cache_dtype: raw.kv_cache_dtype.clone(),
        enforce_eager: raw.enforce_eager,
        kv_cache_memory_bytes: raw
            .kv_cache_memory_bytes
            .as_deref()
            .map(|v| human_int("--kv-cache-memory-bytes", v))
            .transpose()?,
        dtype: raw.dtype.clone(),
        quantization: raw.quantization.clone(),
        block_size: raw.block_size,
    })
}

/// The vLLM estimate as a table.
pub(super) fn table(e: &VllmEstimate) -> String {
    use super::super::table::{left, right};
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{} on {} ({}), tensor parallel {}: --dtype {}, --kv-cache-dtype {}, --max-model-len {}, --max-num-seqs {}, --max-num-batched-tokens {}, --gpu-memory-utilization {}{}",
        e.engine,
        e.devices.join(", "),
        e.gpu,
        e.tensor_parallel_size,
        e.dtype,
        e.kv_cache_dtype,
        e.max_model_len,
        e.max_num_seqs,
        e.max_num_batched_tokens,
        e.gpu_memory_utilization,
        if e.enforce_eager {
            ", --enforce-eager"
        } else {
            ""
        }
    );
    // Name, bytes, and for the requested share what it is a share of.
    let mut ledger =
        super::super::table::Table::headless(&[left("", 32).gap(2), right("", 12), left("", 0)]);
    let rows = [
        ("weights", e.weights_bytes),
        ("non-torch (CUDA context, NCCL)", e.non_torch_bytes),
        ("profiling peak", e.activation_peak_bytes),
        ("sampler buffers", e.runner_buffers_bytes),
        ("CUDA graphs", e.cuda_graph_bytes),
        ("KV cache", e.kv_cache_bytes),
        ("total per GPU", e.total_bytes),
    ];
    for (name, b) in rows {
        ledger.row([name.to_string(), human_bytes(b)]);
    }
    ledger.row([
        "requested (total x utilization)".to_string(),
        human_bytes(e.requested_bytes),
        format!(
            "of {} total, {} free",
            human_bytes(e.memory_total_bytes),
            human_bytes(e.memory_free_bytes)
        ),
    ]);
    o.push_str(&ledger.render());
    let _ = writeln!(
        o,
        "KV cache: {} blocks of {} tokens = {} tokens; {:.2} requests at --max-model-len {} at once (vLLM starts from {})",
        e.kv_cache_blocks,
        e.block_size,
        e.kv_cache_tokens,
        e.max_concurrency,
        e.max_model_len,
        human_bytes(e.admission_bytes)
    );
    match (&e.error, &e.log) {
        (Some(err), _) => {
            let _ = writeln!(o, "vLLM would not start: {err}");
        }
        (None, Some(log)) => {
            let _ = writeln!(o, "vLLM would start and log: {log}");
        }
        (None, None) => {}
    }
    for n in &e.notes {
        let _ = writeln!(o, "note: {n}");
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_int_reads_vllms_suffixes() {
        assert_eq!(human_int("f", "128k").ok(), Some(128_000));
        assert_eq!(human_int("f", "128K").ok(), Some(131_072));
        assert_eq!(human_int("f", "25.6k").ok(), Some(25_600));
        assert_eq!(human_int("f", "20G").ok(), Some(20 << 30));
        assert!(
            human_int("f", "1.5G").is_err(),
            "no decimals with a binary suffix"
        );
        assert_eq!(human_int("f", "4096").ok(), Some(4096));
    }

    #[test]
    fn a_pasted_vllm_serve_line_names_the_model() {
        let args: Vec<OsString> = ["estimate", "vllm", "serve", "/m", "--max-model-len", "8k"]
            .into_iter()
            .map(OsString::from)
            .collect();
        assert!(is_vllm_line(&args));
        let out = paste(args);
        assert_eq!(out, ["estimate", "-m", "/m", "--max-model-len", "8k"]);
    }
}
