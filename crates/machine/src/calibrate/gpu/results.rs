//! What a GPU calibration measured ([`GpuResult`]), the decode and prefill efficiencies summarising it, and the
//! store rows it becomes.

use optimizer_store::{DeviceIdentity, NewMeasurement, Shape};

use super::{GpuDtype, LayerShape, PREFILL_UBATCH};

/// What a result measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bench {
    CopyD2D,
    CopyH2D,
    Read,
    Gemv,
    Gemm,
    /// The largest GEMM batch whose buffers were allocated.
    MaxBatch,
    /// The batch past which GEMM throughput stopped rising.
    KneeBatch,
}

/// One measured point.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GpuResult {
    pub bench: Bench,
    pub dtype: Option<GpuDtype>,
    pub shape: Option<LayerShape>,
    /// Vectors (GEMV) or tokens (GEMM) per launch.
    pub batch: Option<u64>,
    /// Bytes each launch moves (read plus written).
    pub bytes: u64,
    /// Floating-point operations each launch performs.
    pub flops: u64,
    /// Median seconds per launch, and the fastest and slowest run's (0 for the batch rows).
    pub seconds: f64,
    pub seconds_min: f64,
    pub seconds_max: f64,
    pub samples: u32,
    pub launches: u32,
    /// Bytes/s, FLOP/s, or tokens for the batch rows.
    pub value: f64,
    /// `value` over the caller's peak (bandwidth for copies, reads and GEMVs; f16 FLOPS for f16/bf16 GEMMs).
    pub efficiency: Option<f64>,
}

impl GpuResult {
    /// The store metric.
    pub(crate) fn metric(&self) -> String {
        let d = self.dtype.map_or("", GpuDtype::name);
        match self.bench {
            Bench::CopyD2D => "gpu_bandwidth_d2d_bytes_per_s".into(),
            Bench::CopyH2D => "gpu_bandwidth_h2d_bytes_per_s".into(),
            Bench::Read => "gpu_bandwidth_read_bytes_per_s".into(),
            Bench::Gemv => format!("gpu_gemv_{d}_bytes_per_s"),
            Bench::Gemm => format!("gpu_gemm_{d}_flops"),
            Bench::MaxBatch => format!("gpu_gemm_{d}_max_batch_tokens"),
            Bench::KneeBatch => format!("gpu_gemm_{d}_knee_batch_tokens"),
        }
    }

    pub(crate) fn unit(&self) -> &'static str {
        match self.bench {
            Bench::CopyD2D | Bench::CopyH2D | Bench::Read | Bench::Gemv => "bytes/s",
            Bench::Gemm => "FLOP/s",
            Bench::MaxBatch | Bench::KneeBatch => "tokens",
        }
    }
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// `decode_efficiency`: the median over the batch-1 GEMVs of their bandwidth over the peak, with the metrics it
/// rests on.
pub fn decode_efficiency(results: &[GpuResult]) -> Option<(f64, Vec<String>)> {
    let used: Vec<&GpuResult> = results
        .iter()
        .filter(|r| r.bench == Bench::Gemv && r.batch == Some(1) && r.efficiency.is_some())
        .collect();
    let value = median(used.iter().filter_map(|r| r.efficiency).collect())?;
    Some((value, used.iter().map(|r| describe(r)).collect()))
}

/// `prefill_efficiency`: per shape, the best f16 GEMM (bf16 where no f16 was measured) at no more than
/// [`PREFILL_UBATCH`] tokens over the peak FLOPS; the median over shapes.
pub fn prefill_efficiency(results: &[GpuResult]) -> Option<(f64, Vec<String>)> {
    let of = |d: GpuDtype| -> Vec<&GpuResult> {
        let mut best: Vec<&GpuResult> = Vec::new();
        for r in results.iter().filter(|r| {
            r.bench == Bench::Gemm
                && r.dtype == Some(d)
                && r.efficiency.is_some()
                && r.batch.is_some_and(|b| b <= PREFILL_UBATCH)
        }) {
            match best.iter_mut().find(|b| b.shape == r.shape) {
                Some(b) if b.efficiency < r.efficiency => *b = r,
                Some(_) => {}
                None => best.push(r),
            }
        }
        best
    };
    let mut used = of(GpuDtype::F16);
    if used.is_empty() {
        used = of(GpuDtype::Bf16);
    }
    let value = median(used.iter().filter_map(|r| r.efficiency).collect())?;
    Some((value, used.iter().map(|r| describe(r)).collect()))
}

fn describe(r: &GpuResult) -> String {
    let mut s = r.metric();
    if let Some(shape) = r.shape {
        s.push_str(&format!(" {shape}"));
    }
    if let Some(b) = r.batch {
        s.push_str(&format!(" batch {b}"));
    }
    s
}

/// The results as store rows for `device` (no model: a calibration holds for every model): one row per
/// result, with the layer shape, bytes, FLOPs and timing spread in the JSON context, plus one
/// `decode_efficiency` and one `prefill_efficiency` row when peaks were given, which `Store::evidence` returns
/// as calibrated efficiencies. The run they are recorded under must carry the runtime the planner plans for
/// (`llama.cpp`): evidence is matched by runtime. Non-finite values are left out (the store refuses them).
pub fn to_measurements(results: &[GpuResult], device: DeviceIdentity) -> Vec<NewMeasurement> {
    let mut rows = Vec::new();
    for r in results {
        if !r.value.is_finite() {
            continue;
        }
        let mut shape = Shape::default();
        let batch = r.batch.and_then(|b| u32::try_from(b).ok());
        match r.bench {
            // GEMV vectors are sequences decoded together.
            Bench::Gemv => shape.sequences = batch,
            // GEMM rows are the tokens of one micro-batch.
            Bench::Gemm | Bench::MaxBatch | Bench::KneeBatch => {
                shape.batch = batch;
                shape.ubatch = batch;
            }
            _ => {}
        }
        let context = serde_json::json!({
            "bench": r.bench,
            "dtype": r.dtype.map(GpuDtype::name),
            "rows": r.shape.map(|s| s.rows),
            "cols": r.shape.map(|s| s.cols),
            "batch": r.batch,
            "bytes_per_launch": r.bytes,
            "flops_per_launch": r.flops,
            "seconds_per_launch": r.seconds,
            "seconds_min": r.seconds_min,
            "seconds_max": r.seconds_max,
            "samples": r.samples,
            "launches_per_sample": r.launches,
            "efficiency": r.efficiency,
        });
        rows.push(NewMeasurement {
            device: device.clone(),
            model: None,
            metric: r.metric(),
            value: r.value,
            unit: r.unit().into(),
            shape,
            context: context.to_string(),
        });
    }
    for (metric, summary) in [
        ("decode_efficiency", decode_efficiency(results)),
        ("prefill_efficiency", prefill_efficiency(results)),
    ] {
        if let Some((value, from)) = summary.filter(|(v, _)| v.is_finite()) {
            rows.push(NewMeasurement {
                device: device.clone(),
                model: None,
                metric: metric.into(),
                value,
                unit: "fraction of peak".into(),
                shape: Shape::default(),
                context: serde_json::json!({ "median_of": from, "source": "gpu micro-benchmark" })
                    .to_string(),
            });
        }
    }
    rows
}
