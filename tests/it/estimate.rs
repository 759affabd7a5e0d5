//! `optimizer estimate`: the JSON contract, llama.cpp's flag spellings, placement across devices, and the
//! parameters the engine refuses or changes.

use crate::common;
use common::{bin_on, fixture};

use std::path::Path;
use std::process::Output;

use optimizer::memory::llama_cpp::{FlashAttn, GpuTarget, Machine, Params, estimate, row_size};
use optimizer::model::{self, GgmlType};

fn run(args: &[&str]) -> Output {
    bin_on("cpu-server.yaml").args(args).output().unwrap()
}

fn json(o: &Output) -> serde_json::Value {
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn json_contract_and_llama_cpp_flag_spellings() {
    let m = fixture("gguf/llama-q4_k_m.gguf");
    let v = json(&run(&[
        "estimate",
        "-m",
        m.to_str().unwrap(),
        "-c",
        "1024",
        "-b",
        "512",
        "-ub",
        "256",
        "-np",
        "2",
        "-fa",
        "on",
        "-ctk",
        "q8_0",
        "-ctv=q8_0",
        "--format",
        "json",
    ]));
    assert_eq!(v["runtime"], "llama.cpp");
    let devices = v["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 1);
    let d = &devices[0];
    assert_eq!(d["device"], "cpu");
    for k in [
        "weights_bytes",
        "weights_repack_bytes",
        "kv_cache_bytes",
        "compute_bytes",
        "output_bytes",
        "overhead_bytes",
        "total_bytes",
    ] {
        assert!(d[k].is_u64(), "{k}");
    }
    let sum: u64 = [
        "weights_bytes",
        "weights_repack_bytes",
        "kv_cache_bytes",
        "compute_bytes",
        "output_bytes",
        "overhead_bytes",
    ]
    .iter()
    .map(|k| d[k].as_u64().unwrap())
    .sum();
    assert_eq!(d["total_bytes"].as_u64().unwrap(), sum);
    assert_eq!(v["total_bytes"], d["total_bytes"]);
    // The fixture: 2 layers, 2 KV heads of 32 → 64 K and 64 V values per cell, q8_0 rows of 68 bytes.
    // Two sequences of 512 cells each (1024 / 2, padded to 256).
    let r = &v["resolved"];
    assert_eq!(r["n_ctx_seq"], 512);
    assert_eq!(r["n_stream"], 2);
    let kv = 2 * (row_size(GgmlType::Q8_0, 64) * 2) * 512 * 2;
    assert_eq!(d["kv_cache_bytes"].as_u64().unwrap(), kv);
    // Logits for one output per sequence: 320 tokens × 2 × 4 bytes.
    assert_eq!(d["output_bytes"], 320 * 2 * 4);
    // Every tensor's bytes are on the CPU, mapped or repacked.
    let spec = model::load(&m).unwrap();
    assert_eq!(
        d["weights_bytes"].as_u64().unwrap() + d["weights_repack_bytes"].as_u64().unwrap(),
        spec.tensor_bytes()
    );
}

#[test]
fn impossible_parameters_exit_2_saying_what_the_engine_does() {
    let m = fixture("gguf/llama-q4_k_m.gguf");
    let m = m.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["-b", "256", "-ub", "512"],
            "llama.cpp would silently use -ub 256",
        ),
        (&["-fa", "off", "-ctv", "q4_0"], "needs flash attention"),
        (&["-ctk", "q3_k"], "not a cache type"),
        (&["-np", "0"], "-np must be at least 1"),
        (&["--hardware", "no-such-gpu"], "no hardware profile"),
        (&["--hardware", "0x:rtx-3090"], "Nx:ID"),
    ];
    for (flags, needle) in cases {
        let mut args = vec!["estimate", "-m", m];
        args.extend_from_slice(flags);
        let o = run(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{flags:?}: {err}");
        assert!(err.contains(needle), "{flags:?}: {err}");
        assert!(o.stdout.is_empty());
    }
    let o = run(&[
        "estimate",
        "-m",
        fixture("gguf/quirk-q8_1.gguf").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(4));
}

#[test]
fn context_zero_means_the_trained_context_as_in_llama_cpp() {
    let m = fixture("gguf/llama-q4_k_m.gguf");
    let v = json(&run(&[
        "estimate",
        "-m",
        m.to_str().unwrap(),
        "-c",
        "0",
        "--format",
        "json",
    ]));
    assert_eq!(v["resolved"]["n_ctx"], 8192);
}

#[test]
fn layers_offload_from_the_last_with_the_output_layer_counted() {
    let spec = model::load(&fixture("gguf/llama-q4_k_m.gguf")).unwrap();
    let gpu = |free| GpuTarget {
        name: "gpu".into(),
        free_bytes: free,
        overhead_bytes: 1 << 20,
    };
    let machine = Machine {
        cpu_features: vec![],
        gpus: vec![gpu(8 << 30)],
    };
    let at = |ngl: i32| {
        estimate(
            &spec,
            &Params {
                n_ctx: 512,
                n_gpu_layers: ngl,
                flash_attn: FlashAttn::On,
                ..Params::default()
            },
            &machine,
        )
        .unwrap()
    };
    let layer_bytes = |i: usize| spec.layers[i].bytes;
    let output = spec.tensor("output.weight").unwrap().bytes
        + spec.tensor("output_norm.weight").unwrap().bytes;
    // -ngl 1: only the output layer moves.
    let e = at(1);
    assert_eq!(e.devices[1].weights_bytes, output);
    assert_eq!(e.devices[1].kv_cache_bytes, 0);
    // -ngl 2: the last block too, with its KV cache.
    let e = at(2);
    assert_eq!(e.devices[1].weights_bytes, output + layer_bytes(1));
    assert!(e.devices[1].kv_cache_bytes > 0);
    assert_eq!(e.devices[1].overhead_bytes, 1 << 20);
    // All layers (and -ngl 99, as llama.cpp users write it): only the token embedding stays on the host.
    for ngl in [-1, 3, 99] {
        let e = at(ngl);
        let embd = spec.tensor("token_embd.weight").unwrap().bytes;
        assert_eq!(e.devices[0].weights_bytes, embd, "ngl {ngl}");
        assert_eq!(e.devices[0].kv_cache_bytes, 0);
    }
    assert!(at(99).notes.iter().any(|n| n.contains("-ngl 99")));
    // Two GPUs with equal free memory: split points 0.5 and 1.0 over 3 offloaded layers put blocks 0 and 1
    // (at 0 and 1/3) on the first GPU and the output layer (at 2/3) on the second (llama-model.cpp upper_bound).
    let two = Machine {
        cpu_features: vec![],
        gpus: vec![gpu(4 << 30), gpu(4 << 30)],
    };
    let e = estimate(
        &spec,
        &Params {
            n_ctx: 512,
            ..Params::default()
        },
        &two,
    )
    .unwrap();
    assert_eq!(e.devices.len(), 3);
    assert_eq!(e.devices[1].weights_bytes, layer_bytes(0) + layer_bytes(1));
    assert_eq!(e.devices[2].weights_bytes, output);
    let all: u64 = e
        .devices
        .iter()
        .map(|d| d.weights_bytes + d.weights_repack_bytes)
        .sum();
    assert_eq!(all, spec.tensor_bytes());
}

#[test]
fn repacking_follows_the_cpu_features() {
    let spec = model::load(&fixture("gguf/llama-q4_k_m.gguf")).unwrap();
    let p = Params {
        n_ctx: 512,
        ..Params::default()
    };
    let avx2 = Machine {
        cpu_features: vec!["avx2".into()],
        gpus: vec![],
    };
    let none = Machine::default();
    let with = estimate(&spec, &p, &avx2).unwrap();
    let without = estimate(&spec, &p, &none).unwrap();
    // Q4_K block weights (rows a multiple of 8) repack on AVX2; Q6_K and F32 do not, nor the token embedding.
    let q4k_blocks: u64 = spec
        .tensors
        .iter()
        .filter(|t| t.dtype.name() == "Q4_K" && t.layer.is_some())
        .map(|t| t.bytes)
        .sum();
    assert_eq!(with.devices[0].weights_repack_bytes, q4k_blocks);
    assert_eq!(without.devices[0].weights_repack_bytes, 0);
    let no_repack = estimate(
        &spec,
        &Params {
            repack: false,
            ..p.clone()
        },
        &avx2,
    )
    .unwrap();
    assert_eq!(no_repack.devices[0].weights_repack_bytes, 0);
}

#[test]
fn sliding_window_layers_get_the_smaller_cache() {
    let spec = model::load(&fixture("gguf/gemma2-q5_k.gguf")).unwrap();
    let e = estimate(
        &spec,
        &Params {
            n_ctx: 32768,
            ..Params::default()
        },
        &Machine::default(),
    )
    .unwrap();
    let h = &spec.hparams;
    let window = h.sliding_window.unwrap();
    // llama-kv-cache-iswa.cpp: pad(min(n_ctx_seq, n_swa + n_ubatch), 256).
    let swa = (window + 512).div_ceil(256) * 256;
    assert_eq!(e.resolved.swa_cells, Some(swa.min(32768) as u32));
    let full = estimate(
        &spec,
        &Params {
            n_ctx: 32768,
            swa_full: true,
            ..Params::default()
        },
        &Machine::default(),
    )
    .unwrap();
    assert!(full.devices[0].kv_cache_bytes > e.devices[0].kv_cache_bytes);
}

#[test]
fn per_layer_kv_heads_and_transposed_v_follow_the_engine() {
    // OpenELM-style per-layer KV heads: with flash attention each layer's V is its own width; without it V is
    // stored transposed at the widest layer's width (llama-kv-cache.cpp n_embd_v_gqa_max).
    let spec = model::load(&fixture("gguf/per-layer-kv.gguf")).unwrap();
    let h = &spec.hparams;
    let heads = h.head_count_kv.clone().unwrap();
    let n = h.block_count.unwrap() as usize;
    let hd = h
        .key_length
        .unwrap_or(h.embedding_length.unwrap() / h.head_count.as_ref().unwrap().max());
    let vd = h.value_length.unwrap_or(hd);
    let cells = 512u64;
    let kv = |fa: bool| {
        estimate(
            &spec,
            &Params {
                n_ctx: 512,
                flash_attn: if fa { FlashAttn::On } else { FlashAttn::Off },
                ..Params::default()
            },
            &Machine::default(),
        )
        .unwrap()
        .devices[0]
            .kv_cache_bytes
    };
    let k: u64 = (0..n)
        .map(|l| row_size(GgmlType::F16, hd * heads.get(l).unwrap()))
        .sum();
    let v_own: u64 = (0..n)
        .map(|l| row_size(GgmlType::F16, vd * heads.get(l).unwrap()))
        .sum();
    let v_max = n as u64 * row_size(GgmlType::F16, vd * heads.max());
    assert_eq!(kv(true), (k + v_own) * cells);
    assert_eq!(kv(false), (k + v_max) * cells);
}

#[test]
fn mla_caches_hold_the_latent_k_only() {
    use optimizer_testkit::gguf_builder::{GgufBuilder, write_sparse};
    // DeepSeek-V2-Lite-shaped MLA: one latent KV head of 512 + 64 (kv_lora_rank + rope), 27 layers.
    let mut b = GgufBuilder::new();
    b.kv_str("general.architecture", "deepseek2")
        .kv_u32("deepseek2.block_count", 27)
        .kv_u32("deepseek2.context_length", 163_840)
        .kv_u32("deepseek2.embedding_length", 2048)
        .kv_u32("deepseek2.attention.head_count", 16)
        .kv_u32("deepseek2.attention.head_count_kv", 1)
        .kv_u32("deepseek2.attention.key_length", 576)
        .kv_u32("deepseek2.attention.value_length", 512)
        .kv_u32("deepseek2.attention.key_length_mla", 192)
        .kv_u32("deepseek2.attention.value_length_mla", 128)
        .kv_u32("deepseek2.attention.kv_lora_rank", 512)
        .kv_u32("deepseek2.vocab_size", 102_400);
    b.tensor("token_embd.weight", &[2048, 102_400], 0, 2048 * 102_400 * 4);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mla.gguf");
    write_sparse(&b, &path).unwrap();
    let spec = model::load(&path).unwrap();
    let e = estimate(
        &spec,
        &Params {
            n_ctx: 4096,
            ..Params::default()
        },
        &Machine::default(),
    )
    .unwrap();
    assert_eq!(
        e.devices[0].kv_cache_bytes,
        27 * row_size(GgmlType::F16, 576) * 4096
    );
}

#[test]
fn pipeline_parallelism_needs_every_layer_on_two_or_more_gpus() {
    let spec = model::load(&fixture("gguf/llama-q4_k_m.gguf")).unwrap();
    let gpu = || GpuTarget {
        name: "gpu".into(),
        free_bytes: 8 << 30,
        overhead_bytes: 0,
    };
    let two = Machine {
        cpu_features: vec![],
        gpus: vec![gpu(), gpu()],
    };
    let p = |ngl: i32| Params {
        n_ctx: 512,
        n_gpu_layers: ngl,
        ..Params::default()
    };
    let all = estimate(&spec, &p(-1), &two).unwrap();
    assert!(all.resolved.pipeline_parallel);
    let partial = estimate(&spec, &p(2), &two).unwrap();
    assert!(!partial.resolved.pipeline_parallel);
    let one = Machine {
        cpu_features: vec![],
        gpus: vec![gpu()],
    };
    assert!(
        !estimate(&spec, &p(-1), &one)
            .unwrap()
            .resolved
            .pipeline_parallel
    );
    // The first GPU holds both blocks; with pipelining it keeps three more copies of its split's inputs.
    let no_pp = estimate(
        &spec,
        &Params {
            no_kv_offload: true,
            ..p(-1)
        },
        &two,
    )
    .unwrap();
    assert!(all.devices[1].compute_bytes > no_pp.devices[1].compute_bytes);
}

/// A two-layer Llama with tied embeddings (no `output.weight`), every matrix in Q4_0 (`llama-quantize --pure`).
fn tied_q4_0(dir: &Path) -> optimizer::model::ModelSpec {
    use optimizer_testkit::gguf_builder::GgufBuilder;
    const Q4_0: u32 = 2;
    let mut b = GgufBuilder::new();
    b.kv_str("general.architecture", "llama")
        .kv_u32("llama.context_length", 4096)
        .kv_u32("llama.embedding_length", 64)
        .kv_u32("llama.block_count", 2)
        .kv_u32("llama.feed_forward_length", 128)
        .kv_u32("llama.attention.head_count", 4)
        .kv_u32("llama.attention.head_count_kv", 2)
        .kv_u32("llama.vocab_size", 256);
    let q4 = |ne: &[u64]| ne[0] / 32 * 18 * ne[1..].iter().product::<u64>();
    b.tensor("token_embd.weight", &[64, 256], Q4_0, q4(&[64, 256]));
    for l in 0..2 {
        for (name, ne) in [
            ("attn_q", [64u64, 64]),
            ("attn_k", [64, 32]),
            ("attn_v", [64, 32]),
            ("attn_output", [64, 64]),
            ("ffn_gate", [64, 128]),
            ("ffn_up", [64, 128]),
            ("ffn_down", [128, 64]),
        ] {
            b.tensor(&format!("blk.{l}.{name}.weight"), &ne, Q4_0, q4(&ne));
        }
    }
    let p = dir.join("tied-q4_0.gguf");
    std::fs::write(&p, b.build()).unwrap();
    model::load(&p).unwrap()
}

/// Issue 8: the tied output layer's duplicate of `token_embd.weight` (TENSOR_DUPLICATED) costs a second copy
/// wherever it lands in another buffer type than the embedding: `CPU_REPACK` on a CPU that repacks its type,
/// the GPU holding the output layer; never on the host when the GPU's pinned host buffer takes both.
#[test]
fn tied_output_copy_follows_the_buffer_type_it_lands_in() {
    let dir = tempfile::tempdir().unwrap();
    let spec = tied_q4_0(dir.path());
    assert!(spec.hparams.tied_embeddings);
    let embd = spec.tensor("token_embd.weight").unwrap().bytes;
    let blocks: u64 = spec
        .tensors
        .iter()
        .filter(|t| t.layer.is_some())
        .map(|t| t.bytes)
        .sum();
    let p = Params {
        n_ctx: 512,
        ..Params::default()
    };
    let avx2 = Machine {
        cpu_features: vec!["avx2".into()],
        gpus: vec![],
    };
    // CPU, repacking: the blocks and the output's copy in CPU_REPACK, the embedding itself in CPU.
    let e = estimate(&spec, &p, &avx2).unwrap();
    assert_eq!(e.devices[0].weights_repack_bytes, blocks + embd);
    assert_eq!(e.devices[0].weights_bytes, embd);
    assert!(
        e.notes.iter().any(|n| n.contains("tied output")),
        "{:?}",
        e.notes
    );
    // No repacking (flag, or a CPU without the kernels): one shared copy.
    for (p, m) in [
        (
            Params {
                repack: false,
                ..p.clone()
            },
            &avx2,
        ),
        (p.clone(), &Machine::default()),
    ] {
        let e = estimate(&spec, &p, m).unwrap();
        assert_eq!(e.devices[0].weights_repack_bytes, 0);
        assert_eq!(e.devices[0].weights_bytes, blocks + embd);
    }
    let gpu = |cpu: &[&str]| Machine {
        cpu_features: cpu.iter().map(|s| s.to_string()).collect(),
        gpus: vec![GpuTarget {
            name: "gpu".into(),
            free_bytes: 8 << 30,
            overhead_bytes: 0,
        }],
    };
    // Output layer on the GPU: the copy sits there.
    let e = estimate(&spec, &p, &gpu(&["avx2"])).unwrap();
    assert_eq!(e.devices[1].weights_bytes, blocks + embd);
    assert_eq!(e.devices[0].weights_bytes, embd);
    assert_eq!(e.devices[0].weights_repack_bytes, 0);
    // Output layer on the host with a GPU present: the pinned host buffer takes every host weight, so there is
    // no repacking and the output shares the embedding's copy.
    let host_output = Params {
        n_gpu_layers: 0,
        ..p.clone()
    };
    let e = estimate(&spec, &host_output, &gpu(&["avx2"])).unwrap();
    assert!(!e.resolved.repack);
    assert_eq!(e.devices[0].weights_repack_bytes, 0);
    assert_eq!(e.devices[0].weights_bytes, blocks + embd);
    assert_eq!(e.devices[1].weights_bytes, 0);
    // --no-host: CPU_REPACK again, with the copy.
    let e = estimate(
        &spec,
        &Params {
            no_host: true,
            ..host_output
        },
        &gpu(&["avx2"]),
    )
    .unwrap();
    assert_eq!(e.devices[0].weights_repack_bytes, blocks + embd);
    assert_eq!(e.devices[0].weights_bytes, embd);
}

/// Issue 23, one view of devices: on a CUDA, a ROCm, an Apple (Metal) and a CPU-only inventory, `estimate`
/// sees the devices `resolve` plans on, in the same order and under the same names, gives each the room
/// `resolve` fits against (capacity less reserves), and with the plan's own flags puts the same weights on each.
/// Before, `estimate` kept NVIDIA GPUs only: on the Apple and AMD inventories it estimated a CPU-only run of a
/// model `resolve` put on the GPU.
#[test]
fn estimate_and_resolve_share_one_view_of_devices() {
    let m = fixture("gguf/llama-q4_k_m.gguf");
    let m = m.to_str().unwrap();
    for (inventory, gpu) in [
        ("laptop-rtx4060.yaml", Some("cuda:0")),
        ("workstation-2x3090.yaml", Some("cuda:1")),
        ("amd-radeon.yaml", Some("rocm:0")),
        ("apple-m2-max.yaml", Some("metal:0")),
        ("cpu-server.yaml", None),
    ] {
        let plan = json(
            &bin_on(inventory)
                .args(["resolve", "-m", m, "-w", "chat", "--format", "json"])
                .output()
                .unwrap(),
        );
        // This half-MiB fixture runs faster on the CPU than through Metal's or ROCm's per-layer launch cost, so
        // the free plan leaves those GPUs idle; every layer pinned on the GPU (the fixture's 2 blocks + output)
        // checks that `estimate` puts the weights where `resolve` does there too (issue 23: one view of devices).
        let plan = if ["apple-m2-max.yaml", "amd-radeon.yaml"].contains(&inventory) {
            assert_eq!(plan["settings"]["gpu_layers"], 0, "{inventory}");
            json(
                &bin_on(inventory)
                    .args(["resolve", "-m", m, "-w", "chat", "--format", "json"])
                    .args(["--n-gpu-layers", "3"])
                    .output()
                    .unwrap(),
            )
        } else {
            plan
        };
        let s = &plan["settings"];
        let flag = |k: &str| s[k].to_string();
        let (ngl, c, np) = (flag("gpu_layers"), flag("context_length"), flag("parallel"));
        let est = json(
            &bin_on(inventory)
                .args(["estimate", "-m", m, "-ngl", &ngl, "-c", &c, "-np", &np])
                .args(["--sweep", "context", "--format", "json"])
                .output()
                .unwrap(),
        );
        let planned = plan["memory"]["devices"].as_array().unwrap();
        let names = |v: &[serde_json::Value]| -> Vec<String> {
            v.iter()
                .map(|d| d["device"].as_str().unwrap().to_string())
                .collect()
        };
        // Every device the plan uses is one the estimate sees (the plan may leave a GPU of several idle, as on
        // the 2x RTX 3090 with a model one GPU holds), with the room the plan fitted against.
        let rooms = est["devices"].as_array().unwrap();
        if let Some(gpu) = gpu {
            assert!(names(rooms).iter().any(|n| n == gpu), "{inventory}: {gpu}");
        }
        for p in planned {
            let r = rooms
                .iter()
                .find(|r| r["device"] == p["device"])
                .unwrap_or_else(|| panic!("{inventory}: {} is not in the estimate", p["device"]));
            let room = p["capacity_bytes"].as_u64().unwrap() - p["reserve_bytes"].as_u64().unwrap();
            assert_eq!(
                r["room_bytes"].as_u64(),
                Some(room),
                "{inventory}: {}",
                p["device"]
            );
        }
        if names(planned) != names(rooms) {
            // The plan may leave a GPU of several idle, as on the 2x RTX 3090 with a model one GPU holds.
            assert_eq!(inventory, "workstation-2x3090.yaml", "{inventory}: devices");
            continue;
        }
        // The plan's flags at the plan's context on the plan's devices: the same weights on every device.
        let plain = json(
            &bin_on(inventory)
                .args(["estimate", "-m", m, "-ngl", &ngl, "-c", &c, "-np", &np])
                .args(["--format", "json"])
                .output()
                .unwrap(),
        );
        for (p, e) in planned.iter().zip(plain["devices"].as_array().unwrap()) {
            assert_eq!(p["device"], e["device"], "{inventory}");
            assert_eq!(
                p["components"]["weights_bytes"], e["weights_bytes"],
                "{inventory}: weights on {}",
                p["device"]
            );
        }
        if gpu.is_some() {
            assert!(planned[1]["components"]["weights_bytes"].as_u64().unwrap() > 0);
        }
    }
}
