//! `recommend`: what to rent or buy for a model and a workload (issue 29). Every priced option (a cloud row of
//! `crates/core/profiles/prices/cloud.yaml`, or with `buy` a purchase row) becomes a what-if machine, planned by
//! [`resolve_loaded`], the same code path `resolve --hardware` takes; the plans that fit are priced and ranked.
//! Nothing here predicts speed or memory itself: every figure is the plan's, or arithmetic on the plan's figures
//! and the price row's, and each option says which (`cost_basis`, `throughput_basis`, the price's date and age).
//! With `--rate`, each machine's plan is sized to the load ([`sizing`]): the sequences an instance runs and
//! replicas on GPUs the preset's plan leaves idle, pinned with `resolve`'s own `--parallel` and `--objective`, so
//! an option is still one `resolve` command.
//! With `owned`, the machine of `--inventory` (or this one, probed) is one more option at no rent and no
//! purchase (power only, with `--usd-per-kwh` and the probed power limits), planned as plain `resolve` plans it:
//! it answers "do I need anything new?". Trade-off: the owned machine counts as one instance only (you have one),
//! so a `--rate` it cannot serve alone rejects it (`capacity`) rather than mixing it with rented instances.
//! For each priced multi-GPU instance one of which does not hold the model, N = 2..[`offers::MAX_NODES`] of
//! them are offered too where the instance's node profile states its fabric ([`offers::multinode`]), planned by
//! the same path with `resolve --hardware NODE --nodes N` (the multi-node planner a `--cluster` of them gets)
//! and priced as N instances; the instances whose fabric no profile states are skipped and named in a note.
//! May touch: the model file, the profiles, the store (through `resolve`), the price files given.

use serde::Serialize;

use super::*;
use crate::emit::{Settings, SlaStatus, Status};
use crate::evidence::Basis;
use crate::profile::prices::{self, Confidence, DateKind, PriceGpus};

mod offers;
mod sizing;
use offers::offers;
pub use sizing::Concurrency;
use sizing::{Load, Sized, size, throughput};

/// Seconds in an hour, for USD per hour against tokens per second.
const SECONDS_PER_HOUR: f64 = 3600.0;
/// Tokens in the unit prices are quoted per (USD per million tokens).
const TOKENS_PER_MILLION: f64 = 1e6;
/// Seconds in a day, for the age of a price from the clock.
const SECONDS_PER_DAY: u64 = 86_400;

/// Rent (cloud rows, USD per hour as charged) or buy (purchase rows, amortised).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Acquire {
    Rent,
    Buy {
        /// Years a purchase is spread over; `None`: the price file's default.
        amortisation_years: Option<f64>,
        /// Electricity price; `None`: power is not priced (no sourced default), and the result says so.
        usd_per_kwh: Option<f64>,
        /// Share of the hours the GPUs draw their board power (1: every hour, an upper bound).
        utilisation: f64,
    },
}

/// What `recommend` is asked.
#[derive(Debug, Clone)]
pub struct RecommendRequest {
    pub model: PathBuf,
    pub workload: String,
    /// The runtime and other pins, as `resolve` takes them.
    pub overrides: Overrides,
    /// SLA targets replacing the preset's (each one given).
    pub sla_ttft_ms: Option<f64>,
    pub sla_tpot_ms: Option<f64>,
    /// Requests per second to serve; `None`: one instance at its capacity.
    pub rate_req_per_s: Option<f64>,
    /// Drop options costing more than this, USD per hour at the load.
    pub budget_usd_per_hour: Option<f64>,
    pub acquire: Acquire,
    /// `--prices FILE`s: rows added to (or, by id, replacing) the built-in tables.
    pub prices: Vec<PathBuf>,
    /// The day prices' ages are counted to (`YYYY-MM-DD`); `None`: today by the clock.
    pub as_of: Option<String>,
    /// Include the machine of `--inventory` (or this one, probed) at zero rent or purchase cost.
    pub owned: bool,
}

/// The price an option rests on, with its age.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PriceRef {
    pub id: String,
    /// USD per hour (rent) or USD (buy), as the row has it.
    pub usd: f64,
    pub date: String,
    pub date_kind: DateKind,
    /// Days from `date` to the day the ages are counted to.
    pub age_days: i64,
    pub confidence: Confidence,
    pub source: String,
    /// The price file the row came from.
    pub file: String,
}

/// One option that fits, priced.
#[derive(Debug, Clone, Serialize)]
pub struct Choice {
    /// The price row's id, or [`prices::OWNED_ID`].
    pub id: String,
    /// The machine of `--inventory` (or this one): no rent, no purchase.
    pub owned: bool,
    /// The offer: provider, instance, region and pricing (rent), or the item bought.
    pub offer: String,
    pub gpus: PriceGpus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_profile: Option<String>,
    /// Nodes of the instance one copy of the plan spans (`resolve --nodes`; 1: one machine).
    pub nodes: u32,
    /// Across nodes: the fabric the plan is priced over, where it comes from, and what is not stated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fabric: Option<String>,
    /// Where the planned host's cores and memory come from.
    pub host: String,
    /// The `resolve` flags that plan the same machine (its plan is this option's, exactly).
    pub resolve_flags: String,
    /// With `--rate`: the sequences the plan runs for its share of the rate, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<Concurrency>,
    pub status: Status,
    pub runtime: String,
    /// The plan's key settings, in words.
    pub settings: String,
    pub time_to_first_token_ms: f64,
    pub time_per_output_token_ms: f64,
    /// The plan's speed basis (analytic, calibrated, measured) and the store rows behind it.
    pub basis: Basis,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub evidence: Vec<i64>,
    /// Replicas of the plan on one instance (llama-server per GPU, vLLM data parallel).
    pub replicas_per_instance: u32,
    /// Tokens per second one instance sustains (output, or embedded/trained tokens: `Recommendation::tokens`).
    pub tokens_per_s: f64,
    /// Requests per second one instance sustains (0 for training).
    pub requests_per_s: f64,
    pub throughput_basis: String,
    /// Instances needed for the rate (1 without one).
    pub instances: u64,
    pub gpus_total: u64,
    /// USD per hour for all instances at the load.
    pub usd_per_hour: f64,
    /// USD per million tokens at that load.
    pub usd_per_million_tokens: f64,
    pub cost_basis: String,
    /// The price row (none for the owned machine).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub price: Option<PriceRef>,
    /// The plan, as `resolve` writes it.
    #[serde(skip)]
    pub plan: Box<Deployment>,
    /// The request `resolve` plans it from (what `resolve_flags` say): benches/recommend.rs times it.
    #[serde(skip)]
    pub request: Box<ResolveRequest>,
}

/// An offer that did not make the ranking, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rejected {
    pub price_id: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub owned: bool,
    pub offer: String,
    pub gpus: PriceGpus,
    /// USD per hour of one instance.
    pub usd_per_hour: f64,
    /// `no-fit`, `sla`, `workload-unmet`, `budget`, `throughput` (ranked, but more instances cost more),
    /// `capacity` (the owned machine alone serves less than the rate), `error`.
    pub reason: String,
    pub detail: String,
}

/// The ranking.
#[derive(Debug, Clone, Serialize)]
pub struct Recommendation {
    pub model: crate::emit::ModelRef,
    pub workload: String,
    /// `rent` or `buy`.
    pub acquire: &'static str,
    pub as_of: String,
    /// The SLA the plans were held to, and where each target came from.
    pub sla: Vec<String>,
    pub rate_req_per_s: Option<f64>,
    /// What a token of the cost per million is: `output`, `embedded` or `trained`.
    pub tokens: &'static str,
    pub priced_offers: usize,
    /// Offers of several nodes of one priced instance, made for the instances one of which does not hold the
    /// model.
    pub multinode_offers: usize,
    pub machines_planned: usize,
    /// Plans made in all (`resolve_loaded` calls): one per machine, more where `--rate` sizes them.
    pub plans_run: usize,
    /// Ranked: least USD per hour at the load first.
    pub options: Vec<Choice>,
    /// `price.id` of the cheapest option meeting every SLA target (else the cheapest).
    pub cheapest: Option<String>,
    /// `price.id` of the option with the fewest GPUs (then the cheapest of those).
    pub fewest_gpus: Option<String>,
    /// `price.id`s of the options no other beats on both cost and latency, cheapest first.
    pub pareto: Vec<String>,
    /// Offers cheaper per instance than the cheapest option's instance, nearest in price first, and why each lost.
    pub cheaper_lost: Vec<Rejected>,
    pub rejected: Vec<Rejected>,
    /// With `owned`: whether the owned machine does the job, or what it lacks and the cheapest new option.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owned: Option<String>,
    pub notes: Vec<String>,
}

/// `recommend`: the model and workload once, then every offer planned by `resolve`'s own path (one plan per
/// distinct machine), priced and ranked.
pub fn recommend(sources: &Sources, req: &RecommendRequest) -> Result<Recommendation, Failure> {
    let spec = crate::model::load(&req.model)?;
    crate::model::safetensors::require_config(&req.model, &spec)?;
    let set = sources.profiles()?;
    let preset = &set
        .find_workload(&req.workload)
        .map_err(|e| lookup_failure(e, "workloads"))?
        .value;
    // The targets are applied by `resolve_loaded` itself (as `resolve --sla-ttft-ms/--sla-tpot-ms` applies
    // them); `workload` is the same application, for the figures ranked here.
    let targets = SlaTargets {
        time_to_first_token_ms: req.sla_ttft_ms,
        time_per_output_token_ms: req.sla_tpot_ms,
    };
    let workload = targets.apply(preset);
    let training = workload.training.is_some();
    if training && req.rate_req_per_s.is_some() {
        return Err(Failure::new(
            exit::USAGE,
            anyhow::anyhow!(
                "--rate: workload {} trains and serves no requests; options are ranked by cost per trained token",
                workload.id
            ),
        ));
    }
    let mut sla = Vec::new();
    for (flag, given, target, name) in [
        (
            "--sla-ttft-ms",
            req.sla_ttft_ms,
            workload.sla.time_to_first_token_ms,
            "time to first token",
        ),
        (
            "--sla-tpot-ms",
            req.sla_tpot_ms,
            workload.sla.time_per_output_token_ms,
            "time per output token",
        ),
    ] {
        if let Some(ms) = target {
            let from = if given.is_some() {
                flag.to_string()
            } else {
                format!("workload {}", workload.id)
            };
            sla.push(format!("{name} <= {ms} ms ({from})"));
        }
    }
    let sla_given = req.sla_ttft_ms.is_some() || req.sla_tpot_ms.is_some();
    let today = match &req.as_of {
        Some(d) => prices::parse_date(d)
            .map_err(|e| Failure::new(exit::USAGE, anyhow::anyhow!("--as-of: {e}")))?,
        None => {
            let secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |t| t.as_secs());
            (secs / SECONDS_PER_DAY) as i64
        }
    };
    let as_of = rfc3339(today as u64 * SECONDS_PER_DAY)[..10].to_string();
    let mut user = Vec::new();
    for p in &req.prices {
        let text = read_input(p, crate::profile::MAX_PROFILE_BYTES, "price file")?;
        user.push((p.display().to_string(), text));
    }
    let table = prices::load(set, &user, today).map_err(|d| {
        invalid_profiles(d).hint("crates/core/profiles/prices/README.md describes the price files")
    })?;
    let mut notes = Vec::new();
    let mut offers = offers(&table, req.acquire, today, &mut notes)?;
    if req.owned {
        offers.insert(0, offers::owned(sources, req.acquire)?);
    }
    let tokens = if training {
        "trained"
    } else if workload.generation_tokens == 0 {
        "embedded"
    } else {
        "output"
    };

    // One plan per distinct machine (sized to the rate): on-demand and spot rows of one instance share it.
    let mut plans: Vec<(Hardware, Result<Sized, Failure>)> = Vec::new();
    let mut plans_run = 0usize;
    let mut options = Vec::new();
    let mut rejected = Vec::new();
    let priced_offers = offers.len();
    let mut multinode_offers = 0;
    // Single machines first; then several nodes of each priced instance one of which does not hold the model.
    let mut batch = offers;
    let mut multinode_done = false;
    let mut no_fit: Vec<String> = Vec::new();
    loop {
        for o in &batch {
            let hardware = Hardware {
                gpus: (!o.owned).then(|| match &o.node_profile {
                    Some(n) => (1, n.clone()),
                    None => (o.gpus.count, o.gpus.profile.clone()),
                }),
                cluster: None,
                host: o.host,
                nodes: (o.nodes > 1).then_some(o.nodes),
            };
            let i = match plans.iter().position(|(h, _)| *h == hardware) {
                Some(i) => i,
                None => {
                    let mut plan = |overrides: &Overrides| {
                        plans_run += 1;
                        let r = ResolveRequest {
                            model: req.model.clone(),
                            workload: workload.id.clone(),
                            hardware: hardware.clone(),
                            overrides: overrides.clone(),
                            sla: targets,
                            stable: false,
                        };
                        resolve_loaded(sources, &r, &spec, preset)
                    };
                    let sized = plan(&req.overrides).map(|doc| match req.rate_req_per_s {
                        Some(rate_req_per_s) => {
                            let load = Load {
                                spec: &spec,
                                workload: &workload,
                                rate_req_per_s,
                            };
                            size(&mut plan, &req.overrides, doc, &load)
                        }
                        None => Sized {
                            doc,
                            overrides: req.overrides.clone(),
                            concurrency: None,
                        },
                    });
                    plans.push((hardware, sized));
                    plans.len() - 1
                }
            };
            let reject = |reason: &str, detail: String| Rejected {
                price_id: o.id.clone(),
                owned: o.owned,
                offer: o.offer.clone(),
                gpus: o.gpus.clone(),
                usd_per_hour: o.usd_per_hour,
                reason: reason.into(),
                detail,
            };
            let (doc, sized) = match &plans[i].1 {
                Err(f) => {
                    rejected.push(reject("error", format!("exit {}: {}", f.code, f.error)));
                    continue;
                }
                Ok(s) => (&s.doc, s),
            };
            match doc.status {
                Status::NoFit => {
                    let why = doc.suggestions.first().cloned().unwrap_or_default();
                    rejected.push(reject("no-fit", why));
                    no_fit.push(o.id.clone());
                    continue;
                }
                Status::WorkloadUnmet => {
                    rejected.push(reject(
                        "workload-unmet",
                        "the workload's request is longer than the context the model allows".into(),
                    ));
                    continue;
                }
                Status::SlaMissed if sla_given => {
                    rejected.push(reject("sla", missed(doc)));
                    continue;
                }
                _ => {}
            }
            let Some(t) = throughput(doc, &workload) else {
                rejected.push(reject(
                    "throughput",
                    "the plan predicts no throughput".into(),
                ));
                continue;
            };
            let instances = match req.rate_req_per_s {
                Some(rate) => (rate / t.requests_per_s).ceil().max(1.0) as u64,
                None => 1,
            };
            if o.owned && instances > 1 {
                rejected.push(reject(
                "capacity",
                format!(
                    "it serves {:.3} req/s of the {} asked: {instances} such machines would be needed",
                    t.requests_per_s,
                    req.rate_req_per_s.unwrap_or_default()
                ),
            ));
                continue;
            }
            let usd_per_hour = instances as f64 * o.usd_per_hour;
            if let Some(b) = req.budget_usd_per_hour.filter(|b| usd_per_hour > *b) {
                rejected.push(reject(
                    "budget",
                    format!("{usd_per_hour:.2} USD/h at the load, over the budget of {b} USD/h"),
                ));
                continue;
            }
            let load_tokens_per_s = match req.rate_req_per_s {
                Some(rate) => rate * t.tokens_per_s / t.requests_per_s,
                None => t.tokens_per_s,
            };
            let usd_per_million_tokens =
                usd_per_hour / (load_tokens_per_s * SECONDS_PER_HOUR) * TOKENS_PER_MILLION;
            let load = match req.rate_req_per_s {
                Some(rate) => format!("{rate} req/s on {instances} instance(s)"),
                None => "one instance at its capacity".to_string(),
            };
            options.push(Choice {
                id: o.id.clone(),
                owned: o.owned,
                offer: o.offer.clone(),
                gpus: if o.owned {
                    offers::owned_gpus(doc)
                } else {
                    o.gpus.clone()
                },
                node_profile: o.node_profile.clone(),
                nodes: o.nodes,
                fabric: o.fabric.clone(),
                host: o.host_basis.clone(),
                resolve_flags: resolve_flags(&plans[i].0, &sized.overrides, &targets),
                concurrency: sized.concurrency.clone(),
                status: doc.status,
                runtime: doc.runtime.id.to_string(),
                settings: settings_words(&doc.settings),
                time_to_first_token_ms: doc.performance.time_to_first_token_ms,
                time_per_output_token_ms: doc.performance.time_per_output_token_ms,
                basis: doc.performance.basis,
                evidence: doc.performance.evidence.clone(),
                replicas_per_instance: t.replicas,
                tokens_per_s: t.tokens_per_s,
                requests_per_s: t.requests_per_s,
                throughput_basis: t.basis,
                instances,
                gpus_total: instances * u64::from(o.nodes) * u64::from(o.gpus.count),
                usd_per_hour,
                usd_per_million_tokens,
                cost_basis: format!(
                    "{instances} x {:.4} USD/h ({}); per million {tokens} tokens at {load}",
                    o.usd_per_hour, o.cost_basis
                ),
                price: o.price.clone(),
                plan: Box::new(doc.clone()),
                request: Box::new(ResolveRequest {
                    model: req.model.clone(),
                    workload: workload.id.clone(),
                    hardware: plans[i].0.clone(),
                    overrides: sized.overrides.clone(),
                    sla: targets,
                    stable: false,
                }),
            });
        }
        if multinode_done {
            break;
        }
        multinode_done = true;
        // The priced instances one of which does not hold the model (its plan is no-fit), as several nodes.
        let short: Vec<&offers::Offer> = batch.iter().filter(|o| no_fit.contains(&o.id)).collect();
        batch = offers::multinode(&short, set, &mut notes);
        multinode_offers = batch.len();
        if batch.is_empty() {
            break;
        }
    }
    if options.is_empty()
        && let Some(Err(f)) = plans.iter().map(|(_, r)| r).find(|r| r.is_err())
        && plans.iter().all(|(_, r)| r.is_err())
    {
        // The same refusal on every machine is the model's or the flags', not a machine's.
        return Err(Failure {
            code: f.code,
            error: anyhow::anyhow!("{}", f.error),
            hint: f.hint.clone(),
        });
    }
    options.sort_by(|a, b| {
        a.usd_per_hour
            .total_cmp(&b.usd_per_hour)
            .then(
                a.usd_per_million_tokens
                    .total_cmp(&b.usd_per_million_tokens),
            )
            .then(a.id.cmp(&b.id))
    });
    rejected.sort_by(|a, b| {
        a.usd_per_hour
            .total_cmp(&b.usd_per_hour)
            .then(a.price_id.cmp(&b.price_id))
    });
    let cheapest = options
        .iter()
        .find(|c| c.status == Status::Fits)
        .or(options.first());
    let cheaper_lost = cheapest
        .map(|c| cheaper_lost(c, &options, &rejected))
        .unwrap_or_default();
    let fewest_gpus = options
        .iter()
        .min_by(|a, b| {
            a.gpus_total
                .cmp(&b.gpus_total)
                .then(a.usd_per_hour.total_cmp(&b.usd_per_hour))
        })
        .map(|c| c.id.clone());
    let mut pareto = Vec::new();
    let mut best_latency = f64::INFINITY;
    for c in &options {
        let l = latency_ms(c, training);
        if l < best_latency {
            best_latency = l;
            pareto.push(c.id.clone());
        }
    }
    if options.iter().any(|c| c.status == Status::SlaMissed) {
        notes.push(
            "options marked sla-missed run but miss the workload's SLA; give --sla-ttft-ms/--sla-tpot-ms to drop them"
                .into(),
        );
    }
    let owned = req
        .owned
        .then(|| owned_verdict(&options, &rejected, cheapest.filter(|c| !c.owned)));
    Ok(Recommendation {
        model: crate::emit::ModelRef {
            path: req.model.display().to_string(),
            format: format!("{:?}", spec.format).to_lowercase(),
            architecture: spec.architecture.clone(),
            parameter_count: spec.parameter_count(),
            tensor_bytes: spec.tensor_bytes(),
            fingerprint: spec.fingerprint.clone(),
        },
        workload: workload.id.clone(),
        acquire: match req.acquire {
            Acquire::Rent => "rent",
            Acquire::Buy { .. } => "buy",
        },
        as_of,
        sla,
        rate_req_per_s: req.rate_req_per_s,
        tokens,
        priced_offers,
        multinode_offers,
        machines_planned: plans.len(),
        plans_run,
        cheapest: cheapest.map(|c| c.id.clone()),
        fewest_gpus,
        pareto,
        cheaper_lost,
        options,
        rejected,
        owned,
        notes,
    })
}

/// "Do I need anything new?": the owned machine's option or rejection in a sentence, with the cheapest new
/// option when the owned one does not meet every target.
fn owned_verdict(
    options: &[Choice],
    rejected: &[Rejected],
    cheapest_new: Option<&Choice>,
) -> String {
    let new = |what: &str| match options
        .iter()
        .find(|c| !c.owned && c.status == Status::Fits)
        .or(cheapest_new)
    {
        Some(c) => format!(
            "{what}; the cheapest new option is {} at {:.3} USD/h",
            c.id, c.usd_per_hour
        ),
        None => format!("{what}; no priced offer does either"),
    };
    if let Some(c) = options.iter().find(|c| c.owned) {
        return match c.status {
            Status::Fits => format!(
                "nothing new is needed: the owned machine runs it and meets every target ({:.3} req/s, TPOT {:.1} ms, TTFT {:.0} ms)",
                c.requests_per_s, c.time_per_output_token_ms, c.time_to_first_token_ms
            ),
            _ => new(&format!(
                "the owned machine runs it but misses the SLA ({})",
                missed(&c.plan)
            )),
        };
    }
    match rejected.iter().find(|r| r.owned) {
        Some(r) => new(&format!(
            "the owned machine does not do it ({}: {})",
            r.reason, r.detail
        )),
        None => new("the owned machine was not planned"),
    }
}

/// The latency an option is ranked on in the Pareto front: time per output token (serving), time to first
/// token (embedding), time per trained token (training: the inverse of its trained tokens per second, so
/// plans with different micro-batches compare by how soon they finish the same data, which a step time of
/// different sizes would not).
fn latency_ms(c: &Choice, training: bool) -> f64 {
    if training {
        1e3 / c.tokens_per_s
    } else if c.time_per_output_token_ms > 0.0 {
        c.time_per_output_token_ms
    } else {
        c.time_to_first_token_ms
    }
}

/// Which SLA targets a plan misses, and by how much.
fn missed(doc: &Deployment) -> String {
    doc.performance
        .sla
        .iter()
        .filter(|s| s.status == SlaStatus::Missed)
        .map(|s| format!("{} {:.1} ms > {} ms", s.target, s.predicted_ms, s.target_ms))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The offers cheaper per instance than the cheapest option, nearest in price first: rejected ones with their
/// reason, ranked ones that needed more instances for the rate (`throughput`).
fn cheaper_lost(best: &Choice, options: &[Choice], rejected: &[Rejected]) -> Vec<Rejected> {
    let unit = best.usd_per_hour / best.instances as f64;
    let mut out: Vec<Rejected> = rejected
        .iter()
        .filter(|r| r.usd_per_hour < unit)
        .cloned()
        .chain(
            options
                .iter()
                .filter(|c| c.id != best.id && c.usd_per_hour / (c.instances as f64) < unit)
                .map(|c| Rejected {
                    price_id: c.id.clone(),
                    owned: c.owned,
                    offer: c.offer.clone(),
                    gpus: c.gpus.clone(),
                    usd_per_hour: c.usd_per_hour / c.instances as f64,
                    reason: if c.status == Status::SlaMissed && best.status == Status::Fits {
                        "sla".into()
                    } else {
                        "throughput".into()
                    },
                    detail: if c.status == Status::SlaMissed && best.status == Status::Fits {
                        missed(&c.plan)
                    } else {
                        format!(
                            "{:.3} req/s per instance: {} instance(s) cost {:.2} USD/h",
                            c.requests_per_s, c.instances, c.usd_per_hour
                        )
                    },
                }),
        )
        .collect();
    out.sort_by(|a, b| {
        b.usd_per_hour
            .total_cmp(&a.usd_per_hour)
            .then(a.price_id.cmp(&b.price_id))
    });
    out
}

/// The `resolve` flags for a machine and the overrides its plan was made with (`--runtime`, and the sizing's
/// `--parallel` and `--objective`).
fn resolve_flags(h: &Hardware, ov: &Overrides, sla: &SlaTargets) -> String {
    let mut s = match &h.gpus {
        Some((1, id)) => format!("--hardware {id}"),
        Some((n, id)) => format!("--hardware {n}x:{id}"),
        None => String::new(),
    };
    if let Some(n) = h.nodes {
        s.push_str(&format!(" --nodes {n}"));
    }
    match h.host.memory_bytes {
        Some(b) if b % (1 << 30) == 0 => s.push_str(&format!(" --host-memory {}GiB", b >> 30)),
        Some(b) => s.push_str(&format!(" --host-memory {b}")),
        None => {}
    }
    if let Some(c) = h.host.cores {
        s.push_str(&format!(" --host-cores {c}"));
    }
    if let Some(r) = ov.runtime {
        s.push_str(&format!(" --runtime {r}"));
    }
    if let Some(n) = ov.parallel {
        s.push_str(&format!(" --parallel {n}"));
    }
    if let Some(o) = ov.objective {
        s.push_str(&format!(" --objective {}", format!("{o:?}").to_lowercase()));
    }
    if !sla.is_empty() {
        s.push_str(&format!(" {}", sla.flags()));
    }
    s.trim_start().to_string()
}

/// A plan's key settings in a few words.
fn settings_words(s: &Settings) -> String {
    match s {
        Settings::LlamaCpp(l) => format!(
            "{:?} -ngl {} -np {} -c {} KV {}",
            l.strategy, l.gpu_layers, l.parallel, l.context_length, l.cache_type_k
        )
        .to_lowercase(),
        Settings::Vllm(v) => format!(
            "TP {}{} x {} replica(s), {}{}, KV {}, {} seqs, len {}",
            v.tensor_parallel_size,
            match (v.pipeline_parallel_size, v.nnodes) {
                (Some(pp), _) if pp > 1 => format!(" x PP {pp}"),
                (_, Some(n)) if n > 1 => format!(" over {n} nodes"),
                _ => String::new(),
            },
            v.replicas_per_node,
            v.dtype,
            v.quantization
                .as_deref()
                .map(|q| format!(" {q}"))
                .unwrap_or_default(),
            v.kv_cache_dtype,
            v.max_num_seqs,
            v.max_model_len
        ),
        Settings::Torch(t) => format!(
            "{} {} mb {} x ga {}, dp {}, ZeRO-{} offload {}",
            t.method,
            t.precision,
            t.micro_batch,
            t.gradient_accumulation_steps,
            t.data_parallel,
            t.zero_stage,
            t.offload
        ),
    }
}
