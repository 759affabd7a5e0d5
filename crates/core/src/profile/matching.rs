//! Matching a probed GPU to a hardware profile, in order: PCI id, the profile's name rules, the normalized name
//! (vendor prefixes, spacing and memory-size suffixes ignored; `Laptop GPU` kept apart from the desktop part),
//! then deriving figures from the probe and the architecture's per-SM rates (AMD: compute units and clocks; Apple:
//! the GPU-core count: `matching/vendor.rs`), then a conservative heuristic from compute capability and memory size. A usable GPU is never dropped: only one without a memory size is
//! `Unresolved`.
//!
//! Trade-off: the heuristic takes the lowest bandwidth and TFLOPS among profiled peers (same compute
//! capability, then architecture, then vendor) rather than a typical value, so an unknown GPU is planned slower
//! than it likely is, never faster; the result says so and how to replace the bounds.

use std::collections::BTreeMap;

use super::types::{
    ArchitectureRule, DeviceKind, HardwareProfile, Interconnect, MatchRules, MemorySpec,
    TensorTflops, VectorTflops, Vendor, WorkingSetTier,
};
use crate::hardware::{Gpu, GpuSource, GpuVendor, parse_capability};

/// How a GPU was matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchedBy {
    PciId,
    Name,
    /// The normalized device name equals a profile's normalized name or id.
    NormalizedName,
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
    /// No profile matched and the probe lacks the clocks a derivation needs: lower bounds for bandwidth and
    /// TFLOPS taken from profiled peers (same compute capability, architecture or vendor, no more memory).
    Heuristic {
        profile: Box<HardwareProfile>,
        /// Which bounds were taken from which profiles.
        basis: String,
        /// How to replace the bounds with real figures.
        hint: String,
    },
    /// The GPU cannot be planned for (it reports no memory size, or no profile exists to bound it).
    Unresolved { notes: Vec<String> },
}

/// Memory sizes within 10 % count as the same configuration: drivers report a little less than the
/// marketing size (an RTX 4090's 24 GiB shows as 23.99 GiB; an A100 80GB as 79.25 GiB after ECC).
const MEMORY_TOLERANCE: f64 = 0.10;

fn memory_ok(rules: &MatchRules, gpu_bytes: u64) -> bool {
    rules
        .memory_bytes
        .is_none_or(|want| within_tolerance(want, gpu_bytes))
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
/// else name (narrowed by memory). GPU and SoC profiles count (an Apple GPU matches its SoC's profile); CPU
/// classes never do. More than one means the profiles overlap.
pub(crate) fn candidates<'a>(
    profiles: impl Iterator<Item = &'a HardwareProfile> + Clone,
    name: &str,
    pci_id: Option<&str>,
    memory_bytes: u64,
) -> (Vec<&'a HardwareProfile>, Option<MatchedBy>) {
    if let Some(pci) = pci_id.map(str::to_lowercase) {
        let by_pci: Vec<_> = profiles
            .clone()
            .filter(|p| p.kind != DeviceKind::Cpu)
            .filter(|p| p.matching.pci_ids.iter().any(|id| id.to_lowercase() == pci))
            .filter(|p| memory_ok(&p.matching, memory_bytes))
            .collect();
        if !by_pci.is_empty() {
            return (by_pci, Some(MatchedBy::PciId));
        }
    }
    let by_name: Vec<_> = profiles
        .filter(|p| p.kind != DeviceKind::Cpu)
        .filter(|p| name_matches(&p.matching, name))
        .filter(|p| memory_ok(&p.matching, memory_bytes))
        .collect();
    let by = (!by_name.is_empty()).then_some(MatchedBy::Name);
    (by_name, by)
}

/// Resolves a probed GPU to a profile, or derives or bounds one.
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
    let matched = match (c.as_slice(), by) {
        // Overlaps are refused by `profiles validate`; with a user overlay that overlaps anyway, the first
        // (built-in order, then overlay order) wins deterministically.
        ([one, ..], Some(by)) => Some((*one, by)),
        _ => by_normalized_name(profiles, &gpu.name, gpu.memory_total_bytes)
            .map(|p| (p, MatchedBy::NormalizedName)),
    };
    if let Some((profile, by)) = matched {
        // An Apple GPU whose core count is known: its own bin's profile, or the rate scaled to its cores.
        return match vendor::apple_with_cores(gpu, profile, profiles) {
            Some(Ok(profile)) => Resolution::Profile { profile, by },
            Some(Err(derived)) => derived,
            None => Resolution::Profile { profile, by },
        };
    }
    if gpu.memory_total_bytes == 0 {
        return Resolution::Unresolved {
            notes: vec![format!(
                "{}: reports no memory size, so nothing can be placed on it",
                gpu.name
            )],
        };
    }
    if gpu.vendor == GpuVendor::Amd {
        return vendor::amd(gpu, profiles, architectures);
    }
    if let Some(bandwidth) = gpu.peak_bandwidth_bytes_per_s.filter(|b| *b > 0) {
        return derive(gpu, bandwidth, architectures);
    }
    heuristic(gpu, profiles, architectures)
}

/// Name tokens that say nothing about which part it is: vendor and brand prefixes, trademark marks, filler.
const NAME_NOISE: &[&str] = &[
    "nvidia",
    "geforce",
    "tesla",
    "corporation",
    "amd",
    "ati",
    "intel",
    "r",
    "tm",
    "gpu",
    "graphics",
    "with",
    "design",
];

/// Memory types that drivers append to a name (`NVIDIA H100 80GB HBM3`).
const MEMORY_TYPES: &[&str] = &[
    "gddr5", "gddr5x", "gddr6", "gddr6x", "gddr7", "hbm2", "hbm2e", "hbm3", "hbm3e",
];

/// `NVIDIA GeForce RTX 4060 Laptop GPU` → `rtx 4060 laptop`; `NVIDIA A100-SXM4-80GB` → `a100 sxm4`;
/// `Intel(R) Arc(TM) A770 Graphics` → `arc a770`. Lower case, punctuation as spaces, vendor prefixes and
/// memory-size or memory-type suffixes dropped; `Mobile`, `Notebook` and `Max-Q` become `laptop`, so a laptop
/// part never normalizes to its desktop namesake.
pub fn normalize_name(name: &str) -> String {
    let spaced: String = name
        .to_lowercase()
        .chars()
        .map(|c| if c.is_alphanumeric() { c } else { ' ' })
        .collect();
    let tokens: Vec<&str> = spaced.split_whitespace().collect();
    let mut out: Vec<&str> = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let t = tokens[i];
        i += 1;
        let is_size = t
            .strip_suffix("gb")
            .or_else(|| t.strip_suffix("gib"))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if is_size || MEMORY_TYPES.contains(&t) || NAME_NOISE.contains(&t) {
            continue;
        }
        if (t == "gb" || t == "gib")
            && out
                .last()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        {
            out.pop();
            continue;
        }
        if t == "max" && tokens.get(i) == Some(&"q") {
            i += 1;
            if !out.contains(&"laptop") {
                out.push("laptop");
            }
            continue;
        }
        let t = if t == "mobile" || t == "notebook" {
            "laptop"
        } else {
            t
        };
        if t == "laptop" && out.contains(&"laptop") {
            continue;
        }
        out.push(t);
    }
    out.join(" ")
}

/// The one GPU or SoC profile whose normalized name or id equals the device's normalized name, narrowed by
/// memory size where several do; `None` when none or several remain.
fn by_normalized_name<'a>(
    profiles: &[&'a HardwareProfile],
    name: &str,
    memory_bytes: u64,
) -> Option<&'a HardwareProfile> {
    let want = normalize_name(name);
    if want.is_empty() {
        return None;
    }
    let same: Vec<&HardwareProfile> = profiles
        .iter()
        .copied()
        .filter(|p| p.kind != DeviceKind::Cpu)
        .filter(|p| normalize_name(&p.name) == want || normalize_name(&p.id) == want)
        .filter(|p| memory_ok(&p.matching, memory_bytes))
        .collect();
    if same.len() <= 1 {
        return same.first().copied();
    }
    let sized: Vec<&HardwareProfile> = same
        .into_iter()
        .filter(|p| {
            p.memory
                .size_bytes
                .is_some_and(|s| within_tolerance(s, memory_bytes))
        })
        .collect();
    (sized.len() == 1).then(|| sized[0])
}

fn within_tolerance(want: u64, have: u64) -> bool {
    (want as f64 - have as f64).abs() <= want as f64 * MEMORY_TOLERANCE
}

/// The architecture rule whose compute-capability range holds `cc`; the narrowest range wins when ranges nest.
fn architecture_for<'a>(
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
pub(crate) fn tflops(sms: u32, clock_mhz: u32, flops_per_clock_per_sm: f64) -> f64 {
    f64::from(sms) * f64::from(clock_mhz) * 1e6 * flops_per_clock_per_sm / 1e12
}

fn derive<'a>(gpu: &Gpu, bandwidth: u64, architectures: &[&ArchitectureRule]) -> Resolution<'a> {
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
        architecture: arch.map(|a| a.id.clone()),
        compute_capability: gpu.compute_capability.clone(),
        sms: gpu.sm_count,
        boost_clock_mhz: gpu.max_sm_clock_mhz,
        tensor_tflops: tensor,
        vector_tflops: vector,
        features: arch.map(|a| a.features.clone()).unwrap_or_default(),
        ..derived_profile(gpu, bandwidth_gb_s, sources)
    };
    Resolution::Derived {
        profile: Box::new(profile),
        notes,
    }
}

/// The fields every profile derived from a probe shares: the GPU's own name, vendor, memory size and bus, power
/// limit and PCIe link, with the bandwidth and sources the derivation found; the compute figures are the caller's.
fn derived_profile(
    gpu: &Gpu,
    bandwidth_gb_s: f64,
    sources: BTreeMap<String, String>,
) -> HardwareProfile {
    HardwareProfile {
        id: format!("derived-{}", slug(&gpu.name)),
        name: gpu.name.clone(),
        vendor: vendor_of(gpu.vendor),
        kind: if gpu.unified_memory {
            DeviceKind::Soc
        } else {
            DeviceKind::Gpu
        },
        architecture: None,
        matching: MatchRules::default(),
        memory: MemorySpec {
            size_bytes: Some(gpu.memory_total_bytes),
            usable_bytes: None,
            kind: "unknown".into(),
            bandwidth_gb_s,
            bus_width_bits: gpu.memory_bus_width_bits,
            unified: gpu.unified_memory,
        },
        compute_capability: None,
        sms: None,
        boost_clock_mhz: None,
        tensor_tflops: None,
        vector_tflops: None,
        features: Vec::new(),
        tdp_w: gpu.power_limit_w,
        interconnect: gpu.pcie_generation.map(|g| Interconnect {
            pcie_gen: Some(g),
            pcie_lanes: gpu.pcie_width,
            nvlink_gb_s: None,
        }),
        cpu: None,
        gpu_working_set: Vec::new(),
        sources,
    }
}

fn vendor_of(v: GpuVendor) -> Vendor {
    match v {
        GpuVendor::Nvidia => Vendor::Nvidia,
        GpuVendor::Amd => Vendor::Amd,
        GpuVendor::Intel => Vendor::Intel,
        GpuVendor::Apple => Vendor::Apple,
    }
}

fn shares_memory(gpu: &Gpu) -> bool {
    gpu.unified_memory || gpu.vendor == GpuVendor::Apple
}

use crate::units::gib;

/// Lower bounds for a GPU no profile describes and whose probe gave no clocks: the lowest bandwidth (and, among
/// peers of its own architecture, the lowest FP16 tensor and FP32 vector TFLOPS) of the profiled peers, most
/// specific peers first (same compute capability, same architecture, same vendor, any GPU), preferring peers
/// with no more memory than it has (bandwidth grows with the bus, and the bus with the memory).
fn heuristic<'a>(
    gpu: &Gpu,
    profiles: &[&HardwareProfile],
    architectures: &[&ArchitectureRule],
) -> Resolution<'a> {
    let vendor = vendor_of(gpu.vendor);
    let kind = if shares_memory(gpu) {
        DeviceKind::Soc
    } else {
        DeviceKind::Gpu
    };
    let cc = gpu.compute_capability.as_deref().and_then(parse_capability);
    let arch = gpu
        .compute_capability
        .as_deref()
        .and_then(|c| architecture_for(c, architectures));
    let usable = |p: &&HardwareProfile| {
        p.kind == kind && p.memory.bandwidth_gb_s.is_finite() && p.memory.bandwidth_gb_s > 0.0
    };
    let same_vendor: Vec<&HardwareProfile> = profiles
        .iter()
        .copied()
        .filter(usable)
        .filter(|p| p.vendor == vendor)
        .collect();
    let profile_cc =
        |p: &HardwareProfile| p.compute_capability.as_deref().and_then(parse_capability);
    let tiers: [(Vec<&HardwareProfile>, String, bool); 4] = [
        (
            same_vendor
                .iter()
                .copied()
                .filter(|p| cc.is_some() && profile_cc(p) == cc)
                .collect(),
            format!(
                "profiled GPUs of compute capability {}",
                gpu.compute_capability.as_deref().unwrap_or("")
            ),
            true,
        ),
        (
            same_vendor
                .iter()
                .copied()
                .filter(|p| {
                    arch.is_some_and(|a| {
                        profile_cc(p).is_some_and(|c| a.compute_capability.contains(c))
                    })
                })
                .collect(),
            format!(
                "profiled GPUs of architecture {}",
                arch.map(|a| a.id.as_str()).unwrap_or("")
            ),
            true,
        ),
        (
            same_vendor.clone(),
            format!("profiled {vendor:?} devices of its kind"),
            false,
        ),
        (
            profiles
                .iter()
                .copied()
                .filter(|p| p.kind == DeviceKind::Gpu)
                .filter(|p| p.memory.bandwidth_gb_s.is_finite() && p.memory.bandwidth_gb_s > 0.0)
                .collect(),
            "profiled GPUs of any vendor".to_string(),
            false,
        ),
    ];
    let Some((peers, peers_are, same_arch)) = tiers.into_iter().find(|(p, _, _)| !p.is_empty())
    else {
        return Resolution::Unresolved {
            notes: vec![format!(
                "{}: no profile matches, the probe gave no memory clock and bus width, and no hardware \
                 profile exists to bound its figures",
                gpu.name
            )],
        };
    };
    let limit = gpu.memory_total_bytes as f64 * (1.0 + MEMORY_TOLERANCE);
    let small: Vec<&HardwareProfile> = peers
        .iter()
        .copied()
        .filter(|p| p.memory.size_bytes.is_none_or(|s| s as f64 <= limit))
        .collect();
    let (set, among) = if small.is_empty() {
        (peers, format!("{peers_are} (none has as little memory)"))
    } else {
        let among = if kind == DeviceKind::Gpu {
            format!(
                "{peers_are} with at most {:.1} GiB",
                gib(gpu.memory_total_bytes)
            )
        } else {
            peers_are
        };
        (small, among)
    };
    let min_by = |f: &dyn Fn(&HardwareProfile) -> Option<f64>| {
        set.iter()
            .filter_map(|p| f(p).filter(|x| x.is_finite() && *x > 0.0).map(|x| (x, *p)))
            .min_by(|a, b| a.0.total_cmp(&b.0))
    };
    let mut sources = BTreeMap::new();
    sources.insert(
        "memory.size_bytes".to_string(),
        "probe: memory_total_bytes".to_string(),
    );
    let Some((bandwidth_gb_s, bw_from)) = min_by(&|p| Some(p.memory.bandwidth_gb_s)) else {
        unreachable!("every peer has a positive bandwidth");
    };
    let mut basis = format!(
        "{}: no profile matches and the probe gave no memory clock and bus width; lower bounds from the {among}: \
         memory bandwidth {bandwidth_gb_s:.0} GB/s ({})",
        gpu.name, bw_from.id
    );
    sources.insert(
        "memory.bandwidth_gb_s".to_string(),
        format!(
            "heuristic: lowest bandwidth among the {among} ({})",
            bw_from.id
        ),
    );
    let mut tensor = None;
    let mut vector = None;
    if same_arch {
        if let Some((t, from)) = min_by(&|p| p.tensor_tflops.as_ref().and_then(|t| t.fp16_fp32acc))
        {
            tensor = Some(TensorTflops {
                fp16_fp32acc: Some(t),
                ..TensorTflops::default()
            });
            basis.push_str(&format!(", FP16 tensor {t:.1} TFLOPS ({})", from.id));
            sources.insert(
                "tensor_tflops".to_string(),
                format!(
                    "heuristic: lowest FP16 tensor TFLOPS among the {among} ({})",
                    from.id
                ),
            );
        }
        if let Some((v, from)) = min_by(&|p| p.vector_tflops.as_ref().and_then(|v| v.fp32)) {
            vector = Some(VectorTflops {
                fp32: Some(v),
                fp16: None,
            });
            basis.push_str(&format!(", FP32 vector {v:.1} TFLOPS ({})", from.id));
            sources.insert(
                "vector_tflops".to_string(),
                format!(
                    "heuristic: lowest FP32 TFLOPS among the {among} ({})",
                    from.id
                ),
            );
        }
    }
    if tensor.is_none() && vector.is_none() {
        basis.push_str("; no TFLOPS bound for a device of another architecture, so prefill is bounded by bandwidth only");
    }
    let working_set = if kind == DeviceKind::Soc {
        bw_from.gpu_working_set.clone()
    } else {
        Vec::new()
    };
    if !working_set.is_empty() {
        sources.insert(
            "gpu_working_set".to_string(),
            format!("heuristic: gpu_working_set of {}", bw_from.id),
        );
    }
    let profile = HardwareProfile {
        id: format!("heuristic-{}", slug(&gpu.name)),
        name: gpu.name.clone(),
        vendor,
        kind,
        architecture: arch.map(|a| a.id.clone()),
        matching: MatchRules::default(),
        memory: MemorySpec {
            size_bytes: Some(gpu.memory_total_bytes),
            usable_bytes: None,
            kind: "unknown".into(),
            bandwidth_gb_s,
            bus_width_bits: None,
            unified: kind == DeviceKind::Soc,
        },
        compute_capability: gpu.compute_capability.clone(),
        sms: None,
        boost_clock_mhz: None,
        tensor_tflops: tensor,
        vector_tflops: vector,
        features: arch.map(|a| a.features.clone()).unwrap_or_default(),
        tdp_w: None,
        interconnect: None,
        cpu: None,
        gpu_working_set: working_set,
        sources,
    };
    let hint = format!(
        "add a hardware profile for {:?} in a --profiles directory (`optimizer profiles validate DIR` checks \
         it), or calibrate this GPU so measured figures replace these bounds",
        gpu.name
    );
    Resolution::Heuristic {
        profile: Box::new(profile),
        basis,
        hint,
    }
}

mod usable;
mod vendor;
pub(crate) use usable::MatchError;
pub use usable::{gpu_from_profile, usable_gpu_bytes};
pub use vendor::{AMD_LANES_PER_CU, APPLE_FP32_LANES_PER_CORE, apple_bin, apple_gpu_cores};

/// `NVIDIA GeForce RTX 5090` → `nvidia-geforce-rtx-5090`.
pub(crate) fn slug(name: &str) -> String {
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
