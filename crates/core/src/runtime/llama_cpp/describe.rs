//! What llama.cpp writes into the document for the chosen candidate (settings, topology, launch artifacts,
//! provenance) and what it suggests when nothing fits.

use std::collections::BTreeMap;

use super::quantize::largest_below;
use super::{CTX_STEP, LlamaCpp, Point, launch};
use crate::emit::{Provenance, Settings, Source, Stage, Strategy, Topology};
use crate::fleet::DeviceId;
use crate::profile::{Mode, Objective};
use crate::runtime::{Candidate, Described, Runtime};
use optimizer_memory::llama_cpp;
use optimizer_model::{GgmlType, ModelSpec};

impl LlamaCpp<'_> {
    /// The document's llama.cpp part for the chosen candidate: settings, topology, launch artifacts and the
    /// provenance of every value llama.cpp decided.
    pub(super) fn describe_chosen(&self, c: &Candidate<Point>) -> Described {
        let p = &c.point;
        let w = self.workload();
        let model = self.req.model;
        let settings = self.settings(c);
        let gpu_ids = self.device_ids(p);
        let mut prov: BTreeMap<String, Provenance> = BTreeMap::new();
        let mut put = |k: &str, source: Source, detail: String| {
            prov.insert(k.to_string(), Provenance { source, detail });
        };
        let ov = self.req.overrides;
        let per_seq = crate::runtime::context_provenance(ov, w, self.n_ctx_train, "llama.cpp");
        put("settings.context_per_sequence", per_seq.0, per_seq.1);
        put(
            "settings.context_length",
            Source::Computed,
            format!(
                "-c = {} tokens per sequence x {} sequences: llama-server divides -c evenly among its slots when -np is given (its KV cache is unified only when -np is auto, common/arg.cpp --kv-unified), so each conversation gets the whole per-sequence context; a unified cache would let one long conversation take cells the others were promised",
                c.size, p.parallel
            ),
        );
        // Fewer sequences than the workload's: the most that fit when one more does not, else the knee.
        let more = crate::runtime::Runtime::with_sequences(self, p, p.parallel.saturating_add(1));
        let memory_bound = more.is_some_and(|q| {
            crate::runtime::Runtime::evaluate(self, &q, c.size).is_ok_and(|e| !e.fits())
        });
        if p.parallel < self.n_par && memory_bound {
            put(
                "settings.parallel",
                Source::Computed,
                format!(
                    "the most sequences that fit at {} tokens each, up to workload {}'s {}: a throughput workload serves as many as fit here rather than move to a slower placement that holds them all",
                    c.size, w.id, w.concurrency
                ),
            );
        } else if ov.parallel.is_none() && p.parallel != self.n_par {
            put(
                "settings.parallel",
                Source::Computed,
                format!(
                    "the roofline knee: decode turns compute-bound at {:.1} sequences (FLOPs-to-bandwidth ratio), so {} reach the throughput of workload {}'s {} in less memory",
                    c.eval.knee, p.parallel, w.id, w.concurrency
                ),
            );
        } else if ov.parallel.is_some() {
            put(
                "settings.parallel",
                Source::User,
                format!("--parallel {}", self.n_par),
            );
        } else {
            put(
                "settings.parallel",
                Source::Profile,
                format!("workload {} concurrency {}", w.id, w.concurrency),
            );
        }
        let threads = settings.threads;
        let gpu_threads = threads == self.threads_gpu.0 && threads != self.threads_all.0;
        let threads_detail = if gpu_threads {
            self.threads_gpu.1.clone()
        } else if p.strategy == Strategy::Cpu || p.gpus.is_empty() {
            self.threads_all.1.clone()
        } else if p.ngl < self.all_layers() || p.cpu_moe > 0 {
            format!(
                "the host computes the layers (or experts) left on it, so it gets the CPU threads: {}",
                self.threads_all.1
            )
        } else {
            self.threads_gpu.1.clone()
        };
        put(
            "settings.threads",
            if gpu_threads {
                Source::Heuristic
            } else {
                Source::Rule
            },
            threads_detail,
        );
        put(
            "settings.flash_attention",
            if self.fa_rule.is_some() {
                Source::Rule
            } else {
                Source::Heuristic
            },
            self.fa_rule
                .clone()
                .unwrap_or_else(|| "CPU backend: llama.cpp resolves -fa auto to on".into()),
        );
        put(
            "settings.precision",
            if self.precision_rule.is_some() {
                Source::Rule
            } else {
                Source::Heuristic
            },
            self.precision_rule
                .clone()
                .unwrap_or_else(|| "CPU backend computes in fp32".into()),
        );
        put(
            "settings.ubatch_size",
            if self.ubatches.len() > 1 {
                Source::Computed
            } else {
                Source::Heuristic
            },
            if self.ubatches.len() > 1 {
                "the best-scoring of 512, 1024, 2048 for throughput".into()
            } else {
                "llama.cpp's default micro-batch for latency workloads".into()
            },
        );
        put(
            "settings.gpu_layers",
            if ov.gpu_layers.is_some() {
                Source::User
            } else {
                Source::Computed
            },
            "the placement that scores best and fits, by the llama.cpp memory model".into(),
        );
        let host = &self.req.fleet.host;
        // A reserve widened by an observed peak is measured; one from the rule tables alone is a rule.
        let source = |rules: &[String]| {
            if rules.iter().any(|r| r.starts_with("store row")) {
                Source::Measured
            } else {
                Source::Rule
            }
        };
        if !host.reserve_rules.is_empty() {
            put(
                "memory.reserve.cpu",
                source(&host.reserve_rules),
                host.reserve_rules.join(", "),
            );
        }
        for &i in &p.gpus {
            let g = self.gpus[i];
            if g.reserve_rules.iter().any(|r| r.starts_with("store row")) {
                put(
                    &format!("memory.reserve.{}", g.id),
                    source(&g.reserve_rules),
                    g.reserve_rules.join(", "),
                );
            }
        }
        for &i in &p.gpus {
            if let Some(note) = &self.gpus[i].capacity_note {
                put(
                    &format!("memory.capacity.{}", self.gpus[i].id),
                    Source::Profile,
                    note.clone(),
                );
            }
        }
        let fleet = self.req.fleet;
        let chosen_cpu = fleet.host.perf(threads);
        put(
            "hardware.cpu.profile",
            Source::Heuristic,
            format!(
                "{} chosen by architecture, SIMD features and {} physical cores; at {} threads: {:.0} GFLOPS FP32 peak, {:.1} GB/s memory bandwidth",
                fleet.host.class_id(),
                fleet.host.inventory.cpu.physical_cores,
                threads,
                chosen_cpu.flops / 1e9,
                chosen_cpu.bandwidth_bytes_per_s / 1e9
            ),
        );
        // Layer ranges per device, exactly as llama.cpp assigns them (from the last layer, split by free memory).
        let n_layer = self.n_layer;
        let weights: Vec<f64> = p
            .gpus
            .iter()
            .map(|&i| self.gpus[i].capacity_bytes as f64)
            .collect();
        let assignment = llama_cpp::layer_devices(n_layer, p.ngl, &weights);
        let range = |dev: Option<usize>| {
            let blocks: Vec<u32> = (0..n_layer)
                .filter(|&il| assignment[il as usize] == dev)
                .collect();
            blocks.first().zip(blocks.last()).map(|(a, b)| [*a, *b])
        };
        let output_dev = assignment[n_layer as usize];
        let mut stages = vec![Stage {
            device: DeviceId::HOST.to_string(),
            layers: range(None),
            output_layer: output_dev.is_none(),
        }];
        for (k, id) in gpu_ids.iter().enumerate() {
            stages.push(Stage {
                device: id.to_string(),
                layers: range(Some(k)),
                output_layer: output_dev == Some(k),
            });
        }
        let holding = stages
            .iter()
            .filter(|s| s.layers.is_some() || s.output_layer)
            .count() as u32;
        put(
            "topology",
            Source::Computed,
            if fleet.nodes > 1 {
                format!(
                    "llama-server is one process on one node: each of the {} identical nodes runs a replica of this plan behind a load balancer, and every figure in performance is one replica's",
                    fleet.nodes
                )
            } else {
                "one llama-server process; its layers run on the stages in order (-sm layer)".into()
            },
        );
        let topology = Topology {
            nodes: fleet.nodes,
            data_parallel: fleet.nodes,
            tensor_parallel: 1,
            pipeline_parallel: holding.max(1),
            stages,
        };
        // llama-server opens a split model by its first shard and finds the others itself.
        let model_path = match model.files.as_slice() {
            [first, _, ..] => first.path.display().to_string(),
            _ => self.req.model_path.to_string(),
        };
        // Requests are what the process needs on the host: the plan's host memory, not the OS reserve.
        let host_bytes = c.eval.memory.first().map_or(0, |d| d.total_bytes);
        let alias = model_alias(model, &model_path);
        let pooling = (w.mode == Mode::Embedding).then(|| {
            let key = format!("{}.pooling_type", model.architecture);
            // `NONE` (0) pools nothing, one vector per token: an embedding plan needs one per input.
            match super::arch::declared_pooling(model).and_then(launch::pooling_name) {
                Some(p) => {
                    put(
                        "launch.llama-server.pooling",
                        Source::Computed,
                        format!("--pooling {p}: the model's GGUF {key}"),
                    );
                    p
                }
                None => {
                    put(
                        "launch.llama-server.pooling",
                        Source::Heuristic,
                        format!(
                            "--pooling {}: the model's GGUF declares no {key} (or NONE); mean pooling is the sentence-transformers default",
                            launch::DEFAULT_POOLING
                        ),
                    );
                    launch::DEFAULT_POOLING
                }
            }
        });
        let serve = launch::Serve {
            model_path: &model_path,
            alias: &alias,
            pooling,
            port: launch::PORT,
            rope: launch::rope_extension(model, settings.context_per_sequence),
            draft: self
                .req
                .overrides
                .draft
                .as_ref()
                .map(|d| launch::DraftLaunch {
                    model_path: &d.path,
                    gpu_layers: (!p.gpus.is_empty()).then(|| super::draft::all_layers(&d.spec)),
                }),
            mmproj: self.req.overrides.mmproj.as_ref().map(|m| m.path.as_str()),
        };
        let container_model = crate::runtime::kubernetes::model_in_container(&model_path);
        let container_draft = self
            .req
            .overrides
            .draft
            .as_ref()
            .map(|d| crate::runtime::kubernetes::model_in_container(&d.path));
        let container_mmproj = self
            .req
            .overrides
            .mmproj
            .as_ref()
            .map(|m| crate::runtime::kubernetes::model_in_container(&m.path));
        let in_container = launch::llama_server(
            &launch::Serve {
                model_path: &container_model,
                draft: serve
                    .draft
                    .zip(container_draft.as_deref())
                    .map(|(d, path)| launch::DraftLaunch {
                        model_path: path,
                        ..d
                    }),
                mmproj: container_mmproj.as_deref(),
                ..serve
            },
            &settings,
            &gpu_ids,
        );
        let gpu_names: Vec<&str> = p.gpus.iter().map(|&i| self.gpus[i].name.as_str()).collect();
        let replicated = self.replica_gpus(c, host_bytes, threads);
        let pods = replicated
            .as_ref()
            .map_or(1, |(g, _)| u32::try_from(g.len()).unwrap_or(u32::MAX));
        let mut launch = vec![
            launch::llama_server(&serve, &settings, &gpu_ids),
            launch::ollama(&model_path, &settings),
            launch::kubernetes(
                &in_container,
                host_bytes,
                threads,
                &gpu_ids,
                &gpu_names,
                pods,
                self.req.overrides.image.as_deref(),
            ),
        ];
        if let Some((replica_gpus, why)) = replicated {
            put("launch.llama-server-replicas", Source::Computed, why);
            launch.push(launch::replicas(&serve, &settings, &replica_gpus));
        }
        let mut warnings = self.warnings.clone();
        // Across a cluster's nodes with llama.cpp RPC, when one node's GPUs do not hold every layer (`rpc.rs`).
        if let Some(r) = self.rpc_plan(c, &serve) {
            put("topology.rpc", r.provenance.source, r.provenance.detail);
            launch.extend(r.artifacts);
            warnings.push(r.warning);
        }
        if let Some(d) = &self.req.overrides.draft {
            let per_device: Vec<String> = c
                .eval
                .memory
                .iter()
                .filter(|m| m.components.draft_bytes > 0)
                .map(|m| {
                    format!(
                        "{} {:.2} GiB",
                        m.device,
                        crate::units::gib(m.components.draft_bytes)
                    )
                })
                .collect();
            put(
                "launch.model_draft",
                Source::User,
                format!(
                    "--model-draft {}: llama-server -md with {}, f16 KV at the target's {} tokens (common/speculative.cpp common_base_params_to_speculative, common_speculative_init_result); draft memory {}",
                    d.path,
                    if p.gpus.is_empty() {
                        "every layer on the host (-dev none)".to_string()
                    } else {
                        format!(
                            "-ngld {} (every layer on the planned GPUs, split as -ts)",
                            super::draft::all_layers(&d.spec)
                        )
                    },
                    settings.context_length,
                    per_device.join(", ")
                ),
            );
            warnings.push(format!(
                "draft model {}: the predicted speed does not credit speculative decoding (its gain depends on the acceptance rate, which only a measurement gives); the Ollama Modelfile runs without the draft; the Kubernetes manifest expects the draft next to the model",
                d.path
            ));
        }
        if let Some(m) = &self.req.overrides.mmproj {
            let on: Vec<String> = c
                .eval
                .memory
                .iter()
                .filter(|d| d.components.mmproj_bytes > 0)
                .map(|d| {
                    format!(
                        "{} {:.2} GiB",
                        d.device,
                        crate::units::gib(d.components.mmproj_bytes)
                    )
                })
                .collect();
            // The image-token budget: how many images of the projector's size one sequence's context holds.
            let budget = match m.spec.as_deref().and_then(super::mmproj::image_tokens) {
                Some(t) => format!(
                    "; an image becomes {}{} tokens (tools/mtmd/clip.cpp clip_n_output_tokens), so {} images fill one sequence's {} tokens",
                    if t.dynamic { "up to " } else { "" },
                    t.per_image,
                    super::mmproj::images_per_context(t, u64::from(c.size)),
                    c.size
                ),
                None => {
                    "; the tokens per image are not derived for this projector type".to_string()
                }
            };
            put(
                "launch.mmproj",
                Source::User,
                format!(
                    "--mmproj {}: the projector's weights ({}) on {}, the device the engine gives it (common/arg.cpp common_params_parse: it follows -dev's first entry; tools/mtmd/clip.cpp clip_ctx){budget}",
                    m.path,
                    on.join(", "),
                    if p.gpus.is_empty() {
                        "the host (-dev none)"
                    } else {
                        "the first planned GPU"
                    }
                ),
            );
            warnings.push(super::mmproj::compute_gap_warning(&m.path));
        }
        warnings.extend(super::arch::embedding_warning(model, w));
        warnings.extend(c.eval.notes.iter().cloned());
        Described {
            settings: Settings::LlamaCpp(settings),
            topology,
            devices: std::iter::once(DeviceId::HOST)
                .chain(gpu_ids)
                .map(|d| d.to_string())
                .collect(),
            launch,
            provenance: prov,
            warnings,
            training: None,
        }
    }

    /// The GPUs of a machine that each hold a replica of a one-GPU plan, the planned one first, and why; none
    /// unless the plan optimises throughput (the workload's objective, or `--objective throughput`) and at least
    /// two fit. A GPU holds a replica when it is the same product as the planned one with room for the plan's GPU
    /// bytes above its reserve; the host must hold every replica's host bytes above its reserve and run every
    /// replica's threads on its physical cores.
    fn replica_gpus(
        &self,
        c: &Candidate<Point>,
        host_bytes: u64,
        threads: u32,
    ) -> Option<(Vec<DeviceId>, String)> {
        let p = &c.point;
        if self.req.objective != Objective::Throughput || p.gpus.len() != 1 {
            return None;
        }
        let planned = self.gpus[p.gpus[0]];
        let need = c
            .eval
            .memory
            .iter()
            .find(|m| m.device == planned.id.to_string())?
            .total_bytes;
        let gpus: Vec<DeviceId> = std::iter::once(planned.id)
            .chain(
                self.gpus
                    .iter()
                    .filter(|g| {
                        g.id != planned.id
                            && g.id.kind == planned.id.kind
                            && g.name == planned.name
                            && need <= g.capacity_bytes.saturating_sub(g.reserve_bytes)
                    })
                    .map(|g| g.id),
            )
            .collect();
        let host = &self.req.fleet.host;
        let by_memory = host
            .capacity_bytes
            .saturating_sub(host.reserve_bytes)
            .checked_div(host_bytes)
            .unwrap_or(u64::MAX);
        let cores = host.inventory.cpu.physical_cores;
        let by_threads = cores.checked_div(threads.max(1)).unwrap_or(0);
        let n = (gpus.len() as u64)
            .min(by_memory)
            .min(u64::from(by_threads)) as usize;
        (n >= 2).then(|| {
            (
                gpus[..n].to_vec(),
                format!(
                    "workload {} is throughput-bound and one {} holds the plan ({need} bytes): the machine holds {n} replicas ({} such GPUs with room; host memory for {by_memory}, {cores} physical cores for {by_threads} at {threads} threads); every figure in performance is one replica's",
                    self.workload().id,
                    planned.name,
                    gpus.len()
                ),
            )
        })
    }

    /// The smallest changes that would make the nearest candidate fit. Each flag change is checked before it is
    /// offered: the nearest candidate's placement re-evaluated with the changed knob fits, so the re-plan with the
    /// flags (`(resolve FLAGS)`, docs/resolve.md) has at least that candidate.
    pub(super) fn suggest(
        &self,
        near: &Candidate<Point>,
        _all: &[Candidate<Point>],
    ) -> Vec<String> {
        let model = self.req.model;
        use crate::units::gib;
        let overflow = near.eval.overflow;
        if near.eval.memory.is_empty() {
            // The memory model refused the candidate's flags: there is no figure to quote (it was 2^64 bytes).
            return vec![format!(
                "the nearest configuration ({}) cannot be sized: {}",
                self.label(near),
                near.eval.notes.join("; ")
            )];
        }
        let mut s = vec![format!(
            "the nearest configuration ({}) needs {:.2} GiB more on its fullest device",
            self.label(near),
            gib(overflow)
        )];
        let fits = |p: &Point, ctx: u32| self.evaluate(p, ctx).is_ok_and(|e| e.fits());
        // A shorter context: the longest multiple of the context step below the nearest one that fits (memory
        // grows with the context, so the first from the top is the longest).
        let shorter = largest_below(1, near.size.div_ceil(CTX_STEP), |k| {
            fits(&near.point, k * CTX_STEP)
        })
        .map(|k| k * CTX_STEP);
        if let Some(c) = shorter {
            s.push(format!(
                "a shorter context: {c} tokens per sequence instead of {} (resolve -c {c})",
                near.size
            ));
        }
        // Fewer sequences: the most below the nearest candidate's count that fit at its context.
        let fewer = largest_below(1, near.point.parallel, |n| {
            fits(
                &Point {
                    parallel: n,
                    ..near.point.clone()
                },
                near.size,
            )
        });
        if let Some(n) = fewer {
            s.push(format!(
                "fewer sequences: {n} instead of {} at {} tokens each (resolve --parallel {n})",
                near.point.parallel, near.size
            ));
        }
        // A pinned -ngl: the most layers on the GPUs that fit, the rest on the host (the hybrid rungs the search
        // climbs when -ngl is not pinned; 0 is the CPU plan).
        if self.req.overrides.gpu_layers.is_some() && near.point.ngl > 0 {
            let order = self.gpus_by_capacity();
            let rung = |ngl: u32| Point {
                strategy: if ngl == 0 {
                    Strategy::Cpu
                } else {
                    Strategy::Hybrid
                },
                gpus: if ngl == 0 { Vec::new() } else { order.clone() },
                ngl,
                cpu_moe: 0,
                ..near.point.clone()
            };
            if let Some(n) = (0..near.point.ngl.min(self.all_layers()))
                .rev()
                .find(|&n| fits(&rung(n), near.size))
            {
                s.push(format!(
                    "fewer layers on the GPUs: {n} instead of {} (resolve --n-gpu-layers {n})",
                    near.point.ngl
                ));
            }
        }
        let kv: u64 = near
            .eval
            .memory
            .iter()
            .map(|d| d.components.kv_cache_bytes)
            .sum();
        // A q8_0 KV cache on both K and V, offered only where llama-server takes it (flash attention on: a
        // quantized V cache needs it) and only when the nearest candidate re-evaluated with it fits.
        let wide_kv = matches!(
            near.point.kv,
            GgmlType::F16 | GgmlType::BF16 | GgmlType::F32
        );
        if self.fa
            && wide_kv
            && let Ok(e) = self.evaluate(
                &Point {
                    kv: GgmlType::Q8_0,
                    ..near.point.clone()
                },
                near.size,
            )
            && e.fits()
        {
            let kv_q8: u64 = e.memory.iter().map(|d| d.components.kv_cache_bytes).sum();
            s.push(format!(
                "a q8_0 KV cache (-ctk q8_0 -ctv q8_0): {:.2} GiB of KV cache instead of {:.2} GiB, which fits (resolve --kv-type q8_0)",
                gib(kv_q8),
                gib(kv)
            ));
        }
        // llama.cpp moves layers between the GPUs and the host, so a quantization fits when the whole plan fits
        // the devices together: its weights shrink with the bits per weight, the KV cache and buffers stay. Only
        // types below the model's own bits per weight are named (a Q4 file is never told to become Q5).
        let need: u64 = near.eval.memory.iter().map(|d| d.total_bytes).sum();
        let room: u64 = near
            .eval
            .memory
            .iter()
            .map(|d| d.capacity_bytes.saturating_sub(d.reserve_bytes))
            .sum();
        let weights: u64 = near
            .eval
            .memory
            .iter()
            .map(|d| d.components.weights_bytes)
            .sum();
        let deficit = need.saturating_sub(room);
        let bpw = model.bits_per_weight();
        if let Some((q, total, _)) =
            super::quantize::smallest_change(bpw, weights, model.tensor_bytes(), deficit)
                .filter(|_| deficit > 0)
        {
            s.push(format!(
                "another model file, a smaller quantization: {} (about {:.2} bits per weight, from {bpw:.2}) takes about {:.2} GiB of weights instead of {:.2} GiB, which with this plan's KV cache and buffers fits the {:.2} GiB the devices hold together (llama-quantize MODEL-F16.gguf OUT.gguf {}, then -m OUT.gguf)",
                q.name,
                q.bits_per_weight,
                gib(total),
                gib(model.tensor_bytes()),
                gib(room),
                q.name
            ));
        }
        s.push(format!(
            "or hardware with {:.2} GiB more free memory on the fullest device",
            gib(overflow)
        ));
        s
    }
}

/// The name llama-server serves the model under: the GGUF's `general.name`, else the file name without
/// `.gguf` (and without a split suffix `-00001-of-00003`).
fn model_alias(model: &ModelSpec, model_path: &str) -> String {
    if let Some(n) = model
        .name
        .as_deref()
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        return n.to_string();
    }
    let stem = std::path::Path::new(model_path).file_stem().map_or_else(
        || model_path.to_string(),
        |s| s.to_string_lossy().into_owned(),
    );
    match stem.rsplit_once("-of-") {
        Some((head, n)) if n.len() == 5 && n.bytes().all(|b| b.is_ascii_digit()) => {
            head.rsplit_once('-').map_or(head, |(h, _)| h).to_string()
        }
        _ => stem,
    }
}

#[cfg(test)]
mod tests {
    use super::model_alias;
    use optimizer_testkit::gguf_builder::{LlamaShape, synthetic_llama, write_sparse};

    #[test]
    fn the_alias_is_the_gguf_name_else_the_file_stem_without_its_split_suffix() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        write_sparse(&synthetic_llama(LlamaShape::LLAMA3_8B), &path).unwrap();
        let mut spec = optimizer_model::load(&path).unwrap();
        assert_eq!(model_alias(&spec, "x.gguf"), "synthetic llama");
        spec.name = None;
        assert_eq!(
            model_alias(&spec, "/m/Qwen2.5-7B-Q4_K_M.gguf"),
            "Qwen2.5-7B-Q4_K_M"
        );
        assert_eq!(
            model_alias(&spec, "/m/llama-70b-q4-00001-of-00003.gguf"),
            "llama-70b-q4"
        );
        spec.name = Some("  ".into());
        assert_eq!(model_alias(&spec, "a-of-b.gguf"), "a-of-b");
    }
}
