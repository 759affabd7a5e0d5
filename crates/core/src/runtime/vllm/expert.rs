//! Expert parallelism across nodes (issue 28, item 4) and the layouts a cluster offers one replica: pipeline
//! parallel, tensor parallel across nodes, and (for a mixture-of-experts model) data parallel with expert
//! parallel. The speed model chooses among those that fit ([`layouts`]). Pure: values in, values out.
//!
//! What vLLM 0.33 does with `--enable-expert-parallel --data-parallel-size D` at `--tensor-parallel-size T`:
//! - Each routed-expert layer becomes expert parallel over `T x D` ranks (vllm/model_executor/layers/fused_moe/
//!   config.py `FusedMoEParallelConfig.make`: `use_ep`, `ep_size = tp_size` after
//!   `flatten_tp_across_dp_and_pcp` makes it `dp x tp`, and the experts' own `tp_size = 1`: "each device owns a
//!   set of experts fully"). A rank holds `E // ep` whole experts, one more on the first `E % ep` ranks
//!   (fused_moe/expert_map_manager.py `determine_expert_map`); the plan sizes the fullest rank.
//! - Everything else (attention, MLA's projections, the shared experts, the dense first layers, the embedding
//!   and LM head) is the tensor-parallel group's as on one node: each of the D engines holds it over its T ranks,
//!   and its KV cache holds its own sequences (an MLA latent cache is whole on every rank of the group).
//! - Dispatch and combine: the default `all2all_backend` is `allgather_reducescatter` (vllm/config/parallel.py
//!   `ParallelConfig.all2all_backend`): each MoE layer all-gathers every engine's hidden states and router
//!   logits over the data-parallel group and reduce-scatters the experts' output back
//!   (vllm/distributed/device_communicators/all2all.py `AgRsAll2AllManager.dispatch_router_logits`,
//!   `combine`), [`crate::perf::collective::ep_layer_seconds`].
//! - Launch (vllm/engine/arg_utils.py `create_engine_config`): with `--nnodes N --node-rank R` vLLM infers each
//!   node's `--data-parallel-size-local` (`local_world_size // world_size_within_dp`) and its first DP rank
//!   (`node_rank x local_world_size // world_size_within_dp`), and the DP address defaults to `--master-addr`;
//!   the plan writes `--data-parallel-size-local`, `--data-parallel-address` and `--data-parallel-rpc-port` out
//!   and leaves `--data-parallel-start-rank` to that inference, because on the API node a start rank switches
//!   vLLM to hybrid load balancing (`data_parallel_hybrid_lb = True` when it is given and not `headless`), and a
//!   LeaderWorkerSet's command cannot compute `index x local size`.
//!
//! Trade-offs: the MoE kernels' workspace grows with the gathered tokens (D engines' batches) and the data-parallel
//! group's NCCL buffers are not counted (the profiling pass sees one engine's batch); a step's routed-expert reads
//! are the experts the step's tokens activate (`1 - (1 - k/E)^tokens` of them, tokens routed independently),
//! on every layout across nodes alike, so the layouts compare on the same footing.

use optimizer_memory::vllm::{self as mem, Dtype, RankWeights, VllmMemoryError};
use optimizer_model::ModelSpec;

/// Whether tensor `name` belongs to a routed expert (`...mlp.experts.N....`, gpt-oss's fused
/// `...mlp.experts.gate_up_proj`): a name segment `experts`. Shared experts (`shared_experts`,
/// `shared_expert`) are the tensor-parallel group's, as on one node.
pub(crate) fn is_routed_expert(name: &str) -> bool {
    name.split('.').any(|s| s == "experts")
}

/// Experts the fullest rank of an expert-parallel group of `ep` holds (`determine_expert_map`: `E // ep`, one
/// more on the first `E % ep` ranks).
pub(crate) fn experts_per_rank(experts: u64, ep: u32) -> u64 {
    experts.div_ceil(u64::from(ep.max(1)))
}

/// The share of a layer's routed experts that a step of `tokens` tokens, each routed to `used` of `experts`,
/// activates: `1 - (1 - used/experts)^tokens` (1 token: `used/experts`, the share one token reads).
pub(crate) fn activated_share(used: u64, experts: u64, tokens: f64) -> f64 {
    if experts == 0 {
        return 1.0;
    }
    let k = (used.min(experts) as f64) / experts as f64;
    1.0 - (1.0 - k).powf(tokens.max(1.0))
}

/// The routed experts of `model` alone, as [`expert_parallel_weights`] sizes them: only their tensors, no
/// rotary cache and no MLA copies (which the memory model derives from the hyper-parameters), and none of an MTP
/// layer's, which vLLM never loads ([`mem::is_spec_layer`]). `None` for a dense model.
pub(crate) fn routed_experts(model: &ModelSpec) -> Option<ModelSpec> {
    model.hparams.expert_count.filter(|&e| e > 0)?;
    let trunk_end = mem::trunk_end(model);
    let mut routed = ModelSpec {
        format: model.format,
        gguf_version: model.gguf_version,
        big_endian: model.big_endian,
        architecture: model.architecture.clone(),
        name: model.name.clone(),
        file_type: model.file_type,
        file_type_name: model.file_type_name,
        type_reading: model.type_reading,
        hparams: model.hparams.clone(),
        files: Vec::new(),
        tensors: model
            .tensors
            .iter()
            .filter(|t| is_routed_expert(&t.name) && !mem::is_spec_layer(t, trunk_end))
            .cloned()
            .collect(),
        layers: Vec::new(),
        quant_mix: Vec::new(),
        metadata: Default::default(),
        fingerprint: String::new(),
    };
    routed.hparams.context_length = None;
    routed.hparams.kv_lora_rank = None;
    Some(routed)
}

/// The weights one rank holds under expert parallel over `ep` ranks: `weights` (the rank's bytes at tensor
/// parallel `tp`, from the memory model) with its slice of every routed expert (`1/tp` of each) replaced by
/// [`experts_per_rank`] whole experts. `routed` is [`routed_experts`] of the model; their loaded bytes come from
/// the memory model at tensor parallel 1, so its dtype rules (a floating expert cast to `--dtype`, FP8 blocks and
/// scales kept) hold.
pub(crate) fn expert_parallel_weights(
    routed: &ModelSpec,
    weights: &mut RankWeights,
    tp: u32,
    ep: u32,
    dtype: Dtype,
) -> Result<(), VllmMemoryError> {
    let experts = routed.hparams.expert_count.unwrap_or(0);
    if experts == 0 || ep <= 1 {
        return Ok(());
    }
    let total = mem::weights(routed, 1, dtype)?.per_rank_bytes;
    let at_tp = mem::weights(routed, tp, dtype)?.per_rank_bytes;
    let held = u128::from(total) * u128::from(experts_per_rank(experts, ep)) / u128::from(experts);
    let held =
        u64::try_from(held).map_err(|_| VllmMemoryError::Overflow("expert bytes overflow"))?;
    weights.per_rank_bytes = weights
        .per_rank_bytes
        .saturating_sub(at_tp)
        .checked_add(held)
        .ok_or(VllmMemoryError::Overflow("per-rank bytes overflow"))?;
    Ok(())
}

/// How one replica spans a cluster's nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Tensor parallel over each node's GPUs, a pipeline stage per node.
    Pipeline { tp: u32, pp: u32 },
    /// One tensor-parallel group over every GPU of `nnodes` nodes: its all-reduces cross the fabric.
    TensorAcross { tp: u32, nnodes: u32 },
    /// `dp` engines of tensor parallel `tp` over `nnodes` nodes, the routed experts spread over all `tp x dp`.
    Expert { tp: u32, dp: u32, nnodes: u32 },
}

/// Every layout of one replica over all `nodes` nodes of `per_node` GPUs: each pipeline size in `pipelines`
/// (stage = node), tensor parallel over all GPUs where `tp_ok` takes it (the memory model's head and vocabulary
/// splits), and for a mixture-of-experts model expert parallel at each one-node tensor-parallel size in
/// `node_tp` (`dp = nodes x per_node / tp`).
pub(crate) fn layouts(
    nodes: u32,
    per_node: u32,
    pipelines: &[u32],
    node_tp: &[u32],
    moe: bool,
    tp_ok: impl Fn(u32) -> bool,
) -> Vec<Layout> {
    let mut out: Vec<Layout> = pipelines
        .iter()
        .map(|&pp| Layout::Pipeline { tp: per_node, pp })
        .collect();
    if nodes > 1 {
        let all = nodes * per_node;
        if tp_ok(all) {
            out.push(Layout::TensorAcross {
                tp: all,
                nnodes: nodes,
            });
        }
        if moe {
            out.extend(
                node_tp
                    .iter()
                    .filter(|&&tp| per_node.is_multiple_of(tp))
                    .map(|&tp| Layout::Expert {
                        tp,
                        dp: all / tp,
                        nnodes: nodes,
                    }),
            );
        }
    }
    out
}

/// vLLM's default `--data-parallel-rpc-port` (vllm/config/parallel.py `ParallelConfig.data_parallel_rpc_port`),
/// written out so every node's command says it.
const DP_RPC_PORT: u16 = 29550;

/// The data-parallel options one node of an expert-parallel group adds to [`super::multinode::node_args`]:
/// the engines on this node and the address and port the engines hand-shake on (node 0's).
pub(crate) fn dp_node_args(dp_local: u32, address: &str) -> Vec<String> {
    vec![
        "--data-parallel-size-local".into(),
        dp_local.to_string(),
        "--data-parallel-address".into(),
        address.into(),
        "--data-parallel-rpc-port".into(),
        DP_RPC_PORT.to_string(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routed_experts_are_named_by_an_experts_segment() {
        assert!(is_routed_expert(
            "model.layers.3.mlp.experts.17.gate_proj.weight"
        ));
        assert!(is_routed_expert(
            "model.layers.3.mlp.experts.17.down_proj.weight_scale_inv"
        ));
        assert!(is_routed_expert(
            "model.layers.0.mlp.experts.gate_up_proj_blocks"
        ));
        assert!(!is_routed_expert(
            "model.layers.3.mlp.shared_experts.gate_proj.weight"
        ));
        assert!(!is_routed_expert("model.layers.3.mlp.gate.weight"));
    }

    #[test]
    fn the_fullest_rank_holds_the_remainder_expert() {
        // determine_expert_map: 384 over 16 is 24 each; 256 over 24 is 10, the first 16 ranks 11.
        assert_eq!(experts_per_rank(384, 16), 24);
        assert_eq!(experts_per_rank(256, 24), 11);
        assert_eq!(experts_per_rank(8, 1), 8);
    }

    #[test]
    fn one_token_reads_its_routed_share_and_a_batch_more() {
        assert!((activated_share(8, 384, 1.0) - 8.0 / 384.0).abs() < 1e-15);
        let b = activated_share(8, 384, 64.0);
        assert!((b - (1.0 - (1.0f64 - 8.0 / 384.0).powi(64))).abs() < 1e-12);
        assert!(activated_share(8, 384, 1e6) > 0.999_999);
    }

    #[test]
    fn a_cluster_offers_pipeline_tensor_across_and_expert_layouts() {
        let l = layouts(2, 8, &[2], &[1, 2, 4, 8], true, |_| true);
        assert_eq!(
            l,
            vec![
                Layout::Pipeline { tp: 8, pp: 2 },
                Layout::TensorAcross { tp: 16, nnodes: 2 },
                Layout::Expert {
                    tp: 1,
                    dp: 16,
                    nnodes: 2
                },
                Layout::Expert {
                    tp: 2,
                    dp: 8,
                    nnodes: 2
                },
                Layout::Expert {
                    tp: 4,
                    dp: 4,
                    nnodes: 2
                },
                Layout::Expert {
                    tp: 8,
                    dp: 2,
                    nnodes: 2
                },
            ]
        );
        // A dense model: no expert layouts; tensor parallel across nodes only where the splits allow it.
        assert_eq!(
            layouts(2, 8, &[2], &[8], false, |_| false),
            vec![Layout::Pipeline { tp: 8, pp: 2 }]
        );
    }
}
