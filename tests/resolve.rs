//! `optimizer resolve`: whole documents for fixture machines × models × workloads (snapshots under
//! tests/snapshots/resolve/, regenerated with `OPTIMIZER_UPDATE_SNAPSHOTS=1 cargo test --test resolve`), the
//! planner's invariants on random models and machines, determinism, and the command's exit codes and files.

use std::path::{Path, PathBuf};
use std::process::Command;

use optimizer::emit::{Deployment, Status, Strategy};
use optimizer::hardware::{self, Cpu, Gpu, GpuVendor, Inventory, Memory};
use optimizer::memory::llama_cpp::{self, FlashAttn, GpuTarget, Machine, Params};
use optimizer::model::gguf_builder::{LlamaShape, synthetic_llama, write_sparse};
use optimizer::model::{self, GgmlType, ModelSpec};
use optimizer::plan::{self, Inputs, Measurements, Overrides};
use optimizer::profile::{self, ProfileSet};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn inventory(name: &str) -> Inventory {
    hardware::load_inventory(&root().join("tests/fixtures/inventories").join(name)).unwrap()
}

fn profiles() -> ProfileSet {
    profile::load(&[]).unwrap()
}

/// A sparse Llama-3-shaped model in `dir`.
fn synth(dir: &Path, name: &str, shape: LlamaShape) -> (PathBuf, ModelSpec) {
    let path = dir.join(name);
    write_sparse(&synthetic_llama(shape), &path).unwrap();
    let spec = model::load(&path).unwrap();
    (path, spec)
}

fn plan_for(
    spec: &ModelSpec,
    label: &str,
    inv: &Inventory,
    workload: &str,
    set: &ProfileSet,
) -> Deployment {
    let w = &set.workload(workload).unwrap().value;
    plan::resolve(&Inputs {
        model: spec,
        model_path: label,
        inventory: inv,
        hardware_source: "inventory",
        profiles: set,
        workload: w,
        measurements: &Measurements::default(),
        overrides: &Overrides::default(),
    })
    .unwrap()
}

fn snapshot(name: &str, doc: &Deployment) {
    let text = optimizer::yaml::to_string(doc).unwrap();
    let path = root()
        .join("tests/snapshots/resolve")
        .join(format!("{name}.yaml"));
    if std::env::var_os("OPTIMIZER_UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "missing snapshot {}: run with OPTIMIZER_UPDATE_SNAPSHOTS=1",
            path.display()
        )
    });
    assert!(
        committed == text,
        "snapshot {name} changed; review the diff and rerun with OPTIMIZER_UPDATE_SNAPSHOTS=1:\n{text}"
    );
}

/// Every device of a fitting plan stays within its capacity minus the rules' reserve.
fn assert_fits(d: &Deployment) {
    for m in &d.memory.devices {
        assert!(
            m.total_bytes <= m.capacity_bytes.saturating_sub(m.reserve_bytes),
            "{}: {} > {} - {}",
            m.device,
            m.total_bytes,
            m.capacity_bytes,
            m.reserve_bytes
        );
    }
}

#[test]
fn fixture_machines_models_and_workloads() {
    let set = profiles();
    let dir = tempfile::tempdir().unwrap();
    let (_, m8) = synth(dir.path(), "llama3-8b.gguf", LlamaShape::LLAMA3_8B);
    let (_, m70) = synth(dir.path(), "llama3-70b.gguf", LlamaShape::LLAMA3_70B);
    let l8 = "models/llama3-8b-q4_k_m.gguf";
    let l70 = "models/llama3-70b-q4_k_m.gguf";

    // Laptop RTX 4060 (8 GiB) with an 8B Q4_K_M: every layer on the GPU.
    let d = plan_for(
        &m8,
        l8,
        &inventory("laptop-rtx4060.yaml"),
        "inference",
        &set,
    );
    assert_eq!(
        (d.status, d.placement.strategy, d.placement.gpu_layers),
        (Status::Fits, Strategy::Gpu, 33)
    );
    assert_fits(&d);
    snapshot("laptop-rtx4060-8b-inference", &d);

    // GTX 1650 (4 GiB): hybrid, with the largest -ngl that fits under the reserve.
    let inv = inventory("gtx1650-4gb.yaml");
    let d = plan_for(&m8, l8, &inv, "inference", &set);
    assert_eq!(d.placement.strategy, Strategy::Hybrid);
    assert_fits(&d);
    let gpu = &d.memory.devices[1];
    let one_more = llama_cpp::estimate(
        &m8,
        &Params {
            n_ctx: d.settings.context_length,
            n_batch: d.settings.batch_size,
            n_ubatch: d.settings.ubatch_size,
            n_parallel: d.settings.parallel,
            type_k: GgmlType::F16,
            type_v: GgmlType::F16,
            flash_attn: FlashAttn::On,
            n_gpu_layers: d.placement.gpu_layers as i32 + 1,
            ..Params::default()
        },
        &Machine {
            cpu_features: inv.cpu.features.clone(),
            gpus: vec![GpuTarget {
                name: "gtx".into(),
                free_bytes: gpu.capacity_bytes,
                overhead_bytes: gpu.overhead_bytes,
            }],
        },
    )
    .unwrap();
    // The workload prefers f16 and it fits; q8_0 once won on a 3 % predicted gain (issue 8), below the kv-cache
    // rule's threshold for giving up KV precision.
    assert_eq!(d.settings.cache_type_k, "f16");
    // llama.cpp offloads from the last layer, the output layer first: -ngl N puts the output and N - 1 blocks
    // on the GPU.
    let ngl = d.placement.gpu_layers;
    assert!(d.placement.devices[1].output_layer && !d.placement.devices[0].output_layer);
    assert_eq!(d.placement.devices[1].layers, Some([33 - ngl, 31]));
    assert_eq!(d.placement.devices[0].layers, Some([0, 32 - ngl]));
    assert!(
        one_more.devices[1].total_bytes > gpu.capacity_bytes - gpu.reserve_bytes,
        "-ngl {} would also fit",
        d.placement.gpu_layers + 1
    );
    snapshot("gtx1650-8b-inference", &d);

    // CPU-only server.
    let d = plan_for(&m8, l8, &inventory("cpu-server.yaml"), "chat", &set);
    assert_eq!(
        (d.placement.strategy, d.placement.gpu_layers),
        (Strategy::Cpu, 0)
    );
    assert_fits(&d);
    snapshot("cpu-server-8b-chat", &d);

    // 2x RTX 3090 with a 70B-class model: split across both GPUs.
    let d = plan_for(
        &m70,
        l70,
        &inventory("workstation-2x3090.yaml"),
        "inference",
        &set,
    );
    assert_eq!(d.status, Status::Fits);
    assert!(
        matches!(d.placement.strategy, Strategy::MultiGpu | Strategy::Hybrid),
        "{:?}",
        d.placement.strategy
    );
    assert_eq!(d.memory.devices.len(), 3, "both GPUs used");
    assert_fits(&d);
    snapshot("workstation-2x3090-70b-inference", &d);

    // 8x H100: one GPU suffices for a latency workload.
    let d = plan_for(&m8, l8, &inventory("cloud-8xh100.yaml"), "inference", &set);
    assert_eq!(d.placement.strategy, Strategy::Gpu);
    assert_eq!(d.memory.devices.len(), 2);
    assert_eq!(
        d.launch
            .kubernetes
            .resources
            .limits
            .get("nvidia.com/gpu")
            .map(String::as_str),
        Some("1")
    );
    snapshot("cloud-8xh100-8b-inference", &d);

    // A 70B model on the laptop cannot fit: the nearest candidate and what would make it fit.
    let d = plan_for(
        &m70,
        l70,
        &inventory("laptop-rtx4060.yaml"),
        "inference",
        &set,
    );
    assert_eq!(d.status, Status::NoFit);
    assert!(
        d.suggestions
            .iter()
            .any(|s| s.contains("smaller quantization")),
        "{:?}",
        d.suggestions
    );
    assert!(
        d.suggestions.iter().any(|s| s.contains("more free memory")),
        "{:?}",
        d.suggestions
    );
    snapshot("laptop-rtx4060-70b-nofit", &d);
}

#[test]
fn documents_are_deterministic_and_carry_launch_arguments() {
    let set = profiles();
    let dir = tempfile::tempdir().unwrap();
    let (_, m8) = synth(dir.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    let inv = inventory("workstation-2x3090.yaml");
    let a = serde_yaml_ng::to_string(&plan_for(&m8, "m.gguf", &inv, "chat", &set)).unwrap();
    let b = serde_yaml_ng::to_string(&plan_for(&m8, "m.gguf", &inv, "chat", &set)).unwrap();
    assert_eq!(a, b);
    let d = plan_for(&m8, "m.gguf", &inv, "chat", &set);
    let argv = &d.launch.llama_server.argv;
    let flag = |f: &str| {
        argv.iter()
            .position(|a| a == f)
            .map(|i| argv[i + 1].clone())
    };
    assert_eq!(argv[0], "llama-server");
    assert_eq!(flag("-c"), Some(d.settings.context_length.to_string()));
    assert_eq!(flag("-ngl"), Some(d.placement.gpu_layers.to_string()));
    assert_eq!(flag("-np"), Some(d.settings.parallel.to_string()));
    assert_eq!(flag("-ctk"), Some(d.settings.cache_type_k.clone()));
    assert_eq!(d.launch.ollama.num_gpu, d.placement.gpu_layers);
    for key in [
        "settings.context_length",
        "settings.threads",
        "settings.flash_attention",
        "placement.gpu_layers",
    ] {
        assert!(d.provenance.contains_key(key), "{key}");
    }
    assert_eq!(d.api_version, "optimizer/v1");
}

/// A tiny xorshift so the property test is reproducible without a crate.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

#[test]
fn chosen_plans_fit_and_no_fitting_alternative_scores_better() {
    let set = profiles();
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let workloads = [
        "inference",
        "chat",
        "batch-inference",
        "long-context",
        "code-generation",
    ];
    for case in 0..24 {
        let heads = [8u64, 16, 32, 64][rng.range(0, 3) as usize];
        let shape = LlamaShape {
            n_layer: rng.range(4, 48),
            n_embd: heads * 128,
            n_ff: heads * 128 * rng.range(2, 4),
            n_head: heads,
            n_head_kv: heads / [1u64, 4, 8][rng.range(0, 2) as usize],
            n_vocab: [32_000u64, 128_256][rng.range(0, 1) as usize],
            n_merges: 0,
            n_ctx_train: [4096u64, 8192, 32768][rng.range(0, 2) as usize],
        };
        let (_, spec) = synth(dir.path(), &format!("case{case}.gguf"), shape);
        let n_gpus = rng.range(0, 3) as u32;
        let inv = Inventory {
            cpu: Cpu {
                model: "test".into(),
                vendor: "test".into(),
                physical_cores: rng.range(2, 64) as u32,
                logical_cpus: 128,
                features: vec!["avx2".into(), "fma".into()],
                arch: Some("x86_64".into()),
                frequency_mhz: Some(3000),
                caches: None,
                effective_cpus: None,
                cpu_bound: None,
            },
            memory: {
                let total = rng.range(8, 256) << 30;
                Memory {
                    total_bytes: total,
                    available_bytes: total * 9 / 10,
                    swap_total_bytes: None,
                    swap_free_bytes: None,
                    host_total_bytes: None,
                    bound: None,
                    unified: false,
                }
            },
            gpus: (0..n_gpus)
                .map(|i| {
                    let total = rng.range(4, 80) << 30;
                    Gpu {
                        index: i,
                        name: "NVIDIA GeForce RTX 3090".into(),
                        vendor: GpuVendor::Nvidia,
                        memory_total_bytes: total,
                        memory_free_bytes: total - (total >> 5),
                        compute_capability: Some("8.6".into()),
                        uuid: None,
                        pci_bus_id: None,
                        pci_id: Some("10de:2204".into()),
                        memory_used_bytes: None,
                        sm_count: None,
                        max_sm_clock_mhz: None,
                        max_memory_clock_mhz: None,
                        memory_bus_width_bits: None,
                        peak_bandwidth_bytes_per_s: None,
                        pcie_generation: None,
                        pcie_width: None,
                        power_limit_w: None,
                        driver_version: None,
                        cuda_driver_version: None,
                        mig_enabled: None,
                        processes: vec![],
                        unified_memory: false,
                        gpu_working_set_bytes: None,
                        source: None,
                    }
                })
                .collect(),
            notes: vec![],
        };
        let w = workloads[rng.range(0, workloads.len() as u64 - 1) as usize];
        let d = plan_for(&spec, "case.gguf", &inv, w, &set);
        if d.status == Status::Fits {
            assert_fits(&d);
            // A better-scoring alternative may lose only by quantizing the KV cache further than the workload's
            // choice, which the kv-cache rules allow for memory, not for this gain, and it must say so.
            for a in d.alternatives.iter().filter(|a| a.fits) {
                let same_kv = a.cache_type_k == d.settings.cache_type_k;
                assert!(
                    a.score >= d.performance.score * (1.0 - 0.011)
                        || (!same_kv && a.why.contains("KV cache")),
                    "case {case} ({w}): alternative {a:?} scores better than the chosen {}",
                    d.performance.score
                );
            }
        } else {
            assert!(
                !d.suggestions.is_empty(),
                "case {case}: no-fit without suggestions"
            );
        }
    }
}

/// The binary with its measurement database in the temp directory, away from the user's.
fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_optimizer"));
    c.env(
        "OPTIMIZER_DB",
        std::env::temp_dir().join(format!("optimizer-test-{}.db", std::process::id())),
    );
    c
}

#[test]
fn the_store_is_created_on_first_use_and_a_bad_one_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let (m8, _) = synth(dir.path(), "m8.gguf", LlamaShape::LLAMA3_8B);
    let data = dir.path().join("xdg-data");
    let run = |envs: &[(&str, &Path)]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_optimizer"));
        c.env_remove("OPTIMIZER_DB");
        for (k, v) in envs {
            c.env(k, v);
        }
        c.arg("--inventory")
            .arg(root().join("tests/fixtures/inventories/cpu-server.yaml"))
            .args(["resolve", "-m"])
            .arg(&m8)
            .output()
            .unwrap()
    };
    let o = run(&[("XDG_DATA_HOME", &data)]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        data.join("optimizer/optimizer.db").exists(),
        "created on first use"
    );
    let doc: serde_json::Value = serde_yaml_ng::from_slice(&o.stdout).unwrap();
    assert!(
        doc["provenance"]["performance.basis"]["detail"]
            .as_str()
            .unwrap()
            .contains("0 measurements")
    );

    let bad = dir.path().join("bad.db");
    let garbage = b"not a database ".repeat(400);
    std::fs::write(&bad, &garbage).unwrap();
    let o = run(&[("OPTIMIZER_DB", &bad)]);
    assert_eq!(
        o.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("bad.db"));
    assert!(o.stdout.is_empty(), "no partial document");
    assert_eq!(std::fs::read(&bad).unwrap(), garbage, "no data lost");
}

#[test]
fn command_exit_codes_files_and_explanations() {
    let dir = tempfile::tempdir().unwrap();
    let (m8, _) = synth(dir.path(), "m8.gguf", LlamaShape::LLAMA3_8B);
    let (m70, _) = synth(dir.path(), "m70.gguf", LlamaShape::LLAMA3_70B);
    let inv = |n: &str| root().join("tests/fixtures/inventories").join(n);

    // Fits: YAML on stdout, the explanation on stderr.
    let o = bin()
        .arg("--inventory")
        .arg(inv("laptop-rtx4060.yaml"))
        .args(["resolve", "-m"])
        .arg(&m8)
        .args(["-w", "chat", "--explain"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let doc: serde_json::Value = serde_yaml_ng::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["kind"], "Deployment");
    assert!(String::from_utf8_lossy(&o.stderr).contains("Chose"));

    // Nothing fits: exit 3, the document still on stdout.
    let o = bin()
        .arg("--inventory")
        .arg(inv("laptop-rtx4060.yaml"))
        .args(["resolve", "-m"])
        .arg(&m70)
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["status"], "no-fit");

    // -o writes the file (atomically: no temporary left beside it); pinned values say `user`.
    let out = dir.path().join("deploy.yaml");
    let o = bin()
        .arg("--inventory")
        .arg(inv("cpu-server.yaml"))
        .args(["resolve", "-m"])
        .arg(&m8)
        .args(["-c", "2048", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.stdout.is_empty());
    let doc: serde_json::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    // -c pins the context per sequence; the inference preset runs one sequence.
    assert_eq!(doc["settings"]["context_per_sequence"], 2048);
    assert_eq!(doc["settings"]["context_length"], 2048);
    assert_eq!(
        doc["provenance"]["settings.context_per_sequence"]["source"],
        "user"
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp."))
        .collect();
    assert!(leftovers.is_empty());

    // Planning for profiled GPUs.
    let o = bin()
        .arg("--inventory")
        .arg(inv("cpu-server.yaml"))
        .args(["resolve", "-m"])
        .arg(&m70)
        .args(["--hardware", "2x:a100-80gb-sxm", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["hardware"]["source"], "profile");
    assert_eq!(doc["hardware"]["gpus"][0]["profile"], "a100-80gb-sxm");

    // Usage errors.
    for args in [
        ["-w", "no-such-workload"],
        ["-w", "training"],
        ["--hardware", "nope"],
    ] {
        let o = bin()
            .arg("--inventory")
            .arg(inv("cpu-server.yaml"))
            .args(["resolve", "-m"])
            .arg(&m8)
            .args(args)
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn throughput_plans_stop_adding_sequences_at_the_roofline_knee() {
    let set = profiles();
    let dir = tempfile::tempdir().unwrap();
    let (_, m8) = synth(dir.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    // A CPU server saturates its FLOPs long before the preset's 256 sequences.
    let d = plan_for(
        &m8,
        "m.gguf",
        &inventory("cpu-server.yaml"),
        "batch-inference",
        &set,
    );
    assert!(d.settings.parallel < 256, "{}", d.settings.parallel);
    let p = &d.provenance["settings.parallel"];
    assert!(p.detail.contains("roofline knee"), "{}", p.detail);
    assert_fits(&d);
}
