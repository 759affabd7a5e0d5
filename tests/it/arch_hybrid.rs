//! Issue 26: memory of layers the pinned engine treats apart from plain attention blocks: multi-token-prediction
//! (NextN) blocks that are neither loaded nor cached, Falcon-H1 blocks that keep an attention cache beside their
//! recurrent state, and the scheduler's pipeline-parallel input copies. Each test builds a structurally faithful
//! header (crates/testkit/src/gguf_builder.rs, sparse data), states the engine's rule with its source, derives
//! the bytes from it and checks the estimate gives them.

use optimizer::memory::llama_cpp::{
    Estimate, GpuTarget, Machine, PIPELINE_COPIES, Params, estimate, row_size,
};
use optimizer::model::{self, GgmlType, ModelSpec};
use optimizer_testkit::gguf_builder::{
    GgufBuilder, synthetic_falcon_h1, synthetic_glm45_air, write_sparse,
};

fn load(b: &GgufBuilder, name: &str) -> (tempfile::TempDir, ModelSpec) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(name);
    write_sparse(b, &p).unwrap();
    let spec = model::load(&p).unwrap();
    (dir, spec)
}

fn gpu() -> GpuTarget {
    GpuTarget {
        name: "gpu".into(),
        free_bytes: 200 << 30,
        overhead_bytes: 0,
    }
}

fn params(n_ctx: u32) -> Params {
    Params {
        n_ctx,
        ..Params::default()
    }
}

/// Bytes of every tensor outside the NextN block `blk.46`.
fn trunk_weight_bytes(spec: &ModelSpec, nextn_block: u32) -> u64 {
    spec.tensors
        .iter()
        .filter(|t| t.layer != Some(nextn_block))
        .map(|t| t.bytes)
        .sum()
}

/// GLM-4.5-Air (`glm4moe`, 46 trunk blocks + 1 NextN block). The engine's rules:
/// - weights: src/models/glm4-moe.cpp `llama_model_glm4_moe::load_arch_tensors` flags every tensor of a block
///   `i >= n_layer()` `TENSOR_SKIP` unless `load_mtp` (false by default), and src/llama-model-loader.cpp
///   `llama_model_loader::create_tensor` creates none of them and subtracts their bytes ("skip unused tensors");
/// - KV: src/llama-model.cpp `llama_model::create_memory` filters the main context's cache to
///   `il < hparams.n_layer()` when `n_layer_nextn > 0`, `n_layer() = n_layer_all - n_layer_nextn`
///   (src/llama-hparams.cpp `llama_hparams::n_layer`); each cached block holds K and V of
///   `n_head_kv × head_dim` f16 per cell (src/llama-kv-cache.cpp `llama_kv_cache::llama_kv_cache`).
#[test]
fn glm45_air_nextn_block_is_neither_loaded_nor_cached() {
    let (_dir, spec) = load(&synthetic_glm45_air(), "glm-4.5-air-q4.gguf");
    assert_eq!(spec.hparams.block_count, Some(47));
    assert_eq!(spec.hparams.nextn_predict_layers, Some(1));
    let n_trunk = 46u64;
    let nextn_bytes: u64 = spec
        .tensors
        .iter()
        .filter(|t| t.layer == Some(46))
        .map(|t| t.bytes)
        .sum();
    // The NextN block of a Q4 GLM-4.5-Air file is about 1.3 GiB (issue 26).
    assert!(nextn_bytes > 1 << 30, "{nextn_bytes}");

    // CPU only, no SIMD flags: nothing repacks, every loaded byte is in `weights_bytes`.
    let e = estimate(&spec, &params(4096), &Machine::default()).unwrap();
    let kv_cell = 2 * row_size(GgmlType::F16, 8 * 128); // K and V of one cell of one block
    let cells = u64::from(e.resolved.n_ctx_seq) * u64::from(e.resolved.n_stream);
    assert_eq!(e.devices[0].kv_cache_bytes, n_trunk * kv_cell * cells);
    assert_eq!(e.devices[0].weights_bytes, trunk_weight_bytes(&spec, 46));
    assert_eq!(e.devices[0].weights_repack_bytes, 0);
    assert!(e.notes.iter().any(|n| n.contains("NextN")), "{:?}", e.notes);

    // Full offload to one GPU: the engine still places all 47 blocks (src/llama-model.cpp
    // `llama_model::load_tensors` splits `n_layer_all`), but the NextN block brings nothing.
    let one = Machine {
        cpu_features: vec![],
        gpus: vec![gpu()],
    };
    let g = estimate(
        &spec,
        &Params {
            n_gpu_layers: -1,
            ..params(4096)
        },
        &one,
    )
    .unwrap();
    assert_eq!(g.devices[1].kv_cache_bytes, n_trunk * kv_cell * cells);
    let host_weights: u64 = g.devices[0].weights_bytes + g.devices[0].weights_repack_bytes;
    assert_eq!(
        host_weights + g.devices[1].weights_bytes,
        trunk_weight_bytes(&spec, 46)
    );
}

/// Falcon-H1: every block runs attention and a Mamba-2 mixer side by side, and src/llama-model.cpp
/// `llama_model::create_memory` gives `LLM_ARCH_FALCON_H1` both filters `[](uint32_t) { return true; }`
/// (src/models/falcon-h1.cpp `load_arch_hparams` marks every block recurrent). So each block holds a KV cache
/// (K and V of `n_head_kv × head_dim` f16 per cell) and a recurrent state of `n_embd_r + n_embd_s` f32 per
/// sequence (src/llama-hparams.cpp `n_embd_r`: `(d_conv - 1) × (d_inner + 2 n_group d_state)`; `n_embd_s`:
/// `d_state × d_inner`; src/llama-memory-recurrent.cpp).
#[test]
fn falcon_h1_blocks_keep_kv_cache_beside_recurrent_state() {
    let (_dir, spec) = load(&synthetic_falcon_h1(), "falcon-h1.gguf");
    let n_layer = 36u64;
    assert!(spec.hparams.recurrent_layers.iter().all(|&r| r));
    let e = estimate(&spec, &params(4096), &Machine::default()).unwrap();
    let cells = u64::from(e.resolved.n_ctx_seq) * u64::from(e.resolved.n_stream);
    let kv = n_layer * 2 * row_size(GgmlType::F16, 2 * 64) * cells;
    let (d_conv, d_inner, d_state, n_group) = (4u64, 1536u64, 128u64, 1u64);
    let n_embd_r = (d_conv - 1) * (d_inner + 2 * n_group * d_state);
    let n_embd_s = d_state * d_inner;
    let state = n_layer * (n_embd_r + n_embd_s) * 4 * u64::from(e.resolved.n_seq_max);
    assert_eq!(e.devices[0].kv_cache_bytes, kv + state);
    // Every layer attends, so the compute buffer holds the KQ mask and scores, which grow with the context and at
    // 262,144 tokens outgrow the recurrent terms (the model gave falcon-h1 none: it took "all layers recurrent" for
    // "no attention", and its compute stayed flat at any context).
    let longer = estimate(&spec, &params(262_144), &Machine::default()).unwrap();
    assert!(
        longer.devices[0].compute_bytes > e.devices[0].compute_bytes,
        "{} vs {}",
        longer.devices[0].compute_bytes,
        e.devices[0].compute_bytes
    );
}

/// A Llama-shaped model with a vocabulary wide enough that the logits outweigh a block's activations, so the
/// GPU holding the output layer peaks in the output phase.
fn wide_vocab_llama() -> GgufBuilder {
    let (n_embd, n_ff, n_layer, n_vocab) = (256u64, 512u64, 4u64, 262_144u64);
    let mut b = GgufBuilder::new();
    b.kv_str("general.architecture", "llama")
        .kv_u32("llama.context_length", 4096)
        .kv_u32("llama.embedding_length", n_embd as u32)
        .kv_u32("llama.block_count", n_layer as u32)
        .kv_u32("llama.feed_forward_length", n_ff as u32)
        .kv_u32("llama.attention.head_count", 4)
        .kv_u32("llama.attention.head_count_kv", 4)
        .kv_u32("llama.vocab_size", n_vocab as u32);
    let f32 = |ne: &[u64]| ne.iter().product::<u64>() * 4;
    b.tensor(
        "token_embd.weight",
        &[n_embd, n_vocab],
        0,
        f32(&[n_embd, n_vocab]),
    );
    for l in 0..n_layer {
        for (name, ne) in [
            ("attn_norm", vec![n_embd]),
            ("attn_q", vec![n_embd, n_embd]),
            ("attn_k", vec![n_embd, n_embd]),
            ("attn_v", vec![n_embd, n_embd]),
            ("attn_output", vec![n_embd, n_embd]),
            ("ffn_norm", vec![n_embd]),
            ("ffn_gate", vec![n_embd, n_ff]),
            ("ffn_up", vec![n_embd, n_ff]),
            ("ffn_down", vec![n_ff, n_embd]),
        ] {
            b.tensor(&format!("blk.{l}.{name}.weight"), &ne, 0, f32(&ne));
        }
    }
    b.tensor("output_norm.weight", &[n_embd], 0, f32(&[n_embd]));
    b.tensor(
        "output.weight",
        &[n_embd, n_vocab],
        0,
        f32(&[n_embd, n_vocab]),
    );
    b
}

fn compute(e: &Estimate) -> Vec<u64> {
    e.devices.iter().map(|d| d.compute_bytes).collect()
}

/// Pipeline parallelism, derived from ggml/src/ggml-backend.cpp (no GPU machine needed):
/// `ggml_backend_sched_new` sets `n_copies = GGML_SCHED_MAX_COPIES` (4) when parallel. In
/// `ggml_backend_sched_split_graph`, pass 6 gives every graph input leaf, all assigned to the CPU
/// (`ggml_backend_sched_backend_id_from_cur`: "graph input" -> the last backend), `n_copies` copies, the original
/// among them; pass 5 gives every split input from another backend `n_copies` copies on the split's backend.
/// Both flag each copy input and output (never overwritten), and the graph copy lists them as leafs allocated
/// first, so all copies are live through the whole graph, the output phase included. With the same
/// configuration run without pipelining (`-nkvo` turns it off; the compute graph is otherwise the same) and `I`
/// the inputs one copy holds (the host's whole buffer then: the GPUs run every layer):
/// - host: `n_copies × I`;
/// - a GPU running blocks only: its unpipelined peak `+ (n_copies - 1) × I`;
/// - the GPU running the output layer, whose peak is the output phase: that peak `+ n_copies × I` (the
///   unpipelined output phase runs after the inputs are freed).
#[test]
fn pipeline_copies_follow_the_scheduler_on_host_and_output_gpu() {
    let (_dir, spec) = load(&wide_vocab_llama(), "wide-vocab.gguf");
    let two = Machine {
        cpu_features: vec![],
        gpus: vec![gpu(), gpu()],
    };
    let p = Params {
        n_gpu_layers: -1,
        n_ubatch: 512,
        ..params(4096)
    };
    let pp = estimate(&spec, &p, &two).unwrap();
    assert!(pp.resolved.pipeline_parallel);
    let plain = estimate(
        &spec,
        &Params {
            no_kv_offload: true,
            ..p.clone()
        },
        &two,
    )
    .unwrap();
    assert!(!plain.resolved.pipeline_parallel);
    let (pp, plain) = (compute(&pp), compute(&plain));
    let inputs = plain[0];
    assert!(inputs > 0);
    // GPU 0 runs blocks only; GPU 1 the rest of the blocks and the output layer, peaking in the output phase.
    assert!(plain[2] > plain[1], "{plain:?}");
    assert_eq!(pp[0], PIPELINE_COPIES * inputs, "host");
    assert_eq!(
        pp[1],
        plain[1] + (PIPELINE_COPIES - 1) * inputs,
        "blocks GPU"
    );
    assert_eq!(pp[2], plain[2] + PIPELINE_COPIES * inputs, "output GPU");
}
