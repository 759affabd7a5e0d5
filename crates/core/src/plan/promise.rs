//! What a serving plan may promise about length: a context per sequence past the model's trained length is
//! refused unless the user opts in (`--allow-long-context`), and a workload whose request (prompt and
//! generated tokens) is longer than the context the plan gives is planned for the longest request that fits,
//! with the shortfall in the document (`status: workload-unmet`), never predicted for a prompt that cannot be
//! loaded. Pure: takes values, touches nothing.
//!
//! Trade-off: the trained length is each engine's own rule (llama.cpp's `n_ctx_train` stretched by a YaRN the
//! GGUF declares; vLLM's derived max length), not a judgement of how well a model holds up near it, so a
//! context the engine starts with is never refused even where quality is known to fade before it.

use crate::emit::WorkloadUnmet;
use crate::profile::{Mode, RuntimeId, WorkloadProfile};
use crate::runtime::llama_cpp::launch as llama_launch;
use crate::runtime::vllm::launch as vllm_launch;
use crate::runtime::{Overrides, PlanError, Size};
use optimizer_model::ModelSpec;

/// What serving positions past the trained length costs on llama.cpp with YaRN, in one sentence.
const YARN_COST: &str = "YaRN interpolates positions the model never saw, so recall over the extended span is weaker than within the trained length, the more so the larger the factor, and a model not fine-tuned for YaRN may also lose some accuracy on short prompts";
/// The same for vLLM's override (vllm/config/model.py `_get_and_verify_max_len`'s own warning).
const VLLM_COST: &str = "vLLM only lifts its check: for a RoPE model positions past the derived length lead to NaN (garbage output) unless the checkpoint's rope_scaling covers them, and for absolute position embeddings to a CUDA out-of-bounds error";

/// The context per sequence the engine serves this model at as trained (`None`: the model does not say, or the
/// runtime is not a serving one).
pub(crate) fn trained_context(rt: RuntimeId, model: &ModelSpec) -> Option<u64> {
    match rt {
        RuntimeId::LlamaCpp | RuntimeId::Any => llama_launch::trained_context(model),
        RuntimeId::Vllm => vllm_launch::derived_max_model_len(model),
        RuntimeId::Torch => None,
    }
}

/// A model without positions to run out of: every layer recurrent (Mamba), so neither engine has a length to
/// enforce and no RoPE to stretch.
fn positionless(model: &ModelSpec) -> bool {
    let r = &model.hparams.recurrent_layers;
    !r.is_empty() && r.iter().all(|&x| x)
}

/// `-c` past the engine's trained length: refused (exit 2) naming the opt-in, what it adds to the launch and
/// its quality cost, unless `--allow-long-context` was given.
pub(crate) fn check_context(
    rt: RuntimeId,
    model: &ModelSpec,
    ov: &Overrides,
) -> Result<(), PlanError> {
    let (Some(c), Some(trained)) = (ov.context_length, trained_context(rt, model)) else {
        return Ok(());
    };
    if u64::from(c) <= trained || ov.allow_long_context || positionless(model) {
        return Ok(());
    }
    let (engine, how) = match long_context(rt, model, c) {
        Some(Long::Llama(r)) => (
            "llama-server serves it without complaint, but past its trained length a model without stretched RoPE produces garbage",
            format!(
                "--allow-long-context plans it with --rope-scaling yarn --rope-scale {} --yarn-orig-ctx {} ({YARN_COST})",
                r.factor, r.orig_ctx
            ),
        ),
        _ => (
            "vllm serve refuses such a --max-model-len at start-up",
            format!(
                "--allow-long-context plans it with {}=1 ({VLLM_COST})",
                vllm_launch::ALLOW_LONG_MAX_MODEL_LEN
            ),
        ),
    };
    Err(PlanError::Usage(format!(
        "-c {c}: the model was trained for {trained} tokens per sequence ({:.1}x less); {engine}. Give -c {trained} or less, or {how}",
        f64::from(c) / trained as f64
    )))
}

/// How an engine is told to serve past the trained length.
enum Long {
    Llama(llama_launch::RopeExtension),
    Vllm,
}

/// The engine's long-context setting a context per sequence needs, if it is past the trained length.
fn long_context(rt: RuntimeId, model: &ModelSpec, context: u32) -> Option<Long> {
    match rt {
        RuntimeId::LlamaCpp | RuntimeId::Any => {
            llama_launch::rope_extension(model, context).map(Long::Llama)
        }
        RuntimeId::Vllm => vllm_launch::derived_max_model_len(model)
            .filter(|&d| u64::from(context) > d)
            .map(|_| Long::Vllm),
        RuntimeId::Torch => None,
    }
}

/// The warning of a plan whose context per sequence is past the trained length (planned because the user
/// opted in): what the launch carries for it and what it costs.
pub(crate) fn long_context_warning(
    rt: RuntimeId,
    model: &ModelSpec,
    context: u32,
) -> Option<String> {
    if positionless(model) {
        return None;
    }
    let trained = trained_context(rt, model)?;
    Some(match long_context(rt, model, context)? {
        Long::Llama(r) => format!(
            "--allow-long-context: {context} tokens per sequence is past the model's trained {trained}; llama-server runs with --rope-scaling yarn --rope-scale {} --yarn-orig-ctx {}: {YARN_COST}; the Ollama Modelfile has no RoPE parameter, so Ollama serves it unstretched",
            r.factor, r.orig_ctx
        ),
        Long::Vllm => format!(
            "--allow-long-context: --max-model-len {context} is past the {trained} tokens vLLM derives for this model; vllm serve runs with {}=1: {VLLM_COST}",
            vllm_launch::ALLOW_LONG_MAX_MODEL_LEN
        ),
    })
}

/// The workload as the plan can serve it: unchanged when its request (prompt and generated tokens) fits the
/// context per sequence the plan gives, else shortened to the longest request that fits, the prompt first
/// (generation is kept, up to all but one token of the context), with what is missing.
pub(crate) fn fit_request(
    rt: RuntimeId,
    model: &ModelSpec,
    w: &WorkloadProfile,
    ov: &Overrides,
) -> Option<(WorkloadProfile, WorkloadUnmet)> {
    if rt == RuntimeId::Torch || matches!(w.mode, Mode::Training | Mode::FineTune) {
        return None;
    }
    // The same trained length the runtimes cap a preset's context at (their `n_ctx_train`).
    let trained = u32::try_from(model.hparams.context_length.filter(|&c| c > 0)?).ok()?;
    let context = match crate::runtime::context_size(ov, w, trained, 1) {
        Size::Fixed(c) => c,
        Size::LargestFit { max, .. } => max,
    };
    let context = u64::from(context.max(1));
    let requested = w.prompt_tokens.saturating_add(w.generation_tokens);
    if requested <= context {
        return None;
    }
    let generation = w.generation_tokens.min(context - 1);
    let prompt = (context - generation).min(w.prompt_tokens).max(1);
    Some((
        WorkloadProfile {
            prompt_tokens: prompt,
            generation_tokens: generation,
            ..w.clone()
        },
        WorkloadUnmet {
            requested_prompt_tokens: w.prompt_tokens,
            requested_generation_tokens: w.generation_tokens,
            context_tokens: context,
            over_by_tokens: requested - context,
        },
    ))
}
