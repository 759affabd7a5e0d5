//! The node profiles added for issue 25 (cloud instances, DGX B200, Apple machines, a ThinkStation P620
//! workstation and a Legion Pro 7i gaming laptop): each validates with the built-in set and carries the GPU
//! count, host cores and host memory its vendor's page states (the figures below are the ones quoted in each
//! file's `sources`), and `--hardware ID` plans that node's GPUs and host.

use crate::common;

use optimizer::profile::{self, ProfileKind, validate::validate_files};
use optimizer_testkit::gguf_builder::LlamaShape;

const GIB: u64 = 1 << 30;

/// id, GPU profile, GPU count, physical cores, logical CPUs, host memory in GiB.
type Node = (&'static str, &'static str, u32, u32, Option<u32>, u64);

const NODES: &[Node] = &[
    ("dgx-b200", "b200", 8, 112, None, 2048),
    ("a3-highgpu-8g", "h100-sxm", 8, 104, Some(208), 1872),
    ("a2-highgpu-8g", "a100-40gb-sxm", 8, 48, Some(96), 680),
    ("a2-ultragpu-8g", "a100-80gb-sxm", 8, 48, Some(96), 1360),
    ("g2-standard-96", "l4", 8, 48, Some(96), 384),
    ("standard-nd96isr-h100-v5", "h100-sxm", 8, 96, None, 1900),
    ("standard-nd96asr-v4", "a100-40gb-sxm", 8, 96, None, 900),
    ("p4de-24xlarge", "a100-80gb-sxm", 8, 48, Some(96), 1152),
    ("p5en-48xlarge", "h200", 8, 96, Some(192), 2048),
    ("g6e-48xlarge", "l40s", 8, 96, Some(192), 1536),
    ("g6-48xlarge", "l4", 8, 96, Some(192), 768),
    (
        "mac-studio-m3-ultra-512gb",
        "apple-m3-ultra",
        1,
        32,
        None,
        512,
    ),
    (
        "macbook-pro-16-m4-max-128gb",
        "apple-m4-max",
        1,
        16,
        None,
        128,
    ),
    (
        "thinkstation-p620-2x-rtx-a6000",
        "rtx-a6000",
        2,
        64,
        Some(128),
        512,
    ),
    (
        "legion-pro-7i-gen8-rtx-4090",
        "rtx-4090-laptop",
        1,
        24,
        Some(32),
        32,
    ),
];

#[test]
fn new_nodes_carry_their_sourced_figures_and_plan_on_their_host() {
    let files: Vec<_> = profile::builtin_files()
        .into_iter()
        .filter(|f| f.kind == Some(ProfileKind::Node))
        .collect();
    let (set, diags) = validate_files(&files, true);
    assert!(diags.is_empty(), "{diags:#?}");
    let tmp = tempfile::tempdir().unwrap();
    let (m8, _) = common::synth(tmp.path(), "m8.gguf", LlamaShape::LLAMA3_8B);
    for &(id, gpu, count, cores, logical, mem_gib) in NODES {
        let n = &set
            .nodes
            .iter()
            .find(|e| e.value.id == id)
            .unwrap_or_else(|| panic!("no built-in node {id}"))
            .value;
        assert_eq!(n.gpus.profile, gpu, "{id}");
        assert_eq!(n.gpus.count, count, "{id}");
        assert_eq!(n.host.physical_cores, cores, "{id}");
        assert_eq!(n.host.logical_cpus, logical, "{id}");
        assert_eq!(n.host.memory_bytes, mem_gib * GIB, "{id}");
        assert!(!n.sources.is_empty(), "{id}");

        let (d, code) = common::resolve_doc("desktop-rtx4080.yaml", &m8, "inference", id, &[]);
        assert_eq!(code, 0, "{id}: {:?} {:?}", d.suggestions, d.warnings);
        assert_eq!(d.hardware.gpus.len(), count as usize, "{id}");
        assert_eq!(d.hardware.memory_total_bytes, mem_gib * GIB, "{id}");
        assert_eq!(d.hardware.cpu.physical_cores, cores, "{id}");
    }
}
