//! What a GPU calibration measures ([`GpuPlan`] and its steps) and the loop that runs the steps, reporting
//! progress, honouring the stop flag and collecting results and failures.

use std::sync::atomic::{AtomicBool, Ordering};

use super::steps::run_step;
use super::{
    DeviceInfo, GEMV_BATCHES, GpuBench, GpuDtype, GpuError, GpuResult, KNEE_TOLERANCE, LayerShape,
    Peaks, Timing,
};

/// What to measure.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuPlan {
    pub shapes: Vec<LayerShape>,
    /// Layouts whose GEMV is timed at [`GpuPlan::gemv_batches`].
    pub gemv_dtypes: Vec<GpuDtype>,
    pub gemv_batches: Vec<u32>,
    /// Types whose GEMM is sized and swept over batch.
    pub gemm_dtypes: Vec<GpuDtype>,
    /// Whether to measure D2D, H2D and read bandwidth.
    pub bandwidth: bool,
    pub peaks: Option<Peaks>,
    pub timing: Timing,
    pub knee_tolerance: f64,
}

impl GpuPlan {
    /// Everything at `shapes` (the model's, or [`DEFAULT_SHAPES`](super::DEFAULT_SHAPES)).
    pub fn full(shapes: &[LayerShape], peaks: Option<Peaks>) -> GpuPlan {
        GpuPlan {
            shapes: shapes.to_vec(),
            gemv_dtypes: GpuDtype::ALL.into_iter().filter(|d| d.has_gemv()).collect(),
            gemv_batches: GEMV_BATCHES.to_vec(),
            gemm_dtypes: GpuDtype::ALL.to_vec(),
            bandwidth: true,
            peaks,
            timing: Timing::FULL,
            knee_tolerance: KNEE_TOLERANCE,
        }
    }

    /// `--quick`: batch-1 GEMVs, f16 and the given quantized types' GEMMs, short timings.
    pub fn quick(shapes: &[LayerShape], peaks: Option<Peaks>) -> GpuPlan {
        GpuPlan {
            gemv_batches: vec![1],
            gemm_dtypes: vec![GpuDtype::F16],
            timing: Timing::QUICK,
            ..GpuPlan::full(shapes, peaks)
        }
    }

    /// Only what a model whose weights are `dtypes` needs (f16 GEMM always: prefill efficiency comes from it).
    pub fn limit_to(mut self, dtypes: &[GpuDtype]) -> GpuPlan {
        self.gemv_dtypes.retain(|d| dtypes.contains(d));
        self.gemm_dtypes
            .retain(|d| *d == GpuDtype::F16 || dtypes.contains(d));
        self
    }

    fn steps(&self, info: &DeviceInfo, notes: &mut Vec<String>) -> Vec<Step> {
        let mut steps = Vec::new();
        if self.bandwidth {
            steps.extend([Step::Read, Step::CopyD2D, Step::CopyH2D]);
        }
        let mut usable =
            |d: GpuDtype, s: LayerShape| match d.shape_defect(s).or_else(|| info.unsupported(d)) {
                Some(why) => {
                    notes.push(format!("skipped {d} at {s}: {why}"));
                    false
                }
                None => true,
            };
        for &d in &self.gemv_dtypes {
            for &s in &self.shapes {
                if d.has_gemv() && usable(d, s) {
                    steps.push(Step::Gemv(d, s));
                }
            }
        }
        for &d in &self.gemm_dtypes {
            for &s in &self.shapes {
                if usable(d, s) {
                    steps.push(Step::Gemm(d, s));
                }
            }
        }
        steps
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    Read,
    CopyD2D,
    CopyH2D,
    Gemv(GpuDtype, LayerShape),
    Gemm(GpuDtype, LayerShape),
}

impl Step {
    pub(super) fn label(&self) -> String {
        match self {
            Step::Read => "read bandwidth".into(),
            Step::CopyD2D => "device-to-device copy".into(),
            Step::CopyH2D => "host-to-device copy".into(),
            Step::Gemv(d, s) => format!("GEMV {d} {s}"),
            Step::Gemm(d, s) => format!("GEMM {d} {s}"),
        }
    }
}

/// Progress: step `step` (1-based) of `total` is starting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    pub step: usize,
    pub total: usize,
    pub label: String,
}

/// A run's outcome: what was measured (in order), what failed and why, and whether it was stopped.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuCalibration {
    pub device: DeviceInfo,
    pub results: Vec<GpuResult>,
    /// Steps that failed (label, error); the run goes on with the next step.
    pub failures: Vec<(String, GpuError)>,
    /// Steps left out before starting (a shape a layout cannot hold, fp8 on an older GPU).
    pub notes: Vec<String>,
    /// The stop flag was raised: the results hold what finished before it.
    pub stopped: bool,
}

/// Runs `plan` on `bench`, calling `progress` before each step and checking `stop` between steps and between
/// batch points; a failed step is recorded in `failures` and the run goes on.
pub fn run(
    bench: &mut dyn GpuBench,
    plan: &GpuPlan,
    progress: &mut dyn FnMut(Progress),
    stop: &AtomicBool,
) -> GpuCalibration {
    let mut notes = Vec::new();
    let steps = plan.steps(bench.info(), &mut notes);
    let mut out = GpuCalibration {
        device: bench.info().clone(),
        results: Vec::new(),
        failures: Vec::new(),
        notes,
        stopped: false,
    };
    for (i, step) in steps.iter().enumerate() {
        if stop.load(Ordering::Relaxed) {
            out.stopped = true;
            break;
        }
        progress(Progress {
            step: i + 1,
            total: steps.len(),
            label: step.label(),
        });
        let mut results = Vec::new();
        let mut held = Vec::new();
        let outcome = run_step(bench, plan, *step, stop, &mut held, &mut results);
        for b in held {
            if let Err(e) = bench.free(b) {
                out.failures.push((format!("{}: free", step.label()), e));
            }
        }
        out.results.extend(results);
        if let Err(e) = outcome {
            out.failures.push((step.label(), e));
        }
    }
    if stop.load(Ordering::Relaxed) {
        out.stopped = true;
    }
    out
}
