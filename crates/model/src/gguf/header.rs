//! One GGUF file's header: magic, version and byte order, the metadata table (keys bounded and unique), the
//! alignment, and the tensor-info table (names, dimensions, type ids, offsets), each count checked against
//! its limit and against the bytes left before anything is allocated. Tensor types are not interpreted here
//! (see `reading`); tensor data is never read.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Seek};
use std::path::Path;

use super::reader::Reader;
use super::{
    DEFAULT_ALIGNMENT, Defect, MAX_DIMS, MAX_KEY_HEAP, MAX_KEY_LEN, MAX_KV, MAX_METADATA_HEAP,
    MAX_TENSOR_NAME, MAX_TENSORS, MIN_KV_BYTES, MIN_TENSOR_INFO_BYTES, MetaValue, ModelError,
    VALUE_HEAP_BYTES,
};
use crate::source;

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
    pub(crate) fn ne(&self) -> &[u64] {
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

pub(super) fn read_file_header(path: &Path) -> Result<Header, ModelError> {
    // A FIFO or a device is refused here instead of blocking or streaming without end.
    let (file, len) = source::open(path)?;
    // 256 KiB buffer: headers are read front to back, and long string arrays are walked through the buffer.
    let src = BufReader::with_capacity(256 << 10, file);
    parse_header(src, len).map_err(|e| ModelError::at(path, e))
}
