//! Output files (`-o FILE`): every command that writes a file writes it here, atomically and safely.
//!
//! The document goes to a temporary file created exclusively by `tempfile` (`O_CREAT | O_EXCL`, which also
//! refuses a symbolic link at the name; an unpredictable name, retried on collision) in the target's
//! directory, so a link planted at a guessable name cannot redirect the write (the old `.NAME.tmp.PID` could
//! make a run as root overwrite any file). It is
//! written, given the existing target's permission bits (and owner, where allowed), flushed to disk, and
//! renamed over the target; on any failure the temporary file is removed and the target is untouched.
//!
//! Only a regular file (or nothing) is replaced: a device, FIFO, socket, directory or symbolic link at the
//! target is refused with exit code 2 (a usage error: the command line names something that is not a file
//! to write; `> /dev/null` is the shell's job), before anything is created. I/O failures (a read-only
//! directory, a full disk) are exit code 1. Trade-off: the target is checked again just before the rename,
//! but a file swapped in between that check and the rename is replaced, not written through, so the window
//! can only lose the swapped-in entry, never write into a device or a link's target.
//!
//! A regular file with more than one hard link is refused too (exit 2, naming the link count): the rename puts a
//! new file at this name only, so the other names would silently keep the old plan. Trade-off: writing into the
//! existing file instead would keep the links together, but a failure half-way (a full disk, a kill) would then
//! leave a partial document under every name; refusing loses nothing, and `> FILE` in the shell writes in place
//! for whoever wants exactly that.
//!
//! `resolve -o DIR/` (a bundle of files) is written by `bundle.rs`, which stages and publishes a whole directory.

use std::fs::File;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use super::{Failure, exit};

/// Random characters in the temporary name (`tempfile`'s alphabet of 62): about 95 bits, so a name cannot be
/// guessed ahead of the run.
const TEMP_RANDOM_CHARS: usize = 16;
/// Bytes of the target's name kept in the temporary name: with the prefix dot and the `.<16 random>.tmp` suffix
/// (22 bytes) the name stays under the 255-byte NAME_MAX of common filesystems.
const MAX_TEMP_STEM_BYTES: usize = 200;

/// Why an output file was not written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("{path}: {what}; -o replaces regular files only", path = path.display())]
    NotRegular { path: PathBuf, what: &'static str },
    #[error(
        "{path}: has {links} hard links; -o would put a new file at this name only, and the file's other names \
         would keep the old content",
        path = path.display()
    )]
    HardLinked { path: PathBuf, links: u64 },
    #[error("{path}: not a file name", path = path.display())]
    NoFileName { path: PathBuf },
    #[error("writing {path}", path = path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Writes `text` to `path` atomically (see the module doc), mapping failures to exit codes: 2 when the target
/// is not a regular file or has other hard links, 1 for I/O errors.
pub fn write_file(path: &Path, text: &str) -> Result<(), Failure> {
    write_atomic(path, text.as_bytes()).map_err(|e| match e {
        WriteError::NotRegular { .. } | WriteError::NoFileName { .. } => Failure::new(exit::USAGE, e)
            .hint("give -o the path of a regular file (it is created or replaced), or omit -o to write to stdout"),
        WriteError::HardLinked { .. } => Failure::new(exit::USAGE, e).hint(
            "give -o a path with one link, or redirect stdout (`> FILE` writes into the file itself, links and all)",
        ),
        WriteError::Io { .. } => Failure::new(exit::RUNTIME, e),
    })
}

/// Replaces `path` with `bytes` atomically: an exclusive temporary file in the same directory, the existing
/// file's mode kept, `fsync`, rename. Refuses to replace anything but a regular file with one link.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    let io = |source| WriteError::Io {
        path: path.to_path_buf(),
        source,
    };
    let existing = regular_or_absent(path)?;
    let name = path
        .file_name()
        .filter(|_| !path.as_os_str().is_empty())
        .ok_or_else(|| WriteError::NoFileName {
            path: path.to_path_buf(),
        })?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let prefix = temp_prefix(&name.to_string_lossy());
    let mut tmp = temp_builder(&prefix, existing.is_none())
        .tempfile_in(dir)
        .map_err(io)?;
    let written = (|| {
        tmp.write_all(bytes)?;
        if let Some(meta) = &existing {
            keep_owner_and_mode(tmp.as_file(), meta)?;
        }
        tmp.as_file().sync_all()?;
        // The target may have been swapped since the first look; a non-regular file is still refused.
        if let Err(e) = regular_or_absent(path) {
            return Err(io::Error::other(e.to_string()));
        }
        Ok(())
    })();
    // On any failure the temporary file is removed when `tmp` (or the error that holds it) is dropped.
    written.map_err(io)?;
    tmp.persist(path).map_err(|e| io(e.error))?;
    // Make the rename itself durable; some filesystems refuse to sync a directory, which loses nothing that the
    // rename has not already made visible.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// The target's metadata when it is a regular file with one link, `None` when nothing is there; anything else is
/// refused. A symbolic link is refused rather than followed or replaced: either would surprise someone.
fn regular_or_absent(path: &Path) -> Result<Option<std::fs::Metadata>, WriteError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_file() => match link_count(&m) {
            links if links > 1 => Err(WriteError::HardLinked {
                path: path.to_path_buf(),
                links,
            }),
            _ => Ok(Some(m)),
        },
        Ok(m) => Err(WriteError::NotRegular {
            path: path.to_path_buf(),
            what: crate::input::describe_file_type(&m.file_type()),
        }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(WriteError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Names the file has (hard links); 1 where the system does not count them.
#[cfg(unix)]
fn link_count(m: &std::fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt;
    m.nlink()
}

#[cfg(not(unix))]
fn link_count(_m: &std::fs::Metadata) -> u64 {
    1
}

/// How the temporary file for a target is created: `PREFIX<random>.tmp` ([`temp_prefix`]), exclusively. A new target
/// gets the usual 0666 less the umask (what creating it directly would give); a replaced one starts private
/// (0600) and gets the old file's mode once written.
fn temp_builder(prefix: &str, new_target: bool) -> tempfile::Builder<'_, 'static> {
    let mut b = tempfile::Builder::new();
    b.prefix(prefix)
        .suffix(".tmp")
        .rand_bytes(TEMP_RANDOM_CHARS);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        b.permissions(std::fs::Permissions::from_mode(if new_target {
            0o666
        } else {
            0o600
        }));
    }
    #[cfg(not(unix))]
    let _ = new_target;
    b
}

/// `.NAME.`, the temporary name's prefix, with NAME cut to [`MAX_TEMP_STEM_BYTES`] (also the bundle's staging
/// directory's).
pub(super) fn temp_prefix(name: &str) -> String {
    let mut stem = name;
    while stem.len() > MAX_TEMP_STEM_BYTES {
        let mut cut = MAX_TEMP_STEM_BYTES;
        while !stem.is_char_boundary(cut) {
            cut -= 1;
        }
        stem = &stem[..cut];
    }
    format!(".{stem}.")
}

/// Gives the new file the replaced file's permission bits and, where the system allows (as root, or when it is
/// already ours), its owner. Set-id and sticky bits are not copied onto content this process wrote.
fn keep_owner_and_mode(file: &File, old: &std::fs::Metadata) -> io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let new = file.metadata()?;
        if (new.uid(), new.gid()) != (old.uid(), old.gid()) {
            // Not permitted for an ordinary user giving a file away: the file is then the writer's, as with
            // any editor's atomic save.
            let _ = std::os::unix::fs::fchown(file, Some(old.uid()), Some(old.gid()));
        }
        file.set_permissions(std::fs::Permissions::from_mode(old.mode() & 0o777))
    }
    #[cfg(not(unix))]
    {
        file.set_permissions(old.permissions())
    }
}

/// Where `-o` sends a document and in which format: `-o -` is stdout; a `.json` file gets JSON and any other
/// destination YAML, unless `--format` names one.
pub fn destination(
    output: Option<PathBuf>,
    format: Option<super::OutputFormat>,
) -> (Option<PathBuf>, super::OutputFormat) {
    use super::OutputFormat;
    let output = output.filter(|p| p.as_os_str() != "-");
    let format = format.unwrap_or_else(|| match &output {
        Some(p)
            if p.extension()
                .is_some_and(|x| x.eq_ignore_ascii_case("json")) =>
        {
            OutputFormat::Json
        }
        _ => OutputFormat::Yaml,
    });
    (output, format)
}

/// `1536` → `1.50 KiB`, binary units as llama.cpp prints them.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_replaces_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("plan.yaml");
        write_atomic(&p, b"one\n").unwrap();
        write_atomic(&p, b"two\n").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two\n");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("plan.yaml")]);
    }

    #[test]
    fn temporary_names_differ_and_stay_under_name_max() {
        let dir = tempfile::tempdir().unwrap();
        let a = temp_builder(&temp_prefix("x"), true)
            .tempfile_in(dir.path())
            .unwrap();
        let b = temp_builder(&temp_prefix("x"), true)
            .tempfile_in(dir.path())
            .unwrap();
        assert_ne!(a.path(), b.path());
        let long = "n".repeat(300);
        let c = temp_builder(&temp_prefix(&long), true)
            .tempfile_in(dir.path())
            .unwrap();
        assert!(c.path().file_name().unwrap().len() <= 255);
    }

    /// A link (or any file) already at the temporary name is never opened or followed. With no random part
    /// the name is known, so the test can plant links there: creation fails instead of writing through them.
    #[cfg(unix)]
    #[test]
    fn a_link_at_the_temporary_name_is_refused_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep me\n").unwrap();
        let planted = dir.path().join(".x..tmp");
        std::os::unix::fs::symlink(&victim, &planted).unwrap();
        let e = temp_builder(&temp_prefix("x"), true)
            .rand_bytes(0)
            .tempfile_in(dir.path())
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me\n");
        std::fs::remove_file(&planted).unwrap();
        std::os::unix::fs::symlink("/nonexistent-optimizer-target", &planted).unwrap();
        let e = temp_builder(&temp_prefix("x"), true)
            .rand_bytes(0)
            .tempfile_in(dir.path())
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert!(!Path::new("/nonexistent-optimizer-target").exists());
    }

    #[test]
    fn dash_is_stdout_and_a_json_file_gets_json_unless_the_format_is_named() {
        use crate::cli::OutputFormat::{Json, Table, Yaml};
        let p = |s: &str| Some(PathBuf::from(s));
        assert_eq!(destination(p("-"), None), (None, Yaml));
        assert_eq!(destination(p("-"), Some(Json)), (None, Json));
        assert_eq!(destination(None, None), (None, Yaml));
        assert_eq!(destination(p("plan.json"), None), (p("plan.json"), Json));
        assert_eq!(
            destination(p("d/PLAN.JSON"), None),
            (p("d/PLAN.JSON"), Json)
        );
        assert_eq!(
            destination(p("plan.json"), Some(Yaml)),
            (p("plan.json"), Yaml)
        );
        assert_eq!(destination(p("plan.yaml"), None), (p("plan.yaml"), Yaml));
        assert_eq!(
            destination(p("plan.txt"), Some(Table)),
            (p("plan.txt"), Table)
        );
    }

    /// Renaming over one name of a hard-linked file would split it from its other names: refused, both kept.
    #[cfg(unix)]
    #[test]
    fn a_hard_linked_target_is_refused_and_left_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (p, q) = (dir.path().join("plan.yaml"), dir.path().join("copy.yaml"));
        std::fs::write(&p, "old\n").unwrap();
        std::fs::hard_link(&p, &q).unwrap();
        let e = write_atomic(&p, b"new\n").unwrap_err();
        assert!(matches!(e, WriteError::HardLinked { links: 2, .. }), "{e}");
        assert_eq!(std::fs::read(&p).unwrap(), b"old\n");
        assert_eq!(std::fs::read(&q).unwrap(), b"old\n");
        assert_eq!(write_file(&p, "new\n").unwrap_err().code, exit::USAGE);
        std::fs::remove_file(&q).unwrap();
        write_atomic(&p, b"new\n").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new\n");
    }

    #[test]
    fn an_empty_path_is_not_a_file_name() {
        assert!(matches!(
            write_atomic(Path::new(""), b"x"),
            Err(WriteError::NoFileName { .. })
        ));
    }
}
