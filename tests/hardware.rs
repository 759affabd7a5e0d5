//! Inventories and profile matching on fixture machines, and bad inventory input.

use std::path::{Path, PathBuf};
use std::process::Command;

use optimizer::hardware::{self, Bound, Inventory};
use optimizer::profile::matching::{MatchedBy, Resolution, resolve};
use optimizer::profile::{self, ArchitectureRule, HardwareProfile, ProfileSet};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/inventories")
        .join(name)
}

fn inventory(name: &str) -> Inventory {
    hardware::load_inventory(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn builtin() -> ProfileSet {
    profile::load(&[]).expect("built-in profiles are valid")
}

/// Resolves every GPU of an inventory: (profile id or derived id, how).
fn resolved(inv: &Inventory, set: &ProfileSet) -> Vec<(String, &'static str)> {
    let hw: Vec<&HardwareProfile> = set.hardware.iter().map(|e| &e.value).collect();
    let archs: Vec<&ArchitectureRule> = set.architectures().collect();
    inv.gpus
        .iter()
        .map(|g| match resolve(g, &hw, &archs) {
            Resolution::Profile { profile, by } => (
                profile.id.clone(),
                match by {
                    MatchedBy::PciId => "pci",
                    MatchedBy::Name => "name",
                },
            ),
            Resolution::Derived { profile, .. } => (profile.id.clone(), "derived"),
            Resolution::Unresolved { .. } => (String::new(), "unresolved"),
        })
        .collect()
}

#[test]
fn fixture_machines_resolve_to_their_profiles() {
    let set = builtin();
    let ws = inventory("workstation-2x3090.yaml");
    assert_eq!(
        resolved(&ws, &set),
        vec![("rtx-3090".into(), "pci"), ("rtx-3090".into(), "pci")]
    );
    let cloud = inventory("cloud-8xh100.yaml");
    let r = resolved(&cloud, &set);
    assert_eq!(r.len(), 8);
    assert!(
        r.iter().all(|(id, by)| id == "h100-sxm" && *by == "pci"),
        "{r:?}"
    );
    let ct = inventory("container-cgroup.yaml");
    assert_eq!(resolved(&ct, &set), vec![("t4".into(), "pci")]);
    assert!(inventory("cpu-server.yaml").gpus.is_empty());
}

#[test]
fn a_gpu_matches_by_name_when_its_pci_id_is_unknown() {
    let set = builtin();
    let mut ws = inventory("workstation-2x3090.yaml");
    for g in &mut ws.gpus {
        g.pci_id = None;
    }
    assert_eq!(resolved(&ws, &set)[0], ("rtx-3090".into(), "name"));
}

#[test]
fn memory_size_tells_apart_profiles_that_share_a_name() {
    let set = builtin();
    let mut ct = inventory("container-cgroup.yaml");
    let g = &mut ct.gpus[0];
    g.name = "NVIDIA A100-SXM4-40GB".into();
    g.pci_id = None;
    g.memory_total_bytes = 42_505_273_344;
    let forty = resolved(&ct, &set)[0].0.clone();
    ct.gpus[0].name = "NVIDIA A100-SXM4-80GB".into();
    ct.gpus[0].memory_total_bytes = 85_899_345_920;
    let eighty = resolved(&ct, &set)[0].0.clone();
    assert_eq!(forty, "a100-40gb-sxm");
    assert_eq!(eighty, "a100-80gb-sxm");
}

#[test]
fn unseen_gpus_get_heuristic_profiles_from_their_probe() {
    let set = builtin();
    let hw: Vec<&HardwareProfile> = set.hardware.iter().map(|e| &e.value).collect();
    let archs: Vec<&ArchitectureRule> = set.architectures().collect();

    // Blackwell (12.0) has no architecture rule: bandwidth is derived, TFLOPS are not, and the notes say so.
    let inv = inventory("unseen-gpu.yaml");
    let Resolution::Derived { profile, notes } = resolve(&inv.gpus[0], &hw, &archs) else {
        panic!("expected a derived profile");
    };
    assert!((profile.memory.bandwidth_gb_s - 1792.128).abs() < 1e-6);
    assert!(profile.tensor_tflops.is_none());
    assert!(notes.iter().any(|n| n.contains("12.0")), "{notes:?}");
    assert!(
        profile
            .sources
            .values()
            .all(|s| s.starts_with("heuristic") || s.starts_with("probe"))
    );

    // A laptop RTX 4060 has no profile of its own; Ada's rates give 24 SMs × 3,105 MHz × 512 = 38.2 TFLOPS.
    let inv = inventory("laptop-rtx4060.yaml");
    let Resolution::Derived { profile, .. } = resolve(&inv.gpus[0], &hw, &archs) else {
        panic!("expected a derived profile");
    };
    let t = profile.tensor_tflops.and_then(|t| t.fp16_fp32acc).unwrap();
    assert!((t - 24.0 * 3105.0 * 512.0 / 1e6).abs() < 0.01, "{t}");
    assert_eq!(profile.architecture.as_deref(), Some("ada-geforce"));

    // Without memory clock and bus width nothing can be derived, and the resolution says why.
    let mut g = inv.gpus[0].clone();
    g.peak_bandwidth_bytes_per_s = None;
    assert!(matches!(
        resolve(&g, &hw, &archs),
        Resolution::Unresolved { .. }
    ));
}

#[test]
fn container_limits_are_part_of_the_inventory() {
    let ct = inventory("container-cgroup.yaml");
    assert_eq!(ct.memory.bound, Some(Bound::CgroupV2));
    assert_eq!(ct.memory.total_bytes, 8 << 30);
    assert_eq!(ct.memory.host_total_bytes, Some(64 << 30));
    assert_eq!(ct.cpu.effective_cpus, Some(4.0));
}

#[test]
fn cgroup_limits_bound_host_figures() {
    let mut inv = inventory("cpu-server.yaml");
    let limits = hardware::cgroup::Limits {
        memory_bytes: Some(16 << 30),
        cpus: Some(6.0),
        memory_bound: Some(Bound::CgroupV1),
        cpu_bound: Some(Bound::CgroupV2),
        notes: vec![],
    };
    let host_total = inv.memory.total_bytes;
    hardware::apply_limits(&mut inv.cpu, &mut inv.memory, &limits);
    assert_eq!(inv.memory.total_bytes, 16 << 30);
    assert_eq!(inv.memory.available_bytes, 16 << 30);
    assert_eq!(inv.memory.host_total_bytes, Some(host_total));
    assert_eq!(inv.memory.bound, Some(Bound::CgroupV1));
    assert_eq!(inv.cpu.effective_cpus, Some(6.0));
    assert_eq!(inv.cpu.cpu_bound, Some(Bound::CgroupV2));
    // A limit above the host's figure does not raise it.
    let mut inv = inventory("cpu-server.yaml");
    let big = hardware::cgroup::Limits {
        memory_bytes: Some(u64::MAX / 2),
        cpus: Some(1000.0),
        ..limits
    };
    hardware::apply_limits(&mut inv.cpu, &mut inv.memory, &big);
    assert_eq!(inv.memory.total_bytes, host_total);
    assert_eq!(inv.cpu.effective_cpus, None);
}

#[test]
fn live_probe_never_fails_and_round_trips_through_yaml() {
    let inv = hardware::probe_live();
    assert!(inv.cpu.logical_cpus >= 1);
    assert!(inv.memory.total_bytes > 0);
    let yaml = serde_yaml_ng::to_string(&inv).unwrap();
    assert_eq!(hardware::parse_inventory(&yaml).unwrap(), inv);
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_optimizer"))
}

#[test]
fn probe_uses_the_inventory_from_flag_or_environment() {
    let f = fixture("workstation-2x3090.yaml");
    let o = bin()
        .arg("--inventory")
        .arg(&f)
        .args(["probe"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("source        inventory"), "{out}");
    assert!(
        out.contains("profile rtx-3090 (matched by PCI id)"),
        "{out}"
    );

    let o = bin()
        .env("OPTIMIZER_INVENTORY", &f)
        .args(["probe", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["gpus"].as_array().unwrap().len(), 2);

    // The flag wins over the environment.
    let o = bin()
        .env("OPTIMIZER_INVENTORY", fixture("cpu-server.yaml"))
        .arg("--inventory")
        .arg(&f)
        .args(["probe", "--format", "json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["gpus"].as_array().unwrap().len(), 2);
}

#[test]
fn bad_inventories_exit_4_naming_the_file_and_defect() {
    let d = tempfile::tempdir().unwrap();
    let cases: &[(&str, &str, &str)] = &[
        (
            "unknown-field.yaml",
            "cpu: {model: x, vendor: y, physical_cores: 1, logical_cpus: 1, features: [], colour: red}\nmemory: {total_bytes: 1, available_bytes: 1}\n",
            "colour",
        ),
        (
            "free-over-total.yaml",
            "cpu: {model: x, vendor: y, physical_cores: 1, logical_cpus: 1, features: []}\nmemory: {total_bytes: 1, available_bytes: 1}\ngpus: [{index: 0, name: g, vendor: nvidia, memory_total_bytes: 1, memory_free_bytes: 2}]\n",
            "memory_free_bytes",
        ),
        (
            "bad-cc.yaml",
            "cpu: {model: x, vendor: y, physical_cores: 1, logical_cpus: 1, features: []}\nmemory: {total_bytes: 1, available_bytes: 1}\ngpus: [{index: 0, name: g, vendor: nvidia, memory_total_bytes: 2, memory_free_bytes: 1, compute_capability: \"eight\"}]\n",
            "compute_capability",
        ),
        (
            "cores.yaml",
            "cpu: {model: x, vendor: y, physical_cores: 0, logical_cpus: 1, features: []}\nmemory: {total_bytes: 1, available_bytes: 1}\n",
            "physical_cores",
        ),
        (
            "negative.yaml",
            "cpu: {model: x, vendor: y, physical_cores: -1, logical_cpus: 1, features: []}\nmemory: {total_bytes: 1, available_bytes: 1}\n",
            "physical_cores",
        ),
        (
            "missing.yaml",
            "cpu: {model: x, vendor: y, physical_cores: 1, logical_cpus: 1, features: []}\n",
            "memory",
        ),
        (
            "deep.yaml",
            &format!("cpu: {}1{}\n", "[".repeat(1000), "]".repeat(1000)),
            "deeper",
        ),
    ];
    for (name, text, needle) in cases {
        let p = d.path().join(name);
        std::fs::write(&p, text).unwrap();
        let o = bin()
            .arg("--inventory")
            .arg(&p)
            .arg("probe")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(4), "{name}: {err}");
        assert!(err.contains(name) && err.contains(needle), "{name}: {err}");
        assert!(o.stdout.is_empty(), "{name}: no partial output");
    }
    let o = bin()
        .args(["--inventory", "/nonexistent/inv.yaml", "probe"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}
