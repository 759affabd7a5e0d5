//! The inventory: what a machine has (CPU, memory, GPUs), probed live or read from YAML.
//!
//! The YAML form is an input contract (`--inventory FILE`, `OPTIMIZER_INVENTORY`) that must stay stable: the
//! minimal document is
//! ```yaml
//! cpu: {model: str, vendor: str, physical_cores: int, logical_cpus: int, features: [str]}
//! memory: {total_bytes: int, available_bytes: int}
//! gpus:
//!   - {index: int, name: str, vendor: nvidia, memory_total_bytes: int, memory_free_bytes: int,
//!      compute_capability: "8.9"}
//! ```
//! and every other field is optional. Unknown fields are refused, so a misspelt optional field is an error
//! rather than a silently ignored value. An Apple GPU is `vendor: apple, unified_memory: true` with the
//! machine's memory as `memory_total_bytes`; AMD and Intel GPUs are `vendor: amd` / `vendor: intel` without a
//! compute capability.

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

/// Most logical CPUs an inventory may give (and so most physical cores, threads and CPUs of a quota): 8,192,
/// the most a mainline Linux kernel can run (`NR_CPUS_RANGE_END` is 8192 on x86-64, arch/x86/Kconfig; powerpc's
/// `NR_CPUS` range ends at 8192 and arm64's at 4096). The largest single-image machines sold (HPE Superdome
/// Flex: 32 sockets, 896 cores, 1,792 threads) are well within it; a count past it is a typo or a hostile file,
/// and would otherwise become `-t 4294967294` and a Kubernetes CPU request of the same size.
pub const MAX_LOGICAL_CPUS: u32 = 8192;

/// `cpu.features`: names only. A YAML `12`, `null` or `true` in the list is a mistake in the file (an
/// unquoted number, an empty item); reading it as the string `"12"` would pass it on as a feature no CPU has.
fn feature_names<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    struct Name(String);
    impl<'de> Deserialize<'de> for Name {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl serde::de::Visitor<'_> for V {
                type Value = Name;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a feature name (a string such as avx2; quote a name that reads as a number)")
                }
                fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Name, E> {
                    Ok(Name(v.to_string()))
                }
                fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Name, E> {
                    Ok(Name(v))
                }
                fn visit_unit<E: serde::de::Error>(self) -> Result<Name, E> {
                    Err(E::invalid_type(serde::de::Unexpected::Other("null"), &self))
                }
                fn visit_none<E: serde::de::Error>(self) -> Result<Name, E> {
                    self.visit_unit()
                }
            }
            // Untyped, so the document's own type reaches the visitor: a plain `12` is an integer there and
            // is refused, where asking for a string would have turned it into "12".
            d.deserialize_any(V)
        }
    }
    Ok(Vec::<Name>::deserialize(d)?
        .into_iter()
        .map(|n| n.0)
        .collect())
}

/// Which limit bounds a figure: the host's own, or a container's cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Bound {
    Host,
    CgroupV2,
    CgroupV1,
}

/// CPU cache sizes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Caches {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l1d_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l2_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub l3_bytes: Option<u64>,
}

/// The host CPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Cpu {
    pub model: String,
    pub vendor: String,
    pub physical_cores: u32,
    pub logical_cpus: u32,
    /// SIMD features: x86 `sse4.2`, `avx`, `avx2`, `fma`, `f16c`, `avx512f`, `avx512bw`, `avx512vl`,
    /// `avx512vnni`, `avx512bf16`, `amx`; aarch64 `neon`, `dotprod`, `i8mm`, `sve`.
    #[serde(deserialize_with = "feature_names")]
    pub features: Vec<String>,
    /// `x86_64`, `aarch64`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency_mhz: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caches: Option<Caches>,
    /// CPUs this process may use: the cgroup CPU quota (quota / period) when lower than the logical CPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effective_cpus: Option<f64>,
    /// Which limit `effective_cpus` comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_bound: Option<Bound>,
}

/// System memory. `total_bytes` and `available_bytes` are what this process may use: the minimum of the host
/// and the cgroup limit, with `bound` saying which applies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Memory {
    pub total_bytes: u64,
    pub available_bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap_total_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swap_free_bytes: Option<u64>,
    /// The host's memory when a cgroup limit is lower.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_total_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound: Option<Bound>,
    /// CPU and GPU share this memory (Apple silicon, Jetson): GPU memory is not additional.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unified: bool,
}

/// GPU vendors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum GpuVendor {
    Nvidia,
    Amd,
    Intel,
    Apple,
}

/// The compute API llama.cpp drives a GPU with, when the inventory says which one the machine has (`backend:` of
/// a GPU). Absent, the vendor decides (`fleet::DeviceKind::for_gpu`): NVIDIA CUDA, AMD ROCm, Apple Metal, Intel
/// Vulkan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ComputeBackend {
    Cuda,
    /// AMD's HIP build (`GGML_HIP`).
    Rocm,
    /// ggml-vulkan: any vendor with a Vulkan driver (an AMD GPU without ROCm, an Intel Arc).
    Vulkan,
    Metal,
    Sycl,
}

/// A process holding GPU memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GpuProcess {
    pub pid: u32,
    /// Bytes held; absent when the driver does not say (e.g. inside some containers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
}

/// Where a GPU's figures came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum GpuSource {
    Nvml,
    CudaDriver,
    Fixture,
    /// Linux DRM sysfs (`/sys/class/drm/card*/device`): AMD and Intel GPUs, no vendor library needed.
    Sysfs,
    /// macOS `sysctl` (Apple silicon: the GPU shares the machine's memory).
    Sysctl,
}

/// One GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Gpu {
    pub index: u32,
    pub name: String,
    pub vendor: GpuVendor,
    pub memory_total_bytes: u64,
    pub memory_free_bytes: u64,
    /// CUDA compute capability, `"8.9"`; absent for non-NVIDIA devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_capability: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// PCI bus id, `00000000:01:00.0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_bus_id: Option<String>,
    /// PCI `vendor:device`, lower-case hex: `10de:2684`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used_bytes: Option<u64>,
    /// NVIDIA: streaming multiprocessors. AMD: compute units (HIP's `multiProcessorCount`; amdgpu's sysfs does
    /// not expose them, so only an inventory file gives them). Apple: GPU cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_count: Option<u32>,
    /// NVIDIA: NVML's maximum SM clock. AMD: the highest shader-clock level of amdgpu's `pp_dpm_sclk`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sm_clock_mhz: Option<u32>,
    /// NVIDIA: NVML's maximum memory clock. AMD: the highest level of amdgpu's `pp_dpm_mclk`, the memory
    /// controller's clock, which is not the per-pin data rate (that depends on the memory type, which sysfs does
    /// not give).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory_clock_mhz: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_bus_width_bits: Option<u32>,
    /// Memory data rate per pin in megatransfers per second (a 20 Gbps GDDR6 card: 20000), where an inventory
    /// gives it: with `memory_bus_width_bits` it derives the peak bandwidth of a GPU no profile describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_data_rate_mt_s: Option<u32>,
    /// Peak memory bandwidth derived from the memory clock and bus width (computed, bytes per second).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_bandwidth_bytes_per_s: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_generation: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_width: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_limit_w: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_version: Option<String>,
    /// CUDA version the driver supports, `"13.0"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_driver_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_enabled: Option<bool>,
    /// Other processes holding memory on this GPU.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<GpuProcess>,
    /// The GPU shares system memory (integrated / SoC). `memory_total_bytes` is then the machine's memory, of
    /// which the GPU may hold only part at once (see `gpu_working_set_bytes`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unified_memory: bool,
    /// Bytes of a unified memory the GPU may hold at once, where the machine says: macOS Metal's
    /// `recommendedMaxWorkingSetSize` (as llama.cpp's Metal backend logs it) or a non-zero
    /// `iogpu.wired_limit_mb`. Absent: the matched profile's `gpu_working_set` rule applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_working_set_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<GpuSource>,
    /// The compute API the machine's llama.cpp build drives this GPU with (`vulkan` for an AMD GPU without
    /// ROCm), where the inventory says; absent, the vendor's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<ComputeBackend>,
}

/// What a machine has.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Inventory {
    pub cpu: Cpu,
    pub memory: Memory,
    #[serde(default)]
    pub gpus: Vec<Gpu>,
    /// What the probe could not see and why (no NVIDIA driver, an NVML call that failed, a cgroup file it
    /// could not parse).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}
