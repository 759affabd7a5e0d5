//! `calibrate --runner llama-bench`: the engine sweep's flags ([`RunnerArgs`], a clap `Args` struct to flatten
//! under `calibrate`), validated into a [`Sweep`], run through `calibrate::runner`, progress on stderr and a
//! summary table (or YAML/JSON) on stdout.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::{Common, Failure, OutputFormat, exit, render, write_stdout};
use crate::calibrate::runner::{self, BenchResult, RunnerError, StoreSink, Summary, Sweep};

/// Engines a sweep can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum Runner {
    LlamaBench,
}

/// The sweep's settings (`calibrate --runner` fills them from its flags).
#[derive(Debug, Args)]
pub(super) struct RunnerArgs {
    /// The engine benchmark to run.
    #[arg(long, value_enum)]
    pub runner: Runner,
    /// The model to benchmark (a GGUF file).
    #[arg(short = 'm', long)]
    pub model: PathBuf,
    /// The llama-bench binary (also: LLAMA_BENCH; else `llama-bench` on PATH).
    #[arg(long, value_name = "PATH")]
    pub bench: Option<PathBuf>,
    /// Thread counts to sweep (default: the machine's physical cores).
    #[arg(long, value_delimiter = ',')]
    pub threads: Vec<u32>,
    /// GPU layers (-ngl) to sweep (default: llama-bench's).
    #[arg(long, value_delimiter = ',', allow_negative_numbers = true)]
    pub ngl: Vec<i32>,
    /// Batch sizes (-b) to sweep.
    #[arg(long, value_delimiter = ',')]
    pub batch: Vec<u32>,
    /// Micro-batch sizes (-ub) to sweep.
    #[arg(long, value_delimiter = ',')]
    pub ubatch: Vec<u32>,
    /// Flash attention settings to sweep: on, off, auto (or 1, 0).
    #[arg(long, value_delimiter = ',')]
    pub flash_attn: Vec<String>,
    /// K cache types to sweep (f16, q8_0, ...).
    #[arg(long, value_delimiter = ',')]
    pub cache_type_k: Vec<String>,
    /// Short tests: a 64-token prompt, 16 generated tokens, 2 repetitions (default: llama-bench's 512, 128, 5).
    #[arg(long)]
    pub quick: bool,
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    pub format: OutputFormat,
}

fn usage(m: String) -> Failure {
    Failure::new(exit::USAGE, anyhow::anyhow!(m))
}

/// The sweep the flags describe; `cores` fills an empty `--threads`.
pub(super) fn sweep(args: &RunnerArgs, cores: u32) -> Result<Sweep, Failure> {
    let flash_attn = args
        .flash_attn
        .iter()
        .map(|v| match v.as_str() {
            "on" | "1" => Ok("on".to_string()),
            "off" | "0" => Ok("off".to_string()),
            "auto" => Ok("auto".to_string()),
            _ => Err(usage(format!("--flash-attn {v:?}: on, off or auto (1, 0)"))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let cache_type_k = args
        .cache_type_k
        .iter()
        .map(|v| {
            crate::memory::llama_cpp::CACHE_TYPES
                .iter()
                .find(|t| t.name().eq_ignore_ascii_case(v))
                .map(|t| t.name().to_lowercase())
                .ok_or_else(|| {
                    usage(format!(
                        "--cache-type-k {v:?} is not a cache type llama.cpp accepts"
                    ))
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (prompt_tokens, gen_tokens, repetitions) = if args.quick {
        Sweep::QUICK
    } else {
        Sweep::FULL
    };
    let s = Sweep {
        threads: if args.threads.is_empty() {
            vec![cores.max(1)]
        } else {
            args.threads.clone()
        },
        gpu_layers: args.ngl.clone(),
        batch: args.batch.clone(),
        ubatch: args.ubatch.clone(),
        flash_attn,
        cache_type_k,
        prompt_tokens,
        gen_tokens,
        repetitions,
    };
    s.validate().map_err(|e| Failure::new(exit::USAGE, e))?;
    Ok(s)
}

/// The llama-bench to run: `--bench`, else `LLAMA_BENCH`, else `llama-bench` on PATH.
fn program(args: &RunnerArgs) -> PathBuf {
    args.bench
        .clone()
        .or_else(|| {
            std::env::var_os("LLAMA_BENCH")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from("llama-bench"))
}

pub(super) fn run(args: &RunnerArgs, common: &Common) -> Result<(), Failure> {
    let Runner::LlamaBench = args.runner;
    let spec = crate::model::load(&args.model)?;
    let set = common.profiles()?;
    let (inv, _) = common.inventory()?;
    let s = sweep(args, inv.cpu.physical_cores)?;
    let fleet = crate::fleet::build(&inv, set, crate::profile::RuntimeId::LlamaCpp)
        .map_err(|e| Failure::new(exit::INVALID_INPUT, e))?;
    let store = common.store()?;
    let bench = program(args);
    let argv = s.argv(&args.model);
    let clock = crate::app::now_rfc3339;
    let mut sink = StoreSink {
        store: &store,
        fleet: &fleet,
        model: &spec,
        tool: "calibrate --runner llama-bench".into(),
        host: crate::app::host_identity(&inv),
        settings: serde_json::json!({ "program": bench.display().to_string(), "argv": argv })
            .to_string(),
        clock: &clock,
        run: None,
    };
    let expected = s.tests().unwrap_or(0);
    let mut err = std::io::stderr();
    let _ = writeln!(
        err,
        "llama-bench: {expected} tests on {} ({} -> store {})",
        args.model.display(),
        bench.display(),
        store.path().display()
    );
    let progress = |r: &BenchResult, n: usize| {
        let _ = writeln!(
            std::io::stderr(),
            "[{n}/{expected}] t={} ngl={} b={} ub={} fa={} ctk={} {}: {:.2} tokens/s{}",
            r.threads,
            r.gpu_layers,
            r.batch,
            r.ubatch,
            r.flash_attn,
            r.cache_type_k,
            r.test,
            r.tokens_per_s,
            r.row.map_or_else(
                || " (not recorded)".to_string(),
                |id| format!(" (row {id})")
            )
        );
    };
    let summary = runner::run(&bench, &s, &args.model, &mut sink, progress).map_err(|e| {
        let code = match &e {
            RunnerError::Spawn { .. } => exit::USAGE,
            _ => exit::RUNTIME,
        };
        let f = Failure::new(code, e);
        match sink.run {
            Some(r) => f.hint(format!(
                "run {} keeps what was measured as incomplete (`optimizer measurements show run:{}`; `measurements prune --incomplete` removes it)",
                r.0, r.0
            )),
            None => f.hint("set --bench or LLAMA_BENCH to the pinned llama-bench binary"),
        }
    })?;
    let text = match args.format {
        OutputFormat::Table => table(&summary, sink.run.map(|r| r.0)),
        f => render(
            &serde_json::json!({ "run": sink.run.map(|r| r.0), "results": summary.results }),
            f,
        )?,
    };
    write_stdout(&text)
}

fn table(s: &Summary, run: Option<i64>) -> String {
    use super::table::{left, right};
    let mut results = super::table::Table::new(&[
        right("t", 3),
        right("ngl", 4),
        right("b", 5),
        right("ub", 5),
        right("fa", 3),
        left("ctk", 5),
        left("test", 8),
        right("tokens/s", 12),
        right("stddev", 9),
        right("row", 6),
    ]);
    for r in &s.results {
        results.row([
            r.threads.to_string(),
            r.gpu_layers.to_string(),
            r.batch.to_string(),
            r.ubatch.to_string(),
            r.flash_attn.to_string(),
            r.cache_type_k.clone(),
            r.test.clone(),
            format!("{:.2}", r.tokens_per_s),
            format!("{:.2}", r.stddev),
            r.row.map_or("-".into(), |id| id.to_string()),
        ]);
    }
    let mut t = results.render();
    for r in s.results.iter().filter_map(|r| r.skipped.as_ref()) {
        let _ = writeln!(t, "not recorded: {r}");
    }
    match run {
        Some(id) => {
            let _ = writeln!(t, "run {id}: complete, {} results", s.results.len());
        }
        None => t.push_str("no result was recorded\n"),
    }
    t
}
