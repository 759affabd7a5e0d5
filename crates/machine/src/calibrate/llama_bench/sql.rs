//! llama-bench's `-o sql` read without any SQL being run. Its `sql_printer` (tools/llama-bench/llama-bench.cpp
//! of the pinned build) writes one `CREATE TABLE IF NOT EXISTS llama_bench (name TYPE, ...);` and then, per
//! result, one `INSERT INTO llama_bench (name, ...) VALUES ('value', ...);`. Exactly those two statements are
//! read; any other (an `ATTACH`, a `VACUUM INTO`, a recursive `WITH`, an `INSERT` into another table) is refused
//! with its number, so a file can neither create a database nor spend unbounded time or memory. Values are
//! single-quoted as llama-bench writes them (`''` inside is a quote); bare numbers and `NULL` are read too.
//! The declared types (`TEXT`, `INTEGER`, `REAL`) are checked but not applied: a value is read as the text it
//! is, as the CSV reader reads its fields. Names are compared ignoring ASCII case, as SQLite compares them.

use std::borrow::Cow;
use std::collections::HashMap;

use super::{BenchRow, Fields, LlamaBenchError, MAX_COLUMNS, MAX_ROWS, column, shown, to_row};

/// What is read; every other statement is refused with this.
const READ: &str =
    "only CREATE TABLE IF NOT EXISTS llama_bench and INSERT INTO llama_bench are read";

/// The column types llama-bench declares (`get_sql_field_type`).
const TYPES: [&str; 3] = ["TEXT", "INTEGER", "REAL"];

/// The statement words a file may start with to be taken for SQL: llama-bench's own (`CREATE`, `INSERT`) and
/// SQLite's other statements, so that a file opening with one is refused as SQL, naming the statement, rather
/// than read as a CSV header.
const STATEMENTS: [&str; 22] = [
    "CREATE",
    "INSERT",
    "ATTACH",
    "DETACH",
    "VACUUM",
    "WITH",
    "SELECT",
    "VALUES",
    "PRAGMA",
    "DROP",
    "UPDATE",
    "DELETE",
    "REPLACE",
    "ALTER",
    "BEGIN",
    "COMMIT",
    "END",
    "ROLLBACK",
    "SAVEPOINT",
    "ANALYZE",
    "REINDEX",
    "EXPLAIN",
];

/// Why an SQL statement is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SqlError {
    /// A statement other than the two read; `found` is its start, cut at [`super::SHOWN_CHARS`] characters.
    #[error("{READ} (found {found})")]
    NotRead { found: String },
    #[error("expected {expected}, found {found}")]
    Expected {
        expected: &'static str,
        found: String,
    },
    /// A character no token of llama-bench's SQL starts with (a comment, a double-quoted name, an operator).
    #[error("unexpected character {0:?}")]
    Character(char),
    #[error("a quoted value is not closed")]
    UnterminatedValue,
    #[error("column type {0}: llama-bench declares TEXT, INTEGER or REAL")]
    Type(String),
    #[error("more than {MAX_COLUMNS} columns (llama-bench writes about 40)")]
    TooManyColumns,
    #[error("column {0} named twice")]
    Duplicate(String),
    #[error("an INSERT before CREATE TABLE IF NOT EXISTS llama_bench: no such table")]
    NoTable,
    #[error("column {0} is not one of the table's")]
    UnknownColumn(String),
    #[error("{columns} columns but {values} values")]
    Count { columns: usize, values: usize },
}

/// Whether `t` (trimmed at the start) opens with an SQL statement word followed by a space, `(` or `;`.
pub(super) fn looks_like(t: &str) -> bool {
    let end = t
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(t.len());
    let (word, rest) = t.split_at(end);
    STATEMENTS.iter().any(|s| s.eq_ignore_ascii_case(word))
        && rest.starts_with(|c: char| c.is_ascii_whitespace() || c == '(' || c == ';')
}

/// Reads llama-bench's SQL: see the module doc. Results are counted as their `INSERT` is met, and the one past
/// [`MAX_ROWS`] is refused before it is read.
pub(super) fn parse(t: &str) -> Result<Vec<BenchRow>, LlamaBenchError> {
    let mut lx = Lexer { text: t, pos: 0 };
    let mut table: Option<HashMap<String, usize>> = None;
    let mut rows = Vec::new();
    let mut statement = 0usize;
    loop {
        lx.skip_space();
        let start = lx.pos;
        let first = match lx.next() {
            Ok(Some(tok)) => tok,
            Ok(None) => return Ok(rows),
            Err(why) => {
                return Err(LlamaBenchError::Sql {
                    statement: statement + 1,
                    why,
                });
            }
        };
        statement += 1;
        let fail = |why| LlamaBenchError::Sql { statement, why };
        match first {
            Tok::Word(w) if w.eq_ignore_ascii_case("CREATE") => {
                let declared = create(&mut lx, start).map_err(fail)?;
                // `IF NOT EXISTS`: a second CREATE (two outputs concatenated) leaves the first table as it is.
                table.get_or_insert(declared);
            }
            Tok::Word(w) if w.eq_ignore_ascii_case("INSERT") => {
                if rows.len() >= MAX_ROWS {
                    return Err(LlamaBenchError::TooManyRows);
                }
                let fields = insert(&mut lx, start, table.as_ref()).map_err(fail)?;
                let row = rows.len() + 1;
                rows.push(to_row(fields).map_err(|source| LlamaBenchError::Row { row, source })?);
            }
            _ => return Err(fail(not_read(&lx, start))),
        }
    }
}

/// After `CREATE`: `TABLE IF NOT EXISTS llama_bench (name TYPE, ...)` and the statement's end; the columns
/// declared (lower case) with their order.
fn create(lx: &mut Lexer, start: usize) -> Result<HashMap<String, usize>, SqlError> {
    for want in ["TABLE", "IF", "NOT", "EXISTS", "llama_bench"] {
        match lx.next()? {
            Some(Tok::Word(w)) if w.eq_ignore_ascii_case(want) => {}
            _ => return Err(not_read(lx, start)),
        }
    }
    lx.expect(Tok::Open, "(")?;
    let mut columns = HashMap::new();
    loop {
        let name = lx.word("a column name")?;
        let ty = lx.word("a column type")?;
        if !TYPES.iter().any(|t| t.eq_ignore_ascii_case(ty)) {
            return Err(SqlError::Type(shown(ty)));
        }
        if columns.len() >= MAX_COLUMNS {
            return Err(SqlError::TooManyColumns);
        }
        let index = columns.len();
        if columns.insert(name.to_ascii_lowercase(), index).is_some() {
            return Err(SqlError::Duplicate(shown(name)));
        }
        if !lx.list_goes_on()? {
            break;
        }
    }
    lx.end()?;
    Ok(columns)
}

/// After `INSERT`: `INTO llama_bench (name, ...) VALUES (value, ...)` and the statement's end, as the result's
/// columns of [`super::COLUMNS`]; every other value is checked and skipped.
fn insert(
    lx: &mut Lexer,
    start: usize,
    table: Option<&HashMap<String, usize>>,
) -> Result<Fields, SqlError> {
    for want in ["INTO", "llama_bench"] {
        match lx.next()? {
            Some(Tok::Word(w)) if w.eq_ignore_ascii_case(want) => {}
            _ => return Err(not_read(lx, start)),
        }
    }
    let table = table.ok_or(SqlError::NoTable)?;
    lx.expect(Tok::Open, "(")?;
    // Per listed column, its index in COLUMNS (None: not read).
    let mut read: Vec<Option<usize>> = Vec::new();
    let mut named = vec![false; table.len()];
    loop {
        let name = lx.word("a column name")?;
        if read.len() >= MAX_COLUMNS {
            return Err(SqlError::TooManyColumns);
        }
        let lower = if name.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(name.to_ascii_lowercase())
        } else {
            Cow::Borrowed(name)
        };
        let Some(&i) = table.get(lower.as_ref()) else {
            return Err(SqlError::UnknownColumn(shown(name)));
        };
        match named.get_mut(i) {
            Some(seen) if !*seen => *seen = true,
            _ => return Err(SqlError::Duplicate(shown(name))),
        }
        read.push(column(&lower));
        if !lx.list_goes_on()? {
            break;
        }
    }
    match lx.next()? {
        Some(Tok::Word(w)) if w.eq_ignore_ascii_case("VALUES") => {}
        other => {
            return Err(SqlError::Expected {
                expected: "VALUES",
                found: describe(other),
            });
        }
    }
    lx.expect(Tok::Open, "(")?;
    let mut fields = Fields::default();
    let mut values = 0usize;
    loop {
        let value = match lx.next()? {
            Some(Tok::Quoted(raw)) => Some(Cow::Borrowed(raw)),
            Some(Tok::Number(n)) => Some(Cow::Borrowed(n)),
            Some(Tok::Word(w)) if w.eq_ignore_ascii_case("NULL") => None,
            other => {
                return Err(SqlError::Expected {
                    expected: "a value ('text', a number or NULL)",
                    found: describe(other),
                });
            }
        };
        if let Some(Some(c)) = read.get(values) {
            fields.0[*c] = value.map(|v| v.replace("''", "'"));
        }
        values += 1;
        if !lx.list_goes_on()? {
            break;
        }
    }
    if values != read.len() {
        return Err(SqlError::Count {
            columns: read.len(),
            values,
        });
    }
    lx.end()?;
    Ok(fields)
}

/// A statement that is not read: its text from `start` to where reading stopped.
fn not_read(lx: &Lexer, start: usize) -> SqlError {
    let text = lx.text.get(start..lx.pos).unwrap_or("");
    let words: Vec<&str> = text.split_ascii_whitespace().take(8).collect();
    SqlError::NotRead {
        found: shown(&words.join(" ")),
    }
}

/// A token, or the end of the file, as an error names it.
fn describe(tok: Option<Tok>) -> String {
    match tok {
        None => "the end of the file".into(),
        Some(Tok::Word(w) | Tok::Number(w)) => shown(w),
        Some(Tok::Quoted(_)) => "a quoted value".into(),
        Some(Tok::Open) => "(".into(),
        Some(Tok::Close) => ")".into(),
        Some(Tok::Comma) => ",".into(),
        Some(Tok::Semicolon) => ";".into(),
    }
}

/// The tokens of llama-bench's SQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok<'a> {
    /// A keyword or a name: `[A-Za-z_][A-Za-z0-9_]*`.
    Word(&'a str),
    /// A single-quoted value's text between the quotes (`''` still doubled).
    Quoted(&'a str),
    /// `-?digits[.digits][e[+-]digits]`.
    Number(&'a str),
    Open,
    Close,
    Comma,
    Semicolon,
}

struct Lexer<'a> {
    text: &'a str,
    /// Byte offset of the next token; always at a character boundary (only ASCII bytes are stepped over
    /// one by one, and a quoted value ends at its ASCII quote).
    pos: usize,
}

impl<'a> Lexer<'a> {
    fn skip_space(&mut self) {
        let b = self.text.as_bytes();
        while b.get(self.pos).is_some_and(u8::is_ascii_whitespace) {
            self.pos += 1;
        }
    }

    fn next(&mut self) -> Result<Option<Tok<'a>>, SqlError> {
        self.skip_space();
        let b = self.text.as_bytes();
        let start = self.pos;
        let Some(&c) = b.get(start) else {
            return Ok(None);
        };
        let ident = |c: &u8| c.is_ascii_alphanumeric() || *c == b'_';
        let tok = match c {
            b'(' | b')' | b',' | b';' => {
                self.pos += 1;
                match c {
                    b'(' => Tok::Open,
                    b')' => Tok::Close,
                    b',' => Tok::Comma,
                    _ => Tok::Semicolon,
                }
            }
            b'\'' => {
                let mut i = start + 1;
                loop {
                    match b.get(i) {
                        None => return Err(SqlError::UnterminatedValue),
                        Some(b'\'') if b.get(i + 1) == Some(&b'\'') => i += 2,
                        Some(b'\'') => break,
                        Some(_) => i += 1,
                    }
                }
                self.pos = i + 1;
                Tok::Quoted(&self.text[start + 1..i])
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                while b.get(self.pos).is_some_and(ident) {
                    self.pos += 1;
                }
                Tok::Word(&self.text[start..self.pos])
            }
            c if c.is_ascii_digit() || c == b'-' || c == b'.' => {
                let digits = |from: usize| {
                    from + b[from.min(b.len())..]
                        .iter()
                        .take_while(|c| c.is_ascii_digit())
                        .count()
                };
                let mut i = start + usize::from(c == b'-');
                let int_end = digits(i);
                let mut n = int_end - i;
                i = int_end;
                if b.get(i) == Some(&b'.') {
                    let frac_end = digits(i + 1);
                    n += frac_end - (i + 1);
                    i = frac_end;
                }
                if n == 0 {
                    return Err(SqlError::Character(char::from(c)));
                }
                if matches!(b.get(i), Some(b'e' | b'E')) {
                    let sign = usize::from(matches!(b.get(i + 1), Some(b'+' | b'-')));
                    let exp_end = digits(i + 1 + sign);
                    if exp_end > i + 1 + sign {
                        i = exp_end;
                    }
                }
                self.pos = i;
                Tok::Number(&self.text[start..i])
            }
            _ => {
                let c = self.text[start..].chars().next().unwrap_or('\u{fffd}');
                return Err(SqlError::Character(c));
            }
        };
        Ok(Some(tok))
    }

    fn expect(&mut self, want: Tok, shown_as: &'static str) -> Result<(), SqlError> {
        match self.next()? {
            Some(t) if t == want => Ok(()),
            other => Err(SqlError::Expected {
                expected: shown_as,
                found: describe(other),
            }),
        }
    }

    fn word(&mut self, what: &'static str) -> Result<&'a str, SqlError> {
        match self.next()? {
            Some(Tok::Word(w)) => Ok(w),
            other => Err(SqlError::Expected {
                expected: what,
                found: describe(other),
            }),
        }
    }

    /// After a list item: `,` (more) or `)` (the end).
    fn list_goes_on(&mut self) -> Result<bool, SqlError> {
        match self.next()? {
            Some(Tok::Comma) => Ok(true),
            Some(Tok::Close) => Ok(false),
            other => Err(SqlError::Expected {
                expected: ", or )",
                found: describe(other),
            }),
        }
    }

    /// A statement's end: `;`, or the end of the file.
    fn end(&mut self) -> Result<(), SqlError> {
        match self.next()? {
            None | Some(Tok::Semicolon) => Ok(()),
            other => Err(SqlError::Expected {
                expected: "; (the statement's end)",
                found: describe(other),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CREATE: &str = "CREATE TABLE IF NOT EXISTS llama_bench (model_filename TEXT, n_threads INTEGER, \
                          n_prompt INTEGER, n_gen INTEGER, avg_ts REAL);\n";

    fn refused(sql: &str) -> (usize, SqlError) {
        match parse(sql) {
            Err(LlamaBenchError::Sql { statement, why }) => (statement, why),
            other => panic!("{sql}: {other:?}"),
        }
    }

    #[test]
    fn every_defect_is_refused_as_its_variant_with_its_statement() {
        let insert = |tail: &str| format!("{CREATE}INSERT INTO llama_bench {tail}");
        for (sql, want) in [
            (
                insert("(avg_ts) VALUES ('1"),
                (2, SqlError::UnterminatedValue),
            ),
            (
                "CREATE TABLE IF NOT EXISTS llama_bench (a BLOB);".into(),
                (1, SqlError::Type("BLOB".into())),
            ),
            (
                "CREATE TABLE IF NOT EXISTS llama_bench (a TEXT, A REAL);".into(),
                (1, SqlError::Duplicate("A".into())),
            ),
            (
                insert("(avg_ts, AVG_TS) VALUES ('1', '2');"),
                (2, SqlError::Duplicate("AVG_TS".into())),
            ),
            (
                insert("(surprise) VALUES ('1');"),
                (2, SqlError::UnknownColumn("surprise".into())),
            ),
            (
                insert(
                    "(model_filename, n_threads, n_prompt, n_gen, avg_ts) VALUES ('m', '1', '0', '1', '1');\n\
                     INSERT INTO llama_bench (avg_ts) SELECT 1;",
                ),
                (
                    3,
                    SqlError::Expected {
                        expected: "VALUES",
                        found: "SELECT".into(),
                    },
                ),
            ),
            (
                format!("{CREATE}DROP TABLE llama_bench;"),
                (
                    2,
                    SqlError::NotRead {
                        found: "DROP".into(),
                    },
                ),
            ),
            (format!("{CREATE}/* c */"), (2, SqlError::Character('/'))),
            (
                insert("(avg_ts) VALUES (-);"),
                (2, SqlError::Character('-')),
            ),
            (
                insert("(avg_ts) VALUES (x'00');"),
                (
                    2,
                    SqlError::Expected {
                        expected: "a value ('text', a number or NULL)",
                        found: "x".into(),
                    },
                ),
            ),
        ] {
            assert_eq!(refused(&sql), want, "{sql}");
        }
    }

    #[test]
    fn numbers_null_and_doubled_quotes_read_as_text() {
        let sql = format!(
            "{CREATE}insert into LLAMA_BENCH (MODEL_FILENAME, n_threads, n_prompt, n_gen, avg_ts) \
             values ('a''b', 2, -0, 1.5e1, .5);\nINSERT INTO llama_bench (model_filename, n_threads, n_prompt, \
             n_gen, avg_ts) VALUES (NULL, '1', '0', '1', '1')"
        );
        match parse(&sql) {
            Err(LlamaBenchError::Row { row: 2, source }) => {
                assert_eq!(
                    source,
                    super::super::RowError::Missing {
                        field: "model_filename"
                    }
                );
            }
            other => panic!("{other:?}"),
        }
        let rows = parse(sql.split_once("\nINSERT").unwrap().0).unwrap();
        assert_eq!(rows[0].model_filename, "a'b");
        assert_eq!(
            (rows[0].n_threads, rows[0].n_gen, rows[0].avg_ts),
            (2, 15, 0.5)
        );
    }

    #[test]
    fn only_a_statement_word_makes_a_file_sql() {
        for (t, sql) in [
            ("CREATE TABLE", true),
            ("attach 'x' as y", true),
            ("WITH(", true),
            ("build_commit,avg_ts", false),
            ("end,avg_ts", false),
            ("CREATE", false),
        ] {
            assert_eq!(looks_like(t), sql, "{t}");
        }
    }
}
