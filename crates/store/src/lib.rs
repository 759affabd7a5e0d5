//! The measurement store: SQLite through rusqlite (bundled). Migrations are the append-only files in
//! `crates/store/migrations/`, embedded at build time and applied in one transaction, versioned by `PRAGMA user_version`.
//! Edge module: touches the database file only.
//!
//! **Only our own databases are touched.** A database is ours when its `PRAGMA application_id` is
//! [`APPLICATION_ID`] (`0x4F50545A`, ASCII "OPTZ", stamped on every database this module creates or migrates)
//! and its schema is exactly what our migrations build for its `user_version`. Two unstamped forms are accepted
//! as ours too: a fresh database (an empty or 0-byte file: application id 0, version 0, no schema objects) and one
//! written by the release before application ids (application id 0, version 1, exactly `0001_initial.sql`'s
//! schema); both are stamped when they are migrated. Everything else is refused as an invalid file: another
//! application id, a negative or newer `user_version`, tables or indexes that are not ours, a file that is not a
//! database, and page corruption (found by `PRAGMA quick_check`).
//!
//! **Nothing is written before every check passes.** [`Store::open`] first reads the file's 100-byte header itself
//! (application id, version, WAL mode), because even a read-only SQLite connection creates `-wal`/`-shm` files
//! beside a WAL-mode database; an unstamped WAL-mode file is inspected through an `immutable` connection, which
//! creates none. It then inspects an existing file through a connection opened `SQLITE_OPEN_READ_ONLY`
//! (application id, version, schema, `quick_check`), so a refused file keeps every byte and its directory every
//! entry. A name SQLite reads as no file at all (`:memory:`, an empty name, a `file:` URI) is refused first. Only then a read-write connection takes the write lock (`BEGIN IMMEDIATE`), inspects again
//! inside it (another process may have created or migrated the database meanwhile), migrates and stamps, commits,
//! and switches to WAL. Concurrent first runs are safe: the write lock serialises creation, the re-check makes
//! every later one a no-op, each connection waits [`BUSY_TIMEOUT_MS`] for the lock, and an open that still meets
//! `SQLITE_BUSY` is retried [`MAX_BUSY_RETRIES`] times. Trade-off: `quick_check` reads every page on every open,
//! linear in the database's size; a measurement store is small and corruption found before a write is worth it.
//!
//! **Errors are of two kinds.** [`StoreError::is_invalid_file`]: the file itself is wrong (exit 4 in the CLI,
//! naming the file and the defect; the user must move it aside, since it may hold their measurements). Otherwise
//! the environment is (no writable directory, read-only file system, permission denied, disk full, I/O error:
//! exit 1). `resolve` reads the store only to find measured figures, so on an environment error it plans without
//! the store and says so (a warning on stderr and in the document), whether the path is the default or an explicit
//! `--db`/`OPTIMIZER_DB`: a plan from the analytic model beats no plan, and the document's `performance.basis`
//! already says which figures are measured. An explicit but invalid database file stays exit 4: it is the user's
//! file and silently ignoring it would hide their measurements. A current database whose file is write-protected
//! is used read-only, as long as SQLite can keep its WAL index (`-shm`) beside it (a writable directory or an
//! existing index); an unstamped one cannot be stamped there, so resolve plans without it.
//!
//! Lookups return [`Evidence`](optimizer_core::evidence::Evidence), the core type the planner consumes (measured
//! efficiencies, throughput points and peak memory, each with its row id); rows the planner cannot read (an
//! unknown runtime or metric, a value out of range) are counted but not used.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, TransactionBehavior};

mod evidence;
mod exchange;
mod manage;
mod open;
mod owner;
mod runs;
pub use evidence::Listed;
pub use exchange::{
    Exported, ExportedDevice, ExportedHost, ExportedModel, ExportedRun, ExportedShape, ImportedRuns,
};
pub use manage::{KeptRun, Prune, Pruned, Shown, ShownMeasurement, ShownRun, ShownRunWithRows};
pub use owner::RunOwner;
pub use runs::{
    DeviceIdentity, HostIdentity, ImportOutcome, ImportRun, ModelIdentity, NewMeasurement, NewRun,
    RunId, Shape, import_key,
};

/// The migrations, in order; the schema version after applying the first `n` is `n`.
pub const MIGRATIONS: &[(&str, &str)] = &[
    (
        "0001_initial.sql",
        include_str!("../migrations/0001_initial.sql"),
    ),
    (
        "0002_runs_and_shapes.sql",
        include_str!("../migrations/0002_runs_and_shapes.sql"),
    ),
    (
        "0003_run_owner_and_import_key.sql",
        include_str!("../migrations/0003_run_owner_and_import_key.sql"),
    ),
];

/// `PRAGMA application_id` of every database this module creates or migrates: ASCII "OPTZ" (0x4F50545A), so
/// `file(1)` and other tools can tell our databases from other applications' (SQLite file format §1.3.13).
pub const APPLICATION_ID: i32 = 0x4F50_545A;

/// How long a connection waits for another writer before failing: creation and migration take milliseconds, so
/// 5 s covers dozens of simultaneous first runs.
pub(crate) const BUSY_TIMEOUT_MS: u64 = 5_000;

/// How many times an open that met `SQLITE_BUSY` despite the timeout (SQLite returns it without waiting when
/// waiting could deadlock, and during WAL recovery) is retried from the start.
pub(crate) const MAX_BUSY_RETRIES: u32 = 8;

/// The pause before the first retry; it doubles each time (50 ms … 6.4 s in all).
const BUSY_RETRY_PAUSE_MS: u64 = 50;

/// What is wrong with a database file.
#[derive(Debug, thiserror::Error)]
pub enum Defect {
    #[error("not a regular file")]
    NotRegularFile,
    #[error("not an SQLite database")]
    NotADatabase,
    #[error("corrupted: {0}")]
    Corrupt(String),
    #[error("negative schema version {0} (PRAGMA user_version)")]
    NegativeVersion(i64),
    #[error(
        "belongs to another application (PRAGMA application_id {found:#010x}; optimizer's is {APPLICATION_ID:#010x})"
    )]
    ForeignApplication { found: i32 },
    #[error(
        "schema version {version} without optimizer's application id; no optimizer release wrote that (PRAGMA application_id 0)"
    )]
    Unstamped { version: i64 },
    #[error("its schema is not optimizer's schema version {version}: {differences}")]
    ForeignSchema { version: i64, differences: String },
}

/// The store could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The environment: a directory or the file could not be created or read.
    #[error("{path}: {source}", path = path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The environment, as SQLite met it: read-only file system, permission denied, disk full, I/O error, a lock
    /// held past the timeout.
    #[error("{path}: cannot use the measurement database: {source}", path = path.display())]
    Unavailable {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    /// The file: not one of our databases, or a damaged one (the message names the defect, so it is no `source`).
    #[error("{path}: not a usable optimizer database: {defect}", path = path.display())]
    Invalid { path: PathBuf, defect: Defect },
    #[error("{path}: written by a newer optimizer (schema version {found}; this build knows up to {known}); refusing to touch it", path = path.display())]
    Newer {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    /// A value the caller asked to record that no lookup could use (NaN, infinite).
    #[error("{path}: refusing to record {what}", path = path.display())]
    Value { path: PathBuf, what: String },
    /// A name SQLite reads as something other than a file (see [`not_a_file_name`]).
    #[error("{path:?}: not a database file name: {why}")]
    NotAFileName { path: PathBuf, why: &'static str },
    /// The run being recorded is no longer in the store: `measurements prune` removed it, as it does with an
    /// incomplete run whose recorder it cannot check once the run is [`UNCHECKABLE_RUN_MAX_AGE_DAYS`] old.
    #[error("{path}: run {run} is no longer in the store; its measurements cannot be recorded", path = path.display())]
    RunGone { path: PathBuf, run: i64 },
}

/// Why SQLite would not treat `path` as a file name, or `None` when it would: `:memory:` is an in-memory database
/// (lost at exit), an empty name a temporary one (deleted at close), and a name starting with `file:` a URI whose
/// query can say `mode=memory` or `vfs=...` (this build enables URI names, `SQLITE_USE_URI`). The check is on the
/// name as given: `./:memory:` is a file.
pub fn not_a_file_name(path: &Path) -> Option<&'static str> {
    let raw = path.as_os_str().as_encoded_bytes();
    if raw.is_empty() {
        Some("an empty name is a temporary database that SQLite deletes when it closes")
    } else if raw == b":memory:" {
        Some("\":memory:\" is an in-memory database, lost when the command exits")
    } else if raw.len() >= 5 && raw[..5].eq_ignore_ascii_case(b"file:") {
        Some("a name starting with \"file:\" is an SQLite URI, not a file name")
    } else {
        None
    }
}

impl StoreError {
    /// Whether the file itself is at fault (exit 4), rather than the environment (exit 1).
    pub fn is_invalid_file(&self) -> bool {
        matches!(self, StoreError::Invalid { .. } | StoreError::Newer { .. })
    }

    /// The file or directory the error is about.
    pub fn path(&self) -> &Path {
        match self {
            StoreError::Io { path, .. }
            | StoreError::Unavailable { path, .. }
            | StoreError::Invalid { path, .. }
            | StoreError::Newer { path, .. }
            | StoreError::Value { path, .. }
            | StoreError::NotAFileName { path, .. }
            | StoreError::RunGone { path, .. } => path,
        }
    }

    fn is_busy(&self) -> bool {
        matches!(self, StoreError::Unavailable { source, .. }
            if matches!(source.sqlite_error_code(), Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)))
    }
}

/// Sorts an SQLite error into the file's fault (corruption, not a database) or the environment's (the rest).
fn classify(path: &Path) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
    move |source| {
        let path = path.to_path_buf();
        match source.sqlite_error_code() {
            Some(ErrorCode::DatabaseCorrupt) => StoreError::Invalid {
                path,
                defect: Defect::Corrupt(source.to_string()),
            },
            Some(ErrorCode::NotADatabase) => StoreError::Invalid {
                path,
                defect: Defect::NotADatabase,
            },
            _ => StoreError::Unavailable { path, source },
        }
    }
}

/// Runs `f` again while it fails with `SQLITE_BUSY` (the busy timeout ran out, or SQLite refused to wait
/// because waiting could deadlock), at most [`MAX_BUSY_RETRIES`] times with a doubling pause, so no busy error
/// escapes a writer that merely met another process's transaction.
fn retrying<T>(mut f: impl FnMut() -> Result<T, StoreError>) -> Result<T, StoreError> {
    let mut pause = Duration::from_millis(BUSY_RETRY_PAUSE_MS);
    let mut retries = 0;
    loop {
        match f() {
            Err(err) if err.is_busy() && retries < MAX_BUSY_RETRIES => {
                retries += 1;
                std::thread::sleep(pause);
                pause = pause.saturating_mul(2);
            }
            result => return result,
        }
    }
}

/// A write transaction that takes the write lock at `BEGIN` (waiting up to the busy timeout for it) rather
/// than at its first write: a deferred transaction that read first and then writes meets `SQLITE_BUSY` at
/// once, without waiting, when another connection wrote in between (WAL's `SQLITE_BUSY_SNAPSHOT`).
fn write_transaction(conn: &Connection) -> rusqlite::Result<rusqlite::Transaction<'_>> {
    rusqlite::Transaction::new_unchecked(conn, TransactionBehavior::Immediate)
}

/// An open, migrated store.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    path: PathBuf,
    read_only: bool,
}

/// The default database: `$XDG_DATA_HOME/optimizer/optimizer.db`, else `~/.local/share/optimizer/optimizer.db`.
pub fn default_path(xdg_data_home: Option<&str>, home: Option<&str>) -> Option<PathBuf> {
    match (
        xdg_data_home.filter(|s| !s.is_empty()),
        home.filter(|s| !s.is_empty()),
    ) {
        (Some(x), _) => Some(PathBuf::from(x).join("optimizer/optimizer.db")),
        (None, Some(h)) => Some(PathBuf::from(h).join(".local/share/optimizer/optimizer.db")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_path_follows_xdg() {
        assert_eq!(
            default_path(Some("/x"), Some("/h")),
            Some(PathBuf::from("/x/optimizer/optimizer.db"))
        );
        assert_eq!(
            default_path(None, Some("/h")),
            Some(PathBuf::from("/h/.local/share/optimizer/optimizer.db"))
        );
        assert_eq!(default_path(Some(""), None), None);
        assert_eq!(default_path(None, Some("")), None);
    }

    #[test]
    fn names_sqlite_reads_specially_are_not_file_names() {
        for name in [":memory:", "", "file:x.db", "FILE:x.db?mode=memory"] {
            assert!(not_a_file_name(Path::new(name)).is_some(), "{name:?}");
        }
        for name in [
            "./:memory:",
            "m.db",
            ":memory:.db",
            "/tmp/file:x.db",
            "files.db",
        ] {
            assert_eq!(not_a_file_name(Path::new(name)), None, "{name:?}");
        }
    }
}
