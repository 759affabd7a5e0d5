//! Activation memory of one training step: the tensors autograd saves for the backward pass, per transformer
//! layer, plus the logits and loss.
//!
//! The published formula is Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
//! Models" (arXiv:2205.05198), §4.1: one GPT layer without parallelism saves `s·b·h·(34 + 5·a·s/h)` bytes. Its
//! assumptions: 16-bit activations, 1-byte dropout masks, a 4h GELU MLP, LayerNorm, dropout after attention
//! scores and after both residual branches, and attention that materialises the `a·s²` score matrix. The
//! derivation counts, per layer: LayerNorm inputs 4sbh; QKV input 2sbh; Q and K for `QKᵀ` 4sbh; softmax output
//! 2as²b, its dropout mask as²b and output 2as²b; V 2sbh; the output projection's input 2sbh and dropout mask
//! sbh; the MLP's input 2sbh, GELU input 8sbh, output 8sbh and dropout mask sbh.
//!
//! [`LayerShape`] restates that count term by term with the architecture's own sizes, so the same function
//! gives the paper's figure for a GPT layer (tests/it/torch_memory.rs checks it on the paper's configurations) and
//! a Llama-family layer as Hugging Face transformers runs it: RMSNorm upcast to FP32 (`LlamaRMSNorm` saves the
//! FP32 copy and reciprocal RMS), no dropout, a gated MLP whose SiLU input, SiLU output and up projection are
//! saved beside the down projection's input, and either eager attention (grouped-query K/V expanded to all
//! heads by `repeat_kv`, an FP32 softmax and its 16-bit copy) or a fused kernel (FlashAttention,
//! memory-efficient SDPA: K/V as they are, its output and an FP32 log-sum-exp per head and token instead of the
//! score matrix). A frozen linear layer (LoRA's base) saves no input: its weight gradient is not
//! computed. Gradient checkpointing (one checkpoint per layer, Hugging Face's) keeps each layer's input and
//! recomputes one layer at a time during the backward pass (the paper's "full recomputation", `2sbhL` for
//! 16-bit).
//!
//! Trade-off: the model counts what autograd saves and the logits' peak, not the transient buffers a backward
//! kernel allocates (a few `b·s·h`-sized gradients at a time); tests/it/torch_memory.rs reports the error against
//! PyTorch's own accounting on this CPU (tests/fixtures/torch/activations-cpu.json).

/// How a layer normalizes, which decides what it saves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Norm {
    /// A fused LayerNorm (`torch.nn.LayerNorm`): saves its input in the activation type.
    Fused,
    /// Hugging Face's RMSNorm of the Llama family: saves an FP32 copy of its input, and the normalized
    /// activations when its weight is trained.
    RmsUpcast,
}

/// The attention kernel's memory behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionMemory {
    /// Scores are materialised (eager attention, math SDPA): the softmax output per head and token pair.
    Materialised,
    /// FlashAttention or memory-efficient SDPA: the output and an FP32 log-sum-exp per head and token.
    Fused,
}

/// The sizes and structure of one transformer layer.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerShape {
    pub hidden: u64,
    pub heads: u64,
    pub kv_heads: u64,
    pub head_dim: u64,
    pub ffn: u64,
    /// Gated MLP (SwiGLU/GeGLU: gate, up and down projections) rather than two matrices with GELU.
    pub gated: bool,
    pub norm: Norm,
    /// Dropout on the attention scores (a 1-byte mask and the dropped copy).
    pub attention_dropout: bool,
    /// Dropout after the attention and MLP branches (a 1-byte mask each).
    pub hidden_dropout: bool,
    /// K and V are expanded to all query heads before attention (Hugging Face's `repeat_kv`).
    pub repeat_kv: bool,
}

/// What is trained in a layer, for what it must save.
#[derive(Debug, Clone, PartialEq)]
pub struct Trained {
    /// Every weight is trained (full training).
    pub full: bool,
    /// The base's linear layers keep their inputs for the backward pass: trained ones (full training) and
    /// bitsandbytes' 8-bit ones, frozen or not.
    pub base_inputs: bool,
    /// LoRA targets by projection name (`q_proj` … `down_proj`), when LoRA.
    pub lora_targets: Vec<String>,
    pub lora_rank: u64,
    /// LoRA dropout above 0 (a mask per target and token).
    pub lora_dropout: bool,
    /// Bytes per element of the adapters' input copy: PEFT casts the input to the adapters' dtype (FP32 on a
    /// 16-bit base).
    pub adapter_bytes: u64,
}

impl Trained {
    fn lora(&self, proj: &str) -> bool {
        !self.full && self.lora_targets.iter().any(|t| t == proj)
    }
}

/// One micro-step's shape: activations of `elem` bytes, `batch × seq` tokens, the attention kernel's behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub elem: u64,
    pub batch: u64,
    pub seq: u64,
    pub attention: AttentionMemory,
}

impl Step {
    /// Bytes of one `hidden`-wide activation over the step's tokens (a checkpointed layer's input).
    fn row_bytes(&self, hidden: u64) -> u128 {
        u128::from(self.elem) * u128::from(hidden) * u128::from(self.batch) * u128::from(self.seq)
    }
}

/// Bytes one layer saves for the backward pass of one micro-step.
pub fn layer_bytes(l: &LayerShape, t: &Trained, step: &Step) -> u128 {
    let Step {
        elem,
        batch,
        seq,
        attention,
    } = *step;
    let tokens = u128::from(batch) * u128::from(seq);
    let e = u128::from(elem);
    let h = u128::from(l.hidden);
    let q = u128::from(l.heads) * u128::from(l.head_dim);
    // Eager attention expands grouped K/V to every head before its matmuls (`repeat_kv`); SDPA's kernels take
    // them as they are (`enable_gqa`).
    let kv = if l.repeat_kv && attention == AttentionMemory::Materialised {
        q
    } else {
        u128::from(l.kv_heads) * u128::from(l.head_dim)
    };
    let f = u128::from(l.ffn);
    // Per token.
    let mut per_token: u128 = 0;
    // Two norms.
    let norm = match l.norm {
        Norm::Fused => e * h,
        // The FP32 copy, its FP32 reciprocal RMS (one per token), and the normalized activations the weight
        // multiplies when the weight is trained.
        Norm::RmsUpcast => 4 * h + 4 + if t.full { e * h } else { 0 },
    };
    per_token += 2 * norm;
    // Attention: the shared input of Q, K, V when any of them is trained.
    // A frozen 16-bit or 4-bit base layer (LoRA, QLoRA) saves no input: its weight gradient is not computed.
    if t.base_inputs {
        per_token += e * h;
    }
    // Q, K and V as attention takes them.
    per_token += e * (q + 2 * kv);
    match attention {
        AttentionMemory::Materialised => {
            // Softmax output (FP32 in Hugging Face's Llama eager path, which then casts it to the activation
            // type; one copy in the activation type for a fused softmax) per head per token pair.
            let a = u128::from(l.heads) * u128::from(seq);
            let softmax = match l.norm {
                Norm::RmsUpcast if elem < 4 => 4 + e,
                _ => e,
            };
            per_token += a * softmax;
            if l.attention_dropout {
                per_token += a * (1 + e);
            }
        }
        AttentionMemory::Fused => {
            // The kernel's output (also the output projection's input: the kernels write it token-major, so
            // making it contiguous copies nothing) and its FP32 log-sum-exp per head.
            per_token += e * q + 4 * u128::from(l.heads);
        }
    }
    // Materialised: the output projection's input, the attention output made contiguous.
    if attention == AttentionMemory::Materialised && t.base_inputs {
        per_token += e * q;
    }
    if l.hidden_dropout {
        per_token += 2 * h; // two 1-byte masks
    }
    // MLP.
    if l.gated {
        if t.base_inputs {
            per_token += e * h;
        }
        // SiLU input (the gate projection), SiLU output and the up projection (the product's operands).
        per_token += 3 * e * f;
        if t.base_inputs {
            per_token += e * f;
        }
    } else {
        if t.base_inputs {
            per_token += e * h;
        }
        // GELU's input; its output is the second matrix's input, saved when that matrix is trained.
        per_token += e * f;
        if t.base_inputs {
            per_token += e * f;
        }
    }
    // LoRA (PEFT): each target casts its input to the adapters' type, applies its own dropout and saves what
    // lora_A multiplies (the cast copy or the dropped copy, plus a 1-byte mask with dropout) and lora_B's input.
    // Without a cast (adapters in the activation type) and without dropout, the targets that share an input (Q,
    // K and V; gate and up) save it once, and not at all when the base layer already saves it.
    let adapter = u128::from(t.adapter_bytes);
    let r = u128::from(t.lora_rank);
    let own_copy = t.adapter_bytes != elem || t.lora_dropout;
    for group in [
        &[("q_proj", h), ("k_proj", h), ("v_proj", h)][..],
        &[("o_proj", q)][..],
        &[("gate_proj", h), ("up_proj", h)][..],
        &[("down_proj", f)][..],
    ] {
        let targets: Vec<u128> = group
            .iter()
            .filter(|(p, _)| t.lora(p))
            .map(|&(_, w)| w)
            .collect();
        let Some(&width) = targets.first() else {
            continue;
        };
        per_token += adapter * r * targets.len() as u128;
        if own_copy {
            for w in &targets {
                per_token += adapter * w + if t.lora_dropout { *w } else { 0 };
            }
        } else {
            // Saved already: by the base layer when it keeps its inputs, or, for the output projection, as the
            // fused attention kernel's output.
            let saved =
                t.base_inputs || (group[0].0 == "o_proj" && attention == AttentionMemory::Fused);
            if !saved {
                per_token += e * width;
            }
        }
    }
    per_token * tokens
}

/// Bytes the logits and the loss hold at their peak, at `batch × seq` tokens over `vocab` entries: the logits
/// in the activation type, Hugging Face's FP32 upcast for the loss (`ForCausalLMLoss`: `logits.float()`), and
/// `log_softmax`'s saved FP32 output; during the backward its FP32 gradient and the logits' gradient.
fn logits_bytes(elem: u64, batch: u64, seq: u64, vocab: u64) -> u128 {
    let cells = u128::from(batch) * u128::from(seq) * u128::from(vocab);
    // The logits (elem), the saved log_softmax output (4) and the two FP32 gradients live together at the
    // start of the backward pass (4 + 4); an FP32 model's upcast is the tensor itself.
    cells * (u128::from(elem) + 4 + 8)
}

/// Bytes saved for the backward pass of `layers` layers, with gradient checkpointing or without: without, every
/// layer's saved tensors; with, each layer's input (`elem × hidden` per token) and one layer recomputed (see
/// [`peak_bytes`] for when that layer is alive).
pub fn layers_bytes(
    l: &LayerShape,
    t: &Trained,
    step: &Step,
    layers: u64,
    checkpointing: bool,
) -> u128 {
    let one = layer_bytes(l, t, step);
    if checkpointing {
        step.row_bytes(l.hidden) * u128::from(layers) + one
    } else {
        one * u128::from(layers)
    }
}

/// Korthikanti et al.'s closed form for one GPT layer, `s·b·h·(34 + 5·a·s/h)` bytes, as the paper writes it
/// (for the checks of [`layer_bytes`]).
pub fn korthikanti_layer_bytes(seq: u64, batch: u64, hidden: u64, heads: u64) -> u128 {
    let (s, b, h, a) = (
        u128::from(seq),
        u128::from(batch),
        u128::from(hidden),
        u128::from(heads),
    );
    34 * s * b * h + 5 * a * s * s * b
}

/// The step's peak of activation memory, split as (layers, logits and loss): without checkpointing every layer's
/// saved tensors are alive when the loss's backward allocates its gradients, so the two add up; with
/// checkpointing the layer inputs are alive throughout, and the recomputed layer is built only after the loss's
/// gradients have gone back through the LM head, so the larger of the two counts. Measured against real steps
/// in tests/it/torch_memory.rs.
pub fn peak_bytes(
    l: &LayerShape,
    t: &Trained,
    step: &Step,
    layers: u64,
    checkpointing: bool,
    vocab: u64,
) -> (u128, u128) {
    let logits = logits_bytes(step.elem, step.batch, step.seq, vocab);
    let acts = layers_bytes(l, t, step, layers, checkpointing);
    if checkpointing {
        (acts, logits.saturating_sub(layer_bytes(l, t, step)))
    } else {
        (acts, logits)
    }
}
