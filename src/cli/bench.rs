//! `optimizer bench`: measures a running OpenAI-compatible server (time to first token, time per output token,
//! decode throughput at a few concurrencies) and, with `--deployment`, records the results against the
//! deployment the server was started from. Progress on stderr; the summary table (or JSON) on stdout.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::{Common, Failure, OutputFormat, exit, render, write_stdout};
use crate::calibrate::server::{self, Config, Endpoint, Timeouts};

#[derive(Debug, Args)]
pub(super) struct RawBench {
    /// The server's base URL, plain http: http://HOST:PORT (a trailing /v1 is accepted).
    #[arg(long)]
    url: String,
    /// The document `optimizer resolve` wrote for the deployment the server was started from: the results are
    /// recorded against its device, model and configuration. Without it they are printed, not recorded.
    #[arg(long)]
    deployment: Option<PathBuf>,
    /// Requests in flight at each level, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1u32, 2, 4])]
    concurrency: Vec<u32>,
    /// Requests per level (at least the level's concurrency are sent).
    #[arg(long, default_value_t = 8)]
    requests: u32,
    /// Prompt length in tokens (a filler text, corrected after the warm-up by the count the server reports).
    #[arg(long, default_value_t = 256)]
    prompt_tokens: u32,
    /// Tokens each request generates (with ignore_eos, exactly these).
    #[arg(long, default_value_t = 64)]
    max_tokens: u32,
    /// Use /v1/chat/completions instead of /v1/completions.
    #[arg(long)]
    chat: bool,
    /// The `model` field of each request (default: the first of GET /v1/models). vLLM and Ollama need it.
    #[arg(long)]
    served_model: Option<String>,
    /// Requests sent before measuring, not counted.
    #[arg(long, default_value_t = 1)]
    warmup: u32,
    /// Send the prompt as token ids (llama-server's and vLLM's /v1/completions): exactly --prompt-tokens,
    /// whatever the tokenizer. Not with --chat.
    #[arg(long, conflicts_with = "chat")]
    token_ids: bool,
    /// Send only OpenAI API fields: no ignore_eos, no cache_prompt (for servers that refuse unknown fields).
    #[arg(long)]
    strict_openai: bool,
    /// Seconds to wait for the connection and for any byte of a response.
    #[arg(long, value_name = "SECONDS", default_value_t = server::DEFAULT_TIMEOUT.as_secs())]
    timeout: u64,
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
}

/// Validated settings.
#[derive(Debug)]
pub(super) struct Settings {
    config: Config,
    deployment: Option<PathBuf>,
    format: OutputFormat,
}

pub(super) fn settle(raw: RawBench) -> Result<Settings, Failure> {
    let endpoint = Endpoint::parse(&raw.url).map_err(crate::app::bench_failure)?;
    if raw.format == OutputFormat::Yaml {
        return Err(Failure::new(
            exit::USAGE,
            anyhow::anyhow!("bench writes --format table or json"),
        ));
    }
    let mut concurrency = Vec::new();
    for c in raw.concurrency {
        if !concurrency.contains(&c) {
            concurrency.push(c);
        }
    }
    let config = Config {
        endpoint,
        chat: raw.chat,
        served_model: raw.served_model,
        prompt_tokens: raw.prompt_tokens,
        max_tokens: raw.max_tokens,
        concurrency,
        requests: raw.requests,
        warmup: raw.warmup,
        strict_openai: raw.strict_openai,
        token_ids: raw.token_ids,
        timeouts: Timeouts::new(Duration::from_secs(raw.timeout)),
    };
    config.validate().map_err(crate::app::bench_failure)?;
    Ok(Settings {
        config,
        deployment: raw.deployment,
        format: raw.format,
    })
}

pub(super) fn run(common: &Common, s: &Settings) -> Result<(), Failure> {
    let progress = |line: &str| {
        let _ = writeln!(std::io::stderr().lock(), "bench: {line}");
    };
    let done = crate::app::bench(common, s.deployment.as_deref(), &s.config, &progress)?;
    let text = match s.format {
        OutputFormat::Table => table(&done),
        f => render(&done, f)?,
    };
    let mut err = std::io::stderr().lock();
    match &done.recorded {
        None => {
            let _ = writeln!(
                err,
                "not recorded: no --deployment (pass the document the server was started from to record these results)"
            );
        }
        Some(r) => {
            for why in &r.skipped {
                let _ = writeln!(err, "not recorded: {}", super::terminal::safe_lines(why));
            }
        }
    }
    drop(err);
    write_stdout(&text)
}

/// The summary table. The served model id and the notes come from the server (GET /v1/models), the
/// deployment's names from its document: printed through [`super::terminal::safe`].
fn table(done: &crate::app::Benched) -> String {
    use super::table::right;
    use super::terminal::safe;
    let r = &done.report;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "{} {}{}: prompt {} tokens{}, {} generated per request{}",
        safe(&r.url),
        r.endpoint,
        r.served_model
            .as_ref()
            .map_or_else(String::new, |m| format!(" (model {})", safe(m))),
        r.prompt_tokens_requested,
        r.levels
            .iter()
            .find_map(|l| l.prompt_tokens)
            .map_or_else(String::new, |n| format!(" ({n} as the server counted)")),
        r.max_tokens,
        if r.ignore_eos { ", ignore_eos" } else { "" }
    );
    let mut levels = super::table::Table::new(&[
        right("conc", 5),
        right("reqs", 5),
        right("ttft p50", 10),
        right("ttft p90", 10),
        right("tpot p50", 10),
        right("tpot p90", 10),
        right("decode tok/s", 13),
        right("output tok/s", 13),
    ]);
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    for l in &r.levels {
        levels.row([
            l.concurrency.to_string(),
            l.requests.to_string(),
            ms(Some(l.ttft_ms.median)),
            ms(Some(l.ttft_ms.p90)),
            ms(l.tpot_ms.map(|s| s.median)),
            ms(l.tpot_ms.map(|s| s.p90)),
            ms(l.decode_tokens_per_s),
            format!("{:.1}", l.output_tokens_per_s),
        ]);
    }
    t.push_str(&levels.render());
    let _ = writeln!(t, "times in ms; tokens counted from {}", {
        let mut from: Vec<&str> = r
            .levels
            .iter()
            .map(|l| l.tokens_counted_from.describe())
            .collect();
        from.dedup();
        from.join("; ")
    });
    for n in &r.notes {
        let _ = writeln!(t, "note: {}", safe(n));
    }
    if let Some(rec) = &done.recorded {
        let _ = writeln!(
            t,
            "recorded against {} ({}): run {}, rows {}",
            safe(&rec.deployment),
            safe(&rec.device_profile),
            rec.run,
            rec.rows
                .iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    t
}
