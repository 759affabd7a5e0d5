//! Inventories and profile matching on fixture machines, and bad inventory input.

use std::path::{Path, PathBuf};
use std::process::Command;

use optimizer::hardware::{self, Bound, GpuVendor, Inventory};
use optimizer::profile::matching::{
    MatchedBy, Resolution, gpu_from_profile, normalize_name, resolve, usable_gpu_bytes,
};
use optimizer::profile::{self, ArchitectureRule, HardwareProfile, ProfileSet};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/inventories")
        .join(name)
}

fn inventory(name: &str) -> Inventory {
    hardware::load_inventory(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn builtin() -> ProfileSet {
    profile::load(&[]).expect("built-in profiles are valid")
}

/// Resolves every GPU of an inventory: (profile id or derived id, how).
fn resolved(inv: &Inventory, set: &ProfileSet) -> Vec<(String, &'static str)> {
    let hw: Vec<&HardwareProfile> = set.hardware.iter().map(|e| &e.value).collect();
    let archs: Vec<&ArchitectureRule> = set.architectures().collect();
    inv.gpus
        .iter()
        .map(|g| match resolve(g, &hw, &archs) {
            Resolution::Profile { profile, by } => (
                profile.id.clone(),
                match by {
                    MatchedBy::PciId => "pci",
                    MatchedBy::Name => "name",
                    MatchedBy::NormalizedName => "normalized",
                },
            ),
            Resolution::Derived { profile, .. } => (profile.id.clone(), "derived"),
            Resolution::Heuristic { profile, .. } => (profile.id.clone(), "heuristic"),
            Resolution::Unresolved { .. } => (String::new(), "unresolved"),
        })
        .collect()
}

#[test]
fn fixture_machines_resolve_to_their_profiles() {
    let set = builtin();
    let ws = inventory("workstation-2x3090.yaml");
    assert_eq!(
        resolved(&ws, &set),
        vec![("rtx-3090".into(), "pci"), ("rtx-3090".into(), "pci")]
    );
    let cloud = inventory("cloud-8xh100.yaml");
    let r = resolved(&cloud, &set);
    assert_eq!(r.len(), 8);
    assert!(
        r.iter().all(|(id, by)| id == "h100-sxm" && *by == "pci"),
        "{r:?}"
    );
    let ct = inventory("container-cgroup.yaml");
    assert_eq!(resolved(&ct, &set), vec![("t4".into(), "pci")]);
    assert!(inventory("cpu-server.yaml").gpus.is_empty());
}

#[test]
fn a_gpu_matches_by_name_when_its_pci_id_is_unknown() {
    let set = builtin();
    let mut ws = inventory("workstation-2x3090.yaml");
    for g in &mut ws.gpus {
        g.pci_id = None;
    }
    assert_eq!(resolved(&ws, &set)[0], ("rtx-3090".into(), "name"));
}

#[test]
fn memory_size_tells_apart_profiles_that_share_a_name() {
    let set = builtin();
    let mut ct = inventory("container-cgroup.yaml");
    let g = &mut ct.gpus[0];
    g.name = "NVIDIA A100-SXM4-40GB".into();
    g.pci_id = None;
    g.memory_total_bytes = 42_505_273_344;
    let forty = resolved(&ct, &set)[0].0.clone();
    ct.gpus[0].name = "NVIDIA A100-SXM4-80GB".into();
    ct.gpus[0].memory_total_bytes = 85_899_345_920;
    let eighty = resolved(&ct, &set)[0].0.clone();
    assert_eq!(forty, "a100-40gb-sxm");
    assert_eq!(eighty, "a100-80gb-sxm");
}

#[test]
fn unseen_gpus_get_derived_profiles_from_their_probe() {
    let set = builtin();
    let hw: Vec<&HardwareProfile> = set.hardware.iter().map(|e| &e.value).collect();
    let archs: Vec<&ArchitectureRule> = set.architectures().collect();

    // An unprofiled Blackwell GeForce part (12.0): bandwidth from the probe's clock and bus, TFLOPS from the
    // blackwell-geforce rates: 170 SMs × 3,090 MHz × 512 = 268.9 TFLOPS.
    let mut g = inventory("unseen-gpu.yaml").gpus[0].clone();
    g.name = "NVIDIA GeForce RTX 5095".into();
    g.pci_id = None;
    let Resolution::Derived { profile, .. } = resolve(&g, &hw, &archs) else {
        panic!("expected a derived profile");
    };
    assert!((profile.memory.bandwidth_gb_s - 1792.128).abs() < 1e-6);
    assert_eq!(profile.architecture.as_deref(), Some("blackwell-geforce"));
    let t = profile.tensor_tflops.and_then(|t| t.fp16_fp32acc).unwrap();
    assert!((t - 170.0 * 3090.0 * 512.0 / 1e6).abs() < 0.01, "{t}");
    assert!(
        profile
            .sources
            .values()
            .all(|s| s.starts_with("heuristic") || s.starts_with("probe"))
    );

    // Compute capability 13.0 has no architecture rule: bandwidth is derived, TFLOPS are not, and the notes
    // say so.
    g.compute_capability = Some("13.0".into());
    let Resolution::Derived { profile, notes } = resolve(&g, &hw, &archs) else {
        panic!("expected a derived profile");
    };
    assert!(profile.tensor_tflops.is_none());
    assert!(notes.iter().any(|n| n.contains("13.0")), "{notes:?}");

    // An unprofiled Ada laptop part: 24 SMs × 3,105 MHz × 512 = 38.2 TFLOPS.
    let mut g = inventory("laptop-rtx4060.yaml").gpus[0].clone();
    g.name = "NVIDIA GeForce RTX 4065 Laptop GPU".into();
    g.pci_id = None;
    let Resolution::Derived { profile, .. } = resolve(&g, &hw, &archs) else {
        panic!("expected a derived profile");
    };
    let t = profile.tensor_tflops.and_then(|t| t.fp16_fp32acc).unwrap();
    assert!((t - 24.0 * 3105.0 * 512.0 / 1e6).abs() < 0.01, "{t}");
    assert_eq!(profile.architecture.as_deref(), Some("ada-geforce"));
}

/// Regression (issue 8, "Hardware that is dropped"): nvidia-smi's view of a laptop GPU (name, memory, compute
/// capability; no PCI id, clocks or bus width) used to resolve to `Unresolved`, and the planner left it out.
#[test]
fn a_gpu_without_pci_id_clock_or_bus_width_is_not_dropped() {
    let set = builtin();
    let hw: Vec<&HardwareProfile> = set.hardware.iter().map(|e| &e.value).collect();
    let archs: Vec<&ArchitectureRule> = set.architectures().collect();
    let inv = inventory("laptop-nvidia-smi.yaml");
    assert_eq!(
        resolved(&inv, &set),
        vec![("rtx-4060-laptop".into(), "name")]
    );

    // The same GPU under a name no profile knows: lower bounds from the profiled compute-capability-8.9 GPUs
    // with at most its 8 GiB. The lowest bandwidth is the RTX 4050 Laptop's 192 GB/s, the lowest FP16 tensor
    // rate its 18.0 TFLOPS (20 SMs × 1,755 MHz × 512).
    let mut g = inv.gpus[0].clone();
    g.name = "NVIDIA GeForce RTX 4065 Laptop GPU".into();
    let Resolution::Heuristic {
        profile,
        basis,
        hint,
    } = resolve(&g, &hw, &archs)
    else {
        panic!("expected a heuristic profile");
    };
    assert_eq!(profile.memory.bandwidth_gb_s, 192.0);
    assert_eq!(
        profile.tensor_tflops.as_ref().and_then(|t| t.fp16_fp32acc),
        Some(18.0)
    );
    assert_eq!(profile.memory.size_bytes, Some(g.memory_total_bytes));
    assert_eq!(profile.architecture.as_deref(), Some("ada-geforce"));
    assert!(
        basis.contains("rtx-4050-laptop") && basis.contains("compute capability 8.9"),
        "{basis}"
    );
    assert!(
        hint.contains("profile") && hint.contains("calibrate"),
        "{hint}"
    );
    assert!(
        profile
            .sources
            .values()
            .all(|s| s.starts_with("heuristic") || s.starts_with("probe"))
    );
    // Every bound is at most what each profiled 8.9 part of no more memory has.
    for p in hw.iter().filter(|p| {
        p.compute_capability.as_deref() == Some("8.9")
            && p.memory.size_bytes.is_some_and(|s| s <= 8 << 30)
    }) {
        assert!(
            profile.memory.bandwidth_gb_s <= p.memory.bandwidth_gb_s,
            "{}",
            p.id
        );
    }

    // Only a GPU with no memory size is unresolved, and it says why.
    g.memory_total_bytes = 0;
    g.memory_free_bytes = 0;
    let Resolution::Unresolved { notes } = resolve(&g, &hw, &archs) else {
        panic!("a GPU without memory cannot be planned");
    };
    assert!(notes[0].contains("no memory size"), "{notes:?}");
}

#[test]
fn names_match_after_normalization_and_laptops_stay_apart() {
    assert_eq!(
        normalize_name("NVIDIA GeForce RTX 4060 Laptop GPU"),
        "rtx 4060 laptop"
    );
    assert_eq!(normalize_name("GeForce RTX 4060 Mobile"), "rtx 4060 laptop");
    assert_eq!(
        normalize_name("NVIDIA GeForce RTX 4060 Max-Q"),
        "rtx 4060 laptop"
    );
    assert_eq!(normalize_name("NVIDIA GeForce RTX 4060"), "rtx 4060");
    assert_eq!(normalize_name("NVIDIA H100 80GB HBM3"), "h100");
    assert_eq!(normalize_name("NVIDIA A100-SXM4-80GB"), "a100 sxm4");
    assert_eq!(normalize_name("Tesla V100 32 GB"), "v100");
    assert_eq!(normalize_name("Intel(R) Arc(TM) A770 Graphics"), "arc a770");
    assert_eq!(normalize_name("Apple M2 Max"), "apple m2 max");

    let set = builtin();
    let mut inv = inventory("laptop-nvidia-smi.yaml");
    // Name rules need "Laptop"; the normalized name still finds the laptop part, never the desktop one.
    inv.gpus[0].name = "nvidia geforce rtx  4060  mobile".into();
    assert_eq!(
        resolved(&inv, &set),
        vec![("rtx-4060-laptop".into(), "normalized")]
    );
    inv.gpus[0].name = "GeForce RTX 4060".into();
    assert_eq!(resolved(&inv, &set), vec![("rtx-4060".into(), "name")]);
}

#[test]
fn laptop_and_blackwell_gpus_resolve_to_their_profiles() {
    let set = builtin();
    let mut inv = inventory("laptop-nvidia-smi.yaml");
    let cases: &[(&str, u64, &str)] = &[
        (
            "NVIDIA GeForce RTX 4050 Laptop GPU",
            6 << 30,
            "rtx-4050-laptop",
        ),
        (
            "NVIDIA GeForce RTX 4070 Laptop GPU",
            8 << 30,
            "rtx-4070-laptop",
        ),
        (
            "NVIDIA GeForce RTX 4080 Laptop GPU",
            12 << 30,
            "rtx-4080-laptop",
        ),
        (
            "NVIDIA GeForce RTX 4090 Laptop GPU",
            16 << 30,
            "rtx-4090-laptop",
        ),
        (
            "NVIDIA GeForce RTX 3060 Laptop GPU",
            6 << 30,
            "rtx-3060-laptop",
        ),
        (
            "NVIDIA GeForce RTX 3070 Laptop GPU",
            8 << 30,
            "rtx-3070-laptop",
        ),
        (
            "NVIDIA GeForce RTX 3080 Laptop GPU",
            8 << 30,
            "rtx-3080-laptop",
        ),
        ("NVIDIA GeForce RTX 5090", 34_190_917_632, "rtx-5090"),
        ("NVIDIA GeForce RTX 5080", 16 << 30, "rtx-5080"),
        ("NVIDIA GeForce RTX 5070 Ti", 16 << 30, "rtx-5070-ti"),
        ("NVIDIA GeForce RTX 5070", 12 << 30, "rtx-5070"),
        (
            "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
            102_641_958_912,
            "rtx-pro-6000-blackwell",
        ),
        ("NVIDIA B200", 192_265_846_784, "b200"),
    ];
    for (name, bytes, want) in cases {
        inv.gpus[0].name = (*name).into();
        inv.gpus[0].memory_total_bytes = *bytes;
        inv.gpus[0].memory_free_bytes = *bytes;
        assert_eq!(resolved(&inv, &set)[0], ((*want).into(), "name"), "{name}");
    }
    // The Grace superchip and a 16 GB RTX 3080 Laptop are not these profiles.
    inv.gpus[0].name = "NVIDIA GB200".into();
    assert_ne!(resolved(&inv, &set)[0].0, "b200");
    inv.gpus[0].name = "NVIDIA GeForce RTX 3080 Laptop GPU".into();
    inv.gpus[0].memory_total_bytes = 16 << 30;
    inv.gpus[0].compute_capability = Some("8.6".into());
    assert_eq!(resolved(&inv, &set)[0].1, "heuristic");
}

#[test]
fn apple_gpus_resolve_and_get_metal_working_set() {
    let set = builtin();
    let hw: Vec<&HardwareProfile> = set.hardware.iter().map(|e| &e.value).collect();
    let archs: Vec<&ArchitectureRule> = set.architectures().collect();
    let inv = inventory("apple-m2-max.yaml");
    let g = &inv.gpus[0];
    assert_eq!(g.vendor, GpuVendor::Apple);
    let Resolution::Profile { profile, by } = resolve(g, &hw, &archs) else {
        panic!("an Apple GPU matches its SoC profile");
    };
    assert_eq!((profile.id.as_str(), by), ("apple-m2-max", MatchedBy::Name));
    // 32 GiB: 2/3 (rounded down to 0.6666), as llama.cpp logs 21845.34 MiB for a 32 GiB M2 Max.
    let u = usable_gpu_bytes(g, Some(profile)).unwrap();
    assert_eq!(u.bytes, (34_359_738_368.0 * 0.6666) as u64);
    assert!(
        u.bytes <= 21_845 << 20,
        "a lower bound of the observed 21845.34 MiB"
    );
    assert!(u.source.contains("apple-m2-max") && u.source.contains("recommendedMaxWorkingSetSize"));
    // 96 GiB: 3/4, observed 73728 MiB.
    let mut big = g.clone();
    big.memory_total_bytes = 96 << 30;
    assert_eq!(
        usable_gpu_bytes(&big, Some(profile)).unwrap().bytes,
        73_728 << 20
    );
    // A limit the machine reports wins over the rule.
    let mut wired = g.clone();
    wired.gpu_working_set_bytes = Some(30 << 30);
    assert_eq!(
        usable_gpu_bytes(&wired, Some(profile)).unwrap().bytes,
        30 << 30
    );
    // Without a profile or a reported limit nothing says how much the GPU may hold.
    assert!(usable_gpu_bytes(g, None).is_err());
    // A discrete GPU may fill its own memory.
    let d = &inventory("laptop-nvidia-smi.yaml").gpus[0];
    assert_eq!(
        usable_gpu_bytes(d, None).unwrap().bytes,
        d.memory_total_bytes
    );

    // Every Apple profile has a working-set tier for every size Apple sells (8 GiB to 512 GiB).
    for p in hw.iter().filter(|p| p.id.starts_with("apple-")) {
        let mut m = g.clone();
        for gib in [8u64, 16, 18, 24, 32, 36, 48, 64, 96, 128, 192, 512] {
            m.memory_total_bytes = gib << 30;
            let u = usable_gpu_bytes(&m, Some(p)).unwrap_or_else(|e| panic!("{e}"));
            // Between the rounded-down 2/3 and 3/4 of the machine's memory.
            let share = u.bytes as f64 / m.memory_total_bytes as f64;
            assert!(
                (0.6665..=0.75).contains(&share),
                "{} at {gib} GiB: {share}",
                p.id
            );
        }
    }

    // An Apple chip no profile names is bounded by the slowest Apple profile and keeps the working-set rule.
    let mut m5 = g.clone();
    m5.name = "Apple M9".into();
    let Resolution::Heuristic { profile, basis, .. } = resolve(&m5, &hw, &archs) else {
        panic!("expected a heuristic profile");
    };
    assert_eq!(profile.memory.bandwidth_gb_s, 68.3);
    assert!(basis.contains("apple-m1"), "{basis}");
    assert!(usable_gpu_bytes(&m5, Some(&profile)).is_ok());

    // `--hardware apple-m2-max` builds the machine's GPU from the SoC profile and the host's memory.
    let p = &set.hardware("apple-m2-max").unwrap().value;
    let built = gpu_from_profile(p, 0, 64 << 30).unwrap();
    assert!(built.unified_memory && built.vendor == GpuVendor::Apple);
    assert_eq!(built.memory_total_bytes, 64 << 30);
    assert!(matches!(
        resolve(&built, &hw, &archs),
        Resolution::Profile { .. }
    ));
    assert!(
        gpu_from_profile(
            &set.hardware("cpu-x86-64-avx2-ddr4-dual-channel")
                .unwrap()
                .value,
            0,
            1
        )
        .is_err()
    );
    // A profiled GPU has what CUDA leaves programs (79.11 GiB at the low end of its rounding, the lowest
    // public H100 80GB HBM3 total: vllm#27508), not the nominal 80 GiB; a profile without that figure keeps
    // its nominal size.
    let h100 = gpu_from_profile(&set.hardware("h100-sxm").unwrap().value, 3, 1).unwrap();
    assert_eq!(
        (h100.index, h100.memory_total_bytes),
        (
            3,
            (79.105 * (1u64 << 30) as f64 / (1u64 << 20) as f64) as u64 * (1 << 20)
        )
    );
    assert_eq!(h100.memory_free_bytes, h100.memory_total_bytes);
    let a10 = gpu_from_profile(&set.hardware("a10").unwrap().value, 0, 1).unwrap();
    assert_eq!(a10.memory_total_bytes, 24 << 30);
}

/// Every usable figure a GPU profile gives lies below its nominal size and above 0.9 of it, and the built-in
/// profiles of the GPUs the plans name carry one (a plan from `--hardware` must not promise the
/// driver's reserve).
#[test]
fn profiled_usable_memory_is_below_the_nominal_size() {
    let set = builtin();
    for e in &set.hardware {
        let m = &e.value.memory;
        if let (Some(u), Some(s)) = (m.usable_bytes, m.size_bytes) {
            assert!(
                u < s && u as f64 >= 0.9 * s as f64,
                "{}: {u} of {s}",
                e.value.id
            );
        }
    }
    for id in ["h100-sxm", "a100-80gb-sxm", "l4", "rtx-4090", "rtx-3090"] {
        assert!(
            set.hardware(id)
                .unwrap()
                .value
                .memory
                .usable_bytes
                .is_some(),
            "{id}"
        );
    }
}

#[test]
fn amd_gpus_are_kept_with_a_memory_size_bound() {
    let set = builtin();
    let hw: Vec<&HardwareProfile> = set.hardware.iter().map(|e| &e.value).collect();
    let archs: Vec<&ArchitectureRule> = set.architectures().collect();
    let inv = inventory("amd-radeon.yaml");
    // Navi 31 with 24 GiB is the RX 7900 XTX's profile (issue 27 added AMD profiles).
    let Resolution::Profile { profile, .. } = resolve(&inv.gpus[0], &hw, &archs) else {
        panic!("expected the RX 7900 XTX profile");
    };
    assert_eq!(profile.id, "radeon-rx-7900-xtx");
    // An AMD card nobody profiled (Navi 22, RX 6700 XT, 12 GiB) is bounded by AMD's own profiled cards, never by
    // another vendor's slowest (issue 27: "never from another vendor's slowest card").
    let mut g = inv.gpus[0].clone();
    g.pci_id = Some("1002:73df".into());
    g.name = "AMD GPU 1002:73df".into();
    g.memory_total_bytes = 12 << 30;
    let Resolution::Heuristic { profile, basis, .. } = resolve(&g, &hw, &archs) else {
        panic!("expected a heuristic profile");
    };
    let amd: Vec<f64> = hw
        .iter()
        .filter(|p| p.vendor == optimizer::profile::Vendor::Amd)
        .map(|p| p.memory.bandwidth_gb_s)
        .collect();
    assert!(!amd.is_empty());
    assert!(
        amd.contains(&profile.memory.bandwidth_gb_s),
        "{}",
        profile.memory.bandwidth_gb_s
    );
    assert_eq!(profile.vendor, optimizer::profile::Vendor::Amd);
    assert!(profile.tensor_tflops.is_none());
    assert!(
        basis.contains("Amd devices") && !basis.contains("any vendor"),
        "{basis}"
    );
}

/// The sysfs probe reads AMD and Intel GPUs from a DRM tree and survives missing, garbage and non-regular files.
#[test]
fn sysfs_probe_reads_amd_and_intel_gpus_and_survives_garbage() {
    let d = tempfile::tempdir().unwrap();
    let drm = d.path().join("sys/class/drm");
    let card = |name: &str, files: &[(&str, &str)]| {
        let dev = drm.join(name).join("device");
        std::fs::create_dir_all(&dev).unwrap();
        for (f, text) in files {
            let p = if let Some(top) = f.strip_prefix("../") {
                drm.join(name).join(top)
            } else {
                dev.join(f)
            };
            std::fs::write(p, text).unwrap();
        }
    };
    card(
        "card0",
        &[
            ("vendor", "0x1002\n"),
            ("device", "0x744c\n"),
            ("mem_info_vram_total", "25753026560\n"),
            ("mem_info_vram_used", "453026560\n"),
            ("uevent", "DRIVER=amdgpu\nPCI_SLOT_NAME=0000:03:00.0\n"),
            // amdgpu's pp_dpm_* layout (Documentation/gpu/amdgpu/thermal.rst): levels, `*` on the current one.
            ("pp_dpm_sclk", "0: 500Mhz\n1: 1486Mhz *\n2: 2482Mhz\n"),
            (
                "pp_dpm_mclk",
                "0: 96Mhz *\n1: 456Mhz\n2: 772Mhz\n3: 1249Mhz\n",
            ),
        ],
    );
    std::fs::create_dir_all(drm.join("card0-DP-1")).unwrap();
    // Intel discrete card with local memory, and an integrated one without.
    card(
        "card1",
        &[
            ("vendor", "0x8086\n"),
            ("device", "0x56a0\n"),
            ("../lmem_total_bytes", "17179869184\n"),
            ("../lmem_avail_bytes", "16000000000\n"),
        ],
    );
    card("card2", &[("vendor", "0x8086\n"), ("device", "0x46a6\n")]);
    // NVIDIA is NVML's; garbage vendor, garbage memory, missing files.
    card(
        "card3",
        &[("vendor", "0x10de\n"), ("mem_info_vram_total", "1\n")],
    );
    card(
        "card4",
        &[("vendor", "zzz"), ("mem_info_vram_total", "1\n")],
    );
    card(
        "card5",
        &[
            ("vendor", "0x1002"),
            ("mem_info_vram_total", "lots of bytes"),
        ],
    );
    card("card6", &[]);
    card(
        "card7",
        &[
            ("vendor", "0x1002"),
            ("mem_info_vram_total", "8589934592"),
            ("mem_info_vram_used", "99999999999999"),
            ("product_name", "AMD Radeon Pro W7600"),
            // Garbage clock levels: left out with a note, the card kept.
            ("pp_dpm_sclk", "0: fastMhz\n1: 99999999999Mhz\n"),
            ("pp_dpm_mclk", "\u{0}\u{1}binary"),
        ],
    );
    // A FIFO where an attribute should be must not block the probe.
    #[cfg(unix)]
    {
        let dev = drm.join("card8/device");
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("vendor"), "0x1002").unwrap();
        let st = Command::new("mkfifo")
            .arg(dev.join("mem_info_vram_total"))
            .status()
            .unwrap();
        assert!(st.success());
    }

    let mut notes = Vec::new();
    let gpus = hardware::sysfs::probe(d.path(), 2, &mut notes);
    let summary: Vec<_> = gpus
        .iter()
        .map(|g| {
            (
                g.index,
                g.name.as_str(),
                g.vendor,
                g.memory_total_bytes,
                g.memory_free_bytes,
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                2,
                "AMD GPU 1002:744c",
                GpuVendor::Amd,
                25_753_026_560,
                25_300_000_000
            ),
            (
                3,
                "Intel GPU 8086:56a0",
                GpuVendor::Intel,
                17_179_869_184,
                16_000_000_000
            ),
            (4, "AMD Radeon Pro W7600", GpuVendor::Amd, 8_589_934_592, 0),
        ]
    );
    assert_eq!(gpus[0].pci_bus_id.as_deref(), Some("0000:03:00.0"));
    assert_eq!(gpus[0].pci_id.as_deref(), Some("1002:744c"));
    // The highest pp_dpm_sclk / pp_dpm_mclk levels; what sysfs does not expose stays out.
    assert_eq!(
        (gpus[0].max_sm_clock_mhz, gpus[0].max_memory_clock_mhz),
        (Some(2482), Some(1249))
    );
    assert_eq!(
        (gpus[0].sm_count, gpus[0].memory_bus_width_bits),
        (None, None)
    );
    assert_eq!(
        (gpus[2].max_sm_clock_mhz, gpus[2].max_memory_clock_mhz),
        (None, None)
    );
    assert_eq!(gpus[1].max_sm_clock_mhz, None, "Intel has no pp_dpm files");
    assert!(
        notes
            .iter()
            .any(|n| n.contains("card7") && n.contains("shader and memory clocks")),
        "{notes:?}"
    );
    // The integrated Intel GPU, the garbage AMD card and the FIFO card are notes, not silence.
    for needle in ["card2", "card5", "card8"] {
        assert!(
            notes.iter().any(|n| n.contains(needle)),
            "{needle}: {notes:?}"
        );
    }
    // The probed inventory round-trips through the inventory contract.
    let inv = Inventory {
        gpus,
        ..inventory("cpu-server.yaml")
    };
    let yaml = serde_yaml_ng::to_string(&inv).unwrap();
    assert_eq!(hardware::parse_inventory(&yaml).unwrap(), inv);
    // No DRM directory at all: no GPUs, no panic.
    assert!(hardware::sysfs::probe(&d.path().join("nothing"), 0, &mut notes).is_empty());
}

/// `sysctl` output captured on Apple silicon Macs (keyed form, as the macOS probe asks for it).
#[test]
fn macos_sysctl_output_parses_into_an_apple_gpu() {
    let m2max = "hw.memsize: 34359738368\nmachdep.cpu.brand_string: Apple M2 Max\nhw.perflevel0.physicalcpu: 8\niogpu.wired_limit_mb: 0\n";
    let m = hardware::macos::parse_sysctl(m2max).unwrap();
    assert_eq!(m.memory_bytes, 34_359_738_368);
    assert_eq!(m.chip, "Apple M2 Max");
    assert_eq!(m.performance_cores, Some(8));
    assert_eq!(m.gpu_wired_limit_bytes, None, "0 means the default limit");
    let g = hardware::macos::apple_gpu(&m, 0, 40 << 30);
    assert!(g.unified_memory && g.vendor == GpuVendor::Apple);
    assert_eq!(
        g.memory_free_bytes, g.memory_total_bytes,
        "free is capped at total"
    );
    // It is the GPU the fixture describes, and resolves to the M2 Max profile.
    let set = builtin();
    assert_eq!(
        resolved(
            &Inventory {
                gpus: vec![g],
                ..inventory("apple-m2-max.yaml")
            },
            &set
        ),
        vec![("apple-m2-max".into(), "name")]
    );
    // A raised wired limit (`sudo sysctl iogpu.wired_limit_mb=57344` on a 64 GiB machine), a key missing on
    // older macOS, and errors naming what is wrong.
    let raised = "hw.memsize: 68719476736\nmachdep.cpu.brand_string: Apple M1 Max\niogpu.wired_limit_mb: 57344\n";
    let m = hardware::macos::parse_sysctl(raised).unwrap();
    assert_eq!(m.gpu_wired_limit_bytes, Some(57_344 << 20));
    assert_eq!(
        hardware::macos::apple_gpu(&m, 1, 0).gpu_working_set_bytes,
        Some(57_344 << 20)
    );
    for (text, needle) in [
        ("machdep.cpu.brand_string: Apple M1\n", "hw.memsize"),
        (
            "hw.memsize: lots\nmachdep.cpu.brand_string: Apple M1\n",
            "hw.memsize",
        ),
        (
            "hw.memsize: 0\nmachdep.cpu.brand_string: Apple M1\n",
            "hw.memsize",
        ),
        ("hw.memsize: 8589934592\n", "brand_string"),
        (
            "hw.memsize: 8589934592\nmachdep.cpu.brand_string: Intel(R) Core(TM) i9-9980HK CPU @ 2.40GHz\n",
            "not Apple",
        ),
    ] {
        let e = hardware::macos::parse_sysctl(text).unwrap_err().to_string();
        assert!(e.contains(needle), "{text:?}: {e}");
    }
}

#[test]
fn container_limits_are_part_of_the_inventory() {
    let ct = inventory("container-cgroup.yaml");
    assert_eq!(ct.memory.bound, Some(Bound::CgroupV2));
    assert_eq!(ct.memory.total_bytes, 8 << 30);
    assert_eq!(ct.memory.host_total_bytes, Some(64 << 30));
    assert_eq!(ct.cpu.effective_cpus, Some(4.0));
}

#[test]
fn cgroup_limits_bound_host_figures() {
    let mut inv = inventory("cpu-server.yaml");
    let limits = hardware::cgroup::Limits {
        memory_bytes: Some(16 << 30),
        cpus: Some(6.0),
        memory_bound: Some(Bound::CgroupV1),
        cpu_bound: Some(Bound::CgroupV2),
        notes: vec![],
    };
    let host_total = inv.memory.total_bytes;
    hardware::apply_limits(&mut inv.cpu, &mut inv.memory, &limits);
    assert_eq!(inv.memory.total_bytes, 16 << 30);
    assert_eq!(inv.memory.available_bytes, 16 << 30);
    assert_eq!(inv.memory.host_total_bytes, Some(host_total));
    assert_eq!(inv.memory.bound, Some(Bound::CgroupV1));
    assert_eq!(inv.cpu.effective_cpus, Some(6.0));
    assert_eq!(inv.cpu.cpu_bound, Some(Bound::CgroupV2));
    // A limit above the host's figure does not raise it.
    let mut inv = inventory("cpu-server.yaml");
    let big = hardware::cgroup::Limits {
        memory_bytes: Some(u64::MAX / 2),
        cpus: Some(1000.0),
        ..limits
    };
    hardware::apply_limits(&mut inv.cpu, &mut inv.memory, &big);
    assert_eq!(inv.memory.total_bytes, host_total);
    assert_eq!(inv.cpu.effective_cpus, None);
}

#[test]
fn live_probe_never_fails_and_round_trips_through_yaml() {
    let inv = hardware::probe_live();
    assert!(inv.cpu.logical_cpus >= 1);
    assert!(inv.memory.total_bytes > 0);
    let yaml = serde_yaml_ng::to_string(&inv).unwrap();
    assert_eq!(hardware::parse_inventory(&yaml).unwrap(), inv);
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_optimizer"))
}

#[test]
fn probe_uses_the_inventory_from_flag_or_environment() {
    let f = fixture("workstation-2x3090.yaml");
    let o = bin()
        .arg("--inventory")
        .arg(&f)
        .args(["probe"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("source        inventory"), "{out}");
    assert!(
        out.contains("profile rtx-3090 (matched by PCI id)"),
        "{out}"
    );

    let o = bin()
        .env("OPTIMIZER_INVENTORY", &f)
        .args(["probe", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["gpus"].as_array().unwrap().len(), 2);

    // The flag wins over the environment.
    let o = bin()
        .env("OPTIMIZER_INVENTORY", fixture("cpu-server.yaml"))
        .arg("--inventory")
        .arg(&f)
        .args(["probe", "--format", "json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["gpus"].as_array().unwrap().len(), 2);
}

#[test]
fn bad_inventories_exit_4_naming_the_file_and_defect() {
    let d = tempfile::tempdir().unwrap();
    let cases: &[(&str, &str, &str)] = &[
        (
            "unknown-field.yaml",
            "cpu: {model: x, vendor: y, physical_cores: 1, logical_cpus: 1, features: [], colour: red}\nmemory: {total_bytes: 1, available_bytes: 1}\n",
            "colour",
        ),
        (
            "free-over-total.yaml",
            "cpu: {model: x, vendor: y, physical_cores: 1, logical_cpus: 1, features: []}\nmemory: {total_bytes: 1, available_bytes: 1}\ngpus: [{index: 0, name: g, vendor: nvidia, memory_total_bytes: 1, memory_free_bytes: 2}]\n",
            "memory_free_bytes",
        ),
        (
            "bad-cc.yaml",
            "cpu: {model: x, vendor: y, physical_cores: 1, logical_cpus: 1, features: []}\nmemory: {total_bytes: 1, available_bytes: 1}\ngpus: [{index: 0, name: g, vendor: nvidia, memory_total_bytes: 2, memory_free_bytes: 1, compute_capability: \"eight\"}]\n",
            "compute_capability",
        ),
        (
            "cores.yaml",
            "cpu: {model: x, vendor: y, physical_cores: 0, logical_cpus: 1, features: []}\nmemory: {total_bytes: 1, available_bytes: 1}\n",
            "physical_cores",
        ),
        (
            "negative.yaml",
            "cpu: {model: x, vendor: y, physical_cores: -1, logical_cpus: 1, features: []}\nmemory: {total_bytes: 1, available_bytes: 1}\n",
            "physical_cores",
        ),
        (
            "missing.yaml",
            "cpu: {model: x, vendor: y, physical_cores: 1, logical_cpus: 1, features: []}\n",
            "memory",
        ),
        (
            "deep.yaml",
            &format!("cpu: {}1{}\n", "[".repeat(1000), "]".repeat(1000)),
            "deeper",
        ),
    ];
    for (name, text, needle) in cases {
        let p = d.path().join(name);
        std::fs::write(&p, text).unwrap();
        let o = bin()
            .arg("--inventory")
            .arg(&p)
            .arg("probe")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(4), "{name}: {err}");
        assert!(err.contains(name) && err.contains(needle), "{name}: {err}");
        assert!(o.stdout.is_empty(), "{name}: no partial output");
    }
    let o = bin()
        .args(["--inventory", "/nonexistent/inv.yaml", "probe"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

fn cluster_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/clusters")
        .join(name)
}

/// The 64-GPU fixture: one group of 8 identical 8-GPU nodes, NDR InfiniBand between them, each figure sourced.
#[test]
fn the_h100_8x8_cluster_parses() {
    use hardware::cluster::{FabricKind, MAX_CLUSTER_NODES};
    let c = hardware::load_cluster(&cluster_fixture("h100-8x8.yaml")).unwrap();
    assert_eq!(c.nodes.len(), 1);
    assert_eq!(c.node_count(), Ok(8));
    assert_eq!(c.device_count(), Ok(64));
    assert!(c.node_count().unwrap() <= MAX_CLUSTER_NODES);
    let node = &c.nodes[0];
    assert!(
        node.inventory
            .gpus
            .iter()
            .all(|g| g.name == "NVIDIA H100 80GB HBM3")
    );
    let f = c.fabric.as_ref().unwrap();
    assert_eq!(f.kind, FabricKind::Infiniband);
    let bw = f.bandwidth_gb_s.as_ref().unwrap();
    assert_eq!(bw.value, 50.0);
    assert!(bw.source.contains("400 Gb/s"));
    assert_eq!(f.links_per_node.as_ref().unwrap().value, 8);
    assert!(
        f.latency_us.is_none(),
        "no latency is claimed without a source"
    );
    // Each node resolves to the H100 SXM profile, as the single-node inventory does.
    let set = builtin();
    assert!(
        resolved(&node.inventory, &set)
            .iter()
            .all(|(id, _)| id == "h100-sxm")
    );
    // And the YAML the type writes reads back to the same cluster.
    let text = serde_yaml_ng::to_string(&c).unwrap();
    assert_eq!(hardware::parse_cluster(&text).unwrap(), c);
}

/// `device_count` multiplies with checked arithmetic: the largest count a file can state gives the exact
/// product, not a wrapped one.
#[test]
fn cluster_device_count_is_exact_at_the_largest_counts() {
    let mut c = hardware::load_cluster(&cluster_fixture("h100-8x8.yaml")).unwrap();
    c.nodes[0].count = u32::MAX;
    assert_eq!(c.device_count(), Ok(8 * u64::from(u32::MAX)));
    let twin = hardware::Node {
        name: "twin".into(),
        ..c.nodes[0].clone()
    };
    c.nodes.push(twin);
    assert_eq!(c.node_count(), Ok(2 * u64::from(u32::MAX)));
    assert_eq!(c.device_count(), Ok(16 * u64::from(u32::MAX)));
}

/// Bad cluster files: each defect is an error naming it (and, loaded from a file, the file), never a panic.
#[test]
fn bad_clusters_are_refused_naming_the_defect() {
    let good = std::fs::read_to_string(cluster_fixture("h100-8x8.yaml")).unwrap();
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "unknown-top.yaml",
            format!("{good}fabrik: ethernet\n"),
            "fabrik",
        ),
        (
            "unknown-node.yaml",
            good.replace("    count: 8\n", "    count: 8\n    gpus_per_node: 8\n"),
            "gpus_per_node",
        ),
        (
            "unknown-fabric.yaml",
            good.replace("  kind: infiniband\n", "  kind: infiniband\n  mtu: 4096\n"),
            "mtu",
        ),
        (
            "bad-kind.yaml",
            good.replace("kind: infiniband", "kind: infinyband"),
            "infinyband",
        ),
        (
            "count-0.yaml",
            good.replace("count: 8", "count: 0"),
            "count is 0",
        ),
        (
            "count-1025.yaml",
            good.replace("count: 8", "count: 1025"),
            "limit of 1024 nodes",
        ),
        (
            "count-negative.yaml",
            good.replace("count: 8", "count: -1"),
            "count",
        ),
        (
            "count-huge.yaml",
            good.replace("count: 8", "count: 99999999999999999999"),
            "count",
        ),
        ("no-nodes.yaml", "nodes: []\n".into(), "at least one node"),
        (
            "unsourced.yaml",
            good.replace(
                "    source: \"InfiniBand NDR",
                "    sourc: \"InfiniBand NDR",
            ),
            "sourc",
        ),
        (
            "empty-source.yaml",
            format!("{}  latency_us: {{value: 1.0, source: \" \"}}\n", good),
            "empty source",
        ),
        (
            "nan-bandwidth.yaml",
            good.replace("value: 50", "value: .nan"),
            "fabric.bandwidth_gb_s",
        ),
        (
            "negative-latency.yaml",
            format!("{good}  latency_us: {{value: -1, source: x}}\n"),
            "fabric.latency_us",
        ),
        (
            "bits-for-bytes.yaml",
            good.replace("value: 50", "value: 400000"),
            "fabric.bandwidth_gb_s",
        ),
        (
            "bad-inventory.yaml",
            good.replace(
                "memory_free_bytes: 84986691584",
                "memory_free_bytes: 95986691584",
            ),
            "nodes[0] (h100-node): inventory: gpus[0]",
        ),
        ("truncated.yaml", good[..good.len() / 3].to_string(), ""),
        ("not-yaml.yaml", "nodes: [\n".into(), ""),
    ];
    let d = tempfile::tempdir().unwrap();
    for (name, text, needle) in &cases {
        let p = d.path().join(name);
        std::fs::write(&p, text).unwrap();
        match hardware::load_cluster(&p) {
            Err(e @ hardware::InventoryError::Invalid { .. }) => {
                let msg = e.to_string();
                assert!(
                    msg.contains(&p.display().to_string()) && msg.contains(needle),
                    "{name}: {msg}"
                );
            }
            other => panic!("{name}: expected an invalid-file error, got {other:?}"),
        }
    }
    // Two groups whose counts add past the limit, and two groups with one name.
    let second = good
        .split("fabric:")
        .next()
        .unwrap()
        .split("nodes:\n")
        .nth(1)
        .unwrap()
        .replace("name: h100-node", "name: other")
        .replace("count: 8", "count: 1017");
    let text = good.replace("fabric:", &format!("{second}fabric:"));
    let err = hardware::parse_cluster(&text).unwrap_err().to_string();
    assert!(
        err.contains("nodes[1] (other)") && err.contains("1024"),
        "{err}"
    );
    let dup = text
        .replace("name: other", "name: h100-node")
        .replace("count: 1017", "count: 1");
    let err = hardware::parse_cluster(&dup).unwrap_err().to_string();
    assert!(err.contains("appears twice"), "{err}");
}

/// A cluster file is read like an inventory: regular files only (a directory or FIFO is refused, not read
/// forever), bounded in size.
#[test]
fn cluster_files_must_be_regular_and_bounded() {
    let d = tempfile::tempdir().unwrap();
    assert!(matches!(
        hardware::load_cluster(d.path()),
        Err(hardware::InventoryError::Invalid { .. })
    ));
    let big = d.path().join("big.yaml");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(hardware::cluster::MAX_CLUSTER_BYTES + 1).unwrap();
    let e = hardware::load_cluster(&big).unwrap_err();
    assert!(e.to_string().contains("big.yaml"), "{e}");
    #[cfg(unix)]
    {
        let fifo = d.path().join("fifo.yaml");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(matches!(
            hardware::load_cluster(&fifo),
            Err(hardware::InventoryError::Invalid { .. })
        ));
    }
    assert!(matches!(
        hardware::load_cluster(&d.path().join("missing.yaml")),
        Err(hardware::InventoryError::Io { .. })
    ));
}

/// Planning probes ask the CUDA driver (about 200 ms of `cuInit` on an H100 host) only for GPUs no profile
/// describes: a profiled GPU's SMs come from its profile, an unseen one's are needed to derive its TFLOPS.
#[test]
fn only_gpus_without_a_profile_need_the_cuda_drivers_details() {
    let set = builtin();
    let cloud = inventory("cloud-8xh100.yaml");
    assert!(cloud.gpus.iter().all(|g| set.describes(g)));
    // The RTX 5090 has a profile now; a part no profile names (as in the derivation test above) has none.
    let mut unseen = inventory("unseen-gpu.yaml").gpus[0].clone();
    unseen.name = "NVIDIA GeForce RTX 5095".into();
    unseen.pci_id = None;
    assert!(!set.describes(&unseen));
    // On a machine without an NVIDIA driver the scoped probe and the full one see the same devices.
    let full = hardware::probe_live();
    let scoped = hardware::probe_live_scoped(&|_| false);
    assert_eq!(full.gpus.len(), scoped.gpus.len());
    assert_eq!(full.cpu.model, scoped.cpu.model);
}

/// Inventories for GPUs no profile describes, inline rather than under tests/fixtures/inventories/ (every file
/// there is planned into Kubernetes manifests that must be validated by benches/kubernetes/validate.py).
///
/// A desktop with an AMD Radeon RX 6700 XT (Navi 22, 1002:73df), with the figures amdgpu's sysfs does not expose
/// written in: 40 compute units, 2581 MHz boost, a 192-bit bus at 16 Gbps (TechPowerUp GPU database, Radeon RX
/// 6700 XT: 12 GB GDDR6, 384.0 GB/s, 13.21 TFLOPS FP32).
const AMD_UNPROFILED: &str = "
cpu: {model: AMD Ryzen 7 5800X 8-Core Processor, vendor: AuthenticAMD, physical_cores: 8, logical_cpus: 16,
      features: [sse4.2, avx, avx2, fma, f16c]}
memory: {total_bytes: 34359738368, available_bytes: 30000000000}
gpus:
  - {index: 0, name: AMD Radeon RX 6700 XT, vendor: amd, memory_total_bytes: 12868124672,
     memory_free_bytes: 12600000000, pci_id: \"1002:73df\", sm_count: 40, max_sm_clock_mhz: 2581,
     memory_bus_width_bits: 192, memory_data_rate_mt_s: 16000, source: fixture}
";
/// The same card as the sysfs probe reports it: memory, the highest pp_dpm_sclk / pp_dpm_mclk levels (the clocks
/// illustrate the shape, not a measurement), no compute units, bus width or data rate.
const AMD_UNPROFILED_SYSFS: &str = "
cpu: {model: AMD Ryzen 7 5800X 8-Core Processor, vendor: AuthenticAMD, physical_cores: 8, logical_cpus: 16,
      features: [sse4.2, avx, avx2, fma, f16c]}
memory: {total_bytes: 34359738368, available_bytes: 30000000000}
gpus:
  - {index: 0, name: AMD Radeon RX 6700 XT, vendor: amd, memory_total_bytes: 12868124672,
     memory_free_bytes: 12600000000, memory_used_bytes: 268124672, pci_id: \"1002:73df\", max_sm_clock_mhz: 2725,
     max_memory_clock_mhz: 1000, source: sysfs}
";
/// A MacBook Pro with the 14-core-GPU Apple M3 Pro and 18 GiB, its GPU named with its core count.
const APPLE_M3_PRO_14C: &str = "
cpu: {model: Apple M3 Pro, vendor: Apple, physical_cores: 11, logical_cpus: 11, arch: aarch64,
      features: [neon, dotprod, fp16, i8mm, bf16]}
memory: {total_bytes: 19327352832, available_bytes: 14000000000, unified: true}
gpus:
  - {index: 0, name: Apple M3 Pro (14 GPU cores), vendor: apple, memory_total_bytes: 19327352832,
     memory_free_bytes: 14000000000, unified_memory: true, source: fixture}
";

fn inline(text: &str) -> Inventory {
    hardware::parse_inventory(text).unwrap_or_else(|e| panic!("{e}"))
}

fn resolve_one(g: &hardware::Gpu, set: &ProfileSet) -> Resolution<'static> {
    let hw: Vec<&HardwareProfile> = set.hardware.iter().map(|e| &e.value).collect();
    let archs: Vec<&ArchitectureRule> = set.architectures().collect();
    match resolve(g, &hw, &archs) {
        Resolution::Profile { profile, by } => Resolution::Derived {
            // The tests below only compare ids for matched profiles.
            profile: Box::new(profile.clone()),
            notes: vec![format!("matched by {by:?}")],
        },
        Resolution::Derived { profile, notes } => Resolution::Derived { profile, notes },
        Resolution::Heuristic {
            profile,
            basis,
            hint,
        } => Resolution::Heuristic {
            profile,
            basis,
            hint,
        },
        Resolution::Unresolved { notes } => Resolution::Unresolved { notes },
    }
}

/// Issue 27: an AMD card nobody profiled, with its compute units, shader clock, bus width and data rate given,
/// is derived from them (it used to take the NVIDIA path: "no architecture rule covers compute capability
/// (none)", no TFLOPS, prefill bounded by bandwidth only). RX 6700 XT: 192 bits × 16,000 MT/s / 8 = 384 GB/s and
/// 40 CUs × 64 × 2 × 2,581 MHz = 13.21 TFLOPS, TechPowerUp's own figures for the card.
#[test]
fn an_unprofiled_amd_gpu_is_derived_from_its_compute_units_clock_and_bus() {
    let set = builtin();
    let inv = inline(AMD_UNPROFILED);
    assert_eq!(
        resolved(&inv, &set),
        vec![("derived-amd-radeon-rx-6700-xt".into(), "derived")]
    );
    let Resolution::Derived { profile, notes } = resolve_one(&inv.gpus[0], &set) else {
        panic!("expected a derived profile");
    };
    assert!((profile.memory.bandwidth_gb_s - 384.0).abs() < 1e-9);
    let v = profile.vector_tflops.as_ref().unwrap();
    let want = 40.0 * 64.0 * 2.0 * 2581.0e6 / 1e12;
    assert!((v.fp32.unwrap() - want).abs() < 1e-9, "{v:?}");
    assert!((want - 13.21).abs() < 0.01);
    assert_eq!(
        optimizer::profile::matching::AMD_LANES_PER_CU,
        optimizer::perf::gpu::AMD_LANES_PER_CU
    );
    assert_eq!(v.fp16, v.fp32, "single issue, no packed FP16 assumed");
    assert_eq!(
        (profile.sms, profile.boost_clock_mhz),
        (Some(40), Some(2581))
    );
    assert_eq!(profile.vendor, optimizer::profile::Vendor::Amd);
    assert!(
        profile
            .sources
            .values()
            .all(|s| s.starts_with("derived") || s.starts_with("probe")),
        "{:?}",
        profile.sources
    );
    // The notes list the probe fields the figures came from.
    let all = notes.join("; ");
    for field in [
        "memory_bus_width_bits 192",
        "memory_data_rate_mt_s 16000",
        "sm_count 40",
        "max_sm_clock_mhz 2581",
    ] {
        assert!(all.contains(field), "{field}: {all}");
    }
    // A peak bandwidth in the inventory is used as given.
    let mut g = inv.gpus[0].clone();
    g.memory_bus_width_bits = None;
    g.peak_bandwidth_bytes_per_s = Some(400_000_000_000);
    let Resolution::Derived { profile, .. } = resolve_one(&g, &set) else {
        panic!("expected a derived profile");
    };
    assert!((profile.memory.bandwidth_gb_s - 400.0).abs() < 1e-9);
    // Bandwidth known, compute units not: still derived, TFLOPS unknown and said so.
    g.sm_count = None;
    let Resolution::Derived { profile, notes } = resolve_one(&g, &set) else {
        panic!("expected a derived profile");
    };
    assert!(profile.vector_tflops.is_none());
    assert!(
        notes.iter().any(|n| n.contains("compute units")),
        "{notes:?}"
    );
}

/// Issue 27: what the sysfs probe gives (clocks, no compute units or bus width) cannot derive a bandwidth, so the
/// card stays bounded by AMD's own profiled cards and is marked heuristic; compute units from the inventory add a
/// derived FP32/FP16 rate to the bound (it used to have none: prefill bounded by bandwidth only).
#[test]
fn an_amd_gpu_without_a_bandwidth_stays_heuristic_with_what_could_be_derived() {
    let set = builtin();
    let inv = inline(AMD_UNPROFILED_SYSFS);
    assert_eq!(
        resolved(&inv, &set),
        vec![("heuristic-amd-radeon-rx-6700-xt".into(), "heuristic")]
    );
    let Resolution::Heuristic { profile, basis, .. } = resolve_one(&inv.gpus[0], &set) else {
        panic!("expected a heuristic profile");
    };
    assert!(profile.vector_tflops.is_none());
    assert!(basis.contains("Amd devices"), "{basis}");
    // No AMD profile has as little as its 12 GiB, so the bound is the lowest AMD bandwidth of any size.
    assert!(basis.contains("none has as little memory"), "{basis}");
    let amd_lowest = set
        .hardware
        .iter()
        .map(|e| &e.value)
        .filter(|p| {
            p.vendor == optimizer::profile::Vendor::Amd && p.kind == profile::DeviceKind::Gpu
        })
        .map(|p| p.memory.bandwidth_gb_s)
        .fold(f64::INFINITY, f64::min);
    assert_eq!(profile.memory.bandwidth_gb_s, amd_lowest);

    let mut g = inv.gpus[0].clone();
    g.sm_count = Some(40);
    let Resolution::Heuristic { profile, basis, .. } = resolve_one(&g, &set) else {
        panic!("expected a heuristic profile");
    };
    let fp32 = profile.vector_tflops.as_ref().and_then(|v| v.fp32).unwrap();
    assert!(
        (fp32 - 40.0 * 64.0 * 2.0 * 2725.0e6 / 1e12).abs() < 1e-9,
        "{fp32}"
    );
    assert!(basis.contains("sm_count 40"), "{basis}");
    assert!(profile.sources["vector_tflops"].starts_with("derived"));
    assert!(profile.sources["memory.bandwidth_gb_s"].starts_with("heuristic"));
}

/// Issue 27: an Apple GPU's core count (from its name or `sm_count`) picks the profile of its bin, or scales the
/// FP rate to its cores at the family clock the profile sources; the name alone keeps the profile.
#[test]
fn an_apple_gpu_core_count_picks_its_bin_or_derives_the_rate() {
    use optimizer::profile::matching::{APPLE_FP32_LANES_PER_CORE, apple_bin, apple_gpu_cores};
    let set = builtin();
    // Every Apple profile's rate is its sourced bin: cores × 128 × 2 × MHz, to the 2 decimals it is written with.
    let apple: Vec<&HardwareProfile> = set
        .hardware
        .iter()
        .map(|e| &e.value)
        .filter(|p| p.vendor == optimizer::profile::Vendor::Apple)
        .collect();
    assert!(apple.len() >= 17);
    for p in &apple {
        let (cores, mhz) = apple_bin(p).unwrap_or_else(|| panic!("{}: no sourced bin", p.id));
        let want = f64::from(cores) * APPLE_FP32_LANES_PER_CORE * 2.0 * f64::from(mhz) / 1e6;
        let have = p.vector_tflops.as_ref().and_then(|v| v.fp16).unwrap();
        assert!((have - want).abs() < 0.006, "{}: {have} vs {want}", p.id);
    }

    let base = inventory("apple-m2-max.yaml").gpus[0].clone();
    let named = |name: &str| {
        let mut g = base.clone();
        g.name = name.into();
        g
    };
    assert_eq!(
        apple_gpu_cores(&named("Apple M2 Max 38-core GPU")),
        Some(38)
    );
    assert_eq!(
        apple_gpu_cores(&named("Apple M3 Max (40 GPU cores)")),
        Some(40)
    );
    assert_eq!(apple_gpu_cores(&named("Apple M2 Max")), None);

    let id = |g: &hardware::Gpu| match resolve_one(g, &set) {
        Resolution::Derived { profile, .. } => profile.id.clone(),
        other => panic!("{other:?}"),
    };
    // The 30-core M3 Max has its own profile (300 GB/s); the name used to match the 40-core one.
    assert_eq!(
        id(&named("Apple M3 Max (30 GPU cores)")),
        "apple-m3-max-30c-gpu"
    );
    assert_eq!(id(&named("Apple M3 Max (40 GPU cores)")), "apple-m3-max");
    assert_eq!(id(&named("Apple M3 Max")), "apple-m3-max");

    // A 14-core M3 Pro: no profile of that bin, so 14 × 128 × 2 × 1380 MHz = 4.95 TFLOPS (the profile's 18-core
    // bin has 6.36); bandwidth and working set stay the profile's.
    let inv = inline(APPLE_M3_PRO_14C);
    assert_eq!(
        resolved(&inv, &set),
        vec![("derived-apple-m3-pro-14c-gpu".into(), "derived")]
    );
    let Resolution::Derived { profile, notes } = resolve_one(&inv.gpus[0], &set) else {
        panic!("expected a derived profile");
    };
    let fp16 = profile.vector_tflops.as_ref().and_then(|v| v.fp16).unwrap();
    assert!(
        (fp16 - 14.0 * 128.0 * 2.0 * 1380.0e6 / 1e12).abs() < 1e-9,
        "{fp16}"
    );
    let m3_pro = &set.hardware("apple-m3-pro").unwrap().value;
    assert_eq!(profile.memory.bandwidth_gb_s, m3_pro.memory.bandwidth_gb_s);
    assert_eq!(profile.gpu_working_set, m3_pro.gpu_working_set);
    assert!(
        notes[0].contains("14 GPU cores") && notes[0].contains("18-core bin"),
        "{notes:?}"
    );
    // The inventory's `sm_count` gives the cores as well.
    let mut g = named("Apple M3 Pro");
    g.sm_count = Some(14);
    assert_eq!(id(&g), "derived-apple-m3-pro-14c-gpu");
}

/// Issue 27: the resolved document says `derived` for figures computed from a GPU's own fields and `heuristic`
/// for bounds taken from other cards.
#[test]
fn the_document_says_derived_or_heuristic_for_an_unprofiled_gpu() {
    use crate::common::{plan, synth};
    use optimizer::plan::Overrides;
    use optimizer_testkit::gguf_builder::LlamaShape;
    let set = builtin();
    let dir = tempfile::tempdir().unwrap();
    let (_, m8) = synth(dir.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    for (file, inv, basis) in [
        ("AMD_UNPROFILED", inline(AMD_UNPROFILED), "derived"),
        (
            "AMD_UNPROFILED_SYSFS",
            inline(AMD_UNPROFILED_SYSFS),
            "heuristic",
        ),
        ("APPLE_M3_PRO_14C", inline(APPLE_M3_PRO_14C), "derived"),
        ("amd-radeon.yaml", inventory("amd-radeon.yaml"), "profile"),
    ] {
        let d = plan(&m8, "m.gguf", &inv, &set, "chat", &Overrides::default())
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        let g = &d.hardware.gpus[0];
        assert_eq!(g.basis, basis, "{file}: {}", g.profile);
        let yaml = optimizer::yaml::to_string(&d).unwrap();
        assert!(yaml.contains(&format!("basis: {basis}")), "{file}");
    }
}
