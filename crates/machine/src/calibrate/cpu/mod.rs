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

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use kernels::DotType;
use optimizer_model::{Dtype, GgmlType, ModelSpec};
use optimizer_store::{DeviceIdentity, NewMeasurement, Shape};

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
    pub const ALL: [Stream; 3] = [Stream::Read, Stream::Copy, Stream::Triad];

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
    ) -> Result<Sample, String>;
    /// FP32 FLOP per second of `threads` threads running independent FMAs.
    fn fma(&mut self, threads: u32, budget: Budget) -> Result<Sample, String>;
    /// Weights per second of a `rows` × `cols` GEMV of type `t` against activations quantized beforehand, rows
    /// split across `threads` threads.
    fn dot(
        &mut self,
        t: DotType,
        rows: usize,
        cols: usize,
        threads: u32,
        budget: Budget,
    ) -> Result<Sample, String>;
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
pub const STREAM_CACHE_MULTIPLE: u64 = 8;
/// Array size when the cache size is unknown: 8 × 32 MiB, the largest L3 of a desktop or single-CCD server part.
pub const STREAM_BYTES_UNKNOWN_CACHE: u64 = 256 << 20;
/// Smallest array: below this even a small-cache machine's streams would hit its caches.
pub const STREAM_BYTES_MIN: u64 = 64 << 20;
/// The arrays of the triad (three of them) take at most this share of available memory.
pub const STREAM_MEMORY_SHARE: u64 = 8;
/// The GEMV row length without a model: Llama-3-8B's hidden size (4096), the row length the reference
/// calibration in `perf` was measured at.
pub const DEFAULT_DOT_COLS: usize = 4096;
/// Each thread's rows of the GEMV fill this share of its L2 cache (half: room for the activations and the
/// stack), so the figure is the dot product's own rate; the DRAM side is the read-bandwidth figure.
pub const DOT_L2_SHARE: u64 = 2;
/// L2 per core when the inventory does not say: 256 KiB, the smallest of current x86 and Arm server cores.
pub const L2_BYTES_UNKNOWN: u64 = 256 << 10;
/// Largest L2 per core taken from an inventory: 32 MiB, IBM Telum's (z16), the largest a shipping core has. A
/// bigger figure is not a per-core L2 (a hand-written or corrupt inventory) and would size the GEMV at gigabytes.
pub const L2_BYTES_MAX: u64 = 32 << 20;
/// Widest GEMV row taken from a model: 65536 weights, four times the widest hidden size of published LLMs
/// (Llama-3.1-405B's 16384). A GGUF may declare any u32 embedding length; a wider one is not a real layer and
/// eight of its rows alone would take gigabytes.
pub const DOT_MAX_COLS: usize = 1 << 16;
/// Most bytes of weights one GEMV step allocates: the plan asks for half an L2 per thread (megabytes); a request
/// beyond this is refused as a step failure instead of exhausting memory.
pub const DOT_MAX_WEIGHT_BYTES: u64 = 1 << 30;
/// Fewest rows a thread multiplies (a row per thread would measure call overhead).
pub const DOT_MIN_ROWS_PER_THREAD: usize = 8;
/// `--quick`: 8 rounds of 0.1 s per figure (about 17 s on a 2-core machine); a full run 10 of 0.3 s. Rounds
/// rather than length: the project's KVM guest has spells of seconds at 0.75× its 2-thread rate, and more
/// rounds spread over more time give the best of them more chances to miss one.
pub const QUICK_BUDGET: Budget = Budget {
    rep_secs: 0.1,
    reps: 8,
};
pub const FULL_BUDGET: Budget = Budget {
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
    pub failed: Vec<(Step, String)>,
    /// The stop flag was raised: the steps after the last finished one did not run.
    pub stopped: bool,
}

/// Runs the plan's steps in rounds: each round runs every step once (one repetition), and a step's figure is the
/// best of its rounds. Calls `progress(done, total, label)` before each repetition and `each` after each (to
/// record it at once); checks `stop` between repetitions.
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
    each: &mut dyn FnMut(&Measured) -> Result<(), String>,
) -> Result<Outcome, String> {
    let mut out = Outcome::default();
    let rounds = plan.budget.reps.max(1) as usize;
    let total = plan.steps.len() * rounds;
    let one = Budget {
        reps: 1,
        ..plan.budget
    };
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); plan.steps.len()];
    let mut failed: Vec<Option<String>> = vec![None; plan.steps.len()];
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
                Ok(sample) => failed[i] = Some(format!("no usable figure ({})", sample.best)),
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

// ---- the real machine ----

/// The stream arrays: their size in bytes, two u64 arrays (read, copy; the triad's destination) and the triad's
/// two f32 sources.
type Arrays = (u64, Vec<u64>, Vec<u64>, Vec<f32>);

/// Times the loops of [`kernels`] on this CPU.
#[derive(Debug, Default)]
pub struct Machine {
    buffers: Option<Arrays>,
}

/// Seconds each repetition's work runs untimed first (cores left idle by a one-thread step wake and clock up).
pub const WARMUP_SECS: f64 = 0.03;

/// Runs `work(thread, iterations)` on `threads` threads at once, `iterations` each; seconds of wall time.
fn timed(threads: u32, iterations: u64, work: &(dyn Fn(usize, u64) + Sync)) -> f64 {
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads as usize {
            s.spawn(move || work(t, iterations));
        }
    });
    start.elapsed().as_secs_f64()
}

/// Best rate over `budget`'s repetitions of `work`, where one iteration of one thread does `units_per_iter`.
fn measure(
    threads: u32,
    budget: Budget,
    units_per_iter: f64,
    work: &(dyn Fn(usize, u64) + Sync),
) -> Sample {
    // One iteration first, to size the repetitions; then a warm-up of the same work.
    let one = timed(threads, 1, work).max(1e-6);
    let iterations = ((budget.rep_secs / one).ceil() as u64).max(1);
    timed(threads, ((WARMUP_SECS / one).ceil() as u64).max(1), work);
    let samples: Vec<f64> = (0..budget.reps.max(1))
        .map(|_| {
            let secs = timed(threads, iterations, work).max(1e-9);
            units_per_iter * iterations as f64 * f64::from(threads) / secs
        })
        .collect();
    Sample {
        best: samples.iter().copied().fold(0.0, f64::max),
        samples,
    }
}

/// The `[lo, hi)` share of `n` items of thread `t` of `threads`.
fn share(n: usize, t: usize, threads: usize) -> (usize, usize) {
    (n * t / threads, n * (t + 1) / threads)
}

impl Machine {
    fn arrays(&mut self, bytes: u64) -> Result<&mut Arrays, String> {
        if self.buffers.as_ref().is_none_or(|b| b.0 != bytes) {
            self.buffers = None;
            let words = usize::try_from(bytes / 8).map_err(|_| "array too large".to_string())?;
            let alloc = |n: usize| -> Result<Vec<u64>, String> {
                let mut v = Vec::new();
                v.try_reserve_exact(n)
                    .map_err(|e| format!("cannot allocate {bytes} bytes: {e}"))?;
                v.extend((0..n as u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15)));
                Ok(v)
            };
            let a = alloc(words)?;
            let b = alloc(words)?;
            // The triad's two source arrays of `bytes` each, as f32 (4 bytes): 2 × bytes / 4 values.
            let mut c = Vec::new();
            c.try_reserve_exact(words * 4)
                .map_err(|e| format!("cannot allocate {} bytes: {e}", 2 * bytes))?;
            c.extend((0..words * 4).map(|i| (i % 1000) as f32 * 1e-3));
            self.buffers = Some((bytes, a, b, c));
        }
        Ok(self.buffers.as_mut().expect("allocated just above"))
    }
}

/// Raw pointer wrapper so scoped threads can write disjoint parts of one array.
#[derive(Clone, Copy)]
struct Shared<T>(*mut T);
// SAFETY: each thread writes only its own disjoint `[lo, hi)` range (see `share`).
unsafe impl<T> Send for Shared<T> {}
unsafe impl<T> Sync for Shared<T> {}

impl<T> Shared<T> {
    /// The pointer (a method, so closures capture the whole `Send` wrapper, not its field).
    fn ptr(self) -> *mut T {
        self.0
    }
}

impl CpuBench for Machine {
    fn isa(&self) -> String {
        kernels::isa().into()
    }

    fn optimized(&self) -> bool {
        !cfg!(debug_assertions)
    }

    fn capacity(&self) -> Capacity {
        let (cpu, memory) = crate::probe::probe_host();
        let threads = std::thread::available_parallelism()
            .ok()
            .and_then(|n| u32::try_from(n.get()).ok())
            .unwrap_or(cpu.logical_cpus);
        Capacity {
            threads: Some(threads.max(1)),
            available_bytes: Some(memory.available_bytes),
        }
    }

    fn stream(
        &mut self,
        stream: Stream,
        threads: u32,
        bytes: u64,
        budget: Budget,
    ) -> Result<Sample, String> {
        let (_, a, b, c) = self.arrays(bytes)?;
        let c: &[f32] = c;
        let n = threads.max(1) as usize;
        let per_thread = bytes as f64 * stream.arrays() as f64 / n as f64;
        Ok(match stream {
            Stream::Read => {
                let a: &[u64] = a;
                measure(threads, budget, per_thread, &|t, it| {
                    let (lo, hi) = share(a.len(), t, n);
                    for _ in 0..it {
                        std::hint::black_box(kernels::read(&a[lo..hi]));
                    }
                })
            }
            Stream::Copy => {
                let a: &[u64] = a;
                let dst = Shared(b.as_mut_ptr());
                measure(threads, budget, per_thread, &move |t, it| {
                    let (lo, hi) = share(a.len(), t, n);
                    // SAFETY: `b` outlives the scope; threads write disjoint ranges and nothing reads `b`
                    // meanwhile.
                    let d = unsafe { std::slice::from_raw_parts_mut(dst.ptr().add(lo), hi - lo) };
                    for _ in 0..it {
                        kernels::copy(d, &a[lo..hi]);
                        std::hint::black_box(&d);
                    }
                })
            }
            Stream::Triad => {
                // Three f32 arrays of `bytes` each: `c` holds the two sources, `a` (bytes / 8 u64 = bytes / 4 f32)
                // is reused as the destination.
                let words = c.len() / 2;
                debug_assert_eq!(words, a.len() * 2);
                let dst = Shared(a.as_mut_ptr().cast::<f32>());
                let (x, y) = c.split_at(words);
                measure(threads, budget, per_thread, &move |t, it| {
                    let (lo, hi) = share(words, t, n);
                    // SAFETY: `a` holds `words` f32 (see above); threads write disjoint ranges of it and nothing
                    // reads it meanwhile.
                    let d = unsafe { std::slice::from_raw_parts_mut(dst.ptr().add(lo), hi - lo) };
                    for _ in 0..it {
                        kernels::triad(d, &x[lo..hi], &y[lo..hi], 0.5);
                        std::hint::black_box(&d);
                    }
                })
            }
        })
    }

    fn fma(&mut self, threads: u32, budget: Budget) -> Result<Sample, String> {
        const ROUNDS: u64 = 100_000;
        Ok(measure(
            threads,
            budget,
            ROUNDS as f64 * kernels::FMA_FLOP_PER_ROUND,
            &|t, it| {
                for i in 0..it {
                    std::hint::black_box(kernels::fma(ROUNDS, (t as u64 + i) as f32));
                }
            },
        ))
    }

    fn dot(
        &mut self,
        t: DotType,
        rows: usize,
        cols: usize,
        threads: u32,
        budget: Budget,
    ) -> Result<Sample, String> {
        let (per, xbytes, ybytes) = t.block();
        if cols == 0 || !cols.is_multiple_of(per) || rows == 0 {
            return Err(format!(
                "a {rows}x{cols} GEMV does not tile {} blocks of {per}",
                t.name()
            ));
        }
        let blocks = cols / per;
        let weight_blocks = rows
            .checked_mul(blocks)
            .filter(|b| b.checked_mul(xbytes).is_some_and(|n| n as u64 <= DOT_MAX_WEIGHT_BYTES))
            .ok_or_else(|| {
                format!(
                    "a {rows}x{cols} {} GEMV needs more than {DOT_MAX_WEIGHT_BYTES} bytes of weights",
                    t.name()
                )
            })?;
        let mut rng = kernels::Rng::new(0x5eed);
        let w = kernels::weights(t, weight_blocks, &mut rng);
        let act: Vec<f32> = (0..cols).map(|_| rng.unit()).collect();
        let n = threads.max(1) as usize;
        let row_bytes = blocks * xbytes;
        Ok(measure(
            threads,
            budget,
            rows as f64 * cols as f64 / n as f64,
            &|th, it| {
                let (lo, hi) = share(rows, th, n);
                // ggml quantizes the activations once per matmul, for all of a layer's thousands of rows:
                // against the few rows timed here that cost would dominate, so it is left out.
                let mut y = vec![0u8; blocks * ybytes];
                kernels::quantize(t, &act, &mut y);
                for _ in 0..it {
                    let mut s = 0f32;
                    for r in lo..hi {
                        s += kernels::dot(t, &w[r * row_bytes..(r + 1) * row_bytes], &y);
                    }
                    std::hint::black_box(s);
                }
            },
        ))
    }
}

/// The run tool of a calibration whose kernels were not optimised: recorded for `measurements show`, never used by
/// a plan (the store reads CPU figures from `calibrate` runs only).
pub const DEBUG_BUILD_TOOL: &str = "calibrate (debug build)";

/// Stop flag for Ctrl-C: the calibration finishes the step under way, records it and stops.
pub static STOP: AtomicBool = AtomicBool::new(false);

#[cfg(test)]
mod tests {
    use super::*;

    /// A bench whose figures follow a formula of the thread count, counting its calls; it can raise the stop
    /// flag after a number of steps and fail one kind of step.
    struct Mock<'a> {
        calls: usize,
        stop_after: Option<(usize, &'a AtomicBool)>,
        fail_fma: bool,
    }

    impl Mock<'_> {
        fn tick(&mut self) {
            self.calls += 1;
            if let Some((n, flag)) = self.stop_after
                && self.calls >= n
            {
                flag.store(true, Ordering::SeqCst);
            }
        }
    }

    impl CpuBench for Mock<'_> {
        fn isa(&self) -> String {
            "mock".into()
        }
        fn stream(&mut self, s: Stream, threads: u32, _: u64, _: Budget) -> Result<Sample, String> {
            self.tick();
            let v = 10e9 * f64::from(threads.min(2)) * s.arrays() as f64;
            Ok(Sample {
                best: v,
                samples: vec![v * 0.9, v],
            })
        }
        fn fma(&mut self, threads: u32, _: Budget) -> Result<Sample, String> {
            self.tick();
            if self.fail_fma {
                return Err("illegal instruction".into());
            }
            let v = 70e9 * f64::from(threads);
            Ok(Sample {
                best: v,
                samples: vec![v],
            })
        }
        fn dot(
            &mut self,
            t: DotType,
            _: usize,
            _: usize,
            threads: u32,
            _: Budget,
        ) -> Result<Sample, String> {
            self.tick();
            let v = match t {
                DotType::Q4_0 => 12e9,
                DotType::Q8_0 => 8e9,
                DotType::Q4K => 13e9,
            } * f64::from(threads);
            Ok(Sample {
                best: v,
                samples: vec![v],
            })
        }
    }

    #[test]
    fn quick_plan_sweeps_one_thread_and_all_cores() {
        let p = Plan::new(true, 8, (Some(512 << 10), Some(32 << 20)), 16 << 30, None);
        let threads: std::collections::BTreeSet<u32> = p.steps.iter().map(Step::threads).collect();
        assert_eq!(threads.into_iter().collect::<Vec<_>>(), vec![1, 8]);
        assert_eq!(p.stream_bytes, 256 << 20);
        // 3 streams + FMA at 2 thread counts, 3 dot types at 2.
        assert_eq!(p.steps.len(), 2 * 4 + 2 * 3);
        // Q8_0 rows of 4096 are 4352 bytes: 256 KiB (half the L2) holds 60 of them per thread.
        assert!(p.steps.contains(&Step::Dot {
            t: DotType::Q8_0,
            rows: 60 * 8,
            cols: 4096,
            threads: 8
        }));
        let full = Plan::new(false, 6, (None, None), 16 << 30, None);
        let threads: std::collections::BTreeSet<u32> =
            full.steps.iter().map(Step::threads).collect();
        assert_eq!(threads.into_iter().collect::<Vec<_>>(), vec![1, 2, 4, 6]);
    }

    #[test]
    fn stream_arrays_shrink_to_fit_available_memory() {
        // 1 GiB available: three arrays may take an eighth of it.
        let p = Plan::new(true, 2, (None, Some(256 << 20)), 1 << 30, None);
        assert!(p.stream_bytes * 3 <= (1 << 30) / STREAM_MEMORY_SHARE);
        assert_eq!(p.notes.len(), 1, "{:?}", p.notes);
    }

    #[test]
    fn every_step_is_recorded_with_its_threads_and_metric() {
        let plan = Plan::new(true, 2, (None, Some(32 << 20)), 16 << 30, None);
        let stop = AtomicBool::new(false);
        let mut bench = Mock {
            calls: 0,
            stop_after: None,
            fail_fma: false,
        };
        let mut seen = Vec::new();
        let mut progress = Vec::new();
        let out = run(
            &mut bench,
            &plan,
            &stop,
            &mut |i, n, _| progress.push((i, n)),
            &mut |m| {
                seen.push(m.step.metric());
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(out.measured.len(), plan.steps.len());
        assert!(!out.stopped);
        let total = plan.steps.len() * plan.budget.reps as usize;
        assert_eq!(progress.last(), Some(&(total, total)));
        let device = DeviceIdentity {
            profile: "cpu-x".into(),
            name: "CPU".into(),
            uuid: None,
        };
        let rows: Vec<NewMeasurement> = out
            .measured
            .iter()
            .map(|m| to_measurement(m, &device, "mock"))
            .collect();
        let triad2 = rows
            .iter()
            .find(|r| r.metric == "cpu_triad_bytes_per_s" && r.shape.threads == Some(2))
            .unwrap();
        assert_eq!(triad2.value, 60e9);
        assert!(triad2.model.is_none());
        assert!(rows.iter().any(|r| r.metric == "cpu_dot_q4_k_params_per_s"));
        // Every repetition is recorded, in rounds: the first round runs every step once.
        assert_eq!(seen.len(), total);
        assert_eq!(
            seen[..plan.steps.len()],
            plan.steps.iter().map(Step::metric).collect::<Vec<_>>()[..]
        );
        assert_eq!(
            out.measured[0].sample.samples.len(),
            plan.budget.reps as usize
        );
    }

    #[test]
    fn a_slow_spell_costs_one_sample_not_the_figure() {
        // A bench whose every fifth call runs at a third of its rate: interleaved rounds put the slow calls on
        // different steps, so each step's best is its real rate.
        struct Spells(usize);
        impl CpuBench for Spells {
            fn isa(&self) -> String {
                "mock".into()
            }
            fn stream(&mut self, _: Stream, t: u32, _: u64, _: Budget) -> Result<Sample, String> {
                Ok(self.next(f64::from(t)))
            }
            fn fma(&mut self, t: u32, _: Budget) -> Result<Sample, String> {
                Ok(self.next(f64::from(t)))
            }
            fn dot(
                &mut self,
                _: DotType,
                _: usize,
                _: usize,
                t: u32,
                _: Budget,
            ) -> Result<Sample, String> {
                Ok(self.next(f64::from(t)))
            }
        }
        impl Spells {
            fn next(&mut self, v: f64) -> Sample {
                self.0 += 1;
                let v = if self.0.is_multiple_of(5) { v / 3.0 } else { v };
                Sample {
                    best: v,
                    samples: vec![v],
                }
            }
        }
        let plan = Plan::new(true, 2, (None, Some(32 << 20)), 16 << 30, None);
        let out = run(
            &mut Spells(0),
            &plan,
            &AtomicBool::new(false),
            &mut |_, _, _| {},
            &mut |_| Ok(()),
        )
        .unwrap();
        for m in &out.measured {
            assert_eq!(m.sample.best, f64::from(m.step.threads()), "{:?}", m.step);
        }
    }

    #[test]
    fn a_raised_stop_flag_keeps_what_finished_and_runs_nothing_more() {
        let plan = Plan::new(true, 2, (None, Some(32 << 20)), 16 << 30, None);
        let stop = AtomicBool::new(false);
        let mut bench = Mock {
            calls: 0,
            stop_after: Some((3, &stop)),
            fail_fma: false,
        };
        let out = run(&mut bench, &plan, &stop, &mut |_, _, _| {}, &mut |_| Ok(())).unwrap();
        assert!(out.stopped);
        assert_eq!(out.measured.len(), 3);
        assert_eq!(bench.calls, 3);
    }

    #[test]
    fn a_failing_step_is_reported_and_the_rest_still_run() {
        let plan = Plan::new(true, 2, (None, Some(32 << 20)), 16 << 30, None);
        let stop = AtomicBool::new(false);
        let mut bench = Mock {
            calls: 0,
            stop_after: None,
            fail_fma: true,
        };
        let out = run(&mut bench, &plan, &stop, &mut |_, _, _| {}, &mut |_| Ok(())).unwrap();
        assert_eq!(out.failed.len(), 2);
        assert!(out.failed[0].1.contains("illegal instruction"));
        assert_eq!(out.measured.len(), plan.steps.len() - 2);
    }

    #[test]
    fn each_stream_array_is_the_size_its_bytes_are_counted_for() {
        // The triad counts 3 × `bytes` per pass: its two sources and its destination must each be `bytes` long.
        let mut m = Machine::default();
        let (_, a, b, c) = m.arrays(1 << 20).unwrap();
        assert_eq!(a.len() * 8, 1 << 20);
        assert_eq!(b.len() * 8, 1 << 20);
        assert_eq!(c.len() * 4, 2 << 20);
    }

    /// Bytes of weights each GEMV step of `p` allocates.
    fn dot_weight_bytes(p: &Plan) -> Vec<u64> {
        p.steps
            .iter()
            .filter_map(|s| match *s {
                Step::Dot { t, rows, cols, .. } => {
                    let (per, bytes, _) = t.block();
                    Some((rows * (cols / per) * bytes) as u64)
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn an_absurd_l2_size_does_not_size_the_gemv_at_terabytes() {
        // An inventory claiming 1 TiB of L2 per core asked for a 550 GB GEMV (an abort on allocation).
        let p = Plan::new(true, 2, (Some(1 << 40), Some(32 << 20)), 16 << 30, None);
        let bytes = dot_weight_bytes(&p);
        assert!(!bytes.is_empty());
        assert!(
            bytes.iter().all(|b| *b <= 2 * L2_BYTES_MAX / DOT_L2_SHARE),
            "{bytes:?}"
        );
        assert!(p.notes.iter().any(|n| n.contains("L2")), "{:?}", p.notes);
    }

    #[test]
    fn an_absurd_embedding_length_keeps_the_gemv_rows_of_a_real_layer() {
        // A GGUF may declare any u32 embedding length: 4294967040 asked for a 36 GB GEMV of eight rows a thread.
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/gguf/llama-q4_k_m.gguf");
        let mut m = optimizer_model::load(&path).unwrap();
        m.hparams.embedding_length = Some(4_294_967_040);
        let p = Plan::new(
            true,
            2,
            (Some(512 << 10), Some(32 << 20)),
            16 << 30,
            Some(&m),
        );
        assert!(
            p.steps.iter().all(|s| match s {
                Step::Dot { cols, .. } => *cols == DEFAULT_DOT_COLS,
                _ => true,
            }),
            "{:?}",
            p.steps
        );
        assert!(
            p.notes.iter().any(|n| n.contains("4294967040")),
            "{:?}",
            p.notes
        );
    }

    #[test]
    fn a_gemv_beyond_the_weight_bound_fails_its_step_without_allocating() {
        let budget = Budget {
            rep_secs: 0.001,
            reps: 1,
        };
        let e = Machine::default()
            .dot(DotType::Q8_0, 1 << 20, DOT_MAX_COLS, 1, budget)
            .unwrap_err();
        assert!(e.contains("bytes of weights"), "{e}");
        assert!(
            Machine::default()
                .dot(DotType::Q8_0, usize::MAX / 2, 1 << 16, 1, budget)
                .is_err()
        );
    }

    #[test]
    fn the_real_machine_reports_the_threads_and_memory_it_has() {
        let c = Machine::default().capacity();
        assert!(c.threads.is_some_and(|t| t >= 1), "{c:?}");
        assert!(c.available_bytes.is_some_and(|b| b > 0), "{c:?}");
    }

    #[test]
    fn the_real_machine_measures_positive_rates() {
        // Tiny budgets: this checks the loops run and count their work, not the machine's speed.
        let budget = Budget {
            rep_secs: 0.001,
            reps: 1,
        };
        let mut m = Machine::default();
        for s in Stream::ALL {
            assert!(m.stream(s, 2, 1 << 20, budget).unwrap().best > 0.0);
        }
        assert!(m.fma(1, budget).unwrap().best > 0.0);
        for t in DotType::ALL {
            assert!(m.dot(t, 8, 512, 2, budget).unwrap().best > 0.0);
        }
        assert!(m.dot(DotType::Q4K, 8, 100, 1, budget).is_err());
    }
}
