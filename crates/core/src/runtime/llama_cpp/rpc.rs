//! llama.cpp across machines with RPC (issue 28, item 4), as the pinned llama.cpp does it: each worker node runs
//! `rpc-server` over its GPUs (tools/rpc/rpc-server.cpp: `-H` host, `-p` port, `-d` devices, `-c` local tensor
//! cache), and the head node's llama-server adds them with `--rpc host:port,...` (common/arg.cpp
//! `add_rpc_devices`). Each remote GPU becomes a device `RPC<n>`, numbered across servers in `--rpc` order
//! (ggml/src/ggml-rpc/ggml-rpc.cpp `ggml_backend_rpc_add_server`), which llama.cpp's own device selection puts
//! before the local GPUs "to minimize network transfers" (src/llama.cpp `llama_model_load_from_file_impl`); the
//! plan writes that order out with `-dev` (after `--rpc`, whose handler registers the names `-dev` looks up) and
//! `-ts` over the same list, so `-ngl` layers split over remote and local GPUs by their memory.
//!
//! Memory per device is the llama.cpp memory model's for several GPUs, the remote ones included (weights and KV
//! per layer split, compute buffers per device): an RPC device allocates on the worker's GPU exactly what a local
//! one would. Speed is the layer pipeline's ([`super::topology::loads`]) plus the hand-offs over the fabric: the
//! head's scheduler copies the hidden state between backends, and between two servers it goes through the head
//! (`ggml_backend_rpc_buffer_cpy_tensor` copies only within one server): per step and per remote machine one
//! `RPC_CMD_SET_TENSOR` (sent without a reply) and one `RPC_CMD_GET_TENSOR` (a round trip), so three one-way
//! latencies and two transfers of the step's F32 hidden states, plus a round trip per copy between two GPUs of
//! one worker (`RPC_CMD_COPY_TENSOR`, the data staying on the worker) ([`handoff_seconds`]).
//!
//! Trade-off: the RPC plan is offered beside the one-node plan (its artifacts, memory and speed in the document)
//! rather than searched as a placement of its own, so a cluster plan's chosen settings stay the one-node
//! placement; the hand-off is priced on the fabric's one link at its stated figures, as TCP over it (an
//! RDMA build, `GGML_RPC_RDMA`, is faster, so the figure is a floor on speed).

use crate::emit::{Artifact, Provenance, Source};
use crate::perf::{self, Shape, collective};
use crate::runtime::Candidate;
use optimizer_memory::llama_cpp::{self as mem, GpuTarget, Machine};

use super::{LlamaCpp, Point};

/// rpc-server's default port (tools/rpc/rpc-server.cpp `rpc_server_params.port`), written out on both sides.
const RPC_PORT: u16 = 50052;

/// What the pinned rpc-server prints when it binds anywhere but 127.0.0.1 (tools/rpc/rpc-server.cpp `main`).
const RPC_SERVER_WARNING: &str = "Never expose the RPC server to an open network! This is an experimental feature and is not secure!";

/// Bytes per element of the hidden state handed between backends: ggml's layer outputs are F32.
const ACTIVATION_BYTES: u64 = 4;

/// Most devices one llama.cpp model spans: `llama_max_devices()` (src/llama.cpp) sizes `tensor_split`, which
/// `llama_model::load_tensors` reads for every device, so more would read past it.
const LLAMA_MAX_DEVICES: usize = 16;

/// The placeholder for worker `k`'s private address (1-based), which the plan cannot know.
fn worker_address(k: u32) -> String {
    format!("WORKER{k}_ADDRESS")
}

/// One worker's `rpc-server`: bound to its private address (never 0.0.0.0: the server has no authentication),
/// on [`RPC_PORT`], serving the named local devices, with the local tensor cache on so a restart of the head
/// does not resend the weights.
fn rpc_server_argv(address: &str, devices: &[String]) -> Vec<String> {
    vec![
        "rpc-server".into(),
        "-H".into(),
        address.into(),
        "-p".into(),
        RPC_PORT.to_string(),
        "-d".into(),
        devices.join(","),
        "-c".into(),
    ]
}

/// The head's device list: `per_worker` RPC devices for each of `workers` servers (`RPC0`, `RPC1`, ... in
/// `--rpc` order), then the local devices.
fn head_devices(workers: u32, per_worker: usize, local: &[String]) -> Vec<String> {
    (0..workers as usize * per_worker)
        .map(|i| format!("RPC{i}"))
        .chain(local.iter().cloned())
        .collect()
}

/// Seconds a step of `tokens` tokens spends handing hidden states of `hidden` elements to and from `remote`
/// machines of `per_machine` devices each over `link`: per machine a set (one way) and a get (a round trip) of the
/// hidden states, and between two devices of one server an `RPC_CMD_COPY_TENSOR` the head waits for (a round
/// trip without the data, which stays on the worker), see the module doc. The set and the asynchronous graph
/// command overlap in practice, so three latencies per machine bound it from above.
fn handoff_seconds(
    link: &collective::Link,
    remote: u32,
    per_machine: u32,
    tokens: u64,
    hidden: u64,
) -> f64 {
    if remote == 0 || link.bytes_per_s <= 0.0 {
        return 0.0;
    }
    let bytes = (tokens * hidden * ACTIVATION_BYTES) as f64;
    let copies = f64::from(per_machine.saturating_sub(1));
    f64::from(remote) * ((3.0 + 2.0 * copies) * link.latency_s + 2.0 * bytes / link.bytes_per_s)
}

/// llama-server's argv with remote devices: `--rpc` before `-dev` (whose names it registers), `-dev` over
/// `devices`, `-sm layer`, and the command line rebuilt.
fn with_rpc(mut a: Artifact, endpoints: &[String], devices: &[String]) -> Artifact {
    let mut argv = Vec::with_capacity(a.argv.len() + 4);
    let mut it = a.argv.into_iter();
    while let Some(x) = it.next() {
        match x.as_str() {
            "-dev" => {
                it.next();
                argv.extend(["--rpc".into(), endpoints.join(",")]);
                argv.extend(["-dev".into(), devices.join(",")]);
                argv.extend(["-sm".into(), "layer".into()]);
            }
            "-sm" => {
                it.next();
            }
            _ => argv.push(x),
        }
    }
    let mut env = a.env.clone();
    env.remove(super::launch::API_KEY_ENV);
    a.command = Some(crate::emit::shell_command(&env, &argv));
    a.argv = argv;
    a.name = "llama-server-rpc".into();
    a.description = format!(
        "the head node's llama-server with the workers' GPUs over RPC (start each rpc-server-node-N first): the model's layers split over {} devices by -ts; replace each WORKERn_ADDRESS with that worker's private address",
        devices.len()
    );
    a
}

/// The RPC plan for a cluster's nodes: what the document gets.
pub(crate) struct RpcPlan {
    pub artifacts: Vec<Artifact>,
    pub provenance: Provenance,
    pub warning: String,
}

impl LlamaCpp<'_> {
    /// Every layer on the GPUs of the head and the fewest workers that hold the model at the chosen candidate's
    /// context, KV type, micro-batch and sequences; `None` on one node, without the fabric's bandwidth, without
    /// GPUs, when the chosen plan already has every layer on the head's GPUs, or when no number of workers holds
    /// it.
    pub(super) fn rpc_plan(
        &self,
        c: &Candidate<Point>,
        serve: &super::launch::Serve,
    ) -> Option<RpcPlan> {
        let fleet = self.req.fleet;
        let p = &c.point;
        if fleet.nodes <= 1
            || self.gpus.is_empty()
            || (p.ngl >= self.all_layers() && p.cpu_moe == 0)
        {
            return None;
        }
        let fabric = self.req.overrides.fabric.as_ref()?;
        let link = collective::fabric_link(fabric, 1)?;
        let local: Vec<usize> = (0..self.gpus.len()).collect();
        let point = Point {
            ngl: self.all_layers(),
            cpu_moe: 0,
            gpus: local.clone(),
            ..p.clone()
        };
        (1..fleet.nodes).find_map(|workers| self.rpc_with(c, &point, workers, &link, serve))
    }

    fn rpc_with(
        &self,
        c: &Candidate<Point>,
        point: &Point,
        workers: u32,
        link: &collective::Link,
        serve: &super::launch::Serve,
    ) -> Option<RpcPlan> {
        use crate::units::gib;
        let fleet = self.req.fleet;
        let model = self.req.model;
        // Remote GPUs first, each a copy of the head's (the cluster's nodes are identical), then the head's own.
        let order: Vec<usize> = (0..=workers)
            .flat_map(|_| point.gpus.iter().copied())
            .collect();
        let local_names: Vec<String> = (0..self.gpus.len())
            .map(|i| super::launch::device_name(self.gpus[i].id.kind, i))
            .collect();
        let devices = head_devices(workers, self.gpus.len(), &local_names);
        if devices.len() > LLAMA_MAX_DEVICES {
            return None;
        }
        // `-ts` takes fewer than LLAMA_MAX_DEVICES proportions (common/arg.cpp: `split_arg.size() >=
        // llama_max_devices()` is refused); at exactly that many devices it is left out, and llama.cpp splits by
        // each device's free memory, the same proportions on identical idle GPUs.
        let ts_given = devices.len() < LLAMA_MAX_DEVICES;
        let split_mib: Vec<u64> = order
            .iter()
            .map(|&i| self.gpus[i].capacity_bytes >> 20)
            .collect();
        let machine = Machine {
            cpu_features: fleet.host.inventory.cpu.features.clone(),
            gpus: order
                .iter()
                .zip(&devices)
                .map(|(&i, name)| GpuTarget {
                    name: name.clone(),
                    free_bytes: self.gpus[i].capacity_bytes,
                    overhead_bytes: self.gpu_overhead,
                })
                .collect(),
        };
        let mut params = self.params(point, c.size);
        if ts_given {
            params.tensor_split = split_mib.iter().map(|&m| m as f64).collect();
        }
        let est = mem::estimate(model, &params, &machine).ok()?;
        let fits = est.devices.iter().enumerate().all(|(k, d)| {
            let (cap, reserve) = if k == 0 {
                (fleet.host.capacity_bytes, fleet.host.reserve_bytes)
            } else {
                let g = self.gpus[order[k - 1]];
                (g.capacity_bytes, g.reserve_bytes)
            };
            d.total_bytes <= cap.saturating_sub(reserve)
        });
        if !fits {
            return None;
        }
        // Speed: the layer pipeline over every device, then the hand-offs to and from each worker.
        let mut loads = super::topology::loads(model, &params, &machine, &est);
        let cells = f64::from(est.resolved.n_ctx.max(1));
        for (l, m) in loads.iter_mut().zip(&est.devices) {
            l.kv_bytes_per_cell = m.kv_cache_bytes as f64 / cells;
        }
        let pairs: Vec<_> = std::iter::once(fleet.host.perf(self.threads_gpu.0))
            .chain(order.iter().map(|&i| self.gpus[i].llama_cpp_perf()))
            .zip(loads)
            .collect();
        let w = self.workload();
        let pred = perf::predict(
            &pairs,
            Shape {
                prompt_tokens: w.prompt_tokens,
                generation_tokens: w.generation_tokens,
                concurrency: u64::from(point.parallel),
                ubatch: u64::from(point.ubatch),
            },
        );
        let hidden = model.hparams.embedding_length.unwrap_or(0);
        let per_machine = u32::try_from(self.gpus.len()).unwrap_or(u32::MAX);
        let step_s = handoff_seconds(
            link,
            workers,
            per_machine,
            u64::from(point.parallel),
            hidden,
        );
        let tpot_ms = pred.time_per_output_token_ms + step_s * 1e3;
        let decode = f64::from(point.parallel) * 1e3 / tpot_ms.max(f64::MIN_POSITIVE);
        let prompt_s = handoff_seconds(link, workers, per_machine, w.prompt_tokens.max(1), hidden);
        let ttft_ms = pred.time_to_first_token_ms + prompt_s * 1e3;

        let endpoints: Vec<String> = (1..=workers)
            .map(|k| format!("{}:{RPC_PORT}", worker_address(k)))
            .collect();
        let mut settings = self.settings(&Candidate {
            point: point.clone(),
            size: c.size,
            score: c.score,
            eval: c.eval.clone(),
        });
        settings.tensor_split = ts_given.then(|| split_mib.clone());
        let head = with_rpc(
            super::launch::llama_server(
                serve,
                &settings,
                &point
                    .gpus
                    .iter()
                    .map(|&i| self.gpus[i].id)
                    .collect::<Vec<_>>(),
            ),
            &endpoints,
            &devices,
        );
        let mut artifacts = vec![head];
        for k in 1..=workers {
            let argv = rpc_server_argv(&worker_address(k), &local_names);
            let mut env = std::collections::BTreeMap::new();
            if let Some(var) = super::launch::visible_devices_env(self.gpus[0].id.kind) {
                if var == "CUDA_VISIBLE_DEVICES" {
                    // NVML numbers GPUs in PCI bus order; this makes CUDA agree (as on the head).
                    env.insert("CUDA_DEVICE_ORDER".into(), "PCI_BUS_ID".into());
                }
                env.insert(
                    var.to_string(),
                    (0..self.gpus.len())
                        .map(|i| self.gpus[i].id.ordinal.to_string())
                        .collect::<Vec<_>>()
                        .join(","),
                );
            }
            artifacts.push(Artifact {
                name: format!("rpc-server-node-{k}"),
                description: format!(
                    "worker node {k}'s rpc-server (from a llama.cpp build with its RPC backend, CMake option GGML_RPC on) serving its {} GPUs to the head as {}; bind it to the worker's private address and never to a public one: RPC has no authentication (\"{RPC_SERVER_WARNING}\")",
                    self.gpus.len(),
                    devices[(k as usize - 1) * self.gpus.len()..k as usize * self.gpus.len()]
                        .join(", ")
                ),
                command: Some(crate::emit::shell_command(&env, &argv)),
                argv,
                env,
                files: Default::default(),
                resources: None,
            });
        }
        let per_device: Vec<String> = est
            .devices
            .iter()
            .enumerate()
            .map(|(k, d)| {
                format!(
                    "{} {:.2} GiB (weights {:.2}, KV {:.2}, compute {:.2})",
                    if k == 0 {
                        "host"
                    } else {
                        devices[k - 1].as_str()
                    },
                    gib(d.total_bytes),
                    gib(d.weights_bytes),
                    gib(d.kv_cache_bytes),
                    gib(d.compute_bytes)
                )
            })
            .collect();
        let detail = format!(
            "no one node's GPUs hold every layer, so the chosen plan keeps {} on the host; over RPC, {} worker node(s) add their GPUs to the head's: -ngl {} over {} devices, remote first as llama.cpp orders them, {}; memory per device by the llama.cpp memory model: {}; decode {:.1} tokens/s, {:.2} ms per output token ({:.3} ms of it hand-offs: per worker one set and one get of {} sequences' {}-wide F32 hidden state, and a copy round trip between each two of its GPUs, over {:.1} GB/s at {:.1} us one way), {:.0} ms to the first token, against the chosen plan's {:.1} tokens/s",
            if c.point.cpu_moe > 0 {
                format!("the routed experts of {} layers", c.point.cpu_moe)
            } else {
                format!("{} layers", self.all_layers().saturating_sub(c.point.ngl))
            },
            workers,
            point.ngl,
            devices.len(),
            if ts_given {
                format!(
                    "-ts {} (MiB of each GPU)",
                    split_mib
                        .iter()
                        .map(u64::to_string)
                        .collect::<Vec<_>>()
                        .join(",")
                )
            } else {
                format!(
                    "no -ts: the pinned -ts takes fewer than {LLAMA_MAX_DEVICES} proportions (common/arg.cpp), so llama.cpp splits the layers by each device's free memory (src/llama-model.cpp load_tensors), the same proportions on identical idle GPUs"
                )
            },
            per_device.join("; "),
            decode,
            tpot_ms,
            step_s * 1e3,
            point.parallel,
            hidden,
            link.bytes_per_s / 1e9,
            link.latency_s * 1e6,
            ttft_ms,
            c.eval.prediction.decode_tokens_per_s,
        );
        let mut warning = format!(
            "llama.cpp RPC (artifacts llama-server-rpc, rpc-server-node-N) is unauthenticated and unencrypted: keep every rpc-server on a private network reachable only from the head node; the pinned rpc-server itself warns \"{RPC_SERVER_WARNING}\""
        );
        if link.latency_s == 0.0 {
            warning.push_str(
                "; the cluster file gives no fabric latency_us, so its per-token hand-offs are priced by bandwidth alone",
            );
        }
        Some(RpcPlan {
            artifacts,
            provenance: Provenance {
                source: Source::Computed,
                detail,
            },
            warning,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_devices_come_first_numbered_across_servers() {
        let local = vec!["CUDA0".to_string(), "CUDA1".to_string()];
        assert_eq!(
            head_devices(2, 2, &local),
            ["RPC0", "RPC1", "RPC2", "RPC3", "CUDA0", "CUDA1"]
        );
    }

    #[test]
    fn a_handoff_is_a_set_and_a_get_per_worker_and_a_round_trip_per_copy_inside_it() {
        let link = collective::Link {
            kind: collective::LinkKind::Fabric,
            bytes_per_s: 50e9,
            latency_s: 2.7e-6,
        };
        // 4 tokens x 16,384 x 4 B = 262,144 B each way; one device per worker: no copies inside it.
        let s = handoff_seconds(&link, 1, 1, 4, 16_384);
        assert!((s - (3.0 * 2.7e-6 + 2.0 * 262_144.0 / 50e9)).abs() < 1e-15);
        // Two workers of 8 devices: 7 copies inside each, a round trip apiece.
        let s = handoff_seconds(&link, 2, 8, 4, 16_384);
        let one = (3.0 + 14.0) * 2.7e-6 + 2.0 * 262_144.0 / 50e9;
        assert!((s - 2.0 * one).abs() < 1e-15);
        assert_eq!(handoff_seconds(&link, 0, 8, 4, 16_384), 0.0);
    }

    #[test]
    fn rpc_server_binds_the_private_address_on_its_default_port() {
        let a = rpc_server_argv("WORKER1_ADDRESS", &["CUDA0".into(), "CUDA1".into()]);
        assert_eq!(
            a,
            [
                "rpc-server",
                "-H",
                "WORKER1_ADDRESS",
                "-p",
                "50052",
                "-d",
                "CUDA0,CUDA1",
                "-c"
            ]
        );
    }
}
