//! Plans that only promise what runs (issue 25, item 3): a context past the model's trained length is refused
//! with the engine's flag for it, or planned with that flag on `--allow-long-context`; a preset whose request is
//! longer than the model's context is `workload-unmet` (exit 6) with figures for the request that fits; an SLA no
//! candidate meets is `sla-missed` (exit 5). Both runnable statuses write the plan.

use crate::common::{self, artifact, assert_exit, bin_on, synth, vllm_models};
use optimizer::emit::{Deployment, SlaStatus, Status};
use optimizer::plan::{Overrides, PlanError};
use optimizer::profile::RuntimeId;
use optimizer_testkit::gguf_builder::LlamaShape;

/// The synthetic Llama-3-8B's trained context (`llama.context_length`).
const TRAINED_8B: u32 = LlamaShape::LLAMA3_8B.n_ctx_train as u32;

fn usage(r: Result<Deployment, PlanError>) -> String {
    match r {
        Err(PlanError::Usage(m)) => m,
        Err(e) => panic!("not a usage error: {e}"),
        Ok(d) => panic!(
            "planned with status {:?}: {:?}",
            d.status,
            d.launch.first().map(|a| &a.command)
        ),
    }
}

/// vLLM 0.33 refuses `--max-model-len` past its derived length (vllm/config/model.py
/// `_get_and_verify_max_len`) unless `VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`: `-c 1000000` on Llama-3.1-8B (131072,
/// llama3 RoPE, which vLLM does not multiply again) was planned as `--max-model-len 1000000` without it.
#[test]
fn vllm_context_past_the_derived_length_is_refused_or_planned_with_the_env_var() {
    let spec = vllm_models::spec("Llama-3.1-8B");
    let set = common::profiles();
    let inv = common::inventory("cloud-8xh100.yaml");
    let ov = |c: u32, allow: bool| Overrides {
        runtime: Some(RuntimeId::Vllm),
        context_length: Some(c),
        allow_long_context: allow,
        ..Overrides::default()
    };
    let m = usage(common::plan(
        &spec,
        "Llama-3.1-8B",
        &inv,
        &set,
        "inference",
        &ov(1_000_000, false),
    ));
    assert!(
        m.contains("-c 1000000")
            && m.contains("131072")
            && m.contains("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"),
        "{m}"
    );
    assert!(
        m.contains("--allow-long-context") && m.contains("NaN"),
        "{m}"
    );
    // The trained length itself is planned, without the variable.
    let at = common::plan(
        &spec,
        "Llama-3.1-8B",
        &inv,
        &set,
        "inference",
        &ov(131_072, false),
    )
    .unwrap();
    assert!(
        !artifact(&at, "vllm")
            .env
            .contains_key("VLLM_ALLOW_LONG_MAX_MODEL_LEN")
    );
    // Opted in: the command, its shell line and the manifest carry it, and a warning says what it costs.
    let d = common::plan(
        &spec,
        "Llama-3.1-8B",
        &inv,
        &set,
        "inference",
        &ov(1_000_000, true),
    )
    .unwrap();
    assert_eq!(d.settings.vllm().unwrap().max_model_len, 1_000_000);
    let serve = artifact(&d, "vllm");
    assert_eq!(serve.env["VLLM_ALLOW_LONG_MAX_MODEL_LEN"], "1");
    assert!(
        serve
            .command
            .as_deref()
            .unwrap()
            .starts_with("CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=")
    );
    assert!(
        serve
            .command
            .as_deref()
            .unwrap()
            .contains("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
    );
    assert!(
        artifact(&d, "kubernetes").files["vllm.yaml"].contains("VLLM_ALLOW_LONG_MAX_MODEL_LEN")
    );
    assert!(
        d.warnings
            .iter()
            .any(|w| w.starts_with("--allow-long-context: --max-model-len 1000000")),
        "{:?}",
        d.warnings
    );
}

/// llama-server takes any `-c` and only logs "possible training context overflow": a context 26x the trained
/// length was planned with no RoPE scaling and no warning.
#[test]
fn llama_cpp_context_past_the_trained_length_is_refused_or_planned_with_yarn() {
    let dir = tempfile::tempdir().unwrap();
    let (_, spec) = synth(dir.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    let set = common::profiles();
    let inv = common::inventory("cpu-server.yaml");
    let c = TRAINED_8B * 26;
    let ov = |allow: bool| Overrides {
        context_length: Some(c),
        allow_long_context: allow,
        ..Overrides::default()
    };
    let flags = format!("--rope-scaling yarn --rope-scale 26 --yarn-orig-ctx {TRAINED_8B}");
    let m = usage(common::plan(
        &spec,
        "m.gguf",
        &inv,
        &set,
        "inference",
        &ov(false),
    ));
    assert!(m.contains(&format!("-c {c}")) && m.contains(&flags), "{m}");
    assert!(
        m.contains("--allow-long-context") && m.contains("YaRN"),
        "{m}"
    );
    let d = common::plan(&spec, "m.gguf", &inv, &set, "inference", &ov(true)).unwrap();
    assert_eq!(common::llama(&d).context_per_sequence, c);
    let server = artifact(&d, "llama-server");
    assert!(server.argv.join(" ").contains(&flags), "{:?}", server.argv);
    assert!(server.command.as_deref().unwrap().contains(&flags));
    assert!(artifact(&d, "kubernetes").files["llama-server.yaml"].contains("--yarn-orig-ctx"));
    assert!(
        d.warnings
            .iter()
            .any(|w| w.contains(&flags) && w.contains("Ollama")),
        "{:?}",
        d.warnings
    );
}

/// `-w long-context` on an 8K-trained model planned an 8,192-token context, then predicted the time to first
/// token of a 31,744-token prompt that cannot be loaded, with `status: fits`.
#[test]
fn a_preset_longer_than_the_trained_context_is_unmet_and_figured_for_what_fits() {
    let dir = tempfile::tempdir().unwrap();
    let (_, spec) = synth(dir.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    let set = common::profiles();
    let inv = common::inventory("cpu-server.yaml");
    let preset = set.workload("long-context").unwrap().value.clone();
    let d = common::plan(
        &spec,
        "m.gguf",
        &inv,
        &set,
        "long-context",
        &Overrides::default(),
    )
    .unwrap();
    assert_eq!(d.status, Status::WorkloadUnmet);
    let u = d.workload.unmet.as_ref().unwrap();
    let requested = preset.prompt_tokens + preset.generation_tokens;
    assert_eq!(
        (
            u.requested_prompt_tokens,
            u.requested_generation_tokens,
            u.context_tokens
        ),
        (
            preset.prompt_tokens,
            preset.generation_tokens,
            u64::from(TRAINED_8B)
        )
    );
    assert_eq!(u.over_by_tokens, requested - u64::from(TRAINED_8B));
    // The figures are for the longest prompt that fits beside the preset's generated tokens: the same as a plan
    // of that shorter request.
    let fits = u64::from(TRAINED_8B) - preset.generation_tokens;
    assert_eq!(
        (d.workload.prompt_tokens, d.workload.generation_tokens),
        (fits, preset.generation_tokens)
    );
    let mut shorter = preset.clone();
    shorter.prompt_tokens = fits;
    let oracle = common::plan_workload(
        &spec,
        "m.gguf",
        &inv,
        &set,
        &shorter,
        &Overrides::default(),
        &Default::default(),
    )
    .unwrap();
    assert_eq!(oracle.status, Status::Fits);
    assert_eq!(
        d.performance.time_to_first_token_ms,
        oracle.performance.time_to_first_token_ms
    );
    assert!(
        d.warnings.iter().any(|w| w.contains("cannot be met")),
        "{:?}",
        d.warnings
    );
    // Opted in: the preset's own floor, with YaRN, and the request is met.
    let long = Overrides {
        allow_long_context: true,
        ..Overrides::default()
    };
    let d = common::plan(&spec, "m.gguf", &inv, &set, "long-context", &long).unwrap();
    assert!(
        d.workload.unmet.is_none() && d.status != Status::WorkloadUnmet,
        "{:?}",
        d.status
    );
    assert!(u64::from(common::llama(&d).context_per_sequence) >= requested);
    assert!(
        artifact(&d, "llama-server")
            .argv
            .join(" ")
            .contains("--rope-scaling yarn --rope-scale 4")
    );
}

/// An SLA of 1 microsecond to the first token was reported `status: fits`, the miss only a warning.
#[test]
fn an_sla_no_candidate_meets_is_sla_missed() {
    let dir = tempfile::tempdir().unwrap();
    let (_, spec) = synth(dir.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    let set = common::profiles();
    let inv = common::inventory("cpu-server.yaml");
    let mut w = set.workload("chat").unwrap().value.clone();
    w.sla.time_to_first_token_ms = Some(0.001);
    let d = common::plan_workload(
        &spec,
        "m.gguf",
        &inv,
        &set,
        &w,
        &Overrides::default(),
        &Default::default(),
    )
    .unwrap();
    assert_eq!(d.status, Status::SlaMissed);
    let ttft = d
        .performance
        .sla
        .iter()
        .find(|c| c.target == "time_to_first_token")
        .unwrap();
    assert_eq!(ttft.status, SlaStatus::Missed);
    // The same workload without the target fits.
    w.sla.time_to_first_token_ms = None;
    w.sla.time_per_output_token_ms = None;
    let d = common::plan_workload(
        &spec,
        "m.gguf",
        &inv,
        &set,
        &w,
        &Overrides::default(),
        &Default::default(),
    )
    .unwrap();
    assert_eq!(d.status, Status::Fits);
}

/// What an orchestrator sees from the exit code alone: 6 for an unmet preset, 5 for a missed SLA (the GTX 1650
/// hybrid plan of the inference preset), 2 for a context past the trained length; the runnable plans are
/// written to `-o`.
#[test]
fn resolve_exit_codes_tell_unmet_and_missed_plans_apart_and_write_them() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = synth(dir.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    let run = |inv: &str, args: &[&str], out: &str| {
        bin_on(inv)
            .args(["resolve", "-m"])
            .arg(&m)
            .args(args)
            .arg("-o")
            .arg(dir.path().join(out))
            .output()
            .unwrap()
    };
    let o = run("cpu-server.yaml", &["-w", "long-context"], "unmet.yaml");
    assert_exit(&o, 6);
    let text = std::fs::read_to_string(dir.path().join("unmet.yaml")).unwrap();
    assert!(
        text.contains("status: workload-unmet") && text.contains("over_by_tokens: 24576"),
        "{text}"
    );
    let o = run("gtx1650-4gb.yaml", &["-w", "inference"], "missed.yaml");
    assert_exit(&o, 5);
    let text = std::fs::read_to_string(dir.path().join("missed.yaml")).unwrap();
    assert!(text.contains("status: sla-missed"), "{text}");
    let c = (TRAINED_8B * 2).to_string();
    let o = run("cpu-server.yaml", &["-c", &c], "refused.yaml");
    assert_exit(&o, 2);
    assert!(String::from_utf8_lossy(&o.stderr).contains("--allow-long-context"));
    assert!(!dir.path().join("refused.yaml").exists());
    let o = run(
        "cpu-server.yaml",
        &["-c", &c, "--allow-long-context"],
        "long.yaml",
    );
    assert_exit(&o, 0);
    let text = std::fs::read_to_string(dir.path().join("long.yaml")).unwrap();
    assert!(text.contains("--rope-scale"), "{text}");
}
