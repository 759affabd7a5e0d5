//! Memory of a PyTorch training or fine-tuning step per GPU, by component, from the checkpoint's own tensors.
//! Pure: takes a [`ModelSpec`] and parameter values, touches nothing.
//!
//! The stack it follows (pinned in [`STACK`]): Hugging Face transformers' `Trainer` with PEFT for LoRA,
//! bitsandbytes for 8-bit optimizers and the NF4 base of QLoRA, and DeepSpeed ZeRO for sharding over GPUs.
//! Components:
//! - weights: full training under mixed precision keeps FP32 weights (the `Trainer` autocasts), or DeepSpeed's
//!   16-bit copy (its FP32 master weights count as optimizer state); LoRA keeps the frozen base in the compute
//!   type; QLoRA stores every linear layer of the blocks in NF4 with double quantization ([`nf4_bytes`]) and
//!   the rest (embeddings, norms, the LM head) in the compute type;
//! - adapters: LoRA's A and B of every target module, `r × (in + out)` each, in FP32 (PEFT's
//!   `autocast_adapter_dtype` upcasts them on a 16-bit base);
//! - gradients and optimizer states of what is trained ([`optimizer_bytes_per_param`]), or DeepSpeed's own
//!   estimate of the model states under ZeRO ([`zero`]);
//! - activations ([`activation`]) and logits;
//! - the CUDA context, counted by the caller from the `runtime-overhead` rule.
//!
//! Trade-off: ZeRO configurations take DeepSpeed's estimator figures as they are (ZeRO-2: `2 + 18/N` bytes per
//! parameter, counting an FP32 gradient partition the ZeRO paper's `2 + 14/N` leaves out), so a plan agrees with
//! the tool DeepSpeed users check against, at the price of headroom the paper would not keep.

pub mod activation;
pub mod zero;

use std::collections::BTreeMap;

use activation::{AttentionMemory, LayerShape, Norm, Trained};
use optimizer_model::{ModelSpec, Role};

/// The library versions the model and the launch files follow, newest on PyPI on 2026-11-23 (their sources were
/// read for tests/fixtures/torch/hf-keys.json; benches/torch/README.md lists the archives and hashes).
pub const STACK: &[(&str, &str)] = &[
    ("transformers", "5.23.0"),
    ("peft", "0.21.2"),
    ("bitsandbytes", "0.50.2"),
    ("accelerate", "1.15.0"),
    ("deepspeed", DEEPSPEED_VERSION),
    ("torch", "2.15.0"),
];

/// The DeepSpeed release whose estimators [`zero`] restates.
pub const DEEPSPEED_VERSION: &str = "0.19.8";

/// bitsandbytes' NF4 block: 64 weights share one absmax (`Linear4bit` default `blocksize=64`, QLoRA §3).
const NF4_BLOCK: u64 = 64;
/// Double quantization quantizes the absmax values to 8 bits in blocks of 256, each with one FP32 absmax
/// (`compress_statistics=True`, bitsandbytes functional.py `quantize_4bit`: `quantize_blockwise(absmax,
/// blocksize=256)`; QLoRA §3 "Double Quantization": 8-bit floats, block size 256).
const DOUBLE_QUANT_BLOCK: u64 = 256;
/// bitsandbytes' 8-bit optimizers quantize each state in blocks of 2048 values with one FP32 absmax each
/// (bitsandbytes optim/optimizer.py `Optimizer8bit`: blockwise, `block_size = 2048` in `init_state`).
const OPTIM_8BIT_BLOCK: u64 = 2048;

/// How the model is trained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Method {
    /// Every parameter.
    Full,
    /// LoRA adapters over a 16-bit frozen base.
    Lora,
    /// LoRA adapters over an 8-bit frozen base (bitsandbytes LLM.int8, `load_in_8bit`).
    LoraInt8,
    /// LoRA adapters over an NF4 frozen base (bitsandbytes, double quantization).
    Qlora,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Full => "full",
            Method::Lora => "lora",
            Method::LoraInt8 => "lora-int8",
            Method::Qlora => "qlora",
        }
    }
}

/// The compute precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    Bf16,
    Fp16,
    Fp32,
}

impl Precision {
    /// Bytes of one activation element.
    pub(crate) fn bytes(self) -> u64 {
        match self {
            Precision::Bf16 | Precision::Fp16 => 2,
            Precision::Fp32 => 4,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Precision::Bf16 => "bf16",
            Precision::Fp16 => "fp16",
            Precision::Fp32 => "fp32",
        }
    }
}

/// The optimizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Optimizer {
    /// AdamW with FP32 moments.
    AdamW,
    /// bitsandbytes' 8-bit AdamW (paged for QLoRA).
    AdamW8bit,
    /// SGD with momentum.
    Sgd,
    /// Adafactor with factored second moments and no first moment (the transformers default).
    Adafactor,
}

/// ZeRO stage (DeepSpeed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Zero {
    /// No ZeRO: one process per GPU with a full replica (DDP).
    Off,
    Stage2,
    Stage3,
}

/// What ZeRO moves to the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Offload {
    None,
    Optimizer,
    OptimizerAndParams,
}

/// One training configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    pub method: Method,
    pub precision: Precision,
    pub optimizer: Optimizer,
    pub lora_rank: u64,
    pub lora_targets: Vec<String>,
    pub lora_dropout: bool,
    pub micro_batch: u64,
    pub sequence: u64,
    pub checkpointing: bool,
    pub attention: AttentionMemory,
    /// GPUs per node in the data-parallel group.
    pub gpus_per_node: u32,
    pub nodes: u32,
    pub zero: Zero,
    pub offload: Offload,
}

/// Per-GPU bytes by component, and what the host must hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Breakdown {
    pub weights: u64,
    pub adapters: u64,
    pub gradients: u64,
    pub optimizer: u64,
    /// Saved activations of the layers (with checkpointing: the layer inputs and one layer recomputed).
    pub activations: u64,
    /// Logits and loss at their peak.
    pub logits: u64,
    /// Host memory per node the configuration needs (DeepSpeed's CPU estimate under ZeRO, offloaded states).
    pub host: u64,
}

impl Breakdown {
    /// GPU bytes (the CUDA context apart).
    pub fn gpu_total(&self) -> u64 {
        self.weights
            .saturating_add(self.adapters)
            .saturating_add(self.gradients)
            .saturating_add(self.optimizer)
            .saturating_add(self.activations)
            .saturating_add(self.logits)
    }
}

/// The model's parameters as training sees them.
#[derive(Debug, Clone, PartialEq)]
pub struct Inventory {
    /// Every parameter (a tied LM head counted once, as `model.parameters()` yields it).
    pub total: u64,
    /// The largest module's own parameters (DeepSpeed's `largest_layer_params`: `recurse=False`).
    pub largest_module: u64,
    pub largest_module_name: String,
    /// Parameters of the blocks' linear layers (what QLoRA stores in NF4), by module with their shapes.
    pub linears: Vec<Linear>,
    pub layers: u64,
    pub vocab: u64,
    pub shape: LayerShape,
}

/// One linear layer of a transformer block.
#[derive(Debug, Clone, PartialEq)]
pub struct Linear {
    pub module: String,
    /// The projection's own name (`q_proj`).
    pub proj: String,
    pub in_features: u64,
    pub out_features: u64,
    pub params: u64,
}

/// The module a tensor belongs to: its name without the trailing `.weight`/`.bias`.
fn module_of(name: &str) -> &str {
    name.rsplit_once('.').map_or(name, |(m, _)| m)
}

/// Why a checkpoint is outside what the training memory model covers (the planner refuses to plan its
/// training, exit 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrainingModelError {
    #[error(
        "the checkpoint is already quantized (GPTQ/AWQ/FP8): training plans start from a 16- or 32-bit checkpoint (QLoRA quantizes it itself)"
    )]
    Quantized,
    #[error(
        "a mixture-of-experts model: training plans cover dense transformers (expert routing and expert parallelism are not modelled)"
    )]
    MixtureOfExperts,
    #[error(
        "multi-head latent attention or recurrent layers: training plans cover standard attention transformers"
    )]
    Attention,
    /// A hyper-parameter the inventory needs, which config.json does not give (`no hidden_size`).
    #[error("no {0}")]
    Missing(&'static str),
    #[error("the checkpoint holds no tensors")]
    NoTensors,
    #[error("parameter count overflows 64 bits")]
    Overflow,
}

/// Why a model is outside what the training memory model covers, or its inventory.
pub fn inventory(model: &ModelSpec) -> Result<Inventory, TrainingModelError> {
    let h = &model.hparams;
    if model.tensors.iter().any(|t| t.role == Role::QuantState) || h.quantization.is_some() {
        return Err(TrainingModelError::Quantized);
    }
    if h.expert_count.unwrap_or(0) > 0 {
        return Err(TrainingModelError::MixtureOfExperts);
    }
    if h.kv_lora_rank.is_some()
        || h.ssm.is_some()
        || !h.recurrent_layers.is_empty() && h.recurrent_layers.iter().any(|&r| r)
    {
        return Err(TrainingModelError::Attention);
    }
    let hidden = h
        .embedding_length
        .filter(|&x| x > 0)
        .ok_or(TrainingModelError::Missing("hidden_size"))?;
    let layers = h
        .block_count
        .filter(|&x| x > 0)
        .ok_or(TrainingModelError::Missing("num_hidden_layers"))?;
    let heads = h.head_count.as_ref().map_or(0, |x| x.max());
    if heads == 0 {
        return Err(TrainingModelError::Missing("num_attention_heads"));
    }
    let kv_heads = h.head_count_kv.as_ref().map_or(heads, |x| x.max()).max(1);
    let head_dim = h.key_length.filter(|&k| k > 0).unwrap_or(hidden / heads);
    let ffn = h.feed_forward_length.as_ref().map_or(0, |x| x.max()).max(1);
    let vocab = h
        .vocab_size
        .filter(|&v| v > 0)
        .ok_or(TrainingModelError::Missing("vocab_size"))?;
    let mut modules: BTreeMap<&str, u64> = BTreeMap::new();
    let mut total: u64 = 0;
    let mut linears = Vec::new();
    let mut norm_bias = false;
    let mut gated = false;
    for t in &model.tensors {
        total = total
            .checked_add(t.parameters)
            .ok_or(TrainingModelError::Overflow)?;
        let m = module_of(&t.name);
        *modules.entry(m).or_default() += t.parameters;
        if t.role == Role::Norm && t.name.ends_with(".bias") {
            norm_bias = true;
        }
        let proj = m.rsplit('.').next().unwrap_or(m);
        if proj == "gate_proj" || proj == "gate_up_proj" {
            gated = true;
        }
        if t.layer.is_some()
            && t.shape.len() == 2
            && t.name.ends_with(".weight")
            && matches!(t.role, Role::Attention | Role::Ffn)
        {
            linears.push(Linear {
                module: m.to_string(),
                proj: proj.to_string(),
                in_features: t.shape[1],
                out_features: t.shape[0],
                params: t.parameters,
            });
        }
    }
    let (name, largest) = modules
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map(|(n, p)| (n.to_string(), *p))
        .ok_or(TrainingModelError::NoTensors)?;
    Ok(Inventory {
        total,
        largest_module: largest,
        largest_module_name: name,
        linears,
        layers,
        vocab,
        shape: LayerShape {
            hidden,
            heads,
            kv_heads,
            head_dim,
            ffn,
            gated,
            norm: if norm_bias {
                Norm::Fused
            } else {
                Norm::RmsUpcast
            },
            attention_dropout: false,
            hidden_dropout: false,
            repeat_kv: kv_heads < heads,
        },
    })
}

/// Bytes of one weight matrix of `n` parameters in bitsandbytes NF4 with double quantization: the packed
/// 4-bit codes (`ceil(n/2)`), one 8-bit absmax per 64-weight block, one FP32 absmax per 256 of those, and the
/// small tables (16 FP32 NF4 code values, the 256-entry FP32 code of the second quantization, one FP32 offset).
pub fn nf4_bytes(n: u64) -> u64 {
    let blocks = n.div_ceil(NF4_BLOCK);
    let blocks2 = blocks.div_ceil(DOUBLE_QUANT_BLOCK);
    n.div_ceil(2) + blocks + 4 * blocks2 + 4 * 16 + 4 * 256 + 4
}

/// Bytes of one weight matrix of `n` parameters and `rows` output rows in bitsandbytes LLM.int8: one byte per
/// weight (`Int8Params.CB`) and one FP32 scale per output row (`SCB`, row-wise absmax quantization; Dettmers et
/// al. 2022, "LLM.int8()", §3.1 vector-wise quantization).
fn int8_bytes(n: u64, rows: u64) -> u64 {
    n.saturating_add(rows.saturating_mul(4))
}

/// Optimizer-state bytes per trained parameter (FP32 master weights not included), and a per-tensor overhead
/// for 8-bit states: AdamW 8 (two FP32 moments), 8-bit AdamW 2 plus one FP32 absmax per 2048 values per state,
/// SGD with momentum 4, Adafactor about 4 × (rows + columns) per matrix (its factored second moment) — taken here
/// per parameter as the factored share.
pub fn optimizer_bytes(opt: Optimizer, params: u64, rows_plus_cols: u64) -> u64 {
    match opt {
        Optimizer::AdamW => params.saturating_mul(8),
        Optimizer::AdamW8bit => params
            .saturating_mul(2)
            .saturating_add(2 * 4 * params.div_ceil(OPTIM_8BIT_BLOCK)),
        Optimizer::Sgd => params.saturating_mul(4),
        Optimizer::Adafactor => rows_plus_cols.saturating_mul(4),
    }
}

/// LoRA's trained parameters: `r × (in + out)` for every target linear layer.
pub fn lora_params(inv: &Inventory, rank: u64, targets: &[String]) -> u64 {
    inv.linears
        .iter()
        .filter(|l| targets.contains(&l.proj))
        .map(|l| rank.saturating_mul(l.in_features.saturating_add(l.out_features)))
        .fold(0u64, u64::saturating_add)
}

/// Rows plus columns of every matrix (Adafactor's factored state), plus vectors' lengths.
fn factored(inv: &Inventory) -> u64 {
    inv.linears
        .iter()
        .map(|l| l.in_features + l.out_features)
        .fold(0u64, u64::saturating_add)
}

/// Per-GPU memory of one configuration.
pub fn breakdown(inv: &Inventory, p: &Params) -> Breakdown {
    let gpus = u64::from(p.gpus_per_node.max(1)) * u64::from(p.nodes.max(1));
    let mut b = Breakdown::default();
    match p.method {
        Method::Full => {
            let total = inv.total;
            match p.zero {
                Zero::Off => {
                    // The Trainer keeps FP32 weights and gradients (autocast computes in 16 bits) or, in FP32,
                    // the same: 4 + 4 bytes, plus the optimizer's states.
                    b.weights = total.saturating_mul(4);
                    b.gradients = total.saturating_mul(4);
                    b.optimizer = optimizer_bytes(p.optimizer, total, factored(inv));
                }
                Zero::Stage2 => {
                    let e = zero::zero2(
                        total,
                        p.gpus_per_node,
                        p.nodes,
                        p.offload != Offload::None,
                        zero::ADDITIONAL_BUFFER_FACTOR,
                    );
                    // DeepSpeed: 16-bit parameters (2P) and the partitions (18P / N) of the 16-bit and FP32
                    // gradients (6 bytes, filed as gradients) and of the FP32 master weights and moments (12
                    // bytes, optimizer state); offloaded, everything but the parameters is on the CPU.
                    b.weights = total.saturating_mul(2);
                    let partitions = e.gpu_bytes.saturating_sub(b.weights);
                    b.gradients = partitions / 3;
                    b.optimizer = partitions - b.gradients;
                    b.host = e.cpu_bytes;
                }
                Zero::Stage3 => {
                    let off = match p.offload {
                        Offload::None => zero::Zero3Offload::None,
                        Offload::Optimizer => zero::Zero3Offload::Optimizer,
                        Offload::OptimizerAndParams => zero::Zero3Offload::OptimizerAndParams,
                    };
                    let e = zero::zero3(
                        total,
                        inv.largest_module,
                        p.gpus_per_node,
                        p.nodes,
                        off,
                        true,
                        zero::ADDITIONAL_BUFFER_FACTOR,
                    );
                    // The gathered module's 16-bit parameters and gradients (2 + 2 bytes each), the 16-bit
                    // parameter partition (2P / N) unless offloaded, and the rest of the estimate (gradient and
                    // optimizer partitions) as optimizer state.
                    let half = e.largest_layer_bytes / 2;
                    let shard = match p.offload {
                        Offload::OptimizerAndParams => 0,
                        _ => total.saturating_mul(2) / gpus,
                    };
                    b.weights = half.saturating_add(shard);
                    b.gradients = e.largest_layer_bytes - half;
                    b.optimizer = e
                        .gpu_bytes
                        .saturating_sub(b.weights)
                        .saturating_sub(b.gradients);
                    b.host = e.cpu_bytes;
                }
            }
        }
        Method::Lora | Method::LoraInt8 | Method::Qlora => {
            let elem = p.precision.bytes();
            let linear_params: u64 = inv.linears.iter().map(|l| l.params).sum();
            let other = inv.total.saturating_sub(linear_params);
            b.weights = match p.method {
                Method::Qlora => inv
                    .linears
                    .iter()
                    .map(|l| nf4_bytes(l.params))
                    .fold(0u64, u64::saturating_add)
                    .saturating_add(other.saturating_mul(elem)),
                Method::LoraInt8 => inv
                    .linears
                    .iter()
                    .map(|l| int8_bytes(l.params, l.out_features))
                    .fold(0u64, u64::saturating_add)
                    .saturating_add(other.saturating_mul(elem)),
                _ => inv.total.saturating_mul(elem),
            };
            if p.zero == Zero::Stage3 {
                b.weights = b.weights / gpus + inv.largest_module.saturating_mul(elem);
            }
            let a = lora_params(inv, p.lora_rank, &p.lora_targets);
            b.adapters = a.saturating_mul(4);
            b.gradients = a.saturating_mul(4);
            b.optimizer = optimizer_bytes(p.optimizer, a, 0);
        }
    }
    let elem = p.precision.bytes();
    let trained = Trained {
        full: p.method == Method::Full,
        // bitsandbytes' 8-bit matmul keeps its input for the backward pass (`MatMul8bitLt.forward`:
        // `ctx.tensors = (CAt, subA, A)`), the 4-bit one only the packed weights (`MatMul4Bit`: `(None, B)`).
        base_inputs: matches!(p.method, Method::Full | Method::LoraInt8),
        lora_targets: if p.method == Method::Full {
            Vec::new()
        } else {
            p.lora_targets.clone()
        },
        lora_rank: p.lora_rank,
        lora_dropout: p.lora_dropout,
        adapter_bytes: 4,
    };
    let step = activation::Step {
        elem,
        batch: p.micro_batch,
        seq: p.sequence,
        attention: p.attention,
    };
    let (acts, logits) = activation::peak_bytes(
        &inv.shape,
        &trained,
        &step,
        inv.layers,
        p.checkpointing,
        inv.vocab,
    );
    b.activations = u64::try_from(acts).unwrap_or(u64::MAX);
    b.logits = u64::try_from(logits).unwrap_or(u64::MAX);
    b
}

/// Parameters trained by a configuration.
pub fn trained_params(inv: &Inventory, p: &Params) -> u64 {
    match p.method {
        Method::Full => inv.total,
        Method::Lora | Method::LoraInt8 | Method::Qlora => {
            lora_params(inv, p.lora_rank, &p.lora_targets)
        }
    }
}

/// Parameters the forward pass multiplies per token (every block linear and the LM head; the embedding lookup
/// reads one row).
pub fn matmul_params(inv: &Inventory) -> u64 {
    let linear: u64 = inv.linears.iter().map(|l| l.params).sum();
    linear.saturating_add(inv.vocab.saturating_mul(inv.shape.hidden))
}
