//! The measurement store (`optimizer::store`): only our own databases are migrated, nothing is written to a
//! refused file, page corruption is found, concurrent first opens are safe, and the environment's faults are told
//! apart from the file's (issue 8, "The store").

use std::path::{Path, PathBuf};
use std::sync::{Arc, Barrier};

use optimizer::store::{APPLICATION_ID, Defect, MIGRATIONS, Store, StoreError};
use rusqlite::Connection;

const KNOWN: i64 = MIGRATIONS.len() as i64;

/// Tables the migrations create, applied once to an empty database.
fn migrated_tables() -> i64 {
    let c = Connection::open_in_memory().unwrap();
    for (_, sql) in MIGRATIONS {
        c.execute_batch(sql).unwrap();
    }
    c.query_row(
        "SELECT count(*) FROM sqlite_schema WHERE type = 'table'",
        [],
        |r| r.get(0),
    )
    .unwrap()
}

/// A database made by hand with `setup`, in rollback-journal mode so that reading it creates no side files.
fn make(dir: &Path, name: &str, setup: &str) -> PathBuf {
    let p = dir.join(name);
    let c = Connection::open(&p).unwrap();
    c.execute_batch(setup).unwrap();
    p
}

/// Our current database, as `Store::open` writes it, then switched back to a rollback journal.
fn ours(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    drop(Store::open(&p).unwrap());
    let c = Connection::open(&p).unwrap();
    let mode: String = c
        .pragma_update_and_check(None, "journal_mode", "DELETE", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "delete");
    p
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn defect(err: &StoreError) -> &Defect {
    match err {
        StoreError::Invalid { defect, .. } => defect,
        other => panic!("expected an invalid file, got {other:?}"),
    }
}

#[test]
fn a_fresh_path_and_an_empty_file_are_created_stamped_and_migrated() {
    let d = tempfile::tempdir().unwrap();
    let fresh = d.path().join("sub/dir/optimizer.db");
    let empty = d.path().join("empty.db");
    std::fs::write(&empty, b"").unwrap();
    for p in [&fresh, &empty] {
        let s = Store::open(p).unwrap();
        assert_eq!(s.version().unwrap(), KNOWN);
        assert_eq!(s.application_id().unwrap(), APPLICATION_ID);
        drop(s);
        let s = Store::open(p).unwrap();
        assert_eq!(s.version().unwrap(), KNOWN, "reopening is idempotent");
        let ev = s.evidence(&["rtx-4090".into()], "abc").unwrap();
        assert_eq!(ev.rows, Some(0));
        assert!(ev.is_empty());
    }
    let m = Store::open_in_memory().unwrap();
    assert_eq!(m.version().unwrap(), KNOWN);
    assert_eq!(m.application_id().unwrap(), APPLICATION_ID);
}

#[test]
fn a_negative_user_version_is_refused_not_a_panic() {
    let d = tempfile::tempdir().unwrap();
    let p = make(d.path(), "negative.db", "PRAGMA user_version = -1;");
    let err = Store::open(&p).unwrap_err();
    assert!(matches!(defect(&err), Defect::NegativeVersion(-1)), "{err}");
    assert!(err.is_invalid_file());
    assert!(err.to_string().contains("negative.db"), "{err}");
}

#[test]
fn a_foreign_sqlite_file_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let p = make(
        d.path(),
        "foreign.db",
        "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO users VALUES (1, 'ann');",
    );
    let err = Store::open(&p).unwrap_err();
    assert!(
        matches!(defect(&err), Defect::ForeignSchema { version: 0, .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains("table \"users\" is not ours"),
        "{err}"
    );
}

#[test]
fn another_application_id_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let p = make(
        d.path(),
        "other-app.db",
        "PRAGMA application_id = 305419896;",
    );
    let err = Store::open(&p).unwrap_err();
    assert!(
        matches!(
            defect(&err),
            Defect::ForeignApplication { found: 0x1234_5678 }
        ),
        "{err}"
    );
}

#[test]
fn our_stamped_database_with_a_table_that_is_not_ours_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let p = ours(d.path(), "extra.db");
    Connection::open(&p)
        .unwrap()
        .execute_batch("CREATE TABLE notes (x)")
        .unwrap();
    let err = Store::open(&p).unwrap_err();
    assert!(
        err.to_string().contains("table \"notes\" is not ours"),
        "{err}"
    );
}

#[test]
fn an_unstamped_version_1_database_without_our_schema_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let p = make(
        d.path(),
        "half.db",
        "CREATE TABLE device (id INTEGER PRIMARY KEY); PRAGMA user_version = 1;",
    );
    let err = Store::open(&p).unwrap_err();
    assert!(
        matches!(defect(&err), Defect::ForeignSchema { version: 1, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("is missing"), "{err}");
}

#[test]
fn a_database_of_the_previous_release_is_accepted_and_stamped() {
    // What the release before application ids wrote: WAL, user_version 1, migration 0001, application id 0.
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("previous.db");
    {
        let c = Connection::open(&p).unwrap();
        c.pragma_update(None, "journal_mode", "WAL").unwrap();
        let tx = c.unchecked_transaction().unwrap();
        tx.execute_batch(MIGRATIONS[0].1).unwrap();
        tx.pragma_update(None, "user_version", 1).unwrap();
        tx.execute(
            "INSERT INTO device (profile, name) VALUES ('rtx-4090', 'NVIDIA GeForce RTX 4090')",
            [],
        )
        .unwrap();
        tx.commit().unwrap();
        let id: i32 = c
            .pragma_query_value(None, "application_id", |r| r.get(0))
            .unwrap();
        assert_eq!(id, 0);
    }
    let s = Store::open(&p).unwrap();
    assert_eq!(s.version().unwrap(), KNOWN);
    assert_eq!(s.application_id().unwrap(), APPLICATION_ID, "stamped");
    drop(s);
    let c = Connection::open(&p).unwrap();
    let n: i64 = c
        .query_row("SELECT count(*) FROM device", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1, "its rows are kept");
}

#[test]
fn a_page_corrupted_database_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let p = ours(d.path(), "corrupt-page.db");
    let page_size: u32 = Connection::open(&p)
        .unwrap()
        .pragma_query_value(None, "page_size", |r| r.get(0))
        .unwrap();
    let page_size = page_size as usize;
    let mut bytes = std::fs::read(&p).unwrap();
    assert!(bytes.len() >= 3 * page_size, "{} bytes", bytes.len());
    // Page 3 (a table's root page): garbage where a b-tree page header belongs.
    bytes[2 * page_size..3 * page_size].fill(0xA5);
    std::fs::write(&p, &bytes).unwrap();
    let err = Store::open(&p).unwrap_err();
    assert!(matches!(defect(&err), Defect::Corrupt(_)), "{err}");
    assert!(err.is_invalid_file());
}

#[test]
fn refused_files_are_left_byte_for_byte() {
    let d = tempfile::tempdir().unwrap();
    let garbage = d.path().join("garbage.db");
    std::fs::write(&garbage, b"this is not a database, just bytes ".repeat(200)).unwrap();
    let corrupt = ours(d.path(), "corrupt.db");
    let mut bytes = std::fs::read(&corrupt).unwrap();
    bytes[2 * 4096..3 * 4096].fill(0xA5);
    std::fs::write(&corrupt, &bytes).unwrap();
    let cases = [
        (
            make(
                d.path(),
                "foreign.db",
                "CREATE TABLE users (id INTEGER PRIMARY KEY);",
            ),
            "table \"users\" is not ours",
        ),
        (
            make(
                d.path(),
                "newer.db",
                &format!(
                    "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = 99; CREATE TABLE later (x);"
                ),
            ),
            "written by a newer optimizer",
        ),
        (
            make(d.path(), "negative.db", "PRAGMA user_version = -7;"),
            "negative schema version -7",
        ),
        (corrupt, "corrupted"),
        (garbage, "not an SQLite database"),
    ];
    let listing = files_in(d.path());
    for (p, defect) in &cases {
        let before = std::fs::read(p).unwrap();
        let err = Store::open(p).unwrap_err();
        assert!(err.is_invalid_file(), "{}: {err}", p.display());
        assert!(err.to_string().contains(defect), "{err}");
        assert_eq!(
            std::fs::read(p).unwrap(),
            before,
            "{} was modified: {err}",
            p.display()
        );
    }
    assert_eq!(
        files_in(d.path()),
        listing,
        "no journal or WAL files left behind"
    );
}

#[test]
fn a_newer_database_is_refused_as_newer() {
    let d = tempfile::tempdir().unwrap();
    let p = make(
        d.path(),
        "new.db",
        &format!("PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = 99;"),
    );
    let err = Store::open(&p).unwrap_err();
    assert!(matches!(err, StoreError::Newer { found: 99, .. }), "{err}");
    assert!(err.to_string().contains("new.db"));
}

#[test]
fn twenty_simultaneous_first_opens_all_succeed() {
    const THREADS: usize = 20;
    // Several rounds: one race is luck, five in a row is not.
    for round in 0..5 {
        let d = tempfile::tempdir().unwrap();
        let p = Arc::new(d.path().join(format!("race-{round}.db")));
        let start = Arc::new(Barrier::new(THREADS));
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                let (p, start) = (Arc::clone(&p), Arc::clone(&start));
                std::thread::spawn(move || {
                    start.wait();
                    Store::open(&p).map(|s| s.version().unwrap())
                })
            })
            .collect();
        for h in handles {
            match h.join().unwrap() {
                Ok(v) => assert_eq!(v, KNOWN),
                Err(e) => panic!("round {round}: {e}"),
            }
        }
        let c = Connection::open(&*p).unwrap();
        let tables: i64 = c
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE type = 'table'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(tables, migrated_tables(), "migrated once");
    }
}

#[test]
fn the_environments_faults_are_not_invalid_files() {
    let d = tempfile::tempdir().unwrap();
    // A directory that cannot be created (its parent is a file): works the same for root.
    let file = d.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let err = Store::open(&file.join("optimizer/optimizer.db")).unwrap_err();
    assert!(matches!(err, StoreError::Io { .. }), "{err}");
    assert!(!err.is_invalid_file());
    // A directory where no file can be created (procfs refuses, for root too).
    let err = Store::open(Path::new("/proc/self/optimizer.db")).unwrap_err();
    assert!(matches!(err, StoreError::Unavailable { .. }), "{err}");
    assert!(!err.is_invalid_file());
}

#[test]
fn a_directory_or_fifo_is_refused_without_hanging() {
    let d = tempfile::tempdir().unwrap();
    let err = Store::open(d.path()).unwrap_err();
    assert!(matches!(defect(&err), Defect::NotRegularFile), "{err}");
    let fifo = d.path().join("fifo.db");
    let ok = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success();
    assert!(ok, "mkfifo");
    let err = Store::open(&fifo).unwrap_err();
    assert!(matches!(defect(&err), Defect::NotRegularFile), "{err}");
}

/// Rows of every kind for two device profiles and two models, as calibration and imports will write them.
const EVIDENCE_ROWS: &str = "
INSERT INTO device (id, profile, name) VALUES (1, 'h100-sxm', 'NVIDIA H100 80GB HBM3'), (2, 'rtx-4090', 'RTX 4090');
INSERT INTO model (id, fingerprint, architecture, tensor_bytes) VALUES (1, 'fp-a', 'llama', 1), (2, 'fp-b', 'llama', 1);
INSERT INTO run (id, tool, runtime, started_at) VALUES (1, 'calibrate', 'llama.cpp', '2026-11-22T00:00:00Z'),
  (2, 'llama-bench import', 'llama.cpp', '2026-11-22T00:00:00Z'), (3, 'calibrate', 'tensorrt', '2026-11-22T00:00:00Z');
INSERT INTO measurement (id, run_id, device_id, model_id, metric, value, unit, context) VALUES
  (10, 1, 1, NULL, 'decode_efficiency', 0.41, 'ratio', '{}'),
  (11, 1, 1, NULL, 'prefill_efficiency', 0.2, 'ratio', '{}'),
  (12, 2, 1, 1, 'decode_tokens_per_s', 250.5, 'tokens/s', '{\"concurrency\": 1}'),
  (13, 2, 1, 1, 'peak_memory_bytes', 9000000000, 'bytes', '{\"n_ctx\": 4096}'),
  (14, 2, 1, 2, 'decode_tokens_per_s', 99.0, 'tokens/s', '{}'),
  (15, 3, 1, NULL, 'decode_efficiency', 0.9, 'ratio', '{}'),
  (16, 1, 1, NULL, 'decode_efficiency', 7.5, 'ratio', '{}'),
  (17, 1, 2, NULL, 'decode_efficiency', 0.5, 'ratio', '{}'),
  (18, 1, 1, NULL, 'bandwidth_bytes_per_s', 3.0e12, 'bytes/s', '{}');
";

#[test]
fn evidence_returns_each_usable_row_with_its_id_and_counts_the_rest() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("e.db");
    drop(Store::open(&p).unwrap());
    rusqlite::Connection::open(&p)
        .unwrap()
        .execute_batch(EVIDENCE_ROWS)
        .unwrap();
    let s = Store::open(&p).unwrap();
    let ev = s.evidence(&["h100-sxm".into()], "fp-a").unwrap();
    // Rows for this device: every model-free row and model fp-a's, not fp-b's (14) nor the 4090's (17).
    assert_eq!(ev.rows, Some(7));
    let eff: Vec<(i64, f64)> = ev.efficiencies.iter().map(|e| (e.row, e.value)).collect();
    // 15 names a runtime the planner does not know; 16 claims 750 % of the peak.
    assert_eq!(eff, vec![(10, 0.41), (11, 0.2)]);
    assert!(
        ev.efficiencies
            .iter()
            .all(|e| e.basis == optimizer::evidence::Basis::Calibrated)
    );
    assert_eq!(ev.throughput.len(), 1);
    assert_eq!(
        (ev.throughput[0].row, ev.throughput[0].concurrency),
        (12, Some(1))
    );
    assert_eq!(ev.peak_memory.len(), 1);
    assert_eq!(
        (ev.peak_memory[0].row, ev.peak_memory[0].bytes),
        (13, 9_000_000_000)
    );
    // Asking twice for one profile counts its rows once.
    let twice = s
        .evidence(&["h100-sxm".into(), "h100-sxm".into()], "fp-a")
        .unwrap();
    assert_eq!(twice.rows, Some(7));
}

/// The lookup path `resolve` takes: a current database is read through one read-only connection and left
/// byte for byte; a missing one is created and migrated as `open` does; a foreign one is refused untouched; an
/// older unstamped one is migrated by `open`'s path.
#[test]
fn lookups_read_a_current_store_read_only_and_fall_back_to_open_otherwise() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("current.db");
    drop(Store::open(&p).unwrap());
    let before = std::fs::read(&p).unwrap();
    let s = Store::open_for_lookup(&p).unwrap();
    assert!(s.is_read_only(), "a current store is looked up read-only");
    assert_eq!(
        s.evidence(&["h100-sxm".into()], "fp").unwrap().rows,
        Some(0)
    );
    drop(s);
    assert_eq!(
        std::fs::read(&p).unwrap(),
        before,
        "a lookup writes nothing"
    );

    let fresh = d.path().join("sub/fresh.db");
    let s = Store::open_for_lookup(&fresh).unwrap();
    assert!(!s.is_read_only());
    assert_eq!(s.version().unwrap(), KNOWN);
    assert_eq!(s.application_id().unwrap(), APPLICATION_ID);

    let foreign = make(d.path(), "foreign.db", "CREATE TABLE t (x INTEGER);");
    let bytes = std::fs::read(&foreign).unwrap();
    let err = Store::open_for_lookup(&foreign).unwrap_err();
    assert!(
        matches!(defect(&err), Defect::ForeignSchema { .. }),
        "{err}"
    );
    assert_eq!(std::fs::read(&foreign).unwrap(), bytes);
}

fn host() -> optimizer::store::HostIdentity {
    optimizer::store::HostIdentity {
        cpu_model: "AMD EPYC 7763".into(),
        physical_cores: 2,
        memory_total_bytes: 24 << 30,
        hostname: "ci".into(),
    }
}

fn run_of(tool: &str) -> optimizer::store::NewRun {
    optimizer::store::NewRun {
        tool: tool.into(),
        runtime: optimizer::profile::RuntimeId::LlamaCpp,
        runtime_version: Some("0c1e5709".into()),
        started_at: "2026-11-22T00:00:00Z".into(),
        settings: "{}".into(),
        host: host(),
    }
}

fn decode(value: f64, sequences: u32) -> optimizer::store::NewMeasurement {
    optimizer::store::NewMeasurement {
        device: optimizer::store::DeviceIdentity {
            profile: "h100-sxm".into(),
            name: "NVIDIA H100 80GB HBM3".into(),
            uuid: None,
        },
        model: Some(optimizer::store::ModelIdentity {
            fingerprint: "fp".into(),
            architecture: "llama".into(),
            tensor_bytes: 1,
        }),
        metric: "decode_tokens_per_s".into(),
        value,
        unit: "tokens/s".into(),
        shape: optimizer::store::Shape {
            sequences: Some(sequences),
            threads: Some(4),
            ..Default::default()
        },
        context: "{}".into(),
    }
}

/// A version-1 database (stamped, as the first release wrote it) migrates to the current version; device rows
/// that version 1 let repeat because their UUID was NULL are folded into one, and their measurements follow.
#[test]
fn version_one_migrates_and_folds_devices_without_a_uuid() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("v1.db");
    let c = Connection::open(&p).unwrap();
    c.execute_batch(MIGRATIONS[0].1).unwrap();
    c.execute_batch(&format!(
        "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = 1;
         INSERT INTO device (id, profile, name, uuid) VALUES (1, 'rtx-4090', 'RTX 4090', NULL), (2, 'rtx-4090', 'RTX 4090', NULL), (3, 'rtx-4090', 'RTX 4090', 'GPU-1');
         INSERT INTO run (id, tool, runtime, started_at) VALUES (1, 'calibrate', 'llama.cpp', '2026-01-01T00:00:00Z');
         INSERT INTO measurement (id, run_id, device_id, metric, value, unit) VALUES (1, 1, 1, 'decode_efficiency', 0.5, 'ratio'), (2, 1, 2, 'decode_efficiency', 0.6, 'ratio'), (3, 1, 3, 'decode_efficiency', 0.7, 'ratio');"
    ))
    .unwrap();
    drop(c);
    let s = Store::open(&p).unwrap();
    assert_eq!(s.version().unwrap(), KNOWN);
    drop(s);
    let c = Connection::open(&p).unwrap();
    let devices: Vec<(i64, Option<String>)> = c
        .prepare("SELECT id, uuid FROM device ORDER BY id")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(devices, vec![(1, None), (3, Some("GPU-1".into()))]);
    let owners: Vec<i64> = c
        .prepare("SELECT device_id FROM measurement ORDER BY id")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(owners, vec![1, 1, 3]);
    // Version 1's run counts as complete; its rows are evidence.
    let s = Store::open(&p).unwrap();
    assert_eq!(
        s.evidence(&["rtx-4090".into()], "any")
            .unwrap()
            .efficiencies
            .len(),
        3
    );
    // The identity is now keyed with the missing UUID as '': a second NULL row cannot be added.
    assert!(
        c.execute(
            "INSERT INTO device (profile, name, uuid) VALUES ('rtx-4090', 'RTX 4090', NULL)",
            []
        )
        .is_err()
    );
}

/// The tensor-parallel size a row was measured at reaches the planner's evidence (the vLLM runtime uses a row only
/// at its own size); a row without one says nothing.
#[test]
fn a_rows_tensor_parallel_size_reaches_the_evidence() {
    let d = tempfile::tempdir().unwrap();
    let s = Store::open(&d.path().join("tp.db")).unwrap();
    let run = s.begin_run(&run_of("vllm bench")).unwrap();
    let mut at_tp2 = decode(900.0, 8);
    at_tp2.shape.tensor_parallel = Some(2);
    let tp2 = s.record(run, &at_tp2).unwrap();
    let plain = s.record(run, &decode(450.0, 8)).unwrap();
    s.finish_run(run, "2026-11-22T00:01:00Z").unwrap();
    let ev = s.evidence(&["h100-sxm".into()], "fp").unwrap();
    let tp: Vec<(i64, Option<u32>)> = ev
        .throughput
        .iter()
        .map(|t| (t.row, t.tensor_parallel))
        .collect();
    assert_eq!(tp, vec![(tp2, Some(2)), (plain, None)]);
}

/// A run's rows are evidence only once it finished: one left incomplete (killed, say) is counted, never used.
#[test]
fn rows_of_an_unfinished_run_are_never_evidence() {
    let d = tempfile::tempdir().unwrap();
    let s = Store::open(&d.path().join("runs.db")).unwrap();
    let killed = s.begin_run(&run_of("calibrate")).unwrap();
    s.record(killed, &decode(999.0, 1)).unwrap();
    let ev = s.evidence(&["h100-sxm".into()], "fp").unwrap();
    assert_eq!((ev.rows, ev.throughput.len()), (Some(1), 0));

    let done = s.begin_run(&run_of("llama-bench import")).unwrap();
    let row = s.record(done, &decode(250.0, 4)).unwrap();
    assert!(
        s.record(done, &decode(f64::NAN, 1)).is_err(),
        "NaN is refused"
    );
    assert!(
        s.evidence(&["h100-sxm".into()], "fp")
            .unwrap()
            .throughput
            .is_empty()
    );
    s.finish_run(done, "2026-11-22T00:01:00Z").unwrap();
    let ev = s.evidence(&["h100-sxm".into()], "fp").unwrap();
    assert_eq!(ev.rows, Some(2));
    assert_eq!(ev.throughput.len(), 1);
    let t = &ev.throughput[0];
    assert_eq!(
        (t.row, t.tokens_per_s, t.concurrency),
        (row, 250.0, Some(4))
    );
    assert_eq!(t.what, "llama-bench import");
    // One device row and one host row for both runs.
    for (table, n) in [("device", 1), ("host", 1), ("model", 1)] {
        let count: i64 = s_count(&d.path().join("runs.db"), table);
        assert_eq!(count, n, "{table}");
    }
}

fn s_count(p: &Path, table: &str) -> i64 {
    Connection::open(p)
        .unwrap()
        .query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

/// Two writers recording runs and a reader looking up evidence at once, on one file: every write lands, every
/// read succeeds, and the file passes an integrity check.
#[test]
fn two_writers_and_a_reader_share_one_database() {
    let d = tempfile::tempdir().unwrap();
    let p = Arc::new(d.path().join("shared.db"));
    drop(Store::open(&p).unwrap());
    let start = Arc::new(Barrier::new(3));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let (p, start) = (Arc::clone(&p), Arc::clone(&start));
            std::thread::spawn(move || {
                let s = Store::open(&p).unwrap();
                start.wait();
                for i in 0..20 {
                    let r = s.begin_run(&run_of(&format!("writer {w}"))).unwrap();
                    s.record(r, &decode(f64::from(100 + i), 1)).unwrap();
                    s.finish_run(r, "2026-11-22T00:01:00Z").unwrap();
                }
            })
        })
        .collect();
    let reader = {
        let (p, start) = (Arc::clone(&p), Arc::clone(&start));
        std::thread::spawn(move || {
            start.wait();
            for _ in 0..20 {
                let s = Store::open_for_lookup(&p).unwrap();
                s.evidence(&["h100-sxm".into()], "fp").unwrap();
            }
        })
    };
    for h in writers {
        h.join().unwrap();
    }
    reader.join().unwrap();
    let s = Store::open(&p).unwrap();
    assert_eq!(
        s.evidence(&["h100-sxm".into()], "fp")
            .unwrap()
            .throughput
            .len(),
        40
    );
    let ok: String = Connection::open(&*p)
        .unwrap()
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
}
