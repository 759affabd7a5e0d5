//! Weights per device: where each tensor is allocated, which host weights the CPU backend repacks into
//! `CPU_REPACK`, the copy a tied output layer adds, and the NextN blocks the loader skips.

use super::error::{ParamError, add};
use super::layers::{Placement, Slot, slot};
use super::{DeviceMemory, LazyMode, Machine, Params};
use optimizer_model::{Dtype, GgmlType, ModelSpec, Role, TensorInfo};

/// Whether the CPU backend repacks a weight of this type and shape into `CPU_REPACK`
/// (ggml-cpu/repack.cpp `ggml_repack_get_optimal_repack_type` and `supports_op`): 2-D matmul weights and 3-D
/// expert weights whose row count divides by the kernel's interleave, for types the CPU's features support.
pub fn repacks(t: &TensorInfo, cpu_features: &[String]) -> bool {
    repacks_on(t, SimdFlags::of(cpu_features))
}

/// The SIMD features the repack rule reads, looked up once per estimate instead of once per tensor (a plan
/// estimates hundreds of configurations of models with hundreds of tensors).
#[derive(Debug, Clone, Copy)]
struct SimdFlags {
    avx2: bool,
    avx512: bool,
    neon: bool,
    i8mm: bool,
    dotprod: bool,
}

impl SimdFlags {
    fn of(cpu_features: &[String]) -> SimdFlags {
        let has = |f: &str| cpu_features.iter().any(|x| x == f);
        SimdFlags {
            avx2: has("avx2"),
            avx512: has("avx512f"),
            neon: has("neon"),
            i8mm: has("i8mm"),
            dotprod: has("dotprod"),
        }
    }
}

fn repacks_on(t: &TensorInfo, f: SimdFlags) -> bool {
    let Dtype::Ggml(ty) = t.dtype else {
        return false;
    };
    let dims = t.shape.len();
    let matmul = match t.slot_kind() {
        TensorKind::MatmulWeight => dims == 2,
        TensorKind::ExpertWeight => dims == 3,
        TensorKind::Other => false,
    };
    matmul && repacks_type(ty, ne1(&t.shape), f)
}

/// ggml's `ne[1]`, the second-innermost dimension: shapes are row-major, so it is the second from the end.
fn ne1(shape: &[u64]) -> u64 {
    let dims = shape.len();
    if dims >= 2 { shape[dims - 2] } else { 1 }
}

/// The type rule of `ggml_repack_get_optimal_repack_type` (ggml-cpu/repack.cpp L4974-5100) for a matmul weight
/// with `ne1` rows on a CPU with `cpu_features`. The features are the running CPU's in a `GGML_NATIVE` build
/// (`ggml_cpu_has_avx2` and friends), so the measured tables record the flags of the machine they come from.
fn repacks_type(ty: GgmlType, ne1: u64, f: SimdFlags) -> bool {
    let SimdFlags {
        avx2,
        avx512,
        neon,
        i8mm,
        dotprod,
    } = f;
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
///
/// The sharing needs the embedding to exist when the duplicate is made. [`DUPLICATE_FIRST`] architectures create
/// the duplicate first (src/models/gemma3n.cpp L28-34, src/models/gemma4.cpp L50-56: `output` before
/// `tok_embd`), so the lookup finds nothing and the output always gets its own copy, in the host's `CPU` buffer
/// when it does not repack (measured: Gemma-3n-E2B `--no-repack` 2684 MiB against 2395 without the copy).
fn tied_output_copy(
    embd: &TensorInfo,
    output_dev: Option<usize>,
    host_buffer: bool,
    repack: bool,
    cpu_features: &[String],
    duplicate_first: bool,
) -> Option<(Option<usize>, bool)> {
    match output_dev {
        Some(gpu) => Some((Some(gpu), false)),
        None if host_buffer => duplicate_first.then_some((None, false)),
        None => {
            let Dtype::Ggml(ty) = embd.dtype else {
                return None;
            };
            let repacked = repack
                && embd.shape.len() == 2
                && repacks_type(ty, ne1(&embd.shape), SimdFlags::of(cpu_features));
            match (repacked, duplicate_first) {
                (true, _) => Some((None, true)),
                (false, true) => Some((None, false)),
                (false, false) => None,
            }
        }
    }
}

/// Tied architectures whose loader creates the output duplicate of `token_embd.weight` before the embedding
/// itself, so the two are never shared (see [`tied_output_copy`]); found by comparing the line of the
/// `TENSOR_DUPLICATED` create with the `tok_embd` create in every src/models/*.cpp of the pinned engine.
const DUPLICATE_FIRST: &[&str] = &["gemma3n", "gemma4"];

/// Architectures whose loader creates `per_layer_token_embd.weight` with `TENSOR_READ_LAZY`
/// (src/models/gemma4.cpp L59, src/models/qwen4exp.cpp L191).
const LAZY_ARCHS: &[&str] = &["gemma4", "qwen4exp"];

/// `lazy_read::add`'s `auto_min_size` (src/llama-model-loader.cpp): under `-lzm auto` only larger tensors are
/// read lazily.
const LAZY_AUTO_MIN_BYTES: u64 = 4 << 30;

/// Whether the engine reads `t` on demand (src/llama-model-loader.cpp `lazy_read::add`): a tensor the
/// architecture marks, under `-lzm on`, or under `auto` when larger than 4 GiB. It then lives in a mapping of the
/// file (`is_lazy_mapped`, src/llama-model.cpp `load_tensors`) whatever the load mode, on the host. The engine's
/// own dry run (the fit pass, `no_alloc`) still counts it in the host's model buffer (measured: Gemma-4-E2B
/// `-lzm on` prints the same 1477 MiB host model as `-lzm off`), so the comparison with the engine adds it back.
/// Trade-off: mmap support is assumed (every CPU, CUDA, Metal and Vulkan device has it; integrated GPUs without
/// it turn `auto` off, which the probe cannot see).
fn reads_lazily(model: &ModelSpec, t: &TensorInfo, mode: LazyMode) -> bool {
    LAZY_ARCHS.contains(&model.architecture.as_str())
        && t.name == "per_layer_token_embd.weight"
        && match mode {
            LazyMode::Off => false,
            LazyMode::Auto => t.bytes > LAZY_AUTO_MIN_BYTES,
            LazyMode::On => true,
        }
}

/// How a weight is used by the graph, as far as placement cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TensorKind {
    MatmulWeight,
    ExpertWeight,
    Other,
}

pub(super) trait Kind {
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
            // Only state-space (or unrecognised) tensors can be convolutions or A matrices; the name scan is
            // skipped for the rest, since a plan classifies every tensor hundreds of times.
            Role::Recurrent | Role::Other
                // `ssm_a.` and not `ssm_a`: Qwen3.5's `ssm_alpha.weight` is a matmul weight the engine repacks.
                if self.name.contains("conv1d") || self.name.contains("ssm_a.") =>
            {
                TensorKind::Other
            }
            _ => TensorKind::MatmulWeight,
        }
    }
}

/// Whether host weights go to the first GPU's pinned host buffer. With GPUs the host list starts with it, and it
/// takes every host weight before CPU_REPACK is tried (llama-model.cpp make_cpu_buft_list L1078-1135), or the
/// plain CPU buffer instead of it under mmap (llama-model-loader.cpp L1269-1277); --no-host skips it
/// (common/arg.cpp: "bypass host buffer allowing extra buffers to be used").
fn host_buffer(params: &Params, machine: &Machine) -> bool {
    !machine.gpus.is_empty() && !params.no_host
}

/// Whether CPU weight repacking applies: asked for (no `--no-repack`) and not pre-empted by a GPU's host buffer.
pub(super) fn repack_enabled(params: &Params, machine: &Machine) -> bool {
    params.repack && !host_buffer(params, machine)
}

/// Adds every tensor's bytes to the device that holds it (`mem` indexed as [`Placement::index`]), repacked host
/// weights apart, the mapped file to the host with mmap, and the tied output copy.
pub(super) fn place(
    model: &ModelSpec,
    params: &Params,
    machine: &Machine,
    placement: &Placement,
    mem: &mut [DeviceMemory],
    notes: &mut Vec<String>,
) -> Result<(), ParamError> {
    let repack = repack_enabled(params, machine);
    let idx = super::layers::index;
    let mut repacked_types = std::collections::BTreeSet::new();
    let simd = SimdFlags::of(&machine.cpu_features);
    let mut skipped = 0u64;
    for t in &model.tensors {
        let s = slot(t);
        // NextN blocks the loader skips take no memory anywhere (layers::skips_weights).
        if let Slot::Block(il) = s
            && t.layer.is_some()
            && super::layers::skips_weights(&model.architecture, &model.hparams, il)
        {
            skipped = add("weights", skipped, t.bytes)?;
            continue;
        }
        if reads_lazily(model, t, params.lazy_mode) {
            mem[0].lazy_bytes = add("weights", mem[0].lazy_bytes, t.bytes)?;
            notes.push(format!(
                "-lzm: {} ({:.1} MiB) is read from the file on demand (mapped page cache, not in the weights or the totals)",
                t.name,
                t.bytes as f64 / f64::from(1u32 << 20)
            ));
            continue;
        }
        let mut d = placement.device(s);
        // --n-cpu-moe keeps the routed experts of the first N layers on the CPU.
        if t.role == Role::Expert
            && let Slot::Block(il) = s
            && il < params.n_cpu_moe
        {
            d = None;
        }
        let m = &mut mem[idx(d)];
        if d.is_none() && repack && repacks_on(t, simd) {
            m.weights_repack_bytes = add("weights", m.weights_repack_bytes, t.bytes)?;
            repacked_types.insert(t.dtype.name());
        } else {
            m.weights_bytes = add("weights", m.weights_bytes, t.bytes)?;
        }
    }
    if skipped > 0 {
        notes.push(format!(
            "the multi-token-prediction (NextN) block is not loaded ({:.1} MiB of the file; llama.cpp loads it only for an MTP draft context)",
            skipped as f64 / f64::from(1u32 << 20)
        ));
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
    if model.hparams.tied_embeddings
        && let Some(embd) = model.tensor("token_embd.weight")
        && let Some((d, repacked)) = tied_output_copy(
            embd,
            placement.device(Slot::Output),
            host_buffer(params, machine),
            repack,
            &machine.cpu_features,
            DUPLICATE_FIRST.contains(&model.architecture.as_str()),
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
    Ok(())
}
