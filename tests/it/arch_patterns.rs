//! Per-layer attention patterns the pinned llama.cpp applies (issue 26, first bullet): gpt-oss alternates
//! sliding and full layers, phi3 switches the file's window off, Llama 4 runs 8192-token chunked attention on
//! three layers of four, cohere2/olmo2 files without a pattern array get the engine's period. Each model is a
//! structurally faithful GGUF header (sparse data) from `optimizer_testkit::gguf_builder::synthetic_arch`; each
//! expected KV size is derived here from the engine's formula, with its source.

use optimizer::memory::llama_cpp::{FlashAttn, Machine, Params, estimate};
use optimizer::model::{self, ModelSpec};
use optimizer_testkit::gguf_builder::{ArchShape, synthetic_arch, write_sparse};

const MIB: u64 = 1 << 20;
/// f16 cache cells (`-ctk`/`-ctv` default).
const F16: u64 = 2;
/// `-ub` default (common/common.h `n_ubatch = 512`).
const N_UBATCH: u64 = 512;

fn load(shape: &ArchShape) -> ModelSpec {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{}.gguf", shape.arch));
    write_sparse(&synthetic_arch(shape), &path).unwrap();
    model::load(&path).unwrap()
}

fn kv_bytes(spec: &ModelSpec, n_ctx: u32, fa: FlashAttn) -> u64 {
    let e = estimate(
        spec,
        &Params {
            n_ctx,
            flash_attn: fa,
            ..Params::default()
        },
        &Machine::default(),
    )
    .unwrap();
    e.devices.iter().map(|d| d.kv_cache_bytes).sum()
}

/// The engine's KV bytes for one sequence: a full layer holds `n_ctx` cells, a windowed (or chunked) layer
/// `GGML_PAD(min(n_ctx, n_swa + n_ubatch), 256)` cells (`llama_kv_cache_iswa` constructor,
/// src/llama-kv-cache-iswa.cpp); each cell holds K and V rows of `n_head_kv * head_dim` f16 elements
/// (`llama_kv_cache` constructor, src/llama-kv-cache.cpp).
fn engine_kv_bytes(s: &ArchShape, swa: &[bool], n_swa: u64, n_ctx: u64) -> u64 {
    let swa_cells = (n_ctx.min(n_swa + N_UBATCH)).div_ceil(256) * 256;
    let cell = 2 * s.n_head_kv * s.head_dim * F16;
    (0..s.n_layer as usize)
        .map(|il| {
            let cells = if swa.get(il).copied().unwrap_or(false) {
                swa_cells
            } else {
                n_ctx
            };
            cells * cell
        })
        .sum()
}

/// openai/gpt-oss-20b (config.json; NVIDIA Megatron-Bridge model page): 24 layers, hidden 2880, 64 query and 8
/// KV heads of 64, 32 experts of 2880 with 4 used, vocabulary 201,088, window 128, 131072 trained context.
fn gpt_oss_20b() -> ArchShape {
    ArchShape {
        arch: "gpt-oss",
        n_layer: 24,
        n_embd: 2880,
        n_head: 64,
        n_head_kv: 8,
        head_dim: 64,
        n_ff: 2880,
        n_expert: 32,
        n_expert_used: 4,
        n_ff_exp: 2880,
        n_vocab: 201_088,
        n_ctx_train: 131_072,
        sliding_window: Some(128),
        extra_layer_f32: vec![("attn_sinks.weight", vec![64])],
    }
}

/// microsoft/Phi-3-mini-4k-instruct: 32 layers, hidden 3072, 32 heads of 96, FFN 8192, vocabulary 32,064,
/// window 2047; the 128k variant declares window 262143 and a 131072 context.
fn phi3_mini(n_ctx_train: u64, window: u64) -> ArchShape {
    ArchShape {
        arch: "phi3",
        n_layer: 32,
        n_embd: 3072,
        n_head: 32,
        n_head_kv: 32,
        head_dim: 96,
        n_ff: 8192,
        n_expert: 0,
        n_expert_used: 0,
        n_ff_exp: 0,
        n_vocab: 32_064,
        n_ctx_train,
        sliding_window: Some(window),
        extra_layer_f32: Vec::new(),
    }
}

/// meta-llama/Llama-4-Scout-17B-16E: 48 layers, hidden 5120, 40 query and 8 KV heads of 128, 16 experts of 8192
/// with 1 used, dense FFN 16384, vocabulary 202,048; no window key.
fn llama4_scout() -> ArchShape {
    ArchShape {
        arch: "llama4",
        n_layer: 48,
        n_embd: 5120,
        n_head: 40,
        n_head_kv: 8,
        head_dim: 128,
        n_ff: 16_384,
        n_expert: 16,
        n_expert_used: 1,
        n_ff_exp: 8192,
        n_vocab: 202_048,
        n_ctx_train: 10_485_760,
        sliding_window: None,
        extra_layer_f32: Vec::new(),
    }
}

/// A small shape of `arch` for pattern-only checks.
fn small(arch: &'static str, n_layer: u64, window: Option<u64>) -> ArchShape {
    ArchShape {
        arch,
        n_layer,
        n_embd: 256,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 64,
        n_ff: 512,
        n_expert: 0,
        n_expert_used: 0,
        n_ff_exp: 0,
        n_vocab: 256,
        n_ctx_train: 8192,
        sliding_window: window,
        extra_layer_f32: Vec::new(),
    }
}

#[test]
fn gpt_oss_alternates_sliding_and_full_layers() {
    let s = gpt_oss_20b();
    let spec = load(&s);
    let h = &spec.hparams;
    // src/models/openai-moe.cpp `llama_model_openai_moe::load_arch_hparams`: `load_swa_pattern(ml, 2)` ->
    // `set_swa_pattern(2)` (src/llama-hparams.cpp): layer il is SWA iff `il % 2 < 1`, so even layers slide.
    let want: Vec<bool> = (0..24).map(|il| il % 2 == 0).collect();
    assert_eq!(h.sliding_window_layers, want);
    assert_eq!(h.sliding_window, Some(128));
    let n_ctx = 131_072;
    let expected = engine_kv_bytes(&s, &want, 128, n_ctx);
    for fa in [FlashAttn::On, FlashAttn::Off] {
        assert_eq!(kv_bytes(&spec, n_ctx as u32, fa), expected, "{fa:?}");
    }
    // The engine figure: 3,090 MiB at a 131072 context (12 full layers x 131072 cells + 12 sliding
    // layers x 768 cells, 2 KiB a cell). The engine prints MiB to two decimals; this lands exactly.
    assert_eq!(expected, 3090 * MIB);
}

#[test]
fn phi3_window_is_switched_off_by_the_engine() {
    // src/models/phi3.cpp `llama_model_phi3::load_arch_hparams`: a window in the file sets `swa_type = NONE`,
    // `n_swa = 0` and `set_swa_pattern(1)`, under which no layer is SWA (`il % 1 < 0` never holds).
    for (n_ctx_train, window, n_ctx) in [(4096, 2047, 32_768), (131_072, 262_143, 131_072)] {
        let s = phi3_mini(n_ctx_train, window);
        let spec = load(&s);
        assert!(spec.hparams.sliding_window_layers.is_empty(), "{window}");
        let expected = engine_kv_bytes(&s, &[], 0, n_ctx);
        assert_eq!(kv_bytes(&spec, n_ctx as u32, FlashAttn::On), expected);
        // 32 layers x 2 x 32 heads x 96 x f16 = 384 KiB a cell.
        assert_eq!(expected, n_ctx * 384 * 1024);
    }
}

#[test]
fn llama4_chunks_three_layers_of_four() {
    let s = llama4_scout();
    let spec = load(&s);
    let h = &spec.hparams;
    // src/models/llama4.cpp `llama_model_llama4::load_arch_hparams`: without a window key (or with a non-zero
    // one) `swa_type = LLAMA_SWA_TYPE_CHUNKED`, `n_swa = 8192`, `load_swa_pattern(ml, 4)`: layer il chunked iff
    // `il % 4 < 3`.
    let want: Vec<bool> = (0..48).map(|il| il % 4 < 3).collect();
    assert_eq!(h.sliding_window_layers, want);
    assert_eq!(h.sliding_window, Some(8192));
    let n_ctx = 32_768;
    // The chunked cache is sized as a window of n_swa (src/llama-kv-cache-iswa.cpp): 8192 + 512 = 8704 cells.
    let expected = engine_kv_bytes(&s, &want, 8192, n_ctx);
    assert_eq!(kv_bytes(&spec, n_ctx as u32, FlashAttn::On), expected);
    assert_eq!(expected, (12 * 32_768 + 36 * 8704) * 2 * 8 * 128 * F16);
    // A window key of 0 is the engine's switch-off: every layer full.
    let off = load(&ArchShape {
        sliding_window: Some(0),
        ..llama4_scout()
    });
    assert!(off.hparams.sliding_window_layers.is_empty());
    assert_eq!(
        kv_bytes(&off, n_ctx as u32, FlashAttn::On),
        engine_kv_bytes(&s, &[], 0, n_ctx)
    );
}

#[test]
fn cohere2_and_olmo2_without_a_pattern_array_use_the_engine_period() {
    // src/models/cohere2.cpp and src/models/olmo2.cpp: `load_swa_pattern(ml, 4)`: three sliding, one full.
    let period4: Vec<bool> = (0..8).map(|il| il % 4 < 3).collect();
    for arch in ["cohere2", "olmo2"] {
        let spec = load(&small(arch, 8, Some(4096)));
        assert_eq!(spec.hparams.sliding_window_layers, period4, "{arch}");
    }
    // olmo2 switches the window on only when the key is present and non-zero (`found_swa && n_swa > 0`).
    let spec = load(&small("olmo2", 8, None));
    assert!(spec.hparams.sliding_window_layers.is_empty());
    // gemma2 keeps its 4096 default window and alternating pattern without a key
    // (src/models/gemma2.cpp: `n_swa = 4096; load_swa_pattern(ml, 2)`).
    let spec = load(&small("gemma2", 4, None));
    assert_eq!(spec.hparams.sliding_window, Some(4096));
    assert_eq!(
        spec.hparams.sliding_window_layers,
        vec![true, false, true, false]
    );
}

#[test]
fn gpt_oss_compute_without_flash_attention_spans_the_full_layers() {
    // Without flash attention `llm_graph_context::build_attn_mha` (src/llama-graph.cpp) materialises
    // kq = [n_kv, n_tokens, n_head] in f32; the full layers see every cell of the context, so the buffer holds at
    // least n_ctx x n_ubatch x 64 heads x 4 bytes (the model had 768 cells here while every layer was sliding).
    let spec = load(&gpt_oss_20b());
    let n_ctx = 32_768;
    let e = estimate(
        &spec,
        &Params {
            n_ctx: n_ctx as u32,
            flash_attn: FlashAttn::Off,
            ..Params::default()
        },
        &Machine::default(),
    )
    .unwrap();
    let compute = e.devices[0].compute_bytes;
    let scores = n_ctx * N_UBATCH * 64 * 4;
    assert!(compute > scores, "{compute}");
    // The engine figure for this buffer, 4,198 MiB, names no context; 32768 is the one whose kq alone
    // (4,096 MiB) fits it. Within the compute tolerance (5 % or 16 MiB).
    assert!(
        compute.abs_diff(4198 * MIB) <= 16 * MIB,
        "{}",
        compute / MIB
    );
}
