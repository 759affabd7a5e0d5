//! Benchmarking a running OpenAI-compatible server (llama-server, vLLM, Ollama): time to first token, time per
//! output token and aggregate decode throughput at a few concurrencies, over `POST /v1/completions` (or
//! `/v1/chat/completions`) with `"stream": true`. Touches the network (plain HTTP/1.1 through `ureq`, in `http`)
//! and the clock; writes nothing. [`measurements`] turns a [`Report`] into store rows for the deployment the
//! server was started from.
//!
//! What is measured, per request: from just before connecting to the first streamed event that carries text
//! (TTFT), and from that event to the last one carrying text; tokens are the `usage.completion_tokens` the
//! server reports (llama-server always sends it in the last chunk, vLLM and Ollama with `stream_options`), else
//! the count of events carrying text (one token each on llama-server; a server that packs several tokens into
//! one event is then under-counted, and the report says which count was used). TPOT of a request is
//! `(last - first) / (tokens - 1)`. The aggregate decode rate of a concurrency level is every request's
//! `tokens - 1` over the length of the union of their first-to-last intervals. Trade-off: the union (rather than
//! `concurrency / TPOT`) stays right when the server has fewer slots than requests in flight (queued requests
//! decode one after another, not together), at the price of counting the prefills of requests that start while
//! others decode as decode time, which is what a serving deployment pays too.
//!
//! The prompt is the same filler for every request of a run, led by a unique request number so that no server
//! reuses a cached prefix (llama-server's `cache_prompt` is also turned off unless `strict_openai`); its length in
//! words is corrected once after the warm-up request by the prompt tokens the server reports, so runs against
//! different tokenizers stay comparable. `ignore_eos` (llama-server, vLLM) makes every request generate exactly
//! `max_tokens`.
//!
//! Every wait is bounded: the connect, each read (`idle`: no byte for that long is a stall), and each request as
//! a whole (`request`: a server that dribbles bytes forever); every size read from the server is capped.

use std::io;
use std::time::Duration;

mod http;
mod load;
mod record;
mod stats;
#[cfg(test)]
mod tests;

pub use load::run;
pub use record::{Target, measurements};
pub use stats::{Level, Report, Sample, Stats, TokenCount, summarize};

/// Default wait for a connection and for any byte of a response: a CPU server under load may take tens of
/// seconds for the first token of a long prompt while other requests hold its slots, so one minute.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest `--timeout`: a day; beyond it a stall is a hang, and `Instant` arithmetic stays far from overflow.
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(86_400);
/// The slowest per-token pace (prefill and decode, per request in flight) a request's overall deadline allows:
/// a server slower than one token per second per sequence is not worth benchmarking, and a server that dribbles
/// bytes just fast enough to defeat the idle timeout is still stopped.
const SLOWEST_PER_TOKEN: Duration = Duration::from_secs(1);
/// Characters of a body quoted in an error message.
const EXCERPT_CHARS: usize = 300;
/// Most requests in flight: one thread and one connection each.
pub(crate) const MAX_CONCURRENCY: u32 = 1024;
/// Most requests per concurrency level.
pub(crate) const MAX_REQUESTS: u32 = 100_000;
/// Largest prompt and generation asked for: above any context window served today.
pub(crate) const MAX_PROMPT_TOKENS: u32 = 1 << 22;
pub(crate) const MAX_NEW_TOKENS: u32 = 1 << 22;
/// Most warm-up requests.
pub(crate) const MAX_WARMUP: u32 = 100;

/// Why a benchmark could not run or finish.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(
        "{url}: https is not supported; the benchmark speaks plain http:// (use the server's own port, or a local TLS-terminating proxy)"
    )]
    Https { url: String },
    #[error("{url}: not a server URL: {why}")]
    BadUrl { url: String, why: String },
    #[error("{url}: {why}")]
    BadSetting { url: String, why: String },
    #[error("{url}: cannot resolve {host}")]
    Resolve {
        url: String,
        host: String,
        #[source]
        source: io::Error,
    },
    #[error("{url}: cannot connect to {addr}")]
    Connect {
        url: String,
        addr: String,
        #[source]
        source: io::Error,
    },
    #[error("{url}: no answer for {} s {what} (--timeout)", waited.as_secs_f64())]
    Stalled {
        url: String,
        what: &'static str,
        waited: Duration,
    },
    #[error("{url}: the request did not finish within its deadline of {} s (--timeout plus an allowance per prompt and generated token per request in flight)", limit.as_secs_f64())]
    Deadline { url: String, limit: Duration },
    #[error("{url}: HTTP {status} {reason}: {excerpt}")]
    Status {
        url: String,
        status: u16,
        reason: String,
        excerpt: String,
    },
    #[error("{url}: malformed response: {why}")]
    Malformed { url: String, why: String },
    #[error("{url}: the stream ended after {events} events without `data: [DONE]`: {why}")]
    Truncated {
        url: String,
        events: u64,
        why: String,
    },
    #[error("{url}: the server reported an error in the stream: {message}")]
    InStream { url: String, message: String },
    #[error("{url}: the stream finished without any generated text")]
    NoTokens { url: String },
    #[error("{url}: {source}")]
    Io {
        url: String,
        #[source]
        source: io::Error,
    },
}

impl BenchError {
    /// Whether the caller asked for something that cannot work (exit 2), rather than the server or the network
    /// failing (exit 1).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            BenchError::Https { .. } | BenchError::BadUrl { .. } | BenchError::BadSetting { .. }
        )
    }
}

/// A server's base address, parsed from `http://HOST[:PORT][/PREFIX]`; a trailing `/v1` is accepted and dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// As given, for messages.
    pub url: String,
    host: String,
    port: u16,
    /// Path prefix before `/v1/...`, without a trailing slash (usually empty).
    prefix: String,
}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Endpoint, BenchError> {
        // The host and the path go into the request line and the Host header as they are: a CR or LF would end
        // the line and start a header of the URL's choosing, a space would split the request line. A URL has
        // neither (RFC 3986 2: no controls, no spaces), so any is refused before anything is sent; the URL is
        // quoted escaped, since printing it raw would replay the control characters on the terminal.
        if let Some((i, c)) = url
            .chars()
            .enumerate()
            .find(|(_, c)| c.is_control() || c.is_whitespace())
        {
            let what = if c.is_control() {
                "a control character"
            } else {
                "a space"
            };
            return Err(BenchError::BadUrl {
                url: url.escape_debug().to_string(),
                why: format!(
                    "--url character {} is U+{:04X}, {what}; a URL holds no control characters or spaces (they would split the request line or inject headers)",
                    i + 1,
                    u32::from(c)
                ),
            });
        }
        let bad = |why: &str| BenchError::BadUrl {
            url: url.to_string(),
            why: why.to_string(),
        };
        let lower = url.to_ascii_lowercase();
        if lower.starts_with("https://") {
            return Err(BenchError::Https { url: url.into() });
        }
        if !lower.starts_with("http://") {
            return Err(bad("expected http://HOST[:PORT]"));
        }
        let rest = &url["http://".len()..];
        if rest.contains(['?', '#']) {
            return Err(bad(
                "a query or fragment has no place in a server's base URL",
            ));
        }
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        if authority.contains('@') {
            return Err(bad("credentials in the URL are not supported"));
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| bad("unclosed [ in the host"))?;
            (h, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let port = match port {
            None => 80,
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| bad(&format!("port {p:?} is not 1 to 65535")))?,
        };
        let path = path.trim_end_matches('/');
        let prefix = path.strip_suffix("/v1").unwrap_or(path);
        Ok(Endpoint {
            url: url.to_string(),
            host: host.to_string(),
            port,
            prefix: prefix.to_string(),
        })
    }

    /// `prefix + path`, the request target.
    fn target(&self, path: &str) -> String {
        format!("{}{path}", self.prefix)
    }

    /// `http://host:port + prefix + path`, for messages.
    fn full(&self, path: &str) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        format!("http://{host}:{}{}", self.port, self.target(path))
    }
}

/// How long to wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// For the TCP connection.
    pub connect: Duration,
    /// For any byte of a response (a stall).
    pub idle: Duration,
    /// Per-token allowance of a request's overall deadline ([`SLOWEST_PER_TOKEN`] unless a test shortens it):
    /// the deadline is `idle + tokens × in-flight × this`.
    pub per_token: Duration,
}

impl Timeouts {
    /// `timeout` for the connection and for each byte, the default per-token allowance.
    pub fn new(timeout: Duration) -> Timeouts {
        Timeouts {
            connect: timeout,
            idle: timeout,
            per_token: SLOWEST_PER_TOKEN,
        }
    }
}

/// What to measure.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub endpoint: Endpoint,
    /// `/v1/chat/completions` instead of `/v1/completions`.
    pub chat: bool,
    /// The `model` field; `None`: the first of `GET /v1/models` (llama-server ignores it, vLLM and Ollama need it).
    pub served_model: Option<String>,
    pub prompt_tokens: u32,
    pub max_tokens: u32,
    /// Requests in flight at each level, in order.
    pub concurrency: Vec<u32>,
    /// Requests per level (at least the level's concurrency are sent).
    pub requests: u32,
    /// Requests sent and discarded before the first level (the first also measures the prompt's tokens).
    pub warmup: u32,
    /// Send only fields of the OpenAI API: no `ignore_eos`, no `cache_prompt`.
    pub strict_openai: bool,
    /// Send the prompt as token ids (`/v1/completions` of llama-server and vLLM): exactly `prompt_tokens`,
    /// whatever the tokenizer.
    pub token_ids: bool,
    pub timeouts: Timeouts,
}

impl Config {
    /// Checks every bound before anything is sent.
    pub fn validate(&self) -> Result<(), BenchError> {
        let bad = |why: String| {
            Err(BenchError::BadSetting {
                url: self.endpoint.url.clone(),
                why,
            })
        };
        if self.concurrency.is_empty() {
            return bad("no concurrency level".into());
        }
        if let Some(c) = self
            .concurrency
            .iter()
            .find(|c| !(1..=MAX_CONCURRENCY).contains(*c))
        {
            return bad(format!("concurrency {c}: 1 to {MAX_CONCURRENCY}"));
        }
        for (what, v, max) in [
            ("requests", self.requests, MAX_REQUESTS),
            ("prompt tokens", self.prompt_tokens, MAX_PROMPT_TOKENS),
            ("max tokens", self.max_tokens, MAX_NEW_TOKENS),
        ] {
            if !(1..=max).contains(&v) {
                return bad(format!("{what} {v}: 1 to {max}"));
            }
        }
        if self.warmup > MAX_WARMUP {
            return bad(format!("warm-up {}: at most {MAX_WARMUP}", self.warmup));
        }
        let t = &self.timeouts;
        if [t.connect, t.idle]
            .iter()
            .any(|d| d.is_zero() || *d > MAX_TIMEOUT)
        {
            return bad(format!(
                "timeout: more than 0 and at most {} s",
                MAX_TIMEOUT.as_secs()
            ));
        }
        if self.token_ids && self.chat {
            return bad(
                "token-id prompts go to /v1/completions; --chat sends messages of text".into(),
            );
        }
        if t.per_token > SLOWEST_PER_TOKEN {
            return bad("per-token allowance above one second".into());
        }
        Ok(())
    }

    fn path(&self) -> &'static str {
        if self.chat {
            "/v1/chat/completions"
        } else {
            "/v1/completions"
        }
    }

    /// The overall deadline of one request with `in_flight` requests sharing the server.
    fn request_limit(&self, in_flight: u32) -> Duration {
        let tokens = u64::from(self.prompt_tokens) + u64::from(self.max_tokens);
        let n = tokens.saturating_mul(u64::from(in_flight));
        let allowance = self
            .timeouts
            .per_token
            .checked_mul(u32::try_from(n).unwrap_or(u32::MAX))
            .unwrap_or(MAX_TIMEOUT);
        self.timeouts
            .idle
            .saturating_add(allowance.min(MAX_TIMEOUT))
    }
}
