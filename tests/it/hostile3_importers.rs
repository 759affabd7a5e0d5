//! Hostile input, round 3 (issue 24): the importers. `measurements import x.sql` read SQL by executing it in
//! SQLite (an `ATTACH` or `VACUUM INTO` created databases anywhere, a recursive CTE never ended); now only
//! the two statements llama-bench writes are parsed, and nothing is run. Every format kept every column of
//! every row as a JSON value before counting rows (a 64 MiB CSV peaked at 12.1 GB); now rows are counted as
//! they are read, columns per result are capped and only the columns a result is made of are kept. The
//! llama-bench runner buffered an endless output line; now a line is refused once it passes the limit. A
//! load log kept every malformed line and every `llama_context:` field; both are capped.

use crate::common;
use common::alloc::peak_during;
use common::{assert_exit, bin, fixture};

use std::path::{Path, PathBuf};
use std::time::Duration;

use optimizer::calibrate::llama_bench::{
    self, BenchRow, LlamaBenchError, MAX_COLUMNS, MAX_ROWS, SqlError,
};
use optimizer::calibrate::load_log::{self, LoadLogError, MAX_CONTEXT_FIELDS, MAX_MALFORMED_LINES};
use optimizer::calibrate::runner::{self, MAX_LINE_BYTES, Recorded, RunnerError, Sink};

const INVENTORY: &str = "llama-bench/inventory-epyc-milan-2vcpu.yaml";
const SQL: &str = "llama-bench/outputs/tiny-q4_k_m-cpu.sql";

/// Past this a parse is taken to hang: each here takes milliseconds when correct.
const DEADLINE: Duration = Duration::from_secs(60);

fn text(rel: &str) -> String {
    std::fs::read_to_string(fixture(rel)).unwrap()
}

/// The committed SQL output's `CREATE TABLE` statement, the prelude of every hostile file here (so the old
/// reader took each for SQL and ran it).
fn create_table() -> String {
    let sql = text(SQL);
    let end = sql.find(");").unwrap() + 2;
    sql[..end].to_string()
}

/// The committed SQL output's first `INSERT`.
fn first_insert() -> String {
    text(SQL)
        .lines()
        .find(|l| l.starts_with("INSERT"))
        .unwrap()
        .to_string()
}

/// `parse(text)` on another thread, failing past [`DEADLINE`] instead of hanging the suite.
fn parse_in_time(text: String) -> Result<Vec<BenchRow>, LlamaBenchError> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(llama_bench::parse(&text));
    });
    rx.recv_timeout(DEADLINE)
        .expect("the parse did not finish: SQL is being run")
}

/// `measurements import FILE` into a database in `dir`, on the fixture inventory.
fn import(dir: &Path, file: &Path) -> std::process::Output {
    bin()
        .arg("--db")
        .arg(dir.join("m.db"))
        .arg("--inventory")
        .arg(fixture(INVENTORY))
        .args(["measurements", "import"])
        .arg(file)
        .current_dir(common::root())
        .output()
        .unwrap()
}

/// Files in `dir` other than the import's own database.
fn stray_files(dir: &Path, keep: &[&str]) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("m.db") && !keep.contains(&n.as_str()))
        .collect()
}

#[test]
fn sql_attach_is_refused_and_creates_no_database() {
    let dir = tempfile::tempdir().unwrap();
    let evil = dir.path().join("x").join("evil.db");
    std::fs::create_dir(dir.path().join("x")).unwrap();
    let sql = format!(
        "{}\nATTACH DATABASE '{}' AS e;\nCREATE TABLE e.t(x);\n{}\n",
        create_table(),
        evil.display(),
        first_insert()
    );
    let err = parse_in_time(sql.clone()).unwrap_err();
    assert!(
        matches!(&err, LlamaBenchError::Sql { statement: 2, why: SqlError::NotRead { found } }
            if found.starts_with("ATTACH")),
        "{err:?}"
    );
    assert!(
        err.to_string().contains(
            "SQL statement 2: only CREATE TABLE IF NOT EXISTS llama_bench and INSERT INTO llama_bench are read (found ATTACH"
        ),
        "{err}"
    );
    let file = dir.path().join("attach.sql");
    std::fs::write(&file, sql).unwrap();
    let out = import(dir.path(), &file);
    assert_exit(&out, 4);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&*file.to_string_lossy()), "{stderr}");
    assert!(stderr.contains("statement 2"), "{stderr}");
    assert!(!evil.exists(), "ATTACH created {}", evil.display());
    assert!(
        std::fs::read_dir(dir.path().join("x"))
            .unwrap()
            .next()
            .is_none(),
        "a file was created"
    );
}

#[test]
fn sql_vacuum_into_is_refused_and_creates_no_database() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("copy.db");
    let sql = format!(
        "{}\n{}\nVACUUM INTO '{}';\n",
        create_table(),
        first_insert(),
        copy.display()
    );
    let err = parse_in_time(sql.clone()).unwrap_err();
    assert!(
        matches!(&err, LlamaBenchError::Sql { statement: 3, why: SqlError::NotRead { found } }
            if found == "VACUUM"),
        "{err:?}"
    );
    let file = dir.path().join("vacuum.sql");
    std::fs::write(&file, sql).unwrap();
    let out = import(dir.path(), &file);
    assert_exit(&out, 4);
    assert!(!copy.exists(), "VACUUM INTO wrote {}", copy.display());
    assert_eq!(
        stray_files(dir.path(), &["vacuum.sql"]),
        Vec::<String>::new()
    );
}

/// A recursive CTE that never ends (SQLite ran it until killed) is refused at its first word.
#[test]
fn sql_recursive_cte_is_refused_at_once() {
    for tail in [
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c;",
        "INSERT INTO llama_bench (avg_ts) WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c;",
    ] {
        let sql = format!("{}\n{tail}\n", create_table());
        let started = std::time::Instant::now();
        let err = parse_in_time(sql).unwrap_err();
        assert!(
            matches!(err, LlamaBenchError::Sql { statement: 2, .. }),
            "{err:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(5), "{tail}");
    }
}

/// What else the old reader ran or read loosely: another table, a comment, a double-quoted name, an INSERT
/// whose counts differ, an INSERT before the table.
#[test]
fn sql_other_than_llama_benchs_is_refused_naming_the_statement() {
    let create = create_table();
    for (sql, statement, want) in [
        (
            format!("{create}\nINSERT INTO other (x) VALUES ('1');"),
            2,
            "(found INSERT INTO other)",
        ),
        (
            "CREATE TABLE other (x INTEGER);".to_string(),
            1,
            "(found CREATE TABLE other)",
        ),
        (
            format!("{create}\n-- a comment\n"),
            2,
            "unexpected character '-'",
        ),
        (
            format!("{create}\nINSERT INTO llama_bench (\"avg_ts\") VALUES ('1');"),
            2,
            "unexpected character '\"'",
        ),
        (
            format!("{create}\nINSERT INTO llama_bench (avg_ts, n_gen) VALUES ('1');"),
            2,
            "2 columns but 1 values",
        ),
        (
            format!("{create}\nINSERT INTO llama_bench (avg_ts) VALUES ('1', '2');"),
            2,
            "1 columns but 2 values",
        ),
        (
            format!("{create}\nINSERT INTO llama_bench (avg_ts) VALUES ('1'), ('2');"),
            2,
            "expected ; (the statement's end), found ,",
        ),
        (
            "INSERT INTO llama_bench (avg_ts) VALUES ('1');".to_string(),
            1,
            "no such table",
        ),
        (
            format!("{create}\nINSERT INTO llama_bench (avg_ts) VALUES (1 + 1);"),
            2,
            "unexpected character '+'",
        ),
    ] {
        let err = parse_in_time(sql.clone()).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with(&format!("SQL statement {statement}: ")) && msg.contains(want),
            "{sql}: {msg}"
        );
    }
}

/// A result as SQLite gives it back: build, model, backends, threads, -ngl, flash attention, prompt and
/// generated tokens, rate, its deviation, test time.
type SqliteRow = (
    String,
    String,
    String,
    i64,
    i64,
    i64,
    i64,
    i64,
    f64,
    f64,
    String,
);

/// The committed SQL output reads to the rows SQLite reads from it (run here, in the test, on the trusted
/// fixture), and to the tests of its JSON twin (another run of the same sweep, so other rates).
#[test]
fn real_llama_bench_sql_reads_as_sqlite_reads_it() {
    let sql = text(SQL);
    let rows = llama_bench::parse(&sql).unwrap();
    let conn = rusqlite::Connection::open_in_memory().unwrap();
    conn.execute_batch(&sql).unwrap();
    let oracle: Vec<SqliteRow> = conn
        .prepare(
            "SELECT build_commit, model_filename, backends, n_threads, n_gpu_layers, flash_attn, n_prompt, \
             n_gen, avg_ts, stddev_ts, test_time FROM llama_bench",
        )
        .unwrap()
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
                r.get(8)?,
                r.get(9)?,
                r.get(10)?,
            ))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let ours: Vec<_> = rows
        .iter()
        .map(|r| {
            (
                r.build_commit.clone(),
                r.model_filename.clone(),
                r.backends.clone(),
                i64::from(r.n_threads),
                r.n_gpu_layers,
                r.flash_attn,
                r.n_prompt as i64,
                r.n_gen as i64,
                r.avg_ts,
                r.stddev_ts,
                r.test_time.clone(),
            )
        })
        .collect();
    assert_eq!(ours.len(), 4);
    assert_eq!(ours, oracle);
    let json = llama_bench::parse(&text("llama-bench/outputs/tiny-q4_k_m-cpu.json")).unwrap();
    let shape = |rows: &[BenchRow]| -> Vec<(u32, u64, u64, u32, u32, String)> {
        rows.iter()
            .map(|r| {
                (
                    r.n_threads,
                    r.n_prompt,
                    r.n_gen,
                    r.n_batch,
                    r.n_ubatch,
                    r.model_filename.clone(),
                )
            })
            .collect()
    };
    assert_eq!(shape(&rows), shape(&json));
    // Bare numbers and NULL read too; a quote inside a value is doubled.
    let sql = format!(
        "{}\nINSERT INTO llama_bench (model_filename, n_threads, n_prompt, n_gen, avg_ts, gpu_info) VALUES ('it''s.gguf', 4, 0, 16, 12.5e0, NULL)",
        create_table()
    );
    let rows = llama_bench::parse(&sql).unwrap();
    assert_eq!(rows[0].model_filename, "it's.gguf");
    assert_eq!((rows[0].n_threads, rows[0].avg_ts), (4, 12.5));
    assert_eq!(rows[0].gpu_info, "");
}

fn header(columns: usize) -> String {
    let mut names = vec!["avg_ts".to_string()];
    names.extend((1..columns).map(|i| format!("extra_{i}")));
    names.join(",")
}

#[test]
fn more_columns_than_the_cap_are_refused_naming_it() {
    let csv = format!("{}\n", header(MAX_COLUMNS + 44));
    let err = llama_bench::parse(&csv).unwrap_err();
    assert!(
        matches!(err, LlamaBenchError::CsvColumns { columns: 300 }),
        "{err:?}"
    );
    assert!(err.to_string().contains("more than 256"), "{err}");
    // At the cap, a header reads.
    let at_cap = format!(
        "{}\n{}\n",
        header(MAX_COLUMNS),
        vec!["1"; MAX_COLUMNS].join(",")
    );
    assert!(matches!(
        llama_bench::parse(&at_cap),
        Err(LlamaBenchError::Row { row: 1, .. })
    ));
    let object = |n: usize| {
        let mut o = serde_json::Map::new();
        for i in 0..n {
            o.insert(format!("extra_{i}"), 1.into());
        }
        serde_json::Value::Object(o)
    };
    let json = serde_json::Value::Array(vec![object(MAX_COLUMNS + 1)]).to_string();
    let err = llama_bench::parse(&json).unwrap_err();
    assert!(
        matches!(err, LlamaBenchError::TooManyColumns { row: 1 }),
        "{err:?}"
    );
    let one = r#"{"model_filename":"m","n_threads":1,"n_prompt":0,"n_gen":16,"avg_ts":10}"#;
    let jsonl = format!("{one}\n{}\n", object(MAX_COLUMNS + 1));
    let err = llama_bench::parse(&jsonl).unwrap_err();
    assert!(
        matches!(err, LlamaBenchError::TooManyColumns { row: 2 }),
        "{err:?}"
    );
    let cols: Vec<String> = (0..=MAX_COLUMNS).map(|i| format!("c{i} TEXT")).collect();
    let sql = format!(
        "CREATE TABLE IF NOT EXISTS llama_bench ({});",
        cols.join(", ")
    );
    let err = llama_bench::parse(&sql).unwrap_err();
    assert!(
        matches!(
            err,
            LlamaBenchError::Sql {
                statement: 1,
                why: SqlError::TooManyColumns
            }
        ),
        "{err:?}"
    );
}

/// Rows are counted as they are read: the result past the cap is refused before anything after it is read
/// (the garbage line that follows is never reached), in every format.
#[test]
fn rows_past_the_cap_are_refused_before_the_rest_is_read() {
    let one = r#"{"model_filename":"m","n_threads":1,"n_prompt":0,"n_gen":16,"avg_ts":10}"#;
    let mut jsonl = format!("{one}\n").repeat(MAX_ROWS + 1);
    jsonl.push_str("not json at all\n");
    assert!(matches!(
        llama_bench::parse(&jsonl),
        Err(LlamaBenchError::TooManyRows)
    ));
    // Exactly the cap reads.
    let at_cap = format!("{one}\n").repeat(MAX_ROWS);
    assert_eq!(llama_bench::parse(&at_cap).unwrap().len(), MAX_ROWS);
    let mut json = format!("[{}", format!("{one},").repeat(MAX_ROWS + 1));
    json.push_str("garbage]");
    assert!(matches!(
        llama_bench::parse(&json),
        Err(LlamaBenchError::TooManyRows)
    ));
    let mut csv = "model_filename,n_threads,n_prompt,n_gen,avg_ts\n".to_string();
    csv.push_str(&"m,1,0,16,10\n".repeat(MAX_ROWS + 1));
    csv.push_str("\"unterminated\n");
    assert!(matches!(
        llama_bench::parse(&csv),
        Err(LlamaBenchError::TooManyRows)
    ));
    let mut sql = create_table();
    let insert = "\nINSERT INTO llama_bench (model_filename, n_threads, n_prompt, n_gen, avg_ts) VALUES ('m', '1', '0', '16', '10');";
    sql.push_str(&insert.repeat(MAX_ROWS + 1));
    sql.push_str("\nATTACH 'x' AS y;");
    assert!(matches!(
        llama_bench::parse(&sql),
        Err(LlamaBenchError::TooManyRows)
    ));
}

/// A CSV whose header names 250 long columns: the old reader copied every name into every row (about 70
/// bytes of heap per byte of file here); now a row keeps only its result's columns.
#[test]
fn a_wide_csv_is_read_in_memory_near_its_size() {
    let mut names = vec![
        "model_filename".to_string(),
        "n_threads".into(),
        "n_prompt".into(),
        "n_gen".into(),
        "avg_ts".into(),
    ];
    names.extend((names.len()..250).map(|i| format!("{}_{i}", "x".repeat(200))));
    let mut csv = names.join(",");
    csv.push('\n');
    let row = {
        let mut v = vec!["m", "1", "0", "16", "10"];
        v.resize(250, "7");
        v.join(",")
    };
    for _ in 0..1000 {
        csv.push_str(&row);
        csv.push('\n');
    }
    let (rows, peak) = peak_during(|| llama_bench::parse(&csv));
    assert_eq!(rows.unwrap().len(), 1000);
    assert!(
        peak < csv.len() as u64,
        "peak heap {peak} bytes for a file of {} bytes",
        csv.len()
    );
}

/// Collects results; never finishes.
#[derive(Default)]
struct Collect(Vec<BenchRow>);

impl Sink for Collect {
    fn record(&mut self, row: &BenchRow) -> Result<Recorded, optimizer::store::StoreError> {
        self.0.push(row.clone());
        Ok(Recorded::Row(self.0.len() as i64))
    }
    fn finish(&mut self) -> Result<(), optimizer::store::StoreError> {
        Ok(())
    }
}

/// A 10 MiB line with no newline: refused once past the limit, holding about the limit in memory (the old
/// reader buffered the whole line first, and an endless one until memory ran out).
#[test]
fn an_endless_runner_line_is_refused_in_bounded_memory() {
    use std::io::Read;
    let endless = std::io::repeat(b'x').take(10 << 20);
    let mut sink = Collect::default();
    let (result, peak) = peak_during(|| {
        runner::record_stream(std::io::BufReader::new(endless), &mut sink, |_, _| {})
    });
    assert!(
        matches!(result, Err(RunnerError::LongLine { line: 1 })),
        "{result:?}"
    );
    assert!(
        peak < 4 * MAX_LINE_BYTES as u64,
        "peak heap {peak} bytes for a line limit of {MAX_LINE_BYTES}"
    );
    // A line of exactly the limit is read (and is not a result: it does not start with `{`).
    let at_limit = "x".repeat(MAX_LINE_BYTES) + "\n";
    let s = runner::record_stream(at_limit.as_bytes(), &mut sink, |_, _| {}).unwrap();
    assert_eq!(s.other_lines, 1);
}

/// A fake llama-bench that writes its pid, then a 10 MiB line without a newline, then would sleep for ten
/// minutes: the sweep fails naming the line, at once, and the program is killed and reaped.
fn endless_bench(dir: &Path) -> (PathBuf, PathBuf) {
    let pid = dir.join("bench.pid");
    let p = dir.join("llama-bench-endless");
    let script = format!(
        "#!/bin/sh\necho $$ > '{}'\nhead -c 10485760 /dev/zero | tr '\\000' x\nexec sleep 600\n",
        pid.display()
    );
    std::fs::write(&p, script).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    (p, pid)
}

#[cfg(unix)]
#[test]
fn a_runner_printing_an_endless_line_is_stopped_and_reaped() {
    let dir = tempfile::tempdir().unwrap();
    let (bench, pid) = endless_bench(dir.path());
    let started = std::time::Instant::now();
    let out = bin()
        .arg("--db")
        .arg(dir.path().join("r.db"))
        .arg("--inventory")
        .arg(fixture(INVENTORY))
        .args(["calibrate", "--runner", "llama-bench", "--bench"])
        .arg(&bench)
        .arg("-m")
        .arg(fixture("gguf/llama-q4_k_m.gguf"))
        .args(["--threads", "1", "--quick"])
        .env_remove("LLAMA_BENCH")
        .output()
        .unwrap();
    assert_exit(&out, 1);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "llama-bench result 1: longer than {MAX_LINE_BYTES} bytes"
        )),
        "{stderr}"
    );
    assert!(started.elapsed() < DEADLINE, "{:?}", started.elapsed());
    let pid = std::fs::read_to_string(pid).unwrap();
    assert!(
        !Path::new("/proc").join(pid.trim()).exists(),
        "llama-bench (pid {}) is still running",
        pid.trim()
    );
}

/// A load log of endless malformed buffer lines, or of endless `llama_context:` fields, is refused at the
/// cap; a malformed line is kept cut, not whole.
#[test]
fn a_load_log_of_endless_malformed_lines_is_refused_at_the_cap() {
    let log = "load_tensors: CUDA0 model buffer size = lots MiB\n".repeat(MAX_MALFORMED_LINES + 1);
    assert_eq!(
        load_log::parse(&log),
        Err(LoadLogError::TooManyMalformed {
            line: MAX_MALFORMED_LINES + 1
        })
    );
    let at_cap = "load_tensors: CUDA0 model buffer size = lots MiB\n".repeat(MAX_MALFORMED_LINES);
    assert_eq!(
        load_log::parse(&at_cap).unwrap().malformed.len(),
        MAX_MALFORMED_LINES
    );
    let long = format!(
        "load_tensors: CUDA0 model buffer size = {} MiB\n",
        "9".repeat(1 << 20)
    );
    let parsed = load_log::parse(&long).unwrap();
    assert!(parsed.malformed[0].1.len() <= load_log::MALFORMED_TEXT_CHARS);
    let fields: String = (0..=MAX_CONTEXT_FIELDS)
        .map(|i| format!("llama_context: field_{i} = 1\n"))
        .collect();
    assert_eq!(
        load_log::parse(&fields),
        Err(LoadLogError::TooManyContextFields {
            line: MAX_CONTEXT_FIELDS + 1
        })
    );
    // The same field printed again is not another.
    let again = "llama_context: n_ctx = 4096\n".repeat(MAX_CONTEXT_FIELDS + 1);
    assert_eq!(load_log::parse(&again).unwrap().number("n_ctx"), Some(4096));
}
