//! Matching a probed GPU to a hardware profile (PCI id first, then name), and deriving a profile for a GPU
//! nobody has profiled from its probed figures and its architecture's per-SM rates, marked `heuristic`.

use std::collections::BTreeMap;

use super::types::{
    ArchitectureRule, DeviceKind, HardwareProfile, Interconnect, MatchRules, MemorySpec,
    TensorTflops, VectorTflops, Vendor,
};
use crate::hardware::{Gpu, parse_capability};

/// How a GPU was matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchedBy {
    PciId,
    Name,
}

/// The profile a GPU resolves to.
#[derive(Debug, Clone)]
pub enum Resolution<'a> {
    Profile {
        profile: &'a HardwareProfile,
        by: MatchedBy,
    },
    /// No profile matched: figures derived from the probe and the architecture rules (`heuristic`).
    Derived {
        profile: Box<HardwareProfile>,
        /// What could not be derived and why.
        notes: Vec<String>,
    },
    /// No profile matched and the probe lacks what a derivation needs (memory clock and bus width).
    Unresolved { notes: Vec<String> },
}

/// Memory sizes within 10 % count as the same configuration: drivers report a little less than the
/// marketing size (an RTX 4090's 24 GiB shows as 23.99 GiB; an A100 80GB as 79.25 GiB after ECC).
const MEMORY_TOLERANCE: f64 = 0.10;

fn memory_ok(rules: &MatchRules, gpu_bytes: u64) -> bool {
    rules.memory_bytes.is_none_or(|want| {
        let diff = (want as f64 - gpu_bytes as f64).abs();
        diff <= want as f64 * MEMORY_TOLERANCE
    })
}

/// Whether a device name satisfies a profile's name rules (case-insensitive; all `name_contains`, no
/// `name_excludes`). Rules with no `name_contains` never match by name.
pub fn name_matches(rules: &MatchRules, name: &str) -> bool {
    let n = name.to_lowercase();
    !rules.name_contains.is_empty()
        && rules
            .name_contains
            .iter()
            .all(|p| n.contains(&p.to_lowercase()))
        && !rules
            .name_excludes
            .iter()
            .any(|p| n.contains(&p.to_lowercase()))
}

/// The profiles a device could match, at the first level that matches anything: PCI id (narrowed by memory),
/// else name (narrowed by memory). More than one means the profiles overlap.
pub fn candidates<'a>(
    profiles: impl Iterator<Item = &'a HardwareProfile> + Clone,
    name: &str,
    pci_id: Option<&str>,
    memory_bytes: u64,
) -> (Vec<&'a HardwareProfile>, Option<MatchedBy>) {
    if let Some(pci) = pci_id.map(str::to_lowercase) {
        let by_pci: Vec<_> = profiles
            .clone()
            .filter(|p| p.kind == DeviceKind::Gpu)
            .filter(|p| p.matching.pci_ids.iter().any(|id| id.to_lowercase() == pci))
            .filter(|p| memory_ok(&p.matching, memory_bytes))
            .collect();
        if !by_pci.is_empty() {
            return (by_pci, Some(MatchedBy::PciId));
        }
    }
    let by_name: Vec<_> = profiles
        .filter(|p| p.kind == DeviceKind::Gpu)
        .filter(|p| name_matches(&p.matching, name))
        .filter(|p| memory_ok(&p.matching, memory_bytes))
        .collect();
    let by = (!by_name.is_empty()).then_some(MatchedBy::Name);
    (by_name, by)
}

/// Resolves a probed GPU to a profile, or derives one.
pub fn resolve<'a>(
    gpu: &Gpu,
    profiles: &'a [&'a HardwareProfile],
    architectures: &[&ArchitectureRule],
) -> Resolution<'a> {
    let (c, by) = candidates(
        profiles.iter().copied(),
        &gpu.name,
        gpu.pci_id.as_deref(),
        gpu.memory_total_bytes,
    );
    match (c.as_slice(), by) {
        ([one, ..], Some(by)) => Resolution::Profile {
            // Overlaps are refused by `profiles validate`; with a user overlay that overlaps anyway, the first
            // (built-in order, then overlay order) wins deterministically.
            profile: one,
            by,
        },
        _ => derive(gpu, architectures),
    }
}

/// The architecture rule whose compute-capability range holds `cc`; the narrowest range wins when ranges nest.
pub fn architecture_for<'a>(
    cc: &str,
    architectures: &[&'a ArchitectureRule],
) -> Option<&'a ArchitectureRule> {
    let want = parse_capability(cc)?;
    architectures
        .iter()
        .filter(|a| a.compute_capability.contains(want))
        .min_by_key(|a| {
            let (lo, hi) = a.compute_capability.bounds();
            let (lo, hi) = (lo.unwrap_or((0, 0)), hi.unwrap_or((u32::MAX, u32::MAX)));
            (hi.0.saturating_sub(lo.0), hi.1.saturating_sub(lo.1))
        })
        .copied()
}

/// TFLOPS from SMs × clock × per-SM rate.
pub fn tflops(sms: u32, clock_mhz: u32, flops_per_clock_per_sm: f64) -> f64 {
    f64::from(sms) * f64::from(clock_mhz) * 1e6 * flops_per_clock_per_sm / 1e12
}

fn derive<'a>(gpu: &Gpu, architectures: &[&ArchitectureRule]) -> Resolution<'a> {
    let mut notes = Vec::new();
    let mut sources = BTreeMap::new();
    let arch = gpu
        .compute_capability
        .as_deref()
        .and_then(|cc| architecture_for(cc, architectures));
    if arch.is_none() {
        notes.push(format!(
            "no architecture rule covers compute capability {}: TFLOPS unknown",
            gpu.compute_capability.as_deref().unwrap_or("(none)")
        ));
    }
    sources.insert(
        "memory.size_bytes".to_string(),
        "probe: memory_total_bytes".to_string(),
    );
    let Some(bandwidth) = gpu.peak_bandwidth_bytes_per_s else {
        notes.push(format!(
            "{}: no profile matches and the probe gave no memory clock and bus width, so its bandwidth \
             cannot be derived; add a hardware profile for it",
            gpu.name
        ));
        return Resolution::Unresolved { notes };
    };
    sources.insert(
        "memory.bandwidth_gb_s".into(),
        "heuristic: probed max memory clock × 2 transfers × bus width / 8".into(),
    );
    let bandwidth_gb_s = bandwidth as f64 / 1e9;
    let tensor = match (arch, gpu.sm_count, gpu.max_sm_clock_mhz) {
        (Some(a), Some(sms), Some(clk)) => {
            sources.insert(
                "tensor_tflops".into(),
                format!(
                    "heuristic: {sms} SMs × {clk} MHz × architecture {} rates (rules)",
                    a.id
                ),
            );
            Some(TensorTflops {
                fp16_fp32acc: Some(tflops(sms, clk, a.fp16_fp32acc_flops_per_clock_per_sm)),
                fp16_fp16acc: Some(tflops(sms, clk, a.fp16_fp16acc_flops_per_clock_per_sm)),
                bf16_fp32acc: a
                    .features
                    .iter()
                    .any(|f| f == "bf16")
                    .then(|| tflops(sms, clk, a.fp16_fp32acc_flops_per_clock_per_sm)),
                ..TensorTflops::default()
            })
        }
        (Some(_), _, _) => {
            notes.push("SM count or SM clock unknown: TFLOPS unknown".into());
            None
        }
        _ => None,
    };
    let vector = match (arch, gpu.sm_count, gpu.max_sm_clock_mhz) {
        (Some(a), Some(sms), Some(clk)) => {
            sources.insert(
                "vector_tflops".into(),
                format!(
                    "heuristic: {sms} SMs × {clk} MHz × architecture {} FP32 rate",
                    a.id
                ),
            );
            Some(VectorTflops {
                fp32: Some(tflops(sms, clk, a.fp32_flops_per_clock_per_sm)),
                fp16: None,
            })
        }
        _ => None,
    };
    let profile = HardwareProfile {
        id: format!("derived-{}", slug(&gpu.name)),
        name: gpu.name.clone(),
        vendor: match gpu.vendor {
            crate::hardware::GpuVendor::Nvidia => Vendor::Nvidia,
            crate::hardware::GpuVendor::Amd => Vendor::Amd,
            crate::hardware::GpuVendor::Intel => Vendor::Intel,
            crate::hardware::GpuVendor::Apple => Vendor::Apple,
        },
        kind: if gpu.unified_memory {
            DeviceKind::Soc
        } else {
            DeviceKind::Gpu
        },
        architecture: arch.map(|a| a.id.clone()),
        matching: MatchRules::default(),
        memory: MemorySpec {
            size_bytes: Some(gpu.memory_total_bytes),
            kind: "unknown".into(),
            bandwidth_gb_s,
            bus_width_bits: gpu.memory_bus_width_bits,
            unified: gpu.unified_memory,
        },
        compute_capability: gpu.compute_capability.clone(),
        sms: gpu.sm_count,
        boost_clock_mhz: gpu.max_sm_clock_mhz,
        tensor_tflops: tensor,
        vector_tflops: vector,
        features: arch.map(|a| a.features.clone()).unwrap_or_default(),
        tdp_w: gpu.power_limit_w,
        interconnect: gpu.pcie_generation.map(|g| Interconnect {
            pcie_gen: Some(g),
            pcie_lanes: gpu.pcie_width,
            nvlink_gb_s: None,
        }),
        cpu: None,
        sources,
    };
    Resolution::Derived {
        profile: Box::new(profile),
        notes,
    }
}

/// `NVIDIA GeForce RTX 5090` → `nvidia-geforce-rtx-5090`.
pub fn slug(name: &str) -> String {
    let mut s = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            s.push(c.to_ascii_lowercase());
        } else if !s.ends_with('-') && !s.is_empty() {
            s.push('-');
        }
    }
    s.trim_end_matches('-').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs() {
        assert_eq!(slug("NVIDIA GeForce RTX 5090"), "nvidia-geforce-rtx-5090");
        assert_eq!(slug("  A100-SXM4-80GB "), "a100-sxm4-80gb");
    }

    #[test]
    fn name_rules() {
        let r = MatchRules {
            name_contains: vec!["RTX 4090".into()],
            name_excludes: vec!["Laptop".into(), "4090 D".into()],
            ..MatchRules::default()
        };
        assert!(name_matches(&r, "NVIDIA GeForce RTX 4090"));
        assert!(!name_matches(&r, "NVIDIA GeForce RTX 4090 Laptop GPU"));
        assert!(!name_matches(&r, "NVIDIA GeForce RTX 4090 D"));
        assert!(!name_matches(&MatchRules::default(), "anything"));
    }

    #[test]
    fn tflops_from_sms_and_clock() {
        // RTX 4090: 128 SMs × 2,520 MHz × 1,024 FLOP/clk/SM (fp16, fp16 accumulate) = 330.3 TFLOPS.
        assert!((tflops(128, 2520, 1024.0) - 330.3).abs() < 0.1);
    }
}
