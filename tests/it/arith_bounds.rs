//! Arithmetic on values from model files and flags is bounded and checked (issue 8, "Hostile input"): every
//! hyper-parameter that enters a size has a named limit enforced when the model is read (exit 4, naming the
//! file and the key), flags above the engine's own limits are usage errors (exit 2), and a size that still
//! overflows 64 bits is a typed error, never a wrapped number.

use crate::common;
use common::bin_on;

use std::path::{Path, PathBuf};
use std::process::Output;

use optimizer::memory::llama_cpp::{
    self, FlashAttn, MAX_CTX_FLAG, MAX_SEQ, Machine, ParamError, Params, estimate,
};
use optimizer::model::{
    self, Defect, MAX_CONTEXT_LENGTH, MAX_EXPERTS, MAX_HPARAM_U32, MAX_VOCAB_SIZE, ModelError,
};
use optimizer_testkit::gguf_builder::{GgufBuilder, value_type as vt, write_sparse};

const Q8_0: u32 = 8;
const F32: u32 = 0;

/// A small Llama model (2 layers, 64-wide, 256-token vocabulary, Q8_0) whose metadata is `extra` on top of
/// sane defaults; a key given in `extra` replaces the default.
fn tiny_llama(extra: &[(&str, Value)]) -> GgufBuilder {
    let defaults: &[(&str, Value)] = &[
        ("llama.context_length", Value::U32(4096)),
        ("llama.embedding_length", Value::U32(64)),
        ("llama.block_count", Value::U32(2)),
        ("llama.feed_forward_length", Value::U32(128)),
        ("llama.attention.head_count", Value::U32(4)),
        ("llama.attention.head_count_kv", Value::U32(2)),
        ("llama.vocab_size", Value::U32(256)),
    ];
    let mut b = GgufBuilder::new();
    b.kv_str("general.architecture", "llama");
    for (k, v) in defaults {
        if !extra.iter().any(|(e, _)| e == k) {
            v.put(&mut b, k);
        }
    }
    for (k, v) in extra {
        v.put(&mut b, k);
    }
    let q8 = |ne: &[u64]| ne[0] / 32 * 34 * ne[1..].iter().product::<u64>();
    let mut t = |name: &str, ne: &[u64], ty: u32| {
        let bytes = if ty == F32 {
            ne.iter().product::<u64>() * 4
        } else {
            q8(ne)
        };
        b.tensor(name, ne, ty, bytes);
    };
    t("token_embd.weight", &[64, 256], Q8_0);
    for l in 0..2 {
        t(&format!("blk.{l}.attn_norm.weight"), &[64], F32);
        t(&format!("blk.{l}.attn_q.weight"), &[64, 64], Q8_0);
        t(&format!("blk.{l}.attn_k.weight"), &[64, 32], Q8_0);
        t(&format!("blk.{l}.attn_v.weight"), &[64, 32], Q8_0);
        t(&format!("blk.{l}.attn_output.weight"), &[64, 64], Q8_0);
        t(&format!("blk.{l}.ffn_norm.weight"), &[64], F32);
        t(&format!("blk.{l}.ffn_gate.weight"), &[64, 128], Q8_0);
        t(&format!("blk.{l}.ffn_up.weight"), &[64, 128], Q8_0);
        t(&format!("blk.{l}.ffn_down.weight"), &[128, 64], Q8_0);
    }
    t("output_norm.weight", &[64], F32);
    t("output.weight", &[64, 256], Q8_0);
    b
}

#[derive(Clone)]
enum Value {
    U32(u32),
    U64(u64),
    U64s(Vec<u64>),
}

impl Value {
    fn put(&self, b: &mut GgufBuilder, k: &str) {
        match self {
            Value::U32(v) => {
                b.kv_u32(k, *v);
            }
            Value::U64(v) => {
                b.kv_u64(k, *v);
            }
            Value::U64s(v) => {
                let mut bytes = b.array_header(vt::UINT64, v.len() as u64);
                for x in v {
                    bytes.extend_from_slice(&x.to_le_bytes());
                }
                b.kv_raw(k.as_bytes(), vt::ARRAY, &bytes);
            }
        }
    }
}

fn write(dir: &Path, name: &str, b: &GgufBuilder) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, b.build()).unwrap();
    p
}

fn load_err(b: &GgufBuilder) -> Defect {
    match model::gguf::load_bytes(&b.build(), Path::new("crafted.gguf")) {
        Err(ModelError::InvalidModel { defect, .. }) => defect,
        other => panic!("expected an invalid model, got {other:?}"),
    }
}

fn optimizer(args: &[&str]) -> Output {
    bin_on("cpu-server.yaml").args(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Regression: `-c 4294967295` padded to 256 cells in 32 bits wrapped to `context_length: 0` with
/// `status: fits`. llama.cpp reads -c into an int32_t, so anything above 2^31 - 1 is a usage error.
#[test]
fn context_flag_above_the_engines_int32_is_a_usage_error() {
    let dir = tempfile::tempdir().unwrap();
    let m = write(dir.path(), "tiny.gguf", &tiny_llama(&[]));
    let m = m.to_str().unwrap();
    for c in ["4294967295", "4294967040", "2147483648"] {
        let o = optimizer(&["estimate", "-m", m, "-c", c, "--format", "json"]);
        assert_eq!(o.status.code(), Some(2), "-c {c}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("-c") && stderr(&o).contains("2147483647"),
            "{}",
            stderr(&o)
        );
        assert!(o.stdout.is_empty());
    }
    // The largest -c the engine accepts is planned without wrapping: padded up to 2^31 cells.
    let o = optimizer(&["estimate", "-m", m, "-c", "2147483647", "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["resolved"]["n_ctx"], 2_147_483_648u64);
    assert_eq!(
        v["devices"][0]["kv_cache_bytes"],
        // 2 layers × (K + V) × 2 KV heads × 16 dims × 2 bytes (f16) per cell.
        2_147_483_648u64 * 2 * 2 * 2 * 16 * 2
    );
}

/// Regression: a GGUF `context_length` of 2^32 or more was truncated to 32 bits (2^32 + 4096 planned as 4096).
#[test]
fn gguf_context_length_beyond_32_bits_is_an_invalid_model() {
    let dir = tempfile::tempdir().unwrap();
    for v in [1u64 << 32, (1u64 << 32) + 4096, u64::MAX] {
        let b = tiny_llama(&[("llama.context_length", Value::U64(v))]);
        let m = write(dir.path(), "ctx.gguf", &b);
        let o = optimizer(&["estimate", "-m", m.to_str().unwrap()]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(4), "{v}: {err}");
        assert!(
            err.contains("ctx.gguf") && err.contains("llama.context_length"),
            "{err}"
        );
        assert!(o.stdout.is_empty());
    }
    // Between the last multiple of 256 and 2^32 the engine's padding wraps to 0 cells: refused as well.
    let d = load_err(&tiny_llama(&[(
        "llama.context_length",
        Value::U32(u32::MAX),
    )]));
    assert!(
        matches!(&d, Defect::HparamOutOfRange { key, max, .. } if key == "llama.context_length" && *max == MAX_CONTEXT_LENGTH),
        "{d:?}"
    );
}

/// Regression: `vocab_size` 2^62 overflowed the output buffer (n_vocab × n_seq × 4 bytes).
#[test]
fn vocab_size_beyond_int32_token_ids_is_an_invalid_model() {
    let dir = tempfile::tempdir().unwrap();
    let b = tiny_llama(&[("llama.vocab_size", Value::U64(1 << 62))]);
    let m = write(dir.path(), "vocab.gguf", &b);
    let o = optimizer(&["estimate", "-m", m.to_str().unwrap()]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(4), "{err}");
    assert!(
        err.contains("vocab.gguf") && err.contains("llama.vocab_size"),
        "{err}"
    );
    assert!(
        matches!(load_err(&b), Defect::HparamOutOfRange { value, max, .. } if value == 1 << 62 && max == MAX_VOCAB_SIZE)
    );
}

/// Regression: a GGUF `context_length` of 0 planned and emitted `-c 0`, which llama.cpp then rejects
/// ("n_ctx and model->hparams.n_ctx_train cannot both be zero").
#[test]
fn gguf_context_length_zero_is_an_invalid_model_for_estimate_and_resolve() {
    let dir = tempfile::tempdir().unwrap();
    let m = write(
        dir.path(),
        "zero.gguf",
        &tiny_llama(&[("llama.context_length", Value::U32(0))]),
    );
    for cmd in ["estimate", "resolve"] {
        let o = optimizer(&[cmd, "-m", m.to_str().unwrap()]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(4), "{cmd}: {err}");
        assert!(
            err.contains("zero.gguf") && err.contains("llama.context_length"),
            "{cmd}: {err}"
        );
        assert!(o.stdout.is_empty(), "{cmd}");
    }
}

/// Every bounded key, one past its limit, names itself; the value at the limit loads.
#[test]
fn every_bounded_hyper_parameter_names_its_key_one_past_the_limit() {
    let u32_keys = [
        "llama.embedding_length",
        "llama.feed_forward_length",
        "llama.attention.head_count",
        "llama.attention.head_count_kv",
        "llama.attention.key_length",
        "llama.attention.value_length",
        "llama.attention.sliding_window",
        "llama.attention.kv_lora_rank",
        "llama.attention.q_lora_rank",
        "llama.attention.key_length_mla",
        "llama.attention.value_length_mla",
        "llama.expert_feed_forward_length",
        "llama.expert_shared_count",
        "llama.rope.dimension_count",
        "llama.rope.scaling.original_context_length",
        "llama.ssm.conv_kernel",
        "llama.ssm.inner_size",
        "llama.ssm.state_size",
        "llama.ssm.time_step_rank",
        "llama.ssm.group_count",
    ];
    for key in u32_keys {
        let d = load_err(&tiny_llama(&[(key, Value::U64(MAX_HPARAM_U32 + 1))]));
        assert!(
            matches!(&d, Defect::HparamOutOfRange { key: k, value, max, .. }
                if k == key && *value == MAX_HPARAM_U32 + 1 && *max == MAX_HPARAM_U32),
            "{key}: {d:?}"
        );
        assert!(d.to_string().contains(key), "{d}");
    }
    let limited: [(&str, u64); 3] = [
        ("llama.context_length", MAX_CONTEXT_LENGTH),
        ("llama.vocab_size", MAX_VOCAB_SIZE),
        ("llama.expert_count", MAX_EXPERTS),
    ];
    for (key, max) in limited {
        let d = load_err(&tiny_llama(&[(key, Value::U64(max + 1))]));
        assert!(
            matches!(&d, Defect::HparamOutOfRange { key: k, .. } if k == key),
            "{key}: {d:?}"
        );
    }
    // A per-layer array is bounded element by element.
    let d = load_err(&tiny_llama(&[(
        "llama.attention.head_count_kv",
        Value::U64s(vec![2, MAX_HPARAM_U32 + 1]),
    )]));
    assert!(
        d.to_string().contains("llama.attention.head_count_kv"),
        "{d}"
    );
    // Routing to more experts than exist (llama.cpp asserts it).
    let d = load_err(&tiny_llama(&[
        ("llama.expert_count", Value::U32(8)),
        ("llama.expert_used_count", Value::U32(9)),
    ]));
    assert!(
        matches!(&d, Defect::HparamOutOfRange { key, max: 8, .. } if key == "llama.expert_used_count"),
        "{d:?}"
    );
    // A vocabulary size taken from the embedding's rows (no key, no token list) names the tensor: a sparse file
    // with 2^31 rows of token_embd.weight.
    let dir = tempfile::tempdir().unwrap();
    let mut c = GgufBuilder::new();
    c.kv_str("general.architecture", "llama")
        .kv_u32("llama.context_length", 4096)
        .kv_u32("llama.embedding_length", 64)
        .kv_u32("llama.block_count", 1)
        .kv_u32("llama.attention.head_count", 4);
    c.tensor("token_embd.weight", &[64, 1 << 31], Q8_0, 68 << 31);
    let p = dir.path().join("rows.gguf");
    write_sparse(&c, &p).unwrap();
    match model::load(&p) {
        Err(ModelError::InvalidModel {
            defect: Defect::HparamOutOfRange { key, value, .. },
            ..
        }) => {
            assert_eq!(key, "token_embd.weight (its rows)");
            assert_eq!(value, 1 << 31);
        }
        other => panic!("{other:?}"),
    }
    // At the limits, the model loads.
    let ok = tiny_llama(&[
        ("llama.context_length", Value::U64(MAX_CONTEXT_LENGTH)),
        ("llama.embedding_length", Value::U64(MAX_HPARAM_U32)),
    ]);
    model::gguf::load_bytes(&ok.build(), Path::new("ok.gguf")).unwrap();
}

/// Sizes that leave 64 bits are typed errors: blamed on the flags when the smallest context and batch fit in
/// 64 bits (exit 2), on the model otherwise (exit 4).
#[test]
fn sizes_that_overflow_64_bits_are_errors_not_wrapped_numbers() {
    let dir = tempfile::tempdir().unwrap();
    // The flags: 2^31 cells × 2^31 tokens × 4 heads × 4 bytes of attention scores without flash attention.
    let m = write(dir.path(), "tiny.gguf", &tiny_llama(&[]));
    let spec = model::load(&m).unwrap();
    let huge = Params {
        n_ctx: MAX_CTX_FLAG,
        n_batch: MAX_CTX_FLAG,
        n_ubatch: MAX_CTX_FLAG,
        flash_attn: FlashAttn::Off,
        ..Params::default()
    };
    let e = estimate(&spec, &huge, &Machine::default()).unwrap_err();
    assert!(matches!(e, ParamError::Overflow { .. }), "{e:?}");
    assert!(!e.is_model_defect());
    let m = m.to_str().unwrap();
    let max = MAX_CTX_FLAG.to_string();
    let o = optimizer(&[
        "estimate", "-m", m, "-c", &max, "-b", &max, "-ub", &max, "-fa", "off",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("overflows 64 bits"), "{}", stderr(&o));

    // The model: a K row of 2^32 - 1 dims × 2^32 - 1 KV heads overflows at any context (as many query heads,
    // so the KV heads divide them and the file passes the reader's attention check).
    let b = tiny_llama(&[
        ("llama.attention.key_length", Value::U32(u32::MAX)),
        ("llama.attention.head_count", Value::U32(u32::MAX)),
        ("llama.attention.head_count_kv", Value::U32(u32::MAX)),
    ]);
    let p = write(dir.path(), "wide.gguf", &b);
    let spec = model::load(&p).unwrap();
    let e = estimate(&spec, &Params::default(), &Machine::default()).unwrap_err();
    assert!(matches!(e, ParamError::ModelOverflow { .. }), "{e:?}");
    let o = optimizer(&["estimate", "-m", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stderr(&o).contains("wide.gguf"), "{}", stderr(&o));
}

/// The other flags with engine limits: -b, -ub (int32_t) and -np (LLAMA_MAX_SEQ).
#[test]
fn batch_and_sequence_flags_above_the_engines_limits_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let m = write(dir.path(), "tiny.gguf", &tiny_llama(&[]));
    let m = m.to_str().unwrap();
    let over_seq = (MAX_SEQ + 1).to_string();
    let cases: [&[&str]; 3] = [
        &["-b", "2147483648", "-ub", "512"],
        &["-b", "4294967295", "-ub", "4294967295"],
        &["-np", &over_seq],
    ];
    for flags in cases {
        let mut args = vec!["estimate", "-m", m];
        args.extend_from_slice(flags);
        let o = optimizer(&args);
        assert_eq!(o.status.code(), Some(2), "{flags:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("is above"), "{flags:?}: {}", stderr(&o));
    }
    let spec = model::load(Path::new(m)).unwrap();
    let p = Params {
        n_parallel: MAX_SEQ,
        ..Params::default()
    };
    assert_eq!(
        estimate(&spec, &p, &Machine::default())
            .unwrap()
            .resolved
            .n_seq_max,
        MAX_SEQ
    );
}

/// A block count above LLAMA_MAX_LAYERS (which the readers' own cap allows) is refused by the memory model as
/// a defect of the model, like the engine's assertion.
#[test]
fn block_count_above_llama_max_layers_is_a_model_defect() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        dir.path(),
        "deep.gguf",
        &tiny_llama(&[("llama.block_count", Value::U32(513))]),
    );
    let spec = model::load(&p).unwrap();
    let e = estimate(&spec, &Params::default(), &Machine::default()).unwrap_err();
    assert!(
        matches!(e, ParamError::ModelLimit { key: "block_count", value: 513, max, .. } if max == llama_cpp::MAX_LAYERS),
        "{e:?}"
    );
    let o = optimizer(&["estimate", "-m", p.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(4), "{}", stderr(&o));
    assert!(stderr(&o).contains("deep.gguf"));
}
