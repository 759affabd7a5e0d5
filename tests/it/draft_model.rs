//! `--model-draft FILE` (llama-server `-md`, issue 26 item 4): the draft's weights, KV cache at the target's
//! context and compute buffers are charged to the devices the pinned engine puts them on
//! (`crates/core/src/runtime/llama_cpp/draft.rs` cites the engine), the plan fits only if both fit, the argv
//! carries `-md`/`-ngld` and passes the engine's argument table, an incompatible draft is refused (exit 4) and the
//! other runtimes refuse the flag (exit 2).

use crate::common;
use crate::llama_cpp_argv_table::{assert_launch_argv_passes, check_argv, table};

use std::sync::Arc;

use optimizer::emit::{Deployment, Status};
use optimizer::hardware::Inventory;
use optimizer::model::ModelSpec;
use optimizer::plan::{Overrides, PlanError};
use optimizer::runtime::DraftModel;
use optimizer_testkit::gguf_builder::LlamaShape;

/// Llama-3.2-1B's shape: 16 layers, 2048 wide, 8 KV heads of 64, the Llama 3 vocabulary.
const LLAMA32_1B: LlamaShape = LlamaShape {
    n_layer: 16,
    n_embd: 2048,
    n_ff: 8192,
    n_head: 32,
    n_head_kv: 8,
    n_vocab: 128_256,
    n_merges: 280_147,
    n_ctx_train: 8192,
};

const CONTEXT: u32 = 8192;

struct Models {
    _dir: tempfile::TempDir,
    target: ModelSpec,
    target_path: String,
    draft: DraftModel,
}

fn models(draft_shape: LlamaShape) -> Models {
    let dir = tempfile::tempdir().unwrap();
    let (tp, target) = common::synth(dir.path(), "target-8b.gguf", LlamaShape::LLAMA3_8B);
    let (dp, draft) = common::synth(dir.path(), "draft-1b.gguf", draft_shape);
    Models {
        target,
        target_path: tp.display().to_string(),
        draft: DraftModel {
            path: dp.display().to_string(),
            spec: Arc::new(draft),
        },
        _dir: dir,
    }
}

/// Every layer on the GPU, one sequence of [`CONTEXT`] tokens, with or without the draft.
fn overrides(m: &Models, with_draft: bool) -> Overrides {
    Overrides {
        context_length: Some(CONTEXT),
        parallel: Some(1),
        gpu_layers: Some(LlamaShape::LLAMA3_8B.n_layer as u32 + 1),
        draft: with_draft.then(|| m.draft.clone()),
        ..Overrides::default()
    }
}

fn plan(m: &Models, inv: &Inventory, with_draft: bool) -> Result<Deployment, PlanError> {
    common::plan(
        &m.target,
        &m.target_path,
        inv,
        &common::profiles(),
        "chat",
        &overrides(m, with_draft),
    )
}

fn gpu(d: &Deployment) -> &optimizer::emit::MemoryDevice {
    d.memory
        .devices
        .iter()
        .find(|m| m.device != "cpu")
        .expect("a GPU in the plan")
}

#[test]
fn a_draft_model_charges_its_weights_and_kv_cache_to_the_gpu() {
    let m = models(LLAMA32_1B);
    let inv = common::inventory("desktop-rtx4080.yaml");
    let without = plan(&m, &inv, false).unwrap();
    let with = plan(&m, &inv, true).unwrap();
    assert_eq!(with.status, Status::Fits, "{:?}", with.warnings);
    let (g0, g1) = (gpu(&without), gpu(&with));
    let draft = g1.components.draft_bytes;
    // The target's own components do not move; the draft adds its bytes to the device total.
    assert_eq!(g0.components, {
        let mut c = g1.components.clone();
        c.draft_bytes = 0;
        c
    });
    assert_eq!(g1.total_bytes, g0.total_bytes + draft);
    // Independently of the memory model: the draft's f16 KV cache at the target's context (K and V, every layer,
    // n_head_kv x head size per cell, 2 bytes) and its GPU weights (every tensor but the token embeddings, which
    // llama.cpp keeps on the host's input layer) are on the GPU.
    let s = LLAMA32_1B;
    let kv = 2 * s.n_layer * u64::from(CONTEXT) * s.n_head_kv * (s.n_embd / s.n_head) * 2;
    let weights: u64 = m
        .draft
        .spec
        .tensors
        .iter()
        .filter(|t| t.name != "token_embd.weight")
        .map(|t| t.bytes)
        .sum();
    assert!(
        draft > kv + weights,
        "draft {draft} bytes on the GPU, KV {kv} + weights {weights}"
    );
    // ...and the draft's part is well under the target's, whose weights alone are about 4.6x the draft's.
    assert!(draft < g0.total_bytes, "{draft} vs {}", g0.total_bytes);
    assert!(
        with.provenance.contains_key("launch.model_draft"),
        "{:?}",
        with.provenance.keys()
    );
}

#[test]
fn a_gpu_that_holds_the_target_but_not_the_draft_does_not_fit() {
    let m = models(LLAMA32_1B);
    let mut inv = common::inventory("desktop-rtx4080.yaml");
    let probe = plan(&m, &inv, true).unwrap();
    let g = gpu(&probe);
    let (target, draft) = (
        g.total_bytes - g.components.draft_bytes,
        g.components.draft_bytes,
    );
    // Room for the target and half the draft.
    let shrink = g.capacity_bytes - g.reserve_bytes - (target + draft / 2);
    inv.gpus[0].memory_free_bytes -= shrink;
    let without = plan(&m, &inv, false).unwrap();
    let g = gpu(&without);
    let room = g.capacity_bytes - g.reserve_bytes;
    assert!(
        target <= room && room < target + draft,
        "premise: room {room}, target {target}, draft {draft}"
    );
    assert_eq!(without.status, Status::Fits);
    let with = plan(&m, &inv, true).unwrap();
    assert_eq!(with.status, Status::NoFit);
}

#[test]
fn the_draft_argv_carries_md_and_ngld_and_passes_the_engine_table() {
    let m = models(LLAMA32_1B);
    let d = plan(&m, &common::inventory("desktop-rtx4080.yaml"), true).unwrap();
    assert_launch_argv_passes(&d);
    let argv = &common::artifact(&d, "llama-server").argv;
    let at = |flag: &str| {
        argv.iter()
            .position(|a| a == flag)
            .map(|i| argv[i + 1].clone())
    };
    assert_eq!(at("-md"), Some(m.draft.path.clone()));
    assert_eq!(at("-ngld"), Some((LLAMA32_1B.n_layer + 1).to_string()));
}

#[test]
fn a_draft_on_a_cpu_plan_stays_on_the_host_without_ngld() {
    let m = models(LLAMA32_1B);
    let ov = Overrides {
        gpu_layers: None,
        ..overrides(&m, true)
    };
    let d = common::plan(
        &m.target,
        &m.target_path,
        &common::inventory("cpu-server.yaml"),
        &common::profiles(),
        "chat",
        &ov,
    )
    .unwrap();
    let argv = &common::artifact(&d, "llama-server").argv;
    assert!(argv.iter().any(|a| a == "-md"));
    assert!(!argv.iter().any(|a| a == "-ngld"), "{argv:?}");
    assert!(d.memory.devices[0].components.draft_bytes > 0);
    assert!(check_argv(&table(), argv).is_empty());
}

#[test]
fn a_draft_with_another_vocabulary_is_refused_naming_the_draft() {
    let m = models(LlamaShape {
        n_vocab: 32_000,
        ..LLAMA32_1B
    });
    match plan(&m, &common::inventory("desktop-rtx4080.yaml"), true) {
        Err(PlanError::Model(msg)) => {
            assert!(msg.contains(&m.draft.path), "{msg}");
            assert!(msg.contains("128256") && msg.contains("32000"), "{msg}");
        }
        other => panic!("expected a refusal, got {:?}", other.map(|d| d.status)),
    }
}

#[test]
fn the_cli_refuses_an_incompatible_draft_with_exit_4_naming_both_files() {
    let m = models(LlamaShape {
        n_vocab: 32_000,
        ..LLAMA32_1B
    });
    let o = common::bin_on("desktop-rtx4080.yaml")
        .args([
            "resolve",
            "-m",
            &m.target_path,
            "--model-draft",
            &m.draft.path,
        ])
        .output()
        .unwrap();
    common::assert_exit(&o, 4);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("target-8b.gguf") && err.contains("draft-1b.gguf"),
        "{err}"
    );
}

#[test]
fn vllm_refuses_a_draft_model_as_a_usage_error() {
    let m = models(LLAMA32_1B);
    let o = common::bin_on("desktop-rtx4080.yaml")
        .args([
            "resolve",
            "-m",
            &m.target_path,
            "--runtime",
            "vllm",
            "--model-draft",
            &m.draft.path,
        ])
        .output()
        .unwrap();
    common::assert_exit(&o, 2);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--model-draft") && err.contains("vllm"),
        "{err}"
    );
}

fn cli_json(o: &std::process::Output) -> serde_json::Value {
    common::assert_exit(o, 0);
    serde_json::from_slice(&o.stdout).unwrap()
}

/// `estimate -md` charges the draft's bytes on the devices `resolve --model-draft` does, for the plan's own
/// flags (one rule set: `runtime/llama_cpp/draft.rs`), names them per device in the JSON and the table, and
/// counts them in each device's total.
#[test]
fn estimate_charges_the_draft_where_resolve_does() {
    let t = common::fixture("gguf/llama-q4_k_m.gguf");
    let d = common::fixture("gguf/llama-tied-q8_0.gguf");
    let (t, d) = (t.to_str().unwrap(), d.to_str().unwrap());
    for inventory in ["laptop-rtx4060.yaml", "cpu-server.yaml"] {
        let plan = cli_json(
            &common::bin_on(inventory)
                .args(["resolve", "-m", t, "--model-draft", d, "-w", "chat"])
                .args(["--format", "json"])
                .output()
                .unwrap(),
        );
        let s = &plan["settings"];
        let flag = |k: &str| s[k].to_string();
        let (ngl, c, np) = (flag("gpu_layers"), flag("context_length"), flag("parallel"));
        let args = [
            "estimate", "-m", t, "-md", d, "-ngl", &ngl, "-c", &c, "-np", &np,
        ];
        let est = cli_json(
            &common::bin_on(inventory)
                .args(args)
                .args(["--format", "json"])
                .output()
                .unwrap(),
        );
        let charged = est["draft"]["devices"].as_array().unwrap();
        for p in plan["memory"]["devices"].as_array().unwrap() {
            let name = p["device"].as_str().unwrap();
            let e = charged
                .iter()
                .find(|e| e["device"] == name)
                .unwrap_or_else(|| panic!("{inventory}: no {name} in {charged:?}"));
            assert_eq!(
                e["bytes"], p["components"]["draft_bytes"],
                "{inventory} {name}"
            );
        }
        let total: u64 = est["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["total_bytes"].as_u64().unwrap())
            .sum();
        assert_eq!(est["total_bytes"].as_u64(), Some(total));
        let table = common::bin_on(inventory).args(args).output().unwrap();
        let text = String::from_utf8_lossy(&table.stdout);
        assert!(text.lines().nth(1).unwrap().contains("draft"), "{text}");
        assert!(text.contains(&format!("draft {d}")), "{text}");
    }
}

/// `-ngld N` (and its long spellings) sets the draft's own layer count: with 0 the draft's weights stay on the
/// host of a GPU machine, where the default puts them all on the GPU.
#[test]
fn estimate_takes_the_drafts_gpu_layers_from_ngld() {
    let t = common::fixture("gguf/llama-q4_k_m.gguf");
    let d = common::fixture("gguf/llama-tied-q8_0.gguf");
    let (t, d) = (t.to_str().unwrap(), d.to_str().unwrap());
    let host_draft = |extra: &[&str]| {
        let est = cli_json(
            &common::bin_on("laptop-rtx4060.yaml")
                .args([
                    "estimate", "-m", t, "-md", d, "-c", "4096", "--format", "json",
                ])
                .args(extra)
                .output()
                .unwrap(),
        );
        assert_eq!(est["draft"]["devices"][0]["device"], "cpu");
        est["draft"]["devices"][0]["bytes"].as_u64().unwrap()
    };
    let all = host_draft(&[]);
    let none = host_draft(&["-ngld", "0"]);
    assert!(none > all, "-ngld 0 {none} vs default {all}");
    assert_eq!(host_draft(&["--n-gpu-layers-draft", "0"]), none);
    assert_eq!(host_draft(&["-ngld", "all"]), all);
}
