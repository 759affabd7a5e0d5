//! Reading the pinned `llama-bench`'s results in every output format it writes (`-o json`, `jsonl`, `csv`,
//! `sql`), by column name: the columns drift between builds, so a row is read by the names it carries and a
//! missing optional column is simply absent. SQL output is executed into an in-memory SQLite database and read
//! back by name, so no SQL is parsed here. Pure: takes the file's text.

use serde_json::Value;

/// Largest number of result rows one file may hold: a sweep over every `llama-bench` axis stays far below it.
pub const MAX_ROWS: usize = 100_000;

/// One `llama-bench` test result.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchRow {
    pub build_commit: String,
    pub model_filename: String,
    /// `CPU`, `CUDA`, `CUDA,BLAS`, ...
    pub backends: String,
    pub gpu_info: String,
    pub n_threads: u32,
    pub n_batch: u32,
    pub n_ubatch: u32,
    pub type_k: String,
    /// `-ngl` as given; -1 is the build's default (every layer where a GPU backend exists).
    pub n_gpu_layers: i64,
    /// -1 auto, 0 off, 1 on.
    pub flash_attn: i64,
    /// Tokens of the prompt test (`-p`), 0 for a generation test.
    pub n_prompt: u64,
    /// Tokens of the generation test (`-n`), 0 for a prompt test.
    pub n_gen: u64,
    /// KV cells filled before the test (`-d`).
    pub n_depth: u64,
    pub avg_ts: f64,
    pub stddev_ts: f64,
    pub test_time: String,
}

impl BenchRow {
    /// Whether a GPU backend ran it with layers on the GPU.
    pub fn on_gpu(&self) -> bool {
        let gpu_backend = self.backends.split(',').any(|b| {
            matches!(
                b.trim(),
                "CUDA" | "ROCm" | "HIP" | "Metal" | "MTL" | "Vulkan" | "SYCL"
            )
        });
        gpu_backend && self.n_gpu_layers != 0
    }
}

/// Why a file does not read as `llama-bench` results.
#[derive(Debug, thiserror::Error)]
pub enum LlamaBenchError {
    /// A JSON array (`-o json`) that does not parse.
    #[error("JSON: {0}")]
    Json(#[source] serde_json::Error),
    /// A JSON line (`-o jsonl`) that does not parse; `line` counts non-blank lines from 1.
    #[error("JSON line {line}: {source}")]
    JsonLine {
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("{rows} rows: more than {MAX_ROWS}")]
    TooManyRows { rows: usize },
    /// A result (1-based) that does not read as one.
    #[error("row {row}: {source}")]
    Row {
        row: usize,
        #[source]
        source: RowError,
    },
    #[error("empty file")]
    Empty,
    /// A CSV header without the result column: not llama-bench's output in any format.
    #[error("not llama-bench output: no avg_ts column (expected JSON, JSON lines, CSV or SQL)")]
    NoAvgTs,
    /// A CSV line (1-based, the header being line 1) with another number of fields than the header.
    #[error("CSV line {line}: {fields} fields for {columns} columns")]
    CsvFields {
        line: usize,
        fields: usize,
        columns: usize,
    },
    #[error("unterminated quote in {text:?}")]
    UnterminatedQuote { text: String },
    /// The in-memory database the SQL output is executed in could not be opened.
    #[error("{0}")]
    Database(#[source] rusqlite::Error),
    #[error("SQL: {0}")]
    Sql(#[source] rusqlite::Error),
}

/// Why one result does not read as a [`BenchRow`]; `field` is the column.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RowError {
    #[error("no {field}")]
    Missing { field: &'static str },
    #[error("{field} {value:?} is not a finite number")]
    NotANumber { field: &'static str, value: String },
    #[error("{field} {value} is not an integer")]
    NotAnInteger { field: &'static str, value: f64 },
    #[error("{field} {value} is out of range")]
    OutOfRange { field: &'static str, value: i64 },
    #[error("avg_ts {0} is not positive")]
    NotPositive(f64),
}

/// Parses `text` in whichever format it is: a JSON array, JSON lines, CSV with a header, or SQL statements.
pub fn parse(text: &str) -> Result<Vec<BenchRow>, LlamaBenchError> {
    let t = text.trim_start();
    let rows: Vec<Value> = if t.starts_with('[') {
        serde_json::from_str::<Vec<Value>>(t).map_err(LlamaBenchError::Json)?
    } else if t.starts_with('{') {
        t.lines()
            .filter(|l| !l.trim().is_empty())
            .enumerate()
            .map(|(i, l)| {
                serde_json::from_str(l).map_err(|source| LlamaBenchError::JsonLine {
                    line: i + 1,
                    source,
                })
            })
            .collect::<Result<_, _>>()?
    } else if t.to_ascii_uppercase().starts_with("CREATE TABLE") || t.starts_with("INSERT") {
        from_sql(t)?
    } else {
        from_csv(t)?
    };
    if rows.len() > MAX_ROWS {
        return Err(LlamaBenchError::TooManyRows { rows: rows.len() });
    }
    rows.iter()
        .enumerate()
        .map(|(i, v)| row(v).map_err(|source| LlamaBenchError::Row { row: i + 1, source }))
        .collect()
}

/// A column as text, whatever type the format gave it.
fn text(v: &Value, k: &str) -> Option<String> {
    match v.get(k)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn number(v: &Value, k: &'static str) -> Result<f64, RowError> {
    let s = text(v, k).ok_or(RowError::Missing { field: k })?;
    match s.as_str() {
        "true" => Ok(1.0),
        "false" => Ok(0.0),
        _ => s
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite())
            .ok_or(RowError::NotANumber { field: k, value: s }),
    }
}

fn integer<T: TryFrom<i64>>(
    v: &Value,
    k: &'static str,
    default: Option<i64>,
) -> Result<T, RowError> {
    let n = match (text(v, k), default) {
        (None, Some(d)) => d,
        _ => {
            let x = number(v, k)?;
            if x.fract() != 0.0 || x.abs() > 2f64.powi(53) {
                return Err(RowError::NotAnInteger { field: k, value: x });
            }
            x as i64
        }
    };
    T::try_from(n).map_err(|_| RowError::OutOfRange { field: k, value: n })
}

fn row(v: &Value) -> Result<BenchRow, RowError> {
    let avg_ts = number(v, "avg_ts")?;
    if avg_ts <= 0.0 {
        return Err(RowError::NotPositive(avg_ts));
    }
    Ok(BenchRow {
        build_commit: text(v, "build_commit").unwrap_or_default(),
        model_filename: text(v, "model_filename").ok_or(RowError::Missing {
            field: "model_filename",
        })?,
        backends: text(v, "backends").unwrap_or_default(),
        gpu_info: text(v, "gpu_info").unwrap_or_default(),
        n_threads: integer(v, "n_threads", None)?,
        n_batch: integer(v, "n_batch", Some(2048))?,
        n_ubatch: integer(v, "n_ubatch", Some(512))?,
        type_k: text(v, "type_k").unwrap_or_else(|| "f16".into()),
        n_gpu_layers: integer(v, "n_gpu_layers", Some(-1))?,
        flash_attn: integer(v, "flash_attn", Some(-1))?,
        n_prompt: integer(v, "n_prompt", None)?,
        n_gen: integer(v, "n_gen", None)?,
        n_depth: integer(v, "n_depth", Some(0))?,
        avg_ts,
        stddev_ts: number(v, "stddev_ts").unwrap_or(0.0),
        test_time: text(v, "test_time").unwrap_or_default(),
    })
}

/// CSV as llama-bench writes it: a header, then one row per test, every field double-quoted (quotes inside
/// doubled).
fn from_csv(t: &str) -> Result<Vec<Value>, LlamaBenchError> {
    let mut lines = t.lines().filter(|l| !l.trim().is_empty());
    let header = split_csv(lines.next().ok_or(LlamaBenchError::Empty)?)?;
    if !header.iter().any(|h| h == "avg_ts") {
        return Err(LlamaBenchError::NoAvgTs);
    }
    lines
        .enumerate()
        .map(|(i, l)| {
            let fields = split_csv(l)?;
            if fields.len() != header.len() {
                return Err(LlamaBenchError::CsvFields {
                    line: i + 2,
                    fields: fields.len(),
                    columns: header.len(),
                });
            }
            Ok(Value::Object(
                header
                    .iter()
                    .cloned()
                    .zip(fields.into_iter().map(Value::String))
                    .collect(),
            ))
        })
        .collect()
}

fn split_csv(line: &str) -> Result<Vec<String>, LlamaBenchError> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(std::mem::take(&mut cur)),
            (c, _) => cur.push(c),
        }
    }
    if quoted {
        return Err(LlamaBenchError::UnterminatedQuote {
            text: line.to_string(),
        });
    }
    out.push(cur);
    Ok(out)
}

/// SQL as llama-bench writes it (`CREATE TABLE IF NOT EXISTS llama_bench (...)` and `INSERT INTO llama_bench`),
/// executed in an in-memory database and read back by column name. Only that table is read.
fn from_sql(t: &str) -> Result<Vec<Value>, LlamaBenchError> {
    let conn = rusqlite::Connection::open_in_memory().map_err(LlamaBenchError::Database)?;
    conn.execute_batch(t).map_err(LlamaBenchError::Sql)?;
    let mut stmt = conn
        .prepare("SELECT * FROM llama_bench")
        .map_err(LlamaBenchError::Sql)?;
    let names: Vec<String> = stmt.column_names().map(str::to_string).collect();
    let rows = stmt
        .query_map([], |r| {
            let mut o = serde_json::Map::new();
            for (i, n) in names.iter().enumerate() {
                let v = match r.get_ref(i)? {
                    rusqlite::types::ValueRef::Null => Value::Null,
                    rusqlite::types::ValueRef::Integer(x) => Value::from(x),
                    rusqlite::types::ValueRef::Real(x) => Value::from(x),
                    rusqlite::types::ValueRef::Text(b) | rusqlite::types::ValueRef::Blob(b) => {
                        Value::String(String::from_utf8_lossy(b).into_owned())
                    }
                };
                o.insert(n.clone(), v);
            }
            Ok(Value::Object(o))
        })
        .map_err(LlamaBenchError::Sql)?;
    rows.take(MAX_ROWS + 1)
        .collect::<Result<_, _>>()
        .map_err(LlamaBenchError::Sql)
}
