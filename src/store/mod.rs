//! The measurement store: SQLite through rusqlite (bundled). Migrations are the append-only files in
//! `migrations/`, embedded at build time and applied in one transaction, versioned by `PRAGMA user_version`;
//! a database written by a newer optimizer is refused rather than guessed at. Edge module: touches the database
//! file only.
//!
//! The planner consumes [`Measurements`]; until calibration records rows, lookups return none and every
//! prediction stays `analytic`.

use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};

use crate::plan::Measurements;

/// The migrations, in order; the schema version after applying the first `n` is `n`.
pub const MIGRATIONS: &[(&str, &str)] = &[(
    "0001_initial.sql",
    include_str!("../../migrations/0001_initial.sql"),
)];

/// How long a connection waits for another writer before failing.
const BUSY_TIMEOUT_MS: u64 = 5_000;

/// The store could not be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}", path = path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not a usable optimizer database: {source}", path = path.display())]
    Invalid {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("{path}: written by a newer optimizer (schema version {found}; this build knows up to {known}); refusing to touch it", path = path.display())]
    Newer {
        path: PathBuf,
        found: i64,
        known: i64,
    },
}

/// An open, migrated store.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

fn invalid(path: &Path) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
    move |source| StoreError::Invalid {
        path: path.to_path_buf(),
        source,
    }
}

impl Store {
    /// Opens (creating it and its directory on first use) and migrates the database at `path`.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(invalid(path))?;
        Self::init(conn, path)
    }

    /// An in-memory store (tests).
    pub fn open_in_memory() -> Result<Store, StoreError> {
        let conn = Connection::open_in_memory().map_err(invalid(Path::new(":memory:")))?;
        Self::init(conn, Path::new(":memory:"))
    }

    fn init(mut conn: Connection, path: &Path) -> Result<Store, StoreError> {
        let e = invalid(path);
        conn.busy_timeout(std::time::Duration::from_millis(BUSY_TIMEOUT_MS))
            .map_err(&e)?;
        // WAL lets calibration write while planners read; in-memory databases ignore it.
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(&e)?;
        conn.pragma_update(None, "foreign_keys", "ON").map_err(&e)?;
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(&e)?;
        let known = MIGRATIONS.len() as i64;
        if version > known {
            return Err(StoreError::Newer {
                path: path.to_path_buf(),
                found: version,
                known,
            });
        }
        if version < known {
            let tx = conn.transaction().map_err(&e)?;
            for (_, sql) in &MIGRATIONS[version as usize..] {
                tx.execute_batch(sql).map_err(&e)?;
            }
            tx.pragma_update(None, "user_version", known).map_err(&e)?;
            tx.commit().map_err(&e)?;
        }
        Ok(Store {
            conn,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The schema version (`PRAGMA user_version`).
    pub fn version(&self) -> Result<i64, StoreError> {
        self.conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(invalid(&self.path))
    }

    /// Measurements recorded for a device profile and a model fingerprint.
    pub fn measurements(
        &self,
        device_profiles: &[String],
        fingerprint: &str,
    ) -> Result<(Measurements, u64), StoreError> {
        let e = invalid(&self.path);
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT count(*) FROM measurement m JOIN device d ON d.id = m.device_id \
                 LEFT JOIN model o ON o.id = m.model_id \
                 WHERE d.profile = ?1 AND (o.fingerprint IS NULL OR o.fingerprint = ?2)",
            )
            .map_err(&e)?;
        let mut rows = 0u64;
        for p in device_profiles {
            let n: i64 = stmt.query_row((p, fingerprint), |r| r.get(0)).map_err(&e)?;
            rows += n as u64;
        }
        Ok((Measurements::default(), rows))
    }
}

/// The default database: `$XDG_DATA_HOME/optimizer/optimizer.db`, else `~/.local/share/optimizer/optimizer.db`.
pub fn default_path(xdg_data_home: Option<&str>, home: Option<&str>) -> Option<PathBuf> {
    match (xdg_data_home.filter(|s| !s.is_empty()), home) {
        (Some(x), _) => Some(PathBuf::from(x).join("optimizer/optimizer.db")),
        (None, Some(h)) => Some(PathBuf::from(h).join(".local/share/optimizer/optimizer.db")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_apply_from_empty_and_reopen_is_idempotent() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("sub/dir/optimizer.db");
        let s = Store::open(&p).unwrap();
        assert_eq!(s.version().unwrap(), MIGRATIONS.len() as i64);
        drop(s);
        let s = Store::open(&p).unwrap();
        assert_eq!(s.version().unwrap(), MIGRATIONS.len() as i64);
        let (_, rows) = s.measurements(&["rtx-4090".into()], "abc").unwrap();
        assert_eq!(rows, 0);
        let m = Store::open_in_memory().unwrap();
        assert_eq!(m.version().unwrap(), MIGRATIONS.len() as i64);
    }

    #[test]
    fn a_newer_database_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("new.db");
        {
            let c = Connection::open(&p).unwrap();
            c.pragma_update(None, "user_version", 99).unwrap();
        }
        let err = Store::open(&p).unwrap_err();
        assert!(matches!(err, StoreError::Newer { found: 99, .. }), "{err}");
        assert!(err.to_string().contains("new.db"));
    }

    #[test]
    fn a_corrupt_file_is_an_invalid_database_and_is_left_as_it_was() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("corrupt.db");
        let garbage = b"this is not a database, just some bytes that happen to be here".repeat(100);
        std::fs::write(&p, &garbage).unwrap();
        let err = Store::open(&p).unwrap_err();
        assert!(matches!(err, StoreError::Invalid { .. }), "{err}");
        assert_eq!(std::fs::read(&p).unwrap(), garbage, "no data lost");
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
    }
}
