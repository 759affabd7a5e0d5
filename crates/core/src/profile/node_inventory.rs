//! The inventory of a node profile (`--hardware dgx-h100`): the node's GPUs from their hardware profile, as
//! `--hardware Nx:ID` builds them, and the node's host (physical cores, logical CPUs, memory) in place of the
//! machine `resolve` runs on. Pure: reads profiles, touches nothing.
//!
//! Trade-off: a node profile names its CPU but not its SIMD features, so the CPU's feature list, architecture
//! and caches stay the base inventory's (they bear only on the speed of layers kept on the host); cores,
//! memory and GPUs, which bound what fits and the threads and CPU request, are the node's.

use super::matching::{MatchError, gpu_from_profile};
use super::{HardwareProfile, NodeProfile};
use crate::hardware::Inventory;

/// `base` with the node's host and GPUs: memory total and available both the node's (a planned node is
/// idle), without a cgroup bound; physical cores and logical CPUs the node's, without a CPU quota; `count`
/// GPUs built from `gpu` (an Apple SoC's GPU shares the node's memory). The change is recorded in the notes.
pub fn node_inventory(
    mut base: Inventory,
    node: &NodeProfile,
    gpu: &HardwareProfile,
) -> Result<Inventory, MatchError> {
    let host = &node.host;
    base.memory.total_bytes = host.memory_bytes;
    base.memory.available_bytes = host.memory_bytes;
    base.memory.host_total_bytes = None;
    base.memory.bound = None;
    base.memory.unified = gpu.memory.unified;
    base.cpu.model = host.cpu.clone();
    base.cpu.physical_cores = host.physical_cores;
    base.cpu.logical_cpus = host.logical_cpus.unwrap_or(host.physical_cores);
    base.cpu.effective_cpus = None;
    base.cpu.cpu_bound = None;
    base.gpus = (0..node.gpus.count)
        .map(|i| gpu_from_profile(gpu, i, host.memory_bytes))
        .collect::<Result<_, _>>()?;
    base.notes.push(format!(
        "node {}: {} x {}, {} physical cores, {} bytes of host memory (node profile)",
        node.id, node.gpus.count, gpu.id, host.physical_cores, host.memory_bytes
    ));
    Ok(base)
}
