//! GPU micro-benchmarks of `optimizer calibrate` (issue 10, "NVIDIA GPU"): device-to-device, host-to-device and
//! read bandwidth; GEMV throughput for f16, q8_0, q4_0 and the ternary I2_S, TL1 and TL2 layouts at real layer
//! shapes; GEMM through cuBLAS for f16 and bf16 (fp8 e4m3 through cuBLASLt on compute capability 8.9 and newer, and
//! the quantized types as dequantize-to-f16 plus an f16 GEMM) with throughput versus batch to find the knee, and
//! the largest batch whose buffers fit. Results become store rows through [`to_measurements`]. Touches the GPU
//! (through [`GpuBench`]) and the clock, nothing else: the caller records the rows and renders the progress.
//!
//! Everything runs behind the [`GpuBench`] seam: [`CudaBench`] drives a real NVIDIA GPU through cudarc (driver,
//! NVRTC, cuBLAS and cuBLASLt, each loaded at run time and checked for before first use, since cudarc panics on a
//! missing library), and [`MockBench`] is a deterministic stand-in with a memory limit and a throughput model, so
//! the statistics, the sizing and the store rows are tested without a GPU. The kernels live in `crates/machine/kernels/*.cu`,
//! are embedded at build time and compiled by NVRTC for the device at run time (no CUDA toolkit at build time).
//!
//! Trade-offs, one sentence each:
//! - Timing uses CUDA events around a run of back-to-back launches and takes the median of several runs, so a
//!   single launch's overhead is amortized and an outlier run (a clock change, another tenant) does not move it.
//! - The weights are allocated in enough copies to exceed the L2 cache several times and the launches rotate
//!   through them, so a GEMV measures DRAM bandwidth as decode sees it rather than a cache-resident matrix.
//! - The GEMV kernels are straightforward one-warp-per-row kernels, not llama.cpp's tuned `mmvq`, so they bound
//!   from below what a tuned engine reaches on the same layout.
//! - TL1 and TL2 are measured in their packed encodings (4-bit pair indices; 4-bit triple magnitudes with sign
//!   bits) but without the BitNet CPU tiling permutation and decoded arithmetically instead of through activation
//!   lookup tables, since those are CPU cache-blocking choices that a GPU kernel does not share.
//! - A quantized GEMM is timed as llama.cpp's cuBLAS path (dequantize to an f16 workspace, then an f16 GEMM),
//!   not as its MMQ kernels, because that path is what needs the workspace this module sizes.
//! - The largest batch is the memory bound computed from the queried free memory, confirmed by allocating it
//!   and halved on every out-of-memory, because the driver's free figure can overstate what one allocation gets.
//! - The batch sweep doubles while throughput rises by more than [`KNEE_TOLERANCE`] and then grows by 25 %
//!   while it still does, so the knee is found in few steps and no batch cap is assumed beyond memory.
//! - `decode_efficiency` is the median over shapes and layouts of the batch-1 GEMV bandwidth over the peak, and
//!   `prefill_efficiency` the median over shapes of the best f16 GEMM at most llama.cpp's default micro-batch
//!   over the peak FLOPS, so one row per phase summarises the run and the planner's "newest row wins" holds.

pub mod cuda;
pub mod mock;
pub mod sizing;
pub mod stats;

pub use cuda::{CudaBench, run_real_smoke};
pub use mock::MockBench;

use std::sync::atomic::{AtomicBool, Ordering};

use optimizer_store::{DeviceIdentity, NewMeasurement, Shape};

/// Layer shapes of a 7-8B dense model, rows x cols (output features x input features): Llama-3-8B's and
/// Mistral-7B's `config.json` give `hidden_size` 4096 and `intermediate_size` 14336, so the attention
/// projections are 4096x4096, the FFN gate and up projections 14336x4096 and the FFN down projection 4096x14336.
pub const DEFAULT_SHAPES: [LayerShape; 3] = [
    LayerShape {
        rows: 4096,
        cols: 4096,
    },
    LayerShape {
        rows: 4096,
        cols: 14336,
    },
    LayerShape {
        rows: 14336,
        cols: 4096,
    },
];

/// Batches of the GEMV sweep: 1 to 8 sequences decoded together, the range llama.cpp serves with its
/// matrix-vector kernels (ggml-cuda `mmvq.cuh`: `MMVQ_MAX_BATCH_SIZE 8`); beyond it the engine switches to GEMM.
pub const GEMV_BATCHES: [u32; 4] = [1, 2, 4, 8];

/// A batch step must raise throughput by more than this share to count as still rising: CUDA-event timings of
/// back-to-back launches repeat within 1-2 %, so 5 % is a rise and not noise.
pub const KNEE_TOLERANCE: f64 = 0.05;

/// llama.cpp's default micro-batch (`n_ubatch` 512, `common.h`): prefill multiplies at most this many tokens at
/// once, so `prefill_efficiency` is read from GEMMs no larger.
pub const PREFILL_UBATCH: u64 = 512;

/// The copies of a layer's weights that launches rotate through must total at least this many L2 caches, so a
/// copy has been evicted before it is read again.
pub const ROTATION_L2_MULTIPLE: u64 = 4;

/// Bandwidth buffers are this many L2 caches large, so a copy streams from DRAM (the L2 holds at most 1/16).
pub const BANDWIDTH_L2_MULTIPLE: u64 = 16;

/// At most this share of the free memory goes to fixed buffers (weight copies, bandwidth buffers), leaving the
/// rest to the batch being sized.
pub const FIXED_FREE_SHARE: f64 = 0.25;

/// Share of the free memory (queried after the fixed buffers are allocated) that the batch buffers may take:
/// cuBLAS allocates its own workspace and the context grows on first launches, outside our allocations.
pub const USABLE_FREE_FRACTION: f64 = 0.9;

/// Weight copies start at a multiple of this many bytes (the CUDA allocation granularity is at least 256), so
/// every copy is aligned for the kernels' 16-byte loads.
pub const COPY_ALIGN_BYTES: u64 = 256;

/// TL2 packs columns in triples up to a multiple of this many (BitNet's `convert-hf-to-gguf-bitnet.py`,
/// `preprocess_weights_tl2`: `BY3 = 96`), and the rest in TL1 pairs.
pub const TL2_TRIPLE_COLS_MULTIPLE: u32 = 96;

/// TL2 leaves at least this many trailing columns to the pair kernel (the BitNet fork's `ggml_nbytes` for TL2:
/// "the last 256 columns use the 2-weight kernel").
pub const TL2_MIN_PAIR_COLS: u32 = 256;

/// The BitNet fork's 32-byte tail after a ternary tensor's packed weights (its f32 scale, padded for alignment).
pub const BITNET_TAIL_BYTES: u64 = 32;

/// A weight or operand type the benchmarks use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum GpuDtype {
    F16,
    Bf16,
    Fp8E4m3,
    Q8_0,
    Q4_0,
    I2S,
    Tl1,
    Tl2,
}

impl GpuDtype {
    /// Every type, in measurement order.
    pub const ALL: [GpuDtype; 8] = [
        GpuDtype::F16,
        GpuDtype::Bf16,
        GpuDtype::Fp8E4m3,
        GpuDtype::Q8_0,
        GpuDtype::Q4_0,
        GpuDtype::I2S,
        GpuDtype::Tl1,
        GpuDtype::Tl2,
    ];

    /// The name in metric names and kernel names.
    pub fn name(self) -> &'static str {
        match self {
            GpuDtype::F16 => "f16",
            GpuDtype::Bf16 => "bf16",
            GpuDtype::Fp8E4m3 => "fp8_e4m3",
            GpuDtype::Q8_0 => "q8_0",
            GpuDtype::Q4_0 => "q4_0",
            GpuDtype::I2S => "i2_s",
            GpuDtype::Tl1 => "tl1",
            GpuDtype::Tl2 => "tl2",
        }
    }

    /// The type a model's ggml tensor type is measured as (`--model M` limits the work to these).
    pub fn from_ggml(t: optimizer_model::GgmlType) -> Option<GpuDtype> {
        use optimizer_model::GgmlType as G;
        Some(match t {
            G::F16 => GpuDtype::F16,
            G::BF16 => GpuDtype::Bf16,
            G::Q8_0 => GpuDtype::Q8_0,
            G::Q4_0 => GpuDtype::Q4_0,
            G::I2_S => GpuDtype::I2S,
            G::TL1 => GpuDtype::Tl1,
            G::TL2 => GpuDtype::Tl2,
            _ => return None,
        })
    }

    /// Whether the type is a block or ternary quantization (its GEMM needs a dequantized f16 workspace).
    pub fn is_quantized(self) -> bool {
        !matches!(self, GpuDtype::F16 | GpuDtype::Bf16 | GpuDtype::Fp8E4m3)
    }

    /// Whether a GEMV kernel exists for the type (bf16 and fp8 weights are not served by GEMV in llama.cpp).
    pub fn has_gemv(self) -> bool {
        !matches!(self, GpuDtype::Bf16 | GpuDtype::Fp8E4m3)
    }

    /// Bytes per activation element a GEMM reads.
    pub fn gemm_input_bytes(self) -> u64 {
        if self == GpuDtype::Fp8E4m3 { 1 } else { 2 }
    }

    /// Bytes per output element a GEMM writes (f16; bf16 for fp8).
    pub fn gemm_output_bytes(self) -> u64 {
        2
    }

    /// Why `shape` cannot be laid out in this type, if it cannot.
    pub fn shape_defect(self, shape: LayerShape) -> Option<String> {
        let multiple = match self {
            // cuBLASLt fp8 needs dimensions that are multiples of 16; the f16 GEMV loads 8 weights at once.
            GpuDtype::F16 | GpuDtype::Bf16 | GpuDtype::Fp8E4m3 => 16,
            GpuDtype::Q8_0 | GpuDtype::Q4_0 => 32,
            GpuDtype::I2S => 128,
            GpuDtype::Tl1 => 64,
            GpuDtype::Tl2 => 16,
        };
        if shape.rows == 0 || shape.cols == 0 {
            return Some("a dimension is 0".into());
        }
        if !shape.cols.is_multiple_of(multiple) {
            return Some(format!(
                "{} columns are not a multiple of {multiple}",
                shape.cols
            ));
        }
        if self == GpuDtype::Fp8E4m3 && !shape.rows.is_multiple_of(16) {
            return Some(format!("{} rows are not a multiple of 16", shape.rows));
        }
        if self == GpuDtype::Tl2 && tl2_triple_cols(shape.cols).is_none() {
            return Some(format!(
                "{} columns leave no triples after the {TL2_MIN_PAIR_COLS} pair columns",
                shape.cols
            ));
        }
        None
    }

    /// Bytes of one layer's weights in this type's layout (see `crates/machine/kernels/gemv.cu`), or `None` when the shape
    /// does not fit the layout or the size overflows.
    pub fn weight_bytes(self, shape: LayerShape) -> Option<u64> {
        if self.shape_defect(shape).is_some() {
            return None;
        }
        let rows = u64::from(shape.rows);
        let cols = u64::from(shape.cols);
        let n = rows.checked_mul(cols)?;
        match self {
            GpuDtype::F16 | GpuDtype::Bf16 => n.checked_mul(2),
            GpuDtype::Fp8E4m3 => Some(n),
            GpuDtype::Q8_0 => (n / 32).checked_mul(34),
            GpuDtype::Q4_0 => (n / 32).checked_mul(18),
            GpuDtype::I2S | GpuDtype::Tl1 => (n / 4).checked_add(BITNET_TAIL_BYTES),
            GpuDtype::Tl2 => {
                let k3 = u64::from(tl2_triple_cols(shape.cols)?);
                let row = k3 / 6 + k3 / 24 + (cols - k3) / 4;
                rows.checked_mul(row)?.checked_add(BITNET_TAIL_BYTES)
            }
        }
    }
}

impl std::fmt::Display for GpuDtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The columns TL2 packs in triples: the largest multiple of [`TL2_TRIPLE_COLS_MULTIPLE`] that leaves at least
/// [`TL2_MIN_PAIR_COLS`] columns to pairs; `None` when that is none.
pub fn tl2_triple_cols(cols: u32) -> Option<u32> {
    let k3 =
        cols.checked_sub(TL2_MIN_PAIR_COLS)? / TL2_TRIPLE_COLS_MULTIPLE * TL2_TRIPLE_COLS_MULTIPLE;
    (k3 > 0).then_some(k3)
}

/// A weight matrix: `rows` output features, each a row of `cols` input features (ggml's ne[0] = cols).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct LayerShape {
    pub rows: u32,
    pub cols: u32,
}

impl std::fmt::Display for LayerShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.rows, self.cols)
    }
}

/// What the device says about itself.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeviceInfo {
    pub name: String,
    /// (major, minor).
    pub compute_capability: (u32, u32),
    pub total_bytes: u64,
    /// 0 when unknown.
    pub l2_bytes: u64,
    pub sm_count: u32,
}

impl DeviceInfo {
    /// Why the device cannot run a benchmark of this type, if it cannot: fp8 tensor-core GEMMs need compute
    /// capability 8.9 (Ada) or newer (cuBLASLt's FP8 support matrix).
    pub fn unsupported(&self, dtype: GpuDtype) -> Option<String> {
        (dtype == GpuDtype::Fp8E4m3 && self.compute_capability < (8, 9)).then(|| {
            format!(
                "fp8 GEMM needs compute capability 8.9 or newer; {} is {}.{}",
                self.name, self.compute_capability.0, self.compute_capability.1
            )
        })
    }
}

/// Free and total device memory (`cuMemGetInfo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryInfo {
    pub free_bytes: u64,
    pub total_bytes: u64,
}

/// A device buffer a [`GpuBench`] allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Buffer {
    pub id: u64,
    pub bytes: u64,
}

/// Weights laid out as `copies` copies of `bytes` each, `stride` bytes apart; launch `i` reads copy
/// `i % copies`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Weights {
    pub buffer: Buffer,
    pub bytes: u64,
    pub stride: u64,
    pub copies: u32,
}

/// A kernel of `crates/machine/kernels/*.cu` with its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelLaunch {
    /// `read_bytes`: read `bytes` of `src` once.
    Read {
        src: Buffer,
        bytes: u64,
        sink: Buffer,
    },
    /// `gemv_<dtype>`: `batch` f32 vectors in `input`, f32 results in `output`.
    Gemv {
        dtype: GpuDtype,
        shape: LayerShape,
        batch: u32,
        weights: Weights,
        input: Buffer,
        output: Buffer,
    },
}

impl KernelLaunch {
    /// The kernel's name in `crates/machine/kernels/*.cu`.
    pub fn name(&self) -> String {
        match self {
            KernelLaunch::Read { .. } => "read_bytes".into(),
            KernelLaunch::Gemv { dtype, .. } => format!("gemv_{}", dtype.name()),
        }
    }
}

/// A GEMM Y = X W^T with X `batch` x cols, W rows x cols, Y `batch` x rows; a quantized `dtype` is dequantized
/// into `workspace` (rows x cols f16) first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmLaunch {
    pub dtype: GpuDtype,
    pub shape: LayerShape,
    pub batch: u64,
    pub weights: Weights,
    pub workspace: Option<Buffer>,
    pub input: Buffer,
    pub output: Buffer,
}

/// The seam between the benchmark logic and a GPU (hyperfine's executor pattern): [`CudaBench`] for a real one,
/// [`MockBench`] for tests. Timing methods run `launches` back-to-back operations and return the seconds they
/// took together.
pub trait GpuBench {
    fn info(&self) -> &DeviceInfo;
    fn memory(&mut self) -> Result<MemoryInfo, GpuError>;
    /// Allocates `bytes` of device memory; an allocation the device cannot satisfy is
    /// [`GpuError::OutOfMemory`], distinct from every other failure.
    fn alloc(&mut self, bytes: u64) -> Result<Buffer, GpuError>;
    fn free(&mut self, buffer: Buffer) -> Result<(), GpuError>;
    /// Fills the first `bytes` of `buffer` with finite pseudo-random values (`crates/machine/kernels/fill.cu`).
    fn fill(&mut self, buffer: Buffer, bytes: u64) -> Result<(), GpuError>;
    fn time_kernel(&mut self, launch: &KernelLaunch, launches: u32) -> Result<f64, GpuError>;
    fn time_gemm(&mut self, gemm: &GemmLaunch, launches: u32) -> Result<f64, GpuError>;
    fn time_copy_d2d(
        &mut self,
        src: Buffer,
        dst: Buffer,
        bytes: u64,
        launches: u32,
    ) -> Result<f64, GpuError>;
    fn time_copy_h2d(&mut self, dst: Buffer, bytes: u64, launches: u32) -> Result<f64, GpuError>;
}

/// Why a GPU benchmark could not run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GpuError {
    #[error("no NVIDIA driver: libcuda not found")]
    NoDriver,
    #[error(
        "{library} not found (needed for {needed_for}); install the CUDA runtime library that provides it, or put its directory on LD_LIBRARY_PATH"
    )]
    MissingLibrary {
        library: &'static str,
        needed_for: &'static str,
    },
    #[error("out of GPU memory allocating {requested_bytes} bytes")]
    OutOfMemory { requested_bytes: u64 },
    #[error("{what}: nothing fits in GPU memory: {detail}")]
    NoBatchFits { what: String, detail: String },
    #[error("{call} failed: {message}")]
    Cuda { call: String, message: String },
    #[error("NVRTC could not compile the calibration kernels ({options}): {log}")]
    Compile { options: String, log: String },
    #[error("{0}")]
    Unsupported(String),
    #[error("{what}: the timer returned {seconds} s for {launches} launch(es)")]
    Timer {
        what: String,
        seconds: f64,
        launches: u32,
    },
}

/// Peaks to compute efficiencies against, from the device's profile.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Peaks {
    pub bandwidth_bytes_per_s: f64,
    /// Dense f16 tensor FLOP/s (what the planner's prefill roofline uses).
    pub flops: f64,
}

/// How each point is timed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// Launches run and discarded before a point (clocks ramp up, caches and JIT settle).
    pub warmup_launches: u32,
    /// Timed runs per point; the median is kept.
    pub samples: u32,
    /// Each timed run has at least this many seconds of launches, so event resolution (0.5 us) and launch
    /// overhead stay below 0.1 %.
    pub min_sample_s: f64,
}

impl Timing {
    /// Thorough: 7 runs of at least 20 ms.
    pub const FULL: Timing = Timing {
        warmup_launches: 10,
        samples: 7,
        min_sample_s: 0.02,
    };
    /// `--quick`: 3 runs of at least 5 ms.
    pub const QUICK: Timing = Timing {
        warmup_launches: 3,
        samples: 3,
        min_sample_s: 0.005,
    };
}

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
    /// Everything at `shapes` (the model's, or [`DEFAULT_SHAPES`]).
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
enum Step {
    Read,
    CopyD2D,
    CopyH2D,
    Gemv(GpuDtype, LayerShape),
    Gemm(GpuDtype, LayerShape),
}

impl Step {
    fn label(&self) -> String {
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
    pub fn metric(&self) -> String {
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

    pub fn unit(&self) -> &'static str {
        match self.bench {
            Bench::CopyD2D | Bench::CopyH2D | Bench::Read | Bench::Gemv => "bytes/s",
            Bench::Gemm => "FLOP/s",
            Bench::MaxBatch | Bench::KneeBatch => "tokens",
        }
    }
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

/// Allocates and remembers the buffer in `held`, so the caller frees it whatever happens.
fn alloc(bench: &mut dyn GpuBench, held: &mut Vec<Buffer>, bytes: u64) -> Result<Buffer, GpuError> {
    let b = bench.alloc(bytes)?;
    held.push(b);
    Ok(b)
}

fn run_step(
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
pub fn bandwidth_bytes(info: &DeviceInfo, free_bytes: u64) -> u64 {
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

#[cfg(test)]
mod tests;
