//! Tensor-parallel communication cost: the seconds the all-reduces of one forward step spend on the GPUs' link.
//! Pure: takes values, touches nothing.
//!
//! What vLLM 0.33 runs (the pinned release; /work/vllm-src/src/vllm at `__version__ = '0.33.0'`):
//! - Two all-reduces per transformer layer: `RowParallelLinear.forward` calls `tensor_model_parallel_all_reduce`
//!   on its output when `reduce_results` and `tp_size > 1` (model_executor/layers/linear.py), and a Llama-style
//!   layer has two such layers, the attention's `o_proj` and the MLP's `down_proj` (model_executor/models/llama.py,
//!   `LlamaAttention.__init__`, `LlamaMLP.__init__`). A MoE block reduces its experts' sum once, in the MLP's place.
//!   Each all-reduce carries the step's `tokens × hidden_size` activations in the model dtype.
//! - Which kernel reduces (distributed/device_communicators/cuda_communicator.py, `CudaCommunicator.all_reduce`):
//!   FlashInfer's one-shot/two-shot kernels and vLLM's own custom all-reduce (custom_all_reduce.py,
//!   `CustomAllreduce.should_custom_ar`: at most 8 ranks, all of them peer-to-peer connected, or exactly 2; buffers
//!   of `max_size = 8192 * 1024` bytes by default) take the messages they were tuned for, PyNCCL the rest
//!   (all_reduce_utils.py: `CUSTOM_ALL_REDUCE_MAX_SIZES`, `NCCL_SYMM_MEM_ALL_REDUCE_CONFIG`, whose comment reports
//!   the H100 benchmark where each backend wins). The custom kernels need GPU peer-to-peer access: over NVLink a
//!   group of up to 8, over PCIe only a pair (`fully_connected` is false for PCIe, so 4 PCIe GPUs take NCCL).
//!
//! The model: a ring all-reduce moves `2(n−1)/n` of the message per GPU in each direction ([`ring_factor`]), so
//! one all-reduce takes a fixed cost plus that traffic over a bus bandwidth. Two paths are priced and the faster
//! taken, because vLLM's dispatch thresholds were set where one path overtakes the other:
//! - the NCCL ring over the link's per-direction peak, with NCCL's fixed cost ([`Link`]);
//! - on NVLink, for messages the custom kernels accept, their lower fixed cost at their lower bus bandwidth
//!   ([`P2P_LATENCY_S`], [`P2P_BUS_BYTES_PER_S`]).
//!
//! Trade-off: the peer-to-peer figures were measured on H100 (the only public per-size table of vLLM's kernel
//! found) and are used for every NVLink part, and FlashInfer's separate kernel is priced as vLLM's custom one;
//! a decode step's all-reduces (kilobytes) are bound by the fixed cost, which varies far less between parts than
//! the bandwidth does.

use serde::Serialize;

use crate::profile::Interconnect;

/// How two GPUs of a tensor-parallel group reach each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LinkKind {
    /// NVLink (through NVSwitch on SXM boards, a bridge between two PCIe cards).
    NvLink,
    /// PCIe through the host.
    Pcie,
    /// The network between nodes (a cluster file's `fabric`: InfiniBand, RoCE, Ethernet).
    Fabric,
}

/// The link a tensor-parallel group all-reduces over, as the NCCL ring sees it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Link {
    pub kind: LinkKind,
    /// Per-direction peak bytes per second of one GPU's link (the ring's bus bandwidth).
    pub bytes_per_s: f64,
    /// NCCL's fixed cost of one all-reduce on this link, seconds.
    pub latency_s: f64,
}

/// NCCL's fixed cost of one all-reduce over NVLink, seconds. vLLM's comment on its 4-GPU H100 benchmark
/// (all_reduce_utils.py, `NCCL_SYMM_MEM_ALL_REDUCE_CONFIG`: "custom_AR wins for 32K-256K", NCCL from 512K) puts
/// the crossover at 512 KiB; vLLM's custom kernel takes 26.9 µs there (sgl-project/sglang PR #2904, H100, tp 4,
/// 524288 B: 0.0269 ms), and the ring's transfer at that size is 1.5 × 524288 B / 450 GB/s = 1.7 µs, leaving
/// 25.2 µs of fixed cost. The 8-GPU crossover (128 KiB) gives 17 µs; the larger is kept, since the ring is only
/// taken above the crossover, where its transfer dominates.
pub(crate) const NCCL_NVLINK_LATENCY_S: f64 = 25.0e-6;

/// NCCL's fixed cost of one small collective over PCIe, seconds: 11.3 to 11.9 µs for 8 to 64 B between two RTX
/// 4090s over PCIe (tinygrad/open-gpu-kernel-modules issue #17, nccl-tests `alltoall_perf -g 2`, P2P disabled).
const NCCL_PCIE_LATENCY_S: f64 = 12.0e-6;

/// Fixed cost of vLLM's peer-to-peer all-reduce kernel, seconds: the median of its nine small-message times on
/// H100 (sgl-project/sglang PR #2904, "vllm" table, 512 / 4096 / 32768 B at tp 2/4/8: 9.5, 9.1, 10.1, 8.8, 8.5,
/// 9.3, 8.7, 9.2, 11.8 µs), measured without CUDA graphs; vLLM replays its decode steps as graphs, so this
/// bounds the cost from above.
pub const P2P_LATENCY_S: f64 = 9.2e-6;

/// Bus bandwidth of vLLM's peer-to-peer kernel, bytes/s: ring traffic over the time above the fixed cost at
/// 1 MiB in the same table (tp 2: 1.0 × 1048576 B / (26.6 − 8.8) µs = 59.0 GB/s; tp 4: 1.5 × 1048576 /
/// (40.2 − 9.1) = 50.6; tp 8: 1.75 × 1048576 / (45.0 − 10.1) = 52.6), median 52.6 GB/s: far below NVLink's
/// peak, which is why NCCL wins for large messages.
pub const P2P_BUS_BYTES_PER_S: f64 = 52.6e9;

/// Largest message vLLM's custom all-reduce takes: its default buffer (custom_all_reduce.py,
/// `CustomAllreduce.__init__`, `max_size=8192 * 1024`).
const P2P_MAX_BYTES: f64 = 8192.0 * 1024.0;

/// Most ranks vLLM's custom all-reduce serves (`CustomAllreduce.should_custom_ar`: `world_size > 8` → NCCL).
const P2P_MAX_RANKS: u32 = 8;

/// The NVLink link of a part, when its profile has one: half the total (the profiles carry both directions:
/// h100-sxm 900 GB/s total = 450 per direction, NVIDIA H100 datasheet; ai-dynamo/aiconfigurator
/// `intra_node_bw` 450). A bridged pair of PCIe cards has NVLink between the two only: a larger group of them
/// reduces over PCIe, which the caller decides ([`pcie_link`]).
fn nvlink_link(i: &Interconnect) -> Option<Link> {
    let total_gb_s = i.nvlink_gb_s.filter(|g| g.is_finite() && *g > 0.0)?;
    Some(Link {
        kind: LinkKind::NvLink,
        bytes_per_s: total_gb_s * 1e9 / 2.0,
        latency_s: NCCL_NVLINK_LATENCY_S,
    })
}

/// A PCIe link of `bytes_per_s` per direction. The rate comes from the caller (`fleet::pcie_bytes_per_s`, from
/// the profile's generation and lanes): `perf` sits below `fleet` and may not reach it (tests/it/architecture.rs).
pub(crate) fn pcie_link(bytes_per_s: f64) -> Link {
    Link {
        kind: LinkKind::Pcie,
        bytes_per_s,
        latency_s: NCCL_PCIE_LATENCY_S,
    }
}

/// The link between two GPUs: NVLink when both have it (the slower one's), else PCIe at the slower side's
/// `pcie_bytes_per_s` (pass `fleet::pcie_bytes_per_s`); `None` when neither is known.
pub fn link_between(
    a: &Interconnect,
    b: &Interconnect,
    pcie_bytes_per_s: impl Fn(&Interconnect) -> Option<f64>,
) -> Option<Link> {
    let slower = |x: Option<Link>, y: Option<Link>| match (x, y) {
        (Some(x), Some(y)) => Some(if x.bytes_per_s <= y.bytes_per_s { x } else { y }),
        _ => None,
    };
    let pcie = |i: &Interconnect| {
        pcie_bytes_per_s(i)
            .filter(|r| r.is_finite() && *r > 0.0)
            .map(pcie_link)
    };
    slower(nvlink_link(a), nvlink_link(b)).or_else(|| slower(pcie(a), pcie(b)))
}

/// The inter-node link one tensor-parallel rank sends over: the cluster file's per-link bandwidth (one
/// direction), shared when the node has fewer links than ranks (`links_per_node` absent: one link for the node),
/// and its stated latency (0 when the file gives none: the fixed cost is then not counted, and the caller says
/// so). `None` without a bandwidth.
pub(crate) fn fabric_link(f: &crate::hardware::Fabric, ranks_per_node: u32) -> Option<Link> {
    let bw = f.bandwidth_gb_s.as_ref()?.value * 1e9;
    let links = f.links_per_node.as_ref().map_or(1, |l| l.value).max(1);
    let ranks = ranks_per_node.max(1);
    let share = f64::from(links.min(ranks)) / f64::from(ranks);
    Some(Link {
        kind: LinkKind::Fabric,
        bytes_per_s: bw * share,
        latency_s: f.latency_us.as_ref().map_or(0.0, |l| l.value * 1e-6),
    })
}

/// Tensors a decoder layer hands to the next pipeline stage per token: vLLM's Llama and DeepSeek models send
/// `IntermediateTensors({"hidden_states", "residual"})` (vllm/model_executor/models/llama.py `LlamaModel.forward`,
/// deepseek_v2.py `DeepseekV2Model.forward`).
const PP_TENSORS_PER_TOKEN: f64 = 2.0;

/// Seconds one pipeline hand-off of `tokens` tokens takes between two stages over `link`: each tensor-parallel
/// rank sends its `1/tp` slice (vllm/v1/worker/gpu_worker.py `execute_model`: `send_tensor_dict(...,
/// all_gather_group=get_tp_group())`, vllm/distributed/parallel_state.py `send_tensor_dict` splits a tensor over
/// that group when it divides), over its own share of the link.
pub(crate) fn pp_send_seconds(
    link: &Link,
    tp: u32,
    tokens: u64,
    hidden: u64,
    dtype_bytes: u64,
) -> f64 {
    let bytes = PP_TENSORS_PER_TOKEN * tokens as f64 * hidden as f64 * dtype_bytes as f64
        / f64::from(tp.max(1));
    if bytes <= 0.0 || !link.bytes_per_s.is_finite() || link.bytes_per_s <= 0.0 {
        return 0.0;
    }
    link.latency_s + bytes / link.bytes_per_s
}

/// One decode step of a pipeline of `stages` stages, seconds, and the share of it the stages idle (the bubble).
/// vLLM keeps `pipeline_parallel_size` batches in flight (vllm/config/vllm.py `max_concurrent_batches`; the
/// engine's batch queue, vllm/v1/engine/core.py `step_with_batch_queue`), so with `micro_batches` batches of
/// `stage_s` per stage and `send_s` per hand-off, a batch comes back after `stages × (stage_s + send_s)` and a
/// stage is busy `micro_batches × stage_s` of that: every sequence gets a token per cycle
/// `max(micro_batches × stage_s, stages × (stage_s + send_s))`.
pub(crate) fn pipeline_cycle(
    stages: u32,
    micro_batches: u32,
    stage_s: f64,
    send_s: f64,
) -> (f64, f64) {
    let p = f64::from(stages.max(1));
    let m = f64::from(micro_batches.clamp(1, stages.max(1)));
    let busy = m * stage_s;
    let cycle = busy.max(p * (stage_s + send_s));
    let bubble = if cycle > 0.0 { 1.0 - busy / cycle } else { 0.0 };
    (cycle, bubble)
}

/// The link a collective spanning nodes runs over (a tensor-parallel group across nodes, an expert-parallel
/// group's all-gather and reduce-scatter): the rank's share of the fabric ([`fabric_link`]), NCCL's ring being
/// bound by its slowest hop, and a fixed cost of NCCL's own on NVLink ([`NCCL_NVLINK_LATENCY_S`]) plus the
/// fabric's stated latency: a collective across nodes runs the same protocol steps inside each node and adds
/// the network's hop, so the in-node cost is its floor (a lower bound, stated as such).
pub(crate) fn fabric_collective_link(fabric: &Link) -> Link {
    Link {
        kind: LinkKind::Fabric,
        bytes_per_s: fabric.bytes_per_s,
        latency_s: NCCL_NVLINK_LATENCY_S + fabric.latency_s,
    }
}

/// Seconds of one ring all-gather (or reduce-scatter) over `ranks` ranks, each contributing `bytes`: every rank
/// receives (sends) the other `ranks - 1` shares over its link, after the fixed cost.
fn allgather_seconds(link: &Link, ranks: u32, bytes: f64) -> f64 {
    if ranks <= 1 || bytes.is_nan() || bytes <= 0.0 || link.bytes_per_s <= 0.0 {
        return 0.0;
    }
    link.latency_s + f64::from(ranks - 1) * bytes / link.bytes_per_s
}

/// Seconds one MoE layer's dispatch and combine take under vLLM 0.33's default expert-parallel backend
/// (`allgather_reducescatter`: vllm/distributed/device_communicators/all2all.py `AgRsAll2AllManager`): an
/// all-gather over the `dp` engines of each engine's `tokens` hidden states and router logits
/// (`dispatch_router_logits`; the logits in the router's dtype, the model's for DeepSeek-V3 and Kimi-K2:
/// vllm/model_executor/models/deepseek_v2.py `_get_moe_router_dtype`), then a reduce-scatter of the experts'
/// output back (`combine`, `reduce_scatterv`).
pub(crate) fn ep_layer_seconds(
    link: &Link,
    dp: u32,
    tokens: u64,
    hidden: u64,
    experts: u64,
    dtype_bytes: u64,
) -> f64 {
    let t = tokens as f64 * dtype_bytes as f64;
    allgather_seconds(link, dp, t * (hidden + experts) as f64)
        + allgather_seconds(link, dp, t * hidden as f64)
}

/// The share of a message a ring all-reduce sends (and receives) per GPU: `2(n−1)/n` (reduce-scatter then
/// all-gather, each `(n−1)/n`).
fn ring_factor(ranks: u32) -> f64 {
    if ranks <= 1 {
        return 0.0;
    }
    let n = f64::from(ranks);
    2.0 * (n - 1.0) / n
}

/// Seconds of one all-reduce of `bytes` across `ranks` GPUs over `link`: the faster of the NCCL ring and, on
/// NVLink for the messages it accepts, vLLM's peer-to-peer kernel (see the module doc). 0 for one rank or an
/// empty message.
fn allreduce_seconds(link: &Link, ranks: u32, bytes: f64) -> f64 {
    // NaN and non-positive sizes price nothing.
    if ranks <= 1 || bytes.is_nan() || bytes <= 0.0 {
        return 0.0;
    }
    let traffic = ring_factor(ranks) * bytes;
    let ring = link.latency_s + traffic / link.bytes_per_s;
    let p2p_applies =
        link.kind == LinkKind::NvLink && ranks <= P2P_MAX_RANKS && bytes < P2P_MAX_BYTES;
    if p2p_applies {
        ring.min(P2P_LATENCY_S + traffic / P2P_BUS_BYTES_PER_S)
    } else {
        ring
    }
}

/// All-reduces vLLM runs per transformer layer (attention `o_proj`, MLP or MoE `down_proj`).
const ALLREDUCES_PER_LAYER: f64 = 2.0;

/// Seconds one forward step of `tokens` tokens spends all-reducing across `ranks` GPUs: two all-reduces per
/// layer of `tokens × hidden × dtype_bytes` bytes each. Decode: `tokens` = the sequences in the batch; prefill:
/// the tokens of the micro-batch.
pub fn tp_step_seconds(
    link: &Link,
    ranks: u32,
    layers: u32,
    tokens: u64,
    hidden: u64,
    dtype_bytes: u64,
) -> f64 {
    // f64 products: no overflow, and a byte count past 2^53 is far outside any message this prices.
    let bytes = tokens as f64 * hidden as f64 * dtype_bytes as f64;
    ALLREDUCES_PER_LAYER * f64::from(layers) * allreduce_seconds(link, ranks, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(pcie_gen: u32, nvlink: Option<f64>) -> Interconnect {
        Interconnect {
            pcie_gen: Some(pcie_gen),
            pcie_lanes: Some(16),
            nvlink_gb_s: nvlink,
        }
    }

    /// `fleet::pcie_bytes_per_s` for the two generations used here (16 and 32 GT/s × 128/130 × lanes / 8).
    fn pcie_gen4_or_5(i: &Interconnect) -> Option<f64> {
        let gt_s = match i.pcie_gen? {
            4 => 16e9,
            5 => 32e9,
            _ => return None,
        };
        Some(gt_s * 128.0 / 130.0 * f64::from(i.pcie_lanes?) / 8.0)
    }

    #[test]
    fn one_rank_or_no_bytes_costs_nothing() {
        let l = nvlink_link(&iface(5, Some(900.0))).unwrap();
        assert_eq!(allreduce_seconds(&l, 1, 1e6), 0.0);
        assert_eq!(allreduce_seconds(&l, 4, 0.0), 0.0);
        assert_eq!(allreduce_seconds(&l, 4, f64::NAN), 0.0);
        assert_eq!(tp_step_seconds(&l, 1, 80, 1, 8192, 2), 0.0);
    }

    #[test]
    fn nvlink_is_half_the_total_and_pcie_per_direction() {
        let h100 = iface(5, Some(900.0));
        assert_eq!(nvlink_link(&h100).unwrap().bytes_per_s, 450e9);
        let l4 = iface(4, None);
        let p = link_between(&l4, &l4, pcie_gen4_or_5).unwrap();
        assert_eq!(p.kind, LinkKind::Pcie);
        // Gen 4 x16: 16 GT/s × 128/130 × 16 lanes / 8 = 31.5 GB/s.
        assert!((p.bytes_per_s - 31.508e9).abs() < 1e7);
        // One side without NVLink: the pair talks over PCIe, at the slower side's rate.
        let mixed = link_between(&h100, &l4, pcie_gen4_or_5).unwrap();
        assert_eq!(mixed.kind, LinkKind::Pcie);
        assert_eq!(mixed.bytes_per_s, p.bytes_per_s);
        assert!(link_between(&Interconnect::default(), &l4, pcie_gen4_or_5).is_none());
    }

    #[test]
    fn small_nvlink_messages_take_the_peer_to_peer_kernel() {
        // Decode at batch 1 of an 8192-wide model: 16 KiB, bound by the kernel's fixed cost.
        let l = nvlink_link(&iface(5, Some(900.0))).unwrap();
        let t = allreduce_seconds(&l, 2, 16384.0);
        assert!((t - (P2P_LATENCY_S + 16384.0 / P2P_BUS_BYTES_PER_S)).abs() < 1e-12);
        // The small rows of the table the constants come from (sglang PR #2904, vLLM's kernel on H100), within
        // 15 %: (ranks, bytes, measured µs).
        for (ranks, bytes, us) in [
            (2, 4096.0, 8.8),
            (4, 4096.0, 8.5),
            (8, 4096.0, 9.3),
            (2, 32768.0, 8.7),
            (4, 32768.0, 9.2),
            (8, 32768.0, 11.8),
        ] {
            let t = allreduce_seconds(&l, ranks, bytes) * 1e6;
            assert!(
                (t / us - 1.0).abs() < 0.15,
                "{ranks} ranks, {bytes} B: {t:.2} µs vs {us}"
            );
        }
    }

    #[test]
    fn large_nvlink_messages_take_the_ring() {
        // A 4096-token prefill micro-batch of the same model: 64 MiB, past the custom kernel's buffer.
        let l = nvlink_link(&iface(5, Some(900.0))).unwrap();
        let bytes = 4096.0 * 8192.0 * 2.0;
        let t = allreduce_seconds(&l, 4, bytes);
        assert!((t - (NCCL_NVLINK_LATENCY_S + 1.5 * bytes / 450e9)).abs() < 1e-12);
        // PCIe never takes the peer-to-peer path, however small the message.
        let p = pcie_link(31.5e9);
        assert_eq!(
            allreduce_seconds(&p, 2, 16.0),
            NCCL_PCIE_LATENCY_S + 16.0 / p.bytes_per_s
        );
    }

    #[test]
    fn a_full_pipeline_has_no_bubble_and_one_batch_idles_the_rest() {
        // Two stages, two batches in flight, no send cost: each stage always busy.
        assert_eq!(pipeline_cycle(2, 2, 0.01, 0.0), (0.02, 0.0));
        // One batch: it visits both stages in turn; each stage idles half the cycle.
        let (c, b) = pipeline_cycle(2, 1, 0.01, 0.0);
        assert_eq!(c, 0.02);
        assert!((b - 0.5).abs() < 1e-12);
        // The hand-off lengthens the round trip past the busy time.
        let (c, b) = pipeline_cycle(2, 2, 0.01, 0.001);
        assert!((c - 0.022).abs() < 1e-12 && b > 0.0);
    }

    #[test]
    fn a_pipeline_send_is_the_ranks_slice_over_its_share_of_the_fabric() {
        use crate::hardware::{Fabric, FabricKind, Sourced};
        let f = Fabric {
            kind: FabricKind::Infiniband,
            links_per_node: Some(Sourced {
                value: 8,
                source: "test".into(),
            }),
            bandwidth_gb_s: Some(Sourced {
                value: 50.0,
                source: "test".into(),
            }),
            latency_us: None,
        };
        let l = fabric_link(&f, 8).unwrap();
        assert_eq!(
            (l.kind, l.bytes_per_s, l.latency_s),
            (LinkKind::Fabric, 50e9, 0.0)
        );
        // One link for four ranks: each gets a quarter.
        let one = Fabric {
            links_per_node: None,
            ..f.clone()
        };
        assert_eq!(fabric_link(&one, 4).unwrap().bytes_per_s, 12.5e9);
        // 64 tokens x 16384 wide x 2 B x (hidden, residual) / 8 ranks over 50 GB/s.
        let t = pp_send_seconds(&l, 8, 64, 16384, 2);
        assert!((t - 2.0 * 64.0 * 16384.0 * 2.0 / 8.0 / 50e9).abs() < 1e-15);
    }

    #[test]
    fn a_step_pays_two_allreduces_per_layer() {
        let l = nvlink_link(&iface(5, Some(900.0))).unwrap();
        let one = allreduce_seconds(&l, 4, 8.0 * 8192.0 * 2.0);
        assert_eq!(tp_step_seconds(&l, 4, 80, 8, 8192, 2), 160.0 * one);
    }

    #[test]
    fn an_expert_layer_gathers_every_engines_tokens_and_scatters_them_back() {
        let fabric = Link {
            kind: LinkKind::Fabric,
            bytes_per_s: 50e9,
            latency_s: 0.0,
        };
        let l = fabric_collective_link(&fabric);
        assert_eq!(l.latency_s, NCCL_NVLINK_LATENCY_S);
        // 2 engines of 32 tokens, 7168 wide, 384 experts, 2 bytes: each receives the other's share twice.
        let t = ep_layer_seconds(&l, 2, 32, 7168, 384, 2);
        let gather = 32.0 * 2.0 * (7168.0 + 384.0) / 50e9;
        let scatter = 32.0 * 2.0 * 7168.0 / 50e9;
        assert!((t - (2.0 * NCCL_NVLINK_LATENCY_S + gather + scatter)).abs() < 1e-15);
        assert_eq!(ep_layer_seconds(&l, 1, 32, 7168, 384, 2), 0.0);
        // 16 engines: 15 shares each way.
        let t16 = allgather_seconds(&l, 16, 1e6);
        assert!((t16 - (NCCL_NVLINK_LATENCY_S + 15.0 * 1e6 / 50e9)).abs() < 1e-15);
    }
}
