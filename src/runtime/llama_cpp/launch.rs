//! llama.cpp's launch artifacts: the llama-server command (checked against the pinned server's argument
//! parser, tests/fixtures/llama-cpp/llama-server-args.json), an Ollama Modelfile with its server environment,
//! and the container resources.

use std::collections::BTreeMap;

use crate::emit::{Artifact, LlamaCppSettings, Resources};
use crate::fleet::{DeviceId, DeviceKind};

/// How a GPU kind maps to llama.cpp: the device kind, llama.cpp's device
/// name prefix (ggml `GGML_CUDA_NAME` "CUDA"/"ROCm", `GGML_METAL_NAME` "MTL") and the environment variable that
/// restricts the process to the planned devices.
const BACKENDS: &[(DeviceKind, &str, Option<&str>)] = &[
    (DeviceKind::Cuda, "CUDA", Some("CUDA_VISIBLE_DEVICES")),
    (DeviceKind::Rocm, "ROCm", Some("HIP_VISIBLE_DEVICES")),
    (DeviceKind::Metal, "MTL", None),
];

/// The llama-server command line for a plan, with the environment that pins the planned GPUs.
///
/// Devices are pinned twice over: the environment hides every GPU the plan does not use (NVML numbers GPUs in PCI
/// bus order, so `CUDA_DEVICE_ORDER=PCI_BUS_ID` makes CUDA agree with the inventory index), and `-dev` names the
/// visible ones in the plan's layer order, so `-ts` lines up with them. A CPU-only plan says `-dev none`, or a
/// GPU build of llama-server would still put its compute buffers and large prompt batches on a GPU.
/// `-c` is the total over slots and `-np` is explicit: the pinned server unifies the KV cache only when `-np` is
/// auto (common/arg.cpp `--kv-unified`), so every slot gets `context_per_sequence` cells.
pub fn llama_server(model_path: &str, s: &LlamaCppSettings, gpus: &[DeviceId]) -> Artifact {
    let mut a: Vec<String> = vec![
        "llama-server".into(),
        "-m".into(),
        model_path.into(),
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
    Artifact {
        name: "llama-server".into(),
        description: "the pinned llama.cpp server with the planned settings, restricted to the planned devices".into(),
        argv: a,
        env,
        files: BTreeMap::new(),
        resources: None,
    }
}

/// An Ollama Modelfile with the planned parameters (`num_ctx` is per sequence: Ollama multiplies it by its
/// parallel setting) and the server environment that sets the parallel requests (a server setting, not a
/// Modelfile parameter).
pub fn ollama(model_path: &str, s: &LlamaCppSettings) -> Artifact {
    let modelfile = format!(
        "FROM {model_path}\nPARAMETER num_ctx {}\nPARAMETER num_gpu {}\nPARAMETER num_thread {}\nPARAMETER num_batch {}\n",
        s.context_per_sequence, s.gpu_layers, s.threads, s.ubatch_size
    );
    Artifact {
        name: "ollama".into(),
        description: "an Ollama model with the planned parameters: run the server with this environment, then `ollama create` it".into(),
        argv: ["ollama", "create", "optimizer-plan", "-f", "Modelfile"]
            .map(String::from)
            .to_vec(),
        env: BTreeMap::from([(
            "OLLAMA_NUM_PARALLEL".to_string(),
            s.parallel.to_string(),
        )]),
        files: BTreeMap::from([("Modelfile".to_string(), modelfile)]),
        resources: None,
    }
}

/// Container resources for the server process: host memory (its share of the plan plus the rules' reserve),
/// CPU threads and the vendor device plugin's GPUs (Apple GPUs have none: no Kubernetes on macOS).
pub fn kubernetes(host_bytes: u64, threads: u32, gpus: &[DeviceId]) -> Artifact {
    let mut requests = BTreeMap::new();
    requests.insert("memory".to_string(), host_bytes.to_string());
    requests.insert("cpu".to_string(), threads.to_string());
    match gpus.first().map(|g| g.kind) {
        Some(DeviceKind::Cuda) => {
            requests.insert("nvidia.com/gpu".to_string(), gpus.len().to_string());
        }
        Some(DeviceKind::Rocm) => {
            requests.insert("amd.com/gpu".to_string(), gpus.len().to_string());
        }
        _ => {}
    }
    Artifact {
        name: "kubernetes".into(),
        description: "container resources for the llama-server process (requests equal limits)"
            .into(),
        argv: Vec::new(),
        env: BTreeMap::new(),
        files: BTreeMap::new(),
        resources: Some(Resources {
            requests: requests.clone(),
            limits: requests,
        }),
    }
}
