//! Unit tests of [`super`]: `config.json` keys mapped onto hyper-parameters and quantization, and the defects
//! reported for malformed values.

use super::*;

fn cfg(json: &str) -> HfConfig {
    match parse(Path::new("config.json"), json.as_bytes()) {
        Ok(c) => c,
        Err(e) => panic!("{json}: {e}"),
    }
}

fn config_err(json: &str) -> String {
    match parse(Path::new("config.json"), json.as_bytes()) {
        Ok(c) => panic!("{json}: expected an error, got {c:?}"),
        Err(e) => {
            assert!(
                matches!(e.defect(), Some(Defect::Config(_))),
                "{json}: {e:?}"
            );
            e.to_string()
        }
    }
}

#[test]
fn llama_keys_map_to_gguf_names() {
    let c = cfg(
        r#"{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":4096,
            "num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,"intermediate_size":14336,
            "vocab_size":128256,"max_position_embeddings":131072,"rope_theta":500000.0,
            "rope_scaling":{"factor":8.0,"original_max_position_embeddings":8192,"rope_type":"llama3"},
            "tie_word_embeddings":false,"torch_dtype":"bfloat16"}"#,
    );
    assert_eq!(c.model_type.as_deref(), Some("llama"));
    assert_eq!(c.name.as_deref(), Some("LlamaForCausalLM"));
    let h = &c.hparams;
    assert_eq!(h.embedding_length, Some(4096));
    assert_eq!(h.block_count, Some(32));
    assert_eq!(h.head_count, Some(PerLayer::Uniform(32)));
    assert_eq!(h.head_count_kv, Some(PerLayer::Uniform(8)));
    assert_eq!(h.key_length, Some(128));
    assert_eq!(h.value_length, Some(128));
    assert_eq!(h.feed_forward_length, Some(PerLayer::Uniform(14336)));
    assert_eq!(h.vocab_size, Some(128256));
    assert_eq!(h.context_length, Some(131072));
    let r = h.rope.as_ref().expect("rope");
    assert_eq!(r.freq_base, Some(500000.0));
    assert_eq!(r.scaling_type.as_deref(), Some("llama3"));
    assert_eq!(r.scaling_factor, Some(8.0));
    assert_eq!(r.original_context_length, Some(8192));
    assert_eq!(h.torch_dtype.as_deref(), Some("bfloat16"));
    assert_eq!(c.tie_word_embeddings, Some(false));
    assert!(h.sliding_window.is_none() && h.sliding_window_layers.is_empty());
}

#[test]
fn kv_heads_default_and_multi_query() {
    let c = cfg(r#"{"hidden_size":64,"num_attention_heads":4}"#);
    assert_eq!(c.hparams.head_count_kv, Some(PerLayer::Uniform(4)));
    let c = cfg(r#"{"hidden_size":64,"num_attention_heads":4,"num_key_value_heads":null}"#);
    assert_eq!(c.hparams.head_count_kv, Some(PerLayer::Uniform(4)));
    let c = cfg(r#"{"hidden_size":64,"n_head":4,"multi_query":true,"n_layer":3}"#);
    assert_eq!(c.hparams.head_count_kv, Some(PerLayer::Uniform(1)));
    assert_eq!(c.hparams.block_count, Some(3));
    let c =
        cfg(r#"{"num_attention_heads":32,"multi_query_attention":true,"multi_query_group_num":2}"#);
    assert_eq!(c.hparams.head_count_kv, Some(PerLayer::Uniform(2)));
    let c = cfg(
        r#"{"num_attention_heads":[4,8,8],"num_key_value_heads":[1,2,2],"intermediate_size":[8,8,8]}"#,
    );
    assert_eq!(c.hparams.head_count, Some(PerLayer::Layers(vec![4, 8, 8])));
    assert_eq!(
        c.hparams.head_count_kv,
        Some(PerLayer::Layers(vec![1, 2, 2]))
    );
    assert_eq!(c.hparams.feed_forward_length, Some(PerLayer::Uniform(8)));
}

#[test]
fn mla_head_sizes_and_experts() {
    let c = cfg(
        r#"{"model_type":"deepseek_v3","hidden_size":7168,"num_attention_heads":128,
            "qk_nope_head_dim":128,"qk_rope_head_dim":64,"v_head_dim":128,"kv_lora_rank":512,"q_lora_rank":1536,
            "n_routed_experts":256,"num_experts_per_tok":8,"n_shared_experts":1,"moe_intermediate_size":2048}"#,
    );
    let h = &c.hparams;
    assert_eq!((h.key_length, h.value_length), (Some(192), Some(128)));
    assert_eq!((h.kv_lora_rank, h.q_lora_rank), (Some(512), Some(1536)));
    assert_eq!(h.expert_count, Some(256));
    assert_eq!(h.expert_used_count, Some(8));
    assert_eq!(h.expert_shared_count, Some(1));
    assert_eq!(h.expert_feed_forward_length, Some(2048));
    assert_eq!(h.rope.as_ref().and_then(|r| r.dimension_count), Some(64));
}

#[test]
fn sliding_window_rules() {
    let swa = |json: &str| {
        let h = cfg(json).hparams;
        (h.sliding_window, h.sliding_window_layers)
    };
    // Mistral: every layer.
    assert_eq!(
        swa(r#"{"model_type":"mistral","num_hidden_layers":3,"sliding_window":4096}"#),
        (Some(4096), vec![true; 3])
    );
    // Gemma 2 default: even layers.
    assert_eq!(
        swa(r#"{"model_type":"gemma2","num_hidden_layers":4,"sliding_window":4096}"#),
        (Some(4096), vec![true, false, true, false])
    );
    // sliding_window_pattern N: every N-th layer global.
    assert_eq!(
        swa(
            r#"{"model_type":"x","num_hidden_layers":7,"sliding_window":512,"sliding_window_pattern":3}"#
        ),
        (Some(512), vec![true, true, false, true, true, false, true])
    );
    // Gemma 3 default period 6, via text_config.
    let (w, l) = swa(
        r#"{"model_type":"gemma3","text_config":{"model_type":"gemma3_text","num_hidden_layers":7,"sliding_window":1024}}"#,
    );
    assert_eq!(w, Some(1024));
    assert_eq!(l, vec![true, true, true, true, true, false, true]);
    // layer_types wins.
    assert_eq!(
        swa(
            r#"{"num_hidden_layers":3,"sliding_window":128,"sliding_window_pattern":2,
                "layer_types":["full_attention","sliding_attention","sliding_attention"]}"#
        ),
        (Some(128), vec![false, true, true])
    );
    // Qwen2: off unless use_sliding_window; then layers >= max_window_layers.
    assert_eq!(
        swa(
            r#"{"model_type":"qwen2","num_hidden_layers":4,"sliding_window":32768,"use_sliding_window":false,"max_window_layers":2}"#
        ),
        (None, vec![])
    );
    assert_eq!(
        swa(
            r#"{"model_type":"qwen2","num_hidden_layers":4,"sliding_window":32768,"use_sliding_window":true,"max_window_layers":2}"#
        ),
        (Some(32768), vec![false, false, true, true])
    );
    // null window (Mixtral).
    assert_eq!(
        swa(r#"{"num_hidden_layers":2,"sliding_window":null}"#),
        (None, vec![])
    );
    // layer_types of the wrong length is refused.
    let e = config_err(
        r#"{"num_hidden_layers":3,"sliding_window":128,"layer_types":["sliding_attention"]}"#,
    );
    assert!(e.contains("layer_types"), "{e}");
    let e =
        config_err(r#"{"num_hidden_layers":3,"sliding_window":128,"sliding_window_pattern":0}"#);
    assert!(e.contains("sliding_window_pattern"), "{e}");
}

#[test]
fn mamba_ssm_keys() {
    let c = cfg(
        r#"{"model_type":"mamba","hidden_size":768,"intermediate_size":1536,"state_size":16,
            "conv_kernel":4,"time_step_rank":"auto","num_hidden_layers":24}"#,
    );
    let s = c.hparams.ssm.expect("ssm");
    assert_eq!(s.inner_size, Some(1536));
    assert_eq!(s.state_size, Some(16));
    assert_eq!(s.conv_kernel, Some(4));
    assert_eq!(s.time_step_rank, Some(48));
    assert_eq!(c.hparams.feed_forward_length, None);
    let c = cfg(
        r#"{"model_type":"mamba2","hidden_size":768,"d_state":128,"d_conv":4,"expand":2,"n_groups":8}"#,
    );
    let s = c.hparams.ssm.expect("ssm");
    assert_eq!(s.inner_size, Some(1536));
    assert_eq!(s.group_count, Some(8));
    assert!(
        cfg(r#"{"model_type":"llama","hidden_size":8}"#)
            .hparams
            .ssm
            .is_none()
    );
}

/// vLLM's llama.py builds Q/K/V/O with a bias when `attention_bias or bias`, by Python truthiness: a
/// non-boolean `bias` such as "none" is true there, so the stored bias is counted, never dropped.
#[test]
fn bias_switches_read_as_vllm_reads_them() {
    let b = |json: &str| cfg(json).hparams.linear_bias;
    assert_eq!(b("{}"), LinearBias::default());
    let either = b(r#"{"attention_bias":false,"bias":true,"mlp_bias":false}"#);
    assert_eq!(either.attention, Some(true));
    assert_eq!(either.mlp, Some(false));
    assert_eq!(b(r#"{"attention_bias":false}"#).attention, Some(false));
    assert_eq!(b(r#"{"qkv_bias":true}"#).qkv, Some(true));
    assert_eq!(b(r#"{"bias":"none"}"#).attention, Some(true));
    assert_eq!(b(r#"{"bias":""}"#).attention, Some(false));
    // A null reads as the key left out: no bias either way.
    assert!(!b(r#"{"mlp_bias":null}"#).mlp.unwrap_or(false));
    assert_eq!(b(r#"{"qkv_bias":1}"#).qkv, Some(true));
}

#[test]
fn quantization_configs() {
    let q = |json: &str| cfg(json).hparams.quantization.expect("quantization");
    let g = q(
        r#"{"quantization_config":{"quant_method":"gptq","bits":4,"group_size":128,"sym":true,"desc_act":false}}"#,
    );
    assert_eq!(
        (g.method.as_str(), g.bits, g.group_size),
        ("gptq", Some(4), Some(128))
    );
    assert_eq!(g.format.as_deref(), Some("int4 symmetric"));
    let a = q(
        r#"{"quantization_config":{"quant_method":"awq","bits":4,"group_size":-1,"version":"gemm","zero_point":true}}"#,
    );
    assert_eq!(a.group_size, Some(-1));
    assert_eq!(a.format.as_deref(), Some("gemm, zero_point"));
    let f = q(
        r#"{"quantization_config":{"quant_method":"fp8","fmt":"e4m3","weight_block_size":[128,128]}}"#,
    );
    assert_eq!((f.bits, f.format.as_deref()), (Some(8), Some("e4m3")));
    assert_eq!(f.block_size, Some(vec![128, 128]));
    let b = q(
        r#"{"quantization_config":{"quant_method":"bitsandbytes","load_in_4bit":true,"bnb_4bit_quant_type":"nf4"}}"#,
    );
    assert_eq!((b.bits, b.format.as_deref()), (Some(4), Some("nf4")));
    let b8 = q(r#"{"quantization_config":{"load_in_8bit":true}}"#);
    assert_eq!((b8.method.as_str(), b8.bits), ("bitsandbytes", Some(8)));
    let ct = q(
        r#"{"quantization_config":{"quant_method":"compressed-tensors","format":"pack-quantized",
            "config_groups":{"group_0":{"weights":{"num_bits":4,"group_size":128,"type":"int"},"targets":["Linear"]}}}}"#,
    );
    assert_eq!((ct.bits, ct.group_size), (Some(4), Some(128)));
    assert_eq!(ct.format.as_deref(), Some("pack-quantized"));
}

#[test]
fn wrong_types_name_the_key() {
    for (json, key) in [
        (r#"{"num_hidden_layers":"32"}"#, "num_hidden_layers"),
        (r#"{"num_attention_heads":-4}"#, "num_attention_heads"),
        (r#"{"hidden_size":1.5}"#, "hidden_size"),
        (r#"{"architectures":"Llama"}"#, "architectures"),
        (r#"{"model_type":7}"#, "model_type"),
        (r#"{"rope_scaling":"linear"}"#, "rope_scaling"),
        (r#"{"rope_scaling":{"factor":"2"}}"#, "rope_scaling.factor"),
        (
            r#"{"quantization_config":{"bits":"4"}}"#,
            "quantization_config.bits",
        ),
        (r#"{"quantization_config":{"bits":64}}"#, "bits"),
        (
            r#"{"text_config":{"num_hidden_layers":true}}"#,
            "text_config.num_hidden_layers",
        ),
        (r#"{"tie_word_embeddings":1}"#, "tie_word_embeddings"),
        (r#"{"num_hidden_layers":100000000}"#, "layer count"),
    ] {
        let e = config_err(json);
        assert!(e.contains(key), "{json}: {e}");
    }
    let e = config_err("[1,2]");
    assert!(e.contains("JSON object"), "{e}");
    let e = parse(Path::new("config.json"), b"{\"a\":").unwrap_err();
    assert!(matches!(e.defect(), Some(Defect::Config(_))), "{e}");
}

#[test]
fn integral_floats_are_integers() {
    let c = cfg(r#"{"hidden_size":4096.0,"num_attention_heads":32}"#);
    assert_eq!(c.hparams.embedding_length, Some(4096));
}
