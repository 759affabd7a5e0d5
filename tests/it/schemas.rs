//! The committed JSON Schemas in `schemas/` must equal what the Rust types generate. After changing a type,
//! regenerate them with `OPTIMIZER_UPDATE_SCHEMAS=1 cargo test --test schemas` and commit the result.

use crate::common;
use common::{bin, root};

use optimizer::schema::{NAMES, render};

#[test]
fn committed_schemas_are_current() {
    let dir = root().join("schemas");
    let update = std::env::var_os("OPTIMIZER_UPDATE_SCHEMAS").is_some();
    let mut stale = Vec::new();
    for (name, file) in NAMES {
        let generated = render(name).expect("schema renders");
        let path = dir.join(file);
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &generated).unwrap();
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(committed) if committed == generated => {}
            _ => stale.push(file.to_string()),
        }
    }
    assert!(
        stale.is_empty(),
        "stale or missing schemas {stale:?}: run `OPTIMIZER_UPDATE_SCHEMAS=1 cargo test --test schemas`"
    );
}

#[test]
fn schema_command_prints_each_schema() {
    for (name, _) in NAMES {
        let out = bin().args(["schema", name]).output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(v.get("$schema").is_some(), "{name}");
    }
    let out = bin().args(["schema", "nope"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("hardware-profile"));
}

/// Emitted documents are instances of the published deployment schema (what orchestration tooling validates
/// against): a fitting plan on a GPU, a CPU plan, a no-fit plan, a cluster plan and a `workload-unmet` plan (its
/// `workload.unmet`), as the CLI writes them.
#[test]
fn emitted_documents_validate_against_the_published_deployment_schema() {
    let dir = tempfile::tempdir().unwrap();
    let (m8, _) = common::synth(
        dir.path(),
        "m8.gguf",
        optimizer_testkit::gguf_builder::LlamaShape::LLAMA3_8B,
    );
    let (m70, _) = common::synth(
        dir.path(),
        "m70.gguf",
        optimizer_testkit::gguf_builder::LlamaShape::LLAMA3_70B,
    );
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("schemas/deployment.schema.json")).unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let cluster = common::fixture("clusters/h100-8x8.yaml");
    let cases: Vec<(Vec<std::ffi::OsString>, std::path::PathBuf)> = vec![
        (
            vec![
                "--inventory".into(),
                common::fixture("inventories/laptop-rtx4060.yaml").into(),
            ],
            m8.clone(),
        ),
        (
            vec![
                "--inventory".into(),
                common::fixture("inventories/cpu-server.yaml").into(),
            ],
            m8.clone(),
        ),
        (
            vec![
                "--inventory".into(),
                common::fixture("inventories/laptop-rtx4060.yaml").into(),
            ],
            m70,
        ),
        (vec![], m8.clone()),
        (
            vec![
                "--inventory".into(),
                common::fixture("inventories/cpu-server.yaml").into(),
            ],
            m8,
        ),
    ];
    for (i, (global, model)) in cases.into_iter().enumerate() {
        let mut c = bin();
        let workload = if i == 4 { "long-context" } else { "chat" };
        c.args(&global)
            .args(["resolve", "-w", workload, "--format", "json", "-m"])
            .arg(&model);
        if i == 3 {
            c.arg("--cluster").arg(&cluster);
        }
        let out = c.output().unwrap();
        assert!(
            matches!(out.status.code(), Some(0 | 3 | 5 | 6)),
            "case {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["apiVersion"], "optimizer/v2");
        let errors: Vec<String> = validator
            .iter_errors(&doc)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect();
        assert!(errors.is_empty(), "case {i}: {errors:?}");
        if i == 4 {
            assert_eq!(doc["status"], "workload-unmet");
            assert!(doc["workload"]["unmet"]["over_by_tokens"].as_u64() > Some(0));
        }
    }
    // The validator is not vacuous: a v1-shaped launch section is refused.
    let mut bad: serde_json::Value = serde_json::json!({"apiVersion": "optimizer/v2"});
    bad["launch"] = serde_json::json!({"llama_server": {"argv": []}});
    assert!(!validator.is_valid(&bad));
}
