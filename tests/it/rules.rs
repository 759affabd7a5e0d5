//! Rule tables: the overlay semantics (a table with a built-in id replaces it; rows of one kind from several
//! tables merge; a rule id or a case answered twice is an error naming both files), checked reserve arithmetic,
//! and the typed queries the planner reads (a llama.cpp plan gets llama.cpp or runtime-neutral rules only).

use std::path::Path;

use optimizer::profile::validate::{MAX_RESERVE_FIXED_BYTES, validate_files};
use optimizer::profile::{
    self, AttentionKernel, Diagnostic, Entry, Objective, Origin, Phase, Precision, ProfileKind,
    ProfileSet, ReserveRole, ReserveRule, ReserveTarget, RuleError, RuleTable, RuntimeId,
    SourceFile,
};

const GIB: u64 = 1 << 30;

fn user(name: &str, text: &str) -> SourceFile {
    SourceFile {
        origin: Origin {
            path: format!("user/rules/{name}.yaml"),
            builtin: false,
        },
        kind: Some(ProfileKind::Rules),
        text: text.to_string(),
    }
}

/// The built-in set overlaid by `files`.
fn overlay(files: Vec<SourceFile>) -> (ProfileSet, Vec<Diagnostic>) {
    let mut all = profile::builtin_files();
    all.extend(files);
    validate_files(&all, true)
}

fn valid(files: Vec<SourceFile>) -> ProfileSet {
    let (set, diags) = overlay(files);
    assert!(diags.is_empty(), "{diags:#?}");
    set
}

fn expect(diags: &[Diagnostic], path: &str, instance: &str, needles: &[&str]) {
    assert!(
        diags.iter().any(|d| d.path == path
            && d.instance_path.starts_with(instance)
            && needles.iter().all(|n| d.message.contains(n))),
        "expected {path} {instance} {needles:?}, got {diags:#?}"
    );
}

fn builtin() -> ProfileSet {
    valid(vec![])
}

#[test]
fn a_table_with_a_builtin_id_replaces_the_builtin_table() {
    let set = valid(vec![user(
        "memory-reserves",
        r#"
kind: memory-reserves
id: memory-reserves
rules:
  - {id: cpu-big-reserve, device: cpu, runtime: any, fixed_bytes: 4294967296, fraction: 0.0, why: test, source: test}
"#,
    )]);
    let e = set
        .rules
        .iter()
        .find(|e| e.origin.path == "user/rules/memory-reserves.yaml")
        .unwrap();
    assert_eq!(
        e.overrides.as_ref().map(|o| o.path.as_str()),
        Some("builtin:rules/memory-reserves.yaml")
    );
    // Only the replacing table's rows are in force: the built-in 2 GiB OS reserve and the CUDA context are gone.
    assert_eq!(
        set.reserve(ReserveTarget::Cpu, RuntimeId::LlamaCpp, 64 * GIB),
        Ok((4 * GIB, vec!["cpu-big-reserve".to_string()]))
    );
    assert_eq!(set.llama_cpp_gpu_overhead(), (0, None));
}

#[test]
fn rows_of_one_kind_from_several_tables_are_merged() {
    // Regression: the planner read the first efficiency table only, so a second one was silently ignored.
    let set = valid(vec![user(
        "efficiency-torch",
        r#"
kind: efficiency
id: efficiency-torch
rules:
  - {id: gpu-decode-torch, device: gpu, runtime: torch, phase: decode, efficiency: 0.7, why: test, source: test}
"#,
    )]);
    let v = set
        .efficiency(ReserveTarget::Gpu, RuntimeId::Torch, Phase::Decode, None)
        .unwrap();
    assert_eq!(v.id, "gpu-decode-torch");
    let l = set
        .efficiency(ReserveTarget::Gpu, RuntimeId::LlamaCpp, Phase::Decode, None)
        .unwrap();
    assert_eq!(l.id, "gpu-decode-llama-cpp");
    // vLLM has no prefill row of its own and no `any` row applies: none, not llama.cpp's.
    assert!(
        set.efficiency(ReserveTarget::Gpu, RuntimeId::Vllm, Phase::Prefill, None)
            .is_none()
    );
}

#[test]
fn a_runtime_row_is_preferred_to_an_any_row() {
    let set = valid(vec![user(
        "efficiency-any",
        r#"
kind: efficiency
id: efficiency-any
rules:
  - {id: gpu-decode-any, device: gpu, runtime: any, phase: decode, efficiency: 0.4, why: test, source: test}
"#,
    )]);
    let q = |r| {
        set.efficiency(ReserveTarget::Gpu, r, Phase::Decode, None)
            .map(|x| x.id.as_str())
    };
    assert_eq!(q(RuntimeId::LlamaCpp), Some("gpu-decode-llama-cpp"));
    assert_eq!(q(RuntimeId::Vllm), Some("gpu-decode-vllm"));
    assert_eq!(q(RuntimeId::Torch), Some("gpu-decode-any"));
}

#[test]
fn a_rule_id_defined_in_two_tables_is_an_error_naming_both_files() {
    let (_, d) = overlay(vec![user(
        "my-reserves",
        r#"
kind: memory-reserves
id: my-reserves
rules:
  - {id: cpu-os-reserve, device: gpu, runtime: vllm, fixed_bytes: 1, fraction: 0.0, why: test, source: test}
"#,
    )]);
    expect(
        &d,
        "user/rules/my-reserves.yaml",
        "/rules/0/id",
        &["\"cpu-os-reserve\"", "builtin:rules/memory-reserves.yaml"],
    );
}

#[test]
fn a_rule_id_is_unique_across_kinds_too() {
    let (_, d) = overlay(vec![user(
        "threads-extra",
        r#"
kind: cpu-threads
id: threads-extra
rules:
  - {id: hopper, objective: latency, threads_per_core: 1, reserve_cores: 0, why: test}
"#,
    )]);
    expect(
        &d,
        "user/rules/threads-extra.yaml",
        "/rules/0/id",
        &["\"hopper\"", "builtin:rules/gpu-architectures.yaml"],
    );
}

#[test]
fn two_rows_answering_one_case_conflict_across_tables() {
    let (_, d) = overlay(vec![user(
        "efficiency-mine",
        r#"
kind: efficiency
id: efficiency-mine
rules:
  - {id: my-gpu-decode, device: gpu, runtime: llama.cpp, phase: decode, efficiency: 0.6, why: test, source: test}
"#,
    )]);
    expect(
        &d,
        "user/rules/efficiency-mine.yaml",
        "/rules/0",
        &[
            "\"my-gpu-decode\"",
            "\"gpu-decode-llama-cpp\"",
            "builtin:rules/efficiency.yaml",
        ],
    );
}

#[test]
fn conflicting_threads_precision_attention_overhead_and_kv_rows() {
    let cases = [
        (
            "threads-mine",
            "kind: cpu-threads\nid: threads-mine\nrules:\n  - {id: my-latency, objective: latency, threads_per_core: 1, reserve_cores: 0, why: t}\n",
            "latency-physical-minus-one",
        ),
        (
            "precision-mine",
            "kind: precision\nid: precision-mine\nrules:\n  - {id: my-bf16, runtime: llama.cpp, device: gpu, compute_capability: {min: \"8.0\"}, precision: bf16, tf32: false, why: t}\n",
            "llama-cpp-cuda-fp16",
        ),
        (
            "attention-mine",
            "kind: attention\nid: attention-mine\nrules:\n  - {id: my-fa, runtime: llama.cpp, device: cpu, kernel: llama-cpp-fattn-cpu, why: t}\n",
            "llama-cpp-fattn-cpu",
        ),
        (
            "reserves-mine",
            "kind: memory-reserves\nid: reserves-mine\nrules:\n  - {id: my-ctx, device: gpu, runtime: llama.cpp, role: runtime-overhead, fixed_bytes: 1, fraction: 0.0, why: t, source: t}\n",
            "gpu-llama-cpp-cuda-context",
        ),
        (
            "kv-mine",
            "kind: kv-cache\nid: kv-mine\nrules:\n  - {id: my-q8, runtime: llama.cpp, cache_type: Q8_0, perplexity_increase: 0.0, min_gain: 0.01, why: t, source: t}\n",
            "kv-cache-q8-0-llama-cpp",
        ),
    ];
    for (name, text, other) in cases {
        let (_, d) = overlay(vec![user(name, text)]);
        expect(
            &d,
            &format!("user/rules/{name}.yaml"),
            "/rules/0",
            &["conflicts with", other],
        );
    }
}

#[test]
fn rows_for_other_cases_do_not_conflict() {
    // Another runtime, another device, a disjoint range, a longer min_sequence: all merge.
    let set = valid(vec![user(
        "extra",
        r#"
kind: attention
id: extra
rules:
  - {id: vllm-fa3, runtime: vllm, device: gpu, compute_capability: {min: "9.0", max: "9.0"}, kernel: flash-attention-3, why: t}
  - {id: llama-long-cpu, runtime: llama.cpp, device: cpu, min_sequence: 65536, kernel: chunked, why: t}
"#,
    )]);
    assert_eq!(
        set.attention(RuntimeId::Vllm, Some((9, 0)), 1024)
            .map(|r| r.id.as_str()),
        Some("vllm-fa3")
    );
    assert_eq!(
        set.attention(RuntimeId::LlamaCpp, None, 100_000)
            .map(|r| r.id.as_str()),
        Some("llama-long-cpu")
    );
    assert_eq!(
        set.attention(RuntimeId::LlamaCpp, None, 4096)
            .map(|r| r.id.as_str()),
        Some("llama-cpp-fattn-cpu")
    );
}

#[test]
fn reserves_from_several_tables_add_up() {
    let set = valid(vec![user(
        "extra-reserves",
        r#"
kind: memory-reserves
id: extra-reserves
rules:
  - {id: cpu-sidecar, device: cpu, runtime: llama.cpp, fixed_bytes: 1073741824, fraction: 0.25, why: test, source: test}
  - {id: cpu-vllm-only, device: cpu, runtime: vllm, fixed_bytes: 1073741824, fraction: 0.0, why: test, source: test}
"#,
    )]);
    let (bytes, ids) = set
        .reserve(ReserveTarget::Cpu, RuntimeId::LlamaCpp, 16 * GIB)
        .unwrap();
    // builtin cpu-os-reserve 2 GiB + 1 GiB + 0.25 x 16 GiB
    assert_eq!(bytes, 2 * GIB + GIB + 4 * GIB);
    assert_eq!(ids, ["cpu-os-reserve", "cpu-sidecar"]);
}

#[test]
fn the_runtime_overhead_is_not_a_reserve() {
    let set = builtin();
    assert_eq!(
        set.llama_cpp_gpu_overhead(),
        (615_514_112, Some("gpu-llama-cpp-cuda-context"))
    );
    assert_eq!(
        set.reserve(ReserveTarget::Gpu, RuntimeId::LlamaCpp, 24 * GIB),
        Ok((GIB, vec!["gpu-llama-cpp-fit-margin".to_string()]))
    );
    // vLLM: the 150 MiB vLLM itself leaves beyond its profiled peak, whatever the GPU's size.
    assert_eq!(
        set.reserve(ReserveTarget::Gpu, RuntimeId::Vllm, 80 * GIB),
        Ok((150 << 20, vec!["gpu-vllm-redundancy-buffer".to_string()]))
    );
}

#[test]
fn a_huge_reserve_is_refused_not_wrapped() {
    // Regression: u64::MAX bytes added to the built-in 2 GiB wrapped to 2 GiB - 1.
    let (_, d) = overlay(vec![user(
        "huge",
        r#"
kind: memory-reserves
id: huge
rules:
  - {id: cpu-huge, device: cpu, runtime: any, fixed_bytes: 18446744073709551615, fraction: 0.0, why: test, source: test}
"#,
    )]);
    expect(
        &d,
        "user/rules/huge.yaml",
        "/rules/0/fixed_bytes",
        &["exceeds the limit", &MAX_RESERVE_FIXED_BYTES.to_string()],
    );
}

#[test]
fn reserve_arithmetic_overflow_is_an_error() {
    // Rows built without validation (a library caller): the sum must not wrap.
    let row = |id: &str| ReserveRule {
        id: id.into(),
        device: ReserveTarget::Cpu,
        runtime: RuntimeId::Any,
        role: ReserveRole::Reserve,
        fixed_bytes: u64::MAX / 2 + 1,
        fraction: 0.0,
        why: "t".into(),
        source: "t".into(),
    };
    let set = ProfileSet::new(
        vec![],
        vec![],
        vec![Entry {
            value: RuleTable::MemoryReserves {
                id: "r".into(),
                rules: vec![row("a"), row("b")],
            },
            origin: Origin {
                path: "r.yaml".into(),
                builtin: false,
            },
            overrides: None,
        }],
    );
    assert!(matches!(
        set.reserve(ReserveTarget::Cpu, RuntimeId::LlamaCpp, 1),
        Err(RuleError::ReserveOverflow { rules, .. }) if rules == ["a", "b"]
    ));
}

#[test]
fn reserve_fraction_out_of_range_is_refused() {
    for fraction in ["1.0", "-0.1"] {
        let text = format!(
            "kind: memory-reserves\nid: frac\nrules:\n  - {{id: gpu-frac, device: gpu, runtime: vllm, fixed_bytes: 0, fraction: {fraction}, why: t, source: t}}\n"
        );
        let (_, d) = overlay(vec![user("frac", &text)]);
        expect(&d, "user/rules/frac.yaml", "/rules/0/fraction", &[""]);
    }
}

/// Compute capabilities of every NVIDIA generation llama.cpp builds for (Maxwell 5.0 to Blackwell 12.0).
const CAPABILITIES: &[(u32, u32)] = &[
    (5, 0),
    (5, 2),
    (6, 0),
    (6, 1),
    (6, 2),
    (7, 0),
    (7, 2),
    (7, 5),
    (8, 0),
    (8, 6),
    (8, 7),
    (8, 9),
    (9, 0),
    (10, 0),
    (12, 0),
];

#[test]
fn llama_cpp_plans_cite_only_llama_cpp_or_neutral_rules() {
    // Regression: llama.cpp plans cited flash-attention-3-hopper and the PyTorch SDPA rows.
    let set = builtin();
    let cases = CAPABILITIES.iter().map(|&cc| Some(cc)).chain([None]);
    for cc in cases {
        let p = set
            .precision(RuntimeId::LlamaCpp, cc)
            .unwrap_or_else(|| panic!("no llama.cpp precision rule for {cc:?}"));
        assert!(
            p.runtime.applies_to(RuntimeId::LlamaCpp),
            "{cc:?}: {}",
            p.id
        );
        let a = set
            .attention(RuntimeId::LlamaCpp, cc, 4096)
            .unwrap_or_else(|| panic!("no llama.cpp attention rule for {cc:?}"));
        assert!(
            a.runtime.applies_to(RuntimeId::LlamaCpp),
            "{cc:?}: {}",
            a.id
        );
        assert!(a.id.starts_with("llama-cpp-") && p.id.starts_with("llama-cpp-"));
        // The pinned engine supports FlashAttention on every CUDA architecture and on the CPU.
        assert!(a.kernel.fused(), "{cc:?}");
    }
}

#[test]
fn llama_cpp_precision_follows_fast_fp16_hardware_available() {
    // ggml-cuda/common.cuh: NVIDIA cc >= 600 and cc != 610 computes cuBLAS matmuls in FP16.
    let set = builtin();
    let p = |cc| set.precision(RuntimeId::LlamaCpp, cc).unwrap().precision;
    assert_eq!(p(Some((5, 2))), Precision::Fp32);
    assert_eq!(p(Some((6, 0))), Precision::Fp16);
    assert_eq!(p(Some((6, 1))), Precision::Fp32);
    assert_eq!(p(Some((7, 5))), Precision::Fp16);
    assert_eq!(p(Some((12, 0))), Precision::Fp16);
    assert_eq!(p(None), Precision::Fp32);
    for cc in CAPABILITIES {
        assert!(!set.precision(RuntimeId::LlamaCpp, Some(*cc)).unwrap().tf32);
    }
}

#[test]
fn llama_cpp_attention_kernel_by_architecture() {
    let set = builtin();
    let k = |cc| set.attention(RuntimeId::LlamaCpp, cc, 512).unwrap().kernel;
    assert_eq!(k(Some((6, 1))), AttentionKernel::LlamaCppFattnTile);
    assert_eq!(k(Some((7, 0))), AttentionKernel::LlamaCppFattnMma);
    assert_eq!(k(Some((9, 0))), AttentionKernel::LlamaCppFattnMma);
    assert_eq!(k(None), AttentionKernel::LlamaCppFattnCpu);
}

#[test]
fn torch_queries_keep_their_rules_and_pick_the_most_specific_row() {
    let set = builtin();
    let a = |cc, seq| {
        set.attention(RuntimeId::Torch, Some(cc), seq)
            .map(|r| r.id.as_str())
    };
    assert_eq!(a((9, 0), 512), Some("flash-attention-3-hopper"));
    assert_eq!(a((8, 6), 512), Some("flash-attention-2-ampere-ada"));
    assert_eq!(a((6, 1), 512), Some("sdpa-math-pre-volta"));
    assert_eq!(a((6, 1), 8192), Some("chunked-pre-volta-long"));
    assert_eq!(
        set.precision(RuntimeId::Torch, Some((8, 0)))
            .map(|r| r.id.as_str()),
        Some("bf16-tf32-ampere-and-newer")
    );
    // No torch rule for the CPU, and no llama.cpp rule answers a torch query.
    assert!(set.precision(RuntimeId::Torch, None).is_none());
}

#[test]
fn a_runtime_typo_fails_validation() {
    let (_, d) = overlay(vec![user(
        "attention-typo",
        "kind: attention\nid: attention-typo\nrules:\n  - {id: typo-row, runtime: llama-cpp, device: gpu, kernel: llama-cpp-fattn-mma, why: t}\n",
    )]);
    expect(
        &d,
        "user/rules/attention-typo.yaml",
        "/rules/0/runtime",
        &["llama-cpp"],
    );
    let (_, d) = overlay(vec![user(
        "precision-none",
        "kind: precision\nid: precision-none\nrules:\n  - {id: no-runtime, device: gpu, precision: fp16, tf32: false, why: t}\n",
    )]);
    expect(&d, "user/rules/precision-none.yaml", "/", &["runtime"]);
}

#[test]
fn a_cpu_row_has_no_compute_capability() {
    let (_, d) = overlay(vec![user(
        "cpu-cc",
        "kind: precision\nid: cpu-cc\nrules:\n  - {id: cpu-with-cc, runtime: vllm, device: cpu, compute_capability: {min: \"8.0\"}, precision: fp32, tf32: false, why: t}\n",
    )]);
    expect(
        &d,
        "user/rules/cpu-cc.yaml",
        "/rules/0/compute_capability",
        &["CPU row"],
    );
}

#[test]
fn the_kv_cache_threshold_is_read_from_the_table() {
    let set = builtin();
    let q8 = set.kv_cache(RuntimeId::LlamaCpp, "q8_0").unwrap();
    assert_eq!(q8.id, "kv-cache-q8-0-llama-cpp");
    assert_eq!(q8.min_gain, Some(0.35));
    assert!(q8.source.contains("#7412"));
    let q4 = set.kv_cache(RuntimeId::LlamaCpp, "Q4_0").unwrap();
    assert_eq!(q4.min_gain, None, "q4_0 is taken for memory only");
    assert!(q4.perplexity_increase > q8.perplexity_increase);
    assert!(set.kv_cache(RuntimeId::LlamaCpp, "q5_1").is_none());
    assert!(set.kv_cache(RuntimeId::Vllm, "q8_0").is_none());
}

#[test]
fn kv_cache_rows_are_validated() {
    let (_, d) = overlay(vec![user(
        "kv-bad",
        "kind: kv-cache\nid: kv-bad\nrules:\n  - {id: kv-q3, runtime: llama.cpp, cache_type: q3_k, perplexity_increase: 0.1, min_gain: 0.0, why: t, source: t}\n",
    )]);
    expect(
        &d,
        "user/rules/kv-bad.yaml",
        "/rules/0/cache_type",
        &["q3_k"],
    );
    expect(
        &d,
        "user/rules/kv-bad.yaml",
        "/rules/0/min_gain",
        &["(0, 10]"],
    );
}

#[test]
fn thread_rules_by_objective_with_saturating_arithmetic() {
    let set = builtin();
    let latency = set.cpu_threads(Objective::Latency).unwrap();
    assert_eq!(latency.id, "latency-physical-minus-one");
    assert_eq!(latency.threads(16), 15);
    assert_eq!(latency.threads(1), 1);
    assert_eq!(
        set.cpu_threads(Objective::Throughput).unwrap().threads(2),
        2
    );
    let (_, d) = overlay(vec![user(
        "threads",
        "kind: cpu-threads\nid: threads\nrules:\n  - {id: smt-lots, objective: balanced, threads_per_core: 4294967295, reserve_cores: 0, why: t}\n",
    )]);
    expect(
        &d,
        "user/rules/threads.yaml",
        "/rules/0/threads_per_core",
        &["1..=8"],
    );
}

#[test]
fn overlay_conflict_exits_4_naming_both_files() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir_all(&rules).unwrap();
    std::fs::write(
        rules.join("more.yaml"),
        "kind: efficiency\nid: more\nrules:\n  - {id: gpu-decode-llama-cpp, device: cpu, runtime: vllm, phase: decode, efficiency: 0.5, why: t, source: t}\n",
    )
    .unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_optimizer"))
        .arg("--profiles")
        .arg(dir.path())
        .args(["profiles", "list"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(4));
    let err = String::from_utf8_lossy(&o.stderr);
    let file = Path::new(&rules).join("more.yaml");
    assert!(
        err.contains(&file.display().to_string())
            && err.contains("builtin:rules/efficiency.yaml")
            && err.contains("gpu-decode-llama-cpp"),
        "{err}"
    );
    assert!(o.stdout.is_empty());
}

/// An efficiency row with a compute-capability range refines the row without one for those GPUs only (the Hopper
/// rows measured on an H100); a GPU of unknown capability and the CPU take the unranged rows.
#[test]
fn a_capability_efficiency_row_refines_the_generic_row() {
    let set = builtin();
    let q = |cc| {
        set.efficiency(ReserveTarget::Gpu, RuntimeId::LlamaCpp, Phase::Decode, cc)
            .map(|x| x.id.as_str())
    };
    assert_eq!(q(Some((9, 0))), Some("gpu-decode-llama-cpp-hopper"));
    assert_eq!(q(Some((8, 9))), Some("gpu-decode-llama-cpp"));
    assert_eq!(q(None), Some("gpu-decode-llama-cpp"));
}

#[test]
fn two_capability_efficiency_rows_that_overlap_conflict() {
    let (_, d) = overlay(vec![user(
        "efficiency-hopper",
        r#"
kind: efficiency
id: efficiency-hopper
rules:
  - {id: my-hopper-decode, device: gpu, runtime: llama.cpp, phase: decode, compute_capability: {min: "8.9"}, efficiency: 0.4, why: test, source: test}
"#,
    )]);
    expect(
        &d,
        "user/rules/efficiency-hopper.yaml",
        "/rules/0",
        &["\"my-hopper-decode\"", "\"gpu-decode-llama-cpp-hopper\""],
    );
}
