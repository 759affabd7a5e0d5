//! The compute-buffer peak of a Mamba-2 layer (`llm_build_mamba_base::build_mamba2_layer`,
//! src/models/mamba-base.cpp), used by mamba2, falcon-h1, granitehybrid and nemotron_h: the widths its graph
//! allocates, read from the `ssm_in` tensor and the SSM hyper-parameters, and the live set at the layer's peak.
//!
//! Trade-off: the peak is the allocator's layout of the first Mamba-2 layer (ggml-alloc.c
//! `ggml_dyn_tallocr_alloc`, best fit among the free blocks, else the end), written as the stack it builds rather
//! than a simulation of the free list; later layers reuse the holes of earlier ones and can sit up to one
//! `2 n_group d_state` row per token higher (4 MiB of 137 on Mamba-Codestral at 4 sequences), which this misses.

use super::error::{ParamError, add, mul, product};
use super::{F32, Resolved};
use optimizer_model::ModelSpec;

/// What an overflow in this module is named.
const W: &str = "compute buffer";

/// The per-token widths of one Mamba-2 layer's graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Mamba2Widths {
    /// `d_in_proj = 2 d_inner + 2 n_group d_state + n_head`: the `ssm_in` projection `zxBCdt`, read from the
    /// tensor the loader asks for (`ssm_in` is `{n_embd, d_in_proj}`).
    d_in_proj: u64,
    /// `d_inner + 2 n_group d_state`: the convolution's channels (`xBC`).
    conv_dim: u64,
    d_inner: u64,
    d_conv: u64,
    d_state: u64,
}

impl Mamba2Widths {
    /// The widest Mamba-2 layer of `model`, `None` when it has none (no `ssm_in` tensor or no
    /// `ssm.group_count`, the key only Mamba-2 graphs read).
    pub(super) fn of(model: &ModelSpec) -> Result<Option<Self>, ParamError> {
        let Some(ssm) = &model.hparams.ssm else {
            return Ok(None);
        };
        let (Some(n_group), Some(d_inner), Some(d_state), Some(d_conv)) = (
            ssm.group_count,
            ssm.inner_size,
            ssm.state_size,
            ssm.conv_kernel,
        ) else {
            return Ok(None);
        };
        // Shapes are outermost first: `ssm_in` [d_in_proj, n_embd].
        let Some(d_in_proj) = model
            .tensors
            .iter()
            .filter(|t| t.name.ends_with("ssm_in.weight"))
            .filter_map(|t| t.shape.first().copied())
            .max()
        else {
            return Ok(None);
        };
        Ok(Some(Mamba2Widths {
            d_in_proj,
            conv_dim: add(W, d_inner, product(W, &[2, n_group, d_state])?)?,
            d_inner,
            d_conv,
            d_state,
        }))
    }

    /// Bytes live at the layer's peak for `r`'s worst-case micro-batch (`sched_reserve`: `n_tokens = min(n_ctx,
    /// n_ubatch)` split over `n_seqs = n_seq_max` sequences, llama-context.cpp L628), with `row` the bytes of one
    /// f32 `n_embd` row of the micro-batch. In graph order, as the allocator stacks them (measured with
    /// ggml-alloc's own trace, `AT_PRINTF`, on Mamba-Codestral: every offset below is the engine's):
    /// the embedding input and the looked-up rows (two rows), the conv states `build_rs` gathers (`{(d_conv - 1)
    /// conv_dim, n_seqs}`), the norm (one row), `zxBCdt`, `conv_x = concat(conv, transpose(xBC))` (`{d_conv - 1 +
    /// n_seq_tokens, conv_dim, n_seqs}`), `ssm_conv`'s output (`conv_dim` per token); then the SSM scan's
    /// result (ggml.c `ggml_ssm_scan`: `y` of `d_inner` per token plus the `d_state d_inner` state of every
    /// sequence) lands in `conv_x`'s freed hole when it fits, and `ggml_cont(z)` (`d_inner` per token) on top;
    /// when it does not fit, the scan lands on top and `cont(z)` in the hole.
    pub(super) fn live_bytes(&self, r: &Resolved, row: u64) -> Result<u64, ParamError> {
        let n_tokens = u64::from(r.n_ubatch.min(r.n_ctx));
        let n_seqs = u64::from(r.n_seq_max.max(1));
        let seq_tokens = n_tokens / n_seqs;
        let past = self.d_conv.saturating_sub(1);
        let per_token = |width: u64| product(W, &[width, n_tokens, F32]);
        let conv_states = product(W, &[past, self.conv_dim, n_seqs, F32])?;
        let conv_x = product(W, &[add(W, past, seq_tokens)?, self.conv_dim, n_seqs, F32])?;
        let scan = add(
            W,
            per_token(self.d_inner)?,
            product(W, &[self.d_state, self.d_inner, n_seqs, F32])?,
        )?;
        let top = if scan <= conv_x {
            per_token(self.d_inner)?
        } else {
            scan
        };
        [
            conv_states,
            row,
            per_token(self.d_in_proj)?,
            conv_x,
            per_token(self.conv_dim)?,
            top,
        ]
        .into_iter()
        .try_fold(mul(W, 2, row)?, |a, b| add(W, a, b))
    }
}
