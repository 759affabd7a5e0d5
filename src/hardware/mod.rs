//! Hardware inventory: CPU, system memory (bounded by container limits) and GPUs, probed live or read from a
//! YAML fixture. Edge module: the live probe reads the machine; everything downstream takes an [`Inventory`]
//! value and never queries devices itself.
//!
//! Live probing degrades instead of failing: a missing NVIDIA driver, a failed NVML call, an unreadable sysfs
//! or cgroup file becomes a note in [`Inventory::notes`], never an error or a panic. GPUs: NVIDIA from NVML and
//! the CUDA driver ([`gpu`]), AMD and Intel from Linux sysfs ([`sysfs`]), Apple silicon from `sysctl` on macOS
//! ([`macos`]).

pub mod cgroup;
pub mod cluster;
pub mod cpu;
pub mod gpu;
mod inventory;
pub mod macos;
pub mod sysfs;

use std::path::{Path, PathBuf};

pub use cluster::{Cluster, Fabric, FabricKind, Node, Sourced, load_cluster, parse_cluster};
pub use inventory::{Bound, Caches, Cpu, Gpu, GpuProcess, GpuSource, GpuVendor, Inventory, Memory};

/// Where an inventory comes from.
pub trait Probe {
    fn inventory(&self) -> Result<Inventory, InventoryError>;
    /// `probe` or `inventory`, for provenance.
    fn source(&self) -> &'static str;
}

/// The machine this process runs on.
#[derive(Debug, Default)]
pub struct LiveProbe;

impl Probe for LiveProbe {
    fn inventory(&self) -> Result<Inventory, InventoryError> {
        Ok(probe_live())
    }
    fn source(&self) -> &'static str {
        "probe"
    }
}

/// The machine this process runs on, probed for planning: as [`LiveProbe`], but the CUDA driver (about
/// 200 ms of `cuInit` on an H100 host) is asked for SM counts only for GPUs the closure says need them (the
/// caller passes "no profile describes this GPU": a known GPU's SMs come from its profile).
pub struct PlanProbe<F: Fn(&Gpu) -> bool>(pub F);

impl<F: Fn(&Gpu) -> bool> Probe for PlanProbe<F> {
    fn inventory(&self) -> Result<Inventory, InventoryError> {
        Ok(probe_live_scoped(&self.0))
    }
    fn source(&self) -> &'static str {
        "probe"
    }
}

/// An inventory YAML file (`--inventory FILE`, `OPTIMIZER_INVENTORY`).
#[derive(Debug)]
pub struct FixtureProbe(pub PathBuf);

impl Probe for FixtureProbe {
    fn inventory(&self) -> Result<Inventory, InventoryError> {
        load_inventory(&self.0)
    }
    fn source(&self) -> &'static str {
        "inventory"
    }
}

/// An inventory or cluster file could not be used: `Io` is the environment's fault (exit 1, or 2 for a missing
/// path), `Invalid` the file's (exit 4).
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error("{path}: {source}", path = path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}", path = path.display())]
    Invalid { path: PathBuf, message: String },
}

/// Inventory files are small; a larger one is not an inventory.
pub const MAX_INVENTORY_BYTES: u64 = 4 << 20;

/// Reads and checks an inventory YAML file.
pub fn load_inventory(path: &Path) -> Result<Inventory, InventoryError> {
    let text = read_bounded(path, MAX_INVENTORY_BYTES, "an inventory")?;
    parse_inventory(&text).map_err(|message| InventoryError::Invalid {
        path: path.to_path_buf(),
        message,
    })
}

/// Reads a regular file of at most `max_bytes` (a FIFO would hang the read, `/dev/zero` would never end it):
/// what makes the file unusable as input is `Invalid`, the rest `Io`.
fn read_bounded(path: &Path, max_bytes: u64, what: &'static str) -> Result<String, InventoryError> {
    crate::input::read_text_bounded(path, max_bytes, what).map_err(|source| {
        if crate::input::is_invalid_input(&source) {
            InventoryError::Invalid {
                path: path.to_path_buf(),
                message: source.to_string(),
            }
        } else {
            InventoryError::Io {
                path: path.to_path_buf(),
                source,
            }
        }
    })
}

/// Parses inventory YAML and checks what the types cannot: GPU memory and indices.
pub fn parse_inventory(text: &str) -> Result<Inventory, String> {
    let inv: Inventory = crate::yaml::from_str(text)?;
    validate(&inv)?;
    Ok(inv)
}

fn validate(inv: &Inventory) -> Result<(), String> {
    if inv.cpu.physical_cores == 0 || inv.cpu.logical_cpus < inv.cpu.physical_cores {
        return Err(format!(
            "cpu: physical_cores {} must be at least 1 and at most logical_cpus {}",
            inv.cpu.physical_cores, inv.cpu.logical_cpus
        ));
    }
    if inv.memory.available_bytes > inv.memory.total_bytes {
        return Err(format!(
            "memory: available_bytes {} exceeds total_bytes {}",
            inv.memory.available_bytes, inv.memory.total_bytes
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, g) in inv.gpus.iter().enumerate() {
        if !seen.insert(g.index) {
            return Err(format!("gpus[{i}]: index {} appears twice", g.index));
        }
        if g.memory_free_bytes > g.memory_total_bytes {
            return Err(format!(
                "gpus[{i}] ({}): memory_free_bytes {} exceeds memory_total_bytes {}",
                g.name, g.memory_free_bytes, g.memory_total_bytes
            ));
        }
        if let Some(cc) = &g.compute_capability
            && parse_capability(cc).is_none()
        {
            return Err(format!(
                "gpus[{i}] ({}): compute_capability {cc:?} is not MAJOR.MINOR",
                g.name
            ));
        }
    }
    Ok(())
}

/// `"8.9"` → (8, 9).
pub fn parse_capability(cc: &str) -> Option<(u32, u32)> {
    let (a, b) = cc.split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Probes this machine: CPU, memory bounded by cgroup limits, GPUs.
pub fn probe_live() -> Inventory {
    probe_live_scoped(&|_| true)
}

/// Probes this machine, asking the CUDA driver for the details only it has (SM counts) when NVML cannot
/// answer or `cuda_details_for` says one of the GPUs needs them ([`gpu::probe_scoped`]).
pub fn probe_live_scoped(cuda_details_for: &dyn Fn(&Gpu) -> bool) -> Inventory {
    let mut notes = Vec::new();
    let (mut cpu, mut memory) = cpu::probe(&mut notes);
    apply_cgroup_limits(&mut cpu, &mut memory, &mut notes);
    let mut gpus = gpu::probe_scoped(&mut notes, cuda_details_for);
    // AMD and Intel GPUs follow the NVIDIA ones, numbered after them.
    let next = gpus
        .iter()
        .map(|g| g.index.saturating_add(1))
        .max()
        .unwrap_or(0);
    gpus.extend(sysfs::probe(Path::new("/"), next, &mut notes));
    #[cfg(target_os = "macos")]
    {
        let next = gpus
            .iter()
            .map(|g| g.index.saturating_add(1))
            .max()
            .unwrap_or(0);
        match macos::probe(next, memory.available_bytes) {
            Ok(g) => {
                memory.unified = true;
                gpus.push(g);
            }
            Err(e) => notes.push(format!("no Apple GPU: {e}")),
        }
    }
    Inventory {
        cpu,
        memory,
        gpus,
        notes,
    }
}

/// This machine's CPU and memory with its container limits applied, without the GPUs: what `calibrate` bounds
/// its threads and arrays by (an inventory file may describe another machine, or a wrong one).
pub fn probe_host() -> (Cpu, Memory) {
    let mut notes = Vec::new();
    let (mut cpu, mut memory) = cpu::probe(&mut notes);
    apply_cgroup_limits(&mut cpu, &mut memory, &mut notes);
    (cpu, memory)
}

fn apply_cgroup_limits(cpu: &mut Cpu, memory: &mut Memory, notes: &mut Vec<String>) {
    let Ok(proc_cgroup) = std::fs::read_to_string("/proc/self/cgroup") else {
        return;
    };
    let limits = cgroup::read(Path::new("/"), &proc_cgroup);
    notes.extend(
        limits
            .notes
            .iter()
            .map(|n| format!("cgroup file ignored: {n}")),
    );
    apply_limits(cpu, memory, &limits);
}

/// Bounds host figures by container limits: effective values are the minimum of host and cgroup, and the
/// `bound` fields say which applies.
pub fn apply_limits(cpu: &mut Cpu, memory: &mut Memory, limits: &cgroup::Limits) {
    if let Some(limit) = limits.memory_bytes
        && limit < memory.total_bytes
    {
        memory.host_total_bytes = Some(memory.total_bytes);
        memory.total_bytes = limit;
        memory.available_bytes = memory.available_bytes.min(limit);
        memory.bound = limits.memory_bound;
    }
    if let Some(cpus) = limits.cpus
        && cpus < f64::from(cpu.logical_cpus)
    {
        cpu.effective_cpus = Some(cpus);
        cpu.cpu_bound = limits.cpu_bound;
    }
}
