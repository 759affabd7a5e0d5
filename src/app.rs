//! The pipelines: what `resolve` and `estimate` do from sources (model path, inventory or live probe, profile
//! overlays, measurement store) to a document, with every failure classified by exit code. The CLI, the benches
//! and the tests call these, so there is one path from flags to plan.
//!
//! Exit codes (contract, `docs/architecture.md`): 0 success · 1 runtime error · 2 usage error · 3 no configuration
//! fits · 4 invalid input file (model, profile, inventory, database).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::emit::Deployment;
use crate::evidence::Evidence;
use crate::hardware::Inventory;
use crate::memory::llama_cpp::{self, Estimate, GpuTarget, Machine, Params};
use crate::plan::{self, Inputs, Overrides, PlanError};
use crate::profile::{DeviceKind, Diagnostic, ProfileSet, ReserveTarget, RuntimeId};

/// Exit codes of the `optimizer` binary.
pub mod exit {
    pub const SUCCESS: u8 = 0;
    pub const RUNTIME: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const NO_FIT: u8 = 3;
    pub const INVALID_INPUT: u8 = 4;
}

/// An error with its exit code and, when a fix is known, a hint.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub error: anyhow::Error,
    pub hint: Option<String>,
}

impl Failure {
    pub fn new(code: u8, error: impl Into<anyhow::Error>) -> Self {
        Failure {
            code,
            error: error.into(),
            hint: None,
        }
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

/// The exit code of an I/O error on an input file: a missing file is a usage error (2); a FIFO, a device or a
/// directory where a file belongs is the input's fault (4); anything else is the environment's (1).
pub fn io_exit_code(e: &std::io::Error) -> u8 {
    if e.kind() == std::io::ErrorKind::NotFound {
        exit::USAGE
    } else if crate::input::is_invalid_input(e) {
        exit::INVALID_INPUT
    } else {
        exit::RUNTIME
    }
}

/// An input text file read with its bound, its I/O failure classified by [`io_exit_code`] and naming the file.
fn read_input(path: &Path, limit: u64, kind: &'static str) -> Result<String, Failure> {
    crate::input::read_text_bounded(path, limit, kind)
        .map_err(|e| Failure::new(io_exit_code(&e), anyhow::anyhow!("{}: {e}", path.display())))
}

impl From<crate::model::ModelError> for Failure {
    fn from(e: crate::model::ModelError) -> Self {
        use crate::model::ModelError;
        match &e {
            ModelError::Io { source, .. } => {
                let code = io_exit_code(source);
                let f = Failure::new(code, e);
                if code == exit::USAGE {
                    f.hint("check the path to the model")
                } else {
                    f
                }
            }
            ModelError::Invalid { .. } | ModelError::InvalidModel { .. } => {
                Failure::new(exit::INVALID_INPUT, e)
            }
        }
    }
}

/// Where a setting's value came from, for messages and provenance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettingOrigin {
    Flag,
    Env,
}

/// Settings every command shares, resolved once with one precedence (flag > environment > default).
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// Inventory file replacing the live probe.
    pub inventory: Option<(PathBuf, SettingOrigin)>,
    /// Profile overlay directories, in order: the user directory, then each `--profiles`.
    pub profile_dirs: Vec<PathBuf>,
    /// The measurement database.
    pub db: Option<PathBuf>,
}

impl Sources {
    /// The sources from flags, then the environment (`OPTIMIZER_INVENTORY`, `OPTIMIZER_DB`, XDG directories).
    pub fn from_env(
        inventory: Option<PathBuf>,
        profiles: Vec<PathBuf>,
        db: Option<PathBuf>,
    ) -> Self {
        let inventory = inventory.map(|p| (p, SettingOrigin::Flag)).or_else(|| {
            std::env::var_os("OPTIMIZER_INVENTORY")
                .filter(|v| !v.is_empty())
                .map(|v| (PathBuf::from(v), SettingOrigin::Env))
        });
        let xdg = std::env::var("XDG_CONFIG_HOME").ok();
        let home = std::env::var("HOME").ok();
        let mut profile_dirs: Vec<PathBuf> =
            crate::profile::user_dir(xdg.as_deref(), home.as_deref())
                .into_iter()
                .collect();
        profile_dirs.extend(profiles);
        let db = db
            .or_else(|| {
                std::env::var_os("OPTIMIZER_DB")
                    .filter(|v| !v.is_empty())
                    .map(PathBuf::from)
            })
            .or_else(|| {
                crate::store::default_path(
                    std::env::var("XDG_DATA_HOME").ok().as_deref(),
                    home.as_deref(),
                )
            });
        Sources {
            inventory,
            profile_dirs,
            db,
        }
    }

    /// The inventory: the fixture file when one is set, else the live probe.
    pub fn inventory(&self) -> Result<(crate::hardware::Inventory, &'static str), Failure> {
        use crate::hardware::{FixtureProbe, InventoryError, PlanProbe, Probe};
        // A GPU a built-in profile describes needs no SM count from the CUDA driver (~200 ms of cuInit); the
        // set is loaded only when NVML reports a GPU.
        let builtin = std::cell::OnceCell::new();
        let probe: Box<dyn Probe + '_> = match &self.inventory {
            Some((p, _)) => Box::new(FixtureProbe(p.clone())),
            None => Box::new(PlanProbe(|g: &crate::hardware::Gpu| {
                !builtin
                    .get_or_init(|| crate::profile::builtin_set().unwrap_or_default())
                    .describes(g)
            })),
        };
        let source = probe.source();
        probe
            .inventory()
            .map(|inv| (inv, source))
            .map_err(|e| match &e {
                InventoryError::Io { source, .. }
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    let from = match self.inventory {
                        Some((_, SettingOrigin::Env)) => " (from OPTIMIZER_INVENTORY)",
                        _ => "",
                    };
                    Failure::new(exit::USAGE, e).hint(format!("check the inventory path{from}"))
                }
                InventoryError::Io { .. } => Failure::new(exit::RUNTIME, e),
                InventoryError::Invalid { .. } => Failure::new(exit::INVALID_INPUT, e)
                    .hint("`optimizer schema inventory` prints the inventory schema"),
            })
    }

    /// The measurement store, created on first use; for commands that need it. An invalid file exits 4, an
    /// unusable location (read-only, full, permission denied) exits 1.
    pub fn store(&self) -> Result<crate::store::Store, Failure> {
        let path = self.db.clone().ok_or_else(|| {
            Failure::new(
                exit::USAGE,
                anyhow::anyhow!("no database path: set --db, OPTIMIZER_DB, XDG_DATA_HOME or HOME"),
            )
        })?;
        crate::store::Store::open(&path).map_err(store_failure)
    }

    /// What the store holds for these device profiles and this model, for a command that can plan without it
    /// (`resolve`): when the store cannot be used for reasons of the environment (no path, no writable
    /// directory, a full disk, an I/O error), the evidence says why (printed on stderr too) instead of failing;
    /// an invalid database file still exits 4 (see the `store` module doc for why).
    pub fn evidence(
        &self,
        device_profiles: &[String],
        fingerprint: &str,
    ) -> Result<Evidence, Failure> {
        let looked_up = match &self.db {
            None => {
                Err("no database path (set --db, OPTIMIZER_DB, XDG_DATA_HOME or HOME)".to_string())
            }
            Some(path) => match crate::store::Store::open_for_lookup(path)
                .and_then(|s| s.evidence(device_profiles, fingerprint))
            {
                Ok(found) => Ok(found),
                Err(e) if e.is_invalid_file() => return Err(store_failure(e)),
                Err(e) => Err(e.to_string()),
            },
        };
        Ok(match looked_up {
            Ok(ev) => ev,
            Err(why) => {
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "warning: planned without the measurement store: {why}; measured figures, if any, were not used"
                );
                Evidence::unavailable(why)
            }
        })
    }

    /// The profile set in force (built-in + overlays).
    pub fn profiles(&self) -> Result<crate::profile::ProfileSet, Failure> {
        crate::profile::load(&self.profile_dirs).map_err(invalid_profiles)
    }
}

/// The exit code and hint of a store error: the file's fault is 4, the environment's 1.
pub fn store_failure(e: crate::store::StoreError) -> Failure {
    let path = e.path().display().to_string();
    if e.is_invalid_file() {
        Failure::new(exit::INVALID_INPUT, e).hint(format!(
            "it was not modified; move it aside (mv {path} {path}.bak) or point --db at another file"
        ))
    } else {
        Failure::new(exit::RUNTIME, e).hint(format!(
            "the measurement database needs a writable directory with free space: check {path}, or point --db or OPTIMIZER_DB at a writable location"
        ))
    }
}

/// The failure for invalid profile files: every diagnostic on stderr (file and defect), exit 4.
pub fn invalid_profiles(diags: Vec<Diagnostic>) -> Failure {
    let mut err = std::io::stderr().lock();
    for d in &diags {
        let _ = writeln!(err, "{d}");
    }
    let files: std::collections::BTreeSet<&str> = diags.iter().map(|d| d.path.as_str()).collect();
    Failure::new(
        exit::INVALID_INPUT,
        anyhow::anyhow!(
            "{} problem{} in {} profile file{}",
            diags.len(),
            if diags.len() == 1 { "" } else { "s" },
            files.len(),
            if files.len() == 1 { "" } else { "s" }
        ),
    )
}

/// The hardware a plan is for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Hardware {
    /// `N` GPUs of a hardware profile (`--hardware 2x:rtx-4090`) in place of the machine's.
    pub gpus: Option<(u32, String)>,
    /// A cluster description: the plan is for its node type, replicated on every node.
    pub cluster: Option<PathBuf>,
}

/// What `resolve` plans.
#[derive(Debug, Clone)]
pub struct ResolveRequest {
    pub model: PathBuf,
    pub workload: String,
    pub hardware: Hardware,
    pub overrides: Overrides,
    /// Round the probed free memory down to [`STABLE_FREE_GRANULARITY`] so that re-running on an idle machine
    /// writes the same bytes (`--stable`, the default with `-o FILE`).
    pub stable: bool,
}

/// What `--stable` rounds probed free memory down to: between two runs on an idle machine the page cache and the
/// GPU driver move free memory by tens of MiB, under this; rounding down keeps a plan conservative and costs at
/// most 256 MiB of room per device.
pub const STABLE_FREE_GRANULARITY: u64 = 256 << 20;

/// The probed free memory of the host and every GPU, rounded down to [`STABLE_FREE_GRANULARITY`].
pub fn stabilize(inv: &mut crate::hardware::Inventory) {
    let round = |b: u64| b - b % STABLE_FREE_GRANULARITY;
    inv.memory.available_bytes = round(inv.memory.available_bytes);
    for g in &mut inv.gpus {
        g.memory_free_bytes = round(g.memory_free_bytes);
    }
}

/// `resolve`: the model, the profiles, the hardware (probe, inventory or cluster, optionally with profiled
/// GPUs), the store's evidence for those devices and that model, then the plan. A plan that does not fit is
/// `Ok` with `status: no-fit`.
pub fn resolve(sources: &Sources, req: &ResolveRequest) -> Result<Deployment, Failure> {
    let spec = crate::model::load(&req.model)?;
    let set = sources.profiles()?;
    let workload = &set
        .find_workload(&req.workload)
        .map_err(|e| lookup_failure(e, "workloads"))?
        .value;
    let (mut inv, mut source, nodes) = match &req.hardware.cluster {
        Some(path) => {
            let (inv, nodes) = cluster_node(path)?;
            (inv, "cluster", nodes)
        }
        None => {
            let (mut inv, source) = sources.inventory()?;
            // Only a live probe moves between runs; an inventory file is already fixed.
            if req.stable && source == "probe" {
                stabilize(&mut inv);
            }
            (inv, source, 1)
        }
    };
    if let Some((n, id)) = &req.hardware.gpus {
        inv = with_profiled_gpus(inv, *n, id, &set)?;
        source = "profile";
    }
    // One matching of devices to profiles: the store is asked about the fleet's devices, and the planner plans
    // on the same fleet.
    let mut fleet = crate::fleet::build(
        &inv,
        &set,
        plan::runtime_for(&spec, workload, &req.overrides),
    )
    .map_err(|e| {
        plan_failure(
            PlanError::Profile(e.0),
            &req.model,
            source,
            crate::profile::RuntimeId::Any,
        )
    })?;
    fleet.nodes = nodes;
    let evidence = sources.evidence(&fleet.profile_ids(), &spec.fingerprint)?;
    // Launch artifacts name the model by its absolute path, so they work from wherever they are run, not only
    // from the directory `resolve` ran in (the model was read above, so it exists).
    let path = std::fs::canonicalize(&req.model)
        .unwrap_or_else(|_| req.model.clone())
        .display()
        .to_string();
    let inputs = Inputs {
        model: &spec,
        model_path: &path,
        inventory: &inv,
        hardware_source: source,
        profiles: &set,
        workload,
        evidence: &evidence,
        overrides: &req.overrides,
    };
    let runtime = fleet.runtime;
    plan::resolve_fleet(&inputs, fleet).map_err(|e| plan_failure(e, &req.model, source, runtime))
}

/// A profile id that names nothing (or several): a usage error, exit code 2, pointing at the list of `kind`.
pub fn lookup_failure(e: crate::profile::lookup::LookupError, kind: &str) -> Failure {
    Failure::new(exit::USAGE, e).hint(format!(
        "`optimizer profiles list --kind {kind}` shows every id{}",
        if kind == "hardware" {
            " and product name"
        } else {
            ""
        }
    ))
}

/// The node type of a cluster and how many nodes it has: a plan covers identical nodes (one replica each).
fn cluster_node(path: &Path) -> Result<(Inventory, u32), Failure> {
    use crate::hardware::InventoryError;
    let cluster = crate::hardware::load_cluster(path).map_err(|e| match &e {
        InventoryError::Io { source, .. } => {
            let code = io_exit_code(source);
            let f = Failure::new(code, e);
            if code == exit::USAGE {
                f.hint("check the cluster path")
            } else {
                f
            }
        }
        InventoryError::Invalid { .. } => Failure::new(exit::INVALID_INPUT, e)
            .hint("`optimizer schema cluster` prints the cluster schema"),
    })?;
    let first = &cluster.nodes[0];
    if let Some(other) = cluster
        .nodes
        .iter()
        .find(|n| n.inventory != first.inventory)
    {
        return Err(Failure::new(
            exit::USAGE,
            anyhow::anyhow!(
                "{}: node groups {:?} and {:?} differ; a plan covers identical nodes (one replica per node) until plans span nodes",
                path.display(),
                first.name,
                other.name
            ),
        ));
    }
    let nodes = cluster
        .node_count()
        .ok()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| {
            Failure::new(
                exit::INVALID_INPUT,
                anyhow::anyhow!("{}: the node count overflows", path.display()),
            )
        })?;
    Ok((first.inventory.clone(), nodes))
}

/// This machine (or the inventory) with its GPUs replaced by `n` GPUs of a profile.
fn with_profiled_gpus(
    mut inv: Inventory,
    n: u32,
    id: &str,
    set: &ProfileSet,
) -> Result<Inventory, Failure> {
    let p = &set
        .find_hardware(id)
        .map_err(|e| lookup_failure(e, "hardware"))?
        .value;
    let id = p.id.as_str();
    if p.kind == DeviceKind::Soc && n > 1 {
        return Err(Failure::new(
            exit::USAGE,
            anyhow::anyhow!("--hardware {n}x:{id}: a machine has one {} GPU", p.name),
        ));
    }
    // An Apple SoC's GPU shares the machine's memory: the host's (probed or --inventory) memory stands for it.
    let machine_memory = inv.memory.total_bytes;
    inv.gpus = (0..n)
        .map(|i| crate::profile::matching::gpu_from_profile(p, i, machine_memory))
        .collect::<Result<_, _>>()
        .map_err(|e| {
            Failure::new(
                exit::USAGE,
                anyhow::anyhow!(
                    "--hardware {id}: {e}; resolve plans GPUs from profiles, the host from the probe or --inventory"
                ),
            )
        })?;
    Ok(inv)
}

/// The exit code and message of a planner refusal: defects of the model or the inventory are invalid input (4)
/// naming the file; what the user asked for is a usage error (2).
fn plan_failure(
    e: PlanError,
    model: &Path,
    hardware_source: &str,
    runtime: crate::profile::RuntimeId,
) -> Failure {
    match e {
        PlanError::Model(_) => Failure::new(
            exit::INVALID_INPUT,
            anyhow::anyhow!("{}: {e}", model.display()),
        ),
        PlanError::Profile(_) => Failure::new(exit::INVALID_INPUT, e)
            .hint("`optimizer profiles validate` checks the rule tables in force"),
        PlanError::Hardware(_) => Failure::new(
            if hardware_source == "profile" {
                exit::USAGE
            } else {
                exit::INVALID_INPUT
            },
            anyhow::anyhow!("{hardware_source}: {e}"),
        ),
        PlanError::UnsupportedFormat(_) => {
            let f = Failure::new(exit::USAGE, anyhow::anyhow!("{}: {e}", model.display()));
            // Only a serving refusal has a conversion for a way out; a training refusal says its own.
            if runtime == crate::profile::RuntimeId::Torch {
                f
            } else {
                f.hint(
                    "convert it to GGUF with llama.cpp's convert_hf_to_gguf.py, then resolve the .gguf",
                )
            }
        }
        PlanError::UnsupportedMode(..) | PlanError::Usage(_) => Failure::new(exit::USAGE, e),
    }
}

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
    let set = sources.profiles()?;
    let mut notes = Vec::new();
    let (overhead, rule) = set.llama_cpp_gpu_overhead();
    let rule = rule.map(str::to_string);
    let m = estimate_machine(sources, req, &set, &mut notes, overhead)?;
    if let Some(rule) = rule.filter(|_| !m.gpus.is_empty()) {
        notes.push(format!("per-GPU overhead from rule {rule}"));
    }
    let mut est =
        llama_cpp::estimate(&spec, &req.params, &m).map_err(|e| estimate_failure(e, &req.model))?;
    est.notes.extend(notes);
    Ok(est)
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
    let set = sources.profiles()?;
    let mut notes = Vec::new();
    let (overhead, _) = set.llama_cpp_gpu_overhead();
    let m = estimate_machine(sources, req, &set, &mut notes, overhead)?;
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
        let est =
            llama_cpp::estimate(&spec, &params, &m).map_err(|e| estimate_failure(e, &req.model))?;
        if names.is_empty() {
            names = est.devices.iter().map(|d| d.device.clone()).collect();
        }
        rows.push(SweepRow {
            value: v,
            totals: est.devices.iter().map(|d| d.total_bytes).collect(),
            notes: est.notes,
        });
    }
    // Room per device: GPUs by their free memory less llama.cpp's reserve rules; the host by the inventory's
    // available memory less the OS reserve, when the host is this machine (or its inventory).
    let host_room = if req.hardware.is_none() {
        let (inv, _) = sources.inventory()?;
        let (reserve, _) = set
            .reserve(
                ReserveTarget::Cpu,
                RuntimeId::LlamaCpp,
                inv.memory.available_bytes,
            )
            .map_err(|e| Failure::new(exit::INVALID_INPUT, anyhow::anyhow!("{e}")))?;
        Some(inv.memory.available_bytes.saturating_sub(reserve))
    } else {
        None
    };
    let mut devices = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        let room = if name == "cpu" {
            host_room
        } else {
            let gpu = name
                .strip_prefix("cuda:")
                .and_then(|n| n.parse::<usize>().ok())
                .and_then(|n| m.gpus.get(n));
            match gpu {
                Some(g) => {
                    let (reserve, _) = set
                        .reserve(ReserveTarget::Gpu, RuntimeId::LlamaCpp, g.free_bytes)
                        .map_err(|e| Failure::new(exit::INVALID_INPUT, anyhow::anyhow!("{e}")))?;
                    Some(g.free_bytes.saturating_sub(reserve))
                }
                None => None,
            }
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

fn estimate_machine(
    sources: &Sources,
    req: &EstimateRequest,
    set: &ProfileSet,
    notes: &mut Vec<String>,
    overhead: u64,
) -> Result<Machine, Failure> {
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
                Machine {
                    cpu_features: Vec::new(),
                    gpus: (0..*n)
                        .map(|_| GpuTarget {
                            name: p.name.clone(),
                            // The same memory `resolve --hardware` plans with (`gpu_from_profile`).
                            free_bytes: p.memory.plannable_bytes().unwrap_or(0),
                            overhead_bytes: overhead,
                        })
                        .collect(),
                }
            }
            DeviceKind::Cpu | DeviceKind::Soc => {
                if p.kind == DeviceKind::Soc {
                    notes.push(format!("{id} is a unified-memory SoC; its GPU backend is not modelled, so this is the CPU estimate"));
                }
                Machine {
                    cpu_features: p
                        .cpu
                        .as_ref()
                        .map(|c| c.features.clone())
                        .unwrap_or_default(),
                    gpus: Vec::new(),
                }
            }
        });
    }
    let (inv, _) = sources.inventory()?;
    Ok(Machine {
        cpu_features: inv.cpu.features.clone(),
        gpus: inv
            .gpus
            .iter()
            .filter(|g| g.vendor == crate::hardware::GpuVendor::Nvidia)
            .map(|g| GpuTarget {
                name: g.name.clone(),
                free_bytes: g.memory_free_bytes,
                overhead_bytes: overhead,
            })
            .collect(),
    })
}

/// Largest file `measurements import` reads: a llama-bench sweep's results are kilobytes, and an export of
/// every measurement a fleet made stays within it.
pub const MAX_IMPORT_BYTES: u64 = 64 << 20;

/// What an import recorded.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Imported {
    pub file: String,
    /// Runs written.
    pub runs: Vec<i64>,
    /// Measurement row ids written (for an export, the count of lines recorded).
    pub rows: Vec<i64>,
    /// Results not recorded, and why.
    pub skipped: Vec<String>,
}

/// `measurements import FILE`: another store's export (merged, idempotently), or a `llama-bench` output (JSON,
/// JSON lines, CSV or SQL) recorded as one complete run
/// against this machine's devices (probe or `--inventory`) and the model each row names (or `model`, when the
/// file was moved). The run is written incomplete first and finished last, so an interrupted import leaves
/// nothing a plan uses.
pub fn import_measurements(
    sources: &Sources,
    file: &Path,
    model: Option<&Path>,
) -> Result<Imported, Failure> {
    let text = read_input(file, MAX_IMPORT_BYTES, "measurements file")?;
    // `measurements export` lines carry a metric; llama-bench's results an avg_ts.
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    if serde_json::from_str::<serde_json::Value>(first).is_ok_and(|v| v.get("metric").is_some()) {
        return import_export(sources, file, &text);
    }
    if crate::calibrate::load_log::looks_like(&text) {
        return import_load_log(sources, file, &text, model);
    }
    let rows = crate::calibrate::llama_bench::parse(&text).map_err(|e| {
        Failure::new(
            exit::INVALID_INPUT,
            anyhow::anyhow!("{}: {e}", file.display()),
        )
        .hint("expected the output of llama-bench -o json, jsonl, csv or sql, a llama.cpp load log (llama-server -lv 4 stderr), or a measurements export")
    })?;
    if rows.is_empty() {
        return Err(Failure::new(
            exit::INVALID_INPUT,
            anyhow::anyhow!("{}: no results", file.display()),
        ));
    }
    let set = sources.profiles()?;
    let (inv, _) = sources.inventory()?;
    let fleet = crate::fleet::build(&inv, &set, crate::profile::RuntimeId::LlamaCpp)
        .map_err(|e| Failure::new(exit::INVALID_INPUT, e))?;
    let mut models: std::collections::BTreeMap<String, crate::model::ModelSpec> =
        std::collections::BTreeMap::new();
    let mut measurements = Vec::new();
    let mut skipped = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let path = model.map_or_else(|| PathBuf::from(&row.model_filename), Path::to_path_buf);
        let key = path.display().to_string();
        if !models.contains_key(&key) {
            let spec = crate::model::load(&path).map_err(|e| {
                Failure::from(e).hint(
                    "the row names the model llama-bench ran; pass --model PATH if the file moved",
                )
            })?;
            models.insert(key.clone(), spec);
        }
        match crate::calibrate::from_llama_bench(row, &fleet, &models[&key]) {
            Ok(m) => measurements.push(m),
            Err(why) => skipped.push(format!("result {}: {why}", i + 1)),
        }
    }
    let store = sources.store()?;
    let first = &rows[0];
    let run = store
        .begin_run(&crate::store::NewRun {
            tool: "llama-bench import".into(),
            runtime: crate::profile::RuntimeId::LlamaCpp,
            runtime_version: Some(first.build_commit.clone()).filter(|c| !c.is_empty()),
            started_at: first.test_time.clone(),
            settings: serde_json::json!({ "file": file.display().to_string() }).to_string(),
            host: host_identity(&inv),
        })
        .map_err(store_failure)?;
    let ids = measurements
        .iter()
        .map(|m| store.record(run, m))
        .collect::<Result<Vec<i64>, _>>()
        .map_err(store_failure)?;
    let finished = rows
        .iter()
        .map(|r| r.test_time.as_str())
        .max()
        .unwrap_or_default()
        .to_string();
    store.finish_run(run, &finished).map_err(store_failure)?;
    Ok(Imported {
        file: file.display().to_string(),
        runs: vec![run.0],
        rows: ids,
        skipped,
    })
}

/// A llama.cpp load log (`crate::calibrate::load_log`): one `peak_memory_bytes` row per device the log
/// allocated on, valued at the buffers it states (file mappings left out, as the memory model leaves them out of
/// its totals), with the memory model's estimate for the configuration the log resolved (context, batch,
/// micro-batch, sequences, flash attention, KV types, offloaded layers, load mode, repacking) as
/// `estimated_bytes`, so the planner widens that device class's reserve by what the model missed. The estimate
/// leaves out what the log cannot show either: the per-GPU runtime overhead (CUDA context) and, with mmap, the
/// host's mapped weights.
fn import_load_log(
    sources: &Sources,
    file: &Path,
    text: &str,
    model: Option<&Path>,
) -> Result<Imported, Failure> {
    use crate::calibrate::load_log;
    use crate::store::{DeviceIdentity, ModelIdentity, NewMeasurement, NewRun, Shape};
    let invalid = |m: String| {
        Failure::new(
            exit::INVALID_INPUT,
            anyhow::anyhow!("{}: {m}", file.display()),
        )
    };
    let log = load_log::parse(text).map_err(invalid)?;
    let Some(model) = model else {
        return Err(Failure::new(
            exit::USAGE,
            anyhow::anyhow!("{}: a llama.cpp load log needs --model M, the model it loaded", file.display()),
        )
        .hint("the model's fingerprint keys the measurement, and its tensors are checked against the log"));
    };
    if log.loads > 1 {
        return Err(invalid(format!(
            "{} model loads in one log (a draft model, or several runs); import one load at a time",
            log.loads
        )));
    }
    let (totals, other) = log.totals().map_err(invalid)?;
    if totals.is_empty() {
        return Err(invalid(
            "no buffer size lines for a device the planner models".into(),
        )
        .hint("run llama-server or llama-cli with -lv 4 (or --verbose) so the loader prints its buffers, and import its stderr"));
    }
    let spec = crate::model::load(model)?;
    log.check_model(&spec).map_err(|e| {
        Failure::new(
            exit::USAGE,
            anyhow::anyhow!("{}: not a load of {}: {e}", file.display(), model.display()),
        )
    })?;
    let params = log.params().map_err(invalid)?;
    let est = estimate(
        sources,
        &EstimateRequest {
            model: model.to_path_buf(),
            params: params.clone(),
            hardware: None,
        },
    )?;
    let set = sources.profiles()?;
    let (inv, _) = sources.inventory()?;
    let fleet = crate::fleet::build(&inv, &set, crate::profile::RuntimeId::LlamaCpp)
        .map_err(|e| Failure::new(exit::INVALID_INPUT, e))?;
    let mut skipped: Vec<String> = log
        .malformed
        .iter()
        .map(|(n, l)| {
            format!("line {n}: not a buffer or breakdown line as llama.cpp prints them: {l:?}")
        })
        .collect();
    skipped.extend(other.iter().map(|b| {
        format!(
            "line {}: {} buffer: a backend the planner does not model",
            b.line, b.name
        )
    }));
    let mut measurements = Vec::new();
    for t in &totals {
        let device = if t.device == "cpu" {
            Some(DeviceIdentity {
                profile: fleet.host.class_id().to_string(),
                name: inv.cpu.model.clone(),
                uuid: None,
            })
        } else {
            fleet
                .gpus
                .iter()
                .find(|g| g.id.to_string() == t.device)
                .map(|g| DeviceIdentity {
                    profile: g.profile.clone(),
                    name: g.name.clone(),
                    uuid: None,
                })
        };
        let Some(device) = device else {
            skipped.push(format!(
                "{}: the machine described has no such device to record it against (import with --inventory of that machine)",
                t.device
            ));
            continue;
        };
        // What the device can hold at all: the host's memory and swap, a GPU's memory. A log that allocates more
        // is not a load on this machine (or not a real log), and its peak would make every later plan no-fit.
        let holds = if t.device == "cpu" {
            inv.memory
                .host_total_bytes
                .unwrap_or(inv.memory.total_bytes)
                .max(inv.memory.total_bytes)
                .saturating_add(inv.memory.swap_total_bytes.unwrap_or(0))
        } else {
            fleet
                .gpus
                .iter()
                .find(|g| g.id.to_string() == t.device)
                .map_or(u64::MAX, |g| g.memory_total_bytes)
        };
        if t.allocated_bytes > holds {
            let largest = t.buffers.iter().max_by_key(|b| b.bytes);
            return Err(invalid(format!(
                "the log allocates {} bytes on {}, more than the {holds} bytes it has{}: not a load on this machine",
                t.allocated_bytes,
                t.device,
                largest.map_or_else(String::new, |b| format!(
                    " (line {}: {} {:?} buffer of {} bytes)",
                    b.line, b.name, b.kind, b.bytes
                ))
            ))
            .hint("import a load log with --inventory of the machine that wrote it"));
        }
        let e = est.devices.iter().find(|d| d.device == t.device);
        let estimated = e.map(|d| {
            let mapped = if t.device == "cpu" && est.resolved.mmap {
                d.weights_bytes
            } else {
                0
            };
            d.total_bytes
                .saturating_sub(d.overhead_bytes)
                .saturating_sub(mapped)
        });
        let breakdown: Vec<&load_log::BreakdownRow> = log
            .breakdown
            .iter()
            .filter(|r| load_log::device_of(&r.name).as_deref() == Some(t.device.as_str()))
            .collect();
        measurements.push(NewMeasurement {
            device,
            model: Some(ModelIdentity {
                fingerprint: spec.fingerprint.clone(),
                architecture: spec.architecture.clone(),
                tensor_bytes: spec.tensor_bytes(),
            }),
            metric: "peak_memory_bytes".into(),
            value: t.allocated_bytes as f64,
            unit: "bytes".into(),
            shape: Shape {
                context_tokens: Some(params.n_ctx),
                batch: Some(params.n_batch),
                ubatch: Some(params.n_ubatch),
                sequences: Some(params.n_parallel),
                threads: log.threads,
                gpu_layers: Some(est.resolved.n_gpu_layers),
                kv_type: Some(params.type_k.name().to_lowercase()),
                ..Shape::default()
            },
            context: serde_json::json!({
                "source": "llama.cpp load log",
                "device": t.device,
                "buffers": t.buffers,
                "mapped_bytes": t.mapped_bytes,
                "estimated_bytes": estimated,
                "estimate": e,
                "breakdown_mib": breakdown,
                "flash_attn": est.resolved.flash_attn,
                "kv_unified": params.kv_unified,
                "type_v": params.type_v.name().to_lowercase(),
                "mmap": est.resolved.mmap,
                "build_commit": log.build,
            })
            .to_string(),
        });
    }
    if measurements.is_empty() {
        return Err(invalid(format!(
            "no device of the log is one of this machine's: {}",
            skipped.join("; ")
        )));
    }
    let store = sources.store()?;
    let now = now_rfc3339();
    let run = store
        .begin_run(&NewRun {
            tool: "llama.cpp load log".into(),
            runtime: crate::profile::RuntimeId::LlamaCpp,
            runtime_version: log.build.clone(),
            started_at: now.clone(),
            settings: serde_json::json!({ "file": file.display().to_string() }).to_string(),
            host: host_identity(&inv),
        })
        .map_err(store_failure)?;
    let ids = measurements
        .iter()
        .map(|m| store.record(run, m))
        .collect::<Result<Vec<i64>, _>>()
        .map_err(store_failure)?;
    store.finish_run(run, &now).map_err(store_failure)?;
    Ok(Imported {
        file: file.display().to_string(),
        runs: vec![run.0],
        rows: ids,
        skipped,
    })
}

/// Lines of `measurements export`, merged into this store (idempotent: runs already here are skipped).
fn import_export(sources: &Sources, file: &Path, text: &str) -> Result<Imported, Failure> {
    let lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str::<crate::store::Exported>(l).map_err(|e| {
                Failure::new(
                    exit::INVALID_INPUT,
                    anyhow::anyhow!("{}: line {}: {e}", file.display(), i + 1),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if let Some((i, l)) = lines.iter().enumerate().find(|(_, l)| {
        serde_json::from_value::<crate::profile::RuntimeId>(serde_json::Value::String(
            l.run.runtime.clone(),
        ))
        .is_err()
    }) {
        return Err(Failure::new(
            exit::INVALID_INPUT,
            anyhow::anyhow!(
                "{}: measurement {}: runtime {:?} is not one this build knows",
                file.display(),
                i + 1,
                l.run.runtime
            ),
        ));
    }
    if let Some((i, l)) = lines.iter().enumerate().find(|(_, l)| !l.value.is_finite()) {
        return Err(Failure::new(
            exit::INVALID_INPUT,
            anyhow::anyhow!(
                "{}: measurement {}: {} is not finite",
                file.display(),
                i + 1,
                l.value
            ),
        ));
    }
    let store = sources.store()?;
    let (runs, rows, skipped) = store.import(&lines).map_err(store_failure)?;
    Ok(Imported {
        file: file.display().to_string(),
        rows,
        skipped: (skipped > 0)
            .then(|| format!("{skipped} run(s) already in the store"))
            .into_iter()
            .collect(),
        runs: runs.into_iter().map(|r| r.0).collect(),
    })
}

/// What a deployment really did, as `observe` records it.
#[derive(Debug, Clone, PartialEq)]
pub enum Observation {
    /// Decode tokens per second over all its sequences.
    TokensPerS(f64),
    /// The most memory the engine took on one of its devices.
    PeakMemory { device: String, bytes: u64 },
    /// It ran out of memory on one of its devices.
    OutOfMemory { device: String },
}

/// Largest deployment document `observe` reads.
pub const MAX_DEPLOYMENT_BYTES: u64 = 16 << 20;

/// Seconds since the Unix epoch as RFC 3339 UTC (`2026-11-22T23:59:59Z`), by the civil-from-days algorithm
/// (H. Hinnant, "chrono-Compatible Low-Level Date Algorithms").
pub fn rfc3339(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// A deployment document `optimizer resolve` wrote, read for `observe` and `bench`: they record what the
/// deployment did against its device, model and configuration.
struct Planned {
    path: PathBuf,
    doc: Deployment,
    settings: crate::emit::LlamaCppSettings,
}

impl Planned {
    fn read(path: &Path) -> Result<Planned, Failure> {
        let text = read_input(path, MAX_DEPLOYMENT_BYTES, "deployment")?;
        let doc: Deployment = serde_yaml_ng::from_str(&text).map_err(|e| {
            Failure::new(
                exit::INVALID_INPUT,
                anyhow::anyhow!(
                    "{}: not an {} deployment document: {e}",
                    path.display(),
                    crate::emit::API_VERSION
                ),
            )
            .hint("this reads the document `optimizer resolve` wrote for the deployment")
        })?;
        let Some(settings) = doc.settings.llama_cpp().cloned() else {
            return Err(Failure::new(
                exit::USAGE,
                anyhow::anyhow!("{}: not a llama.cpp plan", path.display()),
            ));
        };
        Ok(Planned {
            path: path.to_path_buf(),
            doc,
            settings,
        })
    }

    fn usage(&self, m: String) -> Failure {
        Failure::new(exit::USAGE, anyhow::anyhow!("{}: {m}", self.path.display()))
    }

    /// The store's identity of a device the plan uses (`cpu`, `cuda:0`).
    fn device(&self, device: &str) -> Result<crate::store::DeviceIdentity, Failure> {
        let d = &self.doc;
        let found = if device == "cpu" {
            Some((d.hardware.cpu.profile.clone(), d.hardware.cpu.model.clone()))
        } else {
            d.hardware
                .gpus
                .iter()
                .find(|g| g.device == device && g.used)
                .map(|g| (g.profile.clone(), g.name.clone()))
        };
        let (profile, name) = found.ok_or_else(|| {
            self.usage(format!("{device}: the deployment does not use this device"))
        })?;
        Ok(crate::store::DeviceIdentity {
            profile,
            name,
            uuid: None,
        })
    }

    /// The device a throughput of the whole deployment is recorded against: the CPU, or its one GPU.
    fn throughput_device(&self) -> Result<String, Failure> {
        let used: Vec<&str> = self
            .doc
            .hardware
            .gpus
            .iter()
            .filter(|g| g.used)
            .map(|g| g.device.as_str())
            .collect();
        match used.as_slice() {
            [] => Ok("cpu".to_string()),
            [one] => Ok(one.to_string()),
            many => Err(self.usage(format!(
                "the deployment uses {} GPUs ({}); a throughput is recorded against one device",
                many.len(),
                many.join(", ")
            ))),
        }
    }

    fn model(&self) -> crate::store::ModelIdentity {
        crate::store::ModelIdentity {
            fingerprint: self.doc.model.fingerprint.clone(),
            architecture: self.doc.model.architecture.clone(),
            tensor_bytes: self.doc.model.tensor_bytes,
        }
    }

    /// The configuration it runs, as the store's shape columns.
    fn shape(&self) -> crate::store::Shape {
        let s = &self.settings;
        crate::store::Shape {
            context_tokens: Some(s.context_length),
            batch: Some(s.batch_size),
            ubatch: Some(s.ubatch_size),
            sequences: Some(s.parallel),
            threads: Some(s.threads),
            gpu_layers: Some(s.gpu_layers),
            kv_type: Some(s.cache_type_k.clone()),
            ..crate::store::Shape::default()
        }
    }

    /// A run of `tool` against the deployment's host and runtime, started now.
    fn run(&self, tool: &str) -> crate::store::NewRun {
        let d = &self.doc;
        crate::store::NewRun {
            tool: tool.into(),
            runtime: d.runtime.id,
            runtime_version: Some(d.runtime.version.clone()),
            started_at: now_rfc3339(),
            settings: serde_json::to_string(&d.settings).unwrap_or_default(),
            host: crate::store::HostIdentity {
                cpu_model: d.hardware.cpu.model.clone(),
                physical_cores: d.hardware.cpu.physical_cores,
                memory_total_bytes: d.hardware.memory_total_bytes,
                hostname: String::new(),
            },
        }
    }
}

/// The time now as RFC 3339 UTC (a run's start and finish).
pub fn now_rfc3339() -> String {
    rfc3339(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |t| t.as_secs()),
    )
}

/// The host a run is taken on, as the store keys it: the inventory's CPU, cores and memory.
pub fn host_identity(inv: &crate::hardware::Inventory) -> crate::store::HostIdentity {
    crate::store::HostIdentity {
        cpu_model: inv.cpu.model.clone(),
        physical_cores: inv.cpu.physical_cores,
        memory_total_bytes: inv.memory.total_bytes,
        hostname: String::new(),
    }
}

/// `observe`: records what a planned deployment really did against its device and model, in the shape it ran
/// at, so the next `resolve` for that device and model uses it: a decode rate as a measured throughput, a peak
/// above the estimate (or an out-of-memory, recorded as needing more than the device had) as extra reserve.
pub fn observe(
    sources: &Sources,
    deployment: &Path,
    what: &Observation,
) -> Result<Vec<i64>, Failure> {
    use crate::store::NewMeasurement;
    let planned = Planned::read(deployment)?;
    let d = &planned.doc;
    let (device, metric, value, context) = match what {
        Observation::TokensPerS(x) => {
            if !(x.is_finite() && *x > 0.0) {
                return Err(planned.usage(format!("--tokens-per-s {x}: a positive number")));
            }
            (
                planned.throughput_device()?,
                "decode_tokens_per_s",
                *x,
                serde_json::json!({}),
            )
        }
        Observation::PeakMemory { device, .. } | Observation::OutOfMemory { device }
            if !d.memory.devices.iter().any(|m| &m.device == device) =>
        {
            return Err(planned.usage(format!(
                "--device {device}: the deployment has memory on {}",
                d.memory
                    .devices
                    .iter()
                    .map(|m| m.device.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        Observation::PeakMemory { device, bytes } => {
            let m = d.memory.devices.iter().find(|m| &m.device == device);
            let estimated = m.map_or(0, |m| m.total_bytes);
            (
                device.clone(),
                "peak_memory_bytes",
                *bytes as f64,
                serde_json::json!({ "device": device, "estimated_bytes": estimated }),
            )
        }
        Observation::OutOfMemory { device } => {
            let m = d.memory.devices.iter().find(|m| &m.device == device);
            let (estimated, capacity) = m.map_or((0, 0), |m| (m.total_bytes, m.capacity_bytes));
            // It needed more than the device had free: a lower bound of the peak.
            (
                device.clone(),
                "peak_memory_bytes",
                capacity.saturating_add(1) as f64,
                serde_json::json!({ "device": device, "estimated_bytes": estimated, "oom": true }),
            )
        }
    };
    let device = planned.device(&device)?;
    let store = sources.store()?;
    let new_run = planned.run("observe");
    let run = store.begin_run(&new_run).map_err(store_failure)?;
    let row = store
        .record(
            run,
            &NewMeasurement {
                device,
                model: Some(planned.model()),
                metric: metric.into(),
                value,
                unit: if metric == "peak_memory_bytes" {
                    "bytes"
                } else {
                    "tokens/s"
                }
                .into(),
                shape: planned.shape(),
                context: context.to_string(),
            },
        )
        .map_err(store_failure)?;
    store
        .finish_run(run, &new_run.started_at)
        .map_err(store_failure)?;
    Ok(vec![row])
}

/// What `optimizer calibrate` is asked to do.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CalibrateRequest {
    /// The short sweep (1 thread and all cores, 3 short repetitions): under a minute on 2 cores.
    pub quick: bool,
    /// Limit the dot products to the weight types this model uses, at its layer shape.
    pub model: Option<PathBuf>,
}

/// One recorded figure of a calibration.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CalibratedFigure {
    /// The store rows of its repetitions (one each; the planner takes the best).
    pub rows: Vec<i64>,
    pub what: String,
    pub metric: String,
    pub threads: u32,
    pub value: f64,
    pub unit: String,
    /// Lowest and highest repetition.
    pub min: f64,
    pub max: f64,
}

/// What a calibration recorded.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Calibrated {
    pub run: i64,
    /// The store's device key: the CPU class profile and the CPU's name.
    pub device_profile: String,
    pub device_name: String,
    pub isa: String,
    pub figures: Vec<CalibratedFigure>,
    /// The fewest threads whose read bandwidth is within [`SATURATION_SHARE`] of the most measured.
    pub bandwidth_saturates_at_threads: Option<u32>,
    pub failed: Vec<String>,
    /// Ctrl-C: the steps after the last recorded one did not run.
    pub stopped: bool,
    pub notes: Vec<String>,
    pub seconds: f64,
}

/// Read bandwidth counts as saturated at 90 % of the most any thread count reached.
pub const SATURATION_SHARE: f64 = 0.9;

/// Opens the benchmark of the CUDA GPU with this ordinal (the real one through the driver, or a mock).
pub type GpuBenchFactory<'a> = dyn FnMut(u32) -> Result<Box<dyn crate::calibrate::gpu::GpuBench>, crate::calibrate::gpu::GpuError>
    + 'a;

/// Measures this CPU with `bench` (the real loops, or a mock in tests), then each NVIDIA GPU the inventory lists
/// through `gpu_bench`, and records every figure as it finishes in one `calibrate` run; the run is marked complete at the end, also when `stop` cut it short (what finished is
/// kept), and stays `incomplete` (never used) if the process dies first.
pub fn calibrate(
    sources: &Sources,
    req: &CalibrateRequest,
    bench: &mut dyn crate::calibrate::cpu::CpuBench,
    gpu_bench: &mut GpuBenchFactory<'_>,
    stop: &std::sync::atomic::AtomicBool,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<Calibrated, Failure> {
    use crate::calibrate::cpu::{Plan, Step, Stream, to_measurement};
    let started = std::time::Instant::now();
    let set = sources.profiles()?;
    let (inv, _) = sources.inventory()?;
    let fleet = crate::fleet::build(&inv, &set, crate::profile::RuntimeId::LlamaCpp)
        .map_err(|e| Failure::new(exit::INVALID_INPUT, e))?;
    let spec = req
        .model
        .as_deref()
        .map(crate::model::load)
        .transpose()
        .map_err(Failure::from)?;
    // The inventory sizes the plan; this machine bounds it (the inventory may describe another or a wrong one).
    let capacity = bench.capacity();
    let mut bounded = Vec::new();
    let mut cores = fleet.host.usable_cores();
    if let Some(t) = capacity.threads.filter(|t| *t < cores) {
        bounded.push(format!(
            "the inventory gives {cores} cores; this machine runs {t} threads at once: the sweep stops at {t}"
        ));
        cores = t.max(1);
    }
    let available = capacity
        .available_bytes
        .map_or(inv.memory.available_bytes, |a| {
            a.min(inv.memory.available_bytes)
        });
    let mut plan = Plan::new(
        req.quick,
        cores,
        (
            inv.cpu.caches.as_ref().and_then(|c| c.l2_bytes),
            inv.cpu.caches.as_ref().and_then(|c| c.l3_bytes),
        ),
        available,
        spec.as_ref(),
    );
    plan.notes.extend(bounded);
    let device = crate::store::DeviceIdentity {
        profile: fleet.host.class_id().to_string(),
        name: inv.cpu.model.clone(),
        uuid: None,
    };
    let isa = bench.isa();
    let store = sources.store()?;
    let run = store
        .begin_run(&crate::store::NewRun {
            tool: if bench.optimized() {
                crate::evidence::CALIBRATE_TOOL.into()
            } else {
                crate::calibrate::cpu::DEBUG_BUILD_TOOL.into()
            },
            runtime: crate::profile::RuntimeId::LlamaCpp,
            runtime_version: None,
            started_at: now_rfc3339(),
            settings: serde_json::json!({
                "quick": req.quick,
                "model": spec.as_ref().map(|s| s.fingerprint.clone()),
                "isa": isa,
                "stream_bytes": plan.stream_bytes,
                "rep_secs": plan.budget.rep_secs,
                "reps": plan.budget.reps,
            })
            .to_string(),
            host: host_identity(&inv),
        })
        .map_err(store_failure)?;
    // The rows of each step's repetitions, in the order they were recorded.
    let mut rows: Vec<(crate::calibrate::cpu::Step, i64)> = Vec::new();
    let outcome = crate::calibrate::cpu::run(bench, &plan, stop, progress, &mut |m| {
        let row = store
            .record(run, &to_measurement(m, &device, &isa))
            .map_err(|e| e.to_string())?;
        rows.push((m.step, row));
        Ok(())
    })
    .map_err(|e| {
        Failure::new(
            exit::RUNTIME,
            anyhow::anyhow!("recording a measurement: {e}"),
        )
    })?;
    let mut figures: Vec<CalibratedFigure> = outcome
        .measured
        .iter()
        .map(|m| CalibratedFigure {
            rows: rows
                .iter()
                .filter(|(s, _)| *s == m.step)
                .map(|(_, r)| *r)
                .collect(),
            what: m.step.label(),
            metric: m.step.metric(),
            threads: m.step.threads(),
            value: m.sample.best,
            unit: m.step.unit().into(),
            min: m
                .sample
                .samples
                .iter()
                .copied()
                .fold(f64::INFINITY, f64::min),
            max: m.sample.samples.iter().copied().fold(0.0, f64::max),
        })
        .collect();
    let mut notes = plan.notes.clone();
    if !bench.optimized() {
        notes.push(format!(
            "a debug build ran these loops unoptimised: the figures understate this CPU, so the run is recorded as \
             `{}` and no plan uses it; calibrate with a release build (`cargo run --release`)",
            crate::calibrate::cpu::DEBUG_BUILD_TOOL
        ));
    }
    let mut failed: Vec<String> = outcome
        .failed
        .iter()
        .map(|(s, why)| format!("{}: {why}", s.label()))
        .collect();
    let mut stopped = outcome.stopped;
    for g in fleet
        .gpus
        .iter()
        .filter(|g| g.id.kind == crate::fleet::DeviceKind::Cuda)
    {
        if stop.load(std::sync::atomic::Ordering::SeqCst) {
            stopped = true;
            break;
        }
        let device = crate::store::DeviceIdentity {
            profile: g.profile.clone(),
            name: g.name.clone(),
            uuid: None,
        };
        match calibrate_gpu(g, spec.as_ref(), req.quick, gpu_bench, stop, progress) {
            Err(e) => failed.push(format!("{}: {e}", g.id)),
            Ok(cal) => {
                stopped |= cal.stopped;
                notes.extend(cal.notes.iter().map(|n| format!("{}: {n}", g.id)));
                failed.extend(
                    cal.failures
                        .iter()
                        .map(|(what, e)| format!("{} {what}: {e}", g.id)),
                );
                for m in &crate::calibrate::gpu::to_measurements(&cal.results, device) {
                    let row = store.record(run, m).map_err(store_failure)?;
                    figures.push(CalibratedFigure {
                        rows: vec![row],
                        what: format!("{} {}", g.id, m.metric),
                        metric: m.metric.clone(),
                        threads: 0,
                        value: m.value,
                        unit: m.unit.clone(),
                        min: m.value,
                        max: m.value,
                    });
                }
            }
        }
    }
    store
        .finish_run(run, &now_rfc3339())
        .map_err(store_failure)?;
    let reads: Vec<(u32, f64)> = outcome
        .measured
        .iter()
        .filter_map(|m| match m.step {
            Step::Stream {
                stream: Stream::Read,
                threads,
            } => Some((threads, m.sample.best)),
            _ => None,
        })
        .collect();
    let most = reads.iter().map(|r| r.1).fold(0.0, f64::max);
    Ok(Calibrated {
        run: run.0,
        device_profile: device.profile,
        device_name: device.name,
        isa,
        figures,
        bandwidth_saturates_at_threads: reads
            .iter()
            .filter(|r| r.1 >= SATURATION_SHARE * most)
            .map(|r| r.0)
            .min(),
        failed,
        stopped,
        notes,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The GPU micro-benchmarks of one CUDA GPU: the model's layer shapes (or the defaults) and weight types,
/// efficiencies against the GPU's profile peaks.
fn calibrate_gpu(
    g: &crate::fleet::FleetGpu,
    spec: Option<&crate::model::ModelSpec>,
    quick: bool,
    gpu_bench: &mut GpuBenchFactory<'_>,
    stop: &std::sync::atomic::AtomicBool,
    progress: &mut dyn FnMut(usize, usize, &str),
) -> Result<crate::calibrate::gpu::GpuCalibration, crate::calibrate::gpu::GpuError> {
    use crate::calibrate::gpu::{self, GpuDtype, GpuPlan, LayerShape, Peaks};
    let mut bench = gpu_bench(g.id.ordinal)?;
    let peaks =
        (g.bandwidth_bytes_per_s > 0.0 && g.flops.is_finite() && g.flops > 0.0).then_some(Peaks {
            bandwidth_bytes_per_s: g.bandwidth_bytes_per_s,
            flops: g.flops,
        });
    let mut shapes: Vec<LayerShape> = Vec::new();
    let mut dtypes: Vec<GpuDtype> = Vec::new();
    if let Some(m) = spec {
        for t in m
            .tensors
            .iter()
            .filter(|t| t.shape.len() == 2 && t.layer.is_some())
        {
            if let (Ok(rows), Ok(cols)) = (u32::try_from(t.shape[0]), u32::try_from(t.shape[1])) {
                let s = LayerShape { rows, cols };
                if !shapes.contains(&s) {
                    shapes.push(s);
                }
            }
            if let crate::model::Dtype::Ggml(ty) = t.dtype
                && let Some(d) = GpuDtype::from_ggml(ty)
                && !dtypes.contains(&d)
            {
                dtypes.push(d);
            }
        }
        shapes.sort();
    }
    if shapes.is_empty() {
        shapes = gpu::DEFAULT_SHAPES.to_vec();
    }
    let plan = if quick {
        GpuPlan::quick(&shapes, peaks)
    } else {
        GpuPlan::full(&shapes, peaks)
    };
    let plan = if spec.is_some() {
        plan.limit_to(&dtypes)
    } else {
        plan
    };
    let label = g.id.to_string();
    Ok(gpu::run(
        bench.as_mut(),
        &plan,
        &mut |p| progress(p.step, p.total, &format!("{label} {}", p.label)),
        stop,
    ))
}

/// What `bench` measured and, with a deployment, recorded.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Benched {
    pub report: crate::calibrate::server::Report,
    /// `None`: no deployment was given, so nothing was recorded.
    pub recorded: Option<BenchRecorded>,
}

/// Where `bench` recorded its results.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BenchRecorded {
    pub deployment: String,
    pub run: i64,
    pub rows: Vec<i64>,
    /// The device profile the rows are keyed by.
    pub device_profile: String,
    /// Results not recorded, and why.
    pub skipped: Vec<String>,
}

/// The failure of a benchmark: what was asked cannot work (2), or the server or network failed (1).
pub fn bench_failure(e: crate::calibrate::server::BenchError) -> Failure {
    use crate::calibrate::server::BenchError;
    let hint = match &e {
        BenchError::Connect { .. } | BenchError::Resolve { .. } => {
            Some("is the server running there? check --url and the port it listens on")
        }
        BenchError::Stalled { .. } | BenchError::Deadline { .. } => {
            Some("raise --timeout, or lower --concurrency, --prompt-tokens or --max-tokens")
        }
        BenchError::Status { status: 404, .. } => Some(
            "the server has no such endpoint: --url is its base (http://HOST:PORT); --chat uses /v1/chat/completions",
        ),
        BenchError::Status { status: 400, .. } => Some(
            "the server refused the request: --strict-openai drops ignore_eos and cache_prompt, --served-model names the model",
        ),
        _ => None,
    };
    let code = if e.is_usage() {
        exit::USAGE
    } else {
        exit::RUNTIME
    };
    let f = Failure::new(code, e);
    match hint {
        Some(h) => f.hint(h),
        None => f,
    }
}

/// `bench`: measures a running OpenAI-compatible server and, given the deployment document it was started
/// from, records the results against that deployment's device, model and configuration in one complete run
/// (`ttft_ms`, `tpot_ms`, `decode_tokens_per_s` per concurrency, `sequences` = the concurrency), so the next
/// `resolve` for the same configuration reports the measured decode rate. The deployment and the store are
/// checked before any request is sent.
pub fn bench(
    sources: &Sources,
    deployment: Option<&Path>,
    cfg: &crate::calibrate::server::Config,
    progress: &dyn Fn(&str),
) -> Result<Benched, Failure> {
    use crate::calibrate::server;
    cfg.validate().map_err(bench_failure)?;
    let target = match deployment {
        None => None,
        Some(path) => {
            let planned = Planned::read(path)?;
            let device = planned.device(&planned.throughput_device()?)?;
            let per_sequence = u64::from(planned.settings.context_per_sequence);
            let asked = u64::from(cfg.prompt_tokens) + u64::from(cfg.max_tokens);
            if asked > per_sequence {
                return Err(planned
                    .usage(format!(
                        "--prompt-tokens {} plus --max-tokens {} exceed the {per_sequence} tokens a sequence holds in this deployment",
                        cfg.prompt_tokens, cfg.max_tokens
                    ))
                    .hint("lower --prompt-tokens or --max-tokens"));
            }
            let store = sources.store()?;
            let target = server::Target {
                device,
                model: planned.model(),
                shape: planned.shape(),
                parallel: planned.settings.parallel,
            };
            Some((planned, store, target))
        }
    };
    let report = server::run(cfg, progress).map_err(bench_failure)?;
    let Some((planned, store, target)) = target else {
        return Ok(Benched {
            report,
            recorded: None,
        });
    };
    let (rows, skipped) = server::measurements(&report, &target);
    let mut new_run = planned.run("bench");
    new_run.settings = serde_json::json!({
        "url": report.url,
        "endpoint": report.endpoint,
        "served_model": report.served_model,
        "prompt_tokens": report.prompt_tokens_requested,
        "max_tokens": report.max_tokens,
        "concurrency": cfg.concurrency,
        "requests": cfg.requests,
        "deployment": planned.doc.settings,
    })
    .to_string();
    let run = store.begin_run(&new_run).map_err(store_failure)?;
    let ids = rows
        .iter()
        .map(|m| store.record(run, m))
        .collect::<Result<Vec<i64>, _>>()
        .map_err(store_failure)?;
    store
        .finish_run(run, &now_rfc3339())
        .map_err(store_failure)?;
    Ok(Benched {
        report,
        recorded: Some(BenchRecorded {
            deployment: planned.path.display().to_string(),
            run: run.0,
            rows: ids,
            device_profile: target.device.profile,
            skipped,
        }),
    })
}
