//! Compute buffers: the peak of the engine's graph allocator per device, modelled as the largest live set
//! among the graph's phases (attention, feed-forward, output), plus the op-offload copy and the
//! pipeline-parallel input copies.
//!
//! The model is split in two so the activation-row constants can be fitted and held out: [`ComputeTerms`] holds
//! what one configuration contributes per unit of each constant (bytes of one activation row, one K row, one
//! feed-forward row, one input row) and the parts no constant weighs (logits, scores, mask, device roles);
//! [`ComputeTerms::buffers`] weighs them with a [`ComputeConstants`]. The estimate uses [`COMPUTE_CONSTANTS`].
//!
//! DeepSeek's multi-head latent attention (MLA, absorbed) is not sized with those rows but with the widths its
//! graph allocates, read from the `attn_k_b` and `attn_kv_a_mqa` tensor shapes ([`MlaWidths`]). Trade-off: that
//! attention peak is a stack the allocator builds by fragmentation, modelled as the residual row plus the three
//! latent-width tensors, not as a simulation of the allocator's free list.
//!
//! In a mixture of experts the logits sit on the last layer's stack (`compute_moe`), after exaone4's post-norm
//! feed-forward and Gemma 4's last layer (with flash attention) where their replays put the final state
//! (`compute_dense`), and above the kept final state where a NextN head keeps it ([`KEEPS_NEXTN_STATE`]); Mamba-2 layers have their own peak (`compute_ssm`). Trade-off:
//! these are the allocator's layouts read off its trace and written as stacks, so fragmentation a stack does not
//! describe (ERNIE without flash attention at 4 sequences, 6.5 % under) is not modelled.

use serde::Serialize;

use super::compute_dense::{DenseOutput, LastLayerInputs, PleOutput};
use super::compute_moe::MoeOutput;
use super::compute_ssm::Mamba2Widths;
use super::error::{ParamError, add, mul, product};
use super::kv::{Heads, row_size};
use super::layers::{Placement, Slot, slot};
use super::weights::{Kind, TensorKind};
use super::{F32, Machine, PIPELINE_COPIES, Params, Resolved};
use optimizer_model::{ModelSpec, PerLayer, Role};

/// Bytes of an f16 element (the attention mask under flash attention).
const F16: u64 = 2;
/// Bytes of an i32 input element (token ids, positions, output ids).
const I32: u64 = 4;
/// Bytes of an i64 input element (KV cache cell indices).
const I64: u64 = 8;
/// What an overflow in this module is named.
const W: &str = "compute buffer";

/// Dense architectures whose graph keeps the normed final hidden state as a graph output for a NextN/MTP draft
/// head and selects the output rows after it: `res->t_h_nextn = cur` after `build_norm(.., output_norm, ..)`, then
/// `if (!cparams.embeddings_nextn_masked && inp_out_ids) cur = ggml_get_rows(ctx0, cur, inp_out_ids)`
/// (src/models/nemotron-h.cpp L245-253, gemma4.cpp L414-418, qwen35.cpp L206-212; `embeddings_nextn_masked`
/// defaults to false, llama-context.cpp L120). `llm_graph_result::set_outputs` flags `t_h_nextn` as an output
/// (llama-graph.cpp L1377), which ggml-alloc never frees, so the state and its row selection (a full copy: the
/// reserve graph outputs every token) both sit under the logits. The mixture-of-experts architectures that do the
/// same are covered by `compute_moe`'s traced layouts; Gemma 4 with flash attention by the replay of its last
/// layer (`compute_dense::PleOutput`), which places the kept state where the allocator does.
const KEEPS_NEXTN_STATE: &[&str] = &["gemma4", "nemotron_h", "qwen35"];

/// Rows under the logits where the normed final state is kept ([`KEEPS_NEXTN_STATE`]): the embedding input (never
/// freed), the kept state and its row selection.
const NEXTN_ROWS: u64 = 3;

/// The Hadamard rotations a quantized KV cache applies (llama-kv-cache.cpp, constructor: `attn_rot_k` when the K
/// type is quantized and `n_embd_head_k() % 64 == 0`, `attn_rot_v` likewise for V), each a graph input per cache:
/// `build_input_k_rot` an f32 `nrot x nrot` matrix, `nrot` the largest power of two from 64 dividing the cache's
/// head size; `build_input_v_rot` an f32 64 x 64 one.
#[derive(Debug, Clone, Copy)]
struct Rotations {
    k: bool,
    v: bool,
}

impl Rotations {
    fn of(h: &optimizer_model::Hparams, params: &Params) -> Self {
        let by64 = |n: Option<u64>| n.is_some_and(|n| n > 0 && n % 64 == 0);
        Rotations {
            k: params.type_k.is_quantized() && by64(h.key_length),
            v: params.type_v.is_quantized() && by64(h.value_length.or(h.key_length)),
        }
    }

    /// Bytes of one cache's rotation inputs, `head` its K head size.
    fn bytes(&self, head: Option<u64>) -> Result<u64, ParamError> {
        let k = match head {
            Some(h) if self.k && h > 0 => {
                let nrot = 1u64 << h.trailing_zeros();
                product(W, &[nrot, nrot, F32])?
            }
            _ => 0,
        };
        let v = if self.v {
            product(W, &[64, 64, F32])?
        } else {
            0
        };
        add(W, k, v)
    }
}

/// Bytes under the logits for [`KEEPS_NEXTN_STATE`], with `row` one f32 `n_embd` row of the micro-batch and
/// `input_hole` the bytes of the inputs the last attention frees at the bottom of the buffer, right above the
/// embedding input. Read off the allocator's trace (`AT_PRINTF`) on NVIDIA-Nemotron-Nano-9B-v2: where the hole
/// is smaller than one row neither the state nor its selection fits it (ggml-alloc.c `ggml_dyn_tallocr_alloc`:
/// best fit, else the last block) and both stack above it (`-c 32768 -np 4`: 34.26 MiB under the logits, 3 rows
/// and the 8.01 MiB hole; `-c 4096`: 30.26); from one row the hole takes them (`-c 32768`: 26.25 MiB, 3 rows;
/// Gemma-4-E2B `-c 32768 -np 4` and `-c 4096 -ctk q8_0`, a 5 MiB hole of 1.7 rows: 9.00 MiB, 3 rows).
fn nextn_under_logits(row: u64, input_hole: u64) -> Result<u64, ParamError> {
    let rows = mul(W, NEXTN_ROWS, row)?;
    if input_hole < row {
        add(W, rows, input_hole)
    } else {
        Ok(rows)
    }
}

/// The engine offloads a matmul whose weights stay on the host to the first GPU once a micro-batch has at
/// least this many tokens (ggml-cuda `offload_op`: `min_batch_size = 32`), copying the weight into that GPU's
/// compute buffer.
const OP_OFFLOAD_MIN_BATCH: u64 = 32;

/// How many activations of each kind are live at the graph's peaks. These are the compute model's only fitted
/// numbers; everything else it uses is read from the model or the engine's rules.
///
/// Held out (`tests/it/compute_buffer_holdout.rs`; figures from
/// `cargo test --test compute_buffer_holdout -- --nocapture`): a grid search over 0..=8 for each constant on the
/// 440 CPU rows of Llama-2-7B, Mixtral-8x7B and Llama-3-8B (`tests/fixtures/llama-cpp/measured-cpu.json`) gives
/// [`COMPUTE_CONSTANTS`] as its only best tuple (224 of the 440 rows within the engine's 0.01 MiB print
/// rounding; moving any one constant by 1 loses at least 4 of them). On the 482 rows of the families the fit
/// never saw (Llama-3.2-1B, Qwen2-7B, Gemma-2-9B, Gemma-2-2B) the compute buffer is off by at most 88.0 MiB and
/// 2.43 % (mean 3.26 MiB, 0.38 %) and the whole estimate by at most 87.9 MiB and 0.98 % (mean 0.08 %); the
/// CUDA build's GPU compute buffer at full offload for those families by at most 60.0 MiB and 2.67 % (112
/// rows, mean 1.57 %).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct ComputeConstants {
    /// Rows of width `n_embd` live at the attention peak besides the scores, the K/V rows and the mask (layer
    /// input, norm, Q, attention output, residual). With [`Self::attn_kv_rows`] fitted on the pinned engine:
    /// 5.5 rows for Llama-3-8B (GQA 4) and 7 for Llama-2-7B (MHA) at every context and micro-batch measured.
    pub attn_embd_rows: u64,
    /// Rows of width `n_embd_k_gqa` live at the attention peak: K and V of the micro-batch. A quantized K cache
    /// takes the micro-batch's K straight into the quantizing copy, one row fewer (measured: -8 MiB at 512
    /// tokens, -32 MiB at 2048 for Llama-2-7B, fa off).
    pub attn_kv_rows: u64,
    /// Rows of width `n_embd` live at the feed-forward peak besides the wide activations: input, norm, output
    /// and residual; without flash attention one more (the transposed-V attention output), not counted here.
    pub ffn_embd_rows: u64,
    /// Activations of width `n_ff` (× experts used for a mixture of experts) live at the feed-forward peak: gate,
    /// up and their product. Fitted: Llama-2-7B (dense) and Mixtral-8x7B (MoE, 2 of 8 experts) alike.
    pub ffn_wide_activations: u64,
    /// Per-token i32 inputs alive through every block.
    pub input_rows_i32: u64,
    /// Rows of width `n_embd` live at the output peak besides the logits: the final hidden states and their
    /// norm.
    pub output_live_rows: u64,
}

/// The constants the estimate uses.
pub const COMPUTE_CONSTANTS: ComputeConstants = ComputeConstants {
    attn_embd_rows: 5,
    attn_kv_rows: 2,
    ffn_embd_rows: 4,
    ffn_wide_activations: 3,
    input_rows_i32: 5,
    output_live_rows: 2,
};

/// The compute buffers of one configuration before [`ComputeConstants`] weigh the activation rows: bytes per
/// unit of each constant, the parts no constant weighs, and which device holds what. Built by the estimate;
/// public (hidden) so the constants can be fitted without re-running the rest of the model.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq)]
pub struct ComputeTerms {
    /// One f32 activation row of `n_embd` per token of the worst-case micro-batch.
    row: u64,
    /// One f32 K row of the widest layer (`n_embd_k_gqa`) per token.
    kv_row: u64,
    /// One f32 feed-forward row (`n_ff`, × experts used) per token.
    wide_row: u64,
    /// One i32 per token.
    input_row: u64,
    /// f32 logits for every token of the micro-batch (llama.cpp reserves with `n_outputs = n_tokens`).
    logits: u64,
    /// f32 attention scores of every head, 0 with flash attention.
    scores: u64,
    /// The attention mask, an input that stays allocated through every block.
    mask: u64,
    flash_attn: bool,
    quantized_k: bool,
    /// Per device of the estimate (0 the host): whether it holds blocks.
    holds_blocks: Vec<bool>,
    /// The device holding the output layer.
    output_dev: usize,
    /// Whether any GPU is present (the host then keeps only the graph's inputs when the layers are elsewhere).
    gpus: bool,
    /// Bytes the first GPU's compute buffer adds for host matmul weights it computes with (op offload), 0 when
    /// the engine does not offload.
    op_offload: u64,
    /// Whether the scheduler keeps [`PIPELINE_COPIES`] copies of each split's inputs.
    pipeline_parallel: bool,
    /// Absorbed multi-head latent attention: the attention phase's live bytes besides the scores and the mask
    /// (see [`MlaWidths::live_per_token`]), which then replace the fitted attention rows.
    mla_live: Option<u64>,
    /// MLA without flash attention: the contiguous transposed copy of V, a view of the K-only cache.
    mla_v_cont: u64,
    /// Bytes under the logits in a mixture of experts ([`MoeOutput::under_logits`]) or where the final state is
    /// kept for a NextN head ([`nextn_under_logits`]), `None` where no rule applies.
    moe_under_logits: Option<u64>,
    /// The widest Mamba-2 layer's live bytes ([`Mamba2Widths::live_bytes`]), 0 without one.
    ssm_live: u64,
}

/// The per-token widths of DeepSeek's absorbed multi-head latent attention (src/models/deepseek2.cpp, graph
/// constructor, `is_mla` branch), read from the tensor shapes the loader asks for
/// (`llama_model_deepseek2::load_arch_tensors`): `attn_k_b` is `{n_embd_head_qk_nope, kv_lora_rank, n_head}` and
/// `attn_kv_a_mqa` is `{n_embd, kv_lora_rank + n_embd_head_qk_rope}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MlaWidths {
    n_head: u64,
    kv_lora_rank: u64,
    /// `kv_lora_rank + n_embd_head_qk_rope`: the width of one head of the absorbed query and of the K cache row.
    qk_width: u64,
}

impl MlaWidths {
    /// The widest absorbed attention among the model's layers, `None` without `attn_k_b` (no MLA).
    fn of(model: &ModelSpec) -> Option<Self> {
        let of_name = |suffix: &'static str| {
            model
                .tensors
                .iter()
                .filter(move |t| t.name.ends_with(suffix))
                .map(|t| t.shape.as_slice())
        };
        // Shapes are outermost first: `attn_k_b` [n_head, kv_lora_rank, qk_nope], `attn_kv_a_mqa` [kv_lora_rank
        // + qk_rope, n_embd].
        let (n_head, kv_lora_rank) = of_name("attn_k_b.weight")
            .filter_map(|s| Some((*s.first()?, *s.get(1)?)))
            .max()?;
        let qk_width = of_name("attn_kv_a_mqa.weight")
            .filter_map(|s| s.first().copied())
            .max()?;
        Some(MlaWidths {
            n_head,
            kv_lora_rank,
            qk_width,
        })
    }

    /// f32 elements per token live at the attention peak. The graph (deepseek2.cpp) builds `q_nope_absorbed =
    /// mul_mat(wk_b, q_nope)`, `{kv_lora_rank, n_head}` per token, then `Qcur = concat(q_nope_absorbed, q_pe)`,
    /// `{kv_lora_rank + rope, n_head}`, allocated while its inputs are live, so it stacks above them; the
    /// attention's output (`build_attn_mha`: `ggml_flash_attn_ext`, or `kq` times the latent V without flash
    /// attention) is `{kv_lora_rank, n_head}` per token before `wv_b` narrows it; the layer input (`inpSA`)
    /// stays live for the residual add. So: `n_embd + n_head * (kv_lora_rank + rope) + 2 * n_head *
    /// kv_lora_rank`. Against the pinned engine (tests/fixtures/llama-cpp/arch/measured-cpu.json): DeepSeek-V3
    /// 211,968 per token where the engine's attention phase is 206,848..208,896 (fa off and on, 512 and 2048
    /// tokens); DeepSeek-V2-Lite 27,648 where the engine's is 27,648 (`-c 32768 -np 4 -fa off`).
    fn live_per_token(&self, n_embd: u64) -> Result<u64, ParamError> {
        let absorbed_q = mul(W, self.n_head, self.qk_width)?;
        let latent = product(W, &[2, self.n_head, self.kv_lora_rank])?;
        add(W, add(W, n_embd, absorbed_q)?, latent)
    }
}

/// Peak compute bytes of the graph's phases.
#[derive(Debug, Clone, Copy)]
struct Phases {
    /// Logits and final hidden states: on the device holding the output layer.
    output: u64,
    /// The larger of attention and feed-forward: on every device holding blocks.
    layers: u64,
    /// What the host holds when every layer is elsewhere.
    host_inputs: u64,
}

impl ComputeTerms {
    /// The terms for `model` resolved as `r`, laid out as `placement` says.
    pub(super) fn new(
        model: &ModelSpec,
        params: &Params,
        machine: &Machine,
        r: &Resolved,
        heads: &Heads,
        n_vocab: u64,
        placement: &Placement,
    ) -> Result<Self, ParamError> {
        let h = &model.hparams;
        // sched_reserve: n_tokens = min(n_ctx, n_ubatch) (llama-context.cpp L629).
        let t = u64::from(r.n_ubatch.min(r.n_ctx));
        let n_embd_k_gqa = mul(W, heads.n_embd_head_k, heads.head_kv.max())?;
        // The scores span the cells of one stream; the micro-batch's tokens are spread over the streams.
        let full_kv = u64::from(r.n_ctx_seq);
        let any_full =
            h.sliding_window_layers.is_empty() || h.sliding_window_layers.iter().any(|s| !s);
        let n_kv = if any_full {
            full_kv
        } else {
            r.swa_cells.map_or(full_kv, u64::from)
        };
        // A model none of whose layers has a KV cache (Mamba, RWKV) builds no attention input: its graph
        // (src/models/mamba.cpp: build_inp_embd, build_rs_inp, build_inp_out_ids) has no KQ mask and no scores,
        // so nothing of its compute buffer grows with the context (the mask alone was 2 TiB at -c 2^31). Whether a
        // layer attends is the engine's per-architecture cache filter, not the presence of recurrent tensors:
        // falcon-h1's layers are all recurrent and all attend.
        let arch = model.architecture.as_str();
        let attends = h.recurrent_layers.is_empty()
            || (0..placement.n_layer).any(|il| super::kv::caches(arch, h, il).0);
        let n_kv = if attends { n_kv } else { 0 };
        let wide = match (h.expert_count, h.expert_used_count) {
            (Some(n), Some(k)) if n > 0 => mul(
                W,
                h.expert_feed_forward_length
                    .or(h.feed_forward_length.as_ref().map(PerLayer::max))
                    .unwrap_or(0),
                k,
            )?,
            _ => h.feed_forward_length.as_ref().map_or(0, PerLayer::max),
        };
        let n_dev = machine.gpus.len() + 1;
        let mut holds_blocks = vec![false; n_dev];
        for il in 0..placement.n_layer {
            holds_blocks[placement.index(Slot::Block(il))] = true;
        }
        // Host-resident matmul weights are copied to the first GPU for large batches; the largest one bounds
        // what that GPU's compute buffer must add.
        let largest_host_matmul = model
            .tensors
            .iter()
            // The placement first: it is an integer test, the kind a few string scans per tensor.
            .filter(|t| placement.device(slot(t)).is_none() && t.slot_kind() != TensorKind::Other)
            .filter(|t| !(t.role == Role::Expert && params.n_cpu_moe > 0))
            .map(|t| t.bytes)
            .max()
            .unwrap_or(0);
        let gpus = !machine.gpus.is_empty();
        let mla = MlaWidths::of(model);
        let mla_live = match mla {
            Some(m) => Some(product(W, &[m.live_per_token(heads.n_embd)?, t, F32])?),
            None => None,
        };
        // Without flash attention, V of the K-only MLA cache is a view of K that is not transposed, so
        // build_attn_mha copies it (`if (!v_trans) v = ggml_cont(ctx0, ggml_transpose(ctx0, v))`), in the cache's
        // type: `kv_lora_rank` rows of `n_kv` cells per stream. Measured: 4 MiB at -c 4096 and 32 MiB at
        // -c 32768 -np 4 for both DeepSeek shapes, the residue after the scores and the mask.
        let mla_v_cont = match mla {
            Some(m) if !r.flash_attn => product(
                W,
                &[
                    row_size(params.type_k, n_kv),
                    m.kv_lora_rank,
                    u64::from(r.n_stream),
                ],
            )?,
            _ => 0,
        };
        let row = product(W, &[heads.n_embd, t, F32])?;
        let ssm_live = match Mamba2Widths::of(model)? {
            Some(m) => m.live_bytes(r, row)?,
            None => 0,
        };
        let mask_elem = if r.flash_attn { F16 } else { F32 };
        let mask = product(W, &[n_kv, t, mask_elem])?;
        // The inputs the last attention frees, allocated first at the bottom of the buffer (the trace's
        // order): the positions and output ids (i32 per token), and per KV cache its K and V cell indices (i64
        // per token, llama-kv-cache.cpp `build_input_k_idxs`/`build_input_v_idxs`) and its KQ mask; a model with
        // both full and sliding-window layers has one of each (llama-graph.cpp `build_attn_inp_kv_iswa`).
        let (swa_mask, caches) = match r.swa_cells {
            Some(cells) if attends && any_full => {
                (product(W, &[u64::from(cells), t, mask_elem])?, 2)
            }
            _ => (0, u64::from(attends)),
        };
        let input_hole = [
            swa_mask,
            product(W, &[2, t, I32])?,
            product(W, &[2, caches, t, I64])?,
        ]
        .into_iter()
        .try_fold(mask, |a, b| add(W, a, b))?;
        // Gemma 4's last layer, replayed on the allocator's free list from the inputs still allocated at its
        // start: the ids, what the sliding-window cache and the full cache's indices left, the full mask.
        let ple_output = match PleOutput::of(model) {
            Some(p) if r.flash_attn && attends && any_full => {
                let rot = Rotations::of(h, params);
                let (full_rot, swa_rot) = (
                    rot.bytes(h.key_length)?,
                    match r.swa_cells {
                        Some(_) => rot.bytes(h.key_length_swa.or(h.key_length))?,
                        None => 0,
                    },
                );
                let inputs = LastLayerInputs {
                    ids: mul(W, t, I32)?,
                    swa_hole: [swa_rot, product(W, &[2, caches, t, I64])?]
                        .into_iter()
                        .try_fold(swa_mask, |a, b| add(W, a, b))?,
                    attn: add(W, mask, full_rot)?,
                };
                Some(p.under_logits(row, t, inputs, (rot.k, rot.v))?)
            }
            _ => None,
        };
        let moe_under_logits = match MoeOutput::of(model) {
            Some(m) => m.under_logits(row, t, input_hole)?,
            None if ple_output.is_some() => ple_output,
            None if KEEPS_NEXTN_STATE.contains(&arch) => Some(nextn_under_logits(row, input_hole)?),
            None => match DenseOutput::of(model) {
                Some(d) => Some(d.under_logits(row, t, input_hole)?),
                None => None,
            },
        };
        let op_offload = if gpus && t >= OP_OFFLOAD_MIN_BATCH && placement.gpu_layers > 0 {
            largest_host_matmul
        } else {
            0
        };
        Ok(ComputeTerms {
            row,
            kv_row: product(W, &[n_embd_k_gqa, t, F32])?,
            wide_row: product(W, &[wide, t, F32])?,
            input_row: mul(W, t, I32)?,
            logits: product(W, &[n_vocab, t, F32])?,
            scores: if r.flash_attn {
                0
            } else {
                product(W, &[n_kv, t, heads.head_count.max(), F32])?
            },
            mask,
            flash_attn: r.flash_attn,
            quantized_k: params.type_k.is_quantized(),
            holds_blocks,
            output_dev: placement.index(Slot::Output),
            gpus,
            op_offload,
            pipeline_parallel: r.pipeline_parallel,
            mla_live,
            mla_v_cont,
            ssm_live,
            moe_under_logits,
        })
    }

    /// Peak of the compute graph for one micro-batch, the largest of its phases (see the module doc). Output:
    /// logits and the live rows. Blocks: the attention (without flash attention the f32 scores of every head)
    /// or the feed-forward, whichever is larger, plus the mask and the inputs.
    fn phases(&self, c: &ComputeConstants) -> Result<Phases, ParamError> {
        let live = mul(W, c.output_live_rows, self.row)?;
        let under = self.moe_under_logits.map_or(live, |b| b.max(live));
        let output = add(W, self.logits, under)?;
        let inputs = mul(W, c.input_rows_i32, self.input_row)?;
        let kv_rows = if self.quantized_k {
            c.attn_kv_rows.saturating_sub(1)
        } else {
            c.attn_kv_rows
        };
        let attention = match self.mla_live {
            Some(live) => add(W, add(W, self.scores, live)?, self.mla_v_cont)?,
            None => [
                mul(W, c.attn_embd_rows, self.row)?,
                mul(W, kv_rows, self.kv_row)?,
            ]
            .into_iter()
            .try_fold(self.scores, |a, b| add(W, a, b))?,
        };
        let ffn = [
            mul(W, c.ffn_embd_rows, self.row)?,
            if self.flash_attn { 0 } else { self.row },
        ]
        .into_iter()
        .try_fold(mul(W, c.ffn_wide_activations, self.wide_row)?, |a, b| {
            add(W, a, b)
        })?;
        Ok(Phases {
            output,
            layers: add(
                W,
                add(W, attention.max(ffn).max(self.ssm_live), self.mask)?,
                inputs,
            )?,
            // With the layers elsewhere the host keeps the embedding rows it looked up, the mask and the inputs.
            host_inputs: add(W, add(W, self.row, self.mask)?, inputs)?,
        })
    }

    /// The compute buffer of every device of the estimate (0 the host, `i + 1` GPU i) with constants `c`: the
    /// largest phase the device runs, the op-offload copy on the first GPU, the pipeline input copies.
    ///
    /// Pipeline parallelism, from the pinned scheduler (ggml/src/ggml-backend.cpp): `ggml_backend_sched_new`
    /// sets `n_copies = GGML_SCHED_MAX_COPIES` ([`PIPELINE_COPIES`]) when parallel. In
    /// `ggml_backend_sched_split_graph`, pass 5 gives every split input that lives on another backend
    /// `n_copies` duplicates on the split's backend, and pass 6 gives every graph input leaf (`GGML_TENSOR_FLAG
    /// _INPUT`, all assigned to the last backend, the CPU, by `ggml_backend_sched_backend_id_from_cur`: "graph
    /// input") `n_copies` copies on the host, the original being one of them; both passes flag every copy input
    /// and output ("prevent ggml-alloc from overwriting the tensor"), and the graph copy lists them as leafs
    /// "so that they are allocated first". So, with `I` the inputs a device receives ([`Phases::host_inputs`]:
    /// the residual row, the mask and the i32 inputs):
    /// - the host holds `n_copies × I` (the model's one copy and `n_copies - 1` more), whether or not it runs
    ///   blocks;
    /// - every GPU that runs a split (blocks or the output layer) holds its `n_copies` copies through the whole
    ///   graph, the output phase included: `max(layers, output + I) + (n_copies - 1) × I`. The layer phase
    ///   already counts one copy of the inputs; the output phase, which without pipelining runs after the
    ///   inputs are freed, does not, hence the `+ I` there.
    pub fn buffers(&self, c: &ComputeConstants) -> Result<Vec<u64>, ParamError> {
        let p = self.phases(c)?;
        let pinned_inputs = if self.pipeline_parallel {
            p.host_inputs
        } else {
            0
        };
        let mut out: Vec<u64> = (0..self.holds_blocks.len())
            .map(|d| -> Result<u64, ParamError> {
                let mut peak = 0;
                if self.holds_blocks[d] {
                    peak = peak.max(p.layers);
                }
                if d == self.output_dev {
                    peak = peak.max(add(W, p.output, if d == 0 { 0 } else { pinned_inputs })?);
                }
                if d == 0 && self.gpus {
                    peak = peak.max(p.host_inputs);
                }
                Ok(peak)
            })
            .collect::<Result<_, _>>()?;
        if self.op_offload > 0 {
            out[1] = add(W, out[1], self.op_offload)?;
        }
        if self.pipeline_parallel {
            let copies = mul(W, PIPELINE_COPIES - 1, p.host_inputs)?;
            for (d, b) in out.iter_mut().enumerate() {
                let runs_split = d == 0 || self.holds_blocks[d] || d == self.output_dev;
                if runs_split {
                    *b = add(W, *b, copies)?;
                }
            }
        }
        Ok(out)
    }
}
