//! AMD and Intel GPUs from Linux DRM sysfs, with no vendor library: `/sys/class/drm/card*/device/` gives the PCI
//! vendor and device ids, and amdgpu adds `mem_info_vram_total` / `mem_info_vram_used` (bytes). Intel discrete
//! cards report local memory where the driver exposes it (`lmem_total_bytes` / `lmem_avail_bytes`, the i915
//! backport driver for Arc); without it an Intel GPU is a note, not a GPU, since nothing could be placed on it.
//!
//! amdgpu's documented power-state files (Linux `Documentation/gpu/amdgpu/thermal.rst`, "pp_dpm_*": `pp_dpm_sclk`
//! and `pp_dpm_mclk` list the shader and memory clock levels, one `N: <clock>Mhz` line each, `*` on the current
//! one) give the highest shader clock (`max_sm_clock_mhz`) and memory clock (`max_memory_clock_mhz`), readable
//! without root. What the documented files do not give is left out: the compute-unit count and the VRAM bus width
//! (neither `driver-misc.rst`'s product and memory files nor `gpu_metrics`, whose tables hold current clocks,
//! temperatures and activity, carry them), and the memory type that turns the memory clock into a data rate. An
//! inventory file may give them (`sm_count` as compute units, `memory_bus_width_bits`, `memory_data_rate_mt_s`).
//!
//! Degrades, never fails: a missing, unreadable or garbage file leaves that figure out and adds a note; a card
//! without a memory size is reported in the notes. The root is a parameter, so tests build a fake tree in a
//! temporary directory. May touch: files under `root/sys/class/drm` only, regular files, bounded reads.

use std::io::Read;
use std::path::Path;

use optimizer_core::hardware::{Gpu, GpuSource, GpuVendor};

/// PCI vendor ids (`/sys/class/drm/card*/device/vendor`).
pub(crate) const PCI_VENDOR_AMD: u16 = 0x1002;
pub(crate) const PCI_VENDOR_INTEL: u16 = 0x8086;

/// A sysfs attribute is one short line; anything longer is not the attribute we asked for.
const MAX_ATTRIBUTE_BYTES: u64 = 4096;

/// No machine has more DRM cards than this; a larger directory is not a real sysfs and is cut off.
const MAX_CARDS: usize = 256;

/// Probes DRM cards under `root` (`/` on a live machine) for AMD and Intel GPUs, numbering them from
/// `first_index` so they follow the NVIDIA GPUs in one inventory.
pub fn probe(root: &Path, first_index: u32, notes: &mut Vec<String>) -> Vec<Gpu> {
    let drm = root.join("sys/class/drm");
    let Ok(entries) = std::fs::read_dir(&drm) else {
        return Vec::new();
    };
    // card0, card1, … (not card0-DP-1 connectors), in numeric order so indices are stable.
    let mut cards: Vec<(u32, String)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            let n: u32 = name.strip_prefix("card")?.parse().ok()?;
            Some((n, name))
        })
        .take(MAX_CARDS)
        .collect();
    cards.sort();
    let mut gpus = Vec::new();
    let mut index = first_index;
    for (_, card) in cards {
        let dev = drm.join(&card).join("device");
        let Some(vendor) = read_hex(&dev.join("vendor")) else {
            continue;
        };
        let vendor = match vendor {
            PCI_VENDOR_AMD => GpuVendor::Amd,
            PCI_VENDOR_INTEL => GpuVendor::Intel,
            // NVIDIA GPUs come from NVML and the CUDA driver; other vendors are not planned.
            _ => continue,
        };
        let device = read_hex(&dev.join("device"));
        let pci_id = device.map(|d| {
            format!(
                "{:04x}:{d:04x}",
                if vendor == GpuVendor::Amd {
                    PCI_VENDOR_AMD
                } else {
                    PCI_VENDOR_INTEL
                }
            )
        });
        let label = format!(
            "{card} ({})",
            pci_id.as_deref().unwrap_or("unknown PCI device")
        );
        let (total, used_or_free) = match vendor {
            GpuVendor::Amd => (
                read_u64(&dev.join("mem_info_vram_total")),
                read_u64(&dev.join("mem_info_vram_used")).map(Memory::Used),
            ),
            _ => (
                read_u64(&drm.join(&card).join("lmem_total_bytes")),
                read_u64(&drm.join(&card).join("lmem_avail_bytes")).map(Memory::Free),
            ),
        };
        let Some(total) = total.filter(|t| *t > 0) else {
            notes.push(format!(
                "{label}: {vendor:?} GPU without a readable memory size in sysfs (integrated, or a driver that \
                 does not expose it); not planned"
            ));
            continue;
        };
        let free = match used_or_free {
            Some(Memory::Used(u)) => total.saturating_sub(u),
            Some(Memory::Free(f)) => f.min(total),
            None => {
                notes.push(format!(
                    "{label}: memory in use unreadable; reporting all {total} bytes as free"
                ));
                total
            }
        };
        let name = read_text(&dev.join("product_name"))
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| {
                format!(
                    "{} GPU {}",
                    if vendor == GpuVendor::Amd {
                        "AMD"
                    } else {
                        "Intel"
                    },
                    pci_id.as_deref().unwrap_or("")
                )
                .trim_end()
                .to_string()
            });
        let (max_sclk, max_mclk) = if vendor == GpuVendor::Amd {
            let sclk = read_text(&dev.join("pp_dpm_sclk")).and_then(|t| max_dpm_mhz(&t));
            let mclk = read_text(&dev.join("pp_dpm_mclk")).and_then(|t| max_dpm_mhz(&t));
            if sclk.is_none() || mclk.is_none() {
                notes.push(format!(
                    "{label}: {} unreadable (pp_dpm_sclk / pp_dpm_mclk missing or not clock levels); that figure is \
                     left out",
                    match (sclk, mclk) {
                        (None, None) => "shader and memory clocks",
                        (None, Some(_)) => "shader clock",
                        _ => "memory clock",
                    }
                ));
            }
            (sclk, mclk)
        } else {
            (None, None)
        };
        gpus.push(Gpu {
            index,
            name,
            vendor,
            memory_total_bytes: total,
            memory_free_bytes: free,
            compute_capability: None,
            uuid: None,
            pci_bus_id: read_text(&dev.join("uevent")).and_then(|u| pci_slot(&u)),
            pci_id,
            memory_used_bytes: Some(total - free),
            sm_count: None,
            max_sm_clock_mhz: max_sclk,
            max_memory_clock_mhz: max_mclk,
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
            unified_memory: false,
            gpu_working_set_bytes: None,
            backend: None,
            source: Some(GpuSource::Sysfs),
        });
        index = index.saturating_add(1);
    }
    gpus
}

enum Memory {
    Used(u64),
    Free(u64),
}

/// A regular file's text, at most [`MAX_ATTRIBUTE_BYTES`], trimmed; `None` for anything else or invalid UTF-8.
fn read_text(path: &Path) -> Option<String> {
    // Regular files only: a FIFO in a fake tree must not block the probe.
    if !std::fs::metadata(path).ok()?.is_file() {
        return None;
    }
    let mut s = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(MAX_ATTRIBUTE_BYTES)
        .read_to_string(&mut s)
        .ok()?;
    Some(s.trim().to_string())
}

fn read_u64(path: &Path) -> Option<u64> {
    read_text(path)?.parse().ok()
}

/// `0x1002` → 0x1002.
fn read_hex(path: &Path) -> Option<u16> {
    let t = read_text(path)?;
    u16::from_str_radix(t.strip_prefix("0x").unwrap_or(&t), 16).ok()
}

/// The highest clock of an amdgpu `pp_dpm_*` file: lines `0: 500Mhz`, `1: 2482Mhz *` (`S: 25Mhz` for a sleep
/// level on some ASICs); `None` when no line holds a non-zero clock. Lines that are not clock levels are skipped.
pub(crate) fn max_dpm_mhz(text: &str) -> Option<u32> {
    text.lines()
        .filter_map(|l| {
            let (_, rest) = l.split_once(':')?;
            let word = rest.split_whitespace().next()?;
            let digits = word
                .strip_suffix("Mhz")
                .or_else(|| word.strip_suffix("MHz"))?;
            digits.parse::<u32>().ok().filter(|mhz| *mhz > 0)
        })
        .max()
}

/// `PCI_SLOT_NAME=0000:03:00.0` from a device's `uevent`.
fn pci_slot(uevent: &str) -> Option<String> {
    uevent
        .lines()
        .find_map(|l| l.strip_prefix("PCI_SLOT_NAME="))
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_slot_from_uevent() {
        assert_eq!(
            pci_slot("DRIVER=amdgpu\nPCI_CLASS=30000\nPCI_SLOT_NAME=0000:03:00.0\n").as_deref(),
            Some("0000:03:00.0")
        );
        assert_eq!(pci_slot("DRIVER=amdgpu\n"), None);
    }

    #[test]
    fn highest_dpm_level_is_the_max_clock() {
        // RX 580 (amdgpu-sysfs test data, `pp_dpm_sclk`) and an RDNA 3 layout with a sleep level.
        let rx580 = "0: 300Mhz \n1: 600Mhz \n2: 900Mhz *\n3: 1145Mhz \n4: 1215Mhz \n5: 1257Mhz \n6: 1300Mhz \n7: 1366Mhz\n";
        assert_eq!(max_dpm_mhz(rx580), Some(1366));
        assert_eq!(
            max_dpm_mhz("S: 25Mhz\n0: 500Mhz *\n1: 2482MHz\n"),
            Some(2482)
        );
        for garbage in [
            "",
            "lots",
            "0: fastMhz",
            "0: 0Mhz",
            "0: 99999999999Mhz",
            "1366",
        ] {
            assert_eq!(max_dpm_mhz(garbage), None, "{garbage:?}");
        }
    }
}
