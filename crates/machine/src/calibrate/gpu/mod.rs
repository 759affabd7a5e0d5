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

pub use cuda::CudaBench;
#[cfg(test)]
use cuda::run_real_smoke;
pub(crate) use dtype::tl2_triple_cols;
pub use dtype::{GpuDtype, LayerShape};
pub use mock::MockBench;
pub use plan::{GpuCalibration, GpuPlan, run};
pub use results::{Bench, GpuResult, decode_efficiency, prefill_efficiency, to_measurements};

mod dtype;
mod plan;
mod results;
mod steps;

// `tests.rs` reaches the store's device type through `use super::*`, as when the store rows were built here.
#[cfg(test)]
use optimizer_store::DeviceIdentity;

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
pub(crate) const GEMV_BATCHES: [u32; 4] = [1, 2, 4, 8];

/// A batch step must raise throughput by more than this share to count as still rising: CUDA-event timings of
/// back-to-back launches repeat within 1-2 %, so 5 % is a rise and not noise.
pub(crate) const KNEE_TOLERANCE: f64 = 0.05;

/// llama.cpp's default micro-batch (`n_ubatch` 512, `common.h`): prefill multiplies at most this many tokens at
/// once, so `prefill_efficiency` is read from GEMMs no larger.
pub(crate) const PREFILL_UBATCH: u64 = 512;

/// The copies of a layer's weights that launches rotate through must total at least this many L2 caches, so a
/// copy has been evicted before it is read again.
pub(crate) const ROTATION_L2_MULTIPLE: u64 = 4;

/// Bandwidth buffers are this many L2 caches large, so a copy streams from DRAM (the L2 holds at most 1/16).
pub(crate) const BANDWIDTH_L2_MULTIPLE: u64 = 16;

/// At most this share of the free memory goes to fixed buffers (weight copies, bandwidth buffers), leaving the
/// rest to the batch being sized.
pub(crate) const FIXED_FREE_SHARE: f64 = 0.25;

/// Share of the free memory (queried after the fixed buffers are allocated) that the batch buffers may take:
/// cuBLAS allocates its own workspace and the context grows on first launches, outside our allocations.
pub(crate) const USABLE_FREE_FRACTION: f64 = 0.9;

/// Weight copies start at a multiple of this many bytes (the CUDA allocation granularity is at least 256), so
/// every copy is aligned for the kernels' 16-byte loads.
pub(crate) const COPY_ALIGN_BYTES: u64 = 256;

/// TL2 packs columns in triples up to a multiple of this many (BitNet's `convert-hf-to-gguf-bitnet.py`,
/// `preprocess_weights_tl2`: `BY3 = 96`), and the rest in TL1 pairs.
pub(crate) const TL2_TRIPLE_COLS_MULTIPLE: u32 = 96;

/// TL2 leaves at least this many trailing columns to the pair kernel (the BitNet fork's `ggml_nbytes` for TL2:
/// "the last 256 columns use the 2-weight kernel").
pub(crate) const TL2_MIN_PAIR_COLS: u32 = 256;

/// The BitNet fork's 32-byte tail after a ternary tensor's packed weights (its f32 scale, padded for alignment).
pub(crate) const BITNET_TAIL_BYTES: u64 = 32;

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
    pub(crate) fn unsupported(&self, dtype: GpuDtype) -> Option<String> {
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
    pub(crate) const FULL: Timing = Timing {
        warmup_launches: 10,
        samples: 7,
        min_sample_s: 0.02,
    };
    /// `--quick`: 3 runs of at least 5 ms.
    pub(crate) const QUICK: Timing = Timing {
        warmup_launches: 3,
        samples: 3,
        min_sample_s: 0.005,
    };
}

#[cfg(test)]
mod tests;
