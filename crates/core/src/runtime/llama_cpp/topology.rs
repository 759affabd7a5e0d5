//! llama.cpp's topology for the speed model: which device computes which layers and reads which weights, exactly
//! as the engine places them.

use crate::perf::DeviceLoad;
use optimizer_memory::llama_cpp::{self, Estimate, Machine, Params};
use optimizer_model::{ModelSpec, Role};

/// Per-device load of `model` under the placement the memory estimate resolved (`est`, from `params` on
/// `machine`): each device is charged exactly what it holds. Blocks go where llama.cpp puts them
/// ([`llama_cpp::layer_devices`]; `--n-cpu-moe` keeps early experts on the host); the token embedding stays on
/// the host and is read one row per token (GET_ROWS, no matmul); a tied output layer multiplies the embedding
/// on the output layer's device. Index 0 is the host, then the GPUs in `machine` order, as in `est.devices`.
pub fn loads(
    model: &ModelSpec,
    params: &Params,
    machine: &Machine,
    est: &Estimate,
) -> Vec<DeviceLoad> {
    let h = &model.hparams;
    let n_dev = est.devices.len().max(1);
    let mut out = vec![DeviceLoad::default(); n_dev];
    out[0].host = true;
    let expert_share = match (h.expert_count, h.expert_used_count) {
        (Some(n), Some(k)) if n > 0 => (k as f64 / n as f64).min(1.0),
        _ => 1.0,
    };
    let n_layer = u32::try_from(h.block_count.unwrap_or(0)).unwrap_or(u32::MAX);
    let weights: Vec<f64> = if !params.tensor_split.is_empty() {
        params.tensor_split.clone()
    } else {
        machine.gpus.iter().map(|g| g.free_bytes as f64).collect()
    };
    let gpu_layers = if machine.gpus.is_empty() {
        0
    } else {
        est.resolved.n_gpu_layers
    };
    let placed = llama_cpp::layer_devices(n_layer, gpu_layers, &weights);
    // Device index (0 = host) of block `il`, or of the output layer at `il == n_layer`.
    let dev = |il: u32| -> usize {
        placed
            .get(il as usize)
            .copied()
            .flatten()
            .map_or(0, |g| (g + 1).min(n_dev - 1))
    };
    let heads = h.head_count.as_ref();
    let head_dim = h
        .key_length
        .unwrap_or_else(|| h.embedding_length.unwrap_or(0) / heads.map_or(1, |p| p.max().max(1)))
        as f64;
    for il in 0..n_layer {
        let d = dev(il);
        out[d].layers += 1.0;
        let recurrent = h
            .recurrent_layers
            .get(il as usize)
            .copied()
            .unwrap_or(false);
        if !recurrent {
            let nh = heads.and_then(|p| p.get(il as usize)).unwrap_or(0) as f64;
            out[d].attn_flops_per_pair += 4.0 * nh * head_dim;
        }
    }
    let has_output = model.tensors.iter().any(|t| t.name == "output.weight");
    for t in &model.tensors {
        let bytes = t.bytes as f64;
        let n = t.parameters as f64;
        let is_embd = t.role == Role::Embedding || t.name.starts_with("token_embd");
        if is_embd {
            // GET_ROWS: one row per token on the host.
            let rows = t.shape.first().copied().unwrap_or(1).max(1) as f64;
            out[0].add(t.dtype, false, bytes / rows, 0.0, 0.0);
            if h.tied_embeddings && !has_output && t.name == "token_embd.weight" {
                out[dev(n_layer)].add(t.dtype, true, bytes, n, bytes);
            }
            continue;
        }
        let is_output =
            t.layer.is_none() && (t.role == Role::Output || t.name.starts_with("output"));
        let d = match t.layer {
            Some(l) if t.role == Role::Expert && l < params.n_cpu_moe => 0,
            Some(l) => dev(l.min(n_layer.saturating_sub(1))),
            None if is_output => dev(n_layer),
            // rope_freqs and other tensors outside blocks belong to the repeating layers.
            None => dev(0),
        };
        // Element-wise weights (norms, biases) are read but not multiplied as a matrix.
        let matmul = t.shape.len() >= 2;
        let share = if t.role == Role::Expert {
            expert_share
        } else {
            1.0
        };
        out[d].add(
            t.dtype,
            is_output && matmul,
            bytes * share,
            if matmul { n * share } else { 0.0 },
            bytes,
        );
    }
    let cells = f64::from(est.resolved.n_ctx.max(1));
    for (o, m) in out.iter_mut().zip(&est.devices) {
        o.kv_bytes_per_cell = m.kv_cache_bytes as f64 / cells;
    }
    out
}
