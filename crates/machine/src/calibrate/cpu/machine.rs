//! The real machine: [`Machine`] times the loops of [`kernels`] on this CPU's threads (stream
//! arrays, FMA, quantized dot products) for the [`CpuBench`] seam.

use std::time::Instant;

use super::kernels::{self, DotType};
use super::{Budget, Capacity, CpuBench, CpuBenchError, DOT_MAX_WEIGHT_BYTES, Sample, Stream};

/// The stream arrays: their size in bytes, two u64 arrays (read, copy; the triad's destination) and the triad's
/// two f32 sources.
type Arrays = (u64, Vec<u64>, Vec<u64>, Vec<f32>);

/// Times the loops of [`kernels`] on this CPU.
#[derive(Debug, Default)]
pub struct Machine {
    buffers: Option<Arrays>,
}

/// Seconds each repetition's work runs untimed first (cores left idle by a one-thread step wake and clock up).
pub(crate) const WARMUP_SECS: f64 = 0.03;

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
    pub(super) fn arrays(&mut self, bytes: u64) -> Result<&mut Arrays, CpuBenchError> {
        if self.buffers.as_ref().is_none_or(|b| b.0 != bytes) {
            self.buffers = None;
            let words =
                usize::try_from(bytes / 8).map_err(|_| CpuBenchError::ArrayTooLarge { bytes })?;
            let alloc = |n: usize| -> Result<Vec<u64>, CpuBenchError> {
                let mut v = Vec::new();
                v.try_reserve_exact(n)
                    .map_err(|source| CpuBenchError::Alloc { bytes, source })?;
                v.extend((0..n as u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15)));
                Ok(v)
            };
            let a = alloc(words)?;
            let b = alloc(words)?;
            // The triad's two source arrays of `bytes` each, as f32 (4 bytes): 2 × bytes / 4 values.
            let mut c = Vec::new();
            c.try_reserve_exact(words * 4)
                .map_err(|source| CpuBenchError::Alloc {
                    bytes: 2 * bytes,
                    source,
                })?;
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
    ) -> Result<Sample, CpuBenchError> {
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

    fn fma(&mut self, threads: u32, budget: Budget) -> Result<Sample, CpuBenchError> {
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
    ) -> Result<Sample, CpuBenchError> {
        let (per, xbytes, ybytes) = t.block();
        if cols == 0 || !cols.is_multiple_of(per) || rows == 0 {
            return Err(CpuBenchError::Untiled {
                rows,
                cols,
                dot: t.name(),
                per,
            });
        }
        let blocks = cols / per;
        let weight_blocks = rows
            .checked_mul(blocks)
            .filter(|b| {
                b.checked_mul(xbytes)
                    .is_some_and(|n| n as u64 <= DOT_MAX_WEIGHT_BYTES)
            })
            .ok_or(CpuBenchError::TooLarge {
                rows,
                cols,
                dot: t.name(),
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
