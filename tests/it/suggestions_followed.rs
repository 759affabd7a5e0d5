//! Suggestions you can follow (issue 25, item 5): every "To fit" suggestion a flag change can follow ends with
//! `(resolve FLAGS)` (docs/resolve.md), and following it fits. The grid runs no-fit cases of all three engines
//! (synthetic 8B/70B GGUFs on the fixture inventories, vLLM fixture checkpoints on profiled GPUs, the training
//! presets), re-plans each with the suggested flags added (a flag already given takes the new value) and asserts
//! the plan runs: exit 0, or 5 (`sla-missed`) and 6 (`workload-unmet`), which also run; 3 means the suggestion
//! was wrong. A suggestion without flags must name what else changes (another model file or checkpoint, the
//! workload's preferences, other hardware) and respect what the model already is.

use std::path::{Path, PathBuf};

use crate::common;
use common::vllm_models;

use optimizer::emit::Deployment;
use optimizer_testkit::gguf_builder::LlamaShape;

/// Exit codes of a plan that runs: `fits`, `sla-missed`, `workload-unmet` (docs/exit-codes.md).
const RUNS: [i32; 3] = [0, 5, 6];
/// The no-fit exit code.
const NO_FIT: i32 = 3;

/// `optimizer resolve --format json -w WORKLOAD -m MODEL ARGS...` on `inventory`: the exit code and, for a no-fit
/// exit, the document.
fn resolve(
    inventory: &str,
    model: &Path,
    workload: &str,
    args: &[String],
) -> (i32, Option<Deployment>) {
    let out = common::bin_on(inventory)
        .args(["resolve", "--format", "json", "-w", workload, "-m"])
        .arg(model)
        .args(args)
        .output()
        .unwrap();
    let code = out.status.code().unwrap_or(-1);
    if code != NO_FIT {
        return (code, None);
    }
    let d: Deployment = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{workload} {args:?} on {inventory}: no document ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (code, Some(d))
}

/// The flags of a suggestion's `(resolve FLAGS)` clause, if it has one.
fn flags(s: &str) -> Option<Vec<String>> {
    let start = s.find("(resolve ")? + "(resolve ".len();
    let end = start + s[start..].find(')')?;
    Some(
        s[start..end]
            .split_whitespace()
            .map(str::to_string)
            .collect(),
    )
}

/// Flags that take no value.
const SWITCHES: [&str; 1] = ["--allow-long-context"];

/// `base` with `add` applied: a flag in both takes `add`'s value.
fn apply(base: &[String], add: &[String]) -> Vec<String> {
    let split = |v: &[String]| -> Vec<Vec<String>> {
        let mut out: Vec<Vec<String>> = Vec::new();
        for a in v {
            if a.starts_with('-')
                || out
                    .last()
                    .is_none_or(|g| g.len() > 1 || SWITCHES.contains(&g[0].as_str()))
            {
                out.push(vec![a.clone()]);
            } else if let Some(g) = out.last_mut() {
                g.push(a.clone());
            }
        }
        out
    };
    let canon = |f: &str| match f {
        "-c" => "--ctx-size".to_string(),
        "-w" => "--workload".to_string(),
        "-m" => "--model".to_string(),
        f => f.to_string(),
    };
    let added = split(add);
    let mut out: Vec<String> = split(base)
        .into_iter()
        .filter(|g| !added.iter().any(|a| canon(&a[0]) == canon(&g[0])))
        .flatten()
        .collect();
    out.extend(added.into_iter().flatten());
    out
}

/// One no-fit candidate case: inventory, model, workload, extra flags.
struct Case {
    inventory: &'static str,
    model: PathBuf,
    workload: &'static str,
    args: Vec<String>,
}

/// What the grid saw.
#[derive(Default, Debug)]
struct Tally {
    no_fit: usize,
    suggestions: usize,
    with_flags: usize,
    followed_fit: usize,
    /// Suggestions of a KV cache type (`--kv-type`) that fit when followed.
    kv_type_fit: usize,
    failures: Vec<String>,
}

fn check(c: &Case, t: &mut Tally) {
    let (_, Some(d)) = resolve(c.inventory, &c.model, c.workload, &c.args) else {
        return;
    };
    t.no_fit += 1;
    let at = format!("{} {:?} on {}", c.workload, c.args, c.inventory);
    // The first line states the nearest candidate's shortfall; the rest are suggestions.
    for s in d.suggestions.iter().skip(1) {
        t.suggestions += 1;
        let Some(add) = flags(s) else {
            let named = ["model file", "checkpoint", "workload", "hardware", "GPU"]
                .iter()
                .any(|w| s.contains(w));
            if !named {
                t.failures
                    .push(format!("{at}: neither flags nor a named change: {s}"));
            }
            continue;
        };
        t.with_flags += 1;
        let args = apply(&c.args, &add);
        // `-w` among the flags changes the workload.
        let (w, args) = match args.iter().position(|a| a == "-w" || a == "--workload") {
            Some(i) => {
                let w: &'static str = args[i + 1].clone().leak();
                let mut a = args.clone();
                a.drain(i..i + 2);
                (w, a)
            }
            None => (c.workload, args),
        };
        let (code, _) = resolve(c.inventory, &c.model, w, &args);
        if RUNS.contains(&code) {
            t.followed_fit += 1;
            t.kv_type_fit += usize::from(add.iter().any(|a| a == "--kv-type"));
        } else {
            t.failures
                .push(format!("{at}: following {s:?} ({w} {args:?}) exits {code}"));
        }
    }
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[test]
fn every_suggestion_with_flags_fits_when_followed() {
    let dir = tempfile::tempdir().unwrap();
    let (m8, _) = common::synth(dir.path(), "m8.gguf", LlamaShape::LLAMA3_8B);
    let (m70, _) = common::synth(dir.path(), "m70.gguf", LlamaShape::LLAMA3_70B);
    let mut cases = Vec::new();
    // llama.cpp: the presets on ordinary machines, and pinned knobs that push a plan past its devices.
    for inv in [
        "laptop-rtx4060.yaml",
        "gtx1650-4gb.yaml",
        "container-cgroup.yaml",
        "desktop-rtx4080.yaml",
        "workstation-2x3090.yaml",
        "apple-m2-max.yaml",
        "cpu-server.yaml",
    ] {
        for m in [&m8, &m70] {
            for (w, args) in [
                ("inference", s(&[])),
                ("chat", s(&[])),
                ("batch-inference", s(&[])),
                ("long-context", s(&[])),
                ("chat", s(&["--parallel", "16"])),
                ("inference", s(&["-c", "131072", "--allow-long-context"])),
                ("inference", s(&["--n-gpu-layers", "81"])),
                // A pinned f16 cache that does not fit: the q8_0 suggestion `(resolve --kv-type q8_0)`.
                (
                    "chat",
                    s(&["--kv-type", "f16", "-c", "8192", "--parallel", "4"]),
                ),
                (
                    "chat",
                    s(&[
                        "--kv-type",
                        "f16",
                        "--n-gpu-layers",
                        "33",
                        "--parallel",
                        "2",
                    ]),
                ),
            ] {
                cases.push(Case {
                    inventory: inv,
                    model: m.clone(),
                    workload: w,
                    args,
                });
            }
        }
    }
    // vLLM: fixture checkpoints (BF16, AWQ, FP8) on profiled GPUs with and without FP8.
    let ids = [
        "Llama-3.1-8B",
        "Llama-2-7B-AWQ",
        "Llama-3.1-70B-Instruct",
        "Qwen3-30B-A3B-FP8",
        "Meta-Llama-3.1-405B-Instruct-FP8",
    ];
    let dirs: Vec<_> = ids.iter().map(|id| vllm_models::materialize(id)).collect();
    for d in &dirs {
        for hw in ["t4", "l4", "l40s", "a100-40gb-pcie", "8x:h100-sxm"] {
            for w in ["inference", "chat", "batch-inference"] {
                cases.push(Case {
                    inventory: "cpu-server.yaml",
                    model: d.path().to_path_buf(),
                    workload: w,
                    args: s(&["--hardware", hw]),
                });
            }
        }
        // A pinned 16-bit cache at the trained length: the fp8 suggestion `(resolve --kv-type fp8)` where the
        // GPU has FP8.
        for hw in ["l4", "l40s"] {
            cases.push(Case {
                inventory: "cpu-server.yaml",
                model: d.path().to_path_buf(),
                workload: "chat",
                args: s(&[
                    "--hardware",
                    hw,
                    "--kv-type",
                    "auto",
                    "-c",
                    "32768",
                    "--parallel",
                    "2",
                ]),
            });
        }
    }
    // Training presets on small and large GPUs.
    let small = vllm_models::materialize("Llama-3.2-1B");
    for model in [small.path().to_path_buf(), dirs[0].path().to_path_buf()] {
        for hw in ["gtx-1650", "t4", "rtx-4090", "a100-80gb-sxm"] {
            for w in ["training", "fine-tune-lora", "fine-tune-qlora"] {
                cases.push(Case {
                    inventory: "cpu-server.yaml",
                    model: model.clone(),
                    workload: w,
                    args: s(&["--hardware", hw]),
                });
            }
        }
    }
    let mut t = Tally::default();
    for c in &cases {
        check(c, &mut t);
    }
    eprintln!(
        "{} cases, {} no-fit, {} suggestions, {} with flags, {} of them fit when followed ({} KV cache types)",
        cases.len(),
        t.no_fit,
        t.suggestions,
        t.with_flags,
        t.followed_fit,
        t.kv_type_fit
    );
    assert!(t.with_flags > 0, "{t:?}");
    assert!(
        t.kv_type_fit > 0,
        "no --kv-type suggestion was followed: {t:?}"
    );
    assert!(
        t.failures.is_empty(),
        "{} of {} suggestions fail:\n{}",
        t.failures.len(),
        t.suggestions,
        t.failures.join("\n")
    );
}
