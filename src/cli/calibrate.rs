//! `optimizer calibrate`: measures this machine's CPU (bandwidth, FMA, quantized dot products) and records the
//! figures in the measurement store; progress on stderr, a summary on stdout, Ctrl-C keeps what finished.

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use super::calibrate_runner::{Runner, RunnerArgs};
use super::{Common, Failure, OutputFormat, exit, render, write_stdout};
use crate::app::{CalibrateRequest, Calibrated};
use crate::calibrate::cpu::{Machine, STOP};

#[derive(Debug, clap::Args)]
pub(super) struct RawCalibrate {
    /// Micro-benchmarks: one thread and all cores, 3 short repetitions per figure (under a minute on 2 cores).
    /// With --runner: short engine tests (a 64-token prompt, 16 generated tokens, 2 repetitions).
    #[arg(long)]
    quick: bool,
    /// Micro-benchmarks: only the dot products this model's weights need, with its row length. With --runner:
    /// the model the engine benchmarks.
    #[arg(short = 'm', long, value_name = "FILE")]
    model: Option<PathBuf>,
    /// Run an engine's own benchmark over a sweep instead of the micro-benchmarks, and record every result.
    #[arg(long, value_enum, requires = "model")]
    runner: Option<Runner>,
    /// The llama-bench binary (also: LLAMA_BENCH; else `llama-bench` on PATH).
    #[arg(long, value_name = "PATH", requires = "runner")]
    bench: Option<PathBuf>,
    /// Thread counts to sweep (default: the machine's physical cores).
    #[arg(long, value_delimiter = ',', requires = "runner")]
    threads: Vec<u32>,
    /// GPU layers (-ngl) to sweep (default: llama-bench's).
    #[arg(
        long,
        value_delimiter = ',',
        allow_negative_numbers = true,
        requires = "runner"
    )]
    ngl: Vec<i32>,
    /// Batch sizes (-b) to sweep.
    #[arg(long, value_delimiter = ',', requires = "runner")]
    batch: Vec<u32>,
    /// Micro-batch sizes (-ub) to sweep.
    #[arg(long, value_delimiter = ',', requires = "runner")]
    ubatch: Vec<u32>,
    /// Flash attention settings to sweep: on, off, auto (or 1, 0).
    #[arg(long, value_delimiter = ',', requires = "runner")]
    flash_attn: Vec<String>,
    /// K cache types to sweep (f16, q8_0, ...).
    #[arg(long, value_delimiter = ',', requires = "runner")]
    cache_type_k: Vec<String>,
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
}

/// What `calibrate` runs.
#[derive(Debug)]
pub(super) enum Mode {
    /// The CPU micro-benchmarks.
    Micro(CalibrateRequest, OutputFormat),
    /// An engine's benchmark over a sweep (`--runner`).
    Runner(RunnerArgs),
}

pub(super) fn settle(raw: RawCalibrate) -> Mode {
    match (raw.runner, raw.model) {
        (Some(runner), Some(model)) => Mode::Runner(RunnerArgs {
            runner,
            model,
            bench: raw.bench,
            threads: raw.threads,
            ngl: raw.ngl,
            batch: raw.batch,
            ubatch: raw.ubatch,
            flash_attn: raw.flash_attn,
            cache_type_k: raw.cache_type_k,
            quick: raw.quick,
            format: raw.format,
        }),
        (_, model) => Mode::Micro(
            CalibrateRequest {
                quick: raw.quick,
                model,
            },
            raw.format,
        ),
    }
}

/// Ctrl-C finishes the step under way and keeps what finished; a second Ctrl-C while it finishes ends the process
/// at once (exit 130, the shell's code for SIGINT; the run stays incomplete and is never used). `ctrlc` runs the
/// handler on its own thread, not in signal context, and handles SIGINT on Unix and Ctrl-C on Windows alike.
fn catch_interrupt() {
    // An error here means a handler is already set (a second calibration in one process): it stops this one too.
    let _ = ctrlc::set_handler(|| {
        if STOP.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
        }
    });
}

/// Human units for a figure.
fn human(value: f64, unit: &str) -> String {
    match unit {
        "bytes/s" => format!("{:.2} GB/s", value / 1e9),
        "FLOP/s" => format!("{:.1} GFLOP/s", value / 1e9),
        "weights/s" => format!("{:.2} G weights/s", value / 1e9),
        u => format!("{value:.4} {u}"),
    }
}

fn table(c: &Calibrated) -> String {
    use super::table::{left, right};
    let mut t = format!(
        "calibrate: run {} on {} ({}), kernels {}, {:.1} s\n\n",
        c.run, c.device_name, c.device_profile, c.isa, c.seconds,
    );
    let mut figures = super::table::Table::new(&[
        left("figure", 40),
        right("best", 18),
        right("spread", 9),
        left("rows", 0).gap(2),
    ]);
    for f in &c.figures {
        let spread = if f.max > 0.0 {
            format!("{:.1} %", (f.max - f.min) / f.max * 100.0)
        } else {
            "-".into()
        };
        // One row per repetition, interleaved with the other figures' (`measurements list` shows them all).
        let rows = match (f.rows.first(), f.rows.last()) {
            (Some(a), Some(b)) if f.rows.len() > 1 => format!("{a}..{b} ({})", f.rows.len()),
            (Some(a), _) => a.to_string(),
            _ => "-".into(),
        };
        figures.row([f.what.clone(), human(f.value, &f.unit), spread, rows]);
    }
    t.push_str(&figures.render());
    if let Some(n) = c.bandwidth_saturates_at_threads {
        t.push_str(&format!(
            "\nread bandwidth reaches {:.0} % of its most at {n} thread(s)\n",
            crate::app::SATURATION_SHARE * 100.0
        ));
    }
    for n in &c.notes {
        t.push_str(&format!("note: {n}\n"));
    }
    for f in &c.failed {
        t.push_str(&format!("failed: {f}\n"));
    }
    if c.stopped {
        t.push_str(
            "stopped by Ctrl-C: the figures above are recorded in an incomplete run, which no plan uses; the rest did not run\n",
        );
    }
    t
}

pub(super) fn run(common: &Common, mode: &Mode) -> Result<(), Failure> {
    match mode {
        Mode::Micro(req, format) => micro(common, req, *format),
        Mode::Runner(args) => super::calibrate_runner::run(args, common),
    }
}

fn micro(common: &Common, req: &CalibrateRequest, format: OutputFormat) -> Result<(), Failure> {
    catch_interrupt();
    let bar = indicatif::ProgressBar::new(0);
    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} [{elapsed}]")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut machine = Machine::default();
    let mut gpus = |ordinal: u32| {
        crate::calibrate::gpu::CudaBench::new(ordinal as usize)
            .map(|b| Box::new(b) as Box<dyn crate::calibrate::gpu::GpuBench>)
    };
    let done = crate::app::calibrate(
        common,
        req,
        &mut machine,
        &mut gpus,
        &STOP,
        &mut |i, n, label| {
            bar.set_length(n as u64);
            bar.set_position(i as u64);
            bar.set_message(label.to_string());
        },
    );
    bar.finish_and_clear();
    let done = done?;
    let text = match format {
        OutputFormat::Table => table(&done),
        f => render(&done, f)?,
    };
    write_stdout(&text)?;
    if done.stopped {
        return Err(Failure::new(
            exit::INTERRUPTED,
            anyhow::anyhow!(
                "interrupted: calibrate run {} stays incomplete and no plan uses it",
                done.run
            ),
        ));
    }
    Ok(())
}
