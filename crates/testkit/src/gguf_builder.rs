//! A minimal GGUF header writer for tests, benchmarks and fuzz seeds: crafted files with exact control over
//! every field, including invalid ones. Fixtures meant to prove the reader right are written by the official
//! `gguf` Python package instead (tests/fixtures/generate.py); this builder exists to write what that package
//! refuses to write (bad offsets, unknown types, hostile counts) and to build large headers at bench time.

pub use optimizer_model::gguf::value_type;

/// One tensor-info record to write.
#[derive(Debug, Clone)]
pub struct TensorRecord {
    pub name: String,
    /// ggml `ne[]`, innermost first.
    pub ne: Vec<u64>,
    pub type_id: u32,
    /// Data bytes; used to place the next tensor when offsets are computed.
    pub bytes: u64,
    /// Explicit offset; `None` places the tensor right after the previous one, padded to the alignment.
    pub offset: Option<u64>,
}

/// Builds a GGUF file image: header, tensor infos, padding and (optionally) zero-filled data.
#[derive(Debug, Clone)]
pub struct GgufBuilder {
    pub big_endian: bool,
    pub version: u32,
    pub alignment: u64,
    kv: Vec<u8>,
    n_kv: u64,
    /// Overrides the written counts (to forge hostile headers).
    pub n_kv_override: Option<u64>,
    pub n_tensors_override: Option<u64>,
    pub tensors: Vec<TensorRecord>,
}

impl Default for GgufBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl GgufBuilder {
    pub fn new() -> Self {
        GgufBuilder {
            big_endian: false,
            version: 3,
            alignment: 32,
            kv: Vec::new(),
            n_kv: 0,
            n_kv_override: None,
            n_tensors_override: None,
            tensors: Vec::new(),
        }
    }

    fn u32b(&self, v: u32) -> [u8; 4] {
        if self.big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }

    fn u64b(&self, v: u64) -> [u8; 8] {
        if self.big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        }
    }

    /// Encodes a string (u64 length + bytes).
    pub fn string_bytes(&self, s: &[u8]) -> Vec<u8> {
        let mut v = self.u64b(s.len() as u64).to_vec();
        v.extend_from_slice(s);
        v
    }

    /// Adds a key with a value type and its already-encoded value bytes.
    pub fn kv_raw(&mut self, key: &[u8], type_id: u32, value: &[u8]) -> &mut Self {
        let k = self.string_bytes(key);
        self.kv.extend_from_slice(&k);
        let t = self.u32b(type_id);
        self.kv.extend_from_slice(&t);
        self.kv.extend_from_slice(value);
        self.n_kv += 1;
        self
    }

    pub fn kv_u32(&mut self, key: &str, v: u32) -> &mut Self {
        let b = self.u32b(v);
        self.kv_raw(key.as_bytes(), value_type::UINT32, &b)
    }

    pub fn kv_u64(&mut self, key: &str, v: u64) -> &mut Self {
        let b = self.u64b(v);
        self.kv_raw(key.as_bytes(), value_type::UINT64, &b)
    }

    pub fn kv_u16(&mut self, key: &str, v: u16) -> &mut Self {
        let b = if self.big_endian {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        };
        self.kv_raw(key.as_bytes(), value_type::UINT16, &b)
    }

    pub fn kv_i32(&mut self, key: &str, v: i32) -> &mut Self {
        let b = self.u32b(v as u32);
        self.kv_raw(key.as_bytes(), value_type::INT32, &b)
    }

    pub fn kv_f32(&mut self, key: &str, v: f32) -> &mut Self {
        let b = self.u32b(v.to_bits());
        self.kv_raw(key.as_bytes(), value_type::FLOAT32, &b)
    }

    pub fn kv_str(&mut self, key: &str, v: &str) -> &mut Self {
        let b = self.string_bytes(v.as_bytes());
        self.kv_raw(key.as_bytes(), value_type::STRING, &b)
    }

    /// Array header: element type and count.
    pub fn array_header(&self, element_type: u32, count: u64) -> Vec<u8> {
        let mut v = self.u32b(element_type).to_vec();
        v.extend_from_slice(&self.u64b(count));
        v
    }

    pub fn kv_str_array<S: AsRef<[u8]>>(&mut self, key: &str, items: &[S]) -> &mut Self {
        let mut v = self.array_header(value_type::STRING, items.len() as u64);
        for s in items {
            v.extend_from_slice(&self.string_bytes(s.as_ref()));
        }
        self.kv_raw(key.as_bytes(), value_type::ARRAY, &v)
    }

    pub fn kv_u32_array(&mut self, key: &str, items: &[u32]) -> &mut Self {
        let mut v = self.array_header(value_type::UINT32, items.len() as u64);
        for &x in items {
            v.extend_from_slice(&self.u32b(x));
        }
        self.kv_raw(key.as_bytes(), value_type::ARRAY, &v)
    }

    pub fn kv_f32_array(&mut self, key: &str, items: &[f32]) -> &mut Self {
        let mut v = self.array_header(value_type::FLOAT32, items.len() as u64);
        for &x in items {
            v.extend_from_slice(&self.u32b(x.to_bits()));
        }
        self.kv_raw(key.as_bytes(), value_type::ARRAY, &v)
    }

    /// Adds a tensor placed after the previous one.
    pub fn tensor(&mut self, name: &str, ne: &[u64], type_id: u32, bytes: u64) -> &mut Self {
        self.tensors.push(TensorRecord {
            name: name.into(),
            ne: ne.to_vec(),
            type_id,
            bytes,
            offset: None,
        });
        self
    }

    /// Adds a tensor at an explicit offset (relative to the data section).
    pub fn tensor_at(
        &mut self,
        name: &str,
        ne: &[u64],
        type_id: u32,
        bytes: u64,
        offset: u64,
    ) -> &mut Self {
        self.tensors.push(TensorRecord {
            name: name.into(),
            ne: ne.to_vec(),
            type_id,
            bytes,
            offset: Some(offset),
        });
        self
    }

    /// The header image up to the start of the data section, and the data section's length.
    pub fn build_header(&self) -> (Vec<u8>, u64) {
        let mut out = b"GGUF".to_vec();
        out.extend_from_slice(&self.u32b(self.version));
        let n_tensors = self.n_tensors_override.unwrap_or(self.tensors.len() as u64);
        out.extend_from_slice(&self.u64b(n_tensors));
        out.extend_from_slice(&self.u64b(self.n_kv_override.unwrap_or(self.n_kv)));
        out.extend_from_slice(&self.kv);
        let mut next = 0u64;
        let mut data_len = 0u64;
        let align = self.alignment.max(1);
        for t in &self.tensors {
            out.extend_from_slice(&self.string_bytes(t.name.as_bytes()));
            out.extend_from_slice(&self.u32b(t.ne.len() as u32));
            for &d in &t.ne {
                out.extend_from_slice(&self.u64b(d));
            }
            out.extend_from_slice(&self.u32b(t.type_id));
            let offset = t.offset.unwrap_or(next);
            out.extend_from_slice(&self.u64b(offset));
            let end = offset.saturating_add(t.bytes);
            data_len = data_len.max(end);
            next = end.div_ceil(align).saturating_mul(align);
        }
        let pad = (align - out.len() as u64 % align) % align;
        out.resize(out.len() + pad as usize, 0);
        (out, data_len)
    }

    /// The whole file with zero-filled tensor data.
    pub fn build(&self) -> Vec<u8> {
        let (mut out, data_len) = self.build_header();
        out.resize(out.len() + data_len as usize, 0);
        out
    }
}

/// Shape of a synthetic Llama-family model, for benchmarks and measurements that need a real-sized header.
#[derive(Debug, Clone, Copy)]
pub struct LlamaShape {
    pub n_layer: u64,
    pub n_embd: u64,
    pub n_ff: u64,
    pub n_head: u64,
    pub n_head_kv: u64,
    pub n_vocab: u64,
    pub n_merges: u64,
    pub n_ctx_train: u64,
}

impl LlamaShape {
    /// Llama-3.1-8B: 32 layers, 292 tensors (rope_freqs included), 128,256-token vocabulary, 280,147 merges.
    pub const LLAMA3_8B: LlamaShape = LlamaShape {
        n_layer: 32,
        n_embd: 4096,
        n_ff: 14336,
        n_head: 32,
        n_head_kv: 8,
        n_vocab: 128_256,
        n_merges: 280_147,
        n_ctx_train: 8192,
    };
    /// Llama-3.1-70B: 80 layers, 724 tensors, same vocabulary.
    pub const LLAMA3_70B: LlamaShape = LlamaShape {
        n_layer: 80,
        n_embd: 8192,
        n_ff: 28672,
        n_head: 64,
        n_head_kv: 8,
        n_vocab: 128_256,
        n_merges: 280_147,
        n_ctx_train: 8192,
    };
}

/// Q4_K_M-style tensor types: Q4_K (id 12) everywhere but attn_v, ffn_down and output in Q6_K (id 14), norms
/// in F32 (id 0). Sizes follow ggml's block geometry.
fn q_bytes(type_id: u32, ne: &[u64]) -> u64 {
    let (block, bytes) = match type_id {
        0 => (1, 4),
        8 => (32, 34),
        12 => (256, 144),
        14 => (256, 210),
        _ => (1, 4),
    };
    ne[0] / block * bytes * ne[1..].iter().product::<u64>()
}

/// A Llama-3-shaped GGUF header (Q4_K_M mix, tokenizer with tokens, scores, types and merges) whose tensor
/// data is meant to be a sparse hole: write [`GgufBuilder::build_header`] and extend the file to its full length.
pub fn synthetic_llama(shape: LlamaShape) -> GgufBuilder {
    let mut b = GgufBuilder::new();
    let s = shape;
    b.kv_str("general.architecture", "llama")
        .kv_str("general.name", "synthetic llama")
        .kv_u32("general.file_type", 15)
        .kv_u32("llama.block_count", s.n_layer as u32)
        .kv_u32("llama.context_length", s.n_ctx_train as u32)
        .kv_u32("llama.embedding_length", s.n_embd as u32)
        .kv_u32("llama.feed_forward_length", s.n_ff as u32)
        .kv_u32("llama.attention.head_count", s.n_head as u32)
        .kv_u32("llama.attention.head_count_kv", s.n_head_kv as u32)
        .kv_f32("llama.rope.freq_base", 500_000.0)
        .kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5)
        .kv_u32("llama.vocab_size", s.n_vocab as u32)
        .kv_u32("llama.rope.dimension_count", (s.n_embd / s.n_head) as u32)
        .kv_str("tokenizer.ggml.model", "gpt2")
        .kv_str("tokenizer.ggml.pre", "llama-bpe");
    // Token strings of realistic length (3–12 bytes), deterministic.
    let tokens: Vec<String> = (0..s.n_vocab)
        .map(|i| format!("tok{:0w$}", i, w = (i % 10) as usize))
        .collect();
    b.kv_str_array("tokenizer.ggml.tokens", &tokens);
    let mut types = b.array_header(value_type::INT32, s.n_vocab);
    for _ in 0..s.n_vocab {
        types.extend_from_slice(&1i32.to_le_bytes());
    }
    b.kv_raw(b"tokenizer.ggml.token_type", value_type::ARRAY, &types);
    let merges: Vec<String> = (0..s.n_merges)
        .map(|i| format!("m{} e{}", i % 977, i / 977))
        .collect();
    b.kv_str_array("tokenizer.ggml.merges", &merges);
    b.kv_u32("tokenizer.ggml.bos_token_id", 128_000)
        .kv_u32("tokenizer.ggml.eos_token_id", 128_009);

    let head_dim = s.n_embd / s.n_head;
    let kv = head_dim * s.n_head_kv;
    let mut t = |name: String, ne: &[u64], ty: u32| {
        let bytes = q_bytes(ty, ne);
        b.tensor(&name, ne, ty, bytes);
    };
    t("token_embd.weight".into(), &[s.n_embd, s.n_vocab], 12);
    t("rope_freqs.weight".into(), &[head_dim / 2], 0);
    for l in 0..s.n_layer {
        t(format!("blk.{l}.attn_norm.weight"), &[s.n_embd], 0);
        t(format!("blk.{l}.attn_q.weight"), &[s.n_embd, s.n_embd], 12);
        t(format!("blk.{l}.attn_k.weight"), &[s.n_embd, kv], 12);
        t(format!("blk.{l}.attn_v.weight"), &[s.n_embd, kv], 14);
        t(
            format!("blk.{l}.attn_output.weight"),
            &[s.n_embd, s.n_embd],
            12,
        );
        t(format!("blk.{l}.ffn_norm.weight"), &[s.n_embd], 0);
        t(format!("blk.{l}.ffn_gate.weight"), &[s.n_embd, s.n_ff], 12);
        t(format!("blk.{l}.ffn_up.weight"), &[s.n_embd, s.n_ff], 12);
        t(format!("blk.{l}.ffn_down.weight"), &[s.n_ff, s.n_embd], 14);
    }
    t("output_norm.weight".into(), &[s.n_embd], 0);
    t("output.weight".into(), &[s.n_embd, s.n_vocab], 14);
    b
}

/// Writes `builder`'s header to `path` and extends the file to its full length without writing the data, so a
/// 40 GiB model costs a few MiB of disk on file systems with sparse files.
pub fn write_sparse(builder: &GgufBuilder, path: &std::path::Path) -> std::io::Result<u64> {
    use std::io::Write;
    let (header, data_len) = builder.build_header();
    let mut f = std::fs::File::create(path)?;
    f.write_all(&header)?;
    let total = header.len() as u64 + data_len;
    f.set_len(total)?;
    Ok(total)
}

/// Shape of a synthetic transformer of any architecture: the keys the pinned llama.cpp reads for attention,
/// feed-forward and experts, and the tensors its loader creates for them (names and shapes), for tests that need
/// a structurally faithful header with sparse data.
#[derive(Debug, Clone)]
pub struct ArchShape {
    /// `general.architecture` (the GGUF name: `gpt-oss`, `phi3`, `llama4`, ...).
    pub arch: &'static str,
    pub n_layer: u64,
    pub n_embd: u64,
    pub n_head: u64,
    pub n_head_kv: u64,
    /// `attention.key_length` and `value_length`.
    pub head_dim: u64,
    /// `feed_forward_length`: the dense FFN width (the shared FFN's width for a mixture of experts).
    pub n_ff: u64,
    /// Routed experts per layer (0 for a dense model) and how many each token uses.
    pub n_expert: u64,
    pub n_expert_used: u64,
    /// `expert_feed_forward_length`.
    pub n_ff_exp: u64,
    pub n_vocab: u64,
    pub n_ctx_train: u64,
    /// `attention.sliding_window`, written only when set.
    pub sliding_window: Option<u64>,
    /// Per-layer tensors beyond the common attention/FFN set, as (name suffix, ne) in f32, e.g. gpt-oss's
    /// `attn_sinks.weight`.
    pub extra_layer_f32: Vec<(&'static str, Vec<u64>)>,
}

/// ggml type ids the synthetic shapes use: F32 for norms, Q8_0 (32-element blocks of 34 bytes) for matrices.
const F32_ID: u32 = 0;
const Q8_0_ID: u32 = 8;

fn type_bytes(type_id: u32, ne: &[u64]) -> u64 {
    let rest: u64 = ne[1..].iter().product();
    match type_id {
        Q8_0_ID => ne[0] / 32 * 34 * rest,
        _ => ne[0] * 4 * rest,
    }
}

/// A header for `s`: hyper-parameter keys, a tokenizer-less vocabulary size, and every tensor with its shape;
/// write it with [`write_sparse`].
pub fn synthetic_arch(s: &ArchShape) -> GgufBuilder {
    let mut b = GgufBuilder::new();
    let a = s.arch;
    let k = |key: &str| format!("{a}.{key}");
    b.kv_str("general.architecture", a)
        .kv_str("general.name", &format!("synthetic {a}"))
        .kv_u32("general.file_type", 7)
        .kv_u32(&k("block_count"), s.n_layer as u32)
        .kv_u32(&k("context_length"), s.n_ctx_train as u32)
        .kv_u32(&k("embedding_length"), s.n_embd as u32)
        .kv_u32(&k("feed_forward_length"), s.n_ff as u32)
        .kv_u32(&k("attention.head_count"), s.n_head as u32)
        .kv_u32(&k("attention.head_count_kv"), s.n_head_kv as u32)
        .kv_u32(&k("attention.key_length"), s.head_dim as u32)
        .kv_u32(&k("attention.value_length"), s.head_dim as u32)
        .kv_f32(&k("attention.layer_norm_rms_epsilon"), 1e-5)
        .kv_u32(&k("rope.dimension_count"), s.head_dim as u32)
        .kv_u32(&k("vocab_size"), s.n_vocab as u32);
    if s.n_expert > 0 {
        b.kv_u32(&k("expert_count"), s.n_expert as u32)
            .kv_u32(&k("expert_used_count"), s.n_expert_used as u32)
            .kv_u32(&k("expert_feed_forward_length"), s.n_ff_exp as u32);
    }
    if let Some(w) = s.sliding_window {
        b.kv_u32(&k("attention.sliding_window"), w as u32);
    }
    let (q, kv) = (s.n_head * s.head_dim, s.n_head_kv * s.head_dim);
    let mut t = |name: String, ne: &[u64], ty: u32| {
        let bytes = type_bytes(ty, ne);
        b.tensor(&name, ne, ty, bytes);
    };
    t("token_embd.weight".into(), &[s.n_embd, s.n_vocab], Q8_0_ID);
    for l in 0..s.n_layer {
        let n = |suffix: &str| format!("blk.{l}.{suffix}");
        t(n("attn_norm.weight"), &[s.n_embd], F32_ID);
        t(n("attn_q.weight"), &[s.n_embd, q], Q8_0_ID);
        t(n("attn_k.weight"), &[s.n_embd, kv], Q8_0_ID);
        t(n("attn_v.weight"), &[s.n_embd, kv], Q8_0_ID);
        t(n("attn_output.weight"), &[q, s.n_embd], Q8_0_ID);
        for (suffix, ne) in &s.extra_layer_f32 {
            t(n(suffix), ne, F32_ID);
        }
        t(n("ffn_norm.weight"), &[s.n_embd], F32_ID);
        if s.n_expert > 0 {
            let (e, f) = (s.n_expert, s.n_ff_exp);
            t(n("ffn_gate_inp.weight"), &[s.n_embd, e], F32_ID);
            t(n("ffn_gate_exps.weight"), &[s.n_embd, f, e], Q8_0_ID);
            t(n("ffn_up_exps.weight"), &[s.n_embd, f, e], Q8_0_ID);
            t(n("ffn_down_exps.weight"), &[f, s.n_embd, e], Q8_0_ID);
        } else {
            t(n("ffn_gate.weight"), &[s.n_embd, s.n_ff], Q8_0_ID);
            t(n("ffn_up.weight"), &[s.n_embd, s.n_ff], Q8_0_ID);
            t(n("ffn_down.weight"), &[s.n_ff, s.n_embd], Q8_0_ID);
        }
    }
    t("output_norm.weight".into(), &[s.n_embd], F32_ID);
    t("output.weight".into(), &[s.n_embd, s.n_vocab], Q8_0_ID);
    b
}

/// A GLM-4.5-Air-shaped `glm4moe` header (zai-org/GLM-4.5-Air config.json: 46 trunk blocks, the first dense, 45
/// with 128 routed experts of 1408 and one shared, 8 used; 96 query heads and 8 KV heads of 128; hidden 4096,
/// dense feed-forward 10944, vocabulary 151552) plus its one multi-token-prediction block, `blk.46`, as the
/// converter writes it (`block_count` 47, `nextn_predict_layers` 1, the block's `nextn.*` tensors). Q4_K
/// matrices; Q8_0 where a row of 1408 or 10944 does not fill Q4_K's 256-element blocks; Q6_K output.
pub fn synthetic_glm45_air() -> GgufBuilder {
    const ARCH: &str = "glm4moe";
    let (n_embd, n_trunk, n_vocab) = (4096u64, 46u64, 151_552u64);
    let (n_head, n_head_kv, head_dim) = (96u64, 8u64, 128u64);
    let (n_ff, n_ff_exp, n_expert) = (10_944u64, 1408u64, 128u64);
    let (f32_, q8_0, q4_k, q6_k) = (0u32, 8u32, 12u32, 14u32);
    let mut b = GgufBuilder::new();
    let k = |s: &str| format!("{ARCH}.{s}");
    b.kv_str("general.architecture", ARCH)
        .kv_u32(&k("block_count"), (n_trunk + 1) as u32)
        .kv_u32(&k("nextn_predict_layers"), 1)
        .kv_u32(&k("context_length"), 131_072)
        .kv_u32(&k("embedding_length"), n_embd as u32)
        .kv_u32(&k("feed_forward_length"), n_ff as u32)
        .kv_u32(&k("attention.head_count"), n_head as u32)
        .kv_u32(&k("attention.head_count_kv"), n_head_kv as u32)
        .kv_u32(&k("attention.key_length"), head_dim as u32)
        .kv_u32(&k("attention.value_length"), head_dim as u32)
        .kv_u32(&k("rope.dimension_count"), (head_dim / 2) as u32)
        .kv_u32(&k("expert_count"), n_expert as u32)
        .kv_u32(&k("expert_used_count"), 8)
        .kv_u32(&k("expert_shared_count"), 1)
        .kv_u32(&k("expert_feed_forward_length"), n_ff_exp as u32)
        .kv_u32(&k("leading_dense_block_count"), 1)
        .kv_u32(&k("vocab_size"), n_vocab as u32);
    let mut t = |name: String, ne: &[u64], ty: u32| {
        let bytes = q_bytes(ty, ne);
        b.tensor(&name, ne, ty, bytes);
    };
    t("token_embd.weight".into(), &[n_embd, n_vocab], q4_k);
    let (q, kv) = (n_head * head_dim, n_head_kv * head_dim);
    for l in 0..=n_trunk {
        t(format!("blk.{l}.attn_norm.weight"), &[n_embd], f32_);
        t(format!("blk.{l}.attn_q.weight"), &[n_embd, q], q4_k);
        t(format!("blk.{l}.attn_k.weight"), &[n_embd, kv], q4_k);
        t(format!("blk.{l}.attn_v.weight"), &[n_embd, kv], q4_k);
        t(format!("blk.{l}.attn_q.bias"), &[q], f32_);
        t(format!("blk.{l}.attn_k.bias"), &[kv], f32_);
        t(format!("blk.{l}.attn_v.bias"), &[kv], f32_);
        t(format!("blk.{l}.attn_output.weight"), &[q, n_embd], q4_k);
        t(
            format!("blk.{l}.post_attention_norm.weight"),
            &[n_embd],
            f32_,
        );
        if l == 0 {
            t(format!("blk.{l}.ffn_gate.weight"), &[n_embd, n_ff], q4_k);
            t(format!("blk.{l}.ffn_up.weight"), &[n_embd, n_ff], q4_k);
            t(format!("blk.{l}.ffn_down.weight"), &[n_ff, n_embd], q8_0);
            continue;
        }
        t(
            format!("blk.{l}.ffn_gate_inp.weight"),
            &[n_embd, n_expert],
            f32_,
        );
        t(format!("blk.{l}.exp_probs_b.bias"), &[n_expert], f32_);
        let exps = [n_embd, n_ff_exp, n_expert];
        t(format!("blk.{l}.ffn_gate_exps.weight"), &exps, q4_k);
        t(format!("blk.{l}.ffn_up_exps.weight"), &exps, q4_k);
        t(
            format!("blk.{l}.ffn_down_exps.weight"),
            &[n_ff_exp, n_embd, n_expert],
            q8_0,
        );
        t(
            format!("blk.{l}.ffn_gate_shexp.weight"),
            &[n_embd, n_ff_exp],
            q4_k,
        );
        t(
            format!("blk.{l}.ffn_up_shexp.weight"),
            &[n_embd, n_ff_exp],
            q4_k,
        );
        t(
            format!("blk.{l}.ffn_down_shexp.weight"),
            &[n_ff_exp, n_embd],
            q8_0,
        );
        if l == n_trunk {
            t(
                format!("blk.{l}.nextn.eh_proj.weight"),
                &[2 * n_embd, n_embd],
                q4_k,
            );
            t(format!("blk.{l}.nextn.enorm.weight"), &[n_embd], f32_);
            t(format!("blk.{l}.nextn.hnorm.weight"), &[n_embd], f32_);
            t(
                format!("blk.{l}.nextn.shared_head_norm.weight"),
                &[n_embd],
                f32_,
            );
        }
    }
    t("output_norm.weight".into(), &[n_embd], f32_);
    t("output.weight".into(), &[n_embd, n_vocab], q6_k);
    b
}

/// A Falcon-H1-shaped `falcon-h1` header (the 0.5B's shape: 36 blocks of hidden 1024, 8 query and 2 KV heads of
/// 64, feed-forward 2048; Mamba-2 mixer with d_inner 1536, d_state 128, 1 group, conv kernel 4, 24 heads;
/// vocabulary 32784). Every block holds attention and the Mamba-2 mixer side by side, as the architecture does.
pub fn synthetic_falcon_h1() -> GgufBuilder {
    const ARCH: &str = "falcon-h1";
    let (n_embd, n_layer, n_vocab) = (1024u64, 36u64, 32_784u64);
    let (n_head, n_head_kv, head_dim, n_ff) = (8u64, 2u64, 64u64, 2048u64);
    let (d_inner, d_state, n_group, d_conv, n_ssm_head) = (1536u64, 128u64, 1u64, 4u64, 24u64);
    let (f32_, q8_0) = (0u32, 8u32);
    let mut b = GgufBuilder::new();
    let k = |s: &str| format!("{ARCH}.{s}");
    b.kv_str("general.architecture", ARCH)
        .kv_u32(&k("block_count"), n_layer as u32)
        .kv_u32(&k("context_length"), 16_384)
        .kv_u32(&k("embedding_length"), n_embd as u32)
        .kv_u32(&k("feed_forward_length"), n_ff as u32)
        .kv_u32(&k("attention.head_count"), n_head as u32)
        .kv_u32(&k("attention.head_count_kv"), n_head_kv as u32)
        .kv_u32(&k("attention.key_length"), head_dim as u32)
        .kv_u32(&k("attention.value_length"), head_dim as u32)
        .kv_u32(&k("ssm.conv_kernel"), d_conv as u32)
        .kv_u32(&k("ssm.inner_size"), d_inner as u32)
        .kv_u32(&k("ssm.state_size"), d_state as u32)
        .kv_u32(&k("ssm.time_step_rank"), n_ssm_head as u32)
        .kv_u32(&k("ssm.group_count"), n_group as u32)
        .kv_u32(&k("vocab_size"), n_vocab as u32);
    let mut t = |name: String, ne: &[u64], ty: u32| {
        let bytes = q_bytes(ty, ne);
        b.tensor(&name, ne, ty, bytes);
    };
    t("token_embd.weight".into(), &[n_embd, n_vocab], q8_0);
    let (q, kv) = (n_head * head_dim, n_head_kv * head_dim);
    // ssm_in projects to z, x, B, C and dt: 2 d_inner + 2 n_group d_state + n_ssm_head.
    let ssm_in = 2 * d_inner + 2 * n_group * d_state + n_ssm_head;
    let conv = d_inner + 2 * n_group * d_state;
    for l in 0..n_layer {
        t(format!("blk.{l}.attn_norm.weight"), &[n_embd], f32_);
        t(format!("blk.{l}.attn_q.weight"), &[n_embd, q], q8_0);
        t(format!("blk.{l}.attn_k.weight"), &[n_embd, kv], q8_0);
        t(format!("blk.{l}.attn_v.weight"), &[n_embd, kv], q8_0);
        t(format!("blk.{l}.attn_output.weight"), &[q, n_embd], q8_0);
        t(format!("blk.{l}.ssm_in.weight"), &[n_embd, ssm_in], q8_0);
        t(format!("blk.{l}.ssm_conv1d.weight"), &[d_conv, conv], f32_);
        t(format!("blk.{l}.ssm_conv1d.bias"), &[conv], f32_);
        t(format!("blk.{l}.ssm_dt.bias"), &[n_ssm_head], f32_);
        t(format!("blk.{l}.ssm_a"), &[1, n_ssm_head], f32_);
        t(format!("blk.{l}.ssm_d"), &[1, n_ssm_head], f32_);
        t(
            format!("blk.{l}.ssm_norm.weight"),
            &[d_inner / n_group, n_group],
            f32_,
        );
        t(format!("blk.{l}.ssm_out.weight"), &[d_inner, n_embd], q8_0);
        t(format!("blk.{l}.ffn_norm.weight"), &[n_embd], f32_);
        t(format!("blk.{l}.ffn_gate.weight"), &[n_embd, n_ff], q8_0);
        t(format!("blk.{l}.ffn_up.weight"), &[n_embd, n_ff], q8_0);
        t(format!("blk.{l}.ffn_down.weight"), &[n_ff, n_embd], q8_0);
    }
    t("output_norm.weight".into(), &[n_embd], f32_);
    t("output.weight".into(), &[n_embd, n_vocab], q8_0);
    b
}

/// The shape of a LLaVA-style (`mlp`) projector: a ViT encoder and the two-layer MLP into the language model.
#[derive(Debug, Clone, Copy)]
pub struct MlpProjectorShape {
    pub n_embd: u64,
    pub n_ff: u64,
    pub n_block: u64,
    pub n_head: u64,
    pub image: u64,
    pub patch: u64,
    /// `clip.vision.projection_dim`.
    pub projection_dim: u64,
    /// The language model's embedding width the MLP projects into (mm.0 and mm.2).
    pub n_embd_text: u64,
}

impl MlpProjectorShape {
    /// LLaVA-1.5's `mmproj-model-f16.gguf`: CLIP ViT-L/14 at 336 px (the last of the 24 encoder blocks dropped for a
    /// LLaVA projector) into Vicuna-7B's 4096-wide embedding.
    pub(crate) const LLAVA15: MlpProjectorShape = MlpProjectorShape {
        n_embd: 1024,
        n_ff: 4096,
        n_block: 23,
        n_head: 16,
        image: 336,
        patch: 14,
        projection_dim: 768,
        n_embd_text: 4096,
    };
}

/// An `mlp` multimodal projector header as the pinned llama.cpp's converter writes it
/// (tools/mtmd/legacy-models/convert_image_encoder_to_gguf.py: `clip.vision.*` keys, 2-D `.weight` and 4-D tensors
/// in f16, the rest f32) with the tensor names tools/mtmd/clip-impl.h `TN_*` gives and every key and tensor
/// `clip_model_loader` requires for that type (tools/mtmd/clip.cpp `load_hparams`, `load_tensors`). Sparse data.
pub fn synthetic_mlp_mmproj(s: MlpProjectorShape) -> GgufBuilder {
    const F32: u32 = 0;
    const F16: u32 = 1;
    let n_pos = (s.image / s.patch) * (s.image / s.patch) + 1;
    let mut b = GgufBuilder::new();
    b.kv_str("general.architecture", "clip")
        .kv_str("general.name", "synthetic mlp mmproj")
        .kv_u32("general.file_type", 1)
        .kv_str("clip.projector_type", "mlp")
        .kv_raw(b"clip.has_vision_encoder", value_type::BOOL, &[1])
        .kv_u32("clip.vision.image_size", s.image as u32)
        .kv_u32("clip.vision.patch_size", s.patch as u32)
        .kv_u32("clip.vision.embedding_length", s.n_embd as u32)
        .kv_u32("clip.vision.feed_forward_length", s.n_ff as u32)
        .kv_u32("clip.vision.projection_dim", s.projection_dim as u32)
        .kv_u32("clip.vision.attention.head_count", s.n_head as u32)
        .kv_f32("clip.vision.attention.layer_norm_epsilon", 1e-5)
        .kv_u32("clip.vision.block_count", s.n_block as u32)
        .kv_f32_array("clip.vision.image_mean", &[0.5, 0.5, 0.5])
        .kv_f32_array("clip.vision.image_std", &[0.5, 0.5, 0.5]);
    let (n_embd, n_ff, n_lm) = (s.n_embd, s.n_ff, s.n_embd_text);
    let mut t = |name: String, ne: &[u64]| {
        let n: u64 = ne.iter().product();
        let f16 = ne.len() == 4 || (ne.len() == 2 && name.ends_with(".weight"));
        let (ty, size) = if f16 { (F16, 2) } else { (F32, 4) };
        b.tensor(&name, ne, ty, n * size);
    };
    t("v.class_embd".into(), &[n_embd]);
    t("v.patch_embd.weight".into(), &[s.patch, s.patch, 3, n_embd]);
    t("v.position_embd.weight".into(), &[n_embd, n_pos]);
    t("v.pre_ln.weight".into(), &[n_embd]);
    t("v.pre_ln.bias".into(), &[n_embd]);
    for i in 0..s.n_block {
        for (name, ne) in [
            ("attn_q", &[n_embd, n_embd][..]),
            ("attn_k", &[n_embd, n_embd]),
            ("attn_v", &[n_embd, n_embd]),
            ("attn_out", &[n_embd, n_embd]),
            ("ffn_up", &[n_embd, n_ff]),
            ("ffn_down", &[n_ff, n_embd]),
        ] {
            t(format!("v.blk.{i}.{name}.weight"), ne);
            t(format!("v.blk.{i}.{name}.bias"), &ne[1..]);
        }
        for ln in ["ln1", "ln2"] {
            t(format!("v.blk.{i}.{ln}.weight"), &[n_embd]);
            t(format!("v.blk.{i}.{ln}.bias"), &[n_embd]);
        }
    }
    t("mm.0.weight".into(), &[n_embd, n_lm]);
    t("mm.0.bias".into(), &[n_lm]);
    t("mm.2.weight".into(), &[n_lm, n_lm]);
    t("mm.2.bias".into(), &[n_lm]);
    b
}

/// LLaVA-1.5's projector ([`MlpProjectorShape::LLAVA15`]).
pub fn synthetic_llava15_mmproj() -> GgufBuilder {
    synthetic_mlp_mmproj(MlpProjectorShape::LLAVA15)
}
