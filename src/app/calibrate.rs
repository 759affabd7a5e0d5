//! `calibrate`: this machine's CPU and GPU micro-benchmarks, recorded as a run of the store.

use super::*;

/// What `optimizer calibrate` is asked to do.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CalibrateRequest {
    /// The short sweep (1 thread and all cores, 3 short repetitions): under a minute on 2 cores.
    pub quick: bool,
    /// Limit the dot products to the weight types this model uses, at its layer shape.
    pub model: Option<PathBuf>,
}

/// One recorded figure of a calibration.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CalibratedFigure {
    /// The store rows of its repetitions (one each; the planner takes the best).
    pub rows: Vec<i64>,
    pub what: String,
    pub metric: String,
    pub threads: u32,
    pub value: f64,
    pub unit: String,
    /// Lowest and highest repetition.
    pub min: f64,
    pub max: f64,
}

/// What a calibration recorded.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Calibrated {
    pub run: i64,
    /// The store's device key: the CPU class profile and the CPU's name.
    pub device_profile: String,
    pub device_name: String,
    pub isa: String,
    pub figures: Vec<CalibratedFigure>,
    /// The fewest threads whose read bandwidth is within [`SATURATION_SHARE`] of the most measured.
    pub bandwidth_saturates_at_threads: Option<u32>,
    pub failed: Vec<String>,
    /// Ctrl-C: the steps after the last recorded one did not run.
    pub stopped: bool,
    pub notes: Vec<String>,
    pub seconds: f64,
}

/// Read bandwidth counts as saturated at 90 % of the most any thread count reached.
pub const SATURATION_SHARE: f64 = 0.9;

/// Opens the benchmark of the CUDA GPU with this ordinal (the real one through the driver, or a mock).
pub type GpuBenchFactory<'a> = dyn FnMut(u32) -> Result<Box<dyn crate::calibrate::gpu::GpuBench>, crate::calibrate::gpu::GpuError>
    + 'a;

/// Measures this CPU with `bench` (the real loops, or a mock in tests), then each NVIDIA GPU the inventory lists
/// through `gpu_bench`, and records every figure as it finishes in one `calibrate` run; the run is marked complete at the end. A run
/// `stop` cut short stays `incomplete`, as does one whose process died: its figures are kept for `measurements
/// show` but no plan uses them (a partial calibration, newer than a whole one, would replace it with half the
/// curves). A figure whose repetitions spread by more than `evidence::MAX_CPU_SPREAD` is recorded and said to be
/// noisy; plans do not use it.
pub fn calibrate(
    sources: &Sources,
    req: &CalibrateRequest,
    bench: &mut dyn crate::calibrate::cpu::CpuBench,
    gpu_bench: &mut GpuBenchFactory<'_>,
    stop: &std::sync::atomic::AtomicBool,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<Calibrated, Failure> {
    use crate::calibrate::cpu::{Plan, Step, Stream, to_measurement};
    let started = std::time::Instant::now();
    let set = sources.profiles()?;
    let (inv, _) = sources.inventory()?;
    let fleet = crate::fleet::build(&inv, set, crate::profile::RuntimeId::LlamaCpp)
        .map_err(|e| Failure::new(exit::INVALID_INPUT, e))?;
    let spec = req
        .model
        .as_deref()
        .map(crate::model::load)
        .transpose()
        .map_err(Failure::from)?;
    // The inventory sizes the plan; this machine bounds it (the inventory may describe another or a wrong one).
    let capacity = bench.capacity();
    let mut bounded = Vec::new();
    let mut cores = fleet.host.usable_cores();
    if let Some(t) = capacity.threads.filter(|t| *t < cores) {
        bounded.push(format!(
            "the inventory gives {cores} cores; this machine runs {t} threads at once: the sweep stops at {t}"
        ));
        cores = t.max(1);
    }
    let available = capacity
        .available_bytes
        .map_or(inv.memory.available_bytes, |a| {
            a.min(inv.memory.available_bytes)
        });
    let mut plan = Plan::new(
        req.quick,
        cores,
        (
            inv.cpu.caches.as_ref().and_then(|c| c.l2_bytes),
            inv.cpu.caches.as_ref().and_then(|c| c.l3_bytes),
        ),
        available,
        spec.as_ref(),
    );
    plan.notes.extend(bounded);
    let device = crate::store::DeviceIdentity {
        profile: fleet.host.class_id().to_string(),
        name: inv.cpu.model.clone(),
        uuid: None,
    };
    let isa = bench.isa();
    let store = sources.store()?;
    let run = store
        .begin_run(&crate::store::NewRun {
            tool: if bench.optimized() {
                crate::evidence::CALIBRATE_TOOL.into()
            } else {
                crate::calibrate::cpu::DEBUG_BUILD_TOOL.into()
            },
            runtime: crate::profile::RuntimeId::LlamaCpp,
            runtime_version: None,
            started_at: now_rfc3339(),
            settings: serde_json::json!({
                "quick": req.quick,
                "model": spec.as_ref().map(|s| s.fingerprint.clone()),
                "isa": isa,
                "stream_bytes": plan.stream_bytes,
                "rep_secs": plan.budget.rep_secs,
                "reps": plan.budget.reps,
            })
            .to_string(),
            host: host_identity(&inv),
        })
        .map_err(store_failure)?;
    // The rows of each step's repetitions, in the order they were recorded.
    let mut rows: Vec<(crate::calibrate::cpu::Step, i64)> = Vec::new();
    let outcome = crate::calibrate::cpu::run(bench, &plan, stop, progress, &mut |m| {
        let row = store.record(run, &to_measurement(m, &device, &isa))?;
        rows.push((m.step, row));
        Ok(())
    })
    .map_err(|e| {
        Failure::new(
            exit::RUNTIME,
            anyhow::anyhow!("recording a measurement: {e}"),
        )
    })?;
    let mut figures: Vec<CalibratedFigure> = outcome
        .measured
        .iter()
        .map(|m| CalibratedFigure {
            rows: rows
                .iter()
                .filter(|(s, _)| *s == m.step)
                .map(|(_, r)| *r)
                .collect(),
            what: m.step.label(),
            metric: m.step.metric(),
            threads: m.step.threads(),
            value: m.sample.best,
            unit: m.step.unit().into(),
            min: m
                .sample
                .samples
                .iter()
                .copied()
                .fold(f64::INFINITY, f64::min),
            max: m.sample.samples.iter().copied().fold(0.0, f64::max),
        })
        .collect();
    let mut notes = plan.notes.clone();
    if !bench.optimized() {
        notes.push(format!(
            "a debug build ran these loops unoptimised: the figures understate this CPU, so the run is recorded as \
             `{}` and no plan uses it; calibrate with a release build (`cargo run --release`)",
            crate::calibrate::cpu::DEBUG_BUILD_TOOL
        ));
    }
    let mut failed: Vec<String> = outcome
        .failed
        .iter()
        .map(|(s, why)| format!("{}: {why}", s.label()))
        .collect();
    let mut stopped = outcome.stopped;
    for g in fleet
        .gpus
        .iter()
        .filter(|g| g.id.kind == crate::fleet::DeviceKind::Cuda)
    {
        if stop.load(std::sync::atomic::Ordering::SeqCst) {
            stopped = true;
            break;
        }
        let device = crate::store::DeviceIdentity {
            profile: g.profile.clone(),
            name: g.name.clone(),
            uuid: None,
        };
        match calibrate_gpu(g, spec.as_ref(), req.quick, gpu_bench, stop, progress) {
            Err(e) => failed.push(format!("{}: {e}", g.id)),
            Ok(cal) => {
                stopped |= cal.stopped;
                notes.extend(cal.notes.iter().map(|n| format!("{}: {n}", g.id)));
                failed.extend(
                    cal.failures
                        .iter()
                        .map(|(what, e)| format!("{} {what}: {e}", g.id)),
                );
                for m in &crate::calibrate::gpu::to_measurements(&cal.results, device) {
                    let row = store.record(run, m).map_err(store_failure)?;
                    figures.push(CalibratedFigure {
                        rows: vec![row],
                        what: format!("{} {}", g.id, m.metric),
                        metric: m.metric.clone(),
                        threads: 0,
                        value: m.value,
                        unit: m.unit.clone(),
                        min: m.value,
                        max: m.value,
                    });
                }
            }
        }
    }
    if stopped {
        notes.push(format!(
            "run {} stays incomplete: no plan uses a calibration cut short (`measurements prune --incomplete` removes it)",
            run.0
        ));
    } else {
        store
            .finish_run(run, &now_rfc3339())
            .map_err(store_failure)?;
    }
    for f in figures
        .iter()
        .filter(|f| f.rows.len() > 1 && crate::evidence::noisy(f.min, f.max))
    {
        notes.push(format!(
            "{}: its repetitions spread by {:.0} % (more than {:.0} %): recorded, but no plan uses it; calibrate again on an idle machine",
            f.what,
            (f.max - f.min) / f.max * 100.0,
            crate::evidence::MAX_CPU_SPREAD * 100.0
        ));
    }
    let reads: Vec<(u32, f64)> = outcome
        .measured
        .iter()
        .filter_map(|m| match m.step {
            Step::Stream {
                stream: Stream::Read,
                threads,
            } => Some((threads, m.sample.best)),
            _ => None,
        })
        .collect();
    let most = reads.iter().map(|r| r.1).fold(0.0, f64::max);
    Ok(Calibrated {
        run: run.0,
        device_profile: device.profile,
        device_name: device.name,
        isa,
        figures,
        bandwidth_saturates_at_threads: reads
            .iter()
            .filter(|r| r.1 >= SATURATION_SHARE * most)
            .map(|r| r.0)
            .min(),
        failed,
        stopped,
        notes,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The GPU micro-benchmarks of one CUDA GPU: the model's layer shapes (or the defaults) and weight types,
/// efficiencies against the GPU's profile peaks.
fn calibrate_gpu(
    g: &crate::fleet::FleetGpu,
    spec: Option<&crate::model::ModelSpec>,
    quick: bool,
    gpu_bench: &mut GpuBenchFactory<'_>,
    stop: &std::sync::atomic::AtomicBool,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<crate::calibrate::gpu::GpuCalibration, crate::calibrate::gpu::GpuError> {
    use crate::calibrate::gpu::{self, GpuDtype, GpuPlan, LayerShape, Peaks};
    let mut bench = gpu_bench(g.id.ordinal)?;
    let peaks =
        (g.bandwidth_bytes_per_s > 0.0 && g.flops.is_finite() && g.flops > 0.0).then_some(Peaks {
            bandwidth_bytes_per_s: g.bandwidth_bytes_per_s,
            flops: g.flops,
        });
    let mut shapes: Vec<LayerShape> = Vec::new();
    let mut dtypes: Vec<GpuDtype> = Vec::new();
    if let Some(m) = spec {
        for t in m
            .tensors
            .iter()
            .filter(|t| t.shape.len() == 2 && t.layer.is_some())
        {
            if let (Ok(rows), Ok(cols)) = (u32::try_from(t.shape[0]), u32::try_from(t.shape[1])) {
                let s = LayerShape { rows, cols };
                if !shapes.contains(&s) {
                    shapes.push(s);
                }
            }
            if let crate::model::Dtype::Ggml(ty) = t.dtype
                && let Some(d) = GpuDtype::from_ggml(ty)
                && !dtypes.contains(&d)
            {
                dtypes.push(d);
            }
        }
        shapes.sort();
    }
    if shapes.is_empty() {
        shapes = gpu::DEFAULT_SHAPES.to_vec();
    }
    let plan = if quick {
        GpuPlan::quick(&shapes, peaks)
    } else {
        GpuPlan::full(&shapes, peaks)
    };
    let plan = if spec.is_some() {
        plan.limit_to(&dtypes)
    } else {
        plan
    };
    let label = g.id.to_string();
    Ok(gpu::run(
        bench.as_mut(),
        &plan,
        &mut |p| progress(p.step, p.total, &format!("{label} {}", p.label)),
        stop,
    ))
}
