//! Reading the pinned `llama-bench`'s results in every output format it writes (`-o json`, `jsonl`, `csv`,
//! `sql`), by column name: the columns drift between builds, so a row is read by the names it carries and a
//! missing optional column is simply absent. Pure: takes the file's text.
//!
//! Hostile files (issue 24): every format is read in one pass that keeps only the columns a [`BenchRow`] is
//! made of ([`COLUMNS`]; every other one is skipped unread), counts results as it goes and stops at
//! [`MAX_ROWS`] + 1, and bounds the columns of a result at [`MAX_COLUMNS`], so what it allocates beyond the
//! text is about the rows it returns. SQL is parsed, never executed ([`sql`]): exactly the two statements
//! llama-bench's `sql_printer` writes are read, and anything else is refused by its statement number.
//! Trade-off: a hand-edited SQL file (comments, double-quoted names, several rows per `INSERT`) is refused
//! rather than read as SQLite would read it; the other three formats carry the same results.

mod sql;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

pub use sql::SqlError;

/// Largest number of result rows one file may hold: a sweep over every `llama-bench` axis stays far below it.
pub const MAX_ROWS: usize = 100_000;

/// Most columns one result may carry: the pinned llama-bench writes 42 (its SQL fixture's table); 256 leaves
/// room for builds that add columns and bounds what a hostile header or object makes the reader scan.
pub const MAX_COLUMNS: usize = 256;

/// The columns a [`BenchRow`] is made of, the only ones read; every other column is skipped.
pub(crate) const COLUMNS: [&str; 16] = [
    "build_commit",
    "model_filename",
    "backends",
    "gpu_info",
    "n_threads",
    "n_batch",
    "n_ubatch",
    "type_k",
    "n_gpu_layers",
    "flash_attn",
    "n_prompt",
    "n_gen",
    "n_depth",
    "avg_ts",
    "stddev_ts",
    "test_time",
];

/// The index in [`COLUMNS`] of the column `name`, if it is one a row is made of.
fn column(name: &str) -> Option<usize> {
    COLUMNS.iter().position(|c| *c == name)
}

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
    /// More than [`MAX_ROWS`] results: counted while reading, so the results past the limit are never built.
    #[error("more than {MAX_ROWS} results")]
    TooManyRows,
    /// Result `row` (1-based) carries more than [`MAX_COLUMNS`] columns.
    #[error("result {row}: more than {MAX_COLUMNS} columns (llama-bench writes about 40)")]
    TooManyColumns { row: usize },
    /// A CSV header of more than [`MAX_COLUMNS`] columns.
    #[error("CSV header: {columns} columns, more than {MAX_COLUMNS} (llama-bench writes about 40)")]
    CsvColumns { columns: usize },
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
    /// A CSV line (1-based, as for [`LlamaBenchError::CsvFields`]) whose last quote is not closed.
    #[error("CSV line {line}: unterminated quote")]
    UnterminatedQuote { line: usize },
    /// SQL statement `statement` (1-based) is not what llama-bench writes; nothing in the file was run.
    #[error("SQL statement {statement}: {why}")]
    Sql { statement: usize, why: SqlError },
}

/// Why one result does not read as a [`BenchRow`]; `field` is the column.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RowError {
    #[error("no {field}")]
    Missing { field: &'static str },
    /// `value` is the column's text, cut at [`SHOWN_CHARS`] characters.
    #[error("{field} {value:?} is not a finite number")]
    NotANumber { field: &'static str, value: String },
    #[error("{field} {value} is not an integer")]
    NotAnInteger { field: &'static str, value: f64 },
    #[error("{field} {value} is out of range")]
    OutOfRange { field: &'static str, value: i64 },
    #[error("avg_ts {0} is not positive")]
    NotPositive(f64),
}

/// Most characters of a file's text quoted in an error: enough to recognise it, never the whole file.
pub(crate) const SHOWN_CHARS: usize = 60;

/// `s` cut at [`SHOWN_CHARS`] characters (with `...` when cut), for an error message.
fn shown(s: &str) -> String {
    match s.char_indices().nth(SHOWN_CHARS) {
        Some((end, _)) => format!("{}...", &s[..end]),
        None => s.to_string(),
    }
}

/// Parses `text` in whichever format it is: a JSON array, JSON lines, CSV with a header, or SQL statements.
pub fn parse(text: &str) -> Result<Vec<BenchRow>, LlamaBenchError> {
    let t = text.trim_start();
    if t.starts_with('[') {
        from_json(t)
    } else if t.starts_with('{') {
        from_jsonl(t)
    } else if sql::looks_like(t) {
        sql::parse(t)
    } else {
        from_csv(t)
    }
}

/// One result's columns of [`COLUMNS`], each as text whatever type the format gave it (`None`: absent, null,
/// or an array or object, which no column read holds).
#[derive(Debug, Default)]
struct Fields([Option<String>; COLUMNS.len()]);

impl Fields {
    fn get(&self, k: &str) -> Option<&str> {
        column(k).and_then(|i| self.0[i].as_deref())
    }

    /// A text column, moved out (each is read once).
    fn take(&mut self, k: &str) -> Option<String> {
        column(k).and_then(|i| self.0[i].take())
    }
}

fn number(f: &Fields, k: &'static str) -> Result<f64, RowError> {
    let s = f.get(k).ok_or(RowError::Missing { field: k })?;
    match s {
        "true" => Ok(1.0),
        "false" => Ok(0.0),
        _ => s
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite())
            .ok_or_else(|| RowError::NotANumber {
                field: k,
                value: shown(s),
            }),
    }
}

fn integer<T: TryFrom<i64>>(
    f: &Fields,
    k: &'static str,
    default: Option<i64>,
) -> Result<T, RowError> {
    let n = match (f.get(k), default) {
        (None, Some(d)) => d,
        _ => {
            let x = number(f, k)?;
            if x.fract() != 0.0 || x.abs() > 2f64.powi(53) {
                return Err(RowError::NotAnInteger { field: k, value: x });
            }
            x as i64
        }
    };
    T::try_from(n).map_err(|_| RowError::OutOfRange { field: k, value: n })
}

/// The row a result's columns make (checked in the order of the fields, so the first defect is reported).
fn to_row(mut f: Fields) -> Result<BenchRow, RowError> {
    let avg_ts = number(&f, "avg_ts")?;
    if avg_ts <= 0.0 {
        return Err(RowError::NotPositive(avg_ts));
    }
    Ok(BenchRow {
        build_commit: f.take("build_commit").unwrap_or_default(),
        model_filename: f.take("model_filename").ok_or(RowError::Missing {
            field: "model_filename",
        })?,
        backends: f.take("backends").unwrap_or_default(),
        gpu_info: f.take("gpu_info").unwrap_or_default(),
        n_threads: integer(&f, "n_threads", None)?,
        n_batch: integer(&f, "n_batch", Some(2048))?,
        n_ubatch: integer(&f, "n_ubatch", Some(512))?,
        type_k: f.take("type_k").unwrap_or_else(|| "f16".into()),
        n_gpu_layers: integer(&f, "n_gpu_layers", Some(-1))?,
        flash_attn: integer(&f, "flash_attn", Some(-1))?,
        n_prompt: integer(&f, "n_prompt", None)?,
        n_gen: integer(&f, "n_gen", None)?,
        n_depth: integer(&f, "n_depth", Some(0))?,
        avg_ts,
        stddev_ts: number(&f, "stddev_ts").unwrap_or(0.0),
        test_time: f.take("test_time").unwrap_or_default(),
    })
}

/// `-o json`: an array of result objects, read element by element ([`ResultsSeed`]) with no value tree built.
fn from_json(t: &str) -> Result<Vec<BenchRow>, LlamaBenchError> {
    let mut fail = None;
    let mut de = serde_json::Deserializer::from_str(t);
    let read = (&mut de)
        .deserialize_seq(ResultsSeed { fail: &mut fail })
        .and_then(|rows| de.end().map(|()| rows));
    read.map_err(|e| fail.take().unwrap_or(LlamaBenchError::Json(e)))
}

/// `-o jsonl`: one result object per line.
fn from_jsonl(t: &str) -> Result<Vec<BenchRow>, LlamaBenchError> {
    let mut rows = Vec::new();
    for (i, l) in t.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        let line = i + 1;
        if line > MAX_ROWS {
            return Err(LlamaBenchError::TooManyRows);
        }
        let mut fail = None;
        let mut de = serde_json::Deserializer::from_str(l);
        let fields = ResultSeed {
            row: line,
            fail: &mut fail,
        }
        .deserialize(&mut de)
        .and_then(|f| de.end().map(|()| f))
        .map_err(|source| {
            fail.take()
                .unwrap_or(LlamaBenchError::JsonLine { line, source })
        })?;
        rows.push(to_row(fields).map_err(|source| LlamaBenchError::Row { row: line, source })?);
    }
    Ok(rows)
}

// The serde visitors: a typed error found inside serde's callbacks (too many rows or columns, a result that
// does not read) is left in `fail`, since serde's own error carries only text, and the caller returns it.

/// The array of results: each element read into [`Fields`] and made a row at once; past [`MAX_ROWS`] the
/// next element is only skipped to see whether there is one.
struct ResultsSeed<'a> {
    fail: &'a mut Option<LlamaBenchError>,
}

impl<'de> Visitor<'de> for ResultsSeed<'_> {
    type Value = Vec<BenchRow>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an array of llama-bench results")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let fail = self.fail;
        let mut rows = Vec::new();
        loop {
            let row = rows.len() + 1;
            if row > MAX_ROWS {
                if seq.next_element::<IgnoredAny>()?.is_some() {
                    *fail = Some(LlamaBenchError::TooManyRows);
                    return Err(de::Error::custom("too many results"));
                }
                return Ok(rows);
            }
            let seed = ResultSeed {
                row,
                fail: &mut *fail,
            };
            let Some(fields) = seq.next_element_seed(seed)? else {
                return Ok(rows);
            };
            match to_row(fields) {
                Ok(r) => rows.push(r),
                Err(source) => {
                    *fail = Some(LlamaBenchError::Row { row, source });
                    return Err(de::Error::custom("a result does not read"));
                }
            }
        }
    }
}

/// One result object: the columns of [`COLUMNS`] kept, every other value skipped unread ([`IgnoredAny`]).
struct ResultSeed<'a> {
    row: usize,
    fail: &'a mut Option<LlamaBenchError>,
}

impl<'de> DeserializeSeed<'de> for ResultSeed<'_> {
    type Value = Fields;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Fields, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ResultSeed<'_> {
    type Value = Fields;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a llama-bench result (an object)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields, A::Error> {
        let mut fields = Fields::default();
        let mut columns = 0usize;
        while let Some(key) = map.next_key_seed(KeySeed)? {
            columns += 1;
            if columns > MAX_COLUMNS {
                *self.fail = Some(LlamaBenchError::TooManyColumns { row: self.row });
                return Err(de::Error::custom("too many columns"));
            }
            match key {
                Some(i) => fields.0[i] = map.next_value_seed(CellSeed)?,
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(fields)
    }
}

/// A key: its index in [`COLUMNS`], or `None` for a column not read (nothing is allocated for it).
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for KeySeed {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a column name")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(column(v))
    }
}

/// A value of a column read: scalars as text; null, arrays and objects as absent (arrays and objects skipped).
struct CellSeed;

impl<'de> DeserializeSeed<'de> for CellSeed {
    type Value = Option<String>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for CellSeed {
    type Value = Option<String>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Some(v.to_string()))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Some(v.to_string()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Some(v.to_string()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Some(v.to_string()))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Some(v.to_string()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Some(v))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }
}

/// `-o csv` as llama-bench writes it: a header, then one row per test, every field double-quoted (quotes
/// inside doubled). The header's columns are counted before any is kept; a row keeps only the fields under a
/// column of [`COLUMNS`].
fn from_csv(t: &str) -> Result<Vec<BenchRow>, LlamaBenchError> {
    let mut lines = t.lines().filter(|l| !l.trim().is_empty());
    let header = lines.next().ok_or(LlamaBenchError::Empty)?;
    let columns =
        csv_fields(header, |_, _| {}).ok_or(LlamaBenchError::UnterminatedQuote { line: 1 })?;
    if columns > MAX_COLUMNS {
        return Err(LlamaBenchError::CsvColumns { columns });
    }
    // Per header column, its index in COLUMNS (None: not read).
    let mut known: Vec<Option<usize>> = Vec::with_capacity(columns);
    csv_fields(header, |_, raw| known.push(column(&unquote(raw))));
    if !known.contains(&column("avg_ts")) {
        return Err(LlamaBenchError::NoAvgTs);
    }
    let mut rows = Vec::new();
    for (i, l) in lines.enumerate() {
        let line = i + 2;
        if rows.len() >= MAX_ROWS {
            return Err(LlamaBenchError::TooManyRows);
        }
        let mut fields = Fields::default();
        let n = csv_fields(l, |j, raw| {
            if let Some(Some(c)) = known.get(j) {
                fields.0[*c] = Some(unquote(raw));
            }
        })
        .ok_or(LlamaBenchError::UnterminatedQuote { line })?;
        if n != columns {
            return Err(LlamaBenchError::CsvFields {
                line,
                fields: n,
                columns,
            });
        }
        rows.push(to_row(fields).map_err(|source| LlamaBenchError::Row { row: i + 1, source })?);
    }
    Ok(rows)
}

/// Splits one CSV line, calling `each` with every field's index and raw text (quotes still in) without
/// allocating; returns the number of fields, or `None` when a quote is left open. A quote opens or closes a
/// quoted part; inside one, a doubled quote is a quote and a comma is text.
fn csv_fields<'a>(line: &'a str, mut each: impl FnMut(usize, &'a str)) -> Option<usize> {
    let b = line.as_bytes();
    let (mut start, mut n, mut quoted, mut i) = (0, 0, false, 0);
    while i < b.len() {
        match b[i] {
            b'"' if quoted && b.get(i + 1) == Some(&b'"') => i += 1,
            b'"' => quoted = !quoted,
            b',' if !quoted => {
                each(n, &line[start..i]);
                n += 1;
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    if quoted {
        return None;
    }
    each(n, &line[start..]);
    Some(n + 1)
}

/// A field's text: the quotes [`csv_fields`] read as quoting removed, a doubled quote inside made one.
fn unquote(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut quoted = false;
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                out.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            c => out.push(c),
        }
    }
    out
}
