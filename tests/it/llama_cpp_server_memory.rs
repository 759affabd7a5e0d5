//! The memory a plan charges for `--model-draft` and `--mmproj` (issue 26 item 4) against the pinned engine's own
//! load log: a plan with a draft model and one with a projector are started with their emitted argv (host and
//! port rewritten to loopback and a free port) until `GET /health` answers 200; the server's log lines
//! (`model buffer size`, `KV buffer size`, `output buffer size`, `compute buffer size`, per context, and the clip
//! loader's lines for the projector) are summed per model and compared with the plan's host memory: weights, KV
//! and output exact at the printed 0.01 MiB, compute within 5 % or 16 MiB.
//!
//! It needs a build of the pinned llama-server (tests/fixtures/llama-cpp/README.md); without
//! `LLAMA_SERVER=/path/to/llama-server` it prints why and passes.

use crate::common;
use common::server::{Server, free_port, loopback_args};
use common::{fixture, inventory, profiles};

use std::path::Path;
use std::sync::Arc;

use optimizer::emit::{Deployment, MemoryDevice};
use optimizer::model;
use optimizer::plan::Overrides;
use optimizer::runtime::{DraftModel, Projector};
use optimizer_testkit::gguf_builder::{
    GgufBuilder, MlpProjectorShape, synthetic_mlp_mmproj, write_sparse,
};

/// The engine prints buffer sizes in MiB with two decimals (`%8.2f MiB`, src/llama-model.cpp, llama-context.cpp).
const MIB: f64 = 1024.0 * 1024.0;
const PRINTED_MIB: f64 = 0.01;
/// The tolerance for compute buffers: 5 % or 16 MiB, whichever is larger.
const COMPUTE_REL: f64 = 0.05;
const COMPUTE_ABS_MIB: f64 = 16.0;
/// The target of both plans (gpt2 vocabulary, 320 tokens, 256 wide) and the draft (the same tokenizer family,
/// 256 tokens: within the engine's 128-token difference, common/speculative.cpp).
const TARGET: &str = "llama-q4_k_m.gguf";
const DRAFT: &str = "llama-tied-q8_0.gguf";

/// A LLaVA-style (`mlp`) projector scaled down: a 2-block ViT on 112-px images in 14-px patches, projecting into
/// `n_embd_text` (mtmd refuses a projector whose output width differs from the language model's).
fn mlp_projector(n_embd_text: u64) -> GgufBuilder {
    synthetic_mlp_mmproj(MlpProjectorShape {
        n_embd: 128,
        n_ff: 256,
        n_block: 2,
        n_head: 4,
        image: 112,
        patch: 14,
        projection_dim: n_embd_text,
        n_embd_text,
    })
}

/// Runs `argv` (the plan's llama-server command) until /health answers 200; returns the server's log.
fn start(server: &std::ffi::OsStr, argv: &[String]) -> Result<String, String> {
    let port = free_port();
    let mut args = loopback_args(argv, port)?;
    // `-lv 4`: the buffer-size lines are info-level logs of the library, below the server's default verbosity.
    args.extend(["-lv".to_string(), "4".to_string()]);
    let (running, outcome) = Server::start(server, &args, port);
    let text = running.stop();
    match outcome {
        Ok(_) => Ok(text),
        Err(e) => Err(format!("llama-server {argv:?} {e}; its log:\n{text}")),
    }
}

/// The MiB a log line prints after `what` and its `=` or `:` (e.g. `model buffer size =     0.52 MiB`).
fn mib(line: &str, what: &str) -> Option<f64> {
    let rest = &line[line.find(what)? + what.len()..];
    rest.trim_start()
        .trim_start_matches(['=', ':'])
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Sums of the engine's buffer lines, per model in load order.
#[derive(Debug, Default, Clone, Copy)]
struct Logged {
    /// Every `model buffer size` line (the file mapping and the repacked copies).
    weights: f64,
    /// `CPU_REPACK model buffer size`: the repacked copies alone.
    repack: f64,
    kv: f64,
    output: f64,
    compute: f64,
}

/// Each `llama_model_load`'s buffers in the order the server loads the models (target, then draft): a new model
/// starts at its first `model buffer size` line after a context line was seen.
fn llama_models(log: &str) -> Vec<Logged> {
    let mut out: Vec<Logged> = Vec::new();
    let mut in_context = true;
    for line in log.lines() {
        if line.contains("clip") || line.contains("mtmd") {
            continue;
        }
        if let Some(v) = mib(line, "model buffer size") {
            if in_context {
                out.push(Logged::default());
                in_context = false;
            }
            let cur = out.last_mut().unwrap();
            cur.weights += v;
            if line.contains("CPU_REPACK") {
                cur.repack += v;
            }
            continue;
        }
        let Some(cur) = out.last_mut() else { continue };
        for (what, slot) in [
            ("KV buffer size", &mut cur.kv),
            ("output buffer size", &mut cur.output),
            ("compute buffer size", &mut cur.compute),
        ] {
            if let Some(v) = mib(line, what) {
                *slot += v;
                in_context = true;
            }
        }
    }
    out
}

fn host(doc: &Deployment) -> &MemoryDevice {
    doc.memory
        .devices
        .iter()
        .find(|d| d.device == optimizer::fleet::DeviceId::HOST.to_string())
        .unwrap_or_else(|| panic!("no host in {:?}", doc.memory.devices))
}

fn exact(what: &str, ours_bytes: u64, engine_mib: f64, report: &mut Vec<String>) {
    let ours = ours_bytes as f64 / MIB;
    report.push(format!(
        "{what}: ours {ours:.2} MiB, engine {engine_mib:.2} MiB"
    ));
    assert!(
        (ours - engine_mib).abs() <= PRINTED_MIB,
        "{what}: ours {ours:.4} MiB vs engine {engine_mib:.2} MiB\n{}",
        report.join("\n")
    );
}

fn close(what: &str, ours_bytes: u64, engine_mib: f64, report: &mut Vec<String>) {
    let ours = ours_bytes as f64 / MIB;
    report.push(format!(
        "{what}: ours {ours:.2} MiB, engine {engine_mib:.2} MiB"
    ));
    let tol = (engine_mib * COMPUTE_REL).max(COMPUTE_ABS_MIB);
    assert!(
        (ours - engine_mib).abs() <= tol,
        "{what}: ours {ours:.2} MiB vs engine {engine_mib:.2} MiB (tolerance {tol:.2})\n{}",
        report.join("\n")
    );
}

fn plan_with(spec: &model::ModelSpec, path: &Path, ov: &Overrides) -> Deployment {
    let inv = inventory("cpu-server.yaml");
    common::plan(
        spec,
        &path.display().to_string(),
        &inv,
        &profiles(),
        "chat",
        ov,
    )
    .unwrap()
}

fn server() -> Option<std::ffi::OsString> {
    let s = std::env::var_os("LLAMA_SERVER").filter(|v| !v.is_empty());
    if s.is_none() {
        eprintln!(
            "skipped: set LLAMA_SERVER to the pinned llama-server binary to compare a plan's draft and projector memory with its log (tests/fixtures/llama-cpp/README.md)"
        );
    }
    s
}

#[test]
fn draft_model_memory_matches_the_pinned_server_log() {
    let Some(server) = server() else { return };
    let (tp, dp) = (fixture("gguf").join(TARGET), fixture("gguf").join(DRAFT));
    let target = model::load(&tp).unwrap();
    let draft = Arc::new(model::load(&dp).unwrap());
    let ov = Overrides {
        parallel: Some(1),
        draft: Some(DraftModel {
            path: dp.display().to_string(),
            spec: draft,
        }),
        ..Overrides::default()
    };
    let doc = plan_with(&target, &tp, &ov);
    let argv = &common::artifact(&doc, "llama-server").argv;
    let log = start(&server, argv).unwrap_or_else(|e| panic!("{e}"));
    let models = llama_models(&log);
    assert_eq!(models.len(), 2, "target and draft in the log:\n{log}");
    let (t, d) = (models[0], models[1]);
    let h = host(&doc);
    let c = &h.components;
    let mut report = vec![format!("argv: {argv:?}")];
    // The mapping covers the whole file (the repacked tensors' source bytes included: our weights + repacked), and
    // the repacked copies sit in their own buffer.
    exact(
        "target weights (CPU_Mapped)",
        c.weights_bytes + c.weights_repack_bytes,
        t.weights - t.repack,
        &mut report,
    );
    exact(
        "target repacked (CPU_REPACK)",
        c.weights_repack_bytes,
        t.repack,
        &mut report,
    );
    exact("target KV", c.kv_cache_bytes, t.kv, &mut report);
    exact("target output", c.output_bytes, t.output, &mut report);
    close("target compute", c.compute_bytes, t.compute, &mut report);
    let engine_draft = d.weights + d.kv + d.output + d.compute;
    close(
        "draft (weights+KV+output+compute)",
        c.draft_bytes,
        engine_draft,
        &mut report,
    );
    eprintln!("{}\nengine draft: {d:?}", report.join("\n"));
}

#[test]
fn projector_memory_matches_the_pinned_server_log() {
    let Some(server) = server() else { return };
    let tp = fixture("gguf").join(TARGET);
    let target = model::load(&tp).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pp = dir.path().join("mmproj-mlp.gguf");
    let n_embd_text = target.hparams.embedding_length.unwrap();
    write_sparse(&mlp_projector(n_embd_text), &pp).unwrap();
    let projector = Arc::new(model::load(&pp).unwrap());
    let ov = Overrides {
        parallel: Some(1),
        mmproj: Some(Projector {
            path: pp.display().to_string(),
            spec: Some(projector),
        }),
        ..Overrides::default()
    };
    let doc = plan_with(&target, &tp, &ov);
    let argv = &common::artifact(&doc, "llama-server").argv;
    let log = start(&server, argv).unwrap_or_else(|e| panic!("{e}"));
    // tools/mtmd/clip.cpp: `load_hparams` prints the projector's tensor bytes ("model size"), and
    // `reserve_compute_meta` the compute buffer the warm-up image reserves.
    let weights = log
        .lines()
        .filter(|l| l.contains("load_hparams"))
        .find_map(|l| mib(l, "model size:"))
        .unwrap_or_else(|| panic!("no clip model size line in the log:\n{log}"));
    let compute = log
        .lines()
        .filter(|l| l.contains("reserve_compute_meta"))
        .find_map(|l| mib(l, "compute buffer size"))
        .unwrap_or_else(|| panic!("no clip compute buffer line in the log:\n{log}"));
    let models = llama_models(&log);
    assert_eq!(models.len(), 1, "the target alone in the llama log:\n{log}");
    let h = host(&doc);
    let c = &h.components;
    let mut report = vec![format!("argv: {argv:?}")];
    exact(
        "target weights (CPU_Mapped)",
        c.weights_bytes + c.weights_repack_bytes,
        models[0].weights - models[0].repack,
        &mut report,
    );
    exact(
        "target repacked (CPU_REPACK)",
        c.weights_repack_bytes,
        models[0].repack,
        &mut report,
    );
    exact("target KV", c.kv_cache_bytes, models[0].kv, &mut report);
    exact(
        "projector weights (mmproj_bytes)",
        c.mmproj_bytes,
        weights,
        &mut report,
    );
    // The projector's compute buffer is not charged (runtime/llama_cpp/mmproj.rs): the charge must still be within
    // the compute tolerance of weights + compute, and the report names the engine's figure.
    close(
        "projector weights + compute",
        c.mmproj_bytes,
        weights + compute,
        &mut report,
    );
    eprintln!(
        "{}\nengine projector compute {compute:.2} MiB (not charged)",
        report.join("\n")
    );
}
