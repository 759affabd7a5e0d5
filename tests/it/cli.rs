//! End-to-end tests of the `optimizer` binary: exit codes, stdout and stderr.

use crate::common;
use common::{bin, fixture};

use std::process::{Output, Stdio};

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run optimizer")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("utf-8 stdout")
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).expect("utf-8 stderr")
}

/// The keys the README promises in the inspect JSON/YAML contract.
const CONTRACT_KEYS: &[&str] = &[
    "format",
    "architecture",
    "parameter_count",
    "tensor_count",
    "tensor_bytes",
    "file_bytes",
    "block_count",
    "context_length",
    "embedding_length",
    "feed_forward_length",
    "head_count",
    "head_count_kv",
    "vocab_size",
    "file_type",
    "fingerprint",
    "layers",
];

#[test]
fn inspect_table_describes_the_model() {
    let p = fixture("gguf/llama-q4_k_m.gguf");
    let o = run(&["inspect", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    for needle in [
        "GGUF v3, little-endian",
        "llama",
        "886016",
        "549248 bytes",
        "MOSTLY_Q4_K_M (15)",
        "8 heads, 2 KV heads",
        "Q4_K",
        "Q6_K",
        "fingerprint",
    ] {
        assert!(out.contains(needle), "missing {needle:?} in\n{out}");
    }
    assert!(stderr(&o).is_empty());
}

#[test]
fn inspect_json_follows_the_contract() {
    let p = fixture("gguf/llama-q4_k_m.gguf");
    let o = run(&["inspect", "--format", "json", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("valid JSON");
    for k in CONTRACT_KEYS {
        assert!(v.get(k).is_some(), "missing key {k}");
    }
    assert_eq!(v["format"], "gguf");
    assert_eq!(v["parameter_count"], 886016);
    assert_eq!(v["tensor_bytes"], 549248);
    assert_eq!(v["head_count_kv"], 2);
    assert_eq!(v["file_type"], 15);
    assert_eq!(v["layers"].as_array().unwrap().len(), 2);
    assert!(v.get("tensors").is_none(), "tensors only with --tensors");
    let layer_bytes: u64 = v["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(
        layer_bytes + v["non_layer_bytes"].as_u64().unwrap(),
        v["tensor_bytes"].as_u64().unwrap()
    );
}

#[test]
fn inspect_yaml_matches_json() {
    let p = fixture("gguf/per-layer-kv.gguf");
    let j = run(&["inspect", "--format", "json", p.to_str().unwrap()]);
    let y = run(&["inspect", "--format", "yaml", p.to_str().unwrap()]);
    assert_eq!(y.status.code(), Some(0), "{}", stderr(&y));
    let jv: serde_json::Value = serde_json::from_str(&stdout(&j)).unwrap();
    let yv: serde_json::Value = serde_yaml_ng::from_str(&stdout(&y)).unwrap();
    for k in CONTRACT_KEYS {
        assert_eq!(jv[k], yv[k], "key {k}");
    }
    // Per-layer values stay arrays, as GGUF stores them.
    assert!(jv["head_count_kv"].is_array());
}

#[test]
fn inspect_tensors_lists_every_tensor() {
    let p = fixture("gguf/mixtral-moe-q4_k.gguf");
    let o = run(&[
        "inspect",
        "--format",
        "json",
        "--tensors",
        p.to_str().unwrap(),
    ]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let tensors = v["tensors"].as_array().unwrap();
    assert_eq!(tensors.len() as u64, v["tensor_count"].as_u64().unwrap());
    assert!(tensors.iter().any(|t| t["role"] == "expert"));
    let table = run(&["inspect", "--tensors", p.to_str().unwrap()]);
    let out = stdout(&table);
    assert!(out.contains("blk.0.ffn_gate_exps.weight"), "{out}");
}

#[test]
fn split_model_from_a_middle_shard() {
    let p = fixture("gguf/split/llama-split-00002-of-00003.gguf");
    let o = run(&["inspect", "--format", "json", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["files"].as_array().unwrap().len(), 3);
    let unsplit = run(&[
        "inspect",
        "--format",
        "json",
        fixture("gguf/split/llama-unsplit.gguf").to_str().unwrap(),
    ]);
    let u: serde_json::Value = serde_json::from_str(&stdout(&unsplit)).unwrap();
    assert_eq!(v["fingerprint"], u["fingerprint"]);
    assert_eq!(v["tensor_bytes"], u["tensor_bytes"]);
}

#[test]
fn missing_file_is_a_usage_error() {
    let o = run(&["inspect", "/nonexistent/model.gguf"]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(err.contains("/nonexistent/model.gguf"), "{err}");
    assert!(err.contains("hint:"), "{err}");
    assert!(stdout(&o).is_empty());
}

#[test]
fn unknown_flag_is_a_usage_error() {
    let o = run(&["inspect", "--frobnicate", "x.gguf"]);
    assert_eq!(o.status.code(), Some(2));
    let o = run(&["inspect", "--format", "xml", "x.gguf"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn invalid_model_exits_4_naming_file_offset_and_defect() {
    let dir = tempfile::tempdir().unwrap();
    let src = std::fs::read(fixture("gguf/llama-q4_k_m.gguf")).unwrap();
    let p = dir.path().join("cut.gguf");
    std::fs::write(&p, &src[..src.len() / 2]).unwrap();
    let o = run(&["inspect", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("cut.gguf"), "{err}");
    assert!(err.contains("at byte"), "{err}");
    assert!(err.contains("beyond the end of the file"), "{err}");
    assert!(stdout(&o).is_empty(), "no partial output");

    let p = dir.path().join("garbage.gguf");
    std::fs::write(&p, b"GGUF\x01\x00\x00\x00").unwrap();
    let o = run(&["inspect", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(4));
    assert!(stderr(&o).contains("version 1"), "{}", stderr(&o));

    let p = dir.path().join("notes.txt");
    std::fs::write(&p, b"hello").unwrap();
    let o = run(&["inspect", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(4));
    assert!(stderr(&o).contains("notes.txt"));
}

#[test]
fn closed_stdout_pipe_is_not_an_error() {
    let p = fixture("gguf/llama-q4_k_m.gguf");
    let mut child = bin()
        .args([
            "inspect",
            "--format",
            "json",
            "--tensors",
            p.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Close the read end before the child writes.
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn safetensors_directory_inspects() {
    let p = fixture("safetensors/qwen2-sharded");
    let o = run(&["inspect", "--format", "json", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["format"], "safetensors");
    assert_eq!(v["architecture"], "qwen2");
    assert_eq!(v["files"].as_array().unwrap().len(), 2);
    assert_eq!(v["tied_embeddings"], true);
}

#[test]
fn help_and_version_exit_0() {
    assert_eq!(run(&["--help"]).status.code(), Some(0));
    assert_eq!(run(&["--version"]).status.code(), Some(0));
    assert_eq!(run(&["inspect", "--help"]).status.code(), Some(0));
}
