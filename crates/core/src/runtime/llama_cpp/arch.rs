//! Which GGUF architectures the pinned llama.cpp loads, and which of them make embeddings: the names are
//! generated from its source (`arch_names.rs`, benches/llama_cpp/extract_arch_names.py), so a model the engine
//! would refuse at load is refused here with the engine's words, and an embedding plan of a generative model says
//! what it is.
//!
//! Trade-off: an embedding plan of a generative model is made (llama-server does pool its hidden states) but
//! warned about, rather than refused: decoder models fine-tuned for embeddings exist (Qwen3-Embedding is `qwen3`
//! with a `pooling_type`), and the user may know better than the metadata.

use crate::profile::{Mode, WorkloadProfile};
use crate::runtime::PlanError;
use optimizer_model::{MetaValue, ModelSpec};

use super::launch;

include!("arch_names.rs");

/// llama.h `LLAMA_POOLING_TYPE_NONE`: the model pools nothing (a generative model's value).
const POOLING_TYPE_NONE: u64 = 0;

/// Refuses what `llama_model_load` would: an architecture outside `LLM_ARCH_NAMES` (src/llama-model.cpp
/// `llama_model_create`: "unknown model architecture"), and `clip`, which is only a projector (src/llama.cpp
/// `llama_model_load`: "CLIP cannot be used as main model").
pub(crate) fn admit(model: &ModelSpec) -> Result<(), PlanError> {
    let arch = model.architecture.as_str();
    if arch == "clip" {
        return Err(PlanError::Model(
            "general.architecture is 'clip': llama.cpp refuses it at load (\"CLIP cannot be used as main model, use it with --mmproj instead\", src/llama.cpp); plan the language model it projects into".into(),
        ));
    }
    if !KNOWN.contains(&arch) {
        return Err(PlanError::Model(format!(
            "general.architecture {arch:?}: the pinned llama.cpp refuses the file at load (\"unknown model architecture: '{arch}'\", src/llama-model.cpp llama_model_create); it knows {} architectures (llama, qwen2, gemma3, bert, ...)",
            KNOWN.len()
        )));
    }
    Ok(())
}

/// The GGUF's `{arch}.pooling_type`, when it declares one other than `NONE`.
pub(crate) fn declared_pooling(model: &ModelSpec) -> Option<u64> {
    model
        .metadata
        .get(&format!("{}.pooling_type", model.architecture))
        .and_then(MetaValue::as_u64)
        .filter(|&p| p != POOLING_TYPE_NONE)
}

/// For an embedding workload on a model that is not an embedding model (no `{arch}.pooling_type` and not one of
/// llama.cpp's encoder architectures, [`EMBEDDING`]): the warning that names what the model is.
pub(crate) fn embedding_warning(model: &ModelSpec, w: &WorkloadProfile) -> Option<String> {
    let arch = model.architecture.as_str();
    if w.mode != Mode::Embedding || declared_pooling(model).is_some() || EMBEDDING.contains(&arch) {
        return None;
    }
    Some(format!(
        "{arch} is a generative architecture and the GGUF declares no {arch}.pooling_type: llama-server --embedding --pooling {} averages hidden states the model was not trained to embed with; serve an embedding model ({}) or a GGUF converted with its pooling type",
        launch::DEFAULT_POOLING,
        EMBEDDING.join(", ")
    ))
}
