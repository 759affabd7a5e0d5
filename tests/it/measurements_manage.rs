//! `optimizer measurements show` and `measurements prune` through the binary (issue 10, "The store"): a row and a
//! run read back with their host, run, device, model, shape and context; prunes by each selector, a dry run that
//! changes nothing, no orphan rows and no broken foreign keys afterwards; exit 2 for usage, 4 for a foreign or
//! corrupt database.

use crate::common;
use common::{assert_exit, bin, fixture};

use std::path::Path;

use optimizer::store::{
    DeviceIdentity, HostIdentity, ModelIdentity, NewMeasurement, NewRun, RunOwner, Shape, Store,
};
use rusqlite::Connection;

fn cli(db: &Path, args: &[&str]) -> std::process::Output {
    bin()
        .arg("--db")
        .arg(db)
        .arg("--inventory")
        .arg(fixture("llama-bench/inventory-epyc-milan-2vcpu.yaml"))
        .args(args)
        .current_dir(common::root())
        .output()
        .unwrap()
}

fn json(o: &std::process::Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
}

/// The committed llama-bench CSV imported (run 1, rows 1-4).
fn imported(dir: &Path) -> std::path::PathBuf {
    let db = dir.join("m.db");
    let o = cli(
        &db,
        &[
            "measurements",
            "import",
            "tests/fixtures/llama-bench/outputs/tiny-q4_k_m-cpu.csv",
        ],
    );
    assert_exit(&o, 0);
    db
}

fn count(db: &Path, table: &str) -> i64 {
    Connection::open(db)
        .unwrap()
        .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

/// No dangling reference and no unreferenced device, model or host.
fn assert_consistent(db: &Path) {
    let c = Connection::open(db).unwrap();
    let dangling: i64 = c
        .query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(dangling, 0, "foreign_key_check");
    for (what, sql) in [
        (
            "device",
            "SELECT count(*) FROM device WHERE id NOT IN (SELECT device_id FROM measurement)",
        ),
        (
            "model",
            "SELECT count(*) FROM model WHERE id NOT IN (SELECT model_id FROM measurement WHERE model_id IS NOT NULL)",
        ),
        (
            "host",
            "SELECT count(*) FROM host WHERE id NOT IN (SELECT host_id FROM run WHERE host_id IS NOT NULL)",
        ),
    ] {
        let n: i64 = c.query_row(sql, [], |r| r.get(0)).unwrap();
        assert_eq!(n, 0, "orphan {what} rows");
    }
}

/// An interrupted run on another device (a GPU profile) with one row, and one killed before its first row, both
/// recorded by a process that has exited (a prune keeps a run whose recorder runs); returns their ids.
fn interrupted_runs(db: &Path, started_at: &str) -> (i64, i64) {
    let s = Store::open(db).unwrap();
    let mut exited = std::process::Command::new("true").spawn().unwrap();
    exited.wait().unwrap();
    let recorder = RunOwner {
        pid: exited.id(),
        ..RunOwner::current()
    };
    let run = NewRun {
        tool: "test".into(),
        runtime: optimizer::profile::RuntimeId::LlamaCpp,
        runtime_version: None,
        started_at: started_at.into(),
        settings: "{}".into(),
        host: HostIdentity {
            cpu_model: "Other CPU".into(),
            physical_cores: 4,
            memory_total_bytes: 1 << 34,
            hostname: "b".into(),
        },
    };
    let a = s.begin_run_as(&run, &recorder).unwrap();
    s.record(
        a,
        &NewMeasurement {
            device: DeviceIdentity {
                profile: "rtx-4090".into(),
                name: "NVIDIA GeForce RTX 4090".into(),
                uuid: Some("GPU-1".into()),
            },
            model: Some(ModelIdentity {
                fingerprint: "other".into(),
                architecture: "llama".into(),
                tensor_bytes: 1,
            }),
            metric: "decode_tokens_per_s".into(),
            value: 50.0,
            unit: "tokens/s".into(),
            shape: Shape::default(),
            context: "{}".into(),
        },
    )
    .unwrap();
    let b = s.begin_run_as(&run, &recorder).unwrap();
    (a.0, b.0)
}

#[test]
fn show_prints_a_row_and_a_run_with_everything_that_identifies_them() {
    let dir = tempfile::tempdir().unwrap();
    let db = imported(dir.path());
    let o = cli(&db, &["measurements", "show", "2", "--format", "json"]);
    assert_exit(&o, 0);
    let row = json(&o);
    // The second result of the committed file: the generation test at one thread.
    let bench = optimizer::calibrate::llama_bench::parse(
        &std::fs::read_to_string(fixture("llama-bench/outputs/tiny-q4_k_m-cpu.csv")).unwrap(),
    )
    .unwrap();
    assert_eq!(row["row"], 2);
    assert_eq!(row["metric"], "decode_tokens_per_s");
    assert_eq!(row["value"].as_f64().unwrap(), bench[1].avg_ts);
    assert_eq!(row["shape"]["threads"], 1);
    assert_eq!(row["shape"]["kv_type"], "f16");
    assert_eq!(row["device"]["name"], "AMD EPYC");
    assert_eq!(row["model"]["architecture"], "llama");
    assert_eq!(row["context"]["n_gen"], 16, "context is JSON, not a string");
    assert_eq!(row["run"]["id"], 1);
    assert_eq!(row["run"]["tool"], "llama-bench import");
    assert_eq!(row["run"]["runtime_version"], "0c1e570");
    assert_eq!(row["run"]["status"], "complete");
    assert_eq!(row["run"]["host"]["physical_cores"], 2);

    let o = cli(&db, &["measurements", "show", "run:1", "--format", "json"]);
    assert_exit(&o, 0);
    let run = json(&o);
    let rows: Vec<i64> = run["measurements"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["row"].as_i64().unwrap())
        .collect();
    assert_eq!(rows, [1, 2, 3, 4]);
    assert_eq!(run["run"]["started_at"], bench[0].test_time);

    // YAML by default, reading back to the same record.
    let o = cli(&db, &["measurements", "show", "2"]);
    assert_exit(&o, 0);
    let yaml: serde_json::Value = serde_yaml_ng::from_slice(&o.stdout).unwrap();
    assert_eq!(yaml, row);

    for (args, code, says) in [
        (vec!["measurements", "show", "99"], 2, "no measurement 99"),
        (vec!["measurements", "show", "run:7"], 2, "no run 7"),
        (
            vec!["measurements", "show", "run:x"],
            2,
            "expected a row id",
        ),
        (vec!["measurements", "show", "-3"], 2, ""),
        (
            vec!["measurements", "show", "2", "--format", "table"],
            2,
            "",
        ),
    ] {
        let o = cli(&db, &args);
        assert_exit(&o, code);
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(says),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn prune_removes_what_its_selectors_pick_and_leaves_no_orphans() {
    let dir = tempfile::tempdir().unwrap();
    let db = imported(dir.path());
    let (with_row, empty) = interrupted_runs(&db, "2026-11-24T00:00:00Z");
    assert_eq!(count(&db, "measurement"), 5);
    let before = std::fs::read(&db).unwrap();

    // No selector: refused, nothing touched.
    let o = cli(&db, &["measurements", "prune"]);
    assert_exit(&o, 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("at least one selector"));

    // A dry run reports exactly what the real prune then removes, and changes nothing.
    let o = cli(
        &db,
        &[
            "measurements",
            "prune",
            "--incomplete",
            "--dry-run",
            "--format",
            "json",
        ],
    );
    assert_exit(&o, 0);
    let dry = json(&o);
    assert_eq!(count(&db, "measurement"), 5);
    assert_eq!(count(&db, "run"), 3);
    let o = cli(
        &db,
        &["measurements", "prune", "--incomplete", "--format", "json"],
    );
    assert_exit(&o, 0);
    let done = json(&o);
    assert_eq!(done["measurements"], serde_json::json!([5]));
    assert_eq!(done["runs"], serde_json::json!([with_row, empty]));
    // The GPU device, the other model and the other host went with them.
    assert_eq!(
        (&done["devices"], &done["models"], &done["hosts"]),
        (&1.into(), &1.into(), &1.into())
    );
    let mut dry_as_done = dry.clone();
    dry_as_done["dry_run"] = false.into();
    assert_eq!(dry_as_done, done);
    assert_eq!(count(&db, "measurement"), 4);
    assert_eq!(count(&db, "run"), 1);
    assert_consistent(&db);
    assert_ne!(std::fs::read(&db).unwrap(), before);

    // --device narrows to one device's rows; --run to one run; both must hold.
    let o = cli(
        &db,
        &[
            "measurements",
            "prune",
            "--device",
            "rtx-4090",
            "--format",
            "json",
        ],
    );
    assert_exit(&o, 0);
    assert_eq!(json(&o)["measurements"], serde_json::json!([]));
    let o = cli(
        &db,
        &[
            "measurements",
            "prune",
            "--run",
            "1",
            "--incomplete",
            "--format",
            "json",
        ],
    );
    assert_exit(&o, 0);
    assert_eq!(
        json(&o)["measurements"],
        serde_json::json!([]),
        "run 1 is complete"
    );
    assert_eq!(count(&db, "measurement"), 4);

    // --older-than: a run from 2001 goes; the import (dated by llama-bench, this year) stays.
    let (old, old_empty) = interrupted_runs(&db, "2001-01-01T00:00:00Z");
    let (recent, _) = interrupted_runs(&db, &optimizer::app::rfc3339(now()));
    let o = cli(
        &db,
        &[
            "measurements",
            "prune",
            "--older-than",
            "365",
            "--format",
            "json",
        ],
    );
    assert_exit(&o, 0);
    let done = json(&o);
    assert_eq!(done["runs"], serde_json::json!([old, old_empty]), "{done}");
    assert_eq!(done["measurements"].as_array().unwrap().len(), 1);
    assert_eq!(count(&db, "measurement"), 5);
    assert_consistent(&db);

    // --device on the recent GPU row: the row and the run it emptied go; the empty run beside it stays.
    let o = cli(
        &db,
        &[
            "measurements",
            "prune",
            "--device",
            "rtx-4090",
            "--format",
            "json",
        ],
    );
    assert_exit(&o, 0);
    assert_eq!(json(&o)["runs"], serde_json::json!([recent]));
    assert_eq!(count(&db, "run"), 2, "run 1 and the recent empty run");
    assert_consistent(&db);
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[test]
fn prune_refuses_bad_flags_and_foreign_databases() {
    let dir = tempfile::tempdir().unwrap();
    let db = imported(dir.path());
    for args in [
        vec!["measurements", "prune", "--older-than", "-1"],
        vec!["measurements", "prune", "--older-than", "99999999"],
        vec!["measurements", "prune", "--run", "0"],
    ] {
        assert_exit(&cli(&db, &args), 2);
    }
    let foreign = dir.path().join("foreign.db");
    Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE users (id INTEGER PRIMARY KEY);")
        .unwrap();
    let before = std::fs::read(&foreign).unwrap();
    for args in [
        vec!["measurements", "prune", "--incomplete"],
        vec!["measurements", "show", "1"],
    ] {
        let o = cli(&foreign, &args);
        assert_exit(&o, 4);
        assert!(String::from_utf8_lossy(&o.stderr).contains("foreign.db"));
    }
    assert_eq!(std::fs::read(&foreign).unwrap(), before);
}
