//! One GPU calibration step each: the bandwidth buffers and their copies and reads, the GEMV sweep over batch,
//! and the GEMM sized to memory and swept to its knee; each allocates through `held` so the caller frees it.

use std::sync::atomic::{AtomicBool, Ordering};

use super::plan::Step;
use super::{
    BANDWIDTH_L2_MULTIPLE, Bench, Buffer, COPY_ALIGN_BYTES, DeviceInfo, FIXED_FREE_SHARE,
    GemmLaunch, GpuBench, GpuDtype, GpuError, GpuPlan, GpuResult, KernelLaunch, LayerShape,
    Weights, sizing, stats,
};

/// Allocates and remembers the buffer in `held`, so the caller frees it whatever happens.
fn alloc(bench: &mut dyn GpuBench, held: &mut Vec<Buffer>, bytes: u64) -> Result<Buffer, GpuError> {
    let b = bench.alloc(bytes)?;
    held.push(b);
    Ok(b)
}

pub(super) fn run_step(
    bench: &mut dyn GpuBench,
    plan: &GpuPlan,
    step: Step,
    stop: &AtomicBool,
    held: &mut Vec<Buffer>,
    out: &mut Vec<GpuResult>,
) -> Result<(), GpuError> {
    match step {
        Step::Read | Step::CopyD2D | Step::CopyH2D => bandwidth_step(bench, plan, step, held, out),
        Step::Gemv(d, s) => gemv_step(bench, plan, d, s, stop, held, out),
        Step::Gemm(d, s) => gemm_step(bench, plan, d, s, stop, held, out),
    }
}

/// Bytes of each bandwidth buffer: [`BANDWIDTH_L2_MULTIPLE`] L2 caches, within [`FIXED_FREE_SHARE`] of the
/// free memory for both buffers together, a multiple of 16 bytes.
pub(crate) fn bandwidth_bytes(info: &DeviceInfo, free_bytes: u64) -> u64 {
    let share = (free_bytes as f64 * FIXED_FREE_SHARE / 2.0) as u64;
    let want = info.l2_bytes.saturating_mul(BANDWIDTH_L2_MULTIPLE);
    let bytes = if want == 0 { share } else { want.min(share) };
    bytes / 16 * 16
}

fn bandwidth_step(
    bench: &mut dyn GpuBench,
    plan: &GpuPlan,
    step: Step,
    held: &mut Vec<Buffer>,
    out: &mut Vec<GpuResult>,
) -> Result<(), GpuError> {
    let mem = bench.memory()?;
    let bytes = bandwidth_bytes(bench.info(), mem.free_bytes);
    if bytes == 0 {
        return Err(GpuError::NoBatchFits {
            what: step.label(),
            detail: format!("{} bytes free", mem.free_bytes),
        });
    }
    let src = alloc(bench, held, bytes)?;
    bench.fill(src, bytes)?;
    let (bench_kind, moved, timed) = match step {
        Step::Read => {
            let sink = alloc(bench, held, 16)?;
            let launch = KernelLaunch::Read { src, bytes, sink };
            let t = stats::time(&plan.timing, "read_bytes", |n| {
                bench.time_kernel(&launch, n)
            })?;
            (Bench::Read, bytes, t)
        }
        Step::CopyD2D => {
            let dst = alloc(bench, held, bytes)?;
            let t = stats::time(&plan.timing, "cuMemcpyDtoD", |n| {
                bench.time_copy_d2d(src, dst, bytes, n)
            })?;
            // A copy reads and writes every byte (STREAM's convention).
            (Bench::CopyD2D, bytes.saturating_mul(2), t)
        }
        _ => {
            let t = stats::time(&plan.timing, "cuMemcpyHtoD", |n| {
                bench.time_copy_h2d(src, bytes, n)
            })?;
            (Bench::CopyH2D, bytes, t)
        }
    };
    let value = moved as f64 / timed.seconds;
    // Host-to-device goes over PCIe or NVLink-C2C, not the device's memory: no device peak applies.
    let efficiency = match bench_kind {
        Bench::CopyH2D => None,
        _ => plan.peaks.map(|p| value / p.bandwidth_bytes_per_s),
    };
    out.push(point(
        bench_kind, None, None, None, moved, 0, &timed, value, efficiency,
    ));
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn point(
    bench: Bench,
    dtype: Option<GpuDtype>,
    shape: Option<LayerShape>,
    batch: Option<u64>,
    bytes: u64,
    flops: u64,
    t: &stats::Timed,
    value: f64,
    efficiency: Option<f64>,
) -> GpuResult {
    GpuResult {
        bench,
        dtype,
        shape,
        batch,
        bytes,
        flops,
        seconds: t.seconds,
        seconds_min: t.seconds_min,
        seconds_max: t.seconds_max,
        samples: t.samples,
        launches: t.launches,
        value,
        efficiency,
    }
}

/// Allocates the weight copies: as many as [`sizing::rotation_copies`] asks, halved on out-of-memory down to
/// one; out of memory at one copy is the error.
fn alloc_weights(
    bench: &mut dyn GpuBench,
    held: &mut Vec<Buffer>,
    dtype: GpuDtype,
    shape: LayerShape,
) -> Result<Weights, GpuError> {
    let bytes = dtype
        .weight_bytes(shape)
        .ok_or_else(|| GpuError::Unsupported(format!("{dtype} cannot hold a {shape} layer")))?;
    let stride = bytes
        .checked_next_multiple_of(COPY_ALIGN_BYTES)
        .ok_or(GpuError::OutOfMemory {
            requested_bytes: u64::MAX,
        })?;
    let mem = bench.memory()?;
    let mut copies = sizing::rotation_copies(stride, bench.info().l2_bytes, mem.free_bytes);
    loop {
        let total = stride
            .checked_mul(u64::from(copies))
            .ok_or(GpuError::OutOfMemory {
                requested_bytes: u64::MAX,
            })?;
        match alloc(bench, held, total) {
            Ok(buffer) => {
                bench.fill(buffer, total)?;
                return Ok(Weights {
                    buffer,
                    bytes,
                    stride,
                    copies,
                });
            }
            Err(GpuError::OutOfMemory { .. }) if copies > 1 => copies /= 2,
            Err(GpuError::OutOfMemory { requested_bytes }) => {
                return Err(GpuError::NoBatchFits {
                    what: format!("{dtype} {shape} weights"),
                    detail: format!(
                        "allocating one copy ({requested_bytes} bytes) ran out of memory with {} bytes reported free",
                        mem.free_bytes
                    ),
                });
            }
            Err(e) => return Err(e),
        }
    }
}

fn gemv_step(
    bench: &mut dyn GpuBench,
    plan: &GpuPlan,
    dtype: GpuDtype,
    shape: LayerShape,
    stop: &AtomicBool,
    held: &mut Vec<Buffer>,
    out: &mut Vec<GpuResult>,
) -> Result<(), GpuError> {
    let weights = alloc_weights(bench, held, dtype, shape)?;
    let max_batch = u64::from(plan.gemv_batches.iter().copied().max().unwrap_or(1));
    let cols = u64::from(shape.cols);
    let rows = u64::from(shape.rows);
    let overflow = || GpuError::Unsupported(format!("GEMV {dtype} {shape}: sizes overflow"));
    let in_bytes = max_batch
        .checked_mul(cols)
        .and_then(|n| n.checked_mul(4))
        .ok_or_else(overflow)?;
    let out_bytes = max_batch
        .checked_mul(rows)
        .and_then(|n| n.checked_mul(4))
        .ok_or_else(overflow)?;
    let input = alloc(bench, held, in_bytes)?;
    let output = alloc(bench, held, out_bytes)?;
    bench.fill(input, in_bytes)?;
    for &batch in &plan.gemv_batches {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let launch = KernelLaunch::Gemv {
            dtype,
            shape,
            batch,
            weights,
            input,
            output,
        };
        let t = stats::time(&plan.timing, &launch.name(), |n| {
            bench.time_kernel(&launch, n)
        })?;
        let b = u64::from(batch);
        let moved = weights
            .bytes
            .saturating_add(b.saturating_mul(cols + rows).saturating_mul(4));
        let flops = 2u64
            .saturating_mul(rows)
            .saturating_mul(cols)
            .saturating_mul(b);
        let value = moved as f64 / t.seconds;
        let efficiency = plan.peaks.map(|p| value / p.bandwidth_bytes_per_s);
        out.push(point(
            Bench::Gemv,
            Some(dtype),
            Some(shape),
            Some(b),
            moved,
            flops,
            &t,
            value,
            efficiency,
        ));
    }
    Ok(())
}

fn gemm_step(
    bench: &mut dyn GpuBench,
    plan: &GpuPlan,
    dtype: GpuDtype,
    shape: LayerShape,
    stop: &AtomicBool,
    held: &mut Vec<Buffer>,
    out: &mut Vec<GpuResult>,
) -> Result<(), GpuError> {
    let weights = alloc_weights(bench, held, dtype, shape)?;
    let rows = u64::from(shape.rows);
    let cols = u64::from(shape.cols);
    let workspace = if dtype.is_quantized() {
        let bytes = rows.saturating_mul(cols).saturating_mul(2);
        Some(alloc(bench, held, bytes).map_err(|e| match e {
            GpuError::OutOfMemory { requested_bytes } => GpuError::NoBatchFits {
                what: format!("GEMM {dtype} {shape}"),
                detail: format!(
                    "the f16 dequantization workspace ({requested_bytes} bytes) ran out of memory"
                ),
            },
            e => e,
        })?)
    } else {
        None
    };
    let per_batch = sizing::BatchBytes {
        input: cols.saturating_mul(dtype.gemm_input_bytes()),
        output: rows.saturating_mul(dtype.gemm_output_bytes()),
    };
    let what = format!("GEMM {dtype} {shape}");
    let fit = sizing::confirm_batch(bench, &what, per_batch)?;
    held.push(fit.input);
    held.push(fit.output);
    let none = stats::Timed::none();
    out.push(point(
        Bench::MaxBatch,
        Some(dtype),
        Some(shape),
        Some(fit.batch),
        0,
        0,
        &none,
        fit.batch as f64,
        None,
    ));
    let mut filled = 0u64;
    let mut measured = Vec::new();
    let sweep = sizing::sweep(fit.batch, plan.knee_tolerance, stop, &mut |batch| {
        let need = batch.saturating_mul(per_batch.input);
        if need > filled {
            bench.fill(fit.input, need)?;
            filled = need;
        }
        let gemm = GemmLaunch {
            dtype,
            shape,
            batch,
            weights,
            workspace,
            input: fit.input,
            output: fit.output,
        };
        let t = stats::time(&plan.timing, &what, |n| bench.time_gemm(&gemm, n))?;
        let flops = 2u64
            .saturating_mul(rows)
            .saturating_mul(cols)
            .saturating_mul(batch);
        let value = flops as f64 / t.seconds;
        let efficiency = match dtype {
            GpuDtype::F16 | GpuDtype::Bf16 => plan.peaks.map(|p| value / p.flops),
            // The peak passed is dense f16; fp8 runs at twice it and a dequantizing GEMM is not one kernel.
            _ => None,
        };
        let moved = weights
            .bytes
            .saturating_add(workspace.map_or(0, |w| w.bytes.saturating_mul(2)))
            .saturating_add(batch.saturating_mul(per_batch.input + per_batch.output));
        measured.push(point(
            Bench::Gemm,
            Some(dtype),
            Some(shape),
            Some(batch),
            moved,
            flops,
            &t,
            value,
            efficiency,
        ));
        Ok(value)
    });
    out.append(&mut measured);
    let sweep = sweep?;
    if !sweep.stopped {
        out.push(point(
            Bench::KneeBatch,
            Some(dtype),
            Some(shape),
            Some(sweep.knee),
            0,
            0,
            &none,
            sweep.knee as f64,
            None,
        ));
    }
    Ok(())
}
