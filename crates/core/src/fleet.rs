//! The devices a plan may use: one identity ([`DeviceId`]) each, with capacity, reserve, peaks and
//! efficiencies, every efficiency carrying its basis (analytic from the rule tables, calibrated or measured from
//! the store's [`Evidence`]) and where it came from. Pure: built from an inventory, the profile set and evidence
//! values; the GPU-to-profile matching happens here once, for the planner, the store lookup and the document.
//!
//! Trade-off: a fleet is per node. A cluster of identical nodes is planned as one node replicated (data
//! parallel), which is exact for engines that run one process per node (llama.cpp) and keeps planning cost
//! independent of the node count; plans that span nodes come with the runtimes that can run them.

use std::fmt;

mod kernels;

use crate::evidence::{Basis, Evidence, MeasuredEfficiency};
use crate::hardware::{Gpu, GpuVendor, Inventory, parse_capability};
use crate::perf::{self, DevicePerf};
use crate::profile::matching::{Resolution, resolve as match_gpu, usable_gpu_bytes};
use crate::profile::{
    DeviceKind as ProfileKind, HardwareProfile, Interconnect, Phase, ProfileSet, ReserveTarget,
    RuntimeId,
};
use kernels::kernels_for;

/// What drives a device: the host's CPU, or a GPU through its vendor's compute stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeviceKind {
    Cpu,
    /// NVIDIA through CUDA.
    Cuda,
    /// AMD through HIP (ROCm).
    Rocm,
    /// Apple silicon through Metal.
    Metal,
    /// Intel GPUs through SYCL (Level Zero); no runtime here plans them.
    Sycl,
    /// Any vendor's GPU through ggml-vulkan, where the inventory says `backend: vulkan` (an AMD GPU without ROCm).
    Vulkan,
}

impl DeviceKind {
    fn of_vendor(v: GpuVendor) -> DeviceKind {
        match v {
            GpuVendor::Nvidia => DeviceKind::Cuda,
            GpuVendor::Amd => DeviceKind::Rocm,
            GpuVendor::Apple => DeviceKind::Metal,
            GpuVendor::Intel => DeviceKind::Sycl,
        }
    }

    /// The backend llama.cpp drives `g` with, and why: the inventory's `backend` where it says, else the
    /// vendor's ([`DeviceKind::of_vendor`]). An Intel GPU stays SYCL (listed, not planned: no Intel profile, so
    /// nothing measured says its speed) unless the inventory says `vulkan`.
    pub(crate) fn for_gpu(g: &Gpu) -> (DeviceKind, &'static str) {
        use crate::hardware::ComputeBackend as B;
        match g.backend {
            Some(b) => (
                match b {
                    B::Cuda => DeviceKind::Cuda,
                    B::Rocm => DeviceKind::Rocm,
                    B::Vulkan => DeviceKind::Vulkan,
                    B::Metal => DeviceKind::Metal,
                    B::Sycl => DeviceKind::Sycl,
                },
                "the inventory's backend field",
            ),
            None => (
                DeviceKind::of_vendor(g.vendor),
                match g.vendor {
                    GpuVendor::Intel => {
                        "Intel GPU and the inventory names no backend: SYCL, which this planner lists but does not plan; an inventory that says `backend: vulkan` gets a Vulkan plan"
                    }
                    GpuVendor::Amd => {
                        "AMD GPU and the inventory names no backend: ROCm (HIP); an inventory that says `backend: vulkan` gets a Vulkan plan"
                    }
                    _ => "the vendor's own backend",
                },
            ),
        }
    }

    /// The prefix of the device's identity in the document (`cuda:0`).
    pub(crate) fn prefix(self) -> &'static str {
        match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Cuda => "cuda",
            DeviceKind::Rocm => "rocm",
            DeviceKind::Metal => "metal",
            DeviceKind::Sycl => "sycl",
            DeviceKind::Vulkan => "vulkan",
        }
    }

    /// Parses a prefix back.
    #[cfg(test)]
    fn from_prefix(s: &str) -> Option<DeviceKind> {
        [
            DeviceKind::Cpu,
            DeviceKind::Cuda,
            DeviceKind::Rocm,
            DeviceKind::Metal,
            DeviceKind::Sycl,
            DeviceKind::Vulkan,
        ]
        .into_iter()
        .find(|k| k.prefix() == s)
    }
}

/// The one identity of a device in memory estimates, placement, launch artifacts and the store: node, kind and
/// ordinal (the inventory index for GPUs, which is the PCI bus order NVML and `CUDA_DEVICE_ORDER=PCI_BUS_ID`
/// share). Written `cuda:0` on node 0 and `node3/cuda:0` elsewhere; the host is `cpu`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId {
    pub node: u32,
    pub kind: DeviceKind,
    pub ordinal: u32,
}

impl DeviceId {
    pub const HOST: DeviceId = DeviceId {
        node: 0,
        kind: DeviceKind::Cpu,
        ordinal: 0,
    };

    pub(crate) fn gpu(kind: DeviceKind, ordinal: u32) -> DeviceId {
        DeviceId {
            node: 0,
            kind,
            ordinal,
        }
    }

    /// Parses `cpu`, `cuda:0`, `node3/rocm:1`.
    #[cfg(test)]
    pub(crate) fn parse(s: &str) -> Option<DeviceId> {
        let (node, rest) = match s.split_once('/') {
            Some((n, rest)) => (n.strip_prefix("node")?.parse().ok()?, rest),
            None => (0, s),
        };
        if rest == "cpu" {
            return Some(DeviceId {
                node,
                ..DeviceId::HOST
            });
        }
        let (kind, ordinal) = rest.split_once(':')?;
        Some(DeviceId {
            node,
            kind: DeviceKind::from_prefix(kind).filter(|k| *k != DeviceKind::Cpu)?,
            ordinal: ordinal.parse().ok()?,
        })
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.node != 0 {
            write!(f, "node{}/", self.node)?;
        }
        match self.kind {
            DeviceKind::Cpu => f.write_str("cpu"),
            k => write!(f, "{}:{}", k.prefix(), self.ordinal),
        }
    }
}

/// An efficiency (achieved share of a peak) and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Efficiency {
    pub value: f64,
    pub basis: Basis,
    /// The rule id (`analytic`), or the store row and the tool that recorded it (`calibrated`, `measured`).
    pub source: String,
    /// The store row, when measured.
    pub row: Option<i64>,
}

/// A GPU the plan may use.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetGpu {
    pub id: DeviceId,
    pub name: String,
    /// The matched hardware profile id, or the derived/heuristic id.
    pub profile: String,
    /// How the profile was found: `profile`, `derived` or `heuristic`.
    pub profile_basis: &'static str,
    pub memory_total_bytes: u64,
    pub memory_free_bytes: u64,
    /// Bytes a plan may allocate (free memory; on Metal also bounded by the GPU working set).
    pub capacity_bytes: u64,
    /// Where a capacity below the free memory comes from (Metal's working set).
    pub capacity_note: Option<String>,
    /// Bytes the runtime's memory-reserve rules keep free on it, and those rules.
    pub reserve_bytes: u64,
    pub reserve_rules: Vec<String>,
    pub bandwidth_bytes_per_s: f64,
    /// Dense FP16 tensor peak (or the shader rate without tensor cores); infinite when unknown, so prefill is
    /// bounded by bandwidth alone.
    pub flops: f64,
    pub decode: Option<Efficiency>,
    pub prefill: Option<Efficiency>,
    /// Host-to-device bytes per second (PCIe), when the profile or the probe says.
    pub link_bytes_per_s: Option<f64>,
    /// GPU-to-GPU NVLink bytes per second in each direction (half the profile's bidirectional total), when the
    /// profile has NVLink; tensor-parallel all-reduces run over it, else over PCIe.
    pub nvlink_bytes_per_s: Option<f64>,
    pub compute_capability: Option<(u32, u32)>,
    /// Streaming multiprocessors: the probe's count, else the profile's.
    pub sms: Option<u32>,
    /// The GPU allocates from the host's memory (Apple silicon).
    pub unified_memory: bool,
    /// What llama.cpp's kernel model needs of this GPU, where it covers it ([`kernels_for`]).
    pub kernels: Option<perf::gpu::GpuKernels>,
}

impl FleetGpu {
    /// The link this GPU exchanges tensors with its peers over: NVLink where the board has it built in, else
    /// PCIe (3.0 x16 when neither the profile nor the probe says).
    pub(crate) fn peer_link(&self) -> crate::perf::collective::Link {
        use crate::perf::collective;
        match self.nvlink_bytes_per_s {
            Some(b) => collective::Link {
                kind: collective::LinkKind::NvLink,
                bytes_per_s: b,
                latency_s: collective::NCCL_NVLINK_LATENCY_S,
            },
            None => collective::pcie_link(self.link_bytes_per_s.unwrap_or(PCIE3_X16_BYTES_PER_S)),
        }
    }

    /// Peaks and efficiencies as the throughput model takes them (1.0 where no rule or evidence says).
    pub(crate) fn perf(&self) -> DevicePerf {
        DevicePerf {
            name: self.id.to_string(),
            bandwidth_bytes_per_s: self.bandwidth_bytes_per_s,
            flops: self.flops,
            decode_efficiency: self.decode.as_ref().map_or(1.0, |e| e.value),
            prefill_efficiency: self.prefill.as_ref().map_or(1.0, |e| e.value),
            offload: None,
            cpu: None,
            gpu: None,
        }
    }

    /// [`FleetGpu::perf`] with llama.cpp's kernel model ([`perf::gpu`]) where it covers the GPU, for each phase
    /// whose efficiency no measurement replaced.
    pub(crate) fn llama_cpp_perf(&self) -> DevicePerf {
        let analytic =
            |e: &Option<Efficiency>| e.as_ref().is_none_or(|e| e.basis == Basis::Analytic);
        DevicePerf {
            gpu: self.kernels.map(|k| perf::gpu::GpuKernels {
                prefill: analytic(&self.prefill),
                decode: analytic(&self.decode),
                ..k
            }),
            ..self.perf()
        }
    }
}

/// A GPU the inventory reports that no plan can use, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct UnusedGpu {
    pub id: DeviceId,
    pub gpu: Gpu,
    pub profile: String,
    pub profile_basis: &'static str,
}

/// The host: its memory, the generic CPU class the throughput model uses, and the CPU efficiencies.
#[derive(Debug, Clone, PartialEq)]
pub struct Host {
    pub inventory: Inventory,
    /// Available memory.
    pub capacity_bytes: u64,
    /// Bytes the runtime's memory-reserve rules keep free (OS, fit margin), and those rules.
    pub reserve_bytes: u64,
    pub reserve_rules: Vec<String>,
    pub class: Option<HardwareProfile>,
    pub decode: Option<Efficiency>,
    pub prefill: Option<Efficiency>,
    /// What `optimizer calibrate` measured on this CPU (the newest run for its class and name), when the store
    /// has it: the throughput model then predicts from it instead of the class profile's peaks.
    pub calibration: Option<crate::evidence::CpuCalibration>,
}

impl Host {
    /// The class profile id, or `none`.
    pub fn class_id(&self) -> &str {
        self.class.as_ref().map_or("none", |c| c.id.as_str())
    }

    /// The host's speed at `threads` threads.
    pub(crate) fn perf(&self, threads: u32) -> DevicePerf {
        perf::cpu_device(
            self.class.as_ref(),
            &self.inventory,
            threads,
            self.decode.as_ref().map_or(1.0, |e| e.value),
            self.prefill.as_ref().map_or(1.0, |e| e.value),
            self.calibration.as_ref(),
        )
    }

    /// Physical cores this process may use (the cgroup quota bounds them).
    pub fn usable_cores(&self) -> u32 {
        let physical = self.inventory.cpu.physical_cores.max(1);
        self.inventory
            .cpu
            .effective_cpus
            .map_or(physical, |c| (c.floor() as u32).clamp(1, physical))
    }
}

/// The devices of one node, for one runtime.
#[derive(Debug, Clone, PartialEq)]
pub struct Fleet {
    pub runtime: RuntimeId,
    pub host: Host,
    pub gpus: Vec<FleetGpu>,
    pub unused: Vec<UnusedGpu>,
    /// Identical nodes this fleet stands for (a cluster's replicas).
    pub nodes: u32,
    /// What the matching had to guess or leave out.
    pub warnings: Vec<String>,
}

fn efficiency(
    set: &ProfileSet,
    device: ReserveTarget,
    runtime: RuntimeId,
    phase: Phase,
    cc: Option<(u32, u32)>,
) -> Option<Efficiency> {
    set.efficiency(device, runtime, phase, cc)
        .map(|r| Efficiency {
            value: r.efficiency,
            basis: Basis::Analytic,
            source: r.id.clone(),
            row: None,
        })
}

/// PCIe 3.0 x16: 8 GT/s × 128/130 encoding × 16 lanes / 8 bits = 15.75 GB/s (PCI-SIG PCIe 3.0 base spec).
pub(crate) const PCIE3_X16_BYTES_PER_S: f64 = 15.75e9;

/// Usable host-to-device bytes per second of a PCIe link: per-lane rate after line encoding × lanes
/// (gen 1-2: 8b/10b at 2.5/5 GT/s; gen 3-5: 128b/130b at 8/16/32 GT/s).
pub fn pcie_bytes_per_s(i: &Interconnect) -> Option<f64> {
    let lanes = f64::from(i.pcie_lanes?);
    let per_lane = match i.pcie_gen? {
        1 => 2.5e9 * 0.8 / 8.0,
        2 => 5e9 * 0.8 / 8.0,
        3 => 8e9 * 128.0 / 130.0 / 8.0,
        4 => 16e9 * 128.0 / 130.0 / 8.0,
        5 => 32e9 * 128.0 / 130.0 / 8.0,
        _ => return None,
    };
    Some(per_lane * lanes)
}

/// NVLink bytes per second in each direction between the GPUs of one node: half the profile's bidirectional
/// total, for boards whose NVLink is part of the baseboard (SXM/HGX parts). PCIe cards (`*-pcie` profiles,
/// GeForce boards) take NVLink only through an optional bridge between pairs of cards that neither a profile nor
/// the probe can see, so their GPUs are planned over PCIe.
pub(crate) fn nvlink_bytes_per_s(p: &HardwareProfile) -> Option<f64> {
    let bridge_only = p.id.contains("pcie") || p.name.contains("GeForce");
    p.interconnect
        .as_ref()
        .and_then(|i| i.nvlink_gb_s)
        .filter(|&b| b > 0.0 && !bridge_only)
        .map(|b| b * 1e9 / 2.0)
}

/// The generic CPU class the throughput model uses for the host: by architecture, SIMD features and core count
/// (a server with 32+ cores and AVX-512 gets the 8-channel DDR5 class).
fn cpu_class<'a>(inv: &Inventory, set: &'a ProfileSet) -> Option<&'a HardwareProfile> {
    let f = &inv.cpu.features;
    let has = |x: &str| f.iter().any(|y| y == x);
    let id = if has("neon") || inv.cpu.arch.as_deref() == Some("aarch64") {
        if has("sve") {
            "cpu-aarch64-sve-ddr5-8-channel"
        } else {
            "cpu-aarch64-neon-lpddr5"
        }
    } else if has("avx512f") && inv.cpu.physical_cores >= 32 {
        "cpu-x86-64-avx512-ddr5-8-channel"
    } else if has("avx512f") {
        "cpu-x86-64-avx2-ddr5-dual-channel"
    } else {
        "cpu-x86-64-avx2-ddr4-dual-channel"
    };
    set.hardware(id).map(|e| &e.value).or_else(|| {
        set.hardware
            .iter()
            .map(|e| &e.value)
            .find(|h| h.kind == ProfileKind::Cpu)
    })
}

/// Prefill peak: dense FP16 tensor throughput, or the faster shader rate on GPUs without tensor cores (Pascal's
/// FP16 runs at 1/64 of FP32, so llama.cpp computes in FP32 there: ggml-cuda `fast_fp16_available` is false on
/// compute capability 6.1).
pub(crate) fn prefill_peak(p: &HardwareProfile) -> f64 {
    p.tensor_tflops
        .as_ref()
        .and_then(|t| t.fp16_fp32acc)
        .or_else(|| {
            p.vector_tflops
                .as_ref()
                .and_then(|v| match (v.fp16, v.fp32) {
                    (Some(h), Some(f)) => Some(h.max(f)),
                    (h, f) => h.or(f),
                })
        })
        .unwrap_or(0.0)
        * 1e12
}

/// The rule tables in force cannot give a device's reserve (a rule that over-reserves, say).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct ReserveError(pub String);

fn reserve(
    set: &ProfileSet,
    target: ReserveTarget,
    runtime: RuntimeId,
    total_bytes: u64,
) -> Result<(u64, Vec<String>), ReserveError> {
    set.reserve(target, runtime, total_bytes)
        .map_err(|e| ReserveError(e.to_string()))
}

/// The fleet of one node for `runtime`: every GPU of the inventory matched to a profile once, either planned or
/// listed unused with the reason, with the runtime's reserves and efficiencies.
pub fn build(inv: &Inventory, set: &ProfileSet, runtime: RuntimeId) -> Result<Fleet, ReserveError> {
    let hw_profiles: Vec<&HardwareProfile> = set.hardware.iter().map(|e| &e.value).collect();
    let archs: Vec<_> = set.architectures().collect();
    let mut warnings = Vec::new();
    let mut gpus = Vec::new();
    let mut unused = Vec::new();
    for g in &inv.gpus {
        let (kind, why) = DeviceKind::for_gpu(g);
        let id = DeviceId::gpu(kind, g.index);
        if !matches!(kind, DeviceKind::Cuda | DeviceKind::Metal) || g.backend.is_some() {
            warnings.push(format!(
                "gpu {} ({}): llama.cpp backend {}: {why}",
                g.index,
                g.name,
                kind.prefix()
            ));
        }
        let not_used = |profile: &str, basis: &'static str| UnusedGpu {
            id,
            gpu: g.clone(),
            profile: profile.into(),
            profile_basis: basis,
        };
        let (profile, basis): (HardwareProfile, &'static str) =
            match match_gpu(g, &hw_profiles, &archs) {
                Resolution::Profile { profile, .. } => (profile.clone(), "profile"),
                Resolution::Derived { profile, notes } => {
                    warnings.extend(notes.into_iter().map(|n| format!("gpu {}: {n}", g.index)));
                    (*profile, "derived")
                }
                Resolution::Heuristic {
                    profile,
                    basis,
                    hint,
                } => {
                    warnings.push(format!("gpu {}: heuristic: {basis}; hint: {hint}", g.index));
                    (*profile, "heuristic")
                }
                Resolution::Unresolved { notes } => {
                    warnings.extend(
                        notes
                            .into_iter()
                            .map(|n| format!("gpu {}: {n}; it is not used", g.index)),
                    );
                    unused.push(not_used("none", "none"));
                    continue;
                }
            };
        // Metal allocates from the machine's memory up to macOS's GPU working-set limit.
        let (capacity, capacity_note) = if kind == DeviceKind::Metal {
            match usable_gpu_bytes(g, Some(&profile)) {
                Ok(u) => (
                    g.memory_free_bytes.min(u.bytes),
                    Some(format!(
                        "Metal working set {} bytes ({}); the GPU's share also comes out of the host's memory",
                        u.bytes, u.source
                    )),
                ),
                Err(e) => {
                    warnings.push(format!("gpu {}: {e}; it is not used", g.index));
                    unused.push(not_used(&profile.id, basis));
                    continue;
                }
            }
        } else {
            (g.memory_free_bytes, None)
        };
        let link = profile
            .interconnect
            .as_ref()
            .and_then(pcie_bytes_per_s)
            .or_else(|| {
                g.pcie_generation
                    .zip(g.pcie_width)
                    .and_then(|(gen_, lanes)| {
                        pcie_bytes_per_s(&Interconnect {
                            pcie_gen: Some(gen_),
                            pcie_lanes: Some(lanes),
                            nvlink_gb_s: None,
                        })
                    })
            });
        let flops = prefill_peak(&profile);
        if flops <= 0.0 {
            warnings.push(format!(
                "gpu {} ({}): no FLOPS figure, so prefill is bounded by bandwidth only",
                g.index, g.name
            ));
        }
        let cc = g.compute_capability.as_deref().and_then(parse_capability);
        let (reserve_bytes, reserve_rules) =
            reserve(set, ReserveTarget::Gpu, runtime, g.memory_total_bytes)?;
        gpus.push(FleetGpu {
            id,
            name: g.name.clone(),
            profile: profile.id.clone(),
            profile_basis: basis,
            memory_total_bytes: g.memory_total_bytes,
            memory_free_bytes: g.memory_free_bytes,
            capacity_bytes: capacity,
            capacity_note,
            reserve_bytes,
            reserve_rules,
            bandwidth_bytes_per_s: profile.memory.bandwidth_gb_s * 1e9,
            flops: if flops > 0.0 { flops } else { f64::INFINITY },
            decode: efficiency(set, ReserveTarget::Gpu, runtime, Phase::Decode, cc),
            prefill: efficiency(set, ReserveTarget::Gpu, runtime, Phase::Prefill, cc),
            link_bytes_per_s: link,
            nvlink_bytes_per_s: nvlink_bytes_per_s(&profile),
            compute_capability: cc,
            sms: g.sm_count.or(profile.sms),
            unified_memory: kind == DeviceKind::Metal,
            kernels: kernels_for(kind, g, &profile, cc),
        });
    }
    let (host_reserve, host_reserve_rules) =
        reserve(set, ReserveTarget::Cpu, runtime, inv.memory.total_bytes)?;
    Ok(Fleet {
        runtime,
        host: Host {
            inventory: inv.clone(),
            capacity_bytes: inv.memory.available_bytes,
            reserve_bytes: host_reserve,
            reserve_rules: host_reserve_rules,
            class: cpu_class(inv, set).cloned(),
            decode: efficiency(set, ReserveTarget::Cpu, runtime, Phase::Decode, None),
            prefill: efficiency(set, ReserveTarget::Cpu, runtime, Phase::Prefill, None),
            calibration: None,
        },
        gpus,
        unused,
        nodes: 1,
        warnings,
    })
}

impl Fleet {
    /// The hardware profile ids of the planned GPUs (for the store's lookups), host class first.
    pub fn profile_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = std::iter::once(self.host.class_id().to_string())
            .chain(self.gpus.iter().map(|g| g.profile.clone()))
            .collect();
        ids.dedup();
        ids
    }

    /// Replaces rule efficiencies with those the store measured for the same device profile and runtime (the
    /// newest row wins, and the efficiency cites it), and widens reserves by observed peaks the memory model
    /// under-estimated.
    pub fn apply(&mut self, evidence: &Evidence) {
        let pick = |profile: &str, phase: Phase| -> Option<Efficiency> {
            evidence
                .efficiencies
                .iter()
                .filter(|m| {
                    m.device_profile == profile && m.runtime == self.runtime && m.phase == phase
                })
                .max_by_key(|m| m.row)
                .map(|m: &MeasuredEfficiency| Efficiency {
                    value: m.value,
                    basis: m.basis,
                    source: format!("store row {} ({})", m.row, m.what),
                    row: Some(m.row),
                })
        };
        // Observed peaks above the memory model's estimate for this model on a device class: keep the largest
        // excess free on every device of that class, so the next plan leaves the room the engine really took.
        // Out-of-memories newer than the newest measured peak each add a step (`OOM_STEP_SHARE` of the estimate
        // they happened at): an OOM says more was needed, not how much.
        let runtime = self.runtime;
        let margin = |profile: &str| -> Option<(u64, String)> {
            let mine = || {
                evidence
                    .peak_memory
                    .iter()
                    .filter(move |m| m.device_profile == profile && m.runtime == runtime)
            };
            let newest_peak = mine().filter(|m| !m.oom).map(|m| m.row).max();
            let peak = mine()
                .filter(|m| !m.oom && m.excess() > 0)
                .max_by_key(|m| m.excess())
                .map(|m| {
                    (
                        m.excess(),
                        format!(
                            "store row {}: observed {} bytes, {} over the estimate",
                            m.row,
                            m.bytes,
                            m.excess()
                        ),
                    )
                });
            let ooms: Vec<&crate::evidence::PeakMemory> = mine()
                .filter(|m| m.oom && newest_peak.is_none_or(|p| m.row > p))
                .collect();
            let estimate = ooms.iter().filter_map(|m| m.estimated_bytes).max();
            let oom = estimate.filter(|_| !ooms.is_empty()).map(|e| {
                let step = (e as f64 * crate::evidence::OOM_STEP_SHARE) as u64;
                let rows: Vec<String> = ooms.iter().map(|m| m.row.to_string()).collect();
                (
                    step.saturating_mul(ooms.len() as u64),
                    format!(
                        "store row{} {}: {} out-of-memory observation(s) at an estimate of {e} bytes, {:.0} % of it each",
                        if rows.len() == 1 { "" } else { "s" },
                        rows.join(", "),
                        ooms.len(),
                        crate::evidence::OOM_STEP_SHARE * 100.0
                    ),
                )
            });
            [peak, oom].into_iter().flatten().max_by_key(|(b, _)| *b)
        };
        let widen = |reserve: &mut u64, rules: &mut Vec<String>, (extra, why): (u64, String)| {
            *reserve = reserve.saturating_add(extra);
            rules.push(why);
        };
        for g in &mut self.gpus {
            if let Some(m) = margin(&g.profile) {
                widen(&mut g.reserve_bytes, &mut g.reserve_rules, m);
            }
        }
        if let Some(m) = margin(self.host.class_id()) {
            widen(
                &mut self.host.reserve_bytes,
                &mut self.host.reserve_rules,
                m,
            );
        }
        let host_class = self.host.class_id().to_string();
        if let Some(e) = pick(&host_class, Phase::Decode) {
            self.host.decode = Some(e);
        }
        if let Some(e) = pick(&host_class, Phase::Prefill) {
            self.host.prefill = Some(e);
        }
        for g in &mut self.gpus {
            if let Some(e) = pick(&g.profile, Phase::Decode) {
                g.decode = Some(e);
            }
            if let Some(e) = pick(&g.profile, Phase::Prefill) {
                g.prefill = Some(e);
            }
        }
        self.apply_cpu_calibration(&evidence.cpu);
    }
}

impl Fleet {
    /// Takes this CPU's newest calibration, and states the efficiencies it measured (achieved over the class
    /// profile's peaks, at the most threads measured) in place of the rule's, citing the rows: the throughput
    /// model predicts from the calibration itself (`perf::measured_cpu`), these say what it found and make the
    /// plan's basis `calibrated`. Efficiencies stay the rule's where the calibration could not replace them
    /// (kernels run with other instructions than the fitted model's reference: only the bandwidth is used).
    fn apply_cpu_calibration(&mut self, figures: &[crate::evidence::CpuFigure]) {
        let host = &mut self.host;
        let Some(c) = crate::evidence::CpuCalibration::newest(
            figures,
            host.class.as_ref().map_or("none", |p| p.id.as_str()),
            &host.inventory.cpu.model,
            host.inventory.cpu.physical_cores,
        ) else {
            return;
        };
        let most = |points: &[(u32, f64)]| points.iter().copied().max_by_key(|p| p.0);
        let source = |metric: &str, points: &[(u32, f64)]| {
            let threads = most(points).map_or(0, |p| p.0);
            let row = figures
                .iter()
                .find(|f| f.run == c.run && f.metric == metric && f.threads == threads)
                .map(|f| f.row);
            (
                format!(
                    "store row {} (calibrate run {}: {metric} at {threads} thread(s))",
                    row.unwrap_or_default(),
                    c.run
                ),
                row,
            )
        };
        let socket = host
            .class
            .as_ref()
            .map_or(0.0, |p| p.memory.bandwidth_gb_s * 1e9);
        if let Some((_, read)) = most(&c.read)
            && socket > 0.0
        {
            let (source, row) = source("cpu_read_bytes_per_s", &c.read);
            host.decode = Some(Efficiency {
                value: read / socket,
                basis: Basis::Calibrated,
                source,
                row,
            });
        }
        let (ghz, fpc) = perf::nominal_core(host.class.as_ref(), &host.inventory);
        let nominal = ghz * 1e9 * fpc;
        if let Some((t, fma)) = most(&c.fma)
            && nominal > 0.0
            && c.isa.as_deref() == Some(perf::REFERENCE.isa)
        {
            let (source, row) = source("cpu_fma_flops", &c.fma);
            host.prefill = Some(Efficiency {
                value: fma / (f64::from(t) * nominal),
                basis: Basis::Calibrated,
                source,
                row,
            });
        }
        host.calibration = Some(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_ids_round_trip_through_their_text() {
        for s in [
            "cpu",
            "cuda:0",
            "rocm:3",
            "metal:0",
            "node7/cuda:5",
            "node2/cpu",
        ] {
            let id = DeviceId::parse(s).unwrap_or_else(|| panic!("{s}"));
            assert_eq!(id.to_string(), s);
        }
        for bad in [
            "",
            "cuda",
            "cuda:x",
            "cpu:0",
            "nodex/cuda:0",
            "tpu:0",
            "node1/",
        ] {
            assert_eq!(DeviceId::parse(bad), None, "{bad}");
        }
    }
}
