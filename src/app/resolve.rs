//! `resolve`: plan a deployment of a model on the hardware named (this machine, an inventory, profiled GPUs, a
//! cluster's node type).

use super::*;

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
    crate::model::safetensors::require_config(&req.model, &spec)?;
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
        inv = with_profiled_gpus(inv, *n, id, set)?;
        source = "profile";
    }
    // One matching of devices to profiles: the store is asked about the fleet's devices, and the planner plans
    // on the same fleet.
    let mut fleet = crate::fleet::build(
        &inv,
        set,
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
        profiles: set,
        workload,
        evidence: &evidence,
        overrides: &req.overrides,
    };
    let runtime = fleet.runtime;
    plan::resolve_fleet(&inputs, fleet).map_err(|e| plan_failure(e, &req.model, source, runtime))
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
        PlanError::Model(_) | PlanError::LlamaCppMemory(_) | PlanError::VllmMemory(_) => {
            Failure::new(
                exit::INVALID_INPUT,
                anyhow::anyhow!("{}: {e}", model.display()),
            )
        }
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
