//! `optimizer recommend`: what to rent or buy for a model and a workload, ranked by cost, each option a real plan
//! (`app::recommend`). Flags are checked here (numbers finite and above 0; `--amortisation-years`,
//! `--usd-per-kwh` and `--utilisation` only with `--buy`); the table is for people, yaml and json carry every
//! field. Exit 0 when an option fits, 3 when none does (the output still says why each offer lost).

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;

use super::resolve::RawRuntime;
use super::{Common, Failure, OutputFormat, exit, render, write_stdout};
use crate::app::{Acquire, Choice, RecommendRequest, Recommendation};
use crate::plan::Overrides;

#[derive(Debug, Args)]
pub(super) struct RawRecommend {
    /// The model: a .gguf, or a safetensors checkpoint (as `resolve -m` takes it).
    #[arg(short = 'm', long)]
    model: PathBuf,
    /// Workload preset id (`optimizer profiles list --kind workloads`).
    #[arg(short = 'w', long, default_value = "inference")]
    workload: String,
    /// Time-to-first-token target in ms, replacing the preset's; options that miss it are dropped.
    #[arg(long = "sla-ttft-ms", value_name = "MS")]
    sla_ttft_ms: Option<f64>,
    /// Time-per-output-token target in ms, replacing the preset's; options that miss it are dropped.
    #[arg(long = "sla-tpot-ms", value_name = "MS")]
    sla_tpot_ms: Option<f64>,
    /// Requests per second to serve: each option's plan is sized to it (the sequences one instance runs, by
    /// Little's law on the plan's own speed, up to its KV pool and SLA; replicas on GPUs the plan leaves idle),
    /// then gets the instances its predicted throughput needs.
    #[arg(long = "rate", value_name = "REQ_PER_S")]
    rate: Option<f64>,
    /// Drop options costing more than this many USD per hour at the load.
    #[arg(long = "budget", value_name = "USD_PER_HOUR")]
    budget: Option<f64>,
    /// Rank cloud rental prices (the default).
    #[arg(long, conflicts_with = "buy")]
    rent: bool,
    /// Rank purchase prices, amortised (plus power with --usd-per-kwh).
    #[arg(long)]
    buy: bool,
    /// Years a purchase is spread over (default: the price file's `amortisation_years_default`).
    #[arg(long = "amortisation-years", value_name = "N", requires = "buy")]
    amortisation_years: Option<f64>,
    /// Electricity price in USD per kWh; without it power is not priced (there is no sourced default).
    #[arg(long = "usd-per-kwh", value_name = "USD", requires = "buy")]
    usd_per_kwh: Option<f64>,
    /// Share of the hours the GPUs draw their board power, above 0 up to 1 (default 1: every hour, an upper
    /// bound).
    #[arg(long, value_name = "FRACTION", requires = "usd_per_kwh")]
    utilisation: Option<f64>,
    /// The engine to plan for (as `resolve --runtime`).
    #[arg(long, value_enum)]
    runtime: Option<RawRuntime>,
    /// A price file (the schema of crates/core/profiles/prices/README.md) whose rows are added to the built-in
    /// tables, replacing rows of the same id; repeatable.
    #[arg(long = "prices", value_name = "FILE")]
    prices: Vec<PathBuf>,
    /// Include the machine you have (the `--inventory` file, or this machine as probed) at no rent or purchase
    /// cost: "do I need anything new?".
    #[arg(long)]
    owned: bool,
    /// Count prices' ages to this day (YYYY-MM-DD) instead of today.
    #[arg(long = "as-of", value_name = "DATE")]
    as_of: Option<String>,
    /// Options the table shows (yaml and json show all).
    #[arg(long, default_value_t = 10)]
    limit: usize,
    #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
    format: OutputFormat,
}

#[derive(Debug)]
pub(super) struct Settings {
    request: RecommendRequest,
    limit: usize,
    format: OutputFormat,
}

/// A number a flag takes: finite, above 0, and at most `max` when given (`resolve`'s SLA flags too).
pub(super) fn positive(
    flag: &str,
    v: Option<f64>,
    max: Option<f64>,
) -> Result<Option<f64>, Failure> {
    match v {
        Some(x) if !(x.is_finite() && x > 0.0 && max.is_none_or(|m| x <= m)) => Err(Failure::new(
            exit::USAGE,
            anyhow::anyhow!(
                "{flag} {x}: expected a number above 0{}",
                max.map(|m| format!(" and at most {m}")).unwrap_or_default()
            ),
        )),
        _ => Ok(v),
    }
}

pub(super) fn settle(raw: RawRecommend) -> Result<Settings, Failure> {
    let acquire = if raw.buy {
        Acquire::Buy {
            amortisation_years: positive("--amortisation-years", raw.amortisation_years, None)?,
            usd_per_kwh: positive("--usd-per-kwh", raw.usd_per_kwh, None)?,
            utilisation: positive("--utilisation", raw.utilisation, Some(1.0))?.unwrap_or(1.0),
        }
    } else {
        Acquire::Rent
    };
    Ok(Settings {
        request: RecommendRequest {
            model: raw.model,
            workload: raw.workload,
            overrides: Overrides {
                runtime: raw.runtime.map(|r| match r {
                    RawRuntime::LlamaCpp => crate::profile::RuntimeId::LlamaCpp,
                    RawRuntime::Vllm => crate::profile::RuntimeId::Vllm,
                    RawRuntime::Torch => crate::profile::RuntimeId::Torch,
                }),
                ..Overrides::default()
            },
            sla_ttft_ms: positive("--sla-ttft-ms", raw.sla_ttft_ms, None)?,
            sla_tpot_ms: positive("--sla-tpot-ms", raw.sla_tpot_ms, None)?,
            rate_req_per_s: positive("--rate", raw.rate, None)?,
            budget_usd_per_hour: positive("--budget", raw.budget, None)?,
            acquire,
            prices: raw.prices,
            as_of: raw.as_of,
            owned: raw.owned,
        },
        limit: raw.limit,
        format: raw.format,
    })
}

pub(super) fn run(common: &Common, s: &Settings) -> Result<(), Failure> {
    let r = crate::app::recommend(common, &s.request)?;
    let text = match s.format {
        OutputFormat::Table => table(&r, s.limit),
        f => render(&r, f)?,
    };
    write_stdout(&text)?;
    if r.options.is_empty() {
        return Err(Failure::new(
            exit::NO_FIT,
            anyhow::anyhow!(
                "none of the {} priced offers fits workload {}; the output says why each lost",
                r.priced_offers,
                r.workload
            ),
        ));
    }
    Ok(())
}

/// `12 d`, `3.2 y`: a price's age.
fn age(days: i64) -> String {
    if days < 365 {
        format!("{days} d")
    } else {
        format!("{:.1} y", days as f64 / 365.25)
    }
}

/// `8x h100-sxm`; across nodes `2x8x h100-sxm` (two nodes of eight).
fn gpus(c: &Choice) -> String {
    if c.nodes > 1 {
        format!("{}x{}x {}", c.nodes, c.gpus.count, c.gpus.profile)
    } else {
        format!("{}x {}", c.gpus.count, c.gpus.profile)
    }
}

/// The name an enum value has in the yaml and json output (`valid-until`, `analytic`).
fn word<T: serde::Serialize>(v: T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// A price in words: `price 0.081 2024-04-09 (published), 2.6 y old, confidence low`, or the owned machine's.
fn price_words(c: &Choice) -> String {
    match &c.price {
        Some(p) => format!(
            "price {} {} ({}), {} old, confidence {}",
            p.usd,
            p.date,
            word(p.date_kind),
            age(p.age_days),
            word(p.confidence)
        ),
        None => "owned: no rent or purchase".into(),
    }
}

/// Minutes one instance takes to train a million tokens at the plan's trained tokens per second.
fn minutes_per_million(c: &Choice) -> f64 {
    1e6 / c.tokens_per_s / 60.0
}

/// An option's speed in words: step time and minutes per million trained tokens (training), else TPOT and TTFT.
fn speed_words(c: &Choice) -> String {
    match &c.plan.performance.training {
        Some(t) => format!(
            "step {:.0} ms, {:.1} min per million trained tokens",
            t.step_time_ms,
            minutes_per_million(c)
        ),
        None => format!(
            "TPOT {:.1} ms, TTFT {:.0} ms",
            c.time_per_output_token_ms, c.time_to_first_token_ms
        ),
    }
}

/// One option in a sentence: its offer, cost, speed and price age, and the `resolve` command for it.
fn line(r: &Recommendation, c: &Choice) -> String {
    format!(
        "{} ({}, {}): {:.2} USD/h, {:.3} USD per million {} tokens, {} ({}); {}\n    resolve -m {} -w {} {}",
        c.id,
        c.offer,
        gpus(c),
        c.usd_per_hour,
        c.usd_per_million_tokens,
        r.tokens,
        speed_words(c),
        word(c.basis),
        price_words(c),
        r.model.path,
        r.workload,
        c.resolve_flags
    )
    .trim_end()
    .to_string()
}

/// The ranking for people.
fn table(r: &Recommendation, limit: usize) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "Model:    {} ({} {}, {:.2} B parameters, {:.2} GiB)",
        r.model.path,
        r.model.format,
        r.model.architecture,
        r.model.parameter_count as f64 / 1e9,
        crate::units::gib(r.model.tensor_bytes)
    );
    let _ = writeln!(
        t,
        "Workload: {}; SLA: {}",
        r.workload,
        if r.sla.is_empty() {
            "none".to_string()
        } else {
            r.sla.join(", ")
        }
    );
    let _ = writeln!(
        t,
        "Load:     {}",
        match r.rate_req_per_s {
            Some(rate) => format!(
                "{rate} requests/s: each option's plan is sized to it (sequences by Little's law, replicas on idle GPUs), then run on the instances it needs"
            ),
            None => "one instance at its predicted capacity (no --rate)".into(),
        }
    );
    let _ = writeln!(
        t,
        "Prices:   {}: {} priced offers{}, {} distinct machines planned with resolve's planner{}; price ages counted to {}",
        r.acquire,
        r.priced_offers,
        if r.multinode_offers > 0 {
            format!(" (and {} of several nodes)", r.multinode_offers)
        } else {
            String::new()
        },
        r.machines_planned,
        if r.plans_run > r.machines_planned {
            format!(" ({} plans, sized to the rate)", r.plans_run)
        } else {
            String::new()
        },
        r.as_of
    );
    let _ = writeln!(
        t,
        "Result:   {} fit, {} did not (no-fit, SLA, budget or error)\n",
        r.options.len(),
        r.rejected.len()
    );
    // Training: the step time (ms) and minutes per million trained tokens stand where serving has TTFT and TPOT.
    let training = r.tokens == "trained";
    let (first, second) = if training {
        ("step", "min/Mt")
    } else {
        ("TTFT", "TPOT")
    };
    let header = format!(
        "{:>3}  {:<34} {:<22} {:<9} {:<42} {:>9} {:>7} {:>7} {:>6} {:<10} {:>4} {:>9} {:>9} {:>6} {:<6}",
        "#",
        "price id",
        "gpus",
        "runtime",
        "settings",
        "tok/s",
        "req/s",
        first,
        second,
        "basis",
        "inst",
        "USD/h",
        "USD/Mtok",
        "age",
        "conf"
    );
    let _ = writeln!(t, "{}", header.trim_end());
    for (i, c) in r.options.iter().take(limit).enumerate() {
        let (a, b) = match &c.plan.performance.training {
            Some(t) => (t.step_time_ms, format!("{:.1}", minutes_per_million(c))),
            None => (
                c.time_to_first_token_ms,
                format!("{:.1}", c.time_per_output_token_ms),
            ),
        };
        let row = format!(
            "{:>3}  {:<34} {:<22} {:<9} {:<42} {:>9.1} {:>7.3} {:>7.0} {:>6} {:<10} {:>4} {:>9.3} {:>9.3} {:>6} {:<6}",
            i + 1,
            c.id,
            gpus(c),
            c.runtime,
            c.settings,
            c.tokens_per_s,
            c.requests_per_s,
            a,
            b,
            word(c.basis),
            c.instances,
            c.usd_per_hour,
            c.usd_per_million_tokens,
            c.price.as_ref().map_or("-".into(), |p| age(p.age_days)),
            c.price.as_ref().map_or("-".into(), |p| word(p.confidence))
        );
        let _ = writeln!(t, "{}", row.trim_end());
        if c.owned {
            let _ = writeln!(t, "     ^ owned: {}", c.offer.trim_start_matches("owned: "));
        }
        if c.status != crate::emit::Status::Fits {
            let _ = writeln!(
                t,
                "     ^ status {}: runs, but misses an SLA target",
                word(c.status)
            );
        }
    }
    if r.options.len() > limit {
        let _ = writeln!(
            t,
            "     ... {} more (--limit, or --format yaml)",
            r.options.len() - limit
        );
    }
    let find = |id: &Option<String>| {
        id.as_ref()
            .and_then(|id| r.options.iter().find(|c| &c.id == id))
    };
    t.push('\n');
    if let Some(o) = &r.owned {
        let _ = writeln!(t, "Owned:       {o}");
    }
    if let Some(c) = find(&r.cheapest) {
        let _ = writeln!(t, "Cheapest:    {}", line(r, c));
        let _ = writeln!(t, "    throughput: {}", c.throughput_basis);
        if let Some(k) = &c.concurrency {
            let _ = writeln!(t, "    concurrency ({}): {}", k.bound, k.why);
        }
        let _ = writeln!(t, "    cost: {}", c.cost_basis);
        let _ = writeln!(t, "    host: {}", c.host);
        if let Some(f) = &c.fabric {
            let _ = writeln!(t, "    fabric: {f}");
        }
    }
    if let Some(c) = find(&r.fewest_gpus) {
        let _ = writeln!(t, "Fewest GPUs: {}", line(r, c));
    }
    if !r.pareto.is_empty() {
        let _ = writeln!(
            t,
            "Pareto front (USD/h vs {}; each is faster than every cheaper option):",
            if training {
                "time per trained token"
            } else {
                "latency"
            }
        );
        for id in &r.pareto {
            if let Some(c) = find(&Some(id.clone())) {
                let _ = writeln!(
                    t,
                    "  {:<34} {:>9.3} USD/h  {}  ({})",
                    c.id,
                    c.usd_per_hour,
                    speed_words(c),
                    gpus(c)
                );
            }
        }
    }
    if !r.cheaper_lost.is_empty() {
        let _ = writeln!(t, "Why cheaper offers lost (nearest in price first):");
        for l in r.cheaper_lost.iter().take(limit) {
            let _ = writeln!(
                t,
                "  {:<34} {:>9.3} USD/h  {}: {}",
                l.price_id, l.usd_per_hour, l.reason, l.detail
            );
        }
        if r.cheaper_lost.len() > limit {
            let _ = writeln!(t, "  ... {} more", r.cheaper_lost.len() - limit);
        }
    }
    if r.options.is_empty() && !r.rejected.is_empty() {
        let _ = writeln!(t, "Why every offer lost:");
        for l in r.rejected.iter().take(limit) {
            let _ = writeln!(
                t,
                "  {:<34} {:>9.3} USD/h  {}: {}",
                l.price_id, l.usd_per_hour, l.reason, l.detail
            );
        }
    }
    for n in &r.notes {
        let _ = writeln!(t, "note: {n}");
    }
    t
}
