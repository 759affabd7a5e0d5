//! Host CPU and memory: on Linux `/proc/cpuinfo` and `/proc/meminfo`, each read once; elsewhere sysinfo;
//! `std::arch` run-time detection for SIMD features; sysfs for cache sizes (Linux). Edge module: reads the
//! machine. Trade-off: the Linux parsers repeat a few lines of sysinfo's to read each file once (sysinfo
//! re-reads `/proc/cpuinfo` per CPU), which is most of a live probe's cost on a many-core host.

use optimizer_core::hardware::{Caches, Cpu, Memory};

/// SIMD features this process can use, as llama.cpp and the repack rules name them.
pub(crate) fn simd_features() -> Vec<String> {
    let mut f: Vec<&str> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        let table: &[(&str, bool)] = &[
            ("sse4.2", has!("sse4.2")),
            ("avx", has!("avx")),
            ("avx2", has!("avx2")),
            ("fma", has!("fma")),
            ("f16c", has!("f16c")),
            ("avx512f", has!("avx512f")),
            ("avx512bw", has!("avx512bw")),
            ("avx512vl", has!("avx512vl")),
            ("avx512vnni", has!("avx512vnni")),
            ("avx512bf16", has!("avx512bf16")),
            ("avxvnni", has!("avxvnni")),
            ("amx", cpuid_amx_tile()),
        ];
        f.extend(table.iter().filter(|(_, on)| *on).map(|(n, _)| *n));
    }
    #[cfg(target_arch = "aarch64")]
    {
        use std::arch::is_aarch64_feature_detected as has;
        let table: &[(&str, bool)] = &[
            ("neon", has!("neon")),
            ("dotprod", has!("dotprod")),
            ("i8mm", has!("i8mm")),
            ("sve", has!("sve")),
            ("fp16", has!("fp16")),
            ("bf16", has!("bf16")),
        ];
        f.extend(table.iter().filter(|(_, on)| *on).map(|(n, _)| *n));
    }
    f.into_iter().map(str::to_string).collect()
}

/// AMX-TILE from CPUID leaf 7, sub-leaf 0, EDX bit 24 (Intel SDM vol. 2A, CPUID): `is_x86_feature_detected!`
/// does not accept AMX on stable Rust. This reports the CPU's support; the kernel must also grant the tile
/// state (Linux ≥ 5.16 does on request), which llama.cpp requests itself.
#[cfg(target_arch = "x86_64")]
fn cpuid_amx_tile() -> bool {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    // CPUID is available on every x86_64 CPU; leaf 7 only where the maximum basic leaf reaches it.
    if __cpuid(0).eax < 7 {
        return false;
    }
    __cpuid_count(7, 0).edx & (1 << 24) != 0
}

/// Parses a sysfs cache size (`32K`, `1024K`, `32M`) into bytes.
pub(crate) fn parse_cache_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let (num, mult) = match t.chars().last()? {
        'K' => (&t[..t.len() - 1], 1u64 << 10),
        'M' => (&t[..t.len() - 1], 1 << 20),
        'G' => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mult)
}

/// Cache sizes of CPU 0 from `/sys/devices/system/cpu/cpu0/cache/index*/{level,type,size}`. L3 is reported per
/// cache instance, which is what one socket's cores share.
fn caches() -> Option<Caches> {
    let base = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    let mut c = Caches::default();
    for entry in std::fs::read_dir(base).ok()?.flatten() {
        let p = entry.path();
        let read = |f: &str| std::fs::read_to_string(p.join(f)).ok();
        let (Some(level), Some(kind), Some(size)) = (read("level"), read("type"), read("size"))
        else {
            continue;
        };
        let Some(bytes) = parse_cache_size(&size) else {
            continue;
        };
        match (level.trim(), kind.trim()) {
            ("1", "Data") => c.l1d_bytes = Some(bytes),
            ("2", _) => c.l2_bytes = Some(bytes),
            ("3", _) => c.l3_bytes = Some(bytes),
            _ => {}
        }
    }
    (c != Caches::default()).then_some(c)
}

/// What one read of Linux's `/proc/cpuinfo` says about the CPU.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct CpuInfo {
    /// `model name` of the first processor (x86; absent on most Arm kernels).
    pub model: Option<String>,
    /// `vendor_id` of the first processor.
    pub vendor: Option<String>,
    /// `cpu MHz` of the first processor.
    pub mhz: Option<u64>,
    /// Distinct (`physical id`, `core id`) pairs; a processor without them counts as one core (Arm, where
    /// the kernel prints neither). `None` when no processor is listed.
    pub physical_cores: Option<u32>,
}

/// Parses `/proc/cpuinfo` in one pass, as sysinfo does for the same fields (its Linux `cpu.rs`), but once
/// instead of once per field and per CPU: sysinfo re-reads the whole file for every CPU's frequency, which is
/// quadratic in the CPU count.
pub(crate) fn parse_cpuinfo(text: &str) -> CpuInfo {
    let mut info = CpuInfo::default();
    let mut cores = std::collections::BTreeSet::new();
    let mut processors = 0u32;
    let (mut processor, mut core, mut package): (Option<&str>, Option<&str>, Option<&str>) =
        (None, None, None);
    let mut flush =
        |processor: &mut Option<&str>, core: &mut Option<&str>, package: &mut Option<&str>| {
            match (core.take(), package.take()) {
                (Some(c), Some(p)) => {
                    cores.insert(format!("{p} {c}"));
                }
                _ => {
                    if let Some(cpu) = processor.as_ref() {
                        cores.insert(format!("cpu {cpu}"));
                    }
                }
            }
            *processor = None;
        };
    for line in text.lines() {
        if line.trim().is_empty() {
            flush(&mut processor, &mut core, &mut package);
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key.trim() {
            "processor" => {
                processors = processors.saturating_add(1);
                processor = Some(value);
            }
            "core id" => core = Some(value),
            "physical id" => package = Some(value),
            "model name" if info.model.is_none() && !value.is_empty() => {
                info.model = Some(value.to_string());
            }
            "vendor_id" if info.vendor.is_none() && !value.is_empty() => {
                info.vendor = Some(value.to_string());
            }
            "cpu MHz" if info.mhz.is_none() => {
                // `as` saturates; a garbage value reads as absent.
                info.mhz = value
                    .parse::<f64>()
                    .ok()
                    .filter(|m| m.is_finite() && *m > 0.0)
                    .map(|m| m as u64);
            }
            _ => {}
        }
    }
    flush(&mut processor, &mut core, &mut package);
    if processors > 0 {
        info.physical_cores = u32::try_from(cores.len()).ok();
    }
    info
}

/// System memory from Linux's `/proc/meminfo` (KiB): total, available (estimated from free, buffers, page
/// cache and reclaimable slab on kernels before 3.14, which lack `MemAvailable`, as sysinfo does), swap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MemInfo {
    pub total_bytes: u64,
    pub available_bytes: u64,
    pub swap_total_bytes: u64,
    pub swap_free_bytes: u64,
}

/// Parses `/proc/meminfo`; `None` without `MemTotal`.
pub(crate) fn parse_meminfo(text: &str) -> Option<MemInfo> {
    let mut total = None;
    let (mut available, mut free, mut buffers, mut cached, mut reclaimable) =
        (None, 0u64, 0u64, 0u64, 0u64);
    let (mut swap_total, mut swap_free) = (0u64, 0u64);
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let Some(kib) = rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<u64>().ok())
        else {
            continue;
        };
        // The kernel says "kB" and means KiB.
        let bytes = kib.saturating_mul(1024);
        match key {
            "MemTotal" => total = Some(bytes),
            "MemAvailable" => available = Some(bytes),
            "MemFree" => free = bytes,
            "Buffers" => buffers = bytes,
            "Cached" => cached = bytes,
            "SReclaimable" => reclaimable = bytes,
            "SwapTotal" => swap_total = bytes,
            "SwapFree" => swap_free = bytes,
            _ => {}
        }
    }
    let total_bytes = total?;
    let available_bytes = available.unwrap_or_else(|| {
        free.saturating_add(buffers)
            .saturating_add(cached)
            .saturating_add(reclaimable)
    });
    Some(MemInfo {
        total_bytes,
        available_bytes: available_bytes.min(total_bytes),
        swap_total_bytes: swap_total,
        swap_free_bytes: swap_free,
    })
}

/// What the probe reads about the host CPU and memory, before it is shaped into [`Cpu`] and [`Memory`].
struct Host {
    model: String,
    vendor: String,
    physical: Option<u32>,
    frequency_mhz: Option<u64>,
    memory: Option<MemInfo>,
}

/// Linux: `/proc/cpuinfo` and `/proc/meminfo`, each read once (about 1 ms less than sysinfo here, and
/// linear rather than quadratic in the CPU count); the current clock of CPU 0 from cpufreq when the kernel
/// has it, else `cpu MHz`. sysinfo only names an Arm CPU, whose kernel prints no `model name` (it decodes
/// the implementer and part numbers).
fn host_linux(notes: &mut Vec<String>) -> Host {
    let info = std::fs::read_to_string("/proc/cpuinfo")
        .map(|t| parse_cpuinfo(&t))
        .unwrap_or_default();
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| parse_meminfo(&t));
    if memory.is_none() {
        notes.push("system memory unavailable: /proc/meminfo unreadable".into());
    }
    let cpufreq_khz =
        std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq")
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok());
    let (model, vendor) = match (info.model, info.vendor) {
        (Some(m), Some(v)) => (m, v),
        (m, v) => {
            let (sm, sv) = sysinfo_brand();
            (m.unwrap_or(sm), v.unwrap_or(sv))
        }
    };
    Host {
        model,
        vendor,
        physical: info.physical_cores,
        frequency_mhz: cpufreq_khz
            .map(|k| k / 1000)
            .or(info.mhz)
            .filter(|f| *f > 0),
        memory,
    }
}

/// The CPU brand and vendor as sysinfo names them (only what Linux's `/proc/cpuinfo` lacks).
fn sysinfo_brand() -> (String, String) {
    let Ok(s) = sysinfo::System::new_with_specifics(
        sysinfo::RefreshKind::nothing().with_cpu(sysinfo::CpuRefreshKind::nothing()),
    ) else {
        return Default::default();
    };
    s.cpus().first().map_or_else(Default::default, |c| {
        (
            c.brand().trim().to_string(),
            c.vendor_id().trim().to_string(),
        )
    })
}

/// Elsewhere: sysinfo. (Both readers compile on every platform, so each is type-checked on Linux CI.)
fn host_sysinfo(notes: &mut Vec<String>) -> Host {
    let s = match sysinfo::System::new_with_specifics(
        sysinfo::RefreshKind::nothing()
            .with_cpu(sysinfo::CpuRefreshKind::nothing().with_frequency())
            .with_memory(sysinfo::MemoryRefreshKind::everything()),
    ) {
        Ok(s) => s,
        Err(e) => {
            notes.push(format!("system information unavailable: {e}"));
            return Host {
                model: String::new(),
                vendor: String::new(),
                physical: None,
                frequency_mhz: None,
                memory: None,
            };
        }
    };
    let c = s.cpus().first();
    let physical = sysinfo::System::physical_core_count()
        .ok()
        .filter(|n| *n > 0)
        .and_then(|n| u32::try_from(n).ok());
    let total = s.total_memory();
    if total == 0 {
        notes.push("system memory unavailable".into());
    }
    Host {
        model: c.map(|c| c.brand().trim().to_string()).unwrap_or_default(),
        vendor: c
            .map(|c| c.vendor_id().trim().to_string())
            .unwrap_or_default(),
        physical,
        frequency_mhz: c.map(|c| c.frequency()).filter(|f| *f > 0),
        memory: (total > 0).then(|| MemInfo {
            total_bytes: total,
            available_bytes: s.available_memory().min(total),
            swap_total_bytes: s.total_swap(),
            swap_free_bytes: s.free_swap(),
        }),
    }
}

fn host(notes: &mut Vec<String>) -> Host {
    if cfg!(target_os = "linux") {
        host_linux(notes)
    } else {
        host_sysinfo(notes)
    }
}

/// The host CPU and memory, without container limits (applied by the caller). Never fails: what cannot be read
/// is left at a conservative value and explained in `notes`. Reads only what the inventory holds, once each.
pub(crate) fn probe(notes: &mut Vec<String>) -> (Cpu, Memory) {
    let logical = std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1);
    let h = host(notes);
    let physical = match h.physical {
        Some(n) if n > 0 => n,
        _ => {
            notes.push(format!(
                "physical core count unavailable; assuming {logical} (the logical CPU count)"
            ));
            logical
        }
    };
    let or_unknown = |s: String| if s.is_empty() { "unknown".into() } else { s };
    let cpu = Cpu {
        model: or_unknown(h.model),
        vendor: or_unknown(h.vendor),
        physical_cores: physical.min(logical.max(physical)),
        logical_cpus: logical.max(physical),
        features: simd_features(),
        arch: Some(std::env::consts::ARCH.to_string()),
        frequency_mhz: h.frequency_mhz,
        caches: caches(),
        effective_cpus: None,
        cpu_bound: None,
    };
    let m = h.memory.unwrap_or_default();
    let memory = Memory {
        total_bytes: m.total_bytes,
        available_bytes: m.available_bytes.min(m.total_bytes),
        swap_total_bytes: h.memory.map(|m| m.swap_total_bytes),
        swap_free_bytes: h.memory.map(|m| m.swap_free_bytes),
        host_total_bytes: None,
        bound: Some(optimizer_core::hardware::Bound::Host),
        unified: cfg!(all(target_os = "macos", target_arch = "aarch64")),
    };
    (cpu, memory)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes() {
        assert_eq!(parse_cache_size("32K\n"), Some(32 << 10));
        assert_eq!(parse_cache_size("36M"), Some(36 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("K"), None);
        assert_eq!(parse_cache_size(""), None);
        assert_eq!(parse_cache_size("lots"), None);
    }

    /// Two sockets, two cores each, two threads per core: 8 processors, 4 physical cores; the first
    /// processor's model, vendor and clock.
    #[test]
    fn cpuinfo_counts_distinct_cores_across_sockets() {
        let mut text = String::new();
        for cpu in 0..8 {
            let (package, core) = (cpu / 4, cpu % 2);
            text.push_str(&format!(
                "processor\t: {cpu}\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8468\ncpu MHz\t\t: {}.123\nphysical id\t: {package}\ncore id\t\t: {core}\nflags\t\t: fpu: vme\n\n",
                2100 + cpu
            ));
        }
        let info = parse_cpuinfo(&text);
        assert_eq!(
            info.model.as_deref(),
            Some("Intel(R) Xeon(R) Platinum 8468")
        );
        assert_eq!(info.vendor.as_deref(), Some("GenuineIntel"));
        assert_eq!(info.mhz, Some(2100));
        assert_eq!(info.physical_cores, Some(4));
    }

    /// Arm kernels print neither `model name` nor core ids: each processor is a core, and the brand is left
    /// to sysinfo.
    #[test]
    fn cpuinfo_without_core_ids_counts_processors() {
        let text = "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n\nprocessor\t: 1\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n";
        let info = parse_cpuinfo(text);
        assert_eq!(info.physical_cores, Some(2));
        assert_eq!(info.model, None);
        assert_eq!(info.mhz, None, "BogoMIPS is not a clock");
        assert_eq!(parse_cpuinfo("").physical_cores, None);
        assert_eq!(parse_cpuinfo("garbage\n:::\ncpu MHz : nan\n").mhz, None);
    }

    #[test]
    fn meminfo_reads_kib_and_estimates_available_on_old_kernels() {
        let m = parse_meminfo(
            "MemTotal:       131978020 kB\nMemFree:         1000 kB\nMemAvailable:   100000000 kB\nSwapTotal:  2048 kB\nSwapFree: 1024 kB\n",
        )
        .unwrap();
        assert_eq!(m.total_bytes, 131_978_020 * 1024);
        assert_eq!(m.available_bytes, 100_000_000 * 1024);
        assert_eq!(
            (m.swap_total_bytes, m.swap_free_bytes),
            (2048 * 1024, 1024 * 1024)
        );
        // Before Linux 3.14: free + buffers + page cache + reclaimable slab.
        let old = parse_meminfo(
            "MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 10 kB\nCached: 200 kB\nSReclaimable: 5 kB\n",
        )
        .unwrap();
        assert_eq!(old.available_bytes, 315 * 1024);
        assert_eq!(parse_meminfo("MemFree: 1 kB\n"), None);
        // Available never exceeds total, and absurd figures saturate instead of wrapping.
        let odd = parse_meminfo(
            "MemTotal: 18446744073709551615 kB\nMemAvailable: 18446744073709551615 kB\n",
        )
        .unwrap();
        assert_eq!(odd.total_bytes, u64::MAX);
        assert!(odd.available_bytes <= odd.total_bytes);
    }

    #[test]
    fn features_are_known_names() {
        let known = [
            "sse4.2",
            "avx",
            "avx2",
            "fma",
            "f16c",
            "avx512f",
            "avx512bw",
            "avx512vl",
            "avx512vnni",
            "avx512bf16",
            "avxvnni",
            "amx",
            "neon",
            "dotprod",
            "i8mm",
            "sve",
            "fp16",
            "bf16",
        ];
        for f in simd_features() {
            assert!(known.contains(&f.as_str()), "{f}");
        }
    }
}
