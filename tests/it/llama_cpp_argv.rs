//! The document's `launch.llama_server.argv`, given to the pinned llama.cpp on this machine, allocates what the
//! document predicted: the engine's dry run (`llama-fit-params --fit-print on`, the same argument parser as
//! llama-server) reports weights, KV cache and compute per buffer type, and each must agree with
//! `memory.devices[cpu]` within the memory model's tolerances.
//!
//! It needs a build of the pinned engine (tests/fixtures/llama-cpp/README.md says how); run it with
//! `LLAMA_FIT_PARAMS=/path/to/llama-fit-params cargo test --test llama_cpp_argv -- --ignored`.

use crate::common;
use common::{profiles, synth};

use std::process::Command;

use optimizer::hardware;
use optimizer::plan::Overrides;
use optimizer_testkit::gguf_builder::LlamaShape;

#[test]
#[ignore = "needs LLAMA_FIT_PARAMS: a build of the pinned llama.cpp (tests/fixtures/llama-cpp/README.md)"]
fn emitted_argv_allocates_what_the_document_predicts() {
    let fit = std::env::var("LLAMA_FIT_PARAMS")
        .expect("set LLAMA_FIT_PARAMS to the llama-fit-params binary");
    let dir = tempfile::tempdir().unwrap();
    let (path, spec) = synth(dir.path(), "llama3-8b.gguf", LlamaShape::LLAMA3_8B);
    let set = profiles();
    let mut inv = hardware::probe_live();
    // This check is about the CPU backend the engine was built with.
    inv.gpus.clear();
    for workload in ["inference", "chat", "batch-inference"] {
        let label = path.display().to_string();
        let d = common::plan(&spec, &label, &inv, &set, workload, &Overrides::default()).unwrap();
        let argv = &common::artifact(&d, "llama-server").argv;
        assert_eq!(argv[0], "llama-server");
        let out = Command::new(&fit)
            .args(&argv[1..])
            .args(["--fit-print", "on", "-v", "--log-colors", "off"])
            .env("GGML_NO_BACKTRACE", "1")
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{workload}: llama-fit-params failed:\n{log}"
        );
        // common_memory_breakdown_print: "|   - Host  |  total = model + context + compute |" in whole MiB.
        let row = |name: &str| -> Vec<u64> {
            log.lines()
                .find(|l| {
                    l.contains("common_memory_breakdown_print") && l.contains(&format!("- {name} "))
                })
                .unwrap_or_else(|| panic!("{workload}: no {name} row in:\n{log}"))
                .split(|c: char| !c.is_ascii_digit())
                .filter(|s| !s.is_empty())
                .map(|s| s.parse().unwrap())
                .collect()
        };
        let host = row("Host");
        let (model_mib, context_mib, compute_mib) = (
            host[host.len() - 3],
            host[host.len() - 2],
            host[host.len() - 1],
        );
        let repack_mib = if log.contains("- CPU_REPACK ") {
            let r = row("CPU_REPACK");
            r[r.len() - 3]
        } else {
            0
        };
        let m = &d.memory.devices[0].components;
        assert_eq!(m.weights_bytes >> 20, model_mib, "{workload}: host weights");
        assert_eq!(
            m.weights_repack_bytes >> 20,
            repack_mib,
            "{workload}: repacked weights"
        );
        // The breakdown's context column is the KV cache (the logits buffer is not in it).
        assert_eq!(m.kv_cache_bytes >> 20, context_mib, "{workload}: KV cache");
        let ours = m.compute_bytes as f64 / (1u64 << 20) as f64;
        let engine = compute_mib as f64;
        assert!(
            (ours - engine).abs() <= (engine * 0.05).max(16.0),
            "{workload}: compute {ours:.1} MiB, engine {engine} MiB"
        );
        eprintln!(
            "{workload}: argv {:?}\n  engine host {model_mib}+{repack_mib} weights, {context_mib} context, {compute_mib} compute MiB; \
             document {}+{} weights, {} context, {:.1} compute MiB",
            &argv[3..],
            m.weights_bytes >> 20,
            m.weights_repack_bytes >> 20,
            m.kv_cache_bytes >> 20,
            ours
        );
    }
}
