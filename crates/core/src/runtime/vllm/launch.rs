//! vLLM's launch artifacts: the `vllm serve` command (argv, environment and a shell line) and the Kubernetes
//! Deployment and Service that run it (built by [`crate::runtime::kubernetes`]). Every option is one the pinned release's argument parser accepts
//! (tests/fixtures/vllm/serve-flags-0.33.0.txt, extracted by benches/vllm/extract_serve_flags.py; the test
//! `vllm_launch` checks each emitted option against it).

use std::collections::BTreeMap;
use std::path::Path;

use crate::emit::{Artifact, Resources, VllmSettings, shell_command};
use crate::fleet::{DeviceId, DeviceKind};
use crate::runtime::kubernetes::{self, Server};
use optimizer_model::ModelSpec;

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
        command: Some(shell_command(&env, &a)),
        argv: a,
        env,
        files: BTreeMap::new(),
        resources: None,
    }
}

/// The official image of the pinned vLLM release (Docker Hub `vllm/vllm-openai`, tagged `v<version>`; vLLM docs
/// "Using Docker": `docker run --runtime nvidia --gpus all ... vllm/vllm-openai:<tag>`).
pub fn default_image() -> String {
    format!("vllm/vllm-openai:v{}", optimizer_memory::vllm::VERSION)
}

/// vLLM's health endpoint (vllm/entrypoints/openai/api_server.py `GET /health`: 200 once the engine runs).
pub const HEALTH_PATH: &str = "/health";

/// The `vllm serve` process as a Kubernetes Deployment and Service (`vllm.yaml`): the GPUs as `nvidia.com/gpu`,
/// a `nodeSelector` on the GPU product when all planned GPUs are one product, the checkpoint from the model
/// volume ([`kubernetes::model_in_container`]), probes on `/health`, and a memory-backed `/dev/shm` (vLLM's
/// tensor-parallel workers exchange tensors through shared memory; a container's default 64 MiB is too small,
/// vLLM docs "Using Docker": `--ipc=host` or `--shm-size`). The plan models no host memory for vLLM, so the
/// manifest requests none.
pub fn kubernetes(
    serve: &Artifact,
    gpus: &[DeviceId],
    gpu_names: &[&str],
    cpus: u32,
    image: Option<&str>,
) -> Artifact {
    let mut argv = serve.argv.clone();
    if let Some(m) = argv.get_mut(2) {
        *m = kubernetes::model_in_container(m);
    }
    let product = kubernetes::common_gpu_product_label(gpu_names);
    let image = image.map_or_else(default_image, str::to_string);
    let server = Server {
        name: "vllm",
        image: &image,
        // The full command, so the manifest does not depend on the image's entrypoint.
        command: Some(argv),
        args: Vec::new(),
        env: kubernetes::container_env(&serve.env),
        secret_env: None,
        port: PORT,
        health_path: HEALTH_PATH,
        memory_bytes: None,
        cpus,
        gpu_kind: Some(DeviceKind::Cuda),
        gpus: u32::try_from(gpus.len()).unwrap_or(u32::MAX),
        gpu_product: product,
        shm: true,
        // Replicas on one node are one process (--data-parallel-size) holding all of the node's GPUs.
        replicas: 1,
    };
    let (requests, limits) = server.resources();
    Artifact {
        name: "kubernetes".into(),
        description: format!(
            "the vllm serve process as a Kubernetes Deployment and Service on port {PORT}: GPUs and CPUs requested (limits only the GPUs), no host memory requested (the plan does not model vLLM's host memory: add a request from a measured run), /dev/shm memory-backed; the checkpoint is read from PersistentVolumeClaim {} (a placeholder: copy the model directory to its root) mounted at {}",
            kubernetes::MODEL_CLAIM,
            kubernetes::MODEL_MOUNT
        ),
        argv: Vec::new(),
        command: None,
        env: BTreeMap::new(),
        files: BTreeMap::from([("vllm.yaml".to_string(), server.manifest())]),
        resources: Some(Resources { requests, limits }),
    }
}

/// Every artifact of a vLLM plan.
pub fn artifacts(
    model_dir: &str,
    s: &VllmSettings,
    gpus: &[DeviceId],
    gpu_names: &[&str],
    cpus: u32,
    image: Option<&str>,
) -> Vec<Artifact> {
    let serve = vllm_serve(model_dir, s, gpus);
    let k8s = kubernetes(&serve, gpus, gpu_names, cpus, image);
    vec![serve, k8s]
}
