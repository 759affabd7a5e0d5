//! The hardware profiles added for issue 27 item 2 (GPUs that had none): every device string of the public
//! llama-bench table that one of them describes resolves to exactly that profile through the planner's own
//! matcher (`profile::matching::resolve`: PCI id, name rules, normalized name), the names and PCI ids the drivers
//! report resolve the same way, and no device that matched a profile before these files were added matches
//! another one now.

use std::collections::BTreeSet;

use optimizer::hardware::{Gpu, GpuVendor};
use optimizer::profile::matching::{Resolution, resolve};
use optimizer::profile::{ArchitectureRule, HardwareProfile, ProfileSet, Vendor};
use serde_json::json;

use crate::common::{fixture, profiles};

/// The profiles this change adds.
const NEW: &[&str] = &[
    "rtx-3070",
    "rtx-3080-ti",
    "rtx-3090-ti",
    "rtx-4070",
    "rtx-4070-super",
    "rtx-4070-ti",
    "rtx-4070-ti-super",
    "rtx-4080-super",
    "rtx-5060-ti-16gb",
    "rtx-5060-ti-8gb",
    "rtx-a5000",
    "rtx-a6000",
    "a40",
    "a30",
    "l40",
    "rtx-4000-ada",
    "rtx-5000-ada",
    "rtx-6000-ada",
    "rtx-pro-4000-blackwell",
    "rtx-pro-6000-blackwell-max-q",
    "tesla-p40",
    "radeon-rx-7900-xtx",
    "radeon-rx-7900-xt",
    "radeon-pro-w7900",
    "radeon-rx-9070-xt",
    "radeon-rx-9070",
    "radeon-rx-6800-xt",
    "radeon-rx-6900-xt",
    "instinct-mi210",
    "intel-arc-a770-16gb",
    "intel-arc-a750",
    "intel-arc-b580",
];

/// Device strings of `tests/fixtures/gpu-speed/public-llama-bench.yaml` and the new profile each must resolve to.
const TABLE_DEVICES: &[(&str, &str)] = &[
    ("NVIDIA GeForce RTX 3070", "rtx-3070"),
    ("NVIDIA GeForce RTX 3080 Ti", "rtx-3080-ti"),
    ("NVIDIA GeForce RTX 3090 Ti", "rtx-3090-ti"),
    ("NVIDIA GeForce RTX 4070", "rtx-4070"),
    ("NVIDIA GeForce RTX 4070 SUPER", "rtx-4070-super"),
    ("NVIDIA GeForce RTX 4070 Ti", "rtx-4070-ti"),
    ("NVIDIA GeForce RTX 4070 Ti SUPER", "rtx-4070-ti-super"),
    ("NVIDIA GeForce RTX 4080 SUPER", "rtx-4080-super"),
    ("NVIDIA GeForce RTX 5060 Ti 16GB", "rtx-5060-ti-16gb"),
    ("NVIDIA RTX A5000", "rtx-a5000"),
    ("NVIDIA RTX A6000", "rtx-a6000"),
    ("NVIDIA A40", "a40"),
    ("NVIDIA A30", "a30"),
    ("NVIDIA L40", "l40"),
    ("NVIDIA RTX 4000 Ada Generation", "rtx-4000-ada"),
    ("NVIDIA RTX 5000 Ada Generation", "rtx-5000-ada"),
    ("NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada"),
    ("NVIDIA RTX PRO 4000 Blackwell", "rtx-pro-4000-blackwell"),
    (
        "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
        "rtx-pro-6000-blackwell-max-q",
    ),
    ("NVIDIA Tesla P40", "tesla-p40"),
    ("AMD Radeon RX 7900 XTX", "radeon-rx-7900-xtx"),
    ("RX 7900 XTX", "radeon-rx-7900-xtx"),
    ("RX 7900 XT", "radeon-rx-7900-xt"),
    ("AMD Radeon PRO W7900 48GB", "radeon-pro-w7900"),
    ("AMD Radeon RX 9070 XT", "radeon-rx-9070-xt"),
    ("RX 9070 XT", "radeon-rx-9070-xt"),
    ("AMD Radeon RX 9070", "radeon-rx-9070"),
    ("RX 9070", "radeon-rx-9070"),
    ("AMD Instinct MI210", "instinct-mi210"),
    ("Arc A770", "intel-arc-a770-16gb"),
    ("Intel Arc B580", "intel-arc-b580"),
];

/// Names as the drivers report them (NVML; ROCm's marketing name), with the PCI id where the profile has one, and
/// the memory the device shows.
const DRIVER_DEVICES: &[(&str, Option<&str>, u64, &str)] = &[
    ("NVIDIA GeForce RTX 3070", Some("10de:2488"), 8, "rtx-3070"),
    (
        "NVIDIA GeForce RTX 3080 Ti",
        Some("10de:2208"),
        12,
        "rtx-3080-ti",
    ),
    ("NVIDIA GeForce RTX 5060 Ti", None, 8, "rtx-5060-ti-8gb"),
    ("NVIDIA GeForce RTX 5060 Ti", None, 16, "rtx-5060-ti-16gb"),
    ("NVIDIA RTX A6000", Some("10de:2230"), 48, "rtx-a6000"),
    ("NVIDIA A40", Some("10de:2235"), 48, "a40"),
    ("NVIDIA L40", Some("10de:26b5"), 48, "l40"),
    (
        "NVIDIA RTX 6000 Ada Generation",
        Some("10de:26b1"),
        48,
        "rtx-6000-ada",
    ),
    ("Tesla P40", Some("10de:1b38"), 24, "tesla-p40"),
    // amdgpu without a product_name: the sysfs probe names the card by its PCI id.
    (
        "AMD GPU 1002:744c",
        Some("1002:744c"),
        24,
        "radeon-rx-7900-xtx",
    ),
    (
        "AMD GPU 1002:744c",
        Some("1002:744c"),
        20,
        "radeon-rx-7900-xt",
    ),
    ("AMD Radeon RX 7900 XT", None, 20, "radeon-rx-7900-xt"),
    ("AMD Radeon RX 6800 XT", None, 16, "radeon-rx-6800-xt"),
    ("AMD Radeon RX 6900 XT", None, 16, "radeon-rx-6900-xt"),
    // The names ggml-vulkan and SYCL print (`Intel(R) Arc(TM) A770 Graphics`), with and without the PCI id.
    (
        "Intel(R) Arc(TM) A770 Graphics",
        Some("8086:56a0"),
        16,
        "intel-arc-a770-16gb",
    ),
    (
        "Intel(R) Arc(TM) A770 Graphics",
        None,
        16,
        "intel-arc-a770-16gb",
    ),
    (
        "Intel(R) Arc(TM) A750 Graphics",
        Some("8086:56a1"),
        8,
        "intel-arc-a750",
    ),
    ("Intel(R) Arc(TM) A750 Graphics", None, 8, "intel-arc-a750"),
    (
        "Intel(R) Arc(TM) B580 Graphics",
        Some("8086:e20b"),
        12,
        "intel-arc-b580",
    ),
    ("Intel(R) Arc(TM) B580 Graphics", None, 12, "intel-arc-b580"),
];

/// Names close to a new profile's that must not match it.
const LOOKALIKES: &[(&str, u64)] = &[
    ("NVIDIA RTX 4000 SFF Ada Generation", 20),
    ("NVIDIA RTX A4000", 16),
    ("NVIDIA L40S", 48),
    ("NVIDIA L4", 24),
    ("NVIDIA GeForce RTX 4070 Laptop GPU", 8),
    ("NVIDIA GeForce RTX 3070 Ti", 8),
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 96),
    ("Quadro RTX 6000", 24),
    ("AMD Radeon RX 9070 GRE", 12),
    // The laptop A770M and the 8 GB A770 (16 Gbps, 512 GB/s) are other parts.
    ("Intel(R) Arc(TM) A770M Graphics", 16),
    ("Intel(R) Arc(TM) A770 Graphics", 8),
    ("Intel(R) Arc(TM) B570 Graphics", 10),
];

fn gpu(name: &str, pci_id: Option<&str>, memory_bytes: u64) -> Gpu {
    let amd = name.starts_with("AMD")
        || name.starts_with("RX ")
        || pci_id.is_some_and(|p| p.starts_with("1002"));
    let intel = name.contains("Arc") || pci_id.is_some_and(|p| p.starts_with("8086"));
    serde_json::from_value(json!({
        "index": 0,
        "name": name,
        "vendor": if amd {
            GpuVendor::Amd
        } else if intel {
            GpuVendor::Intel
        } else {
            GpuVendor::Nvidia
        },
        "memory_total_bytes": memory_bytes,
        "memory_free_bytes": memory_bytes,
        "pci_id": pci_id,
    }))
    .unwrap()
}

/// The id of the profile the device resolves to, if it resolves to a profile.
fn matched(gpu: &Gpu, hw: &[&HardwareProfile], archs: &[&ArchitectureRule]) -> Option<String> {
    match resolve(gpu, hw, archs) {
        Resolution::Profile { profile, .. } => Some(profile.id.clone()),
        _ => None,
    }
}

/// What a device of this profile reports: a little less than the nominal size, as drivers do.
fn reported_bytes(p: &HardwareProfile) -> u64 {
    p.memory.size_bytes.unwrap() / 100 * 97
}

fn all(set: &ProfileSet) -> Vec<&HardwareProfile> {
    set.hardware.iter().map(|e| &e.value).collect()
}

#[test]
fn every_new_profile_is_built_in() {
    let set = profiles();
    for id in NEW {
        let p = set
            .hardware(id)
            .unwrap_or_else(|| panic!("{id}: not in the built-in set"));
        assert!(p.value.memory.bandwidth_gb_s > 0.0, "{id}: no bandwidth");
        let vendor_ok = if id.starts_with("radeon") || id.starts_with("instinct") {
            p.value.vendor == Vendor::Amd
        } else if id.starts_with("intel") {
            p.value.vendor == Vendor::Intel
        } else {
            p.value.vendor == Vendor::Nvidia
        };
        assert!(vendor_ok, "{id}: vendor {:?}", p.value.vendor);
    }
}

#[test]
fn public_llama_bench_devices_match_the_new_profiles() {
    let set = profiles();
    let hw = all(&set);
    let archs: Vec<&ArchitectureRule> = set.architectures().collect();
    let text = std::fs::read_to_string(fixture("gpu-speed/public-llama-bench.yaml")).unwrap();
    let table: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
    let devices: BTreeSet<&str> = table["rows"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|r| r["device"].as_str())
        .collect();
    for (device, want) in TABLE_DEVICES {
        assert!(
            devices.contains(device),
            "{device:?} is not a device of the public llama-bench table"
        );
        let p = set.hardware(want).unwrap();
        let got = matched(&gpu(device, None, reported_bytes(&p.value)), &hw, &archs);
        assert_eq!(got.as_deref(), Some(*want), "{device}");
    }
    // Every device string a new profile can match (at any new profile's memory size) is listed above, so the list
    // is the whole story. (`RTX 5060 Ti 16GB` matches the 8 GB profile when the device reports 8 GB: the probed
    // memory, not the label, tells the two apart.)
    for device in &devices {
        for id in NEW {
            let p = set.hardware(id).unwrap();
            let got = matched(&gpu(device, None, reported_bytes(&p.value)), &hw, &archs);
            if got.as_deref() == Some(*id) {
                assert!(
                    TABLE_DEVICES.iter().any(|(d, _)| d == device),
                    "{device:?} matches {id} but is not listed in TABLE_DEVICES"
                );
            }
        }
    }
}

#[test]
fn driver_names_and_pci_ids_match_the_new_profiles() {
    let set = profiles();
    let hw = all(&set);
    let archs: Vec<&ArchitectureRule> = set.architectures().collect();
    for (name, pci, gib, want) in DRIVER_DEVICES {
        let got = matched(&gpu(name, *pci, (*gib << 30) / 100 * 97), &hw, &archs);
        assert_eq!(got.as_deref(), Some(*want), "{name} {pci:?} {gib} GiB");
    }
    for (name, gib) in LOOKALIKES {
        let got = matched(&gpu(name, None, (*gib << 30) / 100 * 97), &hw, &archs);
        assert!(
            got.as_deref().is_none_or(|id| !NEW.contains(&id)),
            "{name} matched new profile {got:?}"
        );
    }
}

/// Adding the profiles changes no match a device had before: every public table device string and every existing
/// profile's own name resolves, with the new files and without them, to the same profile, unless it matched none.
#[test]
fn no_existing_match_changed() {
    let set = profiles();
    let with: Vec<&HardwareProfile> = all(&set);
    let without: Vec<&HardwareProfile> = with
        .iter()
        .copied()
        .filter(|p| !NEW.contains(&p.id.as_str()))
        .collect();
    let archs: Vec<&ArchitectureRule> = set.architectures().collect();
    let text = std::fs::read_to_string(fixture("gpu-speed/public-llama-bench.yaml")).unwrap();
    let table: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
    let mut names: BTreeSet<String> = table["rows"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|r| r["device"].as_str().map(str::to_string))
        .collect();
    names.extend(without.iter().map(|p| p.name.clone()));
    let sizes: BTreeSet<u64> = with.iter().filter_map(|p| p.memory.size_bytes).collect();
    let mut checked = 0;
    for name in &names {
        for bytes in &sizes {
            let g = gpu(name, None, bytes / 100 * 97);
            let Some(before) = matched(&g, &without, &archs) else {
                continue;
            };
            assert_eq!(
                matched(&g, &with, &archs).as_deref(),
                Some(before.as_str()),
                "{name} with {bytes} bytes"
            );
            checked += 1;
        }
    }
    for p in &without {
        for pci in &p.matching.pci_ids {
            let bytes = p.matching.memory_bytes.or(p.memory.size_bytes).unwrap_or(0);
            let g = gpu(&p.name, Some(pci), bytes / 100 * 97);
            assert_eq!(
                matched(&g, &with, &archs),
                matched(&g, &without, &archs),
                "{} {pci}",
                p.name
            );
        }
    }
    assert!(checked > 50, "only {checked} existing matches checked");
}
