//! llama.cpp across machines with RPC (issue 28, item 4): a GGUF no one node's GPUs hold, planned over a
//! `--cluster` file's nodes with the pinned llama.cpp's RPC backend: `rpc-server` on each worker, `--rpc` and
//! `-ts` over remote and local devices on the head, memory per RPC device from the llama.cpp memory model, the
//! speed with the per-token hand-offs over the fabric, and the warning that RPC is unauthenticated.
//!
//! The model is Llama-3.1-405B's shape (126 layers, 16,384 wide, 53,248 feed-forward, 128 heads, 8 KV heads,
//! 128,256-token vocabulary) in F16: 2 B x 405.8 G parameters = 756 GiB, more than one 8x H100 node's 634 GiB.

use crate::common;
use crate::llama_cpp_argv_table::{check_argv, table};
use common::{bin, fixture};

use optimizer::emit::Deployment;
use optimizer_testkit::gguf_builder::{LlamaShape, synthetic_llama, write_sparse};

/// The pinned rpc-server's own options (tools/rpc/rpc-server.cpp `rpc_server_params_parse`): each flag and
/// whether it takes a value.
const RPC_SERVER_FLAGS: &[(&str, bool)] = &[
    ("-h", false),
    ("--help", false),
    ("-t", true),
    ("--threads", true),
    ("-d", true),
    ("--device", true),
    ("-H", true),
    ("--host", true),
    ("-p", true),
    ("--port", true),
    ("-c", false),
    ("--cache", false),
];

/// Llama-3.1-405B's shape in F16.
const LLAMA3_405B: LlamaShape = LlamaShape {
    n_layer: 126,
    n_embd: 16_384,
    n_ff: 53_248,
    n_head: 128,
    n_head_kv: 8,
    n_vocab: 128_256,
    n_merges: 280_147,
    n_ctx_train: 8192,
};

fn f16(dir: &std::path::Path, shape: LlamaShape, name: &str) -> std::path::PathBuf {
    let mut b = synthetic_llama(shape);
    // Every quantized tensor in F16 (ggml type 1, 2 B per element); the norms stay F32.
    for t in &mut b.tensors {
        if t.type_id != 0 {
            t.type_id = 1;
            t.bytes = t.ne.iter().product::<u64>() * 2;
        }
    }
    let path = dir.join(name);
    write_sparse(&b, &path).unwrap();
    path
}

fn resolve(model: &std::path::Path, cluster: &str) -> Deployment {
    let o = bin()
        .args(["resolve", "-w", "chat", "--format", "json", "-m"])
        .arg(model)
        .arg("--cluster")
        .arg(fixture("clusters").join(cluster))
        .output()
        .unwrap();
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: exit {:?}\n{}",
            o.status.code(),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

/// The argument table's verdict on a head's argv, less the two values it cannot check, which the tests check
/// themselves: `--rpc`'s (its handler connects to the servers) and the `RPC<n>` names `--rpc` registers for `-dev`.
fn table_errors(argv: &[String]) -> Vec<String> {
    let unverifiable = |e: &str| {
        (e.starts_with("--rpc ") && e.contains("cannot verify"))
            || (e.starts_with("-dev ") && e.contains("device \"RPC0\""))
    };
    check_argv(&table(), argv)
        .into_iter()
        .filter(|e| !unverifiable(e))
        .collect()
}

fn value<'a>(argv: &'a [String], flag: &str) -> &'a str {
    let i = argv
        .iter()
        .position(|a| a == flag)
        .unwrap_or_else(|| panic!("no {flag} in {argv:?}"));
    &argv[i + 1]
}

#[test]
fn a_gguf_no_node_holds_is_planned_over_rpc_with_the_workers_gpus_first() {
    let dir = tempfile::tempdir().unwrap();
    let model = f16(dir.path(), LLAMA3_405B, "llama-405b-f16.gguf");
    let d = resolve(&model, "h100-8x2-ndr.yaml");
    let head = d.artifact("llama-server-rpc").unwrap_or_else(|| {
        panic!(
            "no RPC plan: {:?}",
            d.launch.iter().map(|a| &a.name).collect::<Vec<_>>()
        )
    });
    let argv = &head.argv;
    eprintln!("{}", head.command.as_deref().unwrap());
    eprintln!("{}", d.provenance["topology.rpc"].detail);
    // --rpc registers the remote devices before -dev names them; remote first, then the head's 8 GPUs.
    let rpc_at = argv.iter().position(|a| a == "--rpc").unwrap();
    let dev_at = argv.iter().position(|a| a == "-dev").unwrap();
    assert!(rpc_at < dev_at, "{argv:?}");
    assert_eq!(value(argv, "--rpc"), "WORKER1_ADDRESS:50052");
    let devices: Vec<&str> = value(argv, "-dev").split(',').collect();
    let want: Vec<String> = (0..8)
        .map(|i| format!("RPC{i}"))
        .chain((0..8).map(|i| format!("CUDA{i}")))
        .collect();
    assert_eq!(devices, want);
    // 16 devices: the pinned -ts takes at most 15 proportions (common/arg.cpp refuses `size >=
    // llama_max_devices()`, 16), so it is left out and llama.cpp splits by free memory.
    assert!(!argv.iter().any(|a| a == "-ts"), "{argv:?}");
    assert_eq!(value(argv, "-ngl"), "127");
    assert_eq!(value(argv, "-sm"), "layer");
    // The table checks every flag and value but two it cannot: `--rpc`'s (its handler connects to the servers)
    // and the `RPC<n>` device names `--rpc` registers, checked here instead: `host:port` endpoints, and RPC
    // names numbered from 0 over the remote GPUs (ggml-rpc.cpp ggml_backend_rpc_add_server).
    let errors = table_errors(argv);
    assert!(errors.is_empty(), "{errors:?}");
    for e in value(argv, "--rpc").split(',') {
        let (host, port) = e.rsplit_once(':').unwrap();
        assert!(!host.is_empty() && port.parse::<u16>().is_ok(), "{e}");
    }
    // The worker's rpc-server: only its own flags, bound to the private address, serving its 8 GPUs.
    let w = d.artifact("rpc-server-node-1").unwrap();
    assert_eq!(w.argv[0], "rpc-server");
    let mut i = 1;
    while i < w.argv.len() {
        let (_, takes) = RPC_SERVER_FLAGS
            .iter()
            .find(|(f, _)| *f == w.argv[i])
            .unwrap_or_else(|| panic!("{} is not an rpc-server option", w.argv[i]));
        i += if *takes { 2 } else { 1 };
    }
    assert_eq!(value(&w.argv, "-H"), "WORKER1_ADDRESS");
    assert_eq!(value(&w.argv, "-p"), "50052");
    assert_eq!(
        value(&w.argv, "-d"),
        (0..8)
            .map(|i| format!("CUDA{i}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    // Memory per device: every one of the 16 GPUs is listed, and the warning quotes the pinned server.
    let detail = &d.provenance["topology.rpc"].detail;
    for name in &want {
        // Each device's line: "RPC3 49.63 GiB (weights ...".
        assert!(detail.contains(&format!("{name} ")), "{name}: {detail}");
    }
    assert!(detail.contains("hand-offs"), "{detail}");
    assert!(
        d.warnings.iter().any(|w| w.contains("unauthenticated")
            && w.contains("Never expose the RPC server to an open network!")),
        "{:?}",
        d.warnings
    );
}

#[test]
fn a_gguf_one_node_holds_gets_no_rpc_plan() {
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = (dir.path().join("m8.gguf"), ());
    write_sparse(&synthetic_llama(LlamaShape::LLAMA3_8B), &path).unwrap();
    let d = resolve(&path, "h100-8x2-ndr.yaml");
    assert!(d.artifact("llama-server-rpc").is_none());
    assert!(!d.provenance.contains_key("topology.rpc"));
}

/// Llama-3.1-70B in F16 (131 GiB) on two AWS g6.12xlarge-shaped nodes of 4x L4 (88 GiB of GPU memory each, 40 Gbps
/// Ethernet without a stated latency): 8 devices, so `-ts` over all of them, remote first, in MiB of each GPU;
/// the hand-offs are priced by bandwidth alone and the warning says so.
#[test]
fn under_sixteen_devices_the_rpc_plan_splits_layers_by_ts_over_remote_and_local_gpus() {
    let dir = tempfile::tempdir().unwrap();
    let model = f16(dir.path(), LlamaShape::LLAMA3_70B, "llama-70b-f16.gguf");
    let d = resolve(&model, "l4-4x2.yaml");
    let head = d.artifact("llama-server-rpc").expect("an RPC plan");
    let argv = &head.argv;
    assert_eq!(
        value(argv, "-dev"),
        "RPC0,RPC1,RPC2,RPC3,CUDA0,CUDA1,CUDA2,CUDA3"
    );
    // Each L4's capacity in MiB (the cluster file's memory_total_bytes, 23,570,219,008 B >> 20 = 22,478).
    assert_eq!(value(argv, "-ts"), ["22478"; 8].join(","));
    let errors = table_errors(argv);
    assert!(errors.is_empty(), "{errors:?}");
    assert!(
        d.warnings
            .iter()
            .any(|w| w.contains("Never expose") && w.contains("priced by bandwidth alone")),
        "{:?}",
        d.warnings
    );
}
