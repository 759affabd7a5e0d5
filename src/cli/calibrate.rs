//! `optimizer calibrate`: measures this machine's CPU (bandwidth, FMA, quantized dot products) and records the
//! figures in the measurement store; progress on stderr, a summary on stdout, Ctrl-C keeps what finished.

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use super::{Common, Failure, OutputFormat, render, write_stdout};
use crate::app::{CalibrateRequest, Calibrated};
use crate::calibrate::cpu::{Machine, STOP};

#[derive(Debug, clap::Args)]
pub struct RawCalibrate {
    /// One thread and all cores, 3 short repetitions per figure (under a minute on 2 cores).
    #[arg(long)]
    quick: bool,
    /// Measure only the dot products this model's weights need, at its layer shape.
    #[arg(long, value_name = "FILE")]
    model: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
}

pub fn settle(raw: RawCalibrate) -> (CalibrateRequest, OutputFormat) {
    (
        CalibrateRequest {
            quick: raw.quick,
            model: raw.model,
        },
        raw.format,
    )
}

#[cfg(unix)]
extern "C" fn on_interrupt(_: libc::c_int) {
    // A second Ctrl-C while the step under way finishes ends the process at once (the run stays incomplete
    // and is never used). Only async-signal-safe calls here: an atomic swap and _exit.
    if STOP.swap(true, Ordering::SeqCst) {
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(130) };
    }
}

fn catch_interrupt() {
    #[cfg(unix)]
    // SAFETY: the handler only touches an atomic and calls _exit.
    unsafe {
        libc::signal(
            libc::SIGINT,
            on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
    }
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
    let mut t = format!(
        "calibrate: run {} on {} ({}), kernels {}, {:.1} s\n\n{:<40} {:>18} {:>14} {:>6}\n",
        c.run, c.device_name, c.device_profile, c.isa, c.seconds, "figure", "best", "spread", "row"
    );
    for f in &c.figures {
        let spread = if f.max > 0.0 {
            format!("{:.1} %", (f.max - f.min) / f.max * 100.0)
        } else {
            "-".into()
        };
        t.push_str(&format!(
            "{:<40} {:>18} {:>14} {:>6}\n",
            f.what,
            human(f.value, &f.unit),
            spread,
            f.row
        ));
    }
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
        t.push_str("stopped by Ctrl-C: the figures above are recorded; the rest did not run\n");
    }
    t
}

pub fn run(common: &Common, req: &CalibrateRequest, format: OutputFormat) -> Result<(), Failure> {
    catch_interrupt();
    let bar = indicatif::ProgressBar::new(0);
    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} [{elapsed}]")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut machine = Machine::default();
    let done = crate::app::calibrate(common, req, &mut machine, &STOP, &mut |i, n, label| {
        bar.set_length(n as u64);
        bar.set_position(i as u64);
        bar.set_message(label.to_string());
    });
    bar.finish_and_clear();
    let done = done?;
    let text = match format {
        OutputFormat::Table => table(&done),
        f => render(&done, f)?,
    };
    write_stdout(&text)
}
