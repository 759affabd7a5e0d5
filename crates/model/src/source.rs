//! What the GGUF and safetensors readers share about their files: opening a model file (regular files only,
//! so a FIFO cannot block a read and a device cannot stream without end) with its length, reading a small file
//! (an index, a config) whole under a bound, and the rule both formats impose on the data section: each
//! tensor's data starts exactly where the previous one's ends (GGUF after padding to its alignment), with no
//! gap and no overlap.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use super::{Defect, ModelError};

/// Opens `path` for a bounded read and returns it with its length in bytes.
pub(crate) fn open(path: &Path) -> Result<(File, u64), ModelError> {
    let file = optimizer_input::input::open_regular(path).map_err(ModelError::io(path))?;
    let len = file.metadata().map_err(ModelError::io(path))?.len();
    Ok((file, len))
}

/// Reads a whole small file (index, config) of at most `limit` bytes; `what` names the limit in the error.
pub(crate) fn read_bounded(
    path: &Path,
    limit: u64,
    what: &'static str,
) -> Result<Vec<u8>, ModelError> {
    let (file, len) = open(path)?;
    let too_big = |count| ModelError::at(path, (0, Defect::TooMany { what, count, limit }));
    if len > limit {
        return Err(too_big(len));
    }
    let mut buf = Vec::with_capacity(len as usize);
    // `take` guards against a file that grew since `metadata`.
    file.take(limit + 1)
        .read_to_end(&mut buf)
        .map_err(ModelError::io(path))?;
    if buf.len() as u64 > limit {
        return Err(too_big(buf.len() as u64));
    }
    Ok(buf)
}

/// The data-section rule of both formats: tensor `name`, whose data starts at `offset` (relative to the data
/// section), must start exactly at `expected`, where the previous tensor's data ended.
pub(crate) fn check_contiguous(name: &str, offset: u64, expected: u64) -> Result<(), Defect> {
    if offset < expected {
        return Err(Defect::OverlappingTensor {
            name: name.to_string(),
            offset,
            previous_end: expected,
        });
    }
    if offset > expected {
        return Err(Defect::TensorGap {
            name: name.to_string(),
            offset,
            expected,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_means_no_gap_and_no_overlap() {
        assert_eq!(check_contiguous("t", 64, 64), Ok(()));
        assert_eq!(
            check_contiguous("t", 32, 64),
            Err(Defect::OverlappingTensor {
                name: "t".into(),
                offset: 32,
                previous_end: 64
            })
        );
        assert_eq!(
            check_contiguous("t", 96, 64),
            Err(Defect::TensorGap {
                name: "t".into(),
                offset: 96,
                expected: 64
            })
        );
    }
}
