//! `resolve -o DIR/`: the bundle (the document, and for each launch artifact a directory of its name with its
//! files and `command.sh`), published as a whole, so that it never mixes with an older bundle and no write goes
//! through a link planted in DIR (issue 24).
//!
//! - **Staged privately.** The whole bundle is built in a fresh staging directory, `.NAME.<16 random>.tmp`,
//!   created exclusively with mode 0700 next to DIR (the same parent, so the same filesystem: a rename publishes
//!   it). Every file is created with `O_CREAT | O_EXCL` and every subdirectory by `mkdir`, both of which fail on
//!   an existing name, link or not, and the directory is new and private: nothing planted can redirect a write.
//!   The bundle lists the files it holds in `.optimizer-bundle` (the marker), so a later run can recognise it.
//! - **Published.** An absent DIR is the staging directory renamed. An existing DIR must be a real directory (a
//!   symbolic link is refused, exit 2) that is empty or a bundle this tool wrote: every entry under it a plain
//!   file or directory, every file listed in its marker. A previous bundle is replaced as a whole: on Linux
//!   `renameat2(RENAME_EXCHANGE)` swaps the staging directory and DIR atomically; elsewhere, or on a filesystem
//!   that cannot exchange, DIR is renamed aside, the staging directory renamed into place (DIR put back if that
//!   fails). The old tree is then checked again and removed with `remove_dir_all`, which unlinks links without
//!   following them.
//! - **Refused, never deleted.** Anything else in DIR (a file the marker does not list, a link, a FIFO) is
//!   refused with exit 2 naming it: files this tool did not write are never deleted, and a planted link is
//!   neither followed nor silently removed.
//! - **All or nothing.** On any failure before publishing, the staging directory is removed and DIR is left as
//!   it was.
//!
//! An entry the previous bundle had at the same path keeps its permission bits (as `-o FILE` keeps its
//! target's); a new one gets what creating it directly gives (0666 or 0777 less the umask).
//!
//! Trade-offs: a bundle written before the marker existed is refused rather than recognised by its file names,
//! since guessing could delete a user's own `deploy.yaml` and `kubernetes/`; it has to be removed once by hand.
//! An entry added to DIR between the check and the swap is caught by the second check of the old tree, which
//! then keeps it under its temporary name with a warning instead of deleting it. The staging directory needs
//! DIR's parent to be writable (a bundle directory writable inside a read-only parent is refused, exit 1): the
//! price of a rename that publishes the whole bundle at once.
//!
//! May touch: DIR and, in its parent, the staging directory and (without an atomic exchange) the set-aside name.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::fs::{self, File};
use std::io::{self, Write as _};
use std::path::{Component, Path, PathBuf};

use super::{Failure, OutputFormat, exit};
use crate::emit::Deployment;

/// The marker file of every bundle: its first line [`MARKER_HEADER`], then one relative path a line (`/`
/// between components), each file the bundle holds besides the marker.
pub(super) const MARKER: &str = ".optimizer-bundle";
/// The marker's first line: a marker without it is not ours (and a later format can change it).
const MARKER_HEADER: &str = "# optimizer bundle v1: files `optimizer resolve -o DIR/` wrote here; the next run replaces the directory as a whole";
/// Bytes of a marker read back. A bundle lists tens of files (about 1 KiB); the bound stops a planted marker
/// from making the check read a huge file.
const MAX_MARKER_BYTES: u64 = 1 << 20;
/// Files a marker may list. A bundle holds at most a few tens (the document, the artifacts' files and
/// commands); a marker listing more is not one this tool wrote, and the bound caps the check's work.
const MAX_LISTED_FILES: usize = 4096;
/// Names of a foreign directory quoted when it is refused; enough to recognise it.
const SHOWN_ENTRIES: usize = 5;
/// Random characters in the staging and set-aside names (`tempfile`'s alphabet of 62): about 95 bits, so a
/// name cannot be guessed ahead of the run.
const TEMP_RANDOM_CHARS: usize = 16;
/// Mode of the staging directory while the bundle is built: private to this user.
#[cfg(unix)]
const STAGING_MODE: u32 = 0o700;
/// Permission bits copied from a replaced entry: set-id and sticky bits are not carried onto content this
/// process wrote.
#[cfg(unix)]
const PERMISSION_BITS: u32 = 0o777;

/// `-o DIR/` (a trailing slash) asks for a bundle instead of one file. An existing directory named without the
/// slash is still refused as a file target (tests/it/hostile_input.rs), so a mistyped `-o` never spreads files.
pub(super) fn is_bundle(p: &Path) -> bool {
    p.as_os_str().to_string_lossy().ends_with('/')
}

/// Why a bundle was not written.
#[derive(Debug, thiserror::Error)]
pub(super) enum BundleError {
    #[error("-o {path}: a bundle needs a directory name (such as -o bundle/)", path = path.display())]
    NoName { path: PathBuf },
    #[error("-o {path}/: {what}; a bundle is written into a real directory only", path = path.display())]
    NotDirectory { path: PathBuf, what: &'static str },
    #[error(
        "-o {path}/: {found}; a bundle replaces only an empty directory or a bundle optimizer wrote (one whose \
         {MARKER} lists every file in it)",
        path = path.display()
    )]
    Foreign { path: PathBuf, found: String },
    #[error("artifact {artifact:?} file {rel:?}: {why}")]
    BadName {
        artifact: String,
        rel: String,
        why: &'static str,
    },
    #[error("{what} {path}", path = path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

impl From<BundleError> for Failure {
    fn from(e: BundleError) -> Failure {
        match e {
            BundleError::NoName { .. } | BundleError::NotDirectory { .. } => {
                Failure::new(exit::USAGE, e).hint(
                    "give -o the path of a new, empty or earlier bundle directory, with a trailing slash",
                )
            }
            BundleError::Foreign { .. } => Failure::new(exit::USAGE, e).hint(format!(
                "optimizer never deletes what it did not write: move that away, or give -o a new or empty \
                 directory (a bundle written by a version without {MARKER} has to be removed once by hand)"
            )),
            // The names come from the runtimes: a bad one is a defect here, not in the command line.
            BundleError::BadName { .. } | BundleError::Io { .. } => Failure::new(exit::RUNTIME, e),
        }
    }
}

fn io_error<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> BundleError + 'a {
    move |source| BundleError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// Writes the bundle for `doc` into `dir` (see the module doc): the document (`deploy.yaml`, `deploy.json` with
/// `--format json`, `summary.txt` with `--format table`), and for each launch artifact a directory of its name
/// holding its files and, when it has one, `command.sh` (its shell line).
pub(super) fn write_bundle(
    dir: &Path,
    doc: &Deployment,
    text: &str,
    format: OutputFormat,
) -> Result<(), Failure> {
    let files = bundle_files(doc, text, format)?;
    publish(dir, &files, &|f, bytes| f.write_all(bytes))?;
    Ok(())
}

/// Writes one file's bytes; a seam for the tests, which make it fail half-way.
type Writer<'a> = &'a dyn Fn(&mut File, &[u8]) -> io::Result<()>;

/// The bundle's files by relative path, each checked by [`bundle_path`]; no file may sit where another's
/// directory goes.
fn bundle_files(
    doc: &Deployment,
    text: &str,
    format: OutputFormat,
) -> Result<BTreeMap<PathBuf, String>, BundleError> {
    let mut files = BTreeMap::new();
    let name = match format {
        OutputFormat::Json => "deploy.json",
        OutputFormat::Table => "summary.txt",
        OutputFormat::Yaml => "deploy.yaml",
    };
    files.insert(PathBuf::from(name), text.to_string());
    for a in &doc.launch {
        for (rel, content) in &a.files {
            files.insert(bundle_path(&a.name, rel)?, content.clone());
        }
        if let Some(cmd) = &a.command {
            // The shell line carries the environment it needs itself (`VAR=value program args`).
            let mut sh = String::from(
                "#!/bin/sh\n# Written by `optimizer resolve`: run it from this directory.\n",
            );
            sh.push_str(cmd);
            sh.push('\n');
            files.insert(bundle_path(&a.name, "command.sh")?, sh);
        }
    }
    for rel in files.keys() {
        if rel.ancestors().skip(1).any(|a| files.contains_key(a)) {
            return Err(BundleError::BadName {
                artifact: String::new(),
                rel: rel.display().to_string(),
                why: "inside a path that is also a file of the bundle",
            });
        }
    }
    Ok(files)
}

/// A launch artifact's file path inside a bundle: relative, no `..`, no root, no control character (the marker
/// lists one path a line), not the marker. The names come from the runtimes, which write plain file names;
/// anything else is refused rather than written outside the directory.
fn bundle_path(artifact: &str, rel: &str) -> Result<PathBuf, BundleError> {
    let bad = |why| BundleError::BadName {
        artifact: artifact.to_string(),
        rel: rel.to_string(),
        why,
    };
    let plain = |s: &str| {
        !s.is_empty()
            && !s.chars().any(char::is_control)
            && Path::new(s)
                .components()
                .all(|c| matches!(c, Component::Normal(_)))
    };
    if !plain(artifact) || !plain(rel) {
        return Err(bad("not a plain relative path"));
    }
    let path = Path::new(artifact).join(rel);
    if path.components().next() == Some(Component::Normal(OsStr::new(MARKER))) {
        return Err(bad("the name of the bundle's marker"));
    }
    Ok(path)
}

/// What is at DIR before the bundle is published.
#[derive(Debug)]
enum Existing {
    Absent,
    /// An empty directory, with its permission bits.
    Empty {
        mode: Option<u32>,
    },
    /// A bundle this tool wrote: every entry's permission bits by relative path (DIR itself at the empty path).
    Bundle {
        modes: BTreeMap<PathBuf, u32>,
    },
}

/// Publishes `files` as the bundle at `dir` (see the module doc), writing each through `write`.
fn publish(
    dir: &Path,
    files: &BTreeMap<PathBuf, String>,
    write: Writer<'_>,
) -> Result<(), BundleError> {
    // `bundle/` names `bundle`: looked at without the slash, a link at the name is seen, not followed.
    let name = dir.file_name().ok_or_else(|| BundleError::NoName {
        path: dir.to_path_buf(),
    })?;
    let (parent, target) = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => (p, p.join(name)),
        _ => (Path::new("."), PathBuf::from(name)),
    };
    let existing = examine(&target)?;
    // The directories above DIR are the user's path, made as `mkdir -p` would.
    fs::create_dir_all(parent).map_err(io_error("creating", parent))?;
    let staging = Staging::new(parent, name)?;
    let modes = match &existing {
        Existing::Absent => BTreeMap::new(),
        Existing::Empty { mode } => mode
            .map(|m| BTreeMap::from([(PathBuf::new(), m)]))
            .unwrap_or_default(),
        Existing::Bundle { modes } => modes.clone(),
    };
    stage(staging.path(), files, &modes, write)?;
    let old = match existing {
        // Renaming over an empty directory replaces it (POSIX rename(2)); one filled meanwhile fails the rename
        // and is left as it is.
        Existing::Absent | Existing::Empty { .. } => {
            fs::rename(staging.path(), &target).map_err(io_error("publishing", &target))?;
            staging.disarm();
            None
        }
        Existing::Bundle { .. } => Some(swap(staging, &target, parent, name)?),
    };
    sync_dir(parent);
    if let Some(old) = old {
        discard(&old);
    }
    Ok(())
}

/// A directory removed with everything in it when dropped, unless disarmed: the staging directory until it is
/// published, then the old tree.
struct Staging(Option<PathBuf>);

impl Staging {
    /// A new, empty, private directory in `parent`, named after the bundle: `.NAME.<random>.tmp`.
    fn new(parent: &Path, name: &OsStr) -> Result<Staging, BundleError> {
        let path = temp_dir(parent, name, ".tmp")?;
        Ok(Staging(Some(path)))
    }

    fn path(&self) -> &Path {
        self.0.as_deref().unwrap_or(Path::new(""))
    }

    fn disarm(mut self) -> PathBuf {
        self.0.take().unwrap_or_default()
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = fs::remove_dir_all(p);
        }
    }
}

/// Creates a new private directory `.NAME.<random>SUFFIX` in `parent`, exclusively, and returns its path.
fn temp_dir(parent: &Path, name: &OsStr, suffix: &str) -> Result<PathBuf, BundleError> {
    let prefix = super::output::temp_prefix(&name.to_string_lossy());
    let mut b = tempfile::Builder::new();
    b.prefix(&prefix)
        .suffix(suffix)
        .rand_bytes(TEMP_RANDOM_CHARS);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        b.permissions(fs::Permissions::from_mode(STAGING_MODE));
    }
    b.tempdir_in(parent)
        .map(tempfile::TempDir::keep)
        .map_err(io_error("creating a staging directory in", parent))
}

/// Looks at `target` without following it: absent, an empty directory, or a bundle this tool wrote; anything
/// else is refused naming what is in the way.
fn examine(target: &Path) -> Result<Existing, BundleError> {
    let meta = match fs::symlink_metadata(target) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Existing::Absent),
        Err(e) => return Err(io_error("examining", target)(e)),
    };
    if !meta.file_type().is_dir() {
        return Err(BundleError::NotDirectory {
            path: target.to_path_buf(),
            what: if meta.file_type().is_file() {
                "a regular file"
            } else {
                crate::input::describe_file_type(&meta.file_type())
            },
        });
    }
    let foreign = |found: String| BundleError::Foreign {
        path: target.to_path_buf(),
        found,
    };
    let mut names = Vec::new();
    let mut marked = false;
    for e in fs::read_dir(target).map_err(io_error("reading", target))? {
        let name = e.map_err(io_error("reading", target))?.file_name();
        marked |= name == MARKER;
        if names.len() < SHOWN_ENTRIES {
            names.push(name);
        }
        if marked && names.len() >= SHOWN_ENTRIES {
            break;
        }
    }
    if names.is_empty() {
        return Ok(Existing::Empty {
            mode: permission_bits(&meta),
        });
    }
    if !marked {
        names.sort();
        let shown: Vec<String> = names
            .iter()
            .map(|n| n.to_string_lossy().into_owned())
            .collect();
        return Err(foreign(format!(
            "not empty and not a bundle (no {MARKER}); it holds {}{}",
            shown.join(", "),
            if names.len() >= SHOWN_ENTRIES {
                ", ..."
            } else {
                ""
            }
        )));
    }
    let listed = read_marker(target).map_err(|why| foreign(format!("{MARKER}: {why}")))?;
    let mut dirs: BTreeSet<&Path> = BTreeSet::new();
    for f in &listed {
        dirs.extend(f.ancestors().skip(1));
    }
    // Walk every entry without following links: each must be a directory on the way to a listed file, a listed
    // file, or the marker. No recursion; the walk visits only listed paths, so the marker's bounds bound it.
    let mut modes = BTreeMap::new();
    if let Some(m) = permission_bits(&meta) {
        modes.insert(PathBuf::new(), m);
    }
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        let here = target.join(&rel);
        for e in fs::read_dir(&here).map_err(io_error("reading", &here))? {
            let e = e.map_err(io_error("reading", &here))?;
            let child = rel.join(e.file_name());
            let path = target.join(&child);
            let ft = e.file_type().map_err(io_error("examining", &path))?;
            let shown = child.display();
            if ft.is_dir() {
                if !dirs.contains(child.as_path()) {
                    return Err(foreign(format!(
                        "{shown}/ is a directory no file in its {MARKER} is in, so optimizer did not make it"
                    )));
                }
                todo.push(child.clone());
            } else if ft.is_file() {
                if !listed.contains(&child) && child != Path::new(MARKER) {
                    return Err(foreign(format!(
                        "{shown} is not listed in its {MARKER}, so optimizer did not write it"
                    )));
                }
            } else {
                return Err(foreign(format!(
                    "{shown} is {}, which optimizer never writes (it is neither followed nor removed)",
                    crate::input::describe_file_type(&ft)
                )));
            }
            let meta = fs::symlink_metadata(&path).map_err(io_error("examining", &path))?;
            if let Some(m) = permission_bits(&meta) {
                modes.insert(child, m);
            }
        }
    }
    Ok(Existing::Bundle { modes })
}

/// The files a marker lists, or why it is not a marker this tool wrote.
fn read_marker(dir: &Path) -> Result<BTreeSet<PathBuf>, String> {
    let path = dir.join(MARKER);
    let text = crate::input::read_text_bounded(&path, MAX_MARKER_BYTES, "bundle marker")
        .map_err(|e| e.to_string())?;
    let mut lines = text.lines();
    if lines.next() != Some(MARKER_HEADER) {
        return Err("not a marker optimizer wrote (its first line differs)".to_string());
    }
    let mut listed = BTreeSet::new();
    for line in lines {
        let p = Path::new(line);
        if line.is_empty() || !p.components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(format!("lists {line:?}, not a plain relative path"));
        }
        if listed.len() >= MAX_LISTED_FILES {
            return Err(format!("lists more than {MAX_LISTED_FILES} files"));
        }
        listed.insert(p.to_path_buf());
    }
    Ok(listed)
}

/// The marker's text for `files`.
fn marker_text(files: &BTreeMap<PathBuf, String>) -> String {
    let mut t = String::from(MARKER_HEADER);
    t.push('\n');
    for rel in files.keys() {
        let parts: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        t.push_str(&parts.join("/"));
        t.push('\n');
    }
    t
}

/// Builds the bundle in the (new, private) `root`: subdirectories by `mkdir`, files created exclusively,
/// written through `write` and flushed to disk, the marker last; permission bits from `modes` where the old
/// bundle had the entry. The root gets its final mode at the end.
fn stage(
    root: &Path,
    files: &BTreeMap<PathBuf, String>,
    modes: &BTreeMap<PathBuf, u32>,
    write: Writer<'_>,
) -> Result<(), BundleError> {
    let fresh_dir_mode = fresh_dir_mode(root)?;
    // Directories in the order they were made, outermost first.
    let mut made: Vec<PathBuf> = Vec::new();
    let mut seen: BTreeSet<PathBuf> = BTreeSet::new();
    let marker = marker_text(files);
    for (rel, text) in files
        .iter()
        .map(|(r, t)| (r.as_path(), t.as_str()))
        .chain([(Path::new(MARKER), marker.as_str())])
    {
        let mut dir = PathBuf::new();
        for c in rel.parent().into_iter().flat_map(Path::components) {
            dir.push(c);
            if seen.insert(dir.clone()) {
                let p = root.join(&dir);
                fs::create_dir(&p).map_err(io_error("creating", &p))?;
                made.push(dir.clone());
            }
        }
        let p = root.join(rel);
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&p)
            .map_err(io_error("creating", &p))?;
        write(&mut f, text.as_bytes()).map_err(io_error("writing", &p))?;
        if let Some(&m) = modes.get(rel) {
            set_mode(&p, m)?;
        }
        f.sync_all().map_err(io_error("writing", &p))?;
    }
    for d in made.iter().rev() {
        let p = root.join(d);
        if let Some(&m) = modes.get(d) {
            set_mode(&p, m)?;
        }
        sync_dir(&p);
    }
    if let Some(m) = modes.get(Path::new("")).copied().or(fresh_dir_mode) {
        set_mode(root, m)?;
    }
    sync_dir(root);
    Ok(())
}

/// The permission bits a directory created here gets (0777 less the umask), found by creating one: the umask
/// cannot be read without changing it.
fn fresh_dir_mode(root: &Path) -> Result<Option<u32>, BundleError> {
    let probe = root.join(".mode-probe");
    fs::create_dir(&probe).map_err(io_error("creating", &probe))?;
    let meta = fs::symlink_metadata(&probe);
    fs::remove_dir(&probe).map_err(io_error("removing", &probe))?;
    Ok(permission_bits(
        &meta.map_err(io_error("examining", &probe))?,
    ))
}

#[cfg(unix)]
fn permission_bits(meta: &fs::Metadata) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    Some(meta.permissions().mode() & PERMISSION_BITS)
}

#[cfg(not(unix))]
fn permission_bits(_meta: &fs::Metadata) -> Option<u32> {
    None
}

#[cfg(unix)]
fn set_mode(path: &Path, mode: u32) -> Result<(), BundleError> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
        .map_err(io_error("setting the permissions of", path))
}

#[cfg(not(unix))]
fn set_mode(_path: &Path, _mode: u32) -> Result<(), BundleError> {
    Ok(())
}

/// Makes the entries of `dir` durable; some filesystems refuse to sync a directory, which loses nothing a
/// rename has not already made visible.
fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

/// Replaces the bundle at `target` with the staged one; returns where the old tree now is.
fn swap(
    staging: Staging,
    target: &Path,
    parent: &Path,
    name: &OsStr,
) -> Result<PathBuf, BundleError> {
    match exchange(staging.path(), target) {
        // The old tree is now at the staging name.
        Ok(()) => Ok(staging.disarm()),
        Err(e) if e.kind() == io::ErrorKind::Unsupported => {
            set_aside(staging, target, parent, name)
        }
        Err(e) => Err(io_error("replacing", target)(e)),
    }
}

/// Without an atomic exchange: DIR renamed onto a new empty directory beside it, the staged bundle renamed into
/// place, DIR put back if that fails.
fn set_aside(
    staging: Staging,
    target: &Path,
    parent: &Path,
    name: &OsStr,
) -> Result<PathBuf, BundleError> {
    let aside = temp_dir(parent, name, ".old")?;
    if let Err(e) = fs::rename(target, &aside) {
        let _ = fs::remove_dir(&aside);
        return Err(io_error("moving aside", target)(e));
    }
    if let Err(e) = fs::rename(staging.path(), target) {
        let _ = fs::rename(&aside, target);
        return Err(io_error("publishing", target)(e));
    }
    staging.disarm();
    Ok(aside)
}

/// Swaps two directories atomically (`renameat2(RENAME_EXCHANGE)`, Linux 3.15 and later); `Unsupported` where the
/// system or the filesystem cannot.
#[cfg(all(target_os = "linux", any(target_env = "gnu", target_env = "musl")))]
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let a = std::ffi::CString::new(a.as_os_str().as_bytes())?;
    let b = std::ffi::CString::new(b.as_os_str().as_bytes())?;
    // SAFETY: `a` and `b` are valid NUL-terminated paths for the duration of the call; with AT_FDCWD they are
    // resolved as rename(2) resolves them.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        // EINVAL: the filesystem has no exchange; ENOSYS: the kernel has no renameat2.
        Some(libc::EINVAL | libc::ENOSYS) => Err(io::Error::new(io::ErrorKind::Unsupported, e)),
        _ => Err(e),
    }
}

#[cfg(not(all(target_os = "linux", any(target_env = "gnu", target_env = "musl"))))]
fn exchange(_a: &Path, _b: &Path) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// Removes the replaced bundle once it is checked again to hold only what this tool wrote; otherwise (an entry
/// added between the first check and the swap) keeps it, with a warning naming where.
fn discard(old: &Path) {
    let warn = |why: String| {
        let _ = writeln!(
            io::stderr(),
            "warning: the previous bundle was kept at {}: {why}",
            old.display()
        );
    };
    match examine(old) {
        Ok(Existing::Bundle { .. } | Existing::Empty { .. }) => {
            if let Err(e) = fs::remove_dir_all(old) {
                warn(format!("removing it failed: {e}"));
            }
        }
        Ok(Existing::Absent) => {}
        Err(e) => warn(e.to_string()),
    }
}

#[cfg(test)]
mod tests;
