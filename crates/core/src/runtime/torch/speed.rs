//! The torch runtime's speed model: FLOPs per trained token, the GPUs' peak for the precision, the
//! communication of each memory strategy per optimizer step, and the step time that follows.

use crate::emit::TrainingPerformance;
use crate::fleet::{FleetGpu, PCIE3_X16_BYTES_PER_S};
use crate::perf::collective;
use optimizer_memory::torch::{self as mem, Inventory, Method, Offload, Precision, Zero};

use super::{Point, Torch};

/// Host memory traffic of one CPU Adam update per parameter (see `comm_seconds`).
const HOST_ADAM_BYTES_PER_PARAM: f64 = 30.0;

impl Torch<'_> {
    /// The GPU's peak for this precision: BF16/FP16 tensor cores with FP32 accumulation (PyTorch's matmuls), the
    /// FP32 vector rate for FP32; the fleet's peak where the profile says nothing.
    pub(super) fn peak_flops(&self, g: &FleetGpu) -> f64 {
        let prof = self.req.profiles.hardware(&g.profile).map(|e| &e.value);
        let tensor = prof.and_then(|p| p.tensor_tflops.as_ref());
        let vector = prof.and_then(|p| p.vector_tflops.as_ref());
        let tf = match self.precision {
            Precision::Bf16 => tensor.and_then(|t| t.bf16_fp32acc.or(t.fp16_fp32acc)),
            Precision::Fp16 => tensor
                .and_then(|t| t.fp16_fp32acc)
                .or_else(|| vector.and_then(|v| v.fp16)),
            Precision::Fp32 => vector.and_then(|v| v.fp32),
        };
        tf.map_or(g.flops, |t| t * 1e12)
    }

    /// The link gradients travel over: the first GPU's (the one with the most free memory) stands for all.
    pub(super) fn link(&self) -> collective::Link {
        self.gpus[0].peer_link()
    }

    fn flops_per_token(&self, p: &Point) -> f64 {
        let adapters = if p.method == Method::Full {
            0
        } else {
            let (r, t) = self.lora_of(p.method);
            mem::lora_params(&self.inv, r, &t)
        };
        flops_per_token(
            &self.inv,
            p.method,
            if p.checkpointing { 1.0 } else { 0.0 },
            self.sequence,
            adapters,
        )
    }

    /// Seconds of communication per optimizer step, by strategy (ring collectives over the link; no overlap
    /// with compute is assumed): plain data parallelism all-reduces the trained gradients once per step
    /// (accumulation runs without synchronisation); ZeRO-2 reduce-scatters 16-bit gradients every micro-step
    /// and all-gathers the updated 16-bit parameters once; ZeRO-3 all-gathers the parameters in every
    /// micro-step's forward and backward and reduce-scatters the gradients (the ZeRO paper's 1.5x of data
    /// parallelism's volume, Rajbhandari et al. 2020 §7). Offload adds the gradients' trip to the host and the
    /// parameters' return over PCIe.
    fn comm_seconds(&self, p: &Point, accumulation: u64) -> f64 {
        let n = self.processes() as u32;
        let trained = mem::trained_params(&self.inv, &self.params(p, 1)) as f64;
        let total = self.inv.total as f64;
        let link = self.link();
        let half = |ranks: u32| {
            if ranks <= 1 {
                0.0
            } else {
                f64::from(ranks - 1) / f64::from(ranks)
            }
        };
        let pass = |bytes: f64| {
            if n <= 1 || bytes <= 0.0 {
                0.0
            } else {
                link.latency_s + half(n) * bytes / link.bytes_per_s
            }
        };
        let acc = accumulation as f64;
        let mut t = match (p.method, p.zero) {
            (_, Zero::Off) => {
                // FP32 gradients (the Trainer's FP32 weights; PEFT's FP32 adapters).
                2.0 * pass(4.0 * trained)
            }
            (_, Zero::Stage2) => acc * pass(2.0 * trained) + pass(2.0 * trained),
            (_, Zero::Stage3) => acc * (2.0 * pass(2.0 * total) + pass(2.0 * trained)),
        };
        if p.offload != Offload::None {
            // DeepSpeed's CPU Adam reads and writes the FP32 master weights and both moments (24 bytes) and reads
            // the FP32 gradient and writes the 16-bit parameter (6 bytes) per parameter: bound by host memory
            // bandwidth (the host class's profile), all processes sharing it.
            if let Some(bw) = self
                .req
                .fleet
                .host
                .class
                .as_ref()
                .map(|c| c.memory.bandwidth_gb_s * 1e9)
                .filter(|b| b.is_finite() && *b > 0.0)
            {
                t += HOST_ADAM_BYTES_PER_PARAM * trained / bw;
            }
            let pcie = self.gpus[0]
                .link_bytes_per_s
                .unwrap_or(PCIE3_X16_BYTES_PER_S);
            // Each process moves its partition's gradients down and its parameters up (2 bytes each way).
            t += 4.0 * trained / f64::from(n.max(1)) / pcie;
            if p.offload == Offload::OptimizerAndParams {
                // Parameters stream from the host in every micro-step's forward and backward.
                t += acc * 2.0 * 2.0 * total / f64::from(n.max(1)) / pcie;
            }
        }
        t
    }

    pub(super) fn step(&self, p: &Point, micro: u64) -> TrainingPerformance {
        let g = self.gpus[self.gpus.len() - 1];
        let eff = g.prefill.as_ref().map_or(1.0, |e| e.value);
        let peak = self.peak_flops(g);
        let tokens = micro as f64 * f64::from(self.sequence);
        let fpt = self.flops_per_token(p);
        let accumulation = self.share() / micro.max(1);
        let micro_s = fpt * tokens / (peak * eff).max(f64::MIN_POSITIVE);
        let comm = self.comm_seconds(p, accumulation);
        let step = accumulation as f64 * micro_s + comm;
        let sequences = (accumulation * micro) as f64 * self.processes() as f64;
        TrainingPerformance {
            tokens_per_s: crate::emit::round3(sequences * f64::from(self.sequence) / step),
            samples_per_s: crate::emit::round3(sequences / step),
            step_time_ms: crate::emit::round3(step * 1e3),
            communication_ms: crate::emit::round3(comm * 1e3),
            flops_per_token: fpt.round(),
            efficiency: eff,
        }
    }
}

/// FLOPs per trained token: forward `2 ×` the matmul parameters plus causal attention (`2 × layers × seq ×
/// heads × head_dim`: QKᵀ and AV over half the positions on average); the backward pass computes input
/// gradients (one forward's worth) and, for trained weights, weight gradients (another); checkpointing runs the
/// forward of the `recomputed` share of the layers again (1: every layer, Hugging Face's; torchtitan's
/// "selective layer" checkpointing recomputes every second layer, 0.5). LoRA's adapters add `6 ×` their
/// parameters.
pub fn flops_per_token(
    inv: &Inventory,
    method: Method,
    recomputed: f64,
    sequence: u32,
    adapter_params: u64,
) -> f64 {
    let s = &inv.shape;
    let attn = 2.0 * inv.layers as f64 * f64::from(sequence) * (s.heads * s.head_dim) as f64;
    let fwd = 2.0 * mem::matmul_params(inv) as f64 + attn;
    // The LM head is not in a checkpointed layer: it is never recomputed.
    let head = 2.0 * (inv.vocab * s.hidden) as f64;
    let passes = match method {
        Method::Full => 3.0,
        Method::Lora | Method::LoraInt8 | Method::Qlora => 2.0,
    };
    passes * fwd + recomputed * (fwd - head) + 6.0 * adapter_params as f64
}
