//! Throughput and latency model: a roofline per device, corrected by efficiencies. Pure: takes values.
//!
//! Decode is bound by the bytes each step reads (the device's weights, experts scaled by the share a token
//! routes to, plus the KV cells attended) over memory bandwidth, or by FLOPs once a batch of sequences makes the
//! step compute-bound; prefill by FLOPs over matrix throughput. Devices holding consecutive layers run one after
//! another, so their times add. The knee of the batch curve, where a decode step turns compute-bound, falls out
//! of the device's FLOPs-to-bandwidth ratio rather than a constant.

use serde::{Deserialize, Serialize};

/// Where the efficiencies (and so the predictions) come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Basis {
    /// Peak figures from profiles or the probe, efficiencies from the rule tables.
    Analytic,
    /// Efficiencies fitted from measurements of this device class.
    Calibrated,
    /// Measured on this device.
    Measured,
}

/// One device's peaks and efficiencies.
#[derive(Debug, Clone, PartialEq)]
pub struct DevicePerf {
    pub name: String,
    pub bandwidth_bytes_per_s: f64,
    /// Peak matrix FLOPS the runtime's prefill kernels use (dense FP16 tensor on GPUs, FP32 vector on CPUs).
    pub flops: f64,
    pub decode_efficiency: f64,
    pub prefill_efficiency: f64,
    /// Host only, with a GPU present: llama.cpp runs the prefill matmuls of host-resident weights on the first
    /// GPU for micro-batches of 32+ tokens, copying the weights over PCIe (ggml-cuda `offload_op`). The GPU's
    /// effective FLOPS and the link's bytes per second.
    pub offload: Option<Offload>,
}

/// Where the host's prefill is offloaded to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Offload {
    pub flops: f64,
    pub link_bytes_per_s: f64,
}

/// Micro-batches of at least this many tokens are offloaded (ggml-cuda `min_batch_size`).
pub const OFFLOAD_MIN_BATCH: f64 = 32.0;

/// What one device holds of the model.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceLoad {
    /// Weight bytes one token reads on this device (routed experts counted at the share a token uses).
    pub weight_bytes_per_token: f64,
    /// KV bytes per attended cell, over this device's layers.
    pub kv_bytes_per_cell: f64,
    /// Parameters one token multiplies on this device (routed experts at the share a token uses).
    pub active_params: f64,
    /// Attention FLOPs per (query, key) pair on this device: 4 × heads × head size × layers.
    pub attn_flops_per_pair: f64,
}

/// The request shape the prediction is for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shape {
    pub prompt_tokens: u64,
    pub generation_tokens: u64,
    /// Sequences decoded together.
    pub concurrency: u64,
    /// Tokens per prefill micro-batch (weights are read once per micro-batch).
    pub ubatch: u64,
}

/// Predicted speed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Prediction {
    pub prefill_tokens_per_s: f64,
    /// Aggregate over all concurrent sequences.
    pub decode_tokens_per_s: f64,
    pub time_to_first_token_ms: f64,
    pub time_per_output_token_ms: f64,
}

/// Seconds for one decode step of `n` sequences with `ctx` cells attended each.
fn decode_step(devices: &[(DevicePerf, DeviceLoad)], n: f64, ctx: f64) -> f64 {
    devices
        .iter()
        .map(|(p, l)| {
            let bytes = l.weight_bytes_per_token + n * l.kv_bytes_per_cell * ctx;
            let mem = bytes / (p.bandwidth_bytes_per_s * p.decode_efficiency);
            let flops = n * (2.0 * l.active_params + l.attn_flops_per_pair * ctx);
            let compute = flops / (p.flops * p.prefill_efficiency);
            mem.max(compute)
        })
        .sum()
}

/// Seconds to prefill `tokens` (causal attention: each token attends to the ones before it).
fn prefill(devices: &[(DevicePerf, DeviceLoad)], tokens: f64, ubatch: f64) -> f64 {
    devices
        .iter()
        .map(|(p, l)| {
            let flops =
                2.0 * l.active_params * tokens + l.attn_flops_per_pair * tokens * tokens / 2.0;
            let reads = (tokens / ubatch).ceil().max(1.0);
            let compute = flops / (p.flops * p.prefill_efficiency);
            let mem =
                reads * l.weight_bytes_per_token / (p.bandwidth_bytes_per_s * p.decode_efficiency);
            let local = compute.max(mem);
            match p.offload {
                Some(o) if ubatch.min(tokens) >= OFFLOAD_MIN_BATCH => {
                    // Every micro-batch copies the host's weights to the GPU and multiplies there.
                    let copy = reads * l.weight_bytes_per_token / o.link_bytes_per_s;
                    local.min(copy.max(flops / o.flops))
                }
                _ => local,
            }
        })
        .sum()
}

/// Predicts prefill and decode speed for `shape` on `devices` (in layer order).
pub fn predict(devices: &[(DevicePerf, DeviceLoad)], shape: Shape) -> Prediction {
    let n = shape.concurrency.max(1) as f64;
    let prompt = shape.prompt_tokens.max(1) as f64;
    // The average decode step attends to the prompt and half the generated tokens.
    let ctx = prompt + shape.generation_tokens as f64 / 2.0;
    let step = decode_step(devices, n, ctx);
    let pre = prefill(devices, prompt, shape.ubatch.max(1) as f64);
    let first_step = decode_step(devices, 1.0, prompt);
    Prediction {
        prefill_tokens_per_s: prompt / pre,
        decode_tokens_per_s: n / step,
        time_to_first_token_ms: (pre + first_step) * 1e3,
        time_per_output_token_ms: step * 1e3,
    }
}

/// Concurrency past which a decode step turns compute-bound on one device: the knee of the batch curve, from
/// its FLOPs-to-bandwidth ratio (tokens per byte it can compute while reading one byte).
pub fn decode_knee(p: &DevicePerf, l: &DeviceLoad) -> f64 {
    let bytes_time = l.weight_bytes_per_token / (p.bandwidth_bytes_per_s * p.decode_efficiency);
    let flops_per_seq = 2.0 * l.active_params / (p.flops * p.prefill_efficiency);
    if flops_per_seq <= 0.0 {
        f64::INFINITY
    } else {
        bytes_time / flops_per_seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu() -> DevicePerf {
        DevicePerf {
            name: "gpu".into(),
            bandwidth_bytes_per_s: 1e12,
            flops: 100e12,
            decode_efficiency: 0.5,
            prefill_efficiency: 0.5,
            offload: None,
        }
    }

    fn load() -> DeviceLoad {
        DeviceLoad {
            weight_bytes_per_token: 4e9,
            kv_bytes_per_cell: 131_072.0,
            active_params: 8e9,
            attn_flops_per_pair: 4.0 * 32.0 * 128.0 * 32.0,
        }
    }

    #[test]
    fn single_sequence_decode_is_bandwidth_bound() {
        let p = predict(
            &[(gpu(), load())],
            Shape {
                prompt_tokens: 1,
                generation_tokens: 0,
                concurrency: 1,
                ubatch: 512,
            },
        );
        // 4 GB at 0.5 TB/s effective: 8 ms a token, plus 1 cell of KV.
        assert!(
            (p.time_per_output_token_ms - 8.0).abs() < 0.01,
            "{}",
            p.time_per_output_token_ms
        );
    }

    #[test]
    fn batching_raises_throughput_until_the_knee() {
        let one = predict(
            &[(gpu(), load())],
            Shape {
                prompt_tokens: 128,
                generation_tokens: 128,
                concurrency: 1,
                ubatch: 512,
            },
        );
        let eight = predict(
            &[(gpu(), load())],
            Shape {
                concurrency: 8,
                prompt_tokens: 128,
                generation_tokens: 128,
                ubatch: 512,
            },
        );
        assert!(eight.decode_tokens_per_s > 5.0 * one.decode_tokens_per_s);
        // Knee: 4 GB / 0.5 TB/s = 8 ms per step; 16 GFLOP per sequence at 50 TFLOPS = 0.32 ms: 25 sequences.
        assert!((decode_knee(&gpu(), &load()) - 25.0).abs() < 1e-9);
    }

    #[test]
    fn devices_in_sequence_add_their_times() {
        let half = DeviceLoad {
            weight_bytes_per_token: 2e9,
            kv_bytes_per_cell: 65_536.0,
            active_params: 4e9,
            attn_flops_per_pair: 2.0 * 32.0 * 128.0 * 32.0,
        };
        let shape = Shape {
            prompt_tokens: 512,
            generation_tokens: 128,
            concurrency: 1,
            ubatch: 512,
        };
        let whole = predict(&[(gpu(), load())], shape);
        let split = predict(&[(gpu(), half.clone()), (gpu(), half)], shape);
        assert!((whole.time_per_output_token_ms - split.time_per_output_token_ms).abs() < 1e-9);
    }
}
