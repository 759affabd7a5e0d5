//! How much to allocate: weight copies for cache rotation, and the largest GEMM batch, decided from the queried
//! free memory, the layer shape and the type, then confirmed by allocating it (halved on every out-of-memory);
//! and the batch sweep that finds the throughput knee (doubling, then 25 % steps, while throughput rises by
//! more than the tolerance). No memory figure and no batch cap is assumed: memory is the only bound.

use std::sync::atomic::{AtomicBool, Ordering};

use super::{
    Buffer, FIXED_FREE_SHARE, GpuBench, GpuError, ROTATION_L2_MULTIPLE, USABLE_FREE_FRACTION,
};

/// How many copies of a layer's weights (each `stride` bytes) the launches rotate through: enough to total
/// [`ROTATION_L2_MULTIPLE`] L2 caches, within [`FIXED_FREE_SHARE`] of the free memory, and at least one.
pub(crate) fn rotation_copies(stride: u64, l2_bytes: u64, free_bytes: u64) -> u32 {
    if stride == 0 {
        return 1;
    }
    let want = l2_bytes
        .saturating_mul(ROTATION_L2_MULTIPLE)
        .div_ceil(stride)
        .max(1);
    let room = ((free_bytes as f64 * FIXED_FREE_SHARE) as u64 / stride).max(1);
    u32::try_from(want.min(room)).unwrap_or(u32::MAX)
}

/// Bytes one more token of batch takes: its activations in and its results out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchBytes {
    pub input: u64,
    pub output: u64,
}

impl BatchBytes {
    pub(crate) fn total(self) -> u64 {
        self.input.saturating_add(self.output)
    }
}

/// The batch buffers that were allocated, and how the batch was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fit {
    pub batch: u64,
    pub input: Buffer,
    pub output: Buffer,
    /// Every batch tried, in order (the first is the memory bound; each next one half the previous).
    pub tried: Vec<u64>,
}

/// The memory bound: how many tokens' buffers fit in [`USABLE_FREE_FRACTION`] of `free_bytes`.
pub(crate) fn memory_bound(free_bytes: u64, per_batch: BatchBytes) -> u64 {
    let usable = (free_bytes as f64 * USABLE_FREE_FRACTION) as u64;
    usable.checked_div(per_batch.total()).unwrap_or(0)
}

/// Finds the largest batch whose buffers can be allocated: starts at the [`memory_bound`] of the free memory
/// queried now, and halves on every out-of-memory. Out of memory at one token ends with
/// [`GpuError::NoBatchFits`] (never a loop); any other error ends it at once. On success the caller owns (and
/// must free) the two buffers.
pub(crate) fn confirm_batch(
    bench: &mut dyn GpuBench,
    what: &str,
    per_batch: BatchBytes,
) -> Result<Fit, GpuError> {
    let mem = bench.memory()?;
    let mut batch = memory_bound(mem.free_bytes, per_batch);
    let mut tried = Vec::new();
    let no_fit = |tried: &[u64], why: String| GpuError::NoBatchFits {
        what: what.to_string(),
        detail: format!(
            "{why}; {} bytes reported free, {} bytes per token, batches tried: {tried:?}",
            mem.free_bytes,
            per_batch.total()
        ),
    };
    if batch == 0 {
        return Err(no_fit(&tried, "not even one token's buffers fit".into()));
    }
    loop {
        tried.push(batch);
        let attempt = (|| -> Result<(Buffer, Buffer), GpuError> {
            let input = bench.alloc(batch.saturating_mul(per_batch.input))?;
            match bench.alloc(batch.saturating_mul(per_batch.output)) {
                Ok(output) => Ok((input, output)),
                Err(e) => {
                    bench.free(input)?;
                    Err(e)
                }
            }
        })();
        match attempt {
            Ok((input, output)) => {
                return Ok(Fit {
                    batch,
                    input,
                    output,
                    tried,
                });
            }
            Err(GpuError::OutOfMemory { requested_bytes }) => {
                if batch == 1 {
                    return Err(no_fit(
                        &tried,
                        format!(
                            "allocating {requested_bytes} bytes for one token ran out of memory"
                        ),
                    ));
                }
                batch /= 2;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Throughput against batch, and the knee.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sweep {
    /// (batch, throughput) in the order measured.
    pub points: Vec<(u64, f64)>,
    /// The batch with the best throughput that still rose by more than the tolerance.
    pub knee: u64,
    /// The stop flag cut the sweep short (the knee is then only the best so far).
    pub stopped: bool,
}

/// Measures throughput at batch 1, 2, 4, ... while it rises by more than `tolerance` and the batch stays
/// within `cap`; then from the best batch grows by 25 % (at least one) while it still rises by more than
/// `tolerance` and stays within `cap`. `measure` returns the throughput at a batch.
pub(crate) fn sweep(
    cap: u64,
    tolerance: f64,
    stop: &AtomicBool,
    measure: &mut dyn FnMut(u64) -> Result<f64, GpuError>,
) -> Result<Sweep, GpuError> {
    let mut points = Vec::new();
    if cap == 0 {
        return Ok(Sweep {
            points,
            knee: 0,
            stopped: false,
        });
    }
    let first = measure(1)?;
    points.push((1, first));
    let mut best = (1u64, first);
    let mut stopped = false;
    let rises = |t: f64, best: (u64, f64)| t > best.1 * (1.0 + tolerance);
    // Doubling.
    loop {
        let next = best.0.saturating_mul(2);
        if next > cap {
            break;
        }
        if stop.load(Ordering::Relaxed) {
            stopped = true;
            break;
        }
        let t = measure(next)?;
        points.push((next, t));
        if rises(t, best) {
            best = (next, t);
        } else {
            break;
        }
    }
    // 25 % steps from the best.
    while !stopped {
        let next = (best.0.saturating_add(best.0 / 4)).max(best.0.saturating_add(1));
        if next > cap || points.iter().any(|&(b, _)| b == next) {
            break;
        }
        if stop.load(Ordering::Relaxed) {
            stopped = true;
            break;
        }
        let t = measure(next)?;
        points.push((next, t));
        if rises(t, best) {
            best = (next, t);
        } else {
            break;
        }
    }
    Ok(Sweep {
        points,
        knee: best.0,
        stopped,
    })
}
