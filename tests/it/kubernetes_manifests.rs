//! Every Kubernetes manifest the planner emits (llama.cpp over the fixture machines, models and workload
//! presets; vLLM on the machines) is one Kubernetes accepts and one that runs the planned server:
//!
//! - schema: each manifest was validated offline by the pinned `kubernetes-validate` against the Kubernetes
//!   OpenAPI schema (benches/kubernetes/validate.py); its results, keyed by the manifest's SHA-256, are
//!   committed in tests/fixtures/kubernetes/validated.json. A manifest whose bytes are not in that file has
//!   not been validated and fails here: re-run the script (CI has no Python).
//! - structure, checked here: the kinds and apiVersions, the Service and Deployment selectors matching the
//!   pod's labels, probes and Service on the server's port, the container args being the planned argv with
//!   the model under the volume mount, no host device pinning inside the container, and requests equal to
//!   what the plan needs (host bytes of the plan's host device, CPU threads, GPUs).
//!
//! `OPTIMIZER_DUMP_MANIFESTS=DIR cargo test --test it kubernetes_manifests::` writes every manifest to DIR for
//! the validator.

use crate::common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::{fixture, profiles, vllm_models};
use optimizer::emit::{Deployment, Status};
use optimizer::hardware;
use optimizer::model;
use optimizer::plan::Overrides;
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The llama.cpp models: a dense model, a mixture of experts and one with another architecture.
const GGUFS: [&str; 3] = [
    "gguf/llama-q4_k_m.gguf",
    "gguf/mixtral-moe-q4_k.gguf",
    "gguf/gemma2-q5_k.gguf",
];
/// The workload presets that serve (the training presets plan with torch, which emits no manifest).
const WORKLOADS: [&str; 4] = ["inference", "chat", "batch-inference", "embedding"];
/// vLLM plans: checkpoint, workload, `--hardware`, extra flags.
const VLLM: [(&str, &str, &str, &[&str]); 3] = [
    ("Qwen2.5-7B", "chat", "a100-80gb-sxm", &[]),
    (
        "Qwen2.5-7B",
        "chat",
        "2x:rtx-4090",
        &["--tensor-parallel", "2"],
    ),
    ("Llama-3.1-70B-Instruct", "chat", "8x:h100-sxm", &[]),
];

/// One planned document with a manifest, named for the fixture file.
struct Case {
    name: String,
    doc: Deployment,
}

fn cases() -> Vec<Case> {
    let set = profiles();
    let mut out = Vec::new();
    let mut invs: Vec<PathBuf> = std::fs::read_dir(fixture("inventories"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    invs.sort();
    for inv_path in &invs {
        let inv = hardware::load_inventory(inv_path).unwrap();
        for g in GGUFS {
            let path = fixture(g);
            let spec = model::load(&path).unwrap();
            for w in WORKLOADS {
                let label = path.display().to_string();
                let Ok(doc) = common::plan(&spec, &label, &inv, &set, w, &Overrides::default())
                else {
                    continue;
                };
                if doc.status != Status::Fits {
                    continue;
                }
                let stem = |p: &str| {
                    std::path::Path::new(p)
                        .file_stem()
                        .unwrap()
                        .to_string_lossy()
                        .into_owned()
                };
                out.push(Case {
                    name: format!(
                        "llama-cpp_{}_{}_{w}",
                        stem(&inv_path.display().to_string()),
                        stem(g)
                    ),
                    doc,
                });
            }
        }
    }
    for (m, w, hw, extra) in VLLM {
        // The checkpoint directory keeps its name (the manifest mounts it by name), in a temporary parent.
        let (_parent, dir) = vllm_models::materialize_named(m);
        let (doc, code) = common::resolve_doc("cpu-server.yaml", &dir, w, hw, extra);
        assert_eq!(code, 0, "{m} {w} {hw}: {:?}", doc.warnings);
        out.push(Case {
            name: format!("vllm_{m}_{}_{w}", hw.replace(':', "")),
            doc,
        });
    }
    out
}

/// The manifest file of a case's `kubernetes` artifact (name, text), if it has one.
fn manifest(d: &Deployment) -> Option<(String, String)> {
    let k = d.artifact("kubernetes")?;
    k.files
        .iter()
        .find(|(n, _)| n.ends_with(".yaml"))
        .map(|(n, t)| (n.clone(), t.clone()))
}

fn sha256(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[derive(Deserialize)]
struct Validated {
    validator: String,
    kubernetes_version: String,
    strict: bool,
    /// Results by manifest SHA-256.
    results: BTreeMap<String, Outcome>,
}

#[derive(Deserialize)]
struct Outcome {
    valid: bool,
    #[serde(default)]
    errors: Vec<String>,
}

/// Problems with one manifest's structure, given the document it was planned in.
fn check_structure(d: &Deployment, text: &str) -> Vec<String> {
    let mut p = Vec::new();
    let docs: Vec<Value> = text
        .split("\n---\n")
        .map(|t| optimizer::yaml::from_str::<Value>(t).unwrap())
        .collect();
    let find = |kind: &str| docs.iter().find(|x| x["kind"] == kind);
    let (Some(dep), Some(svc)) = (find("Deployment"), find("Service")) else {
        return vec![format!("not one Deployment and one Service: {docs:?}")];
    };
    if docs.len() != 2 {
        p.push(format!("{} documents", docs.len()));
    }
    if dep["apiVersion"] != "apps/v1" || svc["apiVersion"] != "v1" {
        p.push("apiVersions are not apps/v1 and v1".into());
    }
    let labels = &dep["spec"]["template"]["metadata"]["labels"];
    let matches = |sel: &Value| {
        sel.as_object()
            .is_some_and(|s| !s.is_empty() && s.iter().all(|(k, v)| &labels[k] == v))
    };
    if !matches(&dep["spec"]["selector"]["matchLabels"]) {
        p.push("the Deployment's selector does not match its pod labels".into());
    }
    if !matches(&svc["spec"]["selector"]) {
        p.push("the Service's selector does not match the pod labels".into());
    }
    let pod = &dep["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let server = d
        .launch
        .iter()
        .find(|a| a.name == "llama-server" || a.name == "vllm")
        .unwrap();
    // The planned argv, with the model path moved under the mount.
    let argv: Vec<&str> = if c["command"].is_array() {
        c["command"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect()
    } else {
        std::iter::once(server.argv[0].as_str())
            .chain(
                c["args"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap()),
            )
            .collect()
    };
    if argv.len() != server.argv.len() {
        p.push(format!(
            "container argv {argv:?} is not the planned {:?}",
            server.argv
        ));
    } else {
        for (a, b) in argv.iter().zip(&server.argv) {
            let moved = a.starts_with("/models/")
                && std::path::Path::new(b).file_name() == std::path::Path::new(a).file_name();
            if a != b && !moved {
                p.push(format!("container argument {a:?} is not the planned {b:?}"));
            }
        }
    }
    let mount = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "models");
    let model_arg = argv.iter().find(|a| a.starts_with("/models/"));
    if mount.is_none_or(|m| m["mountPath"] != "/models") || model_arg.is_none() {
        p.push("the model is not read from the volume mounted at /models".into());
    }
    if !pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|v| v["name"] == "models" && v["persistentVolumeClaim"]["claimName"].is_string())
    {
        p.push("no model PersistentVolumeClaim".into());
    }
    // Port: the argv's, the container's, the probes' and the Service's target.
    let port: u64 = argv
        .iter()
        .position(|a| *a == "--port")
        .and_then(|i| argv[i + 1].parse().ok())
        .unwrap_or(0);
    let container_port = &c["ports"][0];
    if container_port["containerPort"] != port || port == 0 {
        p.push(format!("containerPort is not the server's --port {port}"));
    }
    for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
        let h = &c[probe]["httpGet"];
        if h["port"] != port || h["path"] != "/health" {
            p.push(format!("{probe} is not GET /health on port {port}: {h}"));
        }
    }
    let target = &svc["spec"]["ports"][0]["targetPort"];
    if target != &container_port["name"] && target != &container_port["containerPort"] {
        p.push("the Service does not target the server's port".into());
    }
    // No host device pinning inside the container.
    for e in c["env"].as_array().into_iter().flatten() {
        if ["CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"].contains(&e["name"].as_str().unwrap()) {
            p.push(format!("the container pins host devices: {e}"));
        }
    }
    // Requests: the plan's host bytes (llama.cpp), its threads, its GPUs.
    let req = &c["resources"]["requests"];
    let gpus = match d.settings.vllm() {
        Some(v) => (v.tensor_parallel_size * v.replicas_per_node) as usize,
        None => d
            .memory
            .devices
            .iter()
            .filter(|m| m.device != "cpu")
            .count(),
    };
    let gpu_req = req["nvidia.com/gpu"]
        .as_str()
        .or(req["amd.com/gpu"].as_str())
        .map_or(0, |n| n.parse::<usize>().unwrap());
    if gpu_req != gpus {
        p.push(format!("requests {gpu_req} GPUs, the plan uses {gpus}"));
    }
    if let Some(s) = d.settings.llama_cpp() {
        if req["cpu"].as_str() != Some(s.threads.to_string().as_str()) {
            p.push(format!(
                "requests {} CPUs, the plan runs {} threads",
                req["cpu"], s.threads
            ));
        }
        let host = d.memory.devices.iter().find(|m| m.device == "cpu").unwrap();
        if req["memory"] != format!("{}Mi", host.total_bytes.div_ceil(1 << 20)) {
            p.push(format!(
                "requests memory {}, the plan's host needs {} bytes",
                req["memory"], host.total_bytes
            ));
        }
    }
    if gpus > 0
        && pod["nodeSelector"]["nvidia.com/gpu.product"].is_null()
        && req["nvidia.com/gpu"].is_string()
    {
        p.push("no nodeSelector on the GPU product".into());
    }
    // An AMD pod must not select on an NVIDIA label: no node would carry it (see runtime::kubernetes).
    if req["amd.com/gpu"].is_string() && !pod["nodeSelector"].is_null() {
        p.push(format!(
            "an AMD pod selects nodes by {}",
            pod["nodeSelector"]
        ));
    }
    p
}

#[test]
fn every_manifest_is_validated_and_runs_the_planned_server() {
    let recorded: Validated = serde_json::from_str(
        &std::fs::read_to_string(fixture("kubernetes/validated.json")).unwrap(),
    )
    .unwrap();
    assert!(recorded.validator.starts_with("kubernetes-validate "));
    assert!(
        recorded.strict,
        "validated without rejecting unknown fields"
    );
    assert!(!recorded.kubernetes_version.is_empty());
    let dump = std::env::var_os("OPTIMIZER_DUMP_MANIFESTS").map(PathBuf::from);
    let mut problems = Vec::new();
    let (mut llama, mut vllm) = (0, 0);
    for case in cases() {
        let Some((_, text)) = manifest(&case.doc) else {
            continue;
        };
        if case.name.starts_with("vllm") {
            vllm += 1;
        } else {
            llama += 1;
        }
        if let Some(dir) = &dump {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(dir.join(format!("{}.yaml", case.name)), &text).unwrap();
        }
        for s in check_structure(&case.doc, &text) {
            problems.push(format!("{}: {s}", case.name));
        }
        match recorded.results.get(&sha256(&text)) {
            Some(o) if o.valid => {}
            Some(o) => problems.push(format!(
                "{}: kubernetes-validate refused it: {:?}",
                case.name, o.errors
            )),
            None if dump.is_none() => problems.push(format!(
                "{}: not validated (re-run benches/kubernetes/validate.py)",
                case.name
            )),
            None => {}
        }
    }
    assert!(
        llama >= 20 && vllm == VLLM.len(),
        "{llama} llama.cpp and {vllm} vLLM manifests"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_structure_check_catches_a_broken_manifest() {
    let case = cases()
        .into_iter()
        .find(|c| c.name.contains("workstation-2x3090"))
        .unwrap();
    let (_, text) = manifest(&case.doc).unwrap();
    assert_eq!(check_structure(&case.doc, &text), Vec::<String>::new());
    // The requests come after the limits (keys are sorted): the last GPU count is the request.
    let at = text.rfind("nvidia.com/gpu: '").unwrap() + "nvidia.com/gpu: '".len();
    let mut more_gpus = text.clone();
    more_gpus.insert(at, '1');
    assert!(
        check_structure(&case.doc, &more_gpus)
            .iter()
            .any(|x| x.contains("GPUs"))
    );
    for (from, to, why) in [
        ("port: 8080\n", "port: 8081\n", "port"),
        (
            "matchLabels:\n      app: llama-server",
            "matchLabels:\n      app: other",
            "selector",
        ),
        ("mountPath: /models", "mountPath: /data", "/models"),
        ("- -t\n", "- --threads\n", "argument"),
    ] {
        assert!(text.contains(from), "{from:?} not in\n{text}");
        let broken = text.replacen(from, to, 1);
        let p = check_structure(&case.doc, &broken);
        assert!(
            p.iter().any(|x| x.contains(why)),
            "{from:?} -> {to:?}: {p:?}"
        );
    }
}
