//! GGUF value types (`enum gguf_type`, gguf.h L53-67): ids, names, and encoded sizes.

pub const UINT8: u32 = 0;
pub(crate) const INT8: u32 = 1;
pub const UINT16: u32 = 2;
pub(crate) const INT16: u32 = 3;
pub const UINT32: u32 = 4;
pub const INT32: u32 = 5;
pub const FLOAT32: u32 = 6;
pub const BOOL: u32 = 7;
pub const STRING: u32 = 8;
pub const ARRAY: u32 = 9;
pub const UINT64: u32 = 10;
pub(crate) const INT64: u32 = 11;
pub(crate) const FLOAT64: u32 = 12;

pub fn name(t: u32) -> &'static str {
    match t {
        UINT8 => "UINT8",
        INT8 => "INT8",
        UINT16 => "UINT16",
        INT16 => "INT16",
        UINT32 => "UINT32",
        INT32 => "INT32",
        FLOAT32 => "FLOAT32",
        BOOL => "BOOL",
        STRING => "STRING",
        ARRAY => "ARRAY",
        UINT64 => "UINT64",
        INT64 => "INT64",
        FLOAT64 => "FLOAT64",
        _ => "UNKNOWN",
    }
}

/// Encoded size of a fixed-size value; `None` for strings and arrays.
pub(crate) fn fixed_size(t: u32) -> Option<u64> {
    match t {
        UINT8 | INT8 | BOOL => Some(1),
        UINT16 | INT16 => Some(2),
        UINT32 | INT32 | FLOAT32 => Some(4),
        UINT64 | INT64 | FLOAT64 => Some(8),
        _ => None,
    }
}

/// Smallest encoding of one element of this type (strings: the u64 length; arrays: type and count).
pub(crate) fn min_size(t: u32) -> Option<u64> {
    match t {
        STRING => Some(8),
        ARRAY => Some(12),
        _ => fixed_size(t),
    }
}
