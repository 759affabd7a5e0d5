//! The HTTP/1.1 client under the benchmark: connecting and sending one request, reads bounded by an idle
//! timeout and the request's deadline, the response head, the body de-framed (chunked or Content-Length) and
//! capped, server-sent events, and the benchmark errors I/O failures map to.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::{BenchError, Config, EXCERPT_CHARS};

/// Largest response head (status line and headers): servers send a few hundred bytes; 64 KiB covers any proxy.
const MAX_HEAD_BYTES: usize = 64 << 10;
/// Most headers in one response head: servers send about ten.
const MAX_HEADERS: usize = 1024;
/// Largest line of a response (one SSE line, a chunk-size line): a streamed chunk with timings and usage is under
/// 1 KiB; 4 MiB leaves room for per-token log-probabilities without letting a server exhaust memory.
const MAX_LINE_BYTES: usize = 4 << 20;
/// Largest body one response may stream: `MAX_NEW_TOKENS` chunks of about 300 bytes each fit many times over.
const MAX_BODY_BYTES: u64 = 1 << 30;
/// Largest body read from a non-200 response or from `/v1/models`: an error message or a model list.
const MAX_SMALL_BODY_BYTES: u64 = 1 << 20;

/// Connects, sends one request, reads the response head.
pub(super) fn exchange(
    cfg: &Config,
    method: &str,
    path: &str,
    body: &[u8],
    limit: Duration,
) -> Result<(Head, BufReader<Conn>), BenchError> {
    // Arithmetic on `Instant` saturates here: `limit` is at most two days (`Config::request_limit`).
    let start = Instant::now();
    let deadline = start.checked_add(limit).unwrap_or(start);
    let ep = &cfg.endpoint;
    let url = ep.full(path);
    let addrs: Vec<_> = (ep.host.as_str(), ep.port)
        .to_socket_addrs()
        .map_err(|source| BenchError::Resolve {
            url: url.clone(),
            host: ep.host.clone(),
            source,
        })?
        .collect();
    let mut last = None;
    let mut stream = None;
    for a in &addrs {
        match TcpStream::connect_timeout(a, cfg.timeouts.connect) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = Some((a.to_string(), e)),
        }
    }
    let stream = match (stream, last) {
        (Some(s), _) => s,
        (None, Some((addr, source))) => {
            return Err(BenchError::Connect { url, addr, source });
        }
        (None, None) => {
            return Err(BenchError::Resolve {
                url,
                host: ep.host.clone(),
                source: io::Error::new(io::ErrorKind::NotFound, "no address"),
            });
        }
    };
    let io_err = |source| BenchError::Io {
        url: url.clone(),
        source,
    };
    stream.set_nodelay(true).map_err(io_err)?;
    stream
        .set_write_timeout(Some(cfg.timeouts.idle))
        .map_err(io_err)?;
    let host = if ep.host.contains(':') {
        format!("[{}]:{}", ep.host, ep.port)
    } else {
        format!("{}:{}", ep.host, ep.port)
    };
    let mut req = format!(
        "{method} {} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: optimizer-bench/{}\r\nAccept: text/event-stream, application/json\r\nConnection: close\r\n",
        ep.target(path),
        env!("CARGO_PKG_VERSION")
    );
    if method == "POST" {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    req.push_str("\r\n");
    let mut w = &stream;
    w.write_all(req.as_bytes())
        .and_then(|()| w.write_all(body))
        .and_then(|()| w.flush())
        .map_err(|e| map_io(e, &url, "sending the request", limit, 0))?;
    let mut reader = BufReader::with_capacity(
        64 << 10,
        Conn {
            stream,
            idle: cfg.timeouts.idle,
            deadline,
        },
    );
    let head = read_head(&mut reader)
        .map_err(|e| map_io(e, &url, "waiting for the response", limit, 0))?;
    Ok((head, reader))
}

/// Why a read stopped waiting.
#[derive(Debug)]
enum Stall {
    Idle(Duration),
    Deadline,
}

impl std::fmt::Display for Stall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stall::Idle(d) => write!(f, "no byte for {} s", d.as_secs_f64()),
            Stall::Deadline => f.write_str("past the request's deadline"),
        }
    }
}

impl std::error::Error for Stall {}

/// A connection whose every read waits at most `idle`, and never past `deadline`.
pub(super) struct Conn {
    stream: TcpStream,
    idle: Duration,
    deadline: Instant,
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, Stall::Deadline));
        }
        let wait = self.idle.min(left);
        self.stream.set_read_timeout(Some(wait))?;
        match self.stream.read(buf) {
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                let stall = if wait < self.idle {
                    Stall::Deadline
                } else {
                    Stall::Idle(wait)
                };
                Err(io::Error::new(io::ErrorKind::TimedOut, stall))
            }
            r => r,
        }
    }
}

/// An I/O error as a benchmark error: a stall, the deadline, a malformed or truncated response, or the network.
pub(super) fn map_io(
    e: io::Error,
    url: &str,
    what: &'static str,
    limit: Duration,
    events: u64,
) -> BenchError {
    let url = url.to_string();
    match e.get_ref().and_then(|i| i.downcast_ref::<Stall>()) {
        Some(Stall::Idle(waited)) => {
            return BenchError::Stalled {
                url,
                what,
                waited: *waited,
            };
        }
        Some(Stall::Deadline) => return BenchError::Deadline { url, limit },
        None => {}
    }
    match e.kind() {
        io::ErrorKind::InvalidData => BenchError::Malformed {
            url,
            why: e.to_string(),
        },
        io::ErrorKind::UnexpectedEof => BenchError::Truncated {
            url,
            events,
            why: e.to_string(),
        },
        _ => BenchError::Io { url, source: e },
    }
}

fn invalid(why: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.into())
}

/// How a response body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framing {
    Chunked,
    Length(u64),
    /// Until the server closes the connection.
    Eof,
}

/// A response's status line and the headers the benchmark reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Head {
    pub(super) status: u16,
    pub(super) reason: String,
    pub(super) content_type: Option<String>,
    pub(super) framing: Framing,
}

/// Reads one line without its `\n` (and a `\r` before it) into `line`, at most `max` bytes; `Ok(false)` at the end
/// of input before any byte. A line cut off by the end of input is an `UnexpectedEof`.
fn read_line<R: BufRead>(r: &mut R, max: usize, line: &mut Vec<u8>) -> io::Result<bool> {
    line.clear();
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            if line.is_empty() {
                return Ok(false);
            }
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the response ended inside a line",
            ));
        }
        let (take, done) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (i, true),
            None => (buf.len(), false),
        };
        if line.len().saturating_add(take) > max {
            return Err(invalid(format!("a line longer than {max} bytes")));
        }
        line.extend_from_slice(&buf[..take]);
        r.consume(if done { take + 1 } else { take });
        if done {
            break;
        }
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Ok(true)
}

/// The status line and headers (informational 1xx responses skipped): each head's lines are read within
/// [`MAX_HEAD_BYTES`] (all heads together) and [`MAX_HEADERS`], then parsed by `httparse`.
pub(super) fn read_head<R: BufRead>(r: &mut R) -> io::Result<Head> {
    let mut line = Vec::new();
    let mut raw = Vec::new();
    let mut used = 0usize;
    loop {
        // One head's lines, each re-ended by CRLF, up to and including the empty line.
        raw.clear();
        let mut lines = 0usize;
        loop {
            if !read_line(r, MAX_HEAD_BYTES, &mut line)? {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the connection closed before a complete response head",
                ));
            }
            used = used.saturating_add(line.len() + 2);
            if used > MAX_HEAD_BYTES {
                return Err(invalid(format!(
                    "a response head over {MAX_HEAD_BYTES} bytes"
                )));
            }
            if lines == 0 && line.is_empty() {
                // httparse would skip it; an empty status line is no HTTP response.
                return Err(invalid("not an HTTP/1.x response: "));
            }
            if lines > MAX_HEADERS && !line.is_empty() {
                return Err(invalid(format!(
                    "a response head over {MAX_HEADERS} headers"
                )));
            }
            lines += 1;
            raw.extend_from_slice(&line);
            raw.extend_from_slice(b"\r\n");
            if line.is_empty() {
                break;
            }
        }
        // The status line and the empty line are not headers.
        let mut headers = vec![httparse::EMPTY_HEADER; lines.saturating_sub(2)];
        let mut res = httparse::Response::new(&mut headers);
        let status_line = || excerpt(raw.split(|b| *b == b'\n').next().unwrap_or_default());
        match res.parse(&raw) {
            Ok(httparse::Status::Complete(_)) => {}
            Ok(httparse::Status::Partial) => {
                return Err(invalid(format!(
                    "an incomplete response head {}",
                    excerpt(&raw)
                )));
            }
            Err(httparse::Error::Version) => {
                return Err(invalid(format!(
                    "not an HTTP/1.x response: {}",
                    status_line()
                )));
            }
            Err(httparse::Error::Status | httparse::Error::Token) => {
                return Err(invalid(format!("bad status line {}", status_line())));
            }
            Err(_) => return Err(invalid(format!("bad header line {}", bad_header(&raw)))),
        }
        let status = res
            .code
            .filter(|s| (100..=999).contains(s))
            .ok_or_else(|| invalid(format!("bad status line {}", status_line())))?;
        let reason = res.reason.unwrap_or("").trim().to_string();
        let mut content_type = None;
        let mut chunked = false;
        let mut length: Option<u64> = None;
        for h in res.headers.iter() {
            let value = String::from_utf8_lossy(h.value);
            let value = value.trim();
            if h.name.eq_ignore_ascii_case("content-type") {
                content_type = Some(value.to_string());
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value
                    .rsplit(',')
                    .next()
                    .is_some_and(|c| c.trim().eq_ignore_ascii_case("chunked"));
            } else if h.name.eq_ignore_ascii_case("content-length") {
                let n: u64 = value
                    .parse()
                    .map_err(|_| invalid(format!("Content-Length {value:?} is not a number")))?;
                if length.is_some_and(|l| l != n) {
                    return Err(invalid("conflicting Content-Length headers"));
                }
                length = Some(n);
            }
        }
        if (100..200).contains(&status) {
            continue;
        }
        // RFC 9112 §6.3: chunked framing wins over a Content-Length.
        let framing = match (chunked, length) {
            (true, _) => Framing::Chunked,
            (false, Some(n)) => Framing::Length(n),
            (false, None) => Framing::Eof,
        };
        return Ok(Head {
            status,
            reason,
            content_type,
            framing,
        });
    }
}

/// The first header line of `raw` (a head, CRLF-ended lines) that `httparse` rejects, for the error message.
fn bad_header(raw: &[u8]) -> String {
    raw.split(|b| *b == b'\n')
        .skip(1)
        .find(|l| {
            let mut one = [httparse::EMPTY_HEADER];
            httparse::parse_headers(&[l, &b"\n\r\n"[..]].concat(), &mut one).is_err()
        })
        .map_or_else(String::new, excerpt)
}

/// A response body, de-framed (chunked transfer coding or Content-Length), capped at [`MAX_BODY_BYTES`].
pub(super) struct Body<R> {
    inner: R,
    framing: Framing,
    /// Bytes left in the current chunk, or of the Content-Length.
    left: u64,
    /// A chunk was read, so its CRLF must follow before the next size line.
    in_chunks: bool,
    done: bool,
    read: u64,
    line: Vec<u8>,
}

impl<R: BufRead> Body<R> {
    pub(super) fn new(inner: R, head: &Head) -> Body<R> {
        Body {
            inner,
            framing: head.framing,
            left: match head.framing {
                Framing::Length(n) => n,
                _ => 0,
            },
            in_chunks: false,
            done: head.framing == Framing::Length(0),
            read: 0,
            line: Vec::new(),
        }
    }

    /// Reads the next chunk's size line (after the previous chunk's CRLF); at the last chunk, its trailers.
    fn next_chunk(&mut self) -> io::Result<()> {
        /// A chunk size is at most 16 hex digits (u64); extensions after `;` are allowed and ignored.
        const MAX_SIZE_LINE: usize = 1024;
        let eof = || {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the response ended inside its chunked body",
            )
        };
        if self.in_chunks {
            if !read_line(&mut self.inner, MAX_SIZE_LINE, &mut self.line)? {
                return Err(eof());
            }
            if !self.line.is_empty() {
                return Err(invalid("chunked body: data longer than its chunk size"));
            }
        }
        if !read_line(&mut self.inner, MAX_SIZE_LINE, &mut self.line)? {
            return Err(eof());
        }
        let text = String::from_utf8_lossy(&self.line);
        let hex = text.split(';').next().unwrap_or("").trim();
        let size = if hex.is_empty() || hex.len() > 16 {
            None
        } else {
            u64::from_str_radix(hex, 16).ok()
        }
        .ok_or_else(|| {
            invalid(format!(
                "chunked body: bad chunk size {}",
                excerpt(&self.line)
            ))
        })?;
        self.in_chunks = true;
        if size == 0 {
            // Trailer fields, then an empty line; a server that closes right after `0\r\n` has still ended.
            while read_line(&mut self.inner, MAX_SIZE_LINE, &mut self.line)?
                && !self.line.is_empty()
            {}
            self.done = true;
        }
        self.left = size;
        Ok(())
    }
}

impl<R: BufRead> Read for Body<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let buf = self.fill_buf()?;
        let n = buf.len().min(out.len());
        out[..n].copy_from_slice(&buf[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl<R: BufRead> BufRead for Body<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.read > MAX_BODY_BYTES {
            return Err(invalid(format!(
                "a response body over {MAX_BODY_BYTES} bytes"
            )));
        }
        if self.framing == Framing::Chunked && !self.done && self.left == 0 {
            self.next_chunk()?;
        }
        if self.done {
            return Ok(&[]);
        }
        let framing = self.framing;
        let left = self.left;
        let buf = self.inner.fill_buf()?;
        match framing {
            Framing::Eof => Ok(buf),
            Framing::Length(_) | Framing::Chunked if buf.is_empty() => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("the response ended {left} bytes short of its announced length"),
            )),
            Framing::Length(_) | Framing::Chunked => {
                Ok(&buf[..buf.len().min(usize::try_from(left).unwrap_or(usize::MAX))])
            }
        }
    }

    fn consume(&mut self, n: usize) {
        self.inner.consume(n);
        self.read = self.read.saturating_add(n as u64);
        if self.framing != Framing::Eof {
            self.left = self.left.saturating_sub(n as u64);
            if self.left == 0 && matches!(self.framing, Framing::Length(_)) {
                self.done = true;
            }
        }
    }
}

/// The data of the next server-sent event (its `data:` lines joined by `\n`), `Ok(None)` at the end of the body.
/// Comments and other fields (`event:`, `id:`, `retry:`) are skipped; an event cut off by the end of the body
/// is still returned, so a missing `[DONE]` is what marks truncation.
pub(super) fn next_event<R: BufRead>(r: &mut R, line: &mut Vec<u8>) -> io::Result<Option<String>> {
    let mut data: Option<String> = None;
    loop {
        if !read_line(r, MAX_LINE_BYTES, line)? {
            return Ok(data);
        }
        if line.is_empty() {
            if data.is_some() {
                return Ok(data);
            }
            continue;
        }
        let text = std::str::from_utf8(line).map_err(|_| {
            invalid(format!(
                "an event line that is not UTF-8: {}",
                excerpt(line)
            ))
        })?;
        let (field, value) = match text.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (text, ""),
        };
        if field == "data" {
            let d = data.get_or_insert_with(String::new);
            if !d.is_empty() {
                d.push('\n');
            }
            if d.len().saturating_add(value.len()) > MAX_LINE_BYTES {
                return Err(invalid(format!("an event over {MAX_LINE_BYTES} bytes")));
            }
            d.push_str(value);
        } else if !field.is_empty() && !matches!(field, "event" | "id" | "retry") && data.is_none()
        {
            return Err(invalid(format!("not an event stream: {}", excerpt(line))));
        }
    }
}

/// Up to [`MAX_SMALL_BODY_BYTES`] of a body.
pub(super) fn small_body<R: BufRead>(body: &mut R) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    body.take(MAX_SMALL_BODY_BYTES).read_to_end(&mut out)?;
    Ok(out)
}

/// The first [`EXCERPT_CHARS`] characters of `bytes`, control characters shown as spaces.
pub(super) fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out: String = text
        .chars()
        .take(EXCERPT_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().count() > EXCERPT_CHARS {
        out.push('…');
    }
    out.trim().to_string()
}

pub(super) fn status_error<R: BufRead>(url: &str, head: &Head, body: &mut Body<R>) -> BenchError {
    // What the server said, as far as it can be read in time; the status alone is the error otherwise.
    let text = small_body(body).unwrap_or_default();
    BenchError::Status {
        url: url.into(),
        status: head.status,
        reason: head.reason.clone(),
        excerpt: if text.is_empty() {
            "(empty body)".into()
        } else {
            excerpt(&text)
        },
    }
}
