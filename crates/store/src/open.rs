//! Opening a database: the checks that a file is ours (application id, schema version, the schema itself
//! compared with what our migrations build, `quick_check`), the migrations applied under the write lock, and
//! [`Store`]'s constructors and accessors. The module doc of the crate says what is accepted and why.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use crate::{
    APPLICATION_ID, BUSY_TIMEOUT_MS, Defect, MIGRATIONS, Store, StoreError, classify, retrying,
};

/// The newest schema version that releases wrote without an application id (the first release wrote version 1
/// and no id); an unstamped database beyond it was not written by us.
const LAST_UNSTAMPED_VERSION: i64 = 1;

/// How many schema differences or `quick_check` findings a message lists.
const MAX_LISTED: usize = 5;

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

/// Checks what the application id and schema version alone say: a negative version, another application's id, a
/// newer version, or a version no unstamped release wrote are refused.
fn check_identity(path: &Path, application_id: i32, version: i64) -> Result<(), StoreError> {
    let invalid = |defect| StoreError::Invalid {
        path: path.to_path_buf(),
        defect,
    };
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
    Ok(())
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
    check_identity(path, application_id, version)?;
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
///
/// Before SQLite opens the file, its header is read here ([`check_header`]): even a read-only connection creates
/// `-wal` and `-shm` files beside a WAL-mode database, so a refused foreign one would leave two new files behind.
fn open_inspected(path: &Path) -> Result<Option<(Connection, Found)>, StoreError> {
    check_header(path)?;
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

/// The header of an SQLite database file: its first 100 bytes (SQLite file format §1.3).
const HEADER_BYTES: usize = 100;

/// The header's first 16 bytes.
const HEADER_MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// What the header says, for a file that starts with [`HEADER_MAGIC`] and holds a whole header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    /// The file format's write and read versions (bytes 18 and 19) say WAL (2).
    wal: bool,
    /// `PRAGMA user_version` (bytes 60-63, big-endian).
    version: i64,
    /// `PRAGMA application_id` (bytes 68-71, big-endian).
    application_id: i32,
}

fn parse_header(bytes: &[u8]) -> Option<Header> {
    if bytes.len() < HEADER_BYTES || !bytes.starts_with(HEADER_MAGIC) {
        return None;
    }
    let be = |at: usize| -> Option<i32> {
        Some(i32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    Some(Header {
        wal: bytes[18] == 2 || bytes[19] == 2,
        version: i64::from(be(60)?),
        application_id: be(68)?,
    })
}

/// Reads the header of `path` (a regular file: opened without blocking, in case it was swapped for a FIFO since).
/// `None`: not a whole SQLite header (SQLite then says what it is; it writes nothing beside such a file).
fn read_header(path: &Path) -> Result<Option<Header>, StoreError> {
    use std::io::Read as _;
    let io = |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NONBLOCK);
    let file = options.open(path).map_err(io)?;
    if !file.metadata().map_err(io)?.is_file() {
        return Err(StoreError::Invalid {
            path: path.to_path_buf(),
            defect: Defect::NotRegularFile,
        });
    }
    let mut bytes = Vec::with_capacity(HEADER_BYTES);
    file.take(HEADER_BYTES as u64)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    Ok(parse_header(&bytes))
}

/// `path` with `suffix` appended to its name (`-wal`, `-shm`).
fn beside(path: &Path, suffix: &str) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    name.into()
}

/// Refuses, before SQLite opens it, a file whose header already says it is not ours (another application's id, a
/// negative, newer or unstamped version), and inspects an unstamped WAL-mode file (another application's database
/// may carry no id) through an `immutable` connection, which creates no `-wal`/`-shm` beside it. Immutable reads
/// ignore a write-ahead log, so this is done only when none is beside the file (the database is then whole in the
/// file, and no process has it open in WAL mode); with one there, SQLite uses the files that exist. Trade-off: a
/// process that opens and checkpoints the file in the instant between the two may show the immutable read a torn
/// page, which refuses the file (writing nothing) rather than accepting it; only unstamped files (another
/// application's, or ours from the release before application ids, once) take this path.
fn check_header(path: &Path) -> Result<(), StoreError> {
    let Some(header) = read_header(path)? else {
        return Ok(());
    };
    check_identity(path, header.application_id, header.version)?;
    let logs_beside = [beside(path, "-wal"), beside(path, "-shm")]
        .iter()
        .any(|p| std::fs::symlink_metadata(p).is_ok());
    if header.wal && header.application_id != APPLICATION_ID && !logs_beside {
        let e = classify(path);
        let conn = Connection::open_with_flags(
            immutable_uri(path),
            OpenFlags::SQLITE_OPEN_READ_ONLY
                | OpenFlags::SQLITE_OPEN_URI
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(&e)?;
        inspect(&conn, path, false)?;
    }
    Ok(())
}

/// `file:PATH?mode=ro&immutable=1`, the path percent-encoded (RFC 3986) so that `?`, `#` and `%` in it stay
/// part of it.
fn immutable_uri(path: &Path) -> String {
    use std::fmt::Write as _;
    let raw = path.as_os_str().as_encoded_bytes();
    let mut uri = String::from(if path.is_absolute() {
        "file://"
    } else {
        "file:"
    });
    for &b in raw {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            uri.push(char::from(b));
        } else {
            let _ = write!(uri, "%{b:02X}");
        }
    }
    uri.push_str("?mode=ro&immutable=1");
    uri
}

impl Store {
    /// Opens (creating it and its directory on first use) and migrates the database at `path`; see the module
    /// doc for what is checked before anything is written.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        retrying(|| Self::open_once(path))
    }

    fn open_once(path: &Path) -> Result<Store, StoreError> {
        if let Some(why) = crate::not_a_file_name(path) {
            return Err(StoreError::NotAFileName {
                path: path.to_path_buf(),
                why,
            });
        }
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
        if let Some(why) = crate::not_a_file_name(path) {
            return Err(StoreError::NotAFileName {
                path: path.to_path_buf(),
                why,
            });
        }
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
    fn the_header_says_wal_application_id_and_version_and_short_or_foreign_bytes_say_nothing() {
        let mut h = [0u8; HEADER_BYTES];
        h[..16].copy_from_slice(HEADER_MAGIC);
        h[18] = 2;
        h[19] = 2;
        h[60..64].copy_from_slice(&(-3i32).to_be_bytes());
        h[68..72].copy_from_slice(&APPLICATION_ID.to_be_bytes());
        assert_eq!(
            parse_header(&h),
            Some(Header {
                wal: true,
                version: -3,
                application_id: APPLICATION_ID
            })
        );
        assert_eq!(parse_header(&h[..HEADER_BYTES - 1]), None);
        h[0] = b's';
        assert_eq!(parse_header(&h), None);
    }

    #[test]
    fn the_immutable_uri_keeps_every_byte_of_the_path() {
        assert_eq!(
            immutable_uri(Path::new("/a b/c?d#e%f.db")),
            "file:///a%20b/c%3Fd%23e%25f.db?mode=ro&immutable=1"
        );
        assert_eq!(
            immutable_uri(Path::new("rel/x.db")),
            "file:rel/x.db?mode=ro&immutable=1"
        );
    }

    #[test]
    fn the_expected_schema_of_version_0_is_empty_and_of_version_1_has_our_tables() {
        assert!(expected_schema(0).unwrap().is_empty());
        let v1 = expected_schema(1).unwrap();
        for t in ["device", "model", "run", "measurement"] {
            assert!(v1.iter().any(|o| o.kind == "table" && o.name == t), "{t}");
        }
    }
}
