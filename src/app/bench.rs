//! `bench`: a running OpenAI-compatible server measured at the deployment's configuration, and recorded.

use super::*;

/// What `bench` measured and, with a deployment, recorded.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Benched {
    pub report: crate::calibrate::server::Report,
    /// `None`: no deployment was given, so nothing was recorded.
    pub recorded: Option<BenchRecorded>,
}

/// Where `bench` recorded its results.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BenchRecorded {
    pub deployment: String,
    pub run: i64,
    pub rows: Vec<i64>,
    /// The device profile the rows are keyed by.
    pub device_profile: String,
    /// Results not recorded, and why.
    pub skipped: Vec<String>,
}

/// The failure of a benchmark: what was asked cannot work (2), or the server or network failed (1).
pub fn bench_failure(e: crate::calibrate::server::BenchError) -> Failure {
    use crate::calibrate::server::BenchError;
    let hint = match &e {
        BenchError::Connect { .. } | BenchError::Resolve { .. } => {
            Some("is the server running there? check --url and the port it listens on")
        }
        BenchError::Stalled { .. } | BenchError::Deadline { .. } => {
            Some("raise --timeout, or lower --concurrency, --prompt-tokens or --max-tokens")
        }
        BenchError::Status { status: 404, .. } => Some(
            "the server has no such endpoint: --url is its base (http://HOST:PORT); --chat uses /v1/chat/completions",
        ),
        BenchError::Status { status: 400, .. } => Some(
            "the server refused the request: --strict-openai drops ignore_eos and cache_prompt, --served-model names the model",
        ),
        _ => None,
    };
    let code = if e.is_usage() {
        exit::USAGE
    } else {
        exit::RUNTIME
    };
    let f = Failure::new(code, e);
    match hint {
        Some(h) => f.hint(h),
        None => f,
    }
}

/// `bench`: measures a running OpenAI-compatible server and, given the deployment document it was started
/// from, records the results against that deployment's device, model and configuration in one complete run
/// (`ttft_ms`, `tpot_ms`, `decode_tokens_per_s` per concurrency, `sequences` = the concurrency), so the next
/// `resolve` for the same configuration reports the measured decode rate. The deployment and the store are
/// checked before any request is sent.
pub fn bench(
    sources: &Sources,
    deployment: Option<&Path>,
    cfg: &crate::calibrate::server::Config,
    progress: &dyn Fn(&str),
) -> Result<Benched, Failure> {
    use crate::calibrate::server;
    cfg.validate().map_err(bench_failure)?;
    let target = match deployment {
        None => None,
        Some(path) => {
            let planned = Planned::read(path)?;
            let device_name = planned.throughput_device()?;
            let device = planned.device(&device_name)?;
            let per_sequence = u64::from(planned.settings.context_per_sequence);
            let asked = u64::from(cfg.prompt_tokens) + u64::from(cfg.max_tokens);
            if asked > per_sequence {
                return Err(planned
                    .usage(format!(
                        "--prompt-tokens {} plus --max-tokens {} exceed the {per_sequence} tokens a sequence holds in this deployment",
                        cfg.prompt_tokens, cfg.max_tokens
                    ))
                    .hint("lower --prompt-tokens or --max-tokens"));
            }
            let store = sources.store()?;
            let target = server::Target {
                device,
                model: planned.model(),
                shape: planned.shape(),
                parallel: planned.settings.parallel,
            };
            Some((planned, store, target, device_name))
        }
    };
    let report = server::run(cfg, progress).map_err(bench_failure)?;
    let Some((planned, store, target, device_name)) = target else {
        return Ok(Benched {
            report,
            recorded: None,
        });
    };
    let (mut rows, mut skipped) = server::measurements(&report, &target);
    // A rate the device could not reach for this model is a server's or a network's artefact: not recorded.
    // The model's header is read once, not per level.
    let bounds = planned.rate_bounds(sources, &device_name);
    rows.retain(|m| {
        if m.metric != "decode_tokens_per_s" {
            return true;
        }
        let sequences = m.shape.sequences.map_or(1, u64::from);
        let checked = bounds.map_or(Ok(()), |(peaks, work)| {
            optimizer_core::plausible::check_tokens_per_s(
                m.value,
                crate::profile::Phase::Decode,
                peaks,
                work,
                sequences,
            )
        });
        match checked {
            Ok(()) => true,
            Err(why) => {
                skipped.push(format!(
                    "decode_tokens_per_s at concurrency {sequences}: {why}"
                ));
                false
            }
        }
    });
    let mut new_run = planned.run("bench");
    new_run.settings = serde_json::json!({
        "url": report.url,
        "endpoint": report.endpoint,
        "served_model": report.served_model,
        "prompt_tokens": report.prompt_tokens_requested,
        "max_tokens": report.max_tokens,
        "concurrency": cfg.concurrency,
        "requests": cfg.requests,
        "deployment": planned.doc.settings,
    })
    .to_string();
    let run = store.begin_run(&new_run).map_err(store_failure)?;
    let ids = rows
        .iter()
        .map(|m| store.record(run, m))
        .collect::<Result<Vec<i64>, _>>()
        .map_err(store_failure)?;
    store
        .finish_run(run, &now_rfc3339())
        .map_err(store_failure)?;
    Ok(Benched {
        report,
        recorded: Some(BenchRecorded {
            deployment: planned.path.display().to_string(),
            run: run.0,
            rows: ids,
            device_profile: target.device.profile,
            skipped,
        }),
    })
}
