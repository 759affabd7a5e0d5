//! Opening input files: regular files only, read with a bound. Every reader of a file a user names (model,
//! shard, `config.json`, index, inventory, profile) opens it here, so a FIFO cannot hang a command and
//! `/dev/zero` cannot stream into memory forever.
//!
//! A file is opened with `O_NONBLOCK` (opening a FIFO that has no writer would otherwise block), checked with
//! `fstat` on the open descriptor (no window between the check and the use), refused unless it is a regular
//! file, and only then switched back to blocking reads. Symbolic links to regular files are followed: model
//! caches (Hugging Face's among them) are made of links.
//!
//! Errors are `std::io::Error`s, so every reader's existing `Io` variant carries them; the defects (not a
//! regular file, larger than its bound, not UTF-8 where text is expected) are typed payloads that [`is_invalid_input`] recognises, and the CLI
//! maps them to exit code 4 (invalid input file) while other I/O errors stay runtime errors (exit 1).
//! May touch: the file named, read-only.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// The file exists but is not a regular file (a FIFO, a device, a socket, a directory).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}, not a regular file; inputs are read from regular files only")]
pub struct NotRegular {
    /// What the file is: "a FIFO (named pipe)", "a character device", ...
    pub what: &'static str,
}

/// The file is larger than the bound for its kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("larger than the {limit}-byte limit for {kind} (at least {len} bytes)")]
pub(crate) struct TooLarge {
    /// What kind of file was expected ("an inventory", "a profile").
    pub kind: &'static str,
    /// Bytes found (at least; a file that grows is not read to its end).
    pub len: u64,
    pub limit: u64,
}

/// The file is not UTF-8 text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not UTF-8 text: {0}")]
pub(crate) struct NotText(pub std::str::Utf8Error);

/// True when `e` says the file itself is unfit (not a regular file, too large), as opposed to an I/O failure:
/// the CLI's exit code 4 rather than 1.
pub fn is_invalid_input(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| {
        inner.is::<NotRegular>() || inner.is::<TooLarge>() || inner.is::<NotText>()
    })
}

/// What a file type is, in words for a message ("a FIFO (named pipe)").
pub fn describe_file_type(ft: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if ft.is_char_device() {
            return "a character device";
        }
        if ft.is_block_device() {
            return "a block device";
        }
        if ft.is_socket() {
            return "a socket";
        }
    }
    if ft.is_dir() {
        "a directory"
    } else if ft.is_symlink() {
        "a symbolic link"
    } else {
        "a special file"
    }
}

fn not_regular(ft: &std::fs::FileType) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        NotRegular {
            what: describe_file_type(ft),
        },
    )
}

/// Opens `path` for reading if it is a regular file (following symbolic links); never blocks on a FIFO.
pub fn open_regular(path: &Path) -> io::Result<File> {
    let file = open_nonblocking(path)?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(not_regular(&meta.file_type()));
    }
    set_blocking(&file)?;
    Ok(file)
}

#[cfg(unix)]
fn open_nonblocking(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        // O_NOCTTY: opening a terminal device must not make it this process's controlling terminal.
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| {
            // Opening a socket fails with ENXIO ("No such device or address"); say what the file is instead.
            match std::fs::metadata(path) {
                Ok(m) if !m.file_type().is_file() => not_regular(&m.file_type()),
                _ => e,
            }
        })
}

#[cfg(not(unix))]
fn open_nonblocking(path: &Path) -> io::Result<File> {
    File::open(path)
}

/// Clears `O_NONBLOCK`, so reads of the (regular) file behave as usual.
#[cfg(unix)]
fn set_blocking(file: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: `fd` is a valid descriptor owned by `file` for the duration of both calls; F_GETFL and F_SETFL
    // read and write only the descriptor's status flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(not(unix))]
fn set_blocking(_file: &File) -> io::Result<()> {
    Ok(())
}

/// Reads a whole regular file of at most `limit` bytes; `kind` names what the file should be, for the message.
/// The bound is checked against the size the file reports and again while reading (a file that grows).
pub(crate) fn read_bounded(path: &Path, limit: u64, kind: &'static str) -> io::Result<Vec<u8>> {
    let file = open_regular(path)?;
    let too_large = |len| io::Error::new(io::ErrorKind::InvalidData, TooLarge { kind, len, limit });
    let len = file.metadata()?.len();
    if len > limit {
        return Err(too_large(len));
    }
    let capacity = usize::try_from(len).map_err(|_| too_large(len))?;
    let mut buf = Vec::with_capacity(capacity);
    file.take(limit.saturating_add(1)).read_to_end(&mut buf)?;
    if buf.len() as u64 > limit {
        return Err(too_large(buf.len() as u64));
    }
    Ok(buf)
}

/// [`read_bounded`] for UTF-8 text.
pub fn read_text_bounded(path: &Path, limit: u64, kind: &'static str) -> io::Result<String> {
    String::from_utf8(read_bounded(path, limit, kind)?)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, NotText(e.utf8_error())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_files_open_and_read_within_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.yaml");
        std::fs::write(&p, "abc").unwrap();
        assert_eq!(read_bounded(&p, 3, "a test file").unwrap(), b"abc");
        let e = read_bounded(&p, 2, "a test file").unwrap_err();
        assert!(is_invalid_input(&e), "{e}");
        assert!(
            e.to_string()
                .contains("2-byte limit for a test file (at least 3 bytes)"),
            "{e}"
        );
    }

    #[test]
    fn directories_and_devices_are_not_regular_files() {
        let dir = tempfile::tempdir().unwrap();
        let e = open_regular(dir.path()).unwrap_err();
        assert!(is_invalid_input(&e));
        assert!(e.to_string().contains("a directory"), "{e}");
        #[cfg(unix)]
        {
            let e = read_bounded(Path::new("/dev/zero"), 1 << 20, "a test file").unwrap_err();
            assert!(e.to_string().contains("a character device"), "{e}");
        }
    }

    /// A FIFO without a writer: opened and refused at once. The open runs on a thread with a deadline, so a
    /// regression fails this test instead of hanging the suite.
    #[cfg(unix)]
    #[test]
    fn a_fifo_is_refused_without_blocking() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("model.gguf");
        let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(read_bounded(&p, 1 << 20, "a test file").map_err(|e| e.to_string()));
        });
        let result = rx
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("opening a FIFO blocked");
        let e = result.unwrap_err();
        assert!(e.contains("a FIFO (named pipe), not a regular file"), "{e}");
    }

    #[test]
    fn missing_files_stay_not_found() {
        let e = open_regular(Path::new("/nonexistent/x")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(!is_invalid_input(&e));
    }
}
