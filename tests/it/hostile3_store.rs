//! Hostile input, round 3 (issue 24), the store: `measurements prune` never removes a run still being recorded
//! (and removes one whose recorder is provably gone), imports are idempotent under concurrency, a refused
//! WAL-mode foreign database keeps its directory exactly as it was, and `--db :memory:` (or any name SQLite
//! reads specially) is refused instead of "recording" into nothing.

use crate::common;
use common::{assert_exit, bin, fixture};

use std::path::{Path, PathBuf};
use std::process::Output;

use optimizer::store::{
    DeviceIdentity, HostIdentity, MIGRATIONS, NewMeasurement, NewRun, RunId, RunOwner, Shape,
    Store, StoreError,
};
use rusqlite::Connection;

const INVENTORY: &str = "llama-bench/inventory-epyc-milan-2vcpu.yaml";
const BENCH_CSV: &str = "tests/fixtures/llama-bench/outputs/tiny-q4_k_m-cpu.csv";

fn cli(db: &Path, args: &[&str]) -> Output {
    bin()
        .arg("--db")
        .arg(db)
        .arg("--inventory")
        .arg(fixture(INVENTORY))
        .args(args)
        .current_dir(common::root())
        .output()
        .unwrap()
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
}

fn count(db: &Path, sql: &str) -> i64 {
    Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .unwrap()
        .query_row(sql, [], |r| r.get(0))
        .unwrap()
}

fn run_of(started_at: &str) -> NewRun {
    NewRun {
        tool: "calibrate".into(),
        runtime: optimizer::profile::RuntimeId::LlamaCpp,
        runtime_version: None,
        started_at: started_at.into(),
        settings: "{}".into(),
        host: HostIdentity {
            cpu_model: "Test CPU".into(),
            physical_cores: 4,
            memory_total_bytes: 1 << 34,
            hostname: String::new(),
        },
    }
}

fn row(value: f64) -> NewMeasurement {
    NewMeasurement {
        device: DeviceIdentity {
            profile: "rtx-4090".into(),
            name: "NVIDIA GeForce RTX 4090".into(),
            uuid: Some("GPU-1".into()),
        },
        model: None,
        metric: "bandwidth_bytes_per_s".into(),
        value,
        unit: "bytes/s".into(),
        shape: Shape::default(),
        context: "{}".into(),
    }
}

fn now() -> String {
    optimizer::app::rfc3339(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
}

/// A pid that no longer runs: a child that exited and was reaped.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

/// Whether this platform lets a prune check a recorder on this host (Linux: a boot id and a pid namespace).
fn checkable() -> bool {
    let here = RunOwner::current();
    here.boot_id.is_some() && here.pid_namespace.is_some()
}

fn prune_json(db: &Path) -> serde_json::Value {
    let o = cli(
        db,
        &["measurements", "prune", "--incomplete", "--format", "json"],
    );
    assert_exit(&o, 0);
    json(&o)
}

fn kept(done: &serde_json::Value) -> Vec<i64> {
    done["kept_running"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["run"].as_i64().unwrap())
        .collect()
}

/// Issue 24, item 5: `prune --incomplete` removed a calibration while it ran, which then failed on the foreign key
/// at its next row and kept nothing. A run begun by this (live) test process keeps its rows through the prune,
/// the prune says it kept it, and the recorder goes on to record and finish it.
#[test]
fn prune_keeps_a_run_whose_recorder_is_still_running_and_its_rows() {
    if !checkable() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("live.db");
    let s = Store::open(&db).unwrap();
    let live = s.begin_run(&run_of(&now())).unwrap();
    let first = s.record(live, &row(1.0e11)).unwrap();

    let done = prune_json(&db);
    assert_eq!(kept(&done), vec![live.0], "{done}");
    assert_eq!(done["runs"], serde_json::json!([]), "{done}");
    assert_eq!(done["measurements"], serde_json::json!([]), "{done}");
    assert!(
        done["kept_running"][0]["why"]
            .as_str()
            .unwrap()
            .contains(&format!("pid {}", std::process::id())),
        "{done}"
    );
    // The table says so too.
    let o = cli(&db, &["measurements", "prune", "--incomplete"]);
    assert_exit(&o, 0);
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(
        table.contains(&format!("kept run {} (incomplete)", live.0)),
        "{table}"
    );

    // The recorder carries on: another row, then the run is finished, with both rows.
    let second = s.record(live, &row(2.0e11)).unwrap();
    s.finish_run(live, &now()).unwrap();
    let shown = s.show_run(live.0).unwrap().unwrap();
    assert_eq!(shown.run.status, "complete");
    assert_eq!(
        shown.measurements.iter().map(|m| m.row).collect::<Vec<_>>(),
        vec![first, second]
    );
}

/// A run whose recorder died (its pid gone, or held by a later process), or was recorded under an earlier boot
/// of this host, is removed with its rows; one recorded on another host (not checkable) is kept until it is a
/// week old, then removed; one from before schema version 3 (no recorder) likewise.
#[test]
fn prune_removes_runs_whose_recorder_is_provably_gone_and_keeps_uncheckable_young_ones() {
    if !checkable() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("gone.db");
    let s = Store::open(&db).unwrap();
    let here = RunOwner::current();
    let begin = |owner: &RunOwner, started_at: &str| -> RunId {
        let id = s.begin_run_as(&run_of(started_at), owner).unwrap();
        s.record(id, &row(1.0e11)).unwrap();
        id
    };
    let recent = now();
    let dead = begin(
        &RunOwner {
            pid: dead_pid(),
            ..here.clone()
        },
        &recent,
    );
    let reused = begin(
        &RunOwner {
            started_ticks: here.started_ticks.map(|t| t + 1),
            ..here.clone()
        },
        &recent,
    );
    let rebooted = begin(
        &RunOwner {
            boot_id: Some("00000000-0000-4000-8000-000000000000".into()),
            ..here.clone()
        },
        &recent,
    );
    let elsewhere = RunOwner {
        host: format!("{}-another-host", here.host),
        boot_id: Some("00000000-0000-4000-8000-000000000001".into()),
        ..here.clone()
    };
    let other_host_young = begin(&elsewhere, &recent);
    let other_host_old = begin(&elsewhere, "2001-01-01T00:00:00Z");
    let alive = begin(&here, &recent);
    drop(s);

    let done = prune_json(&db);
    assert_eq!(
        done["runs"],
        serde_json::json!([dead.0, reused.0, rebooted.0, other_host_old.0]),
        "{done}"
    );
    assert_eq!(kept(&done), vec![other_host_young.0, alive.0], "{done}");
    let why = done["kept_running"][0]["why"].as_str().unwrap();
    assert!(
        why.contains("another-host") && why.contains("7 days"),
        "{why}"
    );
    assert_eq!(count(&db, "SELECT count(*) FROM run"), 2);
    assert_eq!(count(&db, "SELECT count(*) FROM measurement"), 2);
    assert_eq!(
        count(&db, "SELECT count(*) FROM pragma_foreign_key_check"),
        0
    );
}

/// When a prune does remove a run its recorder is still writing (one it could not check, a week old), the
/// recorder's next write names what happened instead of a bare foreign-key failure, and writes nothing.
#[test]
fn a_recorder_whose_run_was_pruned_says_so_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("pruned.db");
    let s = Store::open(&db).unwrap();
    let elsewhere = RunOwner {
        host: "another-host".into(),
        ..RunOwner::current()
    };
    let id = s
        .begin_run_as(&run_of("2001-01-01T00:00:00Z"), &elsewhere)
        .unwrap();
    let done = prune_json(&db);
    assert_eq!(done["runs"], serde_json::json!([id.0]), "{done}");
    let err = s.record(id, &row(1.0)).unwrap_err();
    assert!(
        matches!(err, StoreError::RunGone { run, .. } if run == id.0),
        "{err}"
    );
    assert!(err.to_string().contains("no longer in the store"), "{err}");
    let err = s.finish_run(id, &now()).unwrap_err();
    assert!(matches!(err, StoreError::RunGone { .. }), "{err}");
    assert_eq!(count(&db, "SELECT count(*) FROM measurement"), 0);
    assert_eq!(count(&db, "SELECT count(*) FROM device"), 0);
}

/// A database of the previous release (schema version 2, with an interrupted run) migrates forward: its runs have
/// no recorder (NULL), so a prune keeps a recent one (it cannot check it) and removes one older than a week.
#[test]
fn a_version_2_database_migrates_and_its_runs_without_a_recorder_are_kept_for_a_week() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("v2.db");
    {
        let c = Connection::open(&db).unwrap();
        c.pragma_update(None, "journal_mode", "WAL").unwrap();
        let tx = c.unchecked_transaction().unwrap();
        for (_, sql) in &MIGRATIONS[..2] {
            tx.execute_batch(sql).unwrap();
        }
        tx.pragma_update(None, "application_id", optimizer::store::APPLICATION_ID)
            .unwrap();
        tx.pragma_update(None, "user_version", 2).unwrap();
        tx.execute_batch(&format!(
            "INSERT INTO host (cpu_model, physical_cores, memory_total_bytes) VALUES ('cpu', 4, 1024);
             INSERT INTO run (tool, runtime, started_at, host_id, status) VALUES
                 ('calibrate', 'llama.cpp', '{}', 1, 'incomplete'),
                 ('calibrate', 'llama.cpp', '2001-01-01T00:00:00Z', 1, 'incomplete');",
            now()
        ))
        .unwrap();
        tx.commit().unwrap();
    }
    let s = Store::open(&db).unwrap();
    assert_eq!(s.version().unwrap(), MIGRATIONS.len() as i64);
    drop(s);
    assert_eq!(
        count(&db, "SELECT count(*) FROM run WHERE owner_pid IS NULL"),
        2
    );
    let done = prune_json(&db);
    assert_eq!(done["runs"], serde_json::json!([2]), "{done}");
    assert_eq!(kept(&done), vec![1], "{done}");
    assert!(
        done["kept_running"][0]["why"]
            .as_str()
            .unwrap()
            .contains("before schema version 3"),
        "{done}"
    );
}

/// `N` processes of the binary started together, each running `args`; their outputs.
fn at_once(n: usize, db: &Path, args: &[&str]) -> Vec<Output> {
    let children: Vec<_> = (0..n)
        .map(|_| {
            bin()
                .arg("--db")
                .arg(db)
                .arg("--inventory")
                .arg(fixture(INVENTORY))
                .args(args)
                .args(["--format", "json"])
                .current_dir(common::root())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect()
}

/// Issue 24, item 8: ten `measurements import export.jsonl` at once gave ten runs in two trials of three. Now each
/// of several trials (an export, and a llama-bench file) records exactly one run: one process writes it and the
/// other nine name it as already imported.
#[test]
fn ten_concurrent_imports_of_one_file_record_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("source.db");
    assert_exit(&cli(&source, &["measurements", "import", BENCH_CSV]), 0);
    let o = cli(&source, &["measurements", "export"]);
    assert_exit(&o, 0);
    let export = dir.path().join("export.jsonl");
    std::fs::write(&export, &o.stdout).unwrap();
    let rows = o.stdout.iter().filter(|b| **b == b'\n').count() as i64;
    assert!(rows >= 2, "{rows}");
    let export = export.to_string_lossy().into_owned();
    for (trial, file) in [&*export, &*export, &*export, BENCH_CSV]
        .into_iter()
        .enumerate()
    {
        let db = dir.path().join(format!("trial-{trial}.db"));
        let outs = at_once(10, &db, &["measurements", "import", file]);
        let mut written = Vec::new();
        let mut already = Vec::new();
        for o in &outs {
            assert_exit(o, 0);
            let done = json(o);
            written.extend(done["runs"].as_array().unwrap().clone());
            already.extend(done["already_imported"].as_array().unwrap().clone());
        }
        assert_eq!(
            count(&db, "SELECT count(*) FROM run"),
            1,
            "trial {trial} ({file})"
        );
        assert_eq!(
            count(&db, "SELECT count(*) FROM measurement"),
            rows,
            "trial {trial}"
        );
        assert_eq!(written, vec![serde_json::json!(1)], "trial {trial}");
        assert_eq!(already, vec![serde_json::json!(1); 9], "trial {trial}");
    }
}

/// Importing the same llama-bench file twice recorded its rows twice; now the second import records nothing and
/// names the run, as does the same results in another of llama-bench's formats, and the same load log twice.
#[test]
fn importing_the_same_results_again_records_nothing_and_names_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("twice.db");
    let o = cli(&db, &["measurements", "import", BENCH_CSV]);
    assert_exit(&o, 0);
    let rows = count(&db, "SELECT count(*) FROM measurement");
    assert!(rows >= 2);
    let o = cli(&db, &["measurements", "import", BENCH_CSV]);
    assert_exit(&o, 0);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("already imported: run 1"), "{out}");
    assert!(!out.contains("recorded (rows"), "{out}");
    // The same results in other bytes: the columns in reverse order (llama-bench files are read by column name)
    // and CRLF line ends.
    let csv = std::fs::read_to_string(common::root().join(BENCH_CSV)).unwrap();
    let reordered: String = csv
        .lines()
        .map(|l| {
            let mut cells: Vec<&str> = l.split(',').collect();
            cells.reverse();
            cells.join(",") + "\r\n"
        })
        .collect();
    assert_ne!(reordered, csv);
    let moved = dir.path().join("same-results.csv");
    std::fs::write(&moved, reordered).unwrap();
    let o = cli(
        &db,
        &[
            "measurements",
            "import",
            moved.to_str().unwrap(),
            "--format",
            "json",
        ],
    );
    assert_exit(&o, 0);
    assert_eq!(json(&o)["already_imported"], serde_json::json!([1]));
    assert_eq!(count(&db, "SELECT count(*) FROM run"), 1);
    assert_eq!(count(&db, "SELECT count(*) FROM measurement"), rows);
    // Other results (another sweep, in JSON lines) are another run.
    let o = cli(
        &db,
        &[
            "measurements",
            "import",
            "tests/fixtures/llama-bench/outputs/tiny-q4_k_m-cpu.jsonl",
            "--format",
            "json",
        ],
    );
    assert_exit(&o, 0);
    assert_eq!(json(&o)["runs"], serde_json::json!([2]));

    let log = "tests/fixtures/llama-cpp/load-logs/llama-q4_k_m-server-cpu.log";
    let model = fixture("gguf/llama-q4_k_m.gguf");
    let model = model.to_str().unwrap();
    let import_log = || {
        cli(
            &db,
            &[
                "measurements",
                "import",
                log,
                "--model",
                model,
                "--format",
                "json",
            ],
        )
    };
    let o = import_log();
    assert_exit(&o, 0);
    assert_eq!(json(&o)["runs"], serde_json::json!([3]));
    let o = import_log();
    assert_exit(&o, 0);
    assert_eq!(json(&o)["already_imported"], serde_json::json!([3]));
    assert_eq!(count(&db, "SELECT count(*) FROM run"), 3);
}

/// Every entry of `dir` with its bytes and modification time.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>, std::time::SystemTime)> {
    let mut all: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let m = std::fs::metadata(&p).unwrap();
            (p.clone(), std::fs::read(&p).unwrap(), m.modified().unwrap())
        })
        .collect();
    all.sort();
    all
}

/// Issue 24, item 13: opening another application's WAL-mode database was refused, but SQLite had already
/// created empty `-wal` and `-shm` files beside it. Now its directory is left exactly as it was: no new file, the
/// same bytes and modification times, whether the file has another application id, none, or is ours but newer.
#[test]
fn a_refused_wal_mode_database_leaves_its_directory_exactly_as_it_was() {
    let root = tempfile::tempdir().unwrap();
    for (i, setup) in [
        "PRAGMA journal_mode = WAL; CREATE TABLE users (id INTEGER PRIMARY KEY); INSERT INTO users VALUES (1);",
        "PRAGMA journal_mode = WAL; PRAGMA application_id = 1234; CREATE TABLE t (x);",
        &format!(
            "PRAGMA journal_mode = WAL; PRAGMA application_id = {}; PRAGMA user_version = 99; CREATE TABLE t (x);",
            optimizer::store::APPLICATION_ID
        ),
    ]
    .iter()
    .enumerate()
    {
        let dir = root.path().join(format!("case-{i}"));
        std::fs::create_dir(&dir).unwrap();
        let db = dir.join("other-app.db");
        Connection::open(&db).unwrap().execute_batch(setup).unwrap();
        let before = snapshot(&dir);
        assert_eq!(before.len(), 1, "case {i}: only the database: {before:?}");
        for args in [
            &["measurements", "list"][..],
            &["measurements", "prune", "--incomplete"],
            &["measurements", "import", BENCH_CSV],
        ] {
            let o = cli(&db, args);
            assert_exit(&o, 4);
            assert!(
                String::from_utf8_lossy(&o.stderr).contains("other-app.db"),
                "case {i}"
            );
            assert_eq!(snapshot(&dir), before, "case {i}: {args:?}");
        }
        let o = bin()
            .arg("--db")
            .arg(&db)
            .arg("--inventory")
            .arg(fixture("inventories/cpu-server.yaml"))
            .args(["resolve", "-m"])
            .arg(fixture("gguf/llama-q4_k_m.gguf"))
            .output()
            .unwrap();
        assert_exit(&o, 4);
        assert_eq!(snapshot(&dir), before, "case {i}: resolve");
    }
}

/// Issue 24, item 13: `--db :memory:` said "recorded" and saved nothing. A name SQLite reads as something other
/// than a file (`:memory:`, an empty name, a `file:` URI), from `--db` or `OPTIMIZER_DB`, is a usage error that
/// names it; `./:memory:` is a file like any other.
#[test]
fn db_names_sqlite_reads_specially_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for name in [":memory:", "", "file:m.db?mode=memory", "FILE:x.db"] {
        let o = bin()
            .arg("--db")
            .arg(name)
            .arg("--inventory")
            .arg(fixture(INVENTORY))
            .args(["measurements", "import", BENCH_CSV])
            .current_dir(common::root())
            .output()
            .unwrap();
        assert_exit(&o, 2);
        let err = String::from_utf8_lossy(&o.stderr);
        // clap itself refuses an empty path; the store refuses it too (below).
        if !name.is_empty() {
            assert!(err.contains(&format!("{name:?}")), "{name:?}: {err}");
            assert!(err.contains("hint:"), "{err}");
        }
        assert!(o.stdout.is_empty(), "{name:?}: nothing said recorded");
        let o = bin()
            .arg("--db")
            .arg(name)
            .arg("--inventory")
            .arg(fixture("inventories/cpu-server.yaml"))
            .args(["resolve", "-m"])
            .arg(fixture("gguf/llama-q4_k_m.gguf"))
            .output()
            .unwrap();
        assert_exit(&o, 2);
    }
    let o = bin()
        .env("OPTIMIZER_DB", ":memory:")
        .args(["measurements", "list"])
        .output()
        .unwrap();
    assert_exit(&o, 2);
    // A file literally named so is a file.
    let o = bin()
        .arg("--db")
        .arg("./:memory:")
        .arg("--inventory")
        .arg(fixture(INVENTORY))
        .args(["measurements", "list"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert_exit(&o, 0);
    assert!(dir.path().join(":memory:").is_file());
    for name in [":memory:", "", "file:m.db?mode=memory"] {
        assert!(matches!(
            Store::open(Path::new(name)).unwrap_err(),
            StoreError::NotAFileName { .. }
        ));
        assert!(matches!(
            Store::open_for_lookup(Path::new(name)).unwrap_err(),
            StoreError::NotAFileName { .. }
        ));
    }
}
