//! Errors of the model readers: every variant names the file, where it could, the byte offset, and the defect.

use std::path::{Path, PathBuf};

/// A model file could not be read or is not a valid model. The CLI maps every variant to exit code 4 (invalid
/// input file) except [`ModelError::Io`] on a file that exists but cannot be read, which is exit code 1.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{path}: {source}", path = path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: at byte {offset}: {defect}", path = path.display())]
    Invalid {
        path: PathBuf,
        /// Byte offset in `path` where the defect was found.
        offset: u64,
        defect: Defect,
    },
    #[error("{path}: {defect}", path = path.display())]
    InvalidModel { path: PathBuf, defect: Defect },
}

impl ModelError {
    /// For `map_err`: an I/O failure on `path` (opening, stat, reading).
    pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ModelError + '_ {
        move |source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// A defect at a byte offset of `path`, from the `(offset, defect)` pair the header parsers return.
    pub(crate) fn at(path: &Path, (offset, defect): (u64, Defect)) -> ModelError {
        ModelError::Invalid {
            path: path.to_path_buf(),
            offset,
            defect,
        }
    }

    /// A defect of `path` as a whole, or of the model it belongs to, with no single byte to point at.
    pub(crate) fn model(path: &Path, defect: Defect) -> ModelError {
        ModelError::InvalidModel {
            path: path.to_path_buf(),
            defect,
        }
    }

    /// The defect, when the error is about the file's content rather than reading it.
    pub fn defect(&self) -> Option<&Defect> {
        match self {
            ModelError::Io { .. } => None,
            ModelError::Invalid { defect, .. } | ModelError::InvalidModel { defect, .. } => {
                Some(defect)
            }
        }
    }

    /// The byte offset of the defect, when it has one.
    pub fn offset(&self) -> Option<u64> {
        match self {
            ModelError::Invalid { offset, .. } => Some(*offset),
            _ => None,
        }
    }
}

/// What is wrong with a model file. Messages say what was found and what was expected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Defect {
    #[error("file ends early: needed {needed} more bytes, {available} left")]
    Truncated { needed: u64, available: u64 },
    #[error("not a GGUF file: magic is {found:02x?}, expected \"GGUF\"")]
    BadMagic { found: [u8; 4] },
    #[error(
        "GGUF version 1 is not supported (llama.cpp dropped it in 2023); convert the model again"
    )]
    VersionOne,
    #[error("unknown GGUF version {0}: this reader knows versions 2 and 3")]
    UnknownVersion(u32),
    #[error("{what} count {count} exceeds the limit of {limit}")]
    TooMany {
        what: &'static str,
        count: u64,
        limit: u64,
    },
    #[error(
        "{what} declares {count} entries of at least {min_bytes} bytes each, more than the {available} bytes left"
    )]
    CountExceedsFile {
        what: &'static str,
        count: u64,
        min_bytes: u64,
        available: u64,
    },
    #[error("string of {len} bytes exceeds the limit of {limit}")]
    StringTooLong { len: u64, limit: u64 },
    #[error("string is not valid UTF-8")]
    InvalidUtf8,
    #[error("empty metadata key")]
    EmptyKey,
    #[error("duplicate metadata key {0:?}")]
    DuplicateKey(String),
    #[error("metadata key {key:?}: unknown value type {type_id}")]
    UnknownValueType { key: String, type_id: u32 },
    #[error("metadata key {key:?}: bool value {value} is neither 0 nor 1")]
    InvalidBool { key: String, value: u8 },
    #[error("metadata key {key:?}: arrays nested deeper than {limit} levels")]
    ArrayTooDeep { key: String, limit: u32 },
    #[error("metadata key {key:?} must be {expected}, found {found}")]
    WrongValueType {
        key: String,
        expected: &'static str,
        found: String,
    },
    #[error("general.alignment {0} is not a non-zero power of two")]
    BadAlignment(u64),
    #[error("tensor name of {len} bytes exceeds ggml's limit of {limit}")]
    TensorNameTooLong { len: u64, limit: u64 },
    #[error("empty tensor name")]
    EmptyTensorName,
    #[error("duplicate tensor name {0:?}")]
    DuplicateTensor(String),
    #[error("tensor {name:?} has {n_dims} dimensions, more than the format's limit of {limit}")]
    TooManyDims {
        name: String,
        n_dims: u32,
        limit: u32,
    },
    #[error("tensor {name:?} dimension {dim} is {value}, beyond int64")]
    DimTooLarge {
        name: String,
        dim: usize,
        value: u64,
    },
    #[error(
        "tensor {name:?} has type id {type_id}, which is unknown or removed from GGUF ({reading} reading)"
    )]
    UnknownTensorType {
        name: String,
        type_id: u32,
        reading: &'static str,
    },
    #[error(
        "tensor {name:?} of type {type_name}: row length {ne0} is not a multiple of the block size {block}"
    )]
    PartialBlock {
        name: String,
        type_name: &'static str,
        ne0: u64,
        block: u64,
    },
    #[error("tensor {name:?}: byte size overflows 64 bits")]
    SizeOverflow { name: String },
    #[error("tensor {name:?}: offset {offset} is not a multiple of the alignment {alignment}")]
    MisalignedTensor {
        name: String,
        offset: u64,
        alignment: u64,
    },
    #[error(
        "tensor {name:?}: offset {offset} overlaps or precedes the previous tensor, which ends at {previous_end}"
    )]
    OverlappingTensor {
        name: String,
        offset: u64,
        previous_end: u64,
    },
    #[error(
        "tensor {name:?}: offset {offset} leaves a gap after the previous tensor (expected {expected}); ggml requires tensors packed in table order"
    )]
    TensorGap {
        name: String,
        offset: u64,
        expected: u64,
    },
    #[error(
        "tensor {name:?}: data [{start}, {end}) extends beyond the end of the file ({file_bytes} bytes)"
    )]
    TensorOutOfFile {
        name: String,
        start: u64,
        end: u64,
        file_bytes: u64,
    },
    #[error(
        "tensor data section would start at byte {data_offset}, beyond the end of the file ({file_bytes} bytes)"
    )]
    DataOutOfFile { data_offset: u64, file_bytes: u64 },
    #[error("split model: {0}")]
    Split(String),
    #[error("safetensors header: {0}")]
    SafetensorsHeader(String),
    #[error("tensor {name:?}: {reason}")]
    BadTensor { name: String, reason: String },
    #[error("config.json: {0}")]
    Config(String),
    #[error("sharded index: {0}")]
    Index(String),
    #[error("read failed: {0}")]
    ReadFailed(String),
    #[error("not a model: {0}")]
    UnknownFormat(String),
    #[error("hyper-parameter {key} is {value}, outside [{min}, {max}]: {why}")]
    HparamOutOfRange {
        key: String,
        value: u64,
        min: u64,
        max: u64,
        why: &'static str,
    },
    /// A hyper-parameter the engines would refuse for how it relates to others (KV heads that do not divide
    /// the query heads), with the engine's reason.
    #[error("hyper-parameter {key} is {value}: {why}")]
    HparamInvalid {
        key: String,
        value: u64,
        why: String,
    },
}
