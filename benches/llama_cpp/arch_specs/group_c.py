"""Architecture specs, group C (issue 26): command-r, cohere2, olmo2 (OLMo-2 and OLMo-3), granite, granitehybrid,
falcon-h1, mamba2, exaone4, ernie4_5-moe, lfm2, nemotron_h.

Each entry is the GGUF metadata that convert_hf_to_gguf.py (conversion/*.py of the pinned llama.cpp 0c1e570)
writes for a released checkpoint, from that checkpoint's config.json. Keys are those the pinned loader reads
(llama-model.cpp load_hparams + src/models/<arch>.cpp load_arch_hparams), with the types gguf_writer.py's add_*
methods give them (per-layer int arrays INT32, bool arrays BOOL: constants.py GGUFValueType.get_type).
The tensor tables are learned by benches/llama_cpp/arch_coverage.py discover; `optional` lists only
TENSOR_NOT_REQUIRED tensors the released checkpoint has.
"""
from __future__ import annotations


def _kv_per_layer(n_layer: int, attn_layers: list[int], n_kv: int) -> list[int]:
    return [n_kv if i in attn_layers else 0 for i in range(n_layer)]


# --- command-r: CohereLabs/c4ai-command-r-v01 (35B) ---------------------------------------------------------------
# conversion/command_r.py CommandR2Model: context_length = model_max_length (131072, not max_position_embeddings
# 8192), logit_scale, rope.scaling.type "none"; TextModel base for the rest (layer_norm_eps -> layer_norm_epsilon).
COMMAND_R = dict(
    id="c4ai-command-r-v01",
    arch="command-r",
    name="c4ai-command-r-v01",
    source="https://huggingface.co/CohereLabs/c4ai-command-r-v01/blob/main/config.json",
    n_vocab=256000,
    n_ctx_train=131072,
    metadata=[
        ("command-r.block_count", "UINT32", 40),
        ("command-r.context_length", "UINT32", 131072),
        ("command-r.embedding_length", "UINT32", 8192),
        ("command-r.feed_forward_length", "UINT32", 22528),
        ("command-r.attention.head_count", "UINT32", 64),
        ("command-r.attention.head_count_kv", "UINT32", 64),
        ("command-r.rope.freq_base", "FLOAT32", 8000000.0),
        ("command-r.attention.layer_norm_epsilon", "FLOAT32", 1e-05),
        ("command-r.logit_scale", "FLOAT32", 0.0625),
        ("command-r.rope.scaling.type", "STRING", "none"),
    ],
    types={},
    optional=[],
    note="Tied embeddings (output duplicated from token_embd by the loader). No attention biases "
         "(use_attention_bias false), no QK norm (use_qk_norm false). Values from memory of the published "
         "config.json (gated repo): hidden 8192, ffn 22528, 40 layers, 64 heads MHA, rope_theta 8e6, logit_scale "
         "0.0625, model_max_length 131072.",
)

# --- cohere2: CohereLabs/c4ai-command-r7b-12-2024 -------------------------------------------------------------------
# conversion/command_r.py Cohere2Model: logit_scale, sliding_window, vocab_size, rope.dimension_count =
# rotary_pct * head_dim, rope.scaling.type "none"; base writes head_dim -> key/value_length. No
# sliding_window_pattern key: the loader (cohere2.cpp) uses load_swa_pattern(ml, 4): layers 0-2 of every 4 are SWA,
# every 4th is full.
COHERE2 = dict(
    id="c4ai-command-r7b-12-2024",
    arch="cohere2",
    name="c4ai-command-r7b-12-2024",
    source="https://huggingface.co/CohereLabs/c4ai-command-r7b-12-2024/blob/main/config.json",
    n_vocab=256000,
    n_ctx_train=131072,
    metadata=[
        ("cohere2.block_count", "UINT32", 32),
        ("cohere2.context_length", "UINT32", 132096),
        ("cohere2.embedding_length", "UINT32", 4096),
        ("cohere2.feed_forward_length", "UINT32", 14336),
        ("cohere2.attention.head_count", "UINT32", 32),
        ("cohere2.attention.head_count_kv", "UINT32", 8),
        ("cohere2.rope.freq_base", "FLOAT32", 50000.0),
        ("cohere2.attention.layer_norm_epsilon", "FLOAT32", 1e-05),
        ("cohere2.attention.key_length", "UINT32", 128),
        ("cohere2.attention.value_length", "UINT32", 128),
        ("cohere2.logit_scale", "FLOAT32", 0.25),
        ("cohere2.attention.sliding_window", "UINT32", 4096),
        ("cohere2.vocab_size", "UINT32", 256000),
        ("cohere2.rope.dimension_count", "UINT32", 128),
        ("cohere2.rope.scaling.type", "STRING", "none"),
    ],
    types={},
    optional=[],
    note="SWA 4096 on layers i%4 != 3 (engine default pattern 4, no key in the file), full attention every 4th. "
         "Tied embeddings. From memory of the gated config.json: max_position_embeddings 132096 (the '128K' "
         "context; n_ctx_train here is capped at 131072), logit_scale 0.25, rope_theta 50000, rotary_pct 1.0, "
         "head_dim 128.",
)

# --- olmo2: allenai/OLMo-2-1124-7B ----------------------------------------------------------------------------------
# conversion/olmo.py Olmo2Model: TextModel base only (no sliding_window in OLMo-2's config).
OLMO2 = dict(
    id="olmo-2-1124-7b",
    arch="olmo2",
    name="OLMo-2-1124-7B",
    source="https://huggingface.co/allenai/OLMo-2-1124-7B/blob/main/config.json",
    n_vocab=100352,
    n_ctx_train=4096,
    metadata=[
        ("olmo2.block_count", "UINT32", 32),
        ("olmo2.context_length", "UINT32", 4096),
        ("olmo2.embedding_length", "UINT32", 4096),
        ("olmo2.feed_forward_length", "UINT32", 11008),
        ("olmo2.attention.head_count", "UINT32", 32),
        ("olmo2.attention.head_count_kv", "UINT32", 32),
        ("olmo2.rope.freq_base", "FLOAT32", 500000.0),
        ("olmo2.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-06),
    ],
    types={},
    optional=[],
    note="Untied output. Full attention on all 32 layers (no sliding_window key -> swa_type NONE).",
)

# --- olmo2 (windowed): allenai/Olmo-3-1025-7B -----------------------------------------------------------------------
# Olmo3ForCausalLM converts to arch olmo2 (conversion/olmo.py registers both); with sliding_window it writes
# attention.sliding_window and a per-layer bool sliding_window_pattern from layer_types (every 4th full). YaRN rope
# (factor 8 over 8192) -> rope.scaling.* keys from TextModel base.
_OLMO3_LAYERS = 32
OLMO3 = dict(
    id="olmo-3-1025-7b",
    arch="olmo2",
    name="Olmo-3-1025-7B",
    source="https://huggingface.co/allenai/Olmo-3-1025-7B/blob/main/config.json",
    n_vocab=100278,
    n_ctx_train=65536,
    metadata=[
        ("olmo2.block_count", "UINT32", _OLMO3_LAYERS),
        ("olmo2.context_length", "UINT32", 65536),
        ("olmo2.embedding_length", "UINT32", 4096),
        ("olmo2.feed_forward_length", "UINT32", 11008),
        ("olmo2.attention.head_count", "UINT32", 32),
        ("olmo2.attention.head_count_kv", "UINT32", 32),
        ("olmo2.rope.scaling.type", "STRING", "yarn"),
        ("olmo2.rope.scaling.factor", "FLOAT32", 8.0),
        ("olmo2.rope.scaling.original_context_length", "UINT32", 8192),
        ("olmo2.rope.scaling.yarn_attn_factor", "FLOAT32", 1.2079441541679836),
        ("olmo2.rope.scaling.yarn_beta_fast", "FLOAT32", 32.0),
        ("olmo2.rope.scaling.yarn_beta_slow", "FLOAT32", 1.0),
        ("olmo2.rope.freq_base", "FLOAT32", 500000.0),
        ("olmo2.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-06),
        ("olmo2.attention.sliding_window", "UINT32", 4096),
        ("olmo2.attention.sliding_window_pattern", "ARRAY:BOOL",
         [(i + 1) % 4 != 0 for i in range(_OLMO3_LAYERS)]),
    ],
    types={},
    optional=[],
    note="OLMo-3 7B under arch olmo2 (the pinned engine's windowed olmo2 path, iswa cache): SWA 4096 on layers "
         "i%4 != 3, full on every 4th (layer_types). Untied output. vocab_size 100278 (config.json).",
)

# --- granite: ibm-granite/granite-3.3-8b-instruct -------------------------------------------------------------------
# conversion/granite.py GraniteModel (LlamaModel base): vocab_size, rope.dimension_count = hidden/heads,
# attention.scale / embedding_scale / residual_scale / logit_scale from the *_multiplier / logits_scaling fields.
GRANITE = dict(
    id="granite-3.3-8b-instruct",
    arch="granite",
    name="granite-3.3-8b-instruct",
    source="https://huggingface.co/ibm-granite/granite-3.3-8b-instruct/blob/main/config.json",
    n_vocab=49159,
    n_ctx_train=131072,
    metadata=[
        ("granite.block_count", "UINT32", 40),
        ("granite.context_length", "UINT32", 131072),
        ("granite.embedding_length", "UINT32", 4096),
        ("granite.feed_forward_length", "UINT32", 12800),
        ("granite.attention.head_count", "UINT32", 32),
        ("granite.attention.head_count_kv", "UINT32", 8),
        ("granite.rope.freq_base", "FLOAT32", 10000000.0),
        ("granite.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-05),
        ("granite.vocab_size", "UINT32", 49159),
        ("granite.rope.dimension_count", "UINT32", 128),
        ("granite.attention.scale", "FLOAT32", 0.0078125),
        ("granite.embedding_scale", "FLOAT32", 12.0),
        ("granite.residual_scale", "FLOAT32", 0.22),
        ("granite.logit_scale", "FLOAT32", 16.0),
    ],
    types={},
    optional=[],
    note="Tied embeddings (no output.weight). Dense, no biases. Values from memory of config.json: "
         "hidden 4096, ffn 12800, 40 layers, 32/8 heads, rope_theta 1e7, multipliers 0.0078125/12/0.22, "
         "logits_scaling 16.",
)

# --- granitehybrid: ibm-granite/granite-4.0-h-tiny (7B-A1B) ---------------------------------------------------------
# conversion/granite.py GraniteHybridModel: GraniteMoe keys + ssm.* (d_inner = mamba_expand * hidden = 3072,
# time_step_rank = mamba_n_heads), head_count_kv per layer (0 on Mamba layers: the loader's recurrent flag),
# rope.scaling.finetuned false and context_length 2**20 (NoPE hybrid: the converter overwrites the 131072).
_GH_LAYERS = 40
_GH_ATTN = [5, 15, 25, 35]
GRANITE_HYBRID = dict(
    id="granite-4.0-h-tiny",
    arch="granitehybrid",
    name="granite-4.0-h-tiny",
    source="https://huggingface.co/ibm-granite/granite-4.0-h-tiny/blob/main/config.json",
    n_vocab=100352,
    n_ctx_train=131072,
    metadata=[
        ("granitehybrid.block_count", "UINT32", _GH_LAYERS),
        ("granitehybrid.context_length", "UINT32", 1048576),
        ("granitehybrid.embedding_length", "UINT32", 1536),
        ("granitehybrid.feed_forward_length", "UINT32", 512),
        ("granitehybrid.attention.head_count", "UINT32", 12),
        ("granitehybrid.attention.head_count_kv", "ARRAY:INT32", _kv_per_layer(_GH_LAYERS, _GH_ATTN, 4)),
        ("granitehybrid.rope.freq_base", "FLOAT32", 10000.0),
        ("granitehybrid.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-05),
        ("granitehybrid.expert_count", "UINT32", 64),
        ("granitehybrid.expert_used_count", "UINT32", 6),
        ("granitehybrid.vocab_size", "UINT32", 100352),
        ("granitehybrid.rope.dimension_count", "UINT32", 128),
        ("granitehybrid.attention.scale", "FLOAT32", 0.0078125),
        ("granitehybrid.embedding_scale", "FLOAT32", 12.0),
        ("granitehybrid.residual_scale", "FLOAT32", 0.22),
        ("granitehybrid.logit_scale", "FLOAT32", 6.0),
        ("granitehybrid.expert_shared_feed_forward_length", "UINT32", 1024),
        ("granitehybrid.ssm.conv_kernel", "UINT32", 4),
        ("granitehybrid.ssm.state_size", "UINT32", 128),
        ("granitehybrid.ssm.group_count", "UINT32", 1),
        ("granitehybrid.ssm.inner_size", "UINT32", 3072),
        ("granitehybrid.ssm.time_step_rank", "UINT32", 48),
        ("granitehybrid.rope.scaling.finetuned", "BOOL", False),
    ],
    types={},
    optional=[
        # Mamba conv bias (mamba_conv_bias true): d_inner + 2*n_group*d_state = 3072 + 256
        ("blk.{i}.ssm_conv1d.bias", [3328], [i for i in range(_GH_LAYERS) if i not in _GH_ATTN]),
        # input_linear is split into gate and up experts by the converter; gate_exps is NOT_REQUIRED in the loader
        ("blk.{i}.ffn_gate_exps.weight", [1536, 512, 64], None),
    ],
    note="40 layers: Mamba-2 except attention at 5, 15, 25, 35 (layer_types); MoE 64 experts top-6 (expert ffn "
         "512) plus a 1024 shared expert on every layer. NoPE: context_length is the converter's 2**20, the model "
         "card's trained context 128K is n_ctx_train. Tied embeddings. logits_scaling 6.0 from memory.",
)

# --- falcon-h1: tiiuae/Falcon-H1-1.5B-Base ---------------------------------------------------------------------------
# conversion/falcon_h1.py FalconH1Model (Mamba2Model base): ssm.inner_size = mamba_d_ssm, time_step_rank =
# d_ssm / mamba_d_head, plus head_count, head_count_kv, key/value_length (head_dim), vocab_size, rope.freq_base.
FALCON_H1 = dict(
    id="falcon-h1-1.5b-base",
    arch="falcon-h1",
    name="Falcon-H1-1.5B-Base",
    source="https://huggingface.co/tiiuae/Falcon-H1-1.5B-Base/blob/main/config.json",
    n_vocab=65537,
    n_ctx_train=131072,
    metadata=[
        ("falcon-h1.context_length", "UINT32", 131072),
        ("falcon-h1.embedding_length", "UINT32", 2048),
        ("falcon-h1.feed_forward_length", "UINT32", 4608),
        ("falcon-h1.attention.head_count", "UINT32", 8),
        ("falcon-h1.block_count", "UINT32", 24),
        ("falcon-h1.ssm.conv_kernel", "UINT32", 4),
        ("falcon-h1.ssm.inner_size", "UINT32", 3072),
        ("falcon-h1.ssm.state_size", "UINT32", 256),
        ("falcon-h1.ssm.time_step_rank", "UINT32", 48),
        ("falcon-h1.ssm.group_count", "UINT32", 1),
        ("falcon-h1.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-05),
        ("falcon-h1.vocab_size", "UINT32", 65537),
        ("falcon-h1.attention.head_count_kv", "UINT32", 2),
        ("falcon-h1.attention.key_length", "UINT32", 128),
        ("falcon-h1.attention.value_length", "UINT32", 128),
        ("falcon-h1.rope.freq_base", "FLOAT32", 1e11),
    ],
    types={},
    optional=[
        ("output.weight", [2048, 65537], None),
        ("blk.{i}.ssm_conv1d.bias", [3584], None),
    ],
    note="Parallel attention + Mamba-2 in every one of the 24 layers (8/2 heads x 128, 48 Mamba heads x 64, "
         "d_ssm 3072, d_state 256); a second Falcon-H1 shape beside falcon-h1-7b (Mamba head dim 64 here, 128 "
         "there). Config values from a published copy of its config.json. Untied head (lm_head_multiplier and embedding_multiplier are "
         "applied separately by the converter); mamba_conv_bias true -> conv1d bias; mamba_rms_norm false -> no "
         "ssm_norm. rope_theta 1e11 and max_position_embeddings 131072 (128K per the HF docs table).",
)

FALCON_H1_7B = dict(
    id="falcon-h1-7b",
    arch="falcon-h1",
    name="Falcon-H1-7B-Instruct",
    source="https://huggingface.co/tiiuae/Falcon-H1-7B-Instruct/blob/main/config.json",
    n_vocab=130048,
    n_ctx_train=262144,
    metadata=[
        ("falcon-h1.context_length", "UINT32", 262144),
        ("falcon-h1.embedding_length", "UINT32", 3072),
        ("falcon-h1.feed_forward_length", "UINT32", 12288),
        ("falcon-h1.attention.head_count", "UINT32", 12),
        ("falcon-h1.block_count", "UINT32", 44),
        ("falcon-h1.ssm.conv_kernel", "UINT32", 4),
        ("falcon-h1.ssm.inner_size", "UINT32", 3072),
        ("falcon-h1.ssm.state_size", "UINT32", 256),
        ("falcon-h1.ssm.time_step_rank", "UINT32", 24),
        ("falcon-h1.ssm.group_count", "UINT32", 1),
        ("falcon-h1.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-05),
        ("falcon-h1.vocab_size", "UINT32", 130048),
        ("falcon-h1.attention.head_count_kv", "UINT32", 2),
        ("falcon-h1.attention.key_length", "UINT32", 128),
        ("falcon-h1.attention.value_length", "UINT32", 128),
        ("falcon-h1.rope.freq_base", "FLOAT32", 1e11),
    ],
    types={},
    optional=[
        ("output.weight", [3072, 130048], None),
        ("blk.{i}.ssm_conv1d.bias", [3584], None),
    ],
    note="Parallel attention + Mamba-2 in all 44 layers: 12/2 heads x 128, 24 Mamba heads x 128 (d_ssm 3072), "
         "d_state 256, 1 group, ffn 12288, 256K context (HF FalconH1 docs table; config values from a published "
         "copy of config.json: vocab_size 130048, tie_word_embeddings false). rope_theta 1e11 and rms eps 1e-5 are "
         "the family's values (seen in the 0.5B/1.5B configs), not confirmed for the 7B file. mamba_conv_bias "
         "true -> conv1d bias; mamba_rms_norm false -> no ssm_norm.",
)

# --- mamba2: state-spaces/mamba2-2.7b and mistralai/Mamba-Codestral-7B-v0.1 ----------------------------------------
# conversion/mamba.py Mamba2Model: context_length 2**20, feed_forward_length 0, head_count 0, ssm.* (defaults
# d_conv 4, d_state 128, head_dim 64, n_groups 1, expand 2), rms eps (default 1e-5); vocab padded to 16.
MAMBA2 = dict(
    id="mamba2-2.7b",
    arch="mamba2",
    name="mamba2-2.7b",
    source="https://huggingface.co/state-spaces/mamba2-2.7b/blob/main/config.json",
    n_vocab=50288,
    n_ctx_train=8192,
    metadata=[
        ("mamba2.context_length", "UINT32", 1048576),
        ("mamba2.embedding_length", "UINT32", 2560),
        ("mamba2.feed_forward_length", "UINT32", 0),
        ("mamba2.attention.head_count", "UINT32", 0),
        ("mamba2.block_count", "UINT32", 64),
        ("mamba2.ssm.conv_kernel", "UINT32", 4),
        ("mamba2.ssm.inner_size", "UINT32", 5120),
        ("mamba2.ssm.state_size", "UINT32", 128),
        ("mamba2.ssm.time_step_rank", "UINT32", 80),
        ("mamba2.ssm.group_count", "UINT32", 1),
        ("mamba2.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-05),
    ],
    types={},
    optional=[],
    note="Pure Mamba-2, 64 layers, d_model 2560, d_inner 5120, 80 heads x 64, 1 group. vocab 50277 padded to 50288 "
         "(pad_vocab_size_multiple 16, GPT-NeoX builtin vocab). Tied embeddings (no output.weight). context_length "
         "is the converter's arbitrary 2**20; n_ctx_train 8192 is only a test-context cap (no trained limit).",
)

MAMBA2_CODESTRAL = dict(
    id="mamba-codestral-7b-v0.1",
    arch="mamba2",
    name="Mamba-Codestral-7B-v0.1",
    source="https://huggingface.co/mistralai/Mamba-Codestral-7B-v0.1/blob/main/config.json",
    n_vocab=32768,
    n_ctx_train=262144,
    metadata=[
        ("mamba2.context_length", "UINT32", 1048576),
        ("mamba2.embedding_length", "UINT32", 4096),
        ("mamba2.feed_forward_length", "UINT32", 0),
        ("mamba2.attention.head_count", "UINT32", 0),
        ("mamba2.block_count", "UINT32", 64),
        ("mamba2.ssm.conv_kernel", "UINT32", 4),
        ("mamba2.ssm.inner_size", "UINT32", 8192),
        ("mamba2.ssm.state_size", "UINT32", 128),
        ("mamba2.ssm.time_step_rank", "UINT32", 128),
        ("mamba2.ssm.group_count", "UINT32", 8),
        ("mamba2.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-05),
    ],
    types={},
    optional=[
        ("output.weight", [4096, 32768], None),
    ],
    note="Pure Mamba-2 with 8 groups: 64 layers, hidden 4096, expand 2 (d_inner 8192), 128 heads x 64, state 128. "
         "Untied output (tie_word_embeddings false). Values from memory of config.json; n_ctx_train 256K is the "
         "model card's tested context (no trained limit; GGUF context_length is the converter's 2**20).",
)

# --- exaone4: LGAI-EXAONE/EXAONE-4.0-1.2B and EXAONE-4.0-32B --------------------------------------------------------
# conversion/exaone.py Exaone4Model: vocab_size; head_dim -> key/value_length (base); sliding_window +
# per-layer bool sliding_window_pattern when the config has them; llama3 rope -> generated rope_freqs tensor
# (TENSOR_NOT_REQUIRED in the loader). The loader switches SWA on only for 64 layers (exaone4.cpp).
EXAONE4_1B = dict(
    id="exaone-4.0-1.2b",
    arch="exaone4",
    name="EXAONE-4.0-1.2B",
    source="https://huggingface.co/LGAI-EXAONE/EXAONE-4.0-1.2B/blob/main/config.json",
    n_vocab=102400,
    n_ctx_train=65536,
    metadata=[
        ("exaone4.block_count", "UINT32", 30),
        ("exaone4.context_length", "UINT32", 65536),
        ("exaone4.embedding_length", "UINT32", 2048),
        ("exaone4.feed_forward_length", "UINT32", 4096),
        ("exaone4.attention.head_count", "UINT32", 32),
        ("exaone4.attention.head_count_kv", "UINT32", 8),
        ("exaone4.rope.freq_base", "FLOAT32", 1000000.0),
        ("exaone4.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-05),
        ("exaone4.attention.key_length", "UINT32", 64),
        ("exaone4.attention.value_length", "UINT32", 64),
        ("exaone4.vocab_size", "UINT32", 102400),
    ],
    types={},
    optional=[
        ("rope_freqs.weight", [32], None),
    ],
    note="30 layers, all full attention (sliding_window null). Tied embeddings. llama3 rope scaling -> the "
         "converter emits rope_freqs.weight [head_dim/2]. Values from memory of config.json: hidden 2048, ffn "
         "4096, 32/8 heads x 64, max_position_embeddings 65536, rope_theta 1e6.",
)

_EX32_LAYERS = 64
EXAONE4_32B = dict(
    id="exaone-4.0-32b",
    arch="exaone4",
    name="EXAONE-4.0-32B",
    source="https://huggingface.co/LGAI-EXAONE/EXAONE-4.0-32B/blob/main/config.json",
    n_vocab=102400,
    n_ctx_train=131072,
    metadata=[
        ("exaone4.block_count", "UINT32", _EX32_LAYERS),
        ("exaone4.context_length", "UINT32", 131072),
        ("exaone4.embedding_length", "UINT32", 5120),
        ("exaone4.feed_forward_length", "UINT32", 27392),
        ("exaone4.attention.head_count", "UINT32", 40),
        ("exaone4.attention.head_count_kv", "UINT32", 8),
        ("exaone4.rope.freq_base", "FLOAT32", 1000000.0),
        ("exaone4.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-05),
        ("exaone4.attention.key_length", "UINT32", 128),
        ("exaone4.attention.value_length", "UINT32", 128),
        ("exaone4.vocab_size", "UINT32", 102400),
        ("exaone4.attention.sliding_window", "UINT32", 4096),
        ("exaone4.attention.sliding_window_pattern", "ARRAY:BOOL",
         [(i + 1) % 4 != 0 for i in range(_EX32_LAYERS)]),
    ],
    types={},
    optional=[
        ("output.weight", [5120, 102400], None),
        ("rope_freqs.weight", [64], None),
    ],
    note="64 layers, 3 SWA (4096) : 1 full ('LLLG'), SWA taken by the engine only because n_layer == 64. Untied "
         "output. Values from memory of config.json (hidden 5120, ffn 27392, 40/8 heads x 128, 128K context, "
         "rope_theta 1e6, llama3 rope -> rope_freqs.weight).",
)

# --- ernie4_5-moe: baidu/ERNIE-4.5-21B-A3B-PT ----------------------------------------------------------------------
# conversion/ernie.py Ernie4_5MoeModel: expert_count (moe_num_experts), expert_used_count (moe_k),
# interleave_moe_layer_step (moe_layer_interval), leading_dense_block_count (moe_layer_start_index),
# expert_feed_forward_length, expert_shared_count, expert_shared_feed_forward_length = intermediate_size // n_kv.
ERNIE_MOE = dict(
    id="ernie-4.5-21b-a3b",
    arch="ernie4_5-moe",
    name="ERNIE-4.5-21B-A3B-PT",
    source="https://huggingface.co/baidu/ERNIE-4.5-21B-A3B-PT/blob/main/config.json",
    n_vocab=103424,
    n_ctx_train=131072,
    metadata=[
        ("ernie4_5-moe.block_count", "UINT32", 28),
        ("ernie4_5-moe.context_length", "UINT32", 131072),
        ("ernie4_5-moe.embedding_length", "UINT32", 2560),
        ("ernie4_5-moe.feed_forward_length", "UINT32", 12288),
        ("ernie4_5-moe.attention.head_count", "UINT32", 20),
        ("ernie4_5-moe.attention.head_count_kv", "UINT32", 4),
        ("ernie4_5-moe.rope.freq_base", "FLOAT32", 500000.0),
        ("ernie4_5-moe.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-05),
        ("ernie4_5-moe.attention.key_length", "UINT32", 128),
        ("ernie4_5-moe.attention.value_length", "UINT32", 128),
        ("ernie4_5-moe.expert_count", "UINT32", 64),
        ("ernie4_5-moe.expert_used_count", "UINT32", 6),
        ("ernie4_5-moe.interleave_moe_layer_step", "UINT32", 1),
        ("ernie4_5-moe.leading_dense_block_count", "UINT32", 1),
        ("ernie4_5-moe.expert_feed_forward_length", "UINT32", 1536),
        ("ernie4_5-moe.expert_shared_count", "UINT32", 2),
        ("ernie4_5-moe.expert_shared_feed_forward_length", "UINT32", 3072),
    ],
    types={},
    optional=[
        # moe_statics.e_score_correction_bias (aux-free balancing) -> exp_probs_b, MoE layers only
        ("blk.{i}.exp_probs_b.bias", [64], list(range(1, 28))),
        # gate experts are NOT_REQUIRED in the loader but present in the checkpoint
        ("blk.{i}.ffn_gate_exps.weight", [2560, 1536, 64], list(range(1, 28))),
    ],
    note="Layer 0 dense (ffn 12288), layers 1-27 MoE: 64 experts top-6 (ffn 1536) + 2 shared experts (3072). "
         "MTP layers are dropped by the converter. Tied embeddings (tie_word_embeddings true), head_dim 128 -> "
         "key/value_length. e_score_correction_bias is [1, 64] in the checkpoint (ne [64, 1], same bytes).",
)

# --- lfm2: LiquidAI/LFM2-1.2B ---------------------------------------------------------------------------------------
# conversion/lfm2.py LFM2Model: head_count_kv per layer (0 on conv layers), vocab_size, shortconv.l_cache,
# rms eps (norm_eps), feed_forward_length = auto-adjusted block_ff_dim: int(2*12288/3)=8192, *1.0, round to 256.
_LFM2_LAYERS = 16
_LFM2_ATTN = [2, 5, 8, 10, 12, 14]
LFM2 = dict(
    id="lfm2-1.2b",
    arch="lfm2",
    name="LFM2-1.2B",
    source="https://huggingface.co/LiquidAI/LFM2-1.2B/blob/main/config.json",
    n_vocab=65536,
    n_ctx_train=128000,
    metadata=[
        ("lfm2.block_count", "UINT32", _LFM2_LAYERS),
        ("lfm2.context_length", "UINT32", 128000),
        ("lfm2.embedding_length", "UINT32", 2048),
        ("lfm2.feed_forward_length", "UINT32", 8192),
        ("lfm2.attention.head_count", "UINT32", 32),
        ("lfm2.attention.head_count_kv", "ARRAY:INT32", _kv_per_layer(_LFM2_LAYERS, _LFM2_ATTN, 8)),
        ("lfm2.rope.freq_base", "FLOAT32", 1000000.0),
        ("lfm2.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-05),
        ("lfm2.vocab_size", "UINT32", 65536),
        ("lfm2.shortconv.l_cache", "UINT32", 3),
    ],
    types={},
    optional=[],
    note="16 layers: short-conv (L_cache 3) except attention at 2, 5, 8, 10, 12, 14 (full_attn_idxs / "
         "layer_types). Tied embeddings. ffn 8192 is the converter's auto-adjusted block_ff_dim (12288).",
)

# --- nemotron_h: nvidia/NVIDIA-Nemotron-Nano-9B-v2 ------------------------------------------------------------------
# conversion/nemotron.py NemotronHModel (GraniteHybridModel): d_inner = mamba_num_heads * mamba_head_dim = 10240,
# time_step_rank = mamba_num_heads, group_count = n_groups; per-layer head_count_kv (8 on '*') and
# feed_forward_length (15680 on '-'); a layer with both 0 is Mamba. key/value_length = head_dim 128 (GraniteModel
# pops head_dim, so LlamaModel writes rope.dimension_count = hidden/heads = 112). layer_norm_epsilon (required by
# nemotron-h.cpp); context_length 2**20 and rope.scaling.finetuned false as for granitehybrid.
_NH_PATTERN = "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-"
_NH_LAYERS = len(_NH_PATTERN)
NEMOTRON_H = dict(
    id="nvidia-nemotron-nano-9b-v2",
    arch="nemotron_h",
    name="NVIDIA-Nemotron-Nano-9B-v2",
    source="https://huggingface.co/nvidia/NVIDIA-Nemotron-Nano-9B-v2/blob/main/config.json",
    n_vocab=131072,
    n_ctx_train=131072,
    metadata=[
        ("nemotron_h.block_count", "UINT32", _NH_LAYERS),
        ("nemotron_h.context_length", "UINT32", 1048576),
        ("nemotron_h.embedding_length", "UINT32", 4480),
        ("nemotron_h.feed_forward_length", "ARRAY:INT32",
         [15680 if c == "-" else 0 for c in _NH_PATTERN]),
        ("nemotron_h.attention.head_count", "UINT32", 40),
        ("nemotron_h.attention.head_count_kv", "ARRAY:INT32",
         [8 if c == "*" else 0 for c in _NH_PATTERN]),
        ("nemotron_h.rope.freq_base", "FLOAT32", 10000.0),
        ("nemotron_h.attention.layer_norm_epsilon", "FLOAT32", 1e-05),
        ("nemotron_h.vocab_size", "UINT32", 131072),
        ("nemotron_h.rope.dimension_count", "UINT32", 112),
        ("nemotron_h.ssm.conv_kernel", "UINT32", 4),
        ("nemotron_h.ssm.state_size", "UINT32", 128),
        ("nemotron_h.ssm.group_count", "UINT32", 8),
        ("nemotron_h.ssm.inner_size", "UINT32", 10240),
        ("nemotron_h.ssm.time_step_rank", "UINT32", 128),
        ("nemotron_h.rope.scaling.finetuned", "BOOL", False),
        ("nemotron_h.attention.key_length", "UINT32", 128),
        ("nemotron_h.attention.value_length", "UINT32", 128),
    ],
    types={},
    optional=[
        # use_conv_bias true: d_inner + 2*n_groups*d_state = 10240 + 2048
        ("blk.{i}.ssm_conv1d.bias", [12288], [i for i, c in enumerate(_NH_PATTERN) if c == "M"]),
    ],
    note="56 layers from hybrid_override_pattern: 27 Mamba-2 (M), 25 ReLU^2 MLP (-), 4 attention (*) at 14, 21, "
         "30, 39. Untied output. Mamba: 128 heads x 80 (d_inner 10240), 8 groups, state 128. GGUF context_length "
         "is the converter's 2**20 (NoPE); trained context 128K. rope.dimension_count 112 is what the converter "
         "writes (unused by the graph).",
)

SPECS = [
    COMMAND_R,
    COHERE2,
    OLMO2,
    OLMO3,
    GRANITE,
    GRANITE_HYBRID,
    FALCON_H1,
    FALCON_H1_7B,
    MAMBA2,
    MAMBA2_CODESTRAL,
    EXAONE4_1B,
    EXAONE4_32B,
    ERNIE_MOE,
    LFM2,
    NEMOTRON_H,
]
