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
//! **Nothing is written before every check passes.** [`Store::open`] inspects an existing file through a
//! connection opened `SQLITE_OPEN_READ_ONLY` (application id, version, schema, `quick_check`), so a refused file
//! keeps every byte. Only then a read-write connection takes the write lock (`BEGIN IMMEDIATE`), inspects again
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
//! Lookups return [`Evidence`], the core type the planner consumes (measured efficiencies, throughput points and
//! peak memory, each with its row id); rows the planner cannot read (an unknown runtime or metric, a value out of
//! range) are counted but not used.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags, TransactionBehavior};

use optimizer_core::evidence::Basis;
use optimizer_core::evidence::{
    CpuFigure, Evidence, MeasuredEfficiency, PeakMemory, ThroughputPoint,
};
use optimizer_core::profile::{Phase, RuntimeId};

mod manage;
pub use manage::{Prune, Pruned, Shown, ShownMeasurement, ShownRun, ShownRunWithRows};

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
];

/// `PRAGMA application_id` of every database this module creates or migrates: ASCII "OPTZ" (0x4F50545A), so
/// `file(1)` and other tools can tell our databases from other applications' (SQLite file format §1.3.13).
pub const APPLICATION_ID: i32 = 0x4F50_545A;

/// The newest schema version that releases wrote without an application id (the first release wrote version 1
/// and no id); an unstamped database beyond it was not written by us.
const LAST_UNSTAMPED_VERSION: i64 = 1;

/// How long a connection waits for another writer before failing: creation and migration take milliseconds, so
/// 5 s covers dozens of simultaneous first runs.
pub const BUSY_TIMEOUT_MS: u64 = 5_000;

/// How many times an open that met `SQLITE_BUSY` despite the timeout (SQLite returns it without waiting when
/// waiting could deadlock, and during WAL recovery) is retried from the start.
pub const MAX_BUSY_RETRIES: u32 = 8;

/// The pause before the first retry; it doubles each time (50 ms … 6.4 s in all).
const BUSY_RETRY_PAUSE_MS: u64 = 50;

/// How many schema differences or `quick_check` findings a message lists.
const MAX_LISTED: usize = 5;

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
            | StoreError::Value { path, .. } => path,
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

/// One row of `sqlite_schema`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct SchemaObject {
    kind: String,
    name: String,
    table: String,
    sql: Option<String>,
}

fn schema_of(conn: &Connection) -> rusqlite::Result<Vec<SchemaObject>> {
    let mut stmt = conn.prepare("SELECT type, name, tbl_name, sql FROM sqlite_schema")?;
    let mut objects = stmt
        .query_map([], |r| {
            Ok(SchemaObject {
                kind: r.get(0)?,
                name: r.get(1)?,
                table: r.get(2)?,
                sql: r.get(3)?,
            })
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    objects.sort();
    Ok(objects)
}

/// The schema our first `version` migrations build, from an in-memory database (the exact text SQLite stores).
fn expected_schema(version: usize) -> rusqlite::Result<Vec<SchemaObject>> {
    let conn = Connection::open_in_memory()?;
    for (_, sql) in &MIGRATIONS[..version] {
        conn.execute_batch(sql)?;
    }
    schema_of(&conn)
}

/// How `have` differs from `want`, or `None` when it does not.
fn differences(have: &[SchemaObject], want: &[SchemaObject]) -> Option<String> {
    let same = |a: &SchemaObject, b: &SchemaObject| a.kind == b.kind && a.name == b.name;
    let mut found = Vec::new();
    for h in have {
        match want.iter().find(|w| same(h, w)) {
            None => found.push(format!("{} {:?} is not ours", h.kind, h.name)),
            Some(w) if w != h => {
                found.push(format!("{} {:?} is defined differently", h.kind, h.name))
            }
            Some(_) => {}
        }
    }
    for w in want.iter().filter(|w| !have.iter().any(|h| same(h, w))) {
        found.push(format!("{} {:?} is missing", w.kind, w.name));
    }
    if found.is_empty() {
        return None;
    }
    let more = found.len().saturating_sub(MAX_LISTED);
    found.truncate(MAX_LISTED);
    let mut text = found.join("; ");
    if more > 0 {
        text.push_str(&format!("; and {more} more"));
    }
    Some(text)
}

/// What an inspection found in a database that passed it.
#[derive(Debug, Clone, Copy)]
struct Found {
    version: i64,
    application_id: i32,
}

impl Found {
    fn is_current(self) -> bool {
        self.application_id == APPLICATION_ID && self.version == known_version()
    }
}

fn known_version() -> i64 {
    MIGRATIONS.len() as i64
}

/// Checks that the database on `conn` is ours (see the module doc); reads only. `quick_check` also reads every
/// page for corruption.
fn inspect(conn: &Connection, path: &Path, quick_check: bool) -> Result<Found, StoreError> {
    let e = classify(path);
    let invalid = |defect| StoreError::Invalid {
        path: path.to_path_buf(),
        defect,
    };
    let application_id: i32 = conn
        .pragma_query_value(None, "application_id", |r| r.get(0))
        .map_err(&e)?;
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(&e)?;
    if version < 0 {
        return Err(invalid(Defect::NegativeVersion(version)));
    }
    if application_id != 0 && application_id != APPLICATION_ID {
        return Err(invalid(Defect::ForeignApplication {
            found: application_id,
        }));
    }
    let known = known_version();
    if version > known {
        return Err(StoreError::Newer {
            path: path.to_path_buf(),
            found: version,
            known,
        });
    }
    if application_id == 0 && version > LAST_UNSTAMPED_VERSION {
        return Err(invalid(Defect::Unstamped { version }));
    }
    let have = schema_of(conn).map_err(&e)?;
    // `version` is within 0..=MIGRATIONS.len() here.
    let want = expected_schema(usize::try_from(version).unwrap_or(0)).map_err(&e)?;
    if let Some(differences) = differences(&have, &want) {
        return Err(invalid(Defect::ForeignSchema {
            version,
            differences,
        }));
    }
    if quick_check {
        let mut stmt = conn
            .prepare(&format!("PRAGMA quick_check({MAX_LISTED})"))
            .map_err(&e)?;
        let findings = stmt
            .query_map([], |r| r.get::<_, String>(0))
            .map_err(&e)?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(&e)?;
        if findings != ["ok"] {
            return Err(invalid(Defect::Corrupt(findings.join("; "))));
        }
    }
    Ok(Found {
        version,
        application_id,
    })
}

/// Applies the missing migrations and stamps the database, under the write lock, after inspecting it again there.
fn migrate(conn: &mut Connection, path: &Path, quick_check: bool) -> Result<(), StoreError> {
    let e = classify(path);
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(&e)?;
    let found = inspect(&tx, path, quick_check)?;
    if !found.is_current() {
        // `found.version` is within 0..=MIGRATIONS.len() after inspection.
        let from = usize::try_from(found.version).unwrap_or(0);
        for (_, sql) in &MIGRATIONS[from..] {
            tx.execute_batch(sql).map_err(&e)?;
        }
        tx.pragma_update(None, "application_id", APPLICATION_ID)
            .map_err(&e)?;
        tx.pragma_update(None, "user_version", known_version())
            .map_err(&e)?;
    }
    tx.commit().map_err(&e)
}

/// Opens an existing database read-only and inspects it (with a quick check) in one read transaction: outside
/// one, every statement reads its own snapshot, and a concurrent first run committing its migration between the
/// version read and the schema read looked like "version 0 with foreign tables" (20 simultaneous first runs,
/// tests/it/store.rs). `Ok(None)`: a hot journal left by a crash, which only a read-write connection may roll back
/// (SQLite's own recovery, restoring the last committed state); the checks then run inside the write lock.
fn open_inspected(path: &Path) -> Result<Option<(Connection, Found)>, StoreError> {
    let e = classify(path);
    let ro = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(&e)?;
    ro.busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS))
        .map_err(&e)?;
    let inspected = ro
        .unchecked_transaction()
        .map_err(&e)
        .and_then(|tx| inspect(&tx, path, true));
    match inspected {
        Ok(found) => Ok(Some((ro, found))),
        Err(StoreError::Unavailable { source, .. })
            if source.sqlite_extended_error_code()
                == Some(rusqlite::ffi::SQLITE_READONLY_ROLLBACK) =>
        {
            Ok(None)
        }
        Err(err) => Err(err),
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

impl Store {
    /// Opens (creating it and its directory on first use) and migrates the database at `path`; see the module
    /// doc for what is checked before anything is written.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        retrying(|| Self::open_once(path))
    }

    fn open_once(path: &Path) -> Result<Store, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let exists = match std::fs::metadata(path) {
            Ok(m) if m.is_file() => true,
            // A FIFO would hang SQLite's first read; a device is nobody's database.
            Ok(_) => {
                return Err(StoreError::Invalid {
                    path: path.to_path_buf(),
                    defect: Defect::NotRegularFile,
                });
            }
            Err(source) if source.kind() == std::io::ErrorKind::NotFound => false,
            Err(source) => {
                return Err(StoreError::Io {
                    path: path.to_path_buf(),
                    source,
                });
            }
        };
        let e = classify(path);
        let busy = Duration::from_millis(BUSY_TIMEOUT_MS);
        // Inspect an existing file read-only, so that a refused one keeps every byte.
        let found = if exists {
            open_inspected(path)?.map(|(_, found)| found)
        } else {
            None
        };
        let mut conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(&e)?;
        conn.busy_timeout(busy).map_err(&e)?;
        // SQLite opens a write-protected file read-only; a current one is then used as it is.
        let read_only = conn.is_readonly(rusqlite::MAIN_DB).map_err(&e)?;
        if !found.is_some_and(Found::is_current) {
            migrate(&mut conn, path, found.is_none())?;
        }
        if !read_only {
            // WAL lets calibration write while planners read.
            let mode: String = conn
                .pragma_query_value(None, "journal_mode", |r| r.get(0))
                .map_err(&e)?;
            if !mode.eq_ignore_ascii_case("wal") {
                conn.pragma_update(None, "journal_mode", "WAL")
                    .map_err(&e)?;
            }
        }
        conn.pragma_update(None, "foreign_keys", "ON").map_err(&e)?;
        Ok(Store {
            conn,
            path: path.to_path_buf(),
            read_only,
        })
    }

    /// A store to look things up in: an existing, current database is used through the read-only connection that
    /// inspected it (one connection instead of two, and no journal-mode or foreign-key pragmas: `resolve` only
    /// reads); anything else (no file yet, an older version to migrate, a hot journal to recover, a busy lock)
    /// takes [`Store::open`]'s path, which creates, migrates or waits as it always does.
    pub fn open_for_lookup(path: &Path) -> Result<Store, StoreError> {
        if std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
            match open_inspected(path) {
                Ok(Some((ro, found))) if found.is_current() => {
                    return Ok(Store {
                        conn: ro,
                        path: path.to_path_buf(),
                        read_only: true,
                    });
                }
                Err(err @ StoreError::Invalid { .. }) => return Err(err),
                _ => {}
            }
        }
        Store::open(path)
    }

    /// An in-memory store (tests).
    pub fn open_in_memory() -> Result<Store, StoreError> {
        let path = Path::new(":memory:");
        let mut conn = Connection::open_in_memory().map_err(classify(path))?;
        migrate(&mut conn, path, false)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(classify(path))?;
        Ok(Store {
            conn,
            path: path.to_path_buf(),
            read_only: false,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the file was write-protected and the store is used read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// The schema version (`PRAGMA user_version`).
    pub fn version(&self) -> Result<i64, StoreError> {
        self.conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(classify(&self.path))
    }

    /// The application id (`PRAGMA application_id`): [`APPLICATION_ID`] once opened.
    pub fn application_id(&self) -> Result<i32, StoreError> {
        self.conn
            .pragma_query_value(None, "application_id", |r| r.get(0))
            .map_err(classify(&self.path))
    }

    /// What the store holds for these device profiles and this model fingerprint (rows without a model apply to
    /// every model). Read in one transaction, so a concurrent writer cannot tear the answer.
    pub fn evidence(
        &self,
        device_profiles: &[String],
        fingerprint: &str,
    ) -> Result<Evidence, StoreError> {
        let e = classify(&self.path);
        // Rolled back on drop: it only reads.
        let _snapshot = self.conn.unchecked_transaction().map_err(&e)?;
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT m.id, d.profile, r.runtime, r.tool, m.metric, m.value, m.context, m.model_id IS NULL, \
                 m.sequences, r.status = 'complete', m.threads, m.gpu_layers, m.ubatch, r.id, d.name, \
                 h.physical_cores, m.tensor_parallel \
                 FROM measurement m JOIN device d ON d.id = m.device_id JOIN run r ON r.id = m.run_id \
                 LEFT JOIN model o ON o.id = m.model_id LEFT JOIN host h ON h.id = r.host_id \
                 WHERE d.profile = ?1 AND (m.model_id IS NULL OR o.fingerprint = ?2) ORDER BY m.id",
            )
            .map_err(&e)?;
        let mut ev = Evidence {
            rows: Some(0),
            ..Evidence::default()
        };
        let mut seen = std::collections::BTreeSet::new();
        for p in device_profiles {
            if !seen.insert(p.as_str()) {
                continue;
            }
            let rows = stmt
                .query_map((p, fingerprint), |r| {
                    Ok(Row {
                        id: r.get(0)?,
                        profile: r.get(1)?,
                        runtime: r.get(2)?,
                        tool: r.get(3)?,
                        metric: r.get(4)?,
                        value: r.get(5)?,
                        context: r.get(6)?,
                        any_model: r.get(7)?,
                        sequences: r.get(8)?,
                        complete: r.get(9)?,
                        threads: r.get(10)?,
                        gpu_layers: r.get(11)?,
                        ubatch: r.get(12)?,
                        run: r.get(13)?,
                        name: r.get(14)?,
                        host_cores: r.get(15)?,
                        tensor_parallel: r.get(16)?,
                    })
                })
                .map_err(&e)?;
            for row in rows {
                let row = row.map_err(&e)?;
                ev.rows = ev.rows.map(|n| n.saturating_add(1));
                row.into_evidence(&mut ev);
            }
        }
        Ok(ev)
    }
}

/// The machine a run was taken on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostIdentity {
    pub cpu_model: String,
    pub physical_cores: u32,
    pub memory_total_bytes: u64,
    pub hostname: String,
}

/// One benchmark or calibration run, as it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRun {
    /// `calibrate`, `llama-bench import`, ...
    pub tool: String,
    pub runtime: RuntimeId,
    pub runtime_version: Option<String>,
    /// RFC 3339, UTC.
    pub started_at: String,
    /// The runtime flags used, as JSON.
    pub settings: String,
    pub host: HostIdentity,
}

/// A device as the store keys it: its hardware profile, the driver's name and its UUID when known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceIdentity {
    pub profile: String,
    pub name: String,
    pub uuid: Option<String>,
}

/// The model a measurement was taken with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelIdentity {
    pub fingerprint: String,
    pub architecture: String,
    pub tensor_bytes: u64,
}

/// The shape a measurement was taken at (`None`: not applicable or not recorded).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shape {
    pub context_tokens: Option<u32>,
    pub batch: Option<u32>,
    pub ubatch: Option<u32>,
    pub sequences: Option<u32>,
    pub threads: Option<u32>,
    pub gpu_layers: Option<u32>,
    pub kv_type: Option<String>,
    pub tensor_parallel: Option<u32>,
    pub pipeline_parallel: Option<u32>,
}

/// One measured quantity.
#[derive(Debug, Clone, PartialEq)]
pub struct NewMeasurement {
    pub device: DeviceIdentity,
    /// `None`: a device figure that holds for every model (a calibration).
    pub model: Option<ModelIdentity>,
    /// `decode_tokens_per_s`, `prefill_tokens_per_s`, `decode_efficiency`, `peak_memory_bytes`, ...
    pub metric: String,
    pub value: f64,
    pub unit: String,
    pub shape: Shape,
    /// Anything else about the conditions, as JSON.
    pub context: String,
}

/// A run being recorded; [`Store::finish_run`] marks it complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunId(pub i64);

impl Store {
    /// Records that a run started: it is `incomplete` (and ignored by lookups) until [`Store::finish_run`], so a
    /// run killed at any point leaves rows no plan uses.
    pub fn begin_run(&self, run: &NewRun) -> Result<RunId, StoreError> {
        retrying(|| self.begin_run_once(run))
    }

    fn begin_run_once(&self, run: &NewRun) -> Result<RunId, StoreError> {
        let e = classify(&self.path);
        let tx = write_transaction(&self.conn).map_err(&e)?;
        let h = &run.host;
        tx.execute(
            "INSERT INTO host (cpu_model, physical_cores, memory_total_bytes, hostname) VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT DO NOTHING",
            (
                &h.cpu_model,
                h.physical_cores,
                i64::try_from(h.memory_total_bytes).unwrap_or(i64::MAX),
                &h.hostname,
            ),
        )
        .map_err(&e)?;
        let host: i64 = tx
            .query_row(
                "SELECT id FROM host WHERE cpu_model = ?1 AND physical_cores = ?2 AND memory_total_bytes = ?3 \
                 AND hostname = ?4",
                (
                    &h.cpu_model,
                    h.physical_cores,
                    i64::try_from(h.memory_total_bytes).unwrap_or(i64::MAX),
                    &h.hostname,
                ),
                |r| r.get(0),
            )
            .map_err(&e)?;
        tx.execute(
            "INSERT INTO run (tool, runtime, runtime_version, started_at, settings, host_id, status) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'incomplete')",
            (
                &run.tool,
                run.runtime.name(),
                &run.runtime_version,
                &run.started_at,
                &run.settings,
                host,
            ),
        )
        .map_err(&e)?;
        let id = tx.last_insert_rowid();
        tx.commit().map_err(&e)?;
        Ok(RunId(id))
    }

    /// Records one measurement of a run (its device and model rows created on first use); returns its row id.
    /// A non-finite value is refused: nothing downstream could use it.
    pub fn record(&self, run: RunId, m: &NewMeasurement) -> Result<i64, StoreError> {
        if !m.value.is_finite() {
            return Err(StoreError::Value {
                path: self.path.clone(),
                what: format!("{} = {}: not a finite number", m.metric, m.value),
            });
        }
        retrying(|| self.record_once(run, m))
    }

    fn record_once(&self, run: RunId, m: &NewMeasurement) -> Result<i64, StoreError> {
        let e = classify(&self.path);
        let tx = write_transaction(&self.conn).map_err(&e)?;
        let d = &m.device;
        tx.execute(
            "INSERT INTO device (profile, name, uuid) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
            (&d.profile, &d.name, &d.uuid),
        )
        .map_err(&e)?;
        let device: i64 = tx
            .query_row(
                "SELECT id FROM device WHERE profile = ?1 AND name = ?2 AND ifnull(uuid, '') = ifnull(?3, '')",
                (&d.profile, &d.name, &d.uuid),
                |r| r.get(0),
            )
            .map_err(&e)?;
        let model: Option<i64> = match &m.model {
            None => None,
            Some(o) => {
                tx.execute(
                    "INSERT INTO model (fingerprint, architecture, tensor_bytes) VALUES (?1, ?2, ?3) \
                     ON CONFLICT DO NOTHING",
                    (
                        &o.fingerprint,
                        &o.architecture,
                        i64::try_from(o.tensor_bytes).unwrap_or(i64::MAX),
                    ),
                )
                .map_err(&e)?;
                Some(
                    tx.query_row(
                        "SELECT id FROM model WHERE fingerprint = ?1",
                        [&o.fingerprint],
                        |r| r.get(0),
                    )
                    .map_err(&e)?,
                )
            }
        };
        let sh = &m.shape;
        tx.execute(
            "INSERT INTO measurement (run_id, device_id, model_id, metric, value, unit, context, context_tokens, \
             batch, ubatch, sequences, threads, gpu_layers, kv_type, tensor_parallel, pipeline_parallel) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
            rusqlite::params![
                run.0,
                device,
                model,
                &m.metric,
                m.value,
                &m.unit,
                &m.context,
                sh.context_tokens,
                sh.batch,
                sh.ubatch,
                sh.sequences,
                sh.threads,
                sh.gpu_layers,
                &sh.kv_type,
                sh.tensor_parallel,
                sh.pipeline_parallel,
            ],
        )
        .map_err(&e)?;
        let id = tx.last_insert_rowid();
        tx.commit().map_err(&e)?;
        Ok(id)
    }

    /// Marks a run complete: from now on lookups use its rows.
    pub fn finish_run(&self, run: RunId, finished_at: &str) -> Result<(), StoreError> {
        retrying(|| {
            self.conn
                .execute(
                    "UPDATE run SET status = 'complete', finished_at = ?2 WHERE id = ?1",
                    (run.0, finished_at),
                )
                .map(|_| ())
                .map_err(classify(&self.path))
        })
    }
}

/// A measurement as `measurements list` shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Listed {
    pub row: i64,
    pub run: i64,
    pub tool: String,
    pub runtime: String,
    /// `complete` or `incomplete` (ignored by plans).
    pub status: String,
    pub device_profile: String,
    pub device_name: String,
    /// The model's fingerprint; absent for a device figure that holds for every model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub metric: String,
    pub value: f64,
    pub unit: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sequences: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_layers: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ubatch: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_type: Option<String>,
}

impl Store {
    /// Every measurement, oldest first, with its run and device (one read transaction).
    pub fn list(&self) -> Result<Vec<Listed>, StoreError> {
        let e = classify(&self.path);
        let _snapshot = self.conn.unchecked_transaction().map_err(&e)?;
        let mut stmt = self
            .conn
            .prepare(
                "SELECT m.id, r.id, r.tool, r.runtime, r.status, d.profile, d.name, o.fingerprint, m.metric, \
                 m.value, m.unit, m.threads, m.sequences, m.gpu_layers, m.ubatch, m.kv_type \
                 FROM measurement m JOIN run r ON r.id = m.run_id JOIN device d ON d.id = m.device_id \
                 LEFT JOIN model o ON o.id = m.model_id ORDER BY m.id",
            )
            .map_err(&e)?;
        let rows = stmt
            .query_map([], |r| {
                Ok(Listed {
                    row: r.get(0)?,
                    run: r.get(1)?,
                    tool: r.get(2)?,
                    runtime: r.get(3)?,
                    status: r.get(4)?,
                    device_profile: r.get(5)?,
                    device_name: r.get(6)?,
                    model: r.get(7)?,
                    metric: r.get(8)?,
                    value: r.get(9)?,
                    unit: r.get(10)?,
                    threads: r.get(11)?,
                    sequences: r.get(12)?,
                    gpu_layers: r.get(13)?,
                    ubatch: r.get(14)?,
                    kv_type: r.get(15)?,
                })
            })
            .map_err(&e)?;
        rows.collect::<Result<_, _>>().map_err(&e)
    }
}

/// One measurement row as read.
struct Row {
    id: i64,
    profile: String,
    runtime: String,
    tool: String,
    metric: String,
    value: f64,
    context: String,
    any_model: bool,
    /// The `sequences` column (version 2); older rows say it in the JSON context.
    sequences: Option<i64>,
    /// The run finished; rows of an interrupted run are counted but never used.
    complete: bool,
    threads: Option<i64>,
    gpu_layers: Option<i64>,
    ubatch: Option<i64>,
    run: i64,
    /// The device's name (a CPU's model string).
    name: String,
    /// Physical cores of the run's host, when the run names one.
    host_cores: Option<i64>,
    /// The `tensor_parallel` column (version 2): GPUs one replica spanned.
    tensor_parallel: Option<i64>,
}

/// Largest efficiency a row may claim: achieved over peak above 1 means the peak in the profile is wrong, and
/// 1.5 leaves room for boost clocks above the datasheet's base figures.
const MAX_EFFICIENCY: f64 = 1.5;

impl Row {
    /// Files the row where it belongs; a row the planner cannot use is left out (still counted in `rows`).
    fn into_evidence(self, ev: &mut Evidence) {
        if !self.complete {
            return;
        }
        let Ok(runtime) =
            serde_json::from_value::<RuntimeId>(serde_json::Value::String(self.runtime.clone()))
        else {
            return;
        };
        if !self.value.is_finite() || self.value <= 0.0 {
            return;
        }
        let phase = |m: &str| match m {
            "decode" => Some(Phase::Decode),
            "prefill" => Some(Phase::Prefill),
            _ => None,
        };
        if let Some(ph) = self.metric.strip_suffix("_efficiency").and_then(phase) {
            if self.value <= MAX_EFFICIENCY {
                ev.efficiencies.push(MeasuredEfficiency {
                    row: self.id,
                    device_profile: self.profile,
                    runtime,
                    phase: ph,
                    value: self.value,
                    // A row for every model is a device-class figure (calibration); one for this model was
                    // measured with it.
                    basis: if self.any_model {
                        Basis::Calibrated
                    } else {
                        Basis::Measured
                    },
                    what: self.tool,
                });
            }
        } else if let Some(ph) = self.metric.strip_suffix("_tokens_per_s").and_then(phase) {
            if !self.any_model {
                let context = serde_json::from_str::<serde_json::Value>(&self.context).ok();
                let json = |k: &str| {
                    context
                        .as_ref()
                        .and_then(|v| v.get(k).and_then(serde_json::Value::as_u64))
                };
                let concurrency = self
                    .sequences
                    .and_then(|n| u64::try_from(n).ok())
                    .or_else(|| json("concurrency"));
                let small = |n: Option<i64>| n.and_then(|n| u32::try_from(n).ok());
                // A size the row states but no GPU count can be (a corrupt or foreign row) is not "one GPU".
                if self.tensor_parallel.is_some() && small(self.tensor_parallel).is_none() {
                    return;
                }
                let tokens = json(if ph == Phase::Prefill {
                    "n_prompt"
                } else {
                    "n_gen"
                });
                ev.throughput.push(ThroughputPoint {
                    row: self.id,
                    device_profile: self.profile,
                    runtime,
                    phase: ph,
                    tokens_per_s: self.value,
                    concurrency,
                    threads: small(self.threads),
                    gpu_layers: small(self.gpu_layers),
                    ubatch: small(self.ubatch),
                    tensor_parallel: small(self.tensor_parallel),
                    tokens,
                    what: self.tool,
                });
            }
        } else if self.metric.starts_with("cpu_") && self.any_model {
            // Only the micro-benchmarks of an optimised build describe the CPU (see `DEBUG_BUILD_TOOL`).
            if self.tool != optimizer_core::evidence::CALIBRATE_TOOL {
                return;
            }
            // A calibration figure of a CPU, at a thread count.
            if let Some(threads) = self
                .threads
                .and_then(|t| u32::try_from(t).ok())
                .filter(|t| *t > 0)
            {
                let isa = serde_json::from_str::<serde_json::Value>(&self.context)
                    .ok()
                    .and_then(|v| v.get("isa").and_then(|i| i.as_str().map(str::to_string)));
                ev.cpu.push(CpuFigure {
                    row: self.id,
                    run: self.run,
                    device_profile: self.profile,
                    device_name: self.name,
                    host_cores: self.host_cores.and_then(|c| u32::try_from(c).ok()),
                    metric: self.metric,
                    threads,
                    value: self.value,
                    isa,
                });
            }
        } else if self.metric == "peak_memory_bytes"
            && !self.any_model
            && self.value < 2f64.powi(63)
        {
            let estimated_bytes = serde_json::from_str::<serde_json::Value>(&self.context)
                .ok()
                .and_then(|v| v.get("estimated_bytes").and_then(serde_json::Value::as_u64));
            ev.peak_memory.push(PeakMemory {
                row: self.id,
                device_profile: self.profile,
                runtime,
                bytes: self.value as u64,
                estimated_bytes,
                context: self.context,
            });
        }
    }
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

    fn object(kind: &str, name: &str, sql: &str) -> SchemaObject {
        SchemaObject {
            kind: kind.into(),
            name: name.into(),
            table: name.into(),
            sql: Some(sql.into()),
        }
    }

    #[test]
    fn schema_differences_name_extra_changed_and_missing_objects() {
        let want = vec![
            object("table", "a", "CREATE TABLE a(x)"),
            object("table", "b", "CREATE TABLE b(x)"),
        ];
        let have = vec![
            object("table", "a", "CREATE TABLE a(y)"),
            object("table", "users", "CREATE TABLE users(x)"),
        ];
        let d = differences(&have, &want).unwrap();
        assert_eq!(
            d,
            "table \"a\" is defined differently; table \"users\" is not ours; table \"b\" is missing"
        );
        assert_eq!(differences(&want, &want), None);
        let many: Vec<_> = (0..8)
            .map(|i| object("table", &format!("t{i}"), "x"))
            .collect();
        assert!(differences(&many, &[]).unwrap().ends_with("; and 3 more"));
    }

    #[test]
    fn the_expected_schema_of_version_0_is_empty_and_of_version_1_has_our_tables() {
        assert!(expected_schema(0).unwrap().is_empty());
        let v1 = expected_schema(1).unwrap();
        for t in ["device", "model", "run", "measurement"] {
            assert!(v1.iter().any(|o| o.kind == "table" && o.name == t), "{t}");
        }
    }

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
}

/// One measurement as `measurements export` writes it (one JSON object per line) and `measurements import`
/// reads it back: the row with everything that identifies it (host, run, device, model) and its shape, so a
/// fleet can merge what every machine measured and keep where each figure came from.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Exported {
    pub host: ExportedHost,
    pub run: ExportedRun,
    pub device: ExportedDevice,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ExportedModel>,
    pub metric: String,
    pub value: f64,
    pub unit: String,
    #[serde(default)]
    pub shape: ExportedShape,
    pub context: String,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportedHost {
    pub cpu_model: String,
    pub physical_cores: u32,
    pub memory_total_bytes: u64,
    pub hostname: String,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportedRun {
    pub tool: String,
    pub runtime: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_version: Option<String>,
    pub started_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    pub settings: String,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportedDevice {
    pub profile: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportedModel {
    pub fingerprint: String,
    pub architecture: String,
    pub tensor_bytes: u64,
}

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportedShape {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ubatch: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequences: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_layers: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor_parallel: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline_parallel: Option<u32>,
}

impl Store {
    /// Every measurement of every complete run, oldest first, as exported lines (incomplete runs stay home).
    pub fn export(&self) -> Result<Vec<Exported>, StoreError> {
        let e = classify(&self.path);
        let _snapshot = self.conn.unchecked_transaction().map_err(&e)?;
        let mut stmt = self
            .conn
            .prepare(
                "SELECT ifnull(h.cpu_model, ''), ifnull(h.physical_cores, 0), ifnull(h.memory_total_bytes, 0), \
                 ifnull(h.hostname, ''), r.tool, r.runtime, r.runtime_version, r.started_at, r.finished_at, \
                 r.settings, d.profile, d.name, d.uuid, o.fingerprint, o.architecture, o.tensor_bytes, m.metric, \
                 m.value, m.unit, m.context_tokens, m.batch, m.ubatch, m.sequences, m.threads, m.gpu_layers, \
                 m.kv_type, m.tensor_parallel, m.pipeline_parallel, m.context \
                 FROM measurement m JOIN run r ON r.id = m.run_id JOIN device d ON d.id = m.device_id \
                 LEFT JOIN host h ON h.id = r.host_id LEFT JOIN model o ON o.id = m.model_id \
                 WHERE r.status = 'complete' ORDER BY m.id",
            )
            .map_err(&e)?;
        let small = |v: Option<i64>| v.and_then(|v| u32::try_from(v).ok());
        let rows = stmt
            .query_map([], |r| {
                let fingerprint: Option<String> = r.get(13)?;
                Ok(Exported {
                    host: ExportedHost {
                        cpu_model: r.get(0)?,
                        physical_cores: u32::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
                        memory_total_bytes: u64::try_from(r.get::<_, i64>(2)?).unwrap_or(0),
                        hostname: r.get(3)?,
                    },
                    run: ExportedRun {
                        tool: r.get(4)?,
                        runtime: r.get(5)?,
                        runtime_version: r.get(6)?,
                        started_at: r.get(7)?,
                        finished_at: r.get(8)?,
                        settings: r.get(9)?,
                    },
                    device: ExportedDevice {
                        profile: r.get(10)?,
                        name: r.get(11)?,
                        uuid: r.get(12)?,
                    },
                    model: match fingerprint {
                        None => None,
                        Some(fingerprint) => Some(ExportedModel {
                            fingerprint,
                            architecture: r.get(14)?,
                            tensor_bytes: u64::try_from(r.get::<_, i64>(15)?).unwrap_or(0),
                        }),
                    },
                    metric: r.get(16)?,
                    value: r.get(17)?,
                    unit: r.get(18)?,
                    shape: ExportedShape {
                        context_tokens: small(r.get(19)?),
                        batch: small(r.get(20)?),
                        ubatch: small(r.get(21)?),
                        sequences: small(r.get(22)?),
                        threads: small(r.get(23)?),
                        gpu_layers: small(r.get(24)?),
                        kv_type: r.get(25)?,
                        tensor_parallel: small(r.get(26)?),
                        pipeline_parallel: small(r.get(27)?),
                    },
                    context: r.get(28)?,
                })
            })
            .map_err(&e)?;
        rows.collect::<Result<_, _>>().map_err(&e)
    }

    /// Imports exported lines: one run per distinct (host, run) they name, written complete. A run already here
    /// (same host, tool, runtime, start and settings, complete) is skipped whole, so importing the same file twice
    /// adds nothing. Returns the runs written, the measurement rows written and how many runs were skipped.
    pub fn import(&self, lines: &[Exported]) -> Result<(Vec<RunId>, Vec<i64>, usize), StoreError> {
        let e = classify(&self.path);
        let mut groups: Vec<(&ExportedHost, &ExportedRun, Vec<&Exported>)> = Vec::new();
        for l in lines {
            match groups
                .iter_mut()
                .find(|(h, r, _)| *h == &l.host && *r == &l.run)
            {
                Some(g) => g.2.push(l),
                None => groups.push((&l.host, &l.run, vec![l])),
            }
        }
        let mut written = Vec::new();
        let mut ids = Vec::new();
        let mut skipped = 0;
        for (host, run, rows) in groups {
            let runtime: RuntimeId = serde_json::from_value(serde_json::Value::String(
                run.runtime.clone(),
            ))
            .map_err(|_| StoreError::Value {
                path: self.path.clone(),
                what: format!("runtime {:?}: not a runtime this build knows", run.runtime),
            })?;
            let exists: bool = self
                .conn
                .query_row(
                    "SELECT EXISTS (SELECT 1 FROM run r JOIN host h ON h.id = r.host_id WHERE r.status = 'complete' \
                     AND r.tool = ?1 AND r.runtime = ?2 AND r.started_at = ?3 AND r.settings = ?4 \
                     AND h.cpu_model = ?5 AND h.physical_cores = ?6 AND h.memory_total_bytes = ?7 AND h.hostname = ?8)",
                    rusqlite::params![
                        &run.tool,
                        &run.runtime,
                        &run.started_at,
                        &run.settings,
                        &host.cpu_model,
                        host.physical_cores,
                        i64::try_from(host.memory_total_bytes).unwrap_or(i64::MAX),
                        &host.hostname
                    ],
                    |r| r.get(0),
                )
                .map_err(&e)?;
            if exists {
                skipped += 1;
                continue;
            }
            let id = self.begin_run(&NewRun {
                tool: run.tool.clone(),
                runtime,
                runtime_version: run.runtime_version.clone(),
                started_at: run.started_at.clone(),
                settings: run.settings.clone(),
                host: HostIdentity {
                    cpu_model: host.cpu_model.clone(),
                    physical_cores: host.physical_cores,
                    memory_total_bytes: host.memory_total_bytes,
                    hostname: host.hostname.clone(),
                },
            })?;
            for l in rows {
                ids.push(self.record(
                    id,
                    &NewMeasurement {
                        device: DeviceIdentity {
                            profile: l.device.profile.clone(),
                            name: l.device.name.clone(),
                            uuid: l.device.uuid.clone(),
                        },
                        model: l.model.as_ref().map(|m| ModelIdentity {
                            fingerprint: m.fingerprint.clone(),
                            architecture: m.architecture.clone(),
                            tensor_bytes: m.tensor_bytes,
                        }),
                        metric: l.metric.clone(),
                        value: l.value,
                        unit: l.unit.clone(),
                        shape: Shape {
                            context_tokens: l.shape.context_tokens,
                            batch: l.shape.batch,
                            ubatch: l.shape.ubatch,
                            sequences: l.shape.sequences,
                            threads: l.shape.threads,
                            gpu_layers: l.shape.gpu_layers,
                            kv_type: l.shape.kv_type.clone(),
                            tensor_parallel: l.shape.tensor_parallel,
                            pipeline_parallel: l.shape.pipeline_parallel,
                        },
                        context: l.context.clone(),
                    },
                )?);
            }
            self.finish_run(
                id,
                run.finished_at
                    .as_deref()
                    .unwrap_or(run.started_at.as_str()),
            )?;
            written.push(id);
        }
        Ok((written, ids, skipped))
    }
}
