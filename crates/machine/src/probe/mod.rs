//! The live probe of this machine: CPU, system memory (bounded by container limits) and GPUs, into the
//! [`Inventory`] value the planning core takes.
//!
//! Live probing degrades instead of failing: a missing NVIDIA driver, a failed NVML call, an unreadable sysfs
//! or cgroup file becomes a note in [`Inventory::notes`], never an error or a panic. GPUs: NVIDIA from NVML and
//! the CUDA driver ([`gpu`]), AMD and Intel from Linux sysfs ([`sysfs`]), Apple silicon from `sysctl` on macOS
//! ([`macos`]).

pub mod cgroup;
pub mod cpu;
pub mod gpu;
pub mod macos;
pub mod sysfs;

use std::path::Path;

use optimizer_core::hardware::{Cpu, Gpu, Inventory, InventoryError, Memory, Probe};

/// The machine this process runs on, probed for planning: as [`probe_live`], but the CUDA driver (about
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
pub(crate) fn probe_host() -> (Cpu, Memory) {
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
