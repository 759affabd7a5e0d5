//! The load generator: the served model, the warm-up and its prompt correction, the concurrency levels (one
//! thread and connection per request in flight), the prompts and request bodies, and the timing of one streamed
//! request.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::http::{excerpt, exchange, next_event, small_body, status_error, stream};
use super::stats::{Report, Sample, summarize};
use super::{BenchError, Config, EXCERPT_CHARS, MAX_PROMPT_TOKENS};

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
    let limit = cfg.request_limit(in_flight);
    let start = Instant::now();
    let (call, head, body) = exchange(cfg, "POST", cfg.path(), &body, limit)?;
    let url = call.url.clone();
    if head.status != 200 {
        return Err(status_error(&call, &head, body));
    }
    if let Some(ct) = &head.content_type
        && !ct.to_ascii_lowercase().starts_with("text/event-stream")
    {
        let excerpt = small_body(body).map_or_else(|_| String::new(), |b| excerpt(&b));
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
    let mut body = stream(body);
    loop {
        let data = next_event(&mut body, &mut line)
            .map_err(|e| call.error(e, "while streaming", events))?;
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
            // Each text event carries at least one token, and `max_tokens` caps what the server may generate:
            // more events than that is not a generation of this request (stop reading, count nothing).
            if s.chunks > u64::from(cfg.max_tokens) {
                return Err(BenchError::Malformed {
                    url,
                    why: format!(
                        "{} text events for --max-tokens {}: the server streamed more tokens than asked for",
                        s.chunks, cfg.max_tokens
                    ),
                });
            }
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

/// Why `GET /v1/models` named no model: a note in the report (the run goes on without a model field), read as
/// "GET /v1/models {why}".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum NoModelList {
    #[error("answered HTTP {0}")]
    Status(u16),
    #[error("is not JSON ({0})")]
    NotJson(String),
    #[error("lists no model")]
    Empty,
}

/// The first model `GET /v1/models` lists: `Ok(Err(why))` when the server has no such list; `Err` when it cannot
/// be reached at all (nothing else would work either).
fn first_model(cfg: &Config) -> Result<Result<String, NoModelList>, BenchError> {
    let (call, head, body) = exchange(cfg, "GET", "/v1/models", &[], cfg.timeouts.idle)?;
    if head.status != 200 {
        return Ok(Err(NoModelList::Status(head.status)));
    }
    let text = small_body(body).map_err(|e| call.error(e, "reading the model list", 0))?;
    let v: Value = match serde_json::from_slice(&text) {
        Ok(v) => v,
        Err(e) => return Ok(Err(NoModelList::NotJson(e.to_string()))),
    };
    Ok(v.get("data")
        .and_then(|d| d.get(0))
        .and_then(|m| m.get("id"))
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or(NoModelList::Empty))
}
