//! The planner: the generic part of every plan. It builds the fleet (devices with identity, capacity, reserve,
//! peaks and efficiencies, corrected by the store's evidence), picks the runtime that serves the model and the
//! workload, searches that runtime's candidate space ([`search`]), scores candidates against the workload's
//! objective and SLA, and explains the choice ([`explain`]): provenance, alternatives, suggestions. Pure: takes
//! values, never probes, reads files or the clock.
//!
//! The runtime decides what a candidate is and what it costs in memory; the planner decides which one wins and
//! what the figures rest on (`performance.basis`: `analytic` from rule efficiencies, `calibrated` or `measured`
//! from store rows, cited by id).

pub mod explain;
pub(crate) mod promise;
pub mod search;

use crate::emit::{
    self, CpuRef, Deployment, GpuRef, HardwareRef, ModelRef, Performance, Provenance, RuntimeRef,
    SlaStatus, Source, Status, WorkloadRef, WorkloadUnmet,
};
use crate::evidence::Basis;
use crate::evidence::Evidence;
use crate::fleet::{self, Fleet};
use crate::hardware::Inventory;
use crate::profile::{Phase, ProfileSet, RuntimeId, WorkloadProfile};
use crate::runtime::llama_cpp::LlamaCpp;
use crate::runtime::torch::Torch;
use crate::runtime::vllm::Vllm;
use crate::runtime::{Candidate, Request, Runtime};
use optimizer_model::ModelSpec;

pub use crate::runtime::Overrides;
pub use crate::runtime::PlanError;

/// Everything the planner decides from.
pub struct Inputs<'a> {
    pub model: &'a ModelSpec,
    pub model_path: &'a str,
    pub inventory: &'a Inventory,
    /// `probe`, `inventory`, `cluster` or `profile`.
    pub hardware_source: &'a str,
    pub profiles: &'a ProfileSet,
    pub workload: &'a WorkloadProfile,
    /// What the measurement store knows (empty: analytic).
    pub evidence: &'a Evidence,
    pub overrides: &'a Overrides,
}

/// Most GPUs one node may hold in a plan (defined with the inventories, which node profiles are checked against).
pub use crate::hardware::MAX_GPUS;

/// The runtime that serves this model and workload: the one `--runtime` names, else by the model's format (GGUF:
/// llama.cpp; safetensors: vLLM); training and fine-tuning workloads go to torch whatever the format (it refuses
/// GGUF with the reason).
pub fn runtime_for(model: &ModelSpec, w: &WorkloadProfile, ov: &Overrides) -> RuntimeId {
    match ov.runtime {
        Some(r) if r != RuntimeId::Any => r,
        _ if matches!(
            w.mode,
            crate::profile::Mode::Training | crate::profile::Mode::FineTune
        ) =>
        {
            RuntimeId::Torch
        }
        _ => match model.format {
            optimizer_model::Format::Gguf => RuntimeId::LlamaCpp,
            optimizer_model::Format::Safetensors => RuntimeId::Vllm,
        },
    }
}

/// Plans a deployment on one machine. `Err` only for inputs the planner cannot handle; a plan that does not fit
/// is a document with `status: no-fit`.
pub fn resolve(inp: &Inputs) -> Result<Deployment, PlanError> {
    resolve_nodes(inp, 1)
}

/// Plans a deployment on `nodes` identical nodes described by `inp.inventory` (a cluster's node type): one
/// replica per node.
fn resolve_nodes(inp: &Inputs, nodes: u32) -> Result<Deployment, PlanError> {
    let mut fleet = fleet::build(
        inp.inventory,
        inp.profiles,
        runtime_for(inp.model, inp.workload, inp.overrides),
    )
    .map_err(|e| PlanError::Profile(e.0))?;
    fleet.nodes = nodes.max(1);
    resolve_fleet(inp, fleet)
}

/// Plans on a fleet the caller built from `inp.inventory` (the pipeline builds it once, to ask the store about
/// its devices, and hands it over): `inp.evidence` is applied here.
pub fn resolve_fleet(inp: &Inputs, mut fleet: Fleet) -> Result<Deployment, PlanError> {
    if inp.inventory.gpus.len() > MAX_GPUS {
        return Err(PlanError::Hardware(format!(
            "{} GPUs: a plan covers at most {MAX_GPUS} GPUs on one machine",
            inp.inventory.gpus.len()
        )));
    }
    // Figures no device of this fleet could produce for this model are set aside, with a warning each.
    let screened = crate::plausible::screen(inp.evidence, &fleet, inp.model);
    fleet.warnings.extend(screened.warnings);
    let evidence = screened.evidence;
    let inp = &Inputs {
        evidence: &evidence,
        ..*inp
    };
    fleet.apply(inp.evidence);
    // A request longer than the context the plan gives is planned for the longest that fits (`promise`).
    let fitted = promise::fit_request(fleet.runtime, inp.model, inp.workload, inp.overrides);
    let (workload, unmet) = match &fitted {
        Some((w, u)) => (w, Some(u.clone())),
        None => (inp.workload, None),
    };
    let inp = &Inputs { workload, ..*inp };
    let req = Request {
        model: inp.model,
        model_path: inp.model_path,
        fleet: &fleet,
        profiles: inp.profiles,
        workload: inp.workload,
        objective: inp.overrides.objective.unwrap_or(inp.workload.objective),
        overrides: inp.overrides,
    };
    match fleet.runtime {
        RuntimeId::Vllm => {
            let rt = Vllm::new(&req)?;
            plan_with(&rt, inp, &req, unmet)
        }
        RuntimeId::Torch => {
            let rt = Torch::new(&req)?;
            plan_with(&rt, inp, &req, unmet)
        }
        RuntimeId::LlamaCpp | RuntimeId::Any => {
            let rt = LlamaCpp::new(&req)?;
            plan_with(&rt, inp, &req, unmet)
        }
    }
}

/// Search, choose and explain with one runtime. `unmet`: the workload's own request did not fit the context and
/// `inp.workload` is the shortened one ([`promise::fit_request`]).
fn plan_with<R: Runtime>(
    rt: &R,
    inp: &Inputs,
    req: &Request,
    unmet: Option<WorkloadUnmet>,
) -> Result<Deployment, PlanError> {
    promise::check_context(rt.id(), inp.model, inp.overrides)?;
    let w = inp.workload;
    let objective = req.objective;
    let candidates = search::search(rt, &|e| explain::score(objective, w, &e.prediction))?;
    let preferred = rt.preferred_variant();
    let (winner, variant_decision) = search::choose(rt, &candidates, &preferred);
    let (chosen, status) = match winner {
        Some(c) => (c.clone(), Status::Fits),
        None => {
            let nearest = candidates
                .iter()
                .min_by(|a, b| {
                    a.eval
                        .overflow
                        .cmp(&b.eval.overflow)
                        .then(a.score.total_cmp(&b.score))
                })
                .cloned()
                .ok_or_else(|| PlanError::Model("no candidate configuration".into()))?;
            (nearest, Status::NoFit)
        }
    };
    let suggestions = if status == Status::NoFit {
        rt.suggestions(&chosen, &candidates)
    } else {
        Vec::new()
    };
    let described = rt.describe(&chosen);
    let mut provenance = described.provenance;
    // `--kv-type` pins the serving runtimes' variant, the KV cache type: the user chose it, not the search.
    let variant_decision = match (&inp.overrides.kv_type, rt.id()) {
        (Some(t), RuntimeId::LlamaCpp | RuntimeId::Vllm) => {
            (Source::User, format!("--kv-type {t}"))
        }
        _ => variant_decision,
    };
    provenance.insert(
        rt.variant_key().into(),
        Provenance {
            source: variant_decision.0,
            detail: variant_decision.1,
        },
    );
    let mut warnings = req.fleet.warnings.clone();
    warnings.extend(described.warnings);
    let (mut performance, perf_notes) =
        performance(rt, req, &chosen, &described.devices, inp.evidence);
    performance.training = described.training.clone();
    for (k, source, detail) in perf_notes {
        provenance.insert(k, Provenance { source, detail });
    }
    if let Some(why) = &inp.evidence.unavailable {
        warnings.push(format!(
            "planned without the measurement store: {why}; measured figures, if any, were not used"
        ));
    }
    for c in performance
        .sla
        .iter()
        .filter(|c| c.status == SlaStatus::Missed)
    {
        warnings.push(format!(
            "SLA missed: predicted {} {:.1} ms against workload {}'s target {:.1} ms ({:.1} ms over)",
            c.target.replace('_', " "),
            c.predicted_ms,
            w.id,
            c.target_ms,
            -c.margin_ms
        ));
    }
    if let Some(text) = promise::long_context_warning(rt.id(), inp.model, chosen.size) {
        warnings.push(text);
    }
    if let Some(u) = &unmet {
        warnings.push(format!(
            "workload {} cannot be met: its {}-token prompt and {} generated tokens need {} tokens per sequence, {} more than the {} a sequence holds here (the model's trained context, or -c); every figure is for a {}-token prompt and {} generated tokens; --allow-long-context plans the preset's own length with the engine's long-context setting",
            w.id,
            u.requested_prompt_tokens,
            u.requested_generation_tokens,
            u.requested_prompt_tokens + u.requested_generation_tokens,
            u.over_by_tokens,
            u.context_tokens,
            w.prompt_tokens,
            w.generation_tokens
        ));
    }
    let sla_missed = performance
        .sla
        .iter()
        .any(|c| c.status == SlaStatus::Missed);
    let status = match status {
        Status::Fits if unmet.is_some() => Status::WorkloadUnmet,
        Status::Fits if sla_missed => Status::SlaMissed,
        s => s,
    };
    let alternatives = explain::alternatives(rt, &candidates, &chosen, objective, w);
    let (engine, version) = rt.engine();
    let model = inp.model;
    let inv = inp.inventory;
    let fleet = req.fleet;
    let used: Vec<&str> = described.devices.iter().map(String::as_str).collect();
    let gpu_refs = fleet
        .gpus
        .iter()
        .map(|g| GpuRef {
            device: g.id.to_string(),
            index: g.id.ordinal,
            name: g.name.clone(),
            profile: g.profile.clone(),
            basis: g.profile_basis.into(),
            memory_total_bytes: g.memory_total_bytes,
            memory_free_bytes: g.memory_free_bytes,
            used: used.contains(&g.id.to_string().as_str()),
        })
        .chain(fleet.unused.iter().map(|u| GpuRef {
            device: u.id.to_string(),
            index: u.gpu.index,
            name: u.gpu.name.clone(),
            profile: u.profile.clone(),
            basis: u.profile_basis.into(),
            memory_total_bytes: u.gpu.memory_total_bytes,
            memory_free_bytes: u.gpu.memory_free_bytes,
            used: false,
        }));
    let mut gpu_refs: Vec<GpuRef> = gpu_refs.collect();
    gpu_refs.sort_by_key(|g| g.index);
    Ok(Deployment {
        api_version: emit::API_VERSION.into(),
        kind: "Deployment".into(),
        status,
        runtime: RuntimeRef {
            id: rt.id(),
            engine: engine.into(),
            version: version.into(),
        },
        model: ModelRef {
            path: inp.model_path.into(),
            format: format!("{:?}", model.format).to_lowercase(),
            architecture: model.architecture.clone(),
            parameter_count: model.parameter_count(),
            tensor_bytes: model.tensor_bytes(),
            fingerprint: model.fingerprint.clone(),
        },
        hardware: HardwareRef {
            source: inp.hardware_source.into(),
            nodes: fleet.nodes,
            cpu: CpuRef {
                model: inv.cpu.model.clone(),
                physical_cores: inv.cpu.physical_cores,
                logical_cpus: inv.cpu.logical_cpus,
                features: inv.cpu.features.clone(),
                profile: fleet.host.class_id().into(),
            },
            memory_total_bytes: inv.memory.total_bytes,
            memory_available_bytes: inv.memory.available_bytes,
            gpus: gpu_refs,
        },
        workload: WorkloadRef {
            preset: w.id.clone(),
            objective,
            concurrency: u64::from(rt.sequences(&chosen.point)),
            prompt_tokens: w.prompt_tokens,
            generation_tokens: w.generation_tokens,
            time_to_first_token_ms: w.sla.time_to_first_token_ms,
            time_per_output_token_ms: w.sla.time_per_output_token_ms,
            unmet,
        },
        topology: described.topology,
        settings: described.settings,
        memory: emit::MemoryPlan {
            devices: chosen.eval.memory.clone(),
        },
        performance,
        launch: described.launch,
        provenance,
        alternatives,
        suggestions,
        warnings,
    })
}

/// The chosen candidate's figures and what they rest on: rule efficiencies (`analytic`), store efficiencies
/// (`calibrated`/`measured`: the weakest basis among the efficiencies of the devices used, the host's included), or a throughput the store measured for this
/// model on this device at this many sequences, which replaces the prediction (measured beats assumed).
fn performance<R: Runtime>(
    rt: &R,
    req: &Request,
    c: &Candidate<R::Point>,
    devices: &[String],
    evidence: &Evidence,
) -> (Performance, Vec<(String, Source, String)>) {
    let fleet: &Fleet = req.fleet;
    let mut p = c.eval.prediction;
    let mut notes = Vec::new();
    let used_gpus: Vec<&fleet::FleetGpu> = fleet
        .gpus
        .iter()
        .filter(|g| devices.contains(&g.id.to_string()))
        .collect();
    // The host always computes (input rows, sampling, the per-token floor), so its efficiencies count too.
    let effs: Vec<&fleet::Efficiency> = used_gpus
        .iter()
        .flat_map(|g| [g.decode.as_ref(), g.prefill.as_ref()])
        .chain([fleet.host.decode.as_ref(), fleet.host.prefill.as_ref()])
        .flatten()
        .collect();
    let rank = |b: Basis| match b {
        Basis::Analytic => 0,
        Basis::Calibrated => 1,
        Basis::Measured => 2,
    };
    let mut basis = effs
        .iter()
        .map(|e| e.basis)
        .min_by_key(|b| rank(*b))
        .unwrap_or(Basis::Analytic);
    let mut rows: Vec<i64> = effs.iter().filter_map(|e| e.row).collect();
    let sources: std::collections::BTreeSet<&str> =
        effs.iter().map(|e| e.source.as_str()).collect();
    notes.push((
        "performance".to_string(),
        if basis == Basis::Analytic {
            Source::Rule
        } else {
            Source::Calibrated
        },
        format!(
            "roofline on profile peaks x efficiencies {}",
            sources.into_iter().collect::<Vec<_>>().join(", ")
        ),
    ));
    // A measured throughput for exactly this device class (every GPU the plan uses of one profile), as many
    // GPUs as the plan uses (a row that does not say spanned one) and the same sequence count.
    let device_profile = match used_gpus.as_slice() {
        [] => Some(fleet.host.class_id().to_string()),
        [one, rest @ ..] if rest.iter().all(|g| g.profile == one.profile) => {
            Some(one.profile.clone())
        }
        _ => None,
    };
    let gpus_used = used_gpus.len().max(1);
    let seqs = u64::from(rt.sequences(&c.point));
    let measured = |phase: Phase| {
        evidence
            .throughput
            .iter()
            .filter(|t| {
                Some(&t.device_profile) == device_profile.as_ref()
                    && t.runtime == rt.id()
                    && t.phase == phase
                    && t.concurrency.unwrap_or(1) == seqs
                    && t.tensor_parallel.map_or(1, |n| n as usize) == gpus_used
                    && rt.measured_here(&c.point, t)
                    // A prompt rate holds for prompts of about the measured length (within a factor of 2).
                    && (phase != Phase::Prefill
                        || t.tokens.is_none_or(|n| {
                            let (n, want) = (n as f64, req.workload.prompt_tokens.max(1) as f64);
                            n >= want / 2.0 && n <= want * 2.0
                        }))
            })
            .max_by_key(|t| t.row)
    };
    // Decode: tokens per second over all sequences, each sequence one token per step; prefill: the workload's
    // prompt at that rate.
    let prompt = req.workload.prompt_tokens as f64;
    for (phase, key, predicted, per_token) in [
        (
            Phase::Decode,
            "decode",
            c.eval.prediction.decode_tokens_per_s,
            seqs as f64,
        ),
        (
            Phase::Prefill,
            "prefill",
            c.eval.prediction.prefill_tokens_per_s,
            prompt,
        ),
    ] {
        let Some(t) = measured(phase) else { continue };
        let ms = 1e3 * per_token / t.tokens_per_s;
        if phase == Phase::Decode {
            (p.decode_tokens_per_s, p.time_per_output_token_ms) = (t.tokens_per_s, ms);
        } else {
            (p.prefill_tokens_per_s, p.time_to_first_token_ms) = (t.tokens_per_s, ms);
        }
        basis = Basis::Measured;
        rows.push(t.row);
        notes.push((
            format!("performance.{key}_tokens_per_s"),
            Source::Measured,
            format!(
                "store row {} ({}): {:.1} tokens/s measured at {seqs} sequences; the model predicted {predicted:.1}",
                t.row, t.what, t.tokens_per_s
            ),
        ));
    }
    rows.sort_unstable();
    rows.dedup();
    notes.push((
        "performance.basis".into(),
        match basis {
            Basis::Analytic => Source::Rule,
            Basis::Calibrated => Source::Calibrated,
            Basis::Measured => Source::Measured,
        },
        match (basis, evidence.rows) {
            (Basis::Analytic, Some(n)) => format!(
                "analytic: the measurement store holds {n} measurements for these devices and this model, none of which replaces the efficiency rules"
            ),
            (Basis::Analytic, None) if evidence.unavailable.is_some() => "analytic: planned without the measurement store (see warnings), so the efficiency rules apply".into(),
            (Basis::Analytic, None) => "analytic: no measurement store was consulted, so the efficiency rules apply".into(),
            (b, _) => format!(
                "{}: store rows {}",
                format!("{b:?}").to_lowercase(),
                rows.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")
            ),
        },
    ));
    // An embedding request generates nothing: a decode rate would describe a generation that never runs.
    if req.workload.mode == crate::profile::Mode::Embedding {
        p.decode_tokens_per_s = 0.0;
        p.time_per_output_token_ms = 0.0;
        notes.push((
            "performance.decode_tokens_per_s".into(),
            Source::Computed,
            "an embedding request generates no tokens: its rate is prefill_tokens_per_s, tokens embedded per second, and time_to_first_token_ms is one request's"
                .into(),
        ));
    }
    let sla = explain::sla_checks(req.workload, &p);
    (
        Performance {
            prefill_tokens_per_s: emit::round3(p.prefill_tokens_per_s),
            decode_tokens_per_s: emit::round3(p.decode_tokens_per_s),
            time_to_first_token_ms: emit::round3(p.time_to_first_token_ms.min(1e12)),
            time_per_output_token_ms: emit::round3(p.time_per_output_token_ms.min(1e12)),
            basis,
            evidence: rows,
            score: emit::round3(c.score.min(1e15)),
            sla,
            training: None,
        },
        notes,
    )
}
