//! llama.cpp's kernel-model inputs ([`crate::perf::gpu`]) for one GPU of the fleet: which backend and kernel
//! family it runs, and the rates those are charged on, from its profile and probe. Pure.

use super::DeviceKind;
use crate::hardware::Gpu;
use crate::perf;
use crate::profile::HardwareProfile;

/// Profile features naming an AMD GPU's matrix instructions, the path of llama.cpp's MMQ (ggml-cuda common.cuh).
const FEATURE_MFMA: &str = "amd-mfma";
const FEATURE_WMMA: &str = "amd-wmma";
const FEATURE_WMMA_RDNA4: &str = "amd-wmma-rdna4";

/// llama.cpp's kernel model inputs ([`perf::gpu`]) for a CUDA GPU with int8 `mma` (compute capability 7.5 and up)
/// whose SM count and clock are known, a Metal GPU whose profile gives its FP16 rate, a Pascal GPU (dp4a), a ROCm
/// GPU whose compute units and clock are known, or a Vulkan GPU of a family the public rows cover; `None` otherwise.
pub(super) fn kernels_for(
    kind: DeviceKind,
    g: &Gpu,
    p: &HardwareProfile,
    cc: Option<(u32, u32)>,
) -> Option<perf::gpu::GpuKernels> {
    use perf::gpu::{GpuBackend, GpuKernels, LaneFamily, MemoryClass};
    let memory = MemoryClass::from_type(&p.memory.kind)?;
    let base = |backend| GpuKernels {
        backend,
        memory,
        sm_cycles_per_s: 0.0,
        fp16_tensor_flops: 0.0,
        simd_flops: 0.0,
        board_power_w: 0.0,
        lanes: None,
        prefill: true,
        decode: true,
    };
    let has = |f: &str| p.features.iter().any(|x| x == f);
    // FP32 lanes × clock: AMD compute units × 64 lanes × boost clock (`sms` holds the compute units); NVIDIA the
    // FP32 vector peak / 2 (one FMA, two FLOP, per lane per clock).
    let lanes = || -> Option<f64> {
        match p.vendor {
            crate::profile::Vendor::Amd => Some(
                f64::from(g.sm_count.or(p.sms)?)
                    * perf::gpu::AMD_LANES_PER_CU
                    * f64::from(p.boost_clock_mhz.or(g.max_sm_clock_mhz)?)
                    * 1e6,
            ),
            _ => Some(p.vector_tflops.as_ref()?.fp32? * 1e12 / 2.0),
        }
    };
    match kind {
        DeviceKind::Cuda if cc.is_some_and(|c| c >= (7, 5)) => {
            let sms = f64::from(g.sm_count.or(p.sms)?);
            // The profile's boost clock first: the per-SM-clock rates were fitted against it, and NVML's maximum
            // SM clock is the clock table's ceiling, far above what a load holds (RTX 4060 Laptop: 3105 MHz
            // against a 1890 MHz boost).
            let mhz = f64::from(p.boost_clock_mhz.or(g.max_sm_clock_mhz)?);
            Some(GpuKernels {
                sm_cycles_per_s: sms * mhz * 1e6,
                fp16_tensor_flops: p
                    .tensor_tflops
                    .as_ref()
                    .and_then(|t| t.fp16_fp16acc.or(t.fp16_fp32acc))
                    .map_or(0.0, |t| t * 1e12),
                board_power_w: match (cc, p.tdp_w) {
                    (Some(cc), Some(w)) if perf::gpu::power_bound_applies(cc) => w,
                    _ => 0.0,
                },
                ..base(GpuBackend::Cuda)
            })
        }
        // Pascal: MMQ on dp4a (compute capability 6.1 adds it, ggml-cuda `GGML_CUDA_CC_DP4A`; Volta's FP16 tensor
        // cores take batches past `MMQ_DP4A_MAX_BATCH_SIZE` to cuBLAS instead: mmq.cu `ggml_cuda_should_use_mmq`).
        DeviceKind::Cuda if cc.is_some_and(|c| ((6, 1)..(7, 0)).contains(&c)) => Some(GpuKernels {
            lanes: Some((LaneFamily::Dp4a, lanes()?)),
            ..base(GpuBackend::CudaDp4a)
        }),
        DeviceKind::Rocm => {
            let family = if has(FEATURE_MFMA) {
                LaneFamily::RocmMfma
            } else if has(FEATURE_WMMA_RDNA4) {
                LaneFamily::RocmWmmaRdna4
            } else if has(FEATURE_WMMA) {
                LaneFamily::RocmWmmaRdna3
            } else {
                LaneFamily::Dp4a
            };
            Some(GpuKernels {
                lanes: Some((family, lanes()?)),
                ..base(GpuBackend::Rocm)
            })
        }
        // Vulkan: the vendors and architectures the public rows cover; others keep the generic roofline.
        DeviceKind::Vulkan => {
            let family = match p.vendor {
                crate::profile::Vendor::Nvidia if cc.is_some_and(|c| c >= (8, 0)) => {
                    LaneFamily::VulkanNvidia
                }
                crate::profile::Vendor::Amd if has(FEATURE_WMMA_RDNA4) => LaneFamily::VulkanRdna4,
                crate::profile::Vendor::Amd if has(FEATURE_WMMA) => LaneFamily::VulkanRdna3,
                // Intel Arc: the lanes are the FP32 vector peak / 2 (the profile's shading units x boost clock).
                crate::profile::Vendor::Intel => LaneFamily::VulkanIntel,
                _ => return None,
            };
            Some(GpuKernels {
                lanes: Some((family, lanes()?)),
                ..base(GpuBackend::Vulkan)
            })
        }
        DeviceKind::Metal => {
            let fp16 = p.vector_tflops.as_ref()?.fp16?;
            Some(GpuKernels {
                simd_flops: fp16 * 1e12,
                ..base(GpuBackend::Metal)
            })
        }
        _ => None,
    }
}
