//! Header-only safetensors checkpoints of real, well-known models, for the vLLM planning tests.
//!
//! `tests/fixtures/vllm/models/<id>/` holds the model's published `config.json` and `header.json`, the complete
//! safetensors header its checkpoint has (written by `tests/fixtures/vllm/gen_headers.py`; sources and method in
//! that directory's README). [`materialize`] turns one into a model directory the readers accept: the config and
//! a sparse `model.safetensors` (or, for a header too large for one file, sparse shards and their index) whose
//! data section is a hole, so a 140 GB model costs a few KiB of disk.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use optimizer::model::{self, ModelSpec};
use serde_json::Value;

/// Header bytes are padded with spaces to this alignment, as the upstream writer does
/// (huggingface/safetensors `safetensors/src/tensor.rs`, `prepare`: `N_LEN`-aligned so the data section starts
/// 8-byte aligned).
const HEADER_ALIGN: usize = 8;

/// `tests/fixtures/vllm/models`.
pub(crate) fn models_dir() -> PathBuf {
    super::fixture("vllm/models")
}

/// Every fixture id (a directory with a `config.json` and a `header.json`), sorted.
pub(crate) fn ids() -> Vec<String> {
    let mut ids: Vec<String> = fs::read_dir(models_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("config.json").is_file() && p.join("header.json").is_file())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    ids.sort();
    ids
}

/// One value per fixture id, made once per process: the largest headers (Kimi-K2's is 18 MB) took 18 s to
/// read and parse in a test build, and several tests ask for the same one. Two tests asking for the same id
/// at once wait for one computation; different ids do not wait for each other.
type PerId<T> = OnceLock<Mutex<BTreeMap<String, Arc<OnceLock<T>>>>>;

fn once_per_id<T: Clone + Send + Sync + 'static>(
    cache: &'static PerId<T>,
    id: &str,
    make: impl FnOnce() -> T,
) -> T {
    let slot = {
        let mut map = cache
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        Arc::clone(map.entry(id.to_string()).or_default())
    };
    slot.get_or_init(make).clone()
}

/// The committed header of fixture `id`, parsed (once per process).
pub(crate) fn header(id: &str) -> Value {
    static HEADERS: PerId<Value> = OnceLock::new();
    once_per_id(&HEADERS, id, || {
        let path = models_dir().join(id).join("header.json");
        let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    })
}

/// The committed `config.json` of fixture `id`, parsed.
pub(crate) fn config(id: &str) -> Value {
    let path = models_dir().join(id).join("config.json");
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Bytes of the data section the header declares: the largest end offset.
pub(crate) fn data_bytes(header: &Value) -> u64 {
    header
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .map(|(_, v)| v["data_offsets"][1].as_u64().unwrap())
        .max()
        .unwrap_or(0)
}

/// The header as a checkpoint stores it: compact JSON (the committed file has one tensor per line, and JSON
/// strings hold no raw newlines, so dropping them changes no value), padded with spaces to [`HEADER_ALIGN`].
pub(crate) fn header_bytes(id: &str) -> Vec<u8> {
    let path = models_dir().join(id).join("header.json");
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut bytes: Vec<u8> = text.bytes().filter(|&b| b != b'\n').collect();
    while !bytes.len().is_multiple_of(HEADER_ALIGN) {
        bytes.push(b' ');
    }
    bytes
}

/// Tensors per shard when a fixture is written as shards. Real checkpoints of this size are sharded (the Hub's
/// Kimi-K2-Instruct: about 140k tensors in 62 files, some 2,250 a file); 4,096 keeps each shard's header small.
const SHARD_TENSORS: usize = 4096;

/// The index file transformers writes beside the shards.
const INDEX_FILE: &str = "model.safetensors.index.json";

/// One safetensors file of a materialized fixture: its name, header bytes (padded) and data-section size.
pub(crate) struct Shard {
    pub name: String,
    pub header: Vec<u8>,
    pub data: u64,
}

/// How fixture `id` is written: one `model.safetensors` holding the committed header, or, when the header has
/// more tensors than the reader takes from one file (`MAX_TENSORS_PER_FILE`, a bound real checkpoints meet by
/// sharding), shards of [`SHARD_TENSORS`] tensors in name order with offsets rebased per shard.
pub(crate) fn layout(id: &str) -> Vec<Shard> {
    let h = header(id);
    let entries = h.as_object().unwrap();
    let count = entries.len() - 1;
    if count as u64 <= optimizer::model::safetensors::MAX_TENSORS_PER_FILE {
        return vec![Shard {
            name: "model.safetensors".into(),
            header: header_bytes(id),
            data: data_bytes(&h),
        }];
    }
    let mut tensors: Vec<(&String, &Value)> = entries
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .collect();
    tensors.sort_by_key(|(_, v)| v["data_offsets"][0].as_u64().unwrap());
    let n = tensors.len().div_ceil(SHARD_TENSORS);
    tensors
        .chunks(SHARD_TENSORS)
        .enumerate()
        .map(|(i, chunk)| {
            let mut map = serde_json::Map::new();
            map.insert("__metadata__".into(), entries["__metadata__"].clone());
            let mut offset = 0u64;
            for (name, v) in chunk {
                let span =
                    v["data_offsets"][1].as_u64().unwrap() - v["data_offsets"][0].as_u64().unwrap();
                let mut e = (*v).clone();
                e["data_offsets"] = serde_json::json!([offset, offset + span]);
                map.insert((*name).clone(), e);
                offset += span;
            }
            let mut header = serde_json::to_vec(&Value::Object(map)).unwrap();
            while !header.len().is_multiple_of(HEADER_ALIGN) {
                header.push(b' ');
            }
            Shard {
                name: format!("model-{:05}-of-{n:05}.safetensors", i + 1),
                header,
                data: offset,
            }
        })
        .collect()
}

/// Bytes of every safetensors file of fixture `id` as [`materialize`] writes it: per file the 8-byte length,
/// the header and the data section.
pub(crate) fn file_bytes(id: &str) -> u64 {
    layout(id)
        .iter()
        .map(|s| 8 + s.header.len() as u64 + s.data)
        .sum()
}

/// Writes fixture `id` as a model directory: `config.json` and sparse safetensors files (8-byte little-endian
/// header length, the header, then the data section as a hole of the declared size), with
/// `model.safetensors.index.json` when [`layout`] shards it.
pub(crate) fn materialize(id: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let src = models_dir().join(id);
    fs::copy(src.join("config.json"), dir.path().join("config.json")).unwrap();
    let shards = layout(id);
    let mut weight_map = serde_json::Map::new();
    let mut total = 0u64;
    for s in &shards {
        let mut f = File::create(dir.path().join(&s.name)).unwrap();
        f.write_all(&(s.header.len() as u64).to_le_bytes()).unwrap();
        f.write_all(&s.header).unwrap();
        f.set_len(8 + s.header.len() as u64 + s.data).unwrap();
        total += s.data;
        if shards.len() > 1 {
            let h: Value = serde_json::from_slice(&s.header).unwrap();
            for name in h
                .as_object()
                .unwrap()
                .keys()
                .filter(|k| *k != "__metadata__")
            {
                weight_map.insert(name.clone(), Value::String(s.name.clone()));
            }
        }
    }
    if shards.len() > 1 {
        let index =
            serde_json::json!({"metadata": {"total_size": total}, "weight_map": weight_map});
        fs::write(
            dir.path().join(INDEX_FILE),
            serde_json::to_vec(&index).unwrap(),
        )
        .unwrap();
    }
    dir
}

/// The unquantized BF16 checkpoint an FP8 fixture was made from, written as a model directory named `name`
/// inside the returned temporary directory: the same tensors with every `F8_E4M3` weight stored as `BF16`, the
/// quantization scales (`*_scale`, `*_scale_inv`) dropped, and `quantization_config` removed from `config.json`
/// (its `torch_dtype` is already `bfloat16`). Meta's Llama-3.1-405B(-Instruct) is that checkpoint of
/// `Meta-Llama-3.1-405B-Instruct-FP8`: same config otherwise, 405,853,388,800 parameters at 2 bytes
/// (811,706,777,600 bytes, 756 GiB).
pub(crate) fn materialize_bf16(id: &str, name: &str) -> (tempfile::TempDir, PathBuf) {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join(name);
    fs::create_dir(&dir).unwrap();
    let mut cfg = config(id);
    cfg.as_object_mut().unwrap().remove("quantization_config");
    fs::write(
        dir.join("config.json"),
        serde_json::to_vec_pretty(&cfg).unwrap(),
    )
    .unwrap();
    let h = header(id);
    let mut tensors: Vec<(&String, &Value)> = h
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| {
            *k != "__metadata__" && !k.ends_with("_scale") && !k.ends_with("_scale_inv")
        })
        .collect();
    tensors.sort_by_key(|(k, _)| k.as_str());
    let mut map = serde_json::Map::new();
    map.insert("__metadata__".into(), h["__metadata__"].clone());
    let mut offset = 0u64;
    for (k, v) in tensors {
        let mut e = v.clone();
        let elements: u64 = v["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .product();
        let bytes = match v["dtype"].as_str().unwrap() {
            "F8_E4M3" | "BF16" | "F16" => {
                e["dtype"] = Value::String("BF16".into());
                elements * 2
            }
            "F32" => elements * 4,
            other => panic!("{k}: dtype {other} has no BF16 original"),
        };
        e["data_offsets"] = serde_json::json!([offset, offset + bytes]);
        map.insert(k.clone(), e);
        offset += bytes;
    }
    let mut header = serde_json::to_vec(&Value::Object(map)).unwrap();
    while !header.len().is_multiple_of(HEADER_ALIGN) {
        header.push(b' ');
    }
    let mut f = File::create(dir.join("model.safetensors")).unwrap();
    f.write_all(&(header.len() as u64).to_le_bytes()).unwrap();
    f.write_all(&header).unwrap();
    f.set_len(8 + header.len() as u64 + offset).unwrap();
    (parent, dir)
}

/// Fixture `id` read by the crate's safetensors reader (from a directory [`materialize`] wrote and then
/// removed: the spec keeps no handle on the files).
pub(crate) fn spec(id: &str) -> ModelSpec {
    static SPECS: PerId<ModelSpec> = OnceLock::new();
    once_per_id(&SPECS, id, || {
        let dir = materialize(id);
        model::load(dir.path()).unwrap_or_else(|e| panic!("fixture {id}: {e}"))
    })
}

/// Kimi-K2-Instruct's shapes from its config.json (model_type `kimi_k2`, DeepSeek-V3's layout): MLA with
/// `q_lora_rank` 1536, `kv_lora_rank` 512, `qk_nope_head_dim` 128, `qk_rope_head_dim` 64, `v_head_dim` 128 and
/// 64 heads; 61 layers, the first dense (`first_k_dense_replace` 1, `intermediate_size` 18432), the other 60
/// MoE with 384 routed experts and one shared expert of `moe_intermediate_size` 2048.
pub(crate) mod kimi_k2 {
    pub(crate) const H: u64 = 7168;
    pub(crate) const VOCAB: u64 = 163_840;
    pub(crate) const LAYERS: u64 = 61;
    pub(crate) const DENSE_LAYERS: u64 = 1;
    pub(crate) const MOE_LAYERS: u64 = LAYERS - DENSE_LAYERS;
    pub(crate) const HEADS: u64 = 64;
    pub(crate) const Q_RANK: u64 = 1536;
    pub(crate) const KV_RANK: u64 = 512;
    pub(crate) const NOPE: u64 = 128;
    pub(crate) const ROPE: u64 = 64;
    pub(crate) const V: u64 = 128;
    pub(crate) const INTER: u64 = 18_432;
    pub(crate) const MOE_INTER: u64 = 2048;
    pub(crate) const EXPERTS: u64 = 384;
    pub(crate) const SHARED: u64 = 1;
    /// `weight_block_size` [128, 128] of the config's block-FP8 `quantization_config`.
    pub(crate) const BLOCK: u64 = 128;

    /// Elements of the linear layers of one MLA block: q_a, q_b, kv_a_with_mqa, kv_b, o.
    pub(crate) const Q_A: u64 = Q_RANK * H;
    pub(crate) const Q_B: u64 = HEADS * (NOPE + ROPE) * Q_RANK;
    pub(crate) const KV_A: u64 = (KV_RANK + ROPE) * H;
    pub(crate) const KV_B: u64 = HEADS * (NOPE + V) * KV_RANK;
    pub(crate) const O: u64 = H * HEADS * V;

    /// F32 bytes of a [out, in] linear layer's `weight_scale_inv` (ceil(out/128) × ceil(in/128) blocks).
    pub(crate) const fn scale_bytes(out_f: u64, in_f: u64) -> u64 {
        out_f.div_ceil(BLOCK) * in_f.div_ceil(BLOCK) * 4
    }

    /// Bytes vLLM 0.33.0 holds for the model at `--dtype bfloat16` over `tp` ranks (rules in
    /// tests/it/vllm_fixtures.rs `kimi_k2_weights_per_rank_at_tp8_are_the_replicated_plus_an_eighth_of_the_sharded`).
    pub(crate) struct RankWeights {
        pub replicated: u64,
        pub sharded: u64,
        pub rope_cache: u64,
        pub w_uk_uv: u64,
        pub per_rank: u64,
    }

    pub(crate) fn rank_weights(tp: u64) -> RankWeights {
        let norms = (LAYERS * (2 * H + Q_RANK + KV_RANK) + H) * 2;
        let mla_a = LAYERS * (Q_A + scale_bytes(Q_RANK, H) + KV_A + scale_bytes(KV_RANK + ROPE, H));
        let router = MOE_LAYERS * (EXPERTS * H * 2 + EXPERTS * 4);
        let replicated = norms + mla_a + router;
        let mla_sharded = LAYERS
            * (Q_B
                + scale_bytes(HEADS * (NOPE + ROPE), Q_RANK)
                + KV_B
                + scale_bytes(HEADS * (NOPE + V), KV_RANK)
                + O
                + scale_bytes(H, HEADS * V));
        let mlp = |inter: u64| 3 * H * inter + 2 * scale_bytes(inter, H) + scale_bytes(H, inter);
        let ffn = DENSE_LAYERS * mlp(INTER) + MOE_LAYERS * (EXPERTS + SHARED) * mlp(MOE_INTER);
        let vocab = 2 * VOCAB * H * 2;
        let sharded = mla_sharded + ffn + vocab;
        let rope_cache = 4096 * 32 * ROPE * 2;
        let w_uk_uv = LAYERS * KV_RANK * (HEADS / tp) * (NOPE + V) * 2;
        let per_rank = replicated + sharded / tp + rope_cache + w_uk_uv;

        RankWeights {
            replicated,
            sharded,
            rope_cache,
            w_uk_uv,
            per_rank,
        }
    }
}
