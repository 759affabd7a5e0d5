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
//!   when that holds the workload's sequences at the full `--max-model-len`.
//! - The attention backend is predicted (vLLM 0.33's CUDA priority list by compute capability) and written to
//!   the settings, but not pinned on the command line: vLLM checks head size, dtype and KV type combinations we do
//!   not model, and a pinned backend it rejects would stop the server from starting.

pub mod launch;

use super::{Candidate, Described, Eval, PlanError, Request, Runtime, RuntimeId, Size};
use crate::emit::{
    MemoryComponents, MemoryDevice, Provenance, Settings, Source, Stage, Topology, VllmSettings,
};
use crate::fleet::{FleetGpu, PCIE3_X16_BYTES_PER_S};
use crate::perf::{self, DeviceLoad, Shape, collective};
use crate::profile::{Objective, WorkloadProfile};
use optimizer_memory::vllm::{self as mem, Dtype, KvCacheDtype};
use optimizer_model::{Format, ModelSpec, Role};

use std::collections::BTreeMap;

/// vLLM's positions are int32 and `max_model_len` an int: no sequence past `i32::MAX`.
pub const MAX_MODEL_LEN: u32 = i32::MAX as u32;

/// Seconds one eager decode step spends launching kernels, per transformer block: with CUDA graphs a step is one
/// graph launch; without them each block's kernels (norm, QKV GEMM, rotary, attention, O GEMM, residual, norm,
/// gate-up GEMM, activation, down GEMM, and the two all-reduces under TP: about 10 to 12) are launched one by one
/// from Python at about 4-5 µs each (CUDA's documented launch overhead, NVIDIA CUDA C++ Best Practices Guide,
/// "kernel launch ... on the order of 5 µs"). 50 µs per block is the estimate; heuristic, stated as such.
const EAGER_LAUNCH_PER_LAYER_S: f64 = 50e-6;

/// One point of vLLM's candidate space (the size knob apart).
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// `--tensor-parallel-size`.
    pub tp: u32,
    /// Indices into the runtime's GPUs: the first replica's group.
    pub gpus: Vec<usize>,
    /// Replicas on this node.
    pub replicas: u32,
    pub kv: KvCacheDtype,
    /// `--max-num-seqs` per replica.
    pub max_num_seqs: u32,
    pub enforce_eager: bool,
}

/// vLLM planning one request.
pub struct Vllm<'a> {
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
}

/// The checkpoint's floating-point storage type (the embedding's, else the most bytes of BF16/F16/F32).
fn checkpoint_dtype(model: &ModelSpec) -> Option<&'static str> {
    if let Some(t) = model.hparams.torch_dtype.as_deref() {
        match t {
            "bfloat16" => return Some("bfloat16"),
            "float16" | "half" => return Some("float16"),
            "float32" | "float" => return Some("float32"),
            _ => {}
        }
    }
    let mut by: BTreeMap<&'static str, u64> = BTreeMap::new();
    for t in &model.tensors {
        let n = match t.dtype.name() {
            "BF16" => "bfloat16",
            "F16" => "float16",
            "F32" => "float32",
            _ => continue,
        };
        *by.entry(n).or_default() += t.bytes;
    }
    by.into_iter().max_by_key(|&(_, b)| b).map(|(n, _)| n)
}

impl<'a> Vllm<'a> {
    /// vLLM for this request, or why it cannot plan it.
    pub fn new(req: &'a Request<'a>) -> Result<Vllm<'a>, PlanError> {
        let (model, w, fleet) = (req.model, req.workload, req.fleet);
        super::serving_only(w)?;
        if model.format != Format::Safetensors {
            return Err(PlanError::UnsupportedFormat(
                "a GGUF file: vLLM plans cover safetensors checkpoints (vLLM's GGUF loader is experimental and not modelled); plan it with llama.cpp (the default for GGUF)".into(),
            ));
        }
        mem::admit(model).map_err(PlanError::UnsupportedFormat)?;
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
        let kv_types = kv_types(w, cc);
        let (tp_sizes, tp_why) = tp_sizes(model, gpus.len() as u32, ov.tensor_parallel)?;
        let (max_num_batched_tokens, batched_why) = batched_tokens(gpus[0]);
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

    /// Facts that bound every member of a group: the compute capability of a member on FlashInfer's path if
    /// any is (the path with more bytes per logit), else the lowest; the most SMs (the Triton kernel's rows),
    /// unknown if any member's count is. Ranks of a mixed group size their own buffers; the plan takes the bound.
    fn gpu_facts(&self, gpus: &[usize]) -> mem::GpuFacts {
        let each: Vec<mem::GpuFacts> = gpus
            .iter()
            .map(|&i| mem::GpuFacts {
                compute_capability: self.gpus[i].compute_capability,
                sms: self.gpus[i].sms,
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

    /// The memory plan of a point at a length: per GPU of the group, the KV cache taking what is left.
    fn memory(&self, p: &Point, len: u32) -> Result<PlanMemory, String> {
        let params = self.params(p, len);
        let nk = mem::non_kv(self.req.model, &params)?;
        let kv = mem::kv(self.req.model, &params)?;
        let (cap, reserve, total) = self.group_room(&p.gpus);
        let non_kv = nk
            .in_budget_bytes()
            .unwrap_or(u64::MAX)
            .saturating_add(nk.non_torch_bytes);
        let needed = kv
            .min_bytes
            .checked_mul(u64::from(p.max_num_seqs))
            .ok_or_else(|| "the KV cache the sequences need overflows 64 bits".to_string())?;
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

    /// What one rank of the group reads and computes per token.
    fn load(&self, p: &Point, m: &PlanMemory) -> DeviceLoad {
        let model = self.req.model;
        let h = &model.hparams;
        let tp = f64::from(p.tp);
        let experts = h.expert_count.unwrap_or(0);
        let share = if experts > 0 {
            h.expert_used_count.unwrap_or(experts) as f64 / experts as f64
        } else {
            1.0
        };
        let mut l = DeviceLoad {
            layers: f64::from(self.n_layer),
            ..DeviceLoad::default()
        };
        let total_bytes = model.tensor_bytes().max(1) as f64;
        // Spread the rank's exact weight bytes over the tensors in proportion to their file bytes.
        let scale = m.nk.weights.per_rank_bytes as f64 / total_bytes;
        for t in &model.tensors {
            if t.role == Role::QuantState {
                continue;
            }
            let output = t.role == Role::Output;
            let routed = if t.role == Role::Expert { share } else { 1.0 };
            let bytes = t.bytes as f64 * scale;
            // The token-embedding lookup reads one row: no matmul, negligible bytes.
            if t.role == Role::Embedding && !h.tied_embeddings {
                l.weight_bytes_resident += bytes;
                continue;
            }
            let params = if t.shape.len() >= 2 {
                t.parameters as f64 / tp * routed
            } else {
                0.0
            };
            l.add(t.dtype, output, bytes * routed, params, bytes);
        }
        if h.tied_embeddings {
            // The tied embedding is also the output projection.
            let rows = h.vocab_size.unwrap_or(0) as f64;
            let width = h.embedding_length.unwrap_or(0) as f64;
            l.output_params += rows * width / tp;
        }
        l.kv_bytes_per_cell = m.kv.page_bytes as f64 / f64::from(mem::DEFAULT_BLOCK_SIZE);
        let heads = h.head_count.as_ref().map_or(0, |x| x.max()) as f64;
        let k = h.key_length.unwrap_or(0) as f64;
        l.attn_flops_per_pair = 4.0 * heads / tp * k * f64::from(self.n_layer);
        l
    }

    /// Seconds of the all-reduces one forward step of `tokens` tokens spends on a TP group.
    fn comm_seconds(&self, p: &Point, tokens: f64) -> f64 {
        if p.tp <= 1 {
            return 0.0;
        }
        let link = self.link(p);
        let hidden = self.req.model.hparams.embedding_length.unwrap_or(0);
        perf::collective::tp_step_seconds(
            &link,
            p.tp,
            self.n_layer,
            tokens.ceil() as u64,
            hidden,
            self.dtype.bytes(),
        )
    }

    /// The link the group all-reduces over: NVLink on boards that have it built in, else PCIe (3.0 x16 when
    /// neither the profile nor the probe says).
    fn link(&self, p: &Point) -> collective::Link {
        self.gpus[p.gpus[0]].peer_link()
    }

    fn settings(&self, c: &Candidate<Point>) -> (VllmSettings, PlanMemory) {
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
            },
            m,
        )
    }
}

/// One point's memory at one length.
struct PlanMemory {
    nk: mem::NonKv,
    kv: mem::Kv,
    non_kv: u64,
    /// The KV cache the plan gives vLLM (`--kv-cache-memory-bytes`).
    kv_alloc: u64,
    capacity: mem::KvCapacity,
    overflow: u64,
    /// The group's smallest free memory, the fit margin, and the smallest total memory.
    cap: u64,
    reserve: u64,
    total: u64,
}

/// The `--dtype` value.
pub fn dtype_name(d: Dtype) -> &'static str {
    match d {
        Dtype::Bfloat16 => "bfloat16",
        Dtype::Float16 => "float16",
        Dtype::Float32 => "float32",
    }
}

/// `--gpu-memory-utilization`: vLLM checks at start-up, after its CUDA context exists, that `ceil(total × u)`
/// bytes are free (vllm/v1/worker/utils.py `request_memory`); with `--kv-cache-memory-bytes` given it sizes
/// nothing else by it. The share the plan's torch allocations take (everything but the non-torch memory),
/// rounded up to 0.01, at most the share the start-up check passes: the free memory less the CUDA context,
/// rounded down.
fn utilization(torch_bytes: u64, free: u64, non_torch: u64, total: u64) -> f64 {
    if total == 0 {
        return 0.0;
    }
    let need = (torch_bytes as f64 / total as f64 * 100.0).ceil() / 100.0;
    let cap = (free.saturating_sub(non_torch) as f64 / total as f64 * 100.0).floor() / 100.0;
    need.min(cap).clamp(0.01, 1.0)
}

/// `--dtype`: the checkpoint's 16-bit type, bfloat16 only on compute capability 8.0 and newer (vLLM refuses
/// bfloat16 below it: vllm/platforms/cuda.py `check_if_supports_dtype`, "Bfloat16 is only supported on GPUs with
/// compute capability of at least 8.0"); a float32 checkpoint runs in 16 bits as vLLM's `auto` does
/// (vllm/config/model.py `_resolve_auto_dtype`: float32 weights are served in the platform's preferred 16-bit type).
fn choose_dtype(model: &ModelSpec, cc: Option<(u32, u32)>) -> (Dtype, String) {
    let bf16_ok = cc.is_some_and(|c| c >= (8, 0));
    let ck = checkpoint_dtype(model);
    let cc_s = cc.map_or("unknown".to_string(), |(a, b)| format!("{a}.{b}"));
    match (ck, bf16_ok) {
        (Some("bfloat16"), true) => (
            Dtype::Bfloat16,
            "the checkpoint's bfloat16, supported from compute capability 8.0".into(),
        ),
        (Some("bfloat16"), false) => (
            Dtype::Float16,
            format!(
                "float16: the checkpoint is bfloat16, but vLLM refuses bfloat16 below compute capability 8.0 (this GPU: {cc_s}; vllm/platforms/cuda.py check_if_supports_dtype)"
            ),
        ),
        (Some("float32"), true) => (
            Dtype::Bfloat16,
            "bfloat16: a float32 checkpoint served in 16 bits, as vLLM's dtype auto does on compute capability 8.0+".into(),
        ),
        (Some("float32"), false) => (
            Dtype::Float16,
            format!("float16: a float32 checkpoint served in 16 bits on compute capability {cc_s}"),
        ),
        _ => (
            Dtype::Float16,
            "the checkpoint's float16 (quantized checkpoints run their activations in it)".into(),
        ),
    }
}

/// The `--quantization` method vLLM runs the checkpoint with, from its `quantization_config`: GPTQ and AWQ
/// checkpoints run on the Marlin kernels where they apply (compute capability 8.0+, 4 or 8 bits; vLLM picks them
/// itself and runs plain GPTQ/AWQ only when told to: vllm/model_executor/layers/quantization/gptq_marlin.py and
/// awq_marlin.py `override_quantization_method`), the others by their config name.
fn quantization_method(model: &ModelSpec, cc: Option<(u32, u32)>) -> Option<(String, String)> {
    let q = model.hparams.quantization.as_ref()?;
    let marlin = cc.is_some_and(|c| c >= (8, 0)) && matches!(q.bits, Some(4) | Some(8) | None);
    let m = q.method.to_lowercase();
    let (name, why) = match m.as_str() {
        "gptq" if marlin => (
            "gptq_marlin",
            "quantization_config gptq: vLLM runs it on the Marlin kernels (compute capability 8.0+, 4/8 bits)",
        ),
        "awq" if marlin => (
            "awq_marlin",
            "quantization_config awq: vLLM runs it on the Marlin kernels (compute capability 8.0+, 4 bits)",
        ),
        "gptq" | "awq" | "fp8" | "compressed-tensors" | "modelopt" | "mxfp4" | "fbgemm_fp8" => (
            m.as_str(),
            "the checkpoint's quantization_config.quant_method",
        ),
        // vLLM 0.33's --quantization has no such value (bitsandbytes among them): it reads the checkpoint's
        // quantization_config itself, so the flag is left out.
        _ => return None,
    };
    Some((name.to_string(), why.to_string()))
}

/// KV cache dtypes the workload allows, in its order: its 16-bit types are vLLM's `auto` (the model dtype), an
/// 8-bit type (`q8_0`, `fp8`) is vLLM's `fp8` (e4m3) where the GPU has FP8 (compute capability 8.9+: Ada,
/// Hopper, Blackwell). Other types have no vLLM counterpart and are skipped.
fn kv_types(w: &WorkloadProfile, cc: Option<(u32, u32)>) -> Vec<(KvCacheDtype, String)> {
    let fp8_ok = cc.is_some_and(|c| c >= (8, 9));
    let mut out: Vec<(KvCacheDtype, String)> = Vec::new();
    for n in &w.precision.kv_cache {
        let t = match n.to_lowercase().as_str() {
            "f16" | "bf16" | "f32" | "auto" => Some((
                KvCacheDtype::Auto,
                format!("workload {} lists {n}: vLLM's auto, the model dtype", w.id),
            )),
            "q8_0" | "fp8" | "fp8_e4m3" if fp8_ok => Some((
                KvCacheDtype::Fp8,
                format!(
                    "workload {} allows an 8-bit KV cache ({n}): vLLM's fp8 (e4m3), native on compute capability 8.9+",
                    w.id
                ),
            )),
            _ => None,
        };
        if let Some(t) = t
            && !out.iter().any(|(k, _)| *k == t.0)
        {
            out.push(t);
        }
    }
    if out.is_empty() {
        out.push((
            KvCacheDtype::Auto,
            format!(
                "workload {} lists no KV type vLLM has: auto, the model dtype",
                w.id
            ),
        ));
    }
    out
}

/// Tensor-parallel sizes vLLM accepts for this model on `n` GPUs: attention heads divisible by the size, and KV
/// heads divisible by it or it by them (vLLM replicates KV heads when there are fewer than ranks:
/// vllm/model_executor/layers/linear.py `QKVParallelLinear`; vllm/config/model.py
/// `verify_with_parallel_config`: "Total number of attention heads must be divisible by tensor parallel size").
fn tp_sizes(
    model: &ModelSpec,
    n: u32,
    pinned: Option<u32>,
) -> Result<(Vec<u32>, String), PlanError> {
    let h = &model.hparams;
    let heads = h.head_count.as_ref().map_or(0, |x| x.max());
    let kv = h.head_count_kv.as_ref().map_or(heads, |x| x.max());
    let ok = |tp: u32| {
        let t = u64::from(tp);
        heads > 0
            && heads.is_multiple_of(t)
            && (kv == 0 || kv.is_multiple_of(t) || t.is_multiple_of(kv))
    };
    if let Some(tp) = pinned {
        if tp == 0 || tp > n {
            return Err(PlanError::Usage(format!(
                "--tensor-parallel {tp}: between 1 and the {n} GPUs planned"
            )));
        }
        if !ok(tp) {
            return Err(PlanError::Usage(format!(
                "--tensor-parallel {tp}: the model's {heads} attention heads ({kv} KV heads) do not split over {tp} GPUs"
            )));
        }
        return Ok((vec![tp], format!("--tensor-parallel {tp}")));
    }
    let sizes: Vec<u32> = (1..=n).filter(|&t| ok(t)).collect();
    let why = format!(
        "{heads} attention heads and {kv} KV heads split evenly over {}",
        sizes
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok((sizes, why))
}

/// vLLM 0.33's default `--max-num-batched-tokens` for `vllm serve` on this GPU (vllm/engine/arg_utils.py
/// `EngineArgs.get_batch_defaults`, OPENAI_API_SERVER): 16384 from 160 GiB, 8192 from 70 GiB except A100s, 2048
/// otherwise.
fn batched_tokens(g: &FleetGpu) -> (u32, String) {
    const GIB: u64 = 1 << 30;
    let mem = g.memory_total_bytes;
    let a100 = g.name.to_lowercase().contains("a100") || g.profile.contains("a100");
    let t = if mem >= 160 * GIB {
        16384
    } else if mem >= 70 * GIB && !a100 {
        8192
    } else {
        2048
    };
    (
        t,
        format!(
            "vLLM 0.33's own default for vllm serve on a {:.0} GiB {} (vllm/engine/arg_utils.py EngineArgs.get_batch_defaults): the chunk a prefill is cut into, kept so the plan runs the scheduler vLLM tunes",
            mem as f64 / GIB as f64,
            g.name
        ),
    )
}

/// The attention backend vLLM 0.33 selects first for this GPU (vllm/platforms/cuda.py `_get_backend_priorities`,
/// filtered by each backend's `supports_compute_capability` and KV dtype).
fn attention_backend(model: &ModelSpec, cc: Option<(u32, u32)>, kv: KvCacheDtype) -> &'static str {
    let mla = model.hparams.kv_lora_rank.unwrap_or(0) > 0;
    let major = cc.map_or(0, |c| c.0);
    match (mla, major) {
        (true, 10) => "FLASHINFER_MLA",
        (true, 12) => "TRITON_MLA",
        (true, 9) => "FLASH_ATTN_MLA",
        (true, _) => "TRITON_MLA",
        (false, 10) => "FLASHINFER",
        // FlashAttention 2 (Ampere, Ada) has no FP8 KV cache; FlashInfer takes it.
        (false, 8) if kv == KvCacheDtype::Fp8 => "FLASHINFER",
        (false, m) if m >= 8 => "FLASH_ATTN",
        _ => "TRITON_ATTN",
    }
}

impl Runtime for Vllm<'_> {
    type Point = Point;

    fn id(&self) -> RuntimeId {
        RuntimeId::Vllm
    }

    fn engine(&self) -> (&'static str, &'static str) {
        ("vllm", mem::VERSION)
    }

    fn ladders(&self) -> Vec<Vec<Point>> {
        let mut out = Vec::new();
        for eager in [false, true] {
            for (kv, _) in &self.kv_types {
                let ladder: Vec<Point> = self
                    .tp_sizes
                    .iter()
                    .map(|&tp| {
                        let (replicas, seqs) = self.replicas(tp);
                        Point {
                            tp,
                            gpus: (0..tp as usize).collect(),
                            replicas,
                            kv: *kv,
                            max_num_seqs: seqs,
                            enforce_eager: eager,
                        }
                    })
                    .collect();
                if !ladder.is_empty() {
                    out.push(ladder);
                }
            }
        }
        out
    }

    fn size(&self) -> Size {
        super::context_size(
            self.req.overrides,
            self.workload(),
            self.n_ctx_train,
            mem::DEFAULT_BLOCK_SIZE,
        )
    }

    fn evaluate(&self, p: &Point, len: u32) -> Result<Eval, String> {
        let m = self.memory(p, len)?;
        let w = self.workload();
        let mut memory = Vec::with_capacity(p.gpus.len());
        for &i in &p.gpus {
            let g = self.gpus[i];
            let components = MemoryComponents {
                weights_bytes: m.nk.weights.per_rank_bytes,
                kv_cache_bytes: m.kv_alloc,
                compute_bytes: m
                    .nk
                    .activation_peak_bytes
                    .saturating_add(m.nk.runner_buffers_bytes),
                overhead_bytes: m.nk.non_torch_bytes,
                cuda_graphs_bytes: m.nk.cuda_graph_bytes,
                ..MemoryComponents::default()
            };
            let total = m.non_kv.saturating_add(m.kv_alloc);
            memory.push(MemoryDevice {
                device: g.id.to_string(),
                components,
                total_bytes: total,
                capacity_bytes: g.capacity_bytes,
                reserve_bytes: m.reserve,
            });
        }
        let per_gpu = m.non_kv.saturating_add(m.kv_alloc);
        let total_bytes = per_gpu
            .saturating_mul(u64::from(p.tp))
            .saturating_mul(u64::from(p.replicas));
        let load = self.load(p, &m);
        let gperf = self.gpus[p.gpus[0]].perf();
        let shape = Shape {
            prompt_tokens: w.prompt_tokens,
            generation_tokens: w.generation_tokens,
            concurrency: u64::from(p.max_num_seqs),
            ubatch: u64::from(self.max_num_batched_tokens.max(p.max_num_seqs)),
        };
        let pairs = [(gperf.clone(), load.clone())];
        let mut pred = perf::predict(&pairs, shape);
        // Tensor-parallel all-reduces and eager kernel launches add to every step.
        let n = p.max_num_seqs.max(1) as f64;
        let mut step = pred.time_per_output_token_ms / 1e3 + self.comm_seconds(p, n);
        if p.enforce_eager {
            step += EAGER_LAUNCH_PER_LAYER_S * f64::from(self.n_layer);
        }
        let prompt = w.prompt_tokens.max(1) as f64;
        let prefill_s = prompt / pred.prefill_tokens_per_s.max(f64::MIN_POSITIVE)
            + self.comm_seconds(p, prompt);
        pred.time_per_output_token_ms = step * 1e3;
        pred.decode_tokens_per_s = n / step * f64::from(p.replicas);
        pred.prefill_tokens_per_s = prompt / prefill_s * f64::from(p.replicas);
        pred.time_to_first_token_ms = (prefill_s + step) * 1e3;
        let knee = perf::decode_knee(&gperf, &load);
        let mut notes = Vec::new();
        if m.overflow == 0 && m.capacity.tokens < u64::from(len) {
            notes.push(format!(
                "the KV cache holds {} tokens, fewer than --max-model-len {len}: vLLM would refuse to start",
                m.capacity.tokens
            ));
        }
        Ok(Eval {
            memory,
            total_bytes,
            overflow: m.overflow,
            ladder_overflow: m.overflow,
            prediction: pred,
            knee,
            notes,
        })
    }

    fn follow_up(&self, _ladder: &[Point], _p: &Point, _e: &Eval) -> Option<Vec<Point>> {
        None
    }

    fn variant(&self, p: &Point) -> String {
        match p.kv {
            KvCacheDtype::Auto => "auto".into(),
            KvCacheDtype::Fp8 => "fp8".into(),
        }
    }

    fn measured_here(&self, p: &Point, t: &crate::evidence::ThroughputPoint) -> bool {
        // A measured vLLM throughput names its devices; the planner checks those, the sequences and that the
        // row spanned as many GPUs as the plan uses, and here the tensor-parallel size it ran at (a row that does
        // not say ran one GPU). A plan with data-parallel replicas uses more GPUs than one replica's row spans,
        // so a per-replica rate never stands for its total.
        t.tensor_parallel.unwrap_or(1) == p.tp && t.gpu_layers.is_none()
    }

    fn sequences(&self, p: &Point) -> u32 {
        p.max_num_seqs
    }

    fn preferred_variant(&self) -> String {
        match self.kv_types[0].0 {
            KvCacheDtype::Auto => "auto".into(),
            KvCacheDtype::Fp8 => "fp8".into(),
        }
    }

    fn variant_key(&self) -> &'static str {
        "settings.kv_cache_dtype"
    }

    fn min_gain(&self, variant: &str) -> Option<(f64, String)> {
        let r = self.req.profiles.kv_cache(RuntimeId::Vllm, variant)?;
        Some((r.min_gain?, r.id.clone()))
    }

    fn group(&self, p: &Point) -> (u8, usize) {
        (u8::from(p.enforce_eager), p.tp as usize)
    }

    fn summary(&self, c: &Candidate<Point>) -> (Settings, Vec<String>) {
        let (s, _) = self.settings(c);
        (
            Settings::Vllm(s),
            c.point
                .gpus
                .iter()
                .map(|&i| self.gpus[i].id.to_string())
                .collect(),
        )
    }

    fn label(&self, c: &Candidate<Point>) -> String {
        format!(
            "tensor parallel {}, KV {}, --max-model-len {} x {} sequences{}",
            c.point.tp,
            self.variant(&c.point),
            c.size,
            c.point.max_num_seqs,
            if c.point.enforce_eager { ", eager" } else { "" }
        )
    }

    fn describe(&self, c: &Candidate<Point>) -> Described {
        self.describe_chosen(c)
    }

    fn suggestions(&self, near: &Candidate<Point>, _all: &[Candidate<Point>]) -> Vec<String> {
        let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
        let mut s = vec![format!(
            "the nearest configuration ({}) needs {:.2} GiB more on each of its GPUs",
            self.label(near),
            gib(near.eval.overflow)
        )];
        let Ok(m) = self.memory(&near.point, near.size) else {
            return s;
        };
        let per_seq = m.kv.min_bytes;
        if per_seq > 0 && near.eval.overflow > 0 {
            let room = m.cap.saturating_sub(m.reserve).saturating_sub(m.non_kv);
            let seqs_fit = room / per_seq;
            if seqs_fit >= 1 && near.point.max_num_seqs > 1 {
                s.push(format!(
                    "fewer sequences: --parallel {seqs_fit} at --max-model-len {} fits the KV cache left after the weights",
                    near.size
                ));
            }
            let tokens_fit = (room as f64 / per_seq as f64 * f64::from(near.size)
                / f64::from(near.point.max_num_seqs.max(1))) as u64;
            let shorter = tokens_fit / u64::from(mem::DEFAULT_BLOCK_SIZE)
                * u64::from(mem::DEFAULT_BLOCK_SIZE);
            if shorter >= u64::from(mem::DEFAULT_BLOCK_SIZE) {
                s.push(format!(
                    "a shorter context: about -c {shorter} tokens per sequence"
                ));
            }
        }
        if !self.tp_sizes.iter().any(|&t| t > near.point.tp) {
            s.push(format!(
                "more GPUs: its weights take {:.2} GiB per GPU at tensor parallel {}",
                gib(m.nk.weights.per_rank_bytes),
                near.point.tp
            ));
        }
        if !self.kv_types.iter().any(|(k, _)| *k == KvCacheDtype::Fp8) {
            s.push(format!(
                "an fp8 KV cache halves it (GPUs of compute capability 8.9+; add q8_0 to workload {}'s kv_cache preferences)",
                self.workload().id
            ));
        }
        s.push(format!(
            "a quantized checkpoint (AWQ, GPTQ, FP8) of this model: its weights take {:.2} GiB",
            gib(self.req.model.tensor_bytes())
        ));
        s
    }
}

impl Vllm<'_> {
    fn describe_chosen(&self, c: &Candidate<Point>) -> Described {
        let p = &c.point;
        let w = self.workload();
        let fleet = self.req.fleet;
        let (settings, m) = self.settings(c);
        let mut prov: BTreeMap<String, Provenance> = BTreeMap::new();
        let mut put = |k: &str, source: Source, detail: String| {
            prov.insert(k.to_string(), Provenance { source, detail });
        };
        let ov = self.req.overrides;
        let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
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
        let per_seq = super::context_provenance(ov, w, self.n_ctx_train, "vLLM");
        put("settings.max_model_len", per_seq.0, per_seq.1);
        put(
            "settings.max_num_seqs",
            if ov.parallel.is_some() {
                Source::User
            } else {
                Source::Profile
            },
            format!(
                "workload {} concurrency {}{}",
                w.id,
                self.concurrency,
                if p.replicas > 1 {
                    format!(" over {} replicas", p.replicas)
                } else {
                    String::new()
                }
            ),
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
                "every byte left per GPU: {:.2} GiB free - {:.2} GiB margin - {:.2} GiB weights - {:.2} GiB non-torch - {:.2} GiB sampler buffers ({} sequence slots) - {:.2} GiB profiling peak ({} sampler) - {:.2} GiB CUDA graphs, in whole blocks of {} bytes; the workload needs {:.2} GiB ({} sequences of {} tokens)",
                gib(m.cap),
                gib(m.reserve),
                gib(m.nk.weights.per_rank_bytes),
                gib(m.nk.non_torch_bytes),
                gib(m.nk.runner_buffers_bytes),
                p.max_num_seqs,
                gib(m.nk.activation_peak_bytes),
                m.nk.sampler.name(),
                gib(m.nk.cuda_graph_bytes),
                m.kv.page_bytes,
                gib(m.kv.min_bytes.saturating_mul(u64::from(p.max_num_seqs))),
                p.max_num_seqs,
                c.size
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
        let stages: Vec<Stage> = gpu_ids
            .iter()
            .map(|d| Stage {
                device: d.clone(),
                layers: Some([0, self.n_layer - 1]),
                output_layer: true,
            })
            .collect();
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
        let topology = Topology {
            nodes: fleet.nodes,
            data_parallel: fleet.nodes.saturating_mul(p.replicas),
            tensor_parallel: p.tp,
            pipeline_parallel: 1,
            stages,
        };
        let model_dir = launch::model_dir(self.req.model, self.req.model_path);
        let all_gpus: Vec<crate::fleet::DeviceId> = (0..(p.tp * p.replicas) as usize)
            .filter(|&i| i < self.gpus.len())
            .map(|i| self.gpus[i].id)
            .collect();
        let host_threads = fleet.host.usable_cores();
        let gpu_names: Vec<&str> = (0..all_gpus.len())
            .map(|i| self.gpus[i].name.as_str())
            .collect();
        let launch = launch::artifacts(
            &model_dir,
            &settings,
            &all_gpus,
            &gpu_names,
            host_threads,
            self.req.overrides.image.as_deref(),
        );
        let mut warnings = self.warnings.clone();
        warnings.extend(c.eval.notes.iter().cloned());
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
