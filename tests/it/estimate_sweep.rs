//! `optimizer estimate --sweep context|parallel`: the memory-by-context (and by sequences) table, each row the
//! same figures a plain `estimate` at that value gives, and the largest value that fits each device marked.

use crate::common;

use optimizer_testkit::gguf_builder::LlamaShape;
use serde_json::Value;

fn json(args: &[&str], model: &std::path::Path) -> Value {
    let o = common::bin_on("laptop-rtx4060.yaml")
        .args(["estimate", "--format", "json", "-m"])
        .arg(model)
        .args(args)
        .output()
        .unwrap();
    common::assert_exit(&o, 0);
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn a_context_sweep_is_the_plain_estimates_with_the_largest_fit_marked() {
    let dir = tempfile::tempdir().unwrap();
    let (m, spec) = common::synth(dir.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    let trained = spec.hparams.context_length.unwrap();
    let sw = json(&["--sweep", "context", "--hardware", "rtx-4060"], &m);
    let rows = sw["rows"].as_array().unwrap();
    let values: Vec<u64> = rows.iter().map(|r| r["value"].as_u64().unwrap()).collect();
    assert_eq!(values[0], 512);
    assert_eq!(*values.last().unwrap(), trained);
    assert!(values.windows(2).all(|w| w[1] == (w[0] * 2).min(trained)));
    let devices = sw["devices"].as_array().unwrap();
    for (r, v) in rows.iter().zip(&values) {
        let one = json(&["-c", &v.to_string(), "--hardware", "rtx-4060"], &m);
        let totals: Vec<u64> = one["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["total_bytes"].as_u64().unwrap())
            .collect();
        let swept: Vec<u64> = r["totals"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap())
            .collect();
        assert_eq!(swept, totals, "-c {v}");
    }
    // The GPU's largest fit: every smaller value fits its room, the next one does not.
    let (i, gpu) = devices
        .iter()
        .enumerate()
        .find(|(_, d)| d["device"] == "cuda:0")
        .unwrap();
    let room = gpu["room_bytes"].as_u64().unwrap();
    let fit = gpu["largest_fit"]
        .as_u64()
        .expect("an 8B Q4 model fits an 8 GB GPU at some context");
    for (r, v) in rows.iter().zip(&values) {
        let t = r["totals"][i].as_u64().unwrap();
        assert_eq!(t <= room, *v <= fit, "-c {v}: {t} vs {room}");
    }
    assert!(fit >= 512);
}

#[test]
fn a_parallel_sweep_doubles_to_llama_cpps_sequence_limit_and_the_table_marks_the_fit() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = common::synth(dir.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    let sw = json(
        &[
            "--sweep",
            "parallel",
            "-c",
            "4096",
            "--hardware",
            "rtx-4060",
        ],
        &m,
    );
    let values: Vec<u64> = sw["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["value"].as_u64().unwrap())
        .collect();
    assert_eq!(values, [1, 2, 4, 8, 16, 32, 64, 128, 256]);
    // 256 sequences of 4096 tokens (a 128 GiB KV cache) do not fit an 8 GB GPU; one does.
    let gpu = sw["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["device"] == "cuda:0")
        .unwrap();
    let fit = gpu["largest_fit"].as_u64().unwrap();
    assert!((1..256).contains(&fit), "{fit}");
    let o = common::bin_on("laptop-rtx4060.yaml")
        .args([
            "estimate",
            "--sweep",
            "context",
            "--hardware",
            "rtx-4060",
            "-m",
        ])
        .arg(&m)
        .output()
        .unwrap();
    common::assert_exit(&o, 0);
    let t = String::from_utf8(o.stdout).unwrap();
    assert!(
        t.contains('*') && t.contains("cuda:0: the largest that fits is -c "),
        "{t}"
    );
}

/// A pasted llama-server command line: flags that do not change memory are accepted and named in a note, with
/// the same totals as without them; `-ngl all` is every layer and `-ngl auto` too, with a note that llama.cpp
/// fits the count at start-up. Other subcommands keep refusing those flags.
#[test]
fn a_pasted_llama_server_line_is_accepted_with_its_memory_free_flags_named() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = common::synth(dir.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    let hw = ["--hardware", "rtx-4060", "-c", "4096"];
    let plain = json(&[&hw[..], &["-ngl", "-1"]].concat(), &m);
    let pasted = json(
        &[
            &hw[..],
            &[
                "-ngl",
                "all",
                "--host",
                "0.0.0.0",
                "--port=8080",
                "-t",
                "8",
                "--jinja",
                "-a",
                "my model",
            ],
        ]
        .concat(),
        &m,
    );
    assert_eq!(pasted["devices"], plain["devices"]);
    let notes = pasted["notes"].to_string();
    for f in [
        "--host 0.0.0.0",
        "--port 8080",
        "-t 8",
        "--jinja",
        "-a my model",
    ] {
        assert!(notes.contains(f), "{f}: {notes}");
    }
    let auto = json(&[&hw[..], &["-ngl", "auto"]].concat(), &m);
    assert_eq!(auto["devices"], plain["devices"]);
    assert!(auto["notes"].to_string().contains("-ngl auto"));
    let o = common::bin_on("laptop-rtx4060.yaml")
        .args(["inspect", "--host", "0.0.0.0"])
        .arg(&m)
        .output()
        .unwrap();
    common::assert_exit(&o, 2);
}

/// `estimate --hardware` and `resolve --hardware` give a profiled GPU the same room: what CUDA leaves programs
/// (`memory.usable_bytes`, 79.10 GiB on an H100 80GB) less the same reserve, not the nominal 80 GiB.
#[test]
fn estimate_and_resolve_give_a_profiled_gpu_the_same_room() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = common::synth(dir.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    let sw = json(&["--sweep", "context", "--hardware", "h100-sxm"], &m);
    let room = sw["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["device"] == "cuda:0")
        .and_then(|d| d["room_bytes"].as_u64())
        .unwrap();
    let o = common::bin_on("laptop-rtx4060.yaml")
        .args([
            "resolve",
            "--format",
            "json",
            "-w",
            "chat",
            "--hardware",
            "h100-sxm",
            "-m",
        ])
        .arg(&m)
        .output()
        .unwrap();
    common::assert_exit(&o, 0);
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    let gpu = doc["memory"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["device"] == "cuda:0")
        .unwrap();
    let capacity = gpu["capacity_bytes"].as_u64().unwrap();
    assert_eq!(capacity, 84_937_801_728, "the profile's usable memory");
    assert_eq!(room, capacity - gpu["reserve_bytes"].as_u64().unwrap());
}
