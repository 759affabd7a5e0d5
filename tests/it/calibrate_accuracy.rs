//! Issue 10's accuracy goal: after `optimizer calibrate --quick` on this project's CPU machine, what `resolve`
//! predicts for prefill and decode at the threads it chooses is within 15 % of the pinned llama-bench
//! (tests/fixtures/llama-bench/cpu-epyc-milan-2vcpu.json) for every real model of the table (Llama-3.2-1B Q8_0,
//! Q4_0 and Q4_K_M, Gemma-2-2B Q4_K_M, Qwen2-7B Q4_0, Llama-3-8B Q4_K_M: four shapes, three quantization types
//! and the K-quant mixes; three of them held out of the fit of the kernel constants).
//!
//! The calibration is the committed output of `optimizer calibrate --quick --format json` on that machine
//! (tests/fixtures/calibrate/epyc-milan-2vcpu-quick.json), fed to the planner as the store would return it; the
//! quick run never ran the models. `benches/calibrate/accuracy.sh` re-measures it and rewrites the table in
//! tests/fixtures/calibrate/accuracy.txt from this test's output. The tiny models of the llama-bench table (2 and
//! 16 blocks of width 256) are printed but not held to the goal: their decode is per-token overhead, which no
//! micro-benchmark of bandwidth or dot products measures.

use crate::common;
use common::{build, fixture, profiles, root};

use std::collections::BTreeMap;

use optimizer::evidence::{Basis, CpuFigure, Evidence};
use optimizer::hardware::{self, Inventory};
use optimizer::model::{self, ModelSpec};
use optimizer::plan::Overrides;
use optimizer::profile::{Phase, ProfileSet, ReserveTarget, RuntimeId};
use serde_json::Value;

/// The goal for calibrated predictions.
const MAX_CALIBRATED_ERROR: f64 = 0.15;
/// Models of the llama-bench table held to the goal (the tiny ones are not: see the module doc).
const REAL_MODELS: &[&str] = &[
    "llama3.2-1b-q8_0",
    "llama3.2-1b-q4_0",
    "llama3.2-1b-q4_k_m",
    "gemma2-2b-q4_k_m",
    "qwen2-7b-q4_0",
    "llama3-8b-q4_k_m",
];

fn read(rel: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture(rel)).unwrap()).unwrap()
}

fn inventory() -> Inventory {
    hardware::load_inventory(&fixture("llama-bench/inventory-epyc-milan-2vcpu.yaml")).unwrap()
}

/// The figures of a `calibrate --format json` output as the store returns them.
pub(crate) fn figures(cal: &Value) -> Vec<CpuFigure> {
    cal["figures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| CpuFigure {
            row: f["rows"][0].as_i64().unwrap(),
            run: cal["run"].as_i64().unwrap(),
            device_profile: cal["device_profile"].as_str().unwrap().into(),
            device_name: cal["device_name"].as_str().unwrap().into(),
            host_cores: None,
            metric: f["metric"].as_str().unwrap().into(),
            threads: f["threads"].as_u64().unwrap() as u32,
            value: f["value"].as_f64().unwrap(),
            isa: cal["isa"].as_str().map(str::to_string),
        })
        .collect()
}

/// What `resolve` predicts for one llama-bench test (`pp512`, `tg128`) of `spec`, and the threads it chose.
fn resolve(
    spec: &ModelSpec,
    inv: &Inventory,
    set: &ProfileSet,
    test: &str,
    evidence: &Evidence,
) -> (f64, u32, Basis) {
    let prefill = test.starts_with("pp");
    let w = common::llama_bench_workload(set, test);
    let doc = common::plan_workload(
        spec,
        "m.gguf",
        inv,
        set,
        &w,
        &Overrides::default(),
        evidence,
    )
    .unwrap();
    let threads = common::llama(&doc).threads;
    let p = &doc.performance;
    (
        if prefill {
            p.prefill_tokens_per_s
        } else {
            p.decode_tokens_per_s
        },
        threads,
        p.basis,
    )
}

#[test]
fn calibrated_predictions_match_llama_bench_within_15_percent() {
    let table = read("llama-bench/cpu-epyc-milan-2vcpu.json");
    let models = read("llama-bench/models.json");
    let cal = read("calibrate/epyc-milan-2vcpu-quick.json");
    assert_eq!(
        cal["isa"], "avx2+fma+f16c",
        "the committed calibration ran other kernels"
    );
    let inv = inventory();
    let set = profiles();
    let calibrated = Evidence {
        cpu: figures(&cal),
        rows: Some(cal["figures"].as_array().unwrap().len() as u64),
        ..Evidence::default()
    };
    let tmp = tempfile::tempdir().unwrap();
    let mut specs: BTreeMap<String, ModelSpec> = BTreeMap::new();
    let mut lines = vec![format!(
        "{:<18} {:>6} {:>2} {:>10} {:>10} {:>8} {:>11} {:>8}",
        "model", "test", "t", "llama-bench", "analytic", "err", "calibrated", "err"
    )];
    let (mut failures, mut checked) = (Vec::new(), BTreeMap::<String, usize>::new());
    for row in table["rows"].as_array().unwrap() {
        if row["warmup"] == true {
            continue;
        }
        let id = row["model"].as_str().unwrap().to_string();
        let spec = specs
            .entry(id.clone())
            .or_insert_with(|| match row.get("gguf") {
                Some(g) => model::load(&root().join(g.as_str().unwrap())).unwrap(),
                None => build(
                    &models["models"][&id],
                    &tmp.path().join(format!("{id}.gguf")),
                ),
            });
        let test = row["test"].as_str().unwrap();
        let (before, threads, b0) = resolve(spec, &inv, &set, test, &Evidence::default());
        let (after, t1, b1) = resolve(spec, &inv, &set, test, &calibrated);
        assert_eq!(threads, t1, "{id} {test}: calibration changed the threads");
        assert_eq!(b0, Basis::Analytic);
        assert_eq!(b1, Basis::Calibrated, "{id} {test}");
        // Compare with llama-bench at the threads resolve chose.
        if row["threads"].as_u64() != Some(u64::from(threads)) {
            continue;
        }
        let measured = row["avg_ts"].as_f64().unwrap();
        let (e0, e1) = (before / measured - 1.0, after / measured - 1.0);
        let real = REAL_MODELS.contains(&id.as_str());
        lines.push(format!(
            "{id:<18} {test:>6} {threads:>2} {measured:>10.2} {before:>10.2} {:>+7.1}% {after:>11.2} {:>+7.1}%{}",
            e0 * 100.0,
            e1 * 100.0,
            if real { "" } else { "  (overhead-bound, not held to the goal)" }
        ));
        if real {
            *checked.entry(id.clone()).or_default() += 1;
            if e1.abs() > MAX_CALIBRATED_ERROR {
                failures.push(format!("{id} {test} t{threads}: {:+.1} %", e1 * 100.0));
            }
        }
    }
    println!("{}", lines.join("\n"));
    assert!(
        checked.len() >= 4 && checked.values().all(|n| *n == 2),
        "rows checked per model: {checked:?}"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The reference the calibrated model scales from is what `calibrate` measured on the machine the kernel
/// constants were fitted on (one thread, rounded to 3 digits), and the analytic figures of the fit are that
/// machine's inventory clock × its class profile's FLOP per cycle and the rule table's CPU prefill efficiency.
#[test]
fn reference_constants_are_the_committed_calibration() {
    use optimizer::perf::REFERENCE;
    let cal = read("calibrate/epyc-milan-2vcpu.json");
    let one = |metric: &str| {
        cal["figures"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["metric"] == metric && f["threads"] == 1)
            .unwrap_or_else(|| panic!("{metric} at 1 thread"))["value"]
            .as_f64()
            .unwrap()
    };
    let r3 = |v: f64| format!("{v:.3e}");
    assert_eq!(cal["isa"], REFERENCE.isa);
    for (t, v) in REFERENCE.read_bytes_per_s {
        let read = cal["figures"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["metric"] == "cpu_read_bytes_per_s" && f["threads"] == t)
            .unwrap()["value"]
            .as_f64()
            .unwrap();
        assert_eq!(r3(read), r3(v), "read at {t} threads");
    }
    assert_eq!(r3(one("cpu_fma_flops")), r3(REFERENCE.fma_flops_per_thread));
    for (t, v) in REFERENCE.dot_per_thread {
        assert_eq!(r3(one(&format!("cpu_dot_{t}_params_per_s"))), r3(v), "{t}");
    }
    let inv = inventory();
    let set = profiles();
    let class = set
        .hardware("cpu-x86-64-avx2-ddr4-dual-channel")
        .unwrap()
        .value
        .clone();
    let fpc = class.cpu.unwrap().fp32_flops_per_cycle_per_core.unwrap();
    let hz = inv.cpu.frequency_mhz.unwrap() as f64 * 1e6;
    assert_eq!(REFERENCE.core_flops, hz * fpc);
    let rule = set
        .efficiency(
            ReserveTarget::Cpu,
            RuntimeId::LlamaCpp,
            Phase::Prefill,
            None,
        )
        .unwrap()
        .efficiency;
    assert_eq!(REFERENCE.prefill_efficiency, rule);
}

/// On the reference machine, a calibration that measured exactly the reference (and the bandwidth the analytic
/// model assumes) predicts what the fitted analytic model predicts: the calibrated path adds no error of its own.
#[test]
fn a_calibration_equal_to_the_reference_reproduces_the_analytic_prediction() {
    use optimizer::perf::REFERENCE;
    let inv = inventory();
    let set = profiles();
    let tmp = tempfile::tempdir().unwrap();
    let models = read("llama-bench/models.json");
    let spec = build(
        &models["models"]["llama3-8b-q4_k_m"],
        &tmp.path().join("m.gguf"),
    );
    let class = set.hardware("cpu-x86-64-avx2-ddr4-dual-channel").unwrap();
    let cpu = class.value.cpu.clone().unwrap();
    let socket = class.value.memory.bandwidth_gb_s * 1e9;
    let decode_eff = set
        .efficiency(ReserveTarget::Cpu, RuntimeId::LlamaCpp, Phase::Decode, None)
        .unwrap()
        .efficiency;
    let mut figs = Vec::new();
    let mut fig = |metric: &str, threads: u32, value: f64| {
        figs.push(CpuFigure {
            row: figs.len() as i64 + 1,
            run: 1,
            device_profile: class.value.id.clone(),
            device_name: inv.cpu.model.clone(),
            host_cores: None,
            metric: metric.into(),
            threads,
            value,
            isa: Some(REFERENCE.isa.into()),
        });
    };
    // The fit's bandwidth figures are the class profile's and the rule table's.
    assert_eq!(
        REFERENCE.bandwidth_per_core,
        cpu.bandwidth_per_core_gb_s.unwrap() * 1e9
    );
    assert_eq!(REFERENCE.socket_bandwidth, socket);
    assert_eq!(REFERENCE.decode_efficiency, decode_eff);
    for t in [1u32, 2] {
        // What the reference read: its decode-bandwidth share maps it back to the bandwidth the fit used.
        let read = REFERENCE
            .read_bytes_per_s
            .iter()
            .find(|(n, _)| *n == t)
            .unwrap()
            .1;
        fig("cpu_read_bytes_per_s", t, read);
        fig(
            "cpu_fma_flops",
            t,
            f64::from(t) * REFERENCE.fma_flops_per_thread,
        );
        for (ty, v) in REFERENCE.dot_per_thread {
            fig(&format!("cpu_dot_{ty}_params_per_s"), t, f64::from(t) * v);
        }
    }
    let ev = Evidence {
        cpu: figs,
        ..Evidence::default()
    };
    for test in ["pp512", "tg128"] {
        let (a, _, _) = resolve(&spec, &inv, &set, test, &Evidence::default());
        let (c, _, basis) = resolve(&spec, &inv, &set, test, &ev);
        assert_eq!(basis, Basis::Calibrated);
        assert!(
            (c / a - 1.0).abs() < 1e-3,
            "{test}: analytic {a}, calibrated {c}"
        );
    }
}

/// The calibrated rates drive the prediction: a CPU whose dot products ran twice as fast as the reference's
/// decodes a compute-bound model about twice as fast, and one whose FMA ran at half the reference's prefills at
/// about half the rate.
#[test]
fn measured_rates_move_the_prediction_in_proportion() {
    use optimizer::perf::REFERENCE;
    let inv = inventory();
    let set = profiles();
    let tmp = tempfile::tempdir().unwrap();
    let models = read("llama-bench/models.json");
    let spec = build(
        &models["models"]["llama3-8b-q4_k_m"],
        &tmp.path().join("m.gguf"),
    );
    let class = set.hardware("cpu-x86-64-avx2-ddr4-dual-channel").unwrap();
    let evidence = |dot: f64, fma: f64| {
        let mut figs = Vec::new();
        for t in [1u32, 2] {
            let mut push = |metric: String, value: f64| {
                figs.push(CpuFigure {
                    row: figs.len() as i64 + 1,
                    run: 1,
                    device_profile: class.value.id.clone(),
                    device_name: inv.cpu.model.clone(),
                    host_cores: None,
                    metric,
                    threads: t,
                    value,
                    isa: Some(REFERENCE.isa.into()),
                });
            };
            // Plenty of bandwidth, so the dot products bound decode: five times the class's socket, still a
            // figure a CPU can produce (issue 24: 1e12 bytes/s from one thread is not, and is set aside).
            push(
                "cpu_read_bytes_per_s".into(),
                5.0 * class.value.memory.bandwidth_gb_s * 1e9,
            );
            push(
                "cpu_fma_flops".into(),
                f64::from(t) * fma * REFERENCE.fma_flops_per_thread,
            );
            for (ty, v) in REFERENCE.dot_per_thread {
                push(format!("cpu_dot_{ty}_params_per_s"), f64::from(t) * dot * v);
            }
        }
        Evidence {
            cpu: figs,
            ..Evidence::default()
        }
    };
    let (tg1, _, _) = resolve(&spec, &inv, &set, "tg128", &evidence(1.0, 1.0));
    let (tg2, _, _) = resolve(&spec, &inv, &set, "tg128", &evidence(2.0, 1.0));
    // The per-token floor does not scale, so a little under 2×.
    assert!(tg2 / tg1 > 1.8 && tg2 / tg1 <= 2.0, "decode {tg1} -> {tg2}");
    let (pp1, _, _) = resolve(&spec, &inv, &set, "pp512", &evidence(1.0, 1.0));
    let (pp2, _, _) = resolve(&spec, &inv, &set, "pp512", &evidence(1.0, 0.5));
    assert!(
        pp2 / pp1 > 0.45 && pp2 / pp1 < 0.55,
        "prefill {pp1} -> {pp2}"
    );
}

/// Issue 10: with a llama-bench run of the model itself imported, the prediction for that model is `measured`.
/// Two runs of the pinned llama-bench on the same machine, minutes apart (benches/calibrate/imported.sh:
/// Llama-3.2-1B Q4_K_M, `-p 512 -n 128 -t 2 -r 5`): the first is imported and must be what `resolve` reports,
/// exactly; the second is the truth it is compared with. That comparison is held to 5 %, or to twice the two
/// runs' combined standard deviation where the engine's own spread between runs is larger (on this shared 2-core
/// guest the two runs' prefill differed by 8.9 %, each with a standard deviation of 3-6 %).
#[test]
fn an_imported_run_is_what_resolve_reports_and_agrees_with_a_second_run() {
    // The tensor table of the benched file (the model make_models.py writes for it).
    let models = read("llama-cpp/models.json");
    let inv = inventory();
    let set = profiles();
    let tmp = tempfile::tempdir().unwrap();
    let gguf = tmp.path().join("llama3.2-1b-q4_k_m.gguf");
    let spec = build(&models["models"]["llama3.2-1b-q4_k_m"], &gguf);
    let db = tmp.path().join("m.db");
    let out = common::bin()
        .arg("--db")
        .arg(&db)
        .arg("--inventory")
        .arg(fixture("llama-bench/inventory-epyc-milan-2vcpu.yaml"))
        .args(["measurements", "import", "--model"])
        .arg(&gguf)
        .arg(fixture("calibrate/llama-bench-1b-q4_k_m-a.json"))
        .output()
        .unwrap();
    common::assert_exit(&out, 0);
    let store = optimizer::store::Store::open(&db).unwrap();
    let evidence = store
        .evidence(
            &["cpu-x86-64-avx2-ddr4-dual-channel".to_string()],
            &spec.fingerprint,
        )
        .unwrap();
    let imported: Value = read("calibrate/llama-bench-1b-q4_k_m-a.json");
    let truth: Value = read("calibrate/llama-bench-1b-q4_k_m-b.json");
    let mut lines = Vec::new();
    let mut failures = Vec::new();
    for (a, b) in imported
        .as_array()
        .unwrap()
        .iter()
        .zip(truth.as_array().unwrap())
    {
        assert_eq!((&a["n_prompt"], &a["n_gen"]), (&b["n_prompt"], &b["n_gen"]));
        let test = if b["n_gen"] == 0 {
            format!("pp{}", b["n_prompt"])
        } else {
            format!("tg{}", b["n_gen"])
        };
        let (predicted, threads, basis) = resolve(&spec, &inv, &set, &test, &evidence);
        assert_eq!(u64::from(threads), b["n_threads"].as_u64().unwrap());
        assert_eq!(basis, Basis::Measured, "{test}");
        let (ma, sa) = (
            a["avg_ts"].as_f64().unwrap(),
            a["stddev_ts"].as_f64().unwrap(),
        );
        let (mb, sb) = (
            b["avg_ts"].as_f64().unwrap(),
            b["stddev_ts"].as_f64().unwrap(),
        );
        // The document rounds to 3 decimals.
        assert!(
            (predicted - ma).abs() < 1e-3,
            "{test}: {predicted} reported, {ma} imported"
        );
        let err = predicted / mb - 1.0;
        let spread = 2.0 * (sa * sa + sb * sb).sqrt() / mb;
        lines.push(format!(
            "{test}: imported {ma:.2} ± {sa:.2}, second run {mb:.2} ± {sb:.2} tok/s: {:+.1} % (bound {:.1} %)",
            err * 100.0,
            100.0 * spread.max(0.05)
        ));
        if err.abs() > spread.max(0.05) {
            failures.push(test);
        }
    }
    println!("{}", lines.join("\n"));
    assert!(failures.is_empty(), "{}", lines.join("\n"));
}
