//! `optimizer calibrate`: what it records, how `resolve` uses it, and how it behaves when stopped, killed or run
//! beside other processes on one database.
//!
//! The planner-facing tests drive `app::calibrate` with mock benches (figures chosen by the test), so what
//! `resolve` does with them is exact; the process-level tests run the real binary (`--quick --model` a tiny GGUF,
//! so a debug build finishes in seconds) and check the store, not the figures.

use crate::common;
use common::{assert_exit, bin, fixture};

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use optimizer::app::{self, CalibrateRequest, Sources};
use optimizer::calibrate::cpu::kernels::DotType;
use optimizer::calibrate::cpu::{Budget, CpuBench, CpuBenchError, Sample, Stream};
use optimizer::calibrate::gpu::{self, GpuBench, MockBench};
use optimizer::perf::REFERENCE;

const CPU_INVENTORY: &str = "llama-bench/inventory-epyc-milan-2vcpu.yaml";
/// The same machine with an 8 MiB L3, for the real micro-benchmarks run through the test build: 64 MiB
/// bandwidth arrays instead of 256 MiB (the fixture's header says why).
const SMALL_CACHE_INVENTORY: &str = "calibrate/inventory-small-l3.yaml";
const TINY: &str = "gguf/llama-q4_k_m.gguf";

/// A CPU whose figures are the reference machine's times `scale` (per thread, linear in threads), with a DRAM
/// bandwidth that saturates at two threads.
struct Scaled(f64);

impl CpuBench for Scaled {
    fn isa(&self) -> String {
        REFERENCE.isa.into()
    }
    fn stream(
        &mut self,
        s: Stream,
        threads: u32,
        _: u64,
        _: Budget,
    ) -> Result<Sample, CpuBenchError> {
        let v = 12e9 * f64::from(threads.min(2)) * s.arrays() as f64;
        Ok(Sample {
            best: v,
            samples: vec![v],
        })
    }
    fn fma(&mut self, threads: u32, _: Budget) -> Result<Sample, CpuBenchError> {
        let v = self.0 * REFERENCE.fma_flops_per_thread * f64::from(threads);
        Ok(Sample {
            best: v,
            samples: vec![v],
        })
    }
    fn dot(
        &mut self,
        t: DotType,
        _: usize,
        _: usize,
        threads: u32,
        _: Budget,
    ) -> Result<Sample, CpuBenchError> {
        let per = REFERENCE
            .dot_per_thread
            .iter()
            .find(|(n, _)| *n == t.name())
            .unwrap()
            .1;
        let v = self.0 * per * f64::from(threads);
        Ok(Sample {
            best: v,
            samples: vec![v],
        })
    }
}

fn sources(db: &Path, inventory: &str) -> Sources {
    Sources::new(
        Some((fixture(inventory), optimizer::app::SettingOrigin::Flag)),
        vec![],
        Some(db.to_path_buf()),
    )
}

/// `app::calibrate` of the CPU alone with `bench`, to the end (no GPU, no stop).
fn calibrate_cpu(s: &Sources, quick: bool, bench: &mut dyn CpuBench) -> app::Calibrated {
    let req = CalibrateRequest { quick, model: None };
    app::calibrate(
        s,
        &req,
        bench,
        &mut no_gpu,
        &AtomicBool::new(false),
        &mut |_, _, _| {},
    )
    .unwrap()
}

fn no_gpu(_: u32) -> Result<Box<dyn GpuBench>, gpu::GpuError> {
    Err(gpu::GpuError::NoDriver)
}

/// `resolve --format json` of the tiny model for `workload`, on the fixture inventory, against `db`.
fn resolve(db: &Path, inventory: &str, workload: &str) -> serde_json::Value {
    let out = bin()
        .arg("--db")
        .arg(db)
        .arg("--inventory")
        .arg(fixture(inventory))
        .args([
            "resolve",
            "--workload",
            workload,
            "--format",
            "json",
            "--model",
        ])
        .arg(fixture(TINY))
        .output()
        .unwrap();
    assert_exit(&out, 0);
    serde_json::from_slice(&out.stdout).unwrap()
}

fn provenance(doc: &serde_json::Value, key: &str) -> String {
    doc["provenance"][key].to_string()
}

/// Issue 10's check: `resolve` before and after a calibration of the same machine, on the same fixture, moves
/// the basis from the rules (`analytic`) to `calibrated`, cites the calibration's rows, and predicts from them.
#[test]
fn resolve_moves_from_rule_to_calibrated_after_calibrate() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    let before = resolve(&db, CPU_INVENTORY, "chat");
    assert_eq!(before["performance"]["basis"], "analytic");
    let done = calibrate_cpu(&sources(&db, CPU_INVENTORY), false, &mut Scaled(1.5));
    assert!(!done.stopped && done.failed.is_empty(), "{done:?}");
    let after = resolve(&db, CPU_INVENTORY, "chat");
    assert_eq!(after["performance"]["basis"], "calibrated");
    let rows: Vec<i64> = after["performance"]["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    let recorded: Vec<i64> = done.figures.iter().flat_map(|f| f.rows.clone()).collect();
    assert!(
        !rows.is_empty() && rows.iter().all(|r| recorded.contains(r)),
        "evidence {rows:?}, calibration rows {recorded:?}"
    );
    let basis = provenance(&after, "performance.basis");
    assert!(basis.contains("calibrated"), "{basis}");
    // The machine measured 1.5× the reference's dot products and FMA rate: a faster prediction than the rules'.
    let (b, a) = (
        before["performance"]["decode_tokens_per_s"]
            .as_f64()
            .unwrap(),
        after["performance"]["decode_tokens_per_s"]
            .as_f64()
            .unwrap(),
    );
    assert!(a > b, "decode {b} tok/s before, {a} after");
}

/// A calibration of another CPU of the same class (a fleet's merged store) is not this machine's.
#[test]
fn another_cpus_calibration_is_not_used() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    let mut inv: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(fixture(CPU_INVENTORY)).unwrap()).unwrap();
    inv["cpu"]["model"] = "Another EPYC".into();
    let other = dir.path().join("other.yaml");
    std::fs::write(&other, serde_yaml_ng::to_string(&inv).unwrap()).unwrap();
    let s = Sources::new(
        Some((other, optimizer::app::SettingOrigin::Flag)),
        vec![],
        Some(db.clone()),
    );
    calibrate_cpu(&s, false, &mut Scaled(2.0));
    assert_eq!(
        resolve(&db, CPU_INVENTORY, "chat")["performance"]["basis"],
        "analytic"
    );
}

/// The GPU micro-benchmarks record efficiencies against the GPU's profile peaks; the next plan on that GPU says
/// `calibrated` and cites them. (A mock GPU: no device is needed.)
#[test]
fn a_gpu_calibration_makes_the_gpu_plan_calibrated() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("g.db");
    let inv = "inventories/h100-probed.yaml";
    let before = resolve(&db, inv, "chat");
    assert_eq!(before["performance"]["basis"], "analytic");
    let mut opened = Vec::new();
    let mut gpus = |ordinal: u32| -> Result<Box<dyn GpuBench>, gpu::GpuError> {
        opened.push(ordinal);
        Ok(Box::new(MockBench::new(80 << 30).with_model(Box::new(
            gpu::mock::roofline(2.0e12, 600e12, 5e-6),
        ))))
    };
    let done = app::calibrate(
        &sources(&db, inv),
        &CalibrateRequest {
            quick: true,
            model: None,
        },
        &mut Scaled(1.0),
        &mut gpus,
        &AtomicBool::new(false),
        &mut |_, _, _| {},
    )
    .unwrap();
    assert_eq!(opened, vec![0]);
    assert!(
        done.figures.iter().any(|f| f.metric == "decode_efficiency"),
        "{:?}",
        done.figures.iter().map(|f| &f.metric).collect::<Vec<_>>()
    );
    let after = resolve(&db, inv, "chat");
    assert_eq!(after["performance"]["basis"], "calibrated", "{after:#}");
}

fn calibrate_cmd(db: &Path) -> Command {
    let mut c = bin();
    c.arg("--db")
        .arg(db)
        .arg("--inventory")
        .arg(fixture(SMALL_CACHE_INVENTORY))
        .args(["calibrate", "--quick", "--model"])
        .arg(fixture(TINY));
    c
}

fn count(db: &Path, sql: &str) -> i64 {
    let c = rusqlite::Connection::open(db).unwrap();
    c.query_row(sql, [], |r| r.get(0)).unwrap()
}

/// The real micro-benchmarks through the binary: every figure recorded in one complete run, a summary on stdout.
#[test]
fn calibrate_quick_records_one_complete_run() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("q.db");
    let out = calibrate_cmd(&db)
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let done: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let figures = done["figures"].as_array().unwrap();
    // Streams and FMA at 1 and 2 threads, the model's one measured dot type (Q4_K) at 1 and 2.
    assert_eq!(figures.len(), 2 * 4 + 2, "{figures:?}");
    assert!(figures.iter().all(|f| f["value"].as_f64().unwrap() > 0.0));
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM run WHERE status = 'complete' AND tool LIKE 'calibrate%'"
        ),
        1
    );
    // One row per repetition: a round of every step per repetition of the budget.
    let reps = i64::from(optimizer::calibrate::cpu::QUICK_BUDGET.reps);
    assert_eq!(
        count(&db, "SELECT count(*) FROM measurement"),
        reps * figures.len() as i64
    );
}

/// Waits (up to a minute) until `db` holds at least `rows` measurements.
fn wait_for_rows(db: &Path, rows: i64) {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        if db.exists()
            && rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .and_then(|c| {
                    c.query_row("SELECT count(*) FROM measurement", [], |r| {
                        r.get::<_, i64>(0)
                    })
                })
                .is_ok_and(|n| n >= rows)
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("no {rows} measurements in {} after a minute", db.display());
}

/// Ctrl-C finishes the step under way, keeps what finished in a run left incomplete (issue 24: a partial run marked
/// complete replaced a whole calibration with half its curves) and exits 130 saying it stopped.
#[cfg(unix)]
#[test]
fn ctrl_c_keeps_what_finished_in_an_incomplete_run_and_exits_130() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("i.db");
    let child = calibrate_cmd(&db)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_rows(&db, 2);
    // SAFETY: signalling our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let out = child.wait_with_output().unwrap();
    assert_exit(&out, 130);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("stopped by Ctrl-C"), "{text}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("stays incomplete"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM run WHERE status = 'complete'"),
        0
    );
    assert_eq!(
        count(&db, "SELECT count(*) FROM run WHERE status = 'incomplete'"),
        1
    );
    let rows = count(&db, "SELECT count(*) FROM measurement");
    assert!((2..10).contains(&rows), "{rows} rows after Ctrl-C");
}

/// Issue 10's check: calibrations killed with SIGKILL at 20 different points leave a database that passes
/// `PRAGMA integrity_check`, every interrupted run stays `incomplete`, and none of its rows is evidence.
#[test]
fn calibrations_killed_midway_leave_no_usable_partial_run() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("k.db");
    for i in 0..20u64 {
        let mut child = calibrate_cmd(&db)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        if i % 2 == 1 {
            // After the run began and recorded some rows: the kill lands mid-run whatever the machine's load.
            let before = count_if_exists(&db);
            wait_for_rows(&db, before + 1 + (i as i64 / 2 % 2));
        } else {
            // Anywhere from before the database is opened to the first figures.
            std::thread::sleep(Duration::from_millis(10 + 60 * i));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    let c = rusqlite::Connection::open(&db).unwrap();
    let ok: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
    let incomplete = count(&db, "SELECT count(*) FROM run WHERE status = 'incomplete'");
    assert!(incomplete >= 10, "{incomplete} interrupted runs");
    assert_eq!(
        count(&db, "SELECT count(*) FROM run WHERE status = 'complete'"),
        0
    );
    // A debug test build records its runs as `calibrate (debug build)`, which no plan uses anyway: name them as a
    // release build would, so only their status keeps them out.
    c.execute("UPDATE run SET tool = 'calibrate'", []).unwrap();
    let store = optimizer::store::Store::open(&db).unwrap();
    let ev = store
        .evidence(&["cpu-x86-64-avx2-ddr4-dual-channel".to_string()], "")
        .unwrap();
    assert!(
        ev.cpu.is_empty(),
        "{} figures of killed runs are evidence",
        ev.cpu.len()
    );
    assert!(
        ev.rows.unwrap() > 0,
        "no rows were recorded before the kills"
    );
}

fn count_if_exists(db: &Path) -> i64 {
    if !db.exists() {
        return 0;
    }
    rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .and_then(|c| c.query_row("SELECT count(*) FROM measurement", [], |r| r.get(0)))
        .unwrap_or(0)
}

/// Issue 10's check: two calibrations and a resolve at once on one database all succeed, and both runs are
/// complete with all their rows.
#[test]
fn two_calibrations_and_a_resolve_share_one_database() {
    let dir = tempfile::tempdir().unwrap();
    let db: PathBuf = dir.path().join("s.db");
    let a = calibrate_cmd(&db).stdout(Stdio::null()).spawn().unwrap();
    let b = calibrate_cmd(&db).stdout(Stdio::null()).spawn().unwrap();
    wait_for_rows(&db, 1);
    let doc = resolve(&db, CPU_INVENTORY, "chat");
    assert!(doc["performance"]["decode_tokens_per_s"].as_f64().unwrap() > 0.0);
    for c in [a, b] {
        let out = c.wait_with_output().unwrap();
        assert_exit(&out, 0);
    }
    assert_eq!(
        count(&db, "SELECT count(*) FROM run WHERE status = 'complete'"),
        2
    );
    let reps = i64::from(optimizer::calibrate::cpu::QUICK_BUDGET.reps);
    assert_eq!(
        count(&db, "SELECT count(*) FROM measurement"),
        2 * 10 * reps
    );
    let c = rusqlite::Connection::open(&db).unwrap();
    let ok: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
}

/// A bench on a machine that runs 2 threads at once with 1 GiB free, remembering the most threads and the
/// largest arrays any step asked of it.
#[derive(Default)]
struct Small {
    most_threads: u32,
    most_bytes: u64,
}

impl CpuBench for Small {
    fn isa(&self) -> String {
        REFERENCE.isa.into()
    }
    fn capacity(&self) -> optimizer::calibrate::cpu::Capacity {
        optimizer::calibrate::cpu::Capacity {
            threads: Some(2),
            available_bytes: Some(1 << 30),
        }
    }
    fn stream(
        &mut self,
        s: Stream,
        threads: u32,
        bytes: u64,
        b: Budget,
    ) -> Result<Sample, CpuBenchError> {
        self.most_threads = self.most_threads.max(threads);
        self.most_bytes = self.most_bytes.max(bytes);
        Scaled(1.0).stream(s, threads, bytes, b)
    }
    fn fma(&mut self, threads: u32, b: Budget) -> Result<Sample, CpuBenchError> {
        self.most_threads = self.most_threads.max(threads);
        Scaled(1.0).fma(threads, b)
    }
    fn dot(
        &mut self,
        t: DotType,
        rows: usize,
        cols: usize,
        threads: u32,
        b: Budget,
    ) -> Result<Sample, CpuBenchError> {
        self.most_threads = self.most_threads.max(threads);
        Scaled(1.0).dot(t, rows, cols, threads, b)
    }
}

/// An inventory that claims 4096 cores and 19 GB free (another machine's, or a wrong one) must not make the
/// calibration of this 2-thread, 1 GiB machine spawn 4096 threads, label figures with thread counts that never
/// ran at once, or allocate arrays sized for memory it does not have.
#[test]
fn calibrate_is_bounded_by_this_machines_threads_and_memory_not_the_inventorys() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("b.db");
    let mut inv: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(fixture(CPU_INVENTORY)).unwrap()).unwrap();
    inv["cpu"]["physical_cores"] = 4096.into();
    inv["cpu"]["logical_cpus"] = 4096.into();
    let big = dir.path().join("big.yaml");
    std::fs::write(&big, serde_yaml_ng::to_string(&inv).unwrap()).unwrap();
    let s = Sources::new(
        Some((big, optimizer::app::SettingOrigin::Flag)),
        vec![],
        Some(db),
    );
    let mut bench = Small::default();
    let done = calibrate_cpu(&s, false, &mut bench);
    assert_eq!(bench.most_threads, 2);
    assert!(done.figures.iter().all(|f| f.threads <= 2), "{done:?}");
    // Three arrays of the triad within an eighth of the 1 GiB this machine has free.
    assert!(
        bench.most_bytes * 3 <= (1 << 30) / 8,
        "{} bytes per array",
        bench.most_bytes
    );
    assert!(
        done.notes.iter().any(|n| n.contains("4096 cores")),
        "{:?}",
        done.notes
    );
}

/// A fleet's merged store holds the calibration of another machine whose CPU reports the same name (a KVM guest
/// sees "AMD EPYC" whatever the part) but not the same core count: it is not this machine's, however new.
#[test]
fn a_same_named_cpu_with_other_cores_is_not_this_machines_calibration() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    let mut inv: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(fixture(CPU_INVENTORY)).unwrap()).unwrap();
    inv["cpu"]["physical_cores"] = 64.into();
    inv["cpu"]["logical_cpus"] = 128.into();
    let other = dir.path().join("other.yaml");
    std::fs::write(&other, serde_yaml_ng::to_string(&inv).unwrap()).unwrap();
    let s = Sources::new(
        Some((other, optimizer::app::SettingOrigin::Flag)),
        vec![],
        Some(db.clone()),
    );
    calibrate_cpu(&s, true, &mut Scaled(2.0));
    assert_eq!(
        resolve(&db, CPU_INVENTORY, "chat")["performance"]["basis"],
        "analytic"
    );
}

/// A mock whose kernels were not optimised, with the reference's figures.
struct Unoptimized;

impl CpuBench for Unoptimized {
    fn isa(&self) -> String {
        REFERENCE.isa.into()
    }
    fn optimized(&self) -> bool {
        false
    }
    fn stream(
        &mut self,
        s: Stream,
        t: u32,
        b: u64,
        budget: Budget,
    ) -> Result<Sample, CpuBenchError> {
        Scaled(1.0).stream(s, t, b, budget)
    }
    fn fma(&mut self, t: u32, budget: Budget) -> Result<Sample, CpuBenchError> {
        Scaled(1.0).fma(t, budget)
    }
    fn dot(
        &mut self,
        d: DotType,
        r: usize,
        c: usize,
        t: u32,
        budget: Budget,
    ) -> Result<Sample, CpuBenchError> {
        Scaled(1.0).dot(d, r, c, t, budget)
    }
}

/// A calibration from a debug build (its loops unoptimised, many times slower than the CPU) is recorded for
/// `measurements show` but never used: `cargo run -- calibrate` must not make every later plan 30× too slow.
#[test]
fn a_debug_build_calibration_is_recorded_but_never_used() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("d.db");
    let done = calibrate_cpu(&sources(&db, CPU_INVENTORY), false, &mut Unoptimized);
    assert!(
        done.notes.iter().any(|n| n.contains("debug build")),
        "{:?}",
        done.notes
    );
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM run WHERE status = 'complete' AND tool = 'calibrate (debug build)'"
        ),
        1
    );
    assert_eq!(
        resolve(&db, CPU_INVENTORY, "chat")["performance"]["basis"],
        "analytic"
    );
}
