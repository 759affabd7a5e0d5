//! vLLM's settings and plan document: the `vllm serve` settings of a candidate and the description of the
//! chosen plan with the provenance of every setting, its topology, launch artifacts and warnings.

use crate::emit::{Provenance, Settings, Source, Stage, Topology, VllmSettings};
use crate::fleet::PCIE3_X16_BYTES_PER_S;
use crate::runtime::{Candidate, Described};
use optimizer_memory::vllm::{self as mem, KvCacheDtype};
use std::collections::BTreeMap;

use super::admission::{self, SeqBound};
use super::choose::{attention_backend, utilization};
use super::{EAGER_LAUNCH_PER_LAYER_S, PlanMemory, Point, Vllm, dtype_name, launch};

impl Vllm<'_> {
    pub(super) fn settings(&self, c: &Candidate<Point>) -> (VllmSettings, PlanMemory) {
        let p = &c.point;
        let m = self
            .memory(p, c.size)
            .expect("a candidate's memory was evaluated before");
        let torch_bytes = m
            .non_kv
            .saturating_sub(m.nk.non_torch_bytes)
            .saturating_add(m.kv_alloc);
        let util = utilization(torch_bytes, m.cap, m.nk.non_torch_bytes, m.total);
        let kv_name = match p.kv {
            KvCacheDtype::Auto => "auto",
            KvCacheDtype::Fp8 => "fp8",
        };
        (
            VllmSettings {
                tensor_parallel_size: p.tp,
                replicas_per_node: p.replicas,
                dtype: dtype_name(self.dtype).into(),
                quantization: self.quantization.as_ref().map(|q| q.0.clone()),
                kv_cache_dtype: kv_name.into(),
                block_size: mem::DEFAULT_BLOCK_SIZE,
                max_model_len: c.size,
                max_num_seqs: p.max_num_seqs,
                max_num_batched_tokens: self.max_num_batched_tokens.max(p.max_num_seqs),
                gpu_memory_utilization: util,
                kv_cache_memory_bytes: m.kv_alloc,
                kv_cache_blocks: m.capacity.num_blocks,
                kv_cache_tokens: m.capacity.tokens,
                max_concurrency: crate::emit::round3(m.capacity.max_concurrency),
                enforce_eager: p.enforce_eager,
                attention_backend: attention_backend(
                    self.req.model,
                    self.gpus[p.gpus[0]].compute_capability,
                    p.kv,
                )
                .into(),
                pipeline_parallel_size: (p.pp > 1).then_some(p.pp),
                nnodes: (p.nnodes > 1).then_some(p.nnodes),
                data_parallel_size: p.ep.then_some(p.dp),
                data_parallel_size_local: p.ep.then(|| p.dp / p.nnodes.max(1)),
                enable_expert_parallel: p.ep.then_some(true),
                ray_backend: (self.req.overrides.ray && p.nnodes > 1).then_some(if p.ep {
                    crate::emit::RayBackend::DataParallel
                } else {
                    crate::emit::RayBackend::DistributedExecutor
                }),
            },
            m,
        )
    }

    pub(super) fn describe_chosen(&self, c: &Candidate<Point>) -> Described {
        let p = &c.point;
        let w = self.workload();
        let fleet = self.req.fleet;
        let (settings, m) = self.settings(c);
        let mut prov: BTreeMap<String, Provenance> = BTreeMap::new();
        let mut put = |k: &str, source: Source, detail: String| {
            prov.insert(k.to_string(), Provenance { source, detail });
        };
        let ov = self.req.overrides;
        use crate::units::gib;
        put(
            "settings.tensor_parallel_size",
            if ov.tensor_parallel.is_some() {
                Source::User
            } else {
                Source::Computed
            },
            format!(
                "{}; the smallest size whose weights ({:.2} GiB per GPU: {:.2} GiB split over the ranks, {:.2} GiB replicated on each) and KV cache fit, by the vLLM {} memory model",
                self.tp_why,
                gib(m.nk.weights.per_rank_bytes),
                gib(m.nk.weights.sharded_bytes),
                gib(m.nk.weights.replicated_bytes),
                mem::VERSION
            ),
        );
        put(
            "settings.replicas_per_node",
            Source::Computed,
            if p.replicas > 1 {
                format!(
                    "throughput workload {}: the node's {} GPUs run {} replicas of tensor parallel {} (no communication between them) and share its {} sequences",
                    w.id,
                    self.gpus.len(),
                    p.replicas,
                    p.tp,
                    self.concurrency
                )
            } else {
                format!(
                    "one replica for a {:?} workload; the node's other GPUs stay free",
                    self.req.objective
                )
            },
        );
        put("settings.dtype", Source::Rule, self.dtype_why.clone());
        if let Some((_, why)) = &self.quantization {
            put("settings.quantization", Source::Computed, why.clone());
        }
        let per_seq = crate::runtime::context_provenance(ov, w, self.n_ctx_train, "vLLM");
        put("settings.max_model_len", per_seq.0, per_seq.1);
        let (why_seqs, seq_warning) = self.seqs_provenance(c, &m);
        put(
            "settings.max_num_seqs",
            match p.seqs_bound {
                SeqBound::Pinned => Source::User,
                SeqBound::Workload => Source::Profile,
                SeqBound::KvPool | SeqBound::Sla => Source::Computed,
            },
            why_seqs,
        );
        put(
            "settings.max_num_batched_tokens",
            Source::Rule,
            self.batched_why.clone(),
        );
        put(
            "settings.kv_cache_memory_bytes",
            Source::Computed,
            format!(
                "every byte left per GPU: {:.2} GiB free - {:.2} GiB margin - {:.2} GiB weights - {:.2} GiB non-torch - {:.2} GiB sampler buffers ({} sequence slots) - {:.2} GiB profiling peak ({} sampler) - {:.2} GiB CUDA graphs, in whole blocks of {} bytes; vLLM starts with at least {:.2} GiB here, one request of {} tokens and the null block (vllm/v1/core/kv_cache_planning.py get_kv_cache_configs, _check_enough_kv_cache_memory)",
                gib(m.cap),
                gib(m.reserve),
                gib(m.nk.weights.per_rank_bytes),
                gib(m.nk.non_torch_bytes),
                gib(m.nk.runner_buffers_bytes),
                p.max_num_seqs,
                gib(m.nk.activation_peak_bytes),
                m.nk.sampler.name(),
                gib(m.nk.cuda_graph_bytes),
                m.kv.bytes_per_block,
                gib(admission::admission_bytes(&m.kv).unwrap_or(u64::MAX)),
                c.size
            ),
        );
        put(
            "settings.max_concurrency",
            Source::Computed,
            format!(
                "{} blocks / {} blocks per request of {} tokens: vLLM logs \"GPU KV cache size: {} tokens, Maximum concurrency for {} tokens per request: {:.2}x\" (vllm/v1/core/kv_cache_utils.py get_max_concurrency_for_kv_cache_config, update_kv_cache_capacity)",
                m.capacity.num_blocks,
                m.kv.blocks_per_request,
                c.size,
                thousands(m.capacity.tokens),
                thousands(u64::from(c.size)),
                m.capacity.max_concurrency
            ),
        );
        put(
            "settings.kv_cache_tokens",
            Source::Computed,
            format!(
                "{} blocks x {} tokens (vllm/v1/core/kv_cache_utils.py get_num_blocks: bytes // page size of all layers)",
                m.capacity.num_blocks,
                mem::DEFAULT_BLOCK_SIZE
            ),
        );
        put(
            "settings.gpu_memory_utilization",
            Source::Computed,
            format!(
                "the plan's {:.2} GiB per GPU over its {:.2} GiB total, rounded up to 0.01 and at most the free share: vLLM checks at start-up that this share is free (vllm/v1/worker/utils.py request_memory) and, given --kv-cache-memory-bytes, sizes nothing else by it",
                gib(m.non_kv.saturating_add(m.kv_alloc)),
                gib(m.total)
            ),
        );
        put(
            "settings.enforce_eager",
            Source::Computed,
            if p.enforce_eager {
                format!(
                    "CUDA graphs ({:.2} GiB) do not fit beside the KV cache the workload needs; eager mode launches each kernel from Python, about {:.1} ms more per decode step (heuristic: {} µs per block)",
                    gib(self
                        .memory(
                            &Point {
                                enforce_eager: false,
                                ..p.clone()
                            },
                            c.size
                        )
                        .map_or(0, |m| m.nk.cuda_graph_bytes)),
                    EAGER_LAUNCH_PER_LAYER_S * f64::from(self.n_layer) * 1e3,
                    EAGER_LAUNCH_PER_LAYER_S * 1e6
                )
            } else {
                "CUDA graphs fit and make decode faster (vLLM's default)".into()
            },
        );
        put(
            "settings.attention_backend",
            Source::Rule,
            "vLLM 0.33's first CUDA backend for this compute capability and KV type (vllm/platforms/cuda.py _get_backend_priorities); vLLM selects it itself, so it is not pinned".into(),
        );
        put(
            "settings.block_size",
            Source::Rule,
            "vLLM's default KV block size on CUDA".into(),
        );
        for (k, why) in &self.kv_types {
            if *k == p.kv {
                put(
                    "settings.kv_cache_dtype.allowed",
                    Source::Profile,
                    why.clone(),
                );
            }
        }
        let gpu_ids: Vec<String> = p
            .gpus
            .iter()
            .map(|&i| self.gpus[i].id.to_string())
            .collect();
        let stages: Vec<Stage> = if p.pp > 1 {
            super::multinode::pp_partition(self.n_layer, p.pp)
                .iter()
                .enumerate()
                .flat_map(|(node, &(s, e))| {
                    let last = node + 1 == p.pp as usize;
                    gpu_ids.iter().map(move |d| Stage {
                        device: format!("node{node}/{d}"),
                        layers: Some([s, e - 1]),
                        output_layer: last,
                    })
                })
                .collect()
        } else if p.nnodes > 1 {
            (0..p.nnodes)
                .flat_map(|node| {
                    gpu_ids.iter().map(move |d| Stage {
                        device: format!("node{node}/{d}"),
                        layers: Some([0, self.n_layer - 1]),
                        output_layer: true,
                    })
                })
                .collect()
        } else {
            gpu_ids
                .iter()
                .map(|d| Stage {
                    device: d.clone(),
                    layers: Some([0, self.n_layer - 1]),
                    output_layer: true,
                })
                .collect()
        };
        let link = if p.tp > 1 {
            let g = self.gpus[p.gpus[0]];
            match (g.nvlink_bytes_per_s, g.link_bytes_per_s) {
                (Some(b), _) => format!("NVLink, {:.0} GB/s per direction", b / 1e9),
                (None, Some(b)) => format!("PCIe, {:.1} GB/s per direction", b / 1e9),
                (None, None) => format!(
                    "PCIe (assumed 3.0 x16, {:.2} GB/s)",
                    PCIE3_X16_BYTES_PER_S / 1e9
                ),
            }
        } else {
            String::new()
        };
        if p.nnodes <= 1 {
            put(
                "topology",
                Source::Computed,
                format!(
                    "{} replica(s) of one vllm serve process per node{}; every layer is split over the tensor-parallel group{}",
                    p.replicas,
                    if fleet.nodes > 1 {
                        format!(" on each of {} nodes", fleet.nodes)
                    } else {
                        String::new()
                    },
                    if p.tp > 1 {
                        format!(", with two all-reduces per layer over {link}")
                    } else {
                        String::new()
                    }
                ),
            );
        }
        if p.pp > 1 {
            self.pipeline_provenance(c, &mut prov);
        } else if p.nnodes > 1 {
            self.across_provenance(c, &mut prov);
        }
        if p.nnodes > 1 {
            self.layout_alternatives(c, &mut prov);
        }
        let topology = Topology {
            nodes: fleet.nodes,
            data_parallel: if p.nnodes > 1 {
                fleet.nodes / p.nnodes * p.dp.max(1)
            } else {
                fleet.nodes.saturating_mul(p.replicas)
            },
            tensor_parallel: p.tp,
            pipeline_parallel: p.pp.max(1),
            stages,
        };
        let model_dir = launch::model_dir(self.req.model, self.req.model_path);
        let per_node = if p.nnodes > 1 {
            self.gpus.len()
        } else {
            (p.tp * p.replicas) as usize
        };
        let all_gpus: Vec<crate::fleet::DeviceId> = (0..per_node)
            .filter(|&i| i < self.gpus.len())
            .map(|i| self.gpus[i].id)
            .collect();
        let host_threads = fleet.host.usable_cores();
        let gpu_names: Vec<&str> = (0..all_gpus.len())
            .map(|i| self.gpus[i].name.as_str())
            .collect();
        let pooling = self.pooling_runner();
        let launch = launch::artifacts(
            self.req.model,
            &model_dir,
            &settings,
            &all_gpus,
            &gpu_names,
            host_threads,
            self.req.overrides.image.as_deref(),
            pooling.as_ref().map(|p| p.0),
        );
        let mut warnings = self.warnings.clone();
        if let Some((_, why, warning)) = pooling {
            prov.insert("launch.vllm.pooling".into(), why);
            warnings.extend(warning);
        }
        warnings.extend(c.eval.notes.iter().cloned());
        warnings.extend(seq_warning);
        Described {
            settings: Settings::Vllm(settings),
            topology,
            devices: gpu_ids,
            launch,
            provenance: prov,
            warnings,
            training: None,
        }
    }
}

/// `n` with thousands separators, as vLLM prints token counts (`f"{num_tokens:,}"`).
pub(super) fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

impl Vllm<'_> {
    /// Why the candidate's `--max-num-seqs` is what it is, and a warning where vLLM will queue or preempt the
    /// workload's requests at it.
    fn seqs_provenance(&self, c: &Candidate<Point>, m: &PlanMemory) -> (String, Option<String>) {
        let p = &c.point;
        let w = self.workload();
        let req_tokens = self.request_tokens(c.size);
        let per = self.request_blocks(p, c.size).unwrap_or(1);
        let held = admission::requests_held(m.capacity.num_blocks, per);
        let (_, ceiling) = self.replicas(p.tp);
        let replicas = if p.replicas > 1 {
            format!(" over {} replicas ({ceiling} each)", p.replicas)
        } else {
            String::new()
        };
        let pool = format!(
            "the KV pool ({} blocks) holds {held} of the workload's requests of {req_tokens} tokens ({} prompt + {} generated; {per} blocks each) and {:.2} at the full --max-model-len {}",
            m.capacity.num_blocks,
            w.prompt_tokens,
            w.generation_tokens,
            m.capacity.max_concurrency,
            c.size
        );
        let why = match p.seqs_bound {
            SeqBound::Pinned => format!("--parallel {}; {pool}", p.max_num_seqs),
            SeqBound::Workload => format!(
                "workload {} concurrency {}{replicas}; {pool}, so vLLM runs them all without preempting at their length",
                w.id, self.concurrency
            ),
            SeqBound::KvPool => format!(
                "workload {} concurrency {}{replicas}, lowered to the most sequences the KV pool holds at once: {pool}; more would make vLLM's scheduler preempt running requests (vllm/v1/core/sched/scheduler.py _preempt_request)",
                w.id, self.concurrency
            ),
            SeqBound::Sla => format!(
                "workload {} concurrency {}{replicas}, lowered to the most sequences whose predicted step meets its SLA ({:.1} ms per output token, {:.0} ms to the first); {pool}; a throughput workload queues the rest",
                w.id,
                self.concurrency,
                c.eval.prediction.time_per_output_token_ms,
                c.eval.prediction.time_to_first_token_ms
            ),
        };
        let warning = match p.seqs_bound {
            SeqBound::Pinned if held < u64::from(p.max_num_seqs) => Some(format!(
                "--max-num-seqs {} is more than the {held} requests of {req_tokens} tokens the KV pool holds at once: vLLM starts, and preempts running requests when the pool runs out (they are recomputed later)",
                p.max_num_seqs
            )),
            SeqBound::KvPool if self.req.objective != crate::profile::Objective::Throughput => {
                Some(format!(
                    "the KV pool holds {held} of workload {}'s {} requests at once: the others wait in vLLM's queue",
                    w.id, self.concurrency
                ))
            }
            _ => None,
        };
        (why, warning)
    }

    /// An embedding plan's pooling runner with its provenance and, for a checkpoint that is not an embedding
    /// model, a warning; `None` for a generating plan. The pooling is the one vLLM reads from the checkpoint's
    /// sentence-transformers configuration (the model reader records it under
    /// [`optimizer_model::safetensors::pooling::POOLING_KEY`]), else the architecture's default, which vLLM picks.
    fn pooling_runner(&self) -> Option<(launch::PoolingRunner, Provenance, Option<String>)> {
        use optimizer_model::MetaValue;
        use optimizer_model::safetensors::pooling::{MODULES_FILE, POOLING_KEY};
        if self.workload().mode != crate::profile::Mode::Embedding {
            return None;
        }
        let model = self.req.model;
        let declared = model
            .metadata
            .get(POOLING_KEY)
            .and_then(MetaValue::as_str)
            .and_then(|t| SEQ_POOLING_TYPES.into_iter().find(|k| *k == t));
        let class = model.name.as_deref().unwrap_or(&model.architecture);
        let generative = GENERATIVE_SUFFIXES.iter().any(|s| class.ends_with(s));
        let (source, detail) = match declared {
            Some(t) => (
                Source::Computed,
                format!(
                    "--runner pooling --pooler-config seq_pooling_type {t}: the checkpoint's sentence-transformers pooling ({MODULES_FILE} and its Pooling module's config.json, read as vLLM's get_pooling_config reads them)"
                ),
            ),
            None => (
                Source::Rule,
                format!(
                    "--runner pooling: the checkpoint has no sentence-transformers pooling ({MODULES_FILE}), so vLLM pools by {class}'s default ({})",
                    if generative {
                        "the last token, vLLM's default for a generative model converted with --convert embed"
                    } else {
                        "the model class's own pooler"
                    }
                ),
            ),
        };
        let warning = (declared.is_none() && generative).then(|| {
            format!(
                "{class} is a generative model and the checkpoint has no sentence-transformers pooling ({MODULES_FILE}): vLLM converts it to embed (--convert embed) from its last token's hidden state, which the model was not trained to embed with; serve an embedding model"
            )
        });
        Some((
            launch::PoolingRunner {
                seq_pooling_type: declared,
            },
            Provenance { source, detail },
            warning,
        ))
    }
}

/// Sequence pooling types vLLM 0.33 takes in `--pooler-config` (vllm/config/pooler.py `SequencePoolingType`).
const SEQ_POOLING_TYPES: [&str; 3] = ["CLS", "LAST", "MEAN"];

/// transformers class-name suffixes vLLM 0.33 runs as generating models by default (vllm/config/model.py
/// `_SUFFIX_TO_DEFAULTS`, the entries with runner `generate`).
const GENERATIVE_SUFFIXES: [&str; 4] = [
    "ForCausalLM",
    "ForConditionalGeneration",
    "ChatModel",
    "LMHeadModel",
];

impl Vllm<'_> {
    /// The provenance of a plan spanning nodes: why the pipeline, its stages' memory per GPU, its speed and the
    /// launcher.
    fn pipeline_provenance(&self, c: &Candidate<Point>, prov: &mut BTreeMap<String, Provenance>) {
        use crate::units::gib;
        let p = &c.point;
        let mut put = |k: &str, detail: String| {
            prov.insert(
                k.to_string(),
                Provenance {
                    source: Source::Computed,
                    detail,
                },
            );
        };
        let parts = super::multinode::pp_partition(self.n_layer, p.pp);
        let per_stage: Vec<String> = self
            .stages(p.pp)
            .iter()
            .zip(&parts)
            .enumerate()
            .filter_map(|(i, (stage, &(s, e)))| {
                let m = self.memory_of(stage, p, c.size).ok()?;
                Some(format!(
                    "node {i}: layers {s}-{} ({} layers{}), {:.2} GiB weights + {:.2} GiB other non-KV per GPU, KV page {} bytes",
                    e - 1,
                    e - s,
                    match (i == 0, i + 1 == parts.len()) {
                        (true, _) => ", token embedding",
                        (_, true) => ", final norm and LM head",
                        _ => "",
                    },
                    gib(m.nk.weights.per_rank_bytes),
                    gib(m.non_kv.saturating_sub(m.nk.weights.per_rank_bytes)),
                    m.kv.bytes_per_block
                ))
            })
            .collect();
        put(
            "memory.pipeline_stages",
            format!(
                "each node is one pipeline stage of tensor parallel {} (vllm/distributed/utils.py get_pp_indices; the embedding on the first stage, norm and LM head on the last): {}; every GPU is given the tightest stage's KV cache (one --kv-cache-memory-bytes; vLLM runs all workers with the fewest blocks, vllm/v1/core/kv_cache_planning.py get_kv_cache_configs)",
                p.tp,
                per_stage.join("; ")
            ),
        );
        let Some(s) = self.pipeline_speed(p, c.size) else {
            return;
        };
        let link = self.fabric.map_or(String::new(), |l| {
            format!("{:.1} GB/s per rank", l.bytes_per_s / 1e9)
        });
        put(
            "settings.pipeline_parallel_size",
            format!(
                "no single node holds the model at any tensor-parallel size, so a replica spans {} nodes: tensor parallel {} inside each node (all-reduces over its own link), pipeline parallel {} across them (each decode step hands {} sequences' hidden states and residuals, {:.1} µs, over the fabric at {link}); with up to {} batches in flight of {} sequences, a stage's step is {:.2} ms, a token's cycle {:.2} ms, the stages idle {:.0} % of it (pipeline bubble; vllm/config/vllm.py max_concurrent_batches)",
                p.pp,
                p.tp,
                p.pp,
                s.per_batch,
                s.send_s * 1e6,
                s.micro_batches,
                s.per_batch,
                s.stage_s * 1e3,
                s.cycle_s * 1e3,
                s.bubble * 100.0
            ),
        );
        put(
            "topology",
            format!(
                "{} node(s) per replica with vLLM 0.33's multiprocessing launcher (--nnodes {} --node-rank R --master-addr NODE0 --master-port {}; ranks past 0 --headless: vllm/engine/arg_utils.py, vllm/entrypoints/cli/serve.py run_headless), {} replica(s) over the cluster's {} nodes",
                p.pp,
                p.pp,
                super::multinode::MASTER_PORT,
                self.req.fleet.nodes / p.pp,
                self.req.fleet.nodes
            ),
        );
    }
}
