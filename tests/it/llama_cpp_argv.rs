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

/// The argv names the backend the GPU runs under (issue 27 item 4): an AMD GPU is planned for ROCm (`-dev ROCm0`,
/// `HIP_VISIBLE_DEVICES`) unless the inventory says `backend: vulkan`, which gets `-dev Vulkan0` and
/// `GGML_VK_VISIBLE_DEVICES`, as does an Intel GPU the inventory says runs Vulkan; the document's device id and
/// warnings say which and why.
#[test]
fn amd_and_intel_gpus_get_the_backend_the_inventory_says() {
    let set = profiles();
    let dir = tempfile::tempdir().unwrap();
    let (path, spec) = synth(dir.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    let path = path.to_str().unwrap();
    let cases = [
        (
            hardware::GpuVendor::Amd,
            None,
            "ROCm0",
            "HIP_VISIBLE_DEVICES",
            "rocm",
        ),
        (
            hardware::GpuVendor::Amd,
            Some(hardware::ComputeBackend::Vulkan),
            "Vulkan0",
            "GGML_VK_VISIBLE_DEVICES",
            "vulkan",
        ),
        (
            hardware::GpuVendor::Intel,
            Some(hardware::ComputeBackend::Vulkan),
            "Vulkan0",
            "GGML_VK_VISIBLE_DEVICES",
            "vulkan",
        ),
    ];
    for (vendor, backend, dev, var, prefix) in cases {
        let mut inv = common::inventory("amd-radeon.yaml");
        inv.gpus[0].vendor = vendor;
        inv.gpus[0].backend = backend;
        let d = common::plan(&spec, path, &inv, &set, "chat", &Overrides::default()).unwrap();
        let a = common::artifact(&d, "llama-server");
        let at = a.argv.iter().position(|w| w == "-dev").unwrap();
        assert_eq!(a.argv[at + 1], dev, "{vendor:?} {backend:?}");
        assert!(
            a.env.contains_key(var),
            "{vendor:?} {backend:?}: {:?}",
            a.env
        );
        let text = serde_json::to_string(&d).unwrap();
        assert!(
            text.contains(&format!("{prefix}:0")),
            "{vendor:?} {backend:?}"
        );
        assert!(
            text.contains(&format!("llama.cpp backend {prefix}")),
            "{vendor:?} {backend:?}: the document says which backend and why"
        );
    }
}
