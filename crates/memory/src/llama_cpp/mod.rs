//! llama.cpp's memory use per device, computed from the model's exact tensors and the runtime parameters, with
//! the engine's own parameter names and rules. Pinned engine: llama.cpp 0c1e5709 as vendored by the registry
//! package `llama-cpp-python==0.3.36`; every rule below cites the engine source it follows.
//!
//! What is exact and what is modelled: weights, repacked weights, KV cache, recurrent state and the output
//! buffer follow the engine's allocation arithmetic byte for byte. The compute buffer is the peak of the
//! engine's graph allocator, which depends on the order the graph frees tensors; it is modelled as the largest
//! live set among the graph's phases (attention, feed-forward, output) and checked against the measured table
//! in `tests/fixtures/llama-cpp/`.
//!
//! Every size is computed with checked arithmetic from bounded inputs: flags are refused above the engine's own
//! limits ([`MAX_CTX_FLAG`], [`MAX_BATCH_FLAG`], [`MAX_SEQ`]) and hyper-parameters above llama.cpp's
//! (`model::check_hparams`, [`MAX_LAYERS`]). Trade-off: a size that still overflows 64 bits is blamed on the
//! model when it overflows even at the smallest context and batch, and on the flags otherwise.
//!
//! One file per stage of [`estimate`], in the order it runs: `params` (the flags checked; flash attention,
//! context, batch, streams and the sliding-window cache resolved), `layers` (which device holds each layer),
//! `weights` (tensors per device, CPU repacking, the tied output copy), `kv` (KV cache and recurrent state),
//! `compute` (compute buffers and their fitted [`ComputeConstants`]); the output buffer and the per-GPU
//! overhead are a line each here, and `error` holds [`ParamError`] and the checked arithmetic.

mod archs;
mod compute;
mod compute_dense;
mod compute_moe;
mod compute_ssm;
mod error;
mod kv;
mod layers;
mod params;
mod weights;

use serde::Serialize;

use optimizer_model::{GgmlType, ModelSpec};

#[doc(hidden)]
pub use archs::{UNMODELLED, VERIFIED};
pub use compute::ComputeTerms;
pub use compute::{COMPUTE_CONSTANTS, ComputeConstants};
pub use error::ParamError;
pub(crate) use kv::CacheMemory;
pub use kv::{CacheKind, row_size};
pub use layers::layer_devices;
pub use weights::repacks;

use compute::ComputeTerms as Terms;
use error::add;
use kv::{Heads, KV_PAD};
use layers::Placement;

/// The engine these rules follow.
pub const ENGINE: &str = "llama.cpp 0c1e5709 (llama-cpp-python 0.3.36)";

/// Flash attention setting (`-fa on|off|auto`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FlashAttn {
    On,
    Off,
    Auto,
}

/// Parameters, named and defaulted as llama.cpp's `common_params` (common/common.h).
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// `-c`: context size; 0 means the model's trained context (`n_ctx == 0`, common.h L452).
    pub n_ctx: u32,
    /// `-b`: logical batch size (default 2048).
    pub n_batch: u32,
    /// `-ub`: physical batch size (default 512).
    pub n_ubatch: u32,
    /// `-np`: parallel sequences (default 1).
    pub n_parallel: u32,
    /// `--kv-unified`: one KV stream shared by all sequences (default off).
    pub kv_unified: bool,
    /// `-ctk` / `-ctv` (default f16).
    pub type_k: GgmlType,
    pub type_v: GgmlType,
    /// `-fa` (default auto).
    pub flash_attn: FlashAttn,
    /// `-ngl`: layers on GPUs, counting the output layer as llama.cpp does; negative means all.
    pub n_gpu_layers: i32,
    /// `-ts`: proportions per GPU; empty means by free memory (llama-model.cpp L1557-1574).
    pub tensor_split: Vec<f64>,
    /// `-nkvo`: keep the KV cache on the host.
    pub no_kv_offload: bool,
    /// `-lm none` (or `dio`, `mlock`) clears it: the pinned engine has no `--no-mmap`.
    pub mmap: bool,
    /// `--no-repack` clears it: CPU weight repacking into the `CPU_REPACK` buffer.
    pub repack: bool,
    /// `--no-host`: host weights skip the GPU's pinned host buffer, so CPU repacking applies with GPUs too.
    pub no_host: bool,
    /// `--n-cpu-moe N`: keep the routed experts of the first N layers on the CPU.
    pub n_cpu_moe: u32,
    /// `--swa-full`: full-size cache for sliding-window layers.
    pub swa_full: bool,
    /// `-lzm`: whether tensors the architecture marks for on-demand reading are read from disk as needed.
    pub lazy_mode: LazyMode,
}

/// `-lzm` / `--lazy-mode` (common/arg.cpp; include/llama.h `llama_lazy_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LazyMode {
    /// Every tensor resident.
    Off,
    /// Marked tensors larger than 4 GiB read on demand (the default).
    #[default]
    Auto,
    /// Every marked tensor read on demand.
    On,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            n_ctx: 0,
            n_batch: 2048,
            n_ubatch: 512,
            n_parallel: 1,
            kv_unified: false,
            type_k: GgmlType::F16,
            type_v: GgmlType::F16,
            flash_attn: FlashAttn::Auto,
            n_gpu_layers: -1,
            tensor_split: Vec::new(),
            no_kv_offload: false,
            mmap: true,
            repack: true,
            no_host: false,
            n_cpu_moe: 0,
            swa_full: false,
            lazy_mode: LazyMode::Auto,
        }
    }
}

/// A GPU the model may use.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuTarget {
    pub name: String,
    pub free_bytes: u64,
    /// Fixed per-device runtime overhead (CUDA context, cuBLAS workspace) from the memory-reserve rules.
    pub overhead_bytes: u64,
}

/// The machine as the memory model needs it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Machine {
    /// CPU SIMD features (decide which weight types repack).
    pub cpu_features: Vec<String>,
    pub gpus: Vec<GpuTarget>,
}

/// `-c`, `-b` and `-ub` are `int32_t` in llama.cpp's `common_params` (common/common.h L452-454) and parsed as
/// `int` (common/arg.cpp `--ctx-size`, `--batch-size`, `--ubatch-size`).
pub const MAX_CTX_FLAG: u32 = i32::MAX as u32;
/// See [`MAX_CTX_FLAG`].
pub const MAX_BATCH_FLAG: u32 = i32::MAX as u32;
/// `LLAMA_MAX_SEQ` (src/llama-cparams.h L8): the context refuses more sequences (llama-context.cpp L101).
pub const MAX_SEQ: u32 = 256;
/// `LLAMA_MAX_LAYERS` (src/llama-hparams.h L11), asserted when the model loads (llama-model.cpp L1328).
pub const MAX_LAYERS: u64 = 512;

/// Memory on one device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DeviceMemory {
    /// `cpu` for the host, `cuda:N` for GPUs.
    pub device: String,
    pub weights_bytes: u64,
    /// Host copies made by CPU weight repacking (`CPU_REPACK` buffer), in addition to the mapped file.
    pub weights_repack_bytes: u64,
    pub kv_cache_bytes: u64,
    pub compute_bytes: u64,
    pub output_bytes: u64,
    pub overhead_bytes: u64,
    pub total_bytes: u64,
    /// Host only, with mmap: the model files the engine maps whole. Page cache the kernel can reclaim, so it
    /// is reported beside the total rather than in it.
    pub mapped_bytes: u64,
    /// Host only: tensors read from disk on demand (`-lzm`, [`LazyMode`]): mapped page cache, beside the total
    /// rather than in it, and not in `weights_bytes`.
    pub lazy_bytes: u64,
}

impl DeviceMemory {
    fn finish(mut self) -> Result<Self, ParamError> {
        self.total_bytes = [
            self.weights_repack_bytes,
            self.kv_cache_bytes,
            self.compute_bytes,
            self.output_bytes,
            self.overhead_bytes,
        ]
        .into_iter()
        .try_fold(self.weights_bytes, |a, b| add("device total", a, b))?;
        Ok(self)
    }
}

/// What the engine resolves the parameters to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Resolved {
    pub n_ctx: u32,
    pub n_ctx_seq: u32,
    pub n_stream: u32,
    pub n_batch: u32,
    pub n_ubatch: u32,
    pub n_seq_max: u32,
    pub flash_attn: bool,
    /// Cells of the sliding-window cache, when the model has sliding-window layers.
    pub swa_cells: Option<u32>,
    /// Layers on GPUs, the output layer counted (0 on a CPU-only machine).
    pub n_gpu_layers: u32,
    pub mmap: bool,
    pub repack: bool,
    /// Pipeline parallelism across GPUs: the scheduler keeps [`PIPELINE_COPIES`] copies of every split's
    /// inputs (llama-context.cpp L430-457: more than one GPU, every layer offloaded, KV on the GPUs, no tensor
    /// overrides).
    pub pipeline_parallel: bool,
}

/// `GGML_SCHED_MAX_COPIES` (ggml-backend.cpp L771): input copies kept when pipelining.
pub const PIPELINE_COPIES: u64 = 4;

/// The estimate: per-device memory, in the JSON contract of the README.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    pub runtime: &'static str,
    pub engine: &'static str,
    pub resolved: Resolved,
    pub devices: Vec<DeviceMemory>,
    /// The KV caches and recurrent state one by one (their bytes are in the devices' `kv_cache_bytes`).
    pub caches: Vec<CacheMemory>,
    pub total_bytes: u64,
    /// What the engine does that the user may not expect (clamped values, repacked types).
    pub notes: Vec<String>,
}

/// Types `-ctk`/`-ctv` accept (common/arg.cpp `kv_cache_types`).
pub const CACHE_TYPES: &[GgmlType] = &[
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::IQ4_NL,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
];

/// Bytes of an f32 element (activations, logits, recurrent state).
const F32: u64 = 4;

/// Estimates per-device memory for running `model` with `params` on `machine`.
pub fn estimate(
    model: &ModelSpec,
    params: &Params,
    machine: &Machine,
) -> Result<Estimate, ParamError> {
    estimate_with(model, params, machine, &COMPUTE_CONSTANTS)
}

/// [`estimate`] with other compute-buffer constants than [`COMPUTE_CONSTANTS`]: for fitting them and holding
/// them out (tests/it/compute_buffer_holdout.rs).
#[doc(hidden)]
pub fn estimate_with(
    model: &ModelSpec,
    params: &Params,
    machine: &Machine,
    constants: &ComputeConstants,
) -> Result<Estimate, ParamError> {
    Ok(estimate_parts(model, params, machine, constants)?.0)
}

/// The compute buffers of [`estimate`] before the constants weigh them: [`ComputeTerms::buffers`] with
/// [`COMPUTE_CONSTANTS`] gives every device's `compute_bytes`. For fitting the constants.
#[doc(hidden)]
pub fn compute_terms(
    model: &ModelSpec,
    params: &Params,
    machine: &Machine,
) -> Result<ComputeTerms, ParamError> {
    Ok(estimate_parts(model, params, machine, &COMPUTE_CONSTANTS)?.1)
}

/// The estimate and its compute terms, with an overflow blamed on the model or the flags (see the module doc).
fn estimate_parts(
    model: &ModelSpec,
    params: &Params,
    machine: &Machine,
    constants: &ComputeConstants,
) -> Result<(Estimate, Terms), ParamError> {
    params::check_params(params, machine)?;
    match estimate_checked(model, params, machine, constants) {
        Err(ParamError::Overflow { what }) => {
            // Blame the model when even the smallest context and batch overflow (see the module doc).
            let smallest = Params {
                n_ctx: KV_PAD as u32,
                n_batch: 1,
                n_ubatch: 1,
                n_parallel: 1,
                kv_unified: false,
                swa_full: false,
                ..params.clone()
            };
            match estimate_checked(model, &smallest, machine, constants) {
                Err(ParamError::Overflow { what }) => Err(ParamError::ModelOverflow { what }),
                Err(other) => Err(other),
                Ok(_) => Err(ParamError::Overflow { what }),
            }
        }
        other => other,
    }
}

/// [`estimate`] after the flags passed `check_params`: every size checked, an overflow reported as
/// [`ParamError::Overflow`]. The stages run in this order, each adding its part to the devices: parameters,
/// layer placement, weights, KV cache, output buffer, compute buffers, overhead.
fn estimate_checked(
    model: &ModelSpec,
    params: &Params,
    machine: &Machine,
    constants: &ComputeConstants,
) -> Result<(Estimate, Terms), ParamError> {
    archs::check(&model.architecture)?;
    let h = &model.hparams;
    let gpus = &machine.gpus;
    let mut notes: Vec<String> = archs::unverified_note(&model.architecture)
        .into_iter()
        .collect();
    let ctx = params::context(h, params, &mut notes)?;
    let placement = Placement::resolve(h, params, machine, &mut notes)?;
    let mut mem: Vec<DeviceMemory> = (0..=gpus.len())
        .map(|i| DeviceMemory {
            device: layers::device_name(i.checked_sub(1)),
            ..DeviceMemory::default()
        })
        .collect();

    weights::place(model, params, machine, &placement, &mut mem, &mut notes)?;

    let heads = Heads::of(h)?;
    let swa_cells = params::swa_cells(h, params, &ctx)?;
    let caches = kv::place(
        &model.architecture,
        h,
        params,
        &ctx,
        swa_cells,
        &heads,
        &placement,
        &mut mem,
    )?;

    // Output buffer: logits for n_seq_max outputs at context creation, on the host (llama-context.cpp
    // output_reserve, L2116-2170).
    let n_vocab = h
        .vocab_size
        .ok_or(ParamError::MissingHparam("vocab_size"))?;
    mem[0].output_bytes = error::product("output buffer", &[n_vocab, u64::from(ctx.n_seq), F32])?;

    let resolved = Resolved {
        n_ctx: ctx.n_ctx,
        n_ctx_seq: ctx.n_ctx_seq,
        n_stream: ctx.n_stream,
        n_batch: ctx.n_batch,
        n_ubatch: ctx.n_ubatch,
        n_seq_max: ctx.n_seq,
        flash_attn: ctx.flash_attn,
        swa_cells,
        n_gpu_layers: placement.gpu_layers,
        mmap: params.mmap,
        repack: weights::repack_enabled(params, machine),
        pipeline_parallel: gpus.len() > 1
            && placement.gpu_layers > placement.n_layer
            && !params.no_kv_offload
            && params.n_cpu_moe == 0,
    };
    let terms = Terms::new(
        model, params, machine, &resolved, &heads, n_vocab, &placement,
    )?;
    for (m, bytes) in mem.iter_mut().zip(terms.buffers(constants)?) {
        m.compute_bytes = bytes;
    }
    if !gpus.is_empty() {
        if resolved.pipeline_parallel {
            notes.push(format!(
                "pipeline parallelism across {} GPUs keeps {PIPELINE_COPIES} copies of each split's inputs",
                gpus.len()
            ));
        }
        notes.push(
            "GPU compute buffers are modelled from the CPU measurements and the engine's op-offload rule; \
             no CUDA build has been measured yet"
                .into(),
        );
    }

    for (m, g) in mem.iter_mut().skip(1).zip(gpus) {
        m.overhead_bytes = g.overhead_bytes;
    }
    let devices = mem
        .into_iter()
        .map(DeviceMemory::finish)
        .collect::<Result<Vec<_>, _>>()?;
    let total_bytes = devices
        .iter()
        .try_fold(0u64, |a, d| add("total", a, d.total_bytes))?;
    Ok((
        Estimate {
            runtime: "llama.cpp",
            engine: ENGINE,
            resolved,
            devices,
            caches,
            total_bytes,
            notes,
        },
        terms,
    ))
}
