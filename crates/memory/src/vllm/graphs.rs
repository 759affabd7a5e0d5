//! CUDA graph memory of vLLM 0.33.0: the graphs it captures after allocating the KV cache, which its profile
//! estimates and subtracts before sizing that cache.
//!
//! Capture sizes (vllm/config/vllm.py `VllmConfig._set_cudagraph_sizes`): with no user list,
//! `max = min(max_num_seqs × 2, 512)` (1024 on compute capability 10.x), capped by `max_num_batched_tokens`;
//! sizes `1, 2, 4`, then multiples of 8 below 256, then multiples of 16 from 256 to `max`, plus
//! `max_num_batched_tokens` and `max_num_seqs` when they fit. The default mode `FULL_AND_PIECEWISE` captures
//! every size piecewise and the uniform-decode sizes `≤ max_num_seqs` as full graphs (the public log
//! `lmcache-3430-…` prints `PIECEWISE=51 (largest=512), FULL=35 (largest=256)` for 256 sequences).
//!
//! The estimate (Model Runner V2, vllm/v1/worker/gpu/cudagraph_utils.py `profile_cudagraph_memory`): the
//! PIECEWISE graphs are captured and measured in full; the FULL graphs are sampled (the two largest) and
//! extrapolated as the first capture's bytes plus `(n − 1) ×` the second's, floored at 1 MiB a graph
//! (`_extrapolate_full_graph_memory`). The real capture (`capture_model`, "Graph capturing finished in N secs,
//! took X GiB", the ledger's "Z GiB for CUDAGraph memory") runs the same code for every graph after the KV
//! cache exists, so estimate and capture differ only by the extrapolation. Here every graph costs
//! `max(layers × CUDA_GRAPH_BYTES_PER_GRAPH_LAYER, 1 MiB)` (graph nodes grow with layers).
//!
//! BOUND, not a fit: [`CUDA_GRAPH_BYTES_PER_GRAPH_LAYER`] is the largest per-graph, per-layer capture seen on
//! Model Runner V2, Qwen3-8B on an RTX 4090 (0.27.1, `v0271-qwen3-8b-rtx4090-warm-compile`: 0.56 GiB over
//! 86 graphs × 36 layers, at the top of its two-decimal rounding). Trade-off: the plan pins the KV cache and
//! vLLM captures the graphs after allocating it, so a capture larger than planned comes out of the reserve
//! (an out-of-memory at start-up once the reserve is spent), while a smaller one leaves the difference unused.
//! The per-layer cost varies with the GPU and the layer's kernels: the other public V2 captures take less
//! (Qwen2.5-0.5B on an RTX 4090: 0.28 GiB, the term says 0.38; Llama-3.1-8B on an A100: 0.23 GiB, the term
//! says 0.50), which costs at most the difference in KV cache (0.3 GiB of 56 on that A100). The V1 runner's
//! estimate "Estimated CUDA graph memory: 0.52 GiB" (`lmcache-3430-…`, Qwen3-8B, the figure this constant was
//! first fitted on) is 8 % under the term. tests/it/vllm_public_logs.rs
//! `the_cuda_graph_term_covers_every_v2_capture_logged` holds the table.

use super::VllmMemoryError;
use optimizer_model::ModelSpec;

use super::Params;

/// The platform's default capture ceiling on CUDA before compute capability 10.x.
pub const DEFAULT_MAX_GRAPH_SIZE: u32 = 512;
/// The largest V2 capture per graph and layer seen: 0.565 GiB (0.56 at the top of its rounding) / (86 graphs ×
/// 36 layers) = 195,951 bytes, rounded up.
pub const CUDA_GRAPH_BYTES_PER_GRAPH_LAYER: u64 = 196_000;
/// vLLM's floor per graph: `max(mem_samples[1], 1 << 20)`.
const MIN_GRAPH_BYTES: u64 = 1 << 20;

/// The default capture sizes, ascending.
pub fn capture_sizes(
    max_num_seqs: u32,
    max_num_batched_tokens: u32,
    max_graph_size: u32,
) -> Vec<u32> {
    let max = max_num_seqs
        .saturating_mul(2)
        .min(max_graph_size)
        .min(max_num_batched_tokens);
    if max == 0 {
        return Vec::new();
    }
    let mut v: Vec<u32> = [1, 2, 4].into_iter().filter(|&i| i <= max).collect();
    v.extend((8..=max.min(255)).step_by(8));
    if max >= 256 {
        v.extend((256..=max).step_by(16));
    }
    if max_num_batched_tokens <= max {
        v.push(max_num_batched_tokens);
    }
    if max_num_seqs <= max {
        v.push(max_num_seqs);
    }
    v.sort_unstable();
    v.dedup();
    v
}

pub fn cuda_graph_bytes(
    model: &ModelSpec,
    p: &Params,
    max_graph_size: u32,
) -> Result<u64, VllmMemoryError> {
    let sizes = capture_sizes(p.max_num_seqs, p.max_num_batched_tokens, max_graph_size);
    let piecewise = sizes.len() as u64;
    let full = sizes.iter().filter(|&&s| s <= p.max_num_seqs).count() as u64;
    let layers = model.hparams.block_count.unwrap_or(0);
    let per_graph = layers
        .checked_mul(CUDA_GRAPH_BYTES_PER_GRAPH_LAYER)
        .ok_or(VllmMemoryError::Overflow("CUDA graph bytes overflow"))?
        .max(MIN_GRAPH_BYTES);
    (piecewise + full)
        .checked_mul(per_graph)
        .ok_or(VllmMemoryError::Overflow("CUDA graph bytes overflow"))
}
