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
    Settings, SlaCheck, SlaStatus, Source, Status, Strategy, WorkloadRef,
};
use crate::hardware::{Gpu, GpuVendor, Inventory, parse_capability};
use crate::memory::llama_cpp::{self, CACHE_TYPES, FlashAttn, GpuTarget, Machine, Params};
use crate::model::{Format, GgmlType, ModelSpec};
use crate::perf::{self, Basis, DeviceLoad, DevicePerf, Shape};
use crate::profile::matching::{Resolution, resolve as match_gpu, usable_gpu_bytes};
use crate::profile::{
    AttentionKernel, ContextPolicy, DeviceKind, HardwareProfile, Mode, Objective, Phase,
    ProfileSet, ReserveTarget, RuntimeId, WorkloadProfile,
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
    /// A usage error (exit 2).
    #[error(
        "workload {0:?} is a {1} workload; llama.cpp plans cover inference only (training plans need the training memory model)"
    )]
    UnsupportedMode(String, &'static str),
    /// A usage error (exit 2): no runtime here serves this format.
    #[error(
        "a {0} checkpoint: llama.cpp serves GGUF files, and no runtime this planner models serves {0} yet"
    )]
    UnsupportedFormat(String),
    /// The model file has a defect the planner found (exit 4, naming the file).
    #[error("{0}")]
    Model(String),
    /// The hardware description is outside what a plan covers (exit 4, naming the inventory).
    #[error("{0}")]
    Hardware(String),
    /// The rule tables in force cannot be applied (exit 4, naming the rule).
    #[error("{0}")]
    Profile(String),
    /// A pinned value or workload number the planner cannot use (exit 2).
    #[error("{0}")]
    Usage(String),
}

/// Most GPUs one plan considers. The largest single machines expose 16 GPUs (DGX-2, HGX-2); 64 leaves room for
/// denser ones while bounding the placement search, which grows with the GPU count.
pub const MAX_GPUS: usize = 64;

/// Longest context per sequence: the whole `-c` is an `int32_t` in llama.cpp (and positions are `llama_pos`,
/// int32), so one sequence cannot hold more either. A total over slots above it (a saturated product included)
/// is refused by the memory model's own `-c` bound, and that candidate does not fit.
pub const MAX_CONTEXT_PER_SEQUENCE: u32 = llama_cpp::MAX_CTX_FLAG;

/// The llama.cpp GPU backend a device is driven by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Cuda,
    Rocm,
    Metal,
}

impl Backend {
    /// NVIDIA through CUDA, AMD through HIP (ROCm), Apple through Metal; Intel's SYCL/Vulkan backends are not
    /// modelled.
    fn of(v: GpuVendor) -> Option<Backend> {
        match v {
            GpuVendor::Nvidia => Some(Backend::Cuda),
            GpuVendor::Amd => Some(Backend::Rocm),
            GpuVendor::Apple => Some(Backend::Metal),
            GpuVendor::Intel => None,
        }
    }

    /// The document's device identity prefix (`cuda:N`).
    fn prefix(self) -> &'static str {
        match self {
            Backend::Cuda => "cuda",
            Backend::Rocm => "rocm",
            Backend::Metal => "metal",
        }
    }
}

fn backend_prefix(v: GpuVendor) -> &'static str {
    Backend::of(v).map_or("gpu", Backend::prefix)
}

fn gpu_ref(g: &Gpu, prefix: &str, profile: &str, basis: &str, used: bool) -> GpuRef {
    GpuRef {
        device: format!("{prefix}:{}", g.index),
        index: g.index,
        name: g.name.clone(),
        profile: profile.into(),
        basis: basis.into(),
        memory_total_bytes: g.memory_total_bytes,
        memory_free_bytes: g.memory_free_bytes,
        used,
    }
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
    backend: Option<Backend>,
    compute_capability: Option<(u32, u32)>,
}

#[derive(Debug, Clone)]
struct Candidate {
    strategy: Strategy,
    /// Inventory indices of the GPUs used, in layer order.
    gpus: Vec<usize>,
    params: Params,
    /// Tokens each sequence holds (`params.n_ctx` is this times `params.n_parallel`).
    ctx_seq: u32,
    /// CPU threads under this placement.
    threads: u32,
    estimate: llama_cpp::Estimate,
    fits: bool,
    /// Bytes over capacity − reserve on the worst device (0 when it fits).
    overflow: u64,
    prediction: perf::Prediction,
    score: f64,
    /// Sequences at which decode turns compute-bound on the slowest-to-saturate device.
    knee: f64,
}

fn rule_reserve(
    set: &ProfileSet,
    device: ReserveTarget,
    capacity: u64,
) -> Result<(u64, Vec<String>), PlanError> {
    set.reserve(device, RuntimeId::LlamaCpp, capacity)
        .map_err(|e| PlanError::Profile(e.to_string()))
}

fn efficiency(
    set: &ProfileSet,
    device: ReserveTarget,
    phase: Phase,
    cc: Option<(u32, u32)>,
) -> Option<(f64, String)> {
    set.efficiency(device, RuntimeId::LlamaCpp, phase, cc)
        .map(|r| (r.efficiency, r.id.clone()))
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

/// Hosts with fewer physical cores than this use every core even where the cpu-threads rule reserves one: a
/// reserved core costs 1/cores of the decode rate (decode scales with threads until bandwidth saturates: 5.2 to
/// 9.6 tokens/s from 1 to 2 threads for a 1B Q8_0 model on a 2-core host, issue 8), which below 8 cores exceeds
/// 12.5 %, more than the preemption stalls the reserve avoids.
const MIN_CORES_TO_RESERVE: u32 = 8;

/// With every layer on GPUs the host computes only the token-embedding rows and sampling; llama.cpp's CPU work per
/// token is then tiny, and more threads only spin at barriers and inflate the container's CPU request.
const GPU_HOST_THREADS: u32 = 4;

/// Physical cores this process may use (the cgroup quota bounds them).
fn usable_cores(inv: &Inventory) -> u32 {
    let physical = inv.cpu.physical_cores.max(1);
    inv.cpu
        .effective_cpus
        .map_or(physical, |c| (c.floor() as u32).clamp(1, physical))
}

/// Threads when the host computes layers: the cpu-threads rule for the objective, without its reserve on small
/// hosts.
fn host_threads(inv: &Inventory, set: &ProfileSet, objective: Objective) -> (u32, String) {
    let usable = usable_cores(inv);
    if let Some(r) = set.cpu_threads(objective) {
        {
            let reserve = if usable >= MIN_CORES_TO_RESERVE {
                r.reserve_cores
            } else {
                0
            };
            let t = (usable.saturating_sub(reserve) * r.threads_per_core).max(1);
            let why = if reserve == r.reserve_cores {
                format!("rule {}: {usable} usable physical cores", r.id)
            } else {
                format!(
                    "rule {} without its {}-core reserve: {usable} usable physical cores are fewer than {MIN_CORES_TO_RESERVE}, where a reserved core costs more decode speed than the stalls it avoids",
                    r.id, r.reserve_cores
                )
            };
            return (t, why);
        }
    }
    (
        usable,
        "no cpu-threads rule: all usable physical cores".into(),
    )
}

/// Threads when every layer is on GPUs.
fn gpu_host_threads(inv: &Inventory) -> (u32, String) {
    let usable = usable_cores(inv);
    let t = usable.min(GPU_HOST_THREADS);
    (
        t,
        format!(
            "every layer is on GPUs, so the host computes only token-embedding rows and sampling: {t} of {usable} usable physical cores"
        ),
    )
}

/// How much faster (relative score) a KV cache of type `t` must be before the planner gives up the workload's
/// preferred type, and the rule that says so; None: `t` is taken for memory only.
fn kv_min_gain(set: &ProfileSet, t: GgmlType) -> Option<(f64, String)> {
    let r = set.kv_cache(RuntimeId::LlamaCpp, &t.name().to_lowercase())?;
    Some((r.min_gain?, r.id.clone()))
}

/// Precision and flash attention for the GPUs in use, from the rules.
fn precision_and_attention(
    set: &ProfileSet,
    cc: Option<(u32, u32)>,
    sequence_tokens: u64,
) -> (String, Option<String>, bool, Option<String>) {
    let precision = set
        .precision(RuntimeId::LlamaCpp, cc)
        .map(|r| {
            let p = serde_json::to_value(r.precision)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string));
            (p.unwrap_or_else(|| "fp32".into()), Some(r.id.clone()))
        })
        .unwrap_or(("fp32".into(), None));
    let fa = set
        .attention(RuntimeId::LlamaCpp, cc, sequence_tokens)
        .map(|r| (r.kernel != AttentionKernel::SdpaMath, Some(r.id.clone())))
        .unwrap_or((true, None));
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
    if model.format != Format::Gguf {
        return Err(PlanError::UnsupportedFormat(
            format!("{:?}", model.format).to_lowercase(),
        ));
    }
    if inv.gpus.len() > MAX_GPUS {
        return Err(PlanError::Hardware(format!(
            "{} GPUs: a plan covers at most {MAX_GPUS} GPUs on one machine",
            inv.gpus.len()
        )));
    }
    let _ = inp.measurements;
    let objective = inp.overrides.objective.unwrap_or(w.objective);
    let n_layer = model
        .hparams
        .block_count
        .filter(|&n| n > 0)
        .ok_or_else(|| PlanError::Model("no block_count (or 0 blocks)".into()))?;
    let n_layer = u32::try_from(n_layer)
        .map_err(|_| PlanError::Model(format!("block_count {n_layer} is out of range")))?;
    let n_ctx_train = match model.hparams.context_length {
        Some(0) | None => {
            return Err(PlanError::Model(
                "context_length is 0 or missing: the model does not say how long a sequence it was trained for"
                    .into(),
            ));
        }
        Some(c) => u32::try_from(c)
            .ok()
            .filter(|&c| c <= MAX_CONTEXT_PER_SEQUENCE)
            .ok_or_else(|| {
                PlanError::Model(format!(
                    "context_length {c} exceeds {MAX_CONTEXT_PER_SEQUENCE} (llama.cpp positions are int32)"
                ))
            })?,
    };
    if let Some(c) = inp.overrides.context_length
        && !(1..=MAX_CONTEXT_PER_SEQUENCE).contains(&c)
    {
        return Err(PlanError::Usage(format!(
            "-c {c}: the context per sequence must be between 1 and {MAX_CONTEXT_PER_SEQUENCE} tokens (llama.cpp positions are int32)"
        )));
    }
    if inp.overrides.parallel == Some(0) {
        return Err(PlanError::Usage(
            "--parallel 0: at least one sequence (llama-server refuses -np 0)".into(),
        ));
    }
    let n_par = match inp.overrides.parallel {
        Some(p) => p,
        None => u32::try_from(w.concurrency)
            .ok()
            .filter(|&c| c >= 1)
            .ok_or_else(|| {
                PlanError::Usage(format!(
                    "workload {}: concurrency {} is outside 1..={}",
                    w.id,
                    w.concurrency,
                    u32::MAX
                ))
            })?,
    };
    let mut prov: BTreeMap<String, Provenance> = BTreeMap::new();
    let mut warnings = Vec::new();
    let put = |prov: &mut BTreeMap<String, Provenance>, k: &str, source: Source, detail: String| {
        prov.insert(k.to_string(), Provenance { source, detail });
    };

    // Devices: every GPU the inventory reports is either planned or listed with the reason it is not.
    let hw_profiles: Vec<&HardwareProfile> = set.hardware.iter().map(|e| &e.value).collect();
    let archs: Vec<_> = set.architectures().collect();
    // Efficiency rule ids per device identity, for provenance.
    let mut eff_rules: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let cpu_eff_d = efficiency(set, ReserveTarget::Cpu, Phase::Decode, None);
    let cpu_eff_p = efficiency(set, ReserveTarget::Cpu, Phase::Prefill, None);
    let mut all_gpus: Vec<Dev> = Vec::new();
    let mut gpu_refs = Vec::new();
    for g in &inv.gpus {
        let Some(backend) = Backend::of(g.vendor) else {
            warnings.push(format!(
                "gpu {} ({}): not used: llama.cpp reaches {:?} GPUs through its SYCL or Vulkan backends, whose memory this planner does not model",
                g.index, g.name, g.vendor
            ));
            gpu_refs.push(gpu_ref(g, backend_prefix(g.vendor), "none", "none", false));
            continue;
        };
        // Prefill peak: dense FP16 tensor throughput, or the shader rate on GPUs without tensor cores.
        let peak = |p: &HardwareProfile| {
            p.tensor_tflops
                .as_ref()
                .and_then(|t| t.fp16_fp32acc)
                .or_else(|| p.vector_tflops.as_ref().and_then(|v| v.fp16.or(v.fp32)))
                .unwrap_or(0.0)
                * 1e12
        };
        let (profile, basis): (HardwareProfile, &str) = match match_gpu(g, &hw_profiles, &archs) {
            Resolution::Profile { profile, .. } => (profile.clone(), "profile"),
            Resolution::Derived { profile, notes } => {
                warnings.extend(notes.into_iter().map(|n| format!("gpu {}: {n}", g.index)));
                (*profile, "derived")
            }
            Resolution::Heuristic {
                profile,
                basis,
                hint,
            } => {
                warnings.push(format!("gpu {}: heuristic: {basis}; hint: {hint}", g.index));
                (*profile, "heuristic")
            }
            Resolution::Unresolved { notes } => {
                warnings.extend(
                    notes
                        .into_iter()
                        .map(|n| format!("gpu {}: {n}; it is not used", g.index)),
                );
                gpu_refs.push(gpu_ref(g, backend.prefix(), "none", "none", false));
                continue;
            }
        };
        let (profile_id, bw, flops, link) = (
            profile.id.clone(),
            profile.memory.bandwidth_gb_s * 1e9,
            peak(&profile),
            profile.interconnect.as_ref().and_then(pcie_bytes_per_s),
        );
        // Metal allocates from the machine's memory up to macOS's GPU working-set limit.
        let capacity = if backend == Backend::Metal {
            match usable_gpu_bytes(g, Some(&profile)) {
                Ok(u) => {
                    put(
                        &mut prov,
                        &format!("memory.capacity.{}:{}", backend.prefix(), g.index),
                        Source::Profile,
                        format!(
                            "Metal working set {} bytes ({}); the GPU's share also comes out of the host's memory",
                            u.bytes, u.source
                        ),
                    );
                    g.memory_free_bytes.min(u.bytes)
                }
                Err(e) => {
                    warnings.push(format!("gpu {}: {e}; it is not used", g.index));
                    gpu_refs.push(gpu_ref(g, backend.prefix(), &profile_id, basis, false));
                    continue;
                }
            }
        } else {
            g.memory_free_bytes
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
        if backend == Backend::Rocm {
            warnings.push(format!(
                "gpu {} ({}): planned for llama.cpp's HIP (ROCm) backend, whose buffers are allocated as CUDA's are; modelled from the CUDA path, not measured on ROCm",
                g.index, g.name
            ));
        }
        let cc = g.compute_capability.as_deref().and_then(parse_capability);
        let gpu_eff_d = efficiency(set, ReserveTarget::Gpu, Phase::Decode, cc);
        let gpu_eff_p = efficiency(set, ReserveTarget::Gpu, Phase::Prefill, cc);
        eff_rules.insert(
            format!("{}:{}", backend.prefix(), g.index),
            [&gpu_eff_d, &gpu_eff_p]
                .into_iter()
                .flatten()
                .map(|e| e.1.clone())
                .collect(),
        );
        let (reserve, _) = rule_reserve(set, ReserveTarget::Gpu, g.memory_total_bytes)?;
        let id = format!("{}:{}", backend.prefix(), g.index);
        gpu_refs.push(gpu_ref(g, backend.prefix(), &profile_id, basis, true));
        all_gpus.push(Dev {
            perf: DevicePerf {
                name: id.clone(),
                bandwidth_bytes_per_s: bw,
                flops: if flops > 0.0 { flops } else { f64::INFINITY },
                decode_efficiency: gpu_eff_d.as_ref().map_or(1.0, |e| e.0),
                prefill_efficiency: gpu_eff_p.as_ref().map_or(1.0, |e| e.0),
                offload: None,
                cpu: None,
            },
            link_bytes_per_s: link,
            capacity,
            reserve,
            backend: Some(backend),
            compute_capability: cc,
        });
    }
    // One GPU backend per llama-server process: plan the backend with the most free memory, list the others.
    let chosen_backend = [Backend::Cuda, Backend::Rocm, Backend::Metal]
        .into_iter()
        .max_by_key(|b| {
            all_gpus
                .iter()
                .filter(|d| d.backend == Some(*b))
                .map(|d| d.capacity)
                .sum::<u64>()
        })
        .filter(|b| all_gpus.iter().any(|d| d.backend == Some(*b)));
    let gpus: Vec<Dev> = all_gpus
        .into_iter()
        .filter(|d| {
            let keep = d.backend == chosen_backend;
            if !keep {
                warnings.push(format!(
                    "{}: not used: one llama-server process drives one GPU backend, and {:?} GPUs hold more free memory",
                    d.perf.name,
                    chosen_backend.unwrap_or(Backend::Cuda)
                ));
            }
            keep
        })
        .collect();
    let class = cpu_class(inv, set);
    let class_id = class.map_or("none".to_string(), |c| c.id.clone());
    let cpu_perf = |threads: u32| {
        perf::cpu_device(
            class,
            inv,
            threads,
            cpu_eff_d.as_ref().map_or(1.0, |e| e.0),
            cpu_eff_p.as_ref().map_or(1.0, |e| e.0),
        )
    };
    let threads_all = host_threads(inv, set, objective);
    let threads_gpu = gpu_host_threads(inv);
    let (cpu_reserve, cpu_reserve_ids) =
        rule_reserve(set, ReserveTarget::Cpu, inv.memory.total_bytes)?;
    let host = Dev {
        perf: cpu_perf(threads_all.0),
        link_bytes_per_s: None,
        capacity: inv.memory.available_bytes,
        reserve: cpu_reserve,
        backend: None,
        compute_capability: None,
    };

    // Settings every candidate shares.
    let cc = gpus.iter().filter_map(|g| g.compute_capability).min();
    // The attention rule by the sequence length the workload asks for (the floor for largest-fit).
    let seq_hint = match (inp.overrides.context_length, &w.context) {
        (Some(c), _) => u64::from(c),
        (None, ContextPolicy::Fixed { tokens }) => *tokens,
        (None, ContextPolicy::ModelMax) => u64::from(n_ctx_train),
        (None, ContextPolicy::LargestFit { floor }) => *floor,
    };
    let (precision, precision_rule, fa, fa_rule) = precision_and_attention(set, cc, seq_hint);
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
    let preferred_kv = kv_types[0];
    let ubatches = if objective == Objective::Throughput {
        UBATCHES_THROUGHPUT
    } else {
        UBATCHES_LATENCY
    };

    // Placements: (strategy, GPUs in layer order, -ngl, --n-cpu-moe). Full offload is tried on the k GPUs with
    // the most free memory for every k; partial offload only on all of them, since taking a GPU away can only
    // move layers back to the slower host.
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
        }
        for ngl in (1..all).rev() {
            placements.push((Strategy::Hybrid, order.clone(), ngl, 0));
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
    let defect: std::cell::RefCell<Option<String>> = std::cell::RefCell::new(None);
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
                    ctx_seq: u32|
     -> Candidate {
        // The host computes layers unless every block is on a GPU.
        let host_layers = ngl < all || cpu_moe > 0;
        let threads = if host_layers || used.is_empty() {
            threads_all.0
        } else {
            threads_gpu.0
        };
        let machine = Machine {
            cpu_features: inv.cpu.features.clone(),
            gpus: used
                .iter()
                .map(|&i| GpuTarget {
                    name: gpus[i].perf.name.clone(),
                    free_bytes: gpus[i].capacity,
                    overhead_bytes: if gpus[i].backend == Some(Backend::Metal) {
                        0
                    } else {
                        gpu_overhead
                    },
                })
                .collect(),
        };
        let params = Params {
            n_ctx: ctx_seq.saturating_mul(np),
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
        let failed = |params: Params| Candidate {
            strategy,
            gpus: used.to_vec(),
            params,
            ctx_seq,
            threads,
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
        let est = match llama_cpp::estimate(model, &params, &machine) {
            Ok(e) => e,
            Err(e) => {
                // A defect of the model (an out-of-range hyper-parameter, an overflow at any size) is no
                // candidate that failed to fit: the planner stops and names the file (exit 4).
                if e.is_model_defect() {
                    defect.borrow_mut().get_or_insert_with(|| e.to_string());
                }
                return failed(params);
            }
        };
        let host = Dev {
            perf: cpu_perf(threads),
            ..host.clone()
        };
        let devs: Vec<&Dev> = std::iter::once(&host)
            .chain(used.iter().map(|&i| &gpus[i]))
            .collect();
        let mut overflow = 0u64;
        for (d, m) in devs.iter().zip(&est.devices) {
            let room = d.capacity.saturating_sub(d.reserve);
            overflow = overflow.max(m.total_bytes.saturating_sub(room));
        }
        // Unified memory (Apple): what the GPU holds comes out of the same RAM as the host's share.
        if used
            .iter()
            .any(|&i| gpus[i].backend == Some(Backend::Metal))
        {
            let room = host.capacity.saturating_sub(host.reserve);
            overflow = overflow.max(est.total_bytes.saturating_sub(room));
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
            ctx_seq,
            threads,
            estimate: est,
            fits: overflow == 0,
            overflow,
            prediction,
            score,
            knee,
        }
    };

    // Context per sequence, by the policy or pinned by the user; -c is that times the sequences.
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
    if let Some(d) = defect.take() {
        return Err(PlanError::Model(d));
    }
    let (winner, kv_decision) = choose(&candidates, preferred_kv, &|t| kv_min_gain(set, t));
    let (chosen, status) = match winner {
        Some(c) => (c.clone(), Status::Fits),
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
    let per_seq = match (inp.overrides.context_length, &w.context) {
        (Some(c), _) => (Source::User, format!("-c {c} tokens per sequence")),
        (None, ContextPolicy::Fixed { tokens }) => (
            Source::Profile,
            format!(
                "workload {}: fixed {tokens} tokens per sequence (model trains {n_ctx_train})",
                w.id
            ),
        ),
        (None, ContextPolicy::ModelMax) => (
            Source::Profile,
            format!(
                "workload {}: the model's trained context per sequence",
                w.id
            ),
        ),
        (None, ContextPolicy::LargestFit { floor }) => (
            Source::Computed,
            format!(
                "workload {}: the largest context per sequence that fits (floor {floor}), by the llama.cpp memory model",
                w.id
            ),
        ),
    };
    put(
        &mut prov,
        "settings.context_per_sequence",
        per_seq.0,
        per_seq.1,
    );
    put(
        &mut prov,
        "settings.context_length",
        Source::Computed,
        format!(
            "-c = {} tokens per sequence x {} sequences: llama-server divides -c evenly among its slots when -np is given (its KV cache is unified only when -np is auto, common/arg.cpp --kv-unified), so each conversation gets the whole per-sequence context; a unified cache would let one long conversation take cells the others were promised",
            chosen.ctx_seq, chosen.params.n_parallel
        ),
    );
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
    } else if inp.overrides.parallel.is_some() {
        put(
            &mut prov,
            "settings.parallel",
            Source::User,
            format!("--parallel {n_par}"),
        );
    } else {
        put(
            &mut prov,
            "settings.parallel",
            Source::Profile,
            format!("workload {} concurrency {}", w.id, w.concurrency),
        );
    }
    let threads_detail = if chosen.threads == threads_gpu.0 && chosen.threads != threads_all.0 {
        threads_gpu.1.clone()
    } else if chosen.strategy == Strategy::Cpu || chosen.gpus.is_empty() {
        threads_all.1.clone()
    } else if chosen.params.n_gpu_layers < (n_layer + 1) as i32 || chosen.params.n_cpu_moe > 0 {
        format!(
            "the host computes the layers (or experts) left on it, so it gets the CPU threads: {}",
            threads_all.1
        )
    } else {
        threads_gpu.1.clone()
    };
    put(
        &mut prov,
        "settings.threads",
        if chosen.threads == threads_gpu.0 && chosen.threads != threads_all.0 {
            Source::Heuristic
        } else {
            Source::Rule
        },
        threads_detail,
    );
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
        kv_decision.0,
        kv_decision.1,
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
            chosen
                .gpus
                .iter()
                .flat_map(|&i| eff_rules
                    .get(&gpus[i].perf.name)
                    .cloned()
                    .unwrap_or_default())
                .chain(
                    [&cpu_eff_d, &cpu_eff_p]
                        .into_iter()
                        .flatten()
                        .map(|e| e.1.clone())
                )
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
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

    let chosen_cpu = cpu_perf(chosen.threads);
    put(
        &mut prov,
        "hardware.cpu.profile",
        Source::Heuristic,
        format!(
            "{class_id} chosen by architecture, SIMD features and {} physical cores; at {} threads: {:.0} GFLOPS FP32 peak, {:.1} GB/s memory bandwidth",
            inv.cpu.physical_cores,
            chosen.threads,
            chosen_cpu.flops / 1e9,
            chosen_cpu.bandwidth_bytes_per_s / 1e9
        ),
    );
    let sla = sla_checks(w, &chosen.prediction);
    for c in sla.iter().filter(|c| c.status == SlaStatus::Missed) {
        warnings.push(format!(
            "SLA missed: predicted {} {:.1} ms against workload {}'s target {:.1} ms ({:.1} ms over)",
            c.target.replace('_', " "),
            c.predicted_ms,
            w.id,
            c.target_ms,
            -c.margin_ms
        ));
    }
    let alternatives = alternatives(&candidates, &chosen, objective, w);
    Ok(document(
        inp,
        &chosen,
        status,
        &host,
        &gpus,
        gpu_refs,
        &class_id,
        fa,
        precision,
        prov,
        alternatives,
        suggestions,
        warnings,
        sla,
    ))
}

/// The fitting candidate with the best score; candidates within [`TIE`] of it are ties, broken toward less
/// memory. The workload's first KV cache type wins unless it does not fit or another type's gain clears the
/// rule's threshold. Returns the winner and the provenance of the KV cache type.
fn choose<'a>(
    candidates: &'a [Candidate],
    preferred: GgmlType,
    min_gain: &dyn Fn(GgmlType) -> Option<(f64, String)>,
) -> (Option<&'a Candidate>, (Source, String)) {
    let best_of = |filter: &dyn Fn(&Candidate) -> bool| -> Option<&'a Candidate> {
        let fitting: Vec<&Candidate> = candidates.iter().filter(|c| c.fits && filter(c)).collect();
        let best = fitting
            .iter()
            .map(|c| c.score)
            .fold(f64::INFINITY, f64::min);
        fitting
            .into_iter()
            .filter(|c| c.score <= best + TIE * best.abs())
            .min_by(|a, b| {
                a.estimate
                    .total_bytes
                    .cmp(&b.estimate.total_bytes)
                    .then(a.score.total_cmp(&b.score))
            })
    };
    let pref_name = preferred.name().to_lowercase();
    let any = best_of(&|_| true);
    let pref = best_of(&|c| c.params.type_k == preferred);
    match (any, pref) {
        (None, _) => (
            None,
            (
                Source::Profile,
                format!("the workload prefers {pref_name}; nothing fits"),
            ),
        ),
        (Some(a), None) => (
            Some(a),
            (
                Source::Computed,
                format!(
                    "the workload prefers {pref_name}, which does not fit; {} is the best-scoring type that does",
                    a.params.type_k.name().to_lowercase()
                ),
            ),
        ),
        (Some(a), Some(p)) if a.params.type_k == preferred || std::ptr::eq(a, p) => (
            Some(p),
            (
                Source::Profile,
                format!("the workload's preferred KV cache type {pref_name} fits"),
            ),
        ),
        (Some(a), Some(p)) => {
            let gain = if p.score > 0.0 {
                (p.score - a.score) / p.score
            } else {
                0.0
            };
            let other = a.params.type_k.name().to_lowercase();
            match min_gain(a.params.type_k) {
                Some((min, id)) if gain >= min => (
                    Some(a),
                    (
                        Source::Rule,
                        format!(
                            "{other} scores {:.1} % better than the preferred {pref_name}, clearing the {:.0} % threshold of rule {}",
                            gain * 100.0,
                            min * 100.0,
                            id
                        ),
                    ),
                ),
                Some((min, id)) => (
                    Some(p),
                    (
                        Source::Rule,
                        format!(
                            "the workload's preferred {pref_name} fits; {other} would score {:.1} % better, below the {:.0} % threshold of rule {} for giving up KV precision",
                            gain * 100.0,
                            min * 100.0,
                            id
                        ),
                    ),
                ),
                None => (
                    Some(p),
                    (
                        Source::Profile,
                        format!(
                            "the workload's preferred {pref_name} fits; {other} would score {:.1} % better, but no kv-cache rule lets {other} trade KV precision for speed",
                            gain * 100.0
                        ),
                    ),
                ),
            }
        }
    }
}

/// Each SLA target of the workload against the prediction.
fn sla_checks(w: &WorkloadProfile, p: &perf::Prediction) -> Vec<SlaCheck> {
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
        "the nearest configuration ({:?}, -ngl {}, {} tokens per sequence x {} sequences) needs {:.2} GiB more on its fullest device",
        near.strategy,
        near.params.n_gpu_layers,
        near.ctx_seq,
        near.params.n_parallel,
        gib(near.overflow)
    )];
    let kv: u64 = near.estimate.devices.iter().map(|d| d.kv_cache_bytes).sum();
    if kv >= near.overflow && near.overflow > 0 {
        let keep = 1.0 - near.overflow as f64 / kv as f64;
        let shorter = ((f64::from(near.ctx_seq) * keep) as u32 / CTX_STEP * CTX_STEP).max(CTX_STEP);
        s.push(format!(
            "a shorter context: about {shorter} tokens per sequence (resolve -c {shorter}) frees the {:.2} GiB in KV cache",
            gib(near.overflow)
        ));
        if near.params.n_parallel > 1 {
            s.push(format!(
                "fewer sequences: --parallel {} frees KV cache in proportion",
                (f64::from(near.params.n_parallel) * keep).floor().max(1.0) as u32
            ));
        }
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

/// Why a candidate lost, in the objective's own terms.
fn why_lost(
    c: &Candidate,
    chosen: &Candidate,
    objective: Objective,
    w: &WorkloadProfile,
) -> String {
    if !c.fits {
        return format!(
            "does not fit: {:.2} GiB over on its fullest device",
            c.overflow as f64 / f64::from(1u32 << 30)
        );
    }
    let missed = |p: &perf::Prediction| {
        sla_checks(w, p)
            .into_iter()
            .filter(|s| s.status == SlaStatus::Missed)
            .map(|s| s.target)
            .collect::<Vec<_>>()
    };
    let (m_c, m_chosen) = (missed(&c.prediction), missed(&chosen.prediction));
    if m_c.len() > m_chosen.len() {
        return format!("misses workload {}'s SLA on {}", w.id, m_c.join(" and "));
    }
    if c.params.type_k != chosen.params.type_k && c.score < chosen.score * (1.0 - TIE) {
        return format!(
            "scores {:.1} % better with a {} KV cache, but the workload prefers {} and the kv-cache rules do not trade KV precision for this gain",
            (chosen.score - c.score) / chosen.score * 100.0,
            c.params.type_k.name().to_lowercase(),
            chosen.params.type_k.name().to_lowercase()
        );
    }
    if c.score <= chosen.score * (1.0 + TIE) {
        return format!(
            "ties on the objective and uses more memory ({:.2} vs {:.2} GiB)",
            c.estimate.total_bytes as f64 / f64::from(1u32 << 30),
            chosen.estimate.total_bytes as f64 / f64::from(1u32 << 30)
        );
    }
    let (a, b) = (&c.prediction, &chosen.prediction);
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
            c.params.n_parallel,
            b.decode_tokens_per_s,
            chosen.params.n_parallel
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

fn alternatives(
    all: &[Candidate],
    chosen: &Candidate,
    objective: Objective,
    w: &WorkloadProfile,
) -> Vec<Alternative> {
    let mut rest: Vec<&Candidate> = all
        .iter()
        .filter(|c| {
            !(c.strategy == chosen.strategy
                && c.params.n_gpu_layers == chosen.params.n_gpu_layers
                && c.params.type_k == chosen.params.type_k
                && c.params.n_ubatch == chosen.params.n_ubatch
                && c.params.n_parallel == chosen.params.n_parallel
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
            context_length: c.params.n_ctx,
            context_per_sequence: c.ctx_seq,
            parallel: c.params.n_parallel,
            ubatch_size: c.params.n_ubatch,
            cache_type_k: c.params.type_k.name().to_lowercase(),
            cache_type_v: c.params.type_v.name().to_lowercase(),
            fits: c.fits,
            time_to_first_token_ms: emit::round3(c.prediction.time_to_first_token_ms.min(1e12)),
            time_per_output_token_ms: emit::round3(c.prediction.time_per_output_token_ms.min(1e12)),
            decode_tokens_per_s: emit::round3(c.prediction.decode_tokens_per_s),
            total_bytes: c.estimate.total_bytes,
            score: emit::round3(c.score.min(1e15)),
            why: why_lost(c, chosen, objective, w),
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
    fa: bool,
    precision: String,
    provenance: BTreeMap<String, Provenance>,
    alternatives: Vec<Alternative>,
    suggestions: Vec<String>,
    mut warnings: Vec<String>,
    sla: Vec<SlaCheck>,
) -> Deployment {
    let threads = c.threads;
    let mut gpu_refs = gpu_refs;
    for r in &mut gpu_refs {
        r.used = c.gpus.iter().any(|&i| gpus[i].perf.name == r.device);
    }
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
            device: devs[k + 1].perf.name.clone(),
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
        context_length: c.params.n_ctx,
        context_per_sequence: c.ctx_seq,
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
            // The memory model names GPUs by position in the plan; the document by identity.
            .map(|(m, d)| MemoryDevice {
                device: d.perf.name.clone(),
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
    // Extended resources of the vendors' Kubernetes device plugins; Apple GPUs have none (no Kubernetes on macOS).
    match devs.get(1).and_then(|d| d.backend) {
        Some(Backend::Cuda) => {
            requests.insert("nvidia.com/gpu".to_string(), c.gpus.len().to_string());
        }
        Some(Backend::Rocm) => {
            requests.insert("amd.com/gpu".to_string(), c.gpus.len().to_string());
        }
        Some(Backend::Metal) | None => {}
    }
    // llama-server opens a split model by its first shard and finds the others itself.
    let model_path = match model.files.as_slice() {
        [first, _, ..] => first.path.display().to_string(),
        _ => inp.model_path.to_string(),
    };
    let launch = Launch {
        llama_server: emit::llama_server_argv(&model_path, &settings, &placement),
        ollama: Ollama {
            num_ctx: c.ctx_seq,
            num_gpu: ngl,
            num_thread: threads,
            num_batch: est.resolved.n_ubatch,
            env: BTreeMap::from([(
                "OLLAMA_NUM_PARALLEL".to_string(),
                c.params.n_parallel.to_string(),
            )]),
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
            sla,
        },
        launch,
        provenance,
        alternatives,
        suggestions,
        warnings,
    }
}
