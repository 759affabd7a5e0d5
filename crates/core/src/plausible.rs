//! Figures no device could produce. Every measured figure the planner may use (imported, observed, benched or
//! calibrated, from this machine or a foreign export) is bounded here by what the device could physically do:
//! a token rate by the roofline of its peaks for this model, a peak of memory by the memory the device has, a
//! CPU micro-benchmark by what any core can do per thread. The same bounds refuse such figures where they are
//! recorded (`observe`, `bench`) and set them aside with a warning naming the store row where they are used
//! ([`screen`]), so a stored figure can never make a plan promise the impossible or refuse the possible.
//!
//! Trade-off: the bounds are deliberately loose (caches beat DRAM bandwidth for a model that fits in them, int8
//! and fp8 paths and boost clocks beat the profile's FP16 figure), so they refuse only what no device of that
//! profile can produce, never a merely surprising measurement; a figure inside them that is still wrong is
//! found by comparing it with the prediction, not here.

use crate::evidence::{CpuFigure, Evidence, PeakMemory, ThroughputPoint};
use crate::fleet::Fleet;
use crate::profile::Phase;
use optimizer_model::{ModelSpec, Role};

/// A token rate above the bandwidth roofline by more than this is not a measurement: a model held in on-chip
/// caches reads them at a few times DRAM bandwidth at most (an H100's L2 at ~3.7x its HBM), so 10x leaves room.
const BANDWIDTH_SLACK: f64 = 10.0;
/// A token rate above the compute roofline by more than this is not a measurement: the profile's FP16 tensor
/// figure is doubled by int8/fp8 paths and again by structured sparsity; boost clocks add less than that.
const COMPUTE_SLACK: f64 = 4.0;
/// A CPU's profile gives FP32 FMA rates; int8 matrix units (AMX, SME) multiply weights by up to 16x that.
const CPU_MATRIX_FACTOR: f64 = 16.0;
/// A figure below this share of the ceiling is not a measurement either: a model streamed from disk on a
/// machine without the memory to hold it is about a thousand times slower than its roofline, not a million.
const FLOOR_SHARE: f64 = 1e-6;
/// Per thread, no core reads more bytes per second than this (an L1 cache delivers ~0.6 TB/s per core at 5 GHz).
const MAX_READ_BYTES_PER_S_PER_THREAD: f64 = 1e12;
/// Per thread, no core does more FP32 FLOP/s than this (two AVX-512 FMA units at 5 GHz do 0.32 TFLOP/s).
const MAX_FMA_FLOPS_PER_THREAD: f64 = 1e12;
/// Per thread, no core multiplies more quantized weights per second than this (AMX int8 at 5 GHz: ~5e12).
const MAX_DOT_PARAMS_PER_S_PER_THREAD: f64 = 1e13;
/// Per thread, any core that runs llama.cpp reads, computes and multiplies at least this per second (a
/// Raspberry Pi Zero does about a thousand times more).
const MIN_CPU_FIGURE_PER_THREAD: f64 = 1e6;

/// A device's (or several devices') peaks; 0 or a non-finite figure is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Peaks {
    pub bandwidth_bytes_per_s: f64,
    /// Operations per second, the slack for other number formats included.
    pub ops_per_s: f64,
}

impl Peaks {
    /// A GPU's peaks from its FP16 FLOP/s figure.
    pub(crate) fn gpu(bandwidth_bytes_per_s: f64, fp16_flops: f64) -> Peaks {
        Peaks {
            bandwidth_bytes_per_s,
            ops_per_s: fp16_flops * COMPUTE_SLACK,
        }
    }

    /// A CPU's peaks from its FP32 FLOP/s figure.
    pub(crate) fn cpu(bandwidth_bytes_per_s: f64, fp32_flops: f64) -> Peaks {
        Peaks {
            bandwidth_bytes_per_s,
            ops_per_s: fp32_flops * CPU_MATRIX_FACTOR * COMPUTE_SLACK,
        }
    }

    /// Devices working together (tensor parallelism, a split model): their sum; unknown when any is.
    pub(crate) fn sum(all: impl IntoIterator<Item = Peaks>) -> Peaks {
        all.into_iter().fold(Peaks::default(), |a, b| Peaks {
            bandwidth_bytes_per_s: a.bandwidth_bytes_per_s + known(b.bandwidth_bytes_per_s),
            ops_per_s: a.ops_per_s + known(b.ops_per_s),
        })
    }
}

fn known(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 {
        x
    } else {
        f64::NAN
    }
}

/// What one token costs at least: the weights it must read and multiply. Lower bounds, so the ceilings they
/// give are upper bounds: routed experts count at the share a token uses, the token embedding (a row lookup,
/// no multiply) not at all.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Work {
    pub bytes_per_token: f64,
    pub params_per_token: f64,
}

impl Work {
    pub fn of_model(m: &ModelSpec) -> Work {
        let h = &m.hparams;
        let share = match (h.expert_count, h.expert_used_count) {
            (Some(n), Some(k)) if n > 0 => (k as f64 / n as f64).min(1.0),
            _ => 1.0,
        };
        let (mut bytes, mut params) = (0.0, 0.0);
        for t in &m.tensors {
            let w = match t.role {
                Role::Embedding => 0.0,
                Role::Expert => share,
                _ => 1.0,
            };
            bytes += w * t.bytes as f64;
            params += w * t.parameters as f64;
        }
        Work {
            bytes_per_token: bytes,
            params_per_token: params,
        }
    }

    /// From a document's totals alone, when the model file is not at hand: `share` is the smallest share of the
    /// weights a token may use (1 for a dense model).
    pub fn of_totals(tensor_bytes: u64, parameter_count: u64, share: f64) -> Work {
        Work {
            bytes_per_token: tensor_bytes as f64 * share,
            params_per_token: parameter_count as f64 * share,
        }
    }
}

/// The smallest share of its weights a token of a mixture-of-experts model uses, for bounds made without the
/// model file: 1/64 is below the sparsest public model's (Kimi K2: 32B of 1T active, 1/31).
pub const MIN_ACTIVE_SHARE: f64 = 1.0 / 64.0;

/// The range a token rate of `phase` over `sequences` sequences can fall in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Range {
    pub floor: f64,
    pub ceiling: f64,
}

impl Range {
    pub(crate) fn contains(&self, x: f64) -> bool {
        x.is_finite() && x > 0.0 && x >= self.floor && x <= self.ceiling
    }
}

/// The token rates a device with `peaks` can reach for `work` at `sequences` sequences: decode is bound by the
/// weights it reads each step (shared by the sequences) and by the multiplies of every token; prefill by the
/// multiplies. Unknown peaks bound nothing (the ceiling is infinite, the floor 0).
pub(crate) fn tokens_per_s(phase: Phase, peaks: Peaks, work: Work, sequences: u64) -> Range {
    let mut ceiling = f64::INFINITY;
    if peaks.ops_per_s.is_finite() && peaks.ops_per_s > 0.0 && work.params_per_token > 0.0 {
        ceiling = ceiling.min(peaks.ops_per_s / (2.0 * work.params_per_token));
    }
    if phase == Phase::Decode
        && peaks.bandwidth_bytes_per_s.is_finite()
        && peaks.bandwidth_bytes_per_s > 0.0
        && work.bytes_per_token > 0.0
    {
        ceiling = ceiling.min(
            sequences.max(1) as f64 * BANDWIDTH_SLACK * peaks.bandwidth_bytes_per_s
                / work.bytes_per_token,
        );
    }
    Range {
        floor: if ceiling.is_finite() {
            ceiling * FLOOR_SHARE
        } else {
            0.0
        },
        ceiling,
    }
}

/// Why a figure is not one a device could produce.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Implausible {
    #[error("{value} {phase} tokens/s is not a positive finite rate")]
    NotARate { value: f64, phase: &'static str },
    #[error(
        "{value:.4e} {phase} tokens/s at {sequences} sequence(s) is above what the device can do for this model (at most {ceiling:.4e}: {BANDWIDTH_SLACK}x its bandwidth roofline, {COMPUTE_SLACK}x its compute roofline)"
    )]
    AboveCeiling {
        value: f64,
        phase: &'static str,
        sequences: u64,
        ceiling: f64,
    },
    #[error(
        "{value:.4e} {phase} tokens/s is below any working run of this model on the device (at least {floor:.4e}, a millionth of its roofline)"
    )]
    BelowFloor {
        value: f64,
        phase: &'static str,
        floor: f64,
    },
    #[error("a peak of 0 bytes: a running model holds its weights")]
    ZeroPeak,
    #[error(
        "a peak of {bytes} bytes on a device of {memory_bytes} bytes: more than the device has"
    )]
    PeakAboveMemory { bytes: u64, memory_bytes: u64 },
    #[error(
        "{metric} {value:.4e} at {threads} thread(s) is outside what a CPU can do ({floor:.0e} to {ceiling:.4e})"
    )]
    CpuFigure {
        metric: String,
        threads: u32,
        value: f64,
        floor: f64,
        ceiling: f64,
    },
}

/// Whether a token rate of `phase` at `sequences` sequences is one a device with `peaks` could reach for `work`.
pub fn check_tokens_per_s(
    value: f64,
    phase: Phase,
    peaks: Peaks,
    work: Work,
    sequences: u64,
) -> Result<(), Implausible> {
    let r = tokens_per_s(phase, peaks, work, sequences);
    if r.contains(value) {
        return Ok(());
    }
    let phase = match phase {
        Phase::Decode => "decode",
        Phase::Prefill => "prefill",
    };
    Err(if !(value.is_finite() && value > 0.0) {
        Implausible::NotARate { value, phase }
    } else if value > r.ceiling {
        Implausible::AboveCeiling {
            value,
            phase,
            sequences,
            ceiling: r.ceiling,
        }
    } else {
        Implausible::BelowFloor {
            value,
            phase,
            floor: r.floor,
        }
    })
}

/// Whether a memory peak is one a device with `memory_bytes` could have had.
pub fn check_peak_bytes(bytes: u64, memory_bytes: u64) -> Result<(), Implausible> {
    if bytes == 0 {
        return Err(Implausible::ZeroPeak);
    }
    if memory_bytes > 0 && bytes > memory_bytes {
        return Err(Implausible::PeakAboveMemory {
            bytes,
            memory_bytes,
        });
    }
    Ok(())
}

/// Whether a CPU micro-benchmark figure is one a CPU could produce (per-thread ceilings, and the class's socket
/// bandwidth when known; at least [`MIN_CPU_FIGURE_PER_THREAD`] per second in all).
fn check_cpu_figure(
    metric: &str,
    threads: u32,
    value: f64,
    socket_bandwidth_bytes_per_s: Option<f64>,
) -> Result<(), Implausible> {
    let t = f64::from(threads.max(1));
    let per_thread = if metric == "cpu_read_bytes_per_s" {
        MAX_READ_BYTES_PER_S_PER_THREAD
    } else if metric == "cpu_fma_flops" {
        MAX_FMA_FLOPS_PER_THREAD
    } else {
        MAX_DOT_PARAMS_PER_S_PER_THREAD
    };
    let mut ceiling = per_thread * t;
    if metric == "cpu_read_bytes_per_s"
        && let Some(bw) = socket_bandwidth_bytes_per_s.filter(|b| b.is_finite() && *b > 0.0)
    {
        ceiling = ceiling.min(bw * BANDWIDTH_SLACK);
    }
    let floor = MIN_CPU_FIGURE_PER_THREAD;
    if !(value.is_finite() && value >= floor && value <= ceiling) {
        return Err(Implausible::CpuFigure {
            metric: metric.to_string(),
            threads,
            value,
            floor,
            ceiling,
        });
    }
    Ok(())
}

/// Highest clock any CPU core runs at, GHz: bounds a CPU's FLOP rate where only its class profile is known.
const MAX_CPU_GHZ: f64 = 6.5;

/// The peaks of one device of hardware profile `p` (a CPU class with `cores` physical cores).
pub fn profile_peaks(p: &crate::profile::HardwareProfile, cores: u32) -> Peaks {
    let bw = p.memory.bandwidth_gb_s * 1e9;
    match p.kind {
        crate::profile::DeviceKind::Cpu => {
            let fpc = p
                .cpu
                .as_ref()
                .and_then(|c| c.fp32_flops_per_cycle_per_core)
                .unwrap_or(crate::perf::DEFAULT_FP32_FLOPS_PER_CYCLE);
            Peaks::cpu(bw, MAX_CPU_GHZ * 1e9 * fpc * f64::from(cores.max(1)))
        }
        _ => Peaks::gpu(bw, crate::fleet::prefill_peak(p)),
    }
}

/// The peaks of the devices of `fleet` of hardware profile `profile` (the host's class, or a GPU profile), taken
/// `n` at a time: what a figure recorded against that profile at `n` devices may be bounded by. `None` when the
/// fleet has no such device (the figure is not for this plan's hardware and bounds nothing here).
fn fleet_peaks(fleet: &Fleet, profile: &str, n: usize) -> Option<Peaks> {
    if profile == fleet.host.class_id() {
        let (ghz, fpc) =
            crate::perf::nominal_core(fleet.host.class.as_ref(), &fleet.host.inventory);
        let cores = f64::from(fleet.host.inventory.cpu.physical_cores.max(1));
        // The class's socket bandwidth; without a class, what the speed model takes for the host.
        let bw = fleet.host.class.as_ref().map_or_else(
            || {
                let threads = fleet.host.inventory.cpu.logical_cpus.max(1);
                fleet.host.perf(threads).bandwidth_bytes_per_s
            },
            |c| c.memory.bandwidth_gb_s * 1e9,
        );
        return Some(Peaks::cpu(bw, ghz * 1e9 * fpc * cores));
    }
    let g = fleet.gpus.iter().find(|g| g.profile == profile)?;
    let one = Peaks::gpu(g.bandwidth_bytes_per_s, g.flops);
    Some(Peaks::sum(std::iter::repeat_n(one, n.max(1))))
}

/// Memory of a device of `profile` in `fleet` (the host's RAM for its class), when the fleet has one.
fn fleet_memory(fleet: &Fleet, profile: &str) -> Option<u64> {
    if profile == fleet.host.class_id() {
        return Some(fleet.host.inventory.memory.total_bytes);
    }
    fleet
        .gpus
        .iter()
        .filter(|g| g.profile == profile)
        .map(|g| g.memory_total_bytes)
        .max()
}

/// Evidence with the figures no device of this fleet could produce for `model` set aside, and a warning for each.
#[derive(Debug, Clone, Default)]
pub(crate) struct Screened {
    pub evidence: Evidence,
    pub warnings: Vec<String>,
}

/// Sets aside every figure of `evidence` that is outside what its device could do for `model` (see the module
/// doc): throughput points by the rooflines, memory peaks by the device's memory, CPU figures by what a core
/// can do. A figure for a device this fleet does not have is kept (nothing here uses it).
pub(crate) fn screen(evidence: &Evidence, fleet: &Fleet, model: &ModelSpec) -> Screened {
    let work = Work::of_model(model);
    let mut warnings = Vec::new();
    let mut keep_throughput = |t: &ThroughputPoint| {
        let n = t.tensor_parallel.map_or(1, |n| n as usize);
        let Some(peaks) = fleet_peaks(fleet, &t.device_profile, n) else {
            return true;
        };
        match check_tokens_per_s(
            t.tokens_per_s,
            t.phase,
            peaks,
            work,
            t.concurrency.unwrap_or(1),
        ) {
            Ok(()) => true,
            Err(why) => {
                warnings.push(format!(
                    "store row {} ({}) on {}: {why}; not used",
                    t.row, t.what, t.device_profile
                ));
                false
            }
        }
    };
    let throughput: Vec<ThroughputPoint> = evidence
        .throughput
        .iter()
        .filter(|t| keep_throughput(t))
        .cloned()
        .collect();
    let mut keep_peak = |m: &PeakMemory| {
        if m.oom {
            return true;
        }
        let Some(memory) = fleet_memory(fleet, &m.device_profile) else {
            return true;
        };
        match check_peak_bytes(m.bytes, memory) {
            Ok(()) => true,
            Err(why) => {
                warnings.push(format!(
                    "store row {} on {}: {why}; not used",
                    m.row, m.device_profile
                ));
                false
            }
        }
    };
    let peak_memory: Vec<PeakMemory> = evidence
        .peak_memory
        .iter()
        .filter(|m| keep_peak(m))
        .cloned()
        .collect();
    let socket = fleet
        .host
        .class
        .as_ref()
        .map(|c| c.memory.bandwidth_gb_s * 1e9);
    let mut keep_cpu = |f: &CpuFigure| match check_cpu_figure(&f.metric, f.threads, f.value, socket)
    {
        Ok(()) => true,
        Err(why) => {
            warnings.push(format!(
                "store row {} (calibrate run {}): {why}; not used",
                f.row, f.run
            ));
            false
        }
    };
    let cpu: Vec<CpuFigure> = evidence
        .cpu
        .iter()
        .filter(|f| keep_cpu(f))
        .cloned()
        .collect();
    Screened {
        evidence: Evidence {
            throughput,
            peak_memory,
            cpu,
            ..evidence.clone()
        },
        warnings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H100: Peaks = Peaks {
        bandwidth_bytes_per_s: 3.35e12,
        ops_per_s: 989e12 * COMPUTE_SLACK,
    };
    /// Llama-3-8B Q4_K_M: 4.9 GB, 8.0e9 weights, 0.5e9 of them the embedding.
    const LLAMA8B: Work = Work {
        bytes_per_token: 4.6e9,
        params_per_token: 7.5e9,
    };

    #[test]
    fn the_attack_figures_are_outside_and_real_ones_inside() {
        // Measured on an H100: ~150 tok/s decode at 1 sequence, ~10,000 tok/s prefill.
        assert!(check_tokens_per_s(150.0, Phase::Decode, H100, LLAMA8B, 1).is_ok());
        assert!(check_tokens_per_s(10_000.0, Phase::Prefill, H100, LLAMA8B, 1).is_ok());
        // 256 sequences decoding: compute-bound, thousands per second.
        assert!(check_tokens_per_s(6_000.0, Phase::Decode, H100, LLAMA8B, 256).is_ok());
        for bad in [
            1.79e308,
            1e9,
            512_845.0,
            f64::INFINITY,
            f64::NAN,
            0.0,
            -1.0,
            1e-300,
        ] {
            assert!(
                check_tokens_per_s(bad, Phase::Decode, H100, LLAMA8B, 4).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn unknown_peaks_bound_nothing_but_the_sign() {
        let none = Peaks::default();
        assert!(check_tokens_per_s(1e12, Phase::Decode, none, LLAMA8B, 1).is_ok());
        assert!(check_tokens_per_s(f64::INFINITY, Phase::Decode, none, LLAMA8B, 1).is_err());
        assert!(check_tokens_per_s(0.0, Phase::Decode, none, LLAMA8B, 1).is_err());
        // One unknown device makes a sum unknown rather than smaller.
        let sum = Peaks::sum([H100, none]);
        assert!(!sum.bandwidth_bytes_per_s.is_finite());
    }

    #[test]
    fn memory_peaks_must_be_positive_and_within_the_device() {
        assert!(check_peak_bytes(20 << 30, 24 << 30).is_ok());
        assert!(check_peak_bytes(0, 24 << 30).is_err());
        assert!(check_peak_bytes(u64::MAX, 24 << 30).is_err());
        assert!(check_peak_bytes(9_200_000_000_000_000_000, 24 << 30).is_err());
    }

    #[test]
    fn cpu_figures_are_bounded_per_thread_and_by_the_socket() {
        assert!(check_cpu_figure("cpu_read_bytes_per_s", 2, 20e9, Some(51.2e9)).is_ok());
        assert!(check_cpu_figure("cpu_read_bytes_per_s", 2, 1e-300, Some(51.2e9)).is_err());
        assert!(check_cpu_figure("cpu_read_bytes_per_s", 64, 9e12, Some(51.2e9)).is_err());
        assert!(check_cpu_figure("cpu_fma_flops", 1, 1e300, None).is_err());
        assert!(check_cpu_figure("cpu_dot_q4_0_params_per_s", 2, 24e9, None).is_ok());
    }
}
