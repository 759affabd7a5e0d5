//! The checks on one hardware profile that its schema cannot express.

use serde_json::Value;

use crate::profile::types::{DeviceKind, HardwareProfile, Vendor};

use super::values::{check_capability, check_positive, check_sources};

/// The least share of the nominal size CUDA leaves programs on a profiled GPU: the driver, ECC and firmware
/// keep a few percent (0.989 on an H100 80GB HBM3, 0.910 on a T4 and 0.915 on an L4, the lowest profiled);
/// less is a typo.
const USABLE_SHARE_MIN: f64 = 0.90;

pub(super) fn check_hardware(h: &HardwareProfile, v: &Value, d: &mut impl FnMut(String, String)) {
    check_positive(v, false, &[], d);
    check_sources(v, &h.sources, d);
    if let Some(u) = h.memory.usable_bytes {
        match h.memory.size_bytes {
            Some(size) if u > size || (u as f64) < USABLE_SHARE_MIN * size as f64 => d(
                "/memory/usable_bytes".into(),
                format!(
                    "{u} bytes usable of {size}: must lie between {USABLE_SHARE_MIN} of memory.size_bytes and all of it"
                ),
            ),
            Some(_) => {}
            None => d(
                "/memory/usable_bytes".into(),
                "usable_bytes without memory.size_bytes".into(),
            ),
        }
    }
    check_capability(h.compute_capability.as_deref(), "/compute_capability", d);
    for (i, id) in h.matching.pci_ids.iter().enumerate() {
        let ok = id.len() == 9
            && id.as_bytes()[4] == b':'
            && id
                .chars()
                .enumerate()
                .all(|(j, c)| j == 4 || c.is_ascii_digit() || ('a'..='f').contains(&c));
        if !ok {
            d(
                format!("/match/pci_ids/{i}"),
                format!("{id:?} is not a lower-case PCI id `vvvv:dddd`"),
            );
        }
    }
    if h.kind == DeviceKind::Gpu && h.memory.size_bytes.is_none() {
        d(
            "/memory".into(),
            "a GPU profile needs memory.size_bytes".into(),
        );
    }
    if h.kind == DeviceKind::Gpu && h.vendor == Vendor::Nvidia && h.compute_capability.is_none() {
        d(
            "/".into(),
            "an NVIDIA GPU profile needs compute_capability".into(),
        );
    }
    if h.kind == DeviceKind::Gpu
        && h.matching.pci_ids.is_empty()
        && h.matching.name_contains.is_empty()
    {
        d(
            "/match".into(),
            "a GPU profile needs pci_ids or name_contains to be matched".into(),
        );
    }
    if h.kind == DeviceKind::Soc && !h.memory.unified {
        d(
            "/memory/unified".into(),
            "a SoC profile's memory is unified".into(),
        );
    }
}
