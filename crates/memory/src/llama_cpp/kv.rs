//! KV cache and recurrent state: cells per stream, row sizes per cache type, per layer and device
//! (llama-kv-cache.cpp, llama-kv-cache-iswa.cpp, llama-memory-recurrent.cpp).

use super::error::{ParamError, add, mul, product};
use super::layers::{Placement, Slot};
use super::params::Context;
use super::{DeviceMemory, F32, Params};
use optimizer_model::{GgmlType, Hparams, PerLayer};
use serde::Serialize;

/// The KV cache pads the context to 256 cells (llama-context.cpp L290, L296).
pub(super) const KV_PAD: u64 = 256;

/// Bytes of one row of `n` elements of `t` (`ggml_row_size`); 0 where `n` does not fill whole blocks.
pub fn row_size(t: GgmlType, n: u64) -> u64 {
    t.tensor_bytes(&[n]).unwrap_or(0)
}

/// Bytes of one cache row of `elements` elements: the engine refuses a row that does not fill whole blocks of a
/// quantized cache type (llama-context.cpp L3851-3870 with flash attention; `ggml_row_size` asserts without).
fn cache_row(which: &'static str, t: GgmlType, elements: u64) -> Result<u64, ParamError> {
    let block = t.block_elements().max(1);
    if !elements.is_multiple_of(block) {
        return Err(ParamError::CacheBlock {
            which,
            type_name: t.name(),
            block,
            elements,
        });
    }
    t.tensor_bytes(&[elements]).ok_or(ParamError::Overflow {
        what: "KV cache row",
    })
}

/// The attention widths the caches and the compute graph depend on.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Heads {
    pub n_embd: u64,
    /// Query heads per layer.
    pub head_count: PerLayer,
    /// KV heads per layer (the query heads where the model declares none).
    pub head_kv: PerLayer,
    pub n_embd_head_k: u64,
    pub n_embd_head_v: u64,
}

impl Heads {
    /// From the hyper-parameters; head sizes default to `n_embd / n_head` as the engine's do.
    pub(super) fn of(h: &Hparams) -> Result<Self, ParamError> {
        let head_count = h
            .head_count
            .as_ref()
            .ok_or(ParamError::MissingHparam("head_count"))?;
        let head_kv = h
            .head_count_kv
            .clone()
            .unwrap_or_else(|| head_count.clone());
        let n_embd = h
            .embedding_length
            .ok_or(ParamError::MissingHparam("embedding_length"))?;
        let head_dim_default = n_embd / head_count.max().max(1);
        Ok(Heads {
            n_embd,
            head_count: head_count.clone(),
            head_kv,
            n_embd_head_k: h.key_length.unwrap_or(head_dim_default),
            n_embd_head_v: h.value_length.unwrap_or(head_dim_default),
        })
    }
}

/// Hybrid architectures (src/llama-arch.cpp `llm_arch_is_hybrid`) whose memory filters the trunk's layers by
/// their recurrent flag alone: the defaults of src/llama-memory-hybrid.cpp `llama_memory_hybrid::
/// llama_memory_hybrid` (attention where `!is_recr(il)`, recurrent state where `is_recr(il)`).
const HYBRID_DEFAULT_FILTERS: &[&str] = &[
    "jamba",
    "plamo2",
    "granitehybrid",
    "lfm2",
    "lfm2moe",
    "nemotron_h",
    "nemotron_h_moe",
    "kimi-linear",
    "bailingmoe3",
    "kimi-k3",
    "glm5-next",
    "deepseek4",
];

/// Hybrid architectures whose filters also stop at the trunk (src/llama-model.cpp `llama_model::create_memory`:
/// `il < hparams.n_layer() && !hparams.is_recr(il)` for attention, `&& is_recr(il)` for the recurrent state).
const HYBRID_TRUNK_FILTERS: &[&str] =
    &["qwen3next", "qwen35", "qwen35moe", "qwen4exp", "minimax-01"];

/// Which caches the engine's main context gives block `il`: `(attention KV, recurrent state)`, per architecture
/// as src/llama-model.cpp `llama_model::create_memory` picks its layer filters (none at all for the
/// architectures it gives no memory, [`super::archs::NO_MEMORY`]); `recurrent` is whether the block
/// holds recurrent (SSM) tensors, the model's reading of `is_recr(il)`.
/// - falcon-h1: both for every block (`filter_attn` and `filter_recr` return true): each block runs attention
///   and Mamba-2 side by side.
/// - the hybrids of [`HYBRID_TRUNK_FILTERS`]: as the recurrent flag says, trunk blocks only.
/// - the other hybrids ([`HYBRID_DEFAULT_FILTERS`]; nemotron_h's `n_ff(il) == 0` condition is met by its
///   attention blocks, and its feed-forward blocks declare no KV heads): as the recurrent flag says.
/// - every other architecture: a plain KV cache on the non-recurrent blocks, filtered to the trunk
///   (`il < n_layer()`) when the file has NextN blocks and a trunk (not for graniteswitch, whose router layer
///   reuses `n_layer_nextn` and is attended by the trunk: `router_layer >= 0`); the recurrent state, for
///   recurrent architectures, on the recurrent blocks.
pub(super) fn caches(arch: &str, h: &Hparams, il: u32) -> (bool, bool) {
    if super::archs::NO_MEMORY.contains(&arch) {
        return (false, false);
    }
    let recurrent = h
        .recurrent_layers
        .get(il as usize)
        .copied()
        .unwrap_or(false);
    let trunk = u64::from(il) < super::layers::trunk_layers(h);
    // Gemma-3n/Gemma 4: blocks from `n_layer_kv_from_start` on reuse an earlier block's cache (Hparams doc).
    if h.kv_layers_from_start.is_some_and(|n| u64::from(il) >= n) {
        return (false, recurrent);
    }
    if arch == "falcon-h1" {
        (true, true)
    } else if HYBRID_TRUNK_FILTERS.contains(&arch) {
        (trunk && !recurrent, trunk && recurrent)
    } else if HYBRID_DEFAULT_FILTERS.contains(&arch) {
        (!recurrent, recurrent)
    } else {
        let nextn_filter = h.nextn_predict_layers.is_some()
            && super::layers::trunk_layers(h) > 0
            && arch != "graniteswitch";
        (!recurrent && (trunk || !nextn_filter), recurrent)
    }
}

/// Which cache a [`CacheMemory`] is: the engine allocates one of each kind it needs and prints each
/// (`llama_kv_cache: size = ...` once per attention cache, `llama_memory_recurrent: size = ...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheKind {
    /// The attention cache of the full-context layers (the only one of a model without windowed layers; the
    /// engine's "non-SWA" cache of an iSWA model).
    Kv,
    /// The attention cache of the sliding-window (or chunked) layers: `swa_cells` cells per stream.
    KvSwa,
    /// The recurrent state of the recurrent (SSM, linear-attention) layers: one cell per sequence.
    Recurrent,
}

/// One cache, summed over the devices its layers are on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CacheMemory {
    pub kind: CacheKind,
    /// Layers the cache holds rows for.
    pub layers: u32,
    /// Cells per stream (one per sequence for the recurrent state).
    pub cells: u32,
    pub bytes: u64,
}

/// Adds `bytes` for one more layer of cache `kind` to `caches`.
fn count(
    caches: &mut Vec<CacheMemory>,
    kind: CacheKind,
    cells: u32,
    bytes: u64,
) -> Result<(), ParamError> {
    match caches.iter_mut().find(|c| c.kind == kind) {
        Some(c) => {
            c.layers += 1;
            c.bytes = add("cache", c.bytes, bytes)?;
        }
        None => caches.push(CacheMemory {
            kind,
            layers: 1,
            cells,
            bytes,
        }),
    }
    Ok(())
}

/// Adds the KV cache of every attention layer and the recurrent state of every recurrent layer to the device
/// holding the layer (the host with `-nkvo`), by the engine's per-architecture layer filters ([`caches`]), and
/// returns the caches one by one.
#[allow(clippy::too_many_arguments)]
pub(super) fn place(
    arch: &str,
    h: &Hparams,
    params: &Params,
    ctx: &Context,
    swa_cells: Option<u32>,
    heads: &Heads,
    placement: &Placement,
    mem: &mut [DeviceMemory],
) -> Result<Vec<CacheMemory>, ParamError> {
    let mut out = Vec::new();
    let device_of = |il: u32| {
        if params.no_kv_offload {
            0
        } else {
            placement.index(Slot::Block(il))
        }
    };
    let (n_embd_head_k, n_embd_head_v, head_kv) =
        (heads.n_embd_head_k, heads.n_embd_head_v, &heads.head_kv);
    let is_mla = h.key_length_mla.is_some() && h.value_length_mla.is_some();
    // Quantized cache rows must fill whole blocks: per head with flash attention (llama-context.cpp
    // L3851-3870), per row without (ggml_row_size).
    if ctx.flash_attn {
        cache_row("K", params.type_k, n_embd_head_k)?;
        if !is_mla {
            cache_row("V", params.type_v, n_embd_head_v)?;
        }
    }
    const KV: &str = "KV cache";
    let swa = |l: usize| h.sliding_window_layers.get(l).copied().unwrap_or(false);
    // Per-layer head sizes: a windowed layer uses `key_length_swa`/`value_length_swa` where the file has them
    // (llama-hparams.cpp `n_embd_head_k(il)`: `is_swa(il) ? n_embd_head_k_swa : n_embd_head_k_full`).
    let head_k = |l: usize| match h.key_length_swa {
        Some(k) if swa(l) => k,
        _ => n_embd_head_k,
    };
    let head_v = |l: usize| match h.value_length_swa {
        Some(v) if swa(l) => v,
        _ => n_embd_head_v,
    };
    // Without flash attention V is stored transposed and as wide as the widest layer's (n_embd_v_gqa_max).
    let v_gqa_max = (0..placement.n_layer as usize)
        .map(|l| head_v(l) * head_kv.get(l).unwrap_or(0))
        .max()
        .unwrap_or(0);
    for il in 0..placement.n_layer {
        let l = il as usize;
        if !caches(arch, h, il).0 {
            continue;
        }
        let kv_heads = head_kv.get(l).unwrap_or(0);
        if kv_heads == 0 {
            continue;
        }
        let (kind, cells) = match swa_cells {
            Some(c) if h.sliding_window_layers.get(l).copied().unwrap_or(false) => {
                (CacheKind::KvSwa, c)
            }
            _ => (CacheKind::Kv, ctx.n_ctx_seq),
        };
        let k = cache_row("K", params.type_k, mul(KV, head_k(l), kv_heads)?)?;
        // llama-kv-cache.cpp L209-234: an MLA cache holds the latent K only; without flash attention V is stored
        // transposed and every layer's V is as wide as the widest (n_embd_v_gqa_max).
        let v = if is_mla {
            0
        } else if ctx.flash_attn {
            cache_row("V", params.type_v, mul(KV, head_v(l), kv_heads)?)?
        } else {
            cache_row("V", params.type_v, v_gqa_max)?
        };
        let bytes = product(
            KV,
            &[add(KV, k, v)?, u64::from(cells), u64::from(ctx.n_stream)],
        )?;
        let m = &mut mem[device_of(il)];
        m.kv_cache_bytes = add(KV, m.kv_cache_bytes, bytes)?;
        count(&mut out, kind, cells, bytes)?;
    }
    if let Some(ssm) = &h.ssm {
        // llama-memory-recurrent: per recurrent layer, conv state n_embd_r and SSM state n_embd_s in f32, one
        // cell per sequence (llama-hparams.cpp n_embd_r / n_embd_s).
        const RS: &str = "recurrent state";
        let d_conv = ssm.conv_kernel.unwrap_or(0);
        let d_inner = ssm.inner_size.unwrap_or(0);
        let d_state = ssm.state_size.unwrap_or(0);
        let n_group = ssm.group_count.unwrap_or(0);
        // LFM2's short convolution keeps `l_cache - 1` rows of the embedding instead of Mamba's conv state.
        let r = match ssm.shortconv_cache {
            Some(l) => mul(RS, heads.n_embd, l.saturating_sub(1))?,
            None => mul(
                RS,
                d_conv.saturating_sub(1),
                add(RS, d_inner, product(RS, &[2, n_group, d_state])?)?,
            )?,
        };
        let s = mul(RS, d_state, d_inner)?;
        let bytes = product(RS, &[add(RS, r, s)?, F32, u64::from(ctx.n_seq)])?;
        for il in 0..placement.n_layer {
            if caches(arch, h, il).1 {
                let m = &mut mem[device_of(il)];
                m.kv_cache_bytes = add(RS, m.kv_cache_bytes, bytes)?;
                count(&mut out, CacheKind::Recurrent, ctx.n_seq, bytes)?;
            }
        }
    }
    out.sort_by_key(|c| c.kind);
    Ok(out)
}
