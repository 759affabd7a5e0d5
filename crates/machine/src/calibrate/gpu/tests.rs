use std::sync::atomic::{AtomicBool, Ordering};

use super::mock::{MockBench, MockOp, roofline};
use super::sizing::{self, BatchBytes};
use super::*;
use optimizer_core::evidence::Basis;
use optimizer_core::profile::{Phase, RuntimeId};
use optimizer_store::{HostIdentity, NewRun, Store};

const GIB: u64 = 1 << 30;

fn no_stop() -> AtomicBool {
    AtomicBool::new(false)
}

fn shape(rows: u32, cols: u32) -> LayerShape {
    LayerShape { rows, cols }
}

// ---- layouts ----

#[test]
fn weight_bytes_follow_the_ggml_and_bitnet_layouts() {
    let s = shape(4096, 4096);
    let n = 4096u64 * 4096;
    assert_eq!(GpuDtype::F16.weight_bytes(s), Some(n * 2));
    assert_eq!(GpuDtype::Fp8E4m3.weight_bytes(s), Some(n));
    // block_q8_0: 34 bytes per 32 weights; block_q4_0: 18.
    assert_eq!(GpuDtype::Q8_0.weight_bytes(s), Some(n / 32 * 34));
    assert_eq!(GpuDtype::Q4_0.weight_bytes(s), Some(n / 32 * 18));
    // BitNet 2-bit types: n / 4 + 32, as the fork's ggml_nbytes (and optimizer_model's GgmlType) says.
    let i2s = optimizer_model::GgmlType::I2_S.tensor_bytes(&[4096, 4096]);
    assert_eq!(GpuDtype::I2S.weight_bytes(s), i2s);
    assert_eq!(GpuDtype::Tl1.weight_bytes(s), i2s);
    // TL2 at 4096 columns: 3840 in triples (1280 triples: 640 magnitude bytes, 160 sign bytes), 256 in pairs
    // (64 bytes): 864 bytes a row, 5/3 bits per weight over the triples.
    assert_eq!(tl2_triple_cols(4096), Some(3840));
    assert_eq!(GpuDtype::Tl2.weight_bytes(s), Some(4096 * 864 + 32));
    // At 14336 columns, 14016 in triples and 320 in pairs.
    assert_eq!(tl2_triple_cols(14336), Some(14016));
}

#[test]
fn shapes_a_layout_cannot_hold_are_named() {
    assert!(GpuDtype::Q4_0.shape_defect(shape(64, 48)).is_some());
    assert!(GpuDtype::I2S.shape_defect(shape(64, 64)).is_some());
    assert!(GpuDtype::Tl2.shape_defect(shape(64, 256)).is_some());
    assert!(GpuDtype::F16.shape_defect(shape(0, 64)).is_some());
    assert_eq!(GpuDtype::Q4_0.weight_bytes(shape(64, 48)), None);
    for d in GpuDtype::ALL {
        for s in DEFAULT_SHAPES {
            assert_eq!(d.shape_defect(s), None, "{d} {s}");
        }
    }
}

#[test]
fn a_weight_size_that_overflows_is_none() {
    // u32::MAX^2 * 2 overflows u64.
    let huge = shape(u32::MAX - 15, u32::MAX - 15);
    assert_eq!(GpuDtype::F16.weight_bytes(huge), None);
}

// ---- statistics ----

#[test]
fn timing_warms_up_probes_and_keeps_the_median() {
    let mut calls = Vec::new();
    // Per-launch times of the timed runs: 4 ms, 1 ms (an outlier), 3 ms.
    let mut runs = vec![0.004, 0.001, 0.003].into_iter();
    let timing = Timing {
        warmup_launches: 5,
        samples: 3,
        min_sample_s: 0.01,
    };
    let t = stats::time(&timing, "x", |n| {
        calls.push(n);
        Ok(match calls.len() {
            1 => 1.0,   // warm-up: discarded
            2 => 0.002, // probe: 2 ms a launch -> 5 launches per run
            _ => runs.next().unwrap() * f64::from(n),
        })
    })
    .unwrap();
    assert_eq!(calls, vec![5, 1, 5, 5, 5]);
    assert_eq!(t.launches, 5);
    assert!((t.seconds - 0.003).abs() < 1e-12);
    assert!((t.seconds_min - 0.001).abs() < 1e-12);
    assert!((t.seconds_max - 0.004).abs() < 1e-12);
}

#[test]
fn a_timer_that_returns_zero_is_an_error_not_a_division() {
    let err = stats::time(&Timing::QUICK, "gemv_f16", |_| Ok(0.0)).unwrap_err();
    assert!(matches!(err, GpuError::Timer { .. }), "{err}");
}

#[test]
fn launches_per_run_are_bounded() {
    let mut biggest = 0;
    stats::time(&Timing::FULL, "x", |n| {
        biggest = biggest.max(n);
        Ok(1e-12 * f64::from(n))
    })
    .unwrap();
    assert_eq!(biggest, stats::MAX_LAUNCHES_PER_SAMPLE);
}

// ---- sizing ----

#[test]
fn the_batch_bound_comes_from_free_memory_and_the_shape() {
    let per = BatchBytes {
        input: 4096 * 2,
        output: 14336 * 2,
    };
    let bound = sizing::memory_bound(GIB, per);
    assert_eq!(
        bound,
        (GIB as f64 * USABLE_FREE_FRACTION) as u64 / per.total()
    );
    // Twice the memory, twice the batch (within one).
    assert!(sizing::memory_bound(2 * GIB, per).abs_diff(2 * bound) <= 1);
}

/// The driver reports 1 GiB free, but only 256 MiB can really be allocated (another tenant, fragmentation):
/// the first try is the memory bound of 1 GiB and every out-of-memory halves it.
#[test]
fn a_mock_with_1_gib_free_halves_until_the_batch_allocates() {
    let mut bench = MockBench::new(GIB).with_allocatable(256 << 20);
    let per = BatchBytes {
        input: 8192,
        output: 28672,
    };
    let fit = sizing::confirm_batch(&mut bench, "GEMM f16 14336x4096", per).unwrap();
    let bound = sizing::memory_bound(GIB, per);
    assert_eq!(fit.tried[0], bound);
    for pair in fit.tried.windows(2) {
        assert_eq!(pair[1], pair[0] / 2, "{:?}", fit.tried);
    }
    assert!(fit.tried.len() >= 3, "{:?}", fit.tried);
    assert_eq!(fit.batch, *fit.tried.last().unwrap());
    assert!(fit.batch * per.total() <= 256 << 20);
    assert!(
        fit.batch * 2 * per.total() > 256 << 20,
        "halved once too often"
    );
    assert_eq!(bench.live_bytes(), fit.batch * per.total());
}

#[test]
fn out_of_memory_at_the_first_allocation_is_a_clear_error_not_a_loop() {
    let mut bench = MockBench::new(GIB).with_allocatable(0);
    let per = BatchBytes {
        input: 8192,
        output: 8192,
    };
    let err = sizing::confirm_batch(&mut bench, "GEMM f16 4096x4096", per).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, GpuError::NoBatchFits { .. }), "{text}");
    assert!(text.contains("GEMM f16 4096x4096"), "{text}");
    assert!(text.contains("bytes reported free"), "{text}");
    // log2 of the bound, plus one: every halving tried once, then the end.
    let bound = sizing::memory_bound(GIB, per);
    assert_eq!(
        bench.allocations.len() as u32,
        bound.ilog2() + 1,
        "each batch is tried once"
    );
    assert_eq!(bench.live_bytes(), 0);
}

#[test]
fn a_full_run_with_no_memory_ends_every_step_with_an_error() {
    let mut bench = MockBench::new(GIB).with_allocatable(0);
    let plan = GpuPlan::quick(&DEFAULT_SHAPES[..1], None);
    let cal = run(&mut bench, &plan, &mut |_| {}, &no_stop());
    assert!(cal.results.is_empty());
    assert!(!cal.failures.is_empty());
    for (label, e) in &cal.failures {
        assert!(
            matches!(
                e,
                GpuError::NoBatchFits { .. } | GpuError::OutOfMemory { .. }
            ),
            "{label}: {e}"
        );
    }
    assert_eq!(bench.live_bytes(), 0);
}

#[test]
fn nothing_fits_when_free_memory_is_below_one_token() {
    let mut bench = MockBench::new(10);
    let err = sizing::confirm_batch(
        &mut bench,
        "GEMM",
        BatchBytes {
            input: 100,
            output: 100,
        },
    )
    .unwrap_err();
    assert!(matches!(err, GpuError::NoBatchFits { .. }));
    assert!(bench.allocations.is_empty(), "nothing to try");
}

#[test]
fn rotation_copies_exceed_the_l2_within_free_memory() {
    // 50 MiB L2, 9 MiB weights: 4 x 50 / 9 -> 23 copies.
    assert_eq!(sizing::rotation_copies(9 << 20, 50 << 20, 80 * GIB), 23);
    // Weights larger than the L2 several times over: one copy.
    assert_eq!(sizing::rotation_copies(GIB, 50 << 20, 80 * GIB), 1);
    // Little free memory: as many as a quarter of it holds, at least one.
    assert_eq!(sizing::rotation_copies(9 << 20, 50 << 20, 100 << 20), 2);
    assert_eq!(sizing::rotation_copies(9 << 20, 50 << 20, 0), 1);
}

// ---- the knee ----

#[test]
fn a_throughput_plateau_stops_the_growth() {
    // Rises linearly to a plateau at batch 100, flat after.
    let mut measured = Vec::new();
    let s = sizing::sweep(1 << 40, KNEE_TOLERANCE, &no_stop(), &mut |b| {
        measured.push(b);
        Ok((b.min(100) as f64) * 1e12)
    })
    .unwrap();
    // 1..128 doubling (128 still rises over 64), 256 does not; 25 % growth from 128 (160) does not either.
    assert_eq!(measured, vec![1, 2, 4, 8, 16, 32, 64, 128, 256, 160]);
    assert_eq!(s.knee, 128);
    assert!(!s.stopped);
}

#[test]
fn growth_by_a_quarter_goes_on_while_throughput_rises_up_to_memory() {
    // Throughput keeps rising; memory allows 100 tokens: doubling to 64, then 80, 100.
    let mut measured = Vec::new();
    let s = sizing::sweep(100, KNEE_TOLERANCE, &no_stop(), &mut |b| {
        measured.push(b);
        Ok(b as f64)
    })
    .unwrap();
    assert_eq!(measured, vec![1, 2, 4, 8, 16, 32, 64, 80, 100]);
    assert_eq!(s.knee, 100);
}

#[test]
fn a_rise_within_the_tolerance_is_noise() {
    let s = sizing::sweep(1 << 20, 0.05, &no_stop(), &mut |b| {
        Ok(if b == 1 { 100.0 } else { 104.0 })
    })
    .unwrap();
    assert_eq!(s.knee, 1);
    assert_eq!(s.points.len(), 2);
}

#[test]
fn the_stop_flag_ends_the_sweep_between_points() {
    let stop = AtomicBool::new(false);
    let mut n = 0;
    let s = sizing::sweep(1 << 20, 0.05, &stop, &mut |b| {
        n += 1;
        if n == 3 {
            stop.store(true, Ordering::Relaxed);
        }
        Ok(b as f64)
    })
    .unwrap();
    assert_eq!(s.points.len(), 3);
    assert!(s.stopped);
}

// ---- whole runs on the mock ----

fn peaks() -> Peaks {
    Peaks {
        bandwidth_bytes_per_s: 3.35e12,
        flops: 9.89e14,
    }
}

#[test]
fn a_mock_run_measures_every_step_and_frees_everything() {
    let mut bench = MockBench::new(80 * GIB);
    let plan = GpuPlan::full(&DEFAULT_SHAPES, Some(peaks()));
    let mut seen = Vec::new();
    let cal = run(&mut bench, &plan, &mut |p| seen.push(p), &no_stop());
    assert!(cal.failures.is_empty(), "{:?}", cal.failures);
    assert!(!cal.stopped);
    assert_eq!(bench.live_bytes(), 0, "every buffer freed");
    // 3 bandwidth steps, 6 GEMV layouts x 3 shapes, 8 GEMM types x 3 shapes.
    assert_eq!(seen.len(), 3 + 18 + 24);
    assert_eq!(seen[0].step, 1);
    assert_eq!(seen.last().unwrap().step, seen.last().unwrap().total);
    let gemv: Vec<_> = cal
        .results
        .iter()
        .filter(|r| r.bench == Bench::Gemv)
        .collect();
    assert_eq!(gemv.len(), 18 * GEMV_BATCHES.len());
    // The roofline mock streams at 3 TB/s after 5 us of launch: a batch-1 q4_0 GEMV of the 4096x14336 layer
    // moves its 33 MB of weights plus 73 KB of vectors.
    let q4 = gemv
        .iter()
        .find(|r| {
            r.dtype == Some(GpuDtype::Q4_0)
                && r.batch == Some(1)
                && r.shape == Some(DEFAULT_SHAPES[1])
        })
        .unwrap();
    let bytes = (4096 * 14336 / 32 * 18 + (4096 + 14336) * 4) as f64;
    assert_eq!(q4.bytes as f64, bytes);
    let expected = bytes / (5e-6 + bytes / 3e12);
    assert!(
        (q4.value / expected - 1.0).abs() < 1e-9,
        "{} vs {expected}",
        q4.value
    );
    assert!((q4.efficiency.unwrap() - q4.value / 3.35e12).abs() < 1e-9);
    // Each GEMM type and shape has a batch bound, a sweep and a knee.
    for d in GpuDtype::ALL {
        for s in DEFAULT_SHAPES {
            let of = |b: Bench| {
                cal.results
                    .iter()
                    .filter(|r| r.bench == b && r.dtype == Some(d) && r.shape == Some(s))
                    .count()
            };
            assert_eq!(of(Bench::MaxBatch), 1, "{d} {s}");
            assert_eq!(of(Bench::KneeBatch), 1, "{d} {s}");
            assert!(of(Bench::Gemm) >= 2, "{d} {s}");
        }
    }
    // The weights rotate through copies that exceed the L2 (the mock's is 50 MiB).
    let copies = bench.ops.iter().find_map(|op| match op {
        MockOp::Kernel(KernelLaunch::Gemv {
            weights,
            shape,
            dtype: GpuDtype::Q4_0,
            ..
        }) if *shape == DEFAULT_SHAPES[0] => Some(weights.copies),
        _ => None,
    });
    assert_eq!(copies, Some(((200u64 << 20).div_ceil(9437184)) as u32));
}

#[test]
fn the_knee_of_a_roofline_is_where_compute_takes_over() {
    // 3 TB/s and 800 TFLOP/s, no launch overhead: an f16 4096x4096 GEMM at b tokens reads 33.5 MB + 16 KB b
    // and computes 33.6 MFLOP b, so it turns compute-bound at b = 1.118e-5 / (4.19e-8 - 5.5e-9) = 306 tokens;
    // 512 still gains 19 % over 256, 1024 nothing over 512: the knee is 512.
    let mut bench = MockBench::new(80 * GIB).with_model(Box::new(roofline(3e12, 8e14, 0.0)));
    let mut plan = GpuPlan::quick(&DEFAULT_SHAPES[..1], None);
    plan.bandwidth = false;
    plan.gemv_dtypes.clear();
    let cal = run(&mut bench, &plan, &mut |_| {}, &no_stop());
    let knee = cal
        .results
        .iter()
        .find(|r| r.bench == Bench::KneeBatch)
        .unwrap()
        .value;
    assert_eq!(knee, 512.0);
}

#[test]
fn stopping_keeps_what_finished() {
    let mut bench = MockBench::new(80 * GIB);
    let plan = GpuPlan::quick(&DEFAULT_SHAPES, Some(peaks()));
    let stop = AtomicBool::new(false);
    let mut steps = 0;
    let cal = run(
        &mut bench,
        &plan,
        &mut |_| {
            steps += 1;
            if steps == 4 {
                stop.store(true, Ordering::Relaxed);
            }
        },
        &stop,
    );
    assert!(cal.stopped);
    assert_eq!(steps, 4);
    // The three bandwidth steps finished, and the fourth step (a GEMV, which checks between batches) ended.
    assert_eq!(
        cal.results
            .iter()
            .filter(|r| matches!(r.bench, Bench::Read | Bench::CopyD2D | Bench::CopyH2D))
            .count(),
        3
    );
    assert_eq!(bench.live_bytes(), 0);
}

#[test]
fn fp8_is_skipped_with_a_note_before_compute_capability_8_9() {
    let mut bench = MockBench::new(80 * GIB).with_compute_capability(8, 0);
    let mut plan = GpuPlan::full(&DEFAULT_SHAPES[..1], None);
    plan.bandwidth = false;
    plan.gemv_dtypes.clear();
    let cal = run(&mut bench, &plan, &mut |_| {}, &no_stop());
    assert!(
        cal.results
            .iter()
            .all(|r| r.dtype != Some(GpuDtype::Fp8E4m3))
    );
    assert!(
        cal.notes
            .iter()
            .any(|n| n.contains("fp8") && n.contains("8.9")),
        "{:?}",
        cal.notes
    );
    assert!(cal.results.iter().any(|r| r.dtype == Some(GpuDtype::Bf16)));
}

#[test]
fn a_model_limits_the_work_to_its_types() {
    let plan = GpuPlan::full(&DEFAULT_SHAPES, None).limit_to(&[GpuDtype::Q4_0]);
    assert_eq!(plan.gemv_dtypes, vec![GpuDtype::Q4_0]);
    assert_eq!(plan.gemm_dtypes, vec![GpuDtype::F16, GpuDtype::Q4_0]);
}

#[test]
fn a_quantized_gemm_gets_a_dequantization_workspace_and_a_plain_one_does_not() {
    let mut bench = MockBench::new(80 * GIB);
    let mut plan = GpuPlan::quick(&DEFAULT_SHAPES[..1], None);
    plan.bandwidth = false;
    plan.gemv_dtypes.clear();
    plan.gemm_dtypes = vec![GpuDtype::F16, GpuDtype::Q4_0];
    run(&mut bench, &plan, &mut |_| {}, &no_stop());
    let ws = |d| {
        bench.ops.iter().find_map(|op| match op {
            MockOp::Gemm(g) if g.dtype == d => Some(g.workspace.map(|w| w.bytes)),
            _ => None,
        })
    };
    assert_eq!(ws(GpuDtype::F16), Some(None));
    assert_eq!(ws(GpuDtype::Q4_0), Some(Some(4096 * 4096 * 2)));
}

// ---- store rows ----

fn device() -> DeviceIdentity {
    DeviceIdentity {
        profile: "nvidia-h100-sxm-80gb".into(),
        name: "NVIDIA H100 80GB HBM3".into(),
        uuid: None,
    }
}

#[test]
fn efficiencies_summarise_gemv_and_gemm() {
    let mut bench = MockBench::new(80 * GIB);
    let plan = GpuPlan::quick(&DEFAULT_SHAPES, Some(peaks()));
    let cal = run(&mut bench, &plan, &mut |_| {}, &no_stop());
    let (decode, from) = decode_efficiency(&cal.results).unwrap();
    // 6 layouts x 3 shapes at batch 1.
    assert_eq!(from.len(), 18);
    assert!(decode > 0.0 && decode < 3.0e12 / 3.35e12, "{decode}");
    let (prefill, from) = prefill_efficiency(&cal.results).unwrap();
    assert_eq!(from.len(), 3, "one f16 GEMM per shape");
    assert!(from.iter().all(|f| f.starts_with("gpu_gemm_f16_flops")));
    // The mock computes at 800 TFLOP/s against a 989 TFLOP/s peak.
    assert!(
        prefill > 0.5 && prefill <= 8.0e14 / 9.89e14 + 1e-9,
        "{prefill}"
    );
    // Without peaks there is nothing to compare with.
    let cal = run(
        &mut MockBench::new(80 * GIB),
        &GpuPlan::quick(&DEFAULT_SHAPES[..1], None),
        &mut |_| {},
        &no_stop(),
    );
    assert!(decode_efficiency(&cal.results).is_none());
    assert!(
        to_measurements(&cal.results, device())
            .iter()
            .all(|m| !m.metric.ends_with("_efficiency"))
    );
}

#[test]
fn measurements_name_metrics_units_and_shapes() {
    let mut bench = MockBench::new(80 * GIB);
    let plan = GpuPlan::quick(&DEFAULT_SHAPES[..1], Some(peaks()));
    let cal = run(&mut bench, &plan, &mut |_| {}, &no_stop());
    let rows = to_measurements(&cal.results, device());
    let find = |metric: &str| rows.iter().find(|m| m.metric == metric).unwrap();
    assert_eq!(find("gpu_bandwidth_d2d_bytes_per_s").unit, "bytes/s");
    assert_eq!(find("gpu_bandwidth_h2d_bytes_per_s").unit, "bytes/s");
    assert_eq!(find("gpu_bandwidth_read_bytes_per_s").unit, "bytes/s");
    let gemv = find("gpu_gemv_q4_0_bytes_per_s");
    assert_eq!(gemv.shape.sequences, Some(1));
    let ctx: serde_json::Value = serde_json::from_str(&gemv.context).unwrap();
    assert_eq!(ctx["rows"], 4096);
    assert_eq!(ctx["cols"], 4096);
    assert_eq!(ctx["dtype"], "q4_0");
    let gemm = rows.iter().filter(|m| m.metric == "gpu_gemm_f16_flops");
    assert!(gemm.clone().count() >= 2);
    assert!(
        gemm.clone()
            .all(|m| m.unit == "FLOP/s" && m.shape.ubatch.is_some())
    );
    assert_eq!(find("gpu_gemm_f16_max_batch_tokens").unit, "tokens");
    assert_eq!(find("gpu_gemm_f16_knee_batch_tokens").unit, "tokens");
    assert!(
        rows.iter()
            .all(|m| m.model.is_none() && m.device == device())
    );
    assert_eq!(
        rows.iter()
            .filter(|m| m.metric == "decode_efficiency")
            .count(),
        1
    );
    assert_eq!(
        rows.iter()
            .filter(|m| m.metric == "prefill_efficiency")
            .count(),
        1
    );
}

#[test]
fn a_mock_runs_rows_come_back_from_the_store_as_calibrated_efficiencies() {
    let mut bench = MockBench::new(80 * GIB);
    let plan = GpuPlan::quick(&DEFAULT_SHAPES, Some(peaks()));
    let cal = run(&mut bench, &plan, &mut |_| {}, &no_stop());
    let rows = to_measurements(&cal.results, device());
    let store = Store::open_in_memory().unwrap();
    let id = store
        .begin_run(&NewRun {
            tool: "calibrate".into(),
            runtime: RuntimeId::LlamaCpp,
            runtime_version: None,
            started_at: "2026-11-22T00:00:00Z".into(),
            settings: "{}".into(),
            host: HostIdentity {
                cpu_model: "test".into(),
                physical_cores: 2,
                memory_total_bytes: 1 << 33,
                hostname: "test".into(),
            },
        })
        .unwrap();
    for m in &rows {
        store.record(id, m).unwrap();
    }
    store.finish_run(id, "2026-11-22T00:01:00Z").unwrap();
    let ev = store
        .evidence(
            &["nvidia-h100-sxm-80gb".to_string()],
            "any-model-fingerprint",
        )
        .unwrap();
    assert_eq!(ev.rows, Some(rows.len() as u64));
    assert_eq!(ev.efficiencies.len(), 2, "{:?}", ev.efficiencies);
    let (decode, _) = decode_efficiency(&cal.results).unwrap();
    let (prefill, _) = prefill_efficiency(&cal.results).unwrap();
    for (phase, value) in [(Phase::Decode, decode), (Phase::Prefill, prefill)] {
        let e = ev.efficiencies.iter().find(|e| e.phase == phase).unwrap();
        assert_eq!(e.basis, Basis::Calibrated);
        assert_eq!(e.runtime, RuntimeId::LlamaCpp);
        assert_eq!(e.device_profile, "nvidia-h100-sxm-80gb");
        assert_eq!(e.what, "calibrate");
        assert!((e.value - value).abs() < 1e-12);
    }
    // Raw throughput rows are not tokens/s: the planner does not mistake them for engine measurements.
    assert!(ev.throughput.is_empty());
}

#[test]
fn a_plateauing_mock_gpu_stops_growing_the_gemm_batch() {
    // Every GEMM takes the same time whatever the batch beyond 64 tokens: throughput plateaus there.
    let model = Box::new(|op: &MockOp| match op {
        MockOp::Gemm(g) => 1e-3 * (g.batch.max(64) as f64 / 64.0),
        other => roofline(3e12, 8e14, 5e-6)(other),
    });
    let mut bench = MockBench::new(80 * GIB).with_model(model);
    let mut plan = GpuPlan::quick(&DEFAULT_SHAPES[..1], None);
    plan.bandwidth = false;
    plan.gemv_dtypes.clear();
    let cal = run(&mut bench, &plan, &mut |_| {}, &no_stop());
    let batches: Vec<u64> = cal
        .results
        .iter()
        .filter(|r| r.bench == Bench::Gemm)
        .filter_map(|r| r.batch)
        .collect();
    assert_eq!(batches, vec![1, 2, 4, 8, 16, 32, 64, 128, 80]);
    let knee = cal
        .results
        .iter()
        .find(|r| r.bench == Bench::KneeBatch)
        .unwrap();
    assert_eq!(knee.value, 64.0);
}

// ---- the real GPU ----

/// NVRTC alone (no GPU): every kernel file compiles for Hopper at each GEMV batch. Needs `libnvrtc` on the
/// library path; run with `cargo test --lib calibrate::gpu -- --ignored`.
#[test]
#[ignore = "needs libnvrtc (the CUDA runtime compiler); run with --ignored"]
fn every_kernel_compiles_under_nvrtc() {
    for batch in GEMV_BATCHES {
        let ptx = cuda::compile_ptx((9, 0), batch).unwrap_or_else(|e| panic!("{e}"));
        for name in [
            "fill_finite",
            "read_bytes",
            "gemv_f16",
            "gemv_q8_0",
            "gemv_q4_0",
            "gemv_i2_s",
            "gemv_tl1",
            "gemv_tl2",
            "dequant_q8_0",
            "dequant_q4_0",
            "dequant_i2_s",
            "dequant_tl1",
            "dequant_tl2",
        ] {
            assert!(
                ptx.contains(&format!(".entry {name}(")),
                "{name} missing at batch {batch}"
            );
        }
    }
}

/// The real thing, on an NVIDIA GPU: `OPTIMIZER_GPU_TESTS=1 cargo test --lib calibrate::gpu -- --ignored`.
#[test]
#[ignore = "needs an NVIDIA GPU; run with OPTIMIZER_GPU_TESTS=1 and --ignored"]
fn cuda_bench_runs_for_real() {
    if std::env::var("OPTIMIZER_GPU_TESTS").as_deref() != Ok("1") {
        eprintln!("skipped: OPTIMIZER_GPU_TESTS=1 is not set (it needs an NVIDIA GPU)");
        return;
    }
    let cal = run_real_smoke().unwrap_or_else(|e| panic!("{e}"));
    for r in &cal.results {
        eprintln!(
            "{:<36} {:>12} batch {:>8?} {:>12.4e} {}",
            r.metric(),
            r.shape.map(|s| s.to_string()).unwrap_or_default(),
            r.batch,
            r.value,
            r.unit()
        );
    }
    assert!(cal.failures.is_empty(), "{:?}", cal.failures);
    let read = cal.results.iter().find(|r| r.bench == Bench::Read).unwrap();
    // Any NVIDIA GPU this runs on reads faster than 50 GB/s and slower than 20 TB/s.
    assert!(read.value > 5e10 && read.value < 2e13, "{}", read.value);
}

#[test]
fn without_a_driver_the_real_bench_says_so() {
    // SAFETY: only checks whether the shared library can be loaded.
    if unsafe { cudarc::driver::sys::is_culib_present() } {
        return; // a machine with a driver: covered by cuda_bench_runs_for_real
    }
    let err = CudaBench::new(0).err().unwrap();
    assert_eq!(err, GpuError::NoDriver);
    assert_eq!(err.to_string(), "no NVIDIA driver: libcuda not found");
    assert_eq!(run_real_smoke().unwrap_err(), GpuError::NoDriver);
}
