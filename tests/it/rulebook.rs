//! The rule book: rule rows indexed once per profile set, answering the planner's typed queries. Its answers
//! must be the overlay semantics written out as a plain scan (checked here for every query over the built-in
//! set and an overlay that adds `any` rows), a user overlay must be seen by the queries of the set `load`
//! returns, and the runtime a row names is an enum the schema checks: a typo fails validation naming the file.

use std::process::Command;

use optimizer::profile::{
    self, AttentionRule, EfficiencyRule, KvCacheRule, Objective, Phase, PrecisionRule, ProfileSet,
    ReserveRole, ReserveRule, ReserveTarget, RuntimeId, ThreadRule,
};

const RUNTIMES: [RuntimeId; 4] = [
    RuntimeId::LlamaCpp,
    RuntimeId::Vllm,
    RuntimeId::Torch,
    RuntimeId::Any,
];

/// Every compute capability llama.cpp builds for, one past each end, and the CPU (`None`).
fn capabilities() -> Vec<Option<(u32, u32)>> {
    let mut v = vec![None];
    for cc in [
        (3, 7),
        (5, 0),
        (6, 1),
        (7, 0),
        (7, 5),
        (8, 0),
        (8, 6),
        (8, 9),
        (9, 0),
        (10, 0),
        (12, 0),
        (13, 0),
    ] {
        v.push(Some(cc));
    }
    v
}

/// The reference: the semantics of the module doc, as a scan over every row (runtime's own rows before `any`
/// rows, then the greatest specificity, the later row on a tie).
fn scan<'a, T>(
    rows: impl Iterator<Item = &'a T>,
    runtime: RuntimeId,
    row_runtime: impl Fn(&T) -> RuntimeId,
    admits: impl Fn(&T) -> bool,
    specificity: impl Fn(&T) -> u64,
) -> Option<&'a T> {
    rows.filter(|r| row_runtime(r).applies_to(runtime) && admits(r))
        .max_by_key(|r| (row_runtime(r) == runtime, specificity(r)))
}

fn on_device(
    device: ReserveTarget,
    range: &profile::CapabilityRange,
    cc: Option<(u32, u32)>,
) -> bool {
    match (device, cc) {
        (ReserveTarget::Gpu, Some(cc)) => range.contains(cc),
        (ReserveTarget::Cpu, None) => true,
        _ => false,
    }
}

fn check_against_scan(set: &ProfileSet) {
    let id = |r: Option<&dyn HasId>| r.map(|r| r.id().to_string());
    for runtime in RUNTIMES {
        for device in [ReserveTarget::Gpu, ReserveTarget::Cpu] {
            for capacity in [0, 1 << 30, 80 << 30, u64::MAX] {
                let expected: Vec<&ReserveRule> = set
                    .rows::<ReserveRule>()
                    .filter(|r| {
                        r.device == device
                            && r.role == ReserveRole::Reserve
                            && r.runtime.applies_to(runtime)
                    })
                    .collect();
                let ids: Vec<String> = expected.iter().map(|r| r.id.clone()).collect();
                let got = set.reserve(device, runtime, capacity);
                match &got {
                    Ok((_, got_ids)) => assert_eq!(got_ids, &ids),
                    Err(profile::RuleError::ReserveOverflow { rules, .. }) => {
                        assert_eq!(rules, &ids)
                    }
                }
            }
            let overhead = scan(
                set.rows::<ReserveRule>(),
                runtime,
                |r| r.runtime,
                |r| r.device == device && r.role == ReserveRole::RuntimeOverhead,
                |_| 0,
            );
            assert_eq!(
                id(set.runtime_overhead(device, runtime).map(|r| r as _)),
                id(overhead.map(|r| r as _))
            );
            for phase in [Phase::Decode, Phase::Prefill] {
                for cc in capabilities() {
                    let want = scan(
                        set.rows::<EfficiencyRule>(),
                        runtime,
                        |r| r.runtime,
                        |r| {
                            r.device == device
                                && r.phase == phase
                                && match cc {
                                    Some(cc) => r.compute_capability.contains(cc),
                                    None => r.compute_capability.is_open(),
                                }
                        },
                        |r| u64::from(!r.compute_capability.is_open()),
                    );
                    assert_eq!(
                        id(set.efficiency(device, runtime, phase, cc).map(|r| r as _)),
                        id(want.map(|r| r as _)),
                        "efficiency {runtime} {device:?} {phase:?} {cc:?}"
                    );
                }
            }
        }
        for cc in capabilities() {
            let want = scan(
                set.rows::<PrecisionRule>(),
                runtime,
                |r| r.runtime,
                |r| on_device(r.device, &r.compute_capability, cc),
                |_| 0,
            );
            assert_eq!(
                id(set.precision(runtime, cc).map(|r| r as _)),
                id(want.map(|r| r as _)),
                "precision {runtime} {cc:?}"
            );
            for tokens in [0, 1, 512, 4096, 8192, 32_768, 131_072, u64::MAX] {
                let want = scan(
                    set.rows::<AttentionRule>(),
                    runtime,
                    |r| r.runtime,
                    |r| {
                        on_device(r.device, &r.compute_capability, cc)
                            && r.min_sequence.is_none_or(|m| tokens >= m)
                    },
                    |r| r.min_sequence.unwrap_or(0),
                );
                assert_eq!(
                    id(set.attention(runtime, cc, tokens).map(|r| r as _)),
                    id(want.map(|r| r as _)),
                    "attention {runtime} {cc:?} {tokens}"
                );
            }
        }
        for t in ["f16", "q8_0", "Q8_0", "q4_0", "bf16", "nope"] {
            let want = scan(
                set.rows::<KvCacheRule>(),
                runtime,
                |r| r.runtime,
                |r| r.cache_type.eq_ignore_ascii_case(t),
                |_| 0,
            );
            assert_eq!(
                id(set.kv_cache(runtime, t).map(|r| r as _)),
                id(want.map(|r| r as _)),
                "kv {runtime} {t}"
            );
        }
    }
    for o in [
        Objective::Latency,
        Objective::Throughput,
        Objective::Balanced,
    ] {
        let want = set.rows::<ThreadRule>().find(|r| r.objective == o);
        assert_eq!(
            id(set.cpu_threads(o).map(|r| r as _)),
            id(want.map(|r| r as _))
        );
    }
}

trait HasId {
    fn id(&self) -> &str;
}
macro_rules! has_id {
    ($($t:ty),*) => {$(impl HasId for $t { fn id(&self) -> &str { &self.id } })*};
}
has_id!(
    ReserveRule,
    EfficiencyRule,
    PrecisionRule,
    AttentionRule,
    KvCacheRule,
    ThreadRule
);

#[test]
fn the_rule_book_answers_as_a_scan_of_every_row() {
    let set = profile::load(&[]).unwrap();
    check_against_scan(&set);
    // The built-in set has rows for llama.cpp and vLLM and a few `any` rows; a question the book answers
    // must be answered (not silently `None`) for the runtime the planner plans today.
    assert!(
        set.efficiency(
            ReserveTarget::Gpu,
            RuntimeId::LlamaCpp,
            Phase::Decode,
            Some((8, 9))
        )
        .is_some()
    );
}

/// An overlay directory of rule tables that add `any` rows, rows of other runtimes, capability ranges and
/// `min_sequence` steps; `load` must answer with them (the book of the built-in set it started from is
/// rebuilt, not reused).
#[test]
fn an_overlay_loaded_from_a_directory_is_seen_by_the_queries() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir_all(&rules).unwrap();
    std::fs::write(
        rules.join("extra-efficiency.yaml"),
        "kind: efficiency\nid: extra-efficiency\nrules:\n  - {id: gpu-decode-any-test, device: gpu, runtime: any, phase: decode, efficiency: 0.4, why: test, source: test}\n  - {id: gpu-decode-torch-test, device: gpu, runtime: torch, phase: decode, compute_capability: {min: \"8.0\"}, efficiency: 0.5, why: test, source: test}\n",
    )
    .unwrap();
    std::fs::write(
        rules.join("extra-attention.yaml"),
        "kind: attention\nid: extra-attention\nrules:\n  - {id: torch-sdpa-long-test, runtime: torch, device: gpu, compute_capability: {min: \"8.0\"}, min_sequence: 8192, kernel: sdpa-fused, why: test}\n",
    )
    .unwrap();
    std::fs::write(
        rules.join("extra-kv.yaml"),
        "kind: kv-cache\nid: extra-kv\nrules:\n  - {id: kv-q4-any-test, runtime: any, cache_type: q4_0, perplexity_increase: 0.02, why: test, source: test}\n",
    )
    .unwrap();
    let set = match profile::load(&[dir.path().to_path_buf()]) {
        Ok(s) => s,
        Err(d) => panic!("{d:#?}"),
    };
    let q = |r| {
        set.efficiency(ReserveTarget::Gpu, r, Phase::Decode, None)
            .map(|x| x.id.clone())
    };
    assert_eq!(q(RuntimeId::Torch).as_deref(), Some("gpu-decode-any-test"));
    assert_eq!(
        q(RuntimeId::LlamaCpp).as_deref(),
        Some("gpu-decode-llama-cpp")
    );
    assert_eq!(
        set.efficiency(
            ReserveTarget::Gpu,
            RuntimeId::Torch,
            Phase::Decode,
            Some((9, 0))
        )
        .map(|x| x.id.as_str()),
        Some("gpu-decode-torch-test")
    );
    check_against_scan(&set);
}

/// Regression guard for issue 9: `runtime:` is an enum in the rules schema, so a misspelt runtime fails
/// `optimizer profiles validate` (exit 4) naming the file and the field, instead of filing the row under a
/// runtime no plan asks for.
#[test]
fn a_misspelt_runtime_fails_validation_naming_the_file() {
    for typo in ["llama-cpp", "lama.cpp", "LLAMA.CPP", "vLLM", ""] {
        let dir = tempfile::tempdir().unwrap();
        let rules = dir.path().join("rules");
        std::fs::create_dir_all(&rules).unwrap();
        let file = rules.join("typo.yaml");
        std::fs::write(
            &file,
            format!("kind: efficiency\nid: typo\nrules:\n  - {{id: gpu-decode-typo, device: gpu, runtime: \"{typo}\", phase: decode, efficiency: 0.5, why: test, source: test}}\n"),
        )
        .unwrap();
        let o = Command::new(env!("CARGO_BIN_EXE_optimizer"))
            .args(["profiles", "validate"])
            .arg(&file)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(4), "{typo}: {err}");
        assert!(
            err.contains(&file.display().to_string()) && err.contains("/rules/0/runtime"),
            "{typo}: {err}"
        );
        // And as an overlay of a planning command, the same file stops the load.
        let o = Command::new(env!("CARGO_BIN_EXE_optimizer"))
            .arg("--profiles")
            .arg(dir.path())
            .args(["profiles", "list"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(4), "{typo}");
        assert!(String::from_utf8_lossy(&o.stderr).contains("typo.yaml"));
    }
}
