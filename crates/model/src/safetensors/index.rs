//! The sharded model's `*.safetensors.index.json`: parsed with a streaming visitor bounded by
//! [`MAX_TENSORS`] entries, shard names refused unless they are plain file names beside the index, and, once
//! the shards' headers are read, checked against them both ways (every listed tensor stored where the index
//! says, every stored tensor listed, `metadata.total_size` equal to the tensors' byte total).

use std::fmt;
use std::path::Path;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};

use super::super::hf_config::{json_error_message, json_error_offset};
use super::super::source::read_bounded;
use super::{Defect, MAX_FILES, MAX_INDEX_BYTES, MAX_TENSORS, ModelError, RawTensor};

/// A parsed `*.safetensors.index.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct Index {
    /// Shard file names, sorted, unique.
    pub files: Vec<String>,
    /// Tensor name → index into `files`, sorted by name.
    pub weight_map: Vec<(String, u32)>,
    /// `metadata.total_size`, when present.
    pub total_size: Option<u64>,
}

/// Parses index bytes. `path` is for messages.
pub(crate) fn parse_index(path: &Path, bytes: &[u8]) -> Result<Index, ModelError> {
    let index_err = |msg: String| ModelError::model(path, Defect::Index(msg));
    let mut limit_hit = None;
    let raw = {
        let mut de = serde_json::Deserializer::from_slice(bytes);
        IndexSeed {
            limit_hit: &mut limit_hit,
        }
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v))
    };
    let raw = match raw {
        Ok(r) => r,
        Err(e) => {
            let offset = json_error_offset(bytes, &e);
            let defect = limit_hit.unwrap_or_else(|| {
                Defect::Index(format!("invalid JSON: {}", json_error_message(&e)))
            });
            return Err(ModelError::at(path, (offset, defect)));
        }
    };
    let Some(mut entries) = raw.weight_map else {
        return Err(index_err("no \"weight_map\" object".into()));
    };
    if entries.is_empty() {
        return Err(index_err("\"weight_map\" lists no tensors".into()));
    }
    for (_, file) in &entries {
        check_shard_name(file).map_err(|why| {
            index_err(format!(
                "weight_map names {file:?}, which {why}; shard names must be plain file names in the index's directory"
            ))
        })?;
    }
    entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    if let Some(w) = entries.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(index_err(format!(
            "weight_map lists tensor {:?} twice",
            w[0].0
        )));
    }
    let mut files: Vec<String> = entries.iter().map(|(_, f)| f.clone()).collect();
    files.sort_unstable();
    files.dedup();
    if files.len() as u64 > MAX_FILES {
        return Err(ModelError::model(
            path,
            Defect::TooMany {
                what: "shard files",
                count: files.len() as u64,
                limit: MAX_FILES,
            },
        ));
    }
    let weight_map = entries
        .into_iter()
        .map(|(name, file)| {
            // Present by construction; u32 holds MAX_FILES.
            let i = files.binary_search(&file).unwrap_or(0) as u32;
            (name, i)
        })
        .collect();
    Ok(Index {
        files,
        weight_map,
        total_size: raw.total_size,
    })
}

/// Why a weight_map file name is not a plain name in the index's directory.
fn check_shard_name(file: &str) -> Result<(), &'static str> {
    if file.is_empty() {
        return Err("is empty");
    }
    if file.contains(['/', '\\', '\0']) {
        return Err("contains a path separator or NUL");
    }
    if file == "." || file == ".." {
        return Err("is a directory reference");
    }
    if file.len() >= 2 && file.as_bytes().get(1) == Some(&b':') {
        return Err("has a drive prefix");
    }
    Ok(())
}

struct RawIndex {
    weight_map: Option<Vec<(String, String)>>,
    total_size: Option<u64>,
}

struct IndexSeed<'a> {
    limit_hit: &'a mut Option<Defect>,
}

impl<'de> DeserializeSeed<'de> for IndexSeed<'_> {
    type Value = RawIndex;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<RawIndex, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for IndexSeed<'_> {
    type Value = RawIndex;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an index object {\"metadata\", \"weight_map\"}")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawIndex, A::Error> {
        let mut out = RawIndex {
            weight_map: None,
            total_size: None,
        };
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "weight_map" => {
                    if out.weight_map.is_some() {
                        return Err(de::Error::custom("\"weight_map\" appears twice"));
                    }
                    out.weight_map = Some(map.next_value_seed(WeightMapSeed {
                        limit_hit: &mut *self.limit_hit,
                    })?);
                }
                "metadata" => {
                    out.total_size = map.next_value_seed(IndexMetaSeed)?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(out)
    }
}

struct WeightMapSeed<'a> {
    limit_hit: &'a mut Option<Defect>,
}

impl<'de> DeserializeSeed<'de> for WeightMapSeed<'_> {
    type Value = Vec<(String, String)>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for WeightMapSeed<'_> {
    type Value = Vec<(String, String)>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a weight_map object of tensor name → shard file name")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(entry) = map.next_entry::<String, String>()? {
            if out.len() as u64 >= MAX_TENSORS {
                let d = Defect::TooMany {
                    what: "weight_map entries",
                    count: out.len() as u64 + 1,
                    limit: MAX_TENSORS,
                };
                let msg = d.to_string();
                *self.limit_hit = Some(d);
                return Err(de::Error::custom(msg));
            }
            out.push(entry);
        }
        Ok(out)
    }
}

/// The index's `metadata`: only `total_size` is read (an integer; an integral float is accepted, as some
/// writers emit `1.6e10`-style values).
struct IndexMetaSeed;

impl<'de> DeserializeSeed<'de> for IndexMetaSeed {
    type Value = Option<u64>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<u64>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for IndexMetaSeed {
    type Value = Option<u64>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a metadata object")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<u64>, E> {
        Ok(None)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<u64>, A::Error> {
        let mut total = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == "total_size" {
                total = map.next_value_seed(TotalSizeSeed)?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(total)
    }
}

struct TotalSizeSeed;

impl<'de> DeserializeSeed<'de> for TotalSizeSeed {
    type Value = Option<u64>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<u64>, D::Error> {
        d.deserialize_any(self)
    }
}

impl Visitor<'_> for TotalSizeSeed {
    type Value = Option<u64>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("metadata.total_size as a non-negative integer")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<u64>, E> {
        Ok(None)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Option<u64>, E> {
        Ok(Some(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Option<u64>, E> {
        u64::try_from(v)
            .map(Some)
            .map_err(|_| E::custom(format!("metadata.total_size {v} is negative")))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Option<u64>, E> {
        // 2^53: every integer below it is exact in f64.
        const EXACT_LIMIT: f64 = 9_007_199_254_740_992.0;
        if v >= 0.0 && v.fract() == 0.0 && v < EXACT_LIMIT {
            Ok(Some(v as u64))
        } else {
            Err(E::custom(format!(
                "metadata.total_size {v} is not a non-negative integer"
            )))
        }
    }
}

pub(super) fn read_index(path: &Path) -> Result<Index, ModelError> {
    let bytes = read_bounded(path, MAX_INDEX_BYTES, "safetensors index bytes")?;
    parse_index(path, &bytes)
}

/// The weight_map and the shards agree both ways, and `metadata.total_size` is the tensors' byte total.
pub(super) fn check_index(
    index_path: &Path,
    idx: &Index,
    all: &[(u32, &RawTensor)],
) -> Result<(), ModelError> {
    let err = |msg: String| ModelError::model(index_path, Defect::Index(msg));
    let file = |i: u32| idx.files.get(i as usize).map_or("?", String::as_str);
    // Both lists are sorted by name and free of duplicates: one merge walk.
    let (mut a, mut b) = (all.iter().peekable(), idx.weight_map.iter().peekable());
    loop {
        match (a.peek(), b.peek()) {
            (None, None) => break,
            (Some((f, t)), None) => {
                return Err(err(format!(
                    "{} holds tensor {:?}, which weight_map does not list",
                    file(*f),
                    t.name
                )));
            }
            (None, Some((name, f))) => {
                return Err(err(format!(
                    "weight_map puts tensor {name:?} in {}, which has no such tensor",
                    file(*f)
                )));
            }
            (Some((tf, t)), Some((name, mf))) => match t.name.as_str().cmp(name.as_str()) {
                std::cmp::Ordering::Less => {
                    return Err(err(format!(
                        "{} holds tensor {:?}, which weight_map does not list",
                        file(*tf),
                        t.name
                    )));
                }
                std::cmp::Ordering::Greater => {
                    return Err(err(format!(
                        "weight_map puts tensor {name:?} in {}, which has no such tensor",
                        file(*mf)
                    )));
                }
                std::cmp::Ordering::Equal => {
                    if tf != mf {
                        return Err(err(format!(
                            "weight_map puts tensor {name:?} in {}, but it is stored in {}",
                            file(*mf),
                            file(*tf)
                        )));
                    }
                    a.next();
                    b.next();
                }
            },
        }
    }
    if let Some(declared) = idx.total_size {
        let sum = all
            .iter()
            .try_fold(0u64, |acc, (_, t)| acc.checked_add(t.end - t.begin));
        if sum != Some(declared) {
            let sum = sum.map_or_else(|| "more than 2^64".to_string(), |s| s.to_string());
            return Err(err(format!(
                "metadata.total_size is {declared} but the shards' tensors hold {sum} bytes"
            )));
        }
    }
    Ok(())
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_names_must_be_plain() {
        for bad in [
            "../x.safetensors",
            "a/b.safetensors",
            "..",
            "",
            "C:x",
            "a\\b",
        ] {
            assert!(check_shard_name(bad).is_err(), "{bad}");
        }
        assert!(check_shard_name("model-00001-of-00002.safetensors").is_ok());
    }

    #[test]
    fn index_parsing() {
        let p = Path::new("i.json");
        let idx = parse_index(
            p,
            br#"{"metadata":{"total_size":12.0,"other":[1,{"x":2}]},"weight_map":{"b":"2.st","a":"1.st","c":"2.st"},"x":null}"#,
        )
        .expect("valid");
        assert_eq!(idx.files, vec!["1.st".to_string(), "2.st".into()]);
        assert_eq!(
            idx.weight_map,
            vec![("a".to_string(), 0), ("b".into(), 1), ("c".into(), 1)]
        );
        assert_eq!(idx.total_size, Some(12));
        for bad in [
            &br#"{"weight_map":{"a":"1","a":"2"}}"#[..],
            br#"{"weight_map":{}}"#,
            br#"{"metadata":{}}"#,
            br#"{"weight_map":{"a":1}}"#,
            br#"{"weight_map":{"a":"../b"}}"#,
            br#"{"metadata":{"total_size":-1},"weight_map":{"a":"b"}}"#,
            br#"[]"#,
        ] {
            let e = parse_index(p, bad).expect_err("invalid");
            assert!(
                matches!(e.defect(), Some(Defect::Index(_))),
                "{}: {e}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
