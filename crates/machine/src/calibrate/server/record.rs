//! Recording a benchmark: the deployment a server was started from, and the store rows a report becomes.

use optimizer_store::{DeviceIdentity, ModelIdentity, NewMeasurement, Shape};

use super::stats::{Report, Stats};

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
