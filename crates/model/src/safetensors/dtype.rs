//! The safetensors dtype table: every dtype the upstream crate knows (safetensors 0.8), its header name, its
//! width in bits, and the exact byte size of a tensor of it (refusing sub-byte tensors that do not fill whole
//! bytes, where upstream would round).

use serde::Serialize;

/// A safetensors dtype: everything the upstream crate's `Dtype` knows (safetensors 0.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[allow(non_camel_case_types)]
pub enum StDtype {
    BOOL,
    F4,
    F6_E2M3,
    F6_E3M2,
    U8,
    I8,
    F8_E5M2,
    F8_E4M3,
    F8_E8M0,
    F8_E4M3FNUZ,
    F8_E5M2FNUZ,
    I16,
    U16,
    F16,
    BF16,
    I32,
    U32,
    F32,
    C64,
    F64,
    I64,
    U64,
}

impl StDtype {
    pub(crate) const ALL: [StDtype; 22] = [
        StDtype::BOOL,
        StDtype::F4,
        StDtype::F6_E2M3,
        StDtype::F6_E3M2,
        StDtype::U8,
        StDtype::I8,
        StDtype::F8_E5M2,
        StDtype::F8_E4M3,
        StDtype::F8_E8M0,
        StDtype::F8_E4M3FNUZ,
        StDtype::F8_E5M2FNUZ,
        StDtype::I16,
        StDtype::U16,
        StDtype::F16,
        StDtype::BF16,
        StDtype::I32,
        StDtype::U32,
        StDtype::F32,
        StDtype::C64,
        StDtype::F64,
        StDtype::I64,
        StDtype::U64,
    ];

    /// The dtype string in the header (`BF16`, `F8_E4M3`).
    pub fn name(self) -> &'static str {
        match self {
            StDtype::BOOL => "BOOL",
            StDtype::F4 => "F4",
            StDtype::F6_E2M3 => "F6_E2M3",
            StDtype::F6_E3M2 => "F6_E3M2",
            StDtype::U8 => "U8",
            StDtype::I8 => "I8",
            StDtype::F8_E5M2 => "F8_E5M2",
            StDtype::F8_E4M3 => "F8_E4M3",
            StDtype::F8_E8M0 => "F8_E8M0",
            StDtype::F8_E4M3FNUZ => "F8_E4M3FNUZ",
            StDtype::F8_E5M2FNUZ => "F8_E5M2FNUZ",
            StDtype::I16 => "I16",
            StDtype::U16 => "U16",
            StDtype::F16 => "F16",
            StDtype::BF16 => "BF16",
            StDtype::I32 => "I32",
            StDtype::U32 => "U32",
            StDtype::F32 => "F32",
            StDtype::C64 => "C64",
            StDtype::F64 => "F64",
            StDtype::I64 => "I64",
            StDtype::U64 => "U64",
        }
    }

    /// Bits per element (upstream `Dtype::bitsize`): F4 is 4, F6_* are 6.
    pub(crate) fn bits(self) -> u64 {
        match self {
            StDtype::F4 => 4,
            StDtype::F6_E2M3 | StDtype::F6_E3M2 => 6,
            StDtype::BOOL
            | StDtype::U8
            | StDtype::I8
            | StDtype::F8_E5M2
            | StDtype::F8_E4M3
            | StDtype::F8_E8M0
            | StDtype::F8_E4M3FNUZ
            | StDtype::F8_E5M2FNUZ => 8,
            StDtype::I16 | StDtype::U16 | StDtype::F16 | StDtype::BF16 => 16,
            StDtype::I32 | StDtype::U32 | StDtype::F32 => 32,
            StDtype::C64 | StDtype::F64 | StDtype::I64 | StDtype::U64 => 64,
        }
    }

    /// The dtype for a header string; `None` when unknown.
    pub(crate) fn from_name(s: &str) -> Option<StDtype> {
        StDtype::ALL.into_iter().find(|d| d.name() == s)
    }

    /// Whether the dtype is an integer type (packed quantized weights are stored in these).
    pub(crate) fn is_integer(self) -> bool {
        matches!(
            self,
            StDtype::U8
                | StDtype::I8
                | StDtype::I16
                | StDtype::U16
                | StDtype::I32
                | StDtype::U32
                | StDtype::I64
                | StDtype::U64
        )
    }

    /// Exact bytes of `elements` elements: `elements × bits / 8`. An error on overflow, or when sub-byte
    /// elements do not fill whole bytes (upstream would round; an exact size is required here).
    pub(crate) fn bytes_for(self, elements: u64) -> Result<u64, &'static str> {
        let bits = elements
            .checked_mul(self.bits())
            .ok_or("byte size overflows 64 bits")?;
        if !bits.is_multiple_of(8) {
            return Err("sub-byte elements do not fill whole bytes");
        }
        Ok(bits / 8)
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_names_round_trip_and_sizes() {
        for d in StDtype::ALL {
            assert_eq!(StDtype::from_name(d.name()), Some(d));
            assert_eq!(
                serde_json::to_string(&d).ok(),
                Some(format!("\"{}\"", d.name()))
            );
        }
        assert_eq!(StDtype::F4.bytes_for(16), Ok(8));
        assert_eq!(StDtype::F6_E2M3.bytes_for(4), Ok(3));
        assert!(StDtype::F6_E3M2.bytes_for(5).is_err());
        assert!(StDtype::F4.bytes_for(3).is_err());
        assert!(StDtype::F64.bytes_for(u64::MAX / 2).is_err());
        assert_eq!(StDtype::from_name("f32"), None);
    }
}
