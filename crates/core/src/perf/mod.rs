//! Throughput and latency model: a roofline per device, corrected by efficiencies. Pure: takes values.
//!
//! Each device is charged exactly the bytes and FLOPs of the tensors it holds ([`loads`]): with every layer on a
//! GPU the host holds only the token embedding (one row read per token, no matmul), so the host's core count
//! cannot change a full-GPU plan's decode. Devices holding consecutive layers run one after another, so their
//! times add.
//!
//! GPUs: decode is bound by the bytes each step reads (weights, experts scaled by the share a token routes to,
//! plus the KV cells attended) over memory bandwidth, or by FLOPs once a batch of sequences makes the step
//! compute-bound; prefill by FLOPs over matrix throughput. The knee of the batch curve, where a decode step turns
//! compute-bound, falls out of the device's FLOPs-to-bandwidth ratio rather than a constant.
//!
//! CPUs ([`CpuRates`]) run llama.cpp's ggml-cpu kernels, measured with the pinned engine's `llama-bench`
//! (tests/fixtures/llama-bench): decode reads each weight type at the lower of the bandwidth the chosen threads
//! can pull (threads × per-core bandwidth, capped by the socket's achievable peak) and the per-core rate of that
//! type's quantized dot product; prefill is compute-bound at a per-type share of the FP32 FMA peak (int8 dot
//! products of Q4_0/Q8_0 run faster than the K-quants'), so decode and prefill differ. Every token also pays a
//! per-token floor: a fixed part, a per-layer part and, with more than one thread, a per-layer barrier wait.
//! Trade-off: the per-type kernel rates and the floor are fitted on one machine (an AVX2 Zen 3 core) and scale to
//! other CPUs through their clock and FP32 FLOP per cycle, which is coarse but keeps every CPU class predictable
//! without measurements. A CPU that `optimizer calibrate` measured ([`MeasuredCpu`]) scales them instead by its
//! own figures over the fitting machine's ([`REFERENCE`]): dot-product rates for decode, the FMA rate for
//! prefill, the read bandwidth times the share of it a decode reached there. The floor is not scaled: no
//! micro-benchmark measures ggml's per-op synchronisation.

pub mod collective;
pub mod gpu;

use serde::Serialize;

use crate::hardware::Inventory;
use crate::profile::HardwareProfile;
use optimizer_model::{Dtype, GgmlType};

pub use crate::evidence::Basis;

/// One device's peaks and efficiencies.
#[derive(Debug, Clone, PartialEq)]
pub struct DevicePerf {
    pub name: String,
    /// Peak memory bandwidth (a CPU: the socket's).
    pub bandwidth_bytes_per_s: f64,
    /// Peak matrix FLOPS the runtime's prefill kernels use (dense FP16 tensor on GPUs, FP32 vector on CPUs).
    pub flops: f64,
    pub decode_efficiency: f64,
    pub prefill_efficiency: f64,
    /// Host only, with a GPU present: llama.cpp runs the prefill matmuls of host-resident weights on the first
    /// GPU for micro-batches of 32+ tokens, copying the weights over PCIe (ggml-cuda `offload_op`). The GPU's
    /// effective FLOPS and the link's bytes per second.
    pub offload: Option<Offload>,
    /// A CPU running ggml-cpu kernels: per-core rates instead of the socket roofline (see the module doc).
    pub cpu: Option<CpuRates>,
    /// A GPU whose llama.cpp kernels [`gpu`] models (CUDA with int8 `mma`, Metal); `None` keeps the roofline
    /// above with the rule tables' efficiencies.
    pub gpu: Option<gpu::GpuKernels>,
}

/// Where the host's prefill is offloaded to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Offload {
    pub flops: f64,
    pub link_bytes_per_s: f64,
    /// The GPU's kernel model, when it has one: offloaded matmuls run the same kernels as the GPU's own layers
    /// (`flops` is then unused), so moving a layer to the host never makes its prefill faster than on the GPU.
    pub kernels: Option<gpu::GpuKernels>,
}

/// Micro-batches of at least this many tokens are offloaded (ggml-cuda `min_batch_size`).
const OFFLOAD_MIN_BATCH: f64 = 32.0;

/// The per-core figures of a CPU that llama.cpp's speed scales with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuRates {
    /// Threads llama.cpp computes with (`-t`).
    pub threads: f64,
    /// Core clock in Hz.
    pub hz: f64,
    /// FP32 FLOP per cycle per core (SIMD lanes × FMA pipes × 2).
    pub fp32_flops_per_cycle: f64,
    /// DRAM bytes per second one core can pull on its own.
    pub bandwidth_per_core: f64,
    /// What `optimizer calibrate` measured on this CPU at these threads; replaces the figures above.
    pub measured: Option<MeasuredCpu>,
}

/// A calibrated CPU at one thread count, as the kernel rates use it (see [`measured_cpu`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeasuredCpu {
    /// Bytes per second the threads' decode pulls: the measured read bandwidth (interpolated between thread
    /// counts) times the share of it llama.cpp's decode reached on the reference machine.
    pub read_bytes_per_s: f64,
    /// This CPU's FP32 FMA rate per thread over the reference machine's ([`REFERENCE`]); `None` when not
    /// measured or measured with other instructions than the reference's.
    pub fma_ratio: Option<f64>,
    /// The same ratio for each quantized dot product, in the order of [`Reference::dot_per_thread`] (`None`:
    /// not measured).
    pub dot_ratio: [Option<f64>; 3],
}

/// The machine the ggml-cpu kernel constants below were fitted on, as `optimizer calibrate` measured it
/// (tests/fixtures/calibrate/epyc-milan-2vcpu.json, one thread, `isa` = the kernels' instruction set) and as the
/// analytic model saw it at fitting time (the inventory's 2445 MHz × the class profile's 32 FP32 FLOP per cycle,
/// the rule table's 0.66 prefill efficiency). A calibrated CPU runs the fitted constants scaled by what it measured
/// over what this machine measured, so on the reference machine itself the calibrated and fitted models agree.
pub struct Reference {
    pub isa: &'static str,
    pub fma_flops_per_thread: f64,
    /// GEMV weights/s of one thread by ggml type name.
    pub dot_per_thread: [(&'static str, f64); 3],
    /// Read bandwidth `calibrate` measured at 1 and 2 threads.
    pub read_bytes_per_s: [(u32, f64); 2],
    /// Core FP32 FLOP/s the constants were fitted against (clock × FLOP per cycle).
    pub core_flops: f64,
    /// The prefill efficiency the constants were fitted with.
    pub prefill_efficiency: f64,
    /// The bandwidth the decode constants were fitted with: per core (the class profile's), and the socket's
    /// peak times the rule table's CPU decode efficiency.
    pub bandwidth_per_core: f64,
    pub socket_bandwidth: f64,
    pub decode_efficiency: f64,
}

impl Reference {
    /// The share of `calibrate`'s streaming read bandwidth that llama.cpp's decode reached on the reference
    /// machine at `threads` threads (what the fit's bandwidth was, over what was read there), interpolated
    /// between the measured thread counts and held outside them: a decode pulls weights while it computes, so
    /// it reaches less than a pure stream.
    fn decode_bandwidth_share(&self, threads: f64) -> f64 {
        let points = self.read_bytes_per_s.map(|(t, read)| {
            let fitted = (f64::from(t) * self.bandwidth_per_core)
                .min(self.socket_bandwidth * self.decode_efficiency);
            (t, fitted / read)
        });
        crate::evidence::interpolate(&points, threads, false).unwrap_or(1.0)
    }
}

pub const REFERENCE: Reference = Reference {
    isa: "avx2+fma+f16c",
    fma_flops_per_thread: REF_FMA,
    dot_per_thread: [
        ("q4_0", REF_DOT_Q4_0),
        ("q8_0", REF_DOT_Q8_0),
        ("q4_k", REF_DOT_Q4_K),
    ],
    read_bytes_per_s: [(1, REF_READ_1), (2, REF_READ_2)],
    core_flops: 2.445e9 * 32.0,
    prefill_efficiency: 0.66,
    bandwidth_per_core: DEFAULT_BANDWIDTH_PER_CORE,
    socket_bandwidth: 51.2e9,
    decode_efficiency: 0.68,
};
// `optimizer calibrate` on the reference machine, one thread (tests/fixtures/calibrate/epyc-milan-2vcpu.json;
// the test `reference_constants_are_the_committed_calibration` derives them), rounded to 3 digits.
const REF_READ_1: f64 = 1.293e10;
const REF_READ_2: f64 = 2.101e10;
const REF_FMA: f64 = 1.025e11;
const REF_DOT_Q4_0: f64 = 1.686e10;
const REF_DOT_Q8_0: f64 = 2.287e10;
const REF_DOT_Q4_K: f64 = 3.066e10;

/// The calibrated CPU at `threads` threads: the measured read bandwidth, and the FMA and dot-product rates per
/// thread over the reference's when they were measured with the reference's instruction set (other instructions
/// make a ratio meaningless: the kernels then stay analytic).
pub(crate) fn measured_cpu(
    c: &crate::evidence::CpuCalibration,
    threads: f64,
) -> Option<MeasuredCpu> {
    let read = c.read_at(threads)? * REFERENCE.decode_bandwidth_share(threads);
    let comparable = c.isa.as_deref() == Some(REFERENCE.isa);
    Some(MeasuredCpu {
        read_bytes_per_s: read,
        fma_ratio: comparable
            .then(|| c.fma_per_thread_at(threads))
            .flatten()
            .map(|f| f / REFERENCE.fma_flops_per_thread),
        dot_ratio: REFERENCE.dot_per_thread.map(|(t, r)| {
            comparable
                .then(|| c.dot_per_thread_at(t, threads))
                .flatten()
                .map(|v| v / r)
        }),
    })
}

/// Clock assumed when the inventory has none (the planner's default too).
const DEFAULT_CPU_GHZ: f64 = 2.0;
/// FP32 FLOP per cycle per core when the CPU profile has none: one 256-bit FMA pipe (2 × 8 lanes), the
/// narrowest x86-64 core with AVX2.
pub(crate) const DEFAULT_FP32_FLOPS_PER_CYCLE: f64 = 16.0;
/// Per-core DRAM bandwidth when the CPU profile has none, bytes/s: the most one thread pulled in the llama-bench
/// table of an AMD EPYC (Zen 3) KVM guest (tests/fixtures/llama-bench/cpu-epyc-milan-2vcpu.json: Llama-3.2-1B
/// Q8_0 tg128 at -t 1 reads 1.313e9 B per token at 7.14 tok/s). A lower bound: every one-thread decode there was
/// bound by the dot-product rate, not by bandwidth, so the true figure is at least this.
const DEFAULT_BANDWIDTH_PER_CORE: f64 = 9.38e9;

/// A core's clock in GHz (the inventory's, else [`DEFAULT_CPU_GHZ`]) and FP32 FLOP per cycle (the class
/// profile's, else [`DEFAULT_FP32_FLOPS_PER_CYCLE`]): the analytic FMA peak a calibration is compared with.
pub(crate) fn nominal_core(profile: Option<&HardwareProfile>, inv: &Inventory) -> (f64, f64) {
    let fpc = profile
        .and_then(|p| p.cpu.as_ref())
        .and_then(|c| c.fp32_flops_per_cycle_per_core)
        .unwrap_or(DEFAULT_FP32_FLOPS_PER_CYCLE);
    let ghz = inv
        .cpu
        .frequency_mhz
        .map_or(DEFAULT_CPU_GHZ, |m| m as f64 / 1000.0);
    (ghz, fpc)
}

/// The host's speed figures exactly as the planner uses them: the class profile's socket bandwidth and FP32
/// FLOP per cycle, the inventory's clock, `threads` threads, and the rule tables' decode and prefill
/// efficiencies.
pub fn cpu_device(
    profile: Option<&HardwareProfile>,
    inv: &Inventory,
    threads: u32,
    decode_efficiency: f64,
    prefill_efficiency: f64,
    calibration: Option<&crate::evidence::CpuCalibration>,
) -> DevicePerf {
    let spec = profile.and_then(|p| p.cpu.as_ref());
    let (ghz, fpc) = nominal_core(profile, inv);
    let per_core = spec
        .and_then(|c| c.bandwidth_per_core_gb_s)
        .map_or(DEFAULT_BANDWIDTH_PER_CORE, |g| g * 1e9);
    let socket = profile.map_or(0.0, |p| p.memory.bandwidth_gb_s * 1e9);
    let threads = f64::from(threads.max(1));
    DevicePerf {
        name: "cpu".into(),
        // Without a class profile the socket is taken to be as fast as its cores together.
        bandwidth_bytes_per_s: if socket > 0.0 {
            socket
        } else {
            threads * per_core
        },
        flops: (threads * ghz * 1e9 * fpc).max(1.0),
        decode_efficiency,
        prefill_efficiency,
        offload: None,
        gpu: None,
        cpu: Some(CpuRates {
            threads,
            hz: ghz * 1e9,
            fp32_flops_per_cycle: fpc,
            bandwidth_per_core: per_core,
            measured: calibration.and_then(|c| measured_cpu(c, threads)),
        }),
    }
}

/// Matmul work of one weight type on one device.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TypeLoad {
    pub dtype: Dtype,
    /// The output projection: a prompt multiplies it for its last token only (one output per sequence).
    pub output: bool,
    /// Bytes one token reads (routed experts at the share a token uses).
    pub bytes: f64,
    /// Parameters one token multiplies (0 for element-wise weights: norms, biases).
    pub params: f64,
}

/// What one device holds of the model.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceLoad {
    /// Weight bytes one token reads on this device (routed experts counted at the share a token uses).
    pub weight_bytes_per_token: f64,
    /// Weight bytes a prefill micro-batch reads: every weight the device holds (all experts get routed to).
    pub weight_bytes_resident: f64,
    /// KV bytes per attended cell, over this device's layers.
    pub kv_bytes_per_cell: f64,
    /// Parameters one token multiplies on this device (routed experts at the share a token uses).
    pub active_params: f64,
    /// Of `active_params`, the output projection's: prefill multiplies it once per sequence, not per token.
    pub output_params: f64,
    /// Attention FLOPs per (query, key) pair on this device: 4 × heads × head size over its layers.
    pub attn_flops_per_pair: f64,
    /// Transformer blocks this device computes (the per-token floor scales with them).
    pub layers: f64,
    /// The host computes the graph's fixed part (input, sampling, scheduling) whatever it holds.
    pub host: bool,
    /// `weight_bytes_per_token` and `active_params` by weight type.
    pub by_type: Vec<TypeLoad>,
}

impl DeviceLoad {
    /// Charges one weight to the device: `bytes` and `params` per token, `resident` bytes held.
    pub(crate) fn add(
        &mut self,
        dtype: Dtype,
        output: bool,
        bytes: f64,
        params: f64,
        resident: f64,
    ) {
        self.weight_bytes_per_token += bytes;
        self.weight_bytes_resident += resident;
        self.active_params += params;
        if output {
            self.output_params += params;
        }
        match self
            .by_type
            .iter_mut()
            .find(|t| t.dtype == dtype && t.output == output)
        {
            Some(t) => {
                t.bytes += bytes;
                t.params += params;
            }
            None => self.by_type.push(TypeLoad {
                dtype,
                output,
                bytes,
                params,
            }),
        }
    }
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

// ---- ggml-cpu kernel rates, fitted on tests/fixtures/llama-bench/cpu-epyc-milan-2vcpu.json (re-measured on
// 2026-11-23 together with the reference calibration, tests/fixtures/calibrate/epyc-milan-2vcpu.json; training
// rows: the tiny models, Llama-3.2-1B Q8_0 and Q4_0, Llama-3-8B Q4_K_M, so both ends of the size range are fitted;
// held out: Gemma-2-2B Q4_K_M, Qwen2-7B Q4_0, Llama-3.2-1B Q4_K_M; benches/llama-bench/fit.py). FP32
// FLOP-per-cycle units let them scale to wider SIMD. Q8_0's decode rate is loosely bound by the table: its decode
// is bandwidth-bound at every measured thread count. ----

/// Decode: parameters one core multiplies per FP32 FLOP of its peak, by weight type (ggml's `vec_dot` of
/// the weight type with the Q8 activations). Q6_K, Q5_K and F16 are not separable in the table (they only
/// occur beside Q4_K); they take Q4_K's rate scaled by their prefill ratios from the public Zen 4 figures
/// cited at [`PREFILL_TYPE_EFFICIENCY`].
fn decode_params_per_flop(t: Dtype) -> f64 {
    match t {
        Dtype::Ggml(GgmlType::Q4_0) => DECODE_Q4_0,
        Dtype::Ggml(GgmlType::Q8_0) => DECODE_Q8_0,
        Dtype::Ggml(GgmlType::Q4_K) => DECODE_Q4_K,
        Dtype::Ggml(GgmlType::Q5_K) => DECODE_Q4_K * Q5_K_VS_Q4_K,
        Dtype::Ggml(GgmlType::Q6_K) => DECODE_Q4_K * Q6_K_VS_Q4_K,
        _ => DECODE_Q4_K * OTHER_VS_Q4_K,
    }
}

/// Prefill: the share of the FP32 FMA peak (after the rule table's prefill efficiency) each weight type's
/// matmul reaches, relative to the rule's median type.
fn prefill_type_efficiency(t: Dtype) -> f64 {
    match t {
        Dtype::Ggml(GgmlType::Q4_0) => PREFILL_Q4_0,
        Dtype::Ggml(GgmlType::Q8_0) => PREFILL_Q8_0,
        Dtype::Ggml(GgmlType::Q4_K) => PREFILL_Q4_K,
        Dtype::Ggml(GgmlType::Q5_K) => PREFILL_Q4_K * Q5_K_VS_Q4_K,
        Dtype::Ggml(GgmlType::Q6_K) => PREFILL_Q4_K * Q6_K_VS_Q4_K,
        _ => PREFILL_Q4_K * OTHER_VS_Q4_K,
    }
}

/// Fitted (see above): `python3 benches/llama-bench/fit.py`, rounded to 3 digits.
const DECODE_Q4_0: f64 = 0.175;
const DECODE_Q8_0: f64 = 0.265;
const DECODE_Q4_K: f64 = 0.174;
const PREFILL_Q4_0: f64 = 1.48;
const PREFILL_Q8_0: f64 = 1.26;
const PREFILL_Q4_K: f64 = 1.60;
/// Attention (flash-attention kernels on F16 KV) runs at this share of the prefill FLOP rate (fitted: the tiny
/// models' prefill is mostly attention).
const ATTENTION_EFFICIENCY: f64 = 0.310;
/// Ratios to Q4_K from public llama-bench pp512 of LLaMA-3.1-8B on a Ryzen 9 7950X, 16 threads, mainline build
/// 4384 (ikawrakow/ik_llama.cpp discussion #164, 2024-12-24): Q4_K_S 108.40, Q5_K_S 75.52, Q6_K 82.56, BF16
/// 78.58 t/s. Q5_K 75.52 / 108.40 = 0.70, Q6_K 82.56 / 108.40 = 0.76; other types (F16, BF16, F32 and the
/// rest) the slowest of these, BF16's 78.58 / 108.40 = 0.72, rounded down to Q5_K's 0.70.
const Q5_K_VS_Q4_K: f64 = 0.70;
const Q6_K_VS_Q4_K: f64 = 0.76;
const OTHER_VS_Q4_K: f64 = 0.70;
/// Per-token floor, seconds: fixed, per block, and per block with more than one thread (the barriers after ops).
/// Fitted with the two tiny models (2 and 16 blocks of width 256), whose decode is mostly overhead, and the rest.
/// The barrier term was measured at two threads only; it is charged once for any thread count above one (a
/// barrier waits for the slowest thread, not for each thread in turn), since a linear growth fitted on two points
/// would charge a 64-thread server 60 ms a token of pure waiting.
const FLOOR_FIXED_S: f64 = 11.3e-6;
const FLOOR_PER_LAYER_S: f64 = 16.0e-6;
const FLOOR_SYNC_PER_LAYER_S: f64 = 4.88e-6;

/// Bytes per second the chosen threads of a CPU pull: threads × per-core bandwidth, at most the socket's
/// achievable peak.
fn cpu_bandwidth(p: &DevicePerf, c: &CpuRates) -> f64 {
    match &c.measured {
        Some(m) => m.read_bytes_per_s,
        None => {
            (c.threads * c.bandwidth_per_core).min(p.bandwidth_bytes_per_s * p.decode_efficiency)
        }
    }
}

/// The per-core FP32 FLOP/s the decode rate of weight type `t` is scaled from: the reference's times the
/// measured ratio of that type's dot product (Q4_K's for the types not measured, the FMA's without any), or the
/// analytic clock × FLOP per cycle.
fn decode_core_flops(c: &CpuRates, t: Dtype) -> f64 {
    let analytic = c.hz * c.fp32_flops_per_cycle;
    let Some(m) = &c.measured else {
        return analytic;
    };
    let name = match t {
        Dtype::Ggml(GgmlType::Q4_0) => "q4_0",
        Dtype::Ggml(GgmlType::Q8_0) => "q8_0",
        _ => "q4_k",
    };
    let ratio = |n: &str| {
        REFERENCE
            .dot_per_thread
            .iter()
            .zip(m.dot_ratio)
            .find(|((k, _), _)| *k == n)
            .and_then(|(_, r)| r)
    };
    ratio(name)
        .or_else(|| ratio("q4_k"))
        .or(m.fma_ratio)
        .map_or(analytic, |r| REFERENCE.core_flops * r)
}

/// FP32 FLOP/s the chosen threads reach in prefill matmuls (before the per-type share): the reference's
/// core rate and prefill efficiency times the measured FMA ratio, or the analytic peak × the rule efficiency.
fn prefill_peak(p: &DevicePerf, c: &CpuRates) -> f64 {
    match c.measured.as_ref().and_then(|m| m.fma_ratio) {
        Some(r) => c.threads * REFERENCE.core_flops * REFERENCE.prefill_efficiency * r,
        None => c.threads * c.hz * c.fp32_flops_per_cycle * p.prefill_efficiency,
    }
}

/// Seconds of per-token overhead on one device.
fn floor(p: &DevicePerf, l: &DeviceLoad) -> f64 {
    let Some(c) = &p.cpu else {
        return 0.0;
    };
    let fixed = if l.host { FLOOR_FIXED_S } else { 0.0 };
    let sync = if c.threads > 1.0 {
        FLOOR_SYNC_PER_LAYER_S
    } else {
        0.0
    };
    fixed + l.layers * (FLOOR_PER_LAYER_S + sync)
}

/// Seconds for one decode step of `n` sequences with `ctx` cells attended each.
fn decode_step(devices: &[(DevicePerf, DeviceLoad)], n: f64, ctx: f64) -> f64 {
    devices
        .iter()
        .map(|(p, l)| match &p.cpu {
            Some(c) => {
                let bw = cpu_bandwidth(p, c);
                let weights: f64 = l
                    .by_type
                    .iter()
                    .map(|t| {
                        let rate = c.threads
                            * decode_core_flops(c, t.dtype)
                            * decode_params_per_flop(t.dtype);
                        (t.bytes / bw).max(n * t.params / rate)
                    })
                    .sum();
                let kv = n * l.kv_bytes_per_cell * ctx / bw;
                let attn =
                    n * l.attn_flops_per_pair * ctx / (prefill_peak(p, c) * ATTENTION_EFFICIENCY);
                weights + kv + attn + floor(p, l)
            }
            None => {
                let kv = n * l.kv_bytes_per_cell * ctx;
                let flops = n * (2.0 * l.active_params + l.attn_flops_per_pair * ctx);
                let compute = flops / (p.flops * p.prefill_efficiency);
                match p.gpu.filter(|k| k.decode) {
                    Some(k) => {
                        gpu::decode_read(&k, p, l, kv).max(compute) + gpu::decode_overhead(&k, l)
                    }
                    None => {
                        let bytes = l.weight_bytes_per_token + kv;
                        (bytes / (p.bandwidth_bytes_per_s * p.decode_efficiency)).max(compute)
                    }
                }
            }
        })
        .sum()
}

/// Seconds to prefill `tokens` (causal attention: each token attends to the ones before it).
fn prefill(devices: &[(DevicePerf, DeviceLoad)], tokens: f64, ubatch: f64) -> f64 {
    devices
        .iter()
        .map(|(p, l)| {
            // The output projection runs for the last token of the prompt only.
            let flops = 2.0 * (l.active_params - l.output_params) * tokens
                + 2.0 * l.output_params
                + l.attn_flops_per_pair * tokens * tokens / 2.0;
            let reads = (tokens / ubatch).ceil().max(1.0);
            let local = match &p.cpu {
                Some(c) => {
                    let peak = prefill_peak(p, c);
                    let matmul: f64 = l
                        .by_type
                        .iter()
                        .map(|t| {
                            let rows = if t.output { 1.0 } else { tokens };
                            2.0 * t.params * rows / (peak * prefill_type_efficiency(t.dtype))
                        })
                        .sum();
                    let attn = l.attn_flops_per_pair * tokens * tokens
                        / 2.0
                        / (peak * ATTENTION_EFFICIENCY);
                    let mem = reads * l.weight_bytes_resident / cpu_bandwidth(p, c);
                    (matmul + attn).max(mem) + reads * floor(p, l)
                }
                None => {
                    let compute = match p.gpu.filter(|k| k.prefill) {
                        Some(k) => gpu::prefill_compute(&k, l, tokens),
                        None => flops / (p.flops * p.prefill_efficiency),
                    };
                    let mem = reads * l.weight_bytes_resident
                        / (p.bandwidth_bytes_per_s * p.decode_efficiency);
                    compute.max(mem)
                }
            };
            match p.offload {
                Some(o) if ubatch.min(tokens) >= OFFLOAD_MIN_BATCH => {
                    // Every micro-batch copies the host's weights to the GPU and multiplies there.
                    let copy = reads * l.weight_bytes_resident / o.link_bytes_per_s;
                    let compute = match o.kernels {
                        Some(k) => gpu::prefill_compute(&k, l, tokens),
                        None => flops / o.flops,
                    };
                    local.min(copy.max(compute))
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

/// Share of the compute-bound throughput at which a CPU's batch curve counts as flat: a per-token floor keeps
/// the curve rising slowly past the roofline knee (each step pays it once for all its sequences), so the knee is
/// where the floor costs less than 1 % of the step, the planner's own tie margin.
const KNEE_SHARE: f64 = 0.99;

/// Concurrency past which a decode step turns compute-bound on one device: the knee of the batch curve, from
/// its FLOPs-to-bandwidth ratio (tokens per byte it can compute while reading one byte). On a CPU, also at
/// least where the per-token floor falls below `1 - KNEE_SHARE` of the step.
pub(crate) fn decode_knee(p: &DevicePerf, l: &DeviceLoad) -> f64 {
    let fixed = floor(p, l) * KNEE_SHARE / (1.0 - KNEE_SHARE);
    let (bytes_time, flops_per_seq) = match &p.cpu {
        Some(c) => {
            let bw = cpu_bandwidth(p, c);
            let compute: f64 = l
                .by_type
                .iter()
                .map(|t| {
                    t.params
                        / (c.threads
                            * decode_core_flops(c, t.dtype)
                            * decode_params_per_flop(t.dtype))
                })
                .sum();
            ((l.weight_bytes_per_token / bw).max(fixed), compute)
        }
        None => (
            l.weight_bytes_per_token / (p.bandwidth_bytes_per_s * p.decode_efficiency),
            2.0 * l.active_params / (p.flops * p.prefill_efficiency),
        ),
    };
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
            cpu: None,
            gpu: None,
        }
    }

    fn load() -> DeviceLoad {
        DeviceLoad {
            weight_bytes_per_token: 4e9,
            kv_bytes_per_cell: 131_072.0,
            active_params: 8e9,
            attn_flops_per_pair: 4.0 * 32.0 * 128.0 * 32.0,
            ..DeviceLoad::default()
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
            ..DeviceLoad::default()
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
