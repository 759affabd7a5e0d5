//! Concurrency is a free variable of throughput plans (issue 25): without a pinned `--parallel`, every placement
//! serves the most sequences that fit under the workload's count, so a GPU that cannot hold the preset's 256
//! sequences still runs the plan with fewer, instead of the plan falling back to a hybrid or CPU placement (or
//! vLLM exiting 3). Each test compares the default plan with the tool's own plan at a pinned count: the search
//! must do at least as well (within the planner's 1 % tie margin) as any plan one pinned knob reaches.

use crate::common;
use common::{inventory, plan, profiles, synth, vllm_models};

use optimizer::emit::{Deployment, Status, Strategy};
use optimizer::plan::{Overrides, search::TIE};
use optimizer_testkit::gguf_builder::LlamaShape;

fn decode(d: &Deployment) -> f64 {
    d.performance.decode_tokens_per_s
}

/// The default batch plan of a Llama-3-8B-shaped Q4_K_M model on `inv` against the tool's own plans at the
/// pinned sequence counts `pinned`: it fits, keeps every layer on the GPUs, and decodes at least as fast as
/// those with its KV cache type.
fn batch_beats_pinned(inv: &str, pinned: &[u32]) -> Deployment {
    let dir = tempfile::tempdir().unwrap();
    let set = profiles();
    let inv = inventory(inv);
    let (_, m) = synth(dir.path(), "m8.gguf", LlamaShape::LLAMA3_8B);
    let d = plan(
        &m,
        "m8.gguf",
        &inv,
        &set,
        "batch-inference",
        &Overrides::default(),
    )
    .unwrap();
    let s = common::llama(&d);
    assert_eq!(d.status, Status::Fits);
    assert!(
        s.strategy != Strategy::Cpu && s.strategy != Strategy::Hybrid,
        "a batch plan of an 8B Q4_K_M model gives up on the GPU: {:?} -ngl {} x {} sequences, {:.1} tokens/s",
        s.strategy,
        s.gpu_layers,
        s.parallel,
        decode(&d)
    );
    for &n in pinned {
        let ov = Overrides {
            parallel: Some(n),
            ..Overrides::default()
        };
        let p = plan(&m, "m8.gguf", &inv, &set, "batch-inference", &ov).unwrap();
        // A pinned count the preferred KV type cannot hold plans another type, which the default plan may not
        // trade for (the kv-cache rules decide that, not the search).
        if p.status != Status::Fits || common::llama(&p).cache_type_k != s.cache_type_k {
            continue;
        }
        assert!(
            decode(&d) >= decode(&p) * (1.0 - TIE),
            "default {:.1} tokens/s ({:?}) < --parallel {n}: {:.1} tokens/s ({:?})",
            decode(&d),
            s,
            decode(&p),
            common::llama(&p)
        );
    }
    d
}

#[test]
fn a_batch_plan_on_an_rtx_4080_keeps_every_layer_on_the_gpu() {
    // Issue 25 at 74f2d70: hybrid -ngl 25 at 53 sequences, 14.4 tokens/s; --parallel 32 gave -ngl 33, 2,226.
    let d = batch_beats_pinned("desktop-rtx4080.yaml", &[8, 16, 32, 64]);
    assert_eq!(common::llama(&d).gpu_layers, 33);
    assert!(common::llama(&d).parallel < 256);
}

#[test]
fn a_batch_plan_on_two_rtx_3090s_keeps_every_layer_on_the_gpus() {
    // Issue 25 at 74f2d70: 107.6 tokens/s by default against 3,047 with a pinned count.
    batch_beats_pinned("workstation-2x3090.yaml", &[16, 32, 64, 128]);
}

#[test]
fn a_batch_plan_on_an_m2_max_runs_on_metal() {
    // Issue 25 at 74f2d70: CPU only at 1 sequence, 8.1 tokens/s, against 667 on Metal at 16 sequences.
    batch_beats_pinned("apple-m2-max.yaml", &[4, 16, 64]);
}

#[test]
fn a_pinned_gpu_layer_count_lowers_the_sequences_instead_of_exiting() {
    // Issue 25 at 74f2d70: --n-gpu-layers 33 alone exited 3, the sequence count staying at 256.
    let dir = tempfile::tempdir().unwrap();
    let set = profiles();
    let (_, m) = synth(dir.path(), "m8.gguf", LlamaShape::LLAMA3_8B);
    let ov = Overrides {
        gpu_layers: Some(33),
        ..Overrides::default()
    };
    let inv = inventory("desktop-rtx4080.yaml");
    let d = plan(&m, "m8.gguf", &inv, &set, "batch-inference", &ov).unwrap();
    assert_eq!(d.status, Status::Fits);
    let s = common::llama(&d);
    assert_eq!(s.gpu_layers, 33);
    assert!((1..256).contains(&s.parallel), "{} sequences", s.parallel);
    let why = &d.provenance["settings.parallel"].detail;
    assert!(why.contains("most sequences that fit"), "{why}");
}

/// A vLLM batch plan of `model` on `hardware` fits (it used to exit 3), and its `--max-num-seqs` follows vLLM
/// 0.33's admission (issue 28): the workload's 256 sequences, lowered to the requests the KV pool holds at once
/// (its blocks less the null block, over the blocks one request takes), lowered further only by the SLA.
fn vllm_batch_fits(model: &str, hardware: &str) {
    let path = vllm_models::materialize(model);
    let (d, code) = common::resolve_doc(
        "cpu-server.yaml",
        path.path(),
        "batch-inference",
        hardware,
        &[],
    );
    assert_eq!(code, 0, "{model} on {hardware}: {:?}", d.suggestions);
    let v = d.settings.vllm().expect("a vLLM plan");
    let why = &d.provenance["settings.max_num_seqs"].detail;
    // "the KV pool (N blocks) holds H of the workload's requests of T tokens (... ; B blocks each)"
    let num = |after: &str, before: &str| -> u64 {
        let tail = &why[why.find(after).unwrap_or_else(|| panic!("{why}")) + after.len()..];
        tail[..tail.find(before).unwrap()].trim().parse().unwrap()
    };
    let blocks = num("the KV pool (", " blocks)");
    let held = num(" blocks) holds ", " of the workload");
    let per: u64 = {
        let head = &why[..why.find(" blocks each").unwrap_or_else(|| panic!("{why}"))];
        head[head.rfind(' ').unwrap() + 1..].parse().unwrap()
    };
    assert_eq!(held, (blocks - 1) / per, "{why}");
    let ceiling = held.min(256);
    let seqs = u64::from(v.max_num_seqs);
    assert!(
        seqs >= 1 && seqs <= ceiling,
        "{model} on {hardware}: --max-num-seqs {seqs}, {why}"
    );
    if seqs < ceiling {
        assert!(why.contains("SLA"), "{why}");
    }
}

#[test]
fn a_vllm_batch_plan_of_llama_3_1_8b_on_an_l40s_runs_what_the_kv_pool_holds() {
    vllm_batch_fits("Llama-3.1-8B", "l40s");
}

#[test]
fn a_vllm_batch_plan_of_llama_3_2_1b_on_a_t4_runs_what_the_kv_pool_holds() {
    // Issue 25 at 74f2d70: exit 3 with "fewer sequences: --parallel 89".
    vllm_batch_fits("Llama-3.2-1B", "t4");
}

#[test]
fn a_vllm_batch_plan_of_405b_fp8_on_8_h100s_runs_what_the_kv_pool_holds() {
    // Issue 25 at 74f2d70: exit 3 with "236 would fit".
    vllm_batch_fits("Meta-Llama-3.1-405B-Instruct-FP8", "8x:h100-sxm");
}

/// `--objective throughput` on a balanced preset fills a node with llama.cpp replicas as a throughput preset does
/// (the replicas follow the plan's objective, not only the preset's): an 8B GGUF on eight H100s
/// (`--hardware 8x:h100-sxm` with a host that runs them) gets a replica per GPU for `chat --objective throughput`,
/// and none for plain `chat`.
#[test]
fn the_objective_override_fills_the_node_with_llama_cpp_replicas() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = synth(dir.path(), "m8.gguf", LlamaShape::LLAMA3_8B);
    let host = ["--host-memory", "2TiB", "--host-cores", "112"];
    let replicas = |d: &Deployment| {
        d.artifact("llama-server-replicas").map(|a| {
            a.files
                .values()
                .map(|s| s.lines().filter(|l| l.ends_with(" &")).count())
                .sum::<usize>()
        })
    };
    let (chat, code) = common::resolve_doc("cpu-server.yaml", &path, "chat", "8x:h100-sxm", &host);
    assert!(code == 0 || code == 5, "exit {code}");
    assert_eq!(replicas(&chat), None);
    let mut extra = host.to_vec();
    extra.extend(["--objective", "throughput"]);
    let (thr, code) = common::resolve_doc("cpu-server.yaml", &path, "chat", "8x:h100-sxm", &extra);
    assert!(code == 0 || code == 5, "exit {code}");
    assert_eq!(replicas(&thr), Some(8), "{:?}", thr.warnings);
}
