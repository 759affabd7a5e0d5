//! What tensor parallelism allocates in vLLM 0.33.0 besides NCCL, and where it lands in the budget.
//!
//! Before the snapshot (outside the requested budget): `Worker.init_device` (vllm/v1/worker/gpu_worker.py)
//! calls `init_worker_distributed_environment` before `MemorySnapshot`, and the TP group's `CudaCommunicator`
//! (vllm/distributed/device_communicators/cuda_communicator.py `__init__`) builds, on CUDA:
//! - `SymmMemCommunicator` (symm_mem.py `__init__`, `VLLM_ALLREDUCE_USE_SYMM_MEM` defaults to 1, vllm/envs.py):
//!   one `torch_symm_mem.empty` buffer of `SYMM_MEM_ALL_REDUCE_MAX_SIZES[cc][tp]` bytes (all_reduce_utils.py),
//!   kept as `self.buffer` even where multicast is then found missing; none on a capability not in the table;
//! - `CustomAllreduce` (custom_all_reduce.py `__init__`, world sizes 2, 4, 6, 8, 16): the signal and staging
//!   buffer `meta_size() + max_size`, the IPC buffer `max(max_size, 2 MiB all-gather, 16 MiB reduce-scatter)`,
//!   `rank_data` of 8 MiB, and `_init_mnnvl_buffer`'s `6 × max(mnnvl all-gather × tp, 16 MiB)` symmetric
//!   buffer, kept only where multicast works. `max_size` is 8 MiB, capped by `CUSTOM_ALL_REDUCE_MAX_SIZES[cc][tp]`
//!   when the symmetric-memory communicator is enabled. `meta_size()` is `sizeof(Signal)` in the compiled
//!   kernel (not in the Python source): not counted.
//!
//! During profiling (inside the budget): with TP > 1 on compute capability 9.0 or 10.x and FlashInfer installed
//! (a dependency of the wheel, flashinfer-python 0.7.2.post1), the default optimization level turns on
//! `fuse_allreduce_rms` (vllm/config/vllm.py `enable_allreduce_rms_fusion`), whose pass
//! (vllm/compilation/passes/fusion/allreduce_rms_fusion.py `AllReduceFusionPass.__init__`) creates FlashInfer's
//! all-reduce workspace when the model is first compiled, in `profile_run`; the standalone FlashInfer
//! all-reduce and the quant patterns reuse it (flashinfer_all_reduce.py `get_fi_ar_workspace`,
//! `get_fi_ar_quant_workspace`). Its tokens: `min(FI_ALLREDUCE_FUSION_MAX_SIZE_MB[cc][tp] MiB / (hidden ×
//! dtype bytes), max_num_batched_tokens)`. On one node the backend is `mnnvl`
//! (`_resolve_fi_ar_backend`), FlashInfer's `MNNVLAllReduceFusionWorkspace` (flashinfer/comm/trtllm_mnnvl_ar.py):
//! three Lamport buffers, each the larger of the one-shot size (tokens capped at `MNNVL_ONE_SHOT_THRESHOLD /
//! (tp × dtype bytes × hidden)`, times `hidden × tp × dtype bytes`) and the two-shot size (`2 × ceil(tokens /
//! tp) × tp × hidden × dtype bytes`), rounded up to 32 bytes.
//!
//! Trade-off: the terms assume an NVSwitch node (multicast available, every buffer kept), the usual place for
//! TP on H100/B200; on a PCIe box vLLM keeps less (no MNNVL buffer, TRT-LLM's larger workspace instead), which
//! the plan does not model. NCCL's own memory (communicator, channel buffers connected at the first
//! collectives) is set by NCCL and stays the measured [`super::NON_TORCH_TP_EXTRA_BYTES`].

use super::{Dtype, GpuFacts};

const MIB: u64 = 1 << 20;

/// `SYMM_MEM_ALL_REDUCE_MAX_SIZES` (vllm/distributed/device_communicators/all_reduce_utils.py), in bytes.
pub fn symm_mem_buffer_bytes(cc: (u32, u32), tp: u32) -> Option<u64> {
    let mib = match (cc, tp) {
        ((9, 0), 2) => 64,
        ((9, 0), 4) => 32,
        ((9, 0), 6 | 8) => 64,
        ((10, 0), 2) => 8,
        ((10, 0), 4) => 32,
        ((10, 0), 6 | 8) => 128,
        ((10, 3 | 7), 2) => 4,
        ((10, 3 | 7), 4 | 6) => 32,
        ((10, 3 | 7), 8) => 64,
        _ => return None,
    };
    Some(mib * MIB)
}

/// `CUSTOM_ALL_REDUCE_MAX_SIZES` (all_reduce_utils.py), in bytes: the custom all-reduce's cap when the
/// symmetric-memory communicator is on.
fn custom_ar_cap_bytes(cc: (u32, u32), tp: u32) -> Option<u64> {
    Some(match (cc, tp) {
        ((9, 0), 2) => 64 * MIB,
        ((9, 0), 4) => 32 * MIB,
        ((9, 0), 6) => MIB / 2,
        ((9, 0), 8) => MIB / 4,
        ((10, 0), 2 | 4) => 2 * MIB,
        ((10, 0), 6 | 8) => MIB,
        ((10, 3 | 7), 2 | 4 | 8) => 4 * MIB,
        ((10, 3 | 7), 6) => 8 * MIB,
        _ => return None,
    })
}

/// `CustomAllreduce.__init__`'s default `max_size` (8192 × 1024).
const CUSTOM_AR_DEFAULT_MAX_BYTES: u64 = 8192 * 1024;
/// `CustomAllreduce._DEFAULT_ALL_GATHER_MAX_SIZE`.
const CUSTOM_AR_ALL_GATHER_BYTES: u64 = 2 * MIB;
/// `CustomAllreduce._DEFAULT_REDUCE_SCATTER_MAX_SIZE` (and `_DEFAULT_MNNVL_REDUCE_SCATTER_MAX_SIZE`).
const CUSTOM_AR_REDUCE_SCATTER_BYTES: u64 = 16 * MIB;
/// `CustomAllreduce.rank_data`: "Allocating 8MB is enough for 65536 such tuples".
const CUSTOM_AR_RANK_DATA_BYTES: u64 = 8 * MIB;
/// `_init_mnnvl_buffer`: `buffer_size = stage_size * 6`.
const CUSTOM_AR_MNNVL_STAGES: u64 = 6;
/// FlashInfer's `MNNVL_ONE_SHOT_THRESHOLD = 64 * 1024 * 8 * 2` (flashinfer/comm/trtllm_mnnvl_ar.py).
const MNNVL_ONE_SHOT_THRESHOLD: u64 = 64 * 1024 * 8 * 2;
/// `MNNVLAllReduceFusionWorkspace.NUM_LAMPORT_BUFFERS`.
const MNNVL_LAMPORT_BUFFERS: u64 = 3;
/// `TWOSHOT_NUM_STAGES × PACKED_ALIGNMENT_BYTES` = 2 × 16: the buffer's rounding.
const MNNVL_ALIGNMENT: u64 = 32;

/// The first compute capability with CUDA multicast objects (`CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED`, CUDA
/// driver API "Multicast Object Management": Hopper and later with NVSwitch).
const MULTICAST_MIN_MAJOR: u32 = 9;
/// `_DEFAULT_MNNVL_ALL_GATHER_MAX_SIZES[tp]`.
fn mnnvl_all_gather_bytes(tp: u32) -> Option<u64> {
    Some(match tp {
        2 => 8 * MIB,
        4 => 4 * MIB,
        6 | 8 | 16 => 2 * MIB,
        _ => return None,
    })
}

/// `FI_ALLREDUCE_FUSION_MAX_SIZE_MB` (vllm/compilation/passes/fusion/allreduce_rms_fusion.py), in bytes.
fn fi_fusion_max_bytes(cc: (u32, u32), tp: u32) -> Option<u64> {
    let kib = match (cc.0 * 10 + cc.1, tp) {
        (90, 2) => 64 * 1024,
        (90, 4) => 2 * 1024,
        (90, 8) => 512,
        (100, 2 | 16) => 64 * 1024,
        (100, 4) => 32 * 1024,
        (100, 8) => 1024,
        (103, 2 | 4 | 16) => 64 * 1024,
        (103, 8) => 4 * 1024,
        (107, 2 | 4) => 64 * 1024,
        (107, 8) => 2 * 1024,
        _ => return None,
    };
    Some(kib * 1024)
}

/// One rank's tensor-parallel buffers, by where vLLM's budget counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TpBuffers {
    /// `SymmMemCommunicator.buffer`: before the snapshot.
    pub symm_mem_bytes: u64,
    /// `CustomAllreduce`'s staging, IPC and `rank_data` buffers: before the snapshot.
    pub custom_ar_bytes: u64,
    /// `CustomAllreduce._init_mnnvl_buffer`: before the snapshot.
    pub custom_ar_mnnvl_bytes: u64,
    /// FlashInfer's all-reduce fusion workspace, created in `profile_run`: inside the budget.
    pub flashinfer_workspace_bytes: u64,
}

impl TpBuffers {
    /// What lands before vLLM's snapshot, outside the requested budget.
    pub fn before_snapshot_bytes(&self) -> u64 {
        self.symm_mem_bytes + self.custom_ar_bytes + self.custom_ar_mnnvl_bytes
    }
}

/// The buffers of one rank at tensor-parallel size `tp`, hidden width `hidden` and activation `dtype`, on an
/// NVSwitch node; all zero at TP 1 or where the GPU's compute capability is unknown.
pub fn tp_buffers(
    tp: u32,
    gpu: &GpuFacts,
    hidden: u64,
    dtype: Dtype,
    max_num_batched_tokens: u32,
) -> TpBuffers {
    let Some(cc) = gpu.compute_capability.filter(|_| tp > 1) else {
        return TpBuffers::default();
    };
    let symm = symm_mem_buffer_bytes(cc, tp);
    let mut b = TpBuffers {
        symm_mem_bytes: symm.unwrap_or(0),
        ..TpBuffers::default()
    };
    if let Some(ag) = mnnvl_all_gather_bytes(tp) {
        // Multicast objects need compute capability 9.0 or later (CUDA driver API, "Multicast Object
        // Management"); without one `_init_mnnvl_buffer` drops its buffer.
        let multicast = cc.0 >= MULTICAST_MIN_MAJOR;
        let max_size = match (symm, custom_ar_cap_bytes(cc, tp)) {
            (Some(_), Some(cap)) => cap.min(CUSTOM_AR_DEFAULT_MAX_BYTES),
            _ => CUSTOM_AR_DEFAULT_MAX_BYTES,
        };
        let ipc = max_size
            .max(CUSTOM_AR_ALL_GATHER_BYTES)
            .max(CUSTOM_AR_REDUCE_SCATTER_BYTES);
        b.custom_ar_bytes = max_size + ipc + CUSTOM_AR_RANK_DATA_BYTES;
        let stage = (ag * u64::from(tp)).max(CUSTOM_AR_REDUCE_SCATTER_BYTES);
        if multicast {
            b.custom_ar_mnnvl_bytes = CUSTOM_AR_MNNVL_STAGES * stage;
        }
    }
    if let Some(max_bytes) = fi_fusion_max_bytes(cc, tp)
        && hidden > 0
    {
        let elem = dtype.bytes();
        let tokens =
            (max_bytes / hidden.saturating_mul(elem)).min(u64::from(max_num_batched_tokens));
        b.flashinfer_workspace_bytes = mnnvl_workspace_bytes(u64::from(tp), tokens, hidden, elem);
    }
    b
}

/// `MNNVLAllReduceFusionWorkspace.__init__` with `buffer_size_in_bytes` unset: three Lamport buffers of the
/// larger of the one-shot and two-shot sizes (`get_required_buffer_size_bytes`).
fn mnnvl_workspace_bytes(tp: u64, tokens: u64, hidden: u64, elem: u64) -> u64 {
    let row = hidden * elem;
    let one_shot_tokens = (MNNVL_ONE_SHOT_THRESHOLD / (tp * row)).min(tokens);
    let one_shot = one_shot_tokens * row * tp;
    let two_shot = 2 * tokens.div_ceil(tp) * tp * row;
    MNNVL_LAMPORT_BUFFERS * one_shot.max(two_shot).next_multiple_of(MNNVL_ALIGNMENT)
}
