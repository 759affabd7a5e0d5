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

mod document;
pub mod launch;
mod space;
mod speed;

use super::{PlanError, Request, RuntimeId};
use crate::emit::MemoryComponents;
use crate::fleet::FleetGpu;
use crate::profile::{Mode, ReserveTarget, TrainOptimizer, WorkloadProfile};
use optimizer_memory::torch::{
    self as mem, Breakdown, Inventory, Method, Offload, Optimizer, Precision, Zero,
    activation::AttentionMemory,
};
use optimizer_model::Format;

pub use speed::flops_per_token;

/// PEFT's default LoRA targets for the Llama family (peft/utils/constants.py
/// `TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING["llama"] = ["q_proj", "v_proj"]`).
const PEFT_DEFAULT_TARGETS: &[&str] = &["q_proj", "v_proj"];
/// PEFT LoraConfig's default rank (`r: int = 8`).
const PEFT_DEFAULT_RANK: u64 = 8;
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
const MAX_SEQUENCE: u32 = i32::MAX as u32;

/// Most sequences in one optimizer step a plan takes: 2^24 (Llama 2's 4M-token batches are 1024 sequences;
/// this bounds the bisection and the accumulation arithmetic, not any real recipe).
const MAX_GLOBAL_BATCH: u64 = 1 << 24;

/// One point of the candidate space (the micro-batch apart).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Point {
    pub method: Method,
    pub zero: Zero,
    pub offload: Offload,
    pub checkpointing: bool,
}

/// Torch planning one request.
pub(crate) struct Torch<'a> {
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
    pub(crate) fn new(req: &'a Request<'a>) -> Result<Torch<'a>, PlanError> {
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
        let inv = mem::inventory(model).map_err(|e| PlanError::UnsupportedFormat(e.to_string()))?;
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

    fn gib(b: u64) -> f64 {
        crate::units::gib(b)
    }
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
