//! vLLM's launch artifacts: the `vllm serve` command (argv and environment) and the Kubernetes resources and
//! manifest that run it. Every option is one the pinned release's argument parser accepts
//! (tests/fixtures/vllm/serve-flags-0.33.0.txt, extracted by benches/vllm/extract_serve_flags.py; the test
//! `vllm_launch` checks each emitted option against it).

use std::collections::BTreeMap;
use std::path::Path;

use crate::emit::{Artifact, Resources, VllmSettings};
use crate::fleet::DeviceId;
use crate::model::ModelSpec;

/// The address `vllm serve` listens on: every interface, since a served model is reached from other machines
/// (and, in a container, from outside the pod).
pub const HOST: &str = "0.0.0.0";
/// vLLM's default port (vllm/entrypoints/common/cli_args.py `FrontendArgs.port`).
pub const PORT: u16 = 8000;

/// The directory `vllm serve` opens: the checkpoint's directory (vLLM reads `config.json` and every
/// `*.safetensors` beside it), whether the plan was given the directory, the index or one file.
pub fn model_dir(model: &ModelSpec, model_path: &str) -> String {
    let p = Path::new(model_path);
    if p.is_dir() || model.files.is_empty() {
        return model_path.to_string();
    }
    match model.files[0].path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.display().to_string(),
        _ => ".".into(),
    }
}

/// `vllm serve` with the planned settings, on the planned GPUs.
pub fn vllm_serve(model_dir: &str, s: &VllmSettings, gpus: &[DeviceId]) -> Artifact {
    let mut a: Vec<String> = vec!["vllm".into(), "serve".into(), model_dir.into()];
    let mut flag = |k: &str, v: String| {
        a.push(k.into());
        a.push(v);
    };
    flag("--host", HOST.into());
    flag("--port", PORT.to_string());
    flag("--tensor-parallel-size", s.tensor_parallel_size.to_string());
    if s.replicas_per_node > 1 {
        flag("--data-parallel-size", s.replicas_per_node.to_string());
    }
    flag("--dtype", s.dtype.clone());
    if let Some(q) = &s.quantization {
        flag("--quantization", q.clone());
    }
    flag("--kv-cache-dtype", s.kv_cache_dtype.clone());
    flag("--block-size", s.block_size.to_string());
    flag("--max-model-len", s.max_model_len.to_string());
    flag("--max-num-seqs", s.max_num_seqs.to_string());
    flag(
        "--max-num-batched-tokens",
        s.max_num_batched_tokens.to_string(),
    );
    flag(
        "--gpu-memory-utilization",
        format!("{:.2}", s.gpu_memory_utilization),
    );
    flag(
        "--kv-cache-memory-bytes",
        s.kv_cache_memory_bytes.to_string(),
    );
    if s.enforce_eager {
        a.push("--enforce-eager".into());
    }
    let mut env = BTreeMap::new();
    env.insert("CUDA_DEVICE_ORDER".to_string(), "PCI_BUS_ID".to_string());
    env.insert(
        "CUDA_VISIBLE_DEVICES".to_string(),
        gpus.iter()
            .map(|g| g.ordinal.to_string())
            .collect::<Vec<_>>()
            .join(","),
    );
    Artifact {
        name: "vllm".into(),
        description: format!(
            "the pinned vLLM's OpenAI-compatible server with the planned settings on the planned GPUs, listening on {HOST}:{PORT}"
        ),
        argv: a,
        env,
        files: BTreeMap::new(),
        resources: None,
    }
}

/// The Kubernetes resources and a Deployment manifest running the same command: the GPUs as
/// `nvidia.com/gpu`, and a memory-backed `/dev/shm` (vLLM's tensor-parallel workers exchange tensors through
/// shared memory; a container's default 64 MiB is too small, vLLM docs "Using Docker": `--ipc=host` or
/// `--shm-size`).
pub fn kubernetes(serve: &Artifact, gpus: &[DeviceId], cpus: u32) -> Artifact {
    let mut requests = BTreeMap::new();
    requests.insert("nvidia.com/gpu".to_string(), gpus.len().to_string());
    requests.insert("cpu".to_string(), cpus.max(1).to_string());
    let quote = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
    let args: String = serve
        .argv
        .iter()
        .map(|x| format!("            - {}\n", quote(x)))
        .collect();
    // The container sees only its GPUs, numbered from 0: the device plugin assigns them.
    let manifest = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: vllm\nspec:\n  replicas: 1\n  selector:\n    matchLabels:\n      app: vllm\n  template:\n    metadata:\n      labels:\n        app: vllm\n    spec:\n      containers:\n        - name: vllm\n          image: vllm/vllm-openai:v{}\n          command:\n{args}          ports:\n            - containerPort: {PORT}\n          resources:\n            requests:\n              nvidia.com/gpu: \"{n}\"\n              cpu: \"{c}\"\n            limits:\n              nvidia.com/gpu: \"{n}\"\n              cpu: \"{c}\"\n          volumeMounts:\n            - name: dshm\n              mountPath: /dev/shm\n      volumes:\n        - name: dshm\n          emptyDir:\n            medium: Memory\n",
        crate::memory::vllm::VERSION,
        n = gpus.len(),
        c = cpus.max(1),
    );
    Artifact {
        name: "kubernetes".into(),
        description: "the vllm serve process as a Kubernetes Deployment: GPUs and CPUs requested (requests equal limits), /dev/shm memory-backed; the model directory must be mounted at the same path".into(),
        argv: Vec::new(),
        env: BTreeMap::new(),
        files: BTreeMap::from([("vllm-deployment.yaml".to_string(), manifest)]),
        resources: Some(Resources {
            requests: requests.clone(),
            limits: requests,
        }),
    }
}

/// Every artifact of a vLLM plan.
pub fn artifacts(model_dir: &str, s: &VllmSettings, gpus: &[DeviceId], cpus: u32) -> Vec<Artifact> {
    let serve = vllm_serve(model_dir, s, gpus);
    let k8s = kubernetes(&serve, gpus, cpus);
    vec![serve, k8s]
}
