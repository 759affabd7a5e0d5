//! The checks on one workload profile that its schema cannot express: named limits, and a typical request
//! that fits one sequence's context.

use serde_json::Value;

use crate::profile::types::{ContextPolicy, Mode, WorkloadProfile};

use super::values::{check_positive, check_sources};
use super::{MAX_CONCURRENCY, MAX_CONTEXT_TOKENS, MAX_LORA_RANK, MAX_MICRO_BATCH, MAX_SLA_MS};

pub(super) fn check_workload(w: &WorkloadProfile, v: &Value, d: &mut impl FnMut(String, String)) {
    // Embedding and training workloads generate no tokens.
    check_positive(v, false, &["generation_tokens"], d);
    check_sources(v, &w.sources, d);
    let mut at_most = |at: &str, x: u64, max: u64, what: &str| {
        if x > max {
            d(at.into(), format!("{x} exceeds the limit of {max} {what}"));
        }
    };
    let (context_at, context) = match &w.context {
        ContextPolicy::Fixed { tokens } => (Some("/context/tokens"), Some(*tokens)),
        ContextPolicy::LargestFit { floor } => (Some("/context/floor"), Some(*floor)),
        ContextPolicy::ModelMax => (None, None),
    };
    if let (Some(at), Some(tokens)) = (context_at, context) {
        at_most(at, tokens, MAX_CONTEXT_TOKENS, "tokens per sequence");
    }
    at_most(
        "/concurrency",
        w.concurrency,
        MAX_CONCURRENCY,
        "sequences at once",
    );
    at_most(
        "/prompt_tokens",
        w.prompt_tokens,
        MAX_CONTEXT_TOKENS,
        "tokens",
    );
    at_most(
        "/generation_tokens",
        w.generation_tokens,
        MAX_CONTEXT_TOKENS,
        "tokens",
    );
    if let Some(t) = &w.training {
        at_most(
            "/training/micro_batch",
            t.micro_batch,
            MAX_MICRO_BATCH,
            "sequences",
        );
        at_most(
            "/training/sequence_length",
            t.sequence_length,
            MAX_CONTEXT_TOKENS,
            "tokens",
        );
        if let Some(r) = t.lora_rank {
            at_most("/training/lora_rank", r, MAX_LORA_RANK, "(rank)");
        }
    }
    for (at, ms) in [
        ("/sla/time_to_first_token_ms", w.sla.time_to_first_token_ms),
        (
            "/sla/time_per_output_token_ms",
            w.sla.time_per_output_token_ms,
        ),
    ] {
        if let Some(ms) = ms
            && ms > MAX_SLA_MS
        {
            d(
                at.into(),
                format!("{ms} exceeds the limit of {MAX_SLA_MS} ms"),
            );
        }
    }
    // A typical request must fit one sequence's context, or the preset plans for requests it cannot serve.
    if let (Some(at), Some(tokens)) = (context_at, context) {
        let request = w.prompt_tokens.saturating_add(w.generation_tokens);
        if request > tokens {
            d(
                at.into(),
                format!(
                    "{tokens} tokens per sequence cannot hold a typical request of prompt_tokens + generation_tokens = {request}"
                ),
            );
        }
    }
    let trains = matches!(w.mode, Mode::FineTune | Mode::Training);
    if trains != w.training.is_some() {
        d(
            "/training".into(),
            if trains {
                "a fine-tune or training workload needs a `training` section".into()
            } else {
                "only fine-tune and training workloads have a `training` section".into()
            },
        );
    }
}
