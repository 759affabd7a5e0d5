//! vLLM's speed model: what one rank of a tensor-parallel group reads and computes per token, and the
//! all-reduces a step spends over the group's link.

use crate::perf::{self, DeviceLoad, collective};
use optimizer_memory::vllm as mem;
use optimizer_model::Role;

use super::{PlanMemory, Point, Vllm};

impl Vllm<'_> {
    /// What one rank of the group reads and computes per token.
    pub(super) fn load(&self, p: &Point, m: &PlanMemory) -> DeviceLoad {
        let model = self.req.model;
        let h = &model.hparams;
        let tp = f64::from(p.tp);
        let experts = h.expert_count.unwrap_or(0);
        let share = if experts > 0 {
            h.expert_used_count.unwrap_or(experts) as f64 / experts as f64
        } else {
            1.0
        };
        let mut l = DeviceLoad {
            layers: f64::from(self.n_layer),
            ..DeviceLoad::default()
        };
        let total_bytes = model.tensor_bytes().max(1) as f64;
        // Spread the rank's exact weight bytes over the tensors in proportion to their file bytes.
        let scale = m.nk.weights.per_rank_bytes as f64 / total_bytes;
        for t in &model.tensors {
            if t.role == Role::QuantState {
                continue;
            }
            let output = t.role == Role::Output;
            let routed = if t.role == Role::Expert { share } else { 1.0 };
            let bytes = t.bytes as f64 * scale;
            // The token-embedding lookup reads one row: no matmul, negligible bytes.
            if t.role == Role::Embedding && !h.tied_embeddings {
                l.weight_bytes_resident += bytes;
                continue;
            }
            let params = if t.shape.len() >= 2 {
                t.parameters as f64 / tp * routed
            } else {
                0.0
            };
            l.add(t.dtype, output, bytes * routed, params, bytes);
        }
        if h.tied_embeddings {
            // The tied embedding is also the output projection.
            let rows = h.vocab_size.unwrap_or(0) as f64;
            let width = h.embedding_length.unwrap_or(0) as f64;
            l.output_params += rows * width / tp;
        }
        l.kv_bytes_per_cell = m.kv.page_bytes as f64 / f64::from(mem::DEFAULT_BLOCK_SIZE);
        let heads = h.head_count.as_ref().map_or(0, |x| x.max()) as f64;
        let k = h.key_length.unwrap_or(0) as f64;
        l.attn_flops_per_pair = 4.0 * heads / tp * k * f64::from(self.n_layer);
        l
    }

    /// Seconds of the all-reduces one forward step of `tokens` tokens spends on a TP group.
    pub(super) fn comm_seconds(&self, p: &Point, tokens: f64) -> f64 {
        if p.tp <= 1 {
            return 0.0;
        }
        let link = self.link(p);
        let hidden = self.req.model.hparams.embedding_length.unwrap_or(0);
        perf::collective::tp_step_seconds(
            &link,
            p.tp,
            self.n_layer,
            tokens.ceil() as u64,
            hidden,
            self.dtype.bytes(),
        )
    }

    /// The link the group all-reduces over: NVLink on boards that have it built in, else PCIe (3.0 x16 when
    /// neither the profile nor the probe says).
    fn link(&self, p: &Point) -> collective::Link {
        self.gpus[p.gpus[0]].peer_link()
    }
}
