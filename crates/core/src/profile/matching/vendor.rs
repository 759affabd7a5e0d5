//! Figures for AMD and Apple GPUs no profile describes exactly, from what their probe or inventory gives.
//!
//! AMD: FP32 and FP16 rates from the compute units and the shader clock (CUs × [`AMD_LANES_PER_CU`] lanes × 2
//! FLOP per FMA × clock), bandwidth from the inventory's peak bandwidth or bus width × data rate / 8. With a
//! bandwidth the profile is `derived`; without one it is the same-vendor `heuristic` bound with the rates that
//! could be derived laid over it. Apple: a GPU-core count (the inventory's `sm_count`, or the chip name's
//! `(40 GPU cores)` / `40-core GPU`) picks the profile of that bin among the chip's profiles, or, when none
//! has it, scales the matched profile's rate to the cores at the family clock its `vector_tflops` source gives.
//!
//! Trade-off: the AMD rate counts one FMA per lane per clock (RDNA 3/4 can dual-issue, doubling the published
//! FP32 figure, and most RDNA/CDNA parts run packed FP16 at twice the FP32 rate), since the probe does not say
//! which architecture a card is: an unprofiled card's rate is a lower bound, never a figure it cannot reach.
//! Pure: touches nothing but its arguments.

use std::collections::BTreeMap;

use super::{Resolution, derived_profile, heuristic, normalize_name, vendor_of};
use crate::hardware::Gpu;
use crate::profile::types::{
    ArchitectureRule, DeviceKind, HardwareProfile, MatchRules, VectorTflops, Vendor,
};

/// FP32 lanes per AMD compute unit: 4 SIMD16 units on GCN and CDNA, 2 SIMD32 on RDNA (AMD's "RDNA Architecture"
/// whitepaper), 64 either way. The figure `perf::gpu::AMD_LANES_PER_CU` charges, restated because `profile` may
/// not depend on `perf` (tests/it/architecture.rs; tests/it/hardware.rs checks the two agree).
pub const AMD_LANES_PER_CU: f64 = 64.0;

/// FLOP per fused multiply-add: the rates count an FMA as two operations, as vendors' peak figures do.
const FLOP_PER_FMA: f64 = 2.0;

/// FP32 lanes per Apple GPU core, the figure every apple-*.yaml `vector_tflops` derivation uses
/// (philipturner/metal-benchmarks README, Apple GPU table).
pub const APPLE_FP32_LANES_PER_CORE: f64 = 128.0;

/// Bits per byte, for bus width × data rate.
const BITS_PER_BYTE: f64 = 8.0;

/// An AMD GPU no profile matched: derived where the inventory gives a bandwidth, else bounded by AMD's profiled
/// cards, with the rates its compute units and shader clock give in both cases.
pub(super) fn amd<'a>(
    gpu: &Gpu,
    profiles: &[&HardwareProfile],
    architectures: &[&ArchitectureRule],
) -> Resolution<'a> {
    let rate = amd_rate(gpu);
    let Some((bandwidth_gb_s, bandwidth_from)) = amd_bandwidth(gpu) else {
        let mut r = heuristic(gpu, profiles, architectures);
        if let Resolution::Heuristic { hint, .. } = &mut r {
            hint.push_str(
                "; amdgpu's sysfs does not expose the compute units, bus width or memory data rate: give \
                 sm_count, memory_bus_width_bits and memory_data_rate_mt_s in an inventory file for derived figures",
            );
        }
        if let (Resolution::Heuristic { profile, basis, .. }, Some((tflops, from, cus, mhz))) =
            (&mut r, rate)
        {
            profile.vector_tflops = Some(VectorTflops {
                fp32: Some(tflops),
                fp16: Some(tflops),
            });
            profile.sms = Some(cus);
            profile.boost_clock_mhz = Some(mhz);
            profile.sources.insert("vector_tflops".into(), from.clone());
            basis.push_str(&format!("; FP32/FP16 {from}"));
        }
        return r;
    };
    let mut notes = vec![format!(
        "{}: no profile matches; memory bandwidth {bandwidth_from}",
        gpu.name
    )];
    let mut sources = BTreeMap::new();
    sources.insert(
        "memory.size_bytes".to_string(),
        "probe: memory_total_bytes".to_string(),
    );
    sources.insert("memory.bandwidth_gb_s".into(), bandwidth_from);
    let vector = match &rate {
        Some((tflops, from, _, _)) => {
            sources.insert("vector_tflops".into(), from.clone());
            notes.push(format!("FP32/FP16 {from}"));
            Some(VectorTflops {
                fp32: Some(*tflops),
                fp16: Some(*tflops),
            })
        }
        None => {
            notes.push(
                "compute units (sm_count) or shader clock (max_sm_clock_mhz) unknown: TFLOPS unknown, so \
                 prefill is bounded by bandwidth only (amdgpu's sysfs does not expose compute units; give \
                 them in the inventory)"
                    .into(),
            );
            None
        }
    };
    let mut profile = HardwareProfile {
        // An AMD GPU is planned as a discrete GPU even where the probe says its memory is shared.
        kind: DeviceKind::Gpu,
        sms: rate.as_ref().map(|r| r.2),
        boost_clock_mhz: rate.as_ref().map(|r| r.3),
        vector_tflops: vector,
        ..derived_profile(gpu, bandwidth_gb_s, sources)
    };
    profile.memory.unified = false;
    Resolution::Derived {
        profile: Box::new(profile),
        notes,
    }
}

/// GB/s and where it came from: the inventory's peak bandwidth, else bus width × data rate / 8.
fn amd_bandwidth(gpu: &Gpu) -> Option<(f64, String)> {
    if let Some(b) = gpu.peak_bandwidth_bytes_per_s.filter(|b| *b > 0) {
        return Some((
            b as f64 / 1e9,
            "derived: probe peak_bandwidth_bytes_per_s".into(),
        ));
    }
    let (bits, mts) = gpu
        .memory_bus_width_bits
        .zip(gpu.memory_data_rate_mt_s)
        .filter(|(b, r)| *b > 0 && *r > 0)?;
    let gb_s = f64::from(bits) * f64::from(mts) * 1e6 / BITS_PER_BYTE / 1e9;
    Some((
        gb_s,
        format!(
            "derived: memory_bus_width_bits {bits} × memory_data_rate_mt_s {mts} / 8 = {gb_s:.1} GB/s"
        ),
    ))
}

/// (TFLOPS, source, compute units, MHz): CUs × 64 lanes × 2 × shader clock, one FMA per lane per clock.
fn amd_rate(gpu: &Gpu) -> Option<(f64, String, u32, u32)> {
    let (cus, mhz) = gpu
        .sm_count
        .zip(gpu.max_sm_clock_mhz)
        .filter(|(c, m)| *c > 0 && *m > 0)?;
    let tflops = f64::from(cus) * AMD_LANES_PER_CU * FLOP_PER_FMA * f64::from(mhz) * 1e6 / 1e12;
    Some((
        tflops,
        format!(
            "derived: sm_count {cus} compute units × {AMD_LANES_PER_CU} lanes × {FLOP_PER_FMA} FLOP (FMA) × \
             max_sm_clock_mhz {mhz} = {tflops:.2} TFLOPS (single issue: a lower bound on RDNA 3/4 and packed FP16)"
        ),
        cus,
        mhz,
    ))
}

/// GPU cores an Apple GPU reports: the inventory's `sm_count`, else `N GPU cores` or `N-core GPU` in its name.
pub fn apple_gpu_cores(gpu: &Gpu) -> Option<u32> {
    if let Some(c) = gpu.sm_count.filter(|c| *c > 0) {
        return Some(c);
    }
    let spaced: String = gpu
        .name
        .to_lowercase()
        .chars()
        .map(|c| if c.is_alphanumeric() { c } else { ' ' })
        .collect();
    let t: Vec<&str> = spaced.split_whitespace().collect();
    let is_core = |s: Option<&&str>| s.is_some_and(|s| *s == "core" || *s == "cores");
    let is_gpu = |s: Option<&&str>| s.is_some_and(|s| *s == "gpu");
    (0..t.len()).find_map(|i| {
        let n: u32 = t[i].parse().ok().filter(|n| *n > 0)?;
        let (a, b) = (t.get(i + 1), t.get(i + 2));
        ((is_gpu(a) && is_core(b)) || (is_core(a) && is_gpu(b))).then_some(n)
    })
}

/// (GPU cores, MHz) of the bin an Apple profile's FP32 rate describes, read from its sourced derivation
/// (`derived: 40 GPU cores x 128 FP32 lanes x 2 FLOP (FMA) x 1380 MHz = ...`).
pub fn apple_bin(p: &HardwareProfile) -> Option<(u32, u32)> {
    let s = p.sources.get("vector_tflops")?.strip_prefix("derived: ")?;
    let (cores, rest) = s.split_once(" GPU cores x ")?;
    let (_, rest) = rest.split_once(" FLOP (FMA) x ")?;
    let (mhz, _) = rest.split_once(" MHz")?;
    Some((cores.trim().parse().ok()?, mhz.trim().parse().ok()?))
}

/// An Apple GPU whose core count is known and that matched `matched`: the same chip's profile of that bin, or
/// `matched` with its rate scaled to the cores (`None`: keep `matched`, its bin is the GPU's or unknown).
pub(super) fn apple_with_cores<'a>(
    gpu: &Gpu,
    matched: &'a HardwareProfile,
    profiles: &[&'a HardwareProfile],
) -> Option<Result<&'a HardwareProfile, Resolution<'a>>> {
    if matched.vendor != vendor_of(gpu.vendor) || matched.vendor != Vendor::Apple {
        return None;
    }
    let cores = apple_gpu_cores(gpu)?;
    let (bin, mhz) = apple_bin(matched)?;
    if bin == cores {
        return None;
    }
    let chip = normalize_name(&matched.name);
    if let Some(same) = profiles.iter().copied().find(|p| {
        p.vendor == Vendor::Apple
            && normalize_name(&p.name) == chip
            && apple_bin(p).is_some_and(|(c, _)| c == cores)
    }) {
        return Some(Ok(same));
    }
    let tflops =
        f64::from(cores) * APPLE_FP32_LANES_PER_CORE * FLOP_PER_FMA * f64::from(mhz) * 1e6 / 1e12;
    let mut p = matched.clone();
    p.id = format!("derived-{}-{cores}c-gpu", matched.id);
    p.matching = MatchRules::default();
    p.vector_tflops = Some(VectorTflops {
        fp32: Some(tflops),
        fp16: Some(tflops),
    });
    p.sources.insert(
        "vector_tflops".into(),
        format!(
            "derived: {cores} GPU cores (probe) x {APPLE_FP32_LANES_PER_CORE} FP32 lanes x {FLOP_PER_FMA} FLOP \
             (FMA) x {mhz} MHz ({}'s sourced clock) = {tflops:.2} TFLOPS; FP16 at the FP32 rate as in {}",
            matched.id, matched.id
        ),
    );
    let notes = vec![format!(
        "{}: {cores} GPU cores where profile {} describes the {bin}-core bin: FP32/FP16 {tflops:.2} TFLOPS \
         derived from the cores at the family's {mhz} MHz; memory bandwidth and working set are {}'s",
        gpu.name, matched.id, matched.id
    )];
    Some(Err(Resolution::Derived {
        profile: Box::new(p),
        notes,
    }))
}
