//! A multimodal projector (llama-server `--mmproj FILE`): which device the pinned engine puts it on and the
//! bytes it charges there. Pure functions of the plan's point and the projector's [`ModelSpec`]; the planner
//! calls them from `evaluate`, the launch artifacts from `describe`.
//!
//! How the pinned engine (llama.cpp 0c1e570) places the projector:
//! - `tools/server/server-context.cpp` (model load) passes `params_base.mmproj_use_gpu` (default true; off with
//!   `--no-mmproj-offload`, common/arg.cpp) and `params_base.mmproj_device` to `mtmd_init_from_file`
//!   (`tools/mtmd/mtmd.cpp`), which hands them to `clip_init`.
//! - `common/arg.cpp` `common_params_parse` (after parsing): without `-mmdev`, the projector follows `--device`:
//!   `mmproj_device = devices.front()`, and offloading stays on only when that is a device. The plan's argv
//!   always names `-dev` (`launch.rs`): the first planned GPU on a GPU plan, `none` on a CPU-only plan (the
//!   projector then runs on the host).
//! - `tools/mtmd/clip.cpp` `clip_ctx::clip_ctx` initialises that device's backend (else the CPU's), and
//!   `clip_model_loader::load_tensors` allocates every tensor the projector loads in one buffer of that
//!   backend's default type (`ggml_backend_alloc_ctx_tensors_from_buft`): the weights all land on one device.
//!
//! Charged: the projector's tensor bytes, as the main model's weights are counted (`weights.rs`: `ggml_nbytes`,
//! no per-tensor buffer alignment).
//!
//! Gap: the projector's compute buffer is not charged. `clip_model_loader::warmup` reserves the vision graph
//! for the warm-up image (`hparams.warmup_image_size`, per projector type in `load_hparams`) through
//! `ggml_backend_sched_reserve`; its size depends on the projector type's graph builder (`clip_graph::build_*`)
//! and is not derived here. Each plan with a projector carries a warning naming this gap. Trade-off: weights
//! only, rather than a guessed compute figure, keeps every charged byte sourced; the plan can under-count the
//! projector's device by that buffer.

use optimizer_model::ModelSpec;

/// The `general.architecture` of a projector GGUF (tools/mtmd/clip-impl.h `KEY_*` keys live under `clip.`).
pub const ARCHITECTURE: &str = "clip";

/// The index, in the estimate's device list (host first, then the plan's GPUs in order), of the device the
/// engine puts the projector on: the first planned GPU (`-dev`'s first entry), or the host on a CPU-only plan.
pub fn device_index(plan_gpus: usize) -> usize {
    usize::from(plan_gpus > 0)
}

/// The bytes charged for the projector: its tensors' bytes (see the module doc for the compute-buffer gap).
pub fn bytes(projector: &ModelSpec) -> u64 {
    projector.tensor_bytes()
}

/// The warning every plan with a projector carries: what is not charged.
pub fn compute_gap_warning(path: &str) -> String {
    format!(
        "mmproj {path}: only the projector's weights are charged; its compute buffer (tools/mtmd/clip.cpp clip_model_loader::warmup, reserved for the warm-up image) is not, so the projector's device needs that much more"
    )
}
