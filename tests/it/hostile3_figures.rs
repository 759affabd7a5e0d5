//! Hostile input, round 3 (issue 24, item 7): figures no measurement can have. The planner is a pure function of
//! values, so the store's evidence is built here by hand: a rate of 1.79e308 tokens/s, a peak of 9.2e18 bytes,
//! CPU figures of 1e-300 are set aside with a warning naming their row (and the same shapes with sane values are
//! used, so each case could fail); one out-of-memory widens the reserve by a step, not the whole headroom; and
//! `observe` refuses to record what no device could do.

use crate::common;
use common::{assert_exit, bin, fixture, inventory, plan_workload, profiles, synth};

use optimizer::emit::Deployment;
use optimizer::evidence::{
    Basis, CpuFigure, Evidence, OOM_STEP_SHARE, PeakMemory, ThroughputPoint,
};
use optimizer::plan::Overrides;
use optimizer::profile::{Phase, RuntimeId};
use optimizer_testkit::gguf_builder::LlamaShape;

fn plan(inv: &str, model: &optimizer::model::ModelSpec, ev: &Evidence) -> Deployment {
    let set = profiles();
    let w = set.workload("chat").unwrap().value.clone();
    plan_workload(
        model,
        "m.gguf",
        &inventory(inv),
        &set,
        &w,
        &Overrides::default(),
        ev,
    )
    .unwrap()
}

fn decode_point(d: &Deployment, profile: &str, tokens_per_s: f64) -> ThroughputPoint {
    ThroughputPoint {
        row: 7,
        device_profile: profile.into(),
        runtime: RuntimeId::LlamaCpp,
        phase: Phase::Decode,
        tokens_per_s,
        concurrency: Some(u64::from(common::llama(d).parallel)),
        threads: None,
        gpu_layers: None,
        ubatch: None,
        tensor_parallel: None,
        tokens: None,
        what: "llama-bench import".into(),
    }
}

/// Every number of the document is finite and the document passes its own schema.
fn assert_valid(d: &Deployment) {
    let json = serde_json::to_value(d).unwrap();
    let schema = optimizer::schema::by_name("deployment").unwrap();
    let v = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = v.iter_errors(&json).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:?}");
    assert!(d.performance.decode_tokens_per_s.is_finite());
    assert!(d.performance.time_per_output_token_ms.is_finite());
}

#[test]
fn a_rate_no_device_could_reach_is_set_aside_and_a_real_one_is_used() {
    let dir = tempfile::tempdir().unwrap();
    let (_, model) = synth(dir.path(), "m8.gguf", LlamaShape::LLAMA3_8B);
    let base = plan("laptop-rtx4060.yaml", &model, &Evidence::default());
    let profile = base.hardware.gpus[0].profile.clone();
    // A sane rate for the same configuration replaces the prediction: the shape of the row is one the planner uses.
    let sane = Evidence {
        throughput: vec![decode_point(&base, &profile, 42.5)],
        ..Evidence::default()
    };
    let d = plan("laptop-rtx4060.yaml", &model, &sane);
    assert_eq!(d.performance.basis, Basis::Measured);
    assert_eq!(d.performance.decode_tokens_per_s, 42.5);
    for bad in [1.79e308, 1e9, 512_845.0, 1e-300] {
        let ev = Evidence {
            throughput: vec![decode_point(&base, &profile, bad)],
            ..Evidence::default()
        };
        let d = plan("laptop-rtx4060.yaml", &model, &ev);
        assert_ne!(d.performance.basis, Basis::Measured, "{bad}");
        assert_eq!(
            d.performance.decode_tokens_per_s, base.performance.decode_tokens_per_s,
            "{bad}"
        );
        assert!(
            d.warnings
                .iter()
                .any(|w| w.contains("store row 7") && w.contains("not used")),
            "{bad}: {:?}",
            d.warnings
        );
        assert_valid(&d);
    }
}

#[test]
fn a_peak_beyond_the_device_does_not_make_every_plan_no_fit() {
    let dir = tempfile::tempdir().unwrap();
    let (_, model) = synth(dir.path(), "m8.gguf", LlamaShape::LLAMA3_8B);
    let base = plan("laptop-rtx4060.yaml", &model, &Evidence::default());
    let gpu = base
        .memory
        .devices
        .iter()
        .find(|m| m.device == "cuda:0")
        .unwrap();
    let peak = |bytes: u64| Evidence {
        peak_memory: vec![PeakMemory {
            row: 9,
            device_profile: base.hardware.gpus[0].profile.clone(),
            runtime: RuntimeId::LlamaCpp,
            bytes,
            estimated_bytes: Some(gpu.total_bytes),
            context: "{}".into(),
            oom: false,
        }],
        ..Evidence::default()
    };
    // A peak the GPU can hold, 256 MiB over the estimate, widens its reserve by that much.
    let d = plan(
        "laptop-rtx4060.yaml",
        &model,
        &peak(gpu.total_bytes + (256 << 20)),
    );
    let after = d
        .memory
        .devices
        .iter()
        .find(|m| m.device == "cuda:0")
        .unwrap();
    assert_eq!(after.reserve_bytes, gpu.reserve_bytes + (256 << 20));
    // 9.2e18 bytes on an 8 GiB card: set aside, the plan is the plan without it.
    let d = plan(
        "laptop-rtx4060.yaml",
        &model,
        &peak(9_200_000_000_000_000_000),
    );
    assert_eq!(d.status, base.status);
    assert_eq!(common::llama(&d), common::llama(&base));
    assert!(
        d.warnings
            .iter()
            .any(|w| w.contains("store row 9") && w.contains("more than the device has")),
        "{:?}",
        d.warnings
    );
    let d = plan("laptop-rtx4060.yaml", &model, &peak(0));
    assert_eq!(common::llama(&d), common::llama(&base));
}

#[test]
fn one_out_of_memory_widens_the_reserve_by_a_step_and_a_later_peak_replaces_it() {
    let dir = tempfile::tempdir().unwrap();
    let (_, model) = synth(dir.path(), "m8.gguf", LlamaShape::LLAMA3_8B);
    let base = plan("laptop-rtx4060.yaml", &model, &Evidence::default());
    let gpu = base
        .memory
        .devices
        .iter()
        .find(|m| m.device == "cuda:0")
        .unwrap()
        .clone();
    let profile = base.hardware.gpus[0].profile.clone();
    let oom = |row| PeakMemory {
        row,
        device_profile: profile.clone(),
        runtime: RuntimeId::LlamaCpp,
        bytes: gpu.capacity_bytes + 1,
        estimated_bytes: Some(gpu.total_bytes),
        context: r#"{"oom":true}"#.into(),
        oom: true,
    };
    let step = (gpu.total_bytes as f64 * OOM_STEP_SHARE) as u64;
    let reserve = |ev: Evidence| {
        plan("laptop-rtx4060.yaml", &model, &ev)
            .memory
            .devices
            .iter()
            .find(|m| m.device == "cuda:0")
            .unwrap()
            .reserve_bytes
            - gpu.reserve_bytes
    };
    let headroom = gpu.capacity_bytes - gpu.total_bytes;
    let one = reserve(Evidence {
        peak_memory: vec![oom(1)],
        ..Evidence::default()
    });
    assert_eq!(one, step);
    assert!(
        one < headroom / 2 || headroom < 2 * step,
        "{one} of {headroom}"
    );
    let two = reserve(Evidence {
        peak_memory: vec![oom(1), oom(2)],
        ..Evidence::default()
    });
    assert_eq!(two, 2 * step);
    // A peak measured after the out-of-memories says how much was needed: it replaces them.
    let measured = PeakMemory {
        row: 3,
        bytes: gpu.total_bytes + (64 << 20),
        context: "{}".into(),
        oom: false,
        ..oom(3)
    };
    let after = reserve(Evidence {
        peak_memory: vec![oom(1), oom(2), measured],
        ..Evidence::default()
    });
    assert_eq!(after, 64 << 20);
}

#[test]
fn cpu_figures_no_cpu_could_produce_are_not_a_calibration() {
    let dir = tempfile::tempdir().unwrap();
    let (_, model) = synth(dir.path(), "m1.gguf", LlamaShape::LLAMA3_8B);
    let inv = inventory("cpu-server.yaml");
    let base = plan("cpu-server.yaml", &model, &Evidence::default());
    let fig = |row, metric: &str, threads, value| CpuFigure {
        row,
        run: 1,
        device_profile: base.hardware.cpu.profile.clone(),
        device_name: inv.cpu.model.clone(),
        host_cores: Some(inv.cpu.physical_cores),
        metric: metric.into(),
        threads,
        value,
        isa: None,
    };
    // A sane read bandwidth is a calibration: the prediction follows it and cites the row.
    let sane = Evidence {
        cpu: vec![fig(11, "cpu_read_bytes_per_s", 1, 10e9)],
        ..Evidence::default()
    };
    let cites = |d: &Deployment| d.provenance["performance"].detail.contains("store row 11");
    let d = plan("cpu-server.yaml", &model, &sane);
    assert!(cites(&d), "{:?}", d.provenance["performance"]);
    assert_ne!(
        d.performance.time_per_output_token_ms,
        base.performance.time_per_output_token_ms
    );
    let absurd = Evidence {
        cpu: vec![fig(11, "cpu_read_bytes_per_s", 1, 1e-300)],
        ..Evidence::default()
    };
    let d = plan("cpu-server.yaml", &model, &absurd);
    assert!(!cites(&d), "{:?}", d.provenance["performance"]);
    assert_eq!(
        d.performance.time_per_output_token_ms,
        base.performance.time_per_output_token_ms
    );
    assert!(
        d.warnings
            .iter()
            .any(|w| w.contains("store row 11") && w.contains("not used")),
        "{:?}",
        d.warnings
    );
}

#[test]
fn noisy_repetitions_of_a_cpu_figure_are_not_used() {
    let fig = |row, value| CpuFigure {
        row,
        run: 1,
        device_profile: "cpu-x".into(),
        device_name: "EPYC".into(),
        host_cores: Some(2),
        metric: "cpu_read_bytes_per_s".into(),
        threads: 2,
        value,
        isa: None,
    };
    use optimizer::evidence::CpuCalibration;
    // 10 % apart: one figure, the best repetition.
    let c = CpuCalibration::newest(&[fig(1, 10e9), fig(2, 9e9)], "cpu-x", "EPYC", 2).unwrap();
    assert_eq!(c.read_at(2.0), Some(10e9));
    // 98 % apart (a calibrate --quick on a busy machine): neither is the CPU's.
    let c = CpuCalibration::newest(&[fig(1, 10e9), fig(2, 0.2e9)], "cpu-x", "EPYC", 2).unwrap();
    assert_eq!(c.read_at(2.0), None);
}

fn resolve_to(db: &std::path::Path, model: &std::path::Path, out: &std::path::Path) {
    let o = bin()
        .arg("--db")
        .arg(db)
        .arg("--inventory")
        .arg(fixture("inventories/laptop-rtx4060.yaml"))
        .args(["resolve", "-w", "chat", "--format", "json", "-m"])
        .arg(model)
        .output()
        .unwrap();
    // The laptop's chat plan fits but misses the preset's per-token SLA: exit 5, the plan written all the same.
    assert_exit(&o, 5);
    std::fs::write(out, &o.stdout).unwrap();
}

#[test]
fn observe_refuses_rates_and_peaks_no_device_could_have() {
    let dir = tempfile::tempdir().unwrap();
    let (model, _) = synth(dir.path(), "m8.gguf", LlamaShape::LLAMA3_8B);
    let db = dir.path().join("o.db");
    let dep = dir.path().join("deploy.json");
    resolve_to(&db, &model, &dep);
    for (args, says) in [
        (
            vec!["--tokens-per-s", "1e9"],
            "above what the device can do",
        ),
        (vec!["--tokens-per-s", "1e-300"], "below any working run"),
        (
            vec![
                "--peak-memory-bytes",
                "18446744073709551615",
                "--device",
                "cuda:0",
            ],
            "more than the device has",
        ),
        (
            vec!["--peak-memory-bytes", "0", "--device", "cuda:0"],
            "0 bytes",
        ),
    ] {
        let o = bin()
            .arg("--db")
            .arg(&db)
            .args(["observe", "--deployment"])
            .arg(&dep)
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(4),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    // Nothing was recorded.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let n: i64 = conn
        .query_row("SELECT COUNT(*) FROM measurement", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 0);
}
