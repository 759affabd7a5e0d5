//! A speculative-decoding draft model (llama-server `-md FILE`): the engine's vocabulary check, the parameters
//! the pinned server creates the draft context with, and the draft's memory charged to the devices that hold it.
//! Pure functions of the target's and the draft's [`ModelSpec`]; the planner calls them from `evaluate`, the
//! launch artifacts from `describe`.
//!
//! How the pinned engine (llama.cpp 0c1e570) builds the draft context:
//! - `common/speculative.cpp` `common_base_params_to_speculative` copies the target's `common_params`, so the
//!   draft inherits `-b`, `-ub`, `-np`, `-fa`, `--device` and `-ts`; it takes the draft's own `-ngld`
//!   (`params.speculative.draft.n_gpu_layers`, default -1: every layer, `llama_model::n_gpu_layers` in
//!   `src/llama-model.cpp`), its own tensor overrides (none by default, so `--n-cpu-moe` does not apply) and its
//!   own KV types `-ctkd`/`-ctvd` (default f16, `common/common.h` `common_params_speculative_draft`).
//! - `common_speculative_init_result::common_speculative_init_result` sets the draft's `n_ctx` to
//!   `llama_n_ctx(ctx_tgt)`: the draft caches as many tokens per sequence as the target. The pinned server has
//!   no `--ctx-size-draft`.
//! - The draft is a second model and context in the same process: its weights, KV cache, output and compute
//!   buffers add to the target's on the same devices; the CUDA context and workspace are the process's, so the
//!   draft adds no per-device overhead of its own.
//!
//! Trade-off: the draft is planned fully on the GPUs whenever the target uses GPUs (`-ngld` all layers): a draft
//! runs once per drafted token, so a draft on the host costs more time than speculation saves; this adds a
//! constant to every rung, which keeps the ladders monotone. The speed model does not credit speculation's gain
//! (it depends on the acceptance rate, which only a measurement gives).

use optimizer_memory::llama_cpp::{Estimate, Params};
use optimizer_model::{GgmlType, MetaValue, ModelSpec};

/// `SPEC_VOCAB_MAX_SIZE_DIFFERENCE` (common/speculative.cpp L30): the most the two vocabularies' token counts
/// may differ by.
const MAX_VOCAB_SIZE_DIFFERENCE: u64 = 128;

/// The draft's KV cache type when `-ctkd`/`-ctvd` are not given (common/common.h
/// `common_params_speculative_draft::cache_type_k`, `cache_type_v`).
const DRAFT_CACHE_TYPE: GgmlType = GgmlType::F16;

/// The engine's vocabulary type for `tokenizer.ggml.model` (src/llama-vocab.cpp `llama_vocab::impl::load`:
/// `gpt2`, `hybriddna` and `whitespace` all load as BPE; `none` and `no_vocab` as none).
fn vocab_type(m: &ModelSpec) -> Option<&str> {
    match m.metadata.get("tokenizer.ggml.model")? {
        MetaValue::String(s) => Some(match s.as_str() {
            "gpt2" | "hybriddna" | "whitespace" => "bpe",
            "no_vocab" | "none" => "none",
            other => other,
        }),
        _ => None,
    }
}

fn meta_u64(m: &ModelSpec, key: &str) -> Option<u64> {
    m.metadata.get(key).and_then(MetaValue::as_u64)
}

fn meta_bool(m: &ModelSpec, key: &str) -> Option<bool> {
    m.metadata.get(key).and_then(MetaValue::as_bool)
}

/// Why llama-server would refuse a target and draft pair (`common_speculative_are_compatible`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Incompatible {
    /// Vocabulary types as [`vocab_type`] reads them; `None` where the file states none.
    #[error(
        "the draft's vocabulary type {} differs from the target's {}",
        draft.as_deref().unwrap_or("(none stated)"),
        target.as_deref().unwrap_or("(none stated)")
    )]
    VocabType {
        target: Option<String>,
        draft: Option<String>,
    },
    /// `token` is `BOS` or `EOS`; `target` and `draft` say whether each file adds it.
    #[error(
        "the target {} a {token} token and the draft {}",
        if *target { "adds" } else { "does not add" },
        if *draft { "does" } else { "does not" }
    )]
    AddsToken {
        token: &'static str,
        target: bool,
        draft: bool,
    },
    #[error("the {token} token is id {target} in the target and id {draft} in the draft")]
    TokenId {
        token: &'static str,
        target: u64,
        draft: u64,
    },
    #[error(
        "the target has {target} tokens and the draft {draft}: the engine allows a difference of at most {MAX_VOCAB_SIZE_DIFFERENCE}"
    )]
    VocabSize { target: u64, draft: u64 },
}

/// The engine's `common_speculative_are_compatible` (common/speculative.cpp), as far as the files state it:
/// the same vocabulary type, the same BOS and EOS handling (`add_*_token` and, where added, the token id),
/// token counts within [`MAX_VOCAB_SIZE_DIFFERENCE`]. `Err`: why the engine would refuse the pair.
///
/// Not checked: the token texts from id 5 on (the model reader keeps the token array in the file), and BOS/EOS
/// `add_*` flags a file leaves to the engine's per-tokenizer defaults.
pub fn compatible(target: &ModelSpec, draft: &ModelSpec) -> Result<(), Incompatible> {
    let (tt, dt) = (vocab_type(target), vocab_type(draft));
    if tt != dt {
        return Err(Incompatible::VocabType {
            target: tt.map(str::to_string),
            draft: dt.map(str::to_string),
        });
    }
    for (name, add, id) in [
        (
            "BOS",
            "tokenizer.ggml.add_bos_token",
            "tokenizer.ggml.bos_token_id",
        ),
        (
            "EOS",
            "tokenizer.ggml.add_eos_token",
            "tokenizer.ggml.eos_token_id",
        ),
    ] {
        let (ta, da) = (meta_bool(target, add), meta_bool(draft, add));
        if let (Some(ta), Some(da)) = (ta, da)
            && ta != da
        {
            return Err(Incompatible::AddsToken {
                token: name,
                target: ta,
                draft: da,
            });
        }
        // Where the token is added (or the files leave it to the engine's default), the ids must agree.
        let added = ta.or(da).unwrap_or(true);
        if let (true, Some(ti), Some(di)) = (added, meta_u64(target, id), meta_u64(draft, id))
            && ti != di
        {
            return Err(Incompatible::TokenId {
                token: name,
                target: ti,
                draft: di,
            });
        }
    }
    if let (Some(tv), Some(dv)) = (target.hparams.vocab_size, draft.hparams.vocab_size)
        && tv.abs_diff(dv) > MAX_VOCAB_SIZE_DIFFERENCE
    {
        return Err(Incompatible::VocabSize {
            target: tv,
            draft: dv,
        });
    }
    Ok(())
}

/// `-ngld` for every layer of the draft and its output layer (the count `llama_model::n_gpu_layers` gives -1).
pub(crate) fn all_layers(draft: &ModelSpec) -> u32 {
    draft
        .hparams
        .block_count
        .and_then(|n| u32::try_from(n).ok())
        .map_or(u32::MAX, |n| n.saturating_add(1))
}

/// The draft context's parameters from the target's: the same context, batches, sequences, flash attention and
/// devices (`common_base_params_to_speculative`), f16 KV ([`DRAFT_CACHE_TYPE`]), no CPU experts, and every layer
/// on the GPUs when the target uses any.
pub fn params(target: &Params, draft: &ModelSpec, on_gpus: bool) -> Params {
    Params {
        type_k: DRAFT_CACHE_TYPE,
        type_v: DRAFT_CACHE_TYPE,
        n_gpu_layers: if on_gpus {
            i32::try_from(all_layers(draft)).unwrap_or(-1)
        } else {
            0
        },
        n_cpu_moe: 0,
        ..target.clone()
    }
}

/// The draft's bytes per device (everything but the per-device overhead the process already pays), in the order
/// of the estimate's devices: host first, then the GPUs as the target's estimate lists them (same machine).
pub fn per_device(draft: &Estimate) -> Vec<u64> {
    draft
        .devices
        .iter()
        .map(|d| d.total_bytes.saturating_sub(d.overhead_bytes))
        .collect()
}
