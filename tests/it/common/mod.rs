//! The harness every integration test shares: where the fixtures are, the binary with a database of its own, the
//! fixture inventories and built-in profiles, synthetic and measured models, and the one call into the planner.
//!
//! Tests reach the planner only through [`plan`] and [`plan_workload`], so when its entry point changes (the
//! `Inputs` fields, a runtime choice) this file changes and the tests do not.
//!
//! Each test binary compiles this module and uses a different part of it, hence `allow(dead_code)`.
#![allow(dead_code)]

pub(crate) mod alloc;
pub(crate) mod server;
pub(crate) mod vllm_models;

use std::path::{Path, PathBuf};
use std::process::Command;

use optimizer::emit::{Artifact, Deployment, LlamaCppSettings};
use optimizer::evidence::Evidence;
use optimizer::hardware::{self, Inventory};
use optimizer::memory::llama_cpp::{CACHE_TYPES, FlashAttn, LazyMode, Machine, Params};
use optimizer::model::{self, GgmlType, ModelSpec, TypeReading};
use optimizer::plan::{self, Inputs, Overrides, PlanError};
use optimizer::profile::{self, ProfileSet, WorkloadProfile};
use optimizer_testkit::gguf_builder::{
    GgufBuilder, LlamaShape, synthetic_llama, value_type as vt, write_sparse,
};
use serde_json::Value;

/// The repository root.
pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `tests/fixtures/<rel>`.
pub(crate) fn fixture(rel: impl AsRef<Path>) -> PathBuf {
    root().join("tests/fixtures").join(rel)
}

/// The `optimizer` binary with its measurement database in the temp directory, one per test process, away from
/// the user's. Tests about the database's own location remove `OPTIMIZER_DB` again.
pub(crate) fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_optimizer"));
    c.env(
        "OPTIMIZER_DB",
        std::env::temp_dir().join(format!("optimizer-test-{}.db", std::process::id())),
    );
    c
}

/// [`bin`] planning for the fixture inventory `tests/fixtures/inventories/<name>` instead of probing this machine.
pub(crate) fn bin_on(inventory: &str) -> Command {
    let mut c = bin();
    c.arg("--inventory")
        .arg(fixture("inventories").join(inventory));
    c
}

/// A fixture inventory, `tests/fixtures/inventories/<name>`.
pub(crate) fn inventory(name: &str) -> Inventory {
    hardware::load_inventory(&fixture("inventories").join(name))
        .unwrap_or_else(|e| panic!("inventory {name}: {e}"))
}

/// The built-in profiles and rules.
pub(crate) fn profiles() -> ProfileSet {
    profile::load(&[]).unwrap()
}

/// A sparse Llama-3-shaped model (Q4_K_M tensor types) written to `dir/name` and read back.
pub(crate) fn synth(dir: &Path, name: &str, shape: LlamaShape) -> (PathBuf, ModelSpec) {
    let path = dir.join(name);
    write_sparse(&synthetic_llama(shape), &path).unwrap();
    let spec = model::load(&path).unwrap();
    (path, spec)
}

/// Plans `model` (launched from `path`) on `inv` for the built-in workload preset `workload`: the one entry point
/// into the planner for every test.
pub(crate) fn plan(
    model: &ModelSpec,
    path: &str,
    inv: &Inventory,
    set: &ProfileSet,
    workload: &str,
    overrides: &Overrides,
) -> Result<Deployment, PlanError> {
    let w = &set
        .workload(workload)
        .unwrap_or_else(|| panic!("no workload preset {workload}"))
        .value;
    plan_workload(model, path, inv, set, w, overrides, &Evidence::default())
}

/// [`plan`] for a workload the test built or edited itself, with what a measurement store returned.
pub(crate) fn plan_workload(
    model: &ModelSpec,
    path: &str,
    inv: &Inventory,
    set: &ProfileSet,
    workload: &WorkloadProfile,
    overrides: &Overrides,
    evidence: &Evidence,
) -> Result<Deployment, PlanError> {
    plan::resolve(&Inputs {
        model,
        model_path: path,
        inventory: inv,
        hardware_source: "inventory",
        profiles: set,
        workload,
        evidence,
        overrides,
    })
}

/// The workload of one llama-bench test (`pp512`, `tg128`): pp512 processes 512 prompt tokens, tg128 generates
/// 128 from an empty context; one sequence, a context of the test's tokens + 1, an f16 KV cache.
pub(crate) fn llama_bench_workload(set: &ProfileSet, test: &str) -> WorkloadProfile {
    let prefill = test.starts_with("pp");
    let n: u64 = test[2..]
        .parse()
        .unwrap_or_else(|_| panic!("not a llama-bench test: {test}"));
    let mut w = set.workload("inference").unwrap().value.clone();
    (w.prompt_tokens, w.generation_tokens) = if prefill { (n, 1) } else { (1, n) };
    w.context = profile::ContextPolicy::Fixed { tokens: n + 1 };
    w.precision.kv_cache = vec!["f16".into()];
    w
}

/// The ggml type id of a type name, as the upstream tables spell it.
pub(crate) fn type_id(name: &str) -> u32 {
    (0..64)
        .find(|&id| GgmlType::from_id(id, TypeReading::Upstream).is_some_and(|t| t.name() == name))
        .unwrap_or_else(|| panic!("unknown type {name}"))
}

/// Writes the model described in models.json as a sparse GGUF and reads it back (vocabulary contents are
/// placeholders: only counts and element types enter the memory and speed models).
pub(crate) fn build(m: &Value, path: &Path) -> ModelSpec {
    let mut b = GgufBuilder::new();
    for kv in m["metadata"].as_array().unwrap() {
        let key = kv["key"].as_str().unwrap();
        let ty = kv["type"].as_str().unwrap();
        let v = &kv["value"];
        match ty {
            "STRING" => {
                b.kv_str(key, v.as_str().unwrap());
            }
            "UINT32" => {
                b.kv_u32(key, v.as_u64().unwrap() as u32);
            }
            "INT32" => {
                b.kv_i32(key, v.as_i64().unwrap() as i32);
            }
            "UINT64" => {
                b.kv_u64(key, v.as_u64().unwrap());
            }
            "FLOAT32" => {
                b.kv_f32(key, v.as_f64().unwrap() as f32);
            }
            "BOOL" => {
                b.kv_raw(key.as_bytes(), vt::BOOL, &[u8::from(v.as_bool().unwrap())]);
            }
            "ARRAY" => {
                // Vocabulary contents do not enter the memory model; counts and element types do.
                let len = kv["length"]
                    .as_u64()
                    .unwrap_or_else(|| v.as_array().map_or(0, |a| a.len() as u64));
                let item = kv["item_type"].as_str().unwrap();
                let (et, elem): (u32, Vec<u8>) = match item {
                    "STRING" => (vt::STRING, b.string_bytes(b"t")),
                    "FLOAT32" => (vt::FLOAT32, 0f32.to_le_bytes().to_vec()),
                    "INT32" => (vt::INT32, 1i32.to_le_bytes().to_vec()),
                    "UINT32" => (vt::UINT32, 1u32.to_le_bytes().to_vec()),
                    "BOOL" => (vt::BOOL, vec![0]),
                    other => panic!("array of {other}"),
                };
                let mut bytes = b.array_header(et, len);
                match v.as_array() {
                    Some(items) if item == "INT32" || item == "UINT32" => {
                        for x in items {
                            bytes.extend_from_slice(&(x.as_i64().unwrap() as u32).to_le_bytes());
                        }
                    }
                    Some(items) if item == "BOOL" => {
                        for x in items {
                            bytes.push(u8::from(x.as_bool().unwrap()));
                        }
                    }
                    Some(items) if item == "FLOAT32" => {
                        for x in items {
                            bytes.extend_from_slice(&(x.as_f64().unwrap() as f32).to_le_bytes());
                        }
                    }
                    _ => {
                        for _ in 0..len {
                            bytes.extend_from_slice(&elem);
                        }
                    }
                }
                b.kv_raw(key.as_bytes(), vt::ARRAY, &bytes);
            }
            other => panic!("value type {other}"),
        }
    }
    for t in m["tensors"].as_array().unwrap() {
        let ne: Vec<u64> = t["ne"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        let id = type_id(t["type"].as_str().unwrap());
        let ty = GgmlType::from_id(id, TypeReading::Upstream).unwrap();
        b.tensor(
            t["name"].as_str().unwrap(),
            &ne,
            id,
            ty.tensor_bytes(&ne).unwrap(),
        );
    }
    write_sparse(&b, path).unwrap();
    model::load(path).unwrap()
}

/// A flag's value in a measured row's engine configuration (`row.config`, as the command line spelled it).
pub(crate) fn cfg<'a>(row: &'a Value, flag: &str) -> Option<&'a str> {
    row["config"].get(flag).and_then(Value::as_str)
}

/// A numeric flag of a measured row, or the engine's default.
pub(crate) fn cfg_u32(row: &Value, flag: &str, default: u32) -> u32 {
    cfg(row, flag).map_or(default, |s| s.parse().unwrap())
}

/// A KV cache type as llama.cpp's `-ctk`/`-ctv` spell it (f16 when absent, the engine's default).
pub(crate) fn cache_type(s: Option<&str>) -> GgmlType {
    let name = s.unwrap_or("f16");
    CACHE_TYPES
        .iter()
        .copied()
        .find(|t| t.name().eq_ignore_ascii_case(name))
        .unwrap_or_else(|| panic!("cache type {name}"))
}

/// The CPU features the repack rules read, from a measured table's `engine.cpu_flags`; no GPU.
pub(crate) fn cpu_machine(table: &Value) -> Machine {
    Machine {
        cpu_features: table["engine"]["cpu_flags"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap().to_string())
            .filter(|f| ["avx2", "avx512f"].contains(&f.as_str()))
            .collect(),
        gpus: vec![],
    }
}

/// The memory model's parameters for the command line a measured row ran with (tests/fixtures/llama-cpp: every
/// flag the tables use that changes what the engine allocates; absent flags take llama.cpp's defaults).
pub(crate) fn engine_params(row: &Value) -> Params {
    let flag = |f: &str| row["config"].get(f).is_some();
    Params {
        n_ctx: cfg_u32(row, "-c", 0),
        n_batch: cfg_u32(row, "-b", 2048),
        n_ubatch: cfg_u32(row, "-ub", 512),
        n_parallel: cfg_u32(row, "-np", 1),
        kv_unified: flag("--kv-unified") || flag("-kvu"),
        type_k: cache_type(cfg(row, "-ctk")),
        type_v: cache_type(cfg(row, "-ctv")),
        flash_attn: match cfg(row, "-fa") {
            Some("on") => FlashAttn::On,
            Some("off") => FlashAttn::Off,
            _ => FlashAttn::Auto,
        },
        n_gpu_layers: cfg(row, "-ngl").map_or(-1, |s| s.parse().unwrap()),
        no_kv_offload: flag("-nkvo"),
        n_cpu_moe: cfg_u32(row, "-ncmoe", 0),
        mmap: !flag("--no-mmap"),
        swa_full: flag("--swa-full"),
        repack: !flag("--no-repack") && !flag("-nr"),
        lazy_mode: match cfg(row, "-lzm") {
            Some("on") => LazyMode::On,
            Some("off") => LazyMode::Off,
            _ => LazyMode::Auto,
        },
        ..Params::default()
    }
}

/// The llama.cpp settings of a plan (every plan here is llama.cpp's).
pub(crate) fn llama(d: &Deployment) -> &LlamaCppSettings {
    d.settings
        .llama_cpp()
        .unwrap_or_else(|| panic!("not a llama.cpp plan: {:?}", d.runtime))
}

/// A launch artifact of a plan by name (`llama-server`, `ollama`, `kubernetes`).
pub(crate) fn artifact<'a>(d: &'a Deployment, name: &str) -> &'a Artifact {
    d.artifact(name)
        .unwrap_or_else(|| panic!("no {name} artifact in {:?}", d.launch))
}

/// Asserts a finished command exited with `code`, showing its stderr when it did not.
pub(crate) fn assert_exit(o: &std::process::Output, code: i32) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Asserts `resolve` planned something runnable: exit 0 (`fits`) or 5 (`sla-missed`: it runs, slower than the
/// workload's targets), showing its stderr when it did not.
pub(crate) fn assert_planned(o: &std::process::Output) {
    assert!(
        matches!(o.status.code(), Some(0 | 5)),
        "exit {:?}: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `optimizer resolve --format json -w WORKLOAD --hardware HARDWARE -m MODEL EXTRA...` on `inventory`'s host: the
/// document (which a no-fit exit still writes) and the exit code.
pub(crate) fn resolve_doc(
    inventory: &str,
    model: &Path,
    workload: &str,
    hardware: &str,
    extra: &[&str],
) -> (Deployment, i32) {
    resolve_doc_with(inventory, None, model, workload, hardware, extra)
}

/// [`resolve_doc`] with a profile overlay directory (`--profiles DIR`) when given.
pub(crate) fn resolve_doc_with(
    inventory: &str,
    profiles: Option<&Path>,
    model: &Path,
    workload: &str,
    hardware: &str,
    extra: &[&str],
) -> (Deployment, i32) {
    let mut cmd = bin_on(inventory);
    if let Some(p) = profiles {
        cmd.arg("--profiles").arg(p);
    }
    let out = cmd
        .args([
            "resolve",
            "--format",
            "json",
            "-w",
            workload,
            "--hardware",
            hardware,
            "-m",
        ])
        .arg(model)
        .args(extra)
        .output()
        .unwrap();
    let code = out.status.code().unwrap_or(-1);
    let doc: Deployment = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{workload} on {hardware}: {e}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (doc, code)
}

/// Runs `cmd` with its stdin closed and both pipes drained on threads (a large output cannot block it), killing it
/// and failing the test when it is still running after `deadline`: a regression that hangs fails here instead of
/// hanging the suite.
pub(crate) fn output_within(
    mut cmd: std::process::Command,
    deadline: std::time::Duration,
) -> std::process::Output {
    use std::io::Read;
    use std::process::Stdio;
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} still running after {deadline:?}: it hangs");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    std::process::Output {
        status,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    }
}
