//! Profile validation: the built-in set is valid, and one planted invalid profile per check is refused with a
//! diagnostic naming the file, the instance path and the defect.

use std::path::{Path, PathBuf};

use optimizer::profile::{self, Diagnostic, ProfileKind, SourceFile, validate::validate_files};

/// A valid GPU profile, consistent with the architecture table below (128 SMs × 2,520 MHz × 512 = 165.2).
const GPU: &str = r#"
id: test-gpu
name: Test GPU 9000
vendor: nvidia
kind: gpu
architecture: test-arch
match: {pci_ids: ["10de:9999"], name_contains: ["Test GPU 9000"]}
memory: {size_bytes: 25769803776, type: GDDR6X, bandwidth_gb_s: 1008, bus_width_bits: 384}
compute_capability: "8.9"
sms: 128
boost_clock_mhz: 2520
tensor_tflops: {fp16_fp32acc: 165.2, fp16_fp16acc: 330.3}
features: [bf16]
tdp_w: 450
sources:
  memory: "test datasheet"
  sms: "test datasheet"
  boost_clock_mhz: "test datasheet"
  tensor_tflops: "derived: SMs x clock x rate"
  tdp_w: "test datasheet"
"#;

const ARCH: &str = r#"
kind: gpu-architectures
id: gpu-architectures
rules:
  - id: test-arch
    name: Test
    compute_capability: {min: "8.9", max: "8.9"}
    fp16_fp32acc_flops_per_clock_per_sm: 512
    fp16_fp16acc_flops_per_clock_per_sm: 1024
    fp32_flops_per_clock_per_sm: 256
    memory_transfers_per_clock: 2
    features: [bf16]
    why: test
    source: test
"#;

const WORKLOAD: &str = r#"
id: test-chat
description: test
mode: inference
objective: balanced
context: {policy: fixed, tokens: 8192}
concurrency: 4
prompt_tokens: 1024
generation_tokens: 256
sla: {time_per_output_token_ms: 50}
sources:
  context: "why 8192"
  concurrency: "why 4"
  prompt_tokens: "why"
  generation_tokens: "why"
  sla: "why"
"#;

fn file(kind: ProfileKind, name: &str, text: &str) -> SourceFile {
    SourceFile {
        origin: profile::Origin {
            path: format!("{}/{name}.yaml", kind.dir()),
            builtin: false,
        },
        kind: Some(kind),
        text: text.to_string(),
    }
}

fn check(files: Vec<SourceFile>) -> Vec<Diagnostic> {
    validate_files(&files, false).1
}

fn base(gpu: &str) -> Vec<SourceFile> {
    vec![
        file(ProfileKind::Rules, "gpu-architectures", ARCH),
        file(ProfileKind::Hardware, "test-gpu", gpu),
    ]
}

/// Asserts exactly the planted defect is reported: one diagnostic whose path, instance path and message match.
fn expect_one(diags: &[Diagnostic], path: &str, instance: &str, needle: &str) {
    assert!(
        diags.iter().any(|d| d.path.ends_with(path)
            && d.instance_path.starts_with(instance)
            && d.message.contains(needle)),
        "expected {path} {instance} {needle:?}, got {diags:#?}"
    );
}

#[test]
fn the_planted_baseline_is_valid() {
    let mut files = base(GPU);
    files.push(file(ProfileKind::Workload, "test-chat", WORKLOAD));
    assert_eq!(check(files), vec![]);
}

#[test]
fn the_builtin_set_is_valid() {
    let files = profile::builtin_files();
    let (set, diags) = validate_files(&files, true);
    assert!(
        diags.is_empty(),
        "{}",
        diags
            .iter()
            .map(|d| d.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(
        set.hardware.len() + set.workloads.len() + set.rules.len() + set.nodes.len(),
        files.len()
    );
}

#[test]
fn unknown_field_is_a_schema_error() {
    let d = check(base(&format!("{GPU}colour: red\n")));
    expect_one(&d, "hardware/test-gpu.yaml", "/", "colour");
}

#[test]
fn wrong_type_is_reported_at_its_instance_path() {
    let d = check(base(&GPU.replace("sms: 128", "sms: many")));
    expect_one(&d, "test-gpu.yaml", "/sms", "");
}

#[test]
fn every_schema_error_is_reported_not_just_the_first() {
    let bad = GPU
        .replace("sms: 128", "sms: many")
        .replace("tdp_w: 450", "tdp_w: hot");
    let d = check(base(&bad));
    expect_one(&d, "test-gpu.yaml", "/sms", "");
    expect_one(&d, "test-gpu.yaml", "/tdp_w", "");
}

#[test]
fn number_without_source() {
    let d = check(base(&GPU.replace("  tdp_w: \"test datasheet\"\n", "")));
    expect_one(&d, "test-gpu.yaml", "/tdp_w", "no source");
}

#[test]
fn source_for_a_field_that_does_not_exist() {
    let d = check(base(
        &GPU.replace("sources:\n", "sources:\n  clock_mhz: \"made up\"\n"),
    ));
    expect_one(&d, "test-gpu.yaml", "/sources/clock_mhz", "not a field");
}

#[test]
fn non_positive_number() {
    let d = check(base(
        &GPU.replace("bandwidth_gb_s: 1008", "bandwidth_gb_s: 0"),
    ));
    expect_one(&d, "test-gpu.yaml", "/memory/bandwidth_gb_s", "positive");
}

/// A usable memory figure above the nominal size, or far below it (a typo in the digits), is refused; one in
/// between passes.
#[test]
fn usable_memory_must_lie_between_nine_tenths_and_all_of_the_size() {
    let with = |u: &str| {
        GPU.replace(
            "memory: {size_bytes: 25769803776,",
            &format!("memory: {{size_bytes: 25769803776, usable_bytes: {u},"),
        )
    };
    for bad in ["25769803777", "2538635264"] {
        let d = check(base(&with(bad)));
        expect_one(
            &d,
            "test-gpu.yaml",
            "/memory/usable_bytes",
            "must lie between",
        );
    }
    assert!(check(base(&with("25386352640"))).is_empty());
}

#[test]
fn id_must_match_file_name() {
    let d = check(base(&GPU.replace("id: test-gpu", "id: other-gpu")));
    expect_one(&d, "test-gpu.yaml", "/id", "differs from the file name");
}

#[test]
fn id_must_be_kebab_case() {
    let files = vec![
        file(ProfileKind::Rules, "gpu-architectures", ARCH),
        file(
            ProfileKind::Hardware,
            "Test_GPU",
            &GPU.replace("id: test-gpu", "id: Test_GPU"),
        ),
    ];
    expect_one(&check(files), "Test_GPU.yaml", "/id", "lower-kebab-case");
}

#[test]
fn duplicate_ids() {
    let mut files = base(GPU);
    let mut again = file(ProfileKind::Hardware, "test-gpu", GPU);
    again.origin.path = "other/hardware/test-gpu.yaml".into();
    files.push(again);
    expect_one(
        &check(files),
        "other/hardware/test-gpu.yaml",
        "/id",
        "duplicate id",
    );
}

#[test]
fn tflops_inconsistent_with_sms_and_clock() {
    let d = check(base(
        &GPU.replace("fp16_fp32acc: 165.2", "fp16_fp32acc: 200"),
    ));
    expect_one(
        &d,
        "test-gpu.yaml",
        "/tensor_tflops/fp16_fp32acc",
        "disagrees",
    );
}

#[test]
fn overlapping_match_rules() {
    let mut files = base(GPU);
    let twin = GPU
        .replace("id: test-gpu", "id: test-gpu-twin")
        .replace("name: Test GPU 9000", "name: Test GPU 9000 Twin");
    files.push(file(ProfileKind::Hardware, "test-gpu-twin", &twin));
    expect_one(&check(files), "test-gpu.yaml", "/match", "overlap");
}

#[test]
fn a_profile_that_does_not_match_its_own_device() {
    let d = check(base(&GPU.replace(
        "match: {pci_ids: [\"10de:9999\"], name_contains: [\"Test GPU 9000\"]}",
        "match: {name_contains: [\"Other GPU\"]}",
    )));
    expect_one(
        &d,
        "test-gpu.yaml",
        "/match",
        "does not match this profile's own rules",
    );
}

#[test]
fn unknown_architecture() {
    let d = check(base(
        &GPU.replace("architecture: test-arch", "architecture: nope"),
    ));
    expect_one(&d, "test-gpu.yaml", "/architecture", "unknown architecture");
}

#[test]
fn malformed_pci_id_and_capability() {
    let d = check(base(&GPU.replace("10de:9999", "10DE-9999").replace(
        "compute_capability: \"8.9\"",
        "compute_capability: \"eight\"",
    )));
    expect_one(&d, "test-gpu.yaml", "/match/pci_ids/0", "PCI id");
    expect_one(&d, "test-gpu.yaml", "/compute_capability", "MAJOR.MINOR");
}

#[test]
fn gpu_without_memory_size() {
    let d = check(base(&GPU.replace("size_bytes: 25769803776, ", "")));
    expect_one(&d, "test-gpu.yaml", "/memory", "size_bytes");
}

#[test]
fn invalid_yaml_names_the_line() {
    let d = check(base("id: [unclosed\n"));
    expect_one(&d, "test-gpu.yaml", "", "invalid YAML");
}

#[test]
fn alias_bomb_is_refused() {
    let mut bomb = String::from(
        "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
    );
    for (i, prev) in ["a", "b", "c", "d", "e", "f", "g", "h"].iter().enumerate() {
        let name = ["b", "c", "d", "e", "f", "g", "h", "i"][i];
        bomb.push_str(&format!("{name}: &{name} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]\n"));
    }
    let d = check(base(&bomb));
    expect_one(&d, "test-gpu.yaml", "", "invalid YAML");
}

#[test]
fn deeply_nested_document_is_refused() {
    let deep = format!("id: {}1{}\n", "[".repeat(100_000), "]".repeat(100_000));
    let d = check(base(&deep));
    expect_one(&d, "test-gpu.yaml", "", "invalid YAML");
}

#[test]
fn training_section_only_on_training_workloads() {
    let bad = format!(
        "{WORKLOAD}training: {{optimizer: adamw, micro_batch: 1, sequence_length: 2048, gradient_checkpointing: true}}\n"
    );
    let d = check(vec![file(ProfileKind::Workload, "test-chat", &bad)]);
    expect_one(
        &d,
        "workloads/test-chat.yaml",
        "/training",
        "only fine-tune and training",
    );
}

#[test]
fn rule_table_defects() {
    let dup = ARCH.to_string() + &ARCH[ARCH.find("  - id").unwrap()..];
    expect_one(
        &check(vec![file(ProfileKind::Rules, "gpu-architectures", &dup)]),
        "rules/gpu-architectures.yaml",
        "/rules/1/id",
        "duplicate rule id",
    );
    let inverted = ARCH.replace(
        "{min: \"8.9\", max: \"8.9\"}",
        "{min: \"9.0\", max: \"8.0\"}",
    );
    expect_one(
        &check(vec![file(
            ProfileKind::Rules,
            "gpu-architectures",
            &inverted,
        )]),
        "gpu-architectures.yaml",
        "/rules/0/compute_capability",
        "min is above max",
    );
    let reserves = r#"
kind: memory-reserves
id: memory-reserves
rules:
  - {id: gpu-safety, device: gpu, runtime: any, fixed_bytes: 0, fraction: 1.5, why: test, source: test}
"#;
    expect_one(
        &check(vec![file(ProfileKind::Rules, "memory-reserves", reserves)]),
        "memory-reserves.yaml",
        "/rules/0/fraction",
        "[0, 1)",
    );
}

fn bin() -> std::process::Command {
    std::process::Command::new(env!("CARGO_BIN_EXE_optimizer"))
}

fn write_tree(root: &Path, files: &[(&str, &str)]) {
    for (rel, text) in files {
        let p: PathBuf = root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
}

#[test]
fn validate_command_exits_4_with_every_diagnostic_on_stderr() {
    let d = tempfile::tempdir().unwrap();
    let bad = GPU
        .replace("sms: 128", "sms: many")
        .replace("  tdp_w: \"test datasheet\"\n", "");
    write_tree(
        d.path(),
        &[
            ("rules/gpu-architectures.yaml", ARCH),
            ("hardware/test-gpu.yaml", &bad),
        ],
    );
    let o = bin()
        .args(["profiles", "validate"])
        .arg(d.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(4));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("hardware/test-gpu.yaml: /sms:"), "{err}");
    assert!(o.stdout.is_empty());

    let good = tempfile::tempdir().unwrap();
    write_tree(
        good.path(),
        &[
            ("rules/gpu-architectures.yaml", ARCH),
            ("hardware/test-gpu.yaml", GPU),
            ("workloads/test-chat.yaml", WORKLOAD),
        ],
    );
    let o = bin()
        .args(["profiles", "validate"])
        .arg(good.path())
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("3 files valid"));
}

#[test]
fn user_overlay_overrides_a_builtin_and_says_so() {
    let builtin = profile::builtin_files();
    let Some(w) = builtin
        .iter()
        .find(|f| f.kind == Some(ProfileKind::Workload))
    else {
        return; // no built-in workloads yet: nothing to override
    };
    let id = w
        .origin
        .path
        .trim_start_matches("builtin:workloads/")
        .trim_end_matches(".yaml")
        .to_string();
    let d = tempfile::tempdir().unwrap();
    write_tree(d.path(), &[(&format!("workloads/{id}.yaml"), &w.text)]);
    let o = bin()
        .args(["--profiles"])
        .arg(d.path())
        .args(["profiles", "list"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("overrides builtin:workloads/"), "{out}");
}

#[test]
fn nan_and_infinity_are_refused_not_read_as_absent() {
    // Regression: `.nan` became JSON null, which an optional field reads as absent, so the profile was valid.
    let d = check(base(&GPU.replace("tdp_w: 450", "tdp_w: .nan")));
    expect_one(
        &d,
        "hardware/test-gpu.yaml",
        "/tdp_w",
        "not a finite number",
    );
    let d = check(base(
        &GPU.replace("bandwidth_gb_s: 1008", "bandwidth_gb_s: -.inf"),
    ));
    expect_one(
        &d,
        "hardware/test-gpu.yaml",
        "/memory/bandwidth_gb_s",
        "not a finite number",
    );
    let w = WORKLOAD.replace(
        "sla: {time_per_output_token_ms: 50}",
        "sla: {time_per_output_token_ms: .inf}",
    );
    let d = check(vec![file(ProfileKind::Workload, "test-chat", &w)]);
    expect_one(
        &d,
        "workloads/test-chat.yaml",
        "/sla/time_per_output_token_ms",
        "not a finite number",
    );
    let rules = "kind: memory-reserves\nid: memory-reserves\nrules:\n  - {id: cpu-nan, device: cpu, runtime: any, fixed_bytes: 0, fraction: .NaN, why: t, source: t}\n";
    let d = check(vec![file(ProfileKind::Rules, "memory-reserves", rules)]);
    expect_one(
        &d,
        "rules/memory-reserves.yaml",
        "/rules/0/fraction",
        "not a finite number",
    );
}

#[test]
fn workload_concurrency_beyond_the_limit_is_refused() {
    // Regression: concurrency 2^32 + 1 was planned as `-np 1` (truncated to u32, then max(1)).
    let w = WORKLOAD.replace("concurrency: 4", "concurrency: 4294967297");
    let d = check(vec![file(ProfileKind::Workload, "test-chat", &w)]);
    expect_one(
        &d,
        "workloads/test-chat.yaml",
        "/concurrency",
        "exceeds the limit of 256",
    );
    let ok = WORKLOAD.replace("concurrency: 4", "concurrency: 256");
    assert_eq!(
        check(vec![file(ProfileKind::Workload, "test-chat", &ok)]),
        vec![]
    );
}

#[test]
fn every_workload_number_is_bounded() {
    let max = optimizer::profile::validate::MAX_CONTEXT_TOKENS + 1;
    let cases: Vec<(String, &str, &str)> = vec![
        (
            WORKLOAD.replace("tokens: 8192}", &format!("tokens: {max}}}")),
            "/context/tokens",
            "exceeds the limit",
        ),
        (
            WORKLOAD.replace(
                "{policy: fixed, tokens: 8192}",
                &format!("{{policy: largest-fit, floor: {max}}}"),
            ),
            "/context/floor",
            "exceeds the limit",
        ),
        (
            WORKLOAD.replace("prompt_tokens: 1024", &format!("prompt_tokens: {max}")),
            "/prompt_tokens",
            "exceeds the limit",
        ),
        (
            WORKLOAD.replace(
                "generation_tokens: 256",
                &format!("generation_tokens: {max}"),
            ),
            "/generation_tokens",
            "exceeds the limit",
        ),
        (
            WORKLOAD.replace("prompt_tokens: 1024", "prompt_tokens: 8000"),
            "/context/tokens",
            "cannot hold a typical request",
        ),
        (
            WORKLOAD.replace(
                "time_per_output_token_ms: 50",
                "time_per_output_token_ms: 0",
            ),
            "/sla/time_per_output_token_ms",
            "positive",
        ),
        (
            WORKLOAD.replace(
                "time_per_output_token_ms: 50",
                "time_per_output_token_ms: 1e12",
            ),
            "/sla/time_per_output_token_ms",
            "exceeds the limit",
        ),
        (
            WORKLOAD.replace("concurrency: 4", "concurrency: 0"),
            "/concurrency",
            "positive",
        ),
    ];
    for (text, at, needle) in cases {
        let d = check(vec![file(ProfileKind::Workload, "test-chat", &text)]);
        expect_one(&d, "workloads/test-chat.yaml", at, needle);
    }
    let train = |micro: u64, rank: u64| {
        WORKLOAD.replace("mode: inference", "mode: fine-tune")
            + &format!(
                "training: {{optimizer: adamw, micro_batch: {micro}, sequence_length: 2048, gradient_checkpointing: true, lora_rank: {rank}}}\n"
            )
    };
    let d = check(vec![file(
        ProfileKind::Workload,
        "test-chat",
        &train(4097, 8),
    )]);
    expect_one(
        &d,
        "test-chat.yaml",
        "/training/micro_batch",
        "exceeds the limit",
    );
    let d = check(vec![file(
        ProfileKind::Workload,
        "test-chat",
        &train(8, 16_385),
    )]);
    expect_one(
        &d,
        "test-chat.yaml",
        "/training/lora_rank",
        "exceeds the limit",
    );
}

/// One file reached by several names (symbolic links, a hard link, the same path twice) is read once, under
/// the first of its names in sorted order (issue 24: 3,000 links to one 1 MB profile were 3,000 reads).
#[test]
fn a_file_reached_by_several_names_is_read_once() {
    let dir = tempfile::tempdir().unwrap();
    let hw = dir.path().join("hardware");
    std::fs::create_dir_all(&hw).unwrap();
    let real = hw.join("test-gpu.yaml");
    std::fs::write(&real, GPU).unwrap();
    for i in 0..50 {
        let d = dir.path().join(format!("links/d{i:02}"));
        std::fs::create_dir_all(&d).unwrap();
        std::os::unix::fs::symlink(&real, d.join("test-gpu.yaml")).unwrap();
    }
    std::fs::hard_link(&real, dir.path().join("links/hard.yaml")).unwrap();
    let (files, diags) = profile::read_paths(&[
        dir.path().to_path_buf(),
        real.clone(),
        dir.path().join("links"),
    ]);
    assert!(diags.is_empty(), "{diags:?}");
    assert_eq!(
        files.len(),
        1,
        "{:?}",
        files.iter().map(|f| &f.origin.path).collect::<Vec<_>>()
    );
    assert_eq!(files[0].origin.path, real.display().to_string());
}

/// Past [`profile::MAX_OVERLAY_FILES`] distinct files the overlay is refused naming its directory, and the files
/// beyond are not read.
#[test]
fn more_overlay_files_than_the_cap_are_refused_naming_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().join("workloads");
    std::fs::create_dir_all(&w).unwrap();
    for i in 0..=profile::MAX_OVERLAY_FILES {
        std::fs::write(w.join(format!("w{i:04}.yaml")), "id: x\n").unwrap();
    }
    let (files, diags) = profile::read_paths(&[dir.path().to_path_buf()]);
    assert_eq!(files.len(), profile::MAX_OVERLAY_FILES);
    assert_eq!(diags.len(), 1, "{diags:?}");
    assert_eq!(diags[0].path, dir.path().display().to_string());
    assert!(
        diags[0].message.contains(&format!(
            "more than {} distinct profile files",
            profile::MAX_OVERLAY_FILES
        )),
        "{}",
        diags[0].message
    );
}

/// A node profile naming [`GPU`]: 2 of them, 16 cores, 128 GiB, PCIe Gen4 x16.
const NODE: &str = r#"
id: test-node
name: Test Node
gpus: {profile: test-gpu, count: 2}
host: {cpu: Test CPU, physical_cores: 16, logical_cpus: 32, memory_bytes: 137438953472}
interconnect: {kind: pcie, pcie_gen: 4, pcie_lanes: 16}
sources:
  gpus.count: "test spec sheet"
  host: "test spec sheet"
  interconnect: "test spec sheet"
"#;

/// Node profiles are checked like the other kinds (schema, sources, limits) and against the set: the GPU
/// profile they name must be in force (the diagnostic names the node and the GPU id), the interconnect must
/// state what its kind needs, and fewer logical CPUs than cores is refused.
#[test]
fn node_profile_defects() {
    let node = |text: &str| {
        let mut files = base(GPU);
        files.push(file(ProfileKind::Node, "test-node", text));
        check(files)
    };
    assert_eq!(node(NODE), vec![]);
    let d = node(&NODE.replace("profile: test-gpu", "profile: no-such-gpu"));
    expect_one(
        &d,
        "nodes/test-node.yaml",
        "/gpus/profile",
        "\"no-such-gpu\"",
    );
    assert!(d[0].message.contains("\"test-node\""), "{d:?}");
    expect_one(
        &node(&NODE.replace("pcie_gen: 4, ", "")),
        "nodes/test-node.yaml",
        "/interconnect",
        "pcie_gen and pcie_lanes",
    );
    expect_one(
        &node(&NODE.replace("logical_cpus: 32", "logical_cpus: 8")),
        "nodes/test-node.yaml",
        "/host/logical_cpus",
        "fewer than the 16 physical cores",
    );
    expect_one(
        &node(&NODE.replace("  host: \"test spec sheet\"\n", "")),
        "nodes/test-node.yaml",
        "/host/physical_cores",
        "no source",
    );
    expect_one(
        &node(&NODE.replace("count: 2", "count: 65")),
        "nodes/test-node.yaml",
        "/gpus/count",
        "at most 64",
    );
    expect_one(
        &node(&NODE.replace("name: Test Node", "name: Test Node\nram: 1")),
        "nodes/test-node.yaml",
        "/",
        "ram",
    );
}
