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

use serde::Serialize;

use crate::model::{Dtype, GgmlType, ModelSpec, PerLayer, Role, TensorInfo};

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

/// Parameters the engine refuses or silently changes. Messages say which.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParamError {
    #[error(
        "-ub {n_ubatch} is larger than -b {n_batch}: llama.cpp would silently use -ub {n_batch}; pass -ub {n_batch} or raise -b"
    )]
    UbatchOverBatch { n_ubatch: u32, n_batch: u32 },
    #[error("-b and -ub must be at least 1")]
    ZeroBatch,
    #[error("-np must be at least 1")]
    ZeroParallel,
    #[error(
        "a quantized V cache ({type_v}) needs flash attention, and -fa off disables it: llama.cpp refuses to create the context (\"V cache quantization requires flash_attn\")"
    )]
    QuantizedVWithoutFlashAttn { type_v: &'static str },
    #[error(
        "cache type {0} is not one llama.cpp accepts for -ctk/-ctv (f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1)"
    )]
    CacheType(&'static str),
    #[error("-c 0 asks for the model's trained context, but the model does not declare one")]
    NoTrainedContext,
    #[error("the model does not declare {0}, which the KV cache size depends on")]
    MissingHparam(&'static str),
    #[error("-ts names {given} devices but {gpus} GPUs are present")]
    TensorSplit { given: usize, gpus: usize },
    #[error("-ts {value} is not a finite proportion of at least 0")]
    TensorSplitValue { value: f64 },
    #[error("{flag} {value} is above {max}: {why}")]
    FlagOutOfRange {
        flag: &'static str,
        value: u64,
        max: u64,
        why: &'static str,
    },
    #[error(
        "a {which} cache of type {type_name} needs rows that divide into its {block}-element blocks, but the model's {which} rows have {elements} elements; llama.cpp refuses it"
    )]
    CacheBlock {
        which: &'static str,
        type_name: &'static str,
        block: u64,
        elements: u64,
    },
    #[error("the model's {key} is {value}, above llama.cpp's limit of {max}: {why}")]
    ModelLimit {
        key: &'static str,
        value: u64,
        max: u64,
        why: &'static str,
    },
    #[error(
        "the {what} overflows 64 bits even at the smallest context and batch: the model's hyper-parameters describe no model that can be allocated"
    )]
    ModelOverflow { what: &'static str },
    #[error("the {what} overflows 64 bits with these parameters; lower -c, -ub or -np")]
    Overflow { what: &'static str },
}

impl ParamError {
    /// Whether the error is a defect of the model file (exit 4, naming the file) rather than of the flags.
    pub fn is_model_defect(&self) -> bool {
        matches!(
            self,
            ParamError::ModelLimit { .. }
                | ParamError::ModelOverflow { .. }
                | ParamError::MissingHparam(_)
                | ParamError::NoTrainedContext
        )
    }
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

/// `a × b`, or the overflow error naming the size being computed.
fn mul(what: &'static str, a: u64, b: u64) -> Result<u64, ParamError> {
    a.checked_mul(b).ok_or(ParamError::Overflow { what })
}

/// `a + b`, or the overflow error naming the size being computed.
fn add(what: &'static str, a: u64, b: u64) -> Result<u64, ParamError> {
    a.checked_add(b).ok_or(ParamError::Overflow { what })
}

/// The product of `factors`, checked.
fn product(what: &'static str, factors: &[u64]) -> Result<u64, ParamError> {
    factors.iter().try_fold(1u64, |acc, &f| mul(what, acc, f))
}

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

/// `GGML_PAD(x, n)`, checked.
fn pad(what: &'static str, x: u64, n: u64) -> Result<u64, ParamError> {
    mul(what, x.div_ceil(n), n)
}

/// A cell count as the engine's `uint32_t`, or the overflow error.
fn cells_u32(what: &'static str, x: u64) -> Result<u32, ParamError> {
    u32::try_from(x).map_err(|_| ParamError::Overflow { what })
}

/// The KV cache pads the context to 256 cells (llama-context.cpp L290, L296).
const KV_PAD: u64 = 256;

/// Bytes of one row of `n` elements of `t` (`ggml_row_size`); 0 where `n` does not fill whole blocks.
pub fn row_size(t: GgmlType, n: u64) -> u64 {
    t.tensor_bytes(&[n]).unwrap_or(0)
}

/// Bytes of one cache row of `elements` elements: the engine refuses a row that does not fill whole blocks of a
/// quantized cache type (llama-context.cpp L3851-3870 with flash attention; `ggml_row_size` asserts without).
fn cache_row(which: &'static str, t: GgmlType, elements: u64) -> Result<u64, ParamError> {
    let block = t.block_elements().max(1);
    if !elements.is_multiple_of(block) {
        return Err(ParamError::CacheBlock {
            which,
            type_name: t.name(),
            block,
            elements,
        });
    }
    t.tensor_bytes(&[elements]).ok_or(ParamError::Overflow {
        what: "KV cache row",
    })
}

/// Where a tensor's layer lives: the input layer (always the CPU), a block, or the output layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Input,
    Block(u32),
    Output,
}

fn slot(t: &TensorInfo) -> Slot {
    match (t.layer, t.role) {
        (Some(l), _) => Slot::Block(l),
        (None, Role::Embedding) => Slot::Input,
        (None, _) if t.name.starts_with("token_embd") || t.name.starts_with("token_types") => {
            Slot::Input
        }
        (None, Role::Output) => Slot::Output,
        (None, _) if t.name.starts_with("output") || t.name.starts_with("cls") => Slot::Output,
        // Other tensors outside blocks (rope_freqs) belong to the repeating layers (LLM_TENSOR_LAYER_REPEATING).
        (None, _) => Slot::Block(0),
    }
}

/// Whether the CPU backend repacks a weight of this type and shape into `CPU_REPACK`
/// (ggml-cpu/repack.cpp `ggml_repack_get_optimal_repack_type` and `supports_op`): 2-D matmul weights and 3-D
/// expert weights whose row count divides by the kernel's interleave, for types the CPU's features support.
pub fn repacks(t: &TensorInfo, cpu_features: &[String]) -> bool {
    let Dtype::Ggml(ty) = t.dtype else {
        return false;
    };
    let dims = t.shape.len();
    let matmul = match t.slot_kind() {
        TensorKind::MatmulWeight => dims == 2,
        TensorKind::ExpertWeight => dims == 3,
        TensorKind::Other => false,
    };
    matmul && repacks_type(ty, ne1(&t.shape), cpu_features)
}

/// ggml's `ne[1]`, the second-innermost dimension: shapes are row-major, so it is the second from the end.
fn ne1(shape: &[u64]) -> u64 {
    let dims = shape.len();
    if dims >= 2 { shape[dims - 2] } else { 1 }
}

/// The type rule of `ggml_repack_get_optimal_repack_type` (ggml-cpu/repack.cpp L4974-5100) for a matmul weight
/// with `ne1` rows on a CPU with `cpu_features`. The features are the running CPU's in a `GGML_NATIVE` build
/// (`ggml_cpu_has_avx2` and friends), so the measured tables record the flags of the machine they come from.
fn repacks_type(ty: GgmlType, ne1: u64, cpu_features: &[String]) -> bool {
    let has = |f: &str| cpu_features.iter().any(|x| x == f);
    let (avx2, avx512) = (has("avx2"), has("avx512f"));
    let (neon, i8mm, dotprod) = (has("neon"), has("i8mm"), has("dotprod"));
    match ty {
        GgmlType::Q4_0 => {
            (avx2 && ne1.is_multiple_of(8)) || (neon && (i8mm || dotprod) && ne1.is_multiple_of(4))
        }
        GgmlType::Q4_K => (avx2 || (neon && (i8mm || dotprod))) && ne1.is_multiple_of(8),
        GgmlType::Q2_K => avx512 && ne1.is_multiple_of(8),
        GgmlType::Q5_K | GgmlType::Q6_K => neon && (i8mm || dotprod) && ne1.is_multiple_of(8),
        GgmlType::IQ4_NL | GgmlType::MXFP4 => {
            (avx2 && ne1.is_multiple_of(8)) || (neon && dotprod && ne1.is_multiple_of(4))
        }
        GgmlType::Q8_0 | GgmlType::Q1_0 => neon && (i8mm || dotprod) && ne1.is_multiple_of(4),
        _ => false,
    }
}

/// Bytes the engine adds for a tied output layer (no `output.weight`: the projection reuses `token_embd.weight`).
///
/// The rule, from the pinned source: every tied architecture creates its output as
/// `create_tensor(tn(LLM_TENSOR_TOKEN_EMBD, "weight"), {n_embd, n_vocab}, TENSOR_DUPLICATED)` (e.g.
/// src/models/llama.cpp L45, src/models/gemma2.cpp L37). The loader treats that tensor as the *output* layer's
/// `GGML_OP_MUL_MAT` weight and picks its buffer type from the output layer's list (src/llama-model-loader.cpp
/// L1160-1170, `select_weight_buft` L1067), while the embedding itself is the input layer's `GGML_OP_GET_ROWS`
/// weight. If both land in the same buffer type the duplicate is the same tensor and costs nothing
/// (llama-model-loader.cpp L1366-1372: "check if the original tensor was allocated in the same buffer type
/// context"); otherwise a second copy of `token_embd`'s bytes is allocated there (`size_data += ggml_nbytes`).
/// Hence:
/// - output layer on a GPU: a copy on that GPU;
/// - output layer on the host with the GPU's pinned host buffer first in the host list (GPUs present, no
///   `--no-host`; llama-model.cpp `make_cpu_buft_list` L1078): both ops are supported there for every type the
///   CPU repacks (ggml-cuda.cu `supports_op`, GET_ROWS and MUL_MAT), and under mmap both are moved to the same
///   plain CPU buffer (llama-model-loader.cpp L1269-1277), so the copy is shared: nothing;
/// - output layer on the host otherwise: `CPU_REPACK` never takes GET_ROWS (repack.cpp `supports_op` accepts
///   only MUL_MAT and MUL_MAT_ID), so the embedding sits in `CPU`; the duplicate goes to `CPU_REPACK` when
///   repacking is on and its type and row count repack ([`repacks_type`], e.g. Q4_0 or Q4_K on AVX2), adding a
///   repacked copy of the whole embedding (316.4 MiB for Gemma-2-2B in Q4_0); else it shares the `CPU` copy.
fn tied_output_copy(
    embd: &TensorInfo,
    output_dev: Option<usize>,
    host_buffer: bool,
    repack: bool,
    cpu_features: &[String],
) -> Option<(Option<usize>, bool)> {
    match output_dev {
        Some(gpu) => Some((Some(gpu), false)),
        None if host_buffer => None,
        None => {
            let Dtype::Ggml(ty) = embd.dtype else {
                return None;
            };
            (repack && embd.shape.len() == 2 && repacks_type(ty, ne1(&embd.shape), cpu_features))
                .then_some((None, true))
        }
    }
}

/// How a weight is used by the graph, as far as placement cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TensorKind {
    MatmulWeight,
    ExpertWeight,
    Other,
}

trait Kind {
    fn slot_kind(&self) -> TensorKind;
}

impl Kind for TensorInfo {
    fn slot_kind(&self) -> TensorKind {
        if !self.name.ends_with(".weight") {
            return TensorKind::Other;
        }
        match self.role {
            Role::Expert if self.shape.len() == 3 => TensorKind::ExpertWeight,
            // GET_ROWS reads the token embedding; norms are element-wise; convolutions are SSM_CONV.
            Role::Embedding | Role::Norm | Role::QuantState => TensorKind::Other,
            _ if self.name.contains("conv1d") || self.name.contains("ssm_a") => TensorKind::Other,
            _ => TensorKind::MatmulWeight,
        }
    }
}

/// Which device holds block `il` (or the output layer, `il == n_layer`): llama-model.cpp L1589-1600.
/// `None` is the CPU; `Some(i)` GPU i.
fn layer_device(il: u32, n_layer: u32, gpu_layers: u32, splits: &[f64]) -> Option<usize> {
    let i_gpu_start = (n_layer + 1).saturating_sub(gpu_layers);
    if splits.is_empty() || il < i_gpu_start || il - i_gpu_start >= gpu_layers {
        return None;
    }
    let x = f64::from(il - i_gpu_start) / f64::from(gpu_layers);
    // upper_bound: the first split point greater than x.
    let i = splits
        .iter()
        .position(|&s| s > x)
        .unwrap_or(splits.len() - 1);
    Some(i)
}

/// The device of every layer, blocks `0..n_layer` then the output layer at `n_layer`: `None` is the CPU,
/// `Some(i)` GPU i, with `gpu_weights` the split proportions (free memory by default).
pub fn layer_devices(n_layer: u32, gpu_layers: u32, gpu_weights: &[f64]) -> Vec<Option<usize>> {
    let splits = if gpu_weights.is_empty() {
        Vec::new()
    } else {
        split_points(gpu_weights)
    };
    (0..=n_layer)
        .map(|il| layer_device(il, n_layer, gpu_layers, &splits))
        .collect()
}

/// Cumulative, normalized split points (llama-model.cpp L1579-1587).
fn split_points(weights: &[f64]) -> Vec<f64> {
    let total: f64 = weights.iter().sum();
    let mut acc = 0.0;
    weights
        .iter()
        .map(|w| {
            acc += w;
            if total > 0.0 { acc / total } else { 0.0 }
        })
        .collect()
}

fn device_name(d: Option<usize>) -> String {
    match d {
        None => "cpu".into(),
        Some(i) => format!("cuda:{i}"),
    }
}

/// Estimates per-device memory for running `model` with `params` on `machine`.
pub fn estimate(
    model: &ModelSpec,
    params: &Params,
    machine: &Machine,
) -> Result<Estimate, ParamError> {
    check_params(params, machine)?;
    match estimate_checked(model, params, machine) {
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
            match estimate_checked(model, &smallest, machine) {
                Err(ParamError::Overflow { what }) => Err(ParamError::ModelOverflow { what }),
                Err(other) => Err(other),
                Ok(_) => Err(ParamError::Overflow { what }),
            }
        }
        other => other,
    }
}

/// The flags alone, against the engine's limits and rules.
fn check_params(params: &Params, machine: &Machine) -> Result<(), ParamError> {
    if params.n_batch == 0 || params.n_ubatch == 0 {
        return Err(ParamError::ZeroBatch);
    }
    if params.n_parallel == 0 {
        return Err(ParamError::ZeroParallel);
    }
    let bounds: [(&'static str, u32, u32, &'static str); 4] = [
        (
            "-c",
            params.n_ctx,
            MAX_CTX_FLAG,
            "llama.cpp reads -c into an int32_t (common/common.h L452)",
        ),
        (
            "-b",
            params.n_batch,
            MAX_BATCH_FLAG,
            "llama.cpp reads -b into an int32_t (common/common.h L453)",
        ),
        (
            "-ub",
            params.n_ubatch,
            MAX_BATCH_FLAG,
            "llama.cpp reads -ub into an int32_t (common/common.h L454)",
        ),
        (
            "-np",
            params.n_parallel,
            MAX_SEQ,
            "llama.cpp refuses more than LLAMA_MAX_SEQ sequences (llama-context.cpp L101)",
        ),
    ];
    for (flag, value, max, why) in bounds {
        if value > max {
            return Err(ParamError::FlagOutOfRange {
                flag,
                value: value.into(),
                max: max.into(),
                why,
            });
        }
    }
    if params.n_ubatch > params.n_batch {
        return Err(ParamError::UbatchOverBatch {
            n_ubatch: params.n_ubatch,
            n_batch: params.n_batch,
        });
    }
    for t in [params.type_k, params.type_v] {
        if !CACHE_TYPES.contains(&t) {
            return Err(ParamError::CacheType(t.name()));
        }
    }
    if !params.tensor_split.is_empty() && params.tensor_split.len() != machine.gpus.len() {
        return Err(ParamError::TensorSplit {
            given: params.tensor_split.len(),
            gpus: machine.gpus.len(),
        });
    }
    if let Some(&value) = params
        .tensor_split
        .iter()
        .find(|v| !v.is_finite() || **v < 0.0)
    {
        return Err(ParamError::TensorSplitValue { value });
    }
    Ok(())
}

/// [`estimate`] after the flags passed [`check_params`]: every size checked, an overflow reported as
/// [`ParamError::Overflow`].
fn estimate_checked(
    model: &ModelSpec,
    params: &Params,
    machine: &Machine,
) -> Result<Estimate, ParamError> {
    let h = &model.hparams;
    let mut notes = Vec::new();
    // Flash attention: `auto` resolves to on when every device supports it for this model; the CPU backend
    // always does (llama-context.cpp, flash_attn_type auto resolution).
    let flash_attn = match params.flash_attn {
        FlashAttn::On => true,
        FlashAttn::Off => false,
        FlashAttn::Auto => true,
    };
    if !flash_attn && params.type_v.is_quantized() {
        return Err(ParamError::QuantizedVWithoutFlashAttn {
            type_v: params.type_v.name(),
        });
    }

    // Context: llama-context.cpp L133 (0 takes n_ctx_train), L286-306. The model's context is bounded when the
    // model is read (model::MAX_CONTEXT_LENGTH); a spec built another way is checked here as well.
    let n_ctx = if params.n_ctx == 0 {
        let train = h.context_length.ok_or(ParamError::NoTrainedContext)?;
        if train == 0 || train > crate::model::MAX_CONTEXT_LENGTH {
            return Err(ParamError::ModelLimit {
                key: "context_length",
                value: train,
                max: crate::model::MAX_CONTEXT_LENGTH,
                why: "llama.cpp needs a trained context of at least one cell that pads to 256 cells in a uint32_t (llama-context.cpp L290)",
            });
        }
        train
    } else {
        u64::from(params.n_ctx)
    };
    let n_seq = params.n_parallel;
    // llama-context.cpp L246-248: the batch is capped by the context as given, the micro-batch by the batch.
    let n_batch = cells_u32("context", u64::from(params.n_batch).min(n_ctx))?;
    let n_ubatch = params.n_ubatch.min(n_batch);
    let n_ctx = pad("context", n_ctx, KV_PAD)?;
    let (n_ctx, n_ctx_seq) = if params.kv_unified {
        let c = cells_u32("context", n_ctx)?;
        (c, c)
    } else {
        let per = pad("context", n_ctx / u64::from(n_seq), KV_PAD)?;
        let total = mul("context", per, u64::from(n_seq))?;
        if total != n_ctx {
            notes.push(format!(
                "llama.cpp rounds n_ctx to {total} so each of the {n_seq} sequences gets {per} cells"
            ));
        }
        (cells_u32("context", total)?, cells_u32("context", per)?)
    };
    let n_stream = if params.kv_unified { 1 } else { n_seq };

    let n_layer_u64 = h
        .block_count
        .ok_or(ParamError::MissingHparam("block_count"))?;
    if n_layer_u64 == 0 || n_layer_u64 > MAX_LAYERS {
        return Err(ParamError::ModelLimit {
            key: "block_count",
            value: n_layer_u64,
            max: MAX_LAYERS,
            why: "LLAMA_MAX_LAYERS, asserted with n_layer > 0 when the model loads (llama-model.cpp L1328)",
        });
    }
    let n_layer = n_layer_u64 as u32;
    let gpus = &machine.gpus;
    let max_gpu_layers = n_layer + 1;
    let gpu_layers = if gpus.is_empty() {
        0
    } else if params.n_gpu_layers < 0 {
        max_gpu_layers
    } else {
        let asked = params.n_gpu_layers as u32;
        if asked > max_gpu_layers {
            notes.push(format!(
                "-ngl {asked} exceeds the model's {max_gpu_layers} layers (the output layer counted); llama.cpp offloads all {max_gpu_layers}"
            ));
        }
        asked.min(max_gpu_layers)
    };
    // llama-model.cpp L1557-1574: all-zero proportions mean "by free memory", as no -ts does.
    let splits = if gpus.is_empty() {
        Vec::new()
    } else if params.tensor_split.iter().all(|&w| w == 0.0) {
        split_points(&gpus.iter().map(|g| g.free_bytes as f64).collect::<Vec<_>>())
    } else {
        split_points(&params.tensor_split)
    };
    let dev_of = |slot: Slot| -> Option<usize> {
        match slot {
            Slot::Input => None,
            Slot::Block(il) => layer_device(
                il.min(n_layer.saturating_sub(1)),
                n_layer,
                gpu_layers,
                &splits,
            ),
            Slot::Output => layer_device(n_layer, n_layer, gpu_layers, &splits),
        }
    };

    let n_dev = gpus.len() + 1;
    let idx = |d: Option<usize>| d.map_or(0, |i| i + 1);
    let mut mem: Vec<DeviceMemory> = (0..n_dev)
        .map(|i| DeviceMemory {
            device: device_name(if i == 0 { None } else { Some(i - 1) }),
            ..DeviceMemory::default()
        })
        .collect();

    // Weights. With GPUs the host list starts with the first GPU's pinned host buffer, which takes every
    // host weight before CPU_REPACK is tried (llama-model.cpp make_cpu_buft_list L1078-1135), or the plain CPU
    // buffer instead of it under mmap (llama-model-loader.cpp L1269-1277); --no-host skips it (common/arg.cpp:
    // "bypass host buffer allowing extra buffers to be used").
    let host_buffer = !gpus.is_empty() && !params.no_host;
    let repack = params.repack && !host_buffer;
    let mut repacked_types = std::collections::BTreeSet::new();
    for t in &model.tensors {
        let s = slot(t);
        let mut d = dev_of(s);
        // --n-cpu-moe keeps the routed experts of the first N layers on the CPU.
        if t.role == Role::Expert
            && let Slot::Block(il) = s
            && il < params.n_cpu_moe
        {
            d = None;
        }
        let m = &mut mem[idx(d)];
        if d.is_none() && repack && repacks(t, &machine.cpu_features) {
            m.weights_repack_bytes = add("weights", m.weights_repack_bytes, t.bytes)?;
            repacked_types.insert(t.dtype.name());
        } else {
            m.weights_bytes = add("weights", m.weights_bytes, t.bytes)?;
        }
    }
    if params.mmap {
        let file_bytes = model
            .files
            .iter()
            .try_fold(0u64, |a, f| add("model file size", a, f.bytes))?;
        mem[0].mapped_bytes = file_bytes;
        notes.push(format!(
            "with mmap the host maps the whole model file ({:.1} MiB of reclaimable page cache, not in the totals); -lm none reads only the host's tensors",
            file_bytes as f64 / f64::from(1u32 << 20)
        ));
    }
    if h.tied_embeddings
        && let Some(embd) = model.tensor("token_embd.weight")
        && let Some((d, repacked)) = tied_output_copy(
            embd,
            dev_of(Slot::Output),
            host_buffer,
            repack,
            &machine.cpu_features,
        )
    {
        let m = &mut mem[idx(d)];
        if repacked {
            m.weights_repack_bytes = add("weights", m.weights_repack_bytes, embd.bytes)?;
            notes.push(format!(
                "the tied output layer keeps a repacked {} copy of token_embd.weight ({:.1} MiB) beside the embedding itself",
                embd.dtype.name(),
                embd.bytes as f64 / f64::from(1u32 << 20)
            ));
            repacked_types.insert(embd.dtype.name());
        } else {
            m.weights_bytes = add("weights", m.weights_bytes, embd.bytes)?;
        }
    }
    if !repacked_types.is_empty() {
        notes.push(format!(
            "CPU weights of type {} are repacked into CPU_REPACK copies (disable with --no-repack)",
            repacked_types.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }

    // KV cache and recurrent state.
    let head_count = h
        .head_count
        .as_ref()
        .ok_or(ParamError::MissingHparam("head_count"))?;
    let head_kv = h
        .head_count_kv
        .clone()
        .unwrap_or_else(|| head_count.clone());
    let n_embd = h
        .embedding_length
        .ok_or(ParamError::MissingHparam("embedding_length"))?;
    let head_dim_default = n_embd / head_count.max().max(1);
    let n_embd_head_k = h.key_length.unwrap_or(head_dim_default);
    let n_embd_head_v = h.value_length.unwrap_or(head_dim_default);
    let swa_cells = if h.sliding_window_layers.is_empty() {
        None
    } else if params.swa_full {
        Some(n_ctx_seq)
    } else {
        // llama-kv-cache-iswa.cpp L73-80.
        let n_swa = h.sliding_window.unwrap_or(0);
        let streams = u64::from(if params.kv_unified { n_seq } else { 1 });
        let want = add(
            "sliding-window cache",
            mul("sliding-window cache", n_swa, streams)?,
            u64::from(n_ubatch),
        )?;
        Some(cells_u32(
            "sliding-window cache",
            pad(
                "sliding-window cache",
                want.min(u64::from(n_ctx_seq)),
                KV_PAD,
            )?,
        )?)
    };
    let is_mla = h.key_length_mla.is_some() && h.value_length_mla.is_some();
    // Quantized cache rows must fill whole blocks: per head with flash attention (llama-context.cpp
    // L3851-3870), per row without (ggml_row_size).
    if flash_attn {
        cache_row("K", params.type_k, n_embd_head_k)?;
        if !is_mla {
            cache_row("V", params.type_v, n_embd_head_v)?;
        }
    }
    const KV: &str = "KV cache";
    for il in 0..n_layer {
        let l = il as usize;
        if h.recurrent_layers.get(l).copied().unwrap_or(false) {
            continue;
        }
        let kv_heads = head_kv.get(l).unwrap_or(0);
        if kv_heads == 0 {
            continue;
        }
        let cells = match swa_cells {
            Some(c) if h.sliding_window_layers.get(l).copied().unwrap_or(false) => c,
            _ => n_ctx_seq,
        };
        let k = cache_row("K", params.type_k, mul(KV, n_embd_head_k, kv_heads)?)?;
        // llama-kv-cache.cpp L209-234: an MLA cache holds the latent K only; without flash attention V is stored
        // transposed and every layer's V is as wide as the widest (n_embd_v_gqa_max).
        let v = if is_mla {
            0
        } else if flash_attn {
            cache_row("V", params.type_v, mul(KV, n_embd_head_v, kv_heads)?)?
        } else {
            cache_row("V", params.type_v, mul(KV, n_embd_head_v, head_kv.max())?)?
        };
        let bytes = product(KV, &[add(KV, k, v)?, u64::from(cells), u64::from(n_stream)])?;
        let d = if params.no_kv_offload {
            None
        } else {
            dev_of(Slot::Block(il))
        };
        let m = &mut mem[idx(d)];
        m.kv_cache_bytes = add(KV, m.kv_cache_bytes, bytes)?;
    }
    if let Some(ssm) = &h.ssm {
        // llama-memory-recurrent: per recurrent layer, conv state n_embd_r and SSM state n_embd_s in f32, one
        // cell per sequence (llama-hparams.cpp n_embd_r / n_embd_s).
        const RS: &str = "recurrent state";
        let d_conv = ssm.conv_kernel.unwrap_or(0);
        let d_inner = ssm.inner_size.unwrap_or(0);
        let d_state = ssm.state_size.unwrap_or(0);
        let n_group = ssm.group_count.unwrap_or(0);
        let r = mul(
            RS,
            d_conv.saturating_sub(1),
            add(RS, d_inner, product(RS, &[2, n_group, d_state])?)?,
        )?;
        let s = mul(RS, d_state, d_inner)?;
        let bytes = product(RS, &[add(RS, r, s)?, F32, u64::from(n_seq)])?;
        for il in 0..n_layer {
            if h.recurrent_layers
                .get(il as usize)
                .copied()
                .unwrap_or(false)
            {
                let d = if params.no_kv_offload {
                    None
                } else {
                    dev_of(Slot::Block(il))
                };
                let m = &mut mem[idx(d)];
                m.kv_cache_bytes = add(RS, m.kv_cache_bytes, bytes)?;
            }
        }
    }

    // Output buffer: logits for n_seq_max outputs at context creation, on the host (llama-context.cpp
    // output_reserve, L2116-2170).
    let n_vocab = h
        .vocab_size
        .ok_or(ParamError::MissingHparam("vocab_size"))?;
    mem[0].output_bytes = product("output buffer", &[n_vocab, u64::from(n_seq), F32])?;

    // Compute buffers.
    let resolved = Resolved {
        n_ctx,
        n_ctx_seq,
        n_stream,
        n_batch,
        n_ubatch,
        n_seq_max: n_seq,
        flash_attn,
        swa_cells,
        n_gpu_layers: gpu_layers,
        mmap: params.mmap,
        repack,
        pipeline_parallel: gpus.len() > 1
            && gpu_layers > n_layer
            && !params.no_kv_offload
            && params.n_cpu_moe == 0,
    };
    let phases = compute_bytes(
        model,
        &resolved,
        &Dims {
            n_embd,
            n_vocab,
            n_head: head_count.max(),
            n_embd_k_gqa: mul("compute buffer", n_embd_head_k, head_kv.max())?,
        },
        params,
    )?;
    let mut holds_blocks = vec![false; n_dev];
    for il in 0..n_layer {
        holds_blocks[idx(dev_of(Slot::Block(il)))] = true;
    }
    let output_dev = idx(dev_of(Slot::Output));
    for (d, m) in mem.iter_mut().enumerate() {
        let mut peak = 0;
        if holds_blocks[d] {
            peak = peak.max(phases.layers);
        }
        if d == output_dev {
            peak = peak.max(phases.output);
        }
        if d == 0 && !gpus.is_empty() {
            peak = peak.max(phases.host_inputs);
        }
        m.compute_bytes = peak;
    }
    if !gpus.is_empty() {
        let t = u64::from(n_ubatch.min(n_ctx));
        // Host-resident matmul weights are copied to the first GPU for large batches; the largest one bounds
        // what that GPU's compute buffer must add.
        let largest_host_matmul = model
            .tensors
            .iter()
            .filter(|t| t.slot_kind() != TensorKind::Other && dev_of(slot(t)).is_none())
            .filter(|t| !(t.role == Role::Expert && params.n_cpu_moe > 0))
            .map(|t| t.bytes)
            .max()
            .unwrap_or(0);
        if t >= OP_OFFLOAD_MIN_BATCH && largest_host_matmul > 0 && gpu_layers > 0 {
            mem[1].compute_bytes =
                add("compute buffer", mem[1].compute_bytes, largest_host_matmul)?;
        }
        if resolved.pipeline_parallel {
            // Each GPU's split receives the residual stream, mask and positions; the extra copies stay
            // allocated so micro-batches can overlap across GPUs.
            let copies = mul("compute buffer", PIPELINE_COPIES - 1, phases.host_inputs)?;
            for (d, m) in mem.iter_mut().enumerate().skip(1) {
                if holds_blocks[d] {
                    m.compute_bytes = add("compute buffer", m.compute_bytes, copies)?;
                }
            }
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
    for (i, g) in gpus.iter().enumerate() {
        mem[i + 1].overhead_bytes = g.overhead_bytes;
    }
    let devices = mem
        .into_iter()
        .map(DeviceMemory::finish)
        .collect::<Result<Vec<_>, _>>()?;
    let total_bytes = devices
        .iter()
        .try_fold(0u64, |a, d| add("total", a, d.total_bytes))?;
    Ok(Estimate {
        runtime: "llama.cpp",
        engine: ENGINE,
        resolved,
        devices,
        total_bytes,
        notes,
    })
}

/// Bytes of an f32 activation element.
const F32: u64 = 4;
/// Bytes of an f16 element (the attention mask under flash attention).
const F16: u64 = 2;

/// Rows of `n_embd` activations live at the attention peak besides the scores and the mask: five of width
/// `n_embd` (layer input, norm, Q, attention output, residual) and two of width `n_embd_k_gqa` (K and V of the
/// micro-batch). Fitted on the pinned engine: 5.5 rows for Llama-3-8B (GQA 4) and 7 for Llama-2-7B (MHA) at
/// every context and micro-batch of the measured table.
const ATTN_EMBD_ROWS: u64 = 5;
const ATTN_KV_ROWS: u64 = 2;
/// Rows live at the feed-forward peak besides the three `n_ff`-wide activations (gate, up, their product):
/// input, norm, output and residual; without flash attention one more (the transposed-V attention output).
/// Fitted: Llama-2-7B (dense) and Mixtral-8x7B (MoE, 2 of 8 experts: `n_ff` × experts used) alike.
const FFN_EMBD_ROWS: u64 = 4;
const FFN_WIDE_ACTIVATIONS: u64 = 3;
/// Per-token i32 inputs alive at the attention peak.
const INPUT_ROWS_I32: u64 = 5;
/// Activations of width `n_embd` live at the output peak besides the logits: the final hidden states and
/// their norm.
const OUTPUT_LIVE_ROWS: u64 = 2;

/// The model's widths the compute buffer depends on.
struct Dims {
    n_embd: u64,
    n_vocab: u64,
    /// The most query heads of any layer.
    n_head: u64,
    /// K width of the widest layer: head size × KV heads.
    n_embd_k_gqa: u64,
}

/// Peak of the compute graph for one micro-batch, the largest of its phases (see the module doc). Output: logits
/// for every token of the worst-case micro-batch (llama.cpp reserves with `n_outputs = n_tokens`). Blocks: the
/// attention (without flash attention the f32 scores of every head) or the feed-forward, whichever is larger,
/// plus the attention mask, an input that stays allocated through every block.
fn compute_bytes(
    model: &ModelSpec,
    r: &Resolved,
    dims: &Dims,
    params: &Params,
) -> Result<Phases, ParamError> {
    const W: &str = "compute buffer";
    let h = &model.hparams;
    // sched_reserve: n_tokens = min(n_ctx, n_ubatch) (llama-context.cpp L629).
    let t = u64::from(r.n_ubatch.min(r.n_ctx));
    let row = product(W, &[dims.n_embd, t, F32])?;
    let output = add(
        W,
        product(W, &[dims.n_vocab, t, F32])?,
        mul(W, OUTPUT_LIVE_ROWS, row)?,
    )?;
    // The scores span the cells of one stream; the micro-batch's tokens are spread over the streams.
    let full_kv = u64::from(r.n_ctx_seq);
    let any_full = h.sliding_window_layers.is_empty() || h.sliding_window_layers.iter().any(|s| !s);
    let n_kv = if any_full {
        full_kv
    } else {
        r.swa_cells.map_or(full_kv, u64::from)
    };
    let inputs = product(W, &[INPUT_ROWS_I32, t, 4])?;
    let mask = product(W, &[n_kv, t, if r.flash_attn { F16 } else { F32 }])?;
    // A quantized K cache takes the micro-batch's K straight into the quantizing copy: one f32 K row fewer
    // (measured: -8 MiB at 512 tokens, -32 MiB at 2048 for Llama-2-7B, fa off).
    let kv_rows = if params.type_k.is_quantized() {
        ATTN_KV_ROWS - 1
    } else {
        ATTN_KV_ROWS
    };
    let attn_rows = add(
        W,
        mul(W, ATTN_EMBD_ROWS, row)?,
        product(W, &[kv_rows, dims.n_embd_k_gqa, t, F32])?,
    )?;
    let attention = if r.flash_attn {
        attn_rows
    } else {
        add(W, product(W, &[n_kv, t, dims.n_head, F32])?, attn_rows)?
    };
    let wide = match (h.expert_count, h.expert_used_count) {
        (Some(n), Some(k)) if n > 0 => mul(
            W,
            h.expert_feed_forward_length
                .or(h.feed_forward_length.as_ref().map(PerLayer::max))
                .unwrap_or(0),
            k,
        )?,
        _ => h.feed_forward_length.as_ref().map_or(0, PerLayer::max),
    };
    let ffn = [
        mul(W, FFN_EMBD_ROWS, row)?,
        if r.flash_attn { 0 } else { row },
    ]
    .into_iter()
    .try_fold(
        product(W, &[FFN_WIDE_ACTIVATIONS, wide, t, F32])?,
        |a, b| add(W, a, b),
    )?;
    Ok(Phases {
        output,
        layers: add(W, add(W, attention.max(ffn), mask)?, inputs)?,
        // With the layers elsewhere the host keeps the embedding rows it looked up, the mask and the inputs.
        host_inputs: add(W, add(W, row, mask)?, inputs)?,
    })
}

/// Peak compute bytes of the graph's phases.
#[derive(Debug, Clone, Copy)]
struct Phases {
    /// Logits and final hidden states: on the device holding the output layer.
    output: u64,
    /// The larger of attention and feed-forward: on every device holding blocks.
    layers: u64,
    /// What the host holds when every layer is elsewhere.
    host_inputs: u64,
}

/// The engine offloads a matmul whose weights stay on the host to the first GPU once a micro-batch has at
/// least this many tokens (ggml-cuda `offload_op`: `min_batch_size = 32`), copying the weight into that GPU's
/// compute buffer.
const OP_OFFLOAD_MIN_BATCH: u64 = 32;
