//! What sits under the logits after a dense post-norm feed-forward (exaone4: `build_ffn(ffn_inp, ..)` straight
//! on the residual, then `ffn_post_norm` and the residual add, src/models/exaone4.cpp L150-164): the last layer's
//! down projection (`ffn_out`) carries the final hidden state in place through the norms and the add, and the
//! logits, larger than every hole, go in the last free block right above the highest tensor still live
//! (ggml-alloc.c `ggml_dyn_tallocr_alloc`). Where `ffn_out` lands is the allocator's best fit after the gate, up
//! and activation were placed, so this module replays those few allocations on a free list with the allocator's
//! own rules ([`FreeList`]).
//!
//! Gemma 4's E-series ([`PleOutput`]) is replayed the same way over its whole last layer: a query-only
//! attention on a shared KV cache, the feed-forward and the per-layer-embedding block, whose input
//! (`inp_per_layer`, one `n_layer x n_embd_per_layer` row per token) stays live above the layer's working stack
//! until the last layer reads it.
//!
//! Trade-off: the free list each replay starts from is the layout the allocator's trace (`AT_PRINTF`) showed at
//! the last layer of EXAONE-4.0-1.2B and Gemma-4-E2B, not one simulated over the whole graph, so each is applied
//! to its architecture alone.

use super::F32;
use super::error::{ParamError, add, mul, product};
use optimizer_model::ModelSpec;

/// What an overflow in this module is named.
const W: &str = "compute buffer";

/// The architectures whose last feed-forward starts from the traced layout ([`DenseOutput::under_logits`]).
const POST_NORM_DENSE: &[&str] = &["exaone4"];

/// The architectures whose last layer, with per-layer embeddings and a shared KV cache, starts from the traced
/// layout of [`PleOutput::under_logits`].
const PLE_SHARED_KV: &[&str] = &["gemma4"];

/// The free blocks of one buffer, sorted by offset, the last one open-ended (ggml-alloc's last block "may grow a
/// chunk's size").
pub(super) struct FreeList {
    /// (offset, size) of every block but the last.
    blocks: Vec<(u64, u64)>,
    /// Offset of the last, open-ended block.
    last: u64,
}

impl FreeList {
    /// `ggml_dyn_tallocr_alloc`: the best fit among the blocks but the last (the smallest that fits, a later one
    /// on a tie: `block->size <= best_fit_size`), else the last block; the tensor takes the block's start.
    fn alloc(&mut self, size: u64) -> Result<u64, ParamError> {
        let best = self
            .blocks
            .iter()
            .enumerate()
            .filter(|(_, b)| b.1 >= size)
            .fold(None::<(usize, u64)>, |best, (i, b)| match best {
                Some((_, s)) if b.1 > s => best,
                _ => Some((i, b.1)),
            });
        match best {
            Some((i, _)) => {
                let (off, left) = self.blocks[i];
                if left == size {
                    self.blocks.remove(i);
                } else {
                    self.blocks[i] = (add(W, off, size)?, left - size);
                }
                Ok(off)
            }
            None => {
                let off = self.last;
                self.last = add(W, off, size)?;
                Ok(off)
            }
        }
    }

    /// `ggml_dyn_tallocr_free_bytes`: the block returns to the list, merged with the free blocks it touches.
    fn free(&mut self, off: u64, size: u64) -> Result<(), ParamError> {
        let end = add(W, off, size)?;
        let (mut start, mut stop) = (off, end);
        self.blocks.retain(|&(o, s)| {
            // Block ends are below `last`, itself a sum checked on the way in.
            let o_end = o.saturating_add(s);
            let touches = o_end == off || o == end;
            if touches {
                start = start.min(o);
                stop = stop.max(o_end);
            }
            !touches
        });
        if stop == self.last {
            self.last = start;
        } else {
            let at = self.blocks.partition_point(|b| b.0 < start);
            self.blocks.insert(at, (start, stop - start));
        }
        Ok(())
    }
}

/// The last layer's dense post-norm feed-forward, as the output phase sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct DenseOutput {
    /// Width of the feed-forward (`feed_forward_length` of the last layer).
    n_ff: u64,
}

impl DenseOutput {
    /// The model's last feed-forward when its architecture is in [`POST_NORM_DENSE`] and it has no experts.
    pub(super) fn of(model: &ModelSpec) -> Option<Self> {
        let h = &model.hparams;
        if !POST_NORM_DENSE.contains(&model.architecture.as_str())
            || h.expert_count.is_some_and(|n| n > 0)
        {
            return None;
        }
        let last = usize::try_from(h.block_count?.checked_sub(1)?).ok()?;
        Some(DenseOutput {
            n_ff: h.feed_forward_length.as_ref()?.get(last)?,
        })
    }

    /// Bytes under the logits: `row` one f32 `n_embd` row of the micro-batch of `n_tokens`, `input_hole` the
    /// inputs the last attention frees at the bottom of the buffer, right above the embedding input.
    ///
    /// The start, from the trace: above the embedding input a free block of the input hole, then the residual
    /// `ffn_inp`, then the last block. The last attention's output (one row) chose between the input hole and
    /// the two-row block the looked-up embeddings and the first query left right above it: the hole when it is
    /// the better fit (`row <= hole < 2 row`: `-c 4096`, 4.01 MiB against 4-MiB rows), and `ffn_inp` then took
    /// the embeddings' slot, so the free block is the hole; otherwise the attention output took that slot and
    /// `ffn_inp` the next, and the freed output joins the hole (`-c 32768`: 36.01 MiB). Then, in graph order:
    /// gate, up and activation (`n_ff` each), gate and up freed, `ffn_out` (one row), the activation and
    /// `ffn_inp` freed. Against the engine: 8.00 MiB under the logits at `-c 4096` and `-c 65536` (`ffn_out` in
    /// the freed gate), 32.00 at `-c 32768` and 24.01 at `-c 32768 -np 4` (in what the hole or the freed up
    /// left).
    pub(super) fn under_logits(
        &self,
        row: u64,
        n_tokens: u64,
        input_hole: u64,
    ) -> Result<u64, ParamError> {
        let two_rows = mul(W, 2, row)?;
        let hole = if (row..two_rows).contains(&input_hole) {
            input_hole
        } else {
            add(W, input_hole, row)?
        };
        let mut free = FreeList {
            blocks: vec![(0, hole)],
            last: add(W, hole, row)?,
        };
        let ffn_inp = hole;
        let wide = product(W, &[self.n_ff, n_tokens, F32])?;
        let gate = free.alloc(wide)?;
        let up = free.alloc(wide)?;
        let act = free.alloc(wide)?;
        free.free(gate, wide)?;
        free.free(up, wide)?;
        let out = free.alloc(row)?;
        free.free(act, wide)?;
        free.free(ffn_inp, row)?;
        // The embedding input below the hole, then everything up to the last block, where the logits go.
        add(W, row, free.last.max(add(W, out, row)?))
    }
}

/// The inputs still allocated when the last layer of [`PleOutput`] starts, at the bottom of the buffer above the
/// embedding input, in the order the graph builds them (llama-graph.cpp `build_inp_*`, the trace's order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LastLayerInputs {
    /// One i32 per token: the positions, and below them the freed per-layer token ids (`leaf_4` in the trace).
    pub ids: u64,
    /// Freed before the last layer: the sliding-window cache's inputs (cell indices, mask, rotations) and the
    /// full cache's cell indices, which only the layers owning their cache write with.
    pub swa_hole: u64,
    /// Freed by the last layer's attention: the full cache's KQ mask and its Hadamard rotations.
    pub attn: u64,
}

/// The last layer of a model with per-layer embeddings and a shared KV cache (src/models/gemma4.cpp), as the
/// output phase sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PleOutput {
    /// `n_head x n_embd_head_k` of the last layer: the query (`Qcur`) per token.
    q: u64,
    /// `n_head x n_embd_head_v`: the attention's output before `wo` per token.
    attn_v: u64,
    /// Width of the last feed-forward.
    n_ff: u64,
    /// `n_layer x n_embd_per_layer`: the per-layer input, from `per_layer_model_proj` (`{n_embd, n_layer
    /// n_embd_per_layer}`).
    ple: u64,
    /// `n_embd_per_layer`, from the last layer's `inp_gate` (`{n_embd, n_embd_per_layer}`).
    gate: u64,
}

impl PleOutput {
    /// The model's last layer when its architecture is in [`PLE_SHARED_KV`], it has a per-layer-embedding
    /// input, and its last layer is a full-attention layer reading an earlier layer's cache (it computes no K
    /// or V).
    pub(super) fn of(model: &ModelSpec) -> Option<Self> {
        let h = &model.hparams;
        if !PLE_SHARED_KV.contains(&model.architecture.as_str()) {
            return None;
        }
        let last = h.block_count?.checked_sub(1)?;
        let il = usize::try_from(last).ok()?;
        if h.kv_layers_from_start? > last || h.sliding_window_layers.get(il).copied()? {
            return None;
        }
        // Shapes are outermost first.
        let first = |name: &str| Some(*model.tensor(name)?.shape.first()?);
        let n_head = h.head_count.as_ref()?.get(il)?;
        Some(PleOutput {
            q: n_head.checked_mul(h.key_length?)?,
            attn_v: n_head.checked_mul(h.value_length.or(h.key_length)?)?,
            n_ff: h.feed_forward_length.as_ref()?.get(il)?,
            ple: first("per_layer_model_proj.weight")?,
            gate: first(&format!("blk.{last}.inp_gate.weight"))?,
        })
    }

    /// Bytes under the logits with flash attention (`None` without: its scores take the stack, and the caller
    /// keeps its rule), `row` one f32 `n_embd` row of the micro-batch of `n_tokens`.
    ///
    /// The start, from the trace (Gemma-4-E2B, every configuration with flash attention): the freed token ids,
    /// the embedding input, then `inputs` (freed ids, positions, the sliding-window hole, the full mask), the
    /// output ids, the previous layer's output (one row), a free block of `2 ple + 1` rows (the working stack
    /// the graph's first layer left below the per-layer input), the per-layer input (`ple`), then the last
    /// block. Then, in graph order: the attention norm, `Qcur`, its norm (roped in place), with a quantized
    /// cache the query's rotation (`ggml_mul_mat(k_rot, q)`), the flash attention, with a quantized V the
    /// output's rotation, `wo` (one row) and the previous output freed; the feed-forward (norm, gate, up,
    /// GeGLU, `ffn_out`, which then carries the final state in place through the post-norms, the per-layer
    /// add and the output norm, kept as `t_h_nextn`); the per-layer gate (`n_embd_per_layer`), the per-layer
    /// input freed, its projection (one row), the row selection `result_norm`, the output ids freed; and the
    /// logits, larger than every hole, in the last block. Against the engine (`-c 4096`: 69.52 MiB under the
    /// logits, `ffn_out` in the freed up; `-c 32768`: 39.02, in what the freed previous output and query left;
    /// `-c 131072`: 135.02, above the freed 128 MiB mask; `-c 4096` with a q8_0 cache: 9.00, the larger hole
    /// of the rotations takes it).
    pub(super) fn under_logits(
        &self,
        row: u64,
        n_tokens: u64,
        inputs: LastLayerInputs,
        rotations: (bool, bool),
    ) -> Result<u64, ParamError> {
        let per_token = |w: u64| product(W, &[w, n_tokens, F32]);
        let (q, attn_v, wide) = (
            per_token(self.q)?,
            per_token(self.attn_v)?,
            per_token(self.n_ff)?,
        );
        let (ple, gate) = (per_token(self.ple)?, per_token(self.gate)?);
        // Offsets of the traced start: [token ids][embd][ids][pos][swa hole][attn inputs][out ids][l_out][F][ple].
        let ids = inputs.ids;
        let embd = ids;
        let pos = [embd, row, ids]
            .into_iter()
            .try_fold(0, |a, b| add(W, a, b))?;
        let attn_in = [pos, ids, inputs.swa_hole]
            .into_iter()
            .try_fold(0, |a, b| add(W, a, b))?;
        let out_ids = add(W, attn_in, inputs.attn)?;
        let l_out = add(W, out_ids, ids)?;
        let stack = add(W, l_out, row)?;
        let ple_at = add(W, stack, add(W, mul(W, 2, ple)?, row)?)?;
        let mut free = FreeList {
            blocks: vec![
                (0, ids),
                (add(W, embd, row)?, ids),
                (add(W, pos, ids)?, inputs.swa_hole),
                (stack, ple_at - stack),
            ],
            last: add(W, ple_at, ple)?,
        };
        free.blocks.retain(|b| b.1 > 0);
        // Attention: query only, the K and V are an earlier layer's cache.
        let attn_norm = free.alloc(row)?;
        let q_cur = free.alloc(q)?;
        free.free(attn_norm, row)?;
        let q_normed = free.alloc(q)?;
        free.free(q_cur, q)?;
        free.free(pos, ids)?;
        let q_in = if rotations.0 {
            let rotated = free.alloc(q)?;
            free.free(q_normed, q)?;
            rotated
        } else {
            q_normed
        };
        let fa = free.alloc(attn_v)?;
        free.free(q_in, q)?;
        free.free(attn_in, inputs.attn)?;
        let out = if rotations.1 {
            let rotated = free.alloc(attn_v)?;
            free.free(fa, attn_v)?;
            rotated
        } else {
            fa
        };
        let attn_out = free.alloc(row)?;
        free.free(out, attn_v)?;
        free.free(l_out, row)?;
        // Feed-forward.
        let ffn_norm = free.alloc(row)?;
        let ffn_gate = free.alloc(wide)?;
        let ffn_up = free.alloc(wide)?;
        free.free(ffn_norm, row)?;
        let act = free.alloc(wide)?;
        free.free(ffn_gate, wide)?;
        free.free(ffn_up, wide)?;
        free.alloc(row)?;
        free.free(act, wide)?;
        free.free(attn_out, row)?;
        // Per-layer embedding, the row selection and the logits.
        let pl_gate = free.alloc(gate)?;
        free.free(ple_at, ple)?;
        let proj = free.alloc(row)?;
        free.free(pl_gate, gate)?;
        free.free(proj, row)?;
        free.alloc(row)?;
        free.free(out_ids, ids)?;
        Ok(free.last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gemma-4-E2B's last layer (`q` 8 heads of 512, `n_ff` 12288, 35 x 256 per-layer input) at the default
    /// 512-token micro-batch with flash attention: the logits' offset the engine's allocator trace (`AT_PRINTF`,
    /// `llama-fit-params -m gemma-4-e2b-it.gguf -ngl 0`) printed for each context, the full mask (f16, `n_ctx x
    /// 512`) the only input that changes with it; `-c 4096 -ctk q8_0 -ctv q8_0` adds both caches' rotations.
    #[test]
    fn ple_final_state_lands_where_the_allocator_trace_puts_it() {
        let e2b = PleOutput {
            q: 4096,
            attn_v: 4096,
            n_ff: 12288,
            ple: 8960,
            gate: 256,
        };
        let row = 1536 * 512 * 4;
        let swa = (1 << 20) + 4 * 512 * 8;
        let at = |n_ctx: u64, rot: (u64, u64), rotations| {
            let inputs = LastLayerInputs {
                ids: 512 * 4,
                swa_hole: swa + rot.1,
                attn: n_ctx * 512 * 2 + rot.0,
            };
            e2b.under_logits(row, 512, inputs, rotations).unwrap()
        };
        assert_eq!(at(4096, (0, 0), (false, false)), 72_900_608);
        assert_eq!(at(32768, (0, 0), (false, false)), 40_919_040);
        assert_eq!(at(131072, (0, 0), (false, false)), 141_582_336);
        let rot = (512 * 512 * 4 + 64 * 64 * 4, 256 * 256 * 4 + 64 * 64 * 4);
        assert_eq!(at(4096, rot, (true, true)), 9_439_232);
    }
}
