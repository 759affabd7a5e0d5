//! What sits under the logits after a dense post-norm feed-forward (exaone4: `build_ffn(ffn_inp, ..)` straight
//! on the residual, then `ffn_post_norm` and the residual add, src/models/exaone4.cpp L150-164): the last layer's
//! down projection (`ffn_out`) carries the final hidden state in place through the norms and the add, and the
//! logits, larger than every hole, go in the last free block right above the highest tensor still live
//! (ggml-alloc.c `ggml_dyn_tallocr_alloc`). Where `ffn_out` lands is the allocator's best fit after the gate, up
//! and activation were placed, so this module replays those few allocations on a free list with the allocator's
//! own rules ([`FreeList`]).
//!
//! Trade-off: the free list the replay starts from is the layout the allocator's trace (`AT_PRINTF`) showed at
//! the last feed-forward of EXAONE-4.0-1.2B, not one simulated over the whole graph, so it is applied to exaone4
//! alone.

use super::F32;
use super::error::{ParamError, add, mul, product};
use optimizer_model::ModelSpec;

/// What an overflow in this module is named.
const W: &str = "compute buffer";

/// The architectures whose last feed-forward starts from the traced layout ([`DenseOutput::under_logits`]).
const POST_NORM_DENSE: &[&str] = &["exaone4"];

/// The free blocks of one buffer, sorted by offset, the last one open-ended (ggml-alloc's last block "may grow a
/// chunk's size").
struct FreeList {
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
