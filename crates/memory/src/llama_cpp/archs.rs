//! Which architectures this model computes, which it refuses, and which were checked against the engine.
//!
//! The pinned engine (llama.cpp 0c1e570) builds each architecture's memory in `llama_model::create_memory`
//! (src/llama-model.cpp). Most architectures get the shared KV cache (with its windowed and recurrent variants),
//! which this model computes; a few get a memory of their own kind that it does not compute, and a plan with
//! another architecture's rules would be wrong by an unknown amount, so they are refused by name
//! ([`UNMODELLED`]). Encoder-only and diffusion architectures get no memory at all ([`NO_MEMORY`]).
//!
//! [`VERIFIED`] lists the architectures whose weights, caches, output and compute buffers were compared with the
//! engine's own dry run (tests/fixtures/llama-cpp/ and its `arch/` table, benches/llama_cpp/arch_coverage.py);
//! any other architecture the engine loads is estimated with the shared rules and says so. Trade-off: the
//! unverified majority is planned with a warning rather than refused, since most of them are plain transformers
//! whose tensors the shared rules read exactly, and refusing them would refuse models people run.

use super::error::ParamError;

/// Architectures whose memory the engine builds in a form this model does not compute, with what it is and
/// where the engine builds it.
pub const UNMODELLED: &[(&str, &str)] = &[
    ("rwkv6", RWKV),
    ("rwkv6qwen2", RWKV),
    ("rwkv7", RWKV),
    ("arwkv7", RWKV),
    ("kimi-linear", KDA),
    ("kimi-k3", KDA),
    ("bailingmoe3", KDA),
    (
        "glm5-next",
        "Kimi-delta-attention state and an indexer cache (llama_memory_hybrid_idx; llama-hparams.cpp n_embd_head_kda)",
    ),
    (
        "minimax-01",
        "lightning-attention state (llama-hparams.cpp n_embd_s with n_embd_head_la)",
    ),
    (
        "minimax-m3",
        "a sparse-attention indexer cache (llama_kv_cache_msa)",
    ),
    ("glm-dsa", DSA),
    ("deepseek32", DSA),
    ("hy_v4", DSA),
    ("dots3note", DSA),
    (
        "deepseek4",
        "DeepSeek V4's compressed cache (src/llama-kv-cache-dsv4.cpp)",
    ),
    (
        "t5",
        "an encoder-decoder's cross-attention memory (llama-model.cpp create_memory, T5)",
    ),
];

const RWKV: &str =
    "RWKV token-shift and WKV state (llama-hparams.cpp n_embd_r/n_embd_s with wkv_head_size)";
const KDA: &str =
    "Kimi-delta-attention state (llama-hparams.cpp n_embd_r/n_embd_s with n_embd_head_kda)";
const DSA: &str = "a sparse-attention indexer cache (llama_kv_cache_dsa)";

/// Architectures for which `create_memory` returns no memory (`res = nullptr`): no KV cache, no state.
pub(crate) const NO_MEMORY: &[&str] = &[
    "bert",
    "jina-bert-v2",
    "jina-bert-v3",
    "nomic-bert",
    "nomic-bert-moe",
    "neo-bert",
    "eurobert",
    "wavtokenizer-dec",
    "modern-bert",
    "gemma-embedding",
    "dream",
    "llada",
    "llada-moe",
    "rnd1",
];

/// Architectures checked against the pinned engine's dry run, every aspect (tests/it/llama_cpp_measured.rs,
/// tests/it/llama_cpp_arch.rs; tests/it/llama_cpp_arch.rs asserts this list equals the tables' architectures).
pub const VERIFIED: &[&str] = &[
    "cohere2",
    "command-r",
    "deepseek2",
    "ernie4_5-moe",
    "exaone4",
    "falcon-h1",
    "gemma2",
    "gemma3",
    "gemma3n",
    "gemma4",
    "glm4moe",
    "gpt-oss",
    "granite",
    "granitehybrid",
    "lfm2",
    "llama",
    "llama4",
    "mamba2",
    "minimax-m2",
    "mistral3",
    "nemotron_h",
    "olmo2",
    "phi3",
    "qwen2",
    "qwen3",
    "qwen35moe",
    "qwen3moe",
    "qwen3next",
    "smollm3",
];

/// Refuses an architecture whose memory this model does not compute.
pub(super) fn check(arch: &str) -> Result<(), ParamError> {
    match UNMODELLED.iter().find(|(a, _)| *a == arch) {
        Some((_, what)) => Err(ParamError::UnmodelledArchitecture {
            arch: arch.to_string(),
            what,
        }),
        None => Ok(()),
    }
}

/// Whether the architecture's memory was checked against the engine (see [`VERIFIED`]).
fn verified(arch: &str) -> bool {
    VERIFIED.contains(&arch)
}

/// The note an estimate of an unverified architecture carries.
pub(super) fn unverified_note(arch: &str) -> Option<String> {
    (!verified(arch)).then(|| {
        format!(
            "architecture {arch}: memory estimated with the shared rules (tensors as stored, a KV cache per attention layer); it was not checked against the pinned engine's dry run ({} architectures were, docs/llama-cpp-architectures.md)",
            VERIFIED.len()
        )
    })
}
