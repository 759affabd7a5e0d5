//! A GPU's usable memory (a unified-memory GPU's working set) and the inventory GPU a profile describes
//! (`--hardware N x ID`).

use super::*;

/// The share of the machine's memory a unified-memory GPU may hold, from a profile's working-set tiers: the
/// first tier whose `below_memory_bytes` exceeds `memory_bytes` (or that has none). `None` when no tier
/// applies or the applying tier's fraction is not in (0, 1].
fn working_set_fraction(tiers: &[WorkingSetTier], memory_bytes: u64) -> Option<f64> {
    let t = tiers
        .iter()
        .find(|t| t.below_memory_bytes.is_none_or(|b| memory_bytes < b))?;
    (t.fraction.is_finite() && t.fraction > 0.0 && t.fraction <= 1.0).then_some(t.fraction)
}

/// GPU memory the planner may fill, with where the figure comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct UsableMemory {
    pub bytes: u64,
    pub source: String,
}

/// Why a GPU's usable memory, or the GPU a profile describes, cannot be given.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MatchError {
    /// A GPU that shares the machine's memory (Apple silicon), with no profile to say how much it may hold.
    #[error(
        "{gpu}: shares the machine's memory, and without a profile nothing says how much of it the GPU may hold"
    )]
    NoWorkingSet { gpu: String },
    /// Its profile has no working-set tier for its memory size.
    #[error(
        "{gpu}: shares the machine's memory, and profile {profile} has no gpu_working_set tier for {memory_gib:.1} GiB"
    )]
    NoWorkingSetTier {
        gpu: String,
        profile: String,
        memory_gib: f64,
    },
    /// `--hardware` named a profile that describes no GPU one can plan on.
    #[error("{profile}: {what}")]
    NotAGpu { profile: String, what: &'static str },
}

/// Bytes a GPU may hold at once. A discrete GPU: its memory. A GPU that shares the machine's memory (Apple
/// silicon's Metal): the working set the machine reported (`gpu_working_set_bytes`), else the matched
/// profile's `gpu_working_set` share of the machine's memory. An error says what is missing.
pub fn usable_gpu_bytes(
    gpu: &Gpu,
    profile: Option<&HardwareProfile>,
) -> Result<UsableMemory, MatchError> {
    if !shares_memory(gpu) {
        return Ok(UsableMemory {
            bytes: gpu.memory_total_bytes,
            source: "memory_total_bytes".into(),
        });
    }
    if let Some(ws) = gpu.gpu_working_set_bytes {
        return Ok(UsableMemory {
            bytes: ws.min(gpu.memory_total_bytes),
            source: "gpu_working_set_bytes, as the machine reports it".into(),
        });
    }
    let Some(p) = profile else {
        return Err(MatchError::NoWorkingSet {
            gpu: gpu.name.clone(),
        });
    };
    let Some(fraction) = working_set_fraction(&p.gpu_working_set, gpu.memory_total_bytes) else {
        return Err(MatchError::NoWorkingSetTier {
            gpu: gpu.name.clone(),
            profile: p.id.clone(),
            memory_gib: gib(gpu.memory_total_bytes),
        });
    };
    // Truncation is the conservative rounding; the product stays below memory_total_bytes (fraction ≤ 1).
    let bytes = (gpu.memory_total_bytes as f64 * fraction) as u64;
    let why = p
        .sources
        .get("gpu_working_set")
        .map(|s| format!(": {s}"))
        .unwrap_or_default();
    Ok(UsableMemory {
        bytes,
        source: format!(
            "profile {} gpu_working_set: {fraction} of {:.1} GiB{why}",
            p.id,
            gib(gpu.memory_total_bytes)
        ),
    })
}

/// The inventory GPU a profile describes (for `--hardware N x ID`): a discrete GPU with the profile's memory,
/// or, for a SoC profile, the machine's GPU sharing `machine_memory_bytes`. Figures the profile lacks stay
/// empty. An error for CPU classes, generic profiles and GPU profiles without a memory size.
pub fn gpu_from_profile(
    p: &HardwareProfile,
    index: u32,
    machine_memory_bytes: u64,
) -> Result<Gpu, MatchError> {
    let vendor = match p.vendor {
        Vendor::Nvidia => GpuVendor::Nvidia,
        Vendor::Amd => GpuVendor::Amd,
        Vendor::Intel => GpuVendor::Intel,
        Vendor::Apple => GpuVendor::Apple,
        Vendor::Generic => {
            return Err(MatchError::NotAGpu {
                profile: p.id.clone(),
                what: "a generic profile describes no GPU",
            });
        }
    };
    let (memory, unified) = match p.kind {
        DeviceKind::Cpu => {
            return Err(MatchError::NotAGpu {
                profile: p.id.clone(),
                what: "a CPU class, not a GPU",
            });
        }
        DeviceKind::Soc => (machine_memory_bytes, true),
        DeviceKind::Gpu => (
            p.memory
                .plannable_bytes()
                .ok_or_else(|| MatchError::NotAGpu {
                    profile: p.id.clone(),
                    what: "a GPU profile without memory.size_bytes",
                })?,
            false,
        ),
    };
    let bandwidth = p.memory.bandwidth_gb_s * 1e9;
    Ok(Gpu {
        index,
        name: p.name.clone(),
        vendor,
        memory_total_bytes: memory,
        memory_free_bytes: memory,
        compute_capability: p.compute_capability.clone(),
        uuid: None,
        pci_bus_id: None,
        pci_id: p.matching.pci_ids.first().cloned(),
        memory_used_bytes: None,
        sm_count: p.sms,
        max_sm_clock_mhz: p.boost_clock_mhz,
        max_memory_clock_mhz: None,
        memory_bus_width_bits: p.memory.bus_width_bits,
        memory_data_rate_mt_s: None,
        peak_bandwidth_bytes_per_s: (bandwidth.is_finite()
            && bandwidth > 0.0
            && bandwidth < u64::MAX as f64)
            .then_some(bandwidth as u64),
        pcie_generation: p.interconnect.as_ref().and_then(|i| i.pcie_gen),
        pcie_width: p.interconnect.as_ref().and_then(|i| i.pcie_lanes),
        power_limit_w: p.tdp_w,
        driver_version: None,
        cuda_driver_version: None,
        mig_enabled: None,
        processes: Vec::new(),
        unified_memory: unified,
        gpu_working_set_bytes: None,
        backend: None,
        source: Some(GpuSource::Fixture),
    })
}
