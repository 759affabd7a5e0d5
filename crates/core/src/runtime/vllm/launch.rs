//! vLLM's launch artifacts: the `vllm serve` command (argv, environment and a shell line) and the Kubernetes
//! Deployment and Service that run it (built by [`crate::runtime::kubernetes`]). Every option is one the pinned release's argument parser accepts
//! (tests/fixtures/vllm/serve-flags-0.33.0.txt, extracted by benches/vllm/extract_serve_flags.py; the test
//! `vllm_launch` checks each emitted option against it).

use std::collections::BTreeMap;
use std::path::Path;

use crate::emit::{Artifact, RayBackend, Resources, VllmSettings, shell_command, shell_quote};
use crate::fleet::{DeviceId, DeviceKind};
use crate::runtime::kubernetes::{self, Server};
use optimizer_model::ModelSpec;

/// The address `vllm serve` listens on: every interface, since a served model is reached from other machines
/// (and, in a container, from outside the pod).
pub(crate) const HOST: &str = "0.0.0.0";
/// vLLM's default port (vllm/entrypoints/common/cli_args.py `FrontendArgs.port`).
pub(crate) const PORT: u16 = 8000;

/// The directory `vllm serve` opens: the checkpoint's directory (vLLM reads `config.json` and every
/// `*.safetensors` beside it), whether the plan was given the directory, the index or one file.
pub(crate) fn model_dir(model: &ModelSpec, model_path: &str) -> String {
    let p = Path::new(model_path);
    if p.is_dir() || model.files.is_empty() {
        return model_path.to_string();
    }
    match model.files[0].path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.display().to_string(),
        _ => ".".into(),
    }
}

/// The environment variable with which vLLM accepts a `--max-model-len` past the length it derives from
/// `config.json` (vllm/envs.py; vllm/config/model.py `_get_and_verify_max_len` raises otherwise).
pub(crate) const ALLOW_LONG_MAX_MODEL_LEN: &str = "VLLM_ALLOW_LONG_MAX_MODEL_LEN";

/// RoPE types whose `max_position_embeddings` vLLM takes as already scaled (`_get_and_verify_max_len`: "YaRN
/// variants leave max_position_embeddings already scaled"); any other declared type multiplies it by `factor`.
const ROPE_ALREADY_SCALED: [&str; 6] = [
    "su",
    "longrope",
    "llama3",
    "yarn",
    "deepseek_yarn",
    "deepseek_llama_scaling",
];

/// The longest `--max-model-len` the pinned vLLM accepts without [`ALLOW_LONG_MAX_MODEL_LEN`]: its derived max
/// length (vllm/config/model.py `_get_and_verify_max_len`, 0.33.0): the position key of `config.json`
/// (`max_position_embeddings` and its aliases), times the declared RoPE `factor` unless the type is one of
/// [`ROPE_ALREADY_SCALED`] or the model is a Gemma 3 (already scaled). vLLM also caps it by the tokenizer's
/// `model_max_length`, which the plan does not read. `None` when the config names no length.
pub(crate) fn derived_max_model_len(model: &ModelSpec) -> Option<u64> {
    let h = &model.hparams;
    let base = h.context_length.filter(|&c| c > 0)?;
    let factor = h
        .rope
        .as_ref()
        .filter(|_| !model.architecture.contains("gemma3"))
        .filter(|r| {
            r.scaling_type
                .as_deref()
                .is_some_and(|t| !ROPE_ALREADY_SCALED.contains(&t))
        })
        .and_then(|r| r.scaling_factor)
        .filter(|f| f.is_finite() && *f > 0.0)
        .unwrap_or(1.0);
    Some((base as f64 * factor) as u64)
}

/// `vllm serve` with the planned settings, on the planned GPUs; `allow_long` adds
/// [`ALLOW_LONG_MAX_MODEL_LEN`]`=1` (a `--max-model-len` past [`derived_max_model_len`], `--allow-long-context`).
fn vllm_serve(model_dir: &str, s: &VllmSettings, gpus: &[DeviceId], allow_long: bool) -> Artifact {
    let mut a: Vec<String> = vec!["vllm".into(), "serve".into(), model_dir.into()];
    let mut flag = |k: &str, v: String| {
        a.push(k.into());
        a.push(v);
    };
    flag("--host", HOST.into());
    flag("--port", PORT.to_string());
    flag("--tensor-parallel-size", s.tensor_parallel_size.to_string());
    if let Some(pp) = s.pipeline_parallel_size {
        flag("--pipeline-parallel-size", pp.to_string());
    }
    if let Some(dp) = s.data_parallel_size {
        flag("--data-parallel-size", dp.to_string());
    } else if s.replicas_per_node > 1 {
        flag("--data-parallel-size", s.replicas_per_node.to_string());
    }
    if s.enable_expert_parallel == Some(true) {
        a.push("--enable-expert-parallel".into());
    }
    let mut flag = |k: &str, v: String| {
        a.push(k.into());
        a.push(v);
    };
    match s.ray_backend {
        Some(RayBackend::DistributedExecutor) => {
            flag("--distributed-executor-backend", "ray".into())
        }
        Some(RayBackend::DataParallel) => flag("--data-parallel-backend", "ray".into()),
        None => {}
    }
    let mut flag = |k: &str, v: String| {
        a.push(k.into());
        a.push(v);
    };
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
    if allow_long {
        env.insert(ALLOW_LONG_MAX_MODEL_LEN.to_string(), "1".to_string());
    }
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
pub(crate) fn default_image() -> String {
    format!("vllm/vllm-openai:v{}", optimizer_memory::vllm::VERSION)
}

/// vLLM's health endpoint (vllm/entrypoints/openai/api_server.py `GET /health`: 200 once the engine runs).
pub(crate) const HEALTH_PATH: &str = "/health";

/// The `vllm serve` process as a Kubernetes Deployment and Service (`vllm.yaml`): the GPUs as `nvidia.com/gpu`,
/// a `nodeSelector` on the GPU product when all planned GPUs are one product, the checkpoint from the model
/// volume ([`kubernetes::model_in_container`]), probes on `/health`, and a memory-backed `/dev/shm` (vLLM's
/// tensor-parallel workers exchange tensors through shared memory; a container's default 64 MiB is too small,
/// vLLM docs "Using Docker": `--ipc=host` or `--shm-size`). The plan models no host memory for vLLM, so the
/// manifest requests none.
pub(crate) fn kubernetes(
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

/// Every artifact of a vLLM plan of `model` (the model decides whether `--max-model-len` needs
/// [`ALLOW_LONG_MAX_MODEL_LEN`]).
#[allow(
    clippy::too_many_arguments,
    reason = "each is one independent input of the launch; a struct would only rename them"
)]
pub(crate) fn artifacts(
    model: &ModelSpec,
    model_dir: &str,
    s: &VllmSettings,
    gpus: &[DeviceId],
    gpu_names: &[&str],
    cpus: u32,
    image: Option<&str>,
    pooling: Option<PoolingRunner>,
) -> Vec<Artifact> {
    let allow_long = derived_max_model_len(model).is_some_and(|d| u64::from(s.max_model_len) > d);
    let serve = with_pooling(vllm_serve(model_dir, s, gpus, allow_long), pooling);
    if let Some(nnodes) = s.nnodes.filter(|&n| n > 1) {
        let group = NodeGroup {
            serve: &serve,
            nnodes,
            dp_local: s.data_parallel_size_local,
            gpus,
            gpu_names,
            cpus,
            image,
        };
        return if s.ray_backend.is_some() {
            ray_artifacts(&group)
        } else {
            multinode_artifacts(&group)
        };
    }
    let k8s = kubernetes(&serve, gpus, gpu_names, cpus, image);
    vec![serve, k8s]
}

/// One replica spanning `nnodes` nodes: its `vllm serve` artifact (flags common to every node), the
/// data-parallel engines per node of an expert-parallel group ([`super::expert::dp_node_args`]) and each node's
/// GPUs, CPUs and image.
struct NodeGroup<'a> {
    serve: &'a Artifact,
    nnodes: u32,
    dp_local: Option<u32>,
    gpus: &'a [DeviceId],
    gpu_names: &'a [&'a str],
    cpus: u32,
    image: Option<&'a str>,
}

/// A server spanning `nnodes` nodes: one `vllm serve` command per node rank (rank 0 serves the API, the others
/// run `--headless`; [`multinode::node_args`]), each on the node's planned GPUs, and a LeaderWorkerSet that
/// runs the group on Kubernetes ([`crate::emit::lws`]).
fn multinode_artifacts(g: &NodeGroup) -> Vec<Artifact> {
    use super::multinode::{self, LEADER_ADDRESS};
    let (serve, nnodes, dp_local) = (g.serve, g.nnodes, g.dp_local);
    let mut out = Vec::new();
    for rank in 0..nnodes {
        let mut argv = serve.argv.clone();
        argv.extend(multinode::node_args(
            nnodes,
            &rank.to_string(),
            LEADER_ADDRESS,
            rank > 0,
        ));
        if let Some(local) = dp_local {
            argv.extend(super::expert::dp_node_args(local, LEADER_ADDRESS));
        }
        let name = if rank == 0 {
            "vllm".to_string()
        } else {
            format!("vllm-node-{rank}")
        };
        out.push(node_artifact(
            serve,
            name,
            format!(
                "node rank {rank} of {nnodes}: {}; replace {LEADER_ADDRESS} with node 0's address, which every node reaches (vLLM's torch.distributed rendezvous on port {})",
                if rank == 0 {
                    format!("the API server on {HOST}:{PORT} and this node's workers")
                } else {
                    "this node's workers only (--headless, no API server)".to_string()
                },
                multinode::MASTER_PORT
            ),
            argv,
        ));
    }
    let in_pod = |headless: bool, rank: &str| {
        let mut a = pod_argv(serve);
        a.extend(multinode::node_args(
            nnodes,
            rank,
            "$(LWS_LEADER_ADDRESS)",
            headless,
        ));
        if let Some(local) = dp_local {
            a.extend(super::expert::dp_node_args(local, "$(LWS_LEADER_ADDRESS)"));
        }
        a
    };
    out.push(leaderworkerset(
        g,
        in_pod(false, "0"),
        in_pod(true, "$(LWS_WORKER_INDEX)"),
        "the leader serving the API and the workers headless",
    ));
    out
}

/// Ray's port on the head node (`ray start --head --port`, Ray's default GCS port), which the workers join.
const RAY_PORT: u16 = 6379;

/// The same replica on a Ray cluster (`--distributed-executor-backend ray`, or `--data-parallel-backend ray`
/// for expert parallel): `ray start --head` on node 0, `ray start --address=HEAD:6379 --block` on every other
/// node (each with its planned GPUs visible, which Ray counts), then one `vllm serve` on node 0, with no
/// `--nnodes`, `--node-rank` or `--master-addr` (vLLM 0.33 refuses `--nnodes` with Ray, vllm/config/parallel.py
/// and vllm/engine/arg_utils.py) and, for expert parallel, no `--data-parallel-address` (the head's, by
/// default). vLLM waits up to 30 minutes for the placement group its workers need
/// (vllm/v1/executor/ray_utils.py `PG_WAIT_TIMEOUT`), so workers may join after it starts.
fn ray_artifacts(g: &NodeGroup) -> Vec<Artifact> {
    use super::multinode::LEADER_ADDRESS;
    let (serve, nnodes) = (g.serve, g.nnodes);
    let local = |mut a: Vec<String>| {
        if let Some(l) = g.dp_local {
            a.extend(["--data-parallel-size-local".to_string(), l.to_string()]);
        }
        a
    };
    let head = vec![
        "ray".to_string(),
        "start".into(),
        "--head".into(),
        "--port".into(),
        RAY_PORT.to_string(),
    ];
    let join = |address: &str| {
        vec![
            "ray".to_string(),
            "start".into(),
            "--address".into(),
            format!("{address}:{RAY_PORT}"),
            "--block".into(),
        ]
    };
    let mut out = vec![node_artifact(
        serve,
        "ray-head".into(),
        format!(
            "node 0, first: the Ray head (port {RAY_PORT}) with this node's planned GPUs; the other nodes join it"
        ),
        head.clone(),
    )];
    for rank in 1..nnodes {
        out.push(node_artifact(
            serve,
            format!("ray-worker-node-{rank}"),
            format!(
                "node {rank} of {nnodes}: joins the Ray cluster with this node's planned GPUs and stays in the foreground; replace {LEADER_ADDRESS} with node 0's address"
            ),
            join(LEADER_ADDRESS),
        ));
    }
    let argv = local(serve.argv.clone());
    out.push(node_artifact(
        serve,
        "vllm".into(),
        format!(
            "node 0, once the head runs: the API server on {HOST}:{PORT}; Ray places the workers on every node's GPUs (vLLM waits up to 30 minutes for them)"
        ),
        argv,
    ));
    let sh = |line: String| vec!["sh".to_string(), "-c".into(), line];
    let words = |a: &[String]| {
        a.iter()
            .map(|w| shell_quote(w))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let leader = sh(format!(
        "{} && exec {}",
        words(&head),
        words(&local(pod_argv(serve)))
    ));
    // Kubernetes expands $(LWS_LEADER_ADDRESS) in the argument before the shell sees it.
    let worker = sh(format!(
        "until {}; do sleep 5; done",
        words(&join("$(LWS_LEADER_ADDRESS)"))
    ));
    out.push(leaderworkerset(
        g,
        leader,
        worker,
        "the leader starting the Ray head and serving the API, the workers joining it until the group is recreated",
    ));
    out
}

/// One node's command of a group: `argv` with the serve artifact's environment (its planned GPUs).
fn node_artifact(
    serve: &Artifact,
    name: String,
    description: String,
    argv: Vec<String>,
) -> Artifact {
    Artifact {
        name,
        description,
        command: Some(shell_command(&serve.env, &argv)),
        argv,
        env: serve.env.clone(),
        files: BTreeMap::new(),
        resources: None,
    }
}

/// The serve argv inside a pod: the model path as the container mounts it.
fn pod_argv(serve: &Artifact) -> Vec<String> {
    let mut a = serve.argv.clone();
    if let Some(m) = a.get_mut(2) {
        *m = kubernetes::model_in_container(m);
    }
    a
}

/// The group as a Kubernetes LeaderWorkerSet ([`crate::emit::lws`]) and a Service on the leader's port.
fn leaderworkerset(
    g: &NodeGroup,
    leader_command: Vec<String>,
    worker_command: Vec<String>,
    roles: &str,
) -> Artifact {
    let (nnodes, gpus, cpus) = (g.nnodes, g.gpus, g.cpus);
    let image = g.image.map_or_else(default_image, str::to_string);
    let gpu_resource = kubernetes::gpu_resource(DeviceKind::Cuda)
        .expect("CUDA GPUs have a Kubernetes resource name");
    let lws = crate::emit::lws::LeaderWorkerSet {
        name: "vllm",
        image: &image,
        size: nnodes,
        replicas: 1,
        leader_command,
        worker_command,
        env: kubernetes::container_env(&g.serve.env),
        gpu_resource,
        gpus_per_pod: u32::try_from(gpus.len()).unwrap_or(u32::MAX),
        cpus,
        gpu_product: kubernetes::common_gpu_product_label(g.gpu_names),
        port: PORT,
        health_path: HEALTH_PATH,
        model_claim: kubernetes::MODEL_CLAIM,
        model_mount: kubernetes::MODEL_MOUNT,
        probe_period_s: kubernetes::PROBE_PERIOD_S,
        startup_failures: kubernetes::STARTUP_FAILURES,
        liveness_failures: kubernetes::LIVENESS_FAILURES,
    };
    let requests = BTreeMap::from([
        ("cpu".to_string(), cpus.to_string()),
        (gpu_resource.to_string(), gpus.len().to_string()),
    ]);
    let limits = BTreeMap::from([(gpu_resource.to_string(), gpus.len().to_string())]);
    Artifact {
        name: "leaderworkerset".into(),
        description: format!(
            "the {nnodes}-node vllm serve group as a Kubernetes LeaderWorkerSet ({}; install LWS first) and a Service on the leader's port {PORT}: {nnodes} pods, each on its own node with its GPUs and CPUs requested (resources are per pod), {roles}, the group recreated whole when a pod restarts, /dev/shm memory-backed; the checkpoint is read from PersistentVolumeClaim {} mounted at {} on every node",
            crate::emit::lws::API_VERSION,
            kubernetes::MODEL_CLAIM,
            kubernetes::MODEL_MOUNT
        ),
        argv: Vec::new(),
        command: None,
        env: BTreeMap::new(),
        files: BTreeMap::from([("vllm-lws.yaml".to_string(), lws.manifest())]),
        resources: Some(Resources { requests, limits }),
    }
}

/// What an embedding plan asks of `vllm serve`: the pooling runner (`--runner pooling`; without it vLLM 0.33
/// resolves `--runner auto` by the architecture, and a `*ForCausalLM` checkpoint then generates text,
/// vllm/config/model.py `_get_default_runner_type`) and, when the checkpoint's sentence-transformers
/// configuration declares one, its sequence pooling, passed as `--pooler-config` so the plan says what vLLM
/// would otherwise read from `modules.json` itself (`get_pooling_config`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PoolingRunner {
    /// vLLM's `seq_pooling_type` (`MEAN`, `CLS`, `LAST`); `None`: the architecture's default.
    pub seq_pooling_type: Option<&'static str>,
}

/// The options of [`PoolingRunner`]: `--runner pooling [--pooler-config {"seq_pooling_type": "T"}]`.
fn pooling_args(p: &PoolingRunner) -> Vec<String> {
    let mut a = vec!["--runner".to_string(), "pooling".to_string()];
    if let Some(t) = p.seq_pooling_type {
        a.push("--pooler-config".into());
        a.push(format!("{{\"seq_pooling_type\": \"{t}\"}}"));
    }
    a
}

/// `serve` with the pooling options appended (and its shell line rebuilt), or unchanged for a generating plan.
fn with_pooling(mut serve: Artifact, pooling: Option<PoolingRunner>) -> Artifact {
    if let Some(p) = pooling {
        serve.argv.extend(pooling_args(&p));
        serve.command = Some(shell_command(&serve.env, &serve.argv));
    }
    serve
}
