//! DeepSpeed's ZeRO model-state estimates, restated from the pinned release ([`super::DEEPSPEED_VERSION`]):
//! `estimate_zero2_model_states_mem_needs` (deepspeed/runtime/zero/stage_1_and_2.py) and
//! `estimate_zero3_model_states_mem_needs` (deepspeed/runtime/zero/stage3.py). They count model states only
//! (16-bit parameters and gradients, FP32 master weights and Adam moments): activations are added by the caller.
//! The integer arithmetic follows DeepSpeed's Python exactly (`int()` truncation where it truncates), so the
//! figures equal the functions' own output (tests/it/torch_memory.rs against tests/fixtures/torch/).

/// DeepSpeed's default `additional_buffer_factor` for the CPU side of both estimators.
pub const ADDITIONAL_BUFFER_FACTOR: f64 = 1.5;

/// Bytes per node's CPU and per GPU of one ZeRO configuration, as DeepSpeed estimates them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    pub cpu_bytes: u64,
    pub gpu_bytes: u64,
    /// ZeRO-3 only: `4 × largest_layer_params`, the gathered 16-bit parameters and gradients of the largest
    /// module; 0 for ZeRO-2.
    pub largest_layer_bytes: u64,
}

/// Python's `int(x)` of a non-negative float: truncation, saturating at `u64::MAX`.
fn trunc(x: f64) -> u64 {
    if x.is_nan() || x <= 0.0 { 0 } else { x as u64 }
}

/// `estimate_zero2_model_states_mem_needs(total_params, num_gpus_per_node, num_nodes, cpu_offload,
/// additional_buffer_factor)`:
/// offload: GPU `2P`, CPU `P × max(4 × gpus, 16) × factor`;
/// else: GPU `2P + int(18P / gpus)` (DeepSpeed's comment: 2 = 16-bit parameters; 18 = 16-bit gradients 2 + FP32
/// gradients 4 + FP32 parameters 4 + FP32 momentum and variance 8, all partitioned), CPU
/// `P × 4 × gpus_per_node × factor`.
pub fn zero2(
    total_params: u64,
    gpus_per_node: u32,
    nodes: u32,
    cpu_offload: bool,
    buffer_factor: f64,
) -> Estimate {
    let p = total_params as f64;
    let total_gpus = f64::from(gpus_per_node.max(1)) * f64::from(nodes.max(1));
    let (cpu, gpu) = if cpu_offload {
        (
            p * (4.0 * total_gpus).max(16.0) * buffer_factor,
            2u64.saturating_mul(total_params),
        )
    } else {
        (
            p * 4.0 * f64::from(gpus_per_node.max(1)) * buffer_factor,
            2u64.saturating_mul(total_params)
                .saturating_add(trunc(18.0 * p / total_gpus)),
        )
    };
    Estimate {
        cpu_bytes: trunc(cpu),
        gpu_bytes: gpu,
        largest_layer_bytes: 0,
    }
}

/// Where ZeRO-3 keeps the model states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Zero3Offload {
    /// Everything on the GPUs.
    None,
    /// Optimizer states on the CPU (`offload_optimizer`).
    Optimizer,
    /// Optimizer states and parameters on the CPU (`offload_optimizer` + `offload_param`).
    OptimizerAndParams,
}

/// `estimate_zero3_model_states_mem_needs(total_params, largest_layer_params, num_gpus_per_node, num_nodes,
/// cpu_offload, cpu_offload_params, zero_init, additional_buffer_factor)`. With `L = 4 × largest_layer_params`:
/// params and optimizer offloaded: GPU `L`, CPU `P × 18 / nodes × factor` (zero_init) or
/// `P × max(4 × gpus_per_node, 18 / nodes) × factor`;
/// optimizer offloaded: GPU `L + int(2P / gpus)`, CPU `P × 16 / nodes × factor` (zero_init) or
/// `P × max(4 × gpus_per_node, 16 / nodes) × factor`;
/// none: GPU `L + int(18P / gpus)`, CPU `largest × 4 × gpus_per_node × factor` (zero_init) or
/// `P × 4 × gpus_per_node × factor`.
pub fn zero3(
    total_params: u64,
    largest_layer_params: u64,
    gpus_per_node: u32,
    nodes: u32,
    offload: Zero3Offload,
    zero_init: bool,
    buffer_factor: f64,
) -> Estimate {
    let p = total_params as f64;
    let gpn = f64::from(gpus_per_node.max(1));
    let total_gpus = gpn * f64::from(nodes.max(1));
    let gpus_factor = 1.0 / f64::from(nodes.max(1));
    let largest = 4u64.saturating_mul(largest_layer_params);
    let (cpu, gpu) = match offload {
        Zero3Offload::OptimizerAndParams => (
            if zero_init {
                p * 18.0 * gpus_factor * buffer_factor
            } else {
                p * (4.0 * gpn).max(18.0 * gpus_factor) * buffer_factor
            },
            largest,
        ),
        Zero3Offload::Optimizer => (
            if zero_init {
                p * 16.0 * gpus_factor * buffer_factor
            } else {
                p * (4.0 * gpn).max(16.0 * gpus_factor) * buffer_factor
            },
            largest.saturating_add(trunc(2.0 * p / total_gpus)),
        ),
        Zero3Offload::None => (
            if zero_init {
                largest_layer_params as f64 * 4.0 * gpn * buffer_factor
            } else {
                p * 4.0 * gpn * buffer_factor
            },
            largest.saturating_add(trunc(18.0 * p / total_gpus)),
        ),
    };
    Estimate {
        cpu_bytes: trunc(cpu),
        gpu_bytes: gpu,
        largest_layer_bytes: largest,
    }
}
