//! The position-tracking reader every GGUF header is read through: bounded by the file's length (every read
//! checks what is left first), either byte order, with the metadata heap budget
//! ([`MAX_METADATA_HEAP`](super::MAX_METADATA_HEAP)) that decides which values are materialized and which are
//! walked past with only their span recorded. Decodes and skips metadata values, validating what ggml
//! validates (string and array limits, booleans, nesting).

use std::io::{BufRead, Seek, SeekFrom};

use super::value_type as vt;
use super::{
    Defect, MAX_ARRAY_DEPTH, MAX_ARRAY_ELEMENTS, MAX_INLINE_STRING, MAX_MATERIALIZED_ARRAY,
    MAX_STRING_LEN, MetaValue, VALUE_HEAP_BYTES,
};

/// Position-tracking reader over any buffered, seekable source of known length.
pub(super) struct Reader<R> {
    pub(super) inner: R,
    pub(super) pos: u64,
    pub(super) len: u64,
    pub(super) big: bool,
    pub(super) heap_left: u64,
    pub(super) key_heap_left: u64,
}

pub(super) type Res<T> = Result<T, (u64, Defect)>;

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

    pub(super) fn array<const N: usize>(&mut self) -> Res<[u8; N]> {
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
    pub(super) fn u32(&mut self) -> Res<u32> {
        let b = self.array::<4>()?;
        Ok(if self.big {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        })
    }
    pub(super) fn u64(&mut self) -> Res<u64> {
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

    pub(super) fn string_of(&mut self, len: u64) -> Res<String> {
        let at = self.pos;
        let v = self.bytes(len)?;
        String::from_utf8(v).map_err(|_| (at, Defect::InvalidUtf8))
    }

    /// Checks that `count` entries of at least `min_bytes` each fit in what is left of the file.
    pub(super) fn fits(&self, what: &'static str, count: u64, min_bytes: u64) -> Res<()> {
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
    pub(super) fn value(&mut self, key: &str, t: u32, depth: u32) -> Res<MetaValue> {
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
            vt::BOOL => MetaValue::Bool(self.bool(key)?),
            vt::STRING => {
                let len = self.string_len()?;
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

    /// A boolean: one byte, 0 or 1, as ggml requires.
    fn bool(&mut self, key: &str) -> Res<bool> {
        let at = self.pos;
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            value => Err((
                at,
                Defect::InvalidBool {
                    key: key.into(),
                    value,
                },
            )),
        }
    }

    /// A string's length prefix, within ggml's cap.
    fn string_len(&mut self) -> Res<u64> {
        let at = self.pos;
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
        Ok(len)
    }

    /// An array's element type and count, checked against the nesting limit, the element cap and the bytes
    /// left in the file.
    fn array_header(&mut self, key: &str, depth: u32) -> Res<(u32, u64)> {
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
        Ok((et, count))
    }

    fn array_value(&mut self, key: &str, depth: u32) -> Res<MetaValue> {
        let (et, count) = self.array_header(key, depth)?;
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
                let len = self.string_len()?;
                self.skip(len)
            }
            vt::BOOL => self.bool(key).map(|_| ()),
            vt::ARRAY => {
                let (et, count) = self.array_header(key, depth)?;
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
