//! `calibrate --runner llama-bench`: a sweep run
//! through a llama-bench whose results are recorded as one run as they arrive.
//!
//! Fake llama-bench scripts print the committed output of the pinned build
//! (tests/fixtures/llama-bench/outputs/tiny-q4_k_m-cpu.jsonl, a `-t 1,2 -p 64 -n 16` sweep) line by line: one
//! that fails half-way leaves an incomplete run that is never evidence; one that prints every result completes
//! it and `resolve` reports the measured rate. With `LLAMA_BENCH` set to the pinned binary, an ignored test runs
//! the real thing on the tiny fixture model.

use crate::common;
use common::{assert_exit, bin, fixture};

use std::path::{Path, PathBuf};

const INVENTORY: &str = "llama-bench/inventory-epyc-milan-2vcpu.yaml";
const OUTPUT: &str = "llama-bench/outputs/tiny-q4_k_m-cpu.jsonl";
const PROFILE: &str = "cpu-x86-64-avx2-ddr4-dual-channel";

/// A fake llama-bench: records its argv, prints the first `lines` results of the committed output (a pause
/// between, so they arrive one at a time), then exits with `code`.
fn fake(dir: &Path, lines: usize, code: i32) -> PathBuf {
    let p = dir.join(format!("llama-bench-{lines}-{code}"));
    let script = format!(
        "#!/bin/sh\necho \"$@\" > '{args}'\necho 'load noise on stderr' >&2\nhead -n {lines} '{out}' | while IFS= read -r l; do printf '%s\\n' \"$l\"; sleep 0.05; done\n[ {code} -ne 0 ] && echo 'ggml: out of memory' >&2\nexit {code}\n",
        args = dir.join("args.txt").display(),
        out = fixture(OUTPUT).display(),
    );
    std::fs::write(&p, script).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    p
}

fn calibrate(db: &Path, bench: &Path, extra: &[&str]) -> std::process::Output {
    bin()
        .arg("--db")
        .arg(db)
        .arg("--inventory")
        .arg(fixture(INVENTORY))
        .args(["calibrate", "--runner", "llama-bench", "--bench"])
        .arg(bench)
        .arg("-m")
        .arg(fixture("gguf/llama-q4_k_m.gguf"))
        .args(["--threads", "1,2", "--quick"])
        .args(extra)
        .env_remove("LLAMA_BENCH")
        .output()
        .unwrap()
}

fn fingerprint() -> String {
    optimizer::model::load(&fixture("gguf/llama-q4_k_m.gguf"))
        .unwrap()
        .fingerprint
}

fn status(db: &Path, run: i64) -> String {
    rusqlite::Connection::open(db)
        .unwrap()
        .query_row("SELECT status FROM run WHERE id = ?1", [run], |r| r.get(0))
        .unwrap()
}

#[test]
fn a_llama_bench_that_fails_half_way_leaves_an_incomplete_run_that_is_never_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("f.db");
    let o = calibrate(&db, &fake(dir.path(), 2, 1), &[]);
    assert_exit(&o, 1);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("after 2 of 4 results"), "{err}");
    assert!(err.contains("ggml: out of memory"), "its stderr: {err}");
    assert!(err.contains("[2/4]"), "progress: {err}");
    assert!(
        err.contains("run 1 keeps what was measured as incomplete"),
        "{err}"
    );
    assert_eq!(status(&db, 1), "incomplete");
    let store = optimizer::store::Store::open(&db).unwrap();
    let ev = store.evidence(&[PROFILE.into()], &fingerprint()).unwrap();
    assert_eq!(ev.rows, Some(2), "both rows were written");
    assert!(ev.throughput.is_empty(), "and neither is evidence");

    // Exiting 0 short of the expected results is no better.
    let o = calibrate(&db, &fake(dir.path(), 3, 0), &[]);
    assert_exit(&o, 1);
    assert_eq!(status(&db, 2), "incomplete");

    // A program that does not exist: exit 2, no run.
    let o = calibrate(&db, &dir.path().join("absent"), &[]);
    assert_exit(&o, 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot start"));
}

#[test]
fn a_complete_sweep_is_one_complete_run_that_resolve_reports() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    let o = calibrate(
        &db,
        &fake(dir.path(), 4, 0),
        &[
            "--flash-attn",
            "1",
            "--cache-type-k",
            "F16",
            "--ubatch",
            "512",
        ],
    );
    assert_exit(&o, 0);
    // The argv llama-bench was given.
    assert_eq!(
        std::fs::read_to_string(dir.path().join("args.txt"))
            .unwrap()
            .trim(),
        format!(
            "-m {} -p 64 -n 16 -r 2 -t 1,2 -ub 512 -fa on -ctk f16 -o jsonl",
            fixture("gguf/llama-q4_k_m.gguf").display()
        )
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("run 1: complete, 4 results"), "{out}");
    assert_eq!(status(&db, 1), "complete");
    let rows = optimizer::calibrate::llama_bench::parse(
        &std::fs::read_to_string(fixture(OUTPUT)).unwrap(),
    )
    .unwrap();
    let store = optimizer::store::Store::open(&db).unwrap();
    let ev = store.evidence(&[PROFILE.into()], &fingerprint()).unwrap();
    let mut got: Vec<f64> = ev.throughput.iter().map(|t| t.tokens_per_s).collect();
    let mut want: Vec<f64> = rows.iter().map(|r| r.avg_ts).collect();
    got.sort_by(f64::total_cmp);
    want.sort_by(f64::total_cmp);
    assert_eq!(got, want);
    let shown = bin()
        .arg("--db")
        .arg(&db)
        .args(["measurements", "show", "run:1", "--format", "json"])
        .output()
        .unwrap();
    let run: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(run["run"]["tool"], "calibrate --runner llama-bench");
    assert_eq!(run["run"]["runtime_version"], "0c1e570");
    assert_eq!(run["run"]["settings"]["argv"][0], "-m");

    // resolve now reports the measured decode rate for the threads it chose.
    let o = bin()
        .arg("--db")
        .arg(&db)
        .arg("--inventory")
        .arg(fixture(INVENTORY))
        .args(["resolve", "-w", "inference", "--format", "json", "-m"])
        .arg(fixture("gguf/llama-q4_k_m.gguf"))
        .output()
        .unwrap();
    assert_exit(&o, 0);
    let d: optimizer::emit::Deployment = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(d.performance.basis, optimizer::evidence::Basis::Measured);
    let threads = common::llama(&d).threads;
    let tg = rows
        .iter()
        .find(|r| r.n_gen > 0 && r.n_threads == threads)
        .unwrap();
    assert_eq!(
        d.performance.decode_tokens_per_s,
        (tg.avg_ts * 1000.0).round() / 1000.0
    );
}

#[test]
fn sweep_flags_are_checked_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("u.db");
    let bench = fake(dir.path(), 4, 0);
    for (extra, says) in [
        (&["--flash-attn", "maybe"][..], "--flash-attn"),
        (&["--cache-type-k", "q3_k"][..], "--cache-type-k"),
        (&["--threads", "0"][..], "at least one thread"),
    ] {
        let o = calibrate(&db, &bench, extra);
        assert_exit(&o, 2);
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(says),
            "{extra:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    assert!(!dir.path().join("args.txt").exists(), "nothing ran");
}

/// Values llama-bench cannot run (more threads than ggml's 512, which abort its thread pool; a batch or
/// micro-batch of 0; one beyond a C int) are usage errors before anything runs, not a failed, incomplete run.
#[test]
fn sweep_values_llama_bench_cannot_take_are_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("v.db");
    let bench = fake(dir.path(), 4, 0);
    for (extra, says) in [
        (&["--threads", "100000"][..], "--threads 100000"),
        (&["--batch", "0"][..], "--batch 0"),
        (&["--ubatch", "0"][..], "--ubatch 0"),
        (&["--batch", "4294967295"][..], "--batch 4294967295"),
    ] {
        let o = calibrate(&db, &bench, extra);
        assert_exit(&o, 2);
        assert!(
            String::from_utf8_lossy(&o.stderr).contains(says),
            "{extra:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    assert!(!dir.path().join("args.txt").exists(), "nothing ran");
}

/// The pinned llama-bench on the tiny fixture model: a two-point thread sweep, every result recorded in one
/// complete run.
#[test]
#[ignore = "needs LLAMA_BENCH=/path/to/the pinned llama-bench"]
fn the_pinned_llama_bench_sweep_is_recorded() {
    let Some(bench) = std::env::var_os("LLAMA_BENCH").filter(|v| !v.is_empty()) else {
        eprintln!("skipped: set LLAMA_BENCH to the pinned llama-bench binary");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("real.db");
    let o = calibrate(&db, Path::new(&bench), &["--flash-attn", "on"]);
    assert_exit(&o, 0);
    eprintln!("{}", String::from_utf8_lossy(&o.stdout));
    assert_eq!(status(&db, 1), "complete");
    let store = optimizer::store::Store::open(&db).unwrap();
    let ev = store.evidence(&[PROFILE.into()], &fingerprint()).unwrap();
    let mut threads: Vec<(u32, optimizer::profile::Phase)> = ev
        .throughput
        .iter()
        .map(|t| (t.threads.unwrap(), t.phase))
        .collect();
    threads.sort_by_key(|(t, p)| (*t, *p as u8));
    assert_eq!(threads.len(), 4);
    assert!(ev.throughput.iter().all(|t| t.tokens_per_s > 0.0));
}

/// Two recording processes (an import of a 1,500-result llama-bench file and a sweep through a fake llama-bench)
/// and `resolve`s, started together on one fresh database: every process succeeds (no `database is locked`
/// escapes: writers take the lock at BEGIN, wait out the busy timeout and retry), every row of both lands in a
/// complete run, and the file passes an integrity check.
#[test]
fn two_recorders_and_resolves_share_one_database() {
    const RESULTS: usize = 1_500;
    const RESOLVES: usize = 4;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shared.db");
    let one: serde_json::Value = serde_json::from_str(
        std::fs::read_to_string(fixture(OUTPUT))
            .unwrap()
            .lines()
            .nth(1)
            .unwrap(),
    )
    .unwrap();
    let mut text = String::new();
    for i in 0..RESULTS {
        let mut r = one.clone();
        r["n_threads"] = (1 + i % 16).into();
        r["avg_ts"] = (100.0 + i as f64).into();
        text.push_str(&r.to_string());
        text.push('\n');
    }
    let long = dir.path().join("long.jsonl");
    std::fs::write(&long, text).unwrap();
    let spawn = |c: &mut std::process::Command| {
        c.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let import = spawn(
        bin()
            .arg("--db")
            .arg(&db)
            .arg("--inventory")
            .arg(fixture(INVENTORY))
            .args(["measurements", "import", "--model"])
            .arg(fixture("gguf/llama-q4_k_m.gguf"))
            .arg(&long),
    );
    let sweep = spawn(
        bin()
            .arg("--db")
            .arg(&db)
            .arg("--inventory")
            .arg(fixture(INVENTORY))
            .args(["calibrate", "--runner", "llama-bench", "--bench"])
            .arg(fake(dir.path(), 4, 0))
            .arg("-m")
            .arg(fixture("gguf/llama-q4_k_m.gguf"))
            .args(["--threads", "1,2", "--quick"]),
    );
    let resolves: Vec<_> = (0..RESOLVES)
        .map(|_| {
            spawn(
                bin()
                    .arg("--db")
                    .arg(&db)
                    .arg("--inventory")
                    .arg(fixture(INVENTORY))
                    .args(["resolve", "--format", "json", "-m"])
                    .arg(fixture("gguf/llama-q4_k_m.gguf")),
            )
        })
        .collect();
    for (what, child) in [("import", import), ("sweep", sweep)]
        .into_iter()
        .chain(resolves.into_iter().map(|c| ("resolve", c)))
    {
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{what}: {err}");
        assert!(!err.contains("warning: planned without"), "{what}: {err}");
    }
    let c = rusqlite::Connection::open(&db).unwrap();
    let ok: String = c
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
    let (rows, runs): (i64, i64) = c
        .query_row(
            "SELECT (SELECT count(*) FROM measurement m JOIN run r ON r.id = m.run_id WHERE r.status = 'complete'), \
             (SELECT count(*) FROM run WHERE status = 'complete')",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(rows, RESULTS as i64 + 4);
    assert_eq!(runs, 2);
}
