//! `--hardware` plans a whole node, not this machine's host (issue 25, item 4): `--host-memory` and
//! `--host-cores` set the planned node's host, and a plan that leaves GPUs of the node unused says so. The small
//! host here is `desktop-rtx4080.yaml` (8 physical cores, 32 GiB), standing for the 2-core, 22 GiB VM the issue
//! was filed from; 2 TiB and 128 cores are the DGX A100's system memory and CPU cores (NVIDIA DGX A100 User
//! Guide, "Hardware Overview": 2 x AMD EPYC 7742, 64 cores each; 2 TB system memory).

use crate::common;

use common::vllm_models;
use optimizer::emit::{Deployment, Status};
use optimizer_testkit::gguf_builder::LlamaShape;

const DGX_A100_MEMORY: &str = "2TiB";
const DGX_A100_CORES: &str = "128";

fn resolve(
    model: &std::path::Path,
    workload: &str,
    hardware: &str,
    extra: &[&str],
) -> (Deployment, i32) {
    common::resolve_doc("desktop-rtx4080.yaml", model, workload, hardware, extra)
}

/// The Kubernetes manifest's CPU request.
fn cpu_request(d: &Deployment) -> String {
    let k = d.artifact("kubernetes").expect("a kubernetes artifact");
    let yaml = k.files.values().next().expect("a manifest");
    let line = yaml
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("requests:"))
        .find(|l| l.trim_start().starts_with("cpu:"))
        .unwrap_or_else(|| panic!("no cpu request in\n{yaml}"));
    line.trim_start()
        .trim_start_matches("cpu:")
        .trim()
        .trim_matches(['\'', '"'])
        .to_string()
}

/// Full training of an 8B model on 8x A100 80GB needs more host memory than a desktop's (DeepSpeed keeps
/// optimizer state on the host for offload, the loader holds the checkpoint): with the desktop's 32 GiB the
/// plan was `no-fit` (exit 3); with the node's 2 TiB stated it fits.
#[test]
fn full_training_on_8x_a100_plans_with_the_stated_host_memory() {
    let dir = vllm_models::materialize("Llama-3.1-8B");
    let (small, small_code) = resolve(dir.path(), "training", "8x:a100-80gb-sxm", &[]);
    let (node, code) = resolve(
        dir.path(),
        "training",
        "8x:a100-80gb-sxm",
        &[
            "--host-memory",
            DGX_A100_MEMORY,
            "--host-cores",
            DGX_A100_CORES,
        ],
    );
    assert_eq!(code, 0, "{:?} {:?}", node.suggestions, node.warnings);
    assert_eq!(node.status, Status::Fits);
    assert_eq!(node.hardware.memory_total_bytes, 2u64 << 40);
    // The desktop host either does not fit or fits with less room: the override is what changed the answer.
    assert!(
        small_code != 0 || small.hardware.memory_total_bytes < node.hardware.memory_total_bytes,
        "{small_code}"
    );
}

/// The manifest asked for the probed host's 2 CPUs (the VM's cores bounded the plan's threads); it now
/// follows the planned node's cores: 2 stated cores give 2, a 112-core node the plan's own thread count.
#[test]
fn the_manifest_cpu_request_follows_the_planned_host_cores() {
    let tmp = tempfile::tempdir().unwrap();
    let (m8, _) = common::synth(tmp.path(), "m8.gguf", LlamaShape::LLAMA3_8B);
    let (vm, code) = resolve(&m8, "inference", "8x:h100-sxm", &["--host-cores", "2"]);
    assert_eq!(code, 0, "{:?}", vm.warnings);
    let (node, code) = resolve(&m8, "inference", "8x:h100-sxm", &["--host-cores", "112"]);
    assert_eq!(code, 0, "{:?}", node.warnings);
    let threads = node.settings.llama_cpp().expect("a llama.cpp plan").threads;
    assert_eq!(cpu_request(&vm), "2");
    assert!(threads > 2, "{threads}");
    assert_eq!(cpu_request(&node), threads.to_string());
    assert_eq!(node.hardware.cpu.physical_cores, 112);
    assert_eq!(vm.hardware.cpu.physical_cores, 2);
}

/// `8x:h100-sxm` with a model one GPU holds: a throughput workload runs a replica per GPU on a host with the
/// cores for them, and wherever GPUs stay unused (a latency workload, or a host too small for the replicas)
/// the document says how many and why instead of leaving them idle without a word.
#[test]
fn gpus_a_plan_leaves_idle_are_named_in_a_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let (m8, _) = common::synth(tmp.path(), "m8.gguf", LlamaShape::LLAMA3_8B);
    let idle = |d: &Deployment| d.warnings.iter().find(|w| w.contains("stay idle")).cloned();

    let (latency, code) = resolve(&m8, "inference", "8x:h100-sxm", &[]);
    assert_eq!(code, 0);
    let w = idle(&latency).unwrap_or_else(|| panic!("no idle warning: {:?}", latency.warnings));
    assert!(w.contains("7 of the node's 8 GPUs"), "{w}");

    let (node, code) = resolve(
        &m8,
        "batch-inference",
        "8x:h100-sxm",
        &["--host-memory", "2TiB", "--host-cores", "112"],
    );
    assert_eq!(code, 0, "{:?}", node.warnings);
    let replicas = node.artifact("llama-server-replicas");
    match replicas {
        Some(a) => {
            let n: usize = a
                .files
                .values()
                .map(|s| s.lines().filter(|l| l.ends_with(" &")).count())
                .sum();
            assert!(
                n == 8 || idle(&node).is_some(),
                "{n} replicas, no warning: {:?}",
                node.warnings
            );
        }
        None => assert!(idle(&node).is_some(), "{:?}", node.warnings),
    }
}

/// Sizes and core counts that mean nothing are usage errors naming the flag; a fractional size is bytes.
#[test]
fn host_flags_are_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let (m8, _) = common::synth(tmp.path(), "m8.gguf", LlamaShape::LLAMA3_8B);
    for bad in [
        ["--host-memory", "lots"],
        ["--host-memory", "0"],
        ["--host-memory", "99999999TiB"],
        ["--host-cores", "0"],
        ["--host-cores", "100000"],
    ] {
        let o = common::bin_on("desktop-rtx4080.yaml")
            .args(["resolve", "--hardware", "h100-sxm", "-m"])
            .arg(&m8)
            .args(bad)
            .output()
            .unwrap();
        common::assert_exit(&o, 2);
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(bad[0]),
            "{bad:?}"
        );
    }
    let (d, code) = resolve(&m8, "inference", "h100-sxm", &["--host-memory", "1.5TiB"]);
    assert_eq!(code, 0, "{:?}", d.suggestions);
    assert_eq!(d.hardware.memory_total_bytes, 3 << 39);
}

/// Every built-in node profile validates on its own (against the built-in hardware profiles), and
/// `--hardware NODE` plans each one with its GPUs and its host: GPU count, host memory and physical cores are
/// the node's, whatever the machine `resolve` runs on.
#[test]
fn every_builtin_node_validates_and_plans_its_gpus_and_host() {
    use optimizer::profile::{self, ProfileKind, validate::validate_files};
    let nodes: Vec<_> = profile::builtin_files()
        .into_iter()
        .filter(|f| f.kind == Some(ProfileKind::Node))
        .collect();
    assert!(nodes.len() >= 6, "{} built-in nodes", nodes.len());
    let (set, diags) = validate_files(&nodes, true);
    assert!(diags.is_empty(), "{diags:#?}");
    let tmp = tempfile::tempdir().unwrap();
    let (m8, _) = common::synth(tmp.path(), "m8.gguf", LlamaShape::LLAMA3_8B);
    for e in &set.nodes {
        let n = &e.value;
        let (d, code) = resolve(&m8, "inference", &n.id, &[]);
        // A plan that fits but misses the preset's speed targets (exit 5, e.g. a Mac mini) still plans the node.
        assert!(
            code == 0 || code == 5,
            "{}: exit {code}, {:?}",
            n.id,
            d.suggestions
        );
        assert_eq!(d.hardware.gpus.len(), n.gpus.count as usize, "{}", n.id);
        assert_eq!(
            d.hardware.memory_total_bytes, n.host.memory_bytes,
            "{}",
            n.id
        );
        assert_eq!(
            d.hardware.cpu.physical_cores, n.host.physical_cores,
            "{}",
            n.id
        );
        assert!(
            !d.warnings.iter().any(|w| w.contains("this machine's host")),
            "{}: {:?}",
            n.id,
            d.warnings
        );
    }
}

/// `--hardware dgx-h100` plans 8 H100s with the DGX H100's 2 TiB and 112 cores (NVIDIA DGX BasePOD reference
/// architecture: "Dual Intel Xeon Platinum 8480C processors, 112 cores total", "2 TB of DDR5 system memory"),
/// not the desktop's 32 GiB and 8 cores, and the manifest's CPU request follows the plan's threads on those
/// cores; `--host-memory` and `--host-cores` still override the node's figures.
#[test]
fn dgx_h100_node_plans_eight_h100s_with_its_own_host() {
    let tmp = tempfile::tempdir().unwrap();
    let (m8, _) = common::synth(tmp.path(), "m8.gguf", LlamaShape::LLAMA3_8B);
    let (d, code) = resolve(&m8, "inference", "dgx-h100", &[]);
    assert_eq!(code, 0, "{:?}", d.suggestions);
    assert_eq!(d.hardware.gpus.len(), 8);
    assert!(
        d.hardware.gpus.iter().all(|g| g.name.contains("H100")),
        "{:?}",
        d.hardware.gpus
    );
    assert_eq!(d.hardware.memory_total_bytes, 2u64 << 40);
    assert_eq!(d.hardware.cpu.physical_cores, 112);
    let threads = d.settings.llama_cpp().expect("a llama.cpp plan").threads;
    assert_eq!(cpu_request(&d), threads.to_string());

    // The same GPUs as `8x:h100-sxm` on the desktop's host: the node is what changed the host.
    let (bare, _) = resolve(&m8, "inference", "8x:h100-sxm", &[]);
    assert_eq!(bare.hardware.cpu.physical_cores, 8);
    assert_eq!(bare.hardware.gpus.len(), 8);

    let (o, code) = resolve(
        &m8,
        "inference",
        "DGX H100",
        &["--host-memory", "1TiB", "--host-cores", "64"],
    );
    assert_eq!(code, 0, "{:?}", o.suggestions);
    assert_eq!(o.hardware.memory_total_bytes, 1u64 << 40);
    assert_eq!(o.hardware.cpu.physical_cores, 64);
    assert_eq!(o.hardware.gpus.len(), 8);
}

/// A node is one machine: `2x:dgx-h100` is a usage error that says to describe several with `--cluster`.
#[test]
fn a_count_before_a_node_id_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (m8, _) = common::synth(tmp.path(), "m8.gguf", LlamaShape::LLAMA3_8B);
    let o = common::bin_on("desktop-rtx4080.yaml")
        .args(["resolve", "--hardware", "2x:dgx-h100", "-m"])
        .arg(&m8)
        .output()
        .unwrap();
    common::assert_exit(&o, 2);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--cluster"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A user overlay's `nodes/` directory adds a node `--hardware` plans (here two RTX 4090s in a 16-core,
/// 128 GiB workstation), and one naming a GPU profile that does not exist is refused at load (exit 4) with a
/// message naming both the node and the missing GPU id.
#[test]
fn a_user_overlay_node_plans_and_one_with_an_unknown_gpu_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (m8, _) = common::synth(tmp.path(), "m8.gguf", LlamaShape::LLAMA3_8B);
    let node = |gpu: &str| {
        format!(
            "id: my-rig\nname: My rig\ngpus: {{profile: {gpu}, count: 2}}\nhost: {{cpu: Ryzen, physical_cores: 16, memory_bytes: 137438953472}}\ninterconnect: {{kind: pcie, pcie_gen: 4, pcie_lanes: 16}}\nsources:\n  gpus.count: \"my invoice\"\n  host: \"my invoice\"\n  interconnect: \"my invoice\"\n"
        )
    };
    let good = tmp.path().join("good");
    std::fs::create_dir_all(good.join("nodes")).unwrap();
    std::fs::write(good.join("nodes/my-rig.yaml"), node("rtx-4090")).unwrap();
    let (d, code) = common::resolve_doc_with(
        "desktop-rtx4080.yaml",
        Some(&good),
        &m8,
        "inference",
        "my-rig",
        &[],
    );
    assert_eq!(code, 0, "{:?}", d.suggestions);
    assert_eq!(d.hardware.gpus.len(), 2);
    assert!(
        d.hardware.gpus[0].name.contains("4090"),
        "{:?}",
        d.hardware.gpus
    );
    assert_eq!(d.hardware.memory_total_bytes, 128u64 << 30);
    assert_eq!(d.hardware.cpu.physical_cores, 16);

    let bad = tmp.path().join("bad");
    std::fs::create_dir_all(bad.join("nodes")).unwrap();
    std::fs::write(bad.join("nodes/my-rig.yaml"), node("rtx-9999")).unwrap();
    let o = common::bin_on("desktop-rtx4080.yaml")
        .arg("--profiles")
        .arg(&bad)
        .args(["resolve", "--hardware", "my-rig", "-m"])
        .arg(&m8)
        .output()
        .unwrap();
    common::assert_exit(&o, 4);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("\"my-rig\"") && err.contains("\"rtx-9999\""),
        "{err}"
    );
}
