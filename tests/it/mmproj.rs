//! `--mmproj FILE` (llama-server `--mmproj`, issue 26 item 4): the projector's weights are charged to the device
//! the pinned engine puts them on (the first planned GPU, the host on a CPU-only plan;
//! `crates/core/src/runtime/llama_cpp/mmproj.rs` cites the engine), the plan fits only if the model and the
//! projector both fit, the argv carries `--mmproj` and passes the engine's argument table, a file that is no
//! projector is refused (exit 4) and the other runtimes refuse the flag (exit 2). The projector's compute buffer
//! is not charged yet: every such plan says so in a warning.

use crate::common;
use crate::llama_cpp_argv_table::{assert_launch_argv_passes, check_argv, table};

use std::sync::Arc;

use optimizer::emit::{Deployment, MemoryDevice, Status};
use optimizer::hardware::Inventory;
use optimizer::model::ModelSpec;
use optimizer::plan::Overrides;
use optimizer::runtime::Projector;
use optimizer_testkit::gguf_builder::{LlamaShape, synthetic_llava15_mmproj, write_sparse};

const CONTEXT: u32 = 8192;

struct Models {
    _dir: tempfile::TempDir,
    target: ModelSpec,
    target_path: String,
    projector_path: String,
    projector: Arc<ModelSpec>,
}

fn models() -> Models {
    let dir = tempfile::tempdir().unwrap();
    let (tp, target) = common::synth(dir.path(), "llava-7b.gguf", LlamaShape::LLAMA3_8B);
    let pp = dir.path().join("mmproj-model-f16.gguf");
    write_sparse(&synthetic_llava15_mmproj(), &pp).unwrap();
    let projector = optimizer::model::load(&pp).unwrap();
    Models {
        target,
        target_path: tp.display().to_string(),
        projector_path: pp.display().to_string(),
        projector: Arc::new(projector),
        _dir: dir,
    }
}

fn overrides(m: &Models, with: bool, gpu_layers: Option<u32>) -> Overrides {
    Overrides {
        context_length: Some(CONTEXT),
        parallel: Some(1),
        gpu_layers,
        mmproj: with.then(|| Projector {
            path: m.projector_path.clone(),
            spec: Some(m.projector.clone()),
        }),
        ..Overrides::default()
    }
}

fn all_layers() -> Option<u32> {
    Some(LlamaShape::LLAMA3_8B.n_layer as u32 + 1)
}

fn plan(m: &Models, inv: &Inventory, with: bool, ngl: Option<u32>) -> Deployment {
    common::plan(
        &m.target,
        &m.target_path,
        inv,
        &common::profiles(),
        "chat",
        &overrides(m, with, ngl),
    )
    .unwrap()
}

fn device<'a>(d: &'a Deployment, name: &str) -> &'a MemoryDevice {
    d.memory
        .devices
        .iter()
        .find(|m| m.device == name)
        .unwrap_or_else(|| panic!("no {name} in {:?}", d.memory.devices))
}

/// The projector header's tensor bytes, summed independently of the planner: f16 2-D weights and the 4-D patch
/// embedding, f32 vectors (the converter's rule).
fn projector_tensor_bytes(p: &ModelSpec) -> u64 {
    p.tensors
        .iter()
        .map(|t| {
            let n: u64 = t.shape.iter().product();
            let two_byte =
                t.shape.len() == 4 || (t.shape.len() == 2 && t.name.ends_with(".weight"));
            n * if two_byte { 2 } else { 4 }
        })
        .sum()
}

#[test]
fn the_projector_weights_go_to_the_first_planned_gpu() {
    let m = models();
    let inv = common::inventory("desktop-rtx4080.yaml");
    let without = plan(&m, &inv, false, all_layers());
    let with = plan(&m, &inv, true, all_layers());
    assert_eq!(with.status, Status::Fits, "{:?}", with.warnings);
    let gpu_name = with.memory.devices[1].device.clone();
    let (g0, g1) = (device(&without, &gpu_name), device(&with, &gpu_name));
    let expected = projector_tensor_bytes(&m.projector);
    // LLaVA-1.5's CLIP ViT-L/14 projector is about 0.6 GB in f16.
    assert!((500 << 20..700 << 20).contains(&expected), "{expected}");
    assert_eq!(g1.components.mmproj_bytes, expected);
    assert_eq!(g1.total_bytes, g0.total_bytes + expected);
    assert_eq!(g0.components, {
        let mut c = g1.components.clone();
        c.mmproj_bytes = 0;
        c
    });
    assert_eq!(device(&with, "cpu").components.mmproj_bytes, 0);
    assert!(with.provenance.contains_key("launch.mmproj"));
    assert!(
        with.warnings
            .iter()
            .any(|w| w.contains("compute buffer") && w.contains(&m.projector_path)),
        "{:?}",
        with.warnings
    );
}

#[test]
fn a_cpu_only_plan_keeps_the_projector_on_the_host() {
    let m = models();
    let d = plan(&m, &common::inventory("cpu-server.yaml"), true, None);
    assert_eq!(
        d.memory.devices[0].components.mmproj_bytes,
        projector_tensor_bytes(&m.projector)
    );
    let argv = &common::artifact(&d, "llama-server").argv;
    assert!(check_argv(&table(), argv).is_empty(), "{argv:?}");
}

/// The plan fits only if the model and the projector fit on the projector's GPU: with the KV type pinned to
/// f16 (`--kv-type`), a GPU with room for the model and half the projector has no plan; unpinned, the planner
/// makes room (a smaller KV type) and the projector stays charged within the GPU's room.
#[test]
fn a_gpu_that_holds_the_model_but_not_the_projector_does_not_fit() {
    let m = models();
    let mut inv = common::inventory("desktop-rtx4080.yaml");
    let f16 = |with: bool| Overrides {
        kv_type: Some("f16".into()),
        ..overrides(&m, with, all_layers())
    };
    let run = |inv: &Inventory, ov: &Overrides| {
        common::plan(
            &m.target,
            &m.target_path,
            inv,
            &common::profiles(),
            "chat",
            ov,
        )
        .unwrap()
    };
    let probe = run(&inv, &f16(true));
    let g = &probe.memory.devices[1];
    let (model, proj) = (
        g.total_bytes - g.components.mmproj_bytes,
        g.components.mmproj_bytes,
    );
    // Room for the model and half the projector.
    let shrink = g.capacity_bytes - g.reserve_bytes - (model + proj / 2);
    inv.gpus[0].memory_free_bytes -= shrink;
    assert_eq!(run(&inv, &f16(false)).status, Status::Fits);
    assert_eq!(run(&inv, &f16(true)).status, Status::NoFit);
    let free = plan(&m, &inv, true, all_layers());
    let g = &free.memory.devices[1];
    assert_eq!(free.status, Status::Fits, "{:?}", free.warnings);
    assert_eq!(g.components.mmproj_bytes, proj);
    assert!(g.total_bytes <= g.capacity_bytes - g.reserve_bytes, "{g:?}");
}

#[test]
fn the_mmproj_argv_passes_the_engine_table() {
    let m = models();
    let d = plan(
        &m,
        &common::inventory("desktop-rtx4080.yaml"),
        true,
        all_layers(),
    );
    assert_launch_argv_passes(&d);
    let argv = &common::artifact(&d, "llama-server").argv;
    let i = argv.iter().position(|a| a == "--mmproj").expect("--mmproj");
    assert_eq!(argv[i + 1], m.projector_path);
}

#[test]
fn the_cli_refuses_a_language_model_as_the_projector_with_exit_4() {
    let m = models();
    let o = common::bin_on("desktop-rtx4080.yaml")
        .args(["resolve", "-m", &m.target_path, "--mmproj", &m.target_path])
        .output()
        .unwrap();
    common::assert_exit(&o, 4);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--mmproj") && err.contains("clip"), "{err}");
}

#[test]
fn the_cli_plans_a_projector_and_names_it_in_the_argv() {
    let m = models();
    let o = common::bin_on("desktop-rtx4080.yaml")
        .args([
            "resolve",
            "-m",
            &m.target_path,
            "--mmproj",
            &m.projector_path,
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("--mmproj") && out.contains("mmproj_bytes"),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn vllm_refuses_a_projector_as_a_usage_error() {
    let m = models();
    let o = common::bin_on("desktop-rtx4080.yaml")
        .args([
            "resolve",
            "-m",
            &m.target_path,
            "--runtime",
            "vllm",
            "--mmproj",
            &m.projector_path,
        ])
        .output()
        .unwrap();
    common::assert_exit(&o, 2);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--mmproj") && err.contains("vllm"), "{err}");
}

fn cli_json(o: &std::process::Output) -> serde_json::Value {
    common::assert_exit(o, 0);
    serde_json::from_slice(&o.stdout).unwrap()
}

/// `estimate --mmproj` charges the projector's weights on the device `resolve --mmproj` does (the first GPU; the
/// host with `--no-mmproj-offload`), names it in the JSON and the table, and states the image-token budget:
/// LLaVA-1.5's 336-px images in 14-px patches are 576 tokens (tools/mtmd/clip.cpp `clip_n_output_tokens`).
#[test]
fn estimate_charges_the_projector_where_resolve_does() {
    let dir = tempfile::tempdir().unwrap();
    let pp = dir.path().join("mmproj-model-f16.gguf");
    write_sparse(&synthetic_llava15_mmproj(), &pp).unwrap();
    let expected = projector_tensor_bytes(&optimizer::model::load(&pp).unwrap());
    let t = common::fixture("gguf/llama-q4_k_m.gguf");
    let (t, p) = (t.to_str().unwrap(), pp.to_str().unwrap());
    let inventory = "laptop-rtx4060.yaml";
    let plan = cli_json(
        &common::bin_on(inventory)
            .args([
                "resolve", "-m", t, "--mmproj", p, "-w", "chat", "--format", "json",
            ])
            .output()
            .unwrap(),
    );
    let planned = plan["memory"]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["components"]["mmproj_bytes"].as_u64().unwrap_or(0) > 0)
        .unwrap();
    let est = |extra: &[&str]| {
        cli_json(
            &common::bin_on(inventory)
                .args([
                    "estimate", "-m", t, "-mm", p, "-c", "4096", "--format", "json",
                ])
                .args(extra)
                .output()
                .unwrap(),
        )
    };
    let on_gpu = est(&[]);
    assert_eq!(on_gpu["mmproj"]["device"], planned["device"]);
    assert_eq!(
        on_gpu["mmproj"]["weights_bytes"],
        planned["components"]["mmproj_bytes"]
    );
    assert_eq!(on_gpu["mmproj"]["weights_bytes"].as_u64(), Some(expected));
    assert_eq!(on_gpu["mmproj"]["image_tokens"]["per_image"], 576);
    assert_eq!(on_gpu["mmproj"]["image_tokens"]["dynamic"], false);
    assert_eq!(on_gpu["mmproj"]["images_per_sequence"], 4096 / 576);
    let on_host = est(&["--no-mmproj-offload"]);
    assert_eq!(on_host["mmproj"]["device"], "cpu");
    let host_total = |e: &serde_json::Value| e["devices"][0]["total_bytes"].as_u64().unwrap();
    assert_eq!(host_total(&on_host), host_total(&on_gpu) + expected);
    let table = common::bin_on(inventory)
        .args(["estimate", "-m", t, "--mmproj", p, "-c", "4096"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.lines().nth(1).unwrap().contains("mmproj"), "{text}");
    assert!(text.contains("576 tokens per image"), "{text}");
}

/// A projector header with only the keys `image_tokens` reads.
fn projector_keys(kind: &str, image: u32, patch: u32, scale: Option<u32>) -> Arc<ModelSpec> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.gguf");
    let mut b = optimizer_testkit::gguf_builder::GgufBuilder::new();
    b.kv_str("general.architecture", "clip")
        .kv_str("clip.projector_type", kind)
        .kv_u32("clip.vision.image_size", image)
        .kv_u32("clip.vision.patch_size", patch);
    if let Some(s) = scale {
        b.kv_u32("clip.vision.projector.scale_factor", s);
    }
    write_sparse(&b, &path).unwrap();
    Arc::new(optimizer::model::load(&path).unwrap())
}

/// Tokens per image per projector type, as clip.cpp `clip_n_output_tokens` and `load_hparams` give them: Gemma 3's
/// 896-px images in 14-px patches pooled 4x4 are 256; its `projector.scale_factor` overrides the pooling; Qwen2.5-VL
/// and Qwen3-VL are dynamic up to 4096; an unmodelled type states none.
#[test]
fn image_tokens_follow_the_projector_type() {
    use optimizer::runtime::llama_cpp::mmproj::{ImageTokens, image_tokens};
    let fixed = |n| {
        Some(ImageTokens {
            per_image: n,
            dynamic: false,
        })
    };
    assert_eq!(
        image_tokens(&projector_keys("gemma3", 896, 14, None)),
        fixed(256)
    );
    assert_eq!(
        image_tokens(&projector_keys("gemma3", 896, 14, Some(2))),
        fixed(1024)
    );
    assert_eq!(
        image_tokens(&projector_keys("mlp", 336, 14, None)),
        fixed(576)
    );
    for q in ["qwen2.5vl_merger", "qwen3vl_merger"] {
        assert_eq!(
            image_tokens(&projector_keys(q, 560, 14, None)),
            Some(ImageTokens {
                per_image: 4096,
                dynamic: true
            })
        );
    }
    assert_eq!(
        image_tokens(&projector_keys("resampler", 448, 14, None)),
        None
    );
}

/// Issue 26 item 4: the plan states the image-token budget beside the projector: LLaVA-1.5's 336-pixel images in
/// 14-pixel patches become 576 tokens each, so the planned per-sequence context holds CONTEXT / 576 of them.
#[test]
fn the_plan_states_how_many_images_the_context_holds() {
    let m = models();
    let inv = common::inventory("desktop-rtx4080.yaml");
    let with = plan(&m, &inv, true, all_layers());
    let detail = &with.provenance["launch.mmproj"].detail;
    let n = u64::from(CONTEXT) / 576;
    assert!(
        detail.contains("an image becomes 576 tokens")
            && detail.contains(&format!(
                "so {n} images fill one sequence's {CONTEXT} tokens"
            )),
        "{detail}"
    );
}
