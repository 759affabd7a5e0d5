//! The planner: enumerate llama.cpp configurations, keep those whose memory (the llama.cpp memory model)
//! fits every device's free memory minus the rules' reserves, score them with the throughput model against the
//! workload's objective and SLA, and explain the choice. Pure: takes values, never probes, reads files or the
//! clock.
//!
//! Inputs for measurements ([`Measurements`]) are part of the signature so measured efficiencies plug in
//! without reshaping the planner; until the store exists they are empty and every prediction says `analytic`.
//! Trade-off: candidates are enumerated exhaustively over a small grid (placement × KV type × micro-batch) and
//! the context is found by bisection per candidate, which keeps a plan under a few thousand memory estimates.

use std::collections::BTreeMap;

use crate::emit::{
    self, Alternative, CpuRef, Deployment, GpuRef, HardwareRef, Kubernetes, Launch, MemoryDevice,
    MemoryPlan, ModelRef, Ollama, Performance, Placement, PlacementDevice, Provenance, Resources,
    Settings, Source, Status, Strategy, WorkloadRef,
};
use crate::hardware::{GpuVendor, Inventory, parse_capability};
use crate::memory::llama_cpp::{self, CACHE_TYPES, FlashAttn, GpuTarget, Machine, Params};
use crate::model::{GgmlType, ModelSpec};
use crate::perf::{self, Basis, DeviceLoad, DevicePerf, Shape};
use crate::profile::matching::{Resolution, resolve as match_gpu};
use crate::profile::{
    AttentionKernel, ContextPolicy, DeviceKind, HardwareProfile, Mode, Objective, Phase,
    ProfileSet, ReserveTarget, RuleTable, WorkloadProfile,
};

/// Measured figures from the store (none yet).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Measurements {}

/// Values the user pins; everything else is re-optimised around them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    pub context_length: Option<u32>,
    pub gpu_layers: Option<u32>,
    pub parallel: Option<u32>,
    pub objective: Option<Objective>,
}

/// Everything the planner decides from.
pub struct Inputs<'a> {
    pub model: &'a ModelSpec,
    pub model_path: &'a str,
    pub inventory: &'a Inventory,
    /// `probe`, `inventory` or `profile`.
    pub hardware_source: &'a str,
    pub profiles: &'a ProfileSet,
    pub workload: &'a WorkloadProfile,
    pub measurements: &'a Measurements,
    pub overrides: &'a Overrides,
}

/// Inputs the planner cannot work with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PlanError {
    #[error(
        "workload {0:?} is a {1} workload; llama.cpp plans cover inference only (training plans need the training memory model)"
    )]
    UnsupportedMode(String, &'static str),
    #[error("the model does not declare {0}")]
    Model(String),
}

/// The context step the KV cache pads to (llama.cpp: 256 cells).
const CTX_STEP: u32 = 256;
/// Candidate micro-batches: llama.cpp's default (512) for latency; larger ones for throughput, where prefill
/// amortises weight reads over more tokens.
const UBATCHES_LATENCY: &[u32] = &[512];
const UBATCHES_THROUGHPUT: &[u32] = &[512, 1024, 2048];
/// llama.cpp's default logical batch.
const BATCH: u32 = 2048;
/// Scores within this fraction are ties, broken toward less memory.
const TIE: f64 = 0.01;
/// How many losing candidates the document lists.
const ALTERNATIVES: usize = 4;

/// A device the plan may use, with its capacity, reserve and speed.
#[derive(Debug, Clone)]
struct Dev {
    perf: DevicePerf,
    /// GPUs: host-to-device bytes per second (PCIe), for the host's offloaded prefill.
    link_bytes_per_s: Option<f64>,
    capacity: u64,
    reserve: u64,
    /// GPU index in the inventory, `None` for the host.
    gpu: Option<u32>,
    compute_capability: Option<(u32, u32)>,
}

#[derive(Debug, Clone)]
struct Candidate {
    strategy: Strategy,
    /// Inventory indices of the GPUs used, in layer order.
    gpus: Vec<usize>,
    params: Params,
    estimate: llama_cpp::Estimate,
    fits: bool,
    /// Bytes over capacity − reserve on the worst device (0 when it fits).
    overflow: u64,
    prediction: perf::Prediction,
    score: f64,
    /// Sequences at which decode turns compute-bound on the slowest-to-saturate device.
    knee: f64,
}

fn rule_reserve(set: &ProfileSet, device: ReserveTarget, capacity: u64) -> (u64, Vec<String>) {
    let mut bytes = 0u64;
    let mut ids = Vec::new();
    for e in &set.rules {
        if let RuleTable::MemoryReserves { rules, .. } = &e.value {
            for r in rules.iter().filter(|r| r.device == device) {
                if r.runtime != "llama.cpp" && r.runtime != "any" {
                    continue;
                }
                // The CUDA context row is the estimate's per-GPU overhead, not a reserve.
                if r.id == ProfileSet::LLAMA_CPP_GPU_OVERHEAD_RULE {
                    continue;
                }
                bytes += r.fixed_bytes + (r.fraction * capacity as f64) as u64;
                ids.push(r.id.clone());
            }
        }
    }
    (bytes, ids)
}

fn efficiency(set: &ProfileSet, device: ReserveTarget, phase: Phase) -> Option<(f64, String)> {
    set.rules.iter().find_map(|e| match &e.value {
        RuleTable::Efficiency { rules, .. } => rules
            .iter()
            .find(|r| {
                r.device == device
                    && r.phase == phase
                    && (r.runtime == "llama.cpp" || r.runtime == "any")
            })
            .map(|r| (r.efficiency, r.id.clone())),
        _ => None,
    })
}

/// The generic CPU class the throughput model uses for the host: by architecture, SIMD features and core count
/// (a server with 32+ cores and AVX-512 gets the 8-channel DDR5 class).
fn cpu_class<'a>(inv: &Inventory, set: &'a ProfileSet) -> Option<&'a HardwareProfile> {
    let f = &inv.cpu.features;
    let has = |x: &str| f.iter().any(|y| y == x);
    let id = if has("neon") || inv.cpu.arch.as_deref() == Some("aarch64") {
        if has("sve") {
            "cpu-aarch64-sve-ddr5-8-channel"
        } else {
            "cpu-aarch64-neon-lpddr5"
        }
    } else if has("avx512f") && inv.cpu.physical_cores >= 32 {
        "cpu-x86-64-avx512-ddr5-8-channel"
    } else if has("avx512f") {
        "cpu-x86-64-avx2-ddr5-dual-channel"
    } else {
        "cpu-x86-64-avx2-ddr4-dual-channel"
    };
    set.hardware(id).map(|e| &e.value).or_else(|| {
        set.hardware
            .iter()
            .map(|e| &e.value)
            .find(|h| h.kind == DeviceKind::Cpu)
    })
}

fn threads(inv: &Inventory, set: &ProfileSet, objective: Objective) -> (u32, String) {
    let physical = inv.cpu.physical_cores.max(1);
    let usable = inv
        .cpu
        .effective_cpus
        .map_or(physical, |c| (c.floor() as u32).clamp(1, physical));
    for e in &set.rules {
        if let RuleTable::CpuThreads { rules, .. } = &e.value
            && let Some(r) = rules.iter().find(|r| r.objective == objective)
        {
            let t = (usable.saturating_sub(r.reserve_cores) * r.threads_per_core).max(1);
            return (t, r.id.clone());
        }
    }
    (
        usable,
        "no cpu-threads rule: all usable physical cores".into(),
    )
}

/// Precision and flash attention for the GPUs in use, from the rules.
fn precision_and_attention(
    set: &ProfileSet,
    cc: Option<(u32, u32)>,
) -> (String, Option<String>, bool, Option<String>) {
    let Some(cc) = cc else {
        return ("fp32".into(), None, true, None);
    };
    let mut precision = ("fp32".to_string(), None);
    let mut fa = (true, None);
    for e in &set.rules {
        match &e.value {
            RuleTable::Precision { rules, .. } => {
                if let Some(r) = rules.iter().find(|r| r.compute_capability.contains(cc)) {
                    let p = serde_json::to_value(r.precision)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string));
                    precision = (p.unwrap_or_else(|| "fp32".into()), Some(r.id.clone()));
                }
            }
            RuleTable::Attention { rules, .. } => {
                if let Some(r) = rules
                    .iter()
                    .find(|r| r.compute_capability.contains(cc) && r.min_sequence.is_none())
                {
                    fa = (r.kernel != AttentionKernel::SdpaMath, Some(r.id.clone()));
                }
            }
            _ => {}
        }
    }
    (precision.0, precision.1, fa.0, fa.1)
}

fn score(objective: Objective, w: &WorkloadProfile, p: &perf::Prediction) -> f64 {
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
    let base = match objective {
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

/// Plans a deployment. `Err` only for inputs the planner cannot handle; a plan that does not fit is a document
/// with `status: no-fit`.
pub fn resolve(inp: &Inputs) -> Result<Deployment, PlanError> {
    let model = inp.model;
    let w = inp.workload;
    let set = inp.profiles;
    let inv = inp.inventory;
    if matches!(w.mode, Mode::FineTune | Mode::Training) {
        return Err(PlanError::UnsupportedMode(
            w.id.clone(),
            if w.mode == Mode::Training {
                "training"
            } else {
                "fine-tune"
            },
        ));
    }
    let _ = inp.measurements;
    let objective = inp.overrides.objective.unwrap_or(w.objective);
    let n_layer = model
        .hparams
        .block_count
        .ok_or_else(|| PlanError::Model("block_count".into()))? as u32;
    let n_ctx_train = model
        .hparams
        .context_length
        .map_or(u32::MAX, |c| c.min(u64::from(u32::MAX)) as u32);
    let mut prov: BTreeMap<String, Provenance> = BTreeMap::new();
    let mut warnings = Vec::new();
    let put = |prov: &mut BTreeMap<String, Provenance>, k: &str, source: Source, detail: String| {
        prov.insert(k.to_string(), Provenance { source, detail });
    };

    // Devices.
    let hw_profiles: Vec<&HardwareProfile> = set.hardware.iter().map(|e| &e.value).collect();
    let archs: Vec<_> = set.architectures().collect();
    let gpu_eff_d = efficiency(set, ReserveTarget::Gpu, Phase::Decode);
    let gpu_eff_p = efficiency(set, ReserveTarget::Gpu, Phase::Prefill);
    let cpu_eff_d = efficiency(set, ReserveTarget::Cpu, Phase::Decode);
    let cpu_eff_p = efficiency(set, ReserveTarget::Cpu, Phase::Prefill);
    let mut gpus: Vec<Dev> = Vec::new();
    let mut gpu_refs = Vec::new();
    for g in inv.gpus.iter().filter(|g| g.vendor == GpuVendor::Nvidia) {
        // Prefill peak: dense FP16 tensor throughput, or the shader rate on GPUs without tensor cores.
        let peak = |p: &HardwareProfile| {
            p.tensor_tflops
                .as_ref()
                .and_then(|t| t.fp16_fp32acc)
                .or_else(|| p.vector_tflops.as_ref().and_then(|v| v.fp16.or(v.fp32)))
                .unwrap_or(0.0)
                * 1e12
        };
        let (profile_id, bw, flops, link) = match match_gpu(g, &hw_profiles, &archs) {
            Resolution::Profile { profile, .. } => (
                profile.id.clone(),
                profile.memory.bandwidth_gb_s * 1e9,
                peak(profile),
                profile.interconnect.as_ref().and_then(pcie_bytes_per_s),
            ),
            Resolution::Derived { profile, notes } => {
                warnings.extend(notes.into_iter().map(|n| format!("gpu {}: {n}", g.index)));
                (
                    profile.id.clone(),
                    profile.memory.bandwidth_gb_s * 1e9,
                    peak(&profile),
                    profile.interconnect.as_ref().and_then(pcie_bytes_per_s),
                )
            }
            Resolution::Unresolved { notes } => {
                warnings.extend(
                    notes
                        .into_iter()
                        .map(|n| format!("gpu {}: {n}; it is not used", g.index)),
                );
                continue;
            }
        };
        let link = link.or_else(|| {
            g.pcie_generation
                .zip(g.pcie_width)
                .and_then(|(gen_, lanes)| {
                    pcie_bytes_per_s(&crate::profile::Interconnect {
                        pcie_gen: Some(gen_),
                        pcie_lanes: Some(lanes),
                        nvlink_gb_s: None,
                    })
                })
        });
        if flops <= 0.0 {
            warnings.push(format!(
                "gpu {} ({}): no FLOPS figure, so prefill is bounded by bandwidth only",
                g.index, g.name
            ));
        }
        let (reserve, _) = rule_reserve(set, ReserveTarget::Gpu, g.memory_total_bytes);
        gpu_refs.push(GpuRef {
            index: g.index,
            name: g.name.clone(),
            profile: profile_id.clone(),
            memory_total_bytes: g.memory_total_bytes,
            memory_free_bytes: g.memory_free_bytes,
        });
        gpus.push(Dev {
            perf: DevicePerf {
                name: format!("cuda:{}", g.index),
                bandwidth_bytes_per_s: bw,
                flops: if flops > 0.0 { flops } else { f64::INFINITY },
                decode_efficiency: gpu_eff_d.as_ref().map_or(1.0, |e| e.0),
                prefill_efficiency: gpu_eff_p.as_ref().map_or(1.0, |e| e.0),
                offload: None,
                cpu: None,
            },
            link_bytes_per_s: link,
            capacity: g.memory_free_bytes,
            reserve,
            gpu: Some(g.index),
            compute_capability: g.compute_capability.as_deref().and_then(parse_capability),
        });
    }
    let class = cpu_class(inv, set);
    let class_id = class.map_or("none".to_string(), |c| c.id.clone());
    let (n_threads, threads_rule) = threads(inv, set, objective);
    let flops_per_cycle = class
        .and_then(|c| c.cpu.as_ref())
        .and_then(|c| c.fp32_flops_per_cycle_per_core)
        .unwrap_or(16.0);
    let ghz = inv.cpu.frequency_mhz.map_or(2.0, |m| m as f64 / 1000.0);
    let cpu_flops = f64::from(n_threads) * ghz * 1e9 * flops_per_cycle;
    let (cpu_reserve, cpu_reserve_ids) =
        rule_reserve(set, ReserveTarget::Cpu, inv.memory.total_bytes);
    let host = Dev {
        perf: perf::cpu_device(
            class,
            inv,
            n_threads,
            cpu_eff_d.as_ref().map_or(1.0, |e| e.0),
            cpu_eff_p.as_ref().map_or(1.0, |e| e.0),
        ),
        link_bytes_per_s: None,
        capacity: inv.memory.available_bytes,
        reserve: cpu_reserve,
        gpu: None,
        compute_capability: None,
    };
    put(
        &mut prov,
        "hardware.cpu.profile",
        Source::Heuristic,
        format!(
            "{class_id} chosen by architecture, SIMD features and {} physical cores; CPU peak {:.0} GFLOPS = {n_threads} threads x {ghz:.2} GHz x {flops_per_cycle} FLOP/cycle",
            inv.cpu.physical_cores,
            cpu_flops / 1e9
        ),
    );

    // Settings every candidate shares.
    let n_par = inp
        .overrides
        .parallel
        .unwrap_or(w.concurrency.max(1) as u32)
        .max(1);
    let cc = gpus.iter().filter_map(|g| g.compute_capability).min();
    let (precision, precision_rule, fa, fa_rule) = precision_and_attention(set, cc);
    let kv_types: Vec<GgmlType> = {
        let prefs: Vec<GgmlType> = w
            .precision
            .kv_cache
            .iter()
            .filter_map(|n| {
                CACHE_TYPES
                    .iter()
                    .copied()
                    .find(|t| t.name().eq_ignore_ascii_case(n))
            })
            .collect();
        if prefs.is_empty() {
            vec![GgmlType::F16]
        } else {
            prefs
        }
    };
    let ubatches = if objective == Objective::Throughput {
        UBATCHES_THROUGHPUT
    } else {
        UBATCHES_LATENCY
    };

    // Placements: (strategy, GPUs in layer order, -ngl, --n-cpu-moe).
    let mut order: Vec<usize> = (0..gpus.len()).collect();
    order.sort_by(|&a, &b| gpus[b].capacity.cmp(&gpus[a].capacity).then(a.cmp(&b)));
    let is_moe = model.hparams.expert_count.unwrap_or(0) > 0;
    let all = n_layer + 1;
    let mut placements: Vec<(Strategy, Vec<usize>, u32, u32)> = vec![(Strategy::Cpu, vec![], 0, 0)];
    if !gpus.is_empty() {
        for k in 1..=gpus.len() {
            let used: Vec<usize> = order[..k].to_vec();
            let strategy = if k == 1 {
                Strategy::Gpu
            } else {
                Strategy::MultiGpu
            };
            placements.push((strategy, used.clone(), all, 0));
            if is_moe {
                placements.push((Strategy::MoeCpu, used.clone(), all, n_layer));
            }
            // Hybrid: every partial offload; the best that fits is kept by the scoring.
            for ngl in (1..all).rev() {
                placements.push((Strategy::Hybrid, used.clone(), ngl, 0));
            }
        }
    }
    if let Some(ngl) = inp.overrides.gpu_layers {
        placements.retain(|p| p.2 == ngl.min(all) || (ngl == 0 && p.0 == Strategy::Cpu));
        if ngl > all {
            warnings.push(format!(
                "-ngl {ngl} exceeds the model's {all} layers; using {all}"
            ));
        }
    }

    let gpu_overhead = set.llama_cpp_gpu_overhead().0;
    let shape = |ub: u32, np: u32| Shape {
        prompt_tokens: w.prompt_tokens,
        generation_tokens: w.generation_tokens,
        concurrency: u64::from(np),
        ubatch: u64::from(ub),
    };
    let evaluate = |strategy: Strategy,
                    used: &[usize],
                    ngl: u32,
                    cpu_moe: u32,
                    kv: GgmlType,
                    ub: u32,
                    np: u32,
                    ctx: u32|
     -> Candidate {
        let machine = Machine {
            cpu_features: inv.cpu.features.clone(),
            gpus: used
                .iter()
                .map(|&i| GpuTarget {
                    name: gpus[i].perf.name.clone(),
                    free_bytes: gpus[i].capacity,
                    overhead_bytes: gpu_overhead,
                })
                .collect(),
        };
        let params = Params {
            n_ctx: ctx,
            n_batch: BATCH.max(ub),
            n_ubatch: ub,
            n_parallel: np,
            type_k: kv,
            type_v: if fa { kv } else { GgmlType::F16 },
            flash_attn: if fa { FlashAttn::On } else { FlashAttn::Off },
            n_gpu_layers: ngl as i32,
            n_cpu_moe: cpu_moe,
            ..Params::default()
        };
        let est = match llama_cpp::estimate(model, &params, &machine) {
            Ok(e) => e,
            Err(_) => {
                return Candidate {
                    strategy,
                    gpus: used.to_vec(),
                    params,
                    estimate: empty_estimate(),
                    fits: false,
                    overflow: u64::MAX,
                    prediction: perf::Prediction {
                        prefill_tokens_per_s: 0.0,
                        decode_tokens_per_s: 0.0,
                        time_to_first_token_ms: f64::INFINITY,
                        time_per_output_token_ms: f64::INFINITY,
                    },
                    score: f64::INFINITY,
                    knee: 0.0,
                };
            }
        };
        let devs: Vec<&Dev> = std::iter::once(&host)
            .chain(used.iter().map(|&i| &gpus[i]))
            .collect();
        let mut overflow = 0u64;
        for (d, m) in devs.iter().zip(&est.devices) {
            let room = d.capacity.saturating_sub(d.reserve);
            overflow = overflow.max(m.total_bytes.saturating_sub(room));
        }
        let ld = perf::loads(model, &params, &machine, &est);
        let mut host_perf = host.perf.clone();
        if let Some(&first) = used.first() {
            let g = &gpus[first];
            host_perf.offload = Some(perf::Offload {
                flops: g.perf.flops * g.perf.prefill_efficiency,
                // Without a link figure, assume PCIe 3.0 x16, the slowest slot a discrete GPU ships in.
                link_bytes_per_s: g.link_bytes_per_s.unwrap_or(PCIE3_X16_BYTES_PER_S),
            });
        }
        // Layer order: host layers come first (llama.cpp offloads from the last layer).
        let pairs: Vec<(DevicePerf, DeviceLoad)> = std::iter::once(host_perf)
            .chain(devs.iter().skip(1).map(|d| d.perf.clone()))
            .zip(ld)
            .collect();
        let prediction = perf::predict(&pairs, shape(ub, np));
        let score = score(objective, w, &prediction);
        // Where a decode step turns compute-bound: past it more sequences add memory, not tokens per second.
        let knee = pairs
            .iter()
            .map(|(p, l)| perf::decode_knee(p, l))
            .fold(0.0, f64::max);
        Candidate {
            strategy,
            gpus: used.to_vec(),
            params,
            estimate: est,
            fits: overflow == 0,
            overflow,
            prediction,
            score,
            knee,
        }
    };

    // Context per the policy, or pinned by the user.
    let mut candidates: Vec<Candidate> = Vec::new();
    for (strategy, used, ngl, cpu_moe) in &placements {
        for &kv in &kv_types {
            if kv.is_quantized() && !fa {
                continue;
            }
            for &ub in ubatches {
                // Throughput workloads without a pinned concurrency also try the roofline knee: fewer
                // sequences that reach the same tokens per second in less memory.
                let mut pars = vec![n_par];
                let mut i = 0;
                while i < pars.len() {
                    let np = pars[i];
                    i += 1;
                    let eval = |ctx| evaluate(*strategy, used, *ngl, *cpu_moe, kv, ub, np, ctx);
                    let c = match (inp.overrides.context_length, &w.context) {
                        (Some(c), _) => eval(c),
                        (None, ContextPolicy::Fixed { tokens }) => {
                            eval((*tokens).min(u64::from(n_ctx_train)) as u32)
                        }
                        (None, ContextPolicy::ModelMax) => eval(n_ctx_train),
                        (None, ContextPolicy::LargestFit { floor }) => {
                            let floor = (*floor).min(u64::from(n_ctx_train)) as u32;
                            let at_floor = eval(floor);
                            if !at_floor.fits {
                                at_floor
                            } else {
                                // Bisection over multiples of 256 between the floor and the trained context.
                                let (mut lo, mut hi) = (floor / CTX_STEP, n_ctx_train / CTX_STEP);
                                let mut best = at_floor;
                                while lo < hi {
                                    let mid = (lo + hi).div_ceil(2);
                                    let c = eval(mid * CTX_STEP);
                                    if c.fits {
                                        lo = mid;
                                        best = c;
                                    } else {
                                        hi = mid - 1;
                                    }
                                }
                                best
                            }
                        }
                    };
                    if objective == Objective::Throughput
                        && inp.overrides.parallel.is_none()
                        && pars.len() == 1
                        && c.knee.is_finite()
                    {
                        let knee = (c.knee.ceil() as u32).max(1);
                        if knee < n_par {
                            pars.push(knee);
                        }
                    }
                    candidates.push(c);
                }
            }
        }
    }
    // The best score wins; candidates within TIE of it are ties, broken toward less memory. (A comparator that
    // treats near scores as equal is not a total order, so the tie band is taken around the best score.)
    let fitting: Vec<&Candidate> = candidates.iter().filter(|c| c.fits).collect();
    let best = fitting
        .iter()
        .map(|c| c.score)
        .fold(f64::INFINITY, f64::min);
    let winner = fitting
        .iter()
        .filter(|c| c.score <= best + TIE * best.abs())
        .min_by(|a, b| {
            a.estimate
                .total_bytes
                .cmp(&b.estimate.total_bytes)
                .then(a.score.total_cmp(&b.score))
        })
        .copied();
    let (chosen, status) = match winner {
        Some(c) => ((*c).clone(), Status::Fits),
        None => {
            let nearest = candidates
                .iter()
                .min_by(|a, b| {
                    a.overflow
                        .cmp(&b.overflow)
                        .then(a.score.total_cmp(&b.score))
                })
                .cloned()
                .ok_or_else(|| PlanError::Model("no candidate configuration".into()))?;
            (nearest, Status::NoFit)
        }
    };
    let suggestions = if status == Status::NoFit {
        suggest(model, &chosen, &candidates, w)
    } else {
        Vec::new()
    };

    // Provenance of the decided values.
    match (inp.overrides.context_length, &w.context) {
        (Some(c), _) => put(
            &mut prov,
            "settings.context_length",
            Source::User,
            format!("-c {c}"),
        ),
        (None, ContextPolicy::Fixed { tokens }) => put(
            &mut prov,
            "settings.context_length",
            Source::Profile,
            format!(
                "workload {}: fixed {tokens} tokens (model trains {n_ctx_train})",
                w.id
            ),
        ),
        (None, ContextPolicy::ModelMax) => put(
            &mut prov,
            "settings.context_length",
            Source::Profile,
            format!("workload {}: the model's trained context", w.id),
        ),
        (None, ContextPolicy::LargestFit { floor }) => put(
            &mut prov,
            "settings.context_length",
            Source::Computed,
            format!(
                "workload {}: the largest context that fits (floor {floor}), by the llama.cpp memory model",
                w.id
            ),
        ),
    }
    if inp.overrides.parallel.is_none() && chosen.params.n_parallel != n_par {
        put(
            &mut prov,
            "settings.parallel",
            Source::Computed,
            format!(
                "the roofline knee: decode turns compute-bound at {:.1} sequences (FLOPs-to-bandwidth ratio), so {} reach the throughput of workload {}'s {} in less memory",
                chosen.knee, chosen.params.n_parallel, w.id, w.concurrency
            ),
        );
    } else {
        put(
            &mut prov,
            "settings.parallel",
            if inp.overrides.parallel.is_some() {
                Source::User
            } else {
                Source::Profile
            },
            format!("workload {} concurrency {}", w.id, w.concurrency),
        );
    }
    put(&mut prov, "settings.threads", Source::Rule, threads_rule);
    put(
        &mut prov,
        "settings.flash_attention",
        if fa_rule.is_some() {
            Source::Rule
        } else {
            Source::Heuristic
        },
        fa_rule.unwrap_or_else(|| "CPU backend: llama.cpp resolves -fa auto to on".into()),
    );
    put(
        &mut prov,
        "settings.precision",
        if precision_rule.is_some() {
            Source::Rule
        } else {
            Source::Heuristic
        },
        precision_rule.unwrap_or_else(|| "CPU backend computes in fp32".into()),
    );
    put(
        &mut prov,
        "settings.cache_type_k",
        Source::Profile,
        format!(
            "workload {} prefers {:?}; the best-scoring type that fits",
            w.id, w.precision.kv_cache
        ),
    );
    put(
        &mut prov,
        "settings.ubatch_size",
        if ubatches.len() > 1 {
            Source::Computed
        } else {
            Source::Heuristic
        },
        if ubatches.len() > 1 {
            "the best-scoring of 512, 1024, 2048 for throughput".into()
        } else {
            "llama.cpp's default micro-batch for latency workloads".into()
        },
    );
    put(
        &mut prov,
        "placement.gpu_layers",
        if inp.overrides.gpu_layers.is_some() {
            Source::User
        } else {
            Source::Computed
        },
        "the placement that scores best and fits, by the llama.cpp memory model".into(),
    );
    put(
        &mut prov,
        "performance",
        Source::Rule,
        format!(
            "roofline on profile peaks x efficiencies {}",
            [gpu_eff_d, gpu_eff_p, cpu_eff_d, cpu_eff_p]
                .iter()
                .flatten()
                .map(|e| e.1.clone())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    if !cpu_reserve_ids.is_empty() {
        put(
            &mut prov,
            "memory.reserve.cpu",
            Source::Rule,
            cpu_reserve_ids.join(", "),
        );
    }

    let alternatives = alternatives(&candidates, &chosen);
    Ok(document(
        inp,
        &chosen,
        status,
        &host,
        &gpus,
        gpu_refs,
        &class_id,
        n_threads,
        fa,
        precision,
        prov,
        alternatives,
        suggestions,
        warnings,
    ))
}

/// PCIe 3.0 x16: 8 GT/s × 128/130 encoding × 16 lanes / 8 bits = 15.75 GB/s (PCI-SIG PCIe 3.0 base spec).
const PCIE3_X16_BYTES_PER_S: f64 = 15.75e9;

/// Usable host-to-device bytes per second of a PCIe link: per-lane rate after line encoding × lanes
/// (gen 1-2: 8b/10b at 2.5/5 GT/s; gen 3-5: 128b/130b at 8/16/32 GT/s).
fn pcie_bytes_per_s(i: &crate::profile::Interconnect) -> Option<f64> {
    let lanes = f64::from(i.pcie_lanes?);
    let per_lane = match i.pcie_gen? {
        1 => 2.5e9 * 0.8 / 8.0,
        2 => 5e9 * 0.8 / 8.0,
        3 => 8e9 * 128.0 / 130.0 / 8.0,
        4 => 16e9 * 128.0 / 130.0 / 8.0,
        5 => 32e9 * 128.0 / 130.0 / 8.0,
        _ => return None,
    };
    Some(per_lane * lanes)
}

fn empty_estimate() -> llama_cpp::Estimate {
    llama_cpp::Estimate {
        runtime: "llama.cpp",
        engine: llama_cpp::ENGINE,
        resolved: llama_cpp::Resolved {
            n_ctx: 0,
            n_ctx_seq: 0,
            n_stream: 0,
            n_batch: 0,
            n_ubatch: 0,
            n_seq_max: 0,
            flash_attn: false,
            swa_cells: None,
            n_gpu_layers: 0,
            mmap: true,
            repack: true,
            pipeline_parallel: false,
        },
        devices: Vec::new(),
        total_bytes: u64::MAX,
        notes: Vec::new(),
    }
}

/// The smallest changes that would make the nearest candidate fit.
fn suggest(
    model: &ModelSpec,
    near: &Candidate,
    all: &[Candidate],
    w: &WorkloadProfile,
) -> Vec<String> {
    let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
    let mut s = vec![format!(
        "the nearest configuration ({:?}, -ngl {}, -c {}) needs {:.2} GiB more on its fullest device",
        near.strategy,
        near.params.n_gpu_layers,
        near.estimate.resolved.n_ctx,
        gib(near.overflow)
    )];
    let kv: u64 = near.estimate.devices.iter().map(|d| d.kv_cache_bytes).sum();
    if kv >= near.overflow && near.overflow > 0 {
        let ctx = near.estimate.resolved.n_ctx;
        let keep = 1.0 - near.overflow as f64 / kv as f64;
        let shorter = ((f64::from(ctx) * keep) as u32 / CTX_STEP * CTX_STEP).max(CTX_STEP);
        s.push(format!(
            "a shorter context: about -c {shorter} frees the {:.2} GiB in KV cache",
            gib(near.overflow)
        ));
    }
    if near.params.type_k == GgmlType::F16 && !all.iter().any(|c| c.params.type_k == GgmlType::Q8_0)
    {
        s.push(format!(
            "a q8_0 KV cache (-ctk q8_0 -ctv q8_0) halves the KV cache ({:.2} GiB now); add q8_0 to workload {}'s kv_cache preferences",
            gib(kv),
            w.id
        ));
    }
    let weights = model.tensor_bytes();
    s.push(format!(
        "a smaller quantization of this model: its weights take {:.2} GiB at {:.2} bits per weight",
        gib(weights),
        model.bits_per_weight()
    ));
    s.push(format!(
        "or {:.2} GiB more free memory on the fullest device",
        gib(near.overflow)
    ));
    s
}

fn alternatives(all: &[Candidate], chosen: &Candidate) -> Vec<Alternative> {
    let mut rest: Vec<&Candidate> = all
        .iter()
        .filter(|c| {
            !(c.strategy == chosen.strategy
                && c.params.n_gpu_layers == chosen.params.n_gpu_layers
                && c.params.type_k == chosen.params.type_k
                && c.params.n_ubatch == chosen.params.n_ubatch
                && c.gpus == chosen.gpus)
        })
        .collect();
    rest.sort_by(|a, b| {
        b.fits
            .cmp(&a.fits)
            .then(a.score.total_cmp(&b.score))
            .then(a.overflow.cmp(&b.overflow))
    });
    // One row per strategy and GPU count, the best of each, so the list shows real choices.
    let mut seen = std::collections::BTreeSet::new();
    rest.into_iter()
        .filter(|c| seen.insert((c.strategy as u8, c.gpus.len())))
        .take(ALTERNATIVES)
        .map(|c| Alternative {
            strategy: c.strategy,
            gpu_layers: c.params.n_gpu_layers.max(0) as u32,
            context_length: c.estimate.resolved.n_ctx,
            ubatch_size: c.params.n_ubatch,
            cache_type_k: c.params.type_k.name().to_lowercase(),
            cache_type_v: c.params.type_v.name().to_lowercase(),
            fits: c.fits,
            time_per_output_token_ms: emit::round3(c.prediction.time_per_output_token_ms.min(1e12)),
            decode_tokens_per_s: emit::round3(c.prediction.decode_tokens_per_s),
            total_bytes: c.estimate.total_bytes,
            score: emit::round3(c.score.min(1e15)),
            why: if !c.fits {
                format!(
                    "does not fit: {:.2} GiB over on its fullest device",
                    c.overflow as f64 / f64::from(1u32 << 30)
                )
            } else if c.score > chosen.score {
                format!(
                    "slower for the objective: {:.1} ms per output token vs {:.1}",
                    c.prediction.time_per_output_token_ms,
                    chosen.prediction.time_per_output_token_ms
                )
            } else {
                "ties on speed and uses more memory".into()
            },
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn document(
    inp: &Inputs,
    c: &Candidate,
    status: Status,
    host: &Dev,
    gpus: &[Dev],
    gpu_refs: Vec<GpuRef>,
    class_id: &str,
    threads: u32,
    fa: bool,
    precision: String,
    provenance: BTreeMap<String, Provenance>,
    alternatives: Vec<Alternative>,
    suggestions: Vec<String>,
    mut warnings: Vec<String>,
) -> Deployment {
    let model = inp.model;
    let inv = inp.inventory;
    let w = inp.workload;
    let est = &c.estimate;
    let n_layer = model.hparams.block_count.unwrap_or(0) as u32;
    let ngl = c.params.n_gpu_layers.max(0) as u32;
    let devs: Vec<&Dev> = std::iter::once(host)
        .chain(c.gpus.iter().map(|&i| &gpus[i]))
        .collect();
    // Layer ranges per device, exactly as llama.cpp assigns them (from the last layer, split by free memory).
    let per_gpu: Vec<u64> = c.gpus.iter().map(|&i| gpus[i].capacity).collect();
    let weights: Vec<f64> = per_gpu.iter().map(|&b| b as f64).collect();
    let assignment = llama_cpp::layer_devices(n_layer, ngl, &weights);
    let range = |dev: Option<usize>| {
        let blocks: Vec<u32> = (0..n_layer)
            .filter(|&il| assignment[il as usize] == dev)
            .collect();
        blocks.first().zip(blocks.last()).map(|(a, b)| [*a, *b])
    };
    let output_dev = assignment[n_layer as usize];
    let mut placement_devices = vec![PlacementDevice {
        device: "cpu".into(),
        layers: range(None),
        output_layer: output_dev.is_none(),
    }];
    for k in 0..per_gpu.len() {
        placement_devices.push(PlacementDevice {
            device: format!("cuda:{}", devs[k + 1].gpu.unwrap_or(0)),
            layers: range(Some(k)),
            output_layer: output_dev == Some(k),
        });
    }
    let placement = Placement {
        strategy: c.strategy,
        gpu_layers: ngl,
        tensor_split: (c.gpus.len() > 1).then(|| per_gpu.iter().map(|b| b >> 20).collect()),
        devices: placement_devices,
    };
    let settings = Settings {
        context_length: est.resolved.n_ctx,
        batch_size: c.params.n_batch,
        ubatch_size: est.resolved.n_ubatch,
        parallel: c.params.n_parallel,
        threads,
        flash_attention: fa,
        cache_type_k: c.params.type_k.name().to_lowercase(),
        cache_type_v: c.params.type_v.name().to_lowercase(),
        mmap: c.params.mmap,
        n_cpu_moe: c.params.n_cpu_moe,
        precision,
    };
    let memory = MemoryPlan {
        devices: est
            .devices
            .iter()
            .zip(&devs)
            .map(|(m, d)| MemoryDevice {
                device: m.device.clone(),
                weights_bytes: m.weights_bytes,
                weights_repack_bytes: m.weights_repack_bytes,
                kv_cache_bytes: m.kv_cache_bytes,
                compute_bytes: m.compute_bytes,
                output_bytes: m.output_bytes,
                overhead_bytes: m.overhead_bytes,
                total_bytes: m.total_bytes,
                capacity_bytes: d.capacity,
                reserve_bytes: d.reserve,
            })
            .collect(),
    };
    warnings.extend(est.notes.iter().cloned());
    let host_bytes = est.devices.first().map_or(0, |d| d.total_bytes) + host.reserve;
    let mut requests = BTreeMap::new();
    requests.insert("memory".to_string(), host_bytes.to_string());
    requests.insert("cpu".to_string(), threads.to_string());
    if !c.gpus.is_empty() {
        requests.insert("nvidia.com/gpu".to_string(), c.gpus.len().to_string());
    }
    let launch = Launch {
        llama_server: emit::Argv {
            argv: emit::llama_server_argv(inp.model_path, &settings, &placement),
        },
        ollama: Ollama {
            num_ctx: est.resolved.n_ctx_seq,
            num_gpu: ngl,
            num_thread: threads,
            num_batch: est.resolved.n_ubatch,
        },
        kubernetes: Kubernetes {
            resources: Resources {
                requests: requests.clone(),
                limits: requests,
            },
        },
    };
    Deployment {
        api_version: emit::API_VERSION.into(),
        kind: "Deployment".into(),
        status,
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
            cpu: CpuRef {
                model: inv.cpu.model.clone(),
                physical_cores: inv.cpu.physical_cores,
                logical_cpus: inv.cpu.logical_cpus,
                features: inv.cpu.features.clone(),
                profile: class_id.into(),
            },
            memory_total_bytes: inv.memory.total_bytes,
            memory_available_bytes: inv.memory.available_bytes,
            gpus: gpu_refs,
        },
        workload: WorkloadRef {
            preset: w.id.clone(),
            objective: inp.overrides.objective.unwrap_or(w.objective),
            concurrency: u64::from(c.params.n_parallel),
            prompt_tokens: w.prompt_tokens,
            generation_tokens: w.generation_tokens,
            time_to_first_token_ms: w.sla.time_to_first_token_ms,
            time_per_output_token_ms: w.sla.time_per_output_token_ms,
        },
        runtime: "llama.cpp".into(),
        placement,
        settings,
        memory,
        performance: Performance {
            prefill_tokens_per_s: emit::round3(c.prediction.prefill_tokens_per_s),
            decode_tokens_per_s: emit::round3(c.prediction.decode_tokens_per_s),
            time_to_first_token_ms: emit::round3(c.prediction.time_to_first_token_ms.min(1e12)),
            time_per_output_token_ms: emit::round3(c.prediction.time_per_output_token_ms.min(1e12)),
            basis: Basis::Analytic,
            score: emit::round3(c.score.min(1e15)),
        },
        launch,
        provenance,
        alternatives,
        suggestions,
        warnings,
    }
}
