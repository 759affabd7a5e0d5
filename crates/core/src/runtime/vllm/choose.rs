//! How vLLM's flags are chosen from the checkpoint, the GPUs and the workload: `--dtype`, `--quantization`,
//! the KV cache dtypes, the tensor-parallel sizes, `--max-num-batched-tokens`, `--gpu-memory-utilization` and
//! the attention backend vLLM is predicted to select.

use crate::fleet::FleetGpu;
use crate::profile::WorkloadProfile;
use crate::runtime::PlanError;
use optimizer_memory::vllm::{Dtype, KvCacheDtype};
use optimizer_model::ModelSpec;
use std::collections::BTreeMap;

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

/// `--gpu-memory-utilization`: vLLM checks at start-up, after its CUDA context exists, that `ceil(total × u)`
/// bytes are free (vllm/v1/worker/utils.py `request_memory`); with `--kv-cache-memory-bytes` given it sizes
/// nothing else by it. The share the plan's torch allocations take (everything but the non-torch memory),
/// rounded up to 0.01, at most the share the start-up check passes: the free memory less the CUDA context,
/// rounded down.
pub(super) fn utilization(torch_bytes: u64, free: u64, non_torch: u64, total: u64) -> f64 {
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
pub(super) fn choose_dtype(model: &ModelSpec, cc: Option<(u32, u32)>) -> (Dtype, String) {
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
pub(super) fn quantization_method(
    model: &ModelSpec,
    cc: Option<(u32, u32)>,
) -> Option<(String, String)> {
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

/// The compute capability from which an fp8 (e4m3) KV cache is native (Ada, Hopper, Blackwell).
pub(super) const FP8_KV_MIN_CC: (u32, u32) = (8, 9);

/// KV cache dtypes the workload allows, in its order: its 16-bit types are vLLM's `auto` (the model dtype), an
/// 8-bit type (`q8_0`, `fp8`) is vLLM's `fp8` (e4m3) where the GPU has FP8 (compute capability 8.9+: Ada,
/// Hopper, Blackwell). Other types have no vLLM counterpart and are skipped.
pub(super) fn kv_types(w: &WorkloadProfile, cc: Option<(u32, u32)>) -> Vec<(KvCacheDtype, String)> {
    let fp8_ok = cc.is_some_and(|c| c >= FP8_KV_MIN_CC);
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

/// `--kv-type NAME` as vLLM's `--kv-cache-dtype`: `auto` (the model dtype), or `fp8` (`fp8_e4m3`, the same
/// e4m3 cache) on GPUs of compute capability [`FP8_KV_MIN_CC`] or later. vLLM 0.33 takes more values
/// (tests/fixtures/vllm/serve-choices-0.33.0.json), but the memory model sizes only these two, so the others are
/// refused rather than planned with the wrong bytes per element (a usage error, exit 2).
pub(super) fn pinned_kv_type(
    name: &str,
    cc: Option<(u32, u32)>,
) -> Result<(KvCacheDtype, String), PlanError> {
    match name.to_lowercase().as_str() {
        "auto" => Ok((
            KvCacheDtype::Auto,
            format!("--kv-type {name}: vLLM's auto, the model dtype"),
        )),
        "fp8" | "fp8_e4m3" => match cc {
            Some(c) if c >= FP8_KV_MIN_CC => Ok((
                KvCacheDtype::Fp8,
                format!("--kv-type {name}: vLLM's fp8 (e4m3)"),
            )),
            _ => Err(PlanError::Usage(format!(
                "--kv-type {name}: an fp8 KV cache needs compute capability {}.{} or later (Ada, Hopper, Blackwell), and {}",
                FP8_KV_MIN_CC.0,
                FP8_KV_MIN_CC.1,
                cc.map_or(
                    "these GPUs do not say theirs".to_string(),
                    |(a, b)| format!("these GPUs have {a}.{b}")
                )
            ))),
        },
        _ => Err(PlanError::Usage(format!(
            "--kv-type {name}: vLLM plans take auto (the model dtype) or fp8 (fp8_e4m3) for --kv-cache-dtype; the memory model sizes no other"
        ))),
    }
}

/// Tensor-parallel sizes vLLM accepts for this model on `n` GPUs: attention heads divisible by the size, and KV
/// heads divisible by it or it by them (vLLM replicates KV heads when there are fewer than ranks:
/// vllm/model_executor/layers/linear.py `QKVParallelLinear`; vllm/config/model.py
/// `verify_with_parallel_config`: "Total number of attention heads must be divisible by tensor parallel size").
pub(super) fn tp_sizes(
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

/// vLLM 0.33's tier of `vllm serve` defaults for a GPU (vllm/engine/arg_utils.py `EngineArgs.get_batch_defaults`,
/// OPENAI_API_SERVER): from 160 GiB the largest; from 70 GiB, except A100s and the GB10 (compute capability 12.1,
/// "the memory but not the compute of a large discrete GPU"), the H100 tier; else the small one. Returns
/// (`max_num_batched_tokens`, `max_num_seqs`).
pub(crate) fn serve_defaults(g: &FleetGpu) -> (u32, u32) {
    use crate::units::GIB_BYTES as GIB;
    let mem = g.memory_total_bytes;
    let a100 = g.name.to_lowercase().contains("a100") || g.profile.contains("a100");
    let gb10 = g.compute_capability == Some((12, 1));
    if mem >= 160 * GIB {
        (16384, 1024)
    } else if mem >= 70 * GIB && !a100 && !gb10 {
        (8192, 1024)
    } else {
        (2048, 256)
    }
}

/// vLLM 0.33's default `--max-num-batched-tokens` for `vllm serve` on this GPU ([`serve_defaults`]).
pub(super) fn batched_tokens(g: &FleetGpu) -> (u32, String) {
    use crate::units::gib;
    let t = serve_defaults(g).0;
    (
        t,
        format!(
            "vLLM 0.33's own default for vllm serve on a {:.0} GiB {} (vllm/engine/arg_utils.py EngineArgs.get_batch_defaults): the chunk a prefill is cut into, kept so the plan runs the scheduler vLLM tunes",
            gib(g.memory_total_bytes),
            g.name
        ),
    )
}

/// The attention backend vLLM 0.33 selects first for this GPU (vllm/platforms/cuda.py `_get_backend_priorities`,
/// filtered by each backend's `supports_compute_capability` and KV dtype).
pub(super) fn attention_backend(
    model: &ModelSpec,
    cc: Option<(u32, u32)>,
    kv: KvCacheDtype,
) -> &'static str {
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
