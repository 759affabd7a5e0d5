//! llama.cpp's launch artifacts: the llama-server command (checked against the pinned server's argument
//! parser, tests/fixtures/llama-cpp/llama-server-args.json), an Ollama Modelfile with its server environment,
//! and a Kubernetes Deployment and Service running the same server (built by [`crate::runtime::kubernetes`]).
//!
//! Trade-off: the Modelfile carries only `num_ctx`, the one planned value among the PARAMETERs the current
//! Modelfile reference documents (ollama/ollama docs/modelfile.md, "Valid Parameters and Values": mirostat*,
//! num_ctx, repeat_*, temperature, seed, stop, tfs_z, num_predict, top_k, top_p, min_p); num_gpu, num_thread
//! and num_batch are no longer documented there, so Ollama places layers and picks threads itself, and the
//! server environment carries what decides its memory (parallel slots, KV cache type, flash attention, context).
//!
//! Trade-off: a model path with a control character is refused ([`check_model_path`]) rather than quoted: the
//! Modelfile is read line by line (`FROM <path>`), and Ollama's parser has no escape for a line break inside a
//! path, so a newline in the name would start an instruction of the file name's choosing (a `SYSTEM` prompt,
//! another `FROM`). The shell line and argv need no refusal (every word is single-quoted, [`shell_quote`]),
//! but one plan emits them all.

use std::collections::BTreeMap;

#[cfg(doc)]
use crate::emit::shell_quote;
use crate::emit::{Artifact, LlamaCppSettings, Resources, shell_command};
use crate::fleet::{DeviceId, DeviceKind};
use crate::profile::WorkloadProfile;
use crate::runtime::kubernetes::{self, SecretEnv, Server};
use crate::runtime::{PlanError, Size};
use optimizer_memory::llama_cpp;
use optimizer_model::ModelSpec;

use super::{CTX_STEP, MAX_CONTEXT_PER_SEQUENCE};

/// The address llama-server listens on: every interface (its default, 127.0.0.1, is unreachable from outside
/// a pod or from another machine).
pub(crate) const HOST: &str = "0.0.0.0";
/// llama-server's default port (common/common.h `common_params::port`), given explicitly so the manifest's
/// probes and Service cannot drift from it.
pub(crate) const PORT: u16 = 8080;
/// The health endpoint: 503 while the model loads, 200 once it serves (tools/server/server.cpp, public: no
/// API key needed).
pub(crate) const HEALTH_PATH: &str = "/health";
/// The variable llama-server reads its API keys from (common/arg.cpp `--api-key` `set_env("LLAMA_API_KEY")`,
/// recorded in the argument table). Emitted empty in `env`: the handler skips empty keys, so the server runs
/// open until it is set; the shell line leaves it out (so an exported key stays in force) and the Kubernetes
/// manifest reads it from an optional Secret.
pub(crate) const API_KEY_ENV: &str = "LLAMA_API_KEY";
/// The Secret (and its key) the manifest reads the API key from, when the operator creates it.
const API_KEY_SECRET: (&str, &str) = ("llama-server-api-key", "api-key");
/// The official server images of the pinned engine's Docker docs (llama.cpp docs/docker.md: `server` for the
/// CPU, `server-cuda` compiled with CUDA 12, `server-rocm`); their entrypoint is `/app/llama-server`
/// (.devops/cuda.Dockerfile, target `server`). These tags move with llama.cpp's releases; pin a build tag
/// (`server-cuda-b<N>`) for a reproducible deployment.
const IMAGE_CPU: &str = "ghcr.io/ggml-org/llama.cpp:server";
const IMAGE_CUDA: &str = "ghcr.io/ggml-org/llama.cpp:server-cuda";
const IMAGE_ROCM: &str = "ghcr.io/ggml-org/llama.cpp:server-rocm";
/// llama.cpp's pooling types by GGUF `{arch}.pooling_type` value (include/llama.h `LLAMA_POOLING_TYPE_*`),
/// spelled as `--pooling` takes them.
const POOLING: [&str; 5] = ["none", "mean", "cls", "last", "rank"];
/// The pooling an embedding plan uses when the model does not say: mean pooling, the sentence-transformers
/// default (`Pooling(pooling_mode="mean")`) that BGE-, E5- and MiniLM-style models are served with.
pub(crate) const DEFAULT_POOLING: &str = "mean";

/// The `--pooling` value for a GGUF's `{arch}.pooling_type`, when it names one llama-server knows.
pub(crate) fn pooling_name(gguf_value: u64) -> Option<&'static str> {
    usize::try_from(gguf_value)
        .ok()
        .and_then(|i| POOLING.get(i).copied())
}

/// The default image for a plan's devices (Apple GPUs run no Kubernetes: none).
pub(crate) fn default_image(kind: Option<DeviceKind>) -> Option<&'static str> {
    match kind {
        None | Some(DeviceKind::Cpu) => Some(IMAGE_CPU),
        Some(DeviceKind::Cuda) => Some(IMAGE_CUDA),
        Some(DeviceKind::Rocm) => Some(IMAGE_ROCM),
        Some(_) => None,
    }
}

/// What the server is called and what it serves, besides the planned settings.
pub(crate) struct Serve<'a> {
    pub model_path: &'a str,
    /// `--alias`: the name clients see in `/v1/models` and send as `model`.
    pub alias: &'a str,
    /// `--embedding --pooling P` for an embedding plan.
    pub pooling: Option<&'a str>,
    /// `--port`: [`PORT`], or the next ones for replicas on one machine.
    pub port: u16,
    /// `--rope-scaling yarn --rope-scale N --yarn-orig-ctx N_TRAIN` for a context past the trained length
    /// (`--allow-long-context`, [`rope_extension`]).
    pub rope: Option<RopeExtension>,
    /// `-md PATH` (and `-ngld N` when the draft's layers go to GPUs): the speculative-decoding draft model
    /// (common/arg.cpp `--spec-draft-model`, `--spec-draft-ngl`; `draft.rs`).
    pub draft: Option<DraftLaunch<'a>>,
    /// `--mmproj PATH`: the multimodal projector (common/arg.cpp `-mm, --mmproj`); it follows `-dev`'s first
    /// device (common/arg.cpp `common_params_parse`; `mmproj.rs`).
    pub mmproj: Option<&'a str>,
}

/// The draft model on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DraftLaunch<'a> {
    pub model_path: &'a str,
    /// `-ngld`; `None` on a CPU-only plan, where `-dev none` keeps the draft on the host too.
    pub gpu_layers: Option<u32>,
}

/// YaRN RoPE scaling asked of llama-server for a context per sequence past the model's trained length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RopeExtension {
    /// `--rope-scale`: the smallest whole factor that stretches `orig_ctx` over the context per sequence.
    pub factor: u32,
    /// `--yarn-orig-ctx`: the context the model was trained at (a declared YaRN's original context, else the
    /// GGUF `{arch}.context_length`).
    pub orig_ctx: u32,
}

/// Tokens per sequence llama.cpp serves this model at as trained: `{arch}.context_length` (llama.cpp's
/// `n_ctx_train`), or, when the GGUF already declares YaRN (`rope.scaling.type` yarn with a factor), the
/// declared original context times that factor, which llama.cpp applies at load
/// (src/llama-model.cpp reads `rope.scaling.*` into `rope_scaling_type_train`, `n_ctx_orig_yarn`). Past it the
/// pinned server only logs "possible training context overflow" and serves positions the model never saw.
/// `None` when the model does not say.
pub(crate) fn trained_context(model: &ModelSpec) -> Option<u64> {
    let h = &model.hparams;
    let base = h.context_length.filter(|&c| c > 0)?;
    let declared = h.rope.as_ref().and_then(|r| {
        let yarn = r.scaling_type.as_deref()? == "yarn";
        let factor = r.scaling_factor.filter(|f| f.is_finite() && *f > 1.0)?;
        let orig = r.original_context_length.unwrap_or(base);
        yarn.then(|| (orig as f64 * factor).floor() as u64)
    });
    Some(declared.map_or(base, |d| d.max(base)))
}

/// The YaRN flags llama-server needs to serve `context_per_sequence` tokens on this model, when that is past
/// [`trained_context`] (only planned with `--allow-long-context`; refused otherwise).
pub(crate) fn rope_extension(
    model: &ModelSpec,
    context_per_sequence: u32,
) -> Option<RopeExtension> {
    let trained = trained_context(model)?;
    if u64::from(context_per_sequence) <= trained {
        return None;
    }
    let h = &model.hparams;
    let orig = h
        .rope
        .as_ref()
        .filter(|r| r.scaling_type.as_deref() == Some("yarn"))
        .and_then(|r| r.original_context_length)
        .or(h.context_length)
        .filter(|&o| o > 0)?;
    Some(RopeExtension {
        factor: u32::try_from(u64::from(context_per_sequence).div_ceil(orig)).ok()?,
        orig_ctx: u32::try_from(orig).ok()?,
    })
}

/// How a GPU kind maps to llama.cpp: the device kind, llama.cpp's device
/// name prefix (ggml `GGML_CUDA_NAME` "CUDA"/"ROCm", `GGML_METAL_NAME` "MTL", `GGML_VK_NAME` "Vulkan" in
/// ggml-vulkan.h) and the environment variable that restricts the process to the planned devices (ggml-vulkan.cpp
/// reads `GGML_VK_VISIBLE_DEVICES`, a list of Vulkan device indices).
const BACKENDS: &[(DeviceKind, &str, Option<&str>)] = &[
    (DeviceKind::Cuda, "CUDA", Some("CUDA_VISIBLE_DEVICES")),
    (DeviceKind::Rocm, "ROCm", Some("HIP_VISIBLE_DEVICES")),
    (DeviceKind::Metal, "MTL", None),
    (
        DeviceKind::Vulkan,
        "Vulkan",
        Some("GGML_VK_VISIBLE_DEVICES"),
    ),
];

/// llama.cpp's name for the `i`-th visible device of a backend (`CUDA0`, `ROCm1`, `MTL0`, `Vulkan2`): what `-dev`
/// and rpc-server's `-d` take.
pub(crate) fn device_name(kind: DeviceKind, i: usize) -> String {
    let name = BACKENDS
        .iter()
        .find(|b| b.0 == kind)
        .map_or("CUDA", |b| b.1);
    format!("{name}{i}")
}

/// The environment variable that hides a backend's other GPUs (`CUDA_VISIBLE_DEVICES`, ...), if it has one.
pub(crate) fn visible_devices_env(kind: DeviceKind) -> Option<&'static str> {
    BACKENDS.iter().find(|b| b.0 == kind).and_then(|b| b.2)
}

/// The llama-server command line for a plan, with the environment that pins the planned GPUs.
///
/// Devices are pinned twice over: the environment hides every GPU the plan does not use (NVML numbers GPUs in PCI
/// bus order, so `CUDA_DEVICE_ORDER=PCI_BUS_ID` makes CUDA agree with the inventory index), and `-dev` names the
/// visible ones in the plan's layer order, so `-ts` lines up with them. A CPU-only plan says `-dev none`, or a
/// GPU build of llama-server would still put its compute buffers and large prompt batches on a GPU.
/// `-c` is the total over slots and `-np` is explicit: the pinned server unifies the KV cache only when `-np` is
/// auto (common/arg.cpp `--kv-unified`), so every slot gets `context_per_sequence` cells.
pub(crate) fn llama_server(serve: &Serve, s: &LlamaCppSettings, gpus: &[DeviceId]) -> Artifact {
    let mut a: Vec<String> = vec![
        "llama-server".into(),
        "-m".into(),
        serve.model_path.into(),
        "--alias".into(),
        serve.alias.into(),
        "--host".into(),
        HOST.into(),
        "--port".into(),
        serve.port.to_string(),
        "-c".into(),
        s.context_length.to_string(),
        "-b".into(),
        s.batch_size.to_string(),
        "-ub".into(),
        s.ubatch_size.to_string(),
        "-np".into(),
        s.parallel.to_string(),
        "-ngl".into(),
        s.gpu_layers.to_string(),
        "-fa".into(),
        if s.flash_attention { "on" } else { "off" }.into(),
        "-ctk".into(),
        s.cache_type_k.clone(),
        "-ctv".into(),
        s.cache_type_v.clone(),
        "-t".into(),
        s.threads.to_string(),
    ];
    let mut env = BTreeMap::new();
    let backend = gpus
        .first()
        .and_then(|g| BACKENDS.iter().find(|b| b.0 == g.kind));
    match backend {
        None => {
            a.push("-dev".into());
            a.push("none".into());
        }
        Some(&(_, llama_name, visible)) => {
            if let Some(var) = visible {
                if var == "CUDA_VISIBLE_DEVICES" {
                    env.insert("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into());
                }
                let ids: Vec<String> = gpus.iter().map(|g| g.ordinal.to_string()).collect();
                env.insert(var.to_string(), ids.join(","));
            }
            a.push("-dev".into());
            a.push(
                (0..gpus.len())
                    .map(|i| format!("{llama_name}{i}"))
                    .collect::<Vec<_>>()
                    .join(","),
            );
            if gpus.len() > 1 {
                a.push("-sm".into());
                a.push("layer".into());
            }
        }
    }
    if let Some(ts) = &s.tensor_split {
        a.push("-ts".into());
        a.push(ts.iter().map(u64::to_string).collect::<Vec<_>>().join(","));
    }
    if s.n_cpu_moe > 0 {
        a.push("--n-cpu-moe".into());
        a.push(s.n_cpu_moe.to_string());
    }
    if !s.mmap {
        // The pinned engine has no `--no-mmap`; `-lm none` reads the weights into buffers instead.
        a.push("-lm".into());
        a.push("none".into());
    }
    if let Some(d) = serve.draft {
        a.push("-md".into());
        a.push(d.model_path.into());
        if let Some(n) = d.gpu_layers {
            a.push("-ngld".into());
            a.push(n.to_string());
        }
    }
    if let Some(m) = serve.mmproj {
        a.push("--mmproj".into());
        a.push(m.into());
    }
    if let Some(p) = serve.pooling {
        a.push("--embedding".into());
        a.push("--pooling".into());
        a.push(p.into());
    }
    if let Some(r) = serve.rope {
        a.extend([
            "--rope-scaling".to_string(),
            "yarn".into(),
            "--rope-scale".into(),
            r.factor.to_string(),
            "--yarn-orig-ctx".into(),
            r.orig_ctx.to_string(),
        ]);
    }
    // The shell line leaves the key out: `LLAMA_API_KEY= llama-server ...` would clear a key the user exported.
    let command = shell_command(&env, &a);
    env.insert(API_KEY_ENV.into(), String::new());
    Artifact {
        name: "llama-server".into(),
        description: format!(
            "the pinned llama.cpp server with the planned settings, restricted to the planned devices, listening on {HOST}:{}; export {API_KEY_ENV} to require an API key (empty or unset: none)",
            serve.port
        ),
        command: Some(command),
        argv: a,
        env,
        files: BTreeMap::new(),
        resources: None,
    }
}

/// Replicas of a one-GPU plan on one machine: one llama-server per GPU, each pinned to its GPU and on its own
/// port (`PORT`, `PORT + 1`, ...), started together by `llama-server-replicas.sh`; a load balancer in front
/// spreads requests over the ports.
pub(crate) fn replicas(serve: &Serve, s: &LlamaCppSettings, gpus: &[DeviceId]) -> Artifact {
    let mut script = String::from(
        "#!/bin/sh\n# One llama-server per GPU, each pinned to its device, on consecutive ports; stops them all on exit.\ntrap 'kill 0' EXIT INT TERM\n",
    );
    for (k, g) in gpus.iter().enumerate() {
        let port = u16::try_from(k)
            .ok()
            .and_then(|k| serve.port.checked_add(k))
            .unwrap_or(u16::MAX);
        let one = llama_server(&Serve { port, ..*serve }, s, std::slice::from_ref(g));
        script.push_str(&format!("{} &\n", one.command.unwrap_or_default()));
    }
    script.push_str("wait\n");
    let last = serve.port.saturating_add(
        u16::try_from(gpus.len())
            .unwrap_or(u16::MAX)
            .saturating_sub(1),
    );
    Artifact {
        name: "llama-server-replicas".into(),
        description: format!(
            "{} replicas of the llama-server plan, one per GPU ({}), on ports {}-{last}: the workload is throughput-bound and one GPU holds the model, so each further GPU adds a whole replica",
            gpus.len(),
            gpus.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            serve.port
        ),
        argv: vec!["sh".into(), "llama-server-replicas.sh".into()],
        command: Some("sh llama-server-replicas.sh".into()),
        env: BTreeMap::new(),
        files: BTreeMap::from([("llama-server-replicas.sh".to_string(), script)]),
        resources: None,
    }
}

/// Refuses a model path that the Modelfile's `FROM` line cannot carry: one with a control character (U+0000 to
/// U+001F, U+007F, or a C1 control), which would end the line or hide in it. The error quotes the path escaped
/// and names the character (exit 4: the model's name is the input's defect).
pub(crate) fn check_model_path(model_path: &str) -> Result<(), PlanError> {
    match model_path.chars().enumerate().find(|(_, c)| c.is_control()) {
        None => Ok(()),
        Some((i, c)) => Err(PlanError::Model(format!(
            "model path {model_path:?}: character {} is U+{:04X}, a control character; the Ollama Modelfile names the model on one line (FROM <path>), where a line break would inject instructions, so rename the file",
            i + 1,
            u32::from(c)
        ))),
    }
}

/// Sequences and context the engine accepts at all, whatever the memory: `-np` at most
/// [`llama_cpp::MAX_SEQ`], and a `-c` (the context over every slot, sequences × context per sequence) that
/// fits its `int32_t` ([`MAX_CONTEXT_PER_SEQUENCE`]). Past them llama-server refuses to start, so the request is
/// refused here (exit 2) rather than planned as a candidate that "needs" an impossible amount of memory (issue
/// 24: `-c 2147483647 -np 2` on a Mamba model printed "needs 17179869184 GiB more", 2^64 bytes).
pub(super) fn engine_limits(
    ov: &crate::runtime::Overrides,
    w: &WorkloadProfile,
    n_par: u32,
    n_ctx_train: u32,
) -> Result<(), PlanError> {
    let sequences = match ov.parallel {
        Some(p) => format!("--parallel {p}"),
        None => format!("workload {}'s concurrency of {n_par}", w.id),
    };
    if n_par > llama_cpp::MAX_SEQ {
        return Err(PlanError::Usage(format!(
            "{sequences}: llama-server serves at most {} sequences at once (LLAMA_MAX_SEQ); run replicas behind a load balancer for more",
            llama_cpp::MAX_SEQ
        )));
    }
    if let Size::Fixed(c) = crate::runtime::context_size(ov, w, n_ctx_train, CTX_STEP) {
        let total = u64::from(c) * u64::from(n_par);
        if total > u64::from(MAX_CONTEXT_PER_SEQUENCE) {
            let context = match ov.context_length {
                Some(_) => format!("-c {c}"),
                None => format!("workload {}'s context of {c} tokens per sequence", w.id),
            };
            return Err(PlanError::Usage(format!(
                "{context} with {sequences}: llama-server's -c is the context over every slot, {c} x {n_par} = {total} tokens, above the {MAX_CONTEXT_PER_SEQUENCE} its int32 takes; at {n_par} sequences a sequence holds at most {} tokens",
                MAX_CONTEXT_PER_SEQUENCE / n_par
            )));
        }
    }
    Ok(())
}

/// Ollama's K/V cache types (docs/faq.md, "How can I set the quantization type for the K/V cache?": `f16`,
/// `q8_0`, `q4_0`; quantized types need flash attention).
const OLLAMA_KV_TYPES: [&str; 3] = ["f16", "q8_0", "q4_0"];

/// An Ollama Modelfile with the planned context (`num_ctx` is per sequence: Ollama multiplies it by its parallel
/// setting) and the server environment the plan's memory depends on (ollama envconfig/config.go:
/// `OLLAMA_NUM_PARALLEL`, `OLLAMA_CONTEXT_LENGTH`, `OLLAMA_FLASH_ATTENTION`, `OLLAMA_KV_CACHE_TYPE`, all server
/// settings, not Modelfile parameters). A K cache type Ollama does not offer, or K and V types that differ, is
/// left out and said in the description: Ollama then uses f16.
/// `model_path` has passed [`check_model_path`] (the runtime refuses the plan otherwise).
pub(crate) fn ollama(model_path: &str, s: &LlamaCppSettings) -> Artifact {
    debug_assert!(check_model_path(model_path).is_ok(), "{model_path:?}");
    let modelfile = format!(
        "# Planned by optimizer: the context per sequence. Layer placement and threads are Ollama's.\nFROM {model_path}\nPARAMETER num_ctx {}\n",
        s.context_per_sequence
    );
    let mut env = BTreeMap::from([
        ("OLLAMA_NUM_PARALLEL".to_string(), s.parallel.to_string()),
        (
            "OLLAMA_CONTEXT_LENGTH".to_string(),
            s.context_per_sequence.to_string(),
        ),
        (
            "OLLAMA_FLASH_ATTENTION".to_string(),
            if s.flash_attention { "1" } else { "0" }.to_string(),
        ),
    ]);
    let kv = s.cache_type_k.as_str();
    let mut description = "an Ollama model with the planned context: run `ollama serve` with this environment, then `ollama create` it".to_string();
    if OLLAMA_KV_TYPES.contains(&kv) && s.cache_type_v == kv {
        env.insert("OLLAMA_KV_CACHE_TYPE".to_string(), kv.to_string());
    } else {
        description.push_str(&format!(
            "; Ollama has no K/V cache type {kv}/{} (it offers f16, q8_0, q4_0 for both), so its KV cache is f16 and larger than planned",
            s.cache_type_v
        ));
    }
    let argv: Vec<String> = ["ollama", "create", "optimizer-plan", "-f", "Modelfile"]
        .map(String::from)
        .to_vec();
    Artifact {
        name: "ollama".into(),
        description,
        command: Some(shell_command(&BTreeMap::new(), &argv)),
        argv,
        env,
        files: BTreeMap::from([("Modelfile".to_string(), modelfile)]),
        resources: None,
    }
}

/// The llama-server process as a Kubernetes Deployment and Service (`llama-server.yaml`), from the server
/// artifact built for the container's model path ([`kubernetes::model_in_container`]). `host_bytes` is the
/// plan's host memory for the process (not the OS reserve), `threads` the CPU threads it runs, `gpu_names`
/// the planned GPUs' names as the probe read them, `replicas` the pods (one per GPU for a replicated plan),
/// `image` the container image (`--image`; the official one for the plan's devices when `None`).
pub(crate) fn kubernetes(
    container_serve: &Artifact,
    host_bytes: u64,
    threads: u32,
    gpus: &[DeviceId],
    gpu_names: &[&str],
    replicas: u32,
    image: Option<&str>,
) -> Artifact {
    let kind = gpus.first().map(|g| g.kind);
    let product = kubernetes::common_gpu_product_label(gpu_names);
    let mut env = kubernetes::container_env(&container_serve.env);
    env.remove(API_KEY_ENV);
    let server = Server {
        name: "llama-server",
        image: image.unwrap_or_else(|| default_image(kind).unwrap_or(IMAGE_CPU)),
        // The image's entrypoint is llama-server: the argv after the program are its arguments.
        command: None,
        args: container_serve.argv[1..].to_vec(),
        env,
        secret_env: Some(SecretEnv {
            name: API_KEY_ENV,
            secret: API_KEY_SECRET.0,
            key: API_KEY_SECRET.1,
        }),
        port: PORT,
        health_path: HEALTH_PATH,
        memory_bytes: Some(host_bytes),
        cpus: threads,
        gpu_kind: kind,
        gpus: u32::try_from(gpus.len()).unwrap_or(u32::MAX),
        gpu_product: product.filter(|_| kind == Some(DeviceKind::Cuda)),
        shm: false,
        replicas,
    };
    let (requests, limits) = server.resources();
    let mut files = BTreeMap::new();
    let mut description = format!(
        "llama-server as a Kubernetes Deployment and Service on port {PORT}: requests are the plan's host memory, CPU threads and GPUs (limits only the GPUs); the model is read from PersistentVolumeClaim {} (a placeholder: copy the model to its root) mounted at {}",
        kubernetes::MODEL_CLAIM,
        kubernetes::MODEL_MOUNT
    );
    if default_image(kind).is_some() {
        files.insert("llama-server.yaml".to_string(), server.manifest());
    } else {
        description =
            "container resources only: Apple GPUs have no Kubernetes device plugin".into();
    }
    Artifact {
        name: "kubernetes".into(),
        description,
        argv: Vec::new(),
        command: None,
        env: BTreeMap::new(),
        files,
        resources: Some(Resources { requests, limits }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> LlamaCppSettings {
        LlamaCppSettings {
            strategy: crate::emit::Strategy::Cpu,
            gpu_layers: 0,
            tensor_split: None,
            context_length: 4096,
            context_per_sequence: 4096,
            batch_size: 2048,
            ubatch_size: 512,
            parallel: 1,
            threads: 4,
            flash_attention: true,
            cache_type_k: "f16".into(),
            cache_type_v: "f16".into(),
            mmap: true,
            n_cpu_moe: 0,
            precision: "fp32".into(),
        }
    }

    /// Issue 24: `FROM /m\nSYSTEM pwned` would have been two Modelfile instructions.
    #[test]
    fn a_model_path_with_a_control_character_is_refused_for_the_modelfile() {
        for (path, at, code) in [
            ("/m/x\nSYSTEM pwned.gguf", 5, "U+000A"),
            ("/m/x\rFROM evil", 5, "U+000D"),
            ("/m/\x1b]0;t\x07.gguf", 4, "U+001B"),
            ("/m/\x7f.gguf", 4, "U+007F"),
            ("/m/\u{85}.gguf", 4, "U+0085"),
        ] {
            let Err(PlanError::Model(m)) = check_model_path(path) else {
                panic!("{path:?} accepted")
            };
            assert!(m.contains(&format!("{path:?}")), "quoted escaped: {m}");
            assert!(m.contains(&format!("character {at} is {code}")), "{m}");
            assert!(!m.chars().any(char::is_control), "{m:?}");
        }
        // Spaces, quotes and non-ASCII stay on the FROM line as they are.
        let fine = "/models/my model \"v2\" é.gguf";
        assert!(check_model_path(fine).is_ok());
        let a = ollama(fine, &settings());
        assert_eq!(
            a.files["Modelfile"]
                .lines()
                .filter(|l| l.starts_with("FROM "))
                .count(),
            1
        );
    }

    /// The shell line single-quotes every word: a path with a newline, quotes or `$(...)` stays one argument
    /// when a POSIX shell reads it (checked with `sh`, the reader of `command.sh`).
    #[test]
    fn the_shell_line_keeps_a_hostile_path_one_argument() {
        let path = "/m/a b\n'c'$(echo injected)`id`\\.gguf";
        let serve = Serve {
            model_path: path,
            alias: "a\nb",
            pooling: None,
            port: PORT,
            rope: None,
            draft: None,
            mmproj: None,
        };
        let a = llama_server(&serve, &settings(), &[]);
        let line = a.command.unwrap();
        // Replace the program by a function that prints each argument on its own NUL-terminated record.
        let script = format!(
            "llama_server() {{ printf '%s\\0' \"$@\"; }}\n{}",
            line.replacen("llama-server", "llama_server", 1)
        );
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&script)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let args: Vec<String> = out
            .stdout
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8(a.to_vec()).unwrap())
            .collect();
        assert_eq!(args, a.argv[1..].to_vec());
        assert_eq!(args[1], path);
    }
}
