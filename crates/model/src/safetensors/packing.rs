//! Logical weights of a tensor whose storage dtype does not say them: GPTQ/AWQ and compressed-tensors int4
//! packed in integer words, bitsandbytes 4-bit in U8, MXFP4 blocks, and quantization state that holds no
//! weights. Detected from tensor names, sibling tensors and `quantization_config`.

use super::super::hf_config;
use super::{Quantization, RawTensor, StDtype};
use crate::Role;

/// Logical weights of a tensor, and how they are packed when the dtype does not say. The rules, first match:
///
/// 1. Role [`Role::QuantState`] (GPTQ/AWQ `qzeros`, `scales`, `g_idx`; FP8 `weight_scale(_inv)`; bitsandbytes
///    `absmax`, `quant_map`, `quant_state.*`; compressed-tensors `weight_scale`, `weight_zero_point`,
///    `weight_shape`, …): 0; these hold no weights.
/// 2. GPTQ/AWQ `*.qweight` and compressed-tensors `*.weight_packed` stored in an integer dtype: each element
///    packs `dtype bits / quantization bits` weights (int4 in I32: 8), so `elements × dtype bits / bits`, with
///    bits from `quantization_config` (`bits`, or `config_groups.*.weights.num_bits`), default 4. Packing:
///    `"gptq int4 in I32"`, `"compressed-tensors int4 in I32"`.
/// 3. bitsandbytes 4-bit: a U8 `*.weight` with a `<name>.quant_state.bitsandbytes__nf4` (or `__fp4`) sibling,
///    or, under a `bitsandbytes` 4-bit config, an `<name>.absmax` sibling: two weights per byte.
/// 4. MXFP4 (`quant_method: mxfp4`, gpt-oss): U8 `*_blocks` hold two FP4 weights per byte; the U8 `*_scales`
///    beside them hold none.
/// 5. Everything else: `elements` (F8 weights, F4/F6 whose element count already is the weight count, bnb
///    8-bit I8 weights).
pub(super) fn parameters(
    t: &RawTensor,
    role: Role,
    quant: Option<&Quantization>,
    exists: &dyn Fn(&str) -> bool,
) -> (u64, Option<String>) {
    if role == Role::QuantState {
        return (0, None);
    }
    let method = quant.map_or("", |q| q.method.as_str());
    let packed_kind = if t.name.ends_with(".qweight") {
        Some(if method.is_empty() { "gptq" } else { method })
    } else if t.name.ends_with(".weight_packed") {
        Some("compressed-tensors")
    } else {
        None
    };
    if let Some(kind) = packed_kind
        && t.dtype.is_integer()
    {
        let bits = quant
            .and_then(|q| q.bits)
            .unwrap_or(hf_config::DEFAULT_PACKED_BITS);
        if bits > 0 && bits < t.dtype.bits() {
            let params = t.elements.saturating_mul(t.dtype.bits()) / bits;
            return (
                params,
                Some(format!("{kind} int{bits} in {}", t.dtype.name())),
            );
        }
    }
    if t.dtype == StDtype::U8 && t.name.ends_with(".weight") {
        let nf4 = exists(&format!("{}.quant_state.bitsandbytes__nf4", t.name));
        let fp4 = exists(&format!("{}.quant_state.bitsandbytes__fp4", t.name));
        let bnb4_config = method == "bitsandbytes"
            && quant.and_then(|q| q.bits) == Some(4)
            && exists(&format!("{}.absmax", t.name));
        if nf4 || fp4 || bnb4_config {
            let kind = if nf4 {
                "nf4".to_string()
            } else if fp4 {
                "fp4".to_string()
            } else {
                quant
                    .and_then(|q| q.format.clone())
                    .unwrap_or_else(|| "4-bit".into())
            };
            return (
                t.elements.saturating_mul(2),
                Some(format!("bitsandbytes {kind}, 2 per U8")),
            );
        }
    }
    if method == "mxfp4" && t.dtype == StDtype::U8 {
        if t.name.ends_with("_blocks") {
            return (t.elements.saturating_mul(2), Some("mxfp4, 2 per U8".into()));
        }
        if t.name.ends_with("_scales") {
            return (0, None);
        }
    }
    (t.elements, None)
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify_tensor;

    fn raw(name: &str, dtype: StDtype, elements: u64) -> RawTensor {
        RawTensor {
            name: name.into(),
            dtype,
            shape: vec![elements],
            begin: 0,
            end: 0,
            elements,
        }
    }

    #[test]
    fn parameter_rules() {
        let none = |_: &str| false;
        let q = |method: &str, bits: Option<u64>| Quantization {
            method: method.into(),
            bits,
            ..Default::default()
        };
        let p = |t: &RawTensor, quant: Option<&Quantization>, exists: &dyn Fn(&str) -> bool| {
            parameters(t, classify_tensor(&t.name).0, quant, exists)
        };
        let gptq = q("gptq", Some(4));
        let t = raw("model.layers.0.mlp.up_proj.qweight", StDtype::I32, 100);
        assert_eq!(
            p(&t, Some(&gptq), &none),
            (800, Some("gptq int4 in I32".into()))
        );
        let gptq8 = q("gptq", Some(8));
        assert_eq!(p(&t, Some(&gptq8), &none).0, 400);
        let awq = q("awq", Some(4));
        assert_eq!(
            p(&t, Some(&awq), &none),
            (800, Some("awq int4 in I32".into()))
        );
        // No config: GPTQ's default of 4 bits.
        assert_eq!(p(&t, None, &none).0, 800);
        for name in [
            "model.layers.0.mlp.up_proj.qzeros",
            "model.layers.0.mlp.up_proj.scales",
            "model.layers.0.mlp.up_proj.g_idx",
            "model.layers.0.mlp.up_proj.weight_scale_inv",
        ] {
            assert_eq!(
                p(&raw(name, StDtype::I32, 10), Some(&gptq), &none),
                (0, None)
            );
        }
        let ct = q("compressed-tensors", Some(4));
        let t = raw("model.layers.0.mlp.up_proj.weight_packed", StDtype::I32, 10);
        assert_eq!(
            p(&t, Some(&ct), &none),
            (80, Some("compressed-tensors int4 in I32".into()))
        );
        let bnb_name = "model.layers.0.mlp.up_proj.weight";
        let t = raw(bnb_name, StDtype::U8, 50);
        let nf4 = |n: &str| n == format!("{bnb_name}.quant_state.bitsandbytes__nf4");
        assert_eq!(
            p(&t, None, &nf4),
            (100, Some("bitsandbytes nf4, 2 per U8".into()))
        );
        let bnb = Quantization {
            format: Some("fp4".into()),
            ..q("bitsandbytes", Some(4))
        };
        let absmax = |n: &str| n == format!("{bnb_name}.absmax");
        assert_eq!(
            p(&t, Some(&bnb), &absmax),
            (100, Some("bitsandbytes fp4, 2 per U8".into()))
        );
        // A U8 weight without any 4-bit sign is plain.
        assert_eq!(p(&t, None, &none), (50, None));
        let mx = q("mxfp4", Some(4));
        let t = raw(
            "model.layers.0.mlp.experts.gate_up_proj_blocks",
            StDtype::U8,
            64,
        );
        assert_eq!(p(&t, Some(&mx), &none).0, 128);
        let t = raw(
            "model.layers.0.mlp.experts.gate_up_proj_scales",
            StDtype::U8,
            4,
        );
        assert_eq!(p(&t, Some(&mx), &none).0, 0);
        let t = raw("model.layers.0.mlp.up_proj.weight", StDtype::F8_E4M3, 64);
        assert_eq!(p(&t, Some(&q("fp8", Some(8))), &none), (64, None));
    }
}
