//! Split GGUF models (`NAME-00001-of-NNNNN.gguf`): the shard file-name pattern, and the bookkeeping keys
//! (`split.no`, `split.count`, `split.tensors.count`) checked against the shards actually read, with no tensor
//! in two shards.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::header::Header;
use super::{Defect, MAX_SHARDS, MetaValue, ModelError};

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

pub(super) fn split_err(path: &Path, msg: String) -> ModelError {
    ModelError::model(path, Defect::Split(msg))
}

pub(super) fn check_split(paths: &[PathBuf], headers: &[Header]) -> Result<(), ModelError> {
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
