//! CUDA graph memory of vLLM 0.33.0: the graphs it captures after allocating the KV cache, which its profile
//! estimates and subtracts before sizing that cache. Pure: counts from the model and the parameters.
//!
//! Which graphs (all from the source, exact):
//! - Capture sizes (vllm/config/vllm.py `VllmConfig._set_cudagraph_sizes`): with no user list,
//!   `max = min(max_num_seqs × q × 2, 512)` (1024 on compute capability 10.x, `is_device_capability_family(100)`),
//!   `q` = `uniform_decode_query_len` (1, or `1 + num_speculative_tokens`), capped by `max_num_batched_tokens`;
//!   sizes `1, 2, 4`, multiples of 8 below 256, multiples of 16 from 256 to `max`, plus `max_num_batched_tokens`
//!   when it fits, plus the uniform decode sizes (`max_num_seqs` with `q = 1`; `n × q` over the request-count grid
//!   otherwise) that fit.
//! - Graphs per mode (vllm/v1/worker/gpu/cudagraph_utils.py `CudaGraphManager._init_candidates`; the mode enum in
//!   vllm/config/compilation.py `CUDAGraphMode`): the default `FULL_AND_PIECEWISE` (vllm/config/vllm.py
//!   optimization-level defaults) captures every size PIECEWISE and, as FULL graphs, each size rounded up to a
//!   multiple of `q` that stays `≤ max_num_seqs × q` and `≤ max` (the public log `lmcache-3430-…` prints
//!   `PIECEWISE=51 (largest=512), FULL=35 (largest=256)` for 256 sequences); `PIECEWISE` the sizes only; `FULL`
//!   every size as a FULL graph; `FULL_DECODE_ONLY` the decode graphs only.
//!
//! What one capture holds (`CudaGraphManager.capture`, `ModelCudaGraphManager.capture`, vllm/compilation/
//! cuda_graph.py `CUDAGraphWrapper.__call__`, vllm/compilation/backends.py `wrap_with_cudagraph_if_needed`), as
//! `capture_model` (vllm/v1/worker/gpu/model_runner.py) measures it, the free memory before minus after, with the
//! caching allocator emptied only before ("Graph capturing finished in N secs, took X GiB"):
//! - the graph objects the CUDA driver instantiates: a PIECEWISE size is `layers + 1` graphs (the model split at
//!   each attention op, which runs eagerly between them), each one layer's piece; a FULL size is one graph over
//!   every layer, attention included. Their device memory is the driver's, not in vLLM's source. MEASURED on an
//!   H100 (driver 580.159.04, CUDA 13.0, tests/fixtures/vllm/device/README.md): a fixed cost per instantiated graph
//!   plus a cost per kernel node ([`CUDA_GRAPH_BYTES_PER_GRAPH`], [`CUDA_GRAPH_BYTES_PER_NODE`]), so a FULL graph
//!   over 32 layers costs about 9 PIECEWISE graphs, not 32. Nodes per piece and per FULL layer:
//!   [`NODES_PER_PIECE`], [`ATTENTION_NODES_PER_LAYER`]. Other GPUs and drivers cost more or less per graph (the
//!   public captures imply 0.6 to 1.5 times the H100's): the sum is scaled by a FITTED bound,
//!   [`CUDA_GRAPH_DRIVER_SCALE_PERMILLE`];
//! - the shared graph pool (`current_platform.get_global_graph_pool()`): captured PIECEWISE first, largest size
//!   first, so every later capture reuses the first one's blocks ("PIECEWISE has larger activations so FULL
//!   activations should fit in already allocated buffers in the graph pool"): the layer intermediates of one
//!   forward at the largest size, `T × dt × (2 × hidden + max(attention, feed-forward))`, counted as the
//!   profiling peak is (vllm/v1/worker/gpu activation count in [`super::activation`], including the fused-MoE
//!   intermediate caches and MLA's decompressed heads) but without its fit;
//! - the eager warm-up before each capture (`forward_fn(CUDAGraphMode.NONE)`) at the same largest size, in the
//!   ordinary caching allocator, which nothing empties before the "after" reading: the same count again;
//! - the FULL graphs' persistent output (`store_capture_output`: `torch.empty_like(hidden_states)` at the largest
//!   FULL size), `T_full × hidden × dt`.
//!
//! Not in the capture: the fused-MoE modular kernel's workspace and the attention workspaces come from the
//! `WorkspaceManager` (vllm/v1/worker/workspace.py), grown by the profiling pass over `max_num_batched_tokens`
//! (at least the largest capture size) and locked after capture (`lock_workspace`); the input buffers
//! (`InputBuffers`) are allocated with the runner.
//!
//! The estimate (`profile_cudagraph_memory`) runs the same capture before the KV cache exists, measuring the
//! PIECEWISE graphs in full and extrapolating the FULL ones from the two largest (`_extrapolate_full_graph_memory`:
//! the first capture plus `(n − 1) ×` the second, floored at 1 MiB a graph), so here a FULL graph is floored at
//! 1 MiB too.
//!
//! FITTED (a bound): [`CUDA_GRAPH_DRIVER_SCALE_PERMILLE`] is the largest ratio, among the Model Runner V2
//! captures logged, of the driver's share (the capture less the structural terms) to the H100-measured driver
//! cost of the same graphs: Qwen3-8B on an RTX 4090 (`v0271-qwen3-8b-rtx4090-warm-compile`, 0.56 GiB at the top of
//! its rounding) sets it. Held out: Qwen2.5-0.5B on an RTX 4090 (0.28 GiB) and Llama-3.1-8B on an A100 (0.23 GiB),
//! both below the term; the torch stand-in captures on the H100 (benches/vllm/cuda_graph_memory.py, each figure
//! from a fresh process) are below it too. Trade-off: the plan pins the KV cache and vLLM captures after
//! allocating it, so a capture larger than planned comes out of the reserve (an out-of-memory at start-up once it
//! is spent), while a smaller one leaves the difference unused; the bound takes the second, on the H100 as well
//! (the H100 logs of 0.19 at TP 2-4, not in the suite, captured more than an earlier estimate).
//! tests/it/vllm_public_logs/round_three.rs `the_cuda_graph_term_covers_every_v2_capture_logged` holds every
//! capture the suite has, older runners and versions included, and derives the bound again;
//! `the_cuda_graph_driver_term_covers_the_h100_measurements` the H100 figures.

use super::VllmMemoryError;
use optimizer_model::ModelSpec;

use super::{GpuFacts, Params};

/// The platform's default capture ceiling on CUDA before compute capability 10.x.
pub const DEFAULT_MAX_GRAPH_SIZE: u32 = 512;
/// The ceiling on data-centre Blackwell (compute capability 10.x).
const BLACKWELL_DC_MAX_GRAPH_SIZE: u32 = 1024;
/// The CUDA driver's device memory per instantiated graph, before its nodes: MEASURED on an H100 80GB HBM3
/// (driver 580.159.04, CUDA 13.0, torch 2.11): 512 one-node graphs took 114,688 B each
/// (tests/fixtures/vllm/device/graphs/nodes-1.json), less one element-wise node ([`ELEMENTWISE_NODE_BYTES`]).
pub const CUDA_GRAPH_BYTES_PER_GRAPH: u64 = 114_688 - ELEMENTWISE_NODE_BYTES;
/// The driver's memory per element-wise kernel node on the same H100: the slope of 512 graphs of 256 and of 1,024
/// `add_` nodes, (2,732,032 − 765,952) / 768 = 2,560 B (graphs/nodes-256.json, nodes-1024.json).
pub const ELEMENTWISE_NODE_BYTES: u64 = 2_560;
/// The driver's memory per kernel node of a model graph (cuBLAS GEMMs, norms, attention: larger parameter blocks
/// than an `add_`): MEASURED on the H100 from 35 FULL graphs of each of three model shapes, (bytes per graph −
/// [`CUDA_GRAPH_BYTES_PER_GRAPH`]) / nodes: Llama-3.1-8B 2,892 B (417 nodes), Qwen3-8B 2,827 (469), Qwen2.5-0.5B
/// 2,929 (289); the largest, rounded up (graphs/*-full.json).
pub const CUDA_GRAPH_BYTES_PER_NODE: u64 = 2_930;
/// Kernel nodes of one PIECEWISE graph (a layer's piece between two attention ops: o_proj, residual add and norm,
/// gate/up, activation, down, add and norm, qkv, rotary): 11 to 13 as torch inductor compiles a Llama-3.1-8B piece
/// for 1 to 512 tokens on the H100 (vLLM 0.33 compiles with inductor, custom ops off), the most taken
/// (tests/fixtures/vllm/device/compiled-piece-nodes.json).
const NODES_PER_PIECE: u64 = 13;
/// A FULL graph's nodes for one layer's attention on top of its piece: the KV-cache write
/// (`reshape_and_cache_flash`), the attention kernel and FlashAttention 3's split-KV combine
/// (vllm/v1/attention/backends/flash_attn.py `FlashAttentionImpl.forward`).
const ATTENTION_NODES_PER_LAYER: u64 = 3;
/// FITTED (a bound, see the module doc): the driver's share of every Model Runner V2 capture logged, at most
/// this many thousandths of the H100-measured cost of the same graphs.
pub const CUDA_GRAPH_DRIVER_SCALE_PERMILLE: u64 = 1_479;
/// vLLM's floor per extrapolated FULL graph: `max(mem_samples[1], 1 << 20)` (`_MIN_PER_GRAPH_BYTES`).
const MIN_GRAPH_BYTES: u64 = 1 << 20;
/// The capture grid: `1, 2, 4`, then steps of 8 below 256, steps of 16 from 256.
const SMALL_SIZES: [u32; 3] = [1, 2, 4];
const FINE_STEP: u32 = 8;
const COARSE_START: u32 = 256;
const COARSE_STEP: u32 = 16;
/// Compute capability major of data-centre Blackwell (`is_device_capability_family(100)`).
const BLACKWELL_DC_MAJOR: u32 = 10;

/// `--compilation-config '{"cudagraph_mode": ...}'` (vllm/config/compilation.py `CUDAGraphMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CudaGraphMode {
    None,
    Piecewise,
    Full,
    FullDecodeOnly,
    /// 0.33's default.
    #[default]
    FullAndPiecewise,
}

/// The graphs one rank captures: the token count of each PIECEWISE and each FULL graph, descending as vLLM
/// captures them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CapturePlan {
    pub piecewise: Vec<u32>,
    pub full: Vec<u32>,
}

/// The capture's bytes by what holds them (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CudaGraphBytes {
    /// The driver's graph objects ([`driver_bytes`]).
    pub graphs_bytes: u64,
    /// The shared graph pool: one forward's intermediates at the largest size.
    pub pool_bytes: u64,
    /// The eager warm-up's blocks left in the caching allocator: the same count.
    pub warmup_bytes: u64,
    /// The FULL graphs' persistent hidden-state output.
    pub output_bytes: u64,
}

impl CudaGraphBytes {
    pub fn total(&self) -> Option<u64> {
        self.graphs_bytes
            .checked_add(self.pool_bytes)?
            .checked_add(self.warmup_bytes)?
            .checked_add(self.output_bytes)
    }
}

/// The default ceiling for the GPU: 1024 on compute capability 10.x, 512 otherwise (and when unknown).
pub(crate) fn default_max_graph_size(gpu: &GpuFacts) -> u32 {
    match gpu.compute_capability {
        Some((BLACKWELL_DC_MAJOR, _)) => BLACKWELL_DC_MAX_GRAPH_SIZE,
        _ => DEFAULT_MAX_GRAPH_SIZE,
    }
}

/// The default capture sizes without speculative decoding, ascending.
pub fn capture_sizes(
    max_num_seqs: u32,
    max_num_batched_tokens: u32,
    max_graph_size: u32,
) -> Vec<u32> {
    capture_sizes_for(max_num_seqs, max_num_batched_tokens, max_graph_size, 1)
}

/// The grid `1, 2, 4, 8, …, 248, 256, 272, …` up to `max`.
fn grid(max: u32) -> Vec<u32> {
    let mut v: Vec<u32> = SMALL_SIZES.into_iter().filter(|&i| i <= max).collect();
    v.extend((FINE_STEP..=max.min(COARSE_START - 1)).step_by(FINE_STEP as usize));
    if max >= COARSE_START {
        v.extend((COARSE_START..=max).step_by(COARSE_STEP as usize));
    }
    v
}

/// The default capture sizes with `decode_query_len` tokens per decode request (`1 + num_speculative_tokens`),
/// ascending (`_set_cudagraph_sizes`; the single-tier schedule, not dynamic speculative decoding).
fn capture_sizes_for(
    max_num_seqs: u32,
    max_num_batched_tokens: u32,
    max_graph_size: u32,
    decode_query_len: u32,
) -> Vec<u32> {
    let q = decode_query_len.max(1);
    let ceiling = max_num_seqs
        .saturating_mul(q)
        .saturating_mul(2)
        .min(max_graph_size);
    // Uniform decode sizes are chosen against the ceiling before max_num_batched_tokens caps it.
    let decode: Vec<u32> = if q > 1 {
        let mut counts = grid(max_num_seqs.min(max_graph_size));
        counts.push(max_num_seqs.min(max_graph_size));
        counts
            .into_iter()
            .filter_map(|n| n.checked_mul(q))
            .filter(|&s| s <= ceiling)
            .collect()
    } else if max_num_seqs <= ceiling {
        vec![max_num_seqs]
    } else {
        Vec::new()
    };
    let max = ceiling.min(max_num_batched_tokens);
    if max == 0 {
        return Vec::new();
    }
    let mut v = grid(max);
    if max_num_batched_tokens <= max {
        v.push(max_num_batched_tokens);
    }
    v.extend(decode.into_iter().filter(|&s| s <= max_num_batched_tokens));
    v.sort_unstable();
    v.dedup();
    v
}

/// The graphs `mode` captures over `sizes` (`_init_candidates`, without LoRA, micro-batching or varlen decode).
pub fn capture_plan(
    mode: CudaGraphMode,
    sizes: &[u32],
    max_num_seqs: u32,
    decode_query_len: u32,
) -> CapturePlan {
    let q = decode_query_len.max(1);
    let max_capture = sizes.iter().copied().max().unwrap_or(0);
    let max_decode_tokens = max_num_seqs.saturating_mul(q);
    let decode = || -> Vec<u32> {
        let mut v: Vec<u32> = sizes
            .iter()
            .filter_map(|&s| s.checked_next_multiple_of(q))
            .filter(|&r| r <= max_decode_tokens && r <= max_capture && r / q <= max_num_seqs)
            .collect();
        v.sort_unstable_by(|a, b| b.cmp(a));
        v.dedup();
        v
    };
    let mut all: Vec<u32> = sizes.to_vec();
    all.sort_unstable_by(|a, b| b.cmp(a));
    match mode {
        CudaGraphMode::None => CapturePlan::default(),
        CudaGraphMode::Piecewise => CapturePlan {
            piecewise: all,
            full: Vec::new(),
        },
        CudaGraphMode::Full => CapturePlan {
            piecewise: Vec::new(),
            full: all,
        },
        CudaGraphMode::FullDecodeOnly => CapturePlan {
            piecewise: Vec::new(),
            full: decode(),
        },
        CudaGraphMode::FullAndPiecewise => CapturePlan {
            piecewise: all,
            full: decode(),
        },
    }
}

fn m(a: u64, b: u64) -> Result<u64, VllmMemoryError> {
    a.checked_mul(b)
        .ok_or(VllmMemoryError::Overflow("CUDA graph bytes overflow"))
}

/// The capture's bytes on one rank, by term, for `plan`.
pub fn cuda_graph_breakdown(
    model: &ModelSpec,
    p: &Params,
    plan: &CapturePlan,
) -> Result<CudaGraphBytes, VllmMemoryError> {
    if plan.piecewise.is_empty() && plan.full.is_empty() {
        return Ok(CudaGraphBytes::default());
    }
    let h = &model.hparams;
    let layers = h.block_count.unwrap_or(0);
    let dt = p.dtype.bytes();
    let tp = u64::from(p.tensor_parallel.max(1));
    let hidden = h
        .embedding_length
        .ok_or(VllmMemoryError::Missing("no hidden size"))?;
    let graphs_bytes = driver_bytes(plan, layers)?;
    let largest = plan
        .piecewise
        .iter()
        .chain(&plan.full)
        .copied()
        .max()
        .unwrap_or(0);
    let per_token = m(2, hidden)?
        .checked_add(super::activation::layer_elems_per_token(model, tp)?)
        .ok_or(VllmMemoryError::Overflow("CUDA graph bytes overflow"))?;
    let forward = m(m(u64::from(largest), dt)?, per_token)?;
    let largest_full = plan.full.iter().copied().max().unwrap_or(0);
    Ok(CudaGraphBytes {
        graphs_bytes,
        pool_bytes: forward,
        warmup_bytes: forward,
        output_bytes: m(m(u64::from(largest_full), hidden)?, dt)?,
    })
}

/// The driver's bytes for `plan`'s graphs over `layers` layers: per PIECEWISE size `layers + 1` graphs of
/// [`NODES_PER_PIECE`] nodes, per FULL size one graph of `layers × (pieces + attention)` nodes (floored at vLLM's
/// 1 MiB), each graph [`CUDA_GRAPH_BYTES_PER_GRAPH`] and each node [`CUDA_GRAPH_BYTES_PER_NODE`], the sum scaled
/// by [`CUDA_GRAPH_DRIVER_SCALE_PERMILLE`] and rounded up.
pub fn driver_bytes(plan: &CapturePlan, layers: u64) -> Result<u64, VllmMemoryError> {
    driver_bytes_scaled(plan, layers, CUDA_GRAPH_DRIVER_SCALE_PERMILLE)
}

/// [`driver_bytes`] at another scale (1,000: the H100 as measured); the tests derive the bound with it.
pub fn driver_bytes_scaled(
    plan: &CapturePlan,
    layers: u64,
    permille: u64,
) -> Result<u64, VllmMemoryError> {
    let scaled = |b: u64| -> Result<u64, VllmMemoryError> { Ok(m(b, permille)?.div_ceil(1000)) };
    let piece = CUDA_GRAPH_BYTES_PER_GRAPH
        .checked_add(m(NODES_PER_PIECE, CUDA_GRAPH_BYTES_PER_NODE)?)
        .ok_or(VllmMemoryError::Overflow("CUDA graph bytes overflow"))?;
    let full_nodes = m(layers, NODES_PER_PIECE + ATTENTION_NODES_PER_LAYER)?;
    let full = scaled(
        CUDA_GRAPH_BYTES_PER_GRAPH
            .checked_add(m(full_nodes, CUDA_GRAPH_BYTES_PER_NODE)?)
            .ok_or(VllmMemoryError::Overflow("CUDA graph bytes overflow"))?,
    )?
    .max(MIN_GRAPH_BYTES);
    let piecewise_graphs = m(plan.piecewise.len() as u64, layers.saturating_add(1))?;
    scaled(m(piecewise_graphs, piece)?)?
        .checked_add(m(plan.full.len() as u64, full)?)
        .ok_or(VllmMemoryError::Overflow("CUDA graph bytes overflow"))
}

/// The default capture's bytes on one rank: `FULL_AND_PIECEWISE`, no speculative decoding.
pub fn cuda_graph_bytes(
    model: &ModelSpec,
    p: &Params,
    max_graph_size: u32,
) -> Result<u64, VllmMemoryError> {
    let sizes = capture_sizes(p.max_num_seqs, p.max_num_batched_tokens, max_graph_size);
    let plan = capture_plan(CudaGraphMode::default(), &sizes, p.max_num_seqs, 1);
    cuda_graph_breakdown(model, p, &plan)?
        .total()
        .ok_or(VllmMemoryError::Overflow("CUDA graph bytes overflow"))
}
