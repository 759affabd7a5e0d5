//! GGUF reader: versions 2 and 3, either byte order, split shards; header only.
//!
//! Follows ggml's `gguf.cpp` (ggml@d99724f2), the engine's own reader, where the spec and the engine differ: the
//! alignment must be a non-zero power of two, tensor names are shorter than 64 bytes, and each tensor's offset
//! must equal the running sum of the previous tensors' sizes padded to the alignment. Every limit is checked
//! before anything is allocated, and every size is computed with checked arithmetic.
//!
//! Large metadata (tokenizer tokens, scores, merges; any string over [`MAX_INLINE_STRING`]) is not
//! materialized: the reader walks it to find its end and records its element count and byte span, so a
//! 128k-token vocabulary costs one record, not 128k strings.
//!
//! ## BitNet type ids
//! microsoft/BitNet's llama.cpp fork gave ids 36–39 to I2_S, I8_S, TL1 and TL2; upstream later gave 39 to MXFP4
//! (36–38 are removed upstream, 40–42 are NVFP4, Q1_0, Q2_0) and `general.file_type` 38–40 differ too. A file is
//! read with the BitNet meanings when (1) `general.architecture` starts with `bitnet`, or (2) a tensor uses id 36
//! or 38, which have no upstream meaning, or (3) `general.file_type` is 39 or 40 (BitNet's TL2 / I2_S) and no
//! tensor uses an id above 39. Otherwise the upstream meanings apply. Then the size check: the chosen reading
//! must make every tensor offset equal the running padded size; if it does not and the other reading does
//! (possible only when a tensor uses an ambiguous id), the other reading is used. The chosen reading is reported
//! in [`ModelSpec::type_reading`].

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::ggml_type::{GgmlType, TypeReading, file_type_name};
use super::{
    Defect, Dtype, Format, Hparams, MetaValue, ModelError, ModelFile, ModelSpec, PerLayer, Rope,
    Ssm, TensorInfo, classify_tensor,
};

/// Metadata entries per file. Published models carry 20–60; 65,536 leaves three orders of magnitude of room
/// while bounding the key table to a few MiB.
pub const MAX_KV: u64 = 65_536;
/// Tensors per file. The largest published GGUF files (DeepSeek-V3/R1, Llama-3.1-405B) hold about 1,100; 60×
/// that bounds the tensor table, with 63-byte names, to about 20 MiB, inside the 64 MiB peak-memory budget.
pub const MAX_TENSORS: u64 = 65_536;
/// Metadata key length: the GGUF spec caps keys at 65,535 bytes.
pub const MAX_KEY_LEN: u64 = 65_535;
/// Strings up to this length are kept in memory; longer ones (none in published models but chat templates,
/// which stay under 64 KiB) are skipped with their span recorded.
pub const MAX_INLINE_STRING: u64 = 1 << 20;
/// ggml's own cap on any string (`GGUF_MAX_STRING_LENGTH`, gguf.cpp L18).
pub const MAX_STRING_LEN: u64 = 1 << 30;
/// ggml's own cap on array elements (`GGUF_MAX_ARRAY_ELEMENTS`, gguf.cpp L19).
pub const MAX_ARRAY_ELEMENTS: u64 = 1 << 30;
/// Arrays up to this many elements are materialized (per-layer hyper-parameters have one entry per block);
/// longer ones (vocabularies) are skipped with their count and span recorded.
pub const MAX_MATERIALIZED_ARRAY: u64 = 4_096;
/// Nested arrays: the spec allows them, ggml refuses them; three levels is more than any writer produces.
pub const MAX_ARRAY_DEPTH: u32 = 3;
/// Heap spent on materialized metadata per file; past it further values are skipped like long arrays, so a
/// hostile header cannot make the reader allocate more than this however its counts are set.
pub const MAX_METADATA_HEAP: u64 = 16 << 20;
/// Heap spent on metadata keys per file (each key is kept twice: in the table and in the duplicate check).
/// Keys cannot be skipped like values, so a header whose keys exceed this is refused; published models use
/// about 3 KiB.
pub const MAX_KEY_HEAP: u64 = 8 << 20;
/// ggml's `GGML_MAX_NAME` is 64 bytes including the terminating NUL.
pub const MAX_TENSOR_NAME: u64 = 63;
/// ggml's `GGML_MAX_DIMS`.
pub const MAX_DIMS: u32 = 4;
/// ggml's `GGUF_DEFAULT_ALIGNMENT`.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Shards of one split model (`-00001-of-NNNNN`): the name pattern has five digits.
pub const MAX_SHARDS: u64 = 99_999;

/// Smallest encoding of one metadata entry: u64 key length, a 1-byte key, u32 type, a 1-byte value.
const MIN_KV_BYTES: u64 = 8 + 1 + 4 + 1;
/// Smallest encoding of one tensor info: u64 name length, a 1-byte name, u32 n_dims, u32 type, u64 offset.
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 1 + 4 + 4 + 8;
/// Bytes charged against [`MAX_METADATA_HEAP`] per materialized value, beyond its string bytes.
const VALUE_HEAP_BYTES: u64 = std::mem::size_of::<MetaValue>() as u64;

use value_type as vt;

/// GGUF value types (`enum gguf_type`, gguf.h L53-67).
pub mod value_type {
    pub const UINT8: u32 = 0;
    pub const INT8: u32 = 1;
    pub const UINT16: u32 = 2;
    pub const INT16: u32 = 3;
    pub const UINT32: u32 = 4;
    pub const INT32: u32 = 5;
    pub const FLOAT32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const UINT64: u32 = 10;
    pub const INT64: u32 = 11;
    pub const FLOAT64: u32 = 12;

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
    pub fn fixed_size(t: u32) -> Option<u64> {
        match t {
            UINT8 | INT8 | BOOL => Some(1),
            UINT16 | INT16 => Some(2),
            UINT32 | INT32 | FLOAT32 => Some(4),
            UINT64 | INT64 | FLOAT64 => Some(8),
            _ => None,
        }
    }

    /// Smallest encoding of one element of this type (strings: the u64 length; arrays: type and count).
    pub fn min_size(t: u32) -> Option<u64> {
        match t {
            STRING => Some(8),
            ARRAY => Some(12),
            _ => fixed_size(t),
        }
    }
}

/// One tensor-info record before its type id is interpreted.
#[derive(Debug, Clone)]
pub struct RawTensor {
    pub name: String,
    /// ggml `ne[]`, innermost first; only the first `n_dims` entries are meaningful (see [`RawTensor::ne`]).
    pub dims: [u64; MAX_DIMS as usize],
    pub n_dims: u8,
    pub type_id: u32,
    /// Offset relative to the data section.
    pub offset: u64,
    /// Byte offset of this record in the file, for messages.
    pub record_offset: u64,
}

impl RawTensor {
    /// ggml `ne[]`, innermost first.
    pub fn ne(&self) -> &[u64] {
        &self.dims[..usize::from(self.n_dims)]
    }
}

/// The header of one GGUF file.
#[derive(Debug, Clone)]
pub struct Header {
    pub version: u32,
    pub big_endian: bool,
    pub file_bytes: u64,
    pub metadata: Vec<(String, MetaValue)>,
    pub tensors: Vec<RawTensor>,
    pub alignment: u64,
    /// Absolute byte offset where tensor data begins.
    pub data_offset: u64,
}

impl Header {
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}

/// Position-tracking reader over any buffered, seekable source of known length.
struct Reader<R> {
    inner: R,
    pos: u64,
    len: u64,
    big: bool,
    heap_left: u64,
    key_heap_left: u64,
}

type Res<T> = Result<T, (u64, Defect)>;

impl<R: BufRead + Seek> Reader<R> {
    fn remaining(&self) -> u64 {
        self.len.saturating_sub(self.pos)
    }

    fn need(&self, n: u64) -> Res<()> {
        if n > self.remaining() {
            return Err((
                self.pos,
                Defect::Truncated {
                    needed: n,
                    available: self.remaining(),
                },
            ));
        }
        Ok(())
    }

    fn io_err(&self, e: std::io::Error) -> (u64, Defect) {
        // The length was checked first, so a failed read means the file changed or the device failed.
        (self.pos, Defect::ReadFailed(e.to_string()))
    }

    fn array<const N: usize>(&mut self) -> Res<[u8; N]> {
        self.need(N as u64)?;
        let mut b = [0u8; N];
        self.inner.read_exact(&mut b).map_err(|e| self.io_err(e))?;
        self.pos += N as u64;
        Ok(b)
    }

    fn u8(&mut self) -> Res<u8> {
        Ok(self.array::<1>()?[0])
    }
    fn u16(&mut self) -> Res<u16> {
        let b = self.array::<2>()?;
        Ok(if self.big {
            u16::from_be_bytes(b)
        } else {
            u16::from_le_bytes(b)
        })
    }
    fn u32(&mut self) -> Res<u32> {
        let b = self.array::<4>()?;
        Ok(if self.big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }
    fn u64(&mut self) -> Res<u64> {
        let b = self.array::<8>()?;
        Ok(if self.big {
            u64::from_be_bytes(b)
        } else {
            u64::from_le_bytes(b)
        })
    }

    fn skip(&mut self, n: u64) -> Res<()> {
        self.need(n)?;
        let buffered = match self.inner.fill_buf() {
            Ok(b) => b.len() as u64,
            Err(e) => return Err(self.io_err(e)),
        };
        if n <= buffered {
            self.inner.consume(n as usize);
        } else {
            self.inner.consume(buffered as usize);
            let rest = i64::try_from(n - buffered).map_err(|_| {
                (
                    self.pos,
                    Defect::Truncated {
                        needed: n,
                        available: self.remaining(),
                    },
                )
            })?;
            self.inner
                .seek(SeekFrom::Current(rest))
                .map_err(|e| self.io_err(e))?;
        }
        self.pos += n;
        Ok(())
    }

    fn bytes(&mut self, n: u64) -> Res<Vec<u8>> {
        self.need(n)?;
        let mut v = vec![0u8; n as usize];
        self.inner.read_exact(&mut v).map_err(|e| self.io_err(e))?;
        self.pos += n;
        Ok(v)
    }

    fn string_of(&mut self, len: u64) -> Res<String> {
        let at = self.pos;
        let v = self.bytes(len)?;
        String::from_utf8(v).map_err(|_| (at, Defect::InvalidUtf8))
    }

    /// Checks that `count` entries of at least `min_bytes` each fit in what is left of the file.
    fn fits(&self, what: &'static str, count: u64, min_bytes: u64) -> Res<()> {
        let available = self.remaining();
        match count.checked_mul(min_bytes) {
            Some(total) if total <= available => Ok(()),
            _ => Err((
                self.pos,
                Defect::CountExceedsFile {
                    what,
                    count,
                    min_bytes,
                    available,
                },
            )),
        }
    }

    fn charge(&mut self, bytes: u64) -> bool {
        if bytes <= self.heap_left {
            self.heap_left -= bytes;
            true
        } else {
            false
        }
    }

    /// Reads a value of type `t`; `materialize` false walks past it, recording only what it spans.
    fn value(&mut self, key: &str, t: u32, depth: u32) -> Res<MetaValue> {
        let at = self.pos;
        let v = match t {
            vt::UINT8 => MetaValue::U8(self.u8()?),
            vt::INT8 => MetaValue::I8(self.u8()? as i8),
            vt::UINT16 => MetaValue::U16(self.u16()?),
            vt::INT16 => MetaValue::I16(self.u16()? as i16),
            vt::UINT32 => MetaValue::U32(self.u32()?),
            vt::INT32 => MetaValue::I32(self.u32()? as i32),
            vt::FLOAT32 => MetaValue::F32(f32::from_bits(self.u32()?)),
            vt::UINT64 => MetaValue::U64(self.u64()?),
            vt::INT64 => MetaValue::I64(self.u64()? as i64),
            vt::FLOAT64 => MetaValue::F64(f64::from_bits(self.u64()?)),
            vt::BOOL => match self.u8()? {
                0 => MetaValue::Bool(false),
                1 => MetaValue::Bool(true),
                value => {
                    return Err((
                        at,
                        Defect::InvalidBool {
                            key: key.into(),
                            value,
                        },
                    ));
                }
            },
            vt::STRING => {
                let len = self.u64()?;
                if len > MAX_STRING_LEN {
                    return Err((
                        at,
                        Defect::StringTooLong {
                            len,
                            limit: MAX_STRING_LEN,
                        },
                    ));
                }
                if len <= MAX_INLINE_STRING && self.charge(len + VALUE_HEAP_BYTES) {
                    MetaValue::String(self.string_of(len)?)
                } else {
                    let offset = self.pos;
                    self.skip(len)?;
                    MetaValue::SkippedString { len, offset }
                }
            }
            vt::ARRAY => self.array_value(key, depth)?,
            type_id => {
                return Err((
                    at,
                    Defect::UnknownValueType {
                        key: key.into(),
                        type_id,
                    },
                ));
            }
        };
        Ok(v)
    }

    fn array_value(&mut self, key: &str, depth: u32) -> Res<MetaValue> {
        let at = self.pos;
        if depth >= MAX_ARRAY_DEPTH {
            return Err((
                at,
                Defect::ArrayTooDeep {
                    key: key.into(),
                    limit: MAX_ARRAY_DEPTH,
                },
            ));
        }
        let et = self.u32()?;
        let Some(min) = vt::min_size(et) else {
            return Err((
                at,
                Defect::UnknownValueType {
                    key: key.into(),
                    type_id: et,
                },
            ));
        };
        let count = self.u64()?;
        if count > MAX_ARRAY_ELEMENTS {
            return Err((
                at,
                Defect::TooMany {
                    what: "array element",
                    count,
                    limit: MAX_ARRAY_ELEMENTS,
                },
            ));
        }
        self.fits("array", count, min)?;
        let start = self.pos;
        let materialize = count <= MAX_MATERIALIZED_ARRAY && self.charge(count * VALUE_HEAP_BYTES);
        if materialize {
            let mut items = Vec::with_capacity(count as usize);
            for _ in 0..count {
                items.push(self.value(key, et, depth + 1)?);
            }
            return Ok(MetaValue::Array(items));
        }
        self.skip_elements(key, et, count, depth)?;
        Ok(MetaValue::SkippedArray {
            element_type: vt::name(et),
            count,
            offset: start,
            bytes: self.pos - start,
        })
    }

    /// Walks past `count` array elements of type `et`: fixed-size elements in one seek, strings straight from
    /// the read buffer (the hot path of a 128k-token vocabulary), anything else one by one.
    fn skip_elements(&mut self, key: &str, et: u32, count: u64, depth: u32) -> Res<()> {
        match vt::fixed_size(et) {
            // `count * size` cannot overflow: `fits` checked count * min_size <= remaining bytes.
            Some(size) if et != vt::BOOL => self.skip(count * size),
            _ if et == vt::STRING => self.skip_strings(key, count, depth),
            _ => {
                for _ in 0..count {
                    self.skip_value(key, et, depth + 1)?;
                }
                Ok(())
            }
        }
    }

    fn skip_strings(&mut self, key: &str, mut count: u64, depth: u32) -> Res<()> {
        while count > 0 {
            let (pos, big) = (self.pos, self.big);
            let limit = usize::try_from(self.remaining()).unwrap_or(usize::MAX);
            let (consumed, skipped) = {
                let buf = match self.inner.fill_buf() {
                    Ok(b) => b,
                    Err(e) => return Err((pos, Defect::ReadFailed(e.to_string()))),
                };
                let buf = &buf[..buf.len().min(limit)];
                let mut i = 0usize;
                let mut n = 0u64;
                while n < count && i + 8 <= buf.len() {
                    let mut lb = [0u8; 8];
                    lb.copy_from_slice(&buf[i..i + 8]);
                    let len = if big {
                        u64::from_be_bytes(lb)
                    } else {
                        u64::from_le_bytes(lb)
                    };
                    if len > MAX_STRING_LEN {
                        return Err((
                            pos + i as u64,
                            Defect::StringTooLong {
                                len,
                                limit: MAX_STRING_LEN,
                            },
                        ));
                    }
                    let end = i + 8 + len as usize;
                    if end > buf.len() {
                        break;
                    }
                    i = end;
                    n += 1;
                }
                (i, n)
            };
            if skipped == 0 {
                // The next string straddles the buffer's end (or the file ends): take the general path once.
                self.skip_value(key, vt::STRING, depth + 1)?;
                count -= 1;
            } else {
                self.inner.consume(consumed);
                self.pos += consumed as u64;
                count -= skipped;
            }
        }
        Ok(())
    }

    /// Walks past a value without keeping it, validating what the engine would validate.
    fn skip_value(&mut self, key: &str, t: u32, depth: u32) -> Res<()> {
        let at = self.pos;
        match t {
            vt::STRING => {
                let len = self.u64()?;
                if len > MAX_STRING_LEN {
                    return Err((
                        at,
                        Defect::StringTooLong {
                            len,
                            limit: MAX_STRING_LEN,
                        },
                    ));
                }
                self.skip(len)
            }
            vt::BOOL => match self.u8()? {
                0 | 1 => Ok(()),
                value => Err((
                    at,
                    Defect::InvalidBool {
                        key: key.into(),
                        value,
                    },
                )),
            },
            vt::ARRAY => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err((
                        at,
                        Defect::ArrayTooDeep {
                            key: key.into(),
                            limit: MAX_ARRAY_DEPTH,
                        },
                    ));
                }
                let et = self.u32()?;
                let Some(min) = vt::min_size(et) else {
                    return Err((
                        at,
                        Defect::UnknownValueType {
                            key: key.into(),
                            type_id: et,
                        },
                    ));
                };
                let count = self.u64()?;
                if count > MAX_ARRAY_ELEMENTS {
                    return Err((
                        at,
                        Defect::TooMany {
                            what: "array element",
                            count,
                            limit: MAX_ARRAY_ELEMENTS,
                        },
                    ));
                }
                self.fits("array", count, min)?;
                self.skip_elements(key, et, count, depth)
            }
            _ => match vt::fixed_size(t) {
                Some(size) => self.skip(size),
                None => Err((
                    at,
                    Defect::UnknownValueType {
                        key: key.into(),
                        type_id: t,
                    },
                )),
            },
        }
    }
}

/// Parses one GGUF header from `src`, a source of `len` bytes. Tensor data is not read.
pub fn parse_header<R: BufRead + Seek>(src: R, len: u64) -> Result<Header, (u64, Defect)> {
    let mut r = Reader {
        inner: src,
        pos: 0,
        len,
        big: false,
        heap_left: MAX_METADATA_HEAP,
        key_heap_left: MAX_KEY_HEAP,
    };
    let magic = r.array::<4>()?;
    if &magic != b"GGUF" {
        return Err((0, Defect::BadMagic { found: magic }));
    }
    let raw_version = r.u32()?;
    // gguf.cpp L497-500: a version whose low 16 bits are zero was written in the other byte order.
    let version = if raw_version & 0xFFFF == 0 && raw_version != 0 {
        r.big = true;
        raw_version.swap_bytes()
    } else {
        raw_version
    };
    match version {
        2 | 3 => {}
        1 => return Err((4, Defect::VersionOne)),
        v => return Err((4, Defect::UnknownVersion(v))),
    }
    let at = r.pos;
    let n_tensors = r.u64()?;
    if n_tensors > MAX_TENSORS {
        return Err((
            at,
            Defect::TooMany {
                what: "tensor",
                count: n_tensors,
                limit: MAX_TENSORS,
            },
        ));
    }
    let at = r.pos;
    let n_kv = r.u64()?;
    if n_kv > MAX_KV {
        return Err((
            at,
            Defect::TooMany {
                what: "metadata entry",
                count: n_kv,
                limit: MAX_KV,
            },
        ));
    }
    r.fits("metadata", n_kv, MIN_KV_BYTES)?;

    let mut metadata: Vec<(String, MetaValue)> = Vec::with_capacity(n_kv as usize);
    let mut keys: HashSet<String> = HashSet::with_capacity(n_kv as usize);
    for _ in 0..n_kv {
        let at = r.pos;
        let len = r.u64()?;
        if len > MAX_KEY_LEN {
            return Err((
                at,
                Defect::StringTooLong {
                    len,
                    limit: MAX_KEY_LEN,
                },
            ));
        }
        if len == 0 {
            return Err((at, Defect::EmptyKey));
        }
        let key = r.string_of(len)?;
        let key_cost = 2 * (len + VALUE_HEAP_BYTES);
        if key_cost > r.key_heap_left {
            return Err((
                at,
                Defect::TooMany {
                    what: "metadata key heap byte",
                    count: MAX_KEY_HEAP - r.key_heap_left + key_cost,
                    limit: MAX_KEY_HEAP,
                },
            ));
        }
        r.key_heap_left -= key_cost;
        if keys.contains(&key) {
            return Err((at, Defect::DuplicateKey(key)));
        }
        let t = r.u32()?;
        let value = r.value(&key, t, 0)?;
        keys.insert(key.clone());
        metadata.push((key, value));
    }

    let mut alignment = DEFAULT_ALIGNMENT;
    if let Some((_, v)) = metadata.iter().find(|(k, _)| k == "general.alignment") {
        match v {
            MetaValue::U32(a) => {
                let a = u64::from(*a);
                if a == 0 || !a.is_power_of_two() {
                    return Err((r.pos, Defect::BadAlignment(a)));
                }
                alignment = a;
            }
            other => {
                return Err((
                    r.pos,
                    Defect::WrongValueType {
                        key: "general.alignment".into(),
                        expected: "UINT32",
                        found: other.type_name().into(),
                    },
                ));
            }
        }
    }

    r.fits("tensor info", n_tensors, MIN_TENSOR_INFO_BYTES)?;
    let mut tensors = Vec::with_capacity(n_tensors as usize);
    for _ in 0..n_tensors {
        let record_offset = r.pos;
        let len = r.u64()?;
        if len > MAX_TENSOR_NAME {
            return Err((
                record_offset,
                Defect::TensorNameTooLong {
                    len,
                    limit: MAX_TENSOR_NAME,
                },
            ));
        }
        if len == 0 {
            return Err((record_offset, Defect::EmptyTensorName));
        }
        let name = r.string_of(len)?;
        let at = r.pos;
        let n_dims = r.u32()?;
        if n_dims > MAX_DIMS {
            return Err((
                at,
                Defect::TooManyDims {
                    name,
                    n_dims,
                    limit: MAX_DIMS,
                },
            ));
        }
        let mut dims = [1u64; MAX_DIMS as usize];
        for (dim, slot) in dims.iter_mut().enumerate().take(n_dims as usize) {
            let at = r.pos;
            let d = r.u64()?;
            // ggml reads dimensions as int64 and refuses negative ones.
            if d > i64::MAX as u64 {
                return Err((
                    at,
                    Defect::DimTooLarge {
                        name,
                        dim,
                        value: d,
                    },
                ));
            }
            *slot = d;
        }
        let type_id = r.u32()?;
        let offset = r.u64()?;
        tensors.push(RawTensor {
            name,
            dims,
            n_dims: n_dims as u8,
            type_id,
            offset,
            record_offset,
        });
    }
    // Duplicate names, found by sorting references rather than hashing copies: 16 bytes per tensor.
    let mut order: Vec<(&str, usize)> = tensors
        .iter()
        .enumerate()
        .map(|(i, t)| (t.name.as_str(), i))
        .collect();
    order.sort_unstable();
    if let Some(dup) = order
        .windows(2)
        .filter(|w| w[0].0 == w[1].0)
        .map(|w| w[1].1)
        .min()
    {
        let t = &tensors[dup];
        return Err((t.record_offset, Defect::DuplicateTensor(t.name.clone())));
    }
    drop(order);
    let data_offset = r.pos.checked_next_multiple_of(alignment).ok_or((
        r.pos,
        Defect::DataOutOfFile {
            data_offset: u64::MAX,
            file_bytes: len,
        },
    ))?;
    if !tensors.is_empty() && data_offset > len {
        return Err((
            r.pos,
            Defect::DataOutOfFile {
                data_offset,
                file_bytes: len,
            },
        ));
    }
    Ok(Header {
        version,
        big_endian: r.big,
        file_bytes: len,
        metadata,
        tensors,
        alignment,
        data_offset,
    })
}

/// Parses a GGUF header from a byte slice (tests, fuzzing).
pub fn parse_header_bytes(bytes: &[u8]) -> Result<Header, (u64, Defect)> {
    parse_header(std::io::Cursor::new(bytes), bytes.len() as u64)
}

fn read_file_header(path: &Path) -> Result<Header, ModelError> {
    let io = |source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    };
    // A FIFO or a device is refused here instead of blocking or streaming without end.
    let file = crate::input::open_regular(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    // 256 KiB buffer: headers are read front to back, and long string arrays are walked through the buffer.
    let src = BufReader::with_capacity(256 << 10, file);
    parse_header(src, len).map_err(|(offset, defect)| ModelError::Invalid {
        path: path.to_path_buf(),
        offset,
        defect,
    })
}

/// Each tensor's resolved type and byte size, per shard.
type ShardSizes = Vec<Vec<(GgmlType, u64)>>;

/// Tensor types resolved under one reading, with each tensor's byte size.
fn resolve_types(
    header: &Header,
    reading: TypeReading,
) -> Result<Vec<(GgmlType, u64)>, (u64, Defect)> {
    header
        .tensors
        .iter()
        .map(|t| {
            let Some(ty) = GgmlType::from_id(t.type_id, reading) else {
                return Err((
                    t.record_offset,
                    Defect::UnknownTensorType {
                        name: t.name.clone(),
                        type_id: t.type_id,
                        reading: match reading {
                            TypeReading::Upstream => "upstream ggml",
                            TypeReading::Bitnet => "BitNet",
                        },
                    },
                ));
            };
            let ne0 = t.ne().first().copied().unwrap_or(1);
            let block = ty.block_elements();
            if ne0 % block != 0 {
                return Err((
                    t.record_offset,
                    Defect::PartialBlock {
                        name: t.name.clone(),
                        type_name: ty.name(),
                        ne0,
                        block,
                    },
                ));
            }
            if ty == GgmlType::TL2 && ne0 < 256 {
                return Err((
                    t.record_offset,
                    Defect::BadTensor {
                        name: t.name.clone(),
                        reason: format!(
                            "TL2 row length {ne0} is under 256; BitNet's TL2 size formula needs at least 256 columns"
                        ),
                    },
                ));
            }
            let bytes = ty.tensor_bytes(t.ne()).ok_or_else(|| {
                (
                    t.record_offset,
                    Defect::SizeOverflow {
                        name: t.name.clone(),
                    },
                )
            })?;
            Ok((ty, bytes))
        })
        .collect()
}

/// Checks offsets: aligned, in table order, packed without gaps or overlaps, inside the file.
fn check_layout(header: &Header, sizes: &[(GgmlType, u64)]) -> Result<(), (u64, Defect)> {
    let mut expected: u64 = 0;
    for (t, &(_, bytes)) in header.tensors.iter().zip(sizes) {
        if t.offset % header.alignment != 0 {
            return Err((
                t.record_offset,
                Defect::MisalignedTensor {
                    name: t.name.clone(),
                    offset: t.offset,
                    alignment: header.alignment,
                },
            ));
        }
        if t.offset < expected {
            return Err((
                t.record_offset,
                Defect::OverlappingTensor {
                    name: t.name.clone(),
                    offset: t.offset,
                    previous_end: expected,
                },
            ));
        }
        if t.offset > expected {
            return Err((
                t.record_offset,
                Defect::TensorGap {
                    name: t.name.clone(),
                    offset: t.offset,
                    expected,
                },
            ));
        }
        let overflow = || {
            (
                t.record_offset,
                Defect::SizeOverflow {
                    name: t.name.clone(),
                },
            )
        };
        let start = header
            .data_offset
            .checked_add(t.offset)
            .ok_or_else(overflow)?;
        let end = start.checked_add(bytes).ok_or_else(overflow)?;
        if end > header.file_bytes {
            return Err((
                t.record_offset,
                Defect::TensorOutOfFile {
                    name: t.name.clone(),
                    start,
                    end,
                    file_bytes: header.file_bytes,
                },
            ));
        }
        expected = t
            .offset
            .checked_add(bytes)
            .and_then(|e| e.checked_next_multiple_of(header.alignment))
            .ok_or_else(overflow)?;
    }
    Ok(())
}

fn meta_str<'a>(headers: &'a [Header], key: &str) -> Option<&'a str> {
    headers.first()?.get(key)?.as_str()
}

/// The reading a model's headers ask for before the size check (rules 1–3 of the module doc).
fn preferred_reading(headers: &[Header]) -> TypeReading {
    let arch = meta_str(headers, "general.architecture").unwrap_or("");
    if arch.to_ascii_lowercase().starts_with("bitnet") {
        return TypeReading::Bitnet;
    }
    let ids = || {
        headers
            .iter()
            .flat_map(|h| h.tensors.iter().map(|t| t.type_id))
    };
    if ids().any(|id| id == 36 || id == 38) {
        return TypeReading::Bitnet;
    }
    let file_type = headers
        .first()
        .and_then(|h| h.get("general.file_type"))
        .and_then(MetaValue::as_u64);
    if matches!(file_type, Some(39 | 40)) && !ids().any(|id| id > 39) {
        return TypeReading::Bitnet;
    }
    TypeReading::Upstream
}

/// Resolves every shard's tensor types under one reading, with the size check of the module doc.
fn resolve_model_types(
    paths: &[PathBuf],
    headers: &[Header],
) -> Result<(TypeReading, ShardSizes), ModelError> {
    // Errors carry the shard index with the offset and defect.
    let try_reading = |reading| -> Result<ShardSizes, (usize, u64, Defect)> {
        headers
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let sizes = resolve_types(h, reading).map_err(|(o, d)| (i, o, d))?;
                check_layout(h, &sizes).map_err(|(o, d)| (i, o, d))?;
                Ok(sizes)
            })
            .collect()
    };
    let first = preferred_reading(headers);
    let first_err = match try_reading(first) {
        Ok(sizes) => return Ok((first, sizes)),
        Err(e) => e,
    };
    let ambiguous = headers
        .iter()
        .flat_map(|h| &h.tensors)
        .any(|t| GgmlType::id_is_ambiguous(t.type_id));
    if ambiguous {
        let other = match first {
            TypeReading::Upstream => TypeReading::Bitnet,
            TypeReading::Bitnet => TypeReading::Upstream,
        };
        if let Ok(sizes) = try_reading(other) {
            return Ok((other, sizes));
        }
    }
    let (i, offset, defect) = first_err;
    Err(ModelError::Invalid {
        path: paths[i].clone(),
        offset,
        defect,
    })
}

/// Splits `name-00002-of-00003.gguf` into (`name`, 2, 3).
pub fn split_name(path: &Path) -> Option<(String, u64, u64)> {
    let file = path.file_name()?.to_str()?;
    let stem = file.strip_suffix(".gguf")?;
    let (rest, count) = stem.rsplit_once("-of-")?;
    let (prefix, no) = rest.rsplit_once('-')?;
    if no.len() != 5 || count.len() != 5 {
        return None;
    }
    let no: u64 = no.parse().ok()?;
    let count: u64 = count.parse().ok()?;
    (no >= 1 && no <= count).then(|| (prefix.to_string(), no, count))
}

fn split_err(path: &Path, msg: String) -> ModelError {
    ModelError::InvalidModel {
        path: path.to_path_buf(),
        defect: Defect::Split(msg),
    }
}

/// Reads a single-file GGUF model from memory; `path` only names it in messages. The fuzz target and the
/// truncation tests use this: it runs every check [`load`] runs on one file.
pub fn load_bytes(bytes: &[u8], path: &Path) -> Result<ModelSpec, ModelError> {
    let header = parse_header_bytes(bytes).map_err(|(offset, defect)| ModelError::Invalid {
        path: path.to_path_buf(),
        offset,
        defect,
    })?;
    let paths = [path.to_path_buf()];
    let headers = vec![header];
    check_split(&paths, &headers)?;
    build_spec(&paths, headers)
}

/// Reads a GGUF model from any of its files: a single file, or any shard of a split model, in which case every
/// shard's header is read and checked and one model is presented.
pub fn load(path: &Path) -> Result<ModelSpec, ModelError> {
    let header = read_file_header(path)?;
    let declared = header.get("split.count").and_then(MetaValue::as_u64);
    let (paths, headers) = match split_name(path) {
        Some((prefix, _, count)) if count > 1 => {
            if let Some(d) = declared
                && d != count
            {
                return Err(split_err(
                    path,
                    format!("file name says {count} shards but split.count is {d}"),
                ));
            }
            let dir = path.parent().unwrap_or_else(|| Path::new(""));
            let mut paths = Vec::with_capacity(count as usize);
            let mut headers = Vec::with_capacity(count as usize);
            for i in 1..=count {
                let p = dir.join(format!("{prefix}-{i:05}-of-{count:05}.gguf"));
                let h = if p == path {
                    header.clone()
                } else {
                    if !p.exists() {
                        return Err(split_err(
                            &p,
                            format!("shard {i} of {count} is missing (given {})", path.display()),
                        ));
                    }
                    read_file_header(&p)?
                };
                paths.push(p);
                headers.push(h);
            }
            (paths, headers)
        }
        _ => {
            if let Some(d) = declared
                && d > 1
            {
                return Err(split_err(
                    path,
                    format!(
                        "split.count is {d} but the file name does not follow the shard pattern NAME-00001-of-{d:05}.gguf, so the other shards cannot be found"
                    ),
                ));
            }
            (vec![path.to_path_buf()], vec![header])
        }
    };
    check_split(&paths, &headers)?;
    build_spec(&paths, headers)
}

fn check_split(paths: &[PathBuf], headers: &[Header]) -> Result<(), ModelError> {
    let n = headers.len() as u64;
    if n > MAX_SHARDS {
        return Err(split_err(
            &paths[0],
            format!("{n} shards exceed {MAX_SHARDS}"),
        ));
    }
    let total: u64 = headers.iter().map(|h| h.tensors.len() as u64).sum();
    for (i, (p, h)) in paths.iter().zip(headers).enumerate() {
        if let Some(no) = h.get("split.no").and_then(MetaValue::as_u64)
            && no != i as u64
        {
            return Err(split_err(
                p,
                format!(
                    "split.no is {no} but the file is shard {} (split.no counts from 0)",
                    i + 1
                ),
            ));
        }
        if let Some(c) = h.get("split.count").and_then(MetaValue::as_u64)
            && c != n
        {
            return Err(split_err(p, format!("split.count is {c}, expected {n}")));
        }
        if let Some(t) = h.get("split.tensors.count").and_then(MetaValue::as_u64)
            && t != total
        {
            return Err(split_err(
                p,
                format!("split.tensors.count is {t} but the shards hold {total} tensors"),
            ));
        }
    }
    if n > 1 {
        let mut seen: HashSet<&str> = HashSet::new();
        for (p, h) in paths.iter().zip(headers) {
            for t in &h.tensors {
                if !seen.insert(&t.name) {
                    return Err(split_err(
                        p,
                        format!("tensor {:?} appears in more than one shard", t.name),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Assembles the model, consuming the headers so tensor names and metadata move rather than copy (the peak
/// memory of a 65,536-tensor header stays one tensor table, not two).
fn build_spec(paths: &[PathBuf], headers: Vec<Header>) -> Result<ModelSpec, ModelError> {
    let (reading, sizes) = resolve_model_types(paths, &headers)?;
    let (version, big_endian) = (headers[0].version, headers[0].big_endian);
    let architecture = meta_str(&headers, "general.architecture")
        .unwrap_or("unknown")
        .to_string();
    let mut tensors = Vec::with_capacity(headers.iter().map(|h| h.tensors.len()).sum());
    let mut files = Vec::with_capacity(headers.len());
    let mut metadata = BTreeMap::new();
    for (i, (h, sizes)) in headers.into_iter().zip(&sizes).enumerate() {
        files.push(ModelFile {
            path: paths[i].clone(),
            bytes: h.file_bytes,
            tensor_count: h.tensors.len() as u64,
        });
        for (t, &(ty, bytes)) in h.tensors.into_iter().zip(sizes) {
            let (role, layer) = classify_tensor(&t.name);
            // Cannot saturate: the byte size, at least elements × bits / 8 for every type, was computed without
            // overflow; saturating keeps that an invariant rather than a panic.
            let elements = t.ne().iter().fold(1u64, |a, &d| a.saturating_mul(d));
            let shape = t.ne().iter().rev().copied().collect();
            tensors.push(TensorInfo {
                name: t.name,
                shape,
                dtype: Dtype::Ggml(ty),
                bytes,
                elements,
                parameters: elements,
                role,
                layer,
                packing: None,
                file: i as u32,
                offset: h.data_offset + t.offset,
            });
        }
        // Shard 1 carries the model's metadata; later shards repeat only the split keys.
        for (k, v) in h.metadata {
            metadata.entry(k).or_insert(v);
        }
    }
    let hparams = hparams_from_metadata(&architecture, &metadata, &tensors);
    if let Some(n) = hparams.block_count.filter(|&n| n > super::MAX_BLOCKS) {
        return Err(ModelError::InvalidModel {
            path: paths[0].clone(),
            defect: Defect::TooMany {
                what: "block (layer)",
                count: n,
                limit: super::MAX_BLOCKS,
            },
        });
    }
    super::check_hparams(Format::Gguf, &architecture, &hparams, &metadata).map_err(|defect| {
        ModelError::InvalidModel {
            path: paths[0].clone(),
            defect,
        }
    })?;
    let file_type = metadata
        .get("general.file_type")
        .and_then(MetaValue::as_u64)
        .and_then(|v| u32::try_from(v).ok())
        .map(|id| (id, file_type_name(id, reading)));
    let name = metadata
        .get("general.name")
        .and_then(MetaValue::as_str)
        .map(str::to_string);
    Ok(super::assemble(
        Format::Gguf,
        Some(version),
        big_endian,
        architecture,
        name,
        file_type,
        Some(reading),
        hparams,
        files,
        tensors,
        metadata,
    ))
}

fn per_layer(v: &MetaValue) -> Option<PerLayer> {
    match v {
        MetaValue::Array(items) => items
            .iter()
            .map(MetaValue::as_u64)
            .collect::<Option<Vec<u64>>>()
            .map(|v| PerLayer::Layers(v).normalized()),
        other => other.as_u64().map(PerLayer::Uniform),
    }
}

/// Hyper-parameters from `{arch}.*` keys, with the vocabulary size falling back to the token list's length and
/// then the embedding tensor's rows.
fn hparams_from_metadata(
    arch: &str,
    m: &BTreeMap<String, MetaValue>,
    tensors: &[TensorInfo],
) -> Hparams {
    let key = |k: &str| m.get(&format!("{arch}.{k}"));
    let u = |k: &str| key(k).and_then(MetaValue::as_u64);
    let f = |k: &str| key(k).and_then(MetaValue::as_f64);
    let block_count = u("block_count");
    let vocab_size = u("vocab_size")
        .or_else(|| {
            m.get("tokenizer.ggml.tokens")
                .and_then(MetaValue::array_len)
        })
        .or_else(|| {
            tensors
                .iter()
                .find(|t| t.name == "token_embd.weight")
                .and_then(|t| t.shape.first().copied())
        });
    let sliding_window = u("attention.sliding_window");
    let sliding_window_layers = sliding_window_layers(arch, m, block_count, sliding_window);
    let rope = {
        let r = Rope {
            dimension_count: u("rope.dimension_count"),
            freq_base: f("rope.freq_base"),
            scaling_type: key("rope.scaling.type")
                .and_then(MetaValue::as_str)
                .map(str::to_string),
            scaling_factor: f("rope.scaling.factor"),
            original_context_length: u("rope.scaling.original_context_length"),
        };
        (r != Rope::default()).then_some(r)
    };
    let ssm = {
        let s = Ssm {
            conv_kernel: u("ssm.conv_kernel"),
            inner_size: u("ssm.inner_size"),
            state_size: u("ssm.state_size"),
            time_step_rank: u("ssm.time_step_rank"),
            group_count: u("ssm.group_count"),
        };
        (s != Ssm::default()).then_some(s)
    };
    Hparams {
        context_length: u("context_length"),
        embedding_length: u("embedding_length"),
        block_count,
        vocab_size,
        feed_forward_length: key("feed_forward_length").and_then(per_layer),
        head_count: key("attention.head_count").and_then(per_layer),
        head_count_kv: key("attention.head_count_kv").and_then(per_layer),
        key_length: u("attention.key_length"),
        value_length: u("attention.value_length"),
        sliding_window,
        sliding_window_layers,
        expert_count: u("expert_count"),
        expert_used_count: u("expert_used_count"),
        expert_shared_count: u("expert_shared_count"),
        expert_feed_forward_length: u("expert_feed_forward_length"),
        expert_layers: Vec::new(),
        recurrent_layers: Vec::new(),
        kv_lora_rank: u("attention.kv_lora_rank"),
        key_length_mla: u("attention.key_length_mla"),
        value_length_mla: u("attention.value_length_mla"),
        q_lora_rank: u("attention.q_lora_rank"),
        rope,
        ssm,
        tied_embeddings: false,
        torch_dtype: None,
        quantization: None,
    }
}

/// Which layers use sliding-window attention. GGUF says it three ways: a per-layer bool array
/// `{arch}.attention.sliding_window_pattern` (gemma3n, newer converters), an integer period N meaning every N-th
/// layer is global (llama.cpp's `set_swa_pattern`: layer il is SWA unless `il % N == N - 1`), or nothing, in
/// which case llama.cpp's per-architecture default applies (Gemma 2: every other layer, starting with SWA).
fn sliding_window_layers(
    arch: &str,
    m: &BTreeMap<String, MetaValue>,
    block_count: Option<u64>,
    window: Option<u64>,
) -> Vec<bool> {
    let Some(n) = block_count else {
        return Vec::new();
    };
    if window.unwrap_or(0) == 0 {
        return Vec::new();
    }
    let n = usize::try_from(n)
        .unwrap_or(0)
        .min(MAX_MATERIALIZED_ARRAY as usize);
    match m.get(&format!("{arch}.attention.sliding_window_pattern")) {
        Some(MetaValue::Array(items)) => items
            .iter()
            .map(|v| v.as_bool().unwrap_or(v.as_u64().unwrap_or(0) != 0))
            .collect(),
        Some(v) if v.as_u64().is_some() => {
            let period = v.as_u64().unwrap_or(0);
            if period == 0 {
                vec![true; n]
            } else {
                (0..n as u64).map(|il| il % period < period - 1).collect()
            }
        }
        _ => match arch {
            "gemma2" => (0..n).map(|il| il % 2 == 0).collect(),
            "gemma3" => (0..n as u64).map(|il| il % 6 < 5).collect(),
            _ => vec![true; n],
        },
    }
}
