//! `optimizer recommend` (issue 29): every priced offer planned by `resolve`'s own path, priced, ranked. The
//! figures checked here are recomputed from the price rows and the plans' own figures (never from the code
//! under test's intermediate values), and each top option's plan is compared with what a separate
//! `optimizer resolve` process writes for the flags the option prints.

use std::path::Path;

use crate::common;

use common::vllm_models;
use optimizer::app::{self, Acquire, RecommendRequest, SettingOrigin, Sources};
use optimizer::emit::Deployment;
use optimizer::plan::Overrides;
use optimizer::profile::prices;
use optimizer_testkit::gguf_builder::LlamaShape;
use serde_json::Value;

mod sizing;

const INVENTORY: &str = "desktop-rtx4080.yaml";
/// The day the built-in price files were read (their README): every age is counted to it.
const AS_OF: &str = "2026-11-27";

fn request(model: &Path, workload: &str) -> RecommendRequest {
    RecommendRequest {
        model: model.to_path_buf(),
        workload: workload.into(),
        overrides: Overrides::default(),
        sla_ttft_ms: None,
        sla_tpot_ms: None,
        rate_req_per_s: None,
        budget_usd_per_hour: None,
        acquire: Acquire::Rent,
        prices: Vec::new(),
        as_of: Some(AS_OF.into()),
        owned: false,
    }
}

fn sources(db: &Path) -> Sources {
    Sources::new(
        Some((
            common::fixture("inventories").join(INVENTORY),
            SettingOrigin::Flag,
        )),
        Vec::new(),
        Some(db.to_path_buf()),
    )
}

/// `optimizer recommend ... --format json` on the fixture inventory: the output and the exit code.
fn recommend_json(args: &[&str]) -> (Value, i32) {
    let out = common::bin_on(INVENTORY)
        .args(["recommend", "--format", "json", "--as-of", AS_OF])
        .args(args)
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (v, out.status.code().unwrap_or(-1))
}

/// `optimizer resolve --format json -w W -m MODEL FLAGS` with the same inventory and database.
fn resolve(db: &Path, model: &Path, workload: &str, flags: &str) -> Deployment {
    let out = common::bin()
        .arg("--inventory")
        .arg(common::fixture("inventories").join(INVENTORY))
        .arg("--db")
        .arg(db)
        .args(["resolve", "--format", "json", "-w", workload, "-m"])
        .arg(model)
        .args(flags.split_whitespace())
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "resolve {flags}: {e}: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The Mixtral 8x7B Q4_K_M GGUF of the test kit (`tests/fixtures/llama-cpp/models.json`: its real header, the
/// data a sparse hole), written to `dir`.
fn mixtral(dir: &Path) -> std::path::PathBuf {
    let json: Value = serde_json::from_str(
        &std::fs::read_to_string(common::fixture("llama-cpp/models.json")).unwrap(),
    )
    .unwrap();
    let path = dir.join("Mixtral-8x7B-Q4_K_M.gguf");
    common::build(&json["models"]["mixtral-8x7b-q4_k_m"], &path);
    path
}

/// The four "Done means" cases: (name, model, workload, rate). The directories hold the models.
type Case = (&'static str, std::path::PathBuf, &'static str, Option<f64>);
fn done_means_cases(dir: &Path) -> (Vec<Case>, Vec<tempfile::TempDir>) {
    let (gguf, _) = common::synth(dir, "Llama-3.1-8B-Q4_K_M.gguf", LlamaShape::LLAMA3_8B);
    let m70 = vllm_models::materialize("Llama-3.1-70B-Instruct");
    let m8 = vllm_models::materialize("Llama-3.1-8B");
    let cases = vec![
        ("Llama-3.1-8B Q4_K_M GGUF, chat", gguf, "chat", None),
        (
            "Llama-3.1-70B-Instruct BF16, chat at 10 req/s",
            m70.path().to_path_buf(),
            "chat",
            Some(10.0),
        ),
        (
            "Llama-3.1-8B BF16, LoRA fine-tune",
            m8.path().to_path_buf(),
            "fine-tune-lora",
            None,
        ),
        (
            "Mixtral 8x7B Q4_K_M GGUF, batch inference",
            mixtral(dir),
            "batch-inference",
            None,
        ),
    ];
    (cases, vec![m70, m8])
}

/// The top options (the three cheapest and the fewest-GPU one) of the four cases (an 8B GGUF chat, the
/// 70B BF16 checkpoint at 10 req/s, a LoRA fine-tune of the 8B checkpoint, a Mixtral batch job) are exactly the
/// plans `resolve` writes for the hardware flags each option prints: one planner, not two. The fine-tune is
/// planned by the torch runtime, and its options are ranked by trained tokens.
#[test]
fn top_options_are_the_plans_resolve_writes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("none.db");
    let (cases, _keep) = done_means_cases(dir.path());
    for (name, model, workload, rate) in &cases {
        let mut req = request(model, workload);
        req.rate_req_per_s = *rate;
        let r = app::recommend(&sources(&db), &req).unwrap();
        assert!(r.options.len() >= 3, "{name}: {:?}", r.rejected);
        if *workload == "fine-tune-lora" {
            assert_eq!(r.tokens, "trained", "{name}");
            assert!(r.options.iter().all(|c| c.runtime == "torch"), "{name}");
            assert!(
                r.options.iter().all(|c| c.settings.starts_with("lora ")),
                "{name}"
            );
            // The front of a training ranking is by time per trained token: each entry trains faster.
            let speed = |id: &String| r.options.iter().find(|c| &c.id == id).unwrap().tokens_per_s;
            assert!(r.pareto.len() > 1, "{name}");
            assert!(
                r.pareto.windows(2).all(|w| speed(&w[1]) > speed(&w[0])),
                "{name}: {:?}",
                r.pareto
            );
        }
        for c in top_options(&r) {
            let doc = resolve(&db, model, workload, &c.resolve_flags);
            assert_eq!(doc, *c.plan, "{name}: {} ({})", c.id, c.resolve_flags);
            assert_eq!(
                doc.performance.time_per_output_token_ms,
                c.time_per_output_token_ms
            );
        }
    }
}

/// The same under SLA targets given by flag (`--sla-ttft-ms`, `--sla-tpot-ms`): each top option prints them in
/// its `resolve` flags, and `resolve` with those flags writes the identical document (the targets, their
/// provenance, the status). Without them `resolve` holds the plan to the preset's targets: a different document.
#[test]
fn top_options_under_an_sla_are_the_plans_resolve_writes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("none.db");
    let (gguf, _) = common::synth(dir.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    let m70 = vllm_models::materialize("Llama-3.1-70B-Instruct");
    for (model, rate, ttft, tpot) in [
        (gguf.as_path(), None, Some(500.0), Some(15.0)),
        (m70.path(), Some(10.0), None, Some(40.0)),
    ] {
        let mut req = request(model, "chat");
        req.rate_req_per_s = rate;
        req.sla_ttft_ms = ttft;
        req.sla_tpot_ms = tpot;
        let r = app::recommend(&sources(&db), &req).unwrap();
        assert!(r.options.len() >= 3, "{:?}", r.rejected);
        for c in top_options(&r) {
            let want = tpot.map(|t| format!("--sla-tpot-ms {t}")).unwrap();
            assert!(c.resolve_flags.contains(&want), "{}", c.resolve_flags);
            assert_eq!(
                c.resolve_flags.contains("--sla-ttft-ms"),
                ttft.is_some(),
                "{}",
                c.resolve_flags
            );
            let doc = resolve(&db, model, "chat", &c.resolve_flags);
            assert_eq!(doc, *c.plan, "{} ({})", c.id, c.resolve_flags);
            assert_eq!(doc.workload.time_per_output_token_ms, tpot);
            assert_eq!(
                doc.provenance["workload.time_per_output_token_ms"].source,
                optimizer::emit::Source::User
            );
            let preset_flags = c.resolve_flags.split(" --sla-").next().unwrap().to_string();
            let preset = resolve(&db, model, "chat", &preset_flags);
            assert_ne!(preset.workload.time_per_output_token_ms, tpot, "{}", c.id);
        }
    }
}

/// `resolve`'s SLA flags take numbers above 0 (exit 2 otherwise), and `--nodes` takes a node profile that states
/// its fabric (exit 2 for a bare GPU profile or a node whose profile states none).
#[test]
fn resolve_refuses_bad_sla_targets_and_nodes_without_a_fabric() {
    let dir = tempfile::tempdir().unwrap();
    let (gguf, _) = common::synth(dir.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    for (bad, needle) in [
        (&["--sla-tpot-ms", "0"][..], "--sla-tpot-ms 0"),
        (&["--sla-ttft-ms", "inf"], "--sla-ttft-ms inf"),
        (
            &["--hardware", "h100-sxm", "--nodes", "2"],
            "names no node profile",
        ),
        (
            &["--hardware", "dgx-h100", "--nodes", "2"],
            "states no fabric",
        ),
        (&["--hardware", "p5-48xlarge", "--nodes", "0"], "--nodes 0"),
    ] {
        let out = common::bin_on(INVENTORY)
            .args(["resolve", "-w", "chat", "-m"])
            .arg(&gguf)
            .args(bad)
            .output()
            .unwrap();
        common::assert_exit(&out, 2);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{bad:?}: {err}");
    }
}

/// Llama-3.1-405B in BF16 (756 GiB) fits no single priced machine, so recommend offers several nodes of the
/// priced instances whose node profile states the fabric (p5.48xlarge, p4d.24xlarge: EFA), each priced as that
/// many instances, and names the multi-GPU instances it skipped for want of fabric figures. Every multi-node
/// option re-resolves with its printed flags (`--hardware NODE --nodes N`) to the identical document, planned
/// across the nodes (pipeline parallel over them).
#[test]
fn a_405b_bf16_chat_gets_multinode_options_that_re_resolve() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("none.db");
    let (_keep, model) = vllm_models::materialize_bf16(
        "Meta-Llama-3.1-405B-Instruct-FP8",
        "Llama-3.1-405B-Instruct",
    );
    let r = app::recommend(&sources(&db), &request(&model, "chat")).unwrap();
    assert!(r.multinode_offers > 0, "{:?}", r.notes);
    assert!(!r.options.is_empty(), "{:?}", r.rejected);
    // One 8x H100 p5.48xlarge does not hold it (an 8x H200 p5en does): two of them do.
    let rejected = |id: &str| {
        r.rejected
            .iter()
            .any(|x| x.price_id == id && x.reason == "no-fit")
    };
    assert!(rejected("aws-p5-48xlarge-us-east-1-capacity-block"));
    assert!(
        r.options
            .iter()
            .any(|c| c.id == "aws-p5-48xlarge-us-east-1-capacity-block-2-nodes"),
        "{:?}",
        r.rejected
    );
    let set = common::profiles();
    let table = prices::load(&set, &[], prices::parse_date(AS_OF).unwrap()).unwrap();
    for c in r.options.iter().filter(|c| c.nodes > 1) {
        let price = c.price.as_ref().unwrap();
        let (row, _) = table.cloud.iter().find(|(x, _)| x.id == price.id).unwrap();
        assert!(
            (c.usd_per_hour - f64::from(c.nodes) * row.usd_per_hour).abs() < 1e-9,
            "{}",
            c.id
        );
        assert_eq!(
            c.gpus_total,
            u64::from(c.nodes) * u64::from(row.gpus.count),
            "{}",
            c.id
        );
        assert!(
            c.resolve_flags.contains(&format!("--nodes {}", c.nodes)),
            "{}",
            c.resolve_flags
        );
        assert!(
            c.fabric.as_deref().unwrap().contains("node profile"),
            "{}",
            c.id
        );
        assert_eq!(c.plan.topology.nodes, c.nodes, "{}", c.id);
        let doc = resolve(&db, &model, "chat", &c.resolve_flags);
        assert_eq!(doc, *c.plan, "{} ({})", c.id, c.resolve_flags);
    }
    let note = r
        .notes
        .iter()
        .find(|n| n.starts_with("multi-node: "))
        .unwrap();
    assert!(
        note.contains("gcp-a3-highgpu-8g-us-central1-od (its price row names no node profile)"),
        "{note}"
    );
}

/// The four "Done means" tables of docs/recommend.md (not a check):
/// `cargo test --test it recommend::done_means_tables -- --ignored --nocapture`.
#[test]
#[ignore]
fn done_means_tables() {
    let dir = tempfile::tempdir().unwrap();
    let (cases, _keep) = done_means_cases(dir.path());
    for (name, model, workload, rate) in &cases {
        // Relative names in the output: each model is linked under its own name in the temporary directory.
        let link = match model.extension() {
            Some(_) => model.file_name().unwrap().to_os_string(),
            None => name.split(' ').next().unwrap().to_string().into(),
        };
        if !dir.path().join(&link).exists() {
            std::os::unix::fs::symlink(model, dir.path().join(&link)).unwrap();
        }
        let mut c = common::bin_on(INVENTORY);
        c.current_dir(dir.path())
            .args([
                "recommend",
                "--as-of",
                AS_OF,
                "--limit",
                "5",
                "-w",
                workload,
                "-m",
            ])
            .arg(&link);
        if let Some(r) = rate {
            c.args(["--rate", &r.to_string()]);
        }
        let out = c.output().unwrap();
        println!(
            "### {name}\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The tables of docs/recommend.md's multi-node and SLA examples (not a check):
/// `cargo test --test it recommend::multinode_and_sla_tables -- --ignored --nocapture`.
#[test]
#[ignore]
fn multinode_and_sla_tables() {
    let dir = tempfile::tempdir().unwrap();
    let (_keep, m405) = vllm_models::materialize_bf16(
        "Meta-Llama-3.1-405B-Instruct-FP8",
        "Llama-3.1-405B-Instruct",
    );
    let m70 = vllm_models::materialize("Llama-3.1-70B-Instruct");
    let kimi = vllm_models::materialize("Kimi-K2-Instruct");
    std::os::unix::fs::symlink(kimi.path(), dir.path().join("Kimi-K2-Instruct")).unwrap();
    std::os::unix::fs::symlink(&m405, dir.path().join("Llama-3.1-405B-Instruct")).unwrap();
    std::os::unix::fs::symlink(m70.path(), dir.path().join("Llama-3.1-70B-Instruct")).unwrap();
    for (name, args) in [
        (
            "Llama-3.1-405B-Instruct BF16, chat",
            &["-m", "Llama-3.1-405B-Instruct"][..],
        ),
        ("Kimi-K2-Instruct FP8, chat", &["-m", "Kimi-K2-Instruct"]),
        (
            "Llama-3.1-70B-Instruct BF16, chat at 10 req/s, --sla-tpot-ms 40",
            &[
                "-m",
                "Llama-3.1-70B-Instruct",
                "--rate",
                "10",
                "--sla-tpot-ms",
                "40",
            ],
        ),
    ] {
        let out = common::bin_on(INVENTORY)
            .current_dir(dir.path())
            .args(["recommend", "--as-of", AS_OF, "--limit", "8", "-w", "chat"])
            .args(args)
            .output()
            .unwrap();
        println!(
            "### {name}\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Costs, instances and ages recomputed from the price rows and the plans' figures: instances = ceil(rate /
/// requests per instance), USD/h = instances x the row's price, USD per million output tokens = USD/h over
/// rate x generated tokens x 3600 s; the age is the as-of day minus the row's date. The ranking is by USD/h and
/// the Pareto front's latencies fall as its cost rises, every other option being beaten by one of it.
#[test]
fn costs_instances_ages_and_the_front_follow_from_prices_and_plans() {
    let dir = tempfile::tempdir().unwrap();
    let (gguf, _) = common::synth(dir.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    let rate = 10.0;
    let (v, code) = recommend_json(&["-m", gguf.to_str().unwrap(), "-w", "chat", "--rate", "10"]);
    assert_eq!(code, 0, "{v}");
    let set = common::profiles();
    let table = prices::load(&set, &[], prices::parse_date(AS_OF).unwrap()).unwrap();
    let generated = set.workload("chat").unwrap().value.generation_tokens as f64;
    let options = v["options"].as_array().unwrap();
    assert!(options.len() > 10);
    let mut last = 0.0;
    for o in options {
        let id = o["price"]["id"].as_str().unwrap();
        let (row, _) = table.cloud.iter().find(|(r, _)| r.id == id).unwrap();
        let req_s = o["requests_per_s"].as_f64().unwrap();
        let instances = (rate / req_s).ceil();
        assert_eq!(o["instances"].as_f64().unwrap(), instances, "{id}");
        let usd_h = instances * row.usd_per_hour;
        assert!(
            (o["usd_per_hour"].as_f64().unwrap() - usd_h).abs() < 1e-9,
            "{id}"
        );
        let per_m = usd_h / (rate * generated * 3600.0) * 1e6;
        assert!(
            (o["usd_per_million_tokens"].as_f64().unwrap() - per_m).abs() < 1e-9 * per_m.max(1.0),
            "{id}"
        );
        let age = prices::parse_date(AS_OF).unwrap() - prices::parse_date(&row.date).unwrap();
        assert_eq!(o["price"]["age_days"].as_i64().unwrap(), age, "{id}");
        assert!(usd_h >= last, "ranked by USD/h");
        last = usd_h;
    }
    // The GCP rows were published 2026-07-30: 120 days before the as-of day.
    let gcp = options
        .iter()
        .find(|o| o["price"]["id"].as_str().unwrap().starts_with("gcp-"))
        .unwrap();
    assert_eq!(gcp["price"]["age_days"], 120);
    let tpot = |id: &str| {
        options.iter().find(|o| o["price"]["id"] == id).unwrap()["time_per_output_token_ms"]
            .as_f64()
            .unwrap()
    };
    let front: Vec<&str> = v["pareto"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert!(
        front.windows(2).all(|w| tpot(w[1]) < tpot(w[0])),
        "{front:?}"
    );
    for o in options {
        let (cost, lat) = (
            o["usd_per_hour"].as_f64().unwrap(),
            o["time_per_output_token_ms"].as_f64().unwrap(),
        );
        let dominated_or_on = front.iter().any(|id| {
            let p = options.iter().find(|x| x["price"]["id"] == *id).unwrap();
            p["usd_per_hour"].as_f64().unwrap() <= cost && tpot(id) <= lat
        });
        assert!(dominated_or_on, "{}", o["price"]["id"]);
    }
    let fewest = v["fewest_gpus"].as_str().unwrap();
    let gpus = |o: &Value| o["gpus_total"].as_u64().unwrap();
    let min = options.iter().map(gpus).min().unwrap();
    assert_eq!(
        gpus(options.iter().find(|o| o["price"]["id"] == fewest).unwrap()),
        min
    );
}

/// An SLA given by flag drops the plans that miss it (they are listed with the target missed); without one,
/// a plan that misses the preset's SLA is kept and marked.
#[test]
fn an_sla_flag_drops_the_plans_that_miss_it() {
    let dir = tempfile::tempdir().unwrap();
    let (gguf, _) = common::synth(dir.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    let m = gguf.to_str().unwrap();
    let (all, code) = recommend_json(&["-m", m, "-w", "chat"]);
    assert_eq!(code, 0);
    let limit = 15.0;
    let slower = |v: &Value| {
        v["options"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| o["time_per_output_token_ms"].as_f64().unwrap() > limit)
            .count()
    };
    assert!(
        slower(&all) > 0,
        "the check needs some option slower than {limit} ms"
    );
    let (held, code) = recommend_json(&["-m", m, "-w", "chat", "--sla-tpot-ms", "15"]);
    assert_eq!(code, 0);
    assert_eq!(slower(&held), 0);
    assert!(
        held["options"]
            .as_array()
            .unwrap()
            .iter()
            .all(|o| o["status"] == "fits")
    );
    let sla = held["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["reason"] == "sla")
        .count();
    assert!(sla > 0, "{}", held["rejected"]);
}

/// A budget below every option: nothing is ranked, exit 3, and every offer says it lost to the budget or did not
/// fit. Bad flag values are usage errors (exit 2).
#[test]
fn a_budget_below_every_option_exits_3_and_bad_flags_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let (gguf, _) = common::synth(dir.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    let m = gguf.to_str().unwrap();
    let (v, code) = recommend_json(&["-m", m, "-w", "chat", "--budget", "0.01"]);
    assert_eq!(code, 3, "{v}");
    assert!(v["options"].as_array().unwrap().is_empty());
    assert!(
        v["rejected"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["reason"] == "budget")
    );
    for bad in [
        &["--rate", "0"][..],
        &["--budget", "-1"],
        &["--sla-tpot-ms", "nan"],
        &["--amortisation-years", "3"],
        &["--buy", "--usd-per-kwh", "0.1", "--utilisation", "1.5"],
        &["--rent", "--buy"],
        &["--as-of", "2026-02-30"],
    ] {
        let out = common::bin_on(INVENTORY)
            .args(["recommend", "-m", m, "-w", "chat"])
            .args(bad)
            .output()
            .unwrap();
        common::assert_exit(&out, 2);
    }
}

/// `--prices FILE` adds rows validated like the built-in ones: a dated row is ranked with its own price and age;
/// a row without a date, or naming no hardware profile, is invalid input (exit 4) naming the file.
#[test]
fn a_user_price_file_adds_rows_and_an_undated_row_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (gguf, _) = common::synth(dir.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    let m = gguf.to_str().unwrap();
    let row = "  - {id: my-4090-box, provider: vast, instance: my box, region: home, pricing: on-demand, usd_per_hour: 0.01, gpus: {profile: rtx-4090, count: 1}, date: 2026-11-17, date_kind: read, confidence: low, source: https://example.org/quote, source_note: a quote}\n";
    let good = dir.path().join("good.yaml");
    std::fs::write(&good, format!("schema_version: 1\nprices:\n{row}")).unwrap();
    let (v, code) = recommend_json(&["-m", m, "-w", "chat", "--prices", good.to_str().unwrap()]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["cheapest"], "my-4090-box");
    assert_eq!(v["options"][0]["price"]["age_days"], 10);
    assert_eq!(v["options"][0]["price"]["file"], good.to_str().unwrap());
    for (name, broken) in [
        ("undated.yaml", row.replace("date: 2026-11-17, ", "")),
        ("unknown.yaml", row.replace("rtx-4090", "rtx-9999")),
        ("future.yaml", row.replace("2026-11-17", "2026-12-17")),
    ] {
        let p = dir.path().join(name);
        std::fs::write(&p, format!("schema_version: 1\nprices:\n{broken}")).unwrap();
        let out = common::bin_on(INVENTORY)
            .args([
                "recommend",
                "--as-of",
                AS_OF,
                "-m",
                m,
                "-w",
                "chat",
                "--prices",
            ])
            .arg(&p)
            .output()
            .unwrap();
        common::assert_exit(&out, 4);
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(name),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `--buy`: a purchase spread over the years given plus board power at the electricity price, recomputed from
/// the purchase row; without an electricity price, power is left out and the output says so.
#[test]
fn buying_amortises_the_price_and_prices_power_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let (gguf, _) = common::synth(dir.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    let m = gguf.to_str().unwrap();
    let set = common::profiles();
    let table = prices::load(&set, &[], prices::parse_date(AS_OF).unwrap()).unwrap();
    let (row, _) = table
        .purchase
        .iter()
        .find(|(r, _)| r.id == "rtx-4090-msrp")
        .unwrap();
    let args = ["-m", m, "-w", "chat", "--buy", "--amortisation-years", "2"];
    let (v, code) = recommend_json(&[&args[..], &["--usd-per-kwh", "0.2"]].concat());
    assert_eq!(code, 0, "{v}");
    let o = v["options"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["price"]["id"] == "rtx-4090-msrp")
        .unwrap();
    let hourly = row.usd / (2.0 * 8760.0) + row.power_w.unwrap() / 1000.0 * 0.2;
    assert!((o["usd_per_hour"].as_f64().unwrap() - hourly).abs() < 1e-12);
    let (v, _) = recommend_json(&args);
    let o = v["options"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["price"]["id"] == "rtx-4090-msrp")
        .unwrap();
    assert!((o["usd_per_hour"].as_f64().unwrap() - row.usd / (2.0 * 8760.0)).abs() < 1e-12);
    assert!(v["notes"].to_string().contains("power is not priced"));
}

/// The table names the cheapest with its price's age and confidence and the `resolve` command for it.
#[test]
fn the_table_shows_the_cheapest_with_its_price_age() {
    let dir = tempfile::tempdir().unwrap();
    let (gguf, _) = common::synth(dir.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    let out = common::bin_on(INVENTORY)
        .args(["recommend", "--as-of", AS_OF, "-w", "chat", "-m"])
        .arg(&gguf)
        .output()
        .unwrap();
    common::assert_exit(&out, 0);
    let t = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "Cheapest:",
        "Fewest GPUs:",
        "Pareto front",
        " old, confidence ",
        "resolve -m ",
    ] {
        assert!(t.contains(needle), "{needle}\n{t}");
    }
}

/// `--owned`: the `--inventory` machine is one more option at no rent, planned as plain `resolve` plans it (its
/// plan equals `resolve` without `--hardware`), marked owned and ranked first; the verdict says nothing new is
/// needed. A rate it cannot serve alone rejects it (`capacity`) and the verdict names the cheapest new option.
#[test]
fn the_owned_machine_is_a_zero_rent_option_that_says_whether_anything_new_is_needed() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("none.db");
    let (gguf, _) = common::synth(dir.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    let mut req = request(&gguf, "chat");
    req.owned = true;
    let r = app::recommend(&sources(&db), &req).unwrap();
    let owned = r
        .options
        .iter()
        .find(|c| c.owned)
        .expect("the owned option");
    assert_eq!(owned.id, "owned");
    assert_eq!(owned.usd_per_hour, 0.0);
    assert_eq!(owned.usd_per_million_tokens, 0.0);
    assert!(owned.price.is_none());
    assert_eq!(owned.resolve_flags, "");
    assert_eq!(
        (owned.gpus.count, owned.gpus.profile.as_str()),
        (1, "rtx-4080")
    );
    assert_eq!(resolve(&db, &gguf, "chat", ""), *owned.plan);
    assert_eq!(r.options[0].id, "owned", "zero rent ranks first");
    assert_eq!(r.cheapest.as_deref(), Some("owned"));
    assert!(
        r.owned
            .as_deref()
            .unwrap()
            .starts_with("nothing new is needed"),
        "{:?}",
        r.owned
    );
    assert_eq!(r.options.iter().filter(|c| c.owned).count(), 1);
    // Ten times the machine's capacity: it cannot serve that alone.
    req.rate_req_per_s = Some(owned.requests_per_s * 10.0);
    let r = app::recommend(&sources(&db), &req).unwrap();
    assert!(r.options.iter().all(|c| !c.owned));
    let rej = r.rejected.iter().find(|x| x.owned).unwrap();
    assert_eq!(rej.reason, "capacity");
    let verdict = r.owned.unwrap();
    assert!(
        verdict.contains("does not do it") && verdict.contains(r.cheapest.as_deref().unwrap()),
        "{verdict}"
    );
    // The table marks the owned row and prints the verdict.
    let out = common::bin_on(INVENTORY)
        .args(["recommend", "--as-of", AS_OF, "--owned", "-w", "chat", "-m"])
        .arg(&gguf)
        .output()
        .unwrap();
    common::assert_exit(&out, 0);
    let t = String::from_utf8_lossy(&out.stdout);
    assert!(t.contains("^ owned: AMD Ryzen 7 7700X"), "{t}");
    assert!(t.contains("Owned:       nothing new is needed"), "{t}");
}

/// `--buy --owned`: what you own costs no purchase; with an electricity price its power is its GPUs' power
/// limits from the inventory (the RTX 4080 fixture's 320 W) x utilisation x USD/kWh.
#[test]
fn buying_includes_the_owned_machine_at_zero_purchase_cost() {
    let dir = tempfile::tempdir().unwrap();
    let (gguf, _) = common::synth(dir.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    let m = gguf.to_str().unwrap();
    let inv: Value = optimizer_input::yaml::from_str(
        &std::fs::read_to_string(common::fixture("inventories").join(INVENTORY)).unwrap(),
    )
    .unwrap();
    let watts = inv["gpus"][0]["power_limit_w"].as_f64().unwrap();
    let (v, code) = recommend_json(&[
        "-m",
        m,
        "-w",
        "chat",
        "--buy",
        "--owned",
        "--usd-per-kwh",
        "0.25",
        "--utilisation",
        "0.5",
    ]);
    assert_eq!(code, 0, "{v}");
    let o = v["options"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == "owned")
        .unwrap();
    assert_eq!(o["owned"], true);
    assert!(o.get("price").is_none());
    assert!((o["usd_per_hour"].as_f64().unwrap() - watts / 1000.0 * 0.5 * 0.25).abs() < 1e-12);
    let (v, _) = recommend_json(&["-m", m, "-w", "chat", "--buy", "--owned"]);
    let o = v["options"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["owned"] == true)
        .unwrap();
    assert_eq!(o["usd_per_hour"], 0.0);
    assert!(
        o["cost_basis"]
            .as_str()
            .unwrap()
            .contains("power not priced")
    );
    // Without --owned there is no owned row.
    let (v, _) = recommend_json(&["-m", m, "-w", "chat", "--buy"]);
    assert!(
        v["options"]
            .as_array()
            .unwrap()
            .iter()
            .all(|o| o["owned"] != true)
    );
}

/// A price file's defects are all reported, each with the file, the instance path and the row (counted from 1,
/// with its id): schema errors (a missing date, a date that is no `YYYY-MM-DD`, a source that is no URL) and the
/// checks after it (a reserved id).
#[test]
fn every_price_file_defect_names_the_file_and_the_row() {
    let dir = tempfile::tempdir().unwrap();
    let (gguf, _) = common::synth(dir.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    let row = |id: &str, date: &str, source: &str| {
        format!(
            "  - {{id: {id}, provider: vast, instance: box, region: home, pricing: on-demand, usd_per_hour: 0.5, gpus: {{profile: rtx-4090, count: 1}}, {date}date_kind: read, confidence: low, source: {source}, source_note: a quote}}\n"
        )
    };
    let bad = dir.path().join("quotes.yaml");
    std::fs::write(
        &bad,
        format!(
            "schema_version: 1\nprices:\n{}{}{}",
            row("good-row", "date: 2026-11-01, ", "https://example.org/q"),
            row("no-date", "", "https://example.org/q"),
            row("bad-source", "date: 2026/11/01, ", "a friend"),
        ),
    )
    .unwrap();
    let out = common::bin_on(INVENTORY)
        .args(["recommend", "--as-of", AS_OF, "-w", "chat", "--prices"])
        .arg(&bad)
        .arg("-m")
        .arg(&gguf)
        .output()
        .unwrap();
    common::assert_exit(&out, 4);
    let err = String::from_utf8_lossy(&out.stderr);
    for needle in [
        "quotes.yaml: /prices/1: row 2 (id \"no-date\")",
        "quotes.yaml: /prices/2/date: row 3 (id \"bad-source\")",
        "quotes.yaml: /prices/2/source: row 3 (id \"bad-source\")",
    ] {
        assert!(err.contains(needle), "{needle}\n{err}");
    }
    let reserved = dir.path().join("reserved.yaml");
    std::fs::write(
        &reserved,
        format!(
            "schema_version: 1\nprices:\n{}",
            row("owned", "date: 2026-11-01, ", "https://example.org/q")
        ),
    )
    .unwrap();
    let out = common::bin_on(INVENTORY)
        .args(["recommend", "--as-of", AS_OF, "-w", "chat", "--prices"])
        .arg(&reserved)
        .arg("-m")
        .arg(&gguf)
        .output()
        .unwrap();
    common::assert_exit(&out, 4);
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("reserved.yaml: /prices/0/id: row 1 (id \"owned\")"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The published price schema (`schemas/prices.schema.json`, `optimizer schema prices`) accepts both built-in
/// tables and refuses a row without a date: editors and CI can check a price PR with it alone.
#[test]
fn the_builtin_price_tables_validate_against_the_published_schema() {
    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(common::root().join("schemas/prices.schema.json")).unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    for file in ["cloud.yaml", "purchase.yaml"] {
        let text = std::fs::read_to_string(
            common::root()
                .join("crates/core/profiles/prices")
                .join(file),
        )
        .unwrap();
        let mut v: Value = optimizer_input::yaml::from_str(&text).unwrap();
        let errors: Vec<String> = validator
            .iter_errors(&v)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{file}: {errors:?}");
        v["prices"][0].as_object_mut().unwrap().remove("date");
        assert!(!validator.is_valid(&v), "{file}: a row without a date");
    }
}

/// The options the consistency tests re-resolve: the three cheapest and the fewest-GPU one.
fn top_options(r: &app::Recommendation) -> Vec<&app::Choice> {
    let mut top: Vec<&app::Choice> = r.options.iter().take(3).collect();
    top.extend(
        r.options
            .iter()
            .find(|c| Some(&c.id) == r.fewest_gpus.as_ref()),
    );
    top
}
