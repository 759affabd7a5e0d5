//! Host CPU and memory: sysinfo for model, cores and memory; `std::arch` run-time detection for SIMD features;
//! sysfs for cache sizes (Linux). Edge module: reads the machine.

use super::{Caches, Cpu, Memory};

/// SIMD features this process can use, as llama.cpp and the repack rules name them.
pub fn simd_features() -> Vec<String> {
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
pub fn parse_cache_size(text: &str) -> Option<u64> {
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

/// The host CPU and memory, without container limits (applied by the caller). Never fails: what cannot be read
/// is left at a conservative value and explained in `notes`.
pub fn probe(notes: &mut Vec<String>) -> (Cpu, Memory) {
    let sys = sysinfo::System::new_with_specifics(
        sysinfo::RefreshKind::nothing()
            .with_cpu(sysinfo::CpuRefreshKind::nothing().with_frequency())
            .with_memory(sysinfo::MemoryRefreshKind::everything()),
    );
    let logical = std::thread::available_parallelism()
        .map(|n| n.get() as u32)
        .unwrap_or(1);
    let physical = match sysinfo::System::physical_core_count() {
        Ok(n) if n > 0 => n as u32,
        _ => {
            notes.push(format!(
                "physical core count unavailable; assuming {logical} (the logical CPU count)"
            ));
            logical
        }
    };
    let (model, vendor, freq, total, avail, swap_total, swap_free) = match &sys {
        Ok(s) => {
            let c = s.cpus().first();
            (
                c.map(|c| c.brand().trim().to_string()).unwrap_or_default(),
                c.map(|c| c.vendor_id().trim().to_string())
                    .unwrap_or_default(),
                c.map(|c| c.frequency()).filter(|f| *f > 0),
                s.total_memory(),
                s.available_memory(),
                Some(s.total_swap()),
                Some(s.free_swap()),
            )
        }
        Err(e) => {
            notes.push(format!("system information unavailable: {e}"));
            (String::new(), String::new(), None, 0, 0, None, None)
        }
    };
    let cpu = Cpu {
        model: if model.is_empty() {
            "unknown".into()
        } else {
            model
        },
        vendor: if vendor.is_empty() {
            "unknown".into()
        } else {
            vendor
        },
        physical_cores: physical.min(logical.max(physical)),
        logical_cpus: logical.max(physical),
        features: simd_features(),
        arch: Some(std::env::consts::ARCH.to_string()),
        frequency_mhz: freq,
        caches: caches(),
        effective_cpus: None,
        cpu_bound: None,
    };
    let memory = Memory {
        total_bytes: total,
        available_bytes: avail.min(total),
        swap_total_bytes: swap_total,
        swap_free_bytes: swap_free,
        host_total_bytes: None,
        bound: Some(super::Bound::Host),
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
