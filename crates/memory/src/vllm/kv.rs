//! The KV cache: per-layer specs, their grouping into one block pool, blocks per request, and capacity, as
//! vLLM 0.33.0 computes them.
//!
//! - Page of one layer (vllm/v1/kv_cache_interface.py `AttentionSpec.page_size_bytes`):
//!   `num_kv_heads × block_size × (head_size + head_size_v) × dtype bytes`; for standard attention
//!   `head_size_v = head_size`, which is the `2 ×` of K and V. MLA (`MLAAttentionSpec`) caches the latent:
//!   one head of `kv_lora_rank + qk_rope_head_dim`, `head_size_v = 0`, the same on every rank.
//! - Per-request need (`max_memory_usage_bytes`): full attention `cdiv(max_model_len, block_size) × page`;
//!   sliding window (`SlidingWindowSpec.max_admission_blocks_per_request`)
//!   `cdiv(min(window − 1 + max_in_flight_tokens, max_model_len), block_size) + 1` pages, where
//!   `max_in_flight_tokens = max_concurrent_batches × max_num_batched_tokens` (vllm/config/vllm.py) and
//!   `max_concurrent_batches` is 2 with async scheduling, the 0.33 default for the V1 runner with PP = 1.
//! - Grouping (vllm/v1/core/kv_cache_planning.py `get_kv_cache_groups`): one spec for all layers → one group;
//!   full and sliding layers with equal pages → `_get_kv_cache_groups_uniform_page_size`: group size = the
//!   smaller layer count (the larger if it is under 1.5× the smaller), each type split into
//!   `cdiv(n, group_size)` groups. Pages of different sizes are refused here (vLLM rescales block sizes).
//! - Pool (`get_kv_cache_config_from_groups`, `_get_kv_cache_bytes_per_block`): bytes per block = the largest
//!   group's page sum; `num_blocks = available // bytes_per_block`.
//! - Capacity (vllm/v1/core/kv_cache_utils.py `get_max_concurrency_for_kv_cache_config`,
//!   `get_kv_cache_capacity`): `max_concurrency = num_blocks / Σ_groups cdiv(need, page)`, tokens =
//!   `int(max_concurrency × max_model_len)`, printed as "GPU KV cache size: N tokens" and
//!   "Maximum concurrency for L tokens per request: X.XXx" (`update_kv_cache_capacity`).
//! - Admission (`get_kv_cache_configs`, `_check_enough_kv_cache_memory`): the sum of every layer's need must fit in
//!   `available − bytes_per_block` (the null block `BlockPool` holds back).

use super::VllmMemoryError;
use optimizer_model::ModelSpec;

use super::weights::kv_heads_per_rank;
use super::{Kv, KvCacheDtype, KvCapacity, LayerKind, Params};

/// `max_concurrent_batches` with async scheduling on the V1 model runner (vllm/config/vllm.py), the default.
const MAX_CONCURRENT_BATCHES: u64 = 2;
/// `_get_kv_cache_groups_uniform_page_size`: a larger type uses the larger count as group size when it has
/// fewer than 1.5× the smaller type's layers.
const GROUP_SIZE_RATIO: f64 = 1.5;

fn kv_dtype_bytes(p: &Params) -> u64 {
    match p.kv_cache_dtype {
        KvCacheDtype::Auto => p.dtype.bytes(),
        KvCacheDtype::Fp8 => 1,
    }
}

fn mul(a: u64, b: u64) -> Result<u64, VllmMemoryError> {
    a.checked_mul(b)
        .ok_or(VllmMemoryError::Overflow("KV cache size overflows"))
}

/// Per-request pages of one layer of `kind`.
fn pages_per_request(kind: LayerKind, p: &Params) -> Result<u64, VllmMemoryError> {
    let bs = u64::from(p.block_size);
    let len = u64::from(p.max_model_len);
    Ok(match kind {
        LayerKind::Full | LayerKind::Mla => len.div_ceil(bs),
        LayerKind::Sliding { window } => {
            let inflight = mul(MAX_CONCURRENT_BATCHES, u64::from(p.max_num_batched_tokens))?;
            let tokens = window
                .saturating_sub(1)
                .checked_add(inflight)
                .ok_or(VllmMemoryError::Overflow("sliding window overflows"))?
                .min(len);
            tokens.div_ceil(bs) + 1
        }
    })
}

pub(super) fn kv(model: &ModelSpec, p: &Params) -> Result<Kv, VllmMemoryError> {
    if p.block_size == 0 || p.tensor_parallel == 0 || p.max_model_len == 0 {
        return Err(VllmMemoryError::Params(
            "block size, tensor parallel size and max_model_len must be positive".into(),
        ));
    }
    let h = &model.hparams;
    let layers = h.block_count.ok_or(VllmMemoryError::Missing(
        "the model declares no layer count (num_hidden_layers)",
    ))?;
    if layers == 0 || layers > optimizer_model::MAX_BLOCKS {
        return Err(VllmMemoryError::Params(format!(
            "layer count {layers} is outside 1..={}",
            optimizer_model::MAX_BLOCKS
        )));
    }
    if h.recurrent_layers.iter().any(|&r| r) {
        return Err(VllmMemoryError::Unsupported(
            "recurrent (Mamba/linear-attention) layers are not modelled for vLLM".into(),
        ));
    }
    let bs = u64::from(p.block_size);
    let tp = u64::from(p.tensor_parallel);
    let dt = kv_dtype_bytes(p);
    let mla = h.kv_lora_rank.is_some();
    let page = if mla {
        let rank = h.kv_lora_rank.unwrap_or(0);
        let rope =
            h.rope
                .as_ref()
                .and_then(|r| r.dimension_count)
                .ok_or(VllmMemoryError::Missing(
                    "MLA model without qk_rope_head_dim",
                ))?;
        let head = rank
            .checked_add(rope)
            .ok_or(VllmMemoryError::Overflow("MLA head size overflows"))?;
        mul(mul(bs, head)?, dt)?
    } else {
        let heads = h
            .head_count
            .as_ref()
            .map(|x| x.max())
            .ok_or(VllmMemoryError::Missing("no attention head count"))?;
        let kvh = h.head_count_kv.as_ref().map(|x| x.max()).unwrap_or(heads);
        let per = kv_heads_per_rank(kvh, tp)?;
        let k = h
            .key_length
            .ok_or(VllmMemoryError::Missing("no head size"))?;
        let v = h.value_length.unwrap_or(k);
        mul(
            mul(
                mul(per, bs)?,
                k.checked_add(v)
                    .ok_or(VllmMemoryError::Overflow("head size overflows"))?,
            )?,
            dt,
        )?
    };
    if page == 0 {
        return Err(VllmMemoryError::Params("KV page of 0 bytes".into()));
    }
    let kinds: Vec<LayerKind> = (0..layers as usize)
        .map(|l| {
            if mla {
                LayerKind::Mla
            } else if h.sliding_window_layers.get(l).copied().unwrap_or(false) {
                LayerKind::Sliding {
                    window: h.sliding_window.unwrap_or(0),
                }
            } else {
                LayerKind::Full
            }
        })
        .collect();
    // Buckets of identical specs, in first-seen order.
    let mut buckets: Vec<(LayerKind, u64)> = Vec::new();
    for k in &kinds {
        match buckets.iter_mut().find(|(b, _)| b == k) {
            Some((_, n)) => *n += 1,
            None => buckets.push((*k, 1)),
        }
    }
    let min_n = buckets.iter().map(|b| b.1).min().unwrap_or(1);
    let max_n = buckets.iter().map(|b| b.1).max().unwrap_or(1);
    let group_size = if buckets.len() == 1 || (max_n as f64) < (min_n as f64) * GROUP_SIZE_RATIO {
        max_n
    } else {
        min_n
    };
    let mut bytes_per_block = 0u64;
    let mut blocks_per_request = 0u64;
    let mut groups = Vec::new();
    for (kind, n) in &buckets {
        let num_groups = n.div_ceil(group_size);
        let largest = n.div_ceil(num_groups);
        bytes_per_block = bytes_per_block.max(mul(largest, page)?);
        let need = pages_per_request(*kind, p)?;
        blocks_per_request = blocks_per_request
            .checked_add(mul(num_groups, need)?)
            .ok_or(VllmMemoryError::Overflow("blocks per request overflow"))?;
        groups.push((*kind, *n, num_groups));
    }
    let mut min_bytes = 0u64;
    for k in &kinds {
        min_bytes = min_bytes
            .checked_add(mul(pages_per_request(*k, p)?, page)?)
            .ok_or(VllmMemoryError::Overflow("KV need overflows"))?;
    }
    Ok(Kv {
        page_bytes: mul(page, layers)?,
        layer_page_bytes: page,
        bytes_per_block,
        blocks_per_request,
        min_bytes,
        layers: kinds,
        groups,
    })
}

pub(super) fn kv_capacity(available_kv_bytes: u64, kv: &Kv, p: &Params) -> KvCapacity {
    let num_blocks = available_kv_bytes
        .checked_div(kv.bytes_per_block)
        .unwrap_or(0);
    let max_concurrency = if kv.blocks_per_request == 0 {
        0.0
    } else {
        num_blocks as f64 / kv.blocks_per_request as f64
    };
    let tokens = (max_concurrency * f64::from(p.max_model_len)) as u64;
    KvCapacity {
        num_blocks,
        tokens,
        max_concurrency,
    }
}

/// Whether `available` passes vLLM's start-up check for one `max_model_len` request (null block held back).
pub fn enough(available_kv_bytes: u64, kv: &Kv) -> bool {
    available_kv_bytes > kv.bytes_per_block
        && available_kv_bytes - kv.bytes_per_block >= kv.min_bytes
}
