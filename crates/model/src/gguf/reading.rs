//! Tensor type ids resolved to [`GgmlType`]s under one [`TypeReading`] (upstream ggml or BitNet; the rule is in
//! the `gguf` module doc), each tensor's exact byte size, and the offset check that settles an ambiguous file:
//! every offset aligned, in table order, equal to the running padded size, inside the file.

use std::path::PathBuf;

use super::header::Header;
use crate::source;
use crate::{Defect, GgmlType, MetaValue, ModelError, TypeReading};

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
        source::check_contiguous(&t.name, t.offset, expected).map_err(|d| (t.record_offset, d))?;
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

pub(super) fn meta_str<'a>(headers: &'a [Header], key: &str) -> Option<&'a str> {
    headers.first()?.get(key)?.as_str()
}

/// The reading a model's headers ask for before the size check (rules 1–3 of the `gguf` module doc).
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

/// Resolves every shard's tensor types under one reading, with the size check of the `gguf` module doc.
pub(super) fn resolve_model_types(
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
    Err(ModelError::at(&paths[i], (offset, defect)))
}
