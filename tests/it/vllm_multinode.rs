//! vLLM across nodes (issue 28, item 4): a cluster file's identical nodes joined by its fabric, each node a
//! pipeline stage of tensor parallel over its GPUs, launched with vLLM 0.33's multiprocessing launcher and as a
//! Kubernetes LeaderWorkerSet.
//!
//! - Llama-3.1-405B in BF16 (756 GiB; [`vllm_models::materialize_bf16`] of the FP8 fixture) on two 8x H100
//!   nodes: no node holds it, so tensor parallel 8 x pipeline parallel 2, 63 layers per node.
//! - Llama-3.1-70B-Instruct (BF16, 131 GiB) on two nodes of 4x L4 over 40 Gbps Ethernet: tensor parallel 4 x
//!   pipeline parallel 2.
//!
//! Every emitted `vllm serve` option is one the pinned parser takes (tests/fixtures/vllm/serve-flags-0.33.0.txt),
//! and the LeaderWorkerSet manifest is one benches/kubernetes/validate.py validated offline against the pinned
//! LWS CRD (tests/fixtures/kubernetes/lws-v0.10.0/) and the Kubernetes schema (its pod templates and Service):
//! its SHA-256 is in tests/fixtures/kubernetes/validated.json. `OPTIMIZER_DUMP_MANIFESTS=DIR` writes the
//! manifests for the validator.

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::{fixture, vllm_models};
use optimizer::emit::{Deployment, Settings, VllmSettings};
use serde_json::Value;
use sha2::{Digest, Sha256};

const GIB: f64 = (1u64 << 30) as f64;

fn serve_flags() -> BTreeSet<String> {
    std::fs::read_to_string(fixture("vllm/serve-flags-0.33.0.txt"))
        .unwrap()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect()
}

/// `optimizer resolve --format json --cluster tests/fixtures/clusters/<cluster> -m MODEL -w WORKLOAD`.
fn resolve_cluster(cluster: &str, model: &Path, workload: &str) -> (Deployment, i32) {
    resolve_cluster_with(cluster, model, workload, &[])
}

fn resolve_cluster_with(
    cluster: &str,
    model: &Path,
    workload: &str,
    extra: &[&str],
) -> (Deployment, i32) {
    let out = common::bin()
        .args(["resolve", "--format", "json", "-w", workload, "--cluster"])
        .arg(fixture("clusters").join(cluster))
        .arg("-m")
        .arg(model)
        .args(extra)
        .output()
        .unwrap();
    let doc: Deployment = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}\nstderr: {}", String::from_utf8_lossy(&out.stderr)));
    (doc, out.status.code().unwrap_or(-1))
}

fn vllm(d: &Deployment) -> &VllmSettings {
    match &d.settings {
        Settings::Vllm(s) => s,
        other => panic!("not a vLLM plan: {other:?}"),
    }
}

/// Every per-node command: `vllm serve`, options the pinned parser takes, the node rank and `--headless` past 0.
fn check_argv(d: &Deployment, nodes: u32) {
    let flags = serve_flags();
    for rank in 0..nodes {
        let name = if rank == 0 {
            "vllm".to_string()
        } else {
            format!("vllm-node-{rank}")
        };
        let a = d
            .artifact(&name)
            .unwrap_or_else(|| panic!("no artifact {name}"));
        assert_eq!(&a.argv[..2], ["vllm", "serve"]);
        for o in a.argv.iter().filter(|x| x.starts_with("--")) {
            assert!(
                flags.contains(o),
                "{name}: {o} is not a vLLM 0.33.0 serve option"
            );
        }
        let val = |k: &str| {
            let i = a
                .argv
                .iter()
                .position(|x| x == k)
                .unwrap_or_else(|| panic!("{name}: no {k}"));
            a.argv[i + 1].clone()
        };
        assert_eq!(val("--nnodes"), nodes.to_string());
        assert_eq!(val("--node-rank"), rank.to_string());
        assert_eq!(val("--master-port"), "29501");
        assert_eq!(a.argv.iter().any(|x| x == "--headless"), rank > 0, "{name}");
    }
}

/// The LeaderWorkerSet: its fields, and its bytes validated offline (validated.json).
fn check_lws(d: &Deployment, case: &str, nodes: u32, gpus: u32) {
    let a = d
        .artifact("leaderworkerset")
        .expect("a leaderworkerset artifact");
    let text = &a.files["vllm-lws.yaml"];
    let docs: Vec<Value> = text
        .split("\n---\n")
        .map(|t| optimizer::yaml::from_str::<Value>(t).unwrap())
        .collect();
    let lws = &docs[0];
    assert_eq!(lws["apiVersion"], "leaderworkerset.x-k8s.io/v1");
    assert_eq!(lws["kind"], "LeaderWorkerSet");
    let t = &lws["spec"]["leaderWorkerTemplate"];
    assert_eq!(t["size"], nodes);
    assert_eq!(t["restartPolicy"], "RecreateGroupOnPodRestart");
    for (role, headless) in [("leaderTemplate", false), ("workerTemplate", true)] {
        let c = &t[role]["spec"]["containers"][0];
        assert_eq!(
            c["resources"]["limits"]["nvidia.com/gpu"],
            gpus.to_string(),
            "{role}"
        );
        let cmd: Vec<&str> = c["command"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert!(
            cmd.windows(2)
                .any(|w| w == ["--master-addr", "$(LWS_LEADER_ADDRESS)"]),
            "{role}"
        );
        assert_eq!(cmd.contains(&"--headless"), headless, "{role}");
        let shm = t[role]["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["emptyDir"]["medium"] == "Memory");
        assert!(shm, "{role}: no memory-backed /dev/shm");
    }
    assert_eq!(docs[1]["kind"], "Service");
    assert_validated(case, text);
}

/// The manifest `text` is one benches/kubernetes/validate.py recorded as valid against the pinned LWS CRD and
/// the Kubernetes schema (written to OPTIMIZER_DUMP_MANIFESTS for it when that is set).
fn assert_validated(case: &str, text: &str) {
    if let Some(dir) = std::env::var_os("OPTIMIZER_DUMP_MANIFESTS").map(PathBuf::from) {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{case}.yaml")), text).unwrap();
    }
    let recorded: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("kubernetes/validated.json")).unwrap(),
    )
    .unwrap();
    let sha: String = Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if std::env::var_os("OPTIMIZER_DUMP_MANIFESTS").is_none() {
        let r = &recorded["results"][&sha];
        assert_eq!(
            r["valid"], true,
            "{case}: not validated (re-run benches/kubernetes/validate.py): {r}"
        );
        assert!(
            r["kinds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k == "leaderworkerset.x-k8s.io/v1/LeaderWorkerSet"),
            "{case}: {r}"
        );
    }
}

#[test]
fn llama_405b_bf16_on_two_h100_nodes_is_tensor_8_by_pipeline_2() {
    let (_keep, dir) = vllm_models::materialize_bf16(
        "Meta-Llama-3.1-405B-Instruct-FP8",
        "Llama-3.1-405B-Instruct",
    );
    let (d, code) = resolve_cluster("h100-8x2.yaml", &dir, "chat");
    let s = vllm(&d);
    eprintln!("{}", serde_json::to_string_pretty(&d).unwrap());
    assert!(code == 0 || code == 5, "exit {code}: {:?}", d.warnings);
    assert_eq!(
        (s.tensor_parallel_size, s.pipeline_parallel_size, s.nnodes),
        (8, Some(2), Some(2))
    );
    assert_eq!(
        (
            d.topology.nodes,
            d.topology.pipeline_parallel,
            d.topology.data_parallel
        ),
        (2, 2, 1)
    );
    // Weights per GPU: 756 GiB over 16 GPUs is 47.3 GiB; each stage holds 63 of the 126 layers and one of the
    // embedding and the LM head (vocabulary 128,256 x 16,384 x 2 B / 8 = 501 MiB each).
    let m = &d.memory.devices[0].components;
    let w = m.weights_bytes as f64 / GIB;
    assert!((47.0..48.5).contains(&w), "weights per GPU {w:.2} GiB");
    assert!(
        m.kv_cache_bytes > 0
            && d.memory.devices[0].total_bytes <= d.memory.devices[0].capacity_bytes
    );
    check_argv(&d, 2);
    assert!(
        d.artifact("vllm")
            .unwrap()
            .argv
            .windows(2)
            .any(|w| w == ["--pipeline-parallel-size", "2"])
    );
    check_lws(&d, "vllm-lws_llama-405b-bf16_h100-8x2_chat", 2, 8);
}

/// `resolve --cluster ... --distributed-executor-backend ray`: vLLM 0.33 refuses `--nnodes` with Ray
/// (vllm/config/parallel.py), so the plan writes `ray start --head` for node 0, `ray start --address=HEAD:6379
/// --block` for the others and one `vllm serve ... --distributed-executor-backend ray` on node 0 with no node
/// options; the LeaderWorkerSet's leader starts the head then serves, its workers retry joining until the head
/// answers. Same plan otherwise (TP 8 x PP 2).
#[test]
fn ray_runs_the_405b_group_when_asked() {
    let (_keep, dir) = vllm_models::materialize_bf16(
        "Meta-Llama-3.1-405B-Instruct-FP8",
        "Llama-3.1-405B-Instruct",
    );
    let (d, code) = resolve_cluster_with(
        "h100-8x2.yaml",
        &dir,
        "chat",
        &["--distributed-executor-backend", "ray"],
    );
    assert!(code == 0 || code == 5, "exit {code}: {:?}", d.warnings);
    let s = vllm(&d);
    assert_eq!(
        (s.tensor_parallel_size, s.pipeline_parallel_size, s.nnodes),
        (8, Some(2), Some(2))
    );
    let serve = &d.artifact("vllm").unwrap().argv;
    check_serve_options(serve, &[("--distributed-executor-backend", "ray")]);
    for absent in ["--nnodes", "--node-rank", "--master-addr", "--headless"] {
        assert!(!serve.iter().any(|x| x == absent), "{absent} with Ray");
    }
    assert!(d.artifact("vllm-node-1").is_none());
    assert_eq!(
        d.artifact("ray-head").unwrap().argv,
        ["ray", "start", "--head", "--port", "6379"]
    );
    assert_eq!(
        d.artifact("ray-worker-node-1").unwrap().argv,
        [
            "ray",
            "start",
            "--address",
            "LEADER_ADDRESS:6379",
            "--block"
        ]
    );
    let text = &d.artifact("leaderworkerset").unwrap().files["vllm-lws.yaml"];
    let lws: Value = optimizer::yaml::from_str(text.split("\n---\n").next().unwrap()).unwrap();
    let cmd = |role: &str| -> Vec<String> {
        lws["spec"]["leaderWorkerTemplate"][role]["spec"]["containers"][0]["command"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect()
    };
    let leader = cmd("leaderTemplate");
    assert_eq!(&leader[..2], ["sh", "-c"]);
    assert!(
        leader[2].starts_with("ray start --head --port 6379 && exec vllm serve /models/"),
        "{}",
        leader[2]
    );
    assert!(leader[2].contains(" --distributed-executor-backend ray "));
    assert_eq!(
        cmd("workerTemplate"),
        [
            "sh",
            "-c",
            "until ray start --address '$(LWS_LEADER_ADDRESS):6379' --block; do sleep 5; done"
        ]
    );
    assert_validated("vllm-lws-ray_llama-405b-bf16_h100-8x2_chat", text);
}

/// With Ray an expert-parallel group uses `--data-parallel-backend ray` (vLLM places the data-parallel
/// engines; `--nnodes` requires the mp backend, vllm/engine/arg_utils.py) and keeps `--data-parallel-size-local`
/// (the engines on the head, `VLLM_RAY_DP_PACK_STRATEGY` strict), without `--data-parallel-address`.
#[test]
fn ray_runs_deepseek_v3_expert_parallel_with_the_data_parallel_backend() {
    let (_parent, dir) = vllm_models::materialize_named("DeepSeek-V3");
    let (d, code) = resolve_cluster_with(
        "h100-8x2.yaml",
        &dir,
        "batch-inference",
        &["--distributed-executor-backend", "ray"],
    );
    assert!(code == 0 || code == 5, "exit {code}: {:?}", d.warnings);
    let s = vllm(&d);
    let dp = s.data_parallel_size.unwrap();
    let serve = &d.artifact("vllm").unwrap().argv;
    check_serve_options(
        serve,
        &[
            ("--data-parallel-backend", "ray"),
            ("--data-parallel-size-local", &(dp / 2).to_string()),
        ],
    );
    for absent in [
        "--nnodes",
        "--data-parallel-address",
        "--distributed-executor-backend",
    ] {
        assert!(!serve.iter().any(|x| x == absent), "{absent} with Ray");
    }
    let text = &d.artifact("leaderworkerset").unwrap().files["vllm-lws.yaml"];
    assert_validated("vllm-lws-ray_deepseek-v3_h100-8x2_batch-inference", text);
}

/// Every option of `argv` is one vLLM 0.33.0's serve parser takes, with a value among its choices, and each of
/// `want` is there with its value.
fn check_serve_options(argv: &[String], want: &[(&str, &str)]) {
    let flags = serve_flags();
    let choices: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("vllm/serve-choices-0.33.0.json")).unwrap(),
    )
    .unwrap();
    for (i, o) in argv.iter().enumerate().filter(|(_, x)| x.starts_with("--")) {
        assert!(flags.contains(o), "{o} is not a vLLM 0.33.0 serve option");
        if let (Some(allowed), Some(v)) = (choices[o].as_array(), argv.get(i + 1)) {
            assert!(
                allowed.iter().any(|c| c == v.as_str()),
                "{o} {v}: not among {allowed:?}"
            );
        }
    }
    for (k, v) in want {
        assert!(
            argv.windows(2).any(|w| w[0] == *k && w[1] == *v),
            "no {k} {v} in {argv:?}"
        );
    }
}

#[test]
fn llama_70b_on_two_nodes_of_four_l4_is_tensor_4_by_pipeline_2() {
    let (_parent, dir) = vllm_models::materialize_named("Llama-3.1-70B-Instruct");
    let (d, code) = resolve_cluster("l4-4x2.yaml", &dir, "chat");
    eprintln!("{}", serde_json::to_string_pretty(&d).unwrap());
    assert!(code == 0 || code == 5, "exit {code}: {:?}", d.warnings);
    let s = vllm(&d);
    assert_eq!(
        (s.tensor_parallel_size, s.pipeline_parallel_size),
        (4, Some(2))
    );
    check_argv(&d, 2);
    check_lws(&d, "vllm-lws_llama-70b_l4-4x2_chat", 2, 4);
}

/// DeepSeek-V3 FP8 (block FP8, 256 routed experts, its MTP layer stored but not loaded) across two 8x H100 nodes:
/// no node holds its 641 GiB; the speed model weighs a pipeline (TP 8 x PP 2) against data-parallel engines with
/// the routed experts spread whole over all 16 GPUs, 16 each.
#[test]
fn deepseek_v3_fp8_on_two_h100_nodes_runs_expert_parallel() {
    expert_parallel_on_two_h100_nodes("DeepSeek-V3", &vllm_models::DEEPSEEK_V3, "deepseek-v3");
}

/// The same for Kimi-K2-Instruct (model_type `kimi_k2`, DeepSeek-V3's layout with 384 routed experts, 24 a GPU).
#[test]
fn a_deepseek_v3_layout_moe_on_two_h100_nodes_runs_expert_parallel() {
    expert_parallel_on_two_h100_nodes("Kimi-K2-Instruct", &vllm_models::KIMI_K2, "kimi-k2");
}

/// Resolves `id` for batch inference on two 8x H100 nodes and checks expert parallel: TP x DP = 16 with DP
/// split over the nodes, the routed experts spread whole over the 16 GPUs and the rest at tensor parallel `tp`
/// ([`vllm_models::MlaMoe::rank_weights`]), every flag one vLLM 0.33.0 serve takes, and an LWS that validates.
fn expert_parallel_on_two_h100_nodes(id: &str, layout: &vllm_models::MlaMoe, case: &str) {
    let (_parent, dir) = vllm_models::materialize_named(id);
    let (d, code) = resolve_cluster("h100-8x2.yaml", &dir, "batch-inference");
    eprintln!("{}", serde_json::to_string_pretty(&d).unwrap());
    assert!(code == 0 || code == 5, "exit {code}: {:?}", d.warnings);
    let s = vllm(&d);
    assert_eq!(s.enable_expert_parallel, Some(true));
    let (tp, dp) = (s.tensor_parallel_size, s.data_parallel_size.unwrap());
    assert_eq!(tp * dp, 16);
    assert_eq!(s.data_parallel_size_local, Some(dp / 2));
    assert_eq!(s.nnodes, Some(2));
    // Weights per GPU: the routed experts spread whole, experts / 16 per GPU, the rest at tensor parallel `tp`.
    let routed = layout.moe_layers() * layout.experts * layout.expert_bytes();
    let w = layout.rank_weights(u64::from(tp));
    let want = w.per_rank - routed / u64::from(tp) + routed / 16;
    let got = d.memory.devices[0].components.weights_bytes;
    assert!(
        (got as f64 / want as f64 - 1.0).abs() < 1e-3,
        "weights per GPU {got} vs {want}"
    );
    let a = d.artifact("vllm").unwrap();
    let flags = serve_flags();
    for rank in 0..2 {
        let name = if rank == 0 {
            "vllm".to_string()
        } else {
            format!("vllm-node-{rank}")
        };
        let argv = &d.artifact(&name).unwrap().argv;
        for o in argv.iter().filter(|x| x.starts_with("--")) {
            assert!(
                flags.contains(o),
                "{name}: {o} is not a vLLM 0.33.0 serve option"
            );
        }
        assert!(argv.iter().any(|x| x == "--enable-expert-parallel"));
        assert!(
            argv.windows(2)
                .any(|w| w == ["--data-parallel-size", &dp.to_string()])
        );
        assert!(
            argv.windows(2)
                .any(|w| w == ["--data-parallel-size-local", &(dp / 2).to_string()])
        );
        assert!(
            argv.windows(2)
                .any(|w| w == ["--data-parallel-rpc-port", "29550"])
        );
        assert!(!argv.iter().any(|x| x == "--data-parallel-start-rank"));
    }
    check_argv(&d, 2);
    assert!(a.argv.iter().any(|x| x == "--data-parallel-address"));
    assert!(d.provenance.contains_key("topology.layouts"));
    check_lws(
        &d,
        &format!("vllm-lws_{case}_h100-8x2_batch-inference"),
        2,
        8,
    );
}

/// With the fabric's latency stated (tests/fixtures/clusters/h100-8x2-ndr.yaml: NDR InfiniBand, 50 GB/s per GPU,
/// NCCL's own 2.7 µs per network step), a plan weighs one tensor-parallel group of 16 over both nodes against tensor
/// parallel 8 x pipeline parallel 2, and provenance.topology.layouts gives both with their speed and why the loser
/// lost. Without a latency (h100-8x2.yaml) tensor parallel across nodes is not weighed at all.
#[test]
fn a_stated_fabric_latency_weighs_tensor_parallel_across_nodes_against_a_pipeline() {
    let (_keep, dir) = vllm_models::materialize_bf16(
        "Meta-Llama-3.1-405B-Instruct-FP8",
        "Llama-3.1-405B-Instruct",
    );
    let (d, code) = resolve_cluster("h100-8x2-ndr.yaml", &dir, "chat");
    assert!(code == 0 || code == 5, "exit {code}: {:?}", d.warnings);
    let layouts = &d.provenance["topology.layouts"].detail;
    eprintln!("{layouts}");
    let rows: Vec<&str> = layouts.split_once(": ").unwrap().1.split("; ").collect();
    let across = rows
        .iter()
        .find(|r| r.starts_with("tensor parallel 16 across 2 nodes"))
        .unwrap_or_else(|| panic!("tensor parallel across nodes not weighed: {layouts}"));
    let pipeline = rows
        .iter()
        .find(|r| r.starts_with("tensor parallel 8 x pipeline parallel 2"))
        .unwrap_or_else(|| panic!("no pipeline layout: {layouts}"));
    assert!(
        !d.warnings
            .iter()
            .any(|w| w.contains("no fabric latency_us")),
        "{:?}",
        d.warnings
    );
    // The loser says why it lost: both rows carry their per-token time, and the chosen one is marked.
    let chosen = rows.iter().filter(|r| r.contains("(chosen)")).count();
    assert_eq!(chosen, 1, "{layouts}");
    for r in [across, pipeline] {
        assert!(r.contains("ms per output token"), "{r}");
    }
    // Where each step goes: the pipeline's stage step, hand-off and idle share; the group's collectives.
    assert!(pipeline.contains("of each cycle idle"), "{pipeline}");
    assert!(
        across.contains("ms of each step in collectives"),
        "{across}"
    );
    let (_, without) = (
        (),
        resolve_cluster("h100-8x2.yaml", &dir, "chat").0.provenance["topology.layouts"]
            .detail
            .clone(),
    );
    assert!(!without.contains("tensor parallel 16 across"), "{without}");
}
