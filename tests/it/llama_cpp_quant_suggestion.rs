//! A llama.cpp plan that does not fit names the llama-quantize type that would (the most precise whose smaller
//! weights bring the whole plan within what the devices hold together), with the figures.

use crate::common;

use optimizer::runtime::llama_cpp::quantize::QUANTS;
use optimizer_testkit::gguf_builder::LlamaShape;

#[test]
fn a_plan_over_by_less_than_its_weights_names_the_quantization_that_fits() {
    let dir = tempfile::tempdir().unwrap();
    let (m, spec) = common::synth(dir.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    // An 8 GB container with a 16 GB GPU: the 8B model's weights and a 224k-token KV cache (28 GiB) do not fit, smaller weights would.
    let o = common::bin_on("container-cgroup.yaml")
        .args([
            "resolve",
            "-w",
            "chat",
            "--format",
            "json",
            "-c",
            "229376",
            // 28x the trained 8192 tokens: an explicit opt-in to plan it (issue 25), to get a plan over by less
            // than its weights.
            "--allow-long-context",
            "--parallel",
            "1",
            "-m",
        ])
        .arg(&m)
        .output()
        .unwrap();
    common::assert_exit(&o, 3);
    let d: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let s = d["suggestions"].to_string();
    let named = QUANTS
        .iter()
        .find(|q| s.contains(&format!("a smaller quantization: {} ", q.name)))
        .unwrap_or_else(|| panic!("no quantization named: {s}"));
    // Derived from the document: the plan's need, the devices' room, its weights at the named type's bits per
    // weight; the type fits and the next more precise one does not.
    let devs = d["memory"]["devices"].as_array().unwrap();
    let sum = |f: &dyn Fn(&serde_json::Value) -> u64| devs.iter().map(f).sum::<u64>();
    let need = sum(&|x| x["total_bytes"].as_u64().unwrap());
    let room =
        sum(&|x| x["capacity_bytes"].as_u64().unwrap() - x["reserve_bytes"].as_u64().unwrap());
    let weights = sum(&|x| x["components"]["weights_bytes"].as_u64().unwrap());
    let bpw = spec.bits_per_weight();
    let fits = |q_bpw: f64| need - weights + (weights as f64 * q_bpw / bpw) as u64 <= room;
    assert!(fits(named.bits_per_weight), "{}", named.name);
    let i = QUANTS.iter().position(|q| q.name == named.name).unwrap();
    if i > 0 && QUANTS[i - 1].bits_per_weight < bpw {
        assert!(
            !fits(QUANTS[i - 1].bits_per_weight),
            "{} would fit too",
            QUANTS[i - 1].name
        );
    }
}
