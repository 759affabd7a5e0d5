//! Kubernetes manifests for a serving process, shared by the runtimes: one Deployment and one Service as a
//! multi-document YAML file, built from the launch artifact the plan already emits (its argv and environment),
//! so the pod runs exactly the planned command.
//!
//! What the manifest decides, and why:
//! - the model is read from a PersistentVolumeClaim ([`MODEL_CLAIM`], a placeholder the operator creates and
//!   fills) mounted read-only at [`MODEL_MOUNT`]; the engine opens the file or directory by its own name under
//!   it, so the manifest is the same on every node (a hostPath would tie it to the directory `resolve` read);
//! - requests are what the plan needs (the process's host bytes, its CPU threads, its GPUs), not the host OS
//!   reserve; limits carry only the GPUs (the device plugin requires them) — trade-off: a memory limit at the
//!   predicted figure would turn a prediction a few MiB low into an OOM kill, and a CPU limit throttles a
//!   process whose threads are already counted;
//! - device pinning variables are left out of the container: the device plugin exposes the granted GPUs
//!   numbered from 0, and `CUDA_VISIBLE_DEVICES=3` inside a one-GPU container would hide the GPU it was given;
//! - a `nodeSelector` on `nvidia.com/gpu.product` as NVIDIA's GPU feature discovery writes it (see
//!   [`gpu_product_label`]) keeps the pod on the GPU the plan was made for; AMD GPUs get none — trade-off: the
//!   ROCm node labeller is an opt-in DaemonSet whose label names changed between releases (`beta.amd.com/gpu.*`
//!   with a count suffix, later `amd.com/gpu.product-name`; ROCm/k8s-device-plugin cmd/k8s-node-labeller), so
//!   a selector on it could leave the pod unschedulable on a cluster that runs the GPU; the `amd.com/gpu`
//!   request alone keeps it on an AMD node;
//! - a startup probe allows for model loading before the liveness probe may restart the container.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::fleet::DeviceKind;

/// Where the model volume is mounted in the container.
pub(crate) const MODEL_MOUNT: &str = "/models";
/// The PersistentVolumeClaim holding the model (a placeholder: create it and copy the model file or directory
/// to its root under the same name).
pub(crate) const MODEL_CLAIM: &str = "optimizer-models";
/// Seconds between probes (kubelet's default is also 10 s).
pub(crate) const PROBE_PERIOD_S: u32 = 10;
/// Startup probe failures allowed before the container is restarted: 180 × 10 s = 30 minutes, time to read a
/// 100+ GB model from network storage at about 100 MB/s; the server answers /health with 503 while it loads.
pub(crate) const STARTUP_FAILURES: u32 = 180;
/// Liveness failures before a restart: 3 (kubelet's default), half a minute of an unresponsive server.
pub(crate) const LIVENESS_FAILURES: u32 = 3;
/// One MiB; memory requests are written in whole MiB, rounded up.
const MIB: u64 = 1 << 20;

/// An environment variable read from a Secret when the Secret exists (`optional: true`): the server runs
/// without it otherwise.
pub(crate) struct SecretEnv<'a> {
    pub name: &'a str,
    pub secret: &'a str,
    pub key: &'a str,
}

/// What one serving container needs.
pub(crate) struct Server<'a> {
    /// Deployment, Service, container and `app` label name.
    pub name: &'a str,
    pub image: &'a str,
    /// `command` (replaces the image's entrypoint) when given; else the image's entrypoint runs with `args`.
    pub command: Option<Vec<String>>,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub secret_env: Option<SecretEnv<'a>>,
    pub port: u16,
    /// HTTP path that answers 200 once the model is loaded.
    pub health_path: &'a str,
    /// Host memory the process needs (bytes); none when the plan does not model it.
    pub memory_bytes: Option<u64>,
    pub cpus: u32,
    /// GPUs by kind (all the same kind) and product name as the probe read it.
    pub gpu_kind: Option<DeviceKind>,
    pub gpus: u32,
    pub gpu_product: Option<String>,
    /// A memory-backed /dev/shm (vLLM's workers exchange tensors through shared memory).
    pub shm: bool,
    /// Pods of the Deployment, each with the requests above (more than one when a machine holds several
    /// replicas of a one-GPU plan).
    pub replicas: u32,
}

/// The device plugin's resource name for a GPU kind (NVIDIA k8s-device-plugin `nvidia.com/gpu`, AMD
/// k8s-device-plugin `amd.com/gpu`); Apple GPUs have none.
pub(crate) fn gpu_resource(kind: DeviceKind) -> Option<&'static str> {
    match kind {
        DeviceKind::Cuda => Some("nvidia.com/gpu"),
        DeviceKind::Rocm => Some("amd.com/gpu"),
        _ => None,
    }
}

/// Label values are at most 63 characters (Kubernetes `IsValidLabelValue`).
const LABEL_VALUE_MAX: usize = 63;

/// The `nvidia.com/gpu.product` label GPU feature discovery gives a GPU named `name` by NVML: characters
/// outside `[A-Za-z0-9-_. ]` dropped, runs of blanks joined by one `-` (NVIDIA/k8s-device-plugin
/// internal/lm/resource.go `sanitise`), so `NVIDIA A100-SXM4-80GB` is `NVIDIA-A100-SXM4-80GB`. None when the
/// result is not a valid label value (empty, too long, or not starting and ending alphanumeric).
fn gpu_product_label(name: &str) -> Option<String> {
    let kept: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "-_. ".contains(*c))
        .collect();
    let label = kept.split_whitespace().collect::<Vec<_>>().join("-");
    let edge_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    (label.len() <= LABEL_VALUE_MAX
        && edge_ok(label.chars().next())
        && edge_ok(label.chars().last()))
    .then_some(label)
}

/// The `nvidia.com/gpu.product` label of a plan's GPUs when they are all one product ([`gpu_product_label`]);
/// none for mixed products (no one node label matches them all) or no GPUs.
pub(crate) fn common_gpu_product_label(names: &[&str]) -> Option<String> {
    match names {
        [first, rest @ ..] if rest.iter().all(|n| n == first) => gpu_product_label(first),
        _ => None,
    }
}

/// Bytes as a Kubernetes quantity in whole MiB, rounded up (`6144Mi`).
fn mebibytes(bytes: u64) -> String {
    format!("{}Mi", bytes.div_ceil(MIB))
}

impl Server<'_> {
    /// The requests (`cpu`, `memory`, GPUs) and the limits (GPUs only, see the module doc).
    pub(crate) fn resources(&self) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
        let mut requests = BTreeMap::new();
        requests.insert("cpu".to_string(), self.cpus.max(1).to_string());
        if let Some(b) = self.memory_bytes {
            requests.insert("memory".to_string(), mebibytes(b));
        }
        let mut limits = BTreeMap::new();
        if let Some(r) = self.gpu_kind.and_then(gpu_resource)
            && self.gpus > 0
        {
            requests.insert(r.to_string(), self.gpus.to_string());
            limits.insert(r.to_string(), self.gpus.to_string());
        }
        (requests, limits)
    }

    /// The Deployment and the Service, as one multi-document YAML text.
    pub(crate) fn manifest(&self) -> String {
        let labels = json!({ "app": self.name });
        let (requests, limits) = self.resources();
        let mut env: Vec<Value> = self
            .env
            .iter()
            .map(|(k, v)| json!({ "name": k, "value": v }))
            .collect();
        if let Some(s) = &self.secret_env {
            env.push(json!({
                "name": s.name,
                "valueFrom": { "secretKeyRef": { "name": s.secret, "key": s.key, "optional": true } },
            }));
        }
        let probe = |failures: u32| {
            json!({
                "httpGet": { "path": self.health_path, "port": self.port },
                "periodSeconds": PROBE_PERIOD_S,
                "failureThreshold": failures,
            })
        };
        let mut container = json!({
            "name": self.name,
            "image": self.image,
            "args": self.args,
            "ports": [{ "name": "http", "containerPort": self.port, "protocol": "TCP" }],
            "resources": { "requests": requests },
            "startupProbe": probe(STARTUP_FAILURES),
            "readinessProbe": probe(1),
            "livenessProbe": probe(LIVENESS_FAILURES),
            "volumeMounts": [{ "name": "models", "mountPath": MODEL_MOUNT, "readOnly": true }],
        });
        if let Some(c) = &self.command {
            container["command"] = json!(c);
        }
        if !env.is_empty() {
            container["env"] = json!(env);
        }
        if !limits.is_empty() {
            container["resources"]["limits"] = json!(limits);
        }
        let mut volumes = vec![json!({
            "name": "models",
            "persistentVolumeClaim": { "claimName": MODEL_CLAIM, "readOnly": true },
        })];
        if self.shm {
            container["volumeMounts"]
                .as_array_mut()
                .expect("built as an array above")
                .push(json!({ "name": "dshm", "mountPath": "/dev/shm" }));
            volumes.push(json!({ "name": "dshm", "emptyDir": { "medium": "Memory" } }));
        }
        let mut pod = json!({ "containers": [container], "volumes": volumes });
        if let Some(p) = &self.gpu_product {
            pod["nodeSelector"] = json!({ "nvidia.com/gpu.product": p });
        }
        let deployment = json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": { "name": self.name, "labels": labels },
            "spec": {
                "replicas": self.replicas.max(1),
                "selector": { "matchLabels": labels },
                "template": { "metadata": { "labels": labels }, "spec": pod },
            },
        });
        let service = json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": { "name": self.name, "labels": labels },
            "spec": {
                "selector": labels,
                "ports": [{ "name": "http", "port": self.port, "targetPort": "http", "protocol": "TCP" }],
            },
        });
        [deployment, service]
            .iter()
            .map(|d| {
                optimizer_input::yaml::to_string(d).expect("a JSON value always renders as YAML")
            })
            .collect::<Vec<_>>()
            .join("---\n")
    }
}

/// Drops the variables that pin devices on a host: inside a container the device plugin does that.
pub(crate) fn container_env(env: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    env.iter()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "CUDA_VISIBLE_DEVICES" | "HIP_VISIBLE_DEVICES" | "CUDA_DEVICE_ORDER"
            )
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The container path of a model file or directory: its own name under [`MODEL_MOUNT`].
pub(crate) fn model_in_container(model_path: &str) -> String {
    let name = std::path::Path::new(model_path).file_name().map_or_else(
        || model_path.to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    format!("{MODEL_MOUNT}/{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_product_label_follows_gpu_feature_discovery() {
        assert_eq!(
            gpu_product_label("NVIDIA A100-SXM4-80GB").as_deref(),
            Some("NVIDIA-A100-SXM4-80GB")
        );
        assert_eq!(
            gpu_product_label("NVIDIA GeForce RTX 4090").as_deref(),
            Some("NVIDIA-GeForce-RTX-4090")
        );
        assert_eq!(
            gpu_product_label("Tesla  V100 (SXM2)").as_deref(),
            Some("Tesla-V100-SXM2")
        );
        assert_eq!(gpu_product_label("  "), None);
        assert_eq!(gpu_product_label(&"A".repeat(64)), None);
    }

    #[test]
    fn memory_is_whole_mebibytes_rounded_up() {
        assert_eq!(mebibytes(1), "1Mi");
        assert_eq!(mebibytes(MIB), "1Mi");
        assert_eq!(mebibytes(MIB + 1), "2Mi");
    }

    #[test]
    fn model_keeps_its_name_under_the_mount() {
        assert_eq!(model_in_container("models/a b.gguf"), "/models/a b.gguf");
        assert_eq!(model_in_container("/data/Llama-3"), "/models/Llama-3");
    }
}
