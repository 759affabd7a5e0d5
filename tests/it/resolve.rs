//! `optimizer resolve`: whole documents for fixture machines × models × workloads as insta snapshots, speed
//! figures of three of them worked out by hand from the profiles and rule tables, the planner's invariants on
//! random models and machines, determinism, and the command's exit codes and files.
//!
//! Snapshots: tests/it/snapshots/resolve__<scenario>.snap hold `optimizer::yaml::to_string` of each document, exactly
//! what `optimizer resolve` prints. A changed document fails with a line diff against the committed one. To
//! review and accept a change: `cargo insta review` where cargo-insta is installed (after `cargo insta test
//! --test resolve`, or after a plain run, which leaves `.snap.new` files beside the snapshots); without it,
//! `INSTA_UPDATE=always cargo test --test resolve` rewrites the snapshots in place and `git diff tests/snapshots`
//! shows what changed. With `CI=true` (as `.ci/run` runs) insta writes nothing and a changed or missing snapshot
//! fails the test.

use crate::common;
use common::{bin, fixture, inventory, plan, profiles, synth};

use std::path::Path;

use optimizer::emit::{Deployment, Status, Strategy};
use optimizer::hardware::{Cpu, Gpu, GpuVendor, Inventory, Memory};
use optimizer::memory::llama_cpp::{self, FlashAttn, GpuTarget, Machine, Params};
use optimizer::model::{GgmlType, ModelSpec};
use optimizer::plan::Overrides;
use optimizer::profile::ProfileSet;
use optimizer_testkit::gguf_builder::LlamaShape;

/// The planner's document with no pinned values.
fn plan_for(
    spec: &ModelSpec,
    label: &str,
    inv: &Inventory,
    workload: &str,
    set: &ProfileSet,
) -> Deployment {
    plan(spec, label, inv, set, workload, &Overrides::default()).unwrap()
}

/// The document as users get it, against tests/it/snapshots/resolve__<name>.snap.
fn snapshot(name: &str, doc: &Deployment) {
    insta::assert_snapshot!(name, optimizer::yaml::to_string(doc).unwrap());
}

/// Every device of a fitting plan stays within its capacity minus the rules' reserve.
fn assert_fits(d: &Deployment) {
    for m in &d.memory.devices {
        assert!(
            m.total_bytes <= m.capacity_bytes.saturating_sub(m.reserve_bytes),
            "{}: {} > {} - {}",
            m.device,
            m.total_bytes,
            m.capacity_bytes,
            m.reserve_bytes
        );
    }
}

#[test]
fn fixture_machines_models_and_workloads() {
    let set = profiles();
    let dir = tempfile::tempdir().unwrap();
    let (_, m8) = synth(dir.path(), "llama3-8b.gguf", LlamaShape::LLAMA3_8B);
    let (_, m70) = synth(dir.path(), "llama3-70b.gguf", LlamaShape::LLAMA3_70B);
    let l8 = "models/llama3-8b-q4_k_m.gguf";
    let l70 = "models/llama3-70b-q4_k_m.gguf";

    // Laptop RTX 4060 (8 GiB) with an 8B Q4_K_M: every layer on the GPU.
    //
    // Its speed by hand (recomputed from the files by `speed_figures_are_the_roofline_worked_by_hand`), llama.cpp's
    // kernel model (crates/core/src/perf/gpu.rs, constants restated in `gpu_kernels` below):
    // - crates/core/profiles/hardware/rtx-4060-laptop.yaml: 24 SMs at a 1890 MHz boost (the profile's clock, not the
    //   inventory's NVML maximum of 3105), 256.0 GB/s GDDR6, FP16 tensor 46.4 TFLOPS with FP16 accumulation (23.2
    //   with FP32); no board power, so no Ada power bound. MMQ: 492 FLOP x 24 x 1.89 GHz = 22.317 TFLOPS; cuBLAS
    //   (attention): min(0.43 x 46.4, 821 x 45.36 G = 37.24) = 19.952 TFLOPS.
    // - Bytes each token reads on the GPU, every tensor but token_embd: 32 blocks x 138,936,320 B (Q4_K q, k,
    //   attn_output, gate, up 87,293,952; Q6_K v, down 51,609,600; F32 norms 32,768) + output.weight (Q6_K)
    //   430,940,160 + output_norm 16,384 + rope_freqs 256 = 4,876,919,040 B. The f16 KV cache: 2 x 8 KV heads x
    //   128 x 2 B x 32 layers = 131,072 B per cell. Matmul parameters: 7,504,658,432 (output.weight's
    //   525,336,576 of them); attention: 4 x 32 heads x 128 x 32 layers = 524,288 FLOP per (query, key) pair.
    // - Decode (inference: 1 sequence, 512-token prompt, 128 generated; the average step attends 576 cells): the
    //   K-quants read at 1.282 + 0.022 (GDDR) = 1.304 times their bytes, F32 and the KV cache at 1.125 + 0.022 =
    //   1.147: (4,875,837,440 x 1.304 + 1,081,600 x 1.147 + 576 x 131,072 x 1.147) B / 256 GB/s = 25.1794 ms;
    //   its 15.31 GFLOP take 1.02 ms at 23.2 x 0.65 (gpu-prefill-llama-cpp) TFLOPS: bandwidth-bound. Plus 32 layers
    //   x 45.2 us of launches = 1.4464 ms, plus the host's 2,304-B embedding row at min(4 threads x 9.38 GB/s per
    //   core, 89.6 GB/s x 0.68) = 37.52 GB/s (0.06 us) and its 11.3-us floor: 26.637 ms per output token, decode
    //   37.542 tokens/s.
    // - Prefill, 512 tokens in one micro-batch: 2 x (7,504,658,432 - 525,336,576) x 512 + 2 x 525,336,576 (the
    //   output projection for the last token only) = 7.1476 TFLOP / 22.317 TFLOPS = 320.287 ms, attention 524,288 x
    //   512^2 / 2 / 19.952 TFLOPS = 3.444 ms: 323.731 ms (reading the weights once at 256 x 0.52 GB/s: 36.6 ms), so
    //   512 / 0.323731 s = 1581.56 tokens/s.
    // - Time to first token: the prefill plus one decode step at 512 cells (26.600 ms) = 350.331 ms.
    let d = plan_for(
        &m8,
        l8,
        &inventory("laptop-rtx4060.yaml"),
        "inference",
        &set,
    );
    assert_eq!(
        (
            d.status,
            common::llama(&d).strategy,
            common::llama(&d).gpu_layers
        ),
        (Status::Fits, Strategy::Gpu, 33)
    );
    assert_fits(&d);
    snapshot("laptop-rtx4060-8b-inference", &d);

    // GTX 1650 (4 GiB): hybrid, with the largest -ngl that fits under the reserve.
    let inv = inventory("gtx1650-4gb.yaml");
    let d = plan_for(&m8, l8, &inv, "inference", &set);
    assert_eq!(common::llama(&d).strategy, Strategy::Hybrid);
    assert_fits(&d);
    let gpu = &d.memory.devices[1];
    let one_more = llama_cpp::estimate(
        &m8,
        &Params {
            n_ctx: common::llama(&d).context_length,
            n_batch: common::llama(&d).batch_size,
            n_ubatch: common::llama(&d).ubatch_size,
            n_parallel: common::llama(&d).parallel,
            type_k: GgmlType::F16,
            type_v: GgmlType::F16,
            flash_attn: FlashAttn::On,
            n_gpu_layers: common::llama(&d).gpu_layers as i32 + 1,
            ..Params::default()
        },
        &Machine {
            cpu_features: inv.cpu.features.clone(),
            gpus: vec![GpuTarget {
                name: "gtx".into(),
                free_bytes: gpu.capacity_bytes,
                overhead_bytes: gpu.components.overhead_bytes,
            }],
        },
    )
    .unwrap();
    // The workload prefers f16 and it fits; q8_0 once won on a 3 % predicted gain (issue 8), below the kv-cache
    // rule's threshold for giving up KV precision.
    assert_eq!(common::llama(&d).cache_type_k, "f16");
    // llama.cpp offloads from the last layer, the output layer first: -ngl N puts the output and N - 1 blocks
    // on the GPU.
    let ngl = common::llama(&d).gpu_layers;
    assert!(d.topology.stages[1].output_layer && !d.topology.stages[0].output_layer);
    assert_eq!(d.topology.stages[1].layers, Some([33 - ngl, 31]));
    assert_eq!(d.topology.stages[0].layers, Some([0, 32 - ngl]));
    assert!(
        one_more.devices[1].total_bytes > gpu.capacity_bytes - gpu.reserve_bytes,
        "-ngl {} would also fit",
        common::llama(&d).gpu_layers + 1
    );
    snapshot("gtx1650-8b-inference", &d);

    // CPU-only server, chat: 4 sequences of a 161-token prompt and 338 generated tokens, -t 63 (64 physical
    // cores less the one balanced-physical-minus-one reserves).
    //
    // Its speed by hand (recomputed from the files by `speed_figures_are_the_roofline_worked_by_hand`):
    // - Peaks, crates/core/profiles/hardware/cpu-x86-64-avx512-ddr5-8-channel.yaml: 307.2 GB/s socket, 64 FP32 FLOP per
    //   cycle per core; the inventory gives no clock, so the planner's 2.0 GHz: 63 x 2.0 GHz x 64 = 8.064 TFLOPS
    //   FMA peak. CPUs take the open efficiency rows: cpu-decode-llama-cpp 0.68, cpu-prefill-llama-cpp 0.66. The
    //   threads pull min(63 x 9.38 GB/s per core, 307.2 x 0.68) = 208.896 GB/s.
    // - ggml-cpu kernel rates (crates/core/src/perf, fitted on the measured EPYC llama-bench table): decode multiplies 0.174
    //   Q4_K parameters per FP32 FLOP of peak (Q6_K x 0.76 = 0.1322, F32 x 0.70); prefill reaches 1.60 x the
    //   prefill efficiency (Q6_K 1.216). Each weight type costs the longer of reading and multiplying it.
    // - Decode step, 4 sequences attending 161 + 338 / 2 = 330 cells each:
    //   Q4_K (q, k, attn_output, gate, up, and one 2,304-B token_embd row): 2,793,408,768 B / 208.896 GB/s =
    //     13.372 ms vs 4 x 4,966,055,936 parameters / (8.064 TFLOPS x 0.174) = 14.157 ms: compute-bound, 14.157;
    //   Q6_K v, down: 1,651,507,200 B = 7.906 ms vs 4 x 2,013,265,920 / (8.064 T x 0.1322) = 7.552: 7.906;
    //   Q6_K output.weight: 430,940,160 B = 2.063 ms vs 4 x 525,336,576 / (8.064 T x 0.1322) = 1.971: 2.063;
    //   F32 norms and rope_freqs: 1,065,216 B = 0.005 ms;
    //   KV: 4 x 330 x 131,072 B / 208.896 GB/s = 0.828 ms; attention: 4 x 330 x 524,288 FLOP / (8.064 T x 0.66 x
    //     0.310 attention share) = 0.420 ms;
    //   per-token floor: 11.3 us + 32 layers x (16.0 us + 4.88 us of barriers with more than one thread) = 0.679 ms.
    //   Time per output token 26.058 ms; decode 4 / 26.058 ms = 153.503 tokens/s.
    // - Prefill, 161 tokens in one micro-batch at 8.064 x 0.66 = 5.322 TFLOPS: Q4_K 2 x 4,966,055,936 x 161 /
    //   (5.322 T x 1.60) = 187.782 ms, Q6_K 2 x 2,013,265,920 x 161 / (5.322 T x 1.216) = 100.168 ms, output
    //   (last token only) 0.162 ms, attention 524,288 x 161^2 / 2 / (5.322 T x 0.310) = 4.118 ms: 292.230 ms
    //   (reading the weights: 23.3 ms), plus the floor 0.679 = 292.909 ms; 161 / 0.292909 s = 549.657 tokens/s.
    // - Time to first token: 292.909 + one decode step of 1 sequence at 161 cells (13.372 + 7.906 + 2.063 + 0.005
    //   bandwidth-bound weights, KV 0.101, attention 0.051, floor 0.679 = 24.177 ms) = 317.088 ms.
    let d = plan_for(&m8, l8, &inventory("cpu-server.yaml"), "chat", &set);
    assert_eq!(
        (common::llama(&d).strategy, common::llama(&d).gpu_layers),
        (Strategy::Cpu, 0)
    );
    assert_fits(&d);
    snapshot("cpu-server-8b-chat", &d);

    // 2x RTX 3090 with a 70B-class model: split across both GPUs.
    let d = plan_for(
        &m70,
        l70,
        &inventory("workstation-2x3090.yaml"),
        "inference",
        &set,
    );
    // It fits; a 70B split over two 3090s misses the inference preset's SLA (`sla-missed`).
    assert_eq!(d.status, Status::SlaMissed);
    assert!(
        matches!(
            common::llama(&d).strategy,
            Strategy::MultiGpu | Strategy::Hybrid
        ),
        "{:?}",
        common::llama(&d).strategy
    );
    assert_eq!(d.memory.devices.len(), 3, "both GPUs used");
    assert_fits(&d);
    snapshot("workstation-2x3090-70b-inference", &d);

    // 8x H100: one GPU suffices for a latency workload.
    //
    // Its speed by hand: the same bytes, parameters and FLOPs as the RTX 4060 plan above, on
    // crates/core/profiles/hardware/h100-sxm.yaml's 132 SMs at 1830 MHz, 3350 GB/s HBM3 and 989.4 TFLOPS dense FP16
    // (no FP16-accumulate figure, so the FP32-accumulate one). MMQ: 492 x 241.56 G = 118.848 TFLOPS; cuBLAS:
    // min(0.43 x 989.4, 821 x 241.56 G) = 198.321 TFLOPS. Decode: the K-quants at 1.282 + 0.794 (HBM) = 2.076, the
    // rest at 1.919: 3.0654 ms (its FLOPs: 0.11 ms at 989.4 x 0.14, gpu-prefill-llama-cpp-hopper) + 1.4464 ms of
    // launches + host 0.0114 ms = 4.523 ms per output token, 221.083 tokens/s. Prefill: 7.1476 TFLOP / 118.848 =
    // 60.143 ms + attention 0.347 ms = 60.490 ms (weights once at 3350 x 0.36 GB/s: 4.04 ms), 8464.243 tokens/s.
    // First token: 60.490 + 4.518 = 65.008 ms.
    let d = plan_for(&m8, l8, &inventory("cloud-8xh100.yaml"), "inference", &set);
    assert_eq!(common::llama(&d).strategy, Strategy::Gpu);
    assert_eq!(d.memory.devices.len(), 2);
    assert_eq!(
        common::artifact(&d, "kubernetes")
            .resources
            .as_ref()
            .unwrap()
            .limits
            .get("nvidia.com/gpu")
            .map(String::as_str),
        Some("1")
    );
    snapshot("cloud-8xh100-8b-inference", &d);

    // A 70B model on the laptop cannot fit: the nearest candidate and what would make it fit.
    let d = plan_for(
        &m70,
        l70,
        &inventory("laptop-rtx4060.yaml"),
        "inference",
        &set,
    );
    assert_eq!(d.status, Status::NoFit);
    // No llama-quantize type alone fits the 70B here, so none is suggested (issue 25: suggestions that fit).
    assert!(
        !d.suggestions
            .iter()
            .any(|s| s.contains("smaller quantization")),
        "{:?}",
        d.suggestions
    );
    assert!(
        d.suggestions.iter().any(|s| s.contains("more free memory")),
        "{:?}",
        d.suggestions
    );
    snapshot("laptop-rtx4060-70b-nofit", &d);
}

#[test]
fn documents_are_deterministic_and_carry_launch_arguments() {
    let set = profiles();
    let dir = tempfile::tempdir().unwrap();
    let (_, m8) = synth(dir.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    let inv = inventory("workstation-2x3090.yaml");
    let a = serde_yaml_ng::to_string(&plan_for(&m8, "m.gguf", &inv, "chat", &set)).unwrap();
    let b = serde_yaml_ng::to_string(&plan_for(&m8, "m.gguf", &inv, "chat", &set)).unwrap();
    assert_eq!(a, b);
    let d = plan_for(&m8, "m.gguf", &inv, "chat", &set);
    let argv = &common::artifact(&d, "llama-server").argv;
    let flag = |f: &str| {
        argv.iter()
            .position(|a| a == f)
            .map(|i| argv[i + 1].clone())
    };
    assert_eq!(argv[0], "llama-server");
    assert_eq!(
        flag("-c"),
        Some(common::llama(&d).context_length.to_string())
    );
    assert_eq!(flag("-ngl"), Some(common::llama(&d).gpu_layers.to_string()));
    assert_eq!(flag("-np"), Some(common::llama(&d).parallel.to_string()));
    assert_eq!(flag("-ctk"), Some(common::llama(&d).cache_type_k.clone()));
    let modelfile = &common::artifact(&d, "ollama").files["Modelfile"];
    assert!(
        modelfile.contains(&format!(
            "PARAMETER num_ctx {}\n",
            common::llama(&d).context_per_sequence
        )),
        "{modelfile}"
    );
    // Ollama's memory follows the plan only with the server settings beside the Modelfile.
    let env = &common::artifact(&d, "ollama").env;
    assert_eq!(
        env["OLLAMA_NUM_PARALLEL"],
        common::llama(&d).parallel.to_string()
    );
    assert_eq!(
        env["OLLAMA_CONTEXT_LENGTH"],
        common::llama(&d).context_per_sequence.to_string()
    );
    assert_eq!(
        env["OLLAMA_FLASH_ATTENTION"],
        if common::llama(&d).flash_attention {
            "1"
        } else {
            "0"
        }
    );
    for key in [
        "settings.context_length",
        "settings.threads",
        "settings.flash_attention",
        "settings.gpu_layers",
    ] {
        assert!(d.provenance.contains_key(key), "{key}");
    }
    assert_eq!(d.api_version, "optimizer/v2");
}

/// A tiny xorshift so the property test is reproducible without a crate.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

#[test]
fn chosen_plans_fit_and_no_fitting_alternative_scores_better() {
    let set = profiles();
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let workloads = [
        "inference",
        "chat",
        "batch-inference",
        "long-context",
        "code-generation",
    ];
    for case in 0..24 {
        let heads = [8u64, 16, 32, 64][rng.range(0, 3) as usize];
        let shape = LlamaShape {
            n_layer: rng.range(4, 48),
            n_embd: heads * 128,
            n_ff: heads * 128 * rng.range(2, 4),
            n_head: heads,
            n_head_kv: heads / [1u64, 4, 8][rng.range(0, 2) as usize],
            n_vocab: [32_000u64, 128_256][rng.range(0, 1) as usize],
            n_merges: 0,
            n_ctx_train: [4096u64, 8192, 32768][rng.range(0, 2) as usize],
        };
        let (_, spec) = synth(dir.path(), &format!("case{case}.gguf"), shape);
        let n_gpus = rng.range(0, 3) as u32;
        let inv = Inventory {
            cpu: Cpu {
                model: "test".into(),
                vendor: "test".into(),
                physical_cores: rng.range(2, 64) as u32,
                logical_cpus: 128,
                features: vec!["avx2".into(), "fma".into()],
                arch: Some("x86_64".into()),
                frequency_mhz: Some(3000),
                caches: None,
                effective_cpus: None,
                cpu_bound: None,
            },
            memory: {
                let total = rng.range(8, 256) << 30;
                Memory {
                    total_bytes: total,
                    available_bytes: total * 9 / 10,
                    swap_total_bytes: None,
                    swap_free_bytes: None,
                    host_total_bytes: None,
                    bound: None,
                    unified: false,
                }
            },
            gpus: (0..n_gpus)
                .map(|i| {
                    let total = rng.range(4, 80) << 30;
                    Gpu {
                        index: i,
                        name: "NVIDIA GeForce RTX 3090".into(),
                        vendor: GpuVendor::Nvidia,
                        memory_total_bytes: total,
                        memory_free_bytes: total - (total >> 5),
                        compute_capability: Some("8.6".into()),
                        uuid: None,
                        pci_bus_id: None,
                        pci_id: Some("10de:2204".into()),
                        memory_used_bytes: None,
                        sm_count: None,
                        max_sm_clock_mhz: None,
                        max_memory_clock_mhz: None,
                        memory_bus_width_bits: None,
                        memory_data_rate_mt_s: None,
                        peak_bandwidth_bytes_per_s: None,
                        pcie_generation: None,
                        pcie_width: None,
                        power_limit_w: None,
                        driver_version: None,
                        cuda_driver_version: None,
                        mig_enabled: None,
                        processes: vec![],
                        unified_memory: false,
                        gpu_working_set_bytes: None,
                        backend: None,
                        source: None,
                    }
                })
                .collect(),
            notes: vec![],
        };
        let w = workloads[rng.range(0, workloads.len() as u64 - 1) as usize];
        let d = plan_for(&spec, "case.gguf", &inv, w, &set);
        if d.status.runnable() {
            assert_fits(&d);
            // A better-scoring alternative may lose only by quantizing the KV cache further than the workload's
            // choice, which the kv-cache rules allow for memory, not for this gain, and it must say so.
            for a in d.alternatives.iter().filter(|a| a.fits) {
                let same_kv =
                    a.settings.llama_cpp().unwrap().cache_type_k == common::llama(&d).cache_type_k;
                assert!(
                    a.score >= d.performance.score * (1.0 - 0.011)
                        || (!same_kv && a.why.contains("KV cache")),
                    "case {case} ({w}): alternative {a:?} scores better than the chosen {}",
                    d.performance.score
                );
            }
        } else {
            assert!(
                !d.suggestions.is_empty(),
                "case {case}: no-fit without suggestions"
            );
        }
    }
}

#[test]
fn the_store_is_created_on_first_use_and_a_bad_one_is_refused_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let (m8, _) = synth(dir.path(), "m8.gguf", LlamaShape::LLAMA3_8B);
    let data = dir.path().join("xdg-data");
    let run = |envs: &[(&str, &Path)]| {
        let mut c = bin();
        c.env_remove("OPTIMIZER_DB");
        for (k, v) in envs {
            c.env(k, v);
        }
        c.arg("--inventory")
            .arg(fixture("inventories/cpu-server.yaml"))
            .args(["resolve", "-m"])
            .arg(&m8)
            .output()
            .unwrap()
    };
    let o = run(&[("XDG_DATA_HOME", &data)]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        data.join("optimizer/optimizer.db").exists(),
        "created on first use"
    );
    let doc: serde_json::Value = serde_yaml_ng::from_slice(&o.stdout).unwrap();
    assert!(
        doc["provenance"]["performance.basis"]["detail"]
            .as_str()
            .unwrap()
            .contains("0 measurements")
    );

    let bad = dir.path().join("bad.db");
    let garbage = b"not a database ".repeat(400);
    std::fs::write(&bad, &garbage).unwrap();
    let o = run(&[("OPTIMIZER_DB", &bad)]);
    assert_eq!(
        o.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("bad.db"));
    assert!(o.stdout.is_empty(), "no partial document");
    assert_eq!(std::fs::read(&bad).unwrap(), garbage, "no data lost");
}

#[test]
fn command_exit_codes_files_and_explanations() {
    let dir = tempfile::tempdir().unwrap();
    let (m8, _) = synth(dir.path(), "m8.gguf", LlamaShape::LLAMA3_8B);
    let (m70, _) = synth(dir.path(), "m70.gguf", LlamaShape::LLAMA3_70B);
    let inv = |n: &str| fixture("inventories").join(n);

    // Fits, but misses the chat preset's 50 ms per output token (exit 5, `sla-missed`): YAML on stdout, the
    // explanation on stderr.
    let o = bin()
        .arg("--inventory")
        .arg(inv("laptop-rtx4060.yaml"))
        .args(["resolve", "-m"])
        .arg(&m8)
        .args(["-w", "chat", "--explain"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let doc: serde_json::Value = serde_yaml_ng::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["kind"], "Deployment");
    assert!(String::from_utf8_lossy(&o.stderr).contains("Chose"));

    // Nothing fits: exit 3, the document still on stdout.
    let o = bin()
        .arg("--inventory")
        .arg(inv("laptop-rtx4060.yaml"))
        .args(["resolve", "-m"])
        .arg(&m70)
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["status"], "no-fit");

    // -o writes the file (atomically: no temporary left beside it); pinned values say `user`.
    let out = dir.path().join("deploy.yaml");
    let o = bin()
        .arg("--inventory")
        .arg(inv("cpu-server.yaml"))
        .args(["resolve", "-m"])
        .arg(&m8)
        .args(["-c", "2048", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.stdout.is_empty());
    let doc: serde_json::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    // -c pins the context per sequence; the inference preset runs one sequence.
    assert_eq!(doc["settings"]["context_per_sequence"], 2048);
    assert_eq!(doc["settings"]["context_length"], 2048);
    assert_eq!(
        doc["provenance"]["settings.context_per_sequence"]["source"],
        "user"
    );
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty());

    // Planning for profiled GPUs.
    let o = bin()
        .arg("--inventory")
        .arg(inv("cpu-server.yaml"))
        .args(["resolve", "-m"])
        .arg(&m70)
        .args(["--hardware", "2x:a100-80gb-sxm", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["hardware"]["source"], "profile");
    assert_eq!(doc["hardware"]["gpus"][0]["profile"], "a100-80gb-sxm");

    // Usage errors.
    for args in [
        ["-w", "no-such-workload"],
        ["-w", "training"],
        ["--hardware", "nope"],
    ] {
        let o = bin()
            .arg("--inventory")
            .arg(inv("cpu-server.yaml"))
            .args(["resolve", "-m"])
            .arg(&m8)
            .args(args)
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn throughput_plans_stop_adding_sequences_at_the_roofline_knee() {
    let set = profiles();
    let dir = tempfile::tempdir().unwrap();
    let (_, m8) = synth(dir.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    // A CPU server saturates its FLOPs long before the preset's 256 sequences.
    let d = plan_for(
        &m8,
        "m.gguf",
        &inventory("cpu-server.yaml"),
        "batch-inference",
        &set,
    );
    assert!(
        common::llama(&d).parallel < 256,
        "{}",
        common::llama(&d).parallel
    );
    let p = &d.provenance["settings.parallel"];
    assert!(p.detail.contains("roofline knee"), "{}", p.detail);
    assert_fits(&d);
}

// ------------------------------------------------------------------ the roofline worked by hand

/// The CPU speed model's constants, restated from crates/core/src/perf/mod.rs (kernel rates fitted by
/// benches/llama-bench/fit.py on tests/fixtures/llama-bench/cpu-epyc-milan-2vcpu.json) so that the arithmetic below
/// is written out here rather than called: a changed constant changes the snapshots and must change these too.
mod cpu_kernels {
    /// The clock assumed when the inventory has none.
    pub(super) const GHZ: f64 = 2.0;
    /// DRAM bytes per second one core pulls (the class profiles give no per-core figure).
    pub(super) const BYTES_PER_S_PER_CORE: f64 = 9.38e9;
    /// Attention runs at this share of the prefill FLOP rate.
    pub(super) const ATTENTION_SHARE: f64 = 0.310;
    /// Per-token floor: fixed (host), per block, and per block for barriers with more than one thread.
    pub(super) const FLOOR_FIXED_S: f64 = 11.3e-6;
    pub(super) const FLOOR_PER_LAYER_S: f64 = 16.0e-6;
    pub(super) const FLOOR_SYNC_PER_LAYER_S: f64 = 4.88e-6;

    /// (decode parameters per FP32 FLOP of peak, prefill share of the FMA peak) of a weight type.
    pub(super) fn rates(dtype: &str) -> (f64, f64) {
        let (q4_k_decode, q4_k_prefill) = (0.174, 1.60);
        let ratio = match dtype {
            "Q4_K" => 1.0,
            "Q6_K" => 0.76,
            "F32" => 0.70,
            other => panic!("no hand-worked kernel rate for {other}"),
        };
        (q4_k_decode * ratio, q4_k_prefill * ratio)
    }
}

/// A YAML file of the repository as plain data.
fn yaml(rel: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(common::root().join(rel)).unwrap();
    serde_yaml_ng::from_str(&text).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn num(v: &serde_json::Value, path: &[&str]) -> f64 {
    path.iter()
        .fold(v, |v, k| &v[*k])
        .as_f64()
        .unwrap_or_else(|| panic!("no number at {path:?}"))
}

/// "9.0" as (9, 0).
fn capability(s: &str) -> (u32, u32) {
    let (a, b) = s.split_once('.').unwrap();
    (a.parse().unwrap(), b.parse().unwrap())
}

/// The efficiency row for llama.cpp on `device` in `phase`, read from every efficiency table under
/// crates/core/profiles/rules: a row whose compute-capability range holds `cc` wins over a row with no range; a CPU, or a GPU
/// of unknown capability, takes only rows with no range.
fn efficiency_row(device: &str, phase: &str, cc: Option<(u32, u32)>) -> (String, f64) {
    let mut rows = Vec::new();
    for e in std::fs::read_dir(common::root().join("crates/core/profiles/rules")).unwrap() {
        let rel = format!(
            "crates/core/profiles/rules/{}",
            e.unwrap().file_name().to_string_lossy()
        );
        let table = yaml(&rel);
        if table["kind"] != "efficiency" {
            continue;
        }
        for r in table["rules"].as_array().unwrap() {
            if r["device"] != device || r["runtime"] != "llama.cpp" || r["phase"] != phase {
                continue;
            }
            let range = &r["compute_capability"];
            let ranged = !range.is_null();
            let holds = match (ranged, cc) {
                (false, _) => true,
                (true, None) => false,
                (true, Some(cc)) => {
                    range["min"].as_str().is_none_or(|m| capability(m) <= cc)
                        && range["max"].as_str().is_none_or(|m| capability(m) >= cc)
                }
            };
            if holds {
                rows.push((
                    ranged,
                    r["id"].as_str().unwrap().to_string(),
                    num(r, &["efficiency"]),
                ));
            }
        }
    }
    rows.sort_by_key(|r| std::cmp::Reverse(r.0));
    assert!(
        rows.len() == 1 || rows[0].0 != rows[1].0,
        "{device} {phase}: ambiguous rows {rows:?}"
    );
    let (_, id, eff) = rows.into_iter().next().unwrap();
    (id, eff)
}

/// What the model's tensor table says one token costs: bytes and matmul parameters by (weight type, output
/// projection), the token embedding apart (llama.cpp reads one row of it per token, on the host).
struct Weights {
    by_type: Vec<(String, bool, f64, f64)>,
    embedding_row_bytes: f64,
    embedding_type: String,
}

impl Weights {
    fn of(spec: &ModelSpec) -> Weights {
        let mut by_type: Vec<(String, bool, f64, f64)> = Vec::new();
        let mut embedding = None;
        for t in &spec.tensors {
            let dtype = t.dtype.name().to_string();
            if t.name == "token_embd.weight" {
                // Row-major [n_vocab, n_embd]: one row is one token's vector.
                embedding = Some((t.bytes as f64 / t.shape[0] as f64, dtype));
                continue;
            }
            let output = t.name == "output.weight";
            // Norms and rope factors (one dimension) are read, not multiplied.
            let params = if t.shape.len() >= 2 {
                t.parameters as f64
            } else {
                0.0
            };
            match by_type.iter_mut().find(|g| g.0 == dtype && g.1 == output) {
                Some(g) => {
                    g.2 += t.bytes as f64;
                    g.3 += params;
                }
                None => by_type.push((dtype, output, t.bytes as f64, params)),
            }
        }
        let (embedding_row_bytes, embedding_type) = embedding.unwrap();
        Weights {
            by_type,
            embedding_row_bytes,
            embedding_type,
        }
    }
    fn bytes(&self) -> f64 {
        self.by_type.iter().map(|g| g.2).sum()
    }
    fn params(&self) -> f64 {
        self.by_type.iter().map(|g| g.3).sum()
    }
    fn output_params(&self) -> f64 {
        self.by_type.iter().filter(|g| g.1).map(|g| g.3).sum()
    }
}

/// Prefill tokens/s, decode tokens/s, time to first token and time per output token (ms).
#[derive(Debug)]
struct Figures([f64; 4]);

/// The request shape of a workload preset, from its file.
fn workload(id: &str) -> (f64, f64, f64) {
    let w = yaml(&format!("crates/core/profiles/workloads/{id}.yaml"));
    (
        num(&w, &["prompt_tokens"]),
        num(&w, &["generation_tokens"]),
        num(&w, &["concurrency"]),
    )
}

/// Llama-3-8B's attention: FLOPs per (query, key) pair and f16 KV bytes per cell, from its shape.
fn attention(shape: LlamaShape) -> (f64, f64) {
    let head_dim = (shape.n_embd / shape.n_head) as f64;
    let layers = shape.n_layer as f64;
    (
        4.0 * shape.n_head as f64 * head_dim * layers,
        2.0 * shape.n_head_kv as f64 * head_dim * 2.0 * layers,
    )
}

/// llama.cpp's GPU kernel model's constants, restated from crates/core/src/perf/gpu.rs (fitted by
/// tests/fixtures/gpu-speed/fit.py on the public llama-bench table) so that the arithmetic below is written out here
/// rather than called: a changed constant changes the snapshots and must change these too.
mod gpu_kernels {
    /// MMQ (quantized weights): FLOP per SM per boost clock.
    pub(super) const MMQ_FLOP_PER_SM_CLOCK: f64 = 492.0;
    /// cuBLAS FP16 (F16 weights and attention): the lower of this share of the FP16 tensor peak and this rate per
    /// SM clock.
    pub(super) const F16_TENSOR_SHARE: f64 = 0.43;
    pub(super) const F16_FLOP_PER_SM_CLOCK: f64 = 821.0;
    /// Decode: peak-bandwidth time multipliers for K-quants and F16/F32 on unified memory, and what GDDR and HBM
    /// add to them.
    pub(super) const DECODE_K_QUANT: f64 = 1.282;
    pub(super) const DECODE_F16: f64 = 1.125;
    pub(super) const GDDR_EXTRA: f64 = 0.022;
    pub(super) const HBM_EXTRA: f64 = 0.794;
    /// CUDA launch cost per layer per decode step.
    pub(super) const LAYER_S: f64 = 45.2e-6;
}

/// Every layer on one CUDA GPU under llama.cpp's kernel model (one micro-batch of prefill; the host, with
/// `host_threads`, reads only the embedding row and offloads its share of prefill).
fn full_gpu(
    w: &Weights,
    shape: LlamaShape,
    gpu: &str,
    host_class: &str,
    host_threads: f64,
    preset: &str,
) -> (Figures, Vec<String>) {
    use gpu_kernels::*;
    let hw = yaml(&format!("crates/core/profiles/hardware/{gpu}.yaml"));
    let cc = capability(hw["compute_capability"].as_str().unwrap());
    assert!(cc >= (7, 5), "{gpu}: the kernel model needs int8 mma");
    assert!(
        cc != (8, 9) || hw["tdp_w"].is_null(),
        "{gpu}: the arithmetic leaves out Ada's power bound"
    );
    let (decode_id, decode_eff) = efficiency_row("gpu", "decode", Some(cc));
    let (prefill_id, prefill_eff) = efficiency_row("gpu", "prefill", Some(cc));
    let peak_bandwidth = num(&hw, &["memory", "bandwidth_gb_s"]) * 1e9;
    // The generic roofline's compute peak still bounds a decode step's FLOPs.
    let flops = num(&hw, &["tensor_tflops", "fp16_fp32acc"]) * 1e12 * prefill_eff;
    let sm_clock = num(&hw, &["sms"]) * num(&hw, &["boost_clock_mhz"]) * 1e6;
    let mmq = MMQ_FLOP_PER_SM_CLOCK * sm_clock;
    let tensor = &hw["tensor_tflops"];
    let fp16 = tensor["fp16_fp16acc"]
        .as_f64()
        .or(tensor["fp16_fp32acc"].as_f64())
        .unwrap()
        * 1e12;
    let cublas = (F16_TENSOR_SHARE * fp16).min(F16_FLOP_PER_SM_CLOCK * sm_clock);
    let extra = match hw["memory"]["type"].as_str().unwrap().get(..3) {
        Some("GDD") => GDDR_EXTRA,
        Some("HBM") => HBM_EXTRA,
        other => panic!("{gpu}: no hand-worked memory class {other:?}"),
    };
    let multiplier = |dtype: &str| match dtype {
        "Q4_K" | "Q6_K" => DECODE_K_QUANT + extra,
        "F32" | "F16" => DECODE_F16 + extra,
        other => panic!("no hand-worked decode share for {other}"),
    };
    let (cpu_decode_id, cpu_decode_eff) = efficiency_row("cpu", "decode", None);
    let socket = num(
        &yaml(&format!("crates/core/profiles/hardware/{host_class}.yaml")),
        &["memory", "bandwidth_gb_s"],
    ) * 1e9;
    let host_bandwidth =
        (host_threads * cpu_kernels::BYTES_PER_S_PER_CORE).min(socket * cpu_decode_eff);
    let host = w.embedding_row_bytes / host_bandwidth + cpu_kernels::FLOOR_FIXED_S;
    let (attn, kv) = attention(shape);
    let layers = shape.n_layer as f64;
    let (prompt, generated, n) = workload(preset);
    let weights_read: f64 = w.by_type.iter().map(|g| g.2 * multiplier(&g.0)).sum();
    let step = |n: f64, cells: f64| {
        let memory = (weights_read + n * kv * cells * multiplier("F16")) / peak_bandwidth;
        let compute = n * (2.0 * w.params() + attn * cells) / flops;
        memory.max(compute) + layers * LAYER_S + host
    };
    let tpot = step(n, prompt + generated / 2.0);
    // Every matmul weight here is quantized (MMQ); attention runs on the f16 cache (cuBLAS's rate). Reading the
    // weights once at the generic roofline's decode share bounds it from below.
    let matmul = 2.0 * (w.params() - w.output_params()) * prompt + 2.0 * w.output_params();
    let prefill = (matmul / mmq + attn * prompt * prompt / 2.0 / cublas)
        .max(w.bytes() / (peak_bandwidth * decode_eff));
    let ttft = prefill + step(1.0, prompt);
    (
        Figures([prompt / prefill, n / tpot, ttft * 1e3, tpot * 1e3]),
        vec![decode_id, prefill_id, cpu_decode_id],
    )
}

/// Every layer on the host's `threads` threads (one micro-batch of prefill).
fn cpu_only(
    w: &Weights,
    shape: LlamaShape,
    class: &str,
    threads: f64,
    preset: &str,
) -> (Figures, Vec<String>) {
    use cpu_kernels::*;
    let hw = yaml(&format!("crates/core/profiles/hardware/{class}.yaml"));
    let (decode_id, decode_eff) = efficiency_row("cpu", "decode", None);
    let (prefill_id, prefill_eff) = efficiency_row("cpu", "prefill", None);
    let peak = threads * GHZ * 1e9 * num(&hw, &["cpu", "fp32_flops_per_cycle_per_core"]);
    let bandwidth = (threads * BYTES_PER_S_PER_CORE)
        .min(num(&hw, &["memory", "bandwidth_gb_s"]) * 1e9 * decode_eff);
    // The embedding row joins the reads of its type.
    let groups: Vec<(String, bool, f64, f64)> = w
        .by_type
        .iter()
        .map(|g| {
            let row = if g.0 == w.embedding_type && !g.1 {
                w.embedding_row_bytes
            } else {
                0.0
            };
            (g.0.clone(), g.1, g.2 + row, g.3)
        })
        .collect();
    let (attn, kv) = attention(shape);
    let floor = FLOOR_FIXED_S
        + shape.n_layer as f64
            * (FLOOR_PER_LAYER_S
                + if threads > 1.0 {
                    FLOOR_SYNC_PER_LAYER_S
                } else {
                    0.0
                });
    let (prompt, generated, n) = workload(preset);
    let step = |n: f64, cells: f64| {
        let weights: f64 = groups
            .iter()
            .map(|(dtype, _, bytes, params)| {
                (bytes / bandwidth).max(n * params / (peak * rates(dtype).0))
            })
            .sum();
        weights
            + n * kv * cells / bandwidth
            + n * attn * cells / (peak * prefill_eff * ATTENTION_SHARE)
            + floor
    };
    let tpot = step(n, prompt + generated / 2.0);
    let matmul: f64 = groups
        .iter()
        .map(|(dtype, output, _, params)| {
            let rows = if *output { 1.0 } else { prompt };
            2.0 * params * rows / (peak * prefill_eff * rates(dtype).1)
        })
        .sum();
    let attention = attn * prompt * prompt / 2.0 / (peak * prefill_eff * ATTENTION_SHARE);
    let prefill = (matmul + attention).max(w.bytes() / bandwidth) + floor;
    let ttft = prefill + step(1.0, prompt);
    (
        Figures([prompt / prefill, n / tpot, ttft * 1e3, tpot * 1e3]),
        vec![decode_id, prefill_id],
    )
}

/// The speed figures of three snapshot scenarios, recomputed here with plain arithmetic from the profile peaks,
/// the efficiency rows, the workload presets and the model's tensor table (the derivations are written out
/// beside the scenarios in `fixture_machines_models_and_workloads`), equal the planner's to the document's
/// rounding.
#[test]
fn speed_figures_are_the_roofline_worked_by_hand() {
    let set = profiles();
    let dir = tempfile::tempdir().unwrap();
    let shape = LlamaShape::LLAMA3_8B;
    let (_, m8) = synth(dir.path(), "llama3-8b.gguf", shape);
    let w = Weights::of(&m8);
    // The totals the comments start from.
    assert_eq!(w.bytes(), 4_876_919_040.0);
    assert_eq!(w.params(), 7_504_658_432.0);
    assert_eq!(
        (w.embedding_row_bytes, w.embedding_type.as_str()),
        (2304.0, "Q4_K")
    );
    let cases = [
        (
            "laptop-rtx4060.yaml",
            "inference",
            full_gpu(
                &w,
                shape,
                "rtx-4060-laptop",
                "cpu-x86-64-avx2-ddr5-dual-channel",
                4.0,
                "inference",
            ),
            [1581.56, 37.542, 350.331, 26.637],
        ),
        (
            "cloud-8xh100.yaml",
            "inference",
            full_gpu(
                &w,
                shape,
                "h100-sxm",
                "cpu-x86-64-avx512-ddr5-8-channel",
                4.0,
                "inference",
            ),
            [8464.243, 221.083, 65.008, 4.523],
        ),
        (
            "cpu-server.yaml",
            "chat",
            cpu_only(&w, shape, "cpu-x86-64-avx512-ddr5-8-channel", 63.0, "chat"),
            [549.657, 153.503, 317.088, 26.058],
        ),
    ];
    for (inv, preset, (Figures(hand), rows), commented) in cases {
        let d = plan_for(&m8, "m.gguf", &inventory(inv), preset, &set);
        let on_cpu = inv == "cpu-server.yaml";
        assert_eq!(
            common::llama(&d).strategy,
            if on_cpu { Strategy::Cpu } else { Strategy::Gpu },
            "{inv}: the arithmetic assumes this placement"
        );
        let p = &d.performance;
        let doc = [
            p.prefill_tokens_per_s,
            p.decode_tokens_per_s,
            p.time_to_first_token_ms,
            p.time_per_output_token_ms,
        ];
        // The document rounds to 3 decimals (prefill tokens/s to 2 where the third is 0).
        for (i, name) in ["prefill tok/s", "decode tok/s", "ttft ms", "tpot ms"]
            .iter()
            .enumerate()
        {
            assert!(
                (doc[i] - hand[i]).abs() <= 6e-4,
                "{inv} {preset} {name}: document {} vs by hand {}",
                doc[i],
                hand[i]
            );
            assert!(
                (commented[i] - hand[i]).abs() <= 6e-4,
                "{inv} {preset} {name}: the comment says {} but the arithmetic gives {}",
                commented[i],
                hand[i]
            );
        }
        let why = &d.provenance["performance"].detail;
        for r in &rows {
            assert!(
                why.contains(r.as_str()),
                "{inv}: the planner did not use {r}: {why}"
            );
        }
        assert_eq!(
            common::llama(&d).threads as f64,
            if on_cpu { 63.0 } else { 4.0 },
            "{inv}: the arithmetic assumes these threads"
        );
        assert_eq!(
            (
                common::llama(&d).ubatch_size,
                common::llama(&d).cache_type_k.as_str()
            ),
            (512, "f16"),
            "{inv}: the arithmetic assumes one f16 micro-batch of the whole prompt"
        );
    }
}
