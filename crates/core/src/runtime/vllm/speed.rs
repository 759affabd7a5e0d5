//! vLLM's speed model: what one rank of a tensor-parallel group reads and computes per token, and the
//! all-reduces a step spends over the group's link.

use crate::emit::MemoryDevice;
use crate::perf::{self, DeviceLoad, Shape, collective};
use crate::runtime::Eval;
use optimizer_memory::vllm as mem;
use optimizer_model::{ModelSpec, Role};

use super::{EAGER_LAUNCH_PER_LAYER_S, PlanMemory, Point, Vllm};

/// A pipeline's decode and prefill, as [`Vllm::pipeline_speed`] prices them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct PipelineSpeed {
    /// Batches in flight and sequences in each.
    pub micro_batches: u32,
    pub per_batch: u32,
    /// One stage's decode step over one batch, and one hand-off between nodes, seconds.
    pub stage_s: f64,
    pub send_s: f64,
    /// A token's cycle for every sequence, and the share of it a stage idles.
    pub cycle_s: f64,
    pub bubble: f64,
    /// One stage's prefill of the prompt and its hand-off, seconds.
    pub prefill_stage_s: f64,
    pub prefill_send_s: f64,
}

impl Vllm<'_> {
    /// What one rank of the group reads and computes per token; a step of `moe_tokens` tokens reads the routed
    /// experts they activate ([`super::expert::activated_share`]; 1: the share one token routes to).
    pub(super) fn load(
        &self,
        model: &ModelSpec,
        p: &Point,
        m: &PlanMemory,
        moe_tokens: f64,
    ) -> DeviceLoad {
        let h = &model.hparams;
        let n_layer = h
            .block_count
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(self.n_layer);
        let tp = f64::from(p.tp);
        let experts = h.expert_count.unwrap_or(0);
        let used = h.expert_used_count.unwrap_or(experts);
        let share = if experts == 0 {
            1.0
        } else if moe_tokens <= 1.0 {
            used as f64 / experts as f64
        } else {
            super::expert::activated_share(used, experts, moe_tokens)
        };
        let mut l = DeviceLoad {
            layers: f64::from(n_layer),
            ..DeviceLoad::default()
        };
        let total_bytes = model.tensor_bytes().max(1) as f64;
        // Spread the rank's exact weight bytes over the tensors in proportion to their file bytes; under expert
        // parallel, each routed tensor by the share of the experts the rank holds, the rest by what is left.
        let mut scale = m.nk.weights.per_rank_bytes as f64 / total_bytes;
        let mut routed_scale = scale;
        if p.ep && experts > 0 {
            let routed_file: u64 = model
                .tensors
                .iter()
                .filter(|t| super::expert::is_routed_expert(&t.name))
                .map(|t| t.bytes)
                .sum();
            routed_scale =
                super::expert::experts_per_rank(experts, p.tp * p.dp) as f64 / experts as f64;
            let rest = (total_bytes - routed_file as f64).max(1.0);
            scale = (m.nk.weights.per_rank_bytes as f64 - routed_file as f64 * routed_scale)
                .max(0.0)
                / rest;
        }
        for t in &model.tensors {
            if t.role == Role::QuantState {
                continue;
            }
            let output = t.role == Role::Output;
            let routed = if t.role == Role::Expert { share } else { 1.0 };
            let bytes = t.bytes as f64
                * if p.ep && super::expert::is_routed_expert(&t.name) {
                    routed_scale
                } else {
                    scale
                };
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
        l.attn_flops_per_pair = 4.0 * heads / tp * k * f64::from(n_layer);
        l
    }

    /// Seconds of the collectives one forward step of `tokens` tokens (per engine) spends: the tensor-parallel
    /// group's all-reduces (over the fabric when the group spans nodes), and under expert parallel each MoE
    /// layer's dispatch and combine over the data-parallel group ([`collective::ep_layer_seconds`]).
    pub(super) fn comm_seconds(&self, p: &Point, tokens: f64) -> f64 {
        let hidden = self.req.model.hparams.embedding_length.unwrap_or(0);
        let tokens = tokens.ceil() as u64;
        let dt = self.dtype.bytes();
        let mut s = 0.0;
        if p.tp > 1 {
            let link = match self.fabric {
                Some(f) if p.tp > self.gpus.len() as u32 => collective::fabric_collective_link(&f),
                _ => self.link(p),
            };
            s += perf::collective::tp_step_seconds(&link, p.tp, self.n_layer, tokens, hidden, dt);
        }
        if p.ep
            && p.dp > 1
            && let Some(f) = self.fabric
        {
            let h = &self.req.model.hparams;
            let moe_layers = h.expert_layers.iter().filter(|&&e| e).count() as f64;
            let experts = h.expert_count.unwrap_or(0);
            let link = collective::fabric_collective_link(&f);
            s +=
                moe_layers * collective::ep_layer_seconds(&link, p.dp, tokens, hidden, experts, dt);
        }
        s
    }

    /// The link the group all-reduces over: NVLink on boards that have it built in, else PCIe (3.0 x16 when
    /// neither the profile nor the probe says).
    fn link(&self, p: &Point) -> collective::Link {
        self.gpus[p.gpus[0]].peer_link()
    }
}

impl Vllm<'_> {
    /// The point of a layout across nodes (`base` gives the KV type and CUDA graphs): the node's GPUs, the
    /// workload's sequences over the replica (per engine under expert parallel).
    pub(super) fn layout_point(&self, layout: &super::expert::Layout, base: Point) -> Point {
        use super::expert::Layout;
        let n = self.gpus.len();
        let seqs = self.concurrency.max(1);
        let (tp, pp, dp, nnodes, ep) = match *layout {
            Layout::Pipeline { tp, pp } => (tp, pp, 1, pp, false),
            Layout::TensorAcross { tp, nnodes } => (tp, 1, 1, nnodes, false),
            Layout::Expert { tp, dp, nnodes } => (tp, 1, dp, nnodes, true),
        };
        Point {
            tp,
            pp,
            nnodes,
            dp,
            ep,
            gpus: (0..n).collect(),
            replicas: 1,
            max_num_seqs: seqs.div_ceil(dp).max(1),
            ..base
        }
    }

    /// The most nodes a pipeline of this plan may span (1 on one node).
    pub(super) fn max_pp(&self) -> u32 {
        self.pipelines.iter().map(|(pp, _)| *pp).max().unwrap_or(1)
    }

    /// The stage that sets a pipeline's pace: the one holding the most weight bytes (the LM head's or the
    /// embedding's side), and its memory at `len`.
    fn pace_stage(&self, p: &Point, len: u32) -> Option<(&ModelSpec, PlanMemory)> {
        let s = self.stages(p.pp).iter().max_by_key(|s| s.tensor_bytes())?;
        Some((s, self.memory_of(s, p, len).ok()?))
    }

    /// A pipeline's speed: `max_num_seqs` split into up to `pp` batches in flight (vLLM's batch queue), each
    /// stage's step the roofline of its own layers plus its tensor-parallel all-reduces, each hand-off the
    /// ranks' slices over the fabric ([`collective::pp_send_seconds`]), the cycle and bubble from
    /// [`collective::pipeline_cycle`].
    pub(super) fn pipeline_speed(&self, p: &Point, len: u32) -> Option<PipelineSpeed> {
        let (stage, sm) = self.pace_stage(p, len)?;
        let link = self.fabric?;
        let w = self.workload();
        let n = p.max_num_seqs.max(1);
        let micro_batches = n.min(p.pp.max(1));
        let per_batch = n.div_ceil(micro_batches);
        let load = self.load(stage, p, &sm, f64::from(per_batch));
        let gperf = self.gpus[p.gpus[0]].perf();
        let shape = Shape {
            prompt_tokens: w.prompt_tokens,
            generation_tokens: w.generation_tokens,
            concurrency: u64::from(per_batch),
            ubatch: u64::from(self.max_num_batched_tokens.max(per_batch)),
        };
        let pred = perf::predict(&[(gperf, load)], shape);
        let layers = stage
            .hparams
            .block_count
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0);
        let hidden = self.req.model.hparams.embedding_length.unwrap_or(0);
        let dt = self.dtype.bytes();
        let peer = self.gpus[p.gpus[0]].peer_link();
        let ar = |tokens: u64| collective::tp_step_seconds(&peer, p.tp, layers, tokens, hidden, dt);
        let mut stage_s = pred.time_per_output_token_ms / 1e3 + ar(u64::from(per_batch));
        if p.enforce_eager {
            stage_s += EAGER_LAUNCH_PER_LAYER_S * f64::from(layers);
        }
        let send_s = collective::pp_send_seconds(&link, p.tp, u64::from(per_batch), hidden, dt);
        let (cycle_s, bubble) = collective::pipeline_cycle(p.pp, micro_batches, stage_s, send_s);
        let prompt = w.prompt_tokens.max(1);
        let prefill_stage_s =
            prompt as f64 / pred.prefill_tokens_per_s.max(f64::MIN_POSITIVE) + ar(prompt);
        let prefill_send_s = collective::pp_send_seconds(&link, p.tp, prompt, hidden, dt);
        Some(PipelineSpeed {
            micro_batches,
            per_batch,
            stage_s,
            send_s,
            cycle_s,
            bubble,
            prefill_stage_s,
            prefill_send_s,
        })
    }

    /// [`crate::runtime::Runtime::evaluate`] of a point spanning nodes: the tightest stage's memory, the
    /// pipeline's speed.
    pub(super) fn evaluate_pipeline(
        &self,
        p: &Point,
        len: u32,
        m: &PlanMemory,
        memory: Vec<MemoryDevice>,
        total_bytes: u64,
    ) -> Result<Eval, crate::runtime::PlanError> {
        let s = self.pipeline_speed(p, len).ok_or_else(|| {
            crate::runtime::PlanError::Model(format!("no pipeline of {} stages was prepared", p.pp))
        })?;
        let (stage, sm) = self.pace_stage(p, len).expect("priced above");
        let gperf = self.gpus[p.gpus[0]].perf();
        let load = self.load(stage, p, &sm, f64::from(s.per_batch));
        let pp = f64::from(p.pp);
        let prompt = self.workload().prompt_tokens.max(1) as f64;
        let ttft = pp * s.prefill_stage_s + (pp - 1.0) * s.prefill_send_s + s.cycle_s;
        let prediction = perf::Prediction {
            prefill_tokens_per_s: prompt / s.prefill_stage_s.max(f64::MIN_POSITIVE),
            decode_tokens_per_s: f64::from(p.max_num_seqs.max(1))
                / s.cycle_s.max(f64::MIN_POSITIVE),
            time_to_first_token_ms: ttft * 1e3,
            time_per_output_token_ms: s.cycle_s * 1e3,
        };
        Ok(Eval {
            memory,
            total_bytes,
            overflow: m.overflow,
            ladder_overflow: m.overflow,
            prediction,
            knee: perf::decode_knee(&gperf, &load),
            notes: Vec::new(),
        })
    }
}
