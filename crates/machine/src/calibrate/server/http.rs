//! The HTTP/1.1 client under the benchmark, on `ureq` (blocking, no async runtime; built without TLS, and
//! `https://` is refused when the URL is parsed): one request per connection (no pool, no redirect followed, no
//! proxy taken from the environment), each read bounded by the idle timeout (`timeout_per_read`) and by the
//! request's deadline (`timeout_global`), the head (64 KiB, and `ureq`'s 100 headers) and the body capped; the
//! server-sent events parsed here over the de-framed body, each line and event bounded before it is stored; and
//! the benchmark errors that `ureq`'s and the parser's failures map to. Trade-off: `ureq` drops a response's
//! reason phrase, so an error names the status code's standard reason (RFC 9110) instead of the server's words,
//! which the body excerpt still carries.

use std::io::{self, BufRead, BufReader, Read};
use std::time::Duration;

use ureq::http::Response;
use ureq::{Agent, Body, BodyReader, Timeout};

use super::{BenchError, Config, EXCERPT_CHARS};

/// Largest response head (status line and headers): servers send a few hundred bytes; 64 KiB covers any proxy.
const MAX_HEAD_BYTES: usize = 64 << 10;
/// Largest line of a response (one SSE line): a streamed chunk with timings and usage is under 1 KiB; 4 MiB
/// leaves room for per-token log-probabilities without letting a server exhaust memory.
const MAX_LINE_BYTES: usize = 4 << 20;
/// Largest body one response may stream: `MAX_NEW_TOKENS` chunks of about 300 bytes each fit many times over.
const MAX_BODY_BYTES: u64 = 1 << 30;
/// Largest body read from a non-200 response or from `/v1/models`: an error message or a model list.
const MAX_SMALL_BODY_BYTES: u64 = 1 << 20;
/// Bytes the event parser asks of the body at a time: more than one streamed chunk, so a line is rarely split.
const READ_BUFFER_BYTES: usize = 64 << 10;

/// One request's URL and its time limits, for its error messages.
pub(super) struct Call {
    pub(super) url: String,
    /// The wait for any byte ([`super::Timeouts::idle`]).
    idle: Duration,
    /// The request's deadline, from just before connecting.
    limit: Duration,
    host: String,
    /// `host:port`, for a failed connection.
    addr: String,
}

/// A response's status and the header the benchmark reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Head {
    pub(super) status: u16,
    /// The standard reason of the status code (RFC 9110), empty for a code it does not name.
    pub(super) reason: String,
    pub(super) content_type: Option<String>,
}

/// Connects, sends one request (a JSON body for `POST`), reads the response head.
pub(super) fn exchange(
    cfg: &Config,
    method: &str,
    path: &str,
    body: &[u8],
    limit: Duration,
) -> Result<(Call, Head, Body), BenchError> {
    let ep = &cfg.endpoint;
    let call = Call {
        url: ep.full(path),
        idle: cfg.timeouts.idle,
        limit,
        host: ep.host.clone(),
        addr: if ep.host.contains(':') {
            format!("[{}]:{}", ep.host, ep.port)
        } else {
            format!("{}:{}", ep.host, ep.port)
        },
    };
    let agent: Agent = Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .proxy(None)
        .max_idle_connections(0)
        .max_idle_connections_per_host(0)
        .max_response_header_size(MAX_HEAD_BYTES)
        .user_agent(concat!("optimizer-bench/", env!("CARGO_PKG_VERSION")))
        .accept("text/event-stream, application/json")
        .timeout_connect(Some(cfg.timeouts.connect))
        .timeout_per_read(Some(cfg.timeouts.idle))
        .timeout_per_write(Some(cfg.timeouts.idle))
        .timeout_global(Some(limit))
        .build()
        .into();
    let res = if method == "POST" {
        agent
            .post(&call.url)
            .header("Connection", "close")
            .content_type("application/json")
            .send(body)
    } else {
        agent.get(&call.url).header("Connection", "close").call()
    };
    let res: Response<Body> = res.map_err(|e| call.error(e, "waiting for the response", 0))?;
    let status = res.status();
    let head = Head {
        status: status.as_u16(),
        reason: status.canonical_reason().unwrap_or_default().to_string(),
        content_type: res
            .headers()
            .get("content-type")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_string()),
    };
    Ok((call, head, res.into_body()))
}

/// The de-framed body (chunked transfer coding, Content-Length or the connection's end), capped at
/// [`MAX_BODY_BYTES`] and buffered for [`next_event`].
pub(super) fn stream(body: Body) -> BufReader<BodyReader<'static>> {
    BufReader::with_capacity(
        READ_BUFFER_BYTES,
        body.into_with_config().limit(MAX_BODY_BYTES).reader(),
    )
}

impl Call {
    /// A failure of this request as a benchmark error: a stall, the deadline, a malformed or truncated response,
    /// or the network. `what` is the step that stalled; `events` those read before.
    pub(super) fn error(
        &self,
        e: impl Into<ureq::Error>,
        what: &'static str,
        events: u64,
    ) -> BenchError {
        let url = self.url.clone();
        match e.into() {
            ureq::Error::Timeout(Timeout::PerRead) => BenchError::Stalled {
                url,
                what,
                waited: self.idle,
            },
            ureq::Error::Timeout(Timeout::PerWrite) => BenchError::Stalled {
                url,
                what: "sending the request",
                waited: self.idle,
            },
            ureq::Error::Timeout(Timeout::Connect | Timeout::Resolve) => BenchError::Connect {
                url,
                addr: self.addr.clone(),
                source: io::Error::new(io::ErrorKind::TimedOut, "no connection within --timeout"),
            },
            ureq::Error::Timeout(_) => BenchError::Deadline {
                url,
                limit: self.limit,
            },
            ureq::Error::HostNotFound => BenchError::Resolve {
                url,
                host: self.host.clone(),
                source: io::Error::new(io::ErrorKind::NotFound, "no address"),
            },
            ureq::Error::Io(e) if is_connect(&e) => BenchError::Connect {
                url,
                addr: self.addr.clone(),
                source: e,
            },
            ureq::Error::Io(e) => match e.kind() {
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
            },
            ureq::Error::LargeResponseHeader(..) => BenchError::Malformed {
                url,
                why: format!("a response head over {MAX_HEAD_BYTES} bytes"),
            },
            ureq::Error::BodyExceedsLimit(n) => BenchError::Malformed {
                url,
                why: format!("a response body over {n} bytes"),
            },
            e @ (ureq::Error::Protocol(_) | ureq::Error::BodyStalled) => BenchError::Malformed {
                url,
                why: e.to_string(),
            },
            e => BenchError::Io {
                url,
                source: e.into_io(),
            },
        }
    }
}

/// Whether an I/O error failed the connection itself (before any byte was exchanged).
fn is_connect(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::HostUnreachable
            | io::ErrorKind::NetworkUnreachable
            | io::ErrorKind::NetworkDown
            | io::ErrorKind::AddrNotAvailable
    )
}

fn invalid(why: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.into())
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

/// Up to [`MAX_SMALL_BODY_BYTES`] of a body; what lies past them is left unread.
pub(super) fn small_body(body: Body) -> Result<Vec<u8>, ureq::Error> {
    let mut out = Vec::new();
    body.into_with_config()
        .limit(MAX_BODY_BYTES)
        .reader()
        .take(MAX_SMALL_BODY_BYTES)
        .read_to_end(&mut out)?;
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

/// A non-200 answer as an error: its status and what its body says, as far as it can be read in time (the
/// status alone otherwise).
pub(super) fn status_error(call: &Call, head: &Head, body: Body) -> BenchError {
    let text = small_body(body).unwrap_or_default();
    BenchError::Status {
        url: call.url.clone(),
        status: head.status,
        reason: head.reason.clone(),
        excerpt: if text.is_empty() {
            "(empty body)".into()
        } else {
            excerpt(&text)
        },
    }
}
