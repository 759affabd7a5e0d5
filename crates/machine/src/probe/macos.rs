//! Apple silicon on macOS: the GPU shares the machine's memory, so it is reported from `sysctl` (memory size,
//! chip name, performance cores, and the user's GPU wired-memory limit when set) as `vendor: apple,
//! unified_memory: true`. Only the `sysctl` call is macOS-specific; parsing is a pure function tested on
//! captured output here. May touch: runs `sysctl` (macOS only).
//!
//! Trade-off: `sysctl` is asked for keyed output (`name: value`) rather than `-n`, because a missing key
//! (`iogpu.wired_limit_mb` before macOS 14, `hw.perflevel0.*` on Intel Macs) would shift `-n`'s bare lines.

use optimizer_core::hardware::{Gpu, GpuSource, GpuVendor};

/// The keys the probe asks `sysctl` for.
#[cfg(target_os = "macos")]
pub(crate) const SYSCTL_KEYS: [&str; 4] = [
    "hw.memsize",
    "machdep.cpu.brand_string",
    "hw.perflevel0.physicalcpu",
    "iogpu.wired_limit_mb",
];

/// What `sysctl` says about an Apple silicon Mac.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MacSysctl {
    pub memory_bytes: u64,
    /// `Apple M2 Max`: the chip, which is also what Metal names the GPU.
    pub chip: String,
    pub performance_cores: Option<u32>,
    /// `iogpu.wired_limit_mb` when non-zero: the user raised (or lowered) the GPU's wired-memory limit.
    pub gpu_wired_limit_bytes: Option<u64>,
}

/// MiB in bytes, for `iogpu.wired_limit_mb`.
const MIB: u64 = 1 << 20;

/// Why `sysctl` does not describe an Apple GPU.
#[derive(Debug, thiserror::Error)]
pub enum SysctlError {
    /// `sysctl` could not be started.
    #[error("sysctl could not run: {0}")]
    Run(#[source] std::io::Error),
    /// A key the probe needs is absent from the output.
    #[error("sysctl gave no {key}")]
    Missing { key: &'static str },
    #[error("hw.memsize: {0}")]
    MemorySize(#[source] std::num::ParseIntError),
    #[error("hw.memsize is 0")]
    NoMemory,
    /// An Intel Mac: no Apple GPU.
    #[error("{chip:?} is not Apple silicon: no Apple GPU")]
    NotAppleSilicon { chip: String },
}

/// Parses `sysctl hw.memsize machdep.cpu.brand_string …` output (`key: value` lines). Errors name the
/// missing or malformed key; an Intel Mac (no `Apple` chip) is an error, since it has no Apple GPU.
pub fn parse_sysctl(text: &str) -> Result<MacSysctl, SysctlError> {
    let get = |key: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == key).then(|| v.trim())
        })
    };
    let memory_bytes = get("hw.memsize")
        .ok_or(SysctlError::Missing { key: "hw.memsize" })?
        .parse::<u64>()
        .map_err(SysctlError::MemorySize)?;
    if memory_bytes == 0 {
        return Err(SysctlError::NoMemory);
    }
    let chip = get("machdep.cpu.brand_string")
        .ok_or(SysctlError::Missing {
            key: "machdep.cpu.brand_string",
        })?
        .to_string();
    if !chip.starts_with("Apple") {
        return Err(SysctlError::NotAppleSilicon { chip });
    }
    let performance_cores = get("hw.perflevel0.physicalcpu").and_then(|v| v.parse().ok());
    let gpu_wired_limit_bytes = get("iogpu.wired_limit_mb")
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|mb| *mb > 0)
        .and_then(|mb| mb.checked_mul(MIB));
    Ok(MacSysctl {
        memory_bytes,
        chip,
        performance_cores,
        gpu_wired_limit_bytes,
    })
}

/// The Apple GPU `sysctl` describes, numbered `index`, with `available_bytes` of the shared memory free.
pub fn apple_gpu(m: &MacSysctl, index: u32, available_bytes: u64) -> Gpu {
    Gpu {
        index,
        name: m.chip.clone(),
        vendor: GpuVendor::Apple,
        memory_total_bytes: m.memory_bytes,
        memory_free_bytes: available_bytes.min(m.memory_bytes),
        compute_capability: None,
        uuid: None,
        pci_bus_id: None,
        pci_id: None,
        memory_used_bytes: None,
        sm_count: None,
        max_sm_clock_mhz: None,
        max_memory_clock_mhz: None,
        memory_bus_width_bits: None,
        memory_data_rate_mt_s: None,
        peak_bandwidth_bytes_per_s: None,
        pcie_generation: None,
        pcie_width: None,
        power_limit_w: None,
        driver_version: None,
        cuda_driver_version: None,
        mig_enabled: None,
        processes: Vec::new(),
        unified_memory: true,
        gpu_working_set_bytes: m.gpu_wired_limit_bytes.map(|b| b.min(m.memory_bytes)),
        backend: None,
        source: Some(GpuSource::Sysctl),
    }
}

/// Runs `sysctl` and returns the Apple GPU, or a note saying why there is none.
#[cfg(target_os = "macos")]
pub(crate) fn probe(index: u32, available_bytes: u64) -> Result<Gpu, SysctlError> {
    let out = std::process::Command::new("sysctl")
        .args(SYSCTL_KEYS)
        .output()
        .map_err(SysctlError::Run)?;
    // sysctl exits non-zero when one key is unknown but still prints the others.
    let text = String::from_utf8_lossy(&out.stdout);
    let m = parse_sysctl(&text)?;
    Ok(apple_gpu(&m, index, available_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wired_limit_in_bytes() {
        let m = parse_sysctl(
            "hw.memsize: 8589934592\nmachdep.cpu.brand_string: Apple M1\niogpu.wired_limit_mb: 6144\n",
        )
        .unwrap();
        assert_eq!(m.gpu_wired_limit_bytes, Some(6144 << 20));
        assert_eq!(m.performance_cores, None);
    }
}
