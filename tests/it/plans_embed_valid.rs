//! Issue 25, items 6 and 7: embedding plans that embed (vLLM's pooling runner with the checkpoint's own pooling;
//! llama.cpp plans of generative models say what they are), and model files the engines refuse are refused here
//! with the engine's reason (exit 4), while the models they load still load.

use crate::common;
use common::{bin_on, inventory, profiles, synth, vllm_models};

use std::collections::BTreeSet;
use std::path::Path;

use optimizer::emit::{Deployment, Source};
use optimizer::model::{self, Defect, ModelError, ModelSpec};
use optimizer::plan::{Overrides, PlanError};
use optimizer_testkit::gguf_builder::{GgufBuilder, LlamaShape, synthetic_llama, write_sparse};

/// ggml's F32 type id (ggml.h `GGML_TYPE_F32`).
const F32: u32 = 0;

fn plan(spec: &ModelSpec, path: &str, inv: &str, workload: &str) -> Result<Deployment, PlanError> {
    common::plan(
        spec,
        path,
        &inventory(inv),
        &profiles(),
        workload,
        &Overrides::default(),
    )
}

fn flag<'a>(argv: &'a [String], flag: &str) -> Option<&'a str> {
    argv.iter()
        .position(|a| a == flag)
        .and_then(|i| argv.get(i + 1))
        .map(String::as_str)
}

/// The options `vllm serve` 0.33.0 accepts and the allowed values of those with a fixed set (extracted from
/// the wheel's argument parser: tests/fixtures/vllm/serve-flags-0.33.0.txt, serve-choices-0.33.0.json).
fn check_vllm_argv(argv: &[String]) {
    let text = std::fs::read_to_string(common::fixture("vllm/serve-flags-0.33.0.txt")).unwrap();
    let flags: BTreeSet<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let choices: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(common::fixture("vllm/serve-choices-0.33.0.json")).unwrap(),
    )
    .unwrap();
    for (i, a) in argv.iter().enumerate().skip(3) {
        if !a.starts_with("--") {
            continue;
        }
        assert!(flags.contains(a.as_str()), "vllm serve 0.33.0 has no {a}");
        if let (Some(allowed), Some(v)) =
            (choices.get(a).and_then(|c| c.as_array()), argv.get(i + 1))
        {
            assert!(allowed.iter().any(|x| x.as_str() == Some(v)), "{a} {v}");
        }
    }
}

/// A checkpoint directory of the Llama-3.2-1B fixture, with a sentence-transformers pooling module when `pooling`
/// names its config.json.
fn st_checkpoint(pooling: Option<&str>) -> tempfile::TempDir {
    let dir = vllm_models::materialize("Llama-3.2-1B");
    if let Some(config) = pooling {
        std::fs::write(
            dir.path().join("modules.json"),
            r#"[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]"#,
        )
        .unwrap();
        std::fs::create_dir(dir.path().join("1_Pooling")).unwrap();
        std::fs::write(dir.path().join("1_Pooling/config.json"), config).unwrap();
    }
    dir
}

fn vllm_embedding(dir: &Path) -> Deployment {
    let spec = model::load(dir).unwrap();
    plan(
        &spec,
        &dir.display().to_string(),
        "h100-probed.yaml",
        "embedding",
    )
    .unwrap()
}

/// vLLM 0.33 resolves `--runner auto` by the architecture: `LlamaForCausalLM` generates. An embedding plan asks
/// for the pooling runner, and the checkpoint's sentence-transformers pooling (mean, CLS, last token) is passed
/// as vLLM itself would read it; every option is one the pinned parser takes. A chat plan has no runner flag.
#[test]
fn a_vllm_embedding_plan_runs_the_pooling_runner_with_the_checkpoints_pooling() {
    for (config, want) in [
        (
            r#"{"word_embedding_dimension": 2048, "pooling_mode_cls_token": false, "pooling_mode_mean_tokens": true}"#,
            "MEAN",
        ),
        (
            r#"{"pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}"#,
            "CLS",
        ),
        (r#"{"pooling_mode_lasttoken": true}"#, "LAST"),
        (r#"{"pooling_mode": "cls"}"#, "CLS"),
    ] {
        let dir = st_checkpoint(Some(config));
        let d = vllm_embedding(dir.path());
        let argv = &common::artifact(&d, "vllm").argv;
        assert_eq!(flag(argv, "--runner"), Some("pooling"), "{argv:?}");
        let pooler: serde_json::Value =
            serde_json::from_str(flag(argv, "--pooler-config").expect("--pooler-config")).unwrap();
        assert_eq!(
            pooler,
            serde_json::json!({"seq_pooling_type": want}),
            "{config}"
        );
        check_vllm_argv(argv);
        assert_eq!(d.provenance["launch.vllm.pooling"].source, Source::Computed);
        assert!(
            !d.warnings.iter().any(|w| w.contains("generative")),
            "{:?}",
            d.warnings
        );
        // The manifest runs the same command.
        let k8s = &common::artifact(&d, "kubernetes").files["vllm.yaml"];
        assert!(
            k8s.contains("pooling") && k8s.contains("seq_pooling_type"),
            "{k8s}"
        );
    }
    let dir = st_checkpoint(None);
    let spec = model::load(dir.path()).unwrap();
    let chat = plan(&spec, "m", "h100-probed.yaml", "chat").unwrap();
    let argv = &common::artifact(&chat, "vllm").argv;
    assert!(
        !argv
            .iter()
            .any(|a| a == "--runner" || a == "--pooler-config"),
        "{argv:?}"
    );
}

/// A generative checkpoint with no sentence-transformers pooling still gets the pooling runner (vLLM converts
/// it with `--convert embed`, last-token pooling) and a warning naming its class.
#[test]
fn a_vllm_embedding_plan_of_a_generative_checkpoint_warns() {
    let dir = st_checkpoint(None);
    let d = vllm_embedding(dir.path());
    let argv = &common::artifact(&d, "vllm").argv;
    assert_eq!(flag(argv, "--runner"), Some("pooling"));
    assert_eq!(flag(argv, "--pooler-config"), None);
    check_vllm_argv(argv);
    assert!(
        d.warnings
            .iter()
            .any(|w| w.contains("LlamaForCausalLM is a generative model")),
        "{:?}",
        d.warnings
    );
}

/// modules.json is read with the checkpoint: a pooling module whose path leaves the model directory is refused,
/// not followed.
#[test]
fn a_pooling_module_outside_the_model_directory_is_refused() {
    let dir = st_checkpoint(None);
    std::fs::write(
        dir.path().join("modules.json"),
        r#"[{"path": "../elsewhere", "type": "sentence_transformers.models.Pooling"}]"#,
    )
    .unwrap();
    let err = model::load(dir.path()).unwrap_err();
    assert!(
        err.to_string().contains("leaves the model directory"),
        "{err}"
    );
}

/// llama.cpp: an embedding plan of a generative GGUF (no `{arch}.pooling_type`, or `NONE`) warns, naming the
/// architecture and the missing key, and pools by the mean, never `--pooling none` (one vector per token); a GGUF
/// that declares its pooling embeds without a warning.
#[test]
fn a_llama_cpp_embedding_plan_of_a_generative_model_warns() {
    let dir = tempfile::tempdir().unwrap();
    let (_, plain) = synth(dir.path(), "plain.gguf", LlamaShape::LLAMA3_8B);
    let with_pooling = |v: u32, name: &str| {
        let path = dir.path().join(name);
        let mut b = synthetic_llama(LlamaShape::LLAMA3_8B);
        b.kv_u32("llama.pooling_type", v);
        write_sparse(&b, &path).unwrap();
        model::load(&path).unwrap()
    };
    // llama.h LLAMA_POOLING_TYPE_NONE = 0, _LAST = 3.
    let none = with_pooling(0, "none.gguf");
    let last = with_pooling(3, "last.gguf");
    for (spec, pooling, warned) in [
        (&plain, "mean", true),
        (&none, "mean", true),
        (&last, "last", false),
    ] {
        let d = plan(spec, "m.gguf", "cpu-server.yaml", "embedding").unwrap();
        let argv = &common::artifact(&d, "llama-server").argv;
        assert_eq!(flag(argv, "--pooling"), Some(pooling));
        let warning = d.warnings.iter().any(|w| {
            w.contains("llama is a generative architecture") && w.contains("llama.pooling_type")
        });
        assert_eq!(warning, warned, "{:?}", d.warnings);
    }
    // A chat plan is no embedding plan: no such warning.
    let d = plan(&plain, "m.gguf", "cpu-server.yaml", "chat").unwrap();
    assert!(!d.warnings.iter().any(|w| w.contains("pooling_type")));
}

/// A two-layer GGUF of `arch` with the given heads and width, F32 tensors shaped as llama.cpp would build them.
fn tiny(arch: &str, heads: u32, kv_heads: u32, embd: u64) -> GgufBuilder {
    let mut b = GgufBuilder::new();
    b.kv_str("general.architecture", arch)
        .kv_u32(&format!("{arch}.block_count"), 2)
        .kv_u32(&format!("{arch}.context_length"), 2048)
        .kv_u32(&format!("{arch}.embedding_length"), embd as u32)
        .kv_u32(&format!("{arch}.feed_forward_length"), 128)
        .kv_u32(&format!("{arch}.attention.head_count"), heads)
        .kv_u32(&format!("{arch}.attention.head_count_kv"), kv_heads);
    let kv = if heads == 0 {
        0
    } else {
        embd / u64::from(heads) * u64::from(kv_heads)
    };
    let mut t = |name: String, ne: &[u64]| {
        let bytes = 4 * ne.iter().product::<u64>();
        b.tensor(&name, ne, F32, bytes);
    };
    t("token_embd.weight".into(), &[embd, 256]);
    t("output_norm.weight".into(), &[embd]);
    for l in 0..2 {
        t(format!("blk.{l}.attn_norm.weight"), &[embd]);
        t(format!("blk.{l}.attn_q.weight"), &[embd, embd]);
        t(format!("blk.{l}.attn_k.weight"), &[embd, kv]);
        t(format!("blk.{l}.attn_v.weight"), &[embd, kv]);
        t(format!("blk.{l}.attn_output.weight"), &[embd, embd]);
        t(format!("blk.{l}.ffn_norm.weight"), &[embd]);
        t(format!("blk.{l}.ffn_up.weight"), &[embd, 128]);
        t(format!("blk.{l}.ffn_down.weight"), &[128, embd]);
    }
    b
}

fn gguf_defect(b: &GgufBuilder) -> Defect {
    match model::gguf::load_bytes(&b.build(), Path::new("crafted.gguf")) {
        Err(ModelError::InvalidModel { defect, .. }) => defect,
        other => panic!("expected an invalid model, got {other:?}"),
    }
}

/// GGUF hyper-parameters llama.cpp refuses at load: 0 query heads on layers with attention weights, KV heads that
/// do not divide the query heads, a width of 0. Each is a defect naming the key and the engine's reason.
#[test]
fn gguf_heads_and_widths_llama_cpp_refuses_are_defects() {
    let d = gguf_defect(&tiny("llama", 0, 0, 64));
    assert!(
        matches!(&d, Defect::HparamOutOfRange { key, value: 0, min: 1, why, .. }
            if key == "llama.attention.head_count" && why.contains("check_tensor_dims")),
        "{d}"
    );
    let d = gguf_defect(&tiny("llama", 8, 3, 64));
    assert!(
        matches!(&d, Defect::HparamInvalid { key, value: 3, why }
            if key == "llama.attention.head_count_kv" && why.contains("ggml_can_mul_mat")),
        "{d}"
    );
    let d = gguf_defect(&tiny("llama", 8, 8, 0));
    assert!(
        matches!(&d, Defect::HparamOutOfRange { key, value: 0, .. } if key == "llama.embedding_length"),
        "{d}"
    );
    // What llama.cpp loads still loads: grouped-query attention, and a recurrent model's 0 heads.
    model::gguf::load_bytes(&tiny("llama", 8, 2, 64).build(), Path::new("gqa.gguf")).unwrap();
    model::load(&common::fixture("gguf/mamba-f16.gguf")).unwrap();
}

/// config.json values vLLM refuses at start-up: KV heads that do not divide the query heads, `hidden_size` 0.
#[test]
fn safetensors_configs_vllm_refuses_are_defects() {
    for (key, value, want) in [
        ("num_key_value_heads", 5, "head_count_kv"),
        ("hidden_size", 0, "embedding_length"),
        ("num_attention_heads", 0, "head_count"),
    ] {
        let dir = st_checkpoint(None);
        let path = dir.path().join("config.json");
        let mut c: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        c[key] = serde_json::json!(value);
        std::fs::write(&path, serde_json::to_vec(&c).unwrap()).unwrap();
        let err = model::load(dir.path()).unwrap_err();
        let defect = err.defect().unwrap_or_else(|| panic!("{err}"));
        let named = match defect {
            Defect::HparamOutOfRange { key, .. } | Defect::HparamInvalid { key, .. } => key.clone(),
            other => panic!("{key} {value}: {other}"),
        };
        assert!(named.contains(want), "{key} {value}: {err}");
        // Through the binary: invalid input, exit 4.
        let o = bin_on("cpu-server.yaml")
            .args(["resolve", "-w", "chat", "--hardware", "a100-80gb-sxm", "-m"])
            .arg(dir.path())
            .output()
            .unwrap();
        common::assert_exit(&o, 4);
    }
}

/// A GGUF whose architecture the pinned llama.cpp does not know (`llm_arch_from_string` gives LLM_ARCH_UNKNOWN)
/// or `clip` (a projector) is refused with the engine's words, exit 4; the file itself still reads (`inspect`).
#[test]
fn an_architecture_llama_cpp_does_not_know_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (arch, words) in [
        ("mystery", "unknown model architecture: 'mystery'"),
        ("clip", "CLIP cannot be used as main model"),
    ] {
        let path = dir.path().join(format!("{arch}.gguf"));
        std::fs::write(&path, tiny(arch, 8, 8, 64).build()).unwrap();
        let spec = model::load(&path).unwrap();
        let err = plan(&spec, "m.gguf", "cpu-server.yaml", "chat").unwrap_err();
        assert!(
            matches!(&err, PlanError::Model(m) if m.contains(words)),
            "{err}"
        );
        let o = bin_on("cpu-server.yaml")
            .args(["resolve", "-w", "chat", "-m"])
            .arg(&path)
            .output()
            .unwrap();
        common::assert_exit(&o, 4);
        assert!(String::from_utf8_lossy(&o.stderr).contains(words));
    }
    // Architectures llama.cpp knows plan, an encoder among them.
    for arch in ["qwen2", "gemma2", "bert"] {
        let path = dir.path().join(format!("{arch}.gguf"));
        std::fs::write(&path, tiny(arch, 8, 8, 64).build()).unwrap();
        let spec = model::load(&path).unwrap();
        plan(&spec, "m.gguf", "cpu-server.yaml", "chat").unwrap_or_else(|e| panic!("{arch}: {e}"));
    }
}

/// Item 6: the speed of an embedding plan is tokens embedded per second; it reports no decode rate for a generation
/// that never runs (an 8B on an RTX 4060 reported 1,338,547 decode tokens/s and was chosen by it).
#[test]
fn an_embedding_plan_reports_tokens_embedded_per_second_and_no_decode_rate() {
    let dir = tempfile::tempdir().unwrap();
    let (path, spec) = synth(dir.path(), "m8.gguf", LlamaShape::LLAMA3_8B);
    let d = plan(
        &spec,
        path.to_str().unwrap(),
        "laptop-rtx4060.yaml",
        "embedding",
    )
    .unwrap();
    assert_eq!(d.performance.decode_tokens_per_s, 0.0);
    assert_eq!(d.performance.time_per_output_token_ms, 0.0);
    assert!(d.performance.prefill_tokens_per_s > 0.0);
    let why = &d.provenance["performance.decode_tokens_per_s"];
    assert_eq!(why.source, Source::Computed);
    assert!(
        why.detail.contains("tokens embedded per second"),
        "{}",
        why.detail
    );
}
