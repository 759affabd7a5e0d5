//! `estimate`: llama.cpp's memory per device for the flags given, and the context or parallel sweeps; for a
//! safetensors checkpoint, vLLM's ([`vllm`]).

use super::*;

mod vllm;
pub use vllm::estimate_vllm;

/// What `estimate` computes: llama.cpp's memory for given flags.
#[derive(Debug, Clone)]
pub struct EstimateRequest {
    pub model: PathBuf,
    pub params: Params,
    /// `N` GPUs (or a CPU) of a hardware profile in place of the machine.
    pub hardware: Option<(u32, String)>,
}

/// `estimate`: the llama.cpp memory model for the flags, on the probed (or inventory, or profiled) machine.
pub fn estimate(sources: &Sources, req: &EstimateRequest) -> Result<Estimate, Failure> {
    let spec = crate::model::load(&req.model)?;
    crate::model::safetensors::require_config(&req.model, &spec)?;
    estimate_loaded(sources, req, &spec)
}

/// [`estimate`] of a model already loaded from `req.model` (a pipeline that read it for another step).
pub(super) fn estimate_loaded(
    sources: &Sources,
    req: &EstimateRequest,
    spec: &crate::model::ModelSpec,
) -> Result<Estimate, Failure> {
    Ok(estimate_with_machine(sources, req, spec)?.0)
}

/// The estimate and the machine the memory model saw (the companions are charged on the same machine).
fn estimate_with_machine(
    sources: &Sources,
    req: &EstimateRequest,
    spec: &crate::model::ModelSpec,
) -> Result<(Estimate, EstimateMachine), Failure> {
    let set = sources.profiles()?;
    let mut notes = Vec::new();
    let (overhead, rule) = set.llama_cpp_gpu_overhead();
    let rule = rule.map(str::to_string);
    let em = estimate_machine(sources, req, set, &mut notes, overhead)?;
    if let Some(rule) = rule.filter(|_| em.machine.gpus.iter().any(|g| g.overhead_bytes > 0)) {
        notes.push(format!("per-GPU overhead from rule {rule}"));
    }
    let mut est = em.label(
        llama_cpp::estimate(spec, &req.params, &em.machine)
            .map_err(|e| estimate_failure(e, &req.model))?,
    );
    est.notes.extend(notes);
    Ok((est, em))
}

/// The exit code and message of a refused estimate: a defect of the model file is invalid input (4) naming the
/// file; flags llama.cpp would refuse are a usage error (2).
fn estimate_failure(e: llama_cpp::ParamError, model: &Path) -> Failure {
    if e.is_model_defect() {
        Failure::new(
            exit::INVALID_INPUT,
            anyhow::anyhow!("{}: {e}", model.display()),
        )
    } else {
        Failure::new(exit::USAGE, e)
    }
}

/// What `estimate --sweep` varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SweepAxis {
    /// `-c`: the context, from 512 by doublings up to the model's trained context.
    Context,
    /// `-np`: parallel sequences, from 1 by doublings up to llama.cpp's `LLAMA_MAX_SEQ`.
    Parallel,
}

/// One value of the sweep: each device's total.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SweepRow {
    pub value: u32,
    /// Total bytes per device, in the estimate's device order.
    pub totals: Vec<u64>,
    /// Notes the estimate made at this value (clamped context, refused flags).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// A device of the sweep: what it may hold and the largest swept value that fits it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SweepDevice {
    pub device: String,
    /// Free memory less the llama.cpp memory-reserve rules (GPUs), or available memory less the OS reserve
    /// (host); absent when not known (a profiled GPU's host).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub room_bytes: Option<u64>,
    /// The largest swept value whose total fits the room; absent when none does or the room is unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub largest_fit: Option<u32>,
}

/// `estimate --sweep`: the memory table users keep asking for.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Sweep {
    pub axis: SweepAxis,
    pub devices: Vec<SweepDevice>,
    pub rows: Vec<SweepRow>,
}

/// Smallest context a sweep starts at: llama.cpp's own floor for a usable context is 256 tokens per sequence
/// (common/arg.cpp clamps `-c` below it), and 512 is the first power of two a chat turn fits.
pub const SWEEP_MIN_CONTEXT: u32 = 512;

/// `estimate --sweep context|parallel`: the estimate at each value of the axis (the other flags as given), and
/// the largest value that fits each device.
pub fn estimate_sweep(
    sources: &Sources,
    req: &EstimateRequest,
    axis: SweepAxis,
) -> Result<Sweep, Failure> {
    let spec = crate::model::load(&req.model)?;
    crate::model::safetensors::require_config(&req.model, &spec)?;
    let set = sources.profiles()?;
    let mut notes = Vec::new();
    let (overhead, _) = set.llama_cpp_gpu_overhead();
    let em = estimate_machine(sources, req, set, &mut notes, overhead)?;
    let m = &em.machine;
    let values: Vec<u32> = match axis {
        SweepAxis::Context => {
            let trained = spec
                .hparams
                .context_length
                .and_then(|c| u32::try_from(c).ok())
                .filter(|&c| c > 0)
                .unwrap_or(SWEEP_MIN_CONTEXT)
                .min(llama_cpp::MAX_CTX_FLAG);
            let mut v: Vec<u32> =
                std::iter::successors(Some(SWEEP_MIN_CONTEXT), |&c| c.checked_mul(2))
                    .take_while(|&c| c < trained)
                    .collect();
            v.push(trained);
            v
        }
        SweepAxis::Parallel => std::iter::successors(Some(1u32), |&n| n.checked_mul(2))
            .take_while(|&n| n <= llama_cpp::MAX_SEQ)
            .collect(),
    };
    let mut rows = Vec::with_capacity(values.len());
    let mut names: Vec<String> = Vec::new();
    for &v in &values {
        let mut params = req.params.clone();
        match axis {
            SweepAxis::Context => params.n_ctx = v,
            SweepAxis::Parallel => params.n_parallel = v,
        }
        let est = em.label(
            llama_cpp::estimate(&spec, &params, m).map_err(|e| estimate_failure(e, &req.model))?,
        );
        if names.is_empty() {
            names = est.devices.iter().map(|d| d.device.clone()).collect();
        }
        rows.push(SweepRow {
            value: v,
            totals: est.devices.iter().map(|d| d.total_bytes).collect(),
            notes: est.notes,
        });
    }
    // Room per device: each GPU's capacity less its reserves, the host's available memory less its reserve (when
    // the host is this machine or its inventory), as `resolve` fits its plans.
    let mut devices = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        // The memory model lists the host first, then the GPUs in the machine's order.
        let room = match i.checked_sub(1) {
            None => em.host_room,
            Some(g) => em.gpu_rooms.get(g).copied(),
        };
        let largest_fit = room.and_then(|r| {
            rows.iter()
                .filter(|row| row.totals.get(i).is_some_and(|&t| t <= r))
                .map(|row| row.value)
                .max()
        });
        devices.push(SweepDevice {
            device: name.clone(),
            room_bytes: room,
            largest_fit,
        });
    }
    Ok(Sweep {
        axis,
        devices,
        rows,
    })
}

/// The machine an estimate runs on: what the memory model sees, and the room each of its devices has for the
/// sweep's largest fit.
struct EstimateMachine {
    machine: Machine,
    /// Free memory less the memory-reserve rules, per GPU in the machine's order.
    gpu_rooms: Vec<u64>,
    /// The host's available memory less its reserve, when the host is this machine or its inventory.
    host_room: Option<u64>,
    /// Each GPU's name in the estimate, in the machine's order: its device id in the fleet (`cuda:1`,
    /// `rocm:0`, `metal:0`, as `resolve` names it); `cuda:N` by position for profiled GPUs.
    gpu_labels: Vec<String>,
}

impl EstimateMachine {
    /// The estimate with its GPUs named as the fleet names them (the memory model numbers them `cuda:N` by
    /// position).
    fn label(&self, mut est: Estimate) -> Estimate {
        for (d, label) in est.devices.iter_mut().skip(1).zip(&self.gpu_labels) {
            d.device.clone_from(label);
        }
        est
    }
}

/// The devices of the estimate. With `--hardware`, `n` GPUs (or a CPU) of the profile and an unknown host.
/// Otherwise the fleet `resolve` plans on (`fleet::build` for llama.cpp), reduced to the GPUs llama-server
/// drives (`runtime::llama_cpp::drivable_gpus`): CUDA, ROCm or Metal, whichever backend holds the most, each with
/// the fleet's capacity (a Metal GPU's working set) and reserves, so `estimate` and `resolve` agree on every
/// device (`tests/it/estimate.rs`, `estimate_and_resolve_share_one_view_of_devices`).
fn estimate_machine(
    sources: &Sources,
    req: &EstimateRequest,
    set: &ProfileSet,
    notes: &mut Vec<String>,
    overhead: u64,
) -> Result<EstimateMachine, Failure> {
    let invalid = |e: String| Failure::new(exit::INVALID_INPUT, anyhow::anyhow!("{e}"));
    if let Some((n, id)) = &req.hardware {
        let p = &set
            .find_hardware(id)
            .map_err(|e| lookup_failure(e, "hardware"))?
            .value;
        let id = p.id.as_str();
        return Ok(match p.kind {
            DeviceKind::Gpu => {
                notes.push(format!(
                    "planning for {n}x {id}: the host CPU is unknown, so no CPU weight repacking is predicted"
                ));
                // The same memory `resolve --hardware` plans with (`gpu_from_profile`).
                let free = p.memory.plannable_bytes().unwrap_or(0);
                let (reserve, _) = set
                    .reserve(ReserveTarget::Gpu, RuntimeId::LlamaCpp, free)
                    .map_err(|e| invalid(e.to_string()))?;
                EstimateMachine {
                    machine: Machine {
                        cpu_features: Vec::new(),
                        gpus: (0..*n)
                            .map(|_| GpuTarget {
                                name: p.name.clone(),
                                free_bytes: free,
                                overhead_bytes: overhead,
                            })
                            .collect(),
                    },
                    gpu_rooms: vec![free.saturating_sub(reserve); *n as usize],
                    host_room: None,
                    gpu_labels: (0..*n).map(|i| format!("cuda:{i}")).collect(),
                }
            }
            DeviceKind::Cpu | DeviceKind::Soc => {
                if p.kind == DeviceKind::Soc {
                    notes.push(format!("{id} is a unified-memory SoC; its GPU backend is not modelled, so this is the CPU estimate"));
                }
                EstimateMachine {
                    machine: Machine {
                        cpu_features: p
                            .cpu
                            .as_ref()
                            .map(|c| c.features.clone())
                            .unwrap_or_default(),
                        gpus: Vec::new(),
                    },
                    gpu_rooms: Vec::new(),
                    host_room: None,
                    gpu_labels: Vec::new(),
                }
            }
        });
    }
    let (inv, _) = sources.inventory()?;
    let fleet = crate::fleet::build(&inv, set, RuntimeId::LlamaCpp).map_err(|e| invalid(e.0))?;
    let (gpus, left_out) = crate::runtime::llama_cpp::drivable_gpus(&fleet);
    notes.extend(left_out);
    notes.extend(fleet.unused.iter().map(|u| {
        format!(
            "{} ({}): not used: no profile or derivable figures describe it",
            u.id, u.gpu.name
        )
    }));
    Ok(EstimateMachine {
        machine: crate::runtime::llama_cpp::machine_on(&inv.cpu.features, &gpus, overhead),
        gpu_rooms: gpus
            .iter()
            .map(|g| g.capacity_bytes.saturating_sub(g.reserve_bytes))
            .collect(),
        host_room: Some(
            fleet
                .host
                .capacity_bytes
                .saturating_sub(fleet.host.reserve_bytes),
        ),
        gpu_labels: gpus.iter().map(|g| g.id.to_string()).collect(),
    })
}

/// `--model-draft FILE` as `estimate` takes it, with llama-server's draft flags.
#[derive(Debug, Clone)]
pub struct DraftRequest {
    pub path: PathBuf,
    /// `-ngld`; `None`: every layer on the GPUs when the machine has any (`draft::params`).
    pub n_gpu_layers: Option<i32>,
    /// `-ctkd`/`-ctvd`; `None`: the engine's default (`draft::DRAFT_CACHE_TYPE`).
    pub type_k: Option<crate::model::GgmlType>,
    pub type_v: Option<crate::model::GgmlType>,
}

/// `--mmproj FILE` as `estimate` takes it.
#[derive(Debug, Clone)]
pub struct MmprojRequest {
    pub path: PathBuf,
    /// False with `--no-mmproj-offload`: the projector stays on the host.
    pub offload: bool,
}

/// The files `estimate` charges beside the model.
#[derive(Debug, Clone, Default)]
pub struct Companions {
    pub draft: Option<DraftRequest>,
    pub mmproj: Option<MmprojRequest>,
}

/// Bytes a companion file puts on one device.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DeviceBytes {
    pub device: String,
    pub bytes: u64,
}

/// The draft model's charge: weights, KV cache, output and compute of its own context, per device.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DraftCharge {
    pub path: String,
    /// The draft's layers on GPUs as the memory model took them (-1: all).
    pub n_gpu_layers: i32,
    pub devices: Vec<DeviceBytes>,
}

/// The projector's charge: its weights on the device the engine gives it, and its image-token budget.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct MmprojCharge {
    pub path: String,
    pub device: String,
    pub weights_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub projector_type: Option<String>,
    /// Tokens one image becomes (the most, for a dynamic-resolution projector).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_tokens: Option<crate::runtime::llama_cpp::mmproj::ImageTokens>,
    /// Images of `image_tokens` that fill one sequence's context (`n_ctx_seq`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub images_per_sequence: Option<u64>,
}

/// `estimate` with its companions: the model's estimate (each device's and the overall total include the
/// companions' bytes) and what each companion charges where.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EstimateReport {
    #[serde(flatten)]
    pub estimate: Estimate,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draft: Option<DraftCharge>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mmproj: Option<MmprojCharge>,
}

/// `estimate --model-draft/--mmproj`: [`estimate`] plus the draft and the projector, charged by the rules
/// `resolve` plans with (`runtime::llama_cpp::{draft, mmproj}`).
pub fn estimate_report(
    sources: &Sources,
    req: &EstimateRequest,
    companions: &Companions,
) -> Result<EstimateReport, Failure> {
    use crate::runtime::llama_cpp::{draft, mmproj};
    let spec = crate::model::load(&req.model)?;
    crate::model::safetensors::require_config(&req.model, &spec)?;
    let (mut est, em) = estimate_with_machine(sources, req, &spec)?;
    let invalid = |path: &Path, why: String| {
        Failure::new(
            exit::INVALID_INPUT,
            anyhow::anyhow!("{}: {why}", path.display()),
        )
    };
    let draft_charge = match &companions.draft {
        None => None,
        Some(d) => {
            let dspec = crate::model::load(&d.path)?;
            draft::compatible(&spec, &dspec).map_err(|why| {
                invalid(
                    &d.path,
                    format!("{why}; llama-server refuses such a pair (common/speculative.cpp common_speculative_are_compatible)"),
                )
            })?;
            // The draft's context is the target's as resolved (`common_speculative_init_result`).
            let mut dp = draft::params(
                &Params {
                    n_ctx: est.resolved.n_ctx,
                    ..req.params.clone()
                },
                &dspec,
                !em.machine.gpus.is_empty(),
            );
            if let Some(n) = d.n_gpu_layers {
                dp.n_gpu_layers = n;
            }
            dp.type_k = d.type_k.unwrap_or(dp.type_k);
            dp.type_v = d.type_v.unwrap_or(dp.type_v);
            let de = llama_cpp::estimate(&dspec, &dp, &em.machine)
                .map_err(|e| estimate_failure(e, &d.path))?;
            let bytes = draft::per_device(&de);
            Some(DraftCharge {
                path: d.path.display().to_string(),
                n_gpu_layers: dp.n_gpu_layers,
                devices: est
                    .devices
                    .iter()
                    .zip(bytes)
                    .map(|(dev, bytes)| DeviceBytes {
                        device: dev.device.clone(),
                        bytes,
                    })
                    .collect(),
            })
        }
    };
    let mmproj_charge = match &companions.mmproj {
        None => None,
        Some(m) => {
            let pspec = crate::model::load(&m.path)?;
            if pspec.architecture != mmproj::ARCHITECTURE {
                return Err(invalid(
                    &m.path,
                    format!(
                        "general.architecture is {:?}, not a multimodal projector ({:?}); pass the projector GGUF (often named mmproj-*.gguf) that goes with the model",
                        pspec.architecture,
                        mmproj::ARCHITECTURE
                    ),
                ));
            }
            let gpus = if m.offload { em.machine.gpus.len() } else { 0 };
            let at = mmproj::device_index(gpus);
            let tokens = mmproj::image_tokens(&pspec);
            est.notes
                .push(mmproj::compute_gap_warning(&m.path.display().to_string()));
            Some(MmprojCharge {
                path: m.path.display().to_string(),
                device: est
                    .devices
                    .get(at)
                    .map(|d| d.device.clone())
                    .unwrap_or_default(),
                weights_bytes: mmproj::bytes(&pspec),
                projector_type: mmproj::projector_type(&pspec).map(str::to_string),
                image_tokens: tokens,
                images_per_sequence: tokens
                    .map(|t| mmproj::images_per_context(t, u64::from(est.resolved.n_ctx_seq))),
            })
        }
    };
    for (k, d) in est.devices.iter_mut().enumerate() {
        let extra = draft_charge
            .as_ref()
            .and_then(|c| c.devices.get(k))
            .map_or(0, |b| b.bytes)
            .saturating_add(
                mmproj_charge
                    .as_ref()
                    .filter(|c| c.device == d.device)
                    .map_or(0, |c| c.weights_bytes),
            );
        d.total_bytes = d.total_bytes.saturating_add(extra);
        est.total_bytes = est.total_bytes.saturating_add(extra);
    }
    Ok(EstimateReport {
        estimate: est,
        draft: draft_charge,
        mmproj: mmproj_charge,
    })
}
