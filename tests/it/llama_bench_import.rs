//! Importing the pinned llama-bench's own outputs (tests/fixtures/llama-bench/outputs/, written by the pinned
//! build on this project's 2-core machine: `llama-bench -m tests/fixtures/gguf/llama-q4_k_m.gguf -p 64 -n 16
//! -t 1,2 -r 2 -o FORMAT`, one run per format): every format reads to the same tests, the values are the file's
//! own, and after an import `resolve` reports the measured decode rate for the threads it chose, as `measured`,
//! citing the row.

use crate::common;
use common::{assert_exit, bin, fixture};

use optimizer::calibrate::llama_bench::{BenchRow, parse};

fn read(format: &str) -> Vec<BenchRow> {
    let p = fixture(format!("llama-bench/outputs/tiny-q4_k_m-cpu.{format}"));
    parse(&std::fs::read_to_string(&p).unwrap()).unwrap_or_else(|e| panic!("{format}: {e}"))
}

#[test]
fn every_output_format_reads_to_the_same_tests() {
    let shape = |rows: &[BenchRow]| -> Vec<(u32, u64, u64, i64, String)> {
        rows.iter()
            .map(|r| {
                (
                    r.n_threads,
                    r.n_prompt,
                    r.n_gen,
                    r.n_gpu_layers,
                    r.model_filename.clone(),
                )
            })
            .collect()
    };
    let json = read("json");
    assert_eq!(
        shape(&json),
        vec![
            (1, 64, 0, -1, "tests/fixtures/gguf/llama-q4_k_m.gguf".into()),
            (1, 0, 16, -1, "tests/fixtures/gguf/llama-q4_k_m.gguf".into()),
            (2, 64, 0, -1, "tests/fixtures/gguf/llama-q4_k_m.gguf".into()),
            (2, 0, 16, -1, "tests/fixtures/gguf/llama-q4_k_m.gguf".into()),
        ]
    );
    for format in ["jsonl", "csv", "sql"] {
        let rows = read(format);
        assert_eq!(shape(&rows), shape(&json), "{format}");
        assert!(
            rows.iter().all(|r| r.avg_ts > 0.0 && !r.on_gpu()),
            "{format}"
        );
    }
    // The values are the file's: the first JSON result's avg_ts, read independently.
    let v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("llama-bench/outputs/tiny-q4_k_m-cpu.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(json[0].avg_ts, v[0]["avg_ts"].as_f64().unwrap());
    assert_eq!(json[3].build_commit, "0c1e570");
}

#[test]
fn malformed_outputs_are_refused_with_the_defect() {
    for (text, want) in [
        ("", "empty file"),
        ("a,b\n1,2\n", "no avg_ts column"),
        (
            "[{\"model_filename\": \"m\", \"n_threads\": 1, \"n_prompt\": 1, \"n_gen\": 0}]",
            "no avg_ts",
        ),
        (
            "[{\"model_filename\": \"m\", \"n_threads\": 1, \"n_prompt\": 1, \"n_gen\": 0, \"avg_ts\": \"nan\"}]",
            "not a finite number",
        ),
        (
            "[{\"model_filename\": \"m\", \"n_threads\": 1.5, \"n_prompt\": 1, \"n_gen\": 0, \"avg_ts\": 3}]",
            "not an integer",
        ),
        ("\"avg_ts\",\"n\"\n\"1\"\n", "1 fields for 2 columns"),
        (
            "CREATE TABLE other (x INTEGER);",
            "SQL statement 1: only CREATE TABLE IF NOT EXISTS llama_bench and INSERT INTO llama_bench are read (found CREATE TABLE other)",
        ),
        ("[{\"avg_ts\": 1", "JSON"),
    ] {
        let err = parse(text).unwrap_err().to_string();
        assert!(err.contains(want), "{text:?}: {err}");
    }
}

#[test]
fn an_imported_run_is_what_resolve_reports() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("m.db");
    let inv = fixture("llama-bench/inventory-epyc-milan-2vcpu.yaml");
    let out = bin()
        .arg("--db")
        .arg(&db)
        .arg("--inventory")
        .arg(&inv)
        .args(["measurements", "import", "--format", "json"])
        .arg(fixture("llama-bench/outputs/tiny-q4_k_m-cpu.csv"))
        .current_dir(common::root())
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let done: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(done["rows"].as_array().unwrap().len(), 4);
    let out = bin()
        .arg("--db")
        .arg(&db)
        .args(["measurements", "list", "--format", "json"])
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let listed: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let metrics: Vec<(&str, i64)> = listed
        .iter()
        .map(|r| {
            (
                r["metric"].as_str().unwrap(),
                r["threads"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        metrics,
        [
            ("prefill_tokens_per_s", 1),
            ("decode_tokens_per_s", 1),
            ("prefill_tokens_per_s", 2),
            ("decode_tokens_per_s", 2)
        ]
    );
    assert!(
        listed
            .iter()
            .all(|r| r["status"] == "complete" && r["gpu_layers"] == 0)
    );
    let resolve = || {
        bin()
            .arg("--db")
            .arg(&db)
            .arg("--inventory")
            .arg(&inv)
            .args(["resolve", "-w", "inference", "--format", "json", "-m"])
            .arg(fixture("gguf/llama-q4_k_m.gguf"))
            .output()
            .unwrap()
    };
    let out = resolve();
    assert_exit(&out, 0);
    let d: optimizer::emit::Deployment = serde_json::from_slice(&out.stdout).unwrap();
    let threads = common::llama(&d).threads;
    let tg = read("csv")
        .into_iter()
        .find(|r| r.n_gen > 0 && r.n_threads == threads)
        .unwrap();
    assert_eq!(d.performance.basis, optimizer::evidence::Basis::Measured);
    assert_eq!(
        d.performance.decode_tokens_per_s,
        (tg.avg_ts * 1000.0).round() / 1000.0
    );
    assert_eq!(d.performance.evidence.len(), 1);
    let why = &d.provenance["performance.decode_tokens_per_s"].detail;
    assert!(why.contains("llama-bench import"), "{why}");
    // The prompt tests ran 64 tokens; the inference preset's prompt is 512, so prefill stays predicted.
    assert!(
        !d.provenance
            .contains_key("performance.prefill_tokens_per_s")
    );

    // A file that is not llama-bench output, and one that does not exist.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "[{\"model_filename\": \"m\"}]").unwrap();
    for (file, code) in [(bad, 4), (dir.path().join("absent.json"), 2)] {
        let out = bin()
            .arg("--db")
            .arg(&db)
            .arg("--inventory")
            .arg(&inv)
            .args(["measurements", "import"])
            .arg(&file)
            .output()
            .unwrap();
        assert_exit(&out, code);
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(&*file.to_string_lossy()),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `measurements export` writes every complete run as JSON lines; importing them into another store merges
/// them with their host, run and shape, a second import adds nothing, and the second store exports the same
/// lines. A line with an unknown key, a non-finite value or an unknown runtime is refused naming the file.
#[test]
fn exports_merge_into_another_store_once() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.db"), dir.path().join("b.db"));
    let inv = fixture("llama-bench/inventory-epyc-milan-2vcpu.yaml");
    let cmd = |db: &std::path::Path| {
        let mut c = bin();
        c.arg("--db")
            .arg(db)
            .arg("--inventory")
            .arg(&inv)
            .current_dir(common::root());
        c
    };
    let out = cmd(&a)
        .args(["measurements", "import"])
        .arg(fixture("llama-bench/outputs/tiny-q4_k_m-cpu.jsonl"))
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let out = cmd(&a).args(["measurements", "export"]).output().unwrap();
    assert_exit(&out, 0);
    let exported = String::from_utf8(out.stdout).unwrap();
    assert_eq!(exported.lines().count(), 4);
    let file = dir.path().join("a.jsonl");
    std::fs::write(&file, &exported).unwrap();
    let import = |db: &std::path::Path, f: &std::path::Path| {
        cmd(db)
            .args(["measurements", "import", "--format", "json"])
            .arg(f)
            .output()
            .unwrap()
    };
    let out = import(&b, &file);
    assert_exit(&out, 0);
    let first: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(first["rows"].as_array().unwrap().len(), 4);
    let out = import(&b, &file);
    assert_exit(&out, 0);
    let again: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(again["rows"].as_array().unwrap().is_empty(), "{again}");
    let out = cmd(&b).args(["measurements", "export"]).output().unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), exported);

    let line = exported.lines().next().unwrap();
    let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
    v["surprise"] = 1.into();
    let mut nan =
        serde_json::to_string(&serde_json::from_str::<serde_json::Value>(line).unwrap()).unwrap();
    nan = nan.replacen("\"value\":", "\"value\":1e999,\"x\":", 1);
    let mut runtime: serde_json::Value = serde_json::from_str(line).unwrap();
    runtime["run"]["runtime"] = "tensorrt".into();
    for (i, text) in [v.to_string(), nan, runtime.to_string()]
        .into_iter()
        .enumerate()
    {
        let bad = dir.path().join(format!("bad{i}.jsonl"));
        std::fs::write(&bad, text).unwrap();
        let out = import(&b, &bad);
        assert_eq!(out.status.code(), Some(4), "case {i}: {:?}", out.status);
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(&*bad.to_string_lossy()),
            "case {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// An import killed with SIGKILL at any point leaves a database that passes `PRAGMA integrity_check` and no
/// partial run: 20 imports of a long llama-bench file, each killed after a different delay, each leaving either
/// nothing or the whole run (an import is one transaction, issue 24), then the rows a plan may use are exactly
/// those of the one complete run.
#[test]
fn imports_killed_midway_leave_no_usable_partial_run() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("k.db");
    let inv = fixture("llama-bench/inventory-epyc-milan-2vcpu.yaml");
    // 3,000 generation results at varied thread counts, from the committed output's shape.
    let one: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(fixture("llama-bench/outputs/tiny-q4_k_m-cpu.jsonl"))
            .unwrap()
            .lines()
            .nth(1)
            .unwrap(),
    )
    .unwrap();
    let mut text = String::new();
    for i in 0..3000u64 {
        let mut r = one.clone();
        r["n_threads"] = (1 + i % 64).into();
        r["avg_ts"] = (100.0 + i as f64).into();
        r["test_time"] = format!("2026-11-23T00:00:{:02}Z", i % 60).into();
        text.push_str(&r.to_string());
        text.push('\n');
    }
    let file = dir.path().join("long.jsonl");
    std::fs::write(&file, text).unwrap();
    let import = || {
        let mut c = bin();
        c.arg("--db")
            .arg(&db)
            .arg("--inventory")
            .arg(&inv)
            .args(["measurements", "import"])
            .arg(&file)
            .current_dir(common::root())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        c
    };
    let runs = || -> i64 {
        rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .and_then(|c| c.query_row("SELECT count(*) FROM run", [], |r| r.get(0)))
            .unwrap_or(0)
    };
    let whole = |what: &str| {
        let c =
            rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY);
        let Ok(c) = c else { return };
        let n = |sql: &str| -> i64 { c.query_row(sql, [], |r| r.get(0)).unwrap_or(0) };
        let (runs, incomplete, rows) = (
            n("SELECT count(*) FROM run"),
            n("SELECT count(*) FROM run WHERE status = 'incomplete'"),
            n("SELECT count(*) FROM measurement"),
        );
        assert!(
            incomplete == 0 && ((runs, rows) == (0, 0) || (runs, rows) == (1, 3000)),
            "{what}: {runs} run(s), {incomplete} incomplete, {rows} rows"
        );
    };
    let mut interrupted = 0;
    for i in 0..20u64 {
        let mut child = import().spawn().unwrap();
        // Anywhere from start-up to past the end of the import (about 0.3 s unoptimised).
        std::thread::sleep(std::time::Duration::from_millis(20 + 37 * i));
        let _ = child.kill();
        let _ = child.wait();
        if runs() == 0 {
            interrupted += 1;
        }
        whole(&format!("after kill {i}"));
    }
    assert!(interrupted >= 1, "no import was interrupted");
    // And one that finishes: its rows are the evidence.
    assert!(import().status().unwrap().success());
    let c = rusqlite::Connection::open(&db).unwrap();
    let ok: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
    let incomplete: i64 = c
        .query_row(
            "SELECT count(*) FROM run WHERE status = 'incomplete'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(incomplete, 0, "an interrupted import leaves no partial run");
    let complete_rows: std::collections::BTreeSet<i64> = c
        .prepare(
            "SELECT m.id FROM measurement m JOIN run r ON r.id = m.run_id WHERE r.status = 'complete'",
        )
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let store = optimizer::store::Store::open(&db).unwrap();
    let profile = "cpu-x86-64-avx2-ddr4-dual-channel".to_string();
    let fingerprint: String = c
        .query_row("SELECT fingerprint FROM model LIMIT 1", [], |r| r.get(0))
        .unwrap_or_default();
    let ev = store.evidence(&[profile], &fingerprint).unwrap();
    assert!(
        ev.throughput.iter().all(|t| complete_rows.contains(&t.row)),
        "a row of an interrupted run is evidence"
    );
    assert_eq!(complete_rows.len(), 3000, "one run, recorded once");
    assert_eq!(ev.throughput.len(), complete_rows.len());
}
