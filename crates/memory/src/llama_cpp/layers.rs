//! Layer assignment: which device holds the input layer, each block and the output layer, from `-ngl` and
//! `-ts` (llama-model.cpp L1557-1600).

use super::error::ParamError;
use super::{MAX_LAYERS, Machine, Params};
use optimizer_model::{Hparams, Role, TensorInfo};

/// Where a tensor's layer lives: the input layer (always the CPU), a block, or the output layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Slot {
    Input,
    Block(u32),
    Output,
}

/// The slot of a tensor, from its layer index and role.
pub(super) fn slot(t: &TensorInfo) -> Slot {
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

/// The device's name in the estimate: `cpu`, `cuda:N`.
pub(super) fn device_name(d: Option<usize>) -> String {
    match d {
        None => "cpu".into(),
        Some(i) => format!("cuda:{i}"),
    }
}

/// Where every layer goes: blocks, the output layer, and the device indices of the estimate (0 the host,
/// `i + 1` GPU i).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Placement {
    pub n_layer: u32,
    /// Layers on GPUs, the output layer counted (0 on a CPU-only machine).
    pub gpu_layers: u32,
    /// Cumulative split points over the GPUs; empty without GPUs.
    splits: Vec<f64>,
}

impl Placement {
    /// Resolves `-ngl` and `-ts` for the model's block count (llama-model.cpp L1557-1600).
    pub(super) fn resolve(
        h: &Hparams,
        params: &Params,
        machine: &Machine,
        notes: &mut Vec<String>,
    ) -> Result<Self, ParamError> {
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
        Ok(Placement {
            n_layer,
            gpu_layers,
            splits,
        })
    }

    /// The device of a slot: `None` the CPU, `Some(i)` GPU i.
    pub(super) fn device(&self, slot: Slot) -> Option<usize> {
        let (n_layer, gpu_layers, splits) = (self.n_layer, self.gpu_layers, &self.splits);
        match slot {
            Slot::Input => None,
            Slot::Block(il) => layer_device(
                il.min(n_layer.saturating_sub(1)),
                n_layer,
                gpu_layers,
                splits,
            ),
            Slot::Output => layer_device(n_layer, n_layer, gpu_layers, splits),
        }
    }

    /// The estimate's index of a slot's device.
    pub(super) fn index(&self, slot: Slot) -> usize {
        index(self.device(slot))
    }
}

/// The estimate's index of a device: 0 the host, `i + 1` GPU i.
pub(super) fn index(d: Option<usize>) -> usize {
    d.map_or(0, |i| i + 1)
}

/// Architectures whose tensor loaders flag the NextN (multi-token-prediction) blocks `TENSOR_SKIP` unless the
/// caller asks for them (`load_mtp`, false in `llama_model_default_params`, src/llama-model.cpp): src/models/
/// glm4-moe.cpp, qwen35moe.cpp, qwen35.cpp, qwen3next.cpp and deepseek2.cpp `load_arch_tensors`
/// (`if (!ml.load_mtp) mtp_flags |= TENSOR_SKIP`, applied to every block `i >= n_layer`). The loader then creates
/// no tensor and takes its bytes out of the model size (src/llama-model-loader.cpp
/// `llama_model_loader::create_tensor`: "skip unused tensors", `size_data -= nbytes`). Other loaders that read
/// `load_mtp` are not listed until their rules are checked.
const NEXTN_SKIPPING_ARCHS: &[&str] = &["glm4moe", "qwen35moe", "qwen35", "qwen3next", "deepseek2"];

/// llama.cpp's `n_layer()`: the trunk's blocks, the NextN blocks at the end of `block_count` left out
/// (src/llama-hparams.cpp `llama_hparams::n_layer`: `n_layer_all - n_layer_nextn`). Placement still spreads all
/// `block_count` blocks over the devices (src/llama-model.cpp `llama_model::load_tensors` splits `n_layer_all`).
pub(super) fn trunk_layers(h: &Hparams) -> u64 {
    let all = h.block_count.unwrap_or(0);
    all.saturating_sub(h.nextn_predict_layers.unwrap_or(0))
}

/// Whether block `il` is a NextN block whose weights the engine does not load (see [`NEXTN_SKIPPING_ARCHS`]).
pub(super) fn skips_weights(arch: &str, h: &Hparams, il: u32) -> bool {
    h.nextn_predict_layers.is_some()
        && NEXTN_SKIPPING_ARCHS.contains(&arch)
        && u64::from(il) >= trunk_layers(h)
}
