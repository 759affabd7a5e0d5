//! PyTorch training and fine-tuning behind the runtime seam: full training, LoRA and QLoRA of a safetensors
//! checkpoint with Hugging Face's `Trainer` (PEFT, bitsandbytes, DeepSpeed ZeRO) on NVIDIA GPUs. Its candidate
//! space is the memory strategy (plain data parallelism, ZeRO-2, ZeRO-3, CPU offload) × gradient checkpointing,
//! with the micro-batch as the size knob; its memory model is [`optimizer_memory::torch`]; its topology is one
//! data-parallel process per GPU; its artifacts ([`launch`]) are the `accelerate launch` command with the
//! `TrainingArguments`, `LoraConfig`, `BitsAndBytesConfig`, accelerate and DeepSpeed files it reads.
//!
//! Trade-offs:
//! - Every GPU of the node trains (data parallel): more GPUs never slow a step's compute, and the gradient
//!   exchange is priced over the GPUs' link. Each memory strategy (replicas, ZeRO-2, ZeRO-3, ZeRO-3 with the
//!   optimizer offloaded, with parameters offloaded too; on one GPU: plain, ZeRO-2 offload, ZeRO-3 offload) ×
//!   gradient checkpointing is its own one-point ladder, fitted and scored: at most ten points, and host
//!   memory is not monotone along the strategies (DeepSpeed's ZeRO-2 estimate loads an FP32 copy per process on
//!   the host, ZeRO-3's only the largest module), so no bisection over them. ZeRO stage 1 is left out: DeepSpeed
//!   runs stages 1 and 2 with one optimizer (stage_1_and_2.py) and one estimate, and stage 2 moves no more data.
//! - Without gradient checkpointing a step computes a forward pass less, so checkpointing is taken only when
//!   nothing fits without it or when it wins on speed (larger micro-batches under ZeRO-3 gather the parameters
//!   fewer times per token).
//! - The micro-batch is the largest divisor of the per-GPU share of the global batch that fits (bisection on
//!   the memory model), so gradient accumulation reaches the preset's global batch exactly.
//! - The method is the preset's (a fine-tune preset with a LoRA rank is LoRA; with `base_quantization: nf4`
//!   QLoRA, with `int8` LoRA over an 8-bit base; a training preset is full): a method change changes what is
//!   trained, so it is a suggestion when nothing fits, never a silent switch. A fine-tune preset that names no
//!   method leaves it open: the first of full, LoRA, 8-bit LoRA and QLoRA that fits is planned (quantization
//!   only when the model would not fit otherwise; bitsandbytes' dequantization cost is not in the speed model).

pub mod launch;

use super::{Candidate, Described, Eval, PlanError, Request, Runtime, RuntimeId, Size};
use crate::emit::{
    MemoryComponents, MemoryDevice, Provenance, Settings, Source, Stage, Topology, TorchSettings,
    TrainingPerformance,
};
use crate::fleet::{FleetGpu, PCIE3_X16_BYTES_PER_S};
use crate::perf::collective;
use crate::profile::{Mode, Objective, ReserveTarget, TrainOptimizer, WorkloadProfile};
use optimizer_memory::torch::{
    self as mem, Breakdown, Inventory, Method, Offload, Optimizer, Precision, Zero,
    activation::AttentionMemory,
};
use optimizer_model::Format;

use std::collections::BTreeMap;

/// PEFT's default LoRA targets for the Llama family (peft/utils/constants.py
/// `TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING["llama"] = ["q_proj", "v_proj"]`).
pub const PEFT_DEFAULT_TARGETS: &[&str] = &["q_proj", "v_proj"];
/// PEFT LoraConfig's default rank (`r: int = 8`).
pub const PEFT_DEFAULT_RANK: u64 = 8;
/// QLoRA's targets: every linear layer of the blocks (Dettmers et al. 2023, §4: "LoRA on all linear transformer
/// block layers are required to match full finetuning performance"; Unsloth's notebooks list the same seven).
pub const ALL_LINEAR_TARGETS: &[&str] = &[
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
];

/// The longest sequence a plan takes: positions are int64 in PyTorch, but the attention kernels index tokens with
/// int32 (FlashAttention's `seqlen` arguments), and no checkpoint trains beyond 2^31 tokens.
pub const MAX_SEQUENCE: u32 = i32::MAX as u32;

/// Most sequences in one optimizer step a plan takes: 2^24 (Llama 2's 4M-token batches are 1024 sequences;
/// this bounds the bisection and the accumulation arithmetic, not any real recipe).
pub const MAX_GLOBAL_BATCH: u64 = 1 << 24;

/// Host memory traffic of one CPU Adam update per parameter (see `comm_seconds`).
const HOST_ADAM_BYTES_PER_PARAM: f64 = 30.0;

/// One point of the candidate space (the micro-batch apart).
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub method: Method,
    pub zero: Zero,
    pub offload: Offload,
    pub checkpointing: bool,
}

/// Torch planning one request.
pub struct Torch<'a> {
    req: &'a Request<'a>,
    /// CUDA GPUs, most free memory first; every one trains.
    gpus: Vec<&'a FleetGpu>,
    inv: Inventory,
    /// The preset's method (the preferred one when several are open).
    method: Method,
    /// The methods the plan may choose among.
    methods: Vec<Method>,
    method_why: String,
    precision: Precision,
    precision_why: String,
    tf32: bool,
    attention_kernel: String,
    attention: AttentionMemory,
    attention_why: String,
    optimizer: Optimizer,
    lora_rank: u64,
    lora_targets: Vec<String>,
    sequence: u32,
    /// Sequences per optimizer step over all GPUs, and where that number comes from.
    global_batch: u64,
    global_why: String,
    /// The CUDA context per GPU, and its rule.
    overhead: (u64, Option<String>),
    warnings: Vec<String>,
}

/// Sequences per optimizer step the preset asks for: `global_batch`, else its micro-batch (one GPU, no
/// accumulation).
fn global_batch(w: &WorkloadProfile) -> Result<(u64, String), PlanError> {
    let t = w
        .training
        .as_ref()
        .ok_or_else(|| PlanError::Profile(format!("workload {}: no training section", w.id)))?;
    let (g, why) = match t.global_batch {
        Some(g) => (
            g,
            format!(
                "workload {}: global batch of {g} sequences per optimizer step",
                w.id
            ),
        ),
        None => (
            t.micro_batch,
            format!(
                "workload {}: no global batch given, so its micro-batch of {} sequences is the step",
                w.id, t.micro_batch
            ),
        ),
    };
    if !(1..=MAX_GLOBAL_BATCH).contains(&g) {
        return Err(PlanError::Usage(format!(
            "workload {}: a global batch of {g} sequences is outside 1..={MAX_GLOBAL_BATCH}",
            w.id
        )));
    }
    Ok((g, why))
}

impl<'a> Torch<'a> {
    /// Torch for this request, or why it cannot plan it.
    pub fn new(req: &'a Request<'a>) -> Result<Torch<'a>, PlanError> {
        let (model, w, fleet) = (req.model, req.workload, req.fleet);
        if !matches!(w.mode, Mode::Training | Mode::FineTune) {
            return Err(PlanError::UnsupportedFormat(format!(
                "workload {} is an {} workload: the torch runtime plans training and fine-tuning; serve with llama.cpp (GGUF) or vLLM (safetensors)",
                w.id,
                if w.mode == Mode::Embedding {
                    "embedding"
                } else {
                    "inference"
                }
            )));
        }
        let t = w.training.as_ref().ok_or_else(|| {
            PlanError::Profile(format!(
                "workload {}: a training workload without a training section",
                w.id
            ))
        })?;
        if model.format != Format::Safetensors {
            return Err(PlanError::UnsupportedFormat(
                "a GGUF file: training plans need the safetensors checkpoint (Hugging Face format) the GGUF was converted from; GGUF holds inference weights, often already quantized".into(),
            ));
        }
        let inv = mem::inventory(model).map_err(PlanError::UnsupportedFormat)?;
        let (gpus, warnings) = super::cuda_gpus(
            fleet,
            "training plans",
            "training plans need NVIDIA GPUs and this hardware has none: plan for profiled GPUs (--hardware a100-80gb-sxm, --hardware 8x:a100-80gb-sxm)",
        )?;
        let cc = gpus.iter().filter_map(|g| g.compute_capability).min();
        // The frozen base's quantization, if the preset names one.
        let quantized = match t.base_quantization.as_deref().map(str::to_ascii_lowercase) {
            None => None,
            Some(q) if q == "nf4" => Some(Method::Qlora),
            Some(q) if q == "int8" => Some(Method::LoraInt8),
            Some(q) => {
                return Err(PlanError::Profile(format!(
                    "workload {}: base_quantization {q:?} is not modelled (nf4 and int8 are)",
                    w.id
                )));
            }
        };
        let (method, methods, method_why) = match (w.mode, t.lora_rank, quantized) {
            (_, _, Some(Method::Qlora)) => (
                Method::Qlora,
                vec![Method::Qlora],
                format!("workload {}: LoRA over an NF4 base (QLoRA)", w.id),
            ),
            (_, _, Some(_)) => (
                Method::LoraInt8,
                vec![Method::LoraInt8],
                format!("workload {}: LoRA over an 8-bit (LLM.int8) base", w.id),
            ),
            (_, Some(_), None) => (
                Method::Lora,
                vec![Method::Lora],
                format!("workload {}: LoRA adapters over a 16-bit frozen base", w.id),
            ),
            (Mode::FineTune, None, None) => (
                Method::Full,
                vec![Method::Full, Method::Lora, Method::LoraInt8, Method::Qlora],
                format!(
                    "workload {} leaves the method open (fine-tune, no LoRA rank, no base quantization): full fine-tuning where it fits, else the fastest that fits of LoRA over a 16-bit, an 8-bit or an NF4 base (PEFT's default rank 8)",
                    w.id
                ),
            ),
            (_, None, None) => (
                Method::Full,
                vec![Method::Full],
                format!("workload {} ({:?}) trains every parameter", w.id, w.mode),
            ),
        };
        let lora_rank = match method {
            Method::Full => 0,
            _ => t.lora_rank.unwrap_or(PEFT_DEFAULT_RANK),
        };
        if method != Method::Full && !(1..=65536).contains(&lora_rank) {
            return Err(PlanError::Usage(format!(
                "workload {}: LoRA rank {lora_rank} is outside 1..=65536",
                w.id
            )));
        }
        let lora_targets: Vec<String> = match method {
            Method::Full => Vec::new(),
            Method::Lora | Method::LoraInt8 => {
                PEFT_DEFAULT_TARGETS.iter().map(|s| s.to_string()).collect()
            }
            Method::Qlora => ALL_LINEAR_TARGETS.iter().map(|s| s.to_string()).collect(),
        };
        if method != Method::Full && !inv.linears.iter().any(|l| lora_targets.contains(&l.proj)) {
            return Err(PlanError::UnsupportedFormat(format!(
                "none of the LoRA target modules ({}) is a linear layer of this checkpoint",
                lora_targets.join(", ")
            )));
        }
        let (precision, tf32, precision_why) = precision(req, cc);
        let (attention_kernel, attention, attention_why) =
            attention(req, cc, t.sequence_length, precision);
        let optimizer = match t.optimizer {
            TrainOptimizer::Adamw => Optimizer::AdamW,
            TrainOptimizer::Adamw8bit => Optimizer::AdamW8bit,
            TrainOptimizer::Sgd => Optimizer::Sgd,
            TrainOptimizer::Adafactor => Optimizer::Adafactor,
        };
        let trained =
            u32::try_from(model.hparams.context_length.unwrap_or(0)).unwrap_or(MAX_SEQUENCE);
        let sequence = match req.overrides.context_length {
            Some(0) => {
                return Err(PlanError::Usage(
                    "-c 0: a training sequence holds at least one token".into(),
                ));
            }
            Some(c) => c.min(MAX_SEQUENCE),
            None => {
                let s = u32::try_from(t.sequence_length)
                    .unwrap_or(MAX_SEQUENCE)
                    .max(1);
                if trained > 0 { s.min(trained) } else { s }
            }
        };
        let (global_batch, global_why) = global_batch(w)?;
        let overhead = req
            .profiles
            .runtime_overhead(ReserveTarget::Gpu, RuntimeId::Torch)
            .map_or((0, None), |r| (r.fixed_bytes, Some(r.id.clone())));
        Ok(Torch {
            req,
            gpus,
            inv,
            method,
            methods,
            method_why,
            precision,
            precision_why,
            tf32,
            attention_kernel,
            attention,
            attention_why,
            optimizer,
            lora_rank,
            lora_targets,
            sequence,
            global_batch,
            global_why,
            overhead,
            warnings,
        })
    }

    fn workload(&self) -> &WorkloadProfile {
        self.req.workload
    }

    fn gpus_per_node(&self) -> u32 {
        self.gpus.len() as u32
    }

    fn processes(&self) -> u64 {
        u64::from(self.gpus_per_node()) * u64::from(self.req.fleet.nodes.max(1))
    }

    /// Sequences each process handles per optimizer step.
    fn share(&self) -> u64 {
        self.global_batch.div_ceil(self.processes()).max(1)
    }

    /// The micro-batch a bisected size stands for: its largest divisor of the per-process share, so
    /// accumulation reaches the global batch exactly.
    fn micro(&self, size: u32) -> u64 {
        let share = self.share();
        let s = u64::from(size).clamp(1, share);
        (1..=s)
            .rev()
            .find(|d| share.is_multiple_of(*d))
            .unwrap_or(1)
    }

    /// LoRA rank and targets of a method: the preset's for its own method; for a method a suggestion tries, PEFT's
    /// default rank 8 (LoraConfig `r`) with that method's targets.
    fn lora_of(&self, m: Method) -> (u64, Vec<String>) {
        if m == self.method {
            return (self.lora_rank, self.lora_targets.clone());
        }
        let targets = match m {
            Method::Full => &[][..],
            Method::Lora | Method::LoraInt8 => PEFT_DEFAULT_TARGETS,
            Method::Qlora => ALL_LINEAR_TARGETS,
        };
        (
            if m == Method::Full {
                0
            } else {
                PEFT_DEFAULT_RANK
            },
            targets.iter().map(|s| s.to_string()).collect(),
        )
    }

    fn params(&self, p: &Point, micro: u64) -> mem::Params {
        let (lora_rank, lora_targets) = self.lora_of(p.method);
        mem::Params {
            method: p.method,
            precision: self.precision,
            optimizer: self.optimizer,
            lora_rank,
            lora_targets,
            lora_dropout: Self::lora_dropout(p.method) > 0.0,
            micro_batch: micro,
            sequence: u64::from(self.sequence),
            checkpointing: p.checkpointing,
            attention: self.attention,
            gpus_per_node: self.gpus_per_node(),
            nodes: self.req.fleet.nodes.max(1),
            zero: p.zero,
            offload: p.offload,
        }
    }

    /// LoRA dropout: PEFT's default 0.0 for LoRA, QLoRA's 0.05 (Dettmers et al. 2023, Appendix B: dropout
    /// 0.05 for models up to 13B).
    fn lora_dropout(m: Method) -> f64 {
        match m {
            Method::Qlora => 0.05,
            _ => 0.0,
        }
    }

    /// Per-GPU capacity of the training GPUs: the smallest free memory and the largest reserve.
    fn room(&self) -> (u64, u64) {
        let cap = self
            .gpus
            .iter()
            .map(|g| g.capacity_bytes)
            .min()
            .unwrap_or(0);
        let reserve = self.gpus.iter().map(|g| g.reserve_bytes).max().unwrap_or(0);
        (cap, reserve)
    }

    fn breakdown(&self, p: &Point, micro: u64) -> Breakdown {
        mem::breakdown(&self.inv, &self.params(p, micro))
    }

    /// Bytes over capacity on the GPUs and on the host.
    fn overflow(&self, b: &Breakdown) -> (u64, u64) {
        let (cap, reserve) = self.room();
        let gpu = b.gpu_total().saturating_add(self.overhead.0);
        let gpu_over = gpu.saturating_sub(cap.saturating_sub(reserve));
        let host = &self.req.fleet.host;
        let host_over = b
            .host
            .saturating_sub(host.capacity_bytes.saturating_sub(host.reserve_bytes));
        (gpu_over, host_over)
    }

    /// The GPU's peak for this precision: BF16/FP16 tensor cores with FP32 accumulation (PyTorch's matmuls), the
    /// FP32 vector rate for FP32; the fleet's peak where the profile says nothing.
    fn peak_flops(&self, g: &FleetGpu) -> f64 {
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
    fn link(&self) -> collective::Link {
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

    fn step(&self, p: &Point, micro: u64) -> TrainingPerformance {
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

    fn components(&self, b: &Breakdown) -> MemoryComponents {
        MemoryComponents {
            weights_bytes: b.weights,
            compute_bytes: b.activations.saturating_add(b.logits),
            overhead_bytes: self.overhead.0,
            gradients_bytes: b.gradients,
            optimizer_state_bytes: b.optimizer,
            adapters_bytes: b.adapters,
            ..MemoryComponents::default()
        }
    }

    fn hf_optimizer(&self) -> &'static str {
        match (self.optimizer, self.method) {
            // The QLoRA paper's paged optimizer: its states move to the host under memory pressure.
            (Optimizer::AdamW8bit, Method::Qlora) => "paged_adamw_8bit",
            (Optimizer::AdamW8bit, _) => "adamw_bnb_8bit",
            (Optimizer::AdamW, _) => "adamw_torch_fused",
            (Optimizer::Sgd, _) => "sgd",
            (Optimizer::Adafactor, _) => "adafactor",
        }
    }

    /// `torch.compile`, and why: on compute capability 7.0+ for full training and LoRA without DeepSpeed; not for
    /// QLoRA (bitsandbytes' 4-bit matmuls break the graph) nor under DeepSpeed.
    fn compile(&self, p: &Point) -> (bool, String) {
        let cc = self.gpus.iter().filter_map(|g| g.compute_capability).min();
        if cc.is_none_or(|c| c < (7, 0)) {
            return (false, "no: Triton, which torch.compile generates kernels with, needs compute capability 7.0+".into());
        }
        match (p.method, p.zero) {
            (Method::Qlora | Method::LoraInt8, _) => (false, "no: bitsandbytes' quantized matmuls are opaque to the compiler and break the graph at every linear layer".into()),
            (_, Zero::Stage3) => (false, "no: ZeRO-3 gathers parameters in module hooks, which break the compiled graph".into()),
            (_, Zero::Stage2) => (false, "no: under DeepSpeed the model runs inside DeepSpeed's engine; its own compile option is not planned".into()),
            _ => (true, "yes (heuristic): PyTorch 2.0's launch measured torch.compile 51 % faster on average in AMP training over 163 open-source models on an A100 (pytorch.org/get-started/pytorch-2.0); not counted in the prediction, which rests on the efficiency rule".into()),
        }
    }

    fn settings(&self, c: &Candidate<Point>) -> TorchSettings {
        let p = &c.point;
        let micro = self.micro(c.size);
        let accumulation = self.share() / micro;
        let lora = p.method != Method::Full;
        let (rank, targets) = self.lora_of(p.method);
        TorchSettings {
            method: p.method.name().into(),
            precision: self.precision.name().into(),
            tf32: self.tf32,
            attn_implementation: "sdpa".into(),
            attention_kernel: self.attention_kernel.clone(),
            micro_batch: micro as u32,
            gradient_accumulation_steps: accumulation as u32,
            global_batch: (micro * accumulation * self.processes()) as u32,
            sequence_length: self.sequence,
            gradient_checkpointing: p.checkpointing,
            optimizer: self.hf_optimizer().into(),
            data_parallel: self.processes() as u32,
            zero_stage: match p.zero {
                Zero::Off => 0,
                Zero::Stage2 => 2,
                Zero::Stage3 => 3,
            },
            offload: match p.offload {
                Offload::None => "none",
                Offload::Optimizer => "optimizer",
                Offload::OptimizerAndParams => "optimizer+parameters",
            }
            .into(),
            torch_compile: self.compile(p).0,
            trainable_parameters: mem::trained_params(&self.inv, &self.params(p, micro)),
            lora_rank: lora.then_some(rank as u32),
            lora_alpha: lora.then_some(Self::lora_alpha(p.method, rank)),
            lora_dropout: lora.then_some(Self::lora_dropout(p.method)),
            lora_target_modules: if lora { targets } else { Vec::new() },
            base_quantization: match p.method {
                Method::Qlora => Some("nf4".to_string()),
                Method::LoraInt8 => Some("int8".to_string()),
                _ => None,
            },
        }
    }

    /// LoRA alpha: 2 × rank for LoRA (the common PEFT recipes' scaling of 2), = rank for QLoRA as Unsloth's
    /// notebooks set it (`lora_alpha = 16` at `r = 16`).
    fn lora_alpha(m: Method, rank: u64) -> u32 {
        let a = match m {
            Method::Qlora => rank,
            _ => 2 * rank,
        };
        u32::try_from(a).unwrap_or(u32::MAX)
    }

    /// The strategies of one method on this machine, from the most to the least GPU memory.
    fn strategies(&self, method: Method) -> Vec<(Zero, Offload)> {
        let many = self.processes() > 1;
        match (method, many) {
            (Method::Full, false) => vec![
                (Zero::Off, Offload::None),
                (Zero::Stage2, Offload::Optimizer),
                (Zero::Stage3, Offload::OptimizerAndParams),
            ],
            (Method::Full, true) => vec![
                (Zero::Off, Offload::None),
                (Zero::Stage2, Offload::None),
                (Zero::Stage3, Offload::None),
                (Zero::Stage3, Offload::Optimizer),
                (Zero::Stage3, Offload::OptimizerAndParams),
            ],
            (Method::Lora, true) => vec![(Zero::Off, Offload::None), (Zero::Stage3, Offload::None)],
            (Method::Lora, false) | (Method::LoraInt8 | Method::Qlora, _) => {
                vec![(Zero::Off, Offload::None)]
            }
        }
    }

    /// Every (checkpointing, strategy) of a method.
    fn points_of(&self, method: Method) -> Vec<(bool, (Zero, Offload))> {
        [false, true]
            .into_iter()
            .flat_map(|c| self.strategies(method).into_iter().map(move |z| (c, z)))
            .collect()
    }

    /// The first of the plan's methods (in the order full, LoRA, LoRA over an 8-bit base, QLoRA) with a strategy
    /// that fits at micro-batch 1.
    fn first_fitting_method(&self) -> Option<Method> {
        self.methods.iter().copied().find(|&method| {
            self.points_of(method)
                .into_iter()
                .any(|(checkpointing, (zero, offload))| {
                    let p = Point {
                        method,
                        zero,
                        offload,
                        checkpointing,
                    };
                    self.overflow(&self.breakdown(&p, 1)) == (0, 0)
                })
        })
    }

    fn gib(b: u64) -> f64 {
        b as f64 / f64::from(1u32 << 30)
    }

    /// The smallest data-parallel size over which ZeRO-3 (checkpointing on, micro-batch 1) would fit on GPUs
    /// like these, if any up to 512.
    fn gpus_for_zero3(&self) -> Option<u64> {
        let (cap, reserve) = self.room();
        let room = cap.saturating_sub(reserve).saturating_sub(self.overhead.0);
        (1..=512u32)
            .find(|&n| {
                let mut p = self.params(
                    &Point {
                        method: Method::Full,
                        zero: Zero::Stage3,
                        offload: Offload::None,
                        checkpointing: true,
                    },
                    1,
                );
                p.gpus_per_node = n;
                p.nodes = 1;
                mem::breakdown(&self.inv, &p).gpu_total() <= room
            })
            .map(u64::from)
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

/// Compute precision and TF32 from the precision rules for the torch runtime (the weakest GPU decides).
fn precision(req: &Request, cc: Option<(u32, u32)>) -> (Precision, bool, String) {
    let rule = req.profiles.precision(RuntimeId::Torch, cc);
    match rule {
        Some(r) => {
            let p = match r.precision {
                crate::profile::Precision::Bf16 => Precision::Bf16,
                crate::profile::Precision::Fp16 => Precision::Fp16,
                _ => Precision::Fp32,
            };
            (p, r.tf32, format!("rule {}: {}", r.id, r.why))
        }
        None => (
            Precision::Fp32,
            false,
            "no precision rule for this GPU: FP32, which every GPU runs".into(),
        ),
    }
}

/// The attention kernel predicted for `attn_implementation="sdpa"` (the attention rules for torch) and its
/// memory behaviour. SDPA is what the plan loads: it ships with PyTorch (FlashAttention-2 kernels inside on
/// compute capability 8.0+, memory-efficient kernels from 5.0), so the command starts without the separate
/// `flash-attn` package.
fn attention(
    req: &Request,
    cc: Option<(u32, u32)>,
    sequence: u64,
    precision: Precision,
) -> (String, AttentionMemory, String) {
    let rule = req.profiles.attention(RuntimeId::Torch, cc, sequence);
    match rule {
        Some(r) => {
            let name = serde_json::to_value(r.kernel)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_else(|| "sdpa-math".into());
            let fused = !matches!(name.as_str(), "sdpa-math" | "chunked") && precision != Precision::Fp32;
            (
                name,
                if fused { AttentionMemory::Fused } else { AttentionMemory::Materialised },
                format!(
                    "rule {}: {}{}",
                    r.id,
                    r.why,
                    if fused { "" } else { "; the score matrix is materialised (a·s² per sequence and layer)" }
                ),
            )
        }
        None => (
            "sdpa-math".into(),
            AttentionMemory::Materialised,
            "no attention rule for this GPU: SDPA's math kernel, which materialises the score matrix".into(),
        ),
    }
}

impl Runtime for Torch<'_> {
    type Point = Point;

    fn id(&self) -> RuntimeId {
        RuntimeId::Torch
    }

    fn engine(&self) -> (&'static str, &'static str) {
        ("transformers", mem::STACK[0].1)
    }

    fn ladders(&self) -> Vec<Vec<Point>> {
        // With the method open, only the first method in order that fits takes part (all of them when none does,
        // so the nearest is found): quantizing the base is for when the model would not fit otherwise, and the
        // speed model does not price bitsandbytes' dequantization, so a score would favour it unfairly.
        let methods = match self.first_fitting_method() {
            Some(m) if self.methods.len() > 1 => vec![m],
            _ => self.methods.clone(),
        };
        let mut out = Vec::new();
        for method in methods {
            for (checkpointing, (zero, offload)) in self.points_of(method) {
                out.push(vec![Point {
                    method,
                    zero,
                    offload,
                    checkpointing,
                }]);
            }
        }
        out
    }

    fn size(&self) -> Size {
        let share = u32::try_from(self.share()).unwrap_or(u32::MAX);
        if share <= 1 {
            Size::Fixed(1)
        } else {
            Size::LargestFit {
                floor: 1,
                max: share,
                step: 1,
            }
        }
    }

    fn evaluate(&self, p: &Point, size: u32) -> Result<Eval, String> {
        let micro = self.micro(size);
        let b = self.breakdown(p, micro);
        let (gpu_over, host_over) = self.overflow(&b);
        let components = self.components(&b);
        let per_gpu = b.gpu_total().saturating_add(self.overhead.0);
        let (_, reserve) = self.room();
        let host = &self.req.fleet.host;
        let mut memory = vec![MemoryDevice {
            device: "cpu".into(),
            components: if p.offload == Offload::None {
                // DeepSpeed's CPU estimate without offload: each process loading the model (ZeRO-3: the largest
                // module) in FP32.
                MemoryComponents {
                    weights_bytes: b.host,
                    ..MemoryComponents::default()
                }
            } else {
                MemoryComponents {
                    optimizer_state_bytes: b.host,
                    ..MemoryComponents::default()
                }
            },
            total_bytes: b.host,
            capacity_bytes: host.capacity_bytes,
            reserve_bytes: host.reserve_bytes,
        }];
        for g in &self.gpus {
            memory.push(MemoryDevice {
                device: g.id.to_string(),
                components: components.clone(),
                total_bytes: per_gpu,
                capacity_bytes: g.capacity_bytes,
                reserve_bytes: reserve,
            });
        }
        let step = self.step(p, micro);
        let prediction = crate::perf::Prediction {
            prefill_tokens_per_s: step.tokens_per_s,
            decode_tokens_per_s: 0.0,
            time_to_first_token_ms: 0.0,
            time_per_output_token_ms: 0.0,
        };
        let mut notes = Vec::new();
        if p.offload != Offload::None {
            notes.push(format!(
                "ZeRO offload keeps {:.1} GiB of optimizer state{} in host memory (DeepSpeed's own estimate, {}x buffer)",
                Self::gib(b.host),
                if p.offload == Offload::OptimizerAndParams { " and parameters" } else { "" },
                mem::zero::ADDITIONAL_BUFFER_FACTOR
            ));
        }
        Ok(Eval {
            memory,
            total_bytes: per_gpu
                .saturating_mul(self.gpus.len() as u64)
                .saturating_add(b.host),
            overflow: gpu_over.max(host_over),
            ladder_overflow: gpu_over,
            prediction,
            knee: 0.0,
            notes,
        })
    }

    fn follow_up(&self, _ladder: &[Point], _p: &Point, _e: &Eval) -> Option<Vec<Point>> {
        None
    }

    fn variant(&self, p: &Point) -> String {
        p.method.name().into()
    }

    fn measured_here(&self, _p: &Point, _t: &crate::evidence::ThroughputPoint) -> bool {
        // The store records serving throughputs (llama-bench, llama-server, vLLM); no training row describes a
        // step, so none replaces a training prediction.
        false
    }

    fn sequences(&self, _p: &Point) -> u32 {
        u32::try_from(self.workload().concurrency).unwrap_or(u32::MAX)
    }

    fn preferred_variant(&self) -> String {
        self.method.name().into()
    }

    fn variant_key(&self) -> &'static str {
        "settings.method"
    }

    fn variant_noun(&self) -> &'static str {
        "training method"
    }

    fn variant_wish(&self) -> &'static str {
        "asks for"
    }

    fn variant_not_traded(&self, other: &str, preferred: &str, gain_pct: f64) -> String {
        format!(
            "scores {gain_pct:.1} % better with {} {other}, but the workload asks for {preferred}",
            self.variant_noun()
        )
    }

    fn variant_kept(&self, preferred: &str, other: &str, gain_pct: f64) -> String {
        format!(
            "the workload's preferred {} {preferred} fits and is kept; {other} would score {gain_pct:.1} % better but changes what is trained",
            self.variant_noun()
        )
    }

    fn min_gain(&self, _variant: &str) -> Option<(f64, String)> {
        None
    }

    fn group(&self, p: &Point) -> (u8, usize) {
        let z = match (p.zero, p.offload) {
            (Zero::Off, _) => 0,
            (Zero::Stage2, Offload::None) => 2,
            (Zero::Stage2, _) => 3,
            (Zero::Stage3, Offload::None) => 4,
            (Zero::Stage3, Offload::Optimizer) => 5,
            (Zero::Stage3, Offload::OptimizerAndParams) => 6,
        };
        (z * 2 + u8::from(p.checkpointing), self.gpus.len())
    }

    fn summary(&self, c: &Candidate<Point>) -> (Settings, Vec<String>) {
        (
            Settings::Torch(self.settings(c)),
            self.gpus.iter().map(|g| g.id.to_string()).collect(),
        )
    }

    fn label(&self, c: &Candidate<Point>) -> String {
        let s = self.settings(c);
        format!(
            "{} {}{}, micro-batch {} x {} tokens{}",
            s.method,
            match s.zero_stage {
                0 if s.data_parallel > 1 => format!("data parallel over {} GPUs", s.data_parallel),
                0 => "on one GPU".to_string(),
                z if s.data_parallel == 1 => format!("ZeRO-{z} on one GPU"),
                z => format!("ZeRO-{z} over {} GPUs", s.data_parallel),
            },
            if s.offload != "none" {
                format!(", {} offloaded", s.offload)
            } else {
                String::new()
            },
            s.micro_batch,
            s.sequence_length,
            if s.gradient_checkpointing {
                ", gradient checkpointing"
            } else {
                ""
            }
        )
    }

    fn describe(&self, c: &Candidate<Point>) -> Described {
        self.describe_chosen(c)
    }

    fn suggestions(&self, near: &Candidate<Point>, _all: &[Candidate<Point>]) -> Vec<String> {
        let gib = Self::gib;
        let (cap, reserve) = self.room();
        let room = cap.saturating_sub(reserve).saturating_sub(self.overhead.0);
        let mut s = vec![format!(
            "the nearest configuration ({}) needs {:.2} GiB more{}",
            self.label(near),
            gib(near.eval.overflow),
            if near.eval.ladder_overflow > 0 {
                " on each GPU"
            } else {
                " of host memory"
            }
        )];
        let fits = |p: &Point, seq: u32| -> Option<Breakdown> {
            let mut params = self.params(p, 1);
            params.sequence = u64::from(seq);
            let b = mem::breakdown(&self.inv, &params);
            (b.gpu_total() <= room).then_some(b)
        };
        let ckpt = |method| Point {
            method,
            zero: Zero::Off,
            offload: Offload::None,
            checkpointing: true,
        };
        for method in [Method::Lora, Method::LoraInt8, Method::Qlora] {
            if method <= near.point.method {
                continue;
            }
            if let Some(b) = fits(&ckpt(method), self.sequence) {
                s.push(format!(
                    "{} instead of {}: {:.2} GiB per GPU at micro-batch 1 with gradient checkpointing (base {:.2} GiB, adapters, gradients and optimizer {:.2} GiB, activations {:.2} GiB)",
                    match method {
                        Method::Qlora => "QLoRA (LoRA over an NF4 base; workload fine-tune-qlora)",
                        Method::LoraInt8 => "LoRA over an 8-bit base (base_quantization: int8)",
                        _ => "LoRA (workload fine-tune-lora)",
                    },
                    near.point.method.name(),
                    gib(b.gpu_total() + self.overhead.0),
                    gib(b.weights),
                    gib(b.adapters + b.gradients + b.optimizer),
                    gib(b.activations + b.logits)
                ));
                break;
            }
        }
        // Shorter sequences with the nearest strategy.
        let mut seq = self.sequence / 2;
        while seq >= 128 {
            if fits(
                &Point {
                    checkpointing: true,
                    ..near.point.clone()
                },
                seq,
            )
            .is_some()
            {
                s.push(format!(
                    "shorter sequences: -c {seq} tokens fits with gradient checkpointing at micro-batch 1 ({} now)",
                    self.sequence
                ));
                break;
            }
            seq /= 2;
        }
        if near.point.method == Method::Full {
            if let Some(n) = self.gpus_for_zero3()
                && n > self.processes()
            {
                {
                    s.push(format!(
                        "more GPUs: ZeRO-3 over {n} GPUs like {} fits ({} here): parameters, gradients and optimizer states are split {n} ways (--hardware {n}x:{})",
                        self.gpus[0].name,
                        self.processes(),
                        self.gpus[0].profile
                    ));
                }
            }
            // ZeRO-Offload on these GPUs, with the host memory it would need.
            let off = if self.processes() > 1 {
                Point {
                    method: Method::Full,
                    zero: Zero::Stage3,
                    offload: Offload::OptimizerAndParams,
                    checkpointing: true,
                }
            } else {
                Point {
                    method: Method::Full,
                    zero: Zero::Stage2,
                    offload: Offload::Optimizer,
                    checkpointing: true,
                }
            };
            if let Some(b) = fits(&off, self.sequence) {
                let host = &self.req.fleet.host;
                s.push(format!(
                    "CPU offload: ZeRO-{} with the optimizer{} on the host fits the GPUs ({:.2} GiB each) with {:.0} GiB of host memory (DeepSpeed's estimate; {:.0} GiB available here)",
                    if off.zero == Zero::Stage3 { 3 } else { 2 },
                    if off.offload == Offload::OptimizerAndParams { " and parameters" } else { "" },
                    gib(b.gpu_total() + self.overhead.0),
                    gib(b.host),
                    gib(host.capacity_bytes.saturating_sub(host.reserve_bytes))
                ));
            }
        }
        s
    }
}

impl Torch<'_> {
    fn describe_chosen(&self, c: &Candidate<Point>) -> Described {
        let p = &c.point;
        let w = self.workload();
        let fleet = self.req.fleet;
        let settings = self.settings(c);
        let micro = self.micro(c.size);
        let b = self.breakdown(p, micro);
        let gib = Self::gib;
        let mut prov: BTreeMap<String, Provenance> = BTreeMap::new();
        let mut put = |k: &str, source: Source, detail: String| {
            prov.insert(k.to_string(), Provenance { source, detail });
        };
        put(
            "settings.method_why",
            Source::Profile,
            if self.methods.len() > 1 {
                let tried: Vec<&str> = self
                    .methods
                    .iter()
                    .take_while(|&&m| m != p.method)
                    .map(|m| m.name())
                    .collect();
                format!(
                    "{}; {}",
                    self.method_why,
                    if tried.is_empty() {
                        format!("{} fits", p.method.name())
                    } else {
                        format!(
                            "{} do(es) not fit at micro-batch 1 with any strategy, {} does",
                            tried.join(", "),
                            p.method.name()
                        )
                    }
                )
            } else {
                self.method_why.clone()
            },
        );
        put(
            "settings.precision",
            Source::Rule,
            self.precision_why.clone(),
        );
        put(
            "settings.tf32",
            Source::Rule,
            if self.tf32 {
                "the precision rule enables TF32 for the FP32 matmuls left outside autocast (compute capability 8.0+)".into()
            } else {
                "no TF32 on this GPU (before compute capability 8.0)".into()
            },
        );
        put(
            "settings.attention_kernel",
            Source::Rule,
            self.attention_why.clone(),
        );
        put(
            "settings.attn_implementation",
            Source::Computed,
            "sdpa: PyTorch's scaled_dot_product_attention, shipped with PyTorch, dispatches to the kernel above; flash_attention_2 would need the separate flash-attn build".into(),
        );
        let share = self.share();
        put(
            "settings.micro_batch",
            Source::Computed,
            format!(
                "the largest divisor of the {share} sequences each of the {} process(es) handles per step that fits, by bisection on the torch memory model: {:.2} GiB per GPU of {:.2} GiB free less {:.2} GiB reserve",
                self.processes(),
                gib(b.gpu_total() + self.overhead.0),
                gib(self.room().0),
                gib(self.room().1)
            ),
        );
        put(
            "settings.gradient_accumulation_steps",
            Source::Computed,
            format!(
                "{share} sequences per process / micro-batch {micro}, so each step covers the global batch"
            ),
        );
        put(
            "settings.global_batch",
            Source::Profile,
            self.global_why.clone(),
        );
        put(
            "settings.sequence_length",
            if self.req.overrides.context_length.is_some() {
                Source::User
            } else {
                Source::Profile
            },
            match self.req.overrides.context_length {
                Some(c) => format!("-c {c}"),
                None => format!(
                    "workload {}: training.sequence_length, capped by the model's {} positions",
                    w.id,
                    self.req.model.hparams.context_length.unwrap_or(0)
                ),
            },
        );
        let without = Point {
            checkpointing: false,
            ..p.clone()
        };
        put(
            "settings.gradient_checkpointing",
            Source::Computed,
            if p.checkpointing {
                let b0 = self.breakdown(&without, 1);
                format!(
                    "needed: without it the activations take {:.2} GiB at micro-batch 1 ({:.2} GiB per GPU in all, over the room); with it each layer keeps only its input and one layer is recomputed at a time, for one more forward pass",
                    gib(b0.activations),
                    gib(b0.gpu_total() + self.overhead.0)
                )
            } else {
                "not needed: the activations fit without recomputation, which saves a forward pass per step".into()
            },
        );
        put(
            "settings.optimizer",
            Source::Profile,
            format!(
                "workload {}: training.optimizer {}, as transformers names it{}",
                w.id,
                w.training
                    .as_ref()
                    .map_or("adamw".to_string(), |t| serde_json::to_value(t.optimizer)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default()),
                match self.hf_optimizer() {
                    "paged_adamw_8bit" =>
                        " (paged, as QLoRA uses it: its states move to host memory under pressure)",
                    "adamw_torch_fused" => " (PyTorch's fused AdamW kernel)",
                    _ => "",
                }
            ),
        );
        put(
            "settings.zero_stage",
            Source::Computed,
            match p.zero {
                Zero::Off if self.processes() > 1 => format!(
                    "plain data parallelism: a full replica ({:.2} GiB of model states) fits each GPU, so no sharding traffic is added",
                    gib(b.weights + b.adapters + b.gradients + b.optimizer)
                ),
                Zero::Off => "one GPU holds every model state".into(),
                z => format!(
                    "ZeRO-{}: the first strategy from the most to the least GPU memory that fits (DeepSpeed {} estimate: {:.2} GiB model states per GPU, {:.1} GiB host)",
                    if z == Zero::Stage2 { 2 } else { 3 },
                    mem::DEEPSPEED_VERSION,
                    gib(b.weights + b.gradients + b.optimizer),
                    gib(b.host)
                ),
            },
        );
        put(
            "settings.torch_compile",
            Source::Heuristic,
            self.compile(p).1,
        );
        if p.method != Method::Full {
            if p.method == self.method && self.lora_rank > 0 {
                put(
                    "settings.lora_rank",
                    Source::Profile,
                    format!("workload {}: training.lora_rank", w.id),
                );
            } else {
                put(
                    "settings.lora_rank",
                    Source::Rule,
                    format!("PEFT LoraConfig's default r = {PEFT_DEFAULT_RANK}"),
                );
            }
            put(
                "settings.lora_target_modules",
                Source::Rule,
                match p.method {
                    Method::Qlora => "every linear layer of the blocks, as QLoRA (Dettmers et al. 2023, §4) and Unsloth's notebooks set it".into(),
                    _ => "PEFT's default targets for the Llama family: q_proj and v_proj (peft/utils/constants.py)".into(),
                },
            );
            put(
                "settings.lora_alpha",
                Source::Rule,
                match p.method {
                    Method::Qlora => "lora_alpha = r, as Unsloth's notebooks set it".into(),
                    _ => "lora_alpha = 2r, the common PEFT recipes' scaling of 2".into(),
                },
            );
            put(
                "settings.lora_dropout",
                Source::Rule,
                match p.method {
                    Method::Qlora => "0.05: QLoRA's dropout for models up to 13B (Dettmers et al. 2023, Appendix B)".into(),
                    _ => "0.0: PEFT LoraConfig's default".into(),
                },
            );
        }
        let perf = self.step(p, micro);
        let link = self.link();
        put(
            "performance.training",
            Source::Rule,
            format!(
                "{:.3e} FLOPs per token ({}) at {:.0} TFLOPS {} peak x efficiency {:.2} ({}); communication over {} at {:.1} GB/s per direction, not overlapped",
                perf.flops_per_token,
                match (p.method, p.checkpointing) {
                    (Method::Full, false) => "forward + backward = 3 forward passes",
                    (Method::Full, true) => "3 forward passes + 1 recomputed",
                    (_, false) => "frozen base: forward + input gradients = 2 forward passes",
                    (_, true) => "frozen base: 2 forward passes + 1 recomputed",
                },
                self.peak_flops(self.gpus[self.gpus.len() - 1]) / 1e12,
                self.precision.name(),
                perf.efficiency,
                self.gpus[0]
                    .prefill
                    .as_ref()
                    .map_or("no efficiency rule: peak".to_string(), |e| e.source.clone()),
                match link.kind {
                    collective::LinkKind::NvLink => "NVLink",
                    _ => "PCIe",
                },
                link.bytes_per_s / 1e9
            ),
        );
        let gpu_ids: Vec<String> = self.gpus.iter().map(|g| g.id.to_string()).collect();
        put(
            "topology",
            Source::Computed,
            format!(
                "{} data-parallel training process(es), one per GPU{}",
                self.processes(),
                if fleet.nodes > 1 {
                    format!(" on each of {} nodes", fleet.nodes)
                } else {
                    String::new()
                }
            ),
        );
        let layers = self.inv.layers as u32;
        let topology = Topology {
            nodes: fleet.nodes,
            data_parallel: self.processes() as u32,
            tensor_parallel: 1,
            pipeline_parallel: 1,
            stages: gpu_ids
                .iter()
                .take(1)
                .map(|d| Stage {
                    device: d.clone(),
                    layers: Some([0, layers.saturating_sub(1)]),
                    output_layer: true,
                })
                .collect(),
        };
        let model_dir = super::vllm::launch::model_dir(self.req.model, self.req.model_path);
        let gpu_devs: Vec<crate::fleet::DeviceId> = self.gpus.iter().map(|g| g.id).collect();
        let launch = launch::artifacts(&model_dir, &settings, &gpu_devs, fleet.nodes.max(1));
        let mut warnings = self.warnings.clone();
        warnings.extend(c.eval.notes.iter().cloned());
        if p.method == Method::Qlora && self.precision == Precision::Fp32 {
            warnings
                .push("QLoRA on a GPU without 16-bit tensor cores computes in FP32: slow".into());
        }
        if u64::from(settings.global_batch) != self.global_batch {
            warnings.push(format!(
                "the global batch is {} sequences per step, not the workload's {}: {} training processes take at least one sequence each per step and the same number each",
                settings.global_batch,
                self.global_batch,
                self.processes()
            ));
        }
        if self.req.objective != Objective::Throughput {
            warnings.push(format!(
                "objective {:?}: a training plan maximizes trained tokens per second whatever the objective",
                self.req.objective
            ));
        }
        let mut devices = vec!["cpu".to_string()];
        devices.extend(gpu_ids);
        Described {
            settings: Settings::Torch(settings),
            topology,
            devices,
            launch,
            provenance: prov,
            warnings,
            training: Some(perf),
        }
    }
}
