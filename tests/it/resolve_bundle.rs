//! `optimizer resolve -o DIR/`: a bundle of the document and every launch artifact's files and shell line, ready
//! to copy to the machine that runs it.

use crate::common;

use common::vllm_models;
use optimizer_testkit::gguf_builder::LlamaShape;

fn resolve_into(args: &[&str], model: &std::path::Path, out: &std::path::Path) -> i32 {
    let mut dir = out.as_os_str().to_owned();
    dir.push("/");
    let o = common::bin_on("workstation-2x3090.yaml")
        .args(["resolve", "-m"])
        .arg(model)
        .args(args)
        .arg("-o")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(o.stdout.is_empty(), "a bundle writes nothing to stdout");
    o.status.code().unwrap_or(-1)
}

#[test]
fn a_llama_cpp_bundle_holds_the_document_the_commands_the_modelfile_and_the_manifests() {
    let tmp = tempfile::tempdir().unwrap();
    let (m, _) = common::synth(tmp.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    let out = tmp.path().join("bundle");
    assert_eq!(resolve_into(&["-w", "chat"], &m, &out), 0);
    let doc: serde_json::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(out.join("deploy.yaml")).unwrap())
            .unwrap();
    for a in doc["launch"].as_array().unwrap() {
        let name = a["name"].as_str().unwrap();
        for (rel, content) in a["files"].as_object().into_iter().flatten() {
            let written = std::fs::read_to_string(out.join(name).join(rel)).unwrap();
            assert_eq!(written, content.as_str().unwrap(), "{name}/{rel}");
        }
        if let Some(cmd) = a["command"].as_str() {
            let sh = std::fs::read_to_string(out.join(name).join("command.sh")).unwrap();
            assert!(
                sh.starts_with("#!/bin/sh\n") && sh.trim_end().ends_with(cmd),
                "{name}"
            );
            // The shell reads it back as one valid command line.
            let o = std::process::Command::new("sh")
                .args(["-n"])
                .arg(out.join(name).join("command.sh"))
                .output()
                .unwrap();
            common::assert_exit(&o, 0);
        }
    }
    assert!(out.join("llama-server/command.sh").is_file());
    assert!(out.join("ollama/Modelfile").is_file());
    // Written again into the same directory: the files are replaced.
    assert_eq!(
        resolve_into(&["-w", "chat", "--format", "json"], &m, &out),
        0
    );
    assert!(out.join("deploy.json").is_file());
}

#[test]
fn a_training_bundle_holds_the_script_and_its_configuration() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = vllm_models::materialize("Llama-3.1-8B");
    let out = tmp.path().join("train");
    assert_eq!(
        resolve_into(
            &["-w", "fine-tune-lora", "--hardware", "rtx-4090"],
            dir.path(),
            &out
        ),
        0
    );
    for f in [
        "train.py",
        "training_args.json",
        "lora_config.json",
        "accelerate_config.yaml",
        "command.sh",
    ] {
        assert!(out.join("accelerate").join(f).is_file(), "{f}");
    }
    let sh = std::fs::read_to_string(out.join("accelerate/command.sh")).unwrap();
    assert!(
        sh.contains("accelerate launch --config_file accelerate_config.yaml train.py"),
        "{sh}"
    );
}

/// Regression guard: a model given by a relative path is named by its absolute path in the document and the
/// launch artifacts, so they work from wherever they are run, not only from the directory `resolve` ran in.
#[test]
fn launch_artifacts_name_the_model_by_its_absolute_path() {
    let tmp = tempfile::tempdir().unwrap();
    let (m, _) = common::synth(tmp.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    let o = common::bin_on("workstation-2x3090.yaml")
        .current_dir(tmp.path())
        .args(["resolve", "-w", "chat", "--format", "json", "-m", "m.gguf"])
        .output()
        .unwrap();
    common::assert_exit(&o, 0);
    let d: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let abs = std::fs::canonicalize(&m).unwrap().display().to_string();
    assert_eq!(d["model"]["path"], abs.as_str());
    let argv: Vec<&str> = d["launch"][0]["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(argv.contains(&abs.as_str()), "{argv:?}");
}

/// `--image` replaces the engine's official image in the Kubernetes manifests of llama.cpp and vLLM plans; an
/// empty or spaced reference is a usage error.
#[test]
fn the_manifest_image_can_be_chosen() {
    let tmp = tempfile::tempdir().unwrap();
    let (m, _) = common::synth(tmp.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    let image = "registry.example/llama.cpp:server-cuda-b6000";
    let o = common::bin_on("workstation-2x3090.yaml")
        .args([
            "resolve", "-w", "chat", "--format", "json", "--image", image, "-m",
        ])
        .arg(&m)
        .output()
        .unwrap();
    common::assert_exit(&o, 0);
    let d: optimizer::emit::Deployment = serde_json::from_slice(&o.stdout).unwrap();
    let k8s = common::artifact(&d, "kubernetes");
    let manifests: String = k8s.files.values().cloned().collect();
    assert!(
        manifests.contains(&format!("image: {image}")),
        "{manifests}"
    );
    assert!(!manifests.contains("ghcr.io/ggml-org"));
    let dir = vllm_models::materialize("Qwen2.5-7B");
    let (d, code) = common::resolve_doc(
        "cpu-server.yaml",
        dir.path(),
        "chat",
        "a100-80gb-sxm",
        &["--image", "registry.example/vllm:pinned"],
    );
    assert_eq!(code, 0);
    let manifests: String = common::artifact(&d, "kubernetes")
        .files
        .values()
        .cloned()
        .collect();
    assert!(
        manifests.contains("image: registry.example/vllm:pinned"),
        "{manifests}"
    );
    for bad in ["", "a b"] {
        let o = common::bin_on("workstation-2x3090.yaml")
            .args(["resolve", "-w", "chat", "--image", bad, "-m"])
            .arg(&m)
            .output()
            .unwrap();
        common::assert_exit(&o, 2);
    }
}
