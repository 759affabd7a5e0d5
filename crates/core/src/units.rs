//! The one conversion behind every figure printed in GiB (documents' explanations, tables, messages), so that
//! two figures of the same bytes can never disagree in their last digit.

/// Bytes in a GiB (2^30).
pub(crate) const GIB_BYTES: u64 = 1 << 30;

/// `bytes` in GiB, for display: every printed GiB figure is this value rounded by its format.
pub fn gib(bytes: u64) -> f64 {
    bytes as f64 / GIB_BYTES as f64
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_gib_is_two_to_the_thirtieth_bytes() {
        assert_eq!(super::gib(3 << 30), 3.0);
        assert_eq!(super::gib(1 << 29), 0.5);
    }
}
