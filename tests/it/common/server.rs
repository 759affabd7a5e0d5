//! Starting the pinned llama-server in a test: a free loopback port and its `/health` status.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Per-request socket timeout, so a server that accepts and never answers cannot hang a poll.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a server may take to load a fixture model and answer /health: the fixtures are a few MiB, so a
/// minute is generous even on a loaded 2-core machine, and short enough that a hung server fails the test.
pub(crate) const START_DEADLINE: Duration = Duration::from_secs(60);
/// Between /health polls.
const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// A llama-server this test started, its stderr in a temporary log; only this child, by its handle, is stopped.
pub(crate) struct Server {
    child: Child,
    log: tempfile::NamedTempFile,
}

impl Server {
    /// Starts `server` with `args` (already pointed at loopback `port`) and polls /health until it answers 200:
    /// `Ok` with the time it took, else why not (the server exited first, or no 200 within [`START_DEADLINE`]).
    pub(crate) fn start(
        server: &OsStr,
        args: &[String],
        port: u16,
    ) -> (Self, Result<Duration, String>) {
        let log = tempfile::NamedTempFile::new().unwrap();
        let mut child = Command::new(server)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log.reopen().unwrap())
            .spawn()
            .unwrap();
        let started = Instant::now();
        let outcome = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Err(format!("exited with {status} before answering /health"));
            }
            if health(port) == Some(200) {
                break Ok(started.elapsed());
            }
            if started.elapsed() > START_DEADLINE {
                break Err(format!("no 200 from /health within {START_DEADLINE:?}"));
            }
            std::thread::sleep(POLL_INTERVAL);
        };
        (Self { child, log }, outcome)
    }

    /// Stops the server and returns what it logged.
    pub(crate) fn stop(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }
}

/// A port the kernel just handed out on loopback (released before the server binds it).
pub(crate) fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The status code of `GET /health`, or None when nothing answers.
pub(crate) fn health(port: u16) -> Option<u16> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut s = TcpStream::connect_timeout(&addr, REQUEST_TIMEOUT).ok()?;
    s.set_read_timeout(Some(REQUEST_TIMEOUT)).ok()?;
    s.set_write_timeout(Some(REQUEST_TIMEOUT)).ok()?;
    s.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut head = [0u8; 64];
    let n = s.read(&mut head).ok()?;
    let line = std::str::from_utf8(&head[..n]).ok()?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The plan's llama-server arguments (after the program name) as a test runs them: `--host 0.0.0.0 --port 8080`
/// rewritten to loopback and `port` (no other run holds it), and `-t` to this machine's parallelism (threads
/// change no buffer's size and no flag's validity; the fixture host's count only slows the warm-up on a small
/// runner). A missing flag is an error naming it.
pub(crate) fn loopback_args(argv: &[String], port: u16) -> Result<Vec<String>, String> {
    let mut args = argv[1..].to_vec();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    for (flag, value) in [
        ("--host", "127.0.0.1".to_string()),
        ("--port", port.to_string()),
        ("-t", threads.to_string()),
    ] {
        let i = args
            .iter()
            .position(|a| a == flag)
            .ok_or_else(|| format!("no {flag} in {argv:?}"))?;
        args[i + 1] = value;
    }
    Ok(args)
}
