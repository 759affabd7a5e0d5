//! Benchmarking a running OpenAI-compatible server (llama-server, vLLM, Ollama): time to first token, time per
//! output token and aggregate decode throughput at a few concurrencies, over `POST /v1/completions` (or
//! `/v1/chat/completions`) with `"stream": true`. Touches the network (plain HTTP/1.1 on `std::net::TcpStream`)
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

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use optimizer_store::{DeviceIdentity, ModelIdentity, NewMeasurement, Shape};

/// Default wait for a connection and for any byte of a response: a CPU server under load may take tens of
/// seconds for the first token of a long prompt while other requests hold its slots, so one minute.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest `--timeout`: a day; beyond it a stall is a hang, and `Instant` arithmetic stays far from overflow.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(86_400);
/// The slowest per-token pace (prefill and decode, per request in flight) a request's overall deadline allows:
/// a server slower than one token per second per sequence is not worth benchmarking, and a server that dribbles
/// bytes just fast enough to defeat the idle timeout is still stopped.
const SLOWEST_PER_TOKEN: Duration = Duration::from_secs(1);
/// Largest response head (status line and headers): servers send a few hundred bytes; 64 KiB covers any proxy.
const MAX_HEAD_BYTES: usize = 64 << 10;
/// Largest line of a response (one SSE line, a chunk-size line): a streamed chunk with timings and usage is under
/// 1 KiB; 4 MiB leaves room for per-token log-probabilities without letting a server exhaust memory.
const MAX_LINE_BYTES: usize = 4 << 20;
/// Largest body one response may stream: `MAX_NEW_TOKENS` chunks of about 300 bytes each fit many times over.
const MAX_BODY_BYTES: u64 = 1 << 30;
/// Largest body read from a non-200 response or from `/v1/models`: an error message or a model list.
const MAX_SMALL_BODY_BYTES: u64 = 1 << 20;
/// Characters of a body quoted in an error message.
const EXCERPT_CHARS: usize = 300;
/// Most requests in flight: one thread and one connection each.
pub const MAX_CONCURRENCY: u32 = 1024;
/// Most requests per concurrency level.
pub const MAX_REQUESTS: u32 = 100_000;
/// Largest prompt and generation asked for: above any context window served today.
pub const MAX_PROMPT_TOKENS: u32 = 1 << 22;
pub const MAX_NEW_TOKENS: u32 = 1 << 22;
/// Most warm-up requests.
pub const MAX_WARMUP: u32 = 100;
/// The filler word of the prompt: one token in the BPE and SentencePiece vocabularies of Llama, Qwen, Mistral and
/// GPT-2 lineages, and a pre-tokenizer word boundary, so `n` repetitions are about `n` tokens.
const PROMPT_WORD: &str = " the";
/// The filler token of a `token_ids` prompt, and the base of its lead tokens: ids below 259 are byte or
/// single-character tokens in SentencePiece and byte-level BPE vocabularies alike (special tokens sit at 0-2 or
/// at the end of a vocabulary), so 100..=228 are ordinary tokens of any vocabulary of at least 229 entries.
const FILLER_ID: u32 = 100;
/// Lead tokens of a `token_ids` prompt: the request number in base [`LEAD_ID_SPAN`], so 2,097,152 requests get
/// distinct first tokens and no server can reuse a cached prefix.
const LEAD_IDS: u32 = 3;
const LEAD_ID_SPAN: u64 = 128;
/// How far the server's prompt count may be from the filler's word count for the warm-up's correction to apply:
/// further off, the tokenizer does not split the filler into words (a placeholder vocabulary), and scaling by
/// the ratio would only compound the error.
const MAX_PROMPT_RATIO: f64 = 4.0;
/// Tokens the request number leading each prompt (`Request 12:`) takes, about: the first guess of the filler's
/// length is the target less this, before the warm-up measures it.
const LEAD_TOKENS: u32 = 4;

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

/// One request as measured; times are offsets from the start of its level.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub sent: Duration,
    pub first_token: Duration,
    pub last_token: Duration,
    /// Events that carried text.
    pub chunks: u64,
    pub usage_completion_tokens: Option<u64>,
    pub usage_prompt_tokens: Option<u64>,
    /// llama-server's own decode rate for the request (`timings.predicted_per_second`).
    pub server_decode_tokens_per_s: Option<f64>,
    /// `system_fingerprint` (llama-server: its build, `b6497-cd08fc3e`).
    pub fingerprint: Option<String>,
}

impl Sample {
    /// Generated tokens: the server's count when it gave one, else the events that carried text.
    pub fn tokens(&self) -> u64 {
        self.usage_completion_tokens.unwrap_or(self.chunks)
    }

    pub fn ttft(&self) -> Duration {
        self.first_token.saturating_sub(self.sent)
    }

    /// Milliseconds per output token after the first, when there were at least two.
    pub fn tpot_ms(&self) -> Option<f64> {
        let n = self.tokens();
        (n >= 2).then(|| {
            1e3 * self
                .last_token
                .saturating_sub(self.first_token)
                .as_secs_f64()
                / (n - 1) as f64
        })
    }
}

/// Median, 90th percentile and range of a set of values.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Stats {
    /// The middle value (the mean of the two middle ones for an even count).
    pub median: f64,
    /// Nearest rank: the smallest value at or above 90 % of them.
    pub p90: f64,
    pub mean: f64,
    pub min: f64,
    pub max: f64,
}

impl Stats {
    /// `None` for no values.
    pub fn of(values: &[f64]) -> Option<Stats> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        // Nearest rank: ceil(0.9 n), 1-based.
        let rank = (9 * n).div_ceil(10).max(1);
        Some(Stats {
            median,
            p90: v[rank - 1],
            mean: v.iter().sum::<f64>() / n as f64,
            min: v[0],
            max: v[n - 1],
        })
    }
}

/// Where the generated-token counts came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TokenCount {
    /// The server's `usage.completion_tokens`, for every request.
    Usage,
    /// Streamed events that carried text (the server sent no usage).
    Chunks,
    /// Usage for some requests, events for the others.
    Mixed,
}

impl TokenCount {
    fn of(samples: &[Sample]) -> TokenCount {
        let with = samples
            .iter()
            .filter(|s| s.usage_completion_tokens.is_some())
            .count();
        match with {
            0 => TokenCount::Chunks,
            n if n == samples.len() => TokenCount::Usage,
            _ => TokenCount::Mixed,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            TokenCount::Usage => "the server's usage.completion_tokens",
            TokenCount::Chunks => {
                "streamed events carrying text (the server sent no usage; one token per event assumed)"
            }
            TokenCount::Mixed => {
                "usage.completion_tokens where the server sent it, streamed events elsewhere"
            }
        }
    }
}

/// One concurrency level's results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Level {
    pub concurrency: u32,
    pub requests: u32,
    pub ttft_ms: Stats,
    /// Absent when no request generated two tokens.
    pub tpot_ms: Option<Stats>,
    /// Decode tokens (each request's after its first) over the union of the requests' decode intervals.
    pub decode_tokens_per_s: Option<f64>,
    /// Every generated token over the level's wall time (prefill and queueing included).
    pub output_tokens_per_s: f64,
    pub generated_tokens: u64,
    pub tokens_counted_from: TokenCount,
    /// Median `usage.prompt_tokens`, when the server reported it.
    pub prompt_tokens: Option<u64>,
    /// Median of llama-server's own per-request decode rate (`timings.predicted_per_second`), a cross-check.
    pub server_decode_tokens_per_s: Option<f64>,
    pub wall_s: f64,
}

/// Summarises a level's samples; `None` when there are none.
pub fn summarize(concurrency: u32, samples: &[Sample], wall: Duration) -> Option<Level> {
    let ttft: Vec<f64> = samples
        .iter()
        .map(|s| 1e3 * s.ttft().as_secs_f64())
        .collect();
    let ttft_ms = Stats::of(&ttft)?;
    let tpot: Vec<f64> = samples.iter().filter_map(Sample::tpot_ms).collect();
    let decode_tokens: u64 = samples
        .iter()
        .map(|s| s.tokens().saturating_sub(1))
        .fold(0, u64::saturating_add);
    let mut spans: Vec<(Duration, Duration)> = samples
        .iter()
        .filter(|s| s.tokens() >= 2)
        .map(|s| (s.first_token, s.last_token))
        .collect();
    let busy = union_length(&mut spans);
    let generated_tokens: u64 = samples
        .iter()
        .map(Sample::tokens)
        .fold(0, u64::saturating_add);
    let median_of = |v: Vec<f64>| Stats::of(&v).map(|s| s.median);
    Some(Level {
        concurrency,
        requests: u32::try_from(samples.len()).unwrap_or(u32::MAX),
        ttft_ms,
        tpot_ms: Stats::of(&tpot),
        decode_tokens_per_s: (decode_tokens > 0 && !busy.is_zero())
            .then(|| decode_tokens as f64 / busy.as_secs_f64()),
        output_tokens_per_s: if wall.is_zero() {
            0.0
        } else {
            generated_tokens as f64 / wall.as_secs_f64()
        },
        generated_tokens,
        tokens_counted_from: TokenCount::of(samples),
        prompt_tokens: median_of(
            samples
                .iter()
                .filter_map(|s| s.usage_prompt_tokens.map(|n| n as f64))
                .collect(),
        )
        .map(|m| m.round() as u64),
        server_decode_tokens_per_s: median_of(
            samples
                .iter()
                .filter_map(|s| s.server_decode_tokens_per_s)
                .collect(),
        ),
        wall_s: wall.as_secs_f64(),
    })
}

/// Total length of the union of `[start, end]` intervals.
fn union_length(spans: &mut [(Duration, Duration)]) -> Duration {
    spans.sort();
    let mut total = Duration::ZERO;
    let mut current: Option<(Duration, Duration)> = None;
    for &(a, b) in spans.iter() {
        current = match current {
            Some((s, e)) if a <= e => Some((s, e.max(b))),
            Some((s, e)) => {
                total += e.saturating_sub(s);
                Some((a, b))
            }
            None => Some((a, b)),
        };
    }
    if let Some((s, e)) = current {
        total += e.saturating_sub(s);
    }
    total
}

/// A whole benchmark's results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub url: String,
    /// `/v1/completions` or `/v1/chat/completions`.
    pub endpoint: String,
    pub served_model: Option<String>,
    pub prompt_tokens_requested: u32,
    /// Filler words the prompt had after the warm-up's correction.
    pub prompt_words: u32,
    pub max_tokens: u32,
    pub ignore_eos: bool,
    /// The server's `system_fingerprint` (llama-server: its build).
    pub server_fingerprint: Option<String>,
    pub levels: Vec<Level>,
    /// What the report's reader should know (model discovery, prompt correction).
    pub notes: Vec<String>,
}

/// Runs the benchmark: the served model (unless given), the warm-up, then each concurrency level. `progress`
/// hears a line per step (the CLI prints them on stderr).
pub fn run(cfg: &Config, progress: &dyn Fn(&str)) -> Result<Report, BenchError> {
    cfg.validate()?;
    let ep = &cfg.endpoint;
    let mut notes = Vec::new();
    let served_model = match &cfg.served_model {
        Some(m) => Some(m.clone()),
        None => match first_model(cfg)? {
            Ok(m) => {
                notes.push(format!("model {m:?}: the first of GET /v1/models"));
                Some(m)
            }
            Err(why) => {
                notes.push(format!(
                    "no model field sent: GET /v1/models {why} (--served-model names it)"
                ));
                None
            }
        },
    };
    let counter = AtomicU64::new(0);
    let mut words = if cfg.token_ids {
        cfg.prompt_tokens.saturating_sub(LEAD_IDS).max(1)
    } else {
        cfg.prompt_tokens.saturating_sub(LEAD_TOKENS).max(1)
    };
    for i in 0..cfg.warmup {
        progress(&format!("warm-up request {} of {}", i + 1, cfg.warmup));
        let s = one(
            cfg,
            served_model.as_deref(),
            words,
            &counter,
            1,
            Instant::now(),
        )?;
        if i == 0
            && !cfg.token_ids
            && let Some(got) = s.usage_prompt_tokens
            && got != u64::from(cfg.prompt_tokens)
        {
            let ratio = got as f64 / f64::from(words);
            if (1.0 / MAX_PROMPT_RATIO..=MAX_PROMPT_RATIO).contains(&ratio) {
                let scaled = (f64::from(words) * f64::from(cfg.prompt_tokens) / got as f64).round();
                let before = words;
                words = (scaled as u32).clamp(1, MAX_PROMPT_TOKENS);
                notes.push(format!(
                    "prompt: {before} filler words made {got} tokens; {words} used for a target of {}",
                    cfg.prompt_tokens
                ));
            } else {
                notes.push(format!(
                    "prompt: the server counted {got} tokens for {words} filler words; its tokenizer does not split them into words, so the prompt was left as it is (--token-ids sends exact token ids)"
                ));
            }
        }
    }
    let mut levels = Vec::new();
    let mut fingerprint = None;
    for &c in &cfg.concurrency {
        let n = cfg.requests.max(c);
        progress(&format!("concurrency {c}: {n} requests"));
        let (samples, wall) = level(cfg, served_model.as_deref(), words, &counter, c, n)?;
        fingerprint = fingerprint.or_else(|| samples.iter().find_map(|s| s.fingerprint.clone()));
        if let Some(l) = summarize(c, &samples, wall) {
            levels.push(l);
        }
    }
    Ok(Report {
        url: ep.url.clone(),
        endpoint: cfg.path().into(),
        served_model,
        prompt_tokens_requested: cfg.prompt_tokens,
        prompt_words: words,
        max_tokens: cfg.max_tokens,
        ignore_eos: !cfg.strict_openai,
        server_fingerprint: fingerprint,
        levels,
        notes,
    })
}

/// `n` requests, `c` at a time; the first failure stops the level (requests in flight finish or time out).
fn level(
    cfg: &Config,
    model: Option<&str>,
    words: u32,
    counter: &AtomicU64,
    c: u32,
    n: u32,
) -> Result<(Vec<Sample>, Duration), BenchError> {
    let origin = Instant::now();
    let next = AtomicU64::new(0);
    let failed = AtomicBool::new(false);
    let results: Mutex<Vec<(u64, Result<Sample, BenchError>)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..c {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= u64::from(n) || failed.load(Ordering::Relaxed) {
                        break;
                    }
                    let r = one(cfg, model, words, counter, c, origin);
                    if r.is_err() {
                        failed.store(true, Ordering::Relaxed);
                    }
                    if let Ok(mut v) = results.lock() {
                        v.push((i, r));
                    }
                }
            });
        }
    });
    let wall = origin.elapsed();
    let mut results = results.into_inner().unwrap_or_else(|p| p.into_inner());
    results.sort_by_key(|(i, _)| *i);
    let mut samples = Vec::with_capacity(results.len());
    for (_, r) in results {
        samples.push(r?);
    }
    Ok((samples, wall))
}

/// The prompt of request `k`: a unique lead, then the filler.
fn prompt(cfg: &Config, k: u64, words: u32) -> Value {
    if cfg.token_ids {
        let lead = (0..LEAD_IDS).map(|i| {
            let digit = (k / LEAD_ID_SPAN.pow(i)) % LEAD_ID_SPAN;
            // digit < LEAD_ID_SPAN = 128, so the id stays within 101..=228.
            FILLER_ID + 1 + u32::try_from(digit).unwrap_or(0)
        });
        let ids: Vec<u32> = lead
            .chain(std::iter::repeat_n(FILLER_ID, words as usize))
            .collect();
        return serde_json::json!(ids);
    }
    let mut s = format!("Request {k}:");
    s.push_str(&PROMPT_WORD.repeat(words as usize));
    Value::String(s)
}

fn request_body(cfg: &Config, model: Option<&str>, text: Value) -> Vec<u8> {
    let mut body = serde_json::json!({
        "max_tokens": cfg.max_tokens,
        "stream": true,
        "stream_options": { "include_usage": true },
        "temperature": 0,
    });
    if cfg.chat {
        body["messages"] = serde_json::json!([{ "role": "user", "content": text }]);
    } else {
        body["prompt"] = text;
    }
    if let Some(m) = model {
        body["model"] = Value::String(m.into());
    }
    if !cfg.strict_openai {
        body["ignore_eos"] = Value::Bool(true);
        body["cache_prompt"] = Value::Bool(false);
    }
    body.to_string().into_bytes()
}

/// One streamed request, timed from just before connecting.
fn one(
    cfg: &Config,
    model: Option<&str>,
    words: u32,
    counter: &AtomicU64,
    in_flight: u32,
    origin: Instant,
) -> Result<Sample, BenchError> {
    let k = counter.fetch_add(1, Ordering::Relaxed);
    let body = request_body(cfg, model, prompt(cfg, k, words));
    let path = cfg.path();
    let url = cfg.endpoint.full(path);
    let limit = cfg.request_limit(in_flight);
    let start = Instant::now();
    let (head, reader) = exchange(cfg, "POST", path, &body, limit)?;
    let map = |e: io::Error, events: u64| map_io(e, &url, "while streaming", limit, events);
    let mut body = Body::new(reader, &head);
    if head.status != 200 {
        return Err(status_error(&url, &head, &mut body));
    }
    if let Some(ct) = &head.content_type
        && !ct.to_ascii_lowercase().starts_with("text/event-stream")
    {
        let excerpt = small_body(&mut body).map_or_else(|_| String::new(), |b| excerpt(&b));
        return Err(BenchError::Malformed {
            url,
            why: format!(
                "Content-Type {ct}, not text/event-stream: the server did not stream ({excerpt})"
            ),
        });
    }
    let mut s = Sample {
        sent: start.saturating_duration_since(origin),
        first_token: Duration::ZERO,
        last_token: Duration::ZERO,
        chunks: 0,
        usage_completion_tokens: None,
        usage_prompt_tokens: None,
        server_decode_tokens_per_s: None,
        fingerprint: None,
    };
    let mut events = 0u64;
    let mut line = Vec::new();
    loop {
        let data = next_event(&mut body, &mut line).map_err(|e| map(e, events))?;
        let Some(data) = data else {
            return Err(BenchError::Truncated {
                url,
                events,
                why: "end of response".into(),
            });
        };
        let at = origin.elapsed();
        if data.trim() == "[DONE]" {
            break;
        }
        events += 1;
        let v: Value = serde_json::from_str(&data).map_err(|e| BenchError::Malformed {
            url: url.clone(),
            why: format!(
                "event {events} is not JSON ({e}): {}",
                excerpt(data.as_bytes())
            ),
        })?;
        if let Some(err) = v.get("error") {
            let message = err
                .get("message")
                .and_then(Value::as_str)
                .map_or_else(|| err.to_string(), str::to_string);
            return Err(BenchError::InStream {
                url,
                message: excerpt(message.as_bytes()),
            });
        }
        if !v.is_object() {
            return Err(BenchError::Malformed {
                url,
                why: format!(
                    "event {events} is not a JSON object: {}",
                    excerpt(data.as_bytes())
                ),
            });
        }
        let choice = v.get("choices").and_then(|c| c.get(0));
        let text_of = |k: &str| choice.and_then(|c| c.get(k)).and_then(Value::as_str);
        let delta_of = |k: &str| {
            choice
                .and_then(|c| c.get("delta"))
                .and_then(|d| d.get(k))
                .and_then(Value::as_str)
        };
        let has_text = if cfg.chat {
            // Reasoning models stream their thinking as `reasoning_content`: generated tokens too.
            [delta_of("content"), delta_of("reasoning_content")]
                .iter()
                .any(|t| t.is_some_and(|t| !t.is_empty()))
        } else {
            text_of("text").is_some_and(|t| !t.is_empty())
        };
        if has_text {
            if s.chunks == 0 {
                s.first_token = at;
            }
            s.last_token = at;
            s.chunks += 1;
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            s.usage_completion_tokens = u
                .get("completion_tokens")
                .and_then(Value::as_u64)
                .or(s.usage_completion_tokens);
            s.usage_prompt_tokens = u
                .get("prompt_tokens")
                .and_then(Value::as_u64)
                .or(s.usage_prompt_tokens);
        }
        if let Some(r) = v
            .get("timings")
            .and_then(|t| t.get("predicted_per_second"))
            .and_then(Value::as_f64)
            .filter(|r| r.is_finite() && *r > 0.0)
        {
            s.server_decode_tokens_per_s = Some(r);
        }
        if s.fingerprint.is_none() {
            s.fingerprint = v
                .get("system_fingerprint")
                .and_then(Value::as_str)
                .map(|f| f.chars().take(EXCERPT_CHARS).collect());
        }
    }
    if s.chunks == 0 {
        return Err(BenchError::NoTokens { url });
    }
    // A usage count of zero beside streamed text is not a count to trust, nor one above the tokens asked for
    // (`max_tokens` caps what an OpenAI-compatible server generates): the streamed events count instead.
    if s.usage_completion_tokens
        .is_some_and(|n| n == 0 || n > u64::from(cfg.max_tokens))
    {
        s.usage_completion_tokens = None;
    }
    Ok(s)
}

/// The first model `GET /v1/models` lists: `Ok(Err(why))` when the server has no such list; `Err` when it cannot
/// be reached at all (nothing else would work either).
fn first_model(cfg: &Config) -> Result<Result<String, String>, BenchError> {
    let path = "/v1/models";
    let url = cfg.endpoint.full(path);
    let limit = cfg.timeouts.idle;
    let (head, reader) = exchange(cfg, "GET", path, &[], limit)?;
    let mut body = Body::new(reader, &head);
    if head.status != 200 {
        return Ok(Err(format!("answered HTTP {}", head.status)));
    }
    let text =
        small_body(&mut body).map_err(|e| map_io(e, &url, "reading the model list", limit, 0))?;
    let v: Value = match serde_json::from_slice(&text) {
        Ok(v) => v,
        Err(e) => return Ok(Err(format!("is not JSON ({e})"))),
    };
    Ok(v.get("data")
        .and_then(|d| d.get(0))
        .and_then(|m| m.get("id"))
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| "lists no model".to_string()))
}

/// Connects, sends one request, reads the response head.
fn exchange(
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
struct Conn {
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
fn map_io(e: io::Error, url: &str, what: &'static str, limit: Duration, events: u64) -> BenchError {
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
enum Framing {
    Chunked,
    Length(u64),
    /// Until the server closes the connection.
    Eof,
}

/// A response's status line and the headers the benchmark reads.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Head {
    status: u16,
    reason: String,
    content_type: Option<String>,
    framing: Framing,
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

/// The status line and headers (informational 1xx responses skipped).
fn read_head<R: BufRead>(r: &mut R) -> io::Result<Head> {
    let mut line = Vec::new();
    let mut used = 0usize;
    loop {
        let mut next = |line: &mut Vec<u8>| -> io::Result<String> {
            if !read_line(r, MAX_HEAD_BYTES, line)? {
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
            Ok(String::from_utf8_lossy(line).into_owned())
        };
        let status_line = next(&mut line)?;
        let mut parts = status_line.splitn(3, ' ');
        let version = parts.next().unwrap_or("");
        if !version.starts_with("HTTP/1.") {
            return Err(invalid(format!(
                "not an HTTP/1.x response: {}",
                excerpt(status_line.as_bytes())
            )));
        }
        let status: u16 = parts
            .next()
            .and_then(|s| s.parse().ok())
            .filter(|s| (100..=999).contains(s))
            .ok_or_else(|| {
                invalid(format!(
                    "bad status line {}",
                    excerpt(status_line.as_bytes())
                ))
            })?;
        let reason = parts.next().unwrap_or("").trim().to_string();
        let mut content_type = None;
        let mut chunked = false;
        let mut length: Option<u64> = None;
        loop {
            let h = next(&mut line)?;
            if h.is_empty() {
                break;
            }
            let (name, value) = h
                .split_once(':')
                .ok_or_else(|| invalid(format!("bad header line {}", excerpt(h.as_bytes()))))?;
            let value = value.trim();
            match name.trim().to_ascii_lowercase().as_str() {
                "content-type" => content_type = Some(value.to_string()),
                "transfer-encoding" => {
                    chunked = value
                        .rsplit(',')
                        .next()
                        .is_some_and(|c| c.trim().eq_ignore_ascii_case("chunked"));
                }
                "content-length" => {
                    let n: u64 = value.parse().map_err(|_| {
                        invalid(format!("Content-Length {value:?} is not a number"))
                    })?;
                    if length.is_some_and(|l| l != n) {
                        return Err(invalid("conflicting Content-Length headers"));
                    }
                    length = Some(n);
                }
                _ => {}
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

/// A response body, de-framed (chunked transfer coding or Content-Length), capped at [`MAX_BODY_BYTES`].
struct Body<R> {
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
    fn new(inner: R, head: &Head) -> Body<R> {
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
fn next_event<R: BufRead>(r: &mut R, line: &mut Vec<u8>) -> io::Result<Option<String>> {
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
fn small_body<R: BufRead>(body: &mut R) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    body.take(MAX_SMALL_BODY_BYTES).read_to_end(&mut out)?;
    Ok(out)
}

/// The first [`EXCERPT_CHARS`] characters of `bytes`, control characters shown as spaces.
fn excerpt(bytes: &[u8]) -> String {
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

fn status_error<R: BufRead>(url: &str, head: &Head, body: &mut Body<R>) -> BenchError {
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

/// The deployment a server was started from, as the store keys a bench's rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// The device the throughput is recorded against (the CPU, or the one GPU the plan uses).
    pub device: DeviceIdentity,
    pub model: ModelIdentity,
    /// The configuration it ran (threads, -ngl, batch, micro-batch, KV type, context); `sequences` is set per
    /// level.
    pub shape: Shape,
    /// Sequences the server decodes together (`-np`).
    pub parallel: u32,
}

/// The store rows of a report: per level, `ttft_ms` and `tpot_ms` (medians; the p90 and range in the context)
/// and `decode_tokens_per_s`, at `sequences = concurrency`. A decode rate at more requests in flight than the
/// server has slots is not recorded (the server decoded at most `parallel` together, so the row would claim a
/// configuration that never ran); the reason is returned with the rows.
pub fn measurements(report: &Report, target: &Target) -> (Vec<NewMeasurement>, Vec<String>) {
    let mut rows = Vec::new();
    let mut skipped = Vec::new();
    for l in &report.levels {
        let per_request = u64::from(l.requests.max(1));
        let context = |stats: Option<&Stats>| {
            let mut c = serde_json::json!({
                "url": report.url,
                "endpoint": report.endpoint,
                "concurrency": l.concurrency,
                "requests": l.requests,
                "n_prompt": l.prompt_tokens.unwrap_or(u64::from(report.prompt_tokens_requested)),
                "n_prompt_source": if l.prompt_tokens.is_some() { "usage" } else { "requested" },
                "n_gen": l.generated_tokens / per_request,
                "tokens_counted_from": l.tokens_counted_from,
                "ignore_eos": report.ignore_eos,
                "server_parallel": target.parallel,
                "wall_s": l.wall_s,
            });
            if let Some(s) = stats {
                c["p90"] = s.p90.into();
                c["mean"] = s.mean.into();
                c["min"] = s.min.into();
                c["max"] = s.max.into();
            }
            if let Some(f) = &report.server_fingerprint {
                c["server_fingerprint"] = f.clone().into();
            }
            if let Some(r) = l.server_decode_tokens_per_s {
                c["server_decode_tokens_per_s_per_request"] = r.into();
            }
            c["output_tokens_per_s"] = l.output_tokens_per_s.into();
            c.to_string()
        };
        let row = |metric: &str, value: f64, unit: &str, stats: Option<&Stats>| NewMeasurement {
            device: target.device.clone(),
            model: Some(target.model.clone()),
            metric: metric.into(),
            value,
            unit: unit.into(),
            shape: Shape {
                sequences: Some(l.concurrency),
                ..target.shape.clone()
            },
            context: context(stats),
        };
        rows.push(row("ttft_ms", l.ttft_ms.median, "ms", Some(&l.ttft_ms)));
        if let Some(t) = &l.tpot_ms {
            rows.push(row("tpot_ms", t.median, "ms", Some(t)));
        }
        match l.decode_tokens_per_s {
            Some(r) if l.concurrency <= target.parallel => {
                rows.push(row("decode_tokens_per_s", r, "tokens/s", None));
            }
            Some(_) => skipped.push(format!(
                "decode_tokens_per_s at concurrency {}: the deployment decodes at most {} sequences together (-np {}), so the others queued",
                l.concurrency, target.parallel, target.parallel
            )),
            None => skipped.push(format!(
                "decode_tokens_per_s at concurrency {}: no request generated two tokens",
                l.concurrency
            )),
        }
    }
    (rows, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn head(framing: Framing) -> Head {
        Head {
            status: 200,
            reason: "OK".into(),
            content_type: None,
            framing,
        }
    }

    fn body_of(bytes: &[u8], framing: Framing) -> io::Result<Vec<u8>> {
        let mut b = Body::new(Cursor::new(bytes.to_vec()), &head(framing));
        let mut out = Vec::new();
        b.read_to_end(&mut out)?;
        Ok(out)
    }

    #[test]
    fn urls_parse_to_host_port_and_prefix_and_https_is_refused_by_name() {
        let e = Endpoint::parse("http://127.0.0.1:8080/v1/").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.prefix.as_str()),
            ("127.0.0.1", 8080, "")
        );
        assert_eq!(
            e.full("/v1/completions"),
            "http://127.0.0.1:8080/v1/completions"
        );
        let e = Endpoint::parse("http://[::1]:9/proxy").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.prefix.as_str()),
            ("::1", 9, "/proxy")
        );
        assert_eq!(e.full("/v1/models"), "http://[::1]:9/proxy/v1/models");
        assert_eq!(Endpoint::parse("http://box").unwrap().port, 80);
        let err = Endpoint::parse("https://api.example.com").unwrap_err();
        assert!(matches!(err, BenchError::Https { .. }));
        assert!(err.to_string().contains("https is not supported"), "{err}");
        for bad in [
            "ftp://x",
            "localhost:8080",
            "http://:80",
            "http://h:0",
            "http://h:99999",
            "http://u:p@h",
            "http://h/?q",
        ] {
            assert!(
                matches!(Endpoint::parse(bad), Err(BenchError::BadUrl { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn chunked_bodies_are_deframed_with_extensions_and_trailers() {
        let raw = b"5;ext=1\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: 1\r\n\r\n";
        assert_eq!(body_of(raw, Framing::Chunked).unwrap(), b"hello, world");
        // Hex sizes above 9.
        let mut raw = b"1a\r\n".to_vec();
        raw.extend_from_slice(&[b'x'; 26]);
        raw.extend_from_slice(b"\r\n0\r\n\r\n");
        assert_eq!(body_of(&raw, Framing::Chunked).unwrap().len(), 26);
    }

    #[test]
    fn malformed_chunked_bodies_are_errors_of_their_kind() {
        for (raw, kind) in [
            (&b"zz\r\nhello\r\n0\r\n\r\n"[..], io::ErrorKind::InvalidData),
            (b"3\r\nhello\r\n0\r\n\r\n", io::ErrorKind::InvalidData),
            (b"5\r\nhel", io::ErrorKind::UnexpectedEof),
            (b"5\r\nhello\r\n", io::ErrorKind::UnexpectedEof),
            (b"11111111111111111\r\n", io::ErrorKind::InvalidData),
        ] {
            let e = body_of(raw, Framing::Chunked).unwrap_err();
            assert_eq!(e.kind(), kind, "{:?}: {e}", String::from_utf8_lossy(raw));
        }
    }

    #[test]
    fn content_length_bodies_stop_at_the_length_and_short_ones_are_truncated() {
        assert_eq!(
            body_of(b"hello, world", Framing::Length(5)).unwrap(),
            b"hello"
        );
        assert_eq!(body_of(b"", Framing::Length(0)).unwrap(), b"");
        let e = body_of(b"hel", Framing::Length(5)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(body_of(b"to the end", Framing::Eof).unwrap(), b"to the end");
    }

    #[test]
    fn heads_give_status_framing_and_type_and_skip_informational_responses() {
        let raw = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\nrest";
        let mut r = Cursor::new(&raw[..]);
        let h = read_head(&mut r).unwrap();
        assert_eq!(h.status, 200);
        assert_eq!(h.framing, Framing::Chunked);
        assert_eq!(h.content_type.as_deref(), Some("text/event-stream"));
        let h = read_head(&mut Cursor::new(
            &b"HTTP/1.0 503 Busy\r\ncontent-length: 3\r\n\r\n"[..],
        ))
        .unwrap();
        assert_eq!(
            (h.status, h.reason.as_str(), h.framing),
            (503, "Busy", Framing::Length(3))
        );
        for bad in [
            &b"SSH-2.0-OpenSSH\r\n\r\n"[..],
            b"HTTP/1.1 abc OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        ] {
            let e = read_head(&mut Cursor::new(bad)).unwrap_err();
            assert_eq!(
                e.kind(),
                io::ErrorKind::InvalidData,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
        let e = read_head(&mut Cursor::new(&b"HTTP/1.1 200 OK\r\nServer: x\r\n"[..])).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        let mut huge = b"HTTP/1.1 200 OK\r\n".to_vec();
        for _ in 0..2000 {
            huge.extend_from_slice(b"X-Padding: 0123456789012345678901234567890123456789\r\n");
        }
        let e = read_head(&mut Cursor::new(&huge[..])).unwrap_err();
        assert!(e.to_string().contains("response head over"), "{e}");
    }

    #[test]
    fn events_join_data_lines_and_skip_comments_and_fields() {
        let raw = b": ping\r\nevent: message\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\ndata:[DONE]\n\n";
        let mut r = Cursor::new(&raw[..]);
        let mut line = Vec::new();
        assert_eq!(
            next_event(&mut r, &mut line).unwrap().as_deref(),
            Some("{\"a\":\n1}")
        );
        assert_eq!(
            next_event(&mut r, &mut line).unwrap().as_deref(),
            Some("[DONE]")
        );
        assert_eq!(next_event(&mut r, &mut line).unwrap(), None);
        let e = next_event(&mut Cursor::new(&b"{\"not\": \"sse\"}\n"[..]), &mut line).unwrap_err();
        assert!(e.to_string().contains("not an event stream"), "{e}");
    }

    #[test]
    fn stats_use_the_middle_and_the_nearest_rank() {
        let s = Stats::of(&[5.0, 1.0, 3.0, 2.0, 4.0]).unwrap();
        assert_eq!(
            (s.median, s.p90, s.min, s.max, s.mean),
            (3.0, 5.0, 1.0, 5.0, 3.0)
        );
        let s = Stats::of(&(1..=10).map(f64::from).collect::<Vec<_>>()).unwrap();
        assert_eq!((s.median, s.p90), (5.5, 9.0));
        assert_eq!(Stats::of(&[]), None);
        assert_eq!(Stats::of(&[7.0]).unwrap().p90, 7.0);
    }

    fn sample(sent_ms: u64, first_ms: u64, last_ms: u64, tokens: u64, usage: bool) -> Sample {
        Sample {
            sent: Duration::from_millis(sent_ms),
            first_token: Duration::from_millis(first_ms),
            last_token: Duration::from_millis(last_ms),
            chunks: tokens,
            usage_completion_tokens: usage.then_some(tokens),
            usage_prompt_tokens: usage.then_some(100),
            server_decode_tokens_per_s: None,
            fingerprint: None,
        }
    }

    #[test]
    fn decode_rate_is_tokens_over_the_union_of_decode_intervals() {
        // Two requests decoding together for 1 s (11 tokens each: 10 after the first): 20 tokens/s.
        let together = [
            sample(0, 100, 1100, 11, true),
            sample(0, 100, 1100, 11, true),
        ];
        let l = summarize(2, &together, Duration::from_millis(1200)).unwrap();
        assert!((l.decode_tokens_per_s.unwrap() - 20.0).abs() < 1e-9);
        assert!((l.tpot_ms.unwrap().median - 100.0).abs() < 1e-9);
        assert_eq!(l.tokens_counted_from, TokenCount::Usage);
        assert_eq!(l.prompt_tokens, Some(100));
        // The same two queued one after the other (one slot): 10 tokens/s, not 20.
        let queued = [
            sample(0, 100, 1100, 11, false),
            sample(0, 1200, 2200, 11, false),
        ];
        let l = summarize(2, &queued, Duration::from_millis(2300)).unwrap();
        assert!((l.decode_tokens_per_s.unwrap() - 10.0).abs() < 1e-9);
        assert_eq!(l.ttft_ms.median, 650.0);
        assert_eq!(l.tokens_counted_from, TokenCount::Chunks);
        assert_eq!(l.prompt_tokens, None);
        // One token each: no TPOT, no decode rate.
        let l = summarize(1, &[sample(0, 50, 50, 1, true)], Duration::from_millis(60)).unwrap();
        assert_eq!((l.tpot_ms, l.decode_tokens_per_s), (None, None));
    }

    #[test]
    fn the_request_deadline_grows_with_tokens_and_requests_in_flight_and_saturates() {
        let mut cfg = Config {
            endpoint: Endpoint::parse("http://127.0.0.1:1").unwrap(),
            chat: false,
            served_model: None,
            prompt_tokens: 100,
            max_tokens: 20,
            concurrency: vec![1],
            requests: 1,
            warmup: 0,
            strict_openai: false,
            token_ids: false,
            timeouts: Timeouts::new(Duration::from_secs(10)),
        };
        assert_eq!(cfg.request_limit(1), Duration::from_secs(130));
        assert_eq!(cfg.request_limit(4), Duration::from_secs(490));
        cfg.prompt_tokens = MAX_PROMPT_TOKENS;
        cfg.max_tokens = MAX_NEW_TOKENS;
        assert_eq!(
            cfg.request_limit(MAX_CONCURRENCY),
            Duration::from_secs(10) + MAX_TIMEOUT
        );
        assert!(cfg.validate().is_ok());
        cfg.concurrency = vec![0];
        assert!(cfg.validate().unwrap_err().is_usage());
    }
}
