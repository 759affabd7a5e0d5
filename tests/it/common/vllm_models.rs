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
/// [`materialize`] in a directory named `id` (the model's name as a plan prints it), inside the returned
/// temporary directory, which must be kept alive while the path is used.
pub(crate) fn materialize_named(id: &str) -> (tempfile::TempDir, PathBuf) {
    let written = materialize(id);
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join(id);
    fs::rename(written.path(), &dir).unwrap();
    (parent, dir)
}

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

/// The shapes of a DeepSeek-V3-layout checkpoint (MLA with `q_lora_rank`, block-FP8 [128, 128] linear layers,
/// the first `dense_layers` layers dense, the rest MoE with routed and shared experts), from its config.json,
/// and the bytes vLLM 0.33.0 holds for it per rank ([`MlaMoe::rank_weights`]).
pub(crate) struct MlaMoe {
    pub h: u64,
    pub vocab: u64,
    /// `num_hidden_layers` (the trunk; an MTP layer stored past it is not loaded).
    pub layers: u64,
    pub dense_layers: u64,
    pub heads: u64,
    pub q_rank: u64,
    pub kv_rank: u64,
    pub nope: u64,
    pub rope: u64,
    pub v: u64,
    pub inter: u64,
    pub moe_inter: u64,
    pub experts: u64,
    pub shared: u64,
    /// Positions of the yarn `cos_sin_cache`: `original_max_position_embeddings × factor`.
    pub rope_positions: u64,
}

/// `weight_block_size` [128, 128] of the block-FP8 `quantization_config`.
pub(crate) const BLOCK: u64 = 128;

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

impl MlaMoe {
    pub(crate) const fn moe_layers(&self) -> u64 {
        self.layers - self.dense_layers
    }

    /// FP8 bytes of one routed expert with its block scales (gate, up, down).
    pub(crate) const fn expert_bytes(&self) -> u64 {
        let (h, mi) = (self.h, self.moe_inter);
        3 * h * mi + 2 * scale_bytes(mi, h) + scale_bytes(h, mi)
    }

    pub(crate) fn rank_weights(&self, tp: u64) -> RankWeights {
        let (h, heads) = (self.h, self.heads);
        let q_a = self.q_rank * h;
        let q_b = heads * (self.nope + self.rope) * self.q_rank;
        let kv_a = (self.kv_rank + self.rope) * h;
        let kv_b = heads * (self.nope + self.v) * self.kv_rank;
        let o = h * heads * self.v;
        let norms = (self.layers * (2 * h + self.q_rank + self.kv_rank) + h) * 2;
        let mla_a = self.layers
            * (q_a + scale_bytes(self.q_rank, h) + kv_a + scale_bytes(self.kv_rank + self.rope, h));
        let router = self.moe_layers() * (self.experts * h * 2 + self.experts * 4);
        let replicated = norms + mla_a + router;
        let mla_sharded = self.layers
            * (q_b
                + scale_bytes(heads * (self.nope + self.rope), self.q_rank)
                + kv_b
                + scale_bytes(heads * (self.nope + self.v), self.kv_rank)
                + o
                + scale_bytes(h, heads * self.v));
        let mlp = |inter: u64| 3 * h * inter + 2 * scale_bytes(inter, h) + scale_bytes(h, inter);
        let ffn = self.dense_layers * mlp(self.inter)
            + self.moe_layers() * (self.experts + self.shared) * mlp(self.moe_inter);
        let vocab = 2 * self.vocab * h * 2;
        let sharded = mla_sharded + ffn + vocab;
        let rope_cache = self.rope_positions * self.rope * 2;
        let w_uk_uv = self.layers * self.kv_rank * (heads / tp) * (self.nope + self.v) * 2;
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

/// Kimi-K2-Instruct's shapes from its config.json (model_type `kimi_k2`, DeepSeek-V3's layout): MLA with
/// `q_lora_rank` 1536, `kv_lora_rank` 512, `qk_nope_head_dim` 128, `qk_rope_head_dim` 64, `v_head_dim` 128 and
/// 64 heads; 61 layers, the first dense (`first_k_dense_replace` 1, `intermediate_size` 18432), the other 60
/// MoE with 384 routed experts and one shared expert of `moe_intermediate_size` 2048; yarn 4096 x 32.
pub(crate) const KIMI_K2: MlaMoe = MlaMoe {
    h: 7168,
    vocab: 163_840,
    layers: 61,
    dense_layers: 1,
    heads: 64,
    q_rank: 1536,
    kv_rank: 512,
    nope: 128,
    rope: 64,
    v: 128,
    inter: 18_432,
    moe_inter: 2048,
    experts: 384,
    shared: 1,
    rope_positions: 4096 * 32,
};

/// DeepSeek-V3's shapes from its config.json: Kimi-K2's layout with 128 heads, a 129,280-token vocabulary, 3
/// dense layers, 256 routed experts and yarn 4096 x 40; its MTP layer (61) is stored but not loaded.
pub(crate) const DEEPSEEK_V3: MlaMoe = MlaMoe {
    heads: 128,
    vocab: 129_280,
    dense_layers: 3,
    experts: 256,
    rope_positions: 4096 * 40,
    ..KIMI_K2
};

/// [`KIMI_K2`]'s figures by name, as the Kimi-K2 tests use them.
pub(crate) mod kimi_k2 {
    use super::KIMI_K2 as K;
    pub(crate) use super::{BLOCK, RankWeights};
    pub(crate) const H: u64 = K.h;
    pub(crate) const VOCAB: u64 = K.vocab;
    pub(crate) const LAYERS: u64 = K.layers;
    pub(crate) const DENSE_LAYERS: u64 = K.dense_layers;
    pub(crate) const MOE_LAYERS: u64 = K.moe_layers();
    pub(crate) const HEADS: u64 = K.heads;
    pub(crate) const Q_RANK: u64 = K.q_rank;
    pub(crate) const KV_RANK: u64 = K.kv_rank;
    pub(crate) const NOPE: u64 = K.nope;
    pub(crate) const ROPE: u64 = K.rope;
    pub(crate) const V: u64 = K.v;
    pub(crate) const INTER: u64 = K.inter;
    pub(crate) const MOE_INTER: u64 = K.moe_inter;
    pub(crate) const EXPERTS: u64 = K.experts;
    pub(crate) const SHARED: u64 = K.shared;
    /// Elements of the linear layers of one MLA block: q_a, q_b, kv_a_with_mqa, kv_b, o.
    pub(crate) const Q_A: u64 = Q_RANK * H;
    pub(crate) const Q_B: u64 = HEADS * (NOPE + ROPE) * Q_RANK;
    pub(crate) const KV_A: u64 = (KV_RANK + ROPE) * H;
    pub(crate) const KV_B: u64 = HEADS * (NOPE + V) * KV_RANK;
    pub(crate) const O: u64 = H * HEADS * V;

    pub(crate) fn rank_weights(tp: u64) -> RankWeights {
        K.rank_weights(tp)
    }
}
