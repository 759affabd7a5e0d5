//! The provenance of a vLLM plan spanning nodes without a pipeline (tensor parallel across nodes, or expert
//! parallel with data-parallel engines), and, for every plan spanning nodes, how each layout of the cluster
//! ([`super::expert::layouts`]) fared under the speed model, so the document says why the others lost.

use std::collections::BTreeMap;

use crate::emit::{Provenance, Source};
use crate::runtime::{Candidate, Runtime};

use super::{Point, Vllm, expert};

impl Vllm<'_> {
    /// Why the layout, its memory per GPU, its collectives per step and the launcher.
    pub(super) fn across_provenance(
        &self,
        c: &Candidate<Point>,
        prov: &mut BTreeMap<String, Provenance>,
    ) {
        use crate::units::gib;
        let p = &c.point;
        let mut put = |k: &str, detail: String| {
            prov.insert(
                k.to_string(),
                Provenance {
                    source: Source::Computed,
                    detail,
                },
            );
        };
        let Ok(m) = self.memory(p, c.size) else {
            return;
        };
        let n = f64::from(p.max_num_seqs.max(1));
        let comm_ms = self.comm_seconds(p, n) * 1e3;
        let link = self.fabric.map_or(String::new(), |l| {
            format!("{:.1} GB/s per rank", l.bytes_per_s / 1e9)
        });
        let step_ms = c.eval.prediction.time_per_output_token_ms;
        if self.req.overrides.ray {
            put(
                "settings.ray_backend",
                format!(
                    "asked for (--distributed-executor-backend ray): the replica's {} nodes form a Ray cluster (ray start --head on node 0, ray start --address on the others) and one vllm serve on node 0 {} (vLLM 0.33 refuses --nnodes with Ray: vllm/config/parallel.py, vllm/engine/arg_utils.py), waiting up to 30 minutes for the workers' placement group (vllm/v1/executor/ray_utils.py PG_WAIT_TIMEOUT)",
                    p.nnodes,
                    if p.ep {
                        "places the data-parallel engines through --data-parallel-backend ray, --data-parallel-size-local of them on node 0 and as many on each other node (VLLM_RAY_DP_PACK_STRATEGY strict, vllm/v1/engine/utils.py)"
                    } else {
                        "places every worker through --distributed-executor-backend ray"
                    }
                ),
            );
        }
        if p.ep {
            let h = &self.req.model.hparams;
            let experts = h.expert_count.unwrap_or(0);
            let ep = p.tp * p.dp;
            put(
                "settings.enable_expert_parallel",
                format!(
                    "no single node holds the model, and its {experts} routed experts spread whole over expert parallel {ep} (tensor parallel {} x data parallel {}: vllm/model_executor/layers/fused_moe/config.py FusedMoEParallelConfig.make): {} experts on the fullest GPU (fused_moe/expert_map_manager.py determine_expert_map), {:.2} GiB of weights per GPU with attention, shared experts, dense layers, embedding and LM head at tensor parallel {} per engine; each MoE layer all-gathers the {} engines' hidden states and router logits over the fabric at {link} and reduce-scatters the output (vLLM 0.33's default all2all_backend allgather_reducescatter, vllm/distributed/device_communicators/all2all.py); with {} sequences per engine a decode step is {step_ms:.2} ms, {comm_ms:.2} ms of it collectives",
                    p.tp,
                    p.dp,
                    expert::experts_per_rank(experts, ep),
                    gib(m.nk.weights.per_rank_bytes),
                    p.tp,
                    p.dp,
                    p.max_num_seqs,
                ),
            );
            put(
                "settings.data_parallel_size",
                format!(
                    "{} engines of tensor parallel {} over {} nodes ({} per node, --data-parallel-size-local), each with its own KV cache and up to --max-num-seqs {} sequences; vLLM 0.33 infers each node's first engine from --node-rank (vllm/engine/arg_utils.py create_engine_config), so no --data-parallel-start-rank is written: on the API node it would switch vLLM to hybrid load balancing",
                    p.dp,
                    p.tp,
                    p.nnodes,
                    p.dp / p.nnodes.max(1),
                    p.max_num_seqs
                ),
            );
        } else {
            put(
                "settings.tensor_parallel_size.across_nodes",
                format!(
                    "one tensor-parallel group of {} GPUs over {} nodes: {:.2} GiB of weights per GPU; its two all-reduces per layer run NCCL's ring over the fabric at {link} (vLLM's custom all-reduce takes at most 8 ranks), {comm_ms:.2} ms of a {step_ms:.2} ms decode step",
                    p.tp,
                    p.nnodes,
                    gib(m.nk.weights.per_rank_bytes),
                ),
            );
        }
        put(
            "topology",
            format!(
                "{} nodes per replica with vLLM 0.33's multiprocessing launcher (--nnodes {} --node-rank R --master-addr NODE0 --master-port {}; ranks past 0 --headless: vllm/engine/arg_utils.py, vllm/entrypoints/cli/serve.py run_headless), {} replica(s) over the cluster's {} nodes",
                p.nnodes,
                p.nnodes,
                super::multinode::MASTER_PORT,
                self.req.fleet.nodes / p.nnodes.max(1),
                self.req.fleet.nodes
            ),
        );
    }

    /// Every layout of the cluster at the chosen KV type, CUDA graphs and length: fits or not, and its predicted
    /// speed, the chosen one marked (the planner took the best score under the workload's objective).
    pub(super) fn layout_alternatives(
        &self,
        c: &Candidate<Point>,
        prov: &mut BTreeMap<String, Provenance>,
    ) {
        use crate::units::gib;
        let base = Point {
            tp: 1,
            pp: 1,
            nnodes: 1,
            dp: 1,
            ep: false,
            ..c.point.clone()
        };
        let rows: Vec<String> = self
            .layouts
            .iter()
            .map(|l| {
                let p = self.choose_seqs(&self.layout_point(l, base.clone()), c.size).0;
                let label = self.label(&Candidate {
                    point: p.clone(),
                    size: c.size,
                    score: 0.0,
                    eval: c.eval.clone(),
                });
                let chosen = p.tp == c.point.tp
                    && p.pp == c.point.pp
                    && p.dp == c.point.dp
                    && p.ep == c.point.ep;
                match self.evaluate(&p, c.size) {
                    Ok(e) if e.fits() => format!(
                        "{label}{}: decode {:.0} tokens/s, {:.2} ms per output token, {:.0} ms to the first ({})",
                        if chosen { " (chosen)" } else { "" },
                        e.prediction.decode_tokens_per_s,
                        e.prediction.time_per_output_token_ms,
                        e.prediction.time_to_first_token_ms,
                        self.layout_why(&p, c.size)
                    ),
                    Ok(e) => format!(
                        "{label}: does not fit, {:.2} GiB more per GPU",
                        gib(e.overflow)
                    ),
                    Err(e) => format!("{label}: {e}"),
                }
            })
            .collect();
        prov.insert(
            "topology.layouts".into(),
            Provenance {
                source: Source::Computed,
                detail: format!(
                    "the layouts of one replica over the cluster's nodes, each fitted and scored by the speed model with the fabric (the best score under the {:?} objective wins): {}",
                    self.req.objective,
                    rows.join("; ")
                ),
            },
        );
    }

    /// Where a layout's decode step goes, so a loser's row says why it lost: a pipeline's stage step, hand-off
    /// and idle share ([`Vllm::pipeline_speed`]); otherwise the step's collectives ([`Vllm::comm_seconds`]).
    fn layout_why(&self, p: &Point, len: u32) -> String {
        if p.pp > 1 {
            return self.pipeline_speed(p, len).map_or_else(String::new, |s| {
                format!(
                    "{} batches of {} in flight, a stage step {:.2} ms, a hand-off {:.3} ms, {:.0} % of each cycle idle",
                    s.micro_batches,
                    s.per_batch,
                    s.stage_s * 1e3,
                    s.send_s * 1e3,
                    s.bubble * 1e2
                )
            });
        }
        format!(
            "{:.2} ms of each step in collectives",
            self.comm_seconds(p, f64::from(p.max_num_seqs.max(1))) * 1e3
        )
    }
}
