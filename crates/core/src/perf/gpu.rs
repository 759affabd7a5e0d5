//! llama.cpp's GPU kernels by family (issue 27): which kernel runs a weight type on a backend, the rate it
//! reaches, and what a decode step costs besides reading the weights. Pure: takes values.
//!
//! Modelled effects:
//! - Prefill is compute-bound on the kernel llama.cpp runs for the weight type. CUDA (compute capability 7.5 and
//!   up): quantized weights go through MMQ, the int8 `mma` kernels (`ggml_cuda_should_use_mmq` in ggml-cuda
//!   `mmq.cu` returns true for every quantized type once `turing_mma_available`), and F16/BF16/F32 weights through
//!   cuBLAS (`ggml_cuda_mul_mat_cublas` in `ggml-cuda.cu`: F16 computes with `CUBLAS_COMPUTE_16F`, FP16
//!   accumulation, full rate on GeForce too). Both rates are charged per SM and clock, not per tensor peak: in
//!   the public table MMQ reaches 450-680 FLOP per SM clock on an A100, an H100 and GeForce Ampere, Ada and
//!   Blackwell alike, although the data-center parts have twice the int8 tensor rate per SM, so the tiles'
//!   loads and dequantization bound it, not the tensor cores. Metal: the simdgroup-matrix kernels run on the GPU's
//!   FP16 ALUs (Apple GPUs multiply FP16 and FP32 at the same rate: philipturner/metal-benchmarks), so the rate is
//!   a share of the profile's `vector_tflops.fp16`, one share for quantized and one for F16 weights.
//! - On Ada (compute capability 8.9) prefill is also bounded by board power: the rate is at most `tdp_w` times
//!   [`ADA_FLOP_PER_J`]. The pro Ada cards (L40, L40S, RTX 4000/5000/6000 Ada) carry 0.84-1.25 W per SM-GHz of
//!   boost clock against 1.4-1.8 on GeForce Ada and reach 220-350 FLOP per SM clock against 330-600: they cannot
//!   hold the boost clock under tensor load. The energy per FLOP fitted on GeForce Ada alone (the RTX 4090, at
//!   1.40 W per SM-GHz, is the one bound) predicts the pro Ada rows held out (README of the fixture). Other
//!   architectures show no such bound in the rows (the RTX PRO 6000 Blackwell Max-Q, at 0.70 W per SM-GHz, reaches
//!   the GeForce Blackwell rate), so none is applied there.
//! - Decode reads every weight once per token at a share of peak bandwidth that depends on the weight type (the
//!   K-quants' dot products cost more per byte than Q4_0's) and on the memory (HBM parts reach a smaller share
//!   than GDDR and Apple's unified LPDDR at batch 1), plus a per-layer cost per token for each backend (kernel
//!   launches and synchronisation: about 45 µs a layer on CUDA, 200 µs on Metal in the fitted builds).
//!
//! - ROCm, Vulkan and Pascal: prefill per FP32 lane per clock of the kernel family ([`LaneFamily`]): dp4a MMQ
//!   (Pascal, GCN 5, RDNA 2: the NVIDIA and AMD rows agree per lane), MFMA MMQ (CDNA), WMMA MMQ on RDNA 3 and
//!   RDNA 4, ggml-vulkan's cooperative-matrix shaders on NVIDIA, RDNA 3 and RDNA 4, and ggml-vulkan on Intel Arc.
//!   RDNA 3 and RDNA 4 share one constant per backend, a share of their WMMA FP16 rate per compute-unit clock
//!   (sourced, 2x on RDNA 4: [`RDNA4_WMMA_FP16_FLOP_PER_CU_CLOCK`]), so either predicts the other. Lanes are an AMD
//!   GPU's compute units x 64 (HIP reports compute units as multiprocessors), or an NVIDIA or Intel GPU's FP32
//!   peak / 2. Decode uses the multipliers below with a per-layer cost per backend (ROCm about 100 µs, Vulkan
//!   about 43 µs a layer) and, on Intel Arc, a larger read multiplier.
//!
//! Left out: the build (the public rows span Nov 2023 to 2026 builds, up to 1.5x apart on one card; the constants
//! are medians over them), the GPU-core bin of an Apple chip (the tool sees the chip name only, the profile
//! holds the largest bin, so a smaller bin is over-predicted by the core ratio), power and clock throttling
//! (other than Ada's power bound above), flash attention's effect on the attention term, F16 weights on the
//! ROCm/Vulkan/Pascal families (every public row there is Q4_0, so dense weights are charged the quantized rate),
//! Intel Arc apart from the A770/A750/B580 profiles' one family (its two constants rest on one A770 and one B580
//! row, ±20-30 % in the tree; no split can hold Intel out and still fit it), SYCL, Vulkan on RDNA 2 and older and pre-Pascal NVIDIA
//! (no rows: the generic roofline of [`super::predict`] with the rule tables' efficiencies).
//!
//! Trade-off: one constant per kernel family fitted across every matched card and build instead of one per card
//! (a family no row measured takes the median rate of all the others: Intel Arc under leave-one-family-out is
//! then 2.5x high, the README says):
//! a card nobody measured gets the same error as the held-out families (below), at the price of a few per cent
//! on the cards that were measured.
//!
//! Fit: `tests/fixtures/gpu-speed/public-llama-bench.yaml` (262 usable rows; README there), medians for the
//! prefill rates, weighted least squares on the time per token for decode, script
//! `tests/fixtures/gpu-speed/fit.py`. Held out: leave-one-family-out and random 5-fold, reported in the README.

use optimizer_model::{Dtype, GgmlType};

use super::{DeviceLoad, DevicePerf};

/// The compute stack llama.cpp drives the GPU with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuBackend {
    /// CUDA on an NVIDIA GPU with int8 `mma` (compute capability 7.5 and up).
    Cuda,
    Metal,
    /// HIP (ROCm) and Vulkan: the kernel family in [`GpuKernels::lanes`] gives the prefill rate.
    Rocm,
    Vulkan,
    /// CUDA on a GPU without int8 `mma` whose MMQ runs on dp4a (Pascal and Volta: compute capability 6.1-7.2).
    CudaDp4a,
}

/// The quantized matrix-multiply path on a ROCm, Vulkan or pre-Turing CUDA GPU, each charged per FP32 lane per
/// clock ([`lane_rate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaneFamily {
    /// dp4a MMQ: CUDA Pascal/Volta, ROCm on GCN 5 and RDNA 2 (ggml-cuda `mmq.cu`: no `mma`, no WMMA, no MFMA).
    Dp4a,
    /// ROCm MMQ on CDNA's MFMA matrix cores (common.cuh `amd_mfma_available`).
    RocmMfma,
    /// ROCm MMQ on RDNA 3 WMMA (common.cuh `amd_wmma_available`).
    RocmWmmaRdna3,
    /// ROCm MMQ on RDNA 4 WMMA (the gfx12 intrinsics, mma.cuh `__builtin_amdgcn_wmma_i32_16x16x16_iu8_w32_gfx12`).
    RocmWmmaRdna4,
    /// ggml-vulkan on NVIDIA (cooperative-matrix shaders).
    VulkanNvidia,
    /// ggml-vulkan on AMD RDNA 3 and RDNA 4 (KHR cooperative matrix on their WMMA units).
    VulkanRdna3,
    VulkanRdna4,
    /// ggml-vulkan on Intel Arc: Xe-HPG (A-series) without cooperative matrix, Xe2 (B-series) with it
    /// (ggml-vulkan.cpp `ggml_vk_khr_cooperative_matrix_support`).
    VulkanIntel,
}

/// The memory a GPU reads its weights from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryClass {
    /// Apple's unified LPDDR.
    Unified,
    Gddr,
    Hbm,
}

impl MemoryClass {
    /// From a profile's `memory.type` (`HBM3`, `GDDR6X`, `LPDDR5`); `None` for anything else.
    pub(crate) fn from_type(t: &str) -> Option<MemoryClass> {
        let t = t.to_ascii_uppercase();
        if t.starts_with("HBM") {
            Some(MemoryClass::Hbm)
        } else if t.starts_with("GDDR") {
            Some(MemoryClass::Gddr)
        } else if t.starts_with("LPDDR") {
            Some(MemoryClass::Unified)
        } else {
            None
        }
    }
}

/// What the kernel model needs of one GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuKernels {
    pub backend: GpuBackend,
    pub memory: MemoryClass,
    /// CUDA: SMs × SM clock in Hz (the MMQ and cuBLAS rates are per SM clock).
    pub sm_cycles_per_s: f64,
    /// CUDA: the dense FP16 tensor peak with FP16 accumulation in FLOP/s (cuBLAS's `CUBLAS_COMPUTE_16F`), 0 when
    /// the profile has none.
    pub fp16_tensor_flops: f64,
    /// Metal: the FP16 ALU peak in FLOP/s, the rate of the simdgroup-matrix kernels.
    pub simd_flops: f64,
    /// CUDA on Ada: the board power in W that bounds the prefill rate ([`ADA_FLOP_PER_J`]); 0 where no power
    /// bound is modelled ([`power_bound_applies`]).
    pub board_power_w: f64,
    /// ROCm, Vulkan, dp4a CUDA: the kernel family and the FP32 lanes × clock in Hz it is charged on (AMD: compute
    /// units × 64 × boost clock; NVIDIA: the FP32 vector peak / 2).
    pub lanes: Option<(LaneFamily, f64)>,
    /// Use the kernel model for prefill; false where evidence measured this device's prefill efficiency.
    pub prefill: bool,
    /// Use the kernel model for decode; false where evidence measured this device's decode efficiency.
    pub decode: bool,
}

// ---- Fitted on the public table (see the module doc); rounded to 3 digits. ----

/// MMQ (quantized weights, CUDA): FLOP per SM per clock. Median of 37 CUDA quantized pp512 rows.
const CUDA_MMQ_FLOP_PER_SM_CLOCK: f64 = 492.0;
/// cuBLAS with FP16 compute (F16 weights, CUDA): the lower of a share of the FP16-accumulate tensor peak (median
/// of the 11 CUDA F16 pp512 rows' shares, 0.27-0.56) and a per-SM-clock ceiling (median of the two HBM rows, A100
/// 80GB PCIe 763 and H100 PCIe 879: their full-rate tensor cores are not what binds).
const CUDA_F16_TENSOR_SHARE: f64 = 0.43;
const CUDA_F16_FLOP_PER_SM_CLOCK: f64 = 821.0;
/// Ada's prefill FLOP per joule of board power: 0.290 TFLOP/J, fitted jointly with the MMQ rate on the 164 CUDA
/// and Metal pp512 rows the model covers (fit.py: grid in 1 % steps minimising the summed absolute log error of the
/// Ada rows, kernel rates from the rows the bound does not bind); 0.311 with the pro Ada family held out.
const ADA_FLOP_PER_J: f64 = 0.290e12;
/// Metal simdgroup-matrix kernels: share of the FP16 ALU peak. Medians of 70 quantized and 23 F16 rows.
const METAL_QUANT_SHARE: f64 = 0.592;
const METAL_F16_SHARE: f64 = 0.717;

/// FLOP per FP32 lane per clock of each [`LaneFamily`] on quantized weights: medians of the public pp512 rows
/// of the family (all LLaMA-2 7B Q4_0; `python3 tests/fixtures/gpu-speed/fit.py DUMP HELDOUT`): dp4a 4 rows (P40,
/// MI50, MI60, V620: 2.08-2.35 per lane on both vendors), MFMA 3 (MI100, MI210, MI300X), Vulkan NVIDIA 6, Vulkan
/// Intel 2 (A770, B580: 1.2-1.4 per lane, below every other family).
const LANE_DP4A: f64 = 2.29;
const LANE_ROCM_MFMA: f64 = 3.13;
const LANE_VULKAN_NVIDIA: f64 = 3.15;
const LANE_VULKAN_INTEL: f64 = 1.32;
/// AMD RDNA 3 and RDNA 4 WMMA: dense FP16 matrix FLOP per compute unit per clock (AMD GPUOpen, "Using the Matrix
/// Cores of AMD RDNA 4 architecture GPUs", FLOPS/clock/CU table: 512 on RDNA 3, 1024 on RDNA 4; int8 is 512 and
/// 2048). llama.cpp runs RDNA 4 on its own kernels (gfx12 WMMA intrinsics in ggml-cuda mma.cuh, an RDNA 4 MMQ
/// tile config in mmq.cuh), and the rows reach 1.6x (ROCm) and 1.7x (Vulkan) RDNA 3's rate per compute-unit
/// clock: below the int8 ratio (4x), so the matrix units do not bind; the FP16 ratio (2x) is the sourced figure
/// nearest it and predicts either architecture from the other within 25 % (fixture README).
const RDNA3_WMMA_FP16_FLOP_PER_CU_CLOCK: f64 = 512.0;
const RDNA4_WMMA_FP16_FLOP_PER_CU_CLOCK: f64 = 1024.0;
/// FP32 lanes per AMD compute unit (GCN, CDNA and RDNA alike: 4 x SIMD16 or 2 x SIMD32).
pub const AMD_LANES_PER_CU: f64 = 64.0;
/// The share of that WMMA FP16 rate the quantized kernels reach, one per backend: medians over the RDNA 3 and
/// RDNA 4 rows together (ROCm 6, Vulkan 4).
const ROCM_WMMA_SHARE: f64 = 0.345;
const VULKAN_AMD_WMMA_SHARE: f64 = 0.365;
/// Decode seconds per layer per token on ROCm and Vulkan (fit.py `lane_tg_consts`: weighted least squares on
/// the backend's tg128 rows, the weight read at the memory multipliers below, which CUDA and Metal fitted).
const ROCM_LAYER_S: f64 = 99.3e-6;
const VULKAN_LAYER_S: f64 = 42.7e-6;
/// Intel Arc on Vulkan: added to the weights' read multiplier (fit.py `lane_tg_consts`, least squares on the two
/// Intel tg128 rows after the Vulkan layer cost: the A770 reads at 35 % of its peak, the B580 at 56 %).
const VULKAN_INTEL_DECODE_EXTRA: f64 = 0.771;

/// FLOP per lane per clock of `f` (quantized weights; the rows hold no F16 run on these families, so dense
/// weights are charged the same rate).
fn lane_rate(f: LaneFamily) -> f64 {
    match f {
        LaneFamily::Dp4a => LANE_DP4A,
        LaneFamily::RocmMfma => LANE_ROCM_MFMA,
        LaneFamily::RocmWmmaRdna3 => {
            ROCM_WMMA_SHARE * RDNA3_WMMA_FP16_FLOP_PER_CU_CLOCK / AMD_LANES_PER_CU
        }
        LaneFamily::RocmWmmaRdna4 => {
            ROCM_WMMA_SHARE * RDNA4_WMMA_FP16_FLOP_PER_CU_CLOCK / AMD_LANES_PER_CU
        }
        LaneFamily::VulkanNvidia => LANE_VULKAN_NVIDIA,
        LaneFamily::VulkanRdna3 => {
            VULKAN_AMD_WMMA_SHARE * RDNA3_WMMA_FP16_FLOP_PER_CU_CLOCK / AMD_LANES_PER_CU
        }
        LaneFamily::VulkanRdna4 => {
            VULKAN_AMD_WMMA_SHARE * RDNA4_WMMA_FP16_FLOP_PER_CU_CLOCK / AMD_LANES_PER_CU
        }
        LaneFamily::VulkanIntel => LANE_VULKAN_INTEL,
    }
}

/// Decode: peak-bandwidth time multipliers (1 / efficiency) by weight kind, for unified memory.
const DECODE_Q4_0: f64 = 1.067;
const DECODE_Q8_0: f64 = 1.095;
const DECODE_K_QUANT: f64 = 1.282;
const DECODE_F16: f64 = 1.125;
/// Added to the multiplier on GDDR and on HBM.
const DECODE_GDDR_EXTRA: f64 = 0.022;
const DECODE_HBM_EXTRA: f64 = 0.794;
/// Seconds per layer per token.
const CUDA_LAYER_S: f64 = 45.2e-6;
const METAL_LAYER_S: f64 = 198.0e-6;

/// Unquantized types run the dense-float kernels (cuBLAS on CUDA, the F16 simdgroup kernels on Metal).
fn dense_float(t: Dtype) -> bool {
    matches!(
        t,
        Dtype::Ggml(GgmlType::F16 | GgmlType::BF16 | GgmlType::F32)
    ) || !matches!(t, Dtype::Ggml(_))
}

/// Whether the prefill rate of a CUDA GPU of compute capability `cc` is bounded by its board power: Ada only (the
/// module doc says why).
pub(crate) fn power_bound_applies(cc: (u32, u32)) -> bool {
    cc == (8, 9)
}

/// FLOP/s the prefill kernel for weights of type `t` reaches.
fn prefill_rate(k: &GpuKernels, t: Dtype) -> f64 {
    let dense = dense_float(t);
    match k.backend {
        GpuBackend::Cuda => {
            let kernel = if dense && k.fp16_tensor_flops > 0.0 {
                (k.fp16_tensor_flops * CUDA_F16_TENSOR_SHARE)
                    .min(k.sm_cycles_per_s * CUDA_F16_FLOP_PER_SM_CLOCK)
            } else {
                k.sm_cycles_per_s * CUDA_MMQ_FLOP_PER_SM_CLOCK
            };
            if k.board_power_w > 0.0 {
                kernel.min(k.board_power_w * ADA_FLOP_PER_J)
            } else {
                kernel
            }
        }
        GpuBackend::Metal => {
            let share = if dense {
                METAL_F16_SHARE
            } else {
                METAL_QUANT_SHARE
            };
            k.simd_flops * share
        }
        GpuBackend::Rocm | GpuBackend::Vulkan | GpuBackend::CudaDp4a => {
            k.lanes.map_or(0.0, |(f, lanes)| lanes * lane_rate(f))
        }
    }
}

/// Seconds of prefill matmuls and attention for `tokens` prompt tokens.
pub(crate) fn prefill_compute(k: &GpuKernels, l: &DeviceLoad, tokens: f64) -> f64 {
    let matmul: f64 = l
        .by_type
        .iter()
        .map(|t| {
            let rows = if t.output { 1.0 } else { tokens };
            2.0 * t.params * rows / prefill_rate(k, t.dtype)
        })
        .sum();
    // Attention runs on F16 K/V: the dense-float kernels' rate.
    let attn =
        l.attn_flops_per_pair * tokens * tokens / 2.0 / prefill_rate(k, Dtype::Ggml(GgmlType::F16));
    matmul + attn
}

/// The peak-bandwidth time multiplier of weights of type `t` on memory `m`.
fn decode_multiplier(m: MemoryClass, t: Dtype) -> f64 {
    let base = match t {
        Dtype::Ggml(GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1) => {
            DECODE_Q4_0
        }
        Dtype::Ggml(GgmlType::Q8_0) => DECODE_Q8_0,
        t if dense_float(t) => DECODE_F16,
        _ => DECODE_K_QUANT,
    };
    base + match m {
        MemoryClass::Unified => 0.0,
        MemoryClass::Gddr => DECODE_GDDR_EXTRA,
        MemoryClass::Hbm => DECODE_HBM_EXTRA,
    }
}

/// Seconds one decode step spends reading weights and `kv_bytes` of KV cache.
pub(crate) fn decode_read(k: &GpuKernels, p: &DevicePerf, l: &DeviceLoad, kv_bytes: f64) -> f64 {
    // Intel Arc on Vulkan reads every byte at a lower share of its peak (its constant's doc).
    let intel = if matches!(k.lanes, Some((LaneFamily::VulkanIntel, _))) {
        VULKAN_INTEL_DECODE_EXTRA
    } else {
        0.0
    };
    let weights: f64 = l
        .by_type
        .iter()
        .map(|t| t.bytes * (decode_multiplier(k.memory, t.dtype) + intel))
        .sum();
    // Element-wise weights not in `by_type` (none today) and the KV cache read at the F16 share.
    let rest = (l.weight_bytes_per_token - l.by_type.iter().map(|t| t.bytes).sum::<f64>()).max(0.0)
        + kv_bytes;
    (weights + rest * (decode_multiplier(k.memory, Dtype::Ggml(GgmlType::F16)) + intel))
        / p.bandwidth_bytes_per_s
}

/// Seconds per decode step the backend spends besides reading and computing: per-layer launches.
pub(crate) fn decode_overhead(k: &GpuKernels, l: &DeviceLoad) -> f64 {
    l.layers
        * match k.backend {
            GpuBackend::Cuda | GpuBackend::CudaDp4a => CUDA_LAYER_S,
            GpuBackend::Metal => METAL_LAYER_S,
            GpuBackend::Rocm => ROCM_LAYER_S,
            GpuBackend::Vulkan => VULKAN_LAYER_S,
        }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::TypeLoad;

    fn cuda() -> GpuKernels {
        GpuKernels {
            backend: GpuBackend::Cuda,
            memory: MemoryClass::Gddr,
            // RTX 4090: 128 SMs × 2.52 GHz.
            sm_cycles_per_s: 128.0 * 2.52e9,
            fp16_tensor_flops: 330.3e12,
            simd_flops: 0.0,
            board_power_w: 0.0,
            lanes: None,
            prefill: true,
            decode: true,
        }
    }

    #[test]
    fn quantized_and_f16_weights_run_different_kernels() {
        let k = cuda();
        let q = prefill_rate(&k, Dtype::Ggml(GgmlType::Q4_0));
        let f = prefill_rate(&k, Dtype::Ggml(GgmlType::F16));
        assert!((q - 128.0 * 2.52e9 * CUDA_MMQ_FLOP_PER_SM_CLOCK).abs() < 1.0);
        // cuBLAS: 0.43 of the 330.3 TFLOPS FP16-accumulate peak (142.0 T) is below the per-SM-clock ceiling (821 x
        // 322.56 G = 264.8 T), so the share binds; MMQ's 492 x 322.56 G = 158.7 T is another rate.
        assert!((f - 330.3e12 * CUDA_F16_TENSOR_SHARE).abs() < 1.0, "{f}");
        assert!((f - q).abs() > 1e12);
    }

    #[test]
    fn board_power_bounds_the_prefill_rate_where_it_is_given() {
        // RTX 6000 Ada: 142 SMs x 2.505 GHz, 300 W: MMQ would reach 175 TFLOPS, the power bound 93.3.
        let k = GpuKernels {
            sm_cycles_per_s: 142.0 * 2.505e9,
            fp16_tensor_flops: 364.2e12,
            board_power_w: 300.0,
            ..cuda()
        };
        let q = prefill_rate(&k, Dtype::Ggml(GgmlType::Q4_0));
        assert!((q - 300.0 * ADA_FLOP_PER_J).abs() < 1.0, "{q}");
        assert!(q < 142.0 * 2.505e9 * CUDA_MMQ_FLOP_PER_SM_CLOCK);
        assert!(power_bound_applies((8, 9)) && !power_bound_applies((9, 0)));
    }

    #[test]
    fn memory_classes_come_from_the_profile_type() {
        assert_eq!(MemoryClass::from_type("HBM2e"), Some(MemoryClass::Hbm));
        assert_eq!(MemoryClass::from_type("GDDR6X"), Some(MemoryClass::Gddr));
        assert_eq!(
            MemoryClass::from_type("LPDDR5X"),
            Some(MemoryClass::Unified)
        );
        assert_eq!(MemoryClass::from_type("DDR5"), None);
    }

    #[test]
    fn k_quants_read_slower_than_q4_0_and_hbm_slower_than_gddr() {
        let q4 = Dtype::Ggml(GgmlType::Q4_0);
        let k4 = Dtype::Ggml(GgmlType::Q4_K);
        assert!(
            decode_multiplier(MemoryClass::Gddr, k4) > decode_multiplier(MemoryClass::Gddr, q4)
        );
        assert!(decode_multiplier(MemoryClass::Hbm, q4) > decode_multiplier(MemoryClass::Gddr, q4));
        let l = DeviceLoad {
            layers: 32.0,
            by_type: vec![TypeLoad {
                dtype: q4,
                output: false,
                bytes: 1e9,
                params: 2e9,
            }],
            weight_bytes_per_token: 1e9,
            ..DeviceLoad::default()
        };
        assert!((decode_overhead(&cuda(), &l) - 32.0 * CUDA_LAYER_S).abs() < 1e-12);
    }

    #[test]
    fn rocm_vulkan_and_pascal_prefill_is_charged_per_lane_of_the_kernel_family() {
        // RX 7900 XTX: 96 CUs x 64 lanes x 2.498 GHz; RDNA 3 WMMA on ROCm, the cooperative-matrix shaders on Vulkan.
        let lanes = 96.0 * 64.0 * 2.498e9;
        let k = GpuKernels {
            backend: GpuBackend::Rocm,
            lanes: Some((LaneFamily::RocmWmmaRdna3, lanes)),
            ..cuda()
        };
        let q4 = Dtype::Ggml(GgmlType::Q4_0);
        assert!((prefill_rate(&k, q4) - lanes * ROCM_WMMA_SHARE * 8.0).abs() < 1.0);
        let v = GpuKernels {
            backend: GpuBackend::Vulkan,
            lanes: Some((LaneFamily::VulkanRdna3, lanes)),
            ..k
        };
        assert!((prefill_rate(&v, q4) - lanes * VULKAN_AMD_WMMA_SHARE * 8.0).abs() < 1.0);
        let l = DeviceLoad {
            layers: 32.0,
            ..DeviceLoad::default()
        };
        assert!((decode_overhead(&k, &l) - 32.0 * ROCM_LAYER_S).abs() < 1e-12);
        assert!((decode_overhead(&v, &l) - 32.0 * VULKAN_LAYER_S).abs() < 1e-12);
        // P40: dp4a on 30 SMs x 128 lanes x 1.531 GHz.
        let p = GpuKernels {
            backend: GpuBackend::CudaDp4a,
            lanes: Some((LaneFamily::Dp4a, 30.0 * 128.0 * 1.531e9)),
            ..cuda()
        };
        assert!((prefill_rate(&p, q4) - 30.0 * 128.0 * 1.531e9 * LANE_DP4A).abs() < 1.0);
    }

    #[test]
    fn rdna4_is_charged_twice_rdna3s_rate_per_compute_unit_clock() {
        // GPUOpen's FLOPS/clock/CU: FP16 WMMA 1024 on RDNA 4, 512 on RDNA 3, on both backends.
        for (r3, r4) in [
            (LaneFamily::RocmWmmaRdna3, LaneFamily::RocmWmmaRdna4),
            (LaneFamily::VulkanRdna3, LaneFamily::VulkanRdna4),
        ] {
            assert!((lane_rate(r4) / lane_rate(r3) - 2.0).abs() < 1e-12);
        }
    }

    #[test]
    fn intel_arc_on_vulkan_has_its_own_lane_rate_and_a_slower_read() {
        // A770: 4096 lanes x 2.4 GHz, 560 GB/s.
        let lanes = 4096.0 * 2.4e9;
        let intel = GpuKernels {
            backend: GpuBackend::Vulkan,
            lanes: Some((LaneFamily::VulkanIntel, lanes)),
            ..cuda()
        };
        let q4 = Dtype::Ggml(GgmlType::Q4_0);
        assert!((prefill_rate(&intel, q4) - lanes * LANE_VULKAN_INTEL).abs() < 1.0);
        let nvidia = GpuKernels {
            lanes: Some((LaneFamily::VulkanNvidia, lanes)),
            ..intel
        };
        let l = DeviceLoad {
            layers: 32.0,
            by_type: vec![TypeLoad {
                dtype: q4,
                output: false,
                bytes: 1e9,
                params: 2e9,
            }],
            weight_bytes_per_token: 1e9,
            ..DeviceLoad::default()
        };
        let p = DevicePerf {
            name: "Intel Arc A770".into(),
            bandwidth_bytes_per_s: 560e9,
            flops: 0.0,
            decode_efficiency: 1.0,
            prefill_efficiency: 1.0,
            offload: None,
            cpu: None,
            gpu: Some(intel),
        };
        let extra = decode_read(&intel, &p, &l, 0.0) - decode_read(&nvidia, &p, &l, 0.0);
        assert!(
            (extra - 1e9 * VULKAN_INTEL_DECODE_EXTRA / 560e9).abs() < 1e-12,
            "{extra}"
        );
    }
}
