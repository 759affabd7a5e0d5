//! The parts of the CLI people read: `resolve --format table` (snapshots of one llama.cpp, one vLLM and one
//! torch plan), `--explain` in plain words, and where `-o` sends the document. The figures in the snapshots
//! are the planner's, proven in tests/it/resolve.rs, tests/it/vllm_resolve.rs and tests/it/torch_resolve.rs; these
//! snapshots guard the layout and the words.

use crate::common;

use std::path::Path;
use std::process::Output;

use common::{assert_exit, bin_on, synth, vllm_models};
use optimizer_testkit::gguf_builder::LlamaShape;

/// `optimizer --inventory INVENTORY resolve -m MODEL ARGS...`.
fn resolve(inventory: &str, model: &Path, args: &[&str]) -> Output {
    bin_on(inventory)
        .args(["resolve", "-m"])
        .arg(model)
        .args(args)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).unwrap()
}

/// The table with the run-dependent model directory replaced.
fn table(o: &Output, dir: &Path) -> String {
    text(&o.stdout).replace(&dir.display().to_string(), "MODEL")
}

/// The three runtimes' plans: (name, inventory, model directory guard, model path, arguments, exit code).
struct Case {
    name: &'static str,
    inventory: &'static str,
    dir: tempfile::TempDir,
    model: std::path::PathBuf,
    args: Vec<&'static str>,
    code: i32,
}

fn cases() -> Vec<Case> {
    let llama = tempfile::tempdir().unwrap();
    let (m8, _) = synth(llama.path(), "m8.gguf", LlamaShape::LLAMA3_8B);
    let qwen = vllm_models::materialize("Qwen2.5-7B");
    let qwen_path = qwen.path().to_path_buf();
    let l8 = vllm_models::materialize("Llama-3.1-8B");
    let l8_path = l8.path().to_path_buf();
    vec![
        Case {
            name: "llama-cpp-8b-rtx4060-chat",
            inventory: "laptop-rtx4060.yaml",
            dir: llama,
            model: m8,
            args: vec!["-w", "chat"],
            // The hybrid plan misses the chat preset's 50 ms per output token: `sla-missed`.
            code: 5,
        },
        Case {
            name: "vllm-qwen2.5-7b-a100-chat",
            inventory: "cpu-server.yaml",
            dir: qwen,
            model: qwen_path,
            args: vec!["-w", "chat", "--hardware", "a100-80gb-sxm"],
            code: 0,
        },
        // Nothing fits: the summary still comes, with the suggestions, and the exit code stays 3.
        Case {
            name: "torch-full-8b-a100-nofit",
            inventory: "workstation-2x3090.yaml",
            dir: l8,
            model: l8_path,
            args: vec!["-w", "training", "--hardware", "a100-80gb-sxm"],
            code: 3,
        },
    ]
}

#[test]
fn resolve_format_table_summarises_each_runtime() {
    for c in cases() {
        let mut args = c.args.clone();
        args.extend(["--format", "table", "--explain"]);
        let o = resolve(c.inventory, &c.model, &args);
        assert_exit(&o, c.code);
        let t = table(&o, c.dir.path());
        for heading in [
            "Status:",
            "Model:",
            "Runtime:",
            "Decision\n",
            "Memory (",
            "Speed\n",
        ] {
            assert!(t.contains(heading), "{}: no {heading:?} in\n{t}", c.name);
        }
        // One text builder: the decision and speed sentences of --explain are the table's.
        let explain = text(&o.stderr);
        let mut lines = explain.lines();
        let decision = lines.next().unwrap();
        let speed = lines.next().unwrap();
        assert!(t.contains(decision), "{}: {decision:?} not in\n{t}", c.name);
        assert!(t.contains(speed), "{}: {speed:?} not in\n{t}", c.name);
        if c.code == 3 {
            assert!(t.contains("NOTHING FITS"), "{t}");
            assert!(t.contains("\nTo fit\n"), "{t}");
        }
        insta::assert_snapshot!(c.name, t);
    }
}

/// `--explain` used to print Rust debug names (`Balanced`, `Gpu`, `Analytic`) and "1 threads",
/// "1 process(es)", "1 accumulation step(s)".
#[test]
fn explain_speaks_plain_words() {
    for c in cases() {
        let mut args = c.args.clone();
        args.push("--explain");
        let o = resolve(c.inventory, &c.model, &args);
        assert_exit(&o, c.code);
        let e = text(&o.stderr);
        for debug in [
            "(Balanced)",
            "(Latency)",
            "(Throughput)",
            "(Analytic)",
            "(Calibrated)",
            "(Measured)",
            " Gpu ",
            "MultiGpu",
            "Hybrid",
            "MoeCpu",
            " Cpu ",
            "(es)",
            "(s)",
            " 1 threads",
            " 1 sequences",
            " 1 processes",
            " 1 accumulation steps",
        ] {
            assert!(!e.contains(debug), "{}: {debug:?} in\n{e}", c.name);
        }
        assert!(e.contains("Predicted (analytic)"), "{}: {e}", c.name);
    }
    // The torch plan on one GPU: one process, singular.
    let c = &cases()[2];
    let o = resolve(
        c.inventory,
        &c.model,
        &[&c.args[..], &["--explain"]].concat(),
    );
    assert!(
        text(&o.stderr).contains("(1 process"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn dash_o_json_writes_json_and_dash_means_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let (m8, _) = synth(dir.path(), "m8.gguf", LlamaShape::LLAMA3_8B);
    let json = dir.path().join("plan.json");
    let o = resolve("cpu-server.yaml", &m8, &["-o", json.to_str().unwrap()]);
    assert_exit(&o, 0);
    assert!(o.stdout.is_empty());
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).expect("JSON in plan.json");
    assert_eq!(doc["kind"], "Deployment");

    // --format wins over the extension.
    let o = resolve(
        "cpu-server.yaml",
        &m8,
        &["-o", json.to_str().unwrap(), "--format", "yaml"],
    );
    assert_exit(&o, 0);
    let written = std::fs::read_to_string(&json).unwrap();
    assert!(
        written.starts_with("apiVersion: optimizer/v2\n"),
        "{written}"
    );

    // `-o -` is stdout, YAML by default, any format on request; no file named "-" appears.
    let o = bin_on("cpu-server.yaml")
        .current_dir(dir.path())
        .args(["resolve", "-o", "-", "-m"])
        .arg(&m8)
        .output()
        .unwrap();
    assert_exit(&o, 0);
    assert!(text(&o.stdout).starts_with("apiVersion: optimizer/v2\n"));
    assert!(!dir.path().join("-").exists());
    let o = resolve("cpu-server.yaml", &m8, &["-o", "-", "--format", "json"]);
    assert_exit(&o, 0);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["kind"], "Deployment");

    // A table can go to a file too.
    let txt = dir.path().join("plan.txt");
    let o = resolve(
        "cpu-server.yaml",
        &m8,
        &["-o", txt.to_str().unwrap(), "--format", "table"],
    );
    assert_exit(&o, 0);
    assert!(
        std::fs::read_to_string(&txt)
            .unwrap()
            .starts_with("Status:   fits\n")
    );
}

/// Ids are matched in any case and by the product names `profiles list` shows; an unknown one is a usage error
/// (exit 2) naming the nearest id when it is close, and pointing at `optimizer profiles list`.
#[test]
fn ids_match_in_any_case_or_by_product_name_and_typos_get_a_suggestion() {
    let dir = tempfile::tempdir().unwrap();
    let (m8, _) = synth(dir.path(), "m8.gguf", LlamaShape::LLAMA3_8B);
    let json = |o: &Output| -> serde_json::Value { serde_json::from_slice(&o.stdout).unwrap() };
    for (args, workload, gpu) in [
        (vec!["-w", "Chat"], "chat", None),
        (
            vec!["--hardware", "RTX-4090"],
            "inference",
            Some("rtx-4090"),
        ),
        (
            vec!["--hardware", "RTX 4090"],
            "inference",
            Some("rtx-4090"),
        ),
        (
            vec!["--hardware", "2x:NVIDIA GeForce RTX 4090"],
            "inference",
            Some("rtx-4090"),
        ),
    ] {
        let o = resolve(
            "cpu-server.yaml",
            &m8,
            &[&args[..], &["--format", "json"]].concat(),
        );
        assert_exit(&o, 0);
        let d = json(&o);
        assert_eq!(d["workload"]["preset"], workload, "{args:?}");
        if let Some(gpu) = gpu {
            assert_eq!(d["hardware"]["gpus"][0]["profile"], gpu, "{args:?}");
        }
    }

    let refused = |o: &Output, want: &str| {
        assert_exit(o, 2);
        let e = text(&o.stderr);
        assert!(e.contains(want), "{want:?} not in {e}");
        assert!(e.contains("hint: `optimizer profiles list"), "{e}");
    };
    refused(
        &resolve("cpu-server.yaml", &m8, &["-w", "chta"]),
        "no workload preset \"chta\"; did you mean chat?",
    );
    refused(
        &resolve("cpu-server.yaml", &m8, &["--hardware", "2x:rtx-4900"]),
        "no hardware profile \"rtx-4900\"; did you mean rtx-4090?",
    );
    // Nothing close: no guess.
    let o = resolve("cpu-server.yaml", &m8, &["-w", "nope"]);
    refused(&o, "no workload preset \"nope\"");
    assert!(!text(&o.stderr).contains("did you mean"));
    // A name two profiles share: both ids, no guess.
    refused(
        &resolve("cpu-server.yaml", &m8, &["--hardware", "A100 SXM4"]),
        "\"A100 SXM4\" names 2 hardware profiles: a100-40gb-sxm, a100-80gb-sxm",
    );

    // estimate --hardware and profiles show take the same spellings.
    let o = bin_on("cpu-server.yaml")
        .args(["estimate", "--hardware", "RTX 4090", "-m"])
        .arg(&m8)
        .output()
        .unwrap();
    assert_exit(&o, 0);
    assert!(text(&o.stdout).contains("cuda:0"), "{}", text(&o.stdout));
    let o = bin_on("cpu-server.yaml")
        .args(["estimate", "--hardware", "rtx-4900", "-m"])
        .arg(&m8)
        .output()
        .unwrap();
    refused(&o, "did you mean rtx-4090?");
    for (id, first) in [
        ("Chat", "# builtin:workloads/chat.yaml"),
        ("RTX 4090", "# builtin:hardware/rtx-4090.yaml"),
        ("MEMORY-RESERVES", "# builtin:rules/memory-reserves.yaml"),
    ] {
        let o = bin_on("cpu-server.yaml")
            .args(["profiles", "show", id])
            .output()
            .unwrap();
        assert_exit(&o, 0);
        assert!(
            text(&o.stdout).starts_with(first),
            "{id}: {}",
            text(&o.stdout)
        );
    }
    let o = bin_on("cpu-server.yaml")
        .args(["profiles", "show", "chta"])
        .output()
        .unwrap();
    refused(&o, "no profile with id \"chta\"; did you mean chat?");
}

/// `profiles list`: a header per kind, `--kind` to keep one, and each row's key figures as its profile file
/// states them.
#[test]
fn profiles_list_has_headers_a_kind_filter_and_key_figures() {
    let list = |args: &[&str]| {
        let o = bin_on("cpu-server.yaml")
            .args(["profiles", "list"])
            .args(args)
            .output()
            .unwrap();
        assert_exit(&o, 0);
        text(&o.stdout)
    };
    let all = list(&[]);
    let headers: Vec<&str> = all
        .lines()
        .filter(|l| {
            l.starts_with("HARDWARE") || l.starts_with("WORKLOAD") || l.starts_with("RULE TABLE")
        })
        .collect();
    assert_eq!(headers.len(), 3, "{all}");
    assert!(headers[0].contains("MEM GiB") && headers[0].contains("BW GB/s"));
    assert!(headers[0].contains("BF16 TF") && headers[0].contains("FP16 TF"));
    assert!(headers[1].contains("MODE") && headers[1].contains("OBJECTIVE"));
    assert!(headers[2].contains("ROWS"));

    let hw = list(&["--kind", "hardware"]);
    assert!(hw.starts_with("HARDWARE"), "{hw}");
    assert!(
        !hw.contains("WORKLOAD") && !hw.contains("RULE TABLE"),
        "{hw}"
    );
    // The RTX 4090's row against its file: 24 GiB, 1008 GB/s, BF16 and FP16 dense with FP32 accumulation.
    let file: serde_json::Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(
            common::root().join("crates/core/profiles/hardware/rtx-4090.yaml"),
        )
        .unwrap(),
    )
    .unwrap();
    let row: Vec<&str> = hw
        .lines()
        .find(|l| l.starts_with("rtx-4090 "))
        .unwrap()
        .split_whitespace()
        .collect();
    let gib = file["memory"]["size_bytes"].as_f64().unwrap() / (1u64 << 30) as f64;
    assert_eq!(row[1], "GPU");
    assert_eq!(row[2], format!("{gib:.1}"));
    assert_eq!(
        row[3],
        format!("{:.0}", file["memory"]["bandwidth_gb_s"].as_f64().unwrap())
    );
    let tf = &file["tensor_tflops"];
    assert_eq!(
        row[4],
        format!("{:.1}", tf["bf16_fp32acc"].as_f64().unwrap())
    );
    assert_eq!(
        row[5],
        format!("{:.1}", tf["fp16_fp32acc"].as_f64().unwrap())
    );
    assert_eq!(row[6..].join(" "), file["name"].as_str().unwrap());

    let wl = list(&["--kind", "workloads"]);
    assert!(wl.starts_with("WORKLOAD"), "{wl}");
    let chat = wl.lines().find(|l| l.starts_with("chat ")).unwrap();
    assert!(
        chat.contains("inference") && chat.contains("balanced") && chat.contains("fixed 8192"),
        "{chat}"
    );
    let long = wl.lines().find(|l| l.starts_with("long-context ")).unwrap();
    assert!(long.contains("largest fit >= 32768"), "{long}");

    let rules = list(&["--kind", "rules"]);
    assert!(rules.starts_with("RULE TABLE"), "{rules}");
    // One row per built-in table file.
    let tables = std::fs::read_dir(common::root().join("crates/core/profiles/rules"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "yaml")
        })
        .count();
    assert_eq!(rules.lines().count(), 1 + tables, "{rules}");

    // JSON carries the same figures.
    let o = bin_on("cpu-server.yaml")
        .args(["profiles", "list", "--kind", "hardware", "--format", "json"])
        .output()
        .unwrap();
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let r = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == "rtx-4090")
        .unwrap();
    assert_eq!(r["memory_bytes"], file["memory"]["size_bytes"]);
    assert_eq!(r["bf16_tflops"], tf["bf16_fp32acc"]);
}

/// `--version`: the crate version, the commit the binary was built from (build.rs; "unknown" without git),
/// and the engine versions the plans are proven against.
#[test]
fn version_names_the_commit_and_the_pinned_engines() {
    let o = common::bin().arg("--version").output().unwrap();
    assert_exit(&o, 0);
    let v = text(&o.stdout);
    let commit = std::process::Command::new("git")
        .arg("-C")
        .arg(common::root())
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success() && common::root().join(".git").exists())
        .map_or("unknown".to_string(), |o| {
            text(&o.stdout).trim().to_string()
        });
    assert!(
        v.starts_with(&format!(
            "optimizer {} (commit {commit})\n",
            env!("CARGO_PKG_VERSION")
        )),
        "{v}"
    );
    assert!(v.contains(optimizer::memory::llama_cpp::ENGINE), "{v}");
    assert!(
        v.contains("0c1e5709") && v.contains("llama-cpp-python 0.3.36"),
        "{v}"
    );
    assert!(
        v.contains(&format!("vLLM {}", optimizer::memory::vllm::VERSION)),
        "{v}"
    );
    for (name, version) in optimizer::memory::torch::STACK {
        assert!(v.contains(&format!("{name} {version}")), "{v}");
    }
    // -V is the one line.
    let o = common::bin().arg("-V").output().unwrap();
    assert_exit(&o, 0);
    assert_eq!(text(&o.stdout).lines().count(), 1, "{}", text(&o.stdout));
}
