//! What the engine refuses, and the checked arithmetic every size is computed with: an overflow names the size
//! being computed ([`ParamError::Overflow`]); `estimate` decides whether the model or the flags are to blame.

/// Parameters the engine refuses or silently changes. Messages say which.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParamError {
    #[error(
        "-ub {n_ubatch} is larger than -b {n_batch}: llama.cpp would silently use -ub {n_batch}; pass -ub {n_batch} or raise -b"
    )]
    UbatchOverBatch { n_ubatch: u32, n_batch: u32 },
    #[error("-b and -ub must be at least 1")]
    ZeroBatch,
    #[error("-np must be at least 1")]
    ZeroParallel,
    #[error(
        "a quantized V cache ({type_v}) needs flash attention, and -fa off disables it: llama.cpp refuses to create the context (\"V cache quantization requires flash_attn\")"
    )]
    QuantizedVWithoutFlashAttn { type_v: &'static str },
    #[error(
        "cache type {0} is not one llama.cpp accepts for -ctk/-ctv (f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1)"
    )]
    CacheType(&'static str),
    #[error("-c 0 asks for the model's trained context, but the model does not declare one")]
    NoTrainedContext,
    #[error("the model does not declare {0}, which the KV cache size depends on")]
    MissingHparam(&'static str),
    #[error("-ts names {given} devices but {gpus} GPUs are present")]
    TensorSplit { given: usize, gpus: usize },
    #[error("-ts {value} is not a finite proportion of at least 0")]
    TensorSplitValue { value: f64 },
    #[error("{flag} {value} is above {max}: {why}")]
    FlagOutOfRange {
        flag: &'static str,
        value: u64,
        max: u64,
        why: &'static str,
    },
    #[error(
        "a {which} cache of type {type_name} needs rows that divide into its {block}-element blocks, but the model's {which} rows have {elements} elements; llama.cpp refuses it"
    )]
    CacheBlock {
        which: &'static str,
        type_name: &'static str,
        block: u64,
        elements: u64,
    },
    #[error("the model's {key} is {value}, above llama.cpp's limit of {max}: {why}")]
    ModelLimit {
        key: &'static str,
        value: u64,
        max: u64,
        why: &'static str,
    },
    #[error(
        "the {what} overflows 64 bits even at the smallest context and batch: the model's hyper-parameters describe no model that can be allocated"
    )]
    ModelOverflow { what: &'static str },
    #[error("the {what} overflows 64 bits with these parameters; lower -c, -ub or -np")]
    Overflow { what: &'static str },
    #[error(
        "general.architecture {arch:?}: the pinned llama.cpp keeps {what}, which this memory model does not compute; it is refused rather than planned with another architecture's rules"
    )]
    UnmodelledArchitecture { arch: String, what: &'static str },
}

impl ParamError {
    /// Whether the error is a defect of the model file (exit 4, naming the file) rather than of the flags.
    pub fn is_model_defect(&self) -> bool {
        matches!(
            self,
            ParamError::ModelLimit { .. }
                | ParamError::ModelOverflow { .. }
                | ParamError::MissingHparam(_)
                | ParamError::NoTrainedContext
                | ParamError::UnmodelledArchitecture { .. }
        )
    }
}

/// `a × b`, or the overflow error naming the size being computed.
pub(super) fn mul(what: &'static str, a: u64, b: u64) -> Result<u64, ParamError> {
    a.checked_mul(b).ok_or(ParamError::Overflow { what })
}

/// `a + b`, or the overflow error naming the size being computed.
pub(super) fn add(what: &'static str, a: u64, b: u64) -> Result<u64, ParamError> {
    a.checked_add(b).ok_or(ParamError::Overflow { what })
}

/// The product of `factors`, checked.
pub(super) fn product(what: &'static str, factors: &[u64]) -> Result<u64, ParamError> {
    factors.iter().try_fold(1u64, |acc, &f| mul(what, acc, f))
}

/// `GGML_PAD(x, n)`, checked.
pub(super) fn pad(what: &'static str, x: u64, n: u64) -> Result<u64, ParamError> {
    mul(what, x.div_ceil(n), n)
}

/// A cell count as the engine's `uint32_t`, or the overflow error.
pub(super) fn cells_u32(what: &'static str, x: u64) -> Result<u32, ParamError> {
    u32::try_from(x).map_err(|_| ParamError::Overflow { what })
}
