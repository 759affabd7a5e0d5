//! The streaming serde visitor behind header parsing: it walks the header JSON once and builds compact
//! [`RawTensor`] records, charging each record, name, shape and `__metadata__` entry to
//! [`MAX_PARSED_HEADER_BYTES`], so no JSON tree is built and a hostile header cannot make it allocate past the
//! budget. A limit hit is recorded as its own [`Defect`] in [`ParseState`], which takes precedence over
//! serde_json's message.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::{
    Defect, MAX_DIMS, MAX_PARSED_HEADER_BYTES, MAX_TENSORS_PER_FILE, METADATA_KEY, RawTensor,
    StDtype,
};

/// Where the visitor is, so a type error from serde_json becomes the right [`Defect`].
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(super) enum Ctx {
    #[default]
    Top,
    Metadata,
    Tensor,
}

#[derive(Debug, Default)]
pub(super) struct ParseState {
    pub(super) ctx: Ctx,
    /// The tensor being parsed.
    pub(super) current: String,
    /// A defect with its own variant (limits), which takes precedence over serde_json's error.
    pub(super) defect: Option<Defect>,
    parsed_bytes: u64,
}

pub(super) struct HeaderSeed<'s> {
    pub(super) st: &'s mut ParseState,
}

type Parsed = (Option<BTreeMap<String, String>>, Vec<RawTensor>);

impl<'de> DeserializeSeed<'de> for HeaderSeed<'_> {
    type Value = Parsed;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Parsed, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for HeaderSeed<'_> {
    type Value = Parsed;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object of tensor entries")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Parsed, A::Error> {
        let st = self.st;
        let mut metadata: Option<Option<BTreeMap<String, String>>> = None;
        let mut tensors: Vec<RawTensor> = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == METADATA_KEY {
                if metadata.is_some() {
                    return Err(fail(
                        st,
                        Defect::SafetensorsHeader(format!("{METADATA_KEY} appears twice")),
                    ));
                }
                st.ctx = Ctx::Metadata;
                metadata = Some(map.next_value_seed(MetadataSeed { st: &mut *st })?);
                st.ctx = Ctx::Top;
                continue;
            }
            if tensors.len() as u64 >= MAX_TENSORS_PER_FILE {
                return Err(fail(
                    st,
                    Defect::TooMany {
                        what: "tensors in one safetensors file",
                        count: tensors.len() as u64 + 1,
                        limit: MAX_TENSORS_PER_FILE,
                    },
                ));
            }
            st.ctx = Ctx::Tensor;
            st.current = key;
            let (dtype, shape, (begin, end)) = map.next_value_seed(EntrySeed)?;
            st.ctx = Ctx::Top;
            let name = std::mem::take(&mut st.current);
            // The record, its name and its shape buffer. The vector's spare capacity (up to one record per
            // tensor while it grows) is not charged; `MAX_TENSORS_PER_FILE` bounds it to 10 MiB.
            let cost = std::mem::size_of::<RawTensor>() as u64
                + name.len() as u64
                + 8 * shape.len() as u64;
            charge(st, cost)?;
            tensors.push(RawTensor {
                name,
                dtype,
                shape,
                begin,
                end,
                elements: 0,
            });
        }
        Ok((metadata.flatten(), tensors))
    }
}

/// `__metadata__`: `null` or an object of string values, each key and value charged to the parse budget.
struct MetadataSeed<'s> {
    st: &'s mut ParseState,
}

impl<'de> DeserializeSeed<'de> for MetadataSeed<'_> {
    type Value = Option<BTreeMap<String, String>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for MetadataSeed<'_> {
    type Value = Option<BTreeMap<String, String>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("null or an object of string values")
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let st = self.st;
        let mut out = BTreeMap::new();
        while let Some((k, v)) = map.next_entry::<String, String>()? {
            charge(st, (k.len() + v.len()) as u64)?;
            out.insert(k, v);
        }
        Ok(Some(out))
    }
}

/// Charges `bytes` to the parse budget; past it, the parse stops with [`Defect::TooMany`].
fn charge<E: de::Error>(st: &mut ParseState, bytes: u64) -> Result<(), E> {
    st.parsed_bytes = st.parsed_bytes.saturating_add(bytes);
    if st.parsed_bytes > MAX_PARSED_HEADER_BYTES {
        let count = st.parsed_bytes;
        return Err(fail(
            st,
            Defect::TooMany {
                what: "bytes of parsed safetensors header records",
                count,
                limit: MAX_PARSED_HEADER_BYTES,
            },
        ));
    }
    Ok(())
}

/// Records a defect with its own variant and aborts the parse.
fn fail<E: de::Error>(st: &mut ParseState, defect: Defect) -> E {
    let msg = defect.to_string();
    st.defect = Some(defect);
    E::custom(msg)
}

/// One tensor entry: exactly `dtype`, `shape` and `data_offsets`.
struct EntrySeed;

type Entry = (StDtype, Vec<u64>, (u64, u64));

impl<'de> DeserializeSeed<'de> for EntrySeed {
    type Value = Entry;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Entry, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EntrySeed {
    type Value = Entry;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object {\"dtype\", \"shape\", \"data_offsets\"}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entry, A::Error> {
        let mut dtype = None;
        let mut shape = None;
        let mut offsets = None;
        while let Some(key) = map.next_key::<String>()? {
            let dup = match key.as_str() {
                "dtype" => dtype.replace(map.next_value_seed(DtypeSeed)?).is_some(),
                "shape" => shape.replace(map.next_value_seed(ShapeSeed)?).is_some(),
                "data_offsets" => offsets.replace(map.next_value_seed(OffsetsSeed)?).is_some(),
                other => {
                    return Err(de::Error::custom(format!(
                        "unknown field {other:?}; a tensor entry has exactly dtype, shape and data_offsets"
                    )));
                }
            };
            if dup {
                return Err(de::Error::custom(format!("field {key:?} appears twice")));
            }
        }
        match (dtype, shape, offsets) {
            (Some(d), Some(s), Some(o)) => Ok((d, s, o)),
            (None, _, _) => Err(de::Error::missing_field("dtype")),
            (_, None, _) => Err(de::Error::missing_field("shape")),
            (_, _, None) => Err(de::Error::missing_field("data_offsets")),
        }
    }
}

struct DtypeSeed;

impl<'de> DeserializeSeed<'de> for DtypeSeed {
    type Value = StDtype;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<StDtype, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for DtypeSeed {
    type Value = StDtype;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a dtype string")
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<StDtype, E> {
        StDtype::from_name(s).ok_or_else(|| {
            let short: String = s.chars().take(40).collect();
            E::custom(format!(
                "unknown dtype {short:?}; known: {}",
                StDtype::ALL.map(StDtype::name).join(", ")
            ))
        })
    }
}

/// A non-negative integer (a dimension or an offset), with a clear message for negative and fractional values.
struct Uint(&'static str);

impl<'de> DeserializeSeed<'de> for Uint {
    type Value = u64;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<u64, D::Error> {
        d.deserialize_u64(self)
    }
}

impl Visitor<'_> for Uint {
    type Value = u64;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a non-negative integer ({})", self.0)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        Ok(v)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        u64::try_from(v).map_err(|_| E::custom(format!("{} {v} is negative", self.0)))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<u64, E> {
        Err(E::custom(format!(
            "{} {v} is not a non-negative 64-bit integer",
            self.0
        )))
    }
}

struct ShapeSeed;

impl<'de> DeserializeSeed<'de> for ShapeSeed {
    type Value = Vec<u64>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<u64>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ShapeSeed {
    type Value = Vec<u64>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a shape array of non-negative integers")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u64>, A::Error> {
        let mut shape = Vec::new();
        while let Some(d) = seq.next_element_seed(Uint("dimension"))? {
            if shape.len() >= MAX_DIMS {
                return Err(de::Error::custom(format!(
                    "shape has more than {MAX_DIMS} dimensions"
                )));
            }
            shape.push(d);
        }
        Ok(shape)
    }
}

struct OffsetsSeed;

impl<'de> DeserializeSeed<'de> for OffsetsSeed {
    type Value = (u64, u64);
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(u64, u64), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for OffsetsSeed {
    type Value = (u64, u64);
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("data_offsets [begin, end]")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(u64, u64), A::Error> {
        let short = || de::Error::custom("data_offsets must be [begin, end]");
        let begin = seq.next_element_seed(Uint("offset"))?.ok_or_else(short)?;
        let end = seq.next_element_seed(Uint("offset"))?.ok_or_else(short)?;
        if seq.next_element::<IgnoredAny>()?.is_some() {
            return Err(short());
        }
        Ok((begin, end))
    }
}
