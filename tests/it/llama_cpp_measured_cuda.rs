//! The llama.cpp memory model against the engine's CUDA build: tests/fixtures/llama-cpp/measured-cuda-h100.json
//! holds what the pinned engine's dry run (llama-fit-params, CUDA build, one H100 80GB HBM3) reported per device
//! for real architecture shapes at full and partial offload; measure_cuda.py regenerates it on a GPU machine.
//!
//! Each row is compared per device (CUDA0 and the host) and per part: weights (whole MiB, as the breakdown
//! prints them), KV cache (the 2-decimal cache lines and the per-device context column), compute buffers (the
//! 2-decimal `CUDA0 compute buffer` / host compute buffer lines) and the output buffer. The worst error of each
//! part is printed; the assertions are what the model meets today, and the parts it does not meet are listed in
//! `KNOWN_GPU_GAPS` with the measured figures.

use crate::common;

use common::{build, cache_type, cfg, engine_params};

use std::collections::BTreeMap;
use std::path::Path;

use optimizer::memory::llama_cpp::{FlashAttn, GpuTarget, Machine, Params, estimate};
use optimizer::model::ModelSpec;
use serde_json::Value;

const MIB: f64 = (1u64 << 20) as f64;

/// Fewest rows the table must hold for the comparison to mean anything (measure_cuda.py writes 282).
const MIN_ROWS: usize = 250;

/// What the model does not yet meet on the GPU, as measured (the test prints the worst row of each part):
///
/// 1. Op offload without GPU layers. With `-ngl 0` (or experts kept on the host by `-ncmoe`) and micro-batches of
///    at least 32 tokens, the engine copies host matmul weights to CUDA0 and computes there; the model charges
///    CUDA0 only when some layer is on the GPU. Llama-3-8B Q4_0 `-ngl 0 -ub 512`: engine 669.48 MiB on CUDA0,
///    model 0; Gemma-2-9B Q4_K_M `-ub 2048`: 2785.97 vs 0; Mixtral Q4_0 `-ngl 99 -ncmoe 8`: 392.01 vs 204.01.
///    Counted as known gaps; the test fails when one closes, so that it is asserted instead.
/// 2. Host compute next to a GPU (`CUDA_Host compute buffer`): the model charges the CPU graph's phases, the
///    engine keeps little on the host once the GPU computes: `-ngl 0` Gemma-2-9B `-ub 2048` 2056.00 vs 92.09,
///    Llama-3-8B Q4_0 `-ngl 8 -ub 2048` 480.04 vs 80.05; and it is 140.51 MiB low for Gemma-2-9B `-c 32768
///    -fa off -ub 2048` at full offload (284.04 vs 424.55). Only that lower bound is asserted.
/// 3. Repacking: with a CUDA device present (and without --no-host) host weights go to the GPU's pinned host
///    buffer type (`CUDA_Host`), which `make_cpu_buft_list` (src/llama-model.cpp L1078-1130) lists before the
///    CPU_REPACK extra buffer types, so nothing is repacked; the model reports the Q4_0/Q4_K host weights as
///    `weights_repack_bytes` (66 of 282 rows). Their sum with `weights_bytes` is exact (asserted); the split is not.
/// 4. The breakdown's host context column leaves out the `CUDA_Host` output buffer on 35 rows (up to 3 MiB):
///    engine accounting, reported only; the output buffer line itself is asserted exact.
const KNOWN_GPU_GAPS: &str =
    "op offload with -ngl 0 / -ncmoe, host compute next to a GPU, repack labelling";

/// GPU compute buffers with layers on the GPU: within 10 % or 16 MiB of the engine, whichever is larger
/// (measured today at full offload: worst 8.6 % at 8 MiB, worst 60 MiB at 1.3 %).
const GPU_COMPUTE_REL: f64 = 0.10;
const GPU_COMPUTE_ABS_MIB: f64 = 16.0;
/// With layers split between host and GPU the model is never below the engine and at most 17.2 % above it
/// (Llama-3-8B Q4_K_M, -ngl 8 -ub 512: 312.44 vs 266.51 MiB); 20 % bounds it.
const GPU_COMPUTE_SPLIT_OVER_REL: f64 = 0.20;
/// Host compute next to a GPU: the model overestimates it (by up to 400 MiB with layers split) and is at
/// most 140.5 MiB below the engine (Gemma-2-9B, -c 32768 -fa off -ub 2048, full offload); this bounds it.
const HOST_COMPUTE_UNDER_MIB: f64 = 160.0;
/// `-ncmoe` rows the model misses (known gap 1): some experts on the host, the rest on the GPU. With every
/// expert on the host (`-ncmoe 32`) the model matches (816.04 vs 812.23 MiB).
const KNOWN_NCMOE_GAPS: &[(&str, &str)] = &[("mixtral-8x7b-q4_0", "8")];
/// ggml-cuda offloads a host matmul to the GPU from this many tokens per micro-batch (`min_batch_size`).
const OP_OFFLOAD_MIN_BATCH: u64 = 32;

fn dir() -> std::path::PathBuf {
    common::fixture("llama-cpp")
}

fn read(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir().join(name)).unwrap()).unwrap()
}

/// A 2-decimal MiB buffer line, 0 where the engine printed none (no buffer of that kind on that device).
fn buf(row: &Value, names: &[&str]) -> f64 {
    names
        .iter()
        .find_map(|n| row["buffers"].get(*n))
        .map_or(0.0, |v| v.as_str().unwrap().parse().unwrap())
}

/// Worst signed error of one part over all rows, in MiB and relative to the engine.
#[derive(Default)]
struct Worst {
    n: usize,
    exact: usize,
    abs: f64,
    abs_row: String,
    rel: f64,
    rel_row: String,
    /// Most the model is below the engine (a plan built on it could run out of memory), MiB.
    under: f64,
    under_row: String,
}

impl Worst {
    fn see(&mut self, ours: f64, engine: f64, exact_tol: f64, label: &dyn Fn() -> String) {
        self.n += 1;
        let err = ours - engine;
        if err.abs() <= exact_tol {
            self.exact += 1;
        }
        let line = || format!("{}: ours {ours:.2}, engine {engine:.2}", label());
        if err.abs() > self.abs {
            self.abs = err.abs();
            self.abs_row = line();
        }
        let rel = err.abs() / engine.max(1.0);
        if rel > self.rel {
            self.rel = rel;
            self.rel_row = line();
        }
        if -err > self.under {
            self.under = -err;
            self.under_row = line();
        }
    }

    fn report(&self, name: &str) -> String {
        format!(
            "{name:<32} {:>3} rows, {:>3} exact; worst {:.2} MiB ({}); worst {:.1} % ({}); most below the engine {:.2} MiB ({})",
            self.n,
            self.exact,
            self.abs,
            self.abs_row,
            self.rel * 100.0,
            self.rel_row,
            self.under,
            self.under_row
        )
    }
}

#[test]
fn memory_model_against_the_cuda_build_per_device() {
    let models = read("models.json");
    let measured = read("measured-cuda-h100.json");
    let engine = &measured["engine"];
    let flags: Vec<String> = engine["cpu_flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .filter(|f| ["avx2", "avx512f"].contains(&f.as_str()))
        .collect();
    let gpu_name = engine["gpus"][0]["name"].as_str().unwrap().to_string();
    let free_mib = engine["gpu_free_mib_alone"]
        .as_object()
        .unwrap()
        .values()
        .next()
        .unwrap()
        .as_u64()
        .unwrap();
    let machine = Machine {
        cpu_features: flags,
        gpus: vec![GpuTarget {
            name: gpu_name,
            free_bytes: free_mib << 20,
            // The dry run reports buffers only; the CUDA context and library workspaces are not in it.
            overhead_bytes: 0,
        }],
    };
    let tmp = tempfile::tempdir().unwrap();
    let mut specs: BTreeMap<String, ModelSpec> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut w: BTreeMap<&str, Worst> = BTreeMap::new();
    let mut relabelled = 0;
    let mut known_gaps = 0;
    let mut rows = 0;
    for row in measured["rows"].as_array().unwrap() {
        assert_eq!(row["rc"], 0, "a refused dry run in the table: {row}");
        let id = row["model"].as_str().unwrap().to_string();
        let spec = specs.entry(id.clone()).or_insert_with(|| {
            let m = &models["models"][&id];
            assert!(!m.is_null(), "model {id} not in models.json");
            build(m, &tmp.path().join(format!("{id}.gguf")))
        });
        let p = engine_params(row);
        let label = || format!("{id} {}", serde_json::to_string(&row["config"]).unwrap());
        let e = estimate(spec, &p, &machine).unwrap_or_else(|err| panic!("{}: {err}", label()));
        rows += 1;
        let (h, g) = (&e.devices[0], &e.devices[1]);
        let bd = row["breakdown"].as_object().unwrap();
        let cuda = bd
            .iter()
            .find(|(k, _)| k.starts_with("CUDA0"))
            .map(|(_, v)| v)
            .expect("a CUDA0 row in the breakdown");
        let host = &bd["Host"];
        let n = |v: &Value, k: &str| v[k].as_u64().unwrap() as f64;
        let mib = |b: u64| b as f64 / MIB;
        let whole = |b: u64| (b >> 20) as f64;
        let offload = cfg(row, "-ngl") == Some("99");

        // Weights: whole MiB as the breakdown prints them (floor of the device's bytes).
        w.entry("gpu weights").or_default().see(
            whole(g.weights_bytes),
            n(cuda, "model"),
            0.0,
            &label,
        );
        w.entry("host weights (incl. repack)").or_default().see(
            whole(h.weights_bytes + h.weights_repack_bytes),
            n(host, "model"),
            0.0,
            &label,
        );
        if h.weights_repack_bytes > 0 && !bd.contains_key("CPU_REPACK") {
            relabelled += 1;
        }
        // KV: the cache lines (2 decimals, each cache on its own) hold the total over devices; the breakdown's
        // context column splits it (whole MiB; the host's also holds the output buffer).
        let caches = row["kv"].as_array().unwrap();
        let kv: f64 = caches
            .iter()
            .map(|c| c["size_mib"].as_str().unwrap().parse::<f64>().unwrap())
            .sum();
        w.entry("kv total").or_default().see(
            mib(g.kv_cache_bytes + h.kv_cache_bytes),
            kv,
            0.005 * caches.len() as f64 + 1e-6,
            &label,
        );
        w.entry("gpu kv (context column)").or_default().see(
            whole(g.kv_cache_bytes),
            n(cuda, "context"),
            0.0,
            &label,
        );
        w.entry("host kv + output (context column)")
            .or_default()
            .see(
                whole(h.kv_cache_bytes + h.output_bytes),
                n(host, "context"),
                1.0,
                &label,
            );
        w.entry("output").or_default().see(
            (mib(h.output_bytes) * 100.0).round() / 100.0,
            buf(row, &["CUDA_Host output buffer", "CPU output buffer"]),
            0.005,
            &label,
        );
        let gpu_compute = buf(row, &["CUDA0 compute buffer"]);
        let host_compute = buf(row, &["CUDA_Host compute buffer", "CPU compute buffer"]);
        let class = if cfg(row, "-ngl") == Some("0") {
            "gpu compute (-ngl 0)"
        } else if row["config"].get("-ncmoe").is_some() {
            "gpu compute (-ncmoe)"
        } else if row["config"].get("-nkvo").is_some() {
            "gpu compute (-nkvo)"
        } else if offload {
            "gpu compute (-ngl 99)"
        } else {
            "gpu compute (0 < -ngl < 99)"
        };
        w.entry(class)
            .or_default()
            .see(mib(g.compute_bytes), gpu_compute, 0.5, &label);
        w.entry(if cfg(row, "-ngl") == Some("0") {
            "host compute (-ngl 0)"
        } else {
            "host compute (-ngl > 0)"
        })
        .or_default()
        .see(mib(h.compute_bytes), host_compute, 0.5, &label);
        let ours_compute = mib(g.compute_bytes);
        match class {
            "gpu compute (-ngl 0)" | "gpu compute (-ncmoe)"
                if class == "gpu compute (-ngl 0)"
                    || KNOWN_NCMOE_GAPS.contains(&(id.as_str(), cfg(row, "-ncmoe").unwrap())) =>
            {
                // Known gap 2: host weights copied to CUDA0 for large micro-batches are not charged when no
                // layer (or no expert) is on the GPU. Below the threshold the engine allocates nothing there.
                if u64::from(e.resolved.n_ubatch) >= OP_OFFLOAD_MIN_BATCH {
                    known_gaps += 1;
                    if ours_compute >= gpu_compute - GPU_COMPUTE_ABS_MIB {
                        failures.push(format!(
                            "{}: known gap closed (gpu compute {ours_compute:.2} MiB, engine {gpu_compute:.2}): update KNOWN_GPU_GAPS and assert it",
                            label()
                        ));
                    }
                } else if (ours_compute - gpu_compute).abs() > 0.5 {
                    failures.push(format!(
                        "{}: gpu compute {ours_compute:.2} MiB below the op-offload batch, engine {gpu_compute:.2}",
                        label()
                    ));
                }
            }
            "gpu compute (0 < -ngl < 99)" => {
                // Layers split: the host weights copied for large micro-batches are charged in full, so the
                // model is above the engine, by at most GPU_COMPUTE_SPLIT_OVER_REL.
                if ours_compute < gpu_compute - 0.5
                    || ours_compute
                        > gpu_compute * (1.0 + GPU_COMPUTE_SPLIT_OVER_REL) + GPU_COMPUTE_ABS_MIB
                {
                    failures.push(format!(
                        "{}: gpu compute {ours_compute:.2} MiB, engine {gpu_compute:.2}",
                        label()
                    ));
                }
            }
            _ => {
                let tol = (gpu_compute * GPU_COMPUTE_REL).max(GPU_COMPUTE_ABS_MIB);
                if (ours_compute - gpu_compute).abs() > tol {
                    failures.push(format!(
                        "{}: gpu compute {ours_compute:.2} MiB, engine {gpu_compute:.2}",
                        label()
                    ));
                }
            }
        }
        if mib(h.compute_bytes) < host_compute - HOST_COMPUTE_UNDER_MIB {
            failures.push(format!(
                "{}: host compute {:.2} MiB, engine {host_compute:.2}",
                label(),
                mib(h.compute_bytes)
            ));
        }
        let engine_gpu = n(cuda, "model") + kv_on(cuda) + gpu_compute;
        w.entry("gpu total (no overhead)").or_default().see(
            mib(g.weights_bytes + g.kv_cache_bytes + g.compute_bytes),
            engine_gpu,
            1.0,
            &label,
        );

        // What holds today, row by row.
        if whole(g.weights_bytes) != n(cuda, "model") {
            failures.push(format!(
                "{}: gpu weights {} MiB, engine {}",
                label(),
                g.weights_bytes >> 20,
                n(cuda, "model")
            ));
        }
        if whole(h.weights_bytes + h.weights_repack_bytes) != n(host, "model") {
            failures.push(format!(
                "{}: host weights {} MiB, engine {}",
                label(),
                (h.weights_bytes + h.weights_repack_bytes) >> 20,
                n(host, "model")
            ));
        }
        if (mib(g.kv_cache_bytes + h.kv_cache_bytes) - kv).abs()
            > 0.005 * caches.len() as f64 + 1e-6
            || whole(g.kv_cache_bytes) != n(cuda, "context")
        {
            failures.push(format!(
                "{}: kv gpu {:.2} + host {:.2} MiB, engine {kv:.2} (gpu {})",
                label(),
                mib(g.kv_cache_bytes),
                mib(h.kv_cache_bytes),
                n(cuda, "context")
            ));
        }
        let out = buf(row, &["CUDA_Host output buffer", "CPU output buffer"]);
        if format!("{:.2}", h.output_bytes as f32 / (1024.0f32 * 1024.0f32)) != format!("{out:.2}")
        {
            failures.push(format!(
                "{}: output {:.2} MiB, engine {out:.2}",
                label(),
                mib(h.output_bytes)
            ));
        }
    }

    let mut report: Vec<String> = w.iter().map(|(k, v)| v.report(k)).collect();
    report.push(format!(
        "host weights labelled repack     {relabelled} of {rows} rows (the engine repacks nothing next to a GPU)"
    ));
    eprintln!(
        "{rows} rows of the CUDA build (H100 80GB HBM3) compared per device; known gaps: {KNOWN_GPU_GAPS}\n{}",
        report.join("\n")
    );
    assert!(rows >= MIN_ROWS, "only {rows} measured rows");
    assert!(
        known_gaps > 0,
        "no row exercises the known op-offload gap any more"
    );
    assert!(
        failures.is_empty(),
        "{} of {rows} rows off:\n{}",
        failures.len(),
        failures
            .iter()
            .take(40)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The KV part of a device's context column (whole MiB; a GPU's context column is its KV cache alone).
fn kv_on(device: &Value) -> f64 {
    device["context"].as_u64().unwrap() as f64
}

#[test]
fn the_probed_h100_inventory_resolves_to_the_h100_sxm_profile_by_pci_id() {
    use optimizer::profile::matching::{MatchedBy, Resolution, resolve};
    let inv = common::inventory("h100-probed.yaml");
    let set = optimizer::profile::load(&[]).unwrap();
    let hw: Vec<_> = set.hardware.iter().map(|e| &e.value).collect();
    let archs: Vec<_> = set.architectures().collect();
    assert_eq!(inv.gpus.len(), 1);
    match resolve(&inv.gpus[0], &hw, &archs) {
        Resolution::Profile { profile, by } => {
            assert_eq!(profile.id, "h100-sxm");
            assert!(matches!(by, MatchedBy::PciId));
        }
        _ => panic!("the probed H100 did not resolve to a profile"),
    }
}

/// Real llama-server loads on the same H100 (tests/fixtures/device/server-real-h100.json): the GPU memory the
/// running process held against the model's GPU total with the per-GPU overhead rule of the built-in profiles.
/// The gap is the CUDA context, cuBLAS workspace and ggml's CUDA pool, which no dry run reports.
#[test]
fn real_server_loads_against_the_estimate_with_the_gpu_overhead_rule() {
    let models = read("models.json");
    let real: Value = serde_json::from_str(
        &std::fs::read_to_string(common::fixture("device/server-real-h100.json")).unwrap(),
    )
    .unwrap();
    let set = optimizer::profile::load(&[]).unwrap();
    let (overhead, rule) = set.llama_cpp_gpu_overhead();
    assert!(rule.is_some(), "no per-GPU overhead rule");
    let machine = Machine {
        cpu_features: vec!["avx2".into(), "avx512f".into()],
        gpus: vec![GpuTarget {
            name: "NVIDIA H100 80GB HBM3".into(),
            free_bytes: 80_552 << 20,
            overhead_bytes: overhead,
        }],
    };
    let tmp = tempfile::tempdir().unwrap();
    let mut lines = Vec::new();
    let mut worst_under: f64 = 0.0;
    let mut compared = 0;
    for row in real["rows"].as_array().unwrap() {
        let Some(used) = row["gpu_used_mib"].as_u64() else {
            continue; // refused by the engine (--no-mmap): nothing was loaded
        };
        let args: Vec<&str> = row["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        let flag = |f: &str| args.iter().position(|a| *a == f).map(|i| args[i + 1]);
        let id = Path::new(flag("-m").unwrap())
            .file_stem()
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let spec = build(
            &models["models"][&id],
            &tmp.path().join(format!("{id}.gguf")),
        );
        let num = |f: &str, d: u32| flag(f).map_or(d, |v| v.parse().unwrap());
        let p = Params {
            n_ctx: num("-c", 0),
            n_batch: num("-b", 2048),
            n_ubatch: num("-ub", 512),
            n_parallel: num("-np", 1),
            type_k: cache_type(flag("-ctk")),
            type_v: cache_type(flag("-ctv")),
            flash_attn: match flag("-fa") {
                Some("on") => FlashAttn::On,
                Some("off") => FlashAttn::Off,
                _ => FlashAttn::Auto,
            },
            n_gpu_layers: flag("-ngl").map_or(-1, |v| v.parse().unwrap()),
            ..Params::default()
        };
        let e = estimate(&spec, &p, &machine).unwrap();
        let ours = e.devices[1].total_bytes as f64 / MIB;
        let margin = ours - used as f64;
        worst_under = worst_under.min(margin);
        compared += 1;
        lines.push(format!(
            "{id} {}: process {used} MiB, estimate {ours:.0} MiB (overhead {} MiB), margin {margin:+.0}",
            args[2..].join(" "),
            overhead >> 20
        ));
    }
    eprintln!("{}", lines.join("\n"));
    assert!(compared >= 6, "only {compared} real loads");
    // What holds today: the estimate, overhead rule included, is never more than 128 MiB below what a running
    // server held (the worst is printed above); a plan's 1 GiB GPU reserve covers that.
    assert!(
        worst_under > -128.0,
        "estimate {worst_under:.0} MiB below a real load:\n{}",
        lines.join("\n")
    );
}
