//! The weight and operand types the GPU benchmarks use (their byte sizes, GEMV and GEMM support, TL2's column
//! split) and the layer shapes they run at.

use super::{BITNET_TAIL_BYTES, TL2_MIN_PAIR_COLS, TL2_TRIPLE_COLS_MULTIPLE};

/// A weight or operand type the benchmarks use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub enum GpuDtype {
    F16,
    Bf16,
    Fp8E4m3,
    Q8_0,
    Q4_0,
    I2S,
    Tl1,
    Tl2,
}

impl GpuDtype {
    /// Every type, in measurement order.
    pub(crate) const ALL: [GpuDtype; 8] = [
        GpuDtype::F16,
        GpuDtype::Bf16,
        GpuDtype::Fp8E4m3,
        GpuDtype::Q8_0,
        GpuDtype::Q4_0,
        GpuDtype::I2S,
        GpuDtype::Tl1,
        GpuDtype::Tl2,
    ];

    /// The name in metric names and kernel names.
    pub fn name(self) -> &'static str {
        match self {
            GpuDtype::F16 => "f16",
            GpuDtype::Bf16 => "bf16",
            GpuDtype::Fp8E4m3 => "fp8_e4m3",
            GpuDtype::Q8_0 => "q8_0",
            GpuDtype::Q4_0 => "q4_0",
            GpuDtype::I2S => "i2_s",
            GpuDtype::Tl1 => "tl1",
            GpuDtype::Tl2 => "tl2",
        }
    }

    /// The type a model's ggml tensor type is measured as (`--model M` limits the work to these).
    pub fn from_ggml(t: optimizer_model::GgmlType) -> Option<GpuDtype> {
        use optimizer_model::GgmlType as G;
        Some(match t {
            G::F16 => GpuDtype::F16,
            G::BF16 => GpuDtype::Bf16,
            G::Q8_0 => GpuDtype::Q8_0,
            G::Q4_0 => GpuDtype::Q4_0,
            G::I2_S => GpuDtype::I2S,
            G::TL1 => GpuDtype::Tl1,
            G::TL2 => GpuDtype::Tl2,
            _ => return None,
        })
    }

    /// Whether the type is a block or ternary quantization (its GEMM needs a dequantized f16 workspace).
    pub(crate) fn is_quantized(self) -> bool {
        !matches!(self, GpuDtype::F16 | GpuDtype::Bf16 | GpuDtype::Fp8E4m3)
    }

    /// Whether a GEMV kernel exists for the type (bf16 and fp8 weights are not served by GEMV in llama.cpp).
    pub(crate) fn has_gemv(self) -> bool {
        !matches!(self, GpuDtype::Bf16 | GpuDtype::Fp8E4m3)
    }

    /// Bytes per activation element a GEMM reads.
    pub(crate) fn gemm_input_bytes(self) -> u64 {
        if self == GpuDtype::Fp8E4m3 { 1 } else { 2 }
    }

    /// Bytes per output element a GEMM writes (f16; bf16 for fp8).
    pub(crate) fn gemm_output_bytes(self) -> u64 {
        2
    }

    /// Why `shape` cannot be laid out in this type, if it cannot.
    pub(crate) fn shape_defect(self, shape: LayerShape) -> Option<String> {
        let multiple = match self {
            // cuBLASLt fp8 needs dimensions that are multiples of 16; the f16 GEMV loads 8 weights at once.
            GpuDtype::F16 | GpuDtype::Bf16 | GpuDtype::Fp8E4m3 => 16,
            GpuDtype::Q8_0 | GpuDtype::Q4_0 => 32,
            GpuDtype::I2S => 128,
            GpuDtype::Tl1 => 64,
            GpuDtype::Tl2 => 16,
        };
        if shape.rows == 0 || shape.cols == 0 {
            return Some("a dimension is 0".into());
        }
        if !shape.cols.is_multiple_of(multiple) {
            return Some(format!(
                "{} columns are not a multiple of {multiple}",
                shape.cols
            ));
        }
        if self == GpuDtype::Fp8E4m3 && !shape.rows.is_multiple_of(16) {
            return Some(format!("{} rows are not a multiple of 16", shape.rows));
        }
        if self == GpuDtype::Tl2 && tl2_triple_cols(shape.cols).is_none() {
            return Some(format!(
                "{} columns leave no triples after the {TL2_MIN_PAIR_COLS} pair columns",
                shape.cols
            ));
        }
        None
    }

    /// Bytes of one layer's weights in this type's layout (see `crates/machine/kernels/gemv.cu`), or `None` when the shape
    /// does not fit the layout or the size overflows.
    pub(crate) fn weight_bytes(self, shape: LayerShape) -> Option<u64> {
        if self.shape_defect(shape).is_some() {
            return None;
        }
        let rows = u64::from(shape.rows);
        let cols = u64::from(shape.cols);
        let n = rows.checked_mul(cols)?;
        match self {
            GpuDtype::F16 | GpuDtype::Bf16 => n.checked_mul(2),
            GpuDtype::Fp8E4m3 => Some(n),
            GpuDtype::Q8_0 => (n / 32).checked_mul(34),
            GpuDtype::Q4_0 => (n / 32).checked_mul(18),
            GpuDtype::I2S | GpuDtype::Tl1 => (n / 4).checked_add(BITNET_TAIL_BYTES),
            GpuDtype::Tl2 => {
                let k3 = u64::from(tl2_triple_cols(shape.cols)?);
                let row = k3 / 6 + k3 / 24 + (cols - k3) / 4;
                rows.checked_mul(row)?.checked_add(BITNET_TAIL_BYTES)
            }
        }
    }
}

impl std::fmt::Display for GpuDtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The columns TL2 packs in triples: the largest multiple of [`TL2_TRIPLE_COLS_MULTIPLE`] that leaves at least
/// [`TL2_MIN_PAIR_COLS`] columns to pairs; `None` when that is none.
pub(crate) fn tl2_triple_cols(cols: u32) -> Option<u32> {
    let k3 =
        cols.checked_sub(TL2_MIN_PAIR_COLS)? / TL2_TRIPLE_COLS_MULTIPLE * TL2_TRIPLE_COLS_MULTIPLE;
    (k3 > 0).then_some(k3)
}

/// A weight matrix: `rows` output features, each a row of `cols` input features (ggml's ne[0] = cols).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct LayerShape {
    pub rows: u32,
    pub cols: u32,
}

impl std::fmt::Display for LayerShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.rows, self.cols)
    }
}
