//! `resolve --kv-type TYPE` (issue 25, item 5): the KV cache type pinned on both serving engines (llama-server
//! `-ctk`/`-ctv`, vllm serve `--kv-cache-dtype`), with provenance `user`; a type the engine would refuse on the
//! planned hardware exits 2 naming the engine's reason; and the "To fit" KV suggestion, now `(resolve --kv-type
//! q8_0)`, fits when followed.

use std::path::Path;
use std::process::Output;

use crate::common;
use common::vllm_models;

use optimizer::emit::{Deployment, Settings, Source};
use optimizer_testkit::gguf_builder::LlamaShape;

/// `optimizer [--profiles DIR] resolve --format json -w WORKLOAD -m MODEL ARGS...` on `inventory`.
fn resolve(
    inventory: &str,
    profiles: Option<&Path>,
    model: &Path,
    workload: &str,
    args: &[&str],
) -> Output {
    let mut cmd = common::bin_on(inventory);
    if let Some(p) = profiles {
        cmd.arg("--profiles").arg(p);
    }
    cmd.args(["resolve", "--format", "json", "-w", workload, "-m"])
        .arg(model)
        .args(args)
        .output()
        .unwrap()
}

fn doc(o: &Output) -> Deployment {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("no document ({e}): {}", String::from_utf8_lossy(&o.stderr)))
}

/// Whether `argv` holds `flag value` in that order.
fn has_pair(argv: &[String], flag: &str, value: &str) -> bool {
    argv.windows(2).any(|w| w[0] == flag && w[1] == value)
}

#[test]
fn kv_type_pins_llama_cpp_cache_types_k_and_v() {
    let dir = tempfile::tempdir().unwrap();
    let (m8, _) = common::synth(dir.path(), "m8.gguf", LlamaShape::LLAMA3_8B);
    // The chat preset prefers f16 and fits it on a 16 GB card; the pin overrides the preference.
    let before = resolve("desktop-rtx4080.yaml", None, &m8, "chat", &[]);
    common::assert_planned(&before);
    assert_eq!(common::llama(&doc(&before)).cache_type_k, "f16");
    let o = resolve(
        "desktop-rtx4080.yaml",
        None,
        &m8,
        "chat",
        &["--kv-type", "q8_0"],
    );
    common::assert_planned(&o);
    let d = doc(&o);
    let s = common::llama(&d);
    assert_eq!(
        (s.cache_type_k.as_str(), s.cache_type_v.as_str()),
        ("q8_0", "q8_0")
    );
    let argv = &common::artifact(&d, "llama-server").argv;
    assert!(
        has_pair(argv, "-ctk", "q8_0") && has_pair(argv, "-ctv", "q8_0"),
        "{argv:?}"
    );
    let why = &d.provenance["settings.cache_type_k"];
    assert_eq!(why.source, Source::User, "{why:?}");
    assert!(why.detail.contains("--kv-type q8_0"), "{why:?}");
}

#[test]
fn kv_type_pins_vllm_kv_cache_dtype() {
    let m = vllm_models::materialize("Llama-3.1-8B");
    // An L40S (compute capability 8.9) runs an fp8 KV cache.
    let o = resolve(
        "cpu-server.yaml",
        None,
        m.path(),
        "chat",
        &["--hardware", "l40s", "--kv-type", "fp8"],
    );
    common::assert_planned(&o);
    let d = doc(&o);
    let Settings::Vllm(s) = &d.settings else {
        panic!("not a vLLM plan: {:?}", d.settings);
    };
    assert_eq!(s.kv_cache_dtype, "fp8");
    let argv = &d.artifact("vllm").expect("a vllm artifact").argv;
    assert!(has_pair(argv, "--kv-cache-dtype", "fp8"), "{argv:?}");
    assert_eq!(d.provenance["settings.kv_cache_dtype"].source, Source::User);
}

#[test]
fn fp8_kv_type_below_compute_capability_8_9_exits_2_naming_it() {
    let m = vllm_models::materialize("Llama-3.1-8B");
    // An A100 is compute capability 8.0: vLLM has no native fp8 KV cache there (choose::FP8_KV_MIN_CC).
    let o = resolve(
        "cpu-server.yaml",
        None,
        m.path(),
        "chat",
        &["--hardware", "a100-40gb-pcie", "--kv-type", "fp8"],
    );
    common::assert_exit(&o, 2);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("compute capability 8.9") && err.contains("8.0"),
        "{err}"
    );
}

#[test]
fn kv_types_the_engine_does_not_take_exit_2_naming_those_it_does() {
    let dir = tempfile::tempdir().unwrap();
    let (m8, _) = common::synth(dir.path(), "m8.gguf", LlamaShape::LLAMA3_8B);
    let o = resolve(
        "desktop-rtx4080.yaml",
        None,
        &m8,
        "chat",
        &["--kv-type", "q8_1"],
    );
    common::assert_exit(&o, 2);
    let err = String::from_utf8_lossy(&o.stderr);
    // The pinned engine's argument table (tests/fixtures/llama-cpp/llama-server-args.json kv_cache_types).
    assert!(
        err.contains("-ctk/-ctv accept") && err.contains("iq4_nl"),
        "{err}"
    );
    let m = vllm_models::materialize("Llama-3.1-8B");
    let o = resolve(
        "cpu-server.yaml",
        None,
        m.path(),
        "chat",
        &["--hardware", "l40s", "--kv-type", "q8_0"],
    );
    common::assert_exit(&o, 2);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("auto") && err.contains("fp8"), "{err}");
    // Training keeps no KV cache.
    let o = resolve(
        "cpu-server.yaml",
        None,
        m.path(),
        "training",
        &["--hardware", "a100-80gb-sxm", "--kv-type", "f16"],
    );
    common::assert_exit(&o, 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("torch"));
}

#[test]
fn quantized_kv_type_without_flash_attention_exits_2_with_the_engines_reason() {
    // No built-in rule turns llama.cpp's flash attention off, so an overlay does: plain attention on the CPU
    // from 1024 tokens per sequence.
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("profiles/rules");
    std::fs::create_dir_all(&rules).unwrap();
    std::fs::write(
        rules.join("no-fa.yaml"),
        "kind: attention\nid: no-fa\nrules:\n  - {id: llama-cpu-math, runtime: llama.cpp, device: cpu, min_sequence: 1024, kernel: sdpa-math, why: t}\n",
    )
    .unwrap();
    let profiles = dir.path().join("profiles");
    let (m8, _) = common::synth(dir.path(), "m8.gguf", LlamaShape::LLAMA3_8B);
    let o = resolve(
        "cpu-server.yaml",
        Some(&profiles),
        &m8,
        "inference",
        &["--kv-type", "q8_0"],
    );
    common::assert_exit(&o, 2);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("V cache quantization requires flash_attn") && err.contains("llama-cpu-math"),
        "{err}"
    );
    // An f16 cache runs without flash attention.
    let o = resolve(
        "cpu-server.yaml",
        Some(&profiles),
        &m8,
        "inference",
        &["--kv-type", "f16"],
    );
    common::assert_planned(&o);
    assert!(!common::llama(&doc(&o)).flash_attention);
}

#[test]
fn the_kv_suggestion_names_the_flag_and_fits_when_followed() {
    let dir = tempfile::tempdir().unwrap();
    let (m8, _) = common::synth(dir.path(), "m8.gguf", LlamaShape::LLAMA3_8B);
    // Two 8192-token sequences with an f16 cache and every layer on an 8 GB laptop GPU: over by 0.70 GiB.
    let base = [
        "--kv-type",
        "f16",
        "-c",
        "8192",
        "--n-gpu-layers",
        "33",
        "--parallel",
        "2",
    ];
    let o = resolve("laptop-rtx4060.yaml", None, &m8, "chat", &base);
    common::assert_exit(&o, 3);
    let d = doc(&o);
    let kv = d
        .suggestions
        .iter()
        .find(|s| s.contains("KV cache"))
        .unwrap_or_else(|| panic!("no KV suggestion: {:?}", d.suggestions));
    assert!(kv.ends_with("(resolve --kv-type q8_0)"), "{kv}");
    let mut followed = base.to_vec();
    followed[1] = "q8_0";
    let o = resolve("laptop-rtx4060.yaml", None, &m8, "chat", &followed);
    common::assert_planned(&o);
    let s = common::llama(&doc(&o)).clone();
    assert_eq!(
        (s.cache_type_k.as_str(), s.gpu_layers, s.parallel),
        ("q8_0", 33, 2)
    );
}

#[test]
fn the_vllm_fp8_suggestion_names_the_flag_and_fits_when_followed() {
    let m = vllm_models::materialize("Llama-3.1-8B");
    // One 65536-token request of a BF16 8B with a 16-bit cache on an L4 (compute capability 8.9): vLLM starts
    // when the pool holds one request at --max-model-len (issue 28), which 8 GiB of 16-bit KV does not fit.
    let base = [
        "--hardware",
        "l4",
        "--kv-type",
        "auto",
        "-c",
        "65536",
        "--parallel",
        "1",
    ];
    let o = resolve("cpu-server.yaml", None, m.path(), "chat", &base);
    common::assert_exit(&o, 3);
    let d = doc(&o);
    let kv = d
        .suggestions
        .iter()
        .find(|s| s.contains("fp8 KV cache"))
        .unwrap_or_else(|| panic!("no KV suggestion: {:?}", d.suggestions));
    assert!(kv.ends_with("(resolve --kv-type fp8)"), "{kv}");
    let mut followed = base.to_vec();
    followed[3] = "fp8";
    let o = resolve("cpu-server.yaml", None, m.path(), "chat", &followed);
    common::assert_planned(&o);
    let d = doc(&o);
    let Settings::Vllm(s) = &d.settings else {
        panic!("not a vLLM plan");
    };
    assert_eq!(
        (s.kv_cache_dtype.as_str(), s.max_model_len, s.max_num_seqs),
        ("fp8", 65536, 1)
    );
}
