//! Per-request samples of a server benchmark, their statistics per concurrency level (TTFT and TPOT spread,
//! decode rate over the union of decode intervals), and the report a whole run sums up to.

use std::time::Duration;

use serde::Serialize;

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
    pub(crate) fn tokens(&self) -> u64 {
        self.usage_completion_tokens.unwrap_or(self.chunks)
    }

    pub(crate) fn ttft(&self) -> Duration {
        self.first_token.saturating_sub(self.sent)
    }

    /// Milliseconds per output token after the first, when there were at least two.
    pub(crate) fn tpot_ms(&self) -> Option<f64> {
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
    pub(crate) fn of(values: &[f64]) -> Option<Stats> {
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
