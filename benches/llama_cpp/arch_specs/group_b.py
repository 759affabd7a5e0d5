"""Architecture specs, group B: Qwen 2/3/3-MoE/3-Next/3.5-MoE, DeepSeek-V2 (MLA) and V3, GLM-4.5-Air, MiniMax-M2.

Metadata is what the pinned converter (llama.cpp 0c1e570, conversion/*.py) writes from each released config.json,
restricted to the keys llama_model_base::load_hparams and the arch's load_arch_hparams read. Key types follow
gguf-py/gguf/gguf_writer.py (add_uint32 / add_float32 / add_bool / add_string; lists of bools -> ARRAY:BOOL, lists
of ints -> ARRAY:INT32 via GGUFValueType.get_type).

`optional` lists the tensors the real converted file has but the loader creates with TENSOR_NOT_REQUIRED, so
discovery cannot learn them: an untied output.weight, QKV biases, the fused linear-attention projections of the
gated-delta-net layers (attn_qkv/attn_gate), DeepSeek-V3's expert-score bias, and the parts of an MTP/NextN block
that the loader creates through create_tensor_qkv / create_tensor_gate_up_exps with TENSOR_SKIP (llama-fit-params
runs with load_mtp=false, which turns those into NOT_REQUIRED|SKIP: the tensors stay in the file, are counted as
created and logged "model has unused tensor ... -- ignoring", and their bytes are not allocated).
"""


def _layers(n, pred):
    return [i for i in range(n) if pred(i)]


def _qwen_mtp_block(il, n_embd, n_q, n_kv, n_ff_exp, n_expert):
    """NOT_REQUIRED parts of a Qwen3-Next / Qwen3.5 MTP block at layer il (load_mtp=false): the attention projections
    (create_tensor_qkv with TENSOR_SKIP), the routed gate/up experts (create_tensor_gate_up_exps with TENSOR_SKIP)
    and nextn.shared_head_norm (the converter maps mtp.norm to it). mtp.fc / pre_fc_norm_* become nextn.eh_proj /
    enorm / hnorm, which the loader requires and discovery finds."""
    return [
        (f"blk.{il}.attn_q.weight", [n_embd, n_q], None),
        (f"blk.{il}.attn_k.weight", [n_embd, n_kv], None),
        (f"blk.{il}.attn_v.weight", [n_embd, n_kv], None),
        (f"blk.{il}.ffn_gate_exps.weight", [n_embd, n_ff_exp, n_expert], None),
        (f"blk.{il}.ffn_up_exps.weight", [n_embd, n_ff_exp, n_expert], None),
        (f"blk.{il}.nextn.shared_head_norm.weight", [n_embd], None),
    ]


# Qwen3-Next / Qwen3.5 layer pattern: full attention every 4th layer (layer_types in config.json, which the converter
# writes as attention.recurrent_layers, padded with False for the MTP block).
def _recurrent(n_layer, n_mtp):
    return [((i + 1) % 4 != 0) for i in range(n_layer)] + [False] * n_mtp


SPECS = [
    # ------------------------------------------------------------------------------------------------ qwen2
    dict(
        id="qwen2.5-7b-instruct",
        arch="qwen2",
        name="Qwen2.5-7B-Instruct",
        source="https://huggingface.co/Qwen/Qwen2.5-7B-Instruct/blob/main/config.json",
        n_vocab=152064,
        n_ctx_train=32768,
        metadata=[
            ("qwen2.block_count", "UINT32", 28),
            ("qwen2.context_length", "UINT32", 32768),
            ("qwen2.embedding_length", "UINT32", 3584),
            ("qwen2.feed_forward_length", "UINT32", 18944),
            ("qwen2.attention.head_count", "UINT32", 28),
            ("qwen2.attention.head_count_kv", "UINT32", 4),
            ("qwen2.rope.freq_base", "FLOAT32", 1000000.0),
            ("qwen2.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-6),
        ],
        optional=[
            ("output.weight", [3584, 152064], None),  # tie_word_embeddings=false
            ("blk.{i}.attn_q.bias", [3584], None),
            ("blk.{i}.attn_k.bias", [512], None),  # 4 kv heads x 128
            ("blk.{i}.attn_v.bias", [512], None),
        ],
        note="QKV biases (Qwen2 attention has bias=True) and the untied output.weight are TENSOR_NOT_REQUIRED in "
             "the loader, so they come from `optional`. config.json has no rope_scaling (the YaRN block is only a "
             "README suggestion), so no rope.scaling.* keys; head_dim absent -> key/value_length default 3584/28=128.",
    ),
    # ------------------------------------------------------------------------------------------------ qwen3
    dict(
        id="qwen3-8b",
        arch="qwen3",
        name="Qwen3-8B",
        source="https://huggingface.co/Qwen/Qwen3-8B/blob/main/config.json",
        n_vocab=151936,
        n_ctx_train=40960,
        metadata=[
            ("qwen3.block_count", "UINT32", 36),
            ("qwen3.context_length", "UINT32", 40960),
            ("qwen3.embedding_length", "UINT32", 4096),
            ("qwen3.feed_forward_length", "UINT32", 12288),
            ("qwen3.attention.head_count", "UINT32", 32),
            ("qwen3.attention.head_count_kv", "UINT32", 8),
            ("qwen3.rope.freq_base", "FLOAT32", 1000000.0),
            ("qwen3.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-6),
            ("qwen3.attention.key_length", "UINT32", 128),
            ("qwen3.attention.value_length", "UINT32", 128),
        ],
        optional=[
            ("output.weight", [4096, 151936], None),  # tie_word_embeddings=false
        ],
        note="No QKV biases (attention_bias=false). Untied output.weight from `optional`.",
    ),
    # ------------------------------------------------------------------------------------------------ qwen3moe
    dict(
        id="qwen3-30b-a3b",
        arch="qwen3moe",
        name="Qwen3-30B-A3B",
        source="https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json",
        n_vocab=151936,
        n_ctx_train=40960,
        metadata=[
            ("qwen3moe.block_count", "UINT32", 48),
            ("qwen3moe.context_length", "UINT32", 40960),
            ("qwen3moe.embedding_length", "UINT32", 2048),
            ("qwen3moe.feed_forward_length", "UINT32", 6144),
            ("qwen3moe.attention.head_count", "UINT32", 32),
            ("qwen3moe.attention.head_count_kv", "UINT32", 4),
            ("qwen3moe.rope.freq_base", "FLOAT32", 1000000.0),
            ("qwen3moe.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-6),
            ("qwen3moe.expert_count", "UINT32", 128),
            ("qwen3moe.expert_used_count", "UINT32", 8),
            ("qwen3moe.attention.key_length", "UINT32", 128),
            ("qwen3moe.attention.value_length", "UINT32", 128),
            ("qwen3moe.expert_feed_forward_length", "UINT32", 768),
        ],
        optional=[
            ("output.weight", [2048, 151936], None),  # tie_word_embeddings=false
        ],
        note="The original (April 2025) release: 40960 trained context, rope_theta 1e6 (the 2507 refresh has "
             "262144 / 1e7). No shared expert; every layer MoE (decoder_sparse_step=1, mlp_only_layers=[]).",
    ),
    # ------------------------------------------------------------------------------------------------ qwen3next
    dict(
        id="qwen3-next-80b-a3b-instruct",
        arch="qwen3next",
        name="Qwen3-Next-80B-A3B-Instruct",
        source="https://huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct/blob/main/config.json",
        n_vocab=151936,
        n_ctx_train=262144,
        metadata=[
            ("qwen3next.block_count", "UINT32", 49),  # 48 + 1 MTP block (_QwenMtpMixin)
            ("qwen3next.context_length", "UINT32", 262144),
            ("qwen3next.embedding_length", "UINT32", 2048),
            ("qwen3next.feed_forward_length", "UINT32", 5120),
            ("qwen3next.attention.head_count", "UINT32", 16),
            ("qwen3next.attention.head_count_kv", "UINT32", 2),
            ("qwen3next.rope.freq_base", "FLOAT32", 10000000.0),
            ("qwen3next.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-6),
            ("qwen3next.expert_count", "UINT32", 512),
            ("qwen3next.expert_used_count", "UINT32", 10),
            ("qwen3next.attention.key_length", "UINT32", 256),
            ("qwen3next.attention.value_length", "UINT32", 256),
            ("qwen3next.expert_feed_forward_length", "UINT32", 512),
            ("qwen3next.expert_shared_feed_forward_length", "UINT32", 512),
            ("qwen3next.nextn_predict_layers", "UINT32", 1),
            ("qwen3next.ssm.conv_kernel", "UINT32", 4),
            ("qwen3next.ssm.state_size", "UINT32", 128),  # linear_key_head_dim
            ("qwen3next.ssm.group_count", "UINT32", 16),  # linear_num_key_heads
            ("qwen3next.ssm.time_step_rank", "UINT32", 32),  # linear_num_value_heads
            ("qwen3next.ssm.inner_size", "UINT32", 4096),  # linear_value_head_dim * linear_num_value_heads
            ("qwen3next.attention.recurrent_layers", "ARRAY:BOOL", _recurrent(48, 1)),
            ("qwen3next.full_attention_interval", "UINT32", 4),
            ("qwen3next.rope.dimension_count", "UINT32", 64),  # head_dim 256 * partial_rotary_factor 0.25
        ],
        optional=[
            ("output.weight", [2048, 151936], None),  # tie_word_embeddings=false
            # required in the trunk, but listed so discovery's first file is not taken for an MTP-only GGUF
            # (the loader sets mtp_only when nextn_predict_layers > 0 and blk.0.attn_norm.weight is absent)
            ("blk.{i}.attn_norm.weight", [2048], None),
            # gated-delta-net layers: the converter splits in_proj_qkvz into attn_qkv + attn_gate (z); the loader
            # makes both NOT_REQUIRED (legacy files carry ssm_in instead). key_dim*2+value_dim = 2048+2048+4096.
            ("blk.{i}.attn_qkv.weight", [2048, 8192], _layers(48, lambda i: (i + 1) % 4 != 0)),
            ("blk.{i}.attn_gate.weight", [2048, 4096], _layers(48, lambda i: (i + 1) % 4 != 0)),
            # MTP block 48 (q is 16 heads x 256 x 2: query + output gate)
            *_qwen_mtp_block(48, 2048, 8192, 512, 512, 512),
        ],
        note="The pinned converter exports the checkpoint's mtp.* weights as block 48 (block_count 49, "
             "nextn_predict_layers 1); llama-fit-params has load_mtp=false so that block is in the file but "
             "skipped (counted, not allocated). recurrent_layers is written because AutoConfig fills layer_types "
             "(3 gated-delta-net : 1 full attention); without it the loader derives the same pattern from "
             "full_attention_interval. Values from memory of config.json, cross-checked with Qwen3-Coder-Next "
             "configs (same arch, same shapes); rope_theta 1e7 not independently re-verified.",
    ),
    # ------------------------------------------------------------------------------------------------ qwen35moe
    dict(
        id="qwen3.5-35b-a3b",
        arch="qwen35moe",
        name="Qwen3.5-35B-A3B",
        source="https://huggingface.co/Qwen/Qwen3.5-35B-A3B/blob/main/config.json",
        n_vocab=248320,
        n_ctx_train=262144,
        metadata=[
            ("qwen35moe.block_count", "UINT32", 41),  # 40 + mtp_num_hidden_layers 1
            ("qwen35moe.context_length", "UINT32", 262144),
            ("qwen35moe.embedding_length", "UINT32", 2048),
            ("qwen35moe.attention.head_count", "UINT32", 16),
            ("qwen35moe.attention.head_count_kv", "UINT32", 2),
            ("qwen35moe.rope.dimension_sections", "ARRAY:INT32", [11, 11, 10, 0]),
            ("qwen35moe.rope.freq_base", "FLOAT32", 10000000.0),
            ("qwen35moe.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-6),
            ("qwen35moe.expert_count", "UINT32", 256),
            ("qwen35moe.expert_used_count", "UINT32", 8),
            ("qwen35moe.attention.key_length", "UINT32", 256),
            ("qwen35moe.attention.value_length", "UINT32", 256),
            ("qwen35moe.expert_feed_forward_length", "UINT32", 512),
            ("qwen35moe.expert_shared_feed_forward_length", "UINT32", 512),
            ("qwen35moe.nextn_predict_layers", "UINT32", 1),
            ("qwen35moe.ssm.conv_kernel", "UINT32", 4),
            ("qwen35moe.ssm.state_size", "UINT32", 128),
            ("qwen35moe.ssm.group_count", "UINT32", 16),
            ("qwen35moe.ssm.time_step_rank", "UINT32", 32),
            ("qwen35moe.ssm.inner_size", "UINT32", 4096),
            ("qwen35moe.attention.recurrent_layers", "ARRAY:BOOL", _recurrent(40, 1)),
            ("qwen35moe.full_attention_interval", "UINT32", 4),
            ("qwen35moe.rope.dimension_count", "UINT32", 64),  # head_dim 256 * partial_rotary_factor 0.25
        ],
        optional=[
            ("output.weight", [2048, 248320], None),  # tie_word_embeddings=false
            ("blk.{i}.attn_norm.weight", [2048], None),  # see qwen3next: defeats the loader's mtp_only probe
            # gated-delta-net layers: in_proj_qkv -> attn_qkv, in_proj_z -> attn_gate (NOT_REQUIRED in the loader)
            ("blk.{i}.attn_qkv.weight", [2048, 8192], _layers(40, lambda i: (i + 1) % 4 != 0)),
            ("blk.{i}.attn_gate.weight", [2048, 4096], _layers(40, lambda i: (i + 1) % 4 != 0)),
            *_qwen_mtp_block(40, 2048, 8192, 512, 512, 256),
        ],
        note="Qwen3.5-35B-A3B, the converter's own example for Qwen3_5MoeForConditionalGeneration (text tower "
             "only; the vision tower goes to the mmproj). The text config has no intermediate_size "
             "(Qwen3_5MoeTextConfig deletes it), so no feed_forward_length key. MTP block 40 (mtp_num_hidden_layers "
             "1, no dedicated embeddings) is in the file and skipped with load_mtp=false. dimension_sections from "
             "rope_parameters.mrope_section [11,11,10] padded to 4. Values from transformers' Qwen3_5MoeTextConfig "
             "defaults (documented as the 35B-A3B checkpoint) and a copy of its config.json.",
    ),
    # ------------------------------------------------------------------------------------------------ deepseek2
    dict(
        id="deepseek-v2-lite-chat",
        arch="deepseek2",
        name="DeepSeek-V2-Lite-Chat",
        source="https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite-Chat/blob/main/config.json",
        n_vocab=102400,
        n_ctx_train=163840,
        metadata=[
            ("deepseek2.block_count", "UINT32", 27),
            ("deepseek2.context_length", "UINT32", 163840),
            ("deepseek2.embedding_length", "UINT32", 2048),
            ("deepseek2.feed_forward_length", "UINT32", 10944),
            ("deepseek2.attention.head_count", "UINT32", 16),
            ("deepseek2.attention.head_count_kv", "UINT32", 1),  # converter: MLA as MQA
            ("deepseek2.rope.scaling.type", "STRING", "yarn"),
            ("deepseek2.rope.scaling.factor", "FLOAT32", 40.0),
            ("deepseek2.rope.scaling.original_context_length", "UINT32", 4096),
            ("deepseek2.rope.freq_base", "FLOAT32", 10000.0),
            ("deepseek2.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-6),
            ("deepseek2.expert_count", "UINT32", 64),
            ("deepseek2.expert_used_count", "UINT32", 6),
            ("deepseek2.expert_group_count", "UINT32", 1),
            ("deepseek2.expert_group_used_count", "UINT32", 1),
            ("deepseek2.expert_gating_func", "UINT32", 1),  # scoring_func softmax
            ("deepseek2.leading_dense_block_count", "UINT32", 1),
            ("deepseek2.vocab_size", "UINT32", 102400),
            ("deepseek2.attention.kv_lora_rank", "UINT32", 512),
            ("deepseek2.attention.key_length", "UINT32", 576),  # kv_lora_rank + qk_rope_head_dim
            ("deepseek2.attention.value_length", "UINT32", 512),  # kv_lora_rank
            ("deepseek2.attention.key_length_mla", "UINT32", 192),  # qk_nope 128 + qk_rope 64
            ("deepseek2.attention.value_length_mla", "UINT32", 128),  # v_head_dim
            ("deepseek2.expert_feed_forward_length", "UINT32", 1408),
            ("deepseek2.expert_shared_count", "UINT32", 2),
            ("deepseek2.expert_weights_scale", "FLOAT32", 1.0),  # routed_scaling_factor
            ("deepseek2.rope.dimension_count", "UINT32", 64),  # qk_rope_head_dim
            ("deepseek2.rope.scaling.yarn_log_multiplier", "FLOAT32", 0.0707),  # 0.1 * mscale_all_dim 0.707
        ],
        types={
            # arch_coverage.F32_NAMES matches `_b\.weight$`, which would keep the MLA k_b/v_b matmul weights in F32;
            # llama-quantize quantizes them for deepseek2 (only GLM5_NEXT exempts them). Same generic rule as
            # default_type: ne0 128 -> Q8_0, ne0 512 -> Q4_K.
            r"attn_k_b\.weight$": "Q8_0",
            r"attn_v_b\.weight$": "Q4_K",
        },
        optional=[
            ("output.weight", [2048, 102400], None),  # tie_word_embeddings=false
            # required (discovery would find them); listed with their real shapes only so that the `types`
            # override above never meets a first guess of [1] (measure.tensor_nbytes asserts ne0 % block == 0)
            ("blk.{i}.attn_k_b.weight", [128, 512, 16], None),  # {qk_nope, kv_lora_rank, n_head}
            ("blk.{i}.attn_v_b.weight", [512, 128, 16], None),  # {kv_lora_rank, v_head_dim, n_head}
        ],
        note="Lite variant: no q_lora_rank (q_lora_rank null -> plain attn_q; the loader skips the key when "
             "n_layer==27), 1 leading dense layer, 64 routed + 2 shared experts, softmax gating, no "
             "e_score_correction_bias, norm_topk_prob false (key not written). The converter writes head_count_kv 1 "
             "(MLA stored as MQA) and splits kv_b_proj into attn_k_b/attn_v_b. rope.scaling.yarn_beta_fast/slow "
             "are also written by the converter but no deepseek2 loader code reads them, so they are omitted.",
    ),
    dict(
        id="deepseek-v3",
        arch="deepseek2",
        name="DeepSeek-V3",
        source="https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json",
        n_vocab=129280,
        n_ctx_train=163840,
        metadata=[
            ("deepseek2.block_count", "UINT32", 61),  # MTP layer 61 dropped by the converter (skip_mtp)
            ("deepseek2.context_length", "UINT32", 163840),
            ("deepseek2.embedding_length", "UINT32", 7168),
            ("deepseek2.feed_forward_length", "UINT32", 18432),
            ("deepseek2.attention.head_count", "UINT32", 128),
            ("deepseek2.attention.head_count_kv", "UINT32", 1),
            ("deepseek2.rope.scaling.type", "STRING", "yarn"),
            ("deepseek2.rope.scaling.factor", "FLOAT32", 40.0),
            ("deepseek2.rope.scaling.original_context_length", "UINT32", 4096),
            ("deepseek2.rope.freq_base", "FLOAT32", 10000.0),
            ("deepseek2.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-6),
            ("deepseek2.expert_count", "UINT32", 256),
            ("deepseek2.expert_used_count", "UINT32", 8),
            ("deepseek2.expert_group_count", "UINT32", 8),  # n_group
            ("deepseek2.expert_group_used_count", "UINT32", 4),  # topk_group
            ("deepseek2.expert_gating_func", "UINT32", 2),  # scoring_func sigmoid
            ("deepseek2.leading_dense_block_count", "UINT32", 3),
            ("deepseek2.vocab_size", "UINT32", 129280),
            ("deepseek2.attention.q_lora_rank", "UINT32", 1536),
            ("deepseek2.attention.kv_lora_rank", "UINT32", 512),
            ("deepseek2.attention.key_length", "UINT32", 576),
            ("deepseek2.attention.value_length", "UINT32", 512),
            ("deepseek2.attention.key_length_mla", "UINT32", 192),
            ("deepseek2.attention.value_length_mla", "UINT32", 128),
            ("deepseek2.expert_feed_forward_length", "UINT32", 2048),
            ("deepseek2.expert_shared_count", "UINT32", 1),
            ("deepseek2.expert_weights_scale", "FLOAT32", 2.5),
            ("deepseek2.expert_weights_norm", "BOOL", True),
            ("deepseek2.rope.dimension_count", "UINT32", 64),
            ("deepseek2.rope.scaling.yarn_log_multiplier", "FLOAT32", 0.1),  # 0.1 * mscale_all_dim 1.0
        ],
        types={
            r"attn_q_b\.weight$": "Q4_K",  # {q_lora_rank 1536, 128 x 192}: also caught by `_b\.weight$`
            r"attn_k_b\.weight$": "Q8_0",
            r"attn_v_b\.weight$": "Q4_K",
        },
        optional=[
            ("output.weight", [7168, 129280], None),  # tie_word_embeddings=false
            # e_score_correction_bias (topk_method noaux_tc) on every MoE layer; NOT_REQUIRED in the loader
            ("blk.{i}.exp_probs_b.bias", [256], list(range(3, 61))),
            ("blk.{i}.attn_q_b.weight", [1536, 24576], None),  # required; listed for `types` (see v2-lite)
            ("blk.{i}.attn_k_b.weight", [128, 512, 128], None),  # see deepseek-v2-lite-chat
            ("blk.{i}.attn_v_b.weight", [512, 128, 128], None),
        ],
        note="DeepSeek-V3 (same shapes as V3-0324 / R1): 61 layers, first 3 dense, 256 routed + 1 shared experts, "
             "8 groups top-4, sigmoid gating with e_score_correction_bias, routed_scaling_factor 2.5. The "
             "checkpoint's num_nextn_predict_layers=1 MTP layer (model.layers.61) is dropped by the pinned "
             "converter (DeepseekV2Model.skip_mtp=True), so no nextn key and no block 61.",
    ),
    # ------------------------------------------------------------------------------------------------ glm4moe
    dict(
        id="glm-4.5-air",
        arch="glm4moe",
        name="GLM-4.5-Air",
        source="https://huggingface.co/zai-org/GLM-4.5-Air/blob/main/config.json",
        n_vocab=151552,
        n_ctx_train=131072,
        metadata=[
            ("glm4moe.block_count", "UINT32", 47),  # 46 + num_nextn_predict_layers 1
            ("glm4moe.context_length", "UINT32", 131072),
            ("glm4moe.embedding_length", "UINT32", 4096),
            ("glm4moe.feed_forward_length", "UINT32", 10944),
            ("glm4moe.attention.head_count", "UINT32", 96),
            ("glm4moe.attention.head_count_kv", "UINT32", 8),
            ("glm4moe.rope.freq_base", "FLOAT32", 1000000.0),
            ("glm4moe.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-5),
            ("glm4moe.expert_count", "UINT32", 128),
            ("glm4moe.expert_used_count", "UINT32", 8),
            ("glm4moe.expert_group_count", "UINT32", 1),
            ("glm4moe.expert_group_used_count", "UINT32", 1),
            ("glm4moe.attention.key_length", "UINT32", 128),
            ("glm4moe.attention.value_length", "UINT32", 128),
            ("glm4moe.rope.dimension_count", "UINT32", 64),  # head_dim 128 * partial_rotary_factor 0.5
            ("glm4moe.expert_feed_forward_length", "UINT32", 1408),
            ("glm4moe.expert_shared_count", "UINT32", 1),
            ("glm4moe.leading_dense_block_count", "UINT32", 1),
            ("glm4moe.expert_gating_func", "UINT32", 2),  # always SIGMOID in Glm4MoeModel
            ("glm4moe.expert_weights_scale", "FLOAT32", 1.0),
            ("glm4moe.expert_weights_norm", "BOOL", True),
            ("glm4moe.nextn_predict_layers", "UINT32", 1),
        ],
        optional=[
            ("output.weight", [4096, 151552], None),  # tie_word_embeddings=false
            # required, but listed so discovery's first files are taken neither for an MTP-only GGUF (probe:
            # blk.0.attn_norm.weight) nor for a trunk-only one (probe: blk.46.nextn.eh_proj.weight)
            ("blk.{i}.attn_norm.weight", [4096], None),
            ("blk.46.nextn.eh_proj.weight", [8192, 4096], None),
            # attention_bias=true: q/k/v biases on every block, the NextN block 46 included
            ("blk.{i}.attn_q.bias", [12288], None),  # 96 heads x 128
            ("blk.{i}.attn_k.bias", [1024], None),  # 8 kv heads x 128
            ("blk.{i}.attn_v.bias", [1024], None),
            # NextN block 46, load_mtp=false: create_tensor_qkv(TENSOR_SKIP) makes q/k/v NOT_REQUIRED
            ("blk.46.attn_q.weight", [4096, 12288], None),
            ("blk.46.attn_k.weight", [4096, 1024], None),
            ("blk.46.attn_v.weight", [4096, 1024], None),
            # NextN optional tensors the GLM-4.5(-Air) checkpoint carries (GLM-4.6 dropped the first two)
            ("blk.46.nextn.embed_tokens.weight", [4096, 151552], None),
            ("blk.46.nextn.shared_head_head.weight", [4096, 151552], None),
            ("blk.46.nextn.shared_head_norm.weight", [4096], None),
        ],
        note="Layer 0 dense (first_k_dense_replace 1), 128 routed + 1 shared experts, use_qk_norm false (no "
             "q/k norms), attention biases. Block 46 is the NextN/MTP layer (in the file, skipped with "
             "load_mtp=false). That GLM-4.5-Air's layer 46 carries embed_tokens and shared_head.head is from the "
             "llama.cpp history (they were required until GLM-4.6, which lacks them, made them optional) and not "
             "re-checked against the safetensors index; drop those two lines if the real GGUF lacks them.",
    ),
    # ------------------------------------------------------------------------------------------------ minimax-m2
    dict(
        id="minimax-m2",
        arch="minimax-m2",
        name="MiniMax-M2",
        source="https://huggingface.co/MiniMaxAI/MiniMax-M2/blob/main/config.json",
        n_vocab=200064,
        n_ctx_train=196608,
        metadata=[
            ("minimax-m2.block_count", "UINT32", 62),
            ("minimax-m2.context_length", "UINT32", 196608),
            ("minimax-m2.embedding_length", "UINT32", 3072),
            ("minimax-m2.feed_forward_length", "UINT32", 1536),
            ("minimax-m2.attention.head_count", "UINT32", 48),
            ("minimax-m2.attention.head_count_kv", "UINT32", 8),
            ("minimax-m2.rope.freq_base", "FLOAT32", 5000000.0),
            ("minimax-m2.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-6),
            ("minimax-m2.expert_count", "UINT32", 256),
            ("minimax-m2.expert_used_count", "UINT32", 8),
            ("minimax-m2.expert_gating_func", "UINT32", 2),  # scoring_func sigmoid
            ("minimax-m2.attention.key_length", "UINT32", 128),
            ("minimax-m2.attention.value_length", "UINT32", 128),
            ("minimax-m2.expert_feed_forward_length", "UINT32", 1536),  # intermediate_size (per expert)
            ("minimax-m2.rope.dimension_count", "UINT32", 64),  # rotary_dim
        ],
        note="62 full-attention layers (attn_type_list all 1), 256 experts top-8 with routing bias, per-layer "
             "q/k norms over all heads, partial RoPE (rotary_dim 64 of head_dim 128). output.weight is required by "
             "the loader (untied). The checkpoint ships no MTP weights (use_mtp/num_mtp_modules in config only), "
             "so nothing optional.",
    ),
]
