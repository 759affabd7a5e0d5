//! The vLLM 0.33.0 memory model (`optimizer::memory::vllm`) against figures derived by hand from the
//! architectures' published shapes: weights per tensor-parallel rank for a dense GQA, sliding-window, MoE, MLA,
//! FP8 and GPTQ model; KV pages, groups and blocks; refusals of absurd input without a panic.

use crate::vllm_builder;

use optimizer::memory::vllm::{self, Dtype, KvCacheDtype, Params};
use optimizer::model::safetensors::StDtype;
use vllm_builder::{DEEPSEEK_V2_LITE, GEMMA2_9B, LLAMA31_8B, MIXTRAL_8X7B, Pack, QWEN25_7B, build};

fn params(tp: u32) -> Params {
    Params {
        tensor_parallel: tp,
        dtype: Dtype::Bfloat16,
        kv_cache_dtype: KvCacheDtype::Auto,
        block_size: vllm::DEFAULT_BLOCK_SIZE,
        max_model_len: 8192,
        max_num_seqs: 256,
        max_num_batched_tokens: 2048,
        enforce_eager: false,
        gpu: vllm::GpuFacts::default(),
    }
}

/// Llama-3.1-8B: 8,030,261,248 parameters (the model card's count); norms 32 × 2 × 4096 + 4096 = 266,240 of
/// them replicated. Rope cache: llama3 rope over max_position_embeddings 131072 × head 128 × 2 bytes.
const LLAMA_PARAMS: u64 = 8_030_261_248;
const LLAMA_NORMS: u64 = 266_240;
const LLAMA_ROPE: u64 = 131_072 * 128 * 2;

#[test]
fn dense_gqa_weights_per_rank() {
    let m = build(LLAMA31_8B, StDtype::BF16, Pack::None);
    assert_eq!(
        m.parameter_count(),
        LLAMA_PARAMS,
        "builder matches the model card"
    );
    let w1 = vllm::weights(&m, 1, Dtype::Bfloat16).unwrap();
    assert_eq!(w1.per_rank_bytes, 2 * LLAMA_PARAMS + LLAMA_ROPE);
    assert!(
        w1.unclassified_tensors.is_empty(),
        "{:?}",
        w1.unclassified_tensors
    );
    // TP 2/4/8: vocab 128256 is a multiple of 64 (no padding), 8 KV heads divide; everything but the norms splits.
    let sharded = 2 * (LLAMA_PARAMS - LLAMA_NORMS);
    for tp in [2u64, 4, 8] {
        let w = vllm::weights(&m, tp as u32, Dtype::Bfloat16).unwrap();
        assert_eq!(
            w.per_rank_bytes,
            sharded / tp + 2 * LLAMA_NORMS + LLAMA_ROPE,
            "tp {tp}"
        );
        assert_eq!(w.sharded_bytes, sharded);
        assert_eq!(w.replicated_bytes, 2 * LLAMA_NORMS);
        assert_eq!(w.replicated_tensors, 65);
    }
    // TP 16 > 8 KV heads: each rank holds one whole K and V head (QKVParallelLinear replicas), i.e. 1/8 of
    // k_proj and v_proj: 32 layers × 2 × 1024 × 4096 × 2 bytes.
    let kv_bytes: u64 = 32 * 2 * 1024 * 4096 * 2;
    let w16 = vllm::weights(&m, 16, Dtype::Bfloat16).unwrap();
    assert_eq!(
        w16.per_rank_bytes,
        (sharded - kv_bytes) / 16 + kv_bytes / 8 + 2 * LLAMA_NORMS + LLAMA_ROPE
    );
}

#[test]
fn vocabulary_padding_to_64_rows() {
    // Qwen2.5-7B's 152064 rows are already a multiple of 64; a vocabulary of 32001 pads to 32064 rows, split
    // over TP 2 as 16032 rows × hidden × 2 bytes per rank for each of embed_tokens and lm_head.
    let cfg = MIXTRAL_8X7B.replace("\"vocab_size\":32000", "\"vocab_size\":32001");
    let m = build(&cfg, StDtype::BF16, Pack::None);
    let base = build(MIXTRAL_8X7B, StDtype::BF16, Pack::None);
    let w = vllm::weights(&m, 2, Dtype::Bfloat16)
        .unwrap()
        .per_rank_bytes;
    let w0 = vllm::weights(&base, 2, Dtype::Bfloat16)
        .unwrap()
        .per_rank_bytes;
    assert_eq!(w - w0, 2 * (16_032 - 16_000) * 4096 * 2);
    assert_eq!(vllm::pad_vocab(32_001).unwrap(), 32_064);
}

/// Mixtral-8x7B: 46,702,792,704 parameters (model card); replicated: norms 266,240 and routers 32 × 8 × 4096
/// = 1,048,576. Experts split their intermediate rows over ranks (FusedMoE without expert parallelism).
#[test]
fn moe_weights_per_rank() {
    let m = build(MIXTRAL_8X7B, StDtype::BF16, Pack::None);
    assert_eq!(m.parameter_count(), 46_702_792_704);
    let rep = 266_240 + 1_048_576;
    let rope = 32_768 * 128 * 2;
    for tp in [1u64, 2, 4, 8] {
        let w = vllm::weights(&m, tp as u32, Dtype::Bfloat16).unwrap();
        assert_eq!(
            w.per_rank_bytes,
            2 * (46_702_792_704 - rep) / tp + 2 * rep + rope,
            "tp {tp}"
        );
        assert!(
            w.unclassified_tensors.is_empty(),
            "{:?}",
            w.unclassified_tensors
        );
    }
}

/// DeepSeek-V2-Lite (MLA, no q_lora): 15,706,484,224 parameters, by hand: embed + lm_head 2 × 102400 × 2048,
/// per layer attention q 16·192·2048 + kv_a 576·2048 + kv_a_norm 512 + kv_b 16·256·512 + o 2048² + 2 norms,
/// one dense MLP 3·10944·2048, 26 MoE layers of router 64·2048 + 64 experts 3·1408·2048 + shared 3·2816·2048,
/// final norm 2048 (the model card says 15.7B). Replicated (ReplicatedLinear in deepseek_v2.py): norms
/// 27·4096 + 2048, kv_a_layernorm 27·512, kv_a_proj_with_mqa 27·576·2048, routers 26·64·2048 = 35,384,832.
/// Extras: yarn rope 4096 × 40 positions × 64 × 2 bytes; W_UK_T + W_UV 27 × 512 × (16/tp) × 256 × 2 bytes.
#[test]
fn mla_weights_per_rank() {
    let m = build(DEEPSEEK_V2_LITE, StDtype::BF16, Pack::None);
    let total: u64 = 15_706_484_224;
    assert_eq!(m.parameter_count(), total);
    let rep: u64 = 35_384_832;
    let rope: u64 = 4096 * 40 * 64 * 2;
    for tp in [1u64, 2, 4, 8] {
        let w = vllm::weights(&m, tp as u32, Dtype::Bfloat16).unwrap();
        let mla = 27 * 512 * (16 / tp) * 256 * 2;
        assert_eq!(w.rope_cache_bytes, rope);
        assert_eq!(w.mla_decompressed_bytes, mla);
        assert_eq!(
            w.per_rank_bytes,
            2 * (total - rep) / tp + 2 * rep + rope + mla,
            "tp {tp}"
        );
        assert!(
            w.unclassified_tensors.is_empty(),
            "{:?}",
            w.unclassified_tensors
        );
    }
}

/// Llama-3.1-8B, FP8 128×128 blocks: linear weights 218,103,808 per layer at 1 byte; block scales per layer
/// q 32·32 + k 8·32 + v 8·32 + o 32·32 + gate/up/down 3 × 112·32 = 13,312 F32, all split (no unit dimension);
/// embed, lm_head (2 × 128256 × 4096) and norms stay bf16.
#[test]
fn fp8_weights_per_rank() {
    let m = build(LLAMA31_8B, StDtype::BF16, Pack::Fp8Block);
    let lin: u64 = 32 * 218_103_808;
    let scales: u64 = 32 * 13_312 * 4;
    let vocab: u64 = 2 * 128_256 * 4096 * 2;
    for tp in [1u64, 2, 4, 8] {
        let w = vllm::weights(&m, tp as u32, Dtype::Bfloat16).unwrap();
        assert_eq!(
            w.per_rank_bytes,
            (lin + scales + vocab) / tp + 2 * LLAMA_NORMS + LLAMA_ROPE,
            "tp {tp}"
        );
    }
}

/// Llama-3.1-8B, GPTQ 4-bit group 128: per layer the linears' in × out sum to 218,103,808, so qweight is
/// 109,051,904 bytes, qzeros 218,103,808/1024 × 4 = 851,968, scales 218,103,808/128 × 2 = 3,407,872, all split.
/// g_idx (I32 over the input dimension): column layers q, k, v, gate, up hold it whole (5 × 4096 × 4 = 81,920),
/// row layers o and down split it ((4096 + 14336) × 4 = 73,728).
#[test]
fn gptq_weights_per_rank() {
    let m = build(LLAMA31_8B, StDtype::BF16, Pack::Gptq);
    let split: u64 = 109_051_904 + 851_968 + 3_407_872;
    let vocab: u64 = 2 * 128_256 * 4096 * 2;
    for tp in [1u64, 2, 4, 8] {
        let w = vllm::weights(&m, tp as u32, Dtype::Bfloat16).unwrap();
        let layer = split / tp + 81_920 + 73_728 / tp;
        assert_eq!(
            w.per_rank_bytes,
            32 * layer + vocab / tp + 2 * LLAMA_NORMS + LLAMA_ROPE,
            "tp {tp}"
        );
    }
}

/// Gemma-2-9B stored in F32 and run in bf16: every tensor is cast, so bytes are elements × 2; tied embeddings
/// load once. Per layer: q 4096·3584, k and v 2048·3584, o 3584·4096, MLP 3·14336·3584, 4 norms of 3584;
/// embed 256000·3584; final norm 3584. Rope: 8192 × 256 × 2.
#[test]
fn sliding_window_weights_cast_from_f32() {
    let m = build(GEMMA2_9B, StDtype::F32, Pack::None);
    let layer: u64 = 4096 * 3584 + 2 * 2048 * 3584 + 3584 * 4096 + 3 * 14336 * 3584 + 4 * 3584;
    let params = 256_000 * 3584 + 42 * layer + 3584;
    assert_eq!(m.parameter_count(), params);
    assert!(m.hparams.tied_embeddings);
    let w = vllm::weights(&m, 1, Dtype::Bfloat16).unwrap();
    assert_eq!(w.per_rank_bytes, 2 * params + 8192 * 256 * 2);
    let w32 = vllm::weights(&m, 1, Dtype::Float32).unwrap();
    assert_eq!(w32.per_rank_bytes, 4 * params + 8192 * 256 * 4);
}

#[test]
fn kv_pages_by_hand() {
    let llama = build(LLAMA31_8B, StDtype::BF16, Pack::None);
    // 8 KV heads × 16 tokens × (128 + 128) × 2 bytes = 65,536 per layer; 32 layers = 2 MiB per block.
    let k = vllm::kv(&llama, &params(1)).unwrap();
    assert_eq!(
        (k.layer_page_bytes, k.page_bytes, k.bytes_per_block),
        (65_536, 2 << 20, 2 << 20)
    );
    // One 8192-token request: 512 blocks, 1 GiB.
    assert_eq!((k.blocks_per_request, k.min_bytes), (512, 1 << 30));
    let k2 = vllm::kv(&llama, &params(2)).unwrap();
    assert_eq!(k2.layer_page_bytes, 32_768);
    let k16 = vllm::kv(&llama, &params(16)).unwrap();
    assert_eq!(
        k16.layer_page_bytes, 8_192,
        "one replicated KV head per rank"
    );
    let fp8 = vllm::kv(
        &llama,
        &Params {
            kv_cache_dtype: KvCacheDtype::Fp8,
            ..params(1)
        },
    )
    .unwrap();
    assert_eq!(fp8.layer_page_bytes, 32_768);

    // MLA: one latent "head" of 512 + 64, no separate V: 16 × 576 × 2 = 18,432 per layer, whatever the TP.
    let ds = build(DEEPSEEK_V2_LITE, StDtype::BF16, Pack::None);
    for tp in [1, 2, 4] {
        let k = vllm::kv(&ds, &params(tp)).unwrap();
        assert_eq!((k.layer_page_bytes, k.page_bytes), (18_432, 27 * 18_432));
    }

    // Gemma 2: 21 sliding (window 4096) + 21 full layers, equal pages 8 × 16 × 512 × 2 = 131,072. Group size 21
    // (21 < 1.5 × 21), two groups, bytes per block 21 pages. Per request at 8192 tokens, 2048 batched tokens:
    // full 512 blocks; sliding cdiv(min(4095 + 2 × 2048, 8192), 16) + 1 = 513.
    let g = build(GEMMA2_9B, StDtype::BF16, Pack::None);
    let k = vllm::kv(&g, &params(1)).unwrap();
    assert_eq!(k.layer_page_bytes, 131_072);
    assert_eq!(k.bytes_per_block, 21 * 131_072);
    assert_eq!(k.blocks_per_request, 512 + 513);
    assert_eq!(k.min_bytes, 21 * 512 * 131_072 + 21 * 513 * 131_072);
    let cap = vllm::kv_capacity(10_250 * 21 * 131_072, &k, &params(1));
    assert_eq!(cap.num_blocks, 10_250);
    assert_eq!(cap.max_concurrency, 10.0);
    assert_eq!(cap.tokens, 81_920);

    // Qwen2.5 declares a window but use_sliding_window false: every layer is full attention.
    let q = build(QWEN25_7B, StDtype::BF16, Pack::None);
    let k = vllm::kv(&q, &params(1)).unwrap();
    assert_eq!(k.groups.len(), 1);
    assert_eq!(k.layer_page_bytes, 4 * 16 * 256 * 2);
}

#[test]
fn capacity_and_admission_as_vllm_prints_them() {
    let llama = build(LLAMA31_8B, StDtype::BF16, Pack::None);
    let p = Params {
        max_model_len: 20_000,
        ..params(1)
    };
    let k = vllm::kv(&llama, &p).unwrap();
    // 1250 blocks per 20000-token request; 1952 blocks give 1952/1250 = 1.5616x and int(1.5616 × 20000) tokens.
    let cap = vllm::kv_capacity(1952 * (2 << 20) + 12_345, &k, &p);
    assert_eq!(cap.num_blocks, 1952);
    assert_eq!(format!("{:.2}", cap.max_concurrency), "1.56");
    assert_eq!(cap.tokens, 31_232);
    // The start-up check holds back the null block: exactly need + one block passes, one byte less fails.
    assert!(vllm::enough(k.min_bytes + k.bytes_per_block, &k));
    assert!(!vllm::enough(k.min_bytes + k.bytes_per_block - 1, &k));
    assert!(!vllm::enough(0, &k));
}

#[test]
fn requested_memory_and_budget() {
    // request_memory: ceil(total × util).
    assert_eq!(vllm::requested_bytes(25_314_000_000, 0.9), 22_782_600_000);
    assert_eq!(vllm::requested_bytes(3, 0.5), 2);
    let llama = build(LLAMA31_8B, StDtype::BF16, Pack::None);
    let eager = Params {
        enforce_eager: true,
        ..params(1)
    };
    let nk = vllm::non_kv(&llama, &eager).unwrap();
    assert_eq!(nk.cuda_graph_bytes, 0);
    let graphs = vllm::non_kv(&llama, &params(1)).unwrap();
    assert!(graphs.cuda_graph_bytes > 0);
    assert!(
        vllm::available_kv_bytes(10 << 30, &nk).is_err(),
        "8B weights do not fit 10 GiB"
    );
    let avail = vllm::available_kv_bytes(40 << 30, &nk).unwrap();
    assert_eq!(
        avail,
        (40u64 << 30)
            - nk.weights.per_rank_bytes
            - nk.runner_buffers_bytes
            - nk.activation_peak_bytes
    );
}

/// The V2 sampler's bytes by path (crates/memory/src/vllm/activation.rs), derived by hand for Llama-3.1-8B (vocab
/// 128,256, a multiple of 64, so the padded logits are as wide), 256 sequences, 2048 batched tokens, bf16:
/// - forward: 2048 × 2 × (2 × 4096 + max(attention 32·128 + 8·256 + 32·128 = 10,240, MLP 3 × 14,336 = 43,008))
///   = 209,715,200 B, × 1.085 = 227,540,992 B;
/// - FlashInfer sampler: hidden 2048 × 4096 × 2 = 16,777,216, the gathered sampled rows 256 × 4096 × 2 =
///   2,097,152, plus 256 × 128,256 × (2 + 12) = 459,669,504: 478,543,872 B, above the forward, so the peak;
/// - Triton sampler: 16,777,216 + 2,097,152 + 256 × 128,256 × (2 + 4) = 215,875,584 B, below it: the forward
///   is the peak.
///
/// Persistent: bins 256 × 128,256 × 4 = 131,334,144, prompt mask 256 × 4,008 × 4 = 4,104,192, request tables
/// 256 × 17,924 = 4,588,544, Triton rows (108 SMs: min(next_pow2(min(108, 256)) = 128, 108) = 108, the SM
/// count capping the power of two) 108 × 128,256 × 4 = 55,406,592: 195,433,472 B.
#[test]
fn the_v2_sampler_is_counted_by_its_path() {
    let llama = build(LLAMA31_8B, StDtype::BF16, Pack::None);
    let on = |cc, sms| Params {
        gpu: vllm::GpuFacts {
            compute_capability: Some(cc),
            sms: Some(sms),
        },
        ..params(1)
    };
    let a100 = on((8, 0), 108);
    assert_eq!(vllm::sampler_path(&a100.gpu), vllm::SamplerPath::FlashInfer);
    assert_eq!(
        vllm::activation_peak_bytes(&llama, &a100).unwrap(),
        478_543_872
    );
    assert_eq!(
        vllm::runner_buffers_bytes(&llama, &a100).unwrap(),
        195_433_472
    );
    // Turing (7.5) is below FlashInfer's floor in 0.33; an RTX 3050 Laptop (8.6, 16 SMs) has too few SMs.
    for (cc, sms) in [((7, 5), 40), ((8, 6), 16), ((13, 0), 148)] {
        let p = on(cc, sms);
        assert_eq!(
            vllm::sampler_path(&p.gpu),
            vllm::SamplerPath::Triton,
            "{cc:?} {sms}"
        );
        assert_eq!(
            vllm::activation_peak_bytes(&llama, &p).unwrap(),
            (209_715_200f64 * vllm::ACTIVATION_FIT) as u64,
            "{cc:?}"
        );
    }
    // 17 SMs are enough; with 16 the rows are min(next_pow2(16), 16) = 16.
    assert_eq!(
        vllm::sampler_path(&on((8, 6), 17).gpu),
        vllm::SamplerPath::FlashInfer
    );
    assert_eq!(
        vllm::runner_buffers_bytes(&llama, &on((8, 6), 16)).unwrap(),
        131_334_144 + 4_104_192 + 4_588_544 + 16 * 128_256 * 4
    );
    // Unknown facts: FlashInfer's path and next_pow2(256) = 256 rows, the bounds.
    let unknown = params(1);
    assert_eq!(
        vllm::sampler_path(&unknown.gpu),
        vllm::SamplerPath::FlashInfer
    );
    assert_eq!(
        vllm::runner_buffers_bytes(&llama, &unknown).unwrap(),
        131_334_144 + 4_104_192 + 4_588_544 + 256 * 128_256 * 4
    );
}

#[test]
fn capture_sizes_follow_the_default_rule() {
    // 256 sequences, 2048 batched tokens: 1, 2, 4, 8..248 (31), 256..512 by 16 (17) = 51 sizes, 35 of them
    // <= 256 (the FULL decode graphs), as the public log lmcache-3430 prints.
    let s = vllm::capture_sizes(256, 2048, vllm::DEFAULT_MAX_GRAPH_SIZE);
    assert_eq!((s.len(), *s.last().unwrap()), (51, 512));
    assert_eq!(s.iter().filter(|&&x| x <= 256).count(), 35);
    // max_num_batched_tokens below the ceiling caps it and is itself captured.
    let s = vllm::capture_sizes(256, 100, 512);
    assert_eq!(*s.last().unwrap(), 100);
    assert!(vllm::capture_sizes(0, 0, 512).is_empty());
}

#[test]
fn absurd_input_is_refused_without_panic() {
    let llama = build(LLAMA31_8B, StDtype::BF16, Pack::None);
    assert!(vllm::weights(&llama, 0, Dtype::Bfloat16).is_err());
    assert!(
        vllm::weights(&llama, 3, Dtype::Bfloat16).is_err(),
        "8 KV heads over 3 ranks"
    );
    assert!(vllm::weights(&llama, u32::MAX, Dtype::Bfloat16).is_err());
    assert!(vllm::kv(&llama, &params(0)).is_err());
    assert!(
        vllm::kv(
            &llama,
            &Params {
                block_size: 0,
                ..params(1)
            }
        )
        .is_err()
    );
    assert!(
        vllm::kv(
            &llama,
            &Params {
                max_model_len: 0,
                ..params(1)
            }
        )
        .is_err()
    );
    let huge = Params {
        max_model_len: u32::MAX,
        max_num_batched_tokens: u32::MAX,
        max_num_seqs: u32::MAX,
        block_size: 1,
        ..params(1)
    };
    let _ = vllm::kv(&llama, &huge);
    let _ = vllm::non_kv(&llama, &huge);
    let mut bad = llama.clone();
    bad.hparams.block_count = Some(1 << 40);
    assert!(vllm::kv(&bad, &params(1)).is_err());
    let mut bad = llama.clone();
    bad.hparams.head_count_kv = Some(optimizer::model::PerLayer::Uniform(0));
    assert!(vllm::kv(&bad, &params(1)).is_err());
    assert!(vllm::weights(&bad, 1, Dtype::Bfloat16).is_err());
    let mut gguf = llama.clone();
    gguf.format = optimizer::model::Format::Gguf;
    assert!(vllm::admit(&gguf).is_err());
    assert!(vllm::admit(&llama).is_ok());
    let mut q = llama.clone();
    q.hparams.quantization = Some(optimizer::model::Quantization {
        method: "hqq".into(),
        ..Default::default()
    });
    assert!(
        matches!(vllm::admit(&q), Err(vllm::VllmMemoryError::Unsupported(m)) if m.contains("hqq"))
    );
}
