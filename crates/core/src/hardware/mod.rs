//! Hardware inventory: CPU, system memory (bounded by container limits) and GPUs, as values: read from a YAML
//! file here, probed live by `optimizer_machine::probe`. Everything downstream takes an [`Inventory`] value and
//! never queries devices itself; the [`Probe`] trait is the seam between the two.

pub mod cluster;
mod inventory;

use std::path::{Path, PathBuf};

pub(crate) use cluster::Cluster;
pub use cluster::{Fabric, FabricKind, Node, Sourced, load_cluster, parse_cluster};
pub use inventory::{
    Bound, Caches, ComputeBackend, Cpu, Gpu, GpuProcess, GpuSource, GpuVendor, Inventory,
    MAX_LOGICAL_CPUS, Memory,
};

/// Most GPUs one node may hold in a plan. The largest single machines expose 16 GPUs (DGX-2, HGX-2); 64 leaves
/// room for denser ones while bounding the placement search, which grows with the GPU count.
pub const MAX_GPUS: usize = 64;

/// Where an inventory comes from.
pub trait Probe {
    fn inventory(&self) -> Result<Inventory, InventoryError>;
    /// `probe` or `inventory`, for provenance.
    fn source(&self) -> &'static str;
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
    parse_inventory(&text).map_err(|e| InventoryError::Invalid {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// Reads a regular file of at most `max_bytes` (a FIFO would hang the read, `/dev/zero` would never end it):
/// what makes the file unusable as input is `Invalid`, the rest `Io`.
fn read_bounded(path: &Path, max_bytes: u64, what: &'static str) -> Result<String, InventoryError> {
    optimizer_input::input::read_text_bounded(path, max_bytes, what).map_err(|source| {
        if optimizer_input::input::is_invalid_input(&source) {
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

/// Why inventory text is not a usable inventory: the YAML does not type, or a figure contradicts another.
/// The messages are those `InventoryError::Invalid` carries after the file's path.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvalidInventory {
    /// The YAML does not parse or type (the message of `optimizer_input::yaml::from_str`).
    #[error("{0}")]
    Yaml(optimizer_input::yaml::YamlError),
    #[error("cpu: physical_cores {physical} must be at least 1 and at most logical_cpus {logical}")]
    Cores { physical: u32, logical: u32 },
    #[error(
        "cpu.logical_cpus: {logical} exceeds {MAX_LOGICAL_CPUS}, the most logical CPUs a Linux kernel runs (NR_CPUS)"
    )]
    TooManyCpus { logical: u32 },
    #[error(
        "cpu.effective_cpus: {cpus} is not a CPU count; it must be a positive number of CPUs (a cgroup quota such as 2.5) at most {MAX_LOGICAL_CPUS}"
    )]
    EffectiveCpus { cpus: f64 },
    #[error("memory: available_bytes {available} exceeds total_bytes {total}")]
    AvailableMemory { available: u64, total: u64 },
    #[error("gpus[{at}]: index {index} appears twice")]
    DuplicateGpuIndex { at: usize, index: u32 },
    #[error("gpus[{at}] ({name}): memory_free_bytes {free} exceeds memory_total_bytes {total}")]
    GpuFreeMemory {
        at: usize,
        name: String,
        free: u64,
        total: u64,
    },
    #[error("gpus[{at}] ({name}): compute_capability {capability:?} is not MAJOR.MINOR")]
    ComputeCapability {
        at: usize,
        name: String,
        capability: String,
    },
}

/// Parses inventory YAML and checks what the types cannot: GPU memory and indices.
pub fn parse_inventory(text: &str) -> Result<Inventory, InvalidInventory> {
    let inv: Inventory = optimizer_input::yaml::from_str(text).map_err(InvalidInventory::Yaml)?;
    validate(&inv)?;
    Ok(inv)
}

fn validate(inv: &Inventory) -> Result<(), InvalidInventory> {
    if inv.cpu.physical_cores == 0 || inv.cpu.logical_cpus < inv.cpu.physical_cores {
        return Err(InvalidInventory::Cores {
            physical: inv.cpu.physical_cores,
            logical: inv.cpu.logical_cpus,
        });
    }
    if inv.cpu.logical_cpus > MAX_LOGICAL_CPUS {
        return Err(InvalidInventory::TooManyCpus {
            logical: inv.cpu.logical_cpus,
        });
    }
    // A quota of 0.5 CPUs is real (`cpu.max` 50000 100000); NaN, infinities, zero and negatives are not, and
    // would silently plan one thread.
    if let Some(c) = inv.cpu.effective_cpus
        && !(c.is_finite() && c > 0.0 && c <= f64::from(MAX_LOGICAL_CPUS))
    {
        return Err(InvalidInventory::EffectiveCpus { cpus: c });
    }
    if inv.memory.available_bytes > inv.memory.total_bytes {
        return Err(InvalidInventory::AvailableMemory {
            available: inv.memory.available_bytes,
            total: inv.memory.total_bytes,
        });
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, g) in inv.gpus.iter().enumerate() {
        if !seen.insert(g.index) {
            return Err(InvalidInventory::DuplicateGpuIndex {
                at: i,
                index: g.index,
            });
        }
        if g.memory_free_bytes > g.memory_total_bytes {
            return Err(InvalidInventory::GpuFreeMemory {
                at: i,
                name: g.name.clone(),
                free: g.memory_free_bytes,
                total: g.memory_total_bytes,
            });
        }
        if let Some(cc) = &g.compute_capability
            && parse_capability(cc).is_none()
        {
            return Err(InvalidInventory::ComputeCapability {
                at: i,
                name: g.name.clone(),
                capability: cc.clone(),
            });
        }
    }
    Ok(())
}

/// `"8.9"` → (8, 9).
pub(crate) fn parse_capability(cc: &str) -> Option<(u32, u32)> {
    let (a, b) = cc.split_once('.')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}
