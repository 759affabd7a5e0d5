//! vLLM across nodes (issue 28, item 4): tensor parallel inside a node over its NVLink or PCIe, pipeline
//! parallel across nodes over the cluster file's fabric, launched with vLLM 0.33's own multiprocessing launcher
//! (`--nnodes --node-rank --master-addr --master-port`, `--headless` on every node but the first:
//! vllm/engine/arg_utils.py `EngineArgs.add_cli_args` and `create_engine_config`, vllm/entrypoints/cli/serve.py
//! `run_headless`). Pure: values in, values out.
//!
//! What a pipeline stage holds (vLLM 0.33): the decoder layers `get_pp_indices` gives it
//! (vllm/distributed/utils.py: `num_layers // pp` each, the remainder one each to the stages before the last),
//! the token embedding on the first stage and the final norm and LM head on the last (the others build
//! `PPMissingLayer`, vllm/model_executor/models/llama.py `LlamaModel.__init__`, `LlamaForCausalLM.__init__`;
//! utils.py `make_layers`); its KV cache covers its own layers only, and the engine runs every worker with the
//! fewest blocks any worker has (vllm/v1/core/kv_cache_planning.py `get_kv_cache_configs`, step 5). So each
//! stage is sized as the checkpoint cut to its tensors ([`stage_model`]) by the same memory model, and the plan
//! takes the tightest stage.
//!
//! Trade-offs: a stage's sampler buffers and profiling peak are counted on every stage (vLLM samples on the last
//! only), an over-estimate of tens of MiB; layers carry their checkpoint indices, so a stage's per-layer
//! hyper-parameters are sliced to its range.

use optimizer_model::{ModelSpec, Role};

/// `get_pp_indices` for every rank: `(start, end)` layer ranges, end exclusive.
pub(crate) fn pp_partition(layers: u32, pp: u32) -> Vec<(u32, u32)> {
    let pp = pp.max(1);
    let mut parts = vec![layers / pp; pp as usize];
    let rem = layers % pp;
    // The remainder goes one each to the stages before the last, counting back from it
    // (`for i in range(2, remaining_layers + 2): partitions[-i] += 1`).
    for i in 2..rem + 2 {
        let at = parts.len().saturating_sub(i as usize);
        parts[at] += 1;
    }
    let mut start = 0;
    parts
        .into_iter()
        .map(|n| {
            let r = (start, start + n);
            start += n;
            r
        })
        .collect()
}

/// The checkpoint as one pipeline stage loads it: the decoder layers in `start..end`, the token embedding on
/// the first stage (and on the last when the LM head is tied to it), the final norm and LM head on the last;
/// `num_hidden_layers` becomes the stage's layer count and per-layer hyper-parameters are cut to the range.
pub(crate) fn stage_model(
    model: &ModelSpec,
    start: u32,
    end: u32,
    first: bool,
    last: bool,
) -> ModelSpec {
    let mut m = model.clone();
    let tied = model.hparams.tied_embeddings;
    m.tensors.retain(|t| match t.layer {
        Some(l) => (start..end).contains(&l),
        None => match t.role {
            Role::Embedding => first || (last && tied),
            // Outside the blocks, a norm is the final one and an output tensor the LM head (with its scales).
            Role::Output | Role::Norm => last,
            Role::QuantState => {
                if t.name.contains("lm_head") {
                    last
                } else if t.name.contains("embed") {
                    first
                } else {
                    true
                }
            }
            _ => true,
        },
    });
    let h = &mut m.hparams;
    h.block_count = Some(u64::from(end - start));
    let (s, e) = (start as usize, end as usize);
    let cut = |v: &mut Vec<bool>| {
        if v.len() >= e {
            *v = v[s..e].to_vec();
        }
    };
    cut(&mut h.sliding_window_layers);
    cut(&mut h.expert_layers);
    cut(&mut h.recurrent_layers);
    for p in [
        &mut h.feed_forward_length,
        &mut h.head_count,
        &mut h.head_count_kv,
    ]
    .into_iter()
    .flatten()
    {
        if let optimizer_model::PerLayer::Layers(v) = p
            && v.len() >= e
        {
            *v = v[s..e].to_vec();
        }
    }
    m
}

/// vLLM's default `--master-port` (vllm/config/parallel.py `ParallelConfig.master_port`), written out so every
/// node's command says it.
pub(crate) const MASTER_PORT: u16 = 29501;

/// What the per-node commands give `--master-addr` outside Kubernetes: the first node's address, which the plan
/// cannot know; the artifact's description says to replace it.
pub(crate) const LEADER_ADDRESS: &str = "LEADER_ADDRESS";

/// The options that make one node's `vllm serve` part of an `nnodes`-node group (vLLM 0.33's multiprocessing
/// launcher): `--nnodes N --node-rank R --master-addr A --master-port P`, and `--headless` on ranks past 0 (they
/// run workers only; vllm/entrypoints/cli/serve.py `run_headless`, `node_rank_within_dp > 0`).
pub(crate) fn node_args(
    nnodes: u32,
    node_rank: &str,
    master_addr: &str,
    headless: bool,
) -> Vec<String> {
    let mut a = vec![
        "--nnodes".to_string(),
        nnodes.to_string(),
        "--node-rank".to_string(),
        node_rank.to_string(),
        "--master-addr".to_string(),
        master_addr.to_string(),
        "--master-port".to_string(),
        MASTER_PORT.to_string(),
    ];
    if headless {
        a.push("--headless".into());
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_split_as_get_pp_indices_splits_them() {
        assert_eq!(pp_partition(126, 2), vec![(0, 63), (63, 126)]);
        assert_eq!(pp_partition(80, 2), vec![(0, 40), (40, 80)]);
        // 61 over 2: the remainder goes to the first (the stage before the last).
        assert_eq!(pp_partition(61, 2), vec![(0, 31), (31, 61)]);
        // 10 over 4: 2 each, the remaining 2 to the two stages before the last.
        assert_eq!(pp_partition(10, 4), vec![(0, 2), (2, 5), (5, 8), (8, 10)]);
    }
}
