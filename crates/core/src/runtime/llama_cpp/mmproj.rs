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
//! Image tokens ([`image_tokens`]): the most embeddings one image becomes in the language model's context,
//! from the projector's hparams as `tools/mtmd/clip.cpp` `clip_n_output_tokens` computes them for the projector
//! types Gemma 3, Qwen2/2.5/3-VL and LLaVA use; other types (and LLaVA-1.6's tiled `image_grid_pinpoints`)
//! report none rather than a guess.
//!
//! Gap: the projector's compute buffer is not charged. `clip_model_loader::warmup` reserves the vision graph
//! for the warm-up image (`hparams.warmup_image_size`, per projector type in `load_hparams`) through
//! `ggml_backend_sched_reserve`; its size depends on the projector type's graph builder (`clip_graph::build_*`)
//! and is not derived here: its size is ggml-alloc's peak over that graph (tensor reuse included), which only a
//! replay of each builder's graph would give exactly, and the only engine figure at hand is a scaled-down `mlp`
//! projector's 0.22 MiB (tests/it/llama_cpp_server_memory.rs), too small to prove a model of real-sized ones. Each
//! plan with a projector carries a warning naming this gap. Trade-off: weights
//! only, rather than a guessed compute figure, keeps every charged byte sourced; the plan can under-count the
//! projector's device by that buffer.

use optimizer_model::{MetaValue, ModelSpec};

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

/// `KEY_PROJ_TYPE` (tools/mtmd/clip-impl.h), and `KEY_VISION_PROJ_TYPE` for files with several modalities
/// (`clip_model_loader::load_hparams` reads the second when the first is absent).
const KEY_PROJ_TYPES: [&str; 2] = ["clip.projector_type", "clip.vision.projector_type"];

/// `hparams.set_limit_image_tokens(8, 4096)` in `load_hparams` for `qwen2vl_merger`, `qwen2.5vl_merger`,
/// `qwen3vl_merger`: the most tokens one image becomes without `--image-max-tokens`.
const QWEN_VL_MAX_IMAGE_TOKENS: u64 = 4096;

/// `hparams.n_merge = 4` in `load_hparams` for `gemma3` ("number of patches for each side is reduced by a
/// factor of 4"), unless the file states `clip.vision.projector.scale_factor`.
const GEMMA3_DEFAULT_MERGE: u64 = 4;

/// How many tokens one image becomes in the language model's context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ImageTokens {
    /// Tokens per image: the fixed count, or the most for a dynamic-resolution projector.
    pub per_image: u64,
    /// True when the count depends on the image's size and `per_image` is the projector's maximum.
    pub dynamic: bool,
}

fn meta_str<'a>(m: &'a ModelSpec, key: &str) -> Option<&'a str> {
    m.metadata.get(key).and_then(MetaValue::as_str)
}

fn meta_u64(m: &ModelSpec, key: &str) -> Option<u64> {
    m.metadata.get(key).and_then(MetaValue::as_u64)
}

/// The projector type as the file names it (`clip.projector_type`, else `clip.vision.projector_type`).
pub fn projector_type(projector: &ModelSpec) -> Option<&str> {
    KEY_PROJ_TYPES
        .iter()
        .find_map(|k| meta_str(projector, k).filter(|s| !s.is_empty()))
}

/// Tokens per image (`clip_n_output_tokens`, tools/mtmd/clip.cpp) for the warm-up/maximum image:
/// - `mlp` (LLaVA): one per patch, `(image_size / patch_size)²`; none with `image_grid_pinpoints` (LLaVA-1.6
///   tiles an image into a varying number of slices);
/// - `gemma3`: the patches pooled by `n_merge` per side, `(image_size / patch_size)² / n_merge²`;
/// - `qwen2vl_merger`, `qwen2.5vl_merger` (and the legacy `qwen2.5o`), `qwen3vl_merger`: dynamic, at most
///   [`QWEN_VL_MAX_IMAGE_TOKENS`].
///
/// `None` for other types or when a needed key is missing or zero.
pub fn image_tokens(projector: &ModelSpec) -> Option<ImageTokens> {
    let patches = || {
        let image = meta_u64(projector, "clip.vision.image_size")?;
        let patch = meta_u64(projector, "clip.vision.patch_size").filter(|&p| p > 0)?;
        let side = image / patch;
        side.checked_mul(side).filter(|&n| n > 0)
    };
    let fixed = |per_image| {
        Some(ImageTokens {
            per_image,
            dynamic: false,
        })
    };
    match projector_type(projector)? {
        "mlp"
            if !projector
                .metadata
                .contains_key("clip.vision.image_grid_pinpoints") =>
        {
            fixed(patches()?)
        }
        "gemma3" => {
            let merge = meta_u64(projector, "clip.vision.projector.scale_factor")
                .unwrap_or(GEMMA3_DEFAULT_MERGE);
            let per_side = merge.checked_mul(merge).filter(|&m| m > 0)?;
            fixed(patches()? / per_side)
        }
        "qwen2vl_merger" | "qwen2.5vl_merger" | "qwen2.5o" | "qwen3vl_merger" => {
            Some(ImageTokens {
                per_image: QWEN_VL_MAX_IMAGE_TOKENS,
                dynamic: true,
            })
        }
        _ => None,
    }
}

/// How many images of [`image_tokens`] fit a context of `n_ctx_seq` tokens per sequence (text not counted).
pub fn images_per_context(tokens: ImageTokens, n_ctx_seq: u64) -> u64 {
    n_ctx_seq.checked_div(tokens.per_image).unwrap_or(0)
}
