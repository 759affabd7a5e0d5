//! vLLM behind the runtime seam: safetensors checkpoints served by `vllm serve` (the pinned release,
//! [`mem::VERSION`]) on NVIDIA GPUs. Its candidate space is tensor-parallel size × KV cache dtype × CUDA graphs
//! (on, or `--enforce-eager`), with `--max-model-len` as the size knob; its memory model is
//! [`optimizer_memory::vllm`] (weights per rank from the file's tensors, the profiling pass, CUDA graphs and KV
//! blocks as vLLM computes them); its topology is one tensor-parallel group per replica; its artifacts
//! ([`launch`]) are the `vllm serve` command and the Kubernetes resources.
//!
//! Trade-offs:
//! - Tensor parallelism is the smallest size that fits (each ladder ascends in TP and is bisected like
//!   llama.cpp's): beyond it, more TP cuts a decode step's weight reads per GPU but adds two all-reduces per layer
//!   and takes GPUs from replicas. For a throughput workload the node's other GPUs run replicas of that size (data
//!   parallel, no communication); for latency and balanced workloads one replica is planned and a larger TP can be
//!   pinned with `--tensor-parallel`.
//! - The KV cache is sized by the plan, not by vLLM's profiling: `--kv-cache-memory-bytes` is every byte the GPU
//!   has left after the non-KV memory and the fit margin, so vLLM cannot disagree with the plan; a candidate fits
//!   when vLLM would start with it, i.e. the cache holds one request at the full `--max-model-len` (vLLM 0.33's own
//!   rule, [`admission`]), and `--max-num-seqs` is then chosen from the pool, the workload and its SLA.
//! - The attention backend is predicted (vLLM 0.33's CUDA priority list by compute capability) and written to
//!   the settings, but not pinned on the command line: vLLM checks head size, dtype and KV type combinations we do
//!   not model, and a pinned backend it rejects would stop the server from starting.

mod across;
pub mod admission;
mod choose;
mod document;
pub mod estimate;
pub(crate) mod expert;
pub(crate) mod launch;
mod multinode;
mod space;
mod speed;

use super::{PlanError, Request};
use crate::fleet::FleetGpu;
use crate::profile::{Objective, WorkloadProfile};
use optimizer_memory::vllm::{self as mem, Dtype, KvCacheDtype};
use optimizer_model::Format;

use choose::{
    batched_tokens, choose_dtype, kv_types, pinned_kv_type, quantization_method, tp_sizes,
};

/// vLLM's positions are int32 and `max_model_len` an int: no sequence past `i32::MAX`.
const MAX_MODEL_LEN: u32 = i32::MAX as u32;

/// Seconds one eager decode step spends launching kernels, per transformer block: with CUDA graphs a step is one
/// graph launch; without them each block's kernels (norm, QKV GEMM, rotary, attention, O GEMM, residual, norm,
/// gate-up GEMM, activation, down GEMM, and the two all-reduces under TP: about 10 to 12) are launched one by one
/// from Python at about 4-5 µs each (CUDA's documented launch overhead, NVIDIA CUDA C++ Best Practices Guide,
/// "kernel launch ... on the order of 5 µs"). 50 µs per block is the estimate; heuristic, stated as such.
const EAGER_LAUNCH_PER_LAYER_S: f64 = 50e-6;

/// One point of vLLM's candidate space (the size knob apart).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Point {
    /// `--tensor-parallel-size`.
    pub tp: u32,
    /// `--pipeline-parallel-size`: a stage per node when a replica spans nodes (1 on one node).
    pub pp: u32,
    /// Nodes one replica spans (`--nnodes`; 1 on one node): `pp` for a pipeline, more than one for tensor
    /// parallel or expert parallel across nodes.
    pub nnodes: u32,
    /// `--data-parallel-size` of an expert-parallel layout across nodes (1 otherwise; a node's own replicas are
    /// `replicas`).
    pub dp: u32,
    /// `--enable-expert-parallel`: routed experts spread whole over the `tp x dp` ranks ([`expert`]).
    pub ep: bool,
    /// Indices into the runtime's GPUs: the first replica's group.
    pub gpus: Vec<usize>,
    /// Replicas on this node.
    pub replicas: u32,
    pub kv: KvCacheDtype,
    /// `--max-num-seqs` per replica.
    pub max_num_seqs: u32,
    /// What bounded `max_num_seqs` ([`admission::SeqBound`]).
    pub seqs_bound: admission::SeqBound,
    pub enforce_eager: bool,
}

/// vLLM planning one request.
pub(crate) struct Vllm<'a> {
    req: &'a Request<'a>,
    /// CUDA GPUs, most free memory first.
    gpus: Vec<&'a FleetGpu>,
    n_layer: u32,
    n_ctx_train: u32,
    /// Sequences the workload serves together over the node (`--parallel` pins it).
    concurrency: u32,
    dtype: Dtype,
    dtype_why: String,
    quantization: Option<(String, String)>,
    kv_types: Vec<(KvCacheDtype, String)>,
    tp_sizes: Vec<u32>,
    tp_why: String,
    max_num_batched_tokens: u32,
    batched_why: String,
    warnings: Vec<String>,
    /// Pipeline sizes across the cluster's nodes and each one's stages as vLLM loads them
    /// ([`multinode::stage_model`]); empty on one node or without a fabric bandwidth.
    pipelines: Vec<(u32, Vec<optimizer_model::ModelSpec>)>,
    /// The link between nodes one rank sends over ([`crate::perf::collective::fabric_link`]).
    fabric: Option<crate::perf::collective::Link>,
    /// The layouts of one replica over the cluster's nodes ([`expert::layouts`]); empty on one node.
    layouts: Vec<expert::Layout>,
    /// The routed experts alone ([`expert::routed_experts`]), for expert-parallel layouts.
    routed: Option<optimizer_model::ModelSpec>,
}

impl<'a> Vllm<'a> {
    /// vLLM for this request, or why it cannot plan it.
    pub(crate) fn new(req: &'a Request<'a>) -> Result<Vllm<'a>, PlanError> {
        let (model, w, fleet) = (req.model, req.workload, req.fleet);
        super::serving_only(w)?;
        if model.format != Format::Safetensors {
            return Err(PlanError::UnsupportedFormat(
                "a GGUF file: vLLM plans cover safetensors checkpoints (vLLM's GGUF loader is experimental and not modelled); plan it with llama.cpp (the default for GGUF)".into(),
            ));
        }
        mem::admit(model).map_err(|e| PlanError::UnsupportedFormat(e.to_string()))?;
        let n_layer = model
            .hparams
            .block_count
            .filter(|&n| n > 0)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| PlanError::Model("no num_hidden_layers (or 0)".into()))?;
        let n_ctx_train = match model.hparams.context_length {
            Some(c) if c > 0 => u32::try_from(c).unwrap_or(MAX_MODEL_LEN).min(MAX_MODEL_LEN),
            _ => {
                return Err(PlanError::Model(
                    "max_position_embeddings is 0 or missing: the model does not say how long a sequence it takes"
                        .into(),
                ));
            }
        };
        let ov = req.overrides;
        if let Some(c) = ov.context_length
            && !(1..=MAX_MODEL_LEN).contains(&c)
        {
            return Err(PlanError::Usage(format!(
                "-c {c}: --max-model-len must be between 1 and {MAX_MODEL_LEN}"
            )));
        }
        let concurrency = super::sequences(w, ov, "vllm serve refuses --max-num-seqs 0")?;
        let (gpus, warnings) = super::cuda_gpus(
            fleet,
            "vLLM plans",
            "vLLM plans need NVIDIA GPUs and this hardware has none: plan for profiled GPUs (--hardware a100-80gb-sxm, --hardware 2x:rtx-4090), or serve a GGUF of the model with llama.cpp",
        )?;
        let cc = gpus.iter().filter_map(|g| g.compute_capability).min();
        let (dtype, dtype_why) = choose_dtype(model, cc);
        let quantization = quantization_method(model, cc);
        let kv_types = match &ov.kv_type {
            Some(name) => vec![pinned_kv_type(name, cc)?],
            None => kv_types(w, cc),
        };
        let (tp_sizes, tp_why) = tp_sizes(model, gpus.len() as u32, ov.tensor_parallel)?;
        let (max_num_batched_tokens, batched_why) = batched_tokens(gpus[0]);
        let mut warnings = warnings;
        let (pipelines, fabric) = pipelines(req, &gpus, &tp_sizes, n_layer, &mut warnings);
        if ov.ray && fabric.is_none() {
            warnings.push(
                "--distributed-executor-backend ray: ignored, this plan is for one node (give --cluster FILE for a replica across nodes), where vLLM runs its workers itself".to_string(),
            );
        }
        let (layouts, routed) = match fabric {
            Some(link) => {
                let per_node = gpus.len() as u32;
                let moe = model.hparams.expert_count.is_some_and(|e| e > 0);
                // Expert parallel at the smallest and the largest one-node tensor-parallel size: data-parallel
                // attention (each engine its own KV cache) and the node's tensor-parallel group.
                let node_tp: Vec<u32> = [tp_sizes.first(), tp_sizes.last()]
                    .into_iter()
                    .flatten()
                    .copied()
                    .collect::<std::collections::BTreeSet<u32>>()
                    .into_iter()
                    .collect();
                let pps: Vec<u32> = pipelines.iter().map(|(pp, _)| *pp).collect();
                // Tensor parallel across nodes runs two all-reduces per layer over the fabric, each bound by the
                // network's fixed cost at decode: weighed only where the cluster file states it (latency_us).
                let l = expert::layouts(fleet.nodes, per_node, &pps, &node_tp, moe, |tp| {
                    link.latency_s > 0.0
                        && ov.tensor_parallel.is_none()
                        && mem::weights(model, tp, dtype).is_ok()
                });
                let routed = if moe {
                    expert::routed_experts(model)
                } else {
                    None
                };
                (l, routed)
            }
            None => (Vec::new(), None),
        };
        Ok(Vllm {
            req,
            gpus,
            n_layer,
            n_ctx_train,
            concurrency,
            dtype,
            dtype_why,
            quantization,
            kv_types,
            tp_sizes,
            tp_why,
            max_num_batched_tokens,
            batched_why,
            warnings,
            pipelines,
            fabric,
            layouts,
            routed,
        })
    }

    fn workload(&self) -> &WorkloadProfile {
        self.req.workload
    }

    /// Replicas a TP size runs on this node, and sequences per replica.
    fn replicas(&self, tp: u32) -> (u32, u32) {
        let n = self.gpus.len() as u32;
        let replicas = if self.req.objective == Objective::Throughput {
            (n / tp).max(1)
        } else {
            1
        };
        (replicas, self.concurrency.div_ceil(replicas).max(1))
    }

    fn params(&self, p: &Point, len: u32) -> mem::Params {
        mem::Params {
            tensor_parallel: p.tp,
            dtype: self.dtype,
            kv_cache_dtype: p.kv,
            block_size: mem::DEFAULT_BLOCK_SIZE,
            max_model_len: len,
            max_num_seqs: p.max_num_seqs,
            max_num_batched_tokens: self.max_num_batched_tokens.max(p.max_num_seqs),
            enforce_eager: p.enforce_eager,
            gpu: self.gpu_facts(&p.gpus),
        }
    }

    fn gpu_facts(&self, gpus: &[usize]) -> mem::GpuFacts {
        let group: Vec<&FleetGpu> = gpus.iter().map(|&i| self.gpus[i]).collect();
        group_facts(&group)
    }

    /// Per-GPU capacity of a group: its smallest member's free memory and the largest reserve.
    fn group_room(&self, gpus: &[usize]) -> (u64, u64, u64) {
        let cap = gpus
            .iter()
            .map(|&i| self.gpus[i].capacity_bytes)
            .min()
            .unwrap_or(0);
        let reserve = gpus
            .iter()
            .map(|&i| self.gpus[i].reserve_bytes)
            .max()
            .unwrap_or(0);
        let total = gpus
            .iter()
            .map(|&i| self.gpus[i].memory_total_bytes)
            .min()
            .unwrap_or(0);
        (cap, reserve, total)
    }

    /// The stages of a pipeline of `pp` nodes (empty for 1 or a size not planned).
    fn stages(&self, pp: u32) -> &[optimizer_model::ModelSpec] {
        self.pipelines
            .iter()
            .find(|(n, _)| *n == pp)
            .map_or(&[], |(_, s)| s.as_slice())
    }

    /// The memory plan of a point at a length: per GPU of the group, the KV cache taking what is left. Across
    /// nodes, each pipeline stage is sized and the tightest taken: the most non-KV memory, and the KV cache
    /// every stage can give (one `--kv-cache-memory-bytes` for all; vLLM runs every worker with the fewest blocks).
    fn memory(&self, p: &Point, len: u32) -> Result<PlanMemory, PlanError> {
        if p.pp <= 1 {
            return self.memory_of(self.req.model, p, len);
        }
        let mut worst: Option<PlanMemory> = None;
        let mut kv_alloc = u64::MAX;
        let mut blocks = u64::MAX;
        for stage in self.stages(p.pp) {
            let m = self.memory_of(stage, p, len)?;
            kv_alloc = kv_alloc.min(m.kv_alloc);
            blocks = blocks.min(m.capacity.num_blocks);
            let tighter = worst
                .as_ref()
                .is_none_or(|w| (m.overflow, m.non_kv) > (w.overflow, w.non_kv));
            if tighter {
                worst = Some(m);
            }
        }
        let mut m = worst.ok_or_else(|| {
            PlanError::Model(format!("no pipeline of {} stages was prepared", p.pp))
        })?;
        if m.overflow == 0 {
            m.kv_alloc = kv_alloc;
            m.capacity = mem::kv_capacity(kv_alloc, &m.kv, &self.params(p, len));
            m.capacity.num_blocks = m.capacity.num_blocks.min(blocks);
        }
        Ok(m)
    }

    /// [`Vllm::memory`] of one model (the checkpoint, or one pipeline stage of it).
    fn memory_of(
        &self,
        model: &optimizer_model::ModelSpec,
        p: &Point,
        len: u32,
    ) -> Result<PlanMemory, PlanError> {
        let params = self.params(p, len);
        let mut nk = mem::non_kv(model, &params)?;
        if p.ep
            && let Some(routed) = &self.routed
        {
            expert::expert_parallel_weights(
                routed,
                &mut nk.weights,
                p.tp,
                p.tp * p.dp,
                self.dtype,
            )?;
        }
        let kv = mem::kv(model, &params)?;
        let (cap, reserve, total) = self.group_room(&p.gpus);
        let non_kv = nk
            .in_budget_bytes()
            .unwrap_or(u64::MAX)
            .saturating_add(nk.non_torch_bytes);
        // vLLM 0.33 starts when the cache holds one request at max_model_len beside the null block
        // (admission::admission_bytes); the scheduler queues and preempts the rest.
        let needed = admission::admission_bytes(&kv).ok_or_else(|| {
            PlanError::Model("the KV cache one request needs overflows 64 bits".to_string())
        })?;
        let room = cap.saturating_sub(reserve);
        let left = room.saturating_sub(non_kv);
        // Whole blocks only: vLLM divides the bytes by the page size.
        let kv_alloc = left
            .checked_div(kv.bytes_per_block)
            .map_or(0, |blocks| blocks * kv.bytes_per_block);
        let overflow = non_kv.saturating_add(needed).saturating_sub(room);
        let capacity = mem::kv_capacity(kv_alloc, &kv, &params);
        Ok(PlanMemory {
            nk,
            kv,
            non_kv,
            kv_alloc: if overflow == 0 { kv_alloc } else { needed },
            capacity,
            overflow,
            cap,
            reserve,
            total,
        })
    }
}

/// Pipeline sizes a cluster of identical nodes offers (every divisor of the node count from 2, each stage the
/// node's GPUs at tensor parallel), with each one's stages, and the fabric link; why none is offered goes to the
/// warnings where the user would expect one.
fn pipelines(
    req: &Request,
    gpus: &[&FleetGpu],
    tp_sizes: &[u32],
    n_layer: u32,
    warnings: &mut Vec<String>,
) -> (
    Vec<(u32, Vec<optimizer_model::ModelSpec>)>,
    Option<crate::perf::collective::Link>,
) {
    let nodes = req.fleet.nodes;
    let per_node = gpus.len() as u32;
    if nodes <= 1 || !tp_sizes.contains(&per_node) {
        return (Vec::new(), None);
    }
    let Some(link) = req
        .overrides
        .fabric
        .as_ref()
        .and_then(|f| crate::perf::collective::fabric_link(f, per_node))
    else {
        warnings.push(format!(
            "the cluster file gives no fabric bandwidth_gb_s: plans spanning its {nodes} nodes (pipeline parallel) are not considered"
        ));
        return (Vec::new(), None);
    };
    if link.latency_s == 0.0 {
        warnings.push(
            "the cluster file gives no fabric latency_us: pipeline hand-offs between nodes are priced by bandwidth alone, and tensor parallel across nodes (two all-reduces per layer over the fabric, bound by its fixed cost) is not weighed".into(),
        );
    }
    let out = (2..=nodes.min(n_layer))
        .filter(|pp| nodes.is_multiple_of(*pp))
        .map(|pp| {
            let parts = multinode::pp_partition(n_layer, pp);
            let last = parts.len() - 1;
            let stages = parts
                .iter()
                .enumerate()
                .map(|(i, &(s, e))| multinode::stage_model(req.model, s, e, i == 0, i == last))
                .collect();
            (pp, stages)
        })
        .collect();
    (out, Some(link))
}

/// Facts that bound every member of a group: the compute capability of a member on FlashInfer's path if any is
/// (the path with more bytes per logit), else the lowest; the most SMs (the Triton kernel's rows), unknown if any
/// member's count is. Ranks of a mixed group size their own buffers; the plan takes the bound.
pub(crate) fn group_facts(gpus: &[&FleetGpu]) -> mem::GpuFacts {
    let each: Vec<mem::GpuFacts> = gpus
        .iter()
        .map(|g| mem::GpuFacts {
            compute_capability: g.compute_capability,
            sms: g.sms,
        })
        .collect();
    let compute_capability = each
        .iter()
        .find(|f| mem::sampler_path(f) == mem::SamplerPath::FlashInfer)
        .map(|f| f.compute_capability)
        .unwrap_or_else(|| each.iter().filter_map(|f| f.compute_capability).min());
    let sms = each
        .iter()
        .map(|f| f.sms)
        .collect::<Option<Vec<u32>>>()
        .and_then(|v| v.into_iter().max());
    mem::GpuFacts {
        compute_capability,
        sms,
    }
}

/// One point's memory at one length.
struct PlanMemory {
    nk: mem::NonKv,
    kv: mem::Kv,
    non_kv: u64,
    /// The KV cache the plan gives vLLM (`--kv-cache-memory-bytes`); when it does not fit, what vLLM needs to
    /// start.
    kv_alloc: u64,
    capacity: mem::KvCapacity,
    overflow: u64,
    /// The group's smallest free memory, the fit margin, and the smallest total memory.
    cap: u64,
    reserve: u64,
    total: u64,
}

/// The `--dtype` value.
fn dtype_name(d: Dtype) -> &'static str {
    match d {
        Dtype::Bfloat16 => "bfloat16",
        Dtype::Float16 => "float16",
        Dtype::Float32 => "float32",
    }
}
