//! The ggml tensor types a GGUF file may name, with their exact block geometry.
//!
//! Block sizes and bytes per block come from `ggml-common.h` (`sizeof(block_*)`, verified by compiling it at
//! ggml@d99724f2) and agree with gguf-py 0.19.0 `GGML_QUANT_SIZES` except Q8_1, where gguf-py says 40 bytes and
//! ggml's struct is 36; ggml is the engine, so it wins (see `../shared/reference/gguf-format.md` §2.4).
//!
//! BitNet (microsoft/BitNet's llama.cpp fork) reuses ids 36–39 for I2_S, I8_S, TL1 and TL2, and sizes them with
//! a patched `ggml_nbytes` rather than by blocks. Which reading applies is decided per file by
//! [`crate::gguf`]; this module only knows both tables.

use serde::Serialize;

/// A ggml tensor type as it appears in a GGUF tensor-info record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    IQ2_XXS,
    IQ2_XS,
    IQ3_XXS,
    IQ1_S,
    IQ4_NL,
    IQ3_S,
    IQ2_S,
    IQ4_XS,
    I8,
    I16,
    I32,
    I64,
    F64,
    IQ1_M,
    BF16,
    TQ1_0,
    TQ2_0,
    MXFP4,
    NVFP4,
    Q1_0,
    Q2_0,
    /// BitNet b1.58 ternary, 2 bits per weight plus a 32-byte tail holding the f32 scale (BitNet fork id 36).
    I2_S,
    /// BitNet lookup-table kernel layout TL1 (fork id 38), 2 bits per weight plus a 32-byte tail.
    TL1,
    /// BitNet lookup-table kernel layout TL2 (fork id 39), 5 bits per 3 weights, padded to 32, plus 32 bytes.
    TL2,
}

/// How a type's byte size is computed from its element counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// `ne[0] / block_elements * block_bytes * ne[1] * ne[2] * ne[3]`; `ne[0]` must be a multiple of the block.
    Blocks {
        block_elements: u64,
        block_bytes: u64,
    },
    /// BitNet I2_S and TL1: `n_elements / 4 + 32` (fork `ggml_nbytes`, ggml.c L3472-3491).
    BitNet2Bit,
    /// BitNet TL2: `(ne0 - 256) * ne1 / 3 * 5 / 8 + 256 * ne1 / 2 * 4 / 8`, padded to 32, plus 32.
    BitNetTl2,
}

/// Which meaning ids 36–40 take: upstream ggml, or microsoft/BitNet's fork.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TypeReading {
    Upstream,
    Bitnet,
}

impl GgmlType {
    /// Decodes a type id under the given reading. `None` for ids that are unknown or were removed from GGUF
    /// (4, 5, 31–33 and, upstream, 36–38): ggml gives those a block size of 0 and refuses them.
    pub fn from_id(id: u32, reading: TypeReading) -> Option<Self> {
        use GgmlType::*;
        let t = match (id, reading) {
            (0, _) => F32,
            (1, _) => F16,
            (2, _) => Q4_0,
            (3, _) => Q4_1,
            (6, _) => Q5_0,
            (7, _) => Q5_1,
            (8, _) => Q8_0,
            (9, _) => Q8_1,
            (10, _) => Q2_K,
            (11, _) => Q3_K,
            (12, _) => Q4_K,
            (13, _) => Q5_K,
            (14, _) => Q6_K,
            (15, _) => Q8_K,
            (16, _) => IQ2_XXS,
            (17, _) => IQ2_XS,
            (18, _) => IQ3_XXS,
            (19, _) => IQ1_S,
            (20, _) => IQ4_NL,
            (21, _) => IQ3_S,
            (22, _) => IQ2_S,
            (23, _) => IQ4_XS,
            (24, _) => I8,
            (25, _) => I16,
            (26, _) => I32,
            (27, _) => I64,
            (28, _) => F64,
            (29, _) => IQ1_M,
            (30, _) => BF16,
            (34, _) => TQ1_0,
            (35, _) => TQ2_0,
            (36, TypeReading::Bitnet) => I2_S,
            // 37 is the fork's I8_S, an activation type never stored in files.
            (38, TypeReading::Bitnet) => TL1,
            (39, TypeReading::Bitnet) => TL2,
            (39, TypeReading::Upstream) => MXFP4,
            (40, TypeReading::Upstream) => NVFP4,
            (41, TypeReading::Upstream) => Q1_0,
            (42, TypeReading::Upstream) => Q2_0,
            _ => return None,
        };
        Some(t)
    }

    /// Whether an id means something different under the two readings (or only under one).
    pub(crate) fn id_is_ambiguous(id: u32) -> bool {
        (36..=42).contains(&id)
    }

    /// The canonical name, as ggml's `type_name` and gguf-py's `GGMLQuantizationType` spell it.
    pub fn name(self) -> &'static str {
        use GgmlType::*;
        match self {
            F32 => "F32",
            F16 => "F16",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            Q8_1 => "Q8_1",
            Q2_K => "Q2_K",
            Q3_K => "Q3_K",
            Q4_K => "Q4_K",
            Q5_K => "Q5_K",
            Q6_K => "Q6_K",
            Q8_K => "Q8_K",
            IQ2_XXS => "IQ2_XXS",
            IQ2_XS => "IQ2_XS",
            IQ3_XXS => "IQ3_XXS",
            IQ1_S => "IQ1_S",
            IQ4_NL => "IQ4_NL",
            IQ3_S => "IQ3_S",
            IQ2_S => "IQ2_S",
            IQ4_XS => "IQ4_XS",
            I8 => "I8",
            I16 => "I16",
            I32 => "I32",
            I64 => "I64",
            F64 => "F64",
            IQ1_M => "IQ1_M",
            BF16 => "BF16",
            TQ1_0 => "TQ1_0",
            TQ2_0 => "TQ2_0",
            MXFP4 => "MXFP4",
            NVFP4 => "NVFP4",
            Q1_0 => "Q1_0",
            Q2_0 => "Q2_0",
            I2_S => "I2_S",
            TL1 => "TL1",
            TL2 => "TL2",
        }
    }

    /// The byte layout: block geometry for every upstream type, BitNet's formulas for the fork's types.
    pub(crate) fn layout(self) -> Layout {
        use GgmlType::*;
        let (block_elements, block_bytes) = match self {
            F32 => (1, 4),
            F16 => (1, 2),
            Q4_0 => (32, 18),
            Q4_1 => (32, 20),
            Q5_0 => (32, 22),
            Q5_1 => (32, 24),
            Q8_0 => (32, 34),
            Q8_1 => (32, 36),
            Q2_K => (256, 84),
            Q3_K => (256, 110),
            Q4_K => (256, 144),
            Q5_K => (256, 176),
            Q6_K => (256, 210),
            Q8_K => (256, 292),
            IQ2_XXS => (256, 66),
            IQ2_XS => (256, 74),
            IQ3_XXS => (256, 98),
            IQ1_S => (256, 50),
            IQ4_NL => (32, 18),
            IQ3_S => (256, 110),
            IQ2_S => (256, 82),
            IQ4_XS => (256, 136),
            I8 => (1, 1),
            I16 => (1, 2),
            I32 => (1, 4),
            I64 => (1, 8),
            F64 => (1, 8),
            IQ1_M => (256, 56),
            BF16 => (1, 2),
            TQ1_0 => (256, 54),
            TQ2_0 => (256, 66),
            MXFP4 => (32, 17),
            NVFP4 => (64, 36),
            Q1_0 => (128, 18),
            Q2_0 => (64, 18),
            I2_S | TL1 => return Layout::BitNet2Bit,
            TL2 => return Layout::BitNetTl2,
        };
        Layout::Blocks {
            block_elements,
            block_bytes,
        }
    }

    /// Elements per block (1 for BitNet's element-sized types, whose rows need no particular multiple).
    pub fn block_elements(self) -> u64 {
        match self.layout() {
            Layout::Blocks { block_elements, .. } => block_elements,
            Layout::BitNet2Bit | Layout::BitNetTl2 => 1,
        }
    }

    /// Exact bytes of a tensor of this type with ggml dimensions `ne` (innermost first), or `None` when the row
    /// length is not a multiple of the block size or the arithmetic overflows `u64`.
    pub fn tensor_bytes(self, ne: &[u64]) -> Option<u64> {
        let ne0 = ne.first().copied().unwrap_or(1);
        let rows = ne
            .iter()
            .skip(1)
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))?;
        match self.layout() {
            Layout::Blocks {
                block_elements,
                block_bytes,
            } => {
                if ne0 % block_elements != 0 {
                    return None;
                }
                (ne0 / block_elements)
                    .checked_mul(block_bytes)?
                    .checked_mul(rows)
            }
            Layout::BitNet2Bit => ne0.checked_mul(rows)?.checked_div(4)?.checked_add(32),
            Layout::BitNetTl2 => {
                // The fork's formula assumes ne0 >= 256 (the last 256 columns use the 2-weight kernel); a shorter
                // row has no defined size, so refuse it rather than underflow.
                let ne1 = rows;
                let head = ne0.checked_sub(256)?.checked_mul(ne1)? / 3 * 5 / 8;
                let tail = 256u64.checked_mul(ne1)? / 2 * 4 / 8;
                let mut nbytes = head.checked_add(tail)?;
                if nbytes % 32 != 0 {
                    nbytes = nbytes.checked_add(32 - nbytes % 32)?;
                }
                nbytes.checked_add(32)
            }
        }
    }

    /// Whether this is a quantized (block) type rather than a plain float or integer.
    pub fn is_quantized(self) -> bool {
        use GgmlType::*;
        !matches!(self, F32 | F16 | BF16 | F64 | I8 | I16 | I32 | I64)
    }
}

/// `general.file_type` (llama.cpp's `LLAMA_FTYPE_*`) as a name. Ids 38–40 mean different things in BitNet files.
pub(crate) fn file_type_name(id: u32, reading: TypeReading) -> Option<&'static str> {
    let name = match (id, reading) {
        (0, _) => "ALL_F32",
        (1, _) => "MOSTLY_F16",
        (2, _) => "MOSTLY_Q4_0",
        (3, _) => "MOSTLY_Q4_1",
        (7, _) => "MOSTLY_Q8_0",
        (8, _) => "MOSTLY_Q5_0",
        (9, _) => "MOSTLY_Q5_1",
        (10, _) => "MOSTLY_Q2_K",
        (11, _) => "MOSTLY_Q3_K_S",
        (12, _) => "MOSTLY_Q3_K_M",
        (13, _) => "MOSTLY_Q3_K_L",
        (14, _) => "MOSTLY_Q4_K_S",
        (15, _) => "MOSTLY_Q4_K_M",
        (16, _) => "MOSTLY_Q5_K_S",
        (17, _) => "MOSTLY_Q5_K_M",
        (18, _) => "MOSTLY_Q6_K",
        (19, _) => "MOSTLY_IQ2_XXS",
        (20, _) => "MOSTLY_IQ2_XS",
        (21, _) => "MOSTLY_Q2_K_S",
        (22, _) => "MOSTLY_IQ3_XS",
        (23, _) => "MOSTLY_IQ3_XXS",
        (24, _) => "MOSTLY_IQ1_S",
        (25, _) => "MOSTLY_IQ4_NL",
        (26, _) => "MOSTLY_IQ3_S",
        (27, _) => "MOSTLY_IQ3_M",
        (28, _) => "MOSTLY_IQ2_S",
        (29, _) => "MOSTLY_IQ2_M",
        (30, _) => "MOSTLY_IQ4_XS",
        (31, _) => "MOSTLY_IQ1_M",
        (32, _) => "MOSTLY_BF16",
        (36, _) => "MOSTLY_TQ1_0",
        (37, _) => "MOSTLY_TQ2_0",
        (38, TypeReading::Upstream) => "MOSTLY_MXFP4_MOE",
        (39, TypeReading::Upstream) => "MOSTLY_NVFP4",
        (40, TypeReading::Upstream) => "MOSTLY_Q1_0",
        (38, TypeReading::Bitnet) => "MOSTLY_TL1",
        (39, TypeReading::Bitnet) => "MOSTLY_TL2",
        (40, TypeReading::Bitnet) => "MOSTLY_I2_S",
        (1024, _) => "GUESSED",
        _ => return None,
    };
    Some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the type table against drift from `ggml-common.h`: every id 0..=42 either decodes to a type whose
    /// block bytes match the reference table, or is one of the removed ids.
    #[test]
    fn upstream_block_sizes_match_reference_table() {
        // (id, name, block elements, bytes per block) from ../shared/reference/gguf-format.md §2.4.
        let table: &[(u32, &str, u64, u64)] = &[
            (0, "F32", 1, 4),
            (1, "F16", 1, 2),
            (2, "Q4_0", 32, 18),
            (3, "Q4_1", 32, 20),
            (6, "Q5_0", 32, 22),
            (7, "Q5_1", 32, 24),
            (8, "Q8_0", 32, 34),
            (9, "Q8_1", 32, 36),
            (10, "Q2_K", 256, 84),
            (11, "Q3_K", 256, 110),
            (12, "Q4_K", 256, 144),
            (13, "Q5_K", 256, 176),
            (14, "Q6_K", 256, 210),
            (15, "Q8_K", 256, 292),
            (16, "IQ2_XXS", 256, 66),
            (17, "IQ2_XS", 256, 74),
            (18, "IQ3_XXS", 256, 98),
            (19, "IQ1_S", 256, 50),
            (20, "IQ4_NL", 32, 18),
            (21, "IQ3_S", 256, 110),
            (22, "IQ2_S", 256, 82),
            (23, "IQ4_XS", 256, 136),
            (24, "I8", 1, 1),
            (25, "I16", 1, 2),
            (26, "I32", 1, 4),
            (27, "I64", 1, 8),
            (28, "F64", 1, 8),
            (29, "IQ1_M", 256, 56),
            (30, "BF16", 1, 2),
            (34, "TQ1_0", 256, 54),
            (35, "TQ2_0", 256, 66),
            (39, "MXFP4", 32, 17),
            (40, "NVFP4", 64, 36),
            (41, "Q1_0", 128, 18),
            (42, "Q2_0", 64, 18),
        ];
        for &(id, name, be, bb) in table {
            let t = GgmlType::from_id(id, TypeReading::Upstream).unwrap();
            assert_eq!(t.name(), name, "id {id}");
            assert_eq!(
                t.layout(),
                Layout::Blocks {
                    block_elements: be,
                    block_bytes: bb
                },
                "{name}"
            );
        }
        for removed in [4, 5, 31, 32, 33, 36, 37, 38, 43, u32::MAX] {
            assert_eq!(GgmlType::from_id(removed, TypeReading::Upstream), None);
        }
    }

    #[test]
    fn bitnet_reading_of_colliding_ids() {
        assert_eq!(
            GgmlType::from_id(36, TypeReading::Bitnet),
            Some(GgmlType::I2_S)
        );
        assert_eq!(GgmlType::from_id(37, TypeReading::Bitnet), None);
        assert_eq!(
            GgmlType::from_id(38, TypeReading::Bitnet),
            Some(GgmlType::TL1)
        );
        assert_eq!(
            GgmlType::from_id(39, TypeReading::Bitnet),
            Some(GgmlType::TL2)
        );
        assert_eq!(
            GgmlType::from_id(39, TypeReading::Upstream),
            Some(GgmlType::MXFP4)
        );
        assert_eq!(file_type_name(40, TypeReading::Bitnet), Some("MOSTLY_I2_S"));
        assert_eq!(
            file_type_name(40, TypeReading::Upstream),
            Some("MOSTLY_Q1_0")
        );
    }

    #[test]
    fn bitnet_sizes_follow_fork_nbytes() {
        // 2560 x 6912 I2_S (BitNet b1.58 2B4T FFN): n/4 + 32.
        assert_eq!(
            GgmlType::I2_S.tensor_bytes(&[2560, 6912]),
            Some(2560 * 6912 / 4 + 32)
        );
        // TL2, ne = [2560, 6912]: (2304*6912/3*5/8) + (256*6912/2*4/8) = 3317760 + 442368 = 3760128, already a
        // multiple of 32, plus 32.
        assert_eq!(GgmlType::TL2.tensor_bytes(&[2560, 6912]), Some(3_760_160));
        // TL2 rows shorter than the 256-column tail have no defined size.
        assert_eq!(GgmlType::TL2.tensor_bytes(&[128, 4]), None);
    }

    #[test]
    fn block_types_refuse_partial_rows_and_overflow() {
        assert_eq!(
            GgmlType::Q4_K.tensor_bytes(&[4096, 4096]),
            Some(16 * 144 * 4096)
        );
        assert_eq!(GgmlType::Q4_K.tensor_bytes(&[100, 2]), None);
        assert_eq!(GgmlType::F32.tensor_bytes(&[u64::MAX, 2]), None);
        assert_eq!(GgmlType::F32.tensor_bytes(&[]), Some(4));
    }
}
