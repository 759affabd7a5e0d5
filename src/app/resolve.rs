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
    /// `--host-memory` / `--host-cores`: the planned node's host in place of the probed or inventory one.
    pub host: HostOverride,
    /// `--nodes N`: N identical nodes of the node profile `gpus` names, joined by the fabric that profile
    /// states, planned as `--cluster` plans a cluster of them (`None`: one machine).
    pub nodes: Option<u32>,
}

/// The host of the planned node as the user states it (`--host-memory 512GiB --host-cores 64`); each figure
/// absent keeps the probed, inventory or cluster host's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostOverride {
    pub memory_bytes: Option<u64>,
    /// Physical cores; the logical CPUs are set equal (no SMT is assumed: threads are planned per physical
    /// core, `cpu-threads` rules).
    pub cores: Option<u32>,
}

impl HostOverride {
    pub fn is_empty(&self) -> bool {
        self.memory_bytes.is_none() && self.cores.is_none()
    }

    /// The inventory with this host: memory total and available both the stated size (a planned node is idle),
    /// without the probe's cgroup bound; cores physical and logical, without the probe's CPU quota. Each change
    /// is recorded in the inventory's notes.
    pub fn apply(&self, inv: &mut Inventory) {
        if let Some(bytes) = self.memory_bytes {
            inv.memory.total_bytes = bytes;
            inv.memory.available_bytes = bytes;
            inv.memory.host_total_bytes = None;
            inv.memory.bound = None;
            inv.notes
                .push(format!("host memory {bytes} bytes from --host-memory"));
        }
        if let Some(cores) = self.cores {
            inv.cpu.physical_cores = cores;
            inv.cpu.logical_cpus = cores;
            inv.cpu.effective_cpus = None;
            inv.cpu.cpu_bound = None;
            inv.notes
                .push(format!("host cores {cores} from --host-cores"));
        }
    }
}

/// What `resolve` plans.
#[derive(Debug, Clone)]
pub struct ResolveRequest {
    pub model: PathBuf,
    pub workload: String,
    pub hardware: Hardware,
    pub overrides: Overrides,
    /// `--sla-ttft-ms` / `--sla-tpot-ms`: targets replacing the workload preset's.
    pub sla: SlaTargets,
    /// Round the probed free memory down to [`STABLE_FREE_GRANULARITY`] so that re-running on an idle machine
    /// writes the same bytes (`--stable`, the default with `-o FILE`).
    pub stable: bool,
}

/// SLA targets given by flag (`--sla-ttft-ms`, `--sla-tpot-ms`), each replacing the workload preset's own;
/// `resolve` and `recommend` apply them the same way ([`SlaTargets::apply`]), so an option `recommend` ranked
/// under them re-resolves to the same plan.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SlaTargets {
    pub time_to_first_token_ms: Option<f64>,
    pub time_per_output_token_ms: Option<f64>,
}

impl SlaTargets {
    pub fn is_empty(&self) -> bool {
        self.time_to_first_token_ms.is_none() && self.time_per_output_token_ms.is_none()
    }

    /// The workload with each given target in place of the preset's.
    pub fn apply(&self, w: &crate::profile::WorkloadProfile) -> crate::profile::WorkloadProfile {
        let mut w = w.clone();
        if let Some(ms) = self.time_to_first_token_ms {
            w.sla.time_to_first_token_ms = Some(ms);
        }
        if let Some(ms) = self.time_per_output_token_ms {
            w.sla.time_per_output_token_ms = Some(ms);
        }
        w
    }

    /// `(flag, document key, the target given, the preset's)` for each target.
    fn given(
        &self,
        preset: &crate::profile::WorkloadProfile,
    ) -> [(&'static str, &'static str, Option<f64>, Option<f64>); 2] {
        [
            (
                "--sla-ttft-ms",
                "workload.time_to_first_token_ms",
                self.time_to_first_token_ms,
                preset.sla.time_to_first_token_ms,
            ),
            (
                "--sla-tpot-ms",
                "workload.time_per_output_token_ms",
                self.time_per_output_token_ms,
                preset.sla.time_per_output_token_ms,
            ),
        ]
    }

    /// The `resolve` flags that give these targets (`f64`'s `Display` is the shortest form that reads back to
    /// the same value, so the flags re-plan exactly).
    pub fn flags(&self) -> String {
        let mut s = String::new();
        if let Some(ms) = self.time_to_first_token_ms {
            s.push_str(&format!(" --sla-ttft-ms {ms}"));
        }
        if let Some(ms) = self.time_per_output_token_ms {
            s.push_str(&format!(" --sla-tpot-ms {ms}"));
        }
        s.trim_start().to_string()
    }
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
    resolve_loaded(sources, req, &spec, workload)
}

/// [`resolve`] with the model already read and the workload already looked up (`req.model` and `req.workload`
/// are not read again): `recommend` plans one model on many machines through here, so each option's plan is
/// exactly `resolve`'s for the same hardware.
pub fn resolve_loaded(
    sources: &Sources,
    req: &ResolveRequest,
    spec: &crate::model::ModelSpec,
    workload: &crate::profile::WorkloadProfile,
) -> Result<Deployment, Failure> {
    let set = sources.profiles()?;
    let preset = workload;
    let applied;
    let workload = if req.sla.is_empty() {
        preset
    } else {
        applied = req.sla.apply(preset);
        &applied
    };
    let mut fabric = None;
    let (mut inv, mut source, mut nodes) = match &req.hardware.cluster {
        Some(path) => {
            let (inv, nodes, f) = cluster_node(path)?;
            fabric = f;
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
    let mut warnings = Vec::new();
    let node = req
        .hardware
        .gpus
        .as_ref()
        .and_then(|(n, id)| set.lookup_node(id).map(|e| (*n, &e.value)));
    if let Some((n, node)) = node {
        inv = with_node(inv, n, node, &req.hardware.host, set)?;
        source = "profile";
        if let Some(count) = req.hardware.nodes {
            (nodes, fabric) = node_fabric(node, count)?;
        }
    } else if let Some(count) = req.hardware.nodes {
        return Err(Failure::new(
            exit::USAGE,
            anyhow::anyhow!(
                "--nodes {count}: {} names no node profile; --nodes takes --hardware NODE (`optimizer profiles list --kind nodes`), or describe the nodes with --cluster",
                req.hardware
                    .gpus
                    .as_ref()
                    .map_or("no --hardware".to_string(), |(_, id)| format!(
                        "--hardware {id}"
                    ))
            ),
        ));
    } else {
        // Before the GPUs: an Apple SoC's GPU takes the machine's memory, which the override may set.
        req.hardware.host.apply(&mut inv);
    }
    if let Some((n, id)) = req.hardware.gpus.as_ref().filter(|_| node.is_none()) {
        inv = with_profiled_gpus(inv, *n, id, set)?;
        if source == "probe" && req.hardware.host.is_empty() {
            warnings.push(format!(
                "--hardware {n}x:{id} planned with this machine's host ({:.1} GiB of memory, {} physical cores), not the host such GPUs usually sit in; pass --host-memory and --host-cores (or --inventory) to plan another",
                crate::units::gib(inv.memory.total_bytes),
                inv.cpu.physical_cores
            ));
        }
        source = "profile";
    }
    // One matching of devices to profiles: the store is asked about the fleet's devices, and the planner plans
    // on the same fleet.
    let mut fleet =
        crate::fleet::build(&inv, set, plan::runtime_for(spec, workload, &req.overrides)).map_err(
            |e| {
                plan_failure(
                    PlanError::Profile(e.0),
                    &req.model,
                    source,
                    crate::profile::RuntimeId::Any,
                )
            },
        )?;
    fleet.nodes = nodes;
    if let Some(t) = &req.overrides.kv_type
        && fleet.runtime == crate::profile::RuntimeId::Torch
    {
        return Err(Failure::new(
            exit::USAGE,
            anyhow::anyhow!(
                "--kv-type {t}: the torch runtime trains and keeps no KV cache; the KV cache type is planned for llama.cpp and vLLM"
            ),
        ));
    }
    let overrides = with_draft(&req.overrides, fleet.runtime)?;
    let mut overrides = with_mmproj(overrides, fleet.runtime)?;
    if fabric.is_some() {
        overrides.to_mut().fabric = fabric;
    }
    let evidence = sources.evidence(&fleet.profile_ids(), &spec.fingerprint)?;
    // Launch artifacts name the model by its absolute path, so they work from wherever they are run, not only
    // from the directory `resolve` ran in (the model was read above, so it exists).
    let path = launch_path(&req.model);
    let inputs = Inputs {
        model: spec,
        model_path: &path,
        inventory: &inv,
        hardware_source: source,
        profiles: set,
        workload,
        evidence: &evidence,
        overrides: &overrides,
    };
    let runtime = fleet.runtime;
    let mut doc = plan::resolve_fleet(&inputs, fleet)
        .map_err(|e| plan_failure(e, &req.model, source, runtime))?;
    warnings.extend(idle_gpus(&doc, &inv));
    doc.warnings.extend(warnings);
    for (flag, key, given, from) in req.sla.given(preset) {
        if let Some(ms) = given {
            doc.provenance.insert(
                key.into(),
                crate::emit::Provenance {
                    source: crate::emit::Source::User,
                    detail: format!(
                        "{flag} {ms}, in place of workload {}'s {}",
                        preset.id,
                        from.map_or("none".to_string(), |t| format!("{t} ms"))
                    ),
                },
            );
        }
    }
    Ok(doc)
}

/// `--nodes N` on a node profile: the node count, and the profile's fabric as a cluster file states one (its
/// sources from the profile's `sources`). One node needs no fabric; more need the profile to state one, since
/// a plan across nodes is priced by it.
fn node_fabric(
    node: &crate::profile::NodeProfile,
    count: u32,
) -> Result<(u32, Option<crate::hardware::Fabric>), Failure> {
    use crate::hardware::{Fabric, Sourced};
    let max = crate::hardware::cluster::MAX_CLUSTER_NODES;
    if count == 0 || u64::from(count) > max {
        return Err(Failure::new(
            exit::USAGE,
            anyhow::anyhow!("--nodes {count}: expected 1 to {max} nodes"),
        ));
    }
    if count == 1 {
        return Ok((1, None));
    }
    let Some(f) = &node.fabric else {
        return Err(Failure::new(
            exit::USAGE,
            anyhow::anyhow!(
                "--nodes {count}: node profile {} states no fabric between nodes, and a plan across nodes is priced by it; describe the nodes and their fabric with --cluster FILE (`optimizer schema cluster`)",
                node.id
            ),
        ));
    };
    let source = |field: &str| {
        let text = node
            .sources
            .get(&format!("fabric.{field}"))
            .or_else(|| node.sources.get("fabric"))
            .cloned()
            .unwrap_or_default();
        format!("node profile {}: {text}", node.id)
    };
    Ok((
        count,
        Some(Fabric {
            kind: f.kind,
            links_per_node: Some(Sourced {
                value: f.links_per_node,
                source: source("links_per_node"),
            }),
            bandwidth_gb_s: Some(Sourced {
                value: f.link_gb_s,
                source: source("link_gb_s"),
            }),
            latency_us: f.latency_us.map(|l| Sourced {
                value: l,
                source: source("latency_us"),
            }),
        }),
    ))
}

/// A path as launch artifacts name it: absolute, so they work from wherever they are run (as given when it
/// cannot be resolved).
fn launch_path(path: &std::path::Path) -> String {
    std::fs::canonicalize(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}

/// A file planned beside the model (`--model-draft`, `--mmproj`), read with the model's bounded reader: only
/// llama.cpp plans one, so the other runtimes refuse `flag` (exit 2) saying `what` they do not plan and `how`
/// llama.cpp does. Returns the path launch artifacts name and the file's spec.
fn load_companion(
    flag: &str,
    path: &std::path::Path,
    runtime: crate::profile::RuntimeId,
    what: &str,
    how: &str,
) -> Result<(String, std::sync::Arc<crate::model::ModelSpec>), Failure> {
    if runtime != crate::profile::RuntimeId::LlamaCpp {
        return Err(Failure::new(
            exit::USAGE,
            anyhow::anyhow!(
                "{flag} {}: the {runtime} runtime plans no {what}; {how}",
                path.display()
            ),
        ));
    }
    let spec = crate::model::load(path)?;
    Ok((launch_path(path), std::sync::Arc::new(spec)))
}

/// The overrides with `--model-draft` loaded ([`load_companion`]).
fn with_draft(
    ov: &Overrides,
    runtime: crate::profile::RuntimeId,
) -> Result<std::borrow::Cow<'_, Overrides>, Failure> {
    let Some(path) = &ov.draft_model else {
        return Ok(std::borrow::Cow::Borrowed(ov));
    };
    let (path, spec) = load_companion(
        "--model-draft",
        path,
        runtime,
        "draft model",
        "speculative decoding with a draft model is planned for llama.cpp (llama-server -md)",
    )?;
    Ok(std::borrow::Cow::Owned(Overrides {
        draft: Some(crate::runtime::DraftModel { path, spec }),
        ..ov.clone()
    }))
}

/// The overrides with `--mmproj` loaded ([`load_companion`]); a file that is no projector (`general.architecture`
/// other than `clip`, the key tools/mtmd/clip.cpp's loader reads its `clip.*` hparams under) is invalid input
/// (exit 4).
fn with_mmproj(
    ov: std::borrow::Cow<'_, Overrides>,
    runtime: crate::profile::RuntimeId,
) -> Result<std::borrow::Cow<'_, Overrides>, Failure> {
    let Some(m) = ov.mmproj.as_ref().filter(|m| m.spec.is_none()) else {
        return Ok(ov);
    };
    let given = std::path::PathBuf::from(&m.path);
    let (path, spec) = load_companion(
        "--mmproj",
        &given,
        runtime,
        "multimodal projector",
        "a projector GGUF is planned for llama.cpp (llama-server --mmproj)",
    )?;
    if spec.architecture != crate::runtime::llama_cpp::mmproj::ARCHITECTURE {
        return Err(Failure::new(
            exit::INVALID_INPUT,
            anyhow::anyhow!(
                "--mmproj {}: general.architecture is {:?}, not a multimodal projector ({:?}); pass the projector GGUF (often named mmproj-*.gguf) that goes with the model",
                given.display(),
                spec.architecture,
                crate::runtime::llama_cpp::mmproj::ARCHITECTURE
            ),
        ));
    }
    let mut owned = ov.into_owned();
    owned.mmproj = Some(crate::runtime::Projector {
        path,
        spec: Some(spec),
    });
    Ok(std::borrow::Cow::Owned(owned))
}

/// GPUs one replica of the plan runs on: the non-host devices of its memory plan.
pub(super) fn gpus_per_replica(doc: &Deployment) -> usize {
    doc.memory
        .devices
        .iter()
        .filter(|m| m.device != crate::fleet::DeviceId::HOST.to_string())
        .count()
}

/// Replicas of the plan on one node: the `llama-server-replicas` artifact's servers (one per GPU), else data
/// parallel per node (vLLM and torch).
pub(super) fn replicas_per_node(doc: &Deployment) -> usize {
    match doc.artifact("llama-server-replicas") {
        Some(a) => a
            .files
            .values()
            .map(|script| script.lines().filter(|l| l.ends_with(" &")).count())
            .sum::<usize>()
            .max(1),
        None => (doc.topology.data_parallel / doc.topology.nodes.max(1)).max(1) as usize,
    }
}

/// A warning when the plan leaves GPUs of the node unused: [`gpus_per_replica`] times [`replicas_per_node`].
/// Silence is kept only when every GPU works; the reason is the plan's own where it states one (its
/// `launch.llama-server-replicas` provenance names the host memory and cores that bound the replicas).
fn idle_gpus(doc: &Deployment, inv: &Inventory) -> Option<String> {
    let total = inv.gpus.len();
    if total == 0 || doc.status != crate::emit::Status::Fits {
        return None;
    }
    let per_replica = gpus_per_replica(doc);
    let replicas = replicas_per_node(doc);
    let used = per_replica.saturating_mul(replicas);
    if used >= total {
        return None;
    }
    let why = doc
        .provenance
        .get("launch.llama-server-replicas")
        .map(|p| format!(": {}", p.detail))
        .unwrap_or_else(|| {
            if doc.workload.objective != crate::profile::Objective::Throughput {
                format!(
                    ": workload {} optimises {:?}, so one replica is planned (a throughput workload runs one per GPU group)",
                    doc.workload.preset, doc.workload.objective
                )
            } else {
                String::new()
            }
        });
    Some(format!(
        "{} of the node's {total} GPUs stay idle: the plan uses {used} ({per_replica} per replica x {replicas}){why}",
        total - used
    ))
}

/// The node type of a cluster and how many nodes it has: a plan covers identical nodes (one replica each).
fn cluster_node(path: &Path) -> Result<(Inventory, u32, Option<crate::hardware::Fabric>), Failure> {
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
    Ok((first.inventory.clone(), nodes, cluster.fabric.clone()))
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

/// The inventory of a node profile (`--hardware dgx-h100`): its GPUs and host, with `--host-memory` and
/// `--host-cores` over the node's figures (an Apple node's GPU shares the stated memory). A count other than
/// one (`2x:dgx-h100`) is a usage error: a node is one machine, several are a `--cluster`. A node whose GPU
/// profile is not in force (possible only in a set the tests did not validate) is invalid input naming both.
fn with_node(
    inv: Inventory,
    n: u32,
    node: &crate::profile::NodeProfile,
    host: &HostOverride,
    set: &ProfileSet,
) -> Result<Inventory, Failure> {
    if n != 1 {
        return Err(Failure::new(
            exit::USAGE,
            anyhow::anyhow!(
                "--hardware {n}x:{}: {} is a node profile ({} x {}); name it without a count, or describe several nodes with --cluster",
                node.id,
                node.name,
                node.gpus.count,
                node.gpus.profile
            ),
        ));
    }
    let gpu = set.hardware(&node.gpus.profile).ok_or_else(|| {
        Failure::new(
            exit::INVALID_INPUT,
            anyhow::anyhow!(
                "node profile {}: its GPU profile {:?} does not exist",
                node.id,
                node.gpus.profile
            ),
        )
        .hint("`optimizer profiles validate` checks the profiles in force")
    })?;
    let mut node = node.clone();
    if let Some(bytes) = host.memory_bytes {
        node.host.memory_bytes = bytes;
    }
    let mut inv = crate::profile::node_inventory(inv, &node, &gpu.value).map_err(|e| {
        Failure::new(
            exit::INVALID_INPUT,
            anyhow::anyhow!("node profile {}: {e}", node.id),
        )
    })?;
    host.apply(&mut inv);
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
