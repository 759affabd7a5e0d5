//! `optimizer recommend --rate` (issue 29): each offer's plan sized to the load, the sequences by Little's law
//! on the plan's own figures and replicas on the GPUs the preset's plan leaves idle, every option still the plan
//! `resolve` writes for the flags it prints; and the throughput an option counts for a vLLM data-parallel plan.

use super::{AS_OF, INVENTORY, recommend_json, request, resolve, sources};
use crate::common;

use common::vllm_models;
use optimizer::app;
use optimizer::emit::Deployment;
use optimizer_testkit::gguf_builder::LlamaShape;

/// Requests per second a plan sustains, recomputed from its own figures (Little's law): the sequences in flight
/// (`decode tokens/s x TPOT`: the node's over vLLM's replicas) over the seconds a request holds one
/// (`TTFT + generated tokens x TPOT`).
fn plan_requests_per_s(doc: &Deployment, generated: f64) -> f64 {
    let p = &doc.performance;
    let in_flight = p.decode_tokens_per_s * p.time_per_output_token_ms / 1e3;
    in_flight / ((p.time_to_first_token_ms + generated * p.time_per_output_token_ms) / 1e3)
}

/// Requests of `tokens` one vLLM replica's KV pool holds: its blocks less vLLM's null block, over the blocks a
/// request of full-attention layers takes (`ceil(tokens / block_size)`; vllm/v1/core/kv_cache_utils.py).
fn vllm_requests_held(s: &optimizer::emit::VllmSettings, tokens: u64) -> u64 {
    (s.kv_cache_blocks - 1) / tokens.div_ceil(u64::from(s.block_size))
}

/// With `--rate`, the 70B's plan on an 8-GPU node is sized to the load instead of the chat preset's 4
/// sequences (26 p4d nodes before): the sequences one instance runs are the rate times the seconds a request
/// holds one (Little's law, on the sized plan's own TTFT and TPOT), one fewer `--parallel` would not serve the
/// rate, the node's idle GPUs run a second replica (`--objective throughput`), and the option is still the plan
/// `resolve` writes for the flags it prints.
#[test]
fn a_rate_sizes_the_sequences_by_littles_law_and_fills_the_node() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("none.db");
    let m70 = vllm_models::materialize("Llama-3.1-70B-Instruct");
    let rate = 10.0;
    let mut req = request(m70.path(), "chat");
    req.rate_req_per_s = Some(rate);
    let r = app::recommend(&sources(&db), &req).unwrap();
    let generated = common::profiles()
        .workload("chat")
        .unwrap()
        .value
        .generation_tokens as f64;
    let c = r
        .options
        .iter()
        .find(|c| c.id == "aws-p4d-24xlarge-spot")
        .unwrap();
    assert_eq!(c.instances, 1, "{:?}", c.concurrency);
    assert_eq!(r.cheapest.as_deref(), Some("aws-p4d-24xlarge-spot"));
    let optimizer::emit::Settings::Vllm(s) = &c.plan.settings else {
        panic!("{}", c.settings)
    };
    assert_eq!(
        s.tensor_parallel_size * s.replicas_per_node,
        8,
        "every GPU of the node works: {}",
        c.settings
    );
    let k = c.concurrency.as_ref().unwrap();
    assert!(k.replicas_on_idle_gpus && k.bound == "rate", "{k:?}");
    let p = &c.plan.performance;
    let held_s = (p.time_to_first_token_ms + generated * p.time_per_output_token_ms) / 1e3;
    assert!(f64::from(k.sequences) >= rate * held_s, "{k:?}");
    assert!(plan_requests_per_s(&c.plan, generated) >= rate);
    assert!(u64::from(s.max_num_seqs) <= vllm_requests_held(s, 161 + 338));
    let n = k.parallel.unwrap();
    assert!(
        c.resolve_flags
            .ends_with(&format!("--parallel {n} --objective throughput")),
        "{}",
        c.resolve_flags
    );
    let doc = resolve(&db, m70.path(), "chat", &c.resolve_flags);
    assert_eq!(doc, *c.plan);
    let fewer = c
        .resolve_flags
        .replace(&format!("--parallel {n}"), &format!("--parallel {}", n - 1));
    let doc = resolve(&db, m70.path(), "chat", &fewer);
    assert!(plan_requests_per_s(&doc, generated) < rate, "{fewer}");
    // Every sized option serves its share of the rate with the sequences Little's law asks of it.
    for c in r
        .options
        .iter()
        .filter(|c| c.status == optimizer::emit::Status::Fits)
    {
        let k = c.concurrency.as_ref().unwrap();
        let share = rate / c.instances as f64;
        assert!(plan_requests_per_s(&c.plan, generated) >= share, "{}", c.id);
        assert!(
            (k.needed - share * held(&c.plan, generated)).abs() < 1e-9,
            "{}",
            c.id
        );
    }
}

fn held(doc: &Deployment, generated: f64) -> f64 {
    let p = &doc.performance;
    (p.time_to_first_token_ms + generated * p.time_per_output_token_ms) / 1e3
}

/// Past what one instance's KV pool holds, the rate is spread over instances: each runs no more sequences than
/// its pool holds at the workload's length (vLLM would preempt the rest), and the share of the rate each one
/// takes, with the sequences that share needs; the table says which bound stopped one instance.
#[test]
fn past_one_instances_kv_pool_the_rate_is_spread_over_instances() {
    let m70 = vllm_models::materialize("Llama-3.1-70B-Instruct");
    let m = m70.path().to_str().unwrap();
    let rate = 100.0;
    let (v, code) = recommend_json(&["-m", m, "-w", "chat", "--rate", "100"]);
    assert_eq!(code, 0, "{v}");
    let generated = common::profiles()
        .workload("chat")
        .unwrap()
        .value
        .generation_tokens as f64;
    let o = &v["options"][0];
    assert_eq!(o["price"]["id"], "aws-p4d-24xlarge-spot");
    let k = &o["concurrency"];
    assert_eq!(k["bound"], "kv-pool", "{k}");
    let instances = o["instances"].as_f64().unwrap();
    assert!(instances > 1.0);
    let req_s = o["requests_per_s"].as_f64().unwrap();
    assert!(
        req_s >= rate / instances && req_s * (instances - 1.0) < rate,
        "{o}"
    );
    let most = k["most_per_instance"].as_f64().unwrap();
    assert!(k["sequences"].as_f64().unwrap() <= most, "{k}");
    let doc = resolve(
        &tempfile::tempdir().unwrap().path().join("none.db"),
        m70.path(),
        "chat",
        o["resolve_flags"].as_str().unwrap(),
    );
    let optimizer::emit::Settings::Vllm(s) = &doc.settings else {
        panic!()
    };
    assert!(u64::from(s.max_num_seqs) <= vllm_requests_held(s, 161 + 338));
    assert!(plan_requests_per_s(&doc, generated) >= rate / instances);
    let out = common::bin_on(INVENTORY)
        .args([
            "recommend",
            "--as-of",
            AS_OF,
            "-w",
            "chat",
            "--rate",
            "100",
            "-m",
            m,
        ])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("    concurrency (kv-pool): one instance runs at most"),
        "{table}"
    );
}

/// A vLLM plan with data-parallel replicas states the node's throughput (`runtime/vllm/space.rs` multiplies
/// its decode rate by the engines): an option counts it once, not once more per replica.
#[test]
fn a_vllm_data_parallel_plan_counts_its_replicas_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("none.db");
    let m70 = vllm_models::materialize("Llama-3.1-70B-Instruct");
    let r = app::recommend(&sources(&db), &request(m70.path(), "batch-inference")).unwrap();
    let generated = common::profiles()
        .workload("batch-inference")
        .unwrap()
        .value
        .generation_tokens as f64;
    let c = r
        .options
        .iter()
        .find(|c| c.id == "aws-p4d-24xlarge-spot")
        .unwrap();
    assert!(c.replicas_per_instance > 1, "{}", c.settings);
    let want = plan_requests_per_s(&c.plan, generated);
    assert!(
        (c.requests_per_s - want).abs() < 1e-9 * want,
        "{} vs {want}",
        c.requests_per_s
    );
}

/// `--runtime` is part of the plan, so it is part of the `resolve` command each option prints: re-run, the
/// command gives the option's plan.
#[test]
fn the_runtime_flag_is_in_every_options_resolve_command() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("none.db");
    let (gguf, _) = common::synth(dir.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    let mut req = request(&gguf, "chat");
    req.overrides.runtime = Some(optimizer::profile::RuntimeId::LlamaCpp);
    let r = app::recommend(&sources(&db), &req).unwrap();
    assert!(
        r.options
            .iter()
            .all(|c| c.resolve_flags.ends_with(" --runtime llama.cpp")),
        "{:?}",
        r.options
            .iter()
            .map(|c| &c.resolve_flags)
            .collect::<Vec<_>>()
    );
    let c = &r.options[0];
    assert_eq!(resolve(&db, &gguf, "chat", &c.resolve_flags), *c.plan);
}
