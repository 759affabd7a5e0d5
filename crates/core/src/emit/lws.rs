//! A Kubernetes LeaderWorkerSet (`leaderworkerset.x-k8s.io/v1`, kubernetes-sigs/lws) for a server that spans
//! nodes: one group of `size` pods (a leader and `size - 1` workers, each on its own node), the group recreated
//! whole when any pod restarts, and a Service in front of the leader. Pure: builds YAML text from values.
//!
//! The fields follow the CRD of the pinned LWS release (tests/fixtures/kubernetes/lws-v0.10.0/, validated
//! offline by benches/kubernetes/validate.py): `spec.replicas`, `spec.leaderWorkerTemplate.{size,
//! restartPolicy, leaderTemplate, workerTemplate}`. LWS injects `LWS_LEADER_ADDRESS`, `LWS_GROUP_SIZE` and
//! `LWS_WORKER_INDEX` into every container (api/leaderworkerset/v1/leaderworkerset_types.go; pkg/utils/pod
//! `AddLWSVariables`), so a command names them as `$(LWS_LEADER_ADDRESS)`, which Kubernetes expands from the
//! container's environment. The leader is the pod with label `leaderworkerset.sigs.k8s.io/worker-index: "0"`.

use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The LWS API version the manifest is written for.
pub(crate) const API_VERSION: &str = "leaderworkerset.x-k8s.io/v1";
/// LWS's label naming the set on every pod it creates (`SetNameLabelKey`).
const SET_NAME_LABEL: &str = "leaderworkerset.sigs.k8s.io/name";
/// LWS's label with a pod's index in its group, 0 for the leader (`WorkerIndexLabelKey`).
const WORKER_INDEX_LABEL: &str = "leaderworkerset.sigs.k8s.io/worker-index";
/// Recreate the whole group when one of its pods restarts: a multi-node vLLM server cannot lose one node and
/// keep serving (LWS `restartPolicy`, the CRD's default, written out).
const RESTART_POLICY: &str = "RecreateGroupOnPodRestart";

/// One LeaderWorkerSet group and the Service in front of its leader.
#[derive(Debug, Clone)]
pub(crate) struct LeaderWorkerSet<'a> {
    pub name: &'a str,
    pub image: &'a str,
    /// Pods per group: the nodes one replica spans.
    pub size: u32,
    /// Groups (replicas of the whole multi-node server).
    pub replicas: u32,
    pub leader_command: Vec<String>,
    pub worker_command: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// Extended resource name of the GPUs (`nvidia.com/gpu`) and how many each pod takes.
    pub gpu_resource: &'a str,
    pub gpus_per_pod: u32,
    pub cpus: u32,
    /// `nvidia.com/gpu.product` to select nodes by, when the GPUs are one product.
    pub gpu_product: Option<String>,
    /// The leader's HTTP port and health path (the workers serve no HTTP).
    pub port: u16,
    pub health_path: &'a str,
    /// The model volume: PersistentVolumeClaim name and mount path.
    pub model_claim: &'a str,
    pub model_mount: &'a str,
    /// Startup probe: period and failures allowed (loading weights over many nodes takes minutes).
    pub probe_period_s: u32,
    pub startup_failures: u32,
    pub liveness_failures: u32,
}

impl LeaderWorkerSet<'_> {
    fn pod(&self, command: &[String], leader: bool) -> Value {
        let mut requests = BTreeMap::new();
        requests.insert("cpu".to_string(), self.cpus.to_string());
        requests.insert(self.gpu_resource.to_string(), self.gpus_per_pod.to_string());
        let limits =
            BTreeMap::from([(self.gpu_resource.to_string(), self.gpus_per_pod.to_string())]);
        let mut container = json!({
            "name": "vllm",
            "image": self.image,
            "command": command,
            "resources": { "requests": requests, "limits": limits },
            "volumeMounts": [
                { "name": "models", "mountPath": self.model_mount, "readOnly": true },
                { "name": "dshm", "mountPath": "/dev/shm" },
            ],
        });
        if !self.env.is_empty() {
            container["env"] = json!(
                self.env
                    .iter()
                    .map(|(k, v)| json!({ "name": k, "value": v }))
                    .collect::<Vec<_>>()
            );
        }
        if leader {
            let probe = |failures: u32| {
                json!({
                    "httpGet": { "path": self.health_path, "port": self.port },
                    "periodSeconds": self.probe_period_s,
                    "failureThreshold": failures,
                })
            };
            container["ports"] =
                json!([{ "name": "http", "containerPort": self.port, "protocol": "TCP" }]);
            container["startupProbe"] = probe(self.startup_failures);
            container["readinessProbe"] = probe(1);
            container["livenessProbe"] = probe(self.liveness_failures);
        }
        let mut spec = json!({
            "containers": [container],
            "volumes": [
                { "name": "models", "persistentVolumeClaim": { "claimName": self.model_claim, "readOnly": true } },
                // vLLM's workers exchange tensors through shared memory; a container's default 64 MiB is too small.
                { "name": "dshm", "emptyDir": { "medium": "Memory" } },
            ],
        });
        if let Some(p) = &self.gpu_product {
            spec["nodeSelector"] = json!({ "nvidia.com/gpu.product": p });
        }
        json!({ "metadata": { "labels": { "app": self.name } }, "spec": spec })
    }

    /// The LeaderWorkerSet and its Service, as one YAML stream.
    pub(crate) fn manifest(&self) -> String {
        let lws = json!({
            "apiVersion": API_VERSION,
            "kind": "LeaderWorkerSet",
            "metadata": { "name": self.name, "labels": { "app": self.name } },
            "spec": {
                "replicas": self.replicas.max(1),
                "leaderWorkerTemplate": {
                    "size": self.size,
                    "restartPolicy": RESTART_POLICY,
                    "leaderTemplate": self.pod(&self.leader_command, true),
                    "workerTemplate": self.pod(&self.worker_command, false),
                },
            },
        });
        let service = json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": { "name": self.name, "labels": { "app": self.name } },
            "spec": {
                "selector": { SET_NAME_LABEL: self.name, WORKER_INDEX_LABEL: "0" },
                "ports": [{ "name": "http", "port": self.port, "targetPort": self.port, "protocol": "TCP" }],
            },
        });
        [lws, service]
            .iter()
            .map(|d| {
                optimizer_input::yaml::to_string(d).expect("a JSON value always renders as YAML")
            })
            .collect::<Vec<_>>()
            .join("---\n")
    }
}
