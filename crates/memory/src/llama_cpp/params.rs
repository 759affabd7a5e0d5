//! Resolving the parameters as the engine does: the flags checked against its limits, then context, batch,
//! streams, flash attention and the sliding-window cache resolved to what llama.cpp would use.

use super::error::{ParamError, add, cells_u32, mul, pad};
use super::kv::KV_PAD;
use super::{CACHE_TYPES, FlashAttn, MAX_BATCH_FLAG, MAX_CTX_FLAG, MAX_SEQ, Machine, Params};
use optimizer_model::Hparams;

/// The flags alone, against the engine's limits and rules.
pub(super) fn check_params(params: &Params, machine: &Machine) -> Result<(), ParamError> {
    if params.n_batch == 0 || params.n_ubatch == 0 {
        return Err(ParamError::ZeroBatch);
    }
    if params.n_parallel == 0 {
        return Err(ParamError::ZeroParallel);
    }
    let bounds: [(&'static str, u32, u32, &'static str); 4] = [
        (
            "-c",
            params.n_ctx,
            MAX_CTX_FLAG,
            "llama.cpp reads -c into an int32_t (common/common.h L452)",
        ),
        (
            "-b",
            params.n_batch,
            MAX_BATCH_FLAG,
            "llama.cpp reads -b into an int32_t (common/common.h L453)",
        ),
        (
            "-ub",
            params.n_ubatch,
            MAX_BATCH_FLAG,
            "llama.cpp reads -ub into an int32_t (common/common.h L454)",
        ),
        (
            "-np",
            params.n_parallel,
            MAX_SEQ,
            "llama.cpp refuses more than LLAMA_MAX_SEQ sequences (llama-context.cpp L101)",
        ),
    ];
    for (flag, value, max, why) in bounds {
        if value > max {
            return Err(ParamError::FlagOutOfRange {
                flag,
                value: value.into(),
                max: max.into(),
                why,
            });
        }
    }
    if params.n_ubatch > params.n_batch {
        return Err(ParamError::UbatchOverBatch {
            n_ubatch: params.n_ubatch,
            n_batch: params.n_batch,
        });
    }
    for t in [params.type_k, params.type_v] {
        if !CACHE_TYPES.contains(&t) {
            return Err(ParamError::CacheType(t.name()));
        }
    }
    if !params.tensor_split.is_empty() && params.tensor_split.len() != machine.gpus.len() {
        return Err(ParamError::TensorSplit {
            given: params.tensor_split.len(),
            gpus: machine.gpus.len(),
        });
    }
    if let Some(&value) = params
        .tensor_split
        .iter()
        .find(|v| !v.is_finite() || **v < 0.0)
    {
        return Err(ParamError::TensorSplitValue { value });
    }
    Ok(())
}

/// Flash attention as the engine resolves it: `auto` is on when every device supports it for this model, and the
/// CPU backend always does (llama-context.cpp, flash_attn_type auto resolution). A quantized V cache needs it.
fn flash_attn(params: &Params) -> Result<bool, ParamError> {
    let flash_attn = match params.flash_attn {
        FlashAttn::On => true,
        FlashAttn::Off => false,
        FlashAttn::Auto => true,
    };
    if !flash_attn && params.type_v.is_quantized() {
        return Err(ParamError::QuantizedVWithoutFlashAttn {
            type_v: params.type_v.name(),
        });
    }
    Ok(flash_attn)
}

/// Flash attention, context, batch and streams as the engine resolves them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Context {
    pub flash_attn: bool,
    /// Cells over all sequences, padded.
    pub n_ctx: u32,
    /// Cells of one stream.
    pub n_ctx_seq: u32,
    /// KV streams: one per sequence, or one shared with `--kv-unified`.
    pub n_stream: u32,
    pub n_batch: u32,
    pub n_ubatch: u32,
    /// Sequences (`-np`).
    pub n_seq: u32,
}

/// Flash attention ([`flash_attn`]), then the context: llama-context.cpp L133 (0 takes n_ctx_train), L286-306. The model's context is bounded when the
/// model is read (model::MAX_CONTEXT_LENGTH); a spec built another way is checked here as well.
pub(super) fn context(
    h: &Hparams,
    params: &Params,
    notes: &mut Vec<String>,
) -> Result<Context, ParamError> {
    let flash_attn = flash_attn(params)?;
    let n_ctx = if params.n_ctx == 0 {
        let train = h.context_length.ok_or(ParamError::NoTrainedContext)?;
        if train == 0 || train > optimizer_model::MAX_CONTEXT_LENGTH {
            return Err(ParamError::ModelLimit {
                key: "context_length",
                value: train,
                max: optimizer_model::MAX_CONTEXT_LENGTH,
                why: "llama.cpp needs a trained context of at least one cell that pads to 256 cells in a uint32_t (llama-context.cpp L290)",
            });
        }
        train
    } else {
        u64::from(params.n_ctx)
    };
    let n_seq = params.n_parallel;
    // llama-context.cpp L246-248: the batch is capped by the context as given, the micro-batch by the batch.
    let n_batch = cells_u32("context", u64::from(params.n_batch).min(n_ctx))?;
    let n_ubatch = params.n_ubatch.min(n_batch);
    let n_ctx = pad("context", n_ctx, KV_PAD)?;
    let (n_ctx, n_ctx_seq) = if params.kv_unified {
        let c = cells_u32("context", n_ctx)?;
        (c, c)
    } else {
        let per = pad("context", n_ctx / u64::from(n_seq), KV_PAD)?;
        let total = mul("context", per, u64::from(n_seq))?;
        if total != n_ctx {
            notes.push(format!(
                "llama.cpp rounds n_ctx to {total} so each of the {n_seq} sequences gets {per} cells"
            ));
        }
        (cells_u32("context", total)?, cells_u32("context", per)?)
    };
    Ok(Context {
        flash_attn,
        n_ctx,
        n_ctx_seq,
        n_stream: if params.kv_unified { 1 } else { n_seq },
        n_batch,
        n_ubatch,
        n_seq,
    })
}

/// Cells of the sliding-window cache, when the model has sliding-window layers: the full context with
/// `--swa-full`, else the window per stream plus one micro-batch, padded (llama-kv-cache-iswa.cpp L73-80).
pub(super) fn swa_cells(
    h: &Hparams,
    params: &Params,
    ctx: &Context,
) -> Result<Option<u32>, ParamError> {
    if h.sliding_window_layers.is_empty() {
        return Ok(None);
    }
    if params.swa_full {
        return Ok(Some(ctx.n_ctx_seq));
    }
    const SWA: &str = "sliding-window cache";
    let n_swa = h.sliding_window.unwrap_or(0);
    let streams = u64::from(if params.kv_unified { ctx.n_seq } else { 1 });
    let want = add(SWA, mul(SWA, n_swa, streams)?, u64::from(ctx.n_ubatch))?;
    Ok(Some(cells_u32(
        SWA,
        pad(SWA, want.min(u64::from(ctx.n_ctx_seq)), KV_PAD)?,
    )?))
}
