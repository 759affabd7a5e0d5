//! What sits under the logits in a mixture of experts: the logits are the graph's largest tensor, larger than
//! every hole, so ggml-alloc puts them in the last free block (ggml-alloc.c `ggml_dyn_tallocr_alloc`: best fit
//! among the free blocks but the last, else the last), right above the highest tensor still live, and the
//! output phase is the logits plus that offset. Which holes the last layer's tensors took decides it; read off
//! the allocator's own trace (`AT_PRINTF`) on gpt-oss-20b, GLM-4.5-Air, Qwen3-Next-80B and ERNIE-4.5-21B.
//!
//! The hole that matters is the one the graph's inputs leave at the bottom of the buffer when the last
//! attention frees them ([`MoeOutput::under_logits`]'s `input_hole`: the KQ masks, positions and cache indices,
//! allocated first, right above the embedding input that is never freed). Trade-off: the rules are the
//! layouts the trace shows for each size of that hole against one activation row, written as stacks, not a
//! simulation of the free list over the whole graph, so a layout no traced model reached is not modelled.

use super::F32;
use super::error::{ParamError, add, mul, product};
use optimizer_model::ModelSpec;

/// What an overflow in this module is named.
const W: &str = "compute buffer";

/// Rows under the logits besides the `k` routed outputs when they stack on the last layer: the embedding input,
/// the last layer's residual (`ffn_inp`) and its norm below the routed outputs, and their sum above them.
const STACK_ROWS: u64 = 4;

/// Rows under the logits when the freed inputs' hole takes the last layer's residual and norm: the embedding
/// input, the final hidden state and its norm.
const COMPACT_ROWS: u64 = 3;

/// The last layer's mixture of experts, as the output phase sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct MoeOutput {
    /// Experts used per token.
    k: u64,
    /// Width of one expert's feed-forward (`expert_feed_forward_length`).
    n_ff_exp: u64,
    n_embd: u64,
    /// Whether the layer has a shared expert (`ffn_up_shexp`), which keeps the routed sum live across it.
    shared: bool,
}

impl MoeOutput {
    /// The model's mixture of experts, `None` for a dense model.
    pub(super) fn of(model: &ModelSpec) -> Option<Self> {
        let h = &model.hparams;
        Some(MoeOutput {
            k: h.expert_used_count.filter(|&k| k > 0)?,
            n_ff_exp: h.expert_feed_forward_length?,
            n_embd: h.embedding_length?,
            shared: model
                .tensors
                .iter()
                .any(|t| t.name.ends_with("ffn_up_shexp.weight")),
        })
    }

    /// Whether the routed experts' outputs and their sum, `(k + 1) n_embd` per token, fit the hole their gate
    /// and up activations (`k n_ff_exp` each) leave when freed.
    fn outputs_fit_gate_up(&self) -> bool {
        2u128 * u128::from(self.k) * u128::from(self.n_ff_exp)
            >= (u128::from(self.k) + 1) * u128::from(self.n_embd)
    }

    /// Bytes under the logits, `None` where no rule applies (the caller keeps its fitted rows): `row` is one f32
    /// `n_embd` row of the micro-batch of `n_tokens`, `input_hole` the bytes of the inputs the last attention
    /// frees (every KQ mask and the i32 inputs).
    ///
    /// - Shared expert, outputs fit the gate/up hole (src/models/ernie4-5-moe.cpp, deepseek2.cpp: `cur =
    ///   ggml_add(ctx0, moe_out, ffn_shexp)`): the `k` routed outputs land in that hole above the residual and
    ///   norm, their sum above them, and the final hidden state is computed in place on it: `k + 4` rows
    ///   (ERNIE-4.5-21B-A3B: logits at 9 rows + the mask and inputs, `-c 4096`; DeepSeek-V2-Lite: 10.06 rows at
    ///   every context).
    /// - Shared expert, outputs too large (glm4-moe.cpp, qwen3next.cpp): the routed outputs go on top and are
    ///   freed before the logits; their sum lands in the gate/up hole on the residual and norm: 4 rows, plus
    ///   the freed inputs below them when these are smaller than one row (GLM-4.5-Air `-c 4096`: logits at
    ///   36.01 MiB, 4 rows and the 4 MiB mask). A hole of two rows or more takes the residual and norm,
    ///   leaving 3 rows (GLM `-c 32768`: 24.00 MiB), unless it holds the norm, gate and up but not the
    ///   activation (`row + 2 wide <= hole < row + 3 wide`, `wide = k n_ff_exp` per token): the activation
    ///   then goes above the hole, and the sum and final norm into its hole once freed (Qwen3-Next `-c
    ///   32768`: 44.01 MiB, 3 rows and the 32 MiB mask).
    /// - No shared expert, outputs fit (gpt-oss, openai-moe.cpp): below one row the hole takes nothing, and
    ///   the sum and final norm fill the freed norm's and residual's slots above it: 3 rows and the hole (`-c
    ///   4096`: 21.65 MiB); from one row to two it takes the residual, and the norm, the `k` routed outputs
    ///   (in the freed norm and gate) and their sum stack above it: `k + 2` rows and the hole (`-c 32768 -np
    ///   4`: 42.52 MiB); from two rows it takes the residual and norm: 3 rows (`-c 32768`: 16.88 MiB).
    /// - No shared expert, outputs too large (qwen3moe, minimax-m2): `None`.
    pub(super) fn under_logits(
        &self,
        row: u64,
        n_tokens: u64,
        input_hole: u64,
    ) -> Result<Option<u64>, ParamError> {
        let rows = |n: u64| mul(W, n, row);
        let fit = self.outputs_fit_gate_up();
        let two_rows = rows(2)?;
        let under = match (self.shared, fit) {
            (true, true) => rows(self.k.saturating_add(STACK_ROWS))?,
            (true, false) => {
                let wide = product(W, &[self.k, self.n_ff_exp, n_tokens, F32])?;
                let holds_gate_up = add(W, row, mul(W, 2, wide)?)?;
                let holds_act = add(W, holds_gate_up, wide)?;
                if input_hole < row {
                    add(W, rows(STACK_ROWS)?, input_hole)?
                } else if (holds_gate_up..holds_act).contains(&input_hole) {
                    add(W, rows(COMPACT_ROWS)?, input_hole)?
                } else if input_hole < two_rows {
                    rows(STACK_ROWS)?
                } else {
                    rows(COMPACT_ROWS)?
                }
            }
            (false, true) => {
                if input_hole < row {
                    add(W, rows(COMPACT_ROWS)?, input_hole)?
                } else if input_hole < two_rows {
                    add(W, rows(self.k.saturating_add(2))?, input_hole)?
                } else {
                    rows(COMPACT_ROWS)?
                }
            }
            (false, false) => return Ok(None),
        };
        Ok(Some(under))
    }
}
