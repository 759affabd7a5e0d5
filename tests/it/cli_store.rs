//! The measurement store through the `optimizer` binary: exit codes, messages and hints for invalid databases and
//! for an environment without a writable data directory, and simultaneous first runs (issue 8, "The store").

use crate::common;
use common::{bin, fixture};

use std::path::Path;
use std::process::{Command, Output, Stdio};

use optimizer::cli::Common;
use optimizer::store::APPLICATION_ID;

const WARNING: &str = "warning: planned without the measurement store";

/// `optimizer --inventory cpu-server.yaml resolve -m <tiny llama>`, with no database setting inherited.
fn resolve() -> Command {
    let mut c = bin();
    c.env_remove("OPTIMIZER_DB")
        .env_remove("OPTIMIZER_INVENTORY")
        .arg("--inventory")
        .arg(fixture("inventories/cpu-server.yaml"))
        .args(["resolve", "-m"])
        .arg(fixture("gguf/llama-q4_k_m.gguf"));
    c
}

fn with_db(db: &Path) -> Output {
    resolve()
        .arg("--db")
        .arg(db)
        .output()
        .expect("run optimizer")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn document(o: &Output) -> serde_json::Value {
    serde_yaml_ng::from_slice(&o.stdout).expect("a YAML document on stdout")
}

/// Exit 4, the file and the defect named, the hint to move it aside, no document, the file untouched.
fn assert_refused(db: &Path, defect: &str) {
    let before = std::fs::read(db).unwrap();
    let o = with_db(db);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(4), "{err}");
    let name = db.file_name().unwrap().to_string_lossy();
    assert!(err.contains(&*name), "names the file: {err}");
    assert!(err.contains(defect), "names the defect {defect:?}: {err}");
    assert!(
        err.contains("hint: it was not modified; move it aside"),
        "{err}"
    );
    assert!(o.stdout.is_empty(), "no document");
    assert_eq!(std::fs::read(db).unwrap(), before, "not modified");
}

fn sqlite(path: &Path, sql: &str) {
    rusqlite::Connection::open(path)
        .unwrap()
        .execute_batch(sql)
        .unwrap();
}

#[test]
fn a_negative_user_version_exits_4_not_101() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("negative.db");
    sqlite(&db, "PRAGMA user_version = -1;");
    assert_refused(&db, "negative schema version -1");
}

#[test]
fn a_foreign_database_exits_4_and_is_not_taken_over() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("foreign.db");
    sqlite(
        &db,
        "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT);",
    );
    assert_refused(&db, "table \"users\" is not ours");
    let other = d.path().join("other-app.db");
    sqlite(&other, "PRAGMA application_id = 1;");
    assert_refused(&other, "belongs to another application");
}

#[test]
fn a_newer_database_exits_4_untouched() {
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("newer.db");
    sqlite(
        &db,
        &format!("PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = 99;"),
    );
    assert_refused(&db, "written by a newer optimizer");
}

#[test]
fn twenty_simultaneous_first_resolves_all_succeed() {
    const PROCESSES: usize = 20;
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("fresh/optimizer.db");
    let children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            resolve()
                .arg("--db")
                .arg(&db)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn optimizer")
        })
        .collect();
    for child in children {
        let o = child.wait_with_output().unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{err}");
        assert!(!err.contains(WARNING), "used the store: {err}");
        let doc = document(&o);
        assert!(
            doc["provenance"]["performance.basis"]["detail"]
                .as_str()
                .unwrap()
                .contains("holds 0 measurements"),
            "{doc}"
        );
    }
}

/// Runs `resolve` in an environment where the default data directory cannot be created, and checks that it plans
/// without the store and says so on stderr and in the document.
fn assert_plans_without_store(o: &Output) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains(WARNING), "{err}");
    let doc = document(o);
    let warnings = doc["warnings"].as_array().expect("warnings");
    assert!(
        warnings.iter().any(|w| w
            .as_str()
            .unwrap()
            .starts_with("planned without the measurement store")),
        "{warnings:?}"
    );
    assert!(
        doc["provenance"]["performance.basis"]["detail"]
            .as_str()
            .unwrap()
            .contains("planned without the measurement store"),
        "{doc}"
    );
}

#[test]
fn resolve_plans_without_the_store_where_no_data_directory_is_writable() {
    let d = tempfile::tempdir().unwrap();
    // XDG_DATA_HOME and HOME under a regular file: no directory can be made there, for root too.
    let file = d.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let o = resolve()
        .env("XDG_DATA_HOME", file.join("data"))
        .env("HOME", file.join("home"))
        .output()
        .unwrap();
    assert_plans_without_store(&o);
    assert!(stderr(&o).contains("not-a-dir"), "names the path");

    // No data directory at all.
    let o = resolve()
        .env_remove("XDG_DATA_HOME")
        .env_remove("HOME")
        .output()
        .unwrap();
    assert_plans_without_store(&o);
    assert!(stderr(&o).contains("no database path"), "{}", stderr(&o));

    // An explicit --db where no file can be created (procfs, for root too).
    let o = with_db(Path::new("/proc/self/optimizer.db"));
    assert_plans_without_store(&o);
}

#[test]
fn a_full_disk_while_creating_the_store_is_not_an_invalid_file() {
    // `ulimit -f 0` makes every write to a regular file fail (EFBIG) as a full disk would; SIGXFSZ is ignored so
    // the write returns the error instead of killing the process.
    let d = tempfile::tempdir().unwrap();
    let db = d.path().join("full.db");
    let resolve = resolve();
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(r#"trap '' XFSZ; ulimit -f 0; exec "$0" "$@""#)
        .arg(resolve.get_program())
        .args(resolve.get_args())
        .arg("--db")
        .arg(&db)
        .env_remove("OPTIMIZER_DB");
    let o = c.output().unwrap();
    assert_plans_without_store(&o);
}

#[test]
fn store_errors_exit_1_for_the_environment_and_4_for_the_file() {
    let d = tempfile::tempdir().unwrap();
    let common = |db: &Path| Common::new(None, Vec::new(), Some(db.to_path_buf()));
    let f = common(Path::new("/proc/self/optimizer.db"))
        .store()
        .unwrap_err();
    assert_eq!(f.code, 1, "{}", f.error);
    assert!(
        f.hint.as_deref().unwrap().contains("writable"),
        "{:?}",
        f.hint
    );

    let garbage = d.path().join("garbage.db");
    std::fs::write(&garbage, b"not a database ".repeat(300)).unwrap();
    let f = common(&garbage).store().unwrap_err();
    assert_eq!(f.code, 4, "{}", f.error);
    assert!(f.error.to_string().contains("garbage.db"), "{}", f.error);
    assert!(f.hint.as_deref().unwrap().contains("move it aside"));

    let fine = common(&d.path().join("ok.db")).store().unwrap();
    assert_eq!(fine.application_id().unwrap(), APPLICATION_ID);
}

/// `cmd` run without the privilege to write a write-protected file: as it is for a normal user, through
/// `setpriv` as `nobody` for root; `None` where root has no `setpriv`.
fn unprivileged(cmd: Command, probe: &Path) -> Option<Command> {
    let privileged = std::fs::OpenOptions::new().append(true).open(probe).is_ok();
    if !privileged {
        return Some(cmd);
    }
    let setpriv = ["/usr/bin/setpriv", "/bin/setpriv"]
        .into_iter()
        .find(|p| Path::new(p).exists())?;
    let mut c = Command::new(setpriv);
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    Some(c)
}

#[test]
fn a_current_write_protected_database_is_used_read_only() {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    let mode =
        |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    mode(d.path(), 0o755);
    // A writable directory (SQLite keeps the WAL index next to the file) with a write-protected database.
    let dir = d.path().join("rw");
    let db = dir.join("ok.db");
    assert_eq!(with_db(&db).status.code(), Some(0));
    mode(&dir, 0o777);
    mode(&db, 0o444);
    let before = std::fs::read(&db).unwrap();
    let mut c = resolve();
    c.arg("--db").arg(&db);
    let Some(mut c) = unprivileged(c, &db) else {
        eprintln!(
            "skipped: running as root without setpriv, so a write-protected file is still writable"
        );
        return;
    };
    let o = c.output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(!err.contains(WARNING), "used the store read-only: {err}");
    assert!(
        document(&o)["provenance"]["performance.basis"]["detail"]
            .as_str()
            .unwrap()
            .contains("holds 0 measurements")
    );
    assert_eq!(std::fs::read(&db).unwrap(), before);

    // A read-only directory too, before any reader left a WAL index there: SQLite cannot create one, so resolve
    // plans without the store.
    let dir = d.path().join("ro");
    let db = dir.join("ok.db");
    assert_eq!(with_db(&db).status.code(), Some(0));
    mode(&db, 0o444);
    mode(&dir, 0o555);
    let mut c = resolve();
    c.arg("--db").arg(&db);
    let o = unprivileged(c, &db).unwrap().output().unwrap();
    assert_plans_without_store(&o);
    mode(&dir, 0o755);
}
