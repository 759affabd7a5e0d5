//! llama.cpp behind the runtime seam: GGUF inference through llama-server (and Ollama). Its candidate space is
//! placement (CPU, every layer on the k GPUs with the most free memory, the routed experts of the first N layers
//! on the host, or a hybrid ladder of `-ngl`: `ladders.rs`) × KV cache type × micro-batch × sequences, with the
//! context per sequence as the size knob; its memory model is [`optimizer_memory::llama_cpp`] (exact against the
//! pinned engine's dry runs); its topology is the layer pipeline llama.cpp builds ([`topology::loads`]); its
//! artifacts are in [`launch`].
//!
//! Trade-off: on identical GPUs, full offload on 1..k GPUs is one ladder, so only the fewest GPUs that hold the
//! model are fitted: a layer split runs its devices one after another, so more identical GPUs never decode
//! faster, and fitting them only priced alternatives that lose on memory (the document no longer lists them).

mod arch;
mod describe;
pub mod draft;
mod ladders;
pub(crate) mod launch;
pub mod mmproj;
pub mod quantize;
pub(crate) mod rpc;
pub mod topology;

use std::cell::RefCell;
use std::collections::HashMap;

use super::{Candidate, Described, Eval, PlanError, Request, Runtime, RuntimeId, Size};
use crate::emit::{LlamaCppSettings, MemoryComponents, MemoryDevice, Settings, Strategy};
use crate::fleet::{DeviceId, DeviceKind, FleetGpu, PCIE3_X16_BYTES_PER_S};
use crate::perf::{self, DeviceLoad, DevicePerf, Shape};
use crate::profile::{AttentionKernel, ContextPolicy, Objective, ProfileSet, WorkloadProfile};
use optimizer_memory::llama_cpp::{self, CACHE_TYPES, FlashAttn, GpuTarget, Machine, Params};
use optimizer_model::{Format, GgmlType, ModelSpec};

/// Longest context per sequence: the whole `-c` is an `int32_t` in llama.cpp (and positions are `llama_pos`,
/// int32), so one sequence cannot hold more either. A total over slots above it is refused as asked
/// (`launch::engine_limits`), and the largest-fit search stays below it.
const MAX_CONTEXT_PER_SEQUENCE: u32 = llama_cpp::MAX_CTX_FLAG;

/// The context step the KV cache pads to (llama.cpp: 256 cells).
const CTX_STEP: u32 = 256;
/// Candidate micro-batches: llama.cpp's default (512) for latency; larger ones for throughput, where prefill
/// amortises weight reads over more tokens.
const UBATCHES_LATENCY: &[u32] = &[512];
const UBATCHES_THROUGHPUT: &[u32] = &[512, 1024, 2048];
/// llama.cpp's default logical batch.
const BATCH: u32 = 2048;

/// Hosts with fewer physical cores than this use every core even where the cpu-threads rule reserves one: a
/// reserved core costs 1/cores of the decode rate (decode scales with threads until bandwidth saturates: 5.2 to
/// 9.6 tokens/s from 1 to 2 threads for a 1B Q8_0 model on a 2-core host, issue 8), which below 8 cores exceeds
/// 12.5 %, more than the preemption stalls the reserve avoids.
const MIN_CORES_TO_RESERVE: u32 = 8;

/// With every layer on GPUs the host computes only the token-embedding rows and sampling; llama.cpp's CPU work per
/// token is then tiny, and more threads only spin at barriers and inflate the container's CPU request.
const GPU_HOST_THREADS: u32 = 4;

/// One point of llama.cpp's candidate space.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub strategy: Strategy,
    /// Indices into the runtime's GPUs, in layer order.
    pub gpus: Vec<usize>,
    /// `-ngl`.
    pub ngl: u32,
    /// `--n-cpu-moe`.
    pub cpu_moe: u32,
    pub kv: GgmlType,
    pub ubatch: u32,
    pub parallel: u32,
}

/// llama.cpp planning one request.
pub struct LlamaCpp<'a> {
    req: &'a Request<'a>,
    /// The GPUs of the one backend a llama-server process drives.
    gpus: Vec<&'a FleetGpu>,
    n_layer: u32,
    n_ctx_train: u32,
    n_par: u32,
    threads_all: (u32, String),
    threads_gpu: (u32, String),
    fa: bool,
    fa_rule: Option<String>,
    precision: String,
    precision_rule: Option<String>,
    kv_types: Vec<GgmlType>,
    ubatches: &'static [u32],
    gpu_overhead: u64,
    /// What choosing the GPUs left out.
    pub warnings: Vec<String>,
    /// Device loads by placement (`-ngl`, `--n-cpu-moe`, GPUs): they do not depend on the context.
    loads: RefCell<HashMap<PlacementKey, Vec<DeviceLoad>>>,
}

/// A placement: `-ngl`, `--n-cpu-moe` and the GPUs in layer order.
type PlacementKey = (u32, u32, Vec<usize>);

/// The trained context, checked against what llama.cpp can address.
fn trained_context(model: &ModelSpec) -> Result<u32, PlanError> {
    match model.hparams.context_length {
        Some(0) | None => Err(PlanError::Model(
            "context_length is 0 or missing: the model does not say how long a sequence it was trained for"
                .into(),
        )),
        Some(c) => u32::try_from(c)
            .ok()
            .filter(|&c| c <= MAX_CONTEXT_PER_SEQUENCE)
            .ok_or_else(|| {
                PlanError::Model(format!(
                    "context_length {c} exceeds {MAX_CONTEXT_PER_SEQUENCE} (llama.cpp positions are int32)"
                ))
            }),
    }
}

/// The GPUs llama-server drives on `fleet`, in the fleet's order, and why the others are left out: Intel GPUs
/// (SYCL) never, and of CUDA, ROCm, Metal and Vulkan only the backend whose GPUs hold the most free memory (one
/// llama-server process drives one GPU backend). `resolve` plans on these and `estimate` estimates on these, so
/// the two see the same devices with the same capacity.
pub fn drivable_gpus(fleet: &crate::fleet::Fleet) -> (Vec<&FleetGpu>, Vec<String>) {
    let mut warnings = Vec::new();
    // Intel GPUs (SYCL), matched to a profile or not: listed, never planned.
    let sycl = fleet
        .unused
        .iter()
        .filter(|u| u.id.kind == DeviceKind::Sycl)
        .map(|u| (u.id.ordinal, u.gpu.name.as_str()))
        .chain(
            fleet
                .gpus
                .iter()
                .filter(|g| g.id.kind == DeviceKind::Sycl)
                .map(|g| (g.id.ordinal, g.name.as_str())),
        );
    for (ordinal, name) in sycl {
        warnings.push(format!(
            "gpu {ordinal} ({name}): not used: llama.cpp reaches Intel GPUs through its SYCL or Vulkan backends, whose memory this planner does not model"
        ));
    }
    let drivable: Vec<&FleetGpu> = fleet
        .gpus
        .iter()
        .filter(|g| g.id.kind != DeviceKind::Sycl)
        .collect();
    for g in drivable.iter().filter(|g| g.id.kind == DeviceKind::Rocm) {
        warnings.push(format!(
            "gpu {} ({}): planned for llama.cpp's HIP (ROCm) backend, whose buffers are allocated as CUDA's are; modelled from the CUDA path, not measured on ROCm",
            g.id.ordinal, g.name
        ));
    }
    // One GPU backend per llama-server process: plan the backend with the most free memory, list the others.
    let chosen = [
        DeviceKind::Cuda,
        DeviceKind::Rocm,
        DeviceKind::Metal,
        DeviceKind::Vulkan,
    ]
    .into_iter()
    .max_by_key(|k| {
        drivable
            .iter()
            .filter(|g| g.id.kind == *k)
            .map(|g| g.capacity_bytes)
            .sum::<u64>()
    })
    .filter(|k| drivable.iter().any(|g| g.id.kind == *k));
    let gpus: Vec<&FleetGpu> = drivable
        .into_iter()
        .filter(|g| {
            let keep = Some(g.id.kind) == chosen;
            if !keep {
                warnings.push(format!(
                    "{}: not used: one llama-server process drives one GPU backend, and {:?} GPUs hold more free memory",
                    g.id,
                    chosen.unwrap_or(DeviceKind::Cuda)
                ));
            }
            keep
        })
        .collect();
    (gpus, warnings)
}

/// The llama.cpp memory model's view of a host with CPU features `cpu_features` and the GPUs `gpus`: each GPU
/// with its capacity and the per-GPU runtime overhead `gpu_overhead` of the memory-reserve rules (none on a
/// unified-memory GPU, whose buffers come out of the host's memory).
pub fn machine_on(cpu_features: &[String], gpus: &[&FleetGpu], gpu_overhead: u64) -> Machine {
    Machine {
        cpu_features: cpu_features.to_vec(),
        gpus: gpus
            .iter()
            .map(|g| GpuTarget {
                name: g.id.to_string(),
                free_bytes: g.capacity_bytes,
                overhead_bytes: if g.unified_memory { 0 } else { gpu_overhead },
            })
            .collect(),
    }
}

/// `--kv-type NAME` as llama-server takes it for both `-ctk` and `-ctv`: one of the types its argument table
/// accepts ([`CACHE_TYPES`]), and a quantized one only with flash attention on, without which the engine refuses
/// to create the context (a usage error, exit 2, with the engine's reason).
fn pinned_kv_type(name: &str, fa: bool, fa_rule: Option<&str>) -> Result<GgmlType, PlanError> {
    let Some(t) = CACHE_TYPES
        .iter()
        .copied()
        .find(|t| t.name().eq_ignore_ascii_case(name))
    else {
        return Err(PlanError::Usage(format!(
            "--kv-type {name}: llama-server's -ctk/-ctv accept {}",
            CACHE_TYPES
                .iter()
                .map(|t| t.name().to_lowercase())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    };
    if !fa && t.is_quantized() {
        return Err(PlanError::Usage(format!(
            "--kv-type {name}: this plan runs with flash attention off ({}), and {}",
            fa_rule.unwrap_or("the attention rules"),
            llama_cpp::ParamError::QuantizedVWithoutFlashAttn { type_v: t.name() }
        )));
    }
    Ok(t)
}

impl<'a> LlamaCpp<'a> {
    /// llama.cpp for this request, or why it cannot plan it.
    pub fn new(req: &'a Request<'a>) -> Result<LlamaCpp<'a>, PlanError> {
        let (model, w, set, fleet) = (req.model, req.workload, req.profiles, req.fleet);
        super::serving_only(w)?;
        if model.format != Format::Gguf {
            return Err(PlanError::UnsupportedFormat(format!(
                "a {} checkpoint: llama.cpp serves GGUF files; plan it with vLLM (--runtime vllm), or convert it to GGUF (llama.cpp's convert_hf_to_gguf.py)",
                format!("{:?}", model.format).to_lowercase()
            )));
        }
        arch::admit(model)?;
        let n_layer = model
            .hparams
            .block_count
            .filter(|&n| n > 0)
            .ok_or_else(|| PlanError::Model("no block_count (or 0 blocks)".into()))?;
        let n_layer = u32::try_from(n_layer)
            .map_err(|_| PlanError::Model(format!("block_count {n_layer} is out of range")))?;
        let n_ctx_train = trained_context(model)?;
        // Every plan emits an Ollama Modelfile naming the model (a split model by its first shard).
        launch::check_model_path(req.model_path)?;
        for f in &model.files {
            launch::check_model_path(&f.path.display().to_string())?;
        }
        let ov = req.overrides;
        if let Some(c) = ov.context_length
            && !(1..=MAX_CONTEXT_PER_SEQUENCE).contains(&c)
        {
            return Err(PlanError::Usage(format!(
                "-c {c}: the context per sequence must be between 1 and {MAX_CONTEXT_PER_SEQUENCE} tokens (llama.cpp positions are int32)"
            )));
        }
        let n_par = super::sequences(w, ov, "llama-server refuses -np 0")?;
        launch::engine_limits(ov, w, n_par, n_ctx_train)?;
        let mut warnings = Vec::new();
        if let Some(ngl) = ov.gpu_layers
            && ngl > n_layer + 1
        {
            warnings.push(format!(
                "-ngl {ngl} exceeds the model's {} layers; using {}",
                n_layer + 1,
                n_layer + 1
            ));
        }
        let (gpus, left_out) = drivable_gpus(fleet);
        warnings.extend(left_out);
        let objective = req.objective;
        let threads_all = host_threads(fleet, set, objective);
        let threads_gpu = gpu_host_threads(fleet);
        let cc = gpus.iter().filter_map(|g| g.compute_capability).min();
        // The attention rule by the sequence length the workload asks for (the floor for largest-fit).
        let seq_hint = match (ov.context_length, &w.context) {
            (Some(c), _) => u64::from(c),
            (None, ContextPolicy::Fixed { tokens }) => *tokens,
            (None, ContextPolicy::ModelMax) => u64::from(n_ctx_train),
            (None, ContextPolicy::LargestFit { floor }) => *floor,
        };
        let (precision, precision_rule) = set
            .precision(RuntimeId::LlamaCpp, cc)
            .map(|r| {
                let p = serde_json::to_value(r.precision)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string));
                (p.unwrap_or_else(|| "fp32".into()), Some(r.id.clone()))
            })
            .unwrap_or(("fp32".into(), None));
        let (fa, fa_rule) = set
            .attention(RuntimeId::LlamaCpp, cc, seq_hint)
            .map(|r| (r.kernel != AttentionKernel::SdpaMath, Some(r.id.clone())))
            .unwrap_or((true, None));
        let kv_types: Vec<GgmlType> = if let Some(name) = &ov.kv_type {
            vec![pinned_kv_type(name, fa, fa_rule.as_deref())?]
        } else {
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
        Ok(LlamaCpp {
            req,
            gpus,
            n_layer,
            n_ctx_train,
            n_par,
            threads_all,
            threads_gpu,
            fa,
            fa_rule,
            precision,
            precision_rule,
            kv_types,
            ubatches: if objective == Objective::Throughput {
                UBATCHES_THROUGHPUT
            } else {
                UBATCHES_LATENCY
            },
            gpu_overhead: set.llama_cpp_gpu_overhead().0,
            warnings,
            loads: RefCell::new(HashMap::new()),
        })
    }

    fn workload(&self) -> &WorkloadProfile {
        self.req.workload
    }

    /// `-ngl` with every layer and the output layer on GPUs.
    fn all_layers(&self) -> u32 {
        self.n_layer + 1
    }

    /// Threads under a placement: the host computes layers unless every block is on a GPU.
    fn threads(&self, p: &Point) -> u32 {
        if p.ngl < self.all_layers() || p.cpu_moe > 0 || p.gpus.is_empty() {
            self.threads_all.0
        } else {
            self.threads_gpu.0
        }
    }

    fn machine(&self, gpus: &[usize]) -> Machine {
        let gpus: Vec<&FleetGpu> = gpus.iter().map(|&i| self.gpus[i]).collect();
        machine_on(
            &self.req.fleet.host.inventory.cpu.features,
            &gpus,
            self.gpu_overhead,
        )
    }

    fn params(&self, p: &Point, ctx_seq: u32) -> Params {
        Params {
            n_ctx: ctx_seq.saturating_mul(p.parallel),
            n_batch: BATCH.max(p.ubatch),
            n_ubatch: p.ubatch,
            n_parallel: p.parallel,
            type_k: p.kv,
            type_v: if self.fa { p.kv } else { GgmlType::F16 },
            flash_attn: if self.fa {
                FlashAttn::On
            } else {
                FlashAttn::Off
            },
            n_gpu_layers: p.ngl as i32,
            n_cpu_moe: p.cpu_moe,
            ..Params::default()
        }
    }

    fn settings(&self, c: &Candidate<Point>) -> LlamaCppSettings {
        let p = &c.point;
        let per_gpu: Vec<u64> = p
            .gpus
            .iter()
            .map(|&i| self.gpus[i].capacity_bytes)
            .collect();
        LlamaCppSettings {
            strategy: p.strategy,
            gpu_layers: p.ngl,
            tensor_split: (p.gpus.len() > 1).then(|| per_gpu.iter().map(|b| b >> 20).collect()),
            context_length: c.size.saturating_mul(p.parallel),
            context_per_sequence: c.size,
            batch_size: BATCH.max(p.ubatch),
            ubatch_size: p.ubatch,
            parallel: p.parallel,
            threads: self.threads(p),
            flash_attention: self.fa,
            cache_type_k: p.kv.name().to_lowercase(),
            cache_type_v: if self.fa { p.kv } else { GgmlType::F16 }
                .name()
                .to_lowercase(),
            mmap: Params::default().mmap,
            n_cpu_moe: p.cpu_moe,
            precision: self.precision.clone(),
        }
    }

    fn device_ids(&self, p: &Point) -> Vec<DeviceId> {
        p.gpus.iter().map(|&i| self.gpus[i].id).collect()
    }
}

/// Threads when the host computes layers: the cpu-threads rule for the objective, without its reserve on small
/// hosts.
fn host_threads(
    fleet: &crate::fleet::Fleet,
    set: &ProfileSet,
    objective: Objective,
) -> (u32, String) {
    let usable = fleet.host.usable_cores();
    if let Some(r) = set.cpu_threads(objective) {
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
    (
        usable,
        "no cpu-threads rule: all usable physical cores".into(),
    )
}

/// Threads when every layer is on GPUs.
fn gpu_host_threads(fleet: &crate::fleet::Fleet) -> (u32, String) {
    let usable = fleet.host.usable_cores();
    let t = usable.min(GPU_HOST_THREADS);
    (
        t,
        format!(
            "every layer is on GPUs, so the host computes only token-embedding rows and sampling: {t} of {usable} usable physical cores"
        ),
    )
}

impl Runtime for LlamaCpp<'_> {
    type Point = Point;

    fn id(&self) -> RuntimeId {
        RuntimeId::LlamaCpp
    }

    fn engine(&self) -> (&'static str, &'static str) {
        (llama_cpp::ENGINE, "0c1e5709")
    }

    fn ladders(&self) -> Vec<Vec<Point>> {
        self.placement_ladders()
    }

    fn size(&self) -> Size {
        match super::context_size(
            self.req.overrides,
            self.workload(),
            self.n_ctx_train,
            CTX_STEP,
        ) {
            // The search stays within the -c the engine takes at these sequences (`launch::engine_limits`).
            Size::LargestFit { floor, max, step } => {
                let limit = MAX_CONTEXT_PER_SEQUENCE / self.n_par.max(1);
                Size::LargestFit {
                    floor: floor.min(limit),
                    max: max.min(limit),
                    step,
                }
            }
            fixed => fixed,
        }
    }

    fn evaluate(&self, p: &Point, ctx_seq: u32) -> Result<Eval, PlanError> {
        let fleet = self.req.fleet;
        let machine = self.machine(&p.gpus);
        let params = self.params(p, ctx_seq);
        let failed = || Eval {
            memory: Vec::new(),
            total_bytes: u64::MAX,
            overflow: u64::MAX,
            ladder_overflow: u64::MAX,
            prediction: perf::Prediction {
                prefill_tokens_per_s: 0.0,
                decode_tokens_per_s: 0.0,
                time_to_first_token_ms: f64::INFINITY,
                time_per_output_token_ms: f64::INFINITY,
            },
            knee: 0.0,
            notes: Vec::new(),
        };
        let est = match llama_cpp::estimate(self.req.model, &params, &machine) {
            Ok(e) => e,
            // A defect of the model (an out-of-range hyper-parameter, an overflow at any size) is no candidate
            // that failed to fit: the planner stops and names the file (exit 4).
            Err(e) if e.is_model_defect() => return Err(e.into()),
            // Not sized: no memory figure exists, and the explanation says why instead of quoting one.
            Err(e) => {
                let mut f = failed();
                f.notes.push(e.to_string());
                return Ok(f);
            }
        };
        // The draft model (`-md`), a second model and context on the same devices (`draft.rs`).
        let draft_bytes = match &self.req.overrides.draft {
            None => Vec::new(),
            Some(d) => {
                // A pair llama-server refuses to start with is a defect of the input, not a candidate that failed.
                draft::compatible(self.req.model, &d.spec).map_err(|why| {
                    PlanError::Model(format!(
                        "draft model {}: {why}; llama-server refuses such a pair (common/speculative.cpp common_speculative_are_compatible)",
                        d.path
                    ))
                })?;
                let dp = draft::params(&params, &d.spec, !p.gpus.is_empty());
                match llama_cpp::estimate(&d.spec, &dp, &machine) {
                    Ok(e) => draft::per_device(&e),
                    Err(e) if e.is_model_defect() => {
                        return Err(PlanError::Model(format!("draft model {}: {e}", d.path)));
                    }
                    Err(e) => {
                        let mut f = failed();
                        f.notes.push(format!("draft model {}: {e}", d.path));
                        return Ok(f);
                    }
                }
            }
        };
        // The multimodal projector (`--mmproj`): its weights on the device the engine gives it (`mmproj.rs`).
        let mmproj_at = match &self.req.overrides.mmproj {
            None => None,
            Some(m) => {
                let spec = m.spec.as_ref().ok_or_else(|| {
                    PlanError::Usage(format!("mmproj {}: the projector was not loaded", m.path))
                })?;
                Some((mmproj::device_index(p.gpus.len()), mmproj::bytes(spec)))
            }
        };
        let threads = self.threads(p);
        let host_room = fleet
            .host
            .capacity_bytes
            .saturating_sub(fleet.host.reserve_bytes);
        let mut overflow = 0u64;
        let mut ladder_overflow = 0u64;
        let mut memory = Vec::with_capacity(est.devices.len());
        let mut total_bytes = est.total_bytes;
        for (k, m) in est.devices.iter().enumerate() {
            let draft = draft_bytes.get(k).copied().unwrap_or(0);
            let mmproj = mmproj_at.filter(|&(at, _)| at == k).map_or(0, |(_, b)| b);
            let device_total = m.total_bytes.saturating_add(draft).saturating_add(mmproj);
            total_bytes = total_bytes.saturating_add(draft).saturating_add(mmproj);
            let (id, capacity, reserve) = if k == 0 {
                (
                    DeviceId::HOST,
                    fleet.host.capacity_bytes,
                    fleet.host.reserve_bytes,
                )
            } else {
                let i = p.gpus[k - 1];
                (
                    self.gpus[i].id,
                    self.gpus[i].capacity_bytes,
                    self.gpus[i].reserve_bytes,
                )
            };
            let over = device_total.saturating_sub(capacity.saturating_sub(reserve));
            overflow = overflow.max(over);
            if k > 0 {
                ladder_overflow = ladder_overflow.max(over);
            }
            memory.push(MemoryDevice {
                device: id.to_string(),
                components: MemoryComponents {
                    weights_bytes: m.weights_bytes,
                    weights_repack_bytes: m.weights_repack_bytes,
                    kv_cache_bytes: m.kv_cache_bytes,
                    compute_bytes: m.compute_bytes,
                    output_bytes: m.output_bytes,
                    overhead_bytes: m.overhead_bytes,
                    draft_bytes: draft,
                    mmproj_bytes: mmproj,
                    ..MemoryComponents::default()
                },
                total_bytes: device_total,
                capacity_bytes: capacity,
                reserve_bytes: reserve,
            });
        }
        // Unified memory (Apple): what the GPU holds comes out of the same RAM as the host's share.
        if p.gpus.iter().any(|&i| self.gpus[i].unified_memory) {
            let over = total_bytes.saturating_sub(host_room);
            overflow = overflow.max(over);
            ladder_overflow = ladder_overflow.max(over);
        }
        let mut ld = self
            .loads
            .borrow_mut()
            .entry((p.ngl, p.cpu_moe, p.gpus.clone()))
            .or_insert_with(|| topology::loads(self.req.model, &params, &machine, &est))
            .clone();
        let cells = f64::from(est.resolved.n_ctx.max(1));
        for (l, m) in ld.iter_mut().zip(&est.devices) {
            l.kv_bytes_per_cell = m.kv_cache_bytes as f64 / cells;
        }
        let mut host_perf = fleet.host.perf(threads);
        if let Some(&first) = p.gpus.first() {
            let g = self.gpus[first];
            host_perf.offload = Some(perf::Offload {
                flops: g.flops * g.prefill.as_ref().map_or(1.0, |e| e.value),
                kernels: g.llama_cpp_perf().gpu.filter(|k| k.prefill),
                // Without a link figure, assume PCIe 3.0 x16, the slowest slot a discrete GPU ships in.
                link_bytes_per_s: g.link_bytes_per_s.unwrap_or(PCIE3_X16_BYTES_PER_S),
            });
        }
        // Layer order: host layers come first (llama.cpp offloads from the last layer).
        let pairs: Vec<(DevicePerf, DeviceLoad)> = std::iter::once(host_perf)
            .chain(p.gpus.iter().map(|&i| self.gpus[i].llama_cpp_perf()))
            .zip(ld)
            .collect();
        let w = self.workload();
        let prediction = perf::predict(
            &pairs,
            Shape {
                prompt_tokens: w.prompt_tokens,
                generation_tokens: w.generation_tokens,
                concurrency: u64::from(p.parallel),
                ubatch: u64::from(p.ubatch),
            },
        );
        // Where a decode step turns compute-bound: past it more sequences add memory, not tokens per second.
        let knee = pairs
            .iter()
            .map(|(p, l)| perf::decode_knee(p, l))
            .fold(0.0, f64::max);
        Ok(Eval {
            memory,
            total_bytes,
            overflow,
            ladder_overflow,
            prediction,
            knee,
            notes: est.notes,
        })
    }

    fn follow_up(&self, ladder: &[Point], p: &Point, e: &Eval) -> Option<Vec<Point>> {
        // Throughput workloads without a pinned concurrency also try the roofline knee: fewer sequences that
        // reach the same tokens per second in less memory.
        if self.req.objective != Objective::Throughput
            || self.req.overrides.parallel.is_some()
            || !e.knee.is_finite()
        {
            return None;
        }
        let knee = (e.knee.ceil() as u32).max(1);
        (knee < p.parallel).then(|| {
            ladder
                .iter()
                .map(|r| Point {
                    parallel: knee,
                    ..r.clone()
                })
                .collect()
        })
    }

    fn variant(&self, p: &Point) -> String {
        p.kv.name().to_lowercase()
    }

    fn measured_here(&self, p: &Point, t: &crate::evidence::ThroughputPoint) -> bool {
        let all = self.all_layers();
        // -ngl as measured: 0 is the CPU alone; at or past every layer is full offload.
        let layers_match = match t.gpu_layers {
            None => true,
            Some(0) => p.gpus.is_empty() || p.ngl == 0,
            Some(n) if n >= all => !p.gpus.is_empty() && p.ngl >= all,
            Some(n) => p.ngl == n,
        };
        // llama.cpp splits layers over GPUs, it has no tensor parallelism: a row measured with it is another
        // engine's configuration.
        layers_match
            && t.tensor_parallel.is_none_or(|n| n <= 1)
            && t.threads.is_none_or(|n| n == self.threads(p))
            && t.ubatch.is_none_or(|u| u == p.ubatch)
    }

    fn sequences(&self, p: &Point) -> u32 {
        p.parallel
    }

    fn with_sequences(&self, p: &Point, n: u32) -> Option<Point> {
        (self.req.objective == Objective::Throughput && self.req.overrides.parallel.is_none()).then(
            || Point {
                parallel: n,
                ..p.clone()
            },
        )
    }

    fn preferred_variant(&self) -> String {
        self.kv_types[0].name().to_lowercase()
    }

    fn min_gain(&self, variant: &str) -> Option<(f64, String)> {
        let r = self.req.profiles.kv_cache(RuntimeId::LlamaCpp, variant)?;
        Some((r.min_gain?, r.id.clone()))
    }

    fn group(&self, p: &Point) -> (u8, usize) {
        (p.strategy as u8, p.gpus.len())
    }

    fn summary(&self, c: &Candidate<Point>) -> (Settings, Vec<String>) {
        (
            Settings::LlamaCpp(self.settings(c)),
            std::iter::once(DeviceId::HOST)
                .chain(self.device_ids(&c.point))
                .map(|d| d.to_string())
                .collect(),
        )
    }

    fn label(&self, c: &Candidate<Point>) -> String {
        let strategy = serde_json::to_value(c.point.strategy)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        format!(
            "{strategy}, -ngl {}, {} tokens per sequence x {} sequence{}",
            c.point.ngl,
            c.size,
            c.point.parallel,
            if c.point.parallel == 1 { "" } else { "s" }
        )
    }

    fn describe(&self, c: &Candidate<Point>) -> Described {
        self.describe_chosen(c)
    }

    fn suggestions(&self, near: &Candidate<Point>, all: &[Candidate<Point>]) -> Vec<String> {
        self.suggest(near, all)
    }
}
