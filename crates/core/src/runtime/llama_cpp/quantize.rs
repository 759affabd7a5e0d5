//! The quantizations `llama-quantize` offers, with their bits per weight, for no-fit suggestions that name the
//! quantization that would fit.
//!
//! Bits per weight are the pinned engine's own figures (tools/quantize/quantize.cpp `QUANT_OPTIONS`): the K-quant
//! mixes state their file size for Llama-3-8B (8,030,261,248 parameters) in GiB, converted here as
//! `size × 2^30 × 8 / parameters`; the IQ types state bits per weight directly. A mix's share of higher-precision
//! tensors (embeddings, output) differs a little between models, so the sizes derived from them are estimates
//! ("about").

/// One quantization: its `llama-quantize` name and bits per weight.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quant {
    pub name: &'static str,
    pub bits_per_weight: f64,
}

/// Parameters of Llama-3-8B, the model the K-quant sizes of `QUANT_OPTIONS` are stated for.
const LLAMA3_8B_PARAMS: f64 = 8_030_261_248.0;

const fn k_mix(name: &'static str, gib_at_llama3_8b: f64) -> Quant {
    Quant {
        name,
        bits_per_weight: gib_at_llama3_8b * crate::units::GIB_BYTES as f64 * 8.0 / LLAMA3_8B_PARAMS,
    }
}

/// From the most to the least precise.
pub const QUANTS: &[Quant] = &[
    k_mix("Q8_0", 7.96),
    k_mix("Q6_K", 6.14),
    k_mix("Q5_K_M", 5.33),
    k_mix("Q5_K_S", 5.21),
    k_mix("Q4_K_M", 4.58),
    k_mix("Q4_K_S", 4.37),
    Quant {
        name: "IQ4_XS",
        bits_per_weight: 4.25,
    },
    k_mix("Q3_K_M", 3.74),
    Quant {
        name: "IQ3_M",
        bits_per_weight: 3.66,
    },
    k_mix("Q3_K_S", 3.41),
    k_mix("Q2_K", 2.96),
    Quant {
        name: "IQ2_M",
        bits_per_weight: 2.7,
    },
];

/// The most precise quantization below `current_bpw` whose weights would shrink a device's `weights_bytes` by at
/// least `overflow` bytes (its weights scale with bits per weight; everything else stays), with its estimated
/// total weight bytes for `total_weights` and the device's new weight bytes; `None` when even the smallest does
/// not.
pub(crate) fn smallest_change(
    current_bpw: f64,
    weights_bytes: u64,
    total_weights: u64,
    overflow: u64,
) -> Option<(Quant, u64, u64)> {
    if !(current_bpw.is_finite() && current_bpw > 0.0) {
        return None;
    }
    QUANTS
        .iter()
        .filter(|q| q.bits_per_weight < current_bpw)
        .find_map(|q| {
            let ratio = q.bits_per_weight / current_bpw;
            let device = (weights_bytes as f64 * ratio) as u64;
            let saved = weights_bytes.saturating_sub(device);
            (saved >= overflow).then_some((*q, (total_weights as f64 * ratio) as u64, device))
        })
}

/// The largest `x` in `lo..hi` with `ok(x)`, where `ok` holds up to some threshold and not above (memory grows
/// with the context and the sequences; shared by the engines' no-fit suggestions): a bisection, so a suggestion costs a few evaluations, not one per value.
pub(crate) fn largest_below(lo: u32, hi: u32, ok: impl Fn(u32) -> bool) -> Option<u32> {
    if lo >= hi || !ok(lo) {
        return None;
    }
    let (mut good, mut bad) = (lo, hi);
    while bad - good > 1 {
        let mid = good + (bad - good) / 2;
        if ok(mid) {
            good = mid;
        } else {
            bad = mid;
        }
    }
    Some(good)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bisection_finds_the_largest_value_that_holds() {
        assert_eq!(largest_below(1, 100, |x| x <= 37), Some(37));
        assert_eq!(largest_below(1, 100, |x| x <= 500), Some(99));
        assert_eq!(largest_below(1, 100, |_| false), None);
        assert_eq!(largest_below(5, 5, |_| true), None);
    }

    #[test]
    fn k_mixes_convert_the_engines_llama3_8b_sizes_to_bits_per_weight() {
        // Q8_0 stores 34 bytes per 32 weights (8.5 bpw); its mix keeps a few tensors wider.
        let q8 = QUANTS[0];
        assert!(
            (q8.bits_per_weight - 8.515).abs() < 0.01,
            "{}",
            q8.bits_per_weight
        );
        // Q4_K_M is the 4.58 GiB of the engine's table: 4.90 bpw.
        let q4 = QUANTS.iter().find(|q| q.name == "Q4_K_M").unwrap();
        assert!((q4.bits_per_weight - 4.90).abs() < 0.01);
        assert!(
            QUANTS
                .windows(2)
                .all(|w| w[0].bits_per_weight > w[1].bits_per_weight)
        );
    }

    #[test]
    fn the_most_precise_quantization_that_frees_the_overflow_is_named() {
        // 4 GiB of F16 weights (16 bpw) on a device 1 GiB over: Q8_0 halves them, which is enough.
        let (q, _, dev) = smallest_change(16.0, 4 << 30, 4 << 30, 1 << 30).unwrap();
        assert_eq!(q.name, "Q8_0");
        assert!(dev < 3 << 30);
        // 5 GiB at Q4_K_M over by 2 GiB: 3 GiB of weights are needed, about 2.94 bpw: only IQ2_M.
        let q4 = QUANTS
            .iter()
            .find(|q| q.name == "Q4_K_M")
            .unwrap()
            .bits_per_weight;
        let (q, _, _) = smallest_change(q4, 5 << 30, 5 << 30, 2 << 30).unwrap();
        assert_eq!(q.name, "IQ2_M");
        // Nothing below 2.7 bpw: none.
        assert!(smallest_change(q4, 1 << 30, 1 << 30, 1 << 30).is_none());
    }
}
