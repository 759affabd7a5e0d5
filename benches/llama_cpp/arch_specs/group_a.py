"""Group A: gpt-oss, gemma3, gemma3n, gemma4, phi3, llama4, mistral3, smollm3 and a llama control.

Each entry copies a released checkpoint's text-model hyper-parameters as the pinned converter
(llama.cpp 0c1e57098bba, conversion/*.py over conversion/base.py TextModel.set_gguf_parameters) writes them, and
lists the keys the pinned loader reads (src/llama-model.cpp load_hparams, src/models/<arch>.cpp load_arch_hparams).
Types follow gguf-py/gguf/gguf_writer.py: scalars UINT32/FLOAT32/STRING, Python int lists ARRAY:INT32, bool lists
ARRAY:BOOL. `optional` holds the TENSOR_NOT_REQUIRED tensors the released checkpoint has (discovery cannot find
those: the loader never asks for them).
"""

# gemma-3n-E2B: layer_types is 4 sliding + 1 full, repeated (full at 4, 9, ..., 29)
_GEMMA3N_E2B_SWA = [(i % 5) != 4 for i in range(30)]
# gemma-4-E2B: the same 4 sliding + 1 full over 35 layers (full at 4, 9, ..., 34)
_GEMMA4_E2B_SWA = [(i % 5) != 4 for i in range(35)]
_GEMMA4_E2B_FULL = [i for i in range(35) if not _GEMMA4_E2B_SWA[i]]
_GEMMA4_E2B_SLIDING = [i for i in range(35) if _GEMMA4_E2B_SWA[i]]

SPECS = [
    # ------------------------------------------------------------------------------------------------ gpt-oss
    dict(
        id="gpt-oss-20b",
        arch="gpt-oss",
        name="gpt-oss-20b",
        source="https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json",
        n_vocab=201088,
        n_ctx_train=131072,
        metadata=[
            # conversion/gpt_oss.py GptOssModel.set_gguf_parameters: base TextModel keys + sliding_window +
            # expert_feed_forward_length; rope_scaling yarn gives the scaling keys (base.py)
            ("gpt-oss.block_count", "UINT32", 24),
            ("gpt-oss.context_length", "UINT32", 131072),
            ("gpt-oss.embedding_length", "UINT32", 2880),
            ("gpt-oss.feed_forward_length", "UINT32", 2880),
            ("gpt-oss.attention.head_count", "UINT32", 64),
            ("gpt-oss.attention.head_count_kv", "UINT32", 8),
            ("gpt-oss.rope.scaling.type", "STRING", "yarn"),
            ("gpt-oss.rope.scaling.factor", "FLOAT32", 32.0),
            ("gpt-oss.rope.scaling.original_context_length", "UINT32", 4096),
            ("gpt-oss.rope.scaling.yarn_beta_fast", "FLOAT32", 32.0),
            ("gpt-oss.rope.scaling.yarn_beta_slow", "FLOAT32", 1.0),
            ("gpt-oss.rope.freq_base", "FLOAT32", 150000.0),
            ("gpt-oss.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-5),
            ("gpt-oss.expert_count", "UINT32", 32),
            ("gpt-oss.expert_used_count", "UINT32", 4),
            ("gpt-oss.attention.key_length", "UINT32", 64),
            ("gpt-oss.attention.value_length", "UINT32", 64),
            ("gpt-oss.attention.sliding_window", "UINT32", 128),
            ("gpt-oss.expert_feed_forward_length", "UINT32", 2880),
        ],
        # the checkpoint's experts are MXFP4 and the converter repacks them as such (GptOssModel.repack_mxfp4)
        types={r"ffn_(gate|up|down)_exps\.weight$": "MXFP4"},
        # attention_bias=true: q/k/v biases are TENSOR_NOT_REQUIRED in create_tensor_qkv (the o bias is required)
        # The three expert tensors are required (the loader asks for them); they are listed here only so that
        # discovery never writes them with its first [1]-shaped guess, which the MXFP4 override above cannot
        # encode (measure.tensor_nbytes asserts ne0 % 32 == 0).
        optional=[
            ("blk.{i}.ffn_gate_exps.weight", [2880, 2880, 32], None),
            ("blk.{i}.ffn_up_exps.weight", [2880, 2880, 32], None),
            ("blk.{i}.ffn_down_exps.weight", [2880, 2880, 32], None),
            ("blk.{i}.attn_q.bias", [4096], None),
            ("blk.{i}.attn_k.bias", [512], None),
            ("blk.{i}.attn_v.bias", [512], None),
        ],
        note="No sliding_window_pattern key: openai-moe.cpp load_swa_pattern(ml, 2) makes even layers SWA "
             "(window 128), odd layers full, as config.json layer_types says. Experts MXFP4; the other weights "
             "follow the default mix (ggml-org's release stores them Q8_0, which the default already gives for "
             "every ne0=2880 tensor). Attention sinks and expert biases are required tensors (discovered).",
    ),
    # ------------------------------------------------------------------------------------------------ gemma3
    dict(
        id="gemma-3-12b-it",
        arch="gemma3",
        name="gemma-3-12b-it",
        source="https://huggingface.co/google/gemma-3-12b-it/blob/main/config.json",
        n_vocab=262144,
        n_ctx_train=131072,
        metadata=[
            # conversion/gemma.py Gemma3Model.set_gguf_parameters over the sparse text_config (hidden 3840,
            # ffn 15360, 48 layers, 16 heads, 8 kv heads, rope_scaling linear x8, sliding_window 1024); the
            # converter's defaults fill context 131072, eps 1e-6, head_dim 256, rope theta 1e6
            ("gemma3.block_count", "UINT32", 48),
            ("gemma3.context_length", "UINT32", 131072),
            ("gemma3.embedding_length", "UINT32", 3840),
            ("gemma3.feed_forward_length", "UINT32", 15360),
            ("gemma3.attention.head_count", "UINT32", 16),
            ("gemma3.attention.head_count_kv", "UINT32", 8),
            ("gemma3.rope.scaling.type", "STRING", "linear"),
            ("gemma3.rope.scaling.factor", "FLOAT32", 8.0),
            ("gemma3.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-6),
            ("gemma3.attention.key_length", "UINT32", 256),
            ("gemma3.attention.value_length", "UINT32", 256),
            ("gemma3.rope.freq_base", "FLOAT32", 1000000.0),
            ("gemma3.attention.sliding_window", "UINT32", 1024),
        ],
        note="No sliding_window_pattern key: gemma3.cpp load_swa_pattern(ml, 6) makes 5 of every 6 layers SWA "
             "(window 1024), layers 5, 11, ..., 47 full. No rope.freq_base_swa key either (the sparse config has "
             "no rope_local_base_freq; the loader keeps its default 10000). Tied output (no output.weight). "
             "n_vocab 262144: the config has no vocab_size, so the converter takes tokenizer.model's 262144 and "
             "trims token_embd's extra rows (config.json class default would be 262208).",
    ),
    # ------------------------------------------------------------------------------------------------ gemma3n
    dict(
        id="gemma-3n-e2b-it",
        arch="gemma3n",
        name="gemma-3n-E2B-it",
        source="https://huggingface.co/google/gemma-3n-E2B-it/blob/main/config.json",
        n_vocab=262400,
        n_ctx_train=32768,
        metadata=[
            # conversion/gemma.py Gemma3NModel.set_gguf_parameters (Gemma3 keys + altup, per-layer input,
            # shared kv, sliding_window_pattern from layer_types)
            ("gemma3n.block_count", "UINT32", 30),
            ("gemma3n.context_length", "UINT32", 32768),
            ("gemma3n.embedding_length", "UINT32", 2048),
            ("gemma3n.feed_forward_length", "ARRAY:INT32", [8192] * 30),
            ("gemma3n.attention.head_count", "UINT32", 8),
            ("gemma3n.attention.head_count_kv", "UINT32", 2),
            ("gemma3n.rope.freq_base", "FLOAT32", 1000000.0),
            ("gemma3n.rope.freq_base_swa", "FLOAT32", 10000.0),
            ("gemma3n.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-6),
            ("gemma3n.attention.key_length", "UINT32", 256),
            ("gemma3n.attention.value_length", "UINT32", 256),
            ("gemma3n.final_logit_softcapping", "FLOAT32", 30.0),
            ("gemma3n.attention.sliding_window", "UINT32", 512),
            ("gemma3n.altup.active_idx", "UINT32", 0),
            ("gemma3n.altup.num_inputs", "UINT32", 4),
            ("gemma3n.embedding_length_per_layer_input", "UINT32", 256),
            ("gemma3n.attention.shared_kv_layers", "UINT32", 10),
            ("gemma3n.attention.sliding_window_pattern", "ARRAY:BOOL", _GEMMA3N_E2B_SWA),
        ],
        note="The engine hard-codes n_layer_kv_from_start=20, altup 4, laurel rank 64 and n_embd_altup 256 "
             "(gemma3n.cpp, llama-hparams.h); the altup/per-layer/shared-kv keys are written as the converter "
             "writes them but not read. Left out: gemma3n.activation_sparsity_scale (FLOAT32 x30, icdf(0.95) for "
             "layers 0-9 and -inf for 10-29; not read by the loader, and -inf has no JSON form). "
             "feed_forward_length is an array because config.json's intermediate_size is a per-layer list "
             "(from memory; all 8192 either way). n_vocab 262400 (vocab_size incl. audio/vision slots; the "
             "converter pads token_embd and per_layer_token_embd to it). Tied output.",
    ),
    # ------------------------------------------------------------------------------------------------ gemma4
    dict(
        id="gemma-4-e2b-it",
        arch="gemma4",
        name="gemma-4-E2B-it",
        source="https://huggingface.co/google/gemma-4-E2B-it/blob/main/config.json",
        n_vocab=262144,
        n_ctx_train=131072,
        metadata=[
            # conversion/gemma.py Gemma4Model.set_gguf_parameters over text_config: hidden 1536, 35 layers,
            # 8 heads, 1 kv head, head_dim 256 / global_head_dim 512, sliding_window 512, intermediate 6144 with
            # use_double_wide_mlp (kv-shared layers 15-34 get 2x), num_kv_shared_layers 20, per-layer input 256,
            # rope full theta 1e6 (proportional, partial 0.25) / sliding theta 1e4
            ("gemma4.block_count", "UINT32", 35),
            ("gemma4.context_length", "UINT32", 131072),
            ("gemma4.embedding_length", "UINT32", 1536),
            ("gemma4.feed_forward_length", "ARRAY:INT32", [6144] * 15 + [12288] * 20),
            ("gemma4.attention.head_count", "UINT32", 8),
            ("gemma4.attention.head_count_kv", "UINT32", 1),
            ("gemma4.rope.freq_base", "FLOAT32", 1000000.0),
            ("gemma4.rope.freq_base_swa", "FLOAT32", 10000.0),
            ("gemma4.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-6),
            ("gemma4.attention.key_length", "UINT32", 512),
            ("gemma4.attention.value_length", "UINT32", 512),
            ("gemma4.attention.key_length_swa", "UINT32", 256),
            ("gemma4.attention.value_length_swa", "UINT32", 256),
            ("gemma4.final_logit_softcapping", "FLOAT32", 30.0),
            ("gemma4.attention.sliding_window", "UINT32", 512),
            ("gemma4.attention.shared_kv_layers", "UINT32", 20),
            ("gemma4.embedding_length_per_layer_input", "UINT32", 256),
            ("gemma4.attention.sliding_window_pattern", "ARRAY:BOOL", _GEMMA4_E2B_SWA),
            ("gemma4.rope.dimension_count", "UINT32", 512),
            ("gemma4.rope.dimension_count_swa", "UINT32", 256),
        ],
        # attn_v is always TENSOR_NOT_REQUIRED (k==v alternative attention); E2B has attention_k_eq_v=false and
        # the Google release ships v_proj on all 35 layers (also on the kv-shared ones, unused): SWA layers
        # 1 kv head x 256, full layers 1 x 512. layer_scalar (blk.N.layer_output_scale) is optional too.
        optional=[
            ("blk.{i}.attn_v.weight", [1536, 256], _GEMMA4_E2B_SLIDING),
            ("blk.{i}.attn_v.weight", [1536, 512], _GEMMA4_E2B_FULL),
            ("blk.{i}.layer_output_scale.weight", [1], None),
        ],
        note="Smallest released Gemma 4 text model (E2B; the converter's examples are 31B, 26B-A4B, E2B). Values "
             "from third-party copies of google/gemma-4-E2B-it config.json (text_config), not the file itself: "
             "hidden 1536, ffn 6144 (one copy said 8192; 6144 matches the copies that check safetensors "
             "headers), max_position_embeddings 131072, num_global_key_value_heads null (so head_count_kv stays "
             "a scalar 1). Layers 15-34 share KV (n_layer_kv_from_start = 35 - 20); the release still ships their "
             "k_proj/v_proj/k_norm (unused), which the loader accepts (TENSOR_NOT_REQUIRED there). Tied output.",
    ),
    # ------------------------------------------------------------------------------------------------ phi3
    dict(
        id="phi-4-mini-instruct",
        arch="phi3",
        name="Phi-4-mini-instruct",
        source="https://huggingface.co/microsoft/Phi-4-mini-instruct/blob/main/config.json",
        n_vocab=200064,
        n_ctx_train=131072,
        metadata=[
            # conversion/phi.py Phi3MiniModel.set_gguf_parameters (no base keys) + generate_extra_tensors'
            # rope.scaling.attn_factor = sqrt(1 + ln(131072/4096) / ln(4096)) for longrope
            ("phi3.context_length", "UINT32", 131072),
            ("phi3.rope.scaling.original_context_length", "UINT32", 4096),
            ("phi3.embedding_length", "UINT32", 3072),
            ("phi3.feed_forward_length", "UINT32", 8192),
            ("phi3.block_count", "UINT32", 32),
            ("phi3.attention.head_count", "UINT32", 24),
            ("phi3.attention.head_count_kv", "UINT32", 8),
            ("phi3.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-5),
            ("phi3.rope.dimension_count", "UINT32", 96),
            ("phi3.rope.freq_base", "FLOAT32", 10000.0),
            ("phi3.attention.sliding_window", "UINT32", 262144),
            ("phi3.rope.scaling.attn_factor", "FLOAT32", 1.1902380714238083),
        ],
        # phi3.cpp asks for Q/K/V (fused or not) with TENSOR_NOT_REQUIRED: the checkpoint's qkv_proj is fused,
        # 3072 + 2 * 8 * 128 = 5120 rows. rope factors (longrope, 48 = n_rot/2) are global optional tensors.
        optional=[
            ("blk.{i}.attn_qkv.weight", [3072, 5120], None),
            ("rope_factors_long.weight", [48], None),
            ("rope_factors_short.weight", [48], None),
        ],
        note="phi3.cpp disables the sliding window (sliding_window 262144 is read, then n_swa=0, swa_type NONE). "
             "partial_rotary_factor 0.75: n_rot 96 of head 128. Tied output (tie_word_embeddings). The tokenizer "
             "is GPT-2 BPE in the release (the synthetic SPM one has the same size).",
    ),
    # ------------------------------------------------------------------------------------------------ llama4
    dict(
        id="llama-4-scout-17b-16e",
        arch="llama4",
        name="Llama-4-Scout-17B-16E-Instruct",
        source="https://huggingface.co/meta-llama/Llama-4-Scout-17B-16E-Instruct/blob/main/config.json",
        n_vocab=202048,
        n_ctx_train=10485760,
        metadata=[
            # conversion/llama.py Llama4Model: intermediate_size_mlp (16384) becomes feed_forward_length and
            # intermediate_size (8192) expert_feed_forward_length; LlamaModel adds vocab_size, rope dims
            ("llama4.block_count", "UINT32", 48),
            ("llama4.context_length", "UINT32", 10485760),
            ("llama4.embedding_length", "UINT32", 5120),
            ("llama4.feed_forward_length", "UINT32", 16384),
            ("llama4.attention.head_count", "UINT32", 40),
            ("llama4.attention.head_count_kv", "UINT32", 8),
            ("llama4.rope.freq_base", "FLOAT32", 500000.0),
            ("llama4.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-5),
            ("llama4.expert_count", "UINT32", 16),
            ("llama4.expert_used_count", "UINT32", 1),
            ("llama4.attention.key_length", "UINT32", 128),
            ("llama4.attention.value_length", "UINT32", 128),
            ("llama4.vocab_size", "UINT32", 202048),
            ("llama4.rope.dimension_count", "UINT32", 128),
            ("llama4.interleave_moe_layer_step", "UINT32", 1),
            ("llama4.expert_feed_forward_length", "UINT32", 8192),
        ],
        # rope_scaling rope_type llama3 -> LlamaModel.generate_extra_tensors writes rope_freqs (head_dim/2);
        # untied lm_head -> output.weight (both TENSOR_NOT_REQUIRED in llama4.cpp)
        optional=[
            ("rope_freqs.weight", [64], None),
            ("output.weight", [5120, 202048], None),
        ],
        note="Scout's interleave_moe_layer_step is 1: every one of the 48 layers is MoE (16 routed experts, top-1, "
             "plus a shared expert); Maverick (128E) is the one with step 2. Checked against Scout's ~109B total "
             "parameters. No sliding_window key: llama4.cpp uses chunked attention (n_swa 8192, pattern 4: layers "
             "3, 7, ..., 47 full attention and NoPE). Context 10M (max_position_embeddings 10485760).",
    ),
    # ------------------------------------------------------------------------------------------------ mistral3
    dict(
        id="ministral-3-8b-instruct-2512",
        arch="mistral3",
        name="Ministral-3-8B-Instruct-2512",
        source="https://huggingface.co/mistralai/Ministral-3-8B-Instruct-2512/blob/main/config.json",
        n_vocab=131072,
        n_ctx_train=262144,
        metadata=[
            # conversion/mistral3.py Ministral3Model (a LlamaModel) over text_config (model_type ministral3):
            # yarn rope_parameters give the scaling keys; mscale_all_dim -> yarn_log_multiplier,
            # llama_4_scaling_beta -> attention.temperature_scale
            ("mistral3.block_count", "UINT32", 34),
            ("mistral3.context_length", "UINT32", 262144),
            ("mistral3.embedding_length", "UINT32", 4096),
            ("mistral3.feed_forward_length", "UINT32", 14336),
            ("mistral3.attention.head_count", "UINT32", 32),
            ("mistral3.attention.head_count_kv", "UINT32", 8),
            ("mistral3.rope.scaling.type", "STRING", "yarn"),
            ("mistral3.rope.scaling.factor", "FLOAT32", 16.0),
            ("mistral3.rope.scaling.original_context_length", "UINT32", 16384),
            ("mistral3.rope.scaling.yarn_beta_fast", "FLOAT32", 32.0),
            ("mistral3.rope.scaling.yarn_beta_slow", "FLOAT32", 1.0),
            ("mistral3.rope.freq_base", "FLOAT32", 1000000.0),
            ("mistral3.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-5),
            ("mistral3.attention.key_length", "UINT32", 128),
            ("mistral3.attention.value_length", "UINT32", 128),
            ("mistral3.vocab_size", "UINT32", 131072),
            ("mistral3.rope.dimension_count", "UINT32", 128),
            ("mistral3.rope.scaling.yarn_log_multiplier", "FLOAT32", 1.0),
            ("mistral3.attention.temperature_scale", "FLOAT32", 0.1),
        ],
        optional=[
            ("output.weight", [4096, 131072], None),
        ],
        note="Untied output: inferred from the published 8.4B language-model size (with tied embeddings it would "
             "be ~7.9B); the 3B sibling is tied. Values from third-party copies of the config (hidden 4096, "
             "34 layers, 32/8 heads, head_dim 128, ffn 14336, yarn x16 over 16384, theta 1e6, beta 32/1, "
             "mscale_all_dim 1.0, llama_4_scaling_beta 0.1). Dense, full attention on every layer.",
    ),
    # ------------------------------------------------------------------------------------------------ smollm3
    dict(
        id="smollm3-3b",
        arch="smollm3",
        name="SmolLM3-3B",
        source="https://huggingface.co/HuggingFaceTB/SmolLM3-3B/blob/main/config.json",
        n_vocab=128256,
        n_ctx_train=65536,
        metadata=[
            # conversion/llama.py SmolLM3Model = LlamaModel keys
            ("smollm3.block_count", "UINT32", 36),
            ("smollm3.context_length", "UINT32", 65536),
            ("smollm3.embedding_length", "UINT32", 2048),
            ("smollm3.feed_forward_length", "UINT32", 11008),
            ("smollm3.attention.head_count", "UINT32", 16),
            ("smollm3.attention.head_count_kv", "UINT32", 4),
            ("smollm3.rope.freq_base", "FLOAT32", 5000000.0),
            ("smollm3.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-6),
            ("smollm3.vocab_size", "UINT32", 128256),
            ("smollm3.rope.dimension_count", "UINT32", 128),
        ],
        note="NoPE on layers 3, 7, ..., 35: not in the file, smollm3.cpp hard-codes n_no_rope_layer_step = 4 "
             "(config.json no_rope_layer_interval 4). Tied output. No SWA (use_sliding_window false).",
    ),
    # ------------------------------------------------------------------------------------------------ llama
    dict(
        id="llama-3.1-8b-instruct",
        arch="llama",
        name="Llama-3.1-8B-Instruct",
        source="https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/blob/main/config.json",
        n_vocab=128256,
        n_ctx_train=131072,
        metadata=[
            ("llama.block_count", "UINT32", 32),
            ("llama.context_length", "UINT32", 131072),
            ("llama.embedding_length", "UINT32", 4096),
            ("llama.feed_forward_length", "UINT32", 14336),
            ("llama.attention.head_count", "UINT32", 32),
            ("llama.attention.head_count_kv", "UINT32", 8),
            ("llama.rope.freq_base", "FLOAT32", 500000.0),
            ("llama.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-5),
            ("llama.vocab_size", "UINT32", 128256),
            ("llama.rope.dimension_count", "UINT32", 128),
        ],
        # rope_type llama3 -> rope_freqs (64 = head_dim/2); untied lm_head -> output.weight
        optional=[
            ("rope_freqs.weight", [64], None),
            ("output.weight", [4096, 128256], None),
        ],
        note="Control. The llama3 rope scaling lives in rope_freqs.weight (no rope.scaling.* keys).",
    ),
]
