//! CPU micro-benchmarks of `optimizer calibrate`: memory bandwidth (read, copy, triad) over a thread sweep, the
//! FP32 FMA rate, and the quantized dot products llama.cpp's CPU backend runs (Q4_0, Q8_0, Q4_K) as a GEMV at a
//! real layer shape. What `resolve` needs for CPU decode (bytes and dot products per second at the chosen
//! threads) and prefill (the FMA rate).
//!
//! The timing sits behind [`CpuBench`] so the plan, the stop flag and the conversion to store rows are tested
//! with a mock; [`Machine`] times the real loops of [`kernels`]. Each figure is the best of a few repetitions of
//! a fixed duration (the least-disturbed run, as STREAM reports), with every sample kept in the row's context.
//! Trade-off: threads are spawned once per repetition and run their share of the work without barriers between
//! iterations, so the rates are what the cores sustain, not what ggml's thread pool reaches after its per-op
//! synchronisation (the speed model charges that separately, as its per-layer floor).

pub mod kernels;
mod machine;
#[cfg(test)]
mod tests;

pub use machine::Machine;

use std::sync::atomic::{AtomicBool, Ordering};

use kernels::DotType;
use optimizer_model::{Dtype, GgmlType, ModelSpec};
use optimizer_store::{DeviceIdentity, NewMeasurement, Shape, StoreError};

/// A memory stream, as STREAM counts its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Sum of one array: one read per element.
    Read,
    /// `a = b`: one read and one write.
    Copy,
    /// `a = b + s·c`: two reads and one write.
    Triad,
}

impl Stream {
    pub(crate) const ALL: [Stream; 3] = [Stream::Read, Stream::Copy, Stream::Triad];

    pub fn name(self) -> &'static str {
        match self {
            Stream::Read => "read",
            Stream::Copy => "copy",
            Stream::Triad => "triad",
        }
    }

    /// Arrays the stream touches (each `bytes` long).
    pub fn arrays(self) -> u64 {
        match self {
            Stream::Read => 1,
            Stream::Copy => 2,
            Stream::Triad => 3,
        }
    }
}

/// How long each figure is measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// Seconds one repetition runs for (its iteration count is set from a first timed iteration).
    pub rep_secs: f64,
    /// Repetitions; the best is the figure.
    pub reps: u32,
}

/// One figure: the best repetition and all of them.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub best: f64,
    pub samples: Vec<f64>,
}

/// What the machine the benchmarks run on can give them, as far as the bench knows (a mock: nothing). The plan
/// is sized from the inventory, which may describe another machine (`--inventory`) or a wrong one; these bound
/// it, so no step spawns more threads than run at once or allocates more than is free.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capacity {
    /// Threads that run at once (CPU affinity and cgroup quota included).
    pub threads: Option<u32>,
    /// Bytes of memory available now (cgroup limit included).
    pub available_bytes: Option<u64>,
}

/// Why a step gave no figure.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CpuBenchError {
    /// The stream arrays of `bytes` each do not fit this machine's address space.
    #[error("array too large")]
    ArrayTooLarge { bytes: u64 },
    /// `bytes` of memory could not be reserved.
    #[error("cannot allocate {bytes} bytes: {source}")]
    Alloc {
        bytes: u64,
        #[source]
        source: std::collections::TryReserveError,
    },
    /// A GEMV shape that is not whole blocks of its type (`per` weights a block).
    #[error("a {rows}x{cols} GEMV does not tile {dot} blocks of {per}")]
    Untiled {
        rows: usize,
        cols: usize,
        dot: &'static str,
        per: usize,
    },
    /// A GEMV whose weights would take more than [`DOT_MAX_WEIGHT_BYTES`].
    #[error("a {rows}x{cols} {dot} GEMV needs more than {DOT_MAX_WEIGHT_BYTES} bytes of weights")]
    TooLarge {
        rows: usize,
        cols: usize,
        dot: &'static str,
    },
    /// The bench returned a rate that is not a positive finite number.
    #[error("no usable figure ({0})")]
    Unusable(f64),
}

/// The timing seam: a real machine or a mock.
pub trait CpuBench {
    /// What this machine can give the benchmarks; by default nothing is known (a mock).
    fn capacity(&self) -> Capacity {
        Capacity::default()
    }
    /// The instruction set the kernels run with (`avx2+fma+f16c`, `portable`).
    fn isa(&self) -> String;
    /// Whether the kernels were compiled with optimisations: a debug build's loops run many times slower than
    /// the machine can (the read stream at 0.4 GB/s instead of 13 on the reference), so its figures describe the
    /// build, not the CPU. Mocks report what the test gives them.
    fn optimized(&self) -> bool {
        true
    }
    /// Bytes per second of `stream` over arrays of `bytes` each, split across `threads` threads.
    fn stream(
        &mut self,
        stream: Stream,
        threads: u32,
        bytes: u64,
        budget: Budget,
    ) -> Result<Sample, CpuBenchError>;
    /// FP32 FLOP per second of `threads` threads running independent FMAs.
    fn fma(&mut self, threads: u32, budget: Budget) -> Result<Sample, CpuBenchError>;
    /// Weights per second of a `rows` × `cols` GEMV of type `t` against activations quantized beforehand, rows
    /// split across `threads` threads.
    fn dot(
        &mut self,
        t: DotType,
        rows: usize,
        cols: usize,
        threads: u32,
        budget: Budget,
    ) -> Result<Sample, CpuBenchError>;
}

/// One thing to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Stream {
        stream: Stream,
        threads: u32,
    },
    Fma {
        threads: u32,
    },
    Dot {
        t: DotType,
        rows: usize,
        cols: usize,
        threads: u32,
    },
}

impl Step {
    /// The store metric the step records.
    pub fn metric(&self) -> String {
        match self {
            Step::Stream { stream, .. } => format!("cpu_{}_bytes_per_s", stream.name()),
            Step::Fma { .. } => "cpu_fma_flops".into(),
            Step::Dot { t, .. } => format!("cpu_dot_{}_params_per_s", t.name()),
        }
    }

    pub fn unit(&self) -> &'static str {
        match self {
            Step::Stream { .. } => "bytes/s",
            Step::Fma { .. } => "FLOP/s",
            Step::Dot { .. } => "weights/s",
        }
    }

    pub fn threads(&self) -> u32 {
        match *self {
            Step::Stream { threads, .. } | Step::Fma { threads } | Step::Dot { threads, .. } => {
                threads
            }
        }
    }

    /// A short label for progress and the summary.
    pub fn label(&self) -> String {
        match self {
            Step::Stream { stream, threads } => {
                format!("{} bandwidth, {threads} thread(s)", stream.name())
            }
            Step::Fma { threads } => format!("FP32 FMA, {threads} thread(s)"),
            Step::Dot {
                t,
                rows,
                cols,
                threads,
            } => format!("{} GEMV {rows}x{cols}, {threads} thread(s)", t.name()),
        }
    }
}

/// What one calibration measures.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub steps: Vec<Step>,
    pub budget: Budget,
    /// Bytes of each array the bandwidth streams walk.
    pub stream_bytes: u64,
    /// What the plan left out or assumed, for the summary.
    pub notes: Vec<String>,
}

/// Bandwidth arrays are this many times the last-level cache, so the streams measure DRAM, not the cache
/// (STREAM's rule: each array at least 4× the caches; 8× leaves room for a victim L3).
pub(crate) const STREAM_CACHE_MULTIPLE: u64 = 8;
/// Array size when the cache size is unknown: 8 × 32 MiB, the largest L3 of a desktop or single-CCD server part.
pub(crate) const STREAM_BYTES_UNKNOWN_CACHE: u64 = 256 << 20;
/// Smallest array: below this even a small-cache machine's streams would hit its caches.
pub(crate) const STREAM_BYTES_MIN: u64 = 64 << 20;
/// The arrays of the triad (three of them) take at most this share of available memory.
pub(crate) const STREAM_MEMORY_SHARE: u64 = 8;
/// The GEMV row length without a model: Llama-3-8B's hidden size (4096), the row length the reference
/// calibration in `perf` was measured at.
pub(crate) const DEFAULT_DOT_COLS: usize = 4096;
/// Each thread's rows of the GEMV fill this share of its L2 cache (half: room for the activations and the
/// stack), so the figure is the dot product's own rate; the DRAM side is the read-bandwidth figure.
pub(crate) const DOT_L2_SHARE: u64 = 2;
/// L2 per core when the inventory does not say: 256 KiB, the smallest of current x86 and Arm server cores.
pub(crate) const L2_BYTES_UNKNOWN: u64 = 256 << 10;
/// Largest L2 per core taken from an inventory: 32 MiB, IBM Telum's (z16), the largest a shipping core has. A
/// bigger figure is not a per-core L2 (a hand-written or corrupt inventory) and would size the GEMV at gigabytes.
pub(crate) const L2_BYTES_MAX: u64 = 32 << 20;
/// Widest GEMV row taken from a model: 65536 weights, four times the widest hidden size of published LLMs
/// (Llama-3.1-405B's 16384). A GGUF may declare any u32 embedding length; a wider one is not a real layer and
/// eight of its rows alone would take gigabytes.
pub(crate) const DOT_MAX_COLS: usize = 1 << 16;
/// Most bytes of weights one GEMV step allocates: the plan asks for half an L2 per thread (megabytes); a request
/// beyond this is refused as a step failure instead of exhausting memory.
pub(crate) const DOT_MAX_WEIGHT_BYTES: u64 = 1 << 30;
/// Fewest rows a thread multiplies (a row per thread would measure call overhead).
pub(crate) const DOT_MIN_ROWS_PER_THREAD: usize = 8;
/// `--quick`: 8 rounds of 0.1 s per figure (about 17 s on a 2-core machine); a full run 10 of 0.3 s. Rounds
/// rather than length: the project's KVM guest has spells of seconds at 0.75× its 2-thread rate, and more
/// rounds spread over more time give the best of them more chances to miss one.
pub const QUICK_BUDGET: Budget = Budget {
    rep_secs: 0.1,
    reps: 8,
};
pub(crate) const FULL_BUDGET: Budget = Budget {
    rep_secs: 0.3,
    reps: 10,
};

impl Plan {
    /// The steps for a CPU with `cores` usable cores, `l2_bytes` of L2 per core, `llc_bytes` of last-level cache
    /// and `available` bytes of free memory: streams and FMA at each thread count of the sweep (1 and all cores
    /// with `quick`; powers of two and all cores otherwise), the dot products at 1 thread and all cores, for the
    /// types `model` uses (all three without a model) with its rows' length (its hidden size), each thread
    /// multiplying as many rows as stay in its L2 (see [`DOT_L2_SHARE`]).
    ///
    /// Trade-off: the GEMV keeps the model's row length but not its row count, because a whole layer (9 to 18
    /// MB at 4096 × 4096) sits on the edge of a shared L3 and measured 0.66× to 1× the in-cache rate from one run
    /// to the next on the same machine; the speed model bounds decode by bandwidth separately.
    pub fn new(
        quick: bool,
        cores: u32,
        cache: (Option<u64>, Option<u64>),
        available: u64,
        model: Option<&ModelSpec>,
    ) -> Plan {
        let (l2_bytes, llc_bytes) = cache;
        let cores = cores.max(1);
        let mut threads: Vec<u32> = if quick {
            vec![1, cores]
        } else {
            std::iter::successors(Some(1u32), |t| t.checked_mul(2))
                .take_while(|t| *t < cores)
                .chain([cores])
                .collect()
        };
        threads.dedup();
        let mut notes = Vec::new();
        let want = llc_bytes.map_or(STREAM_BYTES_UNKNOWN_CACHE, |c| {
            c.saturating_mul(STREAM_CACHE_MULTIPLE)
        });
        let cap = available / STREAM_MEMORY_SHARE / 3;
        let stream_bytes = want.max(STREAM_BYTES_MIN).min(cap.max(1 << 20)) / 64 * 64;
        if stream_bytes < want.max(STREAM_BYTES_MIN) {
            notes.push(format!(
                "bandwidth arrays cut to {} MiB by available memory: the figures may include cache hits",
                stream_bytes >> 20
            ));
        }
        let (types, cols) = match model {
            None => (DotType::ALL.to_vec(), DEFAULT_DOT_COLS),
            Some(m) => {
                let mut types: Vec<DotType> = Vec::new();
                let mut others = false;
                for t in m.tensors.iter().filter(|t| t.shape.len() == 2) {
                    let d = match t.dtype {
                        Dtype::Ggml(GgmlType::Q4_0) => Some(DotType::Q4_0),
                        Dtype::Ggml(GgmlType::Q8_0) => Some(DotType::Q8_0),
                        Dtype::Ggml(GgmlType::Q4_K) => Some(DotType::Q4K),
                        _ => None,
                    };
                    match d {
                        Some(d) if !types.contains(&d) => types.push(d),
                        Some(_) => {}
                        None => others = true,
                    }
                }
                // Other weight types are predicted at Q4_K's measured rate (crates/core/src/perf).
                if others && !types.contains(&DotType::Q4K) {
                    types.push(DotType::Q4K);
                }
                types.sort();
                let embd = m
                    .hparams
                    .embedding_length
                    .and_then(|e| usize::try_from(e).ok());
                let cols = match embd {
                    Some(e)
                        if e >= kernels::QK_K && e % kernels::QK_K == 0 && e <= DOT_MAX_COLS =>
                    {
                        e
                    }
                    Some(e) if e > DOT_MAX_COLS => {
                        notes.push(format!(
                            "the model's embedding length {e} is above {DOT_MAX_COLS}, not a real layer's: GEMV rows of the default {DEFAULT_DOT_COLS}"
                        ));
                        DEFAULT_DOT_COLS
                    }
                    _ => {
                        notes.push(format!(
                            "the model's embedding length is not a multiple of {}: GEMV rows of the default {}",
                            kernels::QK_K,
                            DEFAULT_DOT_COLS
                        ));
                        DEFAULT_DOT_COLS
                    }
                };
                (types, cols)
            }
        };
        let mut steps = Vec::new();
        for &t in &threads {
            for stream in Stream::ALL {
                steps.push(Step::Stream { stream, threads: t });
            }
            steps.push(Step::Fma { threads: t });
        }
        let mut dot_threads = vec![1, cores];
        dot_threads.dedup();
        let l2 = match l2_bytes.filter(|b| *b > 0) {
            None => L2_BYTES_UNKNOWN,
            Some(b) if b > L2_BYTES_MAX => {
                notes.push(format!(
                    "an L2 of {b} bytes per core is not one a CPU has: GEMV rows sized for {L2_BYTES_MAX} bytes"
                ));
                L2_BYTES_MAX
            }
            Some(b) => b,
        };
        for &t in &dot_threads {
            for &ty in &types {
                let (per, bytes, _) = ty.block();
                let row_bytes = (cols / per * bytes) as u64;
                let per_thread = usize::try_from(l2 / DOT_L2_SHARE / row_bytes.max(1))
                    .unwrap_or(usize::MAX)
                    .max(DOT_MIN_ROWS_PER_THREAD);
                steps.push(Step::Dot {
                    t: ty,
                    rows: per_thread.saturating_mul(t as usize),
                    cols,
                    threads: t,
                });
            }
        }
        Plan {
            steps,
            budget: if quick { QUICK_BUDGET } else { FULL_BUDGET },
            stream_bytes,
            notes,
        }
    }
}

/// One finished step.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    pub step: Step,
    pub sample: Sample,
}

/// What a calibration produced.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Outcome {
    pub measured: Vec<Measured>,
    /// Steps that failed, with why (the others still count).
    pub failed: Vec<(Step, CpuBenchError)>,
    /// The stop flag was raised: the steps after the last finished one did not run.
    pub stopped: bool,
}

/// Runs the plan's steps in rounds: each round runs every step once (one repetition), and a step's figure is the
/// best of its rounds. Calls `progress(done, total, label)` before each repetition and `each` after each (to
/// record it at once); checks `stop` between repetitions. A step that fails is left out of the later rounds;
/// an error of `each` (the store refusing a row) ends the run with it.
///
/// Trade-off: interleaving the repetitions spreads each step's samples over the whole calibration, so a slow
/// spell of the machine (on the project's KVM guest, a vCPU that ran 2-thread dot products at 0.55× to 0.7× for
/// about a second at a time, with no steal time reported) costs one sample of several steps instead of every
/// sample of one; the price is one row per repetition in the store, the planner taking the best of a run's rows.
pub fn run(
    bench: &mut dyn CpuBench,
    plan: &Plan,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(usize, usize, &str),
    each: &mut dyn FnMut(&Measured) -> Result<(), StoreError>,
) -> Result<Outcome, StoreError> {
    let mut out = Outcome::default();
    let rounds = plan.budget.reps.max(1) as usize;
    let total = plan.steps.len() * rounds;
    let one = Budget {
        reps: 1,
        ..plan.budget
    };
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); plan.steps.len()];
    let mut failed: Vec<Option<CpuBenchError>> = vec![None; plan.steps.len()];
    'rounds: for round in 0..rounds {
        for (i, step) in plan.steps.iter().enumerate() {
            if failed[i].is_some() {
                continue;
            }
            if stop.load(Ordering::SeqCst) {
                out.stopped = true;
                break 'rounds;
            }
            progress(round * plan.steps.len() + i, total, &step.label());
            let r = match *step {
                Step::Stream { stream, threads } => {
                    bench.stream(stream, threads, plan.stream_bytes, one)
                }
                Step::Fma { threads } => bench.fma(threads, one),
                Step::Dot {
                    t,
                    rows,
                    cols,
                    threads,
                } => bench.dot(t, rows, cols, threads, one),
            };
            match r {
                Ok(sample) if sample.best.is_finite() && sample.best > 0.0 => {
                    each(&Measured {
                        step: *step,
                        sample: Sample {
                            best: sample.best,
                            samples: vec![sample.best],
                        },
                    })?;
                    samples[i].push(sample.best);
                }
                Ok(sample) => failed[i] = Some(CpuBenchError::Unusable(sample.best)),
                Err(why) => failed[i] = Some(why),
            }
        }
    }
    for ((step, samples), failed) in plan.steps.iter().zip(samples).zip(failed) {
        if let Some(why) = failed {
            out.failed.push((*step, why));
        } else if !samples.is_empty() {
            out.measured.push(Measured {
                step: *step,
                sample: Sample {
                    best: samples.iter().copied().fold(0.0, f64::max),
                    samples,
                },
            });
        }
    }
    if !out.stopped {
        progress(total, total, "done");
    }
    Ok(out)
}

/// The store row of one repetition of a step, for the CPU `device` (every model: a device figure).
pub fn to_measurement(m: &Measured, device: &DeviceIdentity, isa: &str) -> NewMeasurement {
    let mut context = serde_json::json!({
        "isa": isa,
        "samples": m.sample.samples,
    });
    if let Step::Dot { rows, cols, .. } = m.step {
        context["rows"] = rows.into();
        context["cols"] = cols.into();
    }
    NewMeasurement {
        device: device.clone(),
        model: None,
        metric: m.step.metric(),
        value: m.sample.best,
        unit: m.step.unit().into(),
        shape: Shape {
            threads: Some(m.step.threads()),
            ..Shape::default()
        },
        context: context.to_string(),
    }
}

/// The run tool of a calibration whose kernels were not optimised: recorded for `measurements show`, never used by
/// a plan (the store reads CPU figures from `calibrate` runs only).
pub const DEBUG_BUILD_TOOL: &str = "calibrate (debug build)";

/// Stop flag for Ctrl-C: the calibration finishes the step under way, records it and stops.
pub static STOP: AtomicBool = AtomicBool::new(false);
