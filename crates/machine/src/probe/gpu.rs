//! NVIDIA GPUs: NVML first (nvml-wrapper, loaded at run time), the CUDA driver API (cudarc, loaded at run time)
//! as a fallback for name, memory and compute capability, and for the SM count NVML does not report.
//!
//! Degrades, never fails: no driver at all gives no GPUs and a note; a call that fails midway leaves that field
//! empty and adds a note naming the call. cudarc panics on first use without `libcuda`, so its presence is
//! checked before any driver call.

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::Clock;
use nvml_wrapper::enums::device::UsedGpuMemory;

use optimizer_core::hardware::{Gpu, GpuProcess, GpuSource, GpuVendor};

/// GDDR and HBM move two data words per memory clock as NVML reports the clock: an RTX 4090 reports
/// 10,501 MHz and a 384-bit bus, and 10,501 MHz × 2 × 384 / 8 = 1,008 GB/s, its published bandwidth.
pub(crate) const TRANSFERS_PER_MEMORY_CLOCK: u64 = 2;

/// Peak bandwidth from NVML's max memory clock and bus width (bytes per second).
pub(crate) fn peak_bandwidth_bytes_per_s(memory_clock_mhz: u32, bus_width_bits: u32) -> u64 {
    u64::from(memory_clock_mhz) * 1_000_000 * TRANSFERS_PER_MEMORY_CLOCK * u64::from(bus_width_bits)
        / 8
}

/// `13000` → `"13.0"`, `12080` → `"12.8"` (NVML's CUDA driver version encoding: 1000 × major + 10 × minor).
pub(crate) fn cuda_version_string(v: i32) -> String {
    format!("{}.{}", v / 1000, (v % 1000) / 10)
}

/// Where an NVIDIA kernel driver shows itself on Linux: `/proc/driver/nvidia` (procfs's driver directory is
/// not namespaced, so containers see it too) and, under WSL 2, the paravirtual GPU device `/dev/dxg` through
/// which the Windows driver serves `libcuda`.
pub(crate) const NVIDIA_DRIVER_MARKERS: &[&str] = &["/proc/driver/nvidia", "/dev/dxg"];

/// Whether an NVIDIA driver can be present. On Linux without any of [`NVIDIA_DRIVER_MARKERS`] neither NVML
/// nor the CUDA driver can see a GPU, and asking them costs most of a live probe: cudarc looks for `libcuda`
/// under about 50 names, each a walk of the library path (about 180 failed opens, 1-2 ms). Elsewhere the
/// libraries are asked.
pub(crate) fn nvidia_driver_possible(exists: impl Fn(&str) -> bool) -> bool {
    !cfg!(target_os = "linux") || NVIDIA_DRIVER_MARKERS.iter().any(|p| exists(p))
}

/// Probes every NVIDIA GPU this process can see. NVML answers first; the CUDA driver, whose `cuInit` takes
/// about 200 ms on an H100 host (measured: 183-213 ms, against 2-12 ms for `nvmlInit`), is asked only when
/// NVML is unavailable or `cuda_details_for` says one of NVML's GPUs needs what only the driver gives (the SM
/// count and whether the GPU is integrated). The same predicate gates NVML's slow per-device queries, which
/// only a derivation from the probe needs (measured on an H100 host with driver 580: max memory clock 3.9 ms,
/// max SM clock 1.6 ms, max PCIe generation 1.8 ms, enforced power limit 1.7 ms, against 0.02 ms for name,
/// memory and PCI info, each `nvmlDevice*` call timed through ctypes).
pub(crate) fn probe_scoped(
    notes: &mut Vec<String>,
    cuda_details_for: &dyn Fn(&Gpu) -> bool,
) -> Vec<Gpu> {
    if !nvidia_driver_possible(|p| std::path::Path::new(p).exists()) {
        notes.push(format!(
            "no NVIDIA GPU visible: no NVIDIA kernel driver ({} absent)",
            NVIDIA_DRIVER_MARKERS.join(", ")
        ));
        return Vec::new();
    }
    match Nvml::init() {
        Ok(nvml) => {
            let mut gpus = nvml_devices(&nvml, notes, cuda_details_for);
            if !gpus.iter().any(cuda_details_for) {
                return gpus;
            }
            let cuda = cuda_devices(notes);
            // NVML has no SM count; take it from the CUDA driver, matched by PCI location.
            for g in &mut gpus {
                if let Some(c) = cuda
                    .iter()
                    .find(|c| g.pci_bus_id.as_deref().is_some_and(|b| same_bus(b, &c.pci)))
                {
                    g.sm_count = c.sm_count.or(g.sm_count);
                    g.unified_memory |= c.integrated;
                }
            }
            gpus
        }
        Err(e) => {
            let cuda = cuda_devices(notes);
            if cuda.is_empty() {
                notes.push(format!(
                    "no NVIDIA GPU visible: NVML unavailable ({e}) and no CUDA driver"
                ));
                Vec::new()
            } else {
                notes.push(format!(
                    "NVML unavailable ({e}); GPU name, memory and compute capability from the CUDA driver"
                ));
                cuda.into_iter().map(|c| c.gpu).collect()
            }
        }
    }
}

/// `00000000:01:00.0` (NVML) against the CUDA driver's domain/bus/device numbers.
fn same_bus(nvml_bus_id: &str, pci: &(i32, i32, i32)) -> bool {
    let parse = |s: &str| i64::from_str_radix(s, 16).ok();
    let mut parts = nvml_bus_id.split(':');
    let (Some(dom), Some(bus), Some(devfn)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let dev = devfn.split('.').next().unwrap_or("");
    parse(dom) == Some(i64::from(pci.0))
        && parse(bus) == Some(i64::from(pci.1))
        && parse(dev) == Some(i64::from(pci.2))
}

fn nvml_devices(
    nvml: &Nvml,
    notes: &mut Vec<String>,
    details_for: &dyn Fn(&Gpu) -> bool,
) -> Vec<Gpu> {
    let driver = nvml.sys_driver_version().ok();
    let cuda = nvml.sys_cuda_driver_version().ok().map(cuda_version_string);
    let count = match nvml.device_count() {
        Ok(n) => n,
        Err(e) => {
            notes.push(format!("NVML device count failed: {e}"));
            return Vec::new();
        }
    };
    let mut gpus = Vec::new();
    for i in 0..count {
        let d = match nvml.device_by_index(i) {
            Ok(d) => d,
            Err(e) => {
                notes.push(format!("GPU {i}: NVML could not open the device: {e}"));
                continue;
            }
        };
        let mut miss = |what: &str, e: nvml_wrapper::error::NvmlError| {
            notes.push(format!("GPU {i}: NVML {what} failed: {e}"));
        };
        let name = d.name().unwrap_or_else(|e| {
            miss("name", e);
            format!("NVIDIA GPU {i}")
        });
        let Ok(mem) = d.memory_info().map_err(|e| miss("memory info", e)) else {
            // Without memory figures the device cannot be planned for; skip it rather than invent them.
            continue;
        };
        let ok = |r: Result<u32, _>| r.ok();
        let pci = d.pci_info().ok();
        let processes = d
            .running_compute_processes()
            .map(|ps| {
                ps.into_iter()
                    .map(|p| GpuProcess {
                        pid: p.pid,
                        used_bytes: match p.used_gpu_memory {
                            UsedGpuMemory::Used(b) => Some(b),
                            UsedGpuMemory::Unavailable => None,
                        },
                    })
                    .collect()
            })
            .unwrap_or_default();
        let mut g = Gpu {
            index: d.index().unwrap_or(i),
            name,
            vendor: GpuVendor::Nvidia,
            memory_total_bytes: mem.total,
            memory_free_bytes: mem.free,
            compute_capability: d
                .cuda_compute_capability()
                .ok()
                .map(|c| format!("{}.{}", c.major, c.minor)),
            uuid: d.uuid().ok(),
            pci_bus_id: pci.as_ref().map(|p| p.bus_id.clone()),
            pci_id: pci.as_ref().map(|p| {
                format!(
                    "{:04x}:{:04x}",
                    p.pci_device_id & 0xffff,
                    p.pci_device_id >> 16
                )
            }),
            memory_used_bytes: Some(mem.used),
            sm_count: None,
            max_sm_clock_mhz: None,
            max_memory_clock_mhz: None,
            memory_bus_width_bits: None,
            memory_data_rate_mt_s: None,
            peak_bandwidth_bytes_per_s: None,
            pcie_generation: None,
            pcie_width: None,
            power_limit_w: None,
            driver_version: driver.clone(),
            cuda_driver_version: cuda.clone(),
            mig_enabled: d.mig_mode().ok().map(|m| m.current == 1),
            processes,
            unified_memory: false,
            gpu_working_set_bytes: None,
            backend: None,
            source: Some(GpuSource::Nvml),
        };
        if details_for(&g) {
            let mem_clock = ok(d.max_clock_info(Clock::Memory));
            let bus_width = ok(d.memory_bus_width());
            g.max_sm_clock_mhz = ok(d.max_clock_info(Clock::SM));
            g.max_memory_clock_mhz = mem_clock;
            g.memory_bus_width_bits = bus_width;
            g.peak_bandwidth_bytes_per_s = mem_clock
                .zip(bus_width)
                .map(|(c, w)| peak_bandwidth_bytes_per_s(c, w));
            g.pcie_generation = ok(d.max_pcie_link_gen());
            g.pcie_width = ok(d.max_pcie_link_width());
            g.power_limit_w = ok(d.enforced_power_limit()).map(|mw| f64::from(mw) / 1000.0);
        }
        gpus.push(g);
    }
    gpus
}

/// A device as the CUDA driver reports it.
struct CudaDevice {
    gpu: Gpu,
    sm_count: Option<u32>,
    integrated: bool,
    /// PCI domain, bus, device.
    pci: (i32, i32, i32),
}

fn cuda_devices(notes: &mut Vec<String>) -> Vec<CudaDevice> {
    use cudarc::driver::{result, sys};
    // SAFETY: only checks whether the shared library can be loaded; calls nothing in it.
    if !unsafe { sys::is_culib_present() } {
        return Vec::new();
    }
    if let Err(e) = result::init() {
        notes.push(format!("CUDA driver present but cuInit failed: {e}"));
        return Vec::new();
    }
    let count = match result::device::get_count() {
        Ok(n) => n,
        Err(e) => {
            notes.push(format!("CUDA device count failed: {e}"));
            return Vec::new();
        }
    };
    let cuda_version = {
        let mut v = 0i32;
        // SAFETY: cuInit succeeded; the out-pointer is a valid i32.
        let r = unsafe { sys::cuDriverGetVersion(&mut v) };
        (r == sys::CUresult::CUDA_SUCCESS).then(|| cuda_version_string(v))
    };
    let mut out = Vec::new();
    for i in 0..count {
        let Ok(dev) = result::device::get(i) else {
            notes.push(format!("CUDA device {i}: cuDeviceGet failed"));
            continue;
        };
        // SAFETY: `dev` comes from cuDeviceGet.
        let attr = |a| unsafe { result::device::get_attribute(dev, a) }.ok();
        use sys::CUdevice_attribute as A;
        let Some(total) = (unsafe { result::device::total_mem(dev) }).ok() else {
            notes.push(format!("CUDA device {i}: cuDeviceTotalMem failed"));
            continue;
        };
        let name = result::device::get_name(dev).unwrap_or_else(|_| format!("NVIDIA GPU {i}"));
        let cc = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
            .zip(attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))
            .map(|(a, b)| format!("{a}.{b}"));
        let sm =
            attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT).and_then(|v| u32::try_from(v).ok());
        let integrated = attr(A::CU_DEVICE_ATTRIBUTE_INTEGRATED) == Some(1);
        // The driver reports the memory clock in kHz.
        let mem_clock = attr(A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)
            .and_then(|k| u32::try_from(k / 1000).ok());
        let bus = attr(A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)
            .and_then(|v| u32::try_from(v).ok());
        let pci = (
            attr(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID).unwrap_or(-1),
            attr(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID).unwrap_or(-1),
            attr(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID).unwrap_or(-1),
        );
        let total = total as u64;
        out.push(CudaDevice {
            sm_count: sm,
            integrated,
            pci,
            gpu: Gpu {
                index: i as u32,
                name,
                vendor: GpuVendor::Nvidia,
                memory_total_bytes: total,
                // Free memory needs a context; without NVML report total and say so in the notes above.
                memory_free_bytes: total,
                compute_capability: cc,
                uuid: None,
                pci_bus_id: (pci.0 >= 0)
                    .then(|| format!("{:08x}:{:02x}:{:02x}.0", pci.0, pci.1, pci.2)),
                pci_id: None,
                memory_used_bytes: None,
                sm_count: sm,
                max_sm_clock_mhz: attr(A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)
                    .and_then(|k| u32::try_from(k / 1000).ok()),
                max_memory_clock_mhz: mem_clock,
                memory_bus_width_bits: bus,
                memory_data_rate_mt_s: None,
                peak_bandwidth_bytes_per_s: mem_clock
                    .zip(bus)
                    .map(|(c, w)| peak_bandwidth_bytes_per_s(c, w)),
                pcie_generation: None,
                pcie_width: None,
                power_limit_w: None,
                driver_version: None,
                cuda_driver_version: cuda_version.clone(),
                mig_enabled: None,
                processes: Vec::new(),
                unified_memory: integrated,
                gpu_working_set_bytes: None,
                backend: None,
                source: Some(GpuSource::CudaDriver),
            },
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_from_clock_and_bus() {
        // RTX 4090: 10,501 MHz, 384-bit → 1,008 GB/s.
        assert_eq!(peak_bandwidth_bytes_per_s(10_501, 384), 1_008_096_000_000);
        // A100 80GB SXM: 1,593 MHz, 5,120-bit → 2,039 GB/s.
        assert_eq!(peak_bandwidth_bytes_per_s(1_593, 5_120), 2_039_040_000_000);
    }

    #[test]
    fn cuda_versions() {
        assert_eq!(cuda_version_string(13000), "13.0");
        assert_eq!(cuda_version_string(12080), "12.8");
    }

    #[test]
    fn bus_ids_match_across_apis() {
        assert!(same_bus("00000000:01:00.0", &(0, 1, 0)));
        assert!(same_bus("00000001:af:1f.0", &(1, 0xaf, 0x1f)));
        assert!(!same_bus("00000000:02:00.0", &(0, 1, 0)));
        assert!(!same_bus("garbage", &(0, 1, 0)));
    }

    #[test]
    fn the_driver_markers_decide_whether_libraries_are_asked() {
        if cfg!(target_os = "linux") {
            assert!(!nvidia_driver_possible(|_| false));
            assert!(nvidia_driver_possible(|p| p == "/proc/driver/nvidia"));
            assert!(nvidia_driver_possible(|p| p == "/dev/dxg"));
        } else {
            assert!(nvidia_driver_possible(|_| false));
        }
    }

    /// On a machine without an NVIDIA driver (every CI machine), the probe yields no GPUs and a note.
    #[test]
    fn no_driver_means_no_gpus_and_a_note() {
        let mut notes = Vec::new();
        let gpus = probe_scoped(&mut notes, &|_| true);
        if gpus.is_empty() {
            assert!(!notes.is_empty(), "an empty GPU list must say why");
        }
    }
}
