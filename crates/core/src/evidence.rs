//! What the measurement store knows about these devices and this model, as values the planner consumes: measured
//! efficiencies, measured throughput points and measured peak memory, each with the store row it came from. The
//! store builds it; the planner decides what it changes and records the basis (`analytic`, `calibrated`,
//! `measured`) and the row ids in the document's provenance.

use serde::{Deserialize, Serialize};

use crate::profile::{Phase, RuntimeId};

/// Where the efficiencies (and so the predictions) come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Basis {
    /// Peak figures from profiles or the probe, efficiencies from the rule tables.
    Analytic,
    /// Efficiencies fitted from measurements of this device class.
    Calibrated,
    /// Measured on this device.
    Measured,
}

/// An achieved share of a device's peak, measured or fitted from measurements.
#[derive(Debug, Clone, PartialEq)]
pub struct MeasuredEfficiency {
    /// The store's measurement row id.
    pub row: i64,
    pub device_profile: String,
    pub runtime: RuntimeId,
    pub phase: Phase,
    pub value: f64,
    /// `calibrated` (a micro-benchmark or fit over a device class) or `measured` (this device, this engine).
    pub basis: Basis,
    /// The run's tool, for the provenance line (`calibrate`, `llama-bench import`).
    pub what: String,
}

/// Tokens per second the engine reached on a device for a model, at a request shape.
#[derive(Debug, Clone, PartialEq)]
pub struct ThroughputPoint {
    pub row: i64,
    pub device_profile: String,
    pub runtime: RuntimeId,
    pub phase: Phase,
    pub tokens_per_s: f64,
    /// Sequences decoded together, when the row says.
    pub concurrency: Option<u64>,
    /// The shape it was taken at, when the row says: CPU threads, `-ngl` (0: the CPU alone), micro-batch, and
    /// the tokens of the test (the prompt for prefill, the generated tokens for decode).
    pub threads: Option<u32>,
    pub gpu_layers: Option<u32>,
    pub ubatch: Option<u32>,
    /// GPUs one replica spanned with tensor parallelism, when the row says.
    pub tensor_parallel: Option<u32>,
    pub tokens: Option<u64>,
    pub what: String,
}

/// The most memory a run of the engine took on a device for a model.
#[derive(Debug, Clone, PartialEq)]
pub struct PeakMemory {
    pub row: i64,
    pub device_profile: String,
    pub runtime: RuntimeId,
    pub bytes: u64,
    /// What the memory model estimated for that device in that configuration, when the row says (an
    /// observation of a planned deployment records it): the excess is what the model missed.
    pub estimated_bytes: Option<u64>,
    /// The measurement's conditions as recorded (JSON).
    pub context: String,
    /// An out-of-memory (`observe --oom`): the engine needed more than the device had free, by an amount the
    /// observation does not tell; `bytes` is then the device's capacity plus one, a lower bound.
    pub oom: bool,
}

impl PeakMemory {
    /// Bytes the engine used beyond the estimate (0 when the estimate held or none was recorded, and for an
    /// out-of-memory, which says only that more was needed: see [`OOM_STEP_SHARE`]).
    pub(crate) fn excess(&self) -> u64 {
        if self.oom {
            return 0;
        }
        self.estimated_bytes
            .map_or(0, |e| self.bytes.saturating_sub(e))
    }
}

/// What one out-of-memory adds to a device's reserve, as a share of the estimate it happened at: an OOM says the
/// engine needed more than was free, not how much more (another process may have taken the room), so each one
/// widens the reserve by a step the size of the memory model's error where it is not exact (under a tenth), and
/// a peak measured later replaces them. Trade-off: a real shortfall larger than a step takes several OOMs (or
/// one `observe --peak-memory`) to learn, rather than one OOM taking the whole headroom for good.
pub const OOM_STEP_SHARE: f64 = 0.10;

/// The run tool of `optimizer calibrate` with optimised kernels: the only runs whose CPU figures describe the CPU
/// (`calibrate::cpu::DEBUG_BUILD_TOOL` marks the others).
pub const CALIBRATE_TOOL: &str = "calibrate";

/// A CPU micro-benchmark figure of `optimizer calibrate`: a device figure, for every model.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuFigure {
    pub row: i64,
    pub run: i64,
    pub device_profile: String,
    /// The CPU's name as the probe reports it (the class profile alone would mix CPUs of one class).
    pub device_name: String,
    /// Physical cores of the host the run was taken on, when the run names its host: a name alone does not
    /// tell CPUs apart (a KVM guest reports "AMD EPYC" whatever the part).
    pub host_cores: Option<u32>,
    /// `cpu_read_bytes_per_s`, `cpu_fma_flops`, `cpu_dot_q4_0_params_per_s`, ...
    pub metric: String,
    pub threads: u32,
    pub value: f64,
    /// The instruction set the kernels ran with, when the row says.
    pub isa: Option<String>,
}

/// Largest spread (worst over best, below 1) the repetitions of one CPU figure may have for a plan to use it:
/// beyond it the machine was busy while it measured, and which repetition is the CPU's is anyone's guess.
/// Trade-off: a figure half as fast as its best repetition on a shared machine is refused, and the CPU keeps its
/// rule efficiencies until a quieter calibration, rather than a plan trusting either repetition.
pub const MAX_CPU_SPREAD: f64 = 0.5;

/// Whether repetitions from `min` to `max` spread more than [`MAX_CPU_SPREAD`].
pub fn noisy(min: f64, max: f64) -> bool {
    max > 0.0 && (max - min) / max > MAX_CPU_SPREAD
}

/// One calibration of a CPU as curves over the thread count: what `perf` predicts a calibrated CPU with.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CpuCalibration {
    /// The run the figures come from (the newest complete one for this CPU).
    pub run: i64,
    pub isa: Option<String>,
    /// Read bandwidth, bytes/s, by threads.
    pub read: Vec<(u32, f64)>,
    /// FP32 FMA FLOP/s, by threads.
    pub fma: Vec<(u32, f64)>,
    /// Quantized GEMV weights/s by ggml type name (`q4_0`, `q8_0`, `q4_k`), by threads.
    pub dot: Vec<(String, Vec<(u32, f64)>)>,
    /// The store rows used.
    pub rows: Vec<i64>,
}

impl CpuCalibration {
    /// The newest complete calibration run among `figures` for the CPU `name` of class `profile` on a host of
    /// `cores` physical cores (a run that names no host is taken on the name alone).
    pub fn newest(
        figures: &[CpuFigure],
        profile: &str,
        name: &str,
        cores: u32,
    ) -> Option<CpuCalibration> {
        let mine = || {
            figures.iter().filter(move |f| {
                f.device_profile == profile
                    && f.device_name == name
                    && f.host_cores.is_none_or(|c| c == cores)
            })
        };
        let run = mine().map(|f| f.run).max()?;
        let mut c = CpuCalibration {
            run,
            ..CpuCalibration::default()
        };
        // The repetitions of one figure (metric, threads) that spread too far are left out together.
        let spread = |f: &CpuFigure| {
            let same =
                mine().filter(|g| g.run == run && g.metric == f.metric && g.threads == f.threads);
            let (lo, hi) = same.fold((f64::INFINITY, 0.0f64), |(lo, hi), g| {
                (lo.min(g.value), hi.max(g.value))
            });
            noisy(lo, hi)
        };
        for f in mine().filter(|f| f.run == run && !spread(f)) {
            c.rows.push(f.row);
            if c.isa.is_none() {
                c.isa.clone_from(&f.isa);
            }
            let point = (f.threads, f.value);
            if f.metric == "cpu_read_bytes_per_s" {
                c.read.push(point);
            } else if f.metric == "cpu_fma_flops" {
                c.fma.push(point);
            } else if let Some(t) = f
                .metric
                .strip_prefix("cpu_dot_")
                .and_then(|m| m.strip_suffix("_params_per_s"))
            {
                match c.dot.iter_mut().find(|(n, _)| n == t) {
                    Some((_, v)) => v.push(point),
                    None => c.dot.push((t.to_string(), vec![point])),
                }
            }
        }
        Some(c)
    }

    /// Read bandwidth at `threads`: interpolated between measured thread counts, the nearest measured figure
    /// outside them.
    pub fn read_at(&self, threads: f64) -> Option<f64> {
        interpolate(&self.read, threads, false)
    }

    /// FMA FLOP/s per thread at `threads` (interpolated per thread, the nearest per-thread figure outside).
    pub(crate) fn fma_per_thread_at(&self, threads: f64) -> Option<f64> {
        interpolate(&self.fma, threads, true)
    }

    /// GEMV weights/s per thread of a ggml type (`q4_0`, `q8_0`, `q4_k`) at `threads`.
    pub(crate) fn dot_per_thread_at(&self, ty: &str, threads: f64) -> Option<f64> {
        self.dot
            .iter()
            .find(|(n, _)| n == ty)
            .and_then(|(_, p)| interpolate(p, threads, true))
    }
}

/// Linear interpolation of `points` (threads, value) at `x`, holding the nearest point outside the measured
/// range; `per_thread` interpolates value / threads instead. `None` without points: nothing is invented.
pub(crate) fn interpolate(points: &[(u32, f64)], x: f64, per_thread: bool) -> Option<f64> {
    let mut p: Vec<(f64, f64)> = points
        .iter()
        .filter(|(t, v)| *t > 0 && v.is_finite() && *v > 0.0)
        .map(|&(t, v)| {
            let t = f64::from(t);
            (t, if per_thread { v / t } else { v })
        })
        .collect();
    p.sort_by(|a, b| a.0.total_cmp(&b.0));
    p.dedup_by(|a, b| {
        a.0 == b.0 && {
            b.1 = b.1.max(a.1);
            true
        }
    });
    let first = *p.first()?;
    let last = *p.last()?;
    if x <= first.0 {
        return Some(first.1);
    }
    if x >= last.0 {
        return Some(last.1);
    }
    p.windows(2).find(|w| x <= w[1].0).map(|w| {
        let (a, b) = (w[0], w[1]);
        a.1 + (b.1 - a.1) * (x - a.0) / (b.0 - a.0)
    })
}

/// Everything the store returned for one plan.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Evidence {
    pub efficiencies: Vec<MeasuredEfficiency>,
    pub throughput: Vec<ThroughputPoint>,
    pub peak_memory: Vec<PeakMemory>,
    /// CPU micro-benchmark figures (`optimizer calibrate`).
    pub cpu: Vec<CpuFigure>,
    /// Rows the store holds for these devices and this model (whether or not the planner can use them);
    /// `None` when the store was not consulted.
    pub rows: Option<u64>,
    /// Why the store was not consulted, for the document's warnings.
    pub unavailable: Option<String>,
}

impl Evidence {
    /// No store: the plan is analytic, and says why.
    pub fn unavailable(why: impl Into<String>) -> Evidence {
        Evidence {
            unavailable: Some(why.into()),
            ..Evidence::default()
        }
    }

    /// Whether anything here can change a plan.
    pub fn is_empty(&self) -> bool {
        self.efficiencies.is_empty()
            && self.throughput.is_empty()
            && self.peak_memory.is_empty()
            && self.cpu.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolation_is_linear_inside_and_holds_the_nearest_outside() {
        let p = [(1, 10.0), (4, 40.0), (2, 30.0)];
        assert_eq!(interpolate(&p, 1.5, false), Some(20.0));
        assert_eq!(interpolate(&p, 3.0, false), Some(35.0));
        assert_eq!(interpolate(&p, 0.5, false), Some(10.0));
        assert_eq!(interpolate(&p, 16.0, false), Some(40.0));
        // Per thread: 10, 15, 10 per thread at 1, 2, 4 threads.
        assert_eq!(interpolate(&p, 3.0, true), Some(12.5));
        assert_eq!(interpolate(&p, 8.0, true), Some(10.0));
        assert_eq!(interpolate(&[], 2.0, false), None);
    }

    #[test]
    fn the_newest_run_of_the_same_cpu_is_the_calibration() {
        let fig = |row, run, name: &str, metric: &str, threads, value| CpuFigure {
            row,
            run,
            device_profile: "cpu-x".into(),
            device_name: name.into(),
            host_cores: Some(2),
            metric: metric.into(),
            threads,
            value,
            isa: Some("avx2+fma+f16c".into()),
        };
        let figs = [
            fig(1, 1, "EPYC", "cpu_read_bytes_per_s", 1, 5e9),
            fig(2, 2, "EPYC", "cpu_read_bytes_per_s", 1, 12e9),
            fig(3, 2, "EPYC", "cpu_dot_q4_0_params_per_s", 2, 24e9),
            fig(4, 3, "Xeon", "cpu_read_bytes_per_s", 1, 30e9),
        ];
        let c = CpuCalibration::newest(&figs, "cpu-x", "EPYC", 2).unwrap();
        assert_eq!(c.run, 2);
        assert_eq!(c.rows, vec![2, 3]);
        assert_eq!(c.read_at(4.0), Some(12e9));
        assert_eq!(c.dot_per_thread_at("q4_0", 2.0), Some(12e9));
        assert_eq!(c.fma_per_thread_at(1.0), None);
        assert!(CpuCalibration::newest(&figs, "cpu-y", "EPYC", 2).is_none());
        // The same name on a host of other cores is another machine.
        assert!(CpuCalibration::newest(&figs, "cpu-x", "EPYC", 64).is_none());
    }
}
