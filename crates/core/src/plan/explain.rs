//! Scoring against the workload's objective and SLA, and the explanations: SLA checks, why each alternative
//! lost (in the objective's own terms), and the alternatives list.

use std::collections::BTreeSet;

use super::search::{TIE, shown_memory};
use crate::emit::{self, Alternative, SlaCheck, SlaStatus};
use crate::perf;
use crate::profile::{Objective, WorkloadProfile};
use crate::runtime::{Candidate, Runtime};

/// How many losing candidates the document lists.
const ALTERNATIVES: usize = 4;

/// The objective's score of a prediction (lower is better).
pub fn score(objective: Objective, w: &WorkloadProfile, p: &perf::Prediction) -> f64 {
    // An SLA miss costs more than any speed difference among candidates that meet it.
    let mut penalty = 0.0;
    if let Some(t) = w.sla.time_to_first_token_ms
        && p.time_to_first_token_ms > t
    {
        penalty += 1e6 * (p.time_to_first_token_ms / t);
    }
    if let Some(t) = w.sla.time_per_output_token_ms
        && p.time_per_output_token_ms > t
    {
        penalty += 1e6 * (p.time_per_output_token_ms / t);
    }
    // A training step and an embedding request generate nothing: every objective is served by more tokens
    // trained or embedded (prefilled) per second.
    let prefill_only = matches!(
        w.mode,
        crate::profile::Mode::Training
            | crate::profile::Mode::FineTune
            | crate::profile::Mode::Embedding
    );
    let base = match objective {
        _ if prefill_only => 1e6 / p.prefill_tokens_per_s.max(1e-9),
        Objective::Latency => {
            p.time_per_output_token_ms
                + p.time_to_first_token_ms / w.generation_tokens.max(1) as f64
        }
        Objective::Throughput => 1e6 / p.decode_tokens_per_s.max(1e-9),
        Objective::Balanced => {
            p.time_to_first_token_ms + w.generation_tokens as f64 * p.time_per_output_token_ms
        }
    };
    base + penalty
}

/// Each SLA target of the workload against the prediction.
pub(crate) fn sla_checks(w: &WorkloadProfile, p: &perf::Prediction) -> Vec<SlaCheck> {
    [
        (
            "time_to_first_token",
            w.sla.time_to_first_token_ms,
            p.time_to_first_token_ms,
        ),
        (
            "time_per_output_token",
            w.sla.time_per_output_token_ms,
            p.time_per_output_token_ms,
        ),
    ]
    .into_iter()
    .filter_map(|(name, target, predicted)| {
        let target = target?;
        let predicted = predicted.min(1e12);
        Some(SlaCheck {
            target: name.into(),
            target_ms: emit::round3(target),
            predicted_ms: emit::round3(predicted),
            margin_ms: emit::round3(target - predicted),
            status: if predicted <= target {
                SlaStatus::Met
            } else {
                SlaStatus::Missed
            },
        })
    })
    .collect()
}

/// Why a candidate lost, in the objective's own terms.
fn why_lost<R: Runtime>(
    rt: &R,
    c: &Candidate<R::Point>,
    chosen: &Candidate<R::Point>,
    objective: Objective,
    w: &WorkloadProfile,
) -> String {
    use crate::units::gib;
    if c.eval.memory.is_empty() && c.eval.overflow == u64::MAX {
        // Not sized (the memory model refused its flags): no overflow figure exists.
        return format!("cannot be sized: {}", c.eval.notes.join("; "));
    }
    if !c.fits() {
        return format!(
            "does not fit: {:.2} GiB over on its fullest device",
            gib(c.eval.overflow)
        );
    }
    let missed = |p: &perf::Prediction| {
        sla_checks(w, p)
            .into_iter()
            .filter(|s| s.status == SlaStatus::Missed)
            .map(|s| s.target)
            .collect::<Vec<_>>()
    };
    let (m_c, m_chosen) = (missed(&c.eval.prediction), missed(&chosen.eval.prediction));
    if m_c.len() > m_chosen.len() {
        return format!("misses workload {}'s SLA on {}", w.id, m_c.join(" and "));
    }
    let (vc, vchosen) = (rt.variant(&c.point), rt.variant(&chosen.point));
    if vc != vchosen && c.score < chosen.score * (1.0 - TIE) {
        let gain = (chosen.score - c.score) / chosen.score * 100.0;
        return rt.variant_not_traded(&vc, &vchosen, gain);
    }
    // A tie is broken as `search::choose` breaks it: the workload's preferred variant first, then less memory as
    // printed. Otherwise the objective's own figures below say how the two differ: a tie decided on the score
    // (same memory as printed), or a candidate outside choose's tie band, whose figures are worse.
    if c.score <= chosen.score * (1.0 + TIE) {
        if vc != vchosen && vchosen == rt.preferred_variant() {
            return format!(
                "ties on the objective; the workload {} {} {vchosen}",
                rt.variant_wish(),
                rt.variant_noun()
            );
        }
        if shown_memory(c.eval.total_bytes) > shown_memory(chosen.eval.total_bytes) {
            return format!(
                "ties on the objective and uses more memory ({:.2} vs {:.2} GiB)",
                gib(c.eval.total_bytes),
                gib(chosen.eval.total_bytes)
            );
        }
    }
    let (a, b) = (&c.eval.prediction, &chosen.eval.prediction);
    if matches!(
        w.mode,
        crate::profile::Mode::Training | crate::profile::Mode::FineTune
    ) {
        return format!(
            "trains fewer tokens per second: {:.0} vs {:.0}",
            a.prefill_tokens_per_s, b.prefill_tokens_per_s
        );
    }
    match objective {
        Objective::Latency => format!(
            "slower for latency: {:.1} ms per output token and {:.0} ms to the first vs {:.1} and {:.0}",
            a.time_per_output_token_ms,
            a.time_to_first_token_ms,
            b.time_per_output_token_ms,
            b.time_to_first_token_ms
        ),
        Objective::Throughput => format!(
            "lower throughput: {:.1} tokens/s decode over {} sequences vs {:.1} over {}",
            a.decode_tokens_per_s,
            rt.sequences(&c.point),
            b.decode_tokens_per_s,
            rt.sequences(&chosen.point)
        ),
        Objective::Balanced => {
            let request = |p: &perf::Prediction| {
                p.time_to_first_token_ms + w.generation_tokens as f64 * p.time_per_output_token_ms
            };
            format!(
                "slower per request: {:.0} ms for a {}-token prompt and {} generated tokens vs {:.0}",
                request(a),
                w.prompt_tokens,
                w.generation_tokens,
                request(b)
            )
        }
    }
}

/// The best losing candidate of each group (strategy and device count), fitting ones first.
pub(crate) fn alternatives<R: Runtime>(
    rt: &R,
    all: &[Candidate<R::Point>],
    chosen: &Candidate<R::Point>,
    objective: Objective,
    w: &WorkloadProfile,
) -> Vec<Alternative> {
    let mut rest: Vec<&Candidate<R::Point>> =
        all.iter().filter(|c| c.point != chosen.point).collect();
    rest.sort_by(|a, b| {
        b.fits()
            .cmp(&a.fits())
            .then(a.score.total_cmp(&b.score))
            .then(a.eval.overflow.cmp(&b.eval.overflow))
    });
    let mut seen = BTreeSet::new();
    rest.into_iter()
        .filter(|c| seen.insert(rt.group(&c.point)))
        .take(ALTERNATIVES)
        .map(|c| {
            let (settings, devices) = rt.summary(c);
            let p = &c.eval.prediction;
            Alternative {
                settings,
                devices,
                fits: c.fits(),
                time_to_first_token_ms: emit::round3(p.time_to_first_token_ms.min(1e12)),
                time_per_output_token_ms: emit::round3(p.time_per_output_token_ms.min(1e12)),
                decode_tokens_per_s: emit::round3(p.decode_tokens_per_s),
                total_bytes: c.eval.total_bytes,
                score: emit::round3(c.score.min(1e15)),
                why: why_lost(rt, c, chosen, objective, w),
            }
        })
        .collect()
}
