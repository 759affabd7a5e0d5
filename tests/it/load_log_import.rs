//! `optimizer measurements import LOG --model M` on real llama.cpp load logs (tests/fixtures/llama-cpp/load-logs/,
//! the stderr of the pinned llama-server, `-lv 4 --log-colors off -t 2`, stopped with SIGINT once listening):
//!
//! - `llama-q4_k_m-server-cpu.log`: `-m tests/fixtures/gguf/llama-q4_k_m.gguf -c 4096 -b 512 -ub 256` (mmap,
//!   auto parallel: 4 sequences, unified KV, flash attention auto → enabled);
//! - `qwen2-q4_0-server-cpu-nommap.log`: `-m tests/fixtures/gguf/qwen2-q4_0.gguf -c 2048 -np 2 -lm none -fa off
//!   -ctk q8_0`.
//!
//! Each becomes one `peak_memory_bytes` row on the host valued at the buffers the log states (read here
//! independently from the file's text), with `estimated_bytes` equal to what `optimizer estimate` says for the
//! flags the server was started with, so the parameters read back from the log are the ones that ran; the next
//! `resolve` widens the host's reserve by the excess and cites the row.

use crate::common;
use common::{assert_exit, bin, fixture};

use std::path::{Path, PathBuf};

use optimizer::calibrate::load_log::{self, BufferKind};

const LLAMA_LOG: &str = "llama-cpp/load-logs/llama-q4_k_m-server-cpu.log";
const QWEN_LOG: &str = "llama-cpp/load-logs/qwen2-q4_0-server-cpu-nommap.log";
const INVENTORY: &str = "llama-bench/inventory-epyc-milan-2vcpu.yaml";

fn text(rel: &str) -> String {
    std::fs::read_to_string(fixture(rel)).unwrap()
}

fn cmd(db: &Path) -> std::process::Command {
    let mut c = bin();
    c.arg("--db")
        .arg(db)
        .arg("--inventory")
        .arg(fixture(INVENTORY))
        .current_dir(common::root());
    c
}

fn import(db: &Path, log: &Path, model: Option<&str>) -> std::process::Output {
    let mut c = cmd(db);
    c.args(["measurements", "import", "--format", "json"])
        .arg(log);
    if let Some(m) = model {
        c.arg("--model").arg(fixture(format!("gguf/{m}")));
    }
    c.output().unwrap()
}

/// The allocated bytes the log states: every `X buffer size = N MiB` line but file mappings, N MiB rounded to
/// bytes, read here without the importer's parser.
fn allocated_in(log: &str) -> u64 {
    log.lines()
        .filter(|l| l.contains("buffer size =") && !l.contains("_Mapped"))
        .map(|l| {
            let n: f64 = l
                .split("buffer size =")
                .nth(1)
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap()
                .parse()
                .unwrap();
            (n * 1_048_576.0).round() as u64
        })
        .sum()
}

/// `optimizer estimate`'s host total for these llama.cpp flags, less its mapped weights when mmap is on.
fn estimated(model: &str, flags: &[&str]) -> u64 {
    let o = cmd(Path::new("/nonexistent/unused.db"))
        .args(["estimate", "--format", "json", "-m"])
        .arg(fixture(format!("gguf/{model}")))
        .args(flags)
        .output()
        .unwrap();
    assert_exit(&o, 0);
    let e: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let cpu = &e["devices"][0];
    assert_eq!(cpu["device"], "cpu");
    let mapped = if e["resolved"]["mmap"] == true {
        cpu["weights_bytes"].as_u64().unwrap()
    } else {
        0
    };
    cpu["total_bytes"].as_u64().unwrap() - mapped
}

#[test]
fn the_committed_logs_read_to_what_the_server_was_started_with() {
    let log = load_log::parse(&text(LLAMA_LOG)).unwrap();
    assert_eq!(log.loads, 1);
    assert_eq!(log.tensors, Some(21));
    assert_eq!(log.build.as_deref(), Some("0c1e570"));
    assert_eq!(log.threads, Some(2));
    assert!(log.malformed.is_empty(), "{:?}", log.malformed);
    let p = log.params().unwrap();
    assert_eq!(
        (p.n_ctx, p.n_batch, p.n_ubatch, p.n_parallel),
        (4096, 512, 256, 4)
    );
    assert!(p.kv_unified && p.mmap && p.repack);
    assert_eq!(log.flash_attn(), Some(true), "auto, resolved later");
    let kinds: Vec<(&str, BufferKind)> = log
        .buffers
        .iter()
        .map(|b| (b.name.as_str(), b.kind))
        .collect();
    assert_eq!(
        kinds,
        [
            ("CPU_Mapped", BufferKind::Model),
            ("CPU_REPACK", BufferKind::Model),
            ("CPU", BufferKind::Output),
            ("CPU", BufferKind::Kv),
            ("CPU", BufferKind::Compute),
        ]
    );
    // The table printed at exit, not -fit's projection before the load (same figures here, other lines).
    assert_eq!(log.breakdown.len(), 2);
    assert_eq!(log.breakdown[0].name, "Host");
    assert_eq!(log.breakdown[0].self_mib, 5);

    let log = load_log::parse(&text(QWEN_LOG)).unwrap();
    let p = log.params().unwrap();
    assert_eq!(
        (p.n_ctx, p.n_batch, p.n_ubatch, p.n_parallel),
        (2048, 2048, 512, 2)
    );
    assert!(!p.kv_unified && !p.mmap);
    assert_eq!(log.flash_attn(), Some(false));
    assert_eq!(
        (log.type_k.as_deref(), log.type_v.as_deref()),
        (Some("q8_0"), Some("f16"))
    );
}

#[test]
fn a_load_log_records_the_hosts_allocations_against_the_memory_models_estimate() {
    let dir = tempfile::tempdir().unwrap();
    for (rel, model, flags) in [
        (
            LLAMA_LOG,
            "llama-q4_k_m.gguf",
            &["-c", "4096", "-b", "512", "-ub", "256", "-np", "4", "-kvu"][..],
        ),
        (
            QWEN_LOG,
            "qwen2-q4_0.gguf",
            &[
                "-c", "2048", "-np", "2", "-lm", "none", "-fa", "off", "-ctk", "q8_0",
            ][..],
        ),
    ] {
        let db = dir.path().join(format!("{model}.db"));
        let o = import(&db, &fixture(rel), Some(model));
        assert_exit(&o, 0);
        let done: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(done["rows"], serde_json::json!([1]), "{rel}");
        assert_eq!(done["skipped"], serde_json::json!([]), "{rel}");
        let o = cmd(&db)
            .args(["measurements", "show", "1", "--format", "json"])
            .output()
            .unwrap();
        assert_exit(&o, 0);
        let row: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(row["metric"], "peak_memory_bytes");
        assert_eq!(row["run"]["tool"], "llama.cpp load log");
        assert_eq!(row["run"]["runtime_version"], "0c1e570");
        assert_eq!(
            row["value"].as_f64().unwrap() as u64,
            allocated_in(&text(rel)),
            "{rel}"
        );
        assert_eq!(
            row["context"]["estimated_bytes"].as_u64().unwrap(),
            estimated(model, flags),
            "{rel}: the estimate is for the configuration that ran"
        );
    }
}

#[test]
fn resolve_keeps_free_what_the_log_shows_the_memory_model_missed() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("r.db");
    let model = fixture("gguf/qwen2-q4_0.gguf");
    let resolve = || -> optimizer::emit::Deployment {
        let o = cmd(&db)
            .args(["resolve", "--format", "json", "-m"])
            .arg(&model)
            .output()
            .unwrap();
        assert_exit(&o, 0);
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let cpu = |d: &optimizer::emit::Deployment| {
        d.memory
            .devices
            .iter()
            .find(|m| m.device == "cpu")
            .cloned()
            .unwrap()
    };
    let before = resolve();
    assert_exit(&import(&db, &fixture(QWEN_LOG), Some("qwen2-q4_0.gguf")), 0);
    let after = resolve();
    // The compute buffer the server reserved (11.51 MiB) is above the model's figure for that configuration.
    let excess = allocated_in(&text(QWEN_LOG))
        - estimated(
            "qwen2-q4_0.gguf",
            &[
                "-c", "2048", "-np", "2", "-lm", "none", "-fa", "off", "-ctk", "q8_0",
            ],
        );
    assert!(excess > 0);
    assert_eq!(
        cpu(&after).reserve_bytes - cpu(&before).reserve_bytes,
        excess
    );
    let why = &after.provenance["memory.reserve.cpu"];
    assert_eq!(why.source, optimizer::emit::Source::Measured);
    assert!(why.detail.contains("store row 1"), "{}", why.detail);
}

fn write(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

#[test]
fn bad_lines_are_counted_and_bad_logs_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("b.db");
    // A damaged buffer line and a damaged breakdown row: skipped, counted, named; the rest is recorded.
    let damaged = text(QWEN_LOG)
        .replace(
            "CPU KV buffer size =     0.77 MiB",
            "CPU KV buffer size =     0.7x MiB",
        )
        .replacen(
            "0 =     0 +       0 +       0",
            "0 =     0 +       ? +       0",
            1,
        );
    let p = write(dir.path(), "damaged.log", &damaged);
    let o = import(&db, &p, Some("qwen2-q4_0.gguf"));
    assert_exit(&o, 0);
    let done: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let skipped: Vec<&str> = done["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert!(skipped[0].starts_with("line 17:"), "{skipped:?}");
    assert!(skipped[1].starts_with("line 129:"), "{skipped:?}");
    let parsed = load_log::parse(&damaged).unwrap();
    assert_eq!(parsed.malformed.len(), 2);

    // A log of the wrong model: exit 2, naming both.
    let o = import(&db, &fixture(QWEN_LOG), Some("llama-q4_k_m.gguf"));
    assert_exit(&o, 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("27 tensors"));
    // No --model: exit 2.
    assert_exit(&import(&db, &fixture(QWEN_LOG), None), 2);

    // Empty, unrelated, and a server log at default verbosity (no loader lines): exit 4 naming the file.
    let quiet = "0.00.005.807 I srv    load_model: loading model 'm.gguf'\n0.00.019.873 I srv  llama_server: model loaded\n";
    for (name, body, says) in [
        ("empty.log", "", "empty file"),
        ("notes.txt", "hello\nworld\n", "no avg_ts column"),
        ("quiet.log", quiet, "no buffer size lines"),
    ] {
        let p = write(dir.path(), name, body);
        let o = import(&db, &p, Some("qwen2-q4_0.gguf"));
        assert_exit(&o, 4);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(name) && err.contains(says), "{name}: {err}");
    }
    // Two loads in one log.
    let twice = format!("{}{}", text(QWEN_LOG), text(QWEN_LOG));
    let p = write(dir.path(), "twice.log", &twice);
    assert_exit(&import(&db, &p, Some("qwen2-q4_0.gguf")), 4);
    // Nothing but the damaged log's run was written.
    let o = cmd(&db)
        .args(["measurements", "list", "--format", "json"])
        .output()
        .unwrap();
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rows.len(), 1);
}

/// A log that allocates more than the device has (here a 9.5 PB KV buffer on a 25 GB host) is refused, exit 4
/// naming the file, the device and the line, and writes nothing: recorded, it made every later plan of that
/// model no-fit.
#[test]
fn a_log_allocating_more_than_the_device_has_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    let absurd = text(QWEN_LOG).replace(
        "CPU KV buffer size =     0.77 MiB",
        "CPU KV buffer size = 9999999999.00 MiB",
    );
    let p = write(dir.path(), "absurd.log", &absurd);
    let o = import(&db, &p, Some("qwen2-q4_0.gguf"));
    assert_exit(&o, 4);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("absurd.log") && err.contains("on cpu") && err.contains("line 129"),
        "{err}"
    );
    if db.exists() {
        let c = rusqlite::Connection::open(&db).unwrap();
        let n: i64 = c
            .query_row("SELECT count(*) FROM measurement", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 0);
    }
}
