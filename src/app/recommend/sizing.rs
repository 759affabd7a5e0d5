//! Sizing an offer's plan to `--rate`: the sequences one instance runs (`resolve --parallel N`) and whether its
//! idle GPUs run replicas (`resolve --objective throughput`), so that every option stays one `resolve` command.
//!
//! Little's law on the plan's own figures: a request holds a sequence for `W = TTFT + generation_tokens x TPOT`,
//! so `λ` requests per second keep `λ x W` sequences in flight. `W` grows with the sequences (a larger batch is
//! a slower step), so the count is found by re-planning: from the preset's plan, the count the whole rate needs
//! at the last plan's `W`, until one instance serves the rate or a bound stops it (the plan no longer fits, an
//! SLA target is missed, vLLM's KV pool holds fewer requests than its `--max-num-seqs`); past a bound the
//! largest count that passes is bisected, the rate is spread over `ceil(rate / that instance's rate)`
//! instances, and each is planned again at the count its share needs. Trade-off: the count is the mean in
//! flight (Little's law), with no headroom for bursts: a queue forms whenever arrivals run above the mean, so
//! the instance count is a floor, as the rest of `recommend`'s throughput figures are. Trade-off: a node whose
//! idle GPUs take replicas is sized that way first, and its preset layout only when the filled node needs more
//! than one instance: at one instance both cost the same, and the preset's might have had the lower TPOT.

use super::*;

/// Re-plans in the climb towards the rate before it gives up: each re-plan moves to the count the rate needs at
/// the last plan's speed, so it converges in a few; this only bounds a planner whose step time jumps.
const MAX_CLIMB: usize = 12;
/// Re-plans when lowering the count to an instance's share of the rate (the same convergence).
const MAX_SHARE: usize = 8;

/// What one instance sustains, from the plan's figures.
pub(super) struct Throughput {
    pub(super) replicas: u32,
    /// Sequences in flight on the instance (all replicas).
    pub(super) sequences: f64,
    pub(super) tokens_per_s: f64,
    pub(super) requests_per_s: f64,
    pub(super) basis: String,
}

/// Why an option runs the sequences it runs (`--rate` only).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Concurrency {
    /// `resolve --parallel`: sequences per llama-server, or vLLM's over the node's replicas; `None`: the plan's
    /// own (the preset's sequences serve the rate).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel: Option<u32>,
    /// `resolve --objective throughput`: the node's idle GPUs run replicas.
    pub replicas_on_idle_gpus: bool,
    /// Sequences in flight on one instance, all replicas.
    pub sequences: u32,
    /// Little's law: the instance's share of the rate x the seconds a request holds a sequence.
    pub needed: f64,
    /// The most sequences one instance ran before a bound (when the rate needs more than one instance).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub most_per_instance: Option<u32>,
    /// `rate` (one instance serves it, or each instance its share), or what stopped one instance: `fit`,
    /// `sla`, `kv-pool`, `steps` (the climb's re-plans ran out).
    pub bound: &'static str,
    pub why: String,
}

/// A plan sized to the rate, with the overrides that plan it.
pub(super) struct Sized {
    pub(super) doc: Deployment,
    pub(super) overrides: Overrides,
    pub(super) concurrency: Option<Concurrency>,
}

/// Seconds a request holds a sequence: its first token, then its generated tokens one step each.
fn held_s(doc: &Deployment, w: &crate::profile::WorkloadProfile) -> f64 {
    let p = &doc.performance;
    (p.time_to_first_token_ms + w.generation_tokens as f64 * p.time_per_output_token_ms) / 1e3
}

/// One instance's throughput. Serving: Little's law on the plan's figures: sequences in flight
/// `n = decode tokens/s x TPOT` (the planner's decode rate is n per step of TPOT), each request held for
/// `TTFT + generated tokens x TPOT`, so `n / that` requests per second. A `llama-server-replicas` plan's figures
/// are one server's (its provenance says so), so they count once per server; vLLM's data-parallel figures are
/// already the node's (`runtime/vllm/space.rs` multiplies by its engines). Embedding: the prefill rate over the
/// prompt. Training: the plan's trained tokens per second.
pub(super) fn throughput(
    doc: &Deployment,
    w: &crate::profile::WorkloadProfile,
) -> Option<Throughput> {
    let p = &doc.performance;
    let replicas = replicas(doc);
    let per_server = if doc.artifact("llama-server-replicas").is_some() {
        f64::from(replicas)
    } else {
        1.0
    };
    let t = if let Some(tr) = &p.training {
        Throughput {
            replicas,
            sequences: 0.0,
            tokens_per_s: tr.tokens_per_s,
            requests_per_s: 0.0,
            basis: format!(
                "the plan's {:.1} trained tokens/s over all GPUs",
                tr.tokens_per_s
            ),
        }
    } else if w.generation_tokens == 0 {
        let req = p.prefill_tokens_per_s / w.prompt_tokens.max(1) as f64;
        Throughput {
            replicas,
            sequences: 0.0,
            tokens_per_s: p.prefill_tokens_per_s * per_server,
            requests_per_s: req * per_server,
            basis: format!(
                "{} x {:.1} prefill tokens/s / {} prompt tokens",
                figures_of(replicas, per_server),
                p.prefill_tokens_per_s,
                w.prompt_tokens
            ),
        }
    } else {
        let seqs = p.decode_tokens_per_s * p.time_per_output_token_ms / 1e3;
        let req = seqs / held_s(doc, w);
        Throughput {
            replicas,
            sequences: seqs * per_server,
            tokens_per_s: req * w.generation_tokens as f64 * per_server,
            requests_per_s: req * per_server,
            basis: format!(
                "{} x {seqs:.1} sequences / ({:.0} ms TTFT + {} tokens x {:.2} ms TPOT), {} figures",
                figures_of(replicas, per_server),
                p.time_to_first_token_ms,
                w.generation_tokens,
                p.time_per_output_token_ms,
                format!("{:?}", p.basis).to_lowercase()
            ),
        }
    };
    (t.tokens_per_s.is_finite()
        && t.tokens_per_s > 0.0
        && (p.training.is_some() || t.requests_per_s > 0.0))
        .then_some(t)
}

/// Whose figures a throughput multiplies: each server's, or the node's over its replicas.
fn figures_of(replicas: u32, per_server: f64) -> String {
    if per_server > 1.0 {
        format!("{replicas} servers")
    } else if replicas > 1 {
        format!("the node's {replicas} replicas together")
    } else {
        "1 replica(s)".into()
    }
}

/// Replicas of the plan on one node, as `resolve`'s idle-GPU warning counts them
/// ([`crate::app::resolve::replicas_per_node`]); a training plan is one job, whatever its data parallel (the
/// torch runtime writes no `llama-server-replicas`).
pub(super) fn replicas(doc: &Deployment) -> u32 {
    if doc.performance.training.is_some() {
        return 1;
    }
    crate::app::resolve::replicas_per_node(doc) as u32
}

/// GPUs the plan runs on: one replica's times the replicas.
fn gpus_used(doc: &Deployment) -> usize {
    crate::app::resolve::gpus_per_replica(doc) * replicas(doc) as usize
}

/// The `--parallel` value the plan runs: llama-server's slots (per server), vLLM's sequences over the node's
/// replicas (the planner gives each `ceil(parallel / replicas)`).
fn parallel_of(doc: &Deployment) -> u32 {
    match &doc.settings {
        Settings::LlamaCpp(l) => l.parallel,
        Settings::Vllm(v) => v.max_num_seqs.saturating_mul(v.replicas_per_node.max(1)),
        Settings::Torch(_) => 1,
    }
}

/// The `--parallel` value that runs `in_flight` sequences on the instance of `doc`'s layout.
fn parallel_for(doc: &Deployment, in_flight: f64) -> u32 {
    let per_server = match &doc.settings {
        Settings::LlamaCpp(_) => replicas(doc),
        _ => 1,
    };
    let n = (in_flight / f64::from(per_server)).ceil();
    if n.is_finite() && n >= 1.0 {
        n.min(f64::from(u32::MAX)) as u32
    } else {
        1
    }
}

/// Requests of the workload's length one vLLM replica's KV pool holds at once, counted as the planner counts
/// them (`runtime/vllm/admission.rs`: `request_blocks`, `requests_held`); `None` for other engines.
fn vllm_requests_held(
    doc: &Deployment,
    spec: &crate::model::ModelSpec,
    w: &crate::profile::WorkloadProfile,
) -> Option<(u64, u32)> {
    use crate::memory::vllm as mem;
    let Settings::Vllm(v) = &doc.settings else {
        return None;
    };
    let tokens = u32::try_from(w.prompt_tokens.saturating_add(w.generation_tokens).max(1))
        .unwrap_or(u32::MAX)
        .min(v.max_model_len);
    let params = mem::Params {
        tensor_parallel: v.tensor_parallel_size,
        dtype: match v.dtype.as_str() {
            "float16" => mem::Dtype::Float16,
            "float32" => mem::Dtype::Float32,
            _ => mem::Dtype::Bfloat16,
        },
        kv_cache_dtype: if v.kv_cache_dtype == "fp8" {
            mem::KvCacheDtype::Fp8
        } else {
            mem::KvCacheDtype::Auto
        },
        block_size: v.block_size,
        max_model_len: tokens,
        max_num_seqs: v.max_num_seqs,
        max_num_batched_tokens: v.max_num_batched_tokens,
        enforce_eager: v.enforce_eager,
        gpu: mem::GpuFacts::default(),
    };
    let per = mem::kv(spec, &params).ok()?.blocks_per_request.max(1);
    Some((
        crate::runtime::vllm::admission::requests_held(v.kv_cache_blocks, per),
        tokens,
    ))
}

/// The limits a sized plan is held to: each SLA target of the preset's plan, or what that plan already
/// predicts where it misses one (a plan is never made slower past a target it meets).
struct Limits(Vec<(String, f64)>);

impl Limits {
    fn of(base: &Deployment) -> Self {
        Limits(
            base.performance
                .sla
                .iter()
                .map(|s| (s.target.clone(), s.target_ms.max(s.predicted_ms)))
                .collect(),
        )
    }

    /// `Ok` when the plan runs within the limits, else the bound it hits and why.
    fn check(
        &self,
        doc: &Deployment,
        spec: &crate::model::ModelSpec,
        w: &crate::profile::WorkloadProfile,
    ) -> Result<(), (&'static str, String)> {
        if !matches!(doc.status, Status::Fits | Status::SlaMissed) {
            let why = doc.suggestions.first().cloned().unwrap_or_default();
            return Err(("fit", format!("no longer fits: {why}")));
        }
        for s in &doc.performance.sla {
            if let Some((_, limit)) = self.0.iter().find(|(t, _)| *t == s.target)
                && s.predicted_ms > *limit
            {
                return Err((
                    "sla",
                    format!("{} {:.1} ms > {limit} ms", s.target, s.predicted_ms),
                ));
            }
        }
        if let (Some((held, tokens)), Settings::Vllm(v)) =
            (vllm_requests_held(doc, spec, w), &doc.settings)
            && held < u64::from(v.max_num_seqs)
        {
            return Err((
                "kv-pool",
                format!(
                    "each replica's KV pool holds {held} requests of {tokens} tokens, fewer than --max-num-seqs {} (vLLM would preempt)",
                    v.max_num_seqs
                ),
            ));
        }
        Ok(())
    }
}

/// The inputs sizing plans with: the model, the workload and the rate.
pub(super) struct Load<'a> {
    pub(super) spec: &'a crate::model::ModelSpec,
    pub(super) workload: &'a crate::profile::WorkloadProfile,
    pub(super) rate_req_per_s: f64,
}

/// The preset's plan `base` (planned with `base_ov`) sized to the rate, and, when it leaves GPUs of the node
/// idle, the same with replicas on them (`--objective throughput`): the one needing fewer instances (then the
/// lower TPOT). The filled node is sized first; when one instance of it serves the rate, the preset's layout is
/// not sized at all (it cannot take fewer instances, and skipping it halves the re-plans of such a node). `plan` re-plans the machine with other overrides (`resolve_loaded`). A serving plan that
/// generates tokens is sized; any other is returned as planned.
pub(super) fn size(
    plan: &mut dyn FnMut(&Overrides) -> Result<Deployment, Failure>,
    base_ov: &Overrides,
    base: Deployment,
    load: &Load,
) -> Sized {
    let w = load.workload;
    let sizable = w.generation_tokens > 0
        && base.performance.training.is_none()
        && matches!(base.status, Status::Fits | Status::SlaMissed)
        && throughput(&base, w).is_some();
    if !sizable {
        return Sized {
            doc: base,
            overrides: base_ov.clone(),
            concurrency: None,
        };
    }
    let limits = Limits::of(&base);
    let total = base.hardware.gpus.len();
    let idle = gpus_used(&base) < total
        && base_ov.objective.is_none()
        && base.workload.objective != crate::profile::Objective::Throughput;
    if idle {
        let ov = Overrides {
            objective: Some(crate::profile::Objective::Throughput),
            ..base_ov.clone()
        };
        // Kept only where the planner does put replicas on the idle GPUs and they pass the limits.
        if let Ok(doc) = plan(&ov)
            && gpus_used(&doc) > gpus_used(&base)
            && limits.check(&doc, load.spec, w).is_ok()
            && throughput(&doc, w).is_some()
        {
            let filled = size_one(plan, &ov, doc, &limits, load, true);
            if filled.1 == 1 {
                return filled.0;
            }
            let preset = size_one(plan, base_ov, base, &limits, load, false);
            let key = |s: &(Sized, u64)| (s.1, s.0.doc.performance.time_per_output_token_ms);
            let better = key(&preset).0 < key(&filled).0
                || (key(&preset).0 == key(&filled).0 && key(&preset).1 < key(&filled).1);
            return if better { preset.0 } else { filled.0 };
        }
    }
    size_one(plan, base_ov, base, &limits, load, false).0
}

/// One layout sized: the climb to the rate (or a bound), the instances, then each instance at its share.
/// Returns the sized plan and its instance count.
fn size_one(
    plan: &mut dyn FnMut(&Overrides) -> Result<Deployment, Failure>,
    ov: &Overrides,
    base: Deployment,
    limits: &Limits,
    load: &Load,
    replicas_on_idle_gpus: bool,
) -> (Sized, u64) {
    let (w, rate) = (load.workload, load.rate_req_per_s);
    let rps = |d: &Deployment| throughput(d, w).map_or(0.0, |t| t.requests_per_s);
    let pinned = |n: u32| Overrides {
        parallel: Some(n),
        ..ov.clone()
    };
    // The most one instance runs, climbing from the preset's plan towards the whole rate.
    let mut top = (None::<u32>, base.clone());
    let mut stop: Option<(&'static str, String, u32)> = None;
    for _ in 0..=MAX_CLIMB {
        if rps(&top.1) >= rate {
            break;
        }
        let have = parallel_of(&top.1);
        let n = parallel_for(&top.1, rate * held_s(&top.1, w)).max(have + 1);
        let bad = match plan(&pinned(n)) {
            Ok(d) => match limits.check(&d, load.spec, w) {
                Ok(()) if throughput(&d, w).is_some() => {
                    top = (Some(n), d);
                    continue;
                }
                Ok(()) => ("fit", "the plan predicts no throughput".to_string()),
                Err(e) => e,
            },
            Err(f) => ("fit", format!("exit {}: {}", f.code, f.error)),
        };
        // Bisect between the last count that passed and the first that did not.
        let (mut lo, mut hi) = (have, n);
        let mut why = bad;
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            match plan(&pinned(mid)) {
                Ok(d) if limits.check(&d, load.spec, w).is_ok() && throughput(&d, w).is_some() => {
                    lo = mid;
                    top = (Some(mid), d);
                }
                Ok(d) => {
                    hi = mid;
                    why = limits
                        .check(&d, load.spec, w)
                        .err()
                        .unwrap_or(("fit", "the plan predicts no throughput".into()));
                }
                Err(f) => {
                    hi = mid;
                    why = ("fit", format!("exit {}: {}", f.code, f.error));
                }
            }
        }
        stop = Some((why.0, why.1, hi));
        break;
    }
    if stop.is_none() && rps(&top.1) < rate {
        stop = Some((
            "steps",
            format!("{MAX_CLIMB} re-plans did not reach the rate"),
            parallel_of(&top.1) + 1,
        ));
    }
    let instances = (rate / rps(&top.1)).ceil().max(1.0) as u64;
    let most = throughput(&top.1, w).map_or(0, |t| t.sequences.round() as u32);
    // Each instance at its share: from the count the share needs at the preset's speed, up while it falls short.
    let share = rate / instances as f64;
    let mut chosen = top.clone();
    let mut n = parallel_for(&base, share * held_s(&base, w));
    // A climb that reached the whole rate stopped at the first count that serves it: nothing to lower.
    let lower = instances > 1 || top.0.is_none();
    for _ in 0..MAX_SHARE * usize::from(lower) {
        if n >= parallel_of(&top.1) {
            break;
        }
        match plan(&pinned(n)) {
            Ok(d) if limits.check(&d, load.spec, w).is_ok() && rps(&d) >= share => {
                chosen = (Some(n), d);
                break;
            }
            Ok(d) if throughput(&d, w).is_some() => {
                n = parallel_for(&d, share * held_s(&d, w)).max(n + 1);
            }
            _ => n += 1,
        }
    }
    // The preset's own plan serves the share with no more sequences: keep it (no --parallel).
    if rps(&base) >= share && chosen.0.is_some_and(|n| n >= parallel_of(&base)) {
        chosen = (None, base);
    }
    let t = throughput(&chosen.1, w);
    let sequences = t.as_ref().map_or(0, |t| t.sequences.round() as u32);
    let held = held_s(&chosen.1, w);
    let needed = share * held;
    let layout = if replicas_on_idle_gpus {
        format!(
            "; --objective throughput puts {} replica(s) on the node's GPUs",
            replicas(&chosen.1)
        )
    } else {
        String::new()
    };
    let (bound, why) = match &stop {
        Some((b, w, next)) if instances > 1 => (
            *b,
            format!(
                "one instance runs at most {most} sequences, {:.3} req/s (--parallel {next}: {w}), so {rate} req/s takes {instances} instances; each serves {share:.3} req/s x {held:.2} s held = {needed:.1} sequences in flight (Little's law), run as {sequences}{layout}",
                rps(&top.1)
            ),
        ),
        _ => (
            "rate",
            format!(
                "{share:.3} req/s{} x {held:.2} s held (TTFT + {} tokens x TPOT) = {needed:.1} sequences in flight (Little's law), run as {sequences}{}{layout}",
                if instances > 1 {
                    format!(" ({rate} req/s over {instances} instances)")
                } else {
                    String::new()
                },
                w.generation_tokens,
                match chosen.0 {
                    Some(n) => format!(" (--parallel {n})"),
                    None => " (the preset's sequences)".into(),
                }
            ),
        ),
    };
    let overrides = match chosen.0 {
        Some(n) => pinned(n),
        None => ov.clone(),
    };
    (
        Sized {
            doc: chosen.1,
            overrides,
            concurrency: Some(Concurrency {
                parallel: chosen.0,
                replicas_on_idle_gpus,
                sequences,
                needed,
                most_per_instance: (instances > 1).then_some(most),
                bound,
                why,
            }),
        },
        instances,
    )
}
