//! Unit tests of the CPU calibration: the plan, the run loop against a mock bench, the store rows, and the real
//! machine's arrays and limits.

use super::*;

/// A bench whose figures follow a formula of the thread count, counting its calls; it can raise the stop
/// flag after a number of steps and fail one kind of step.
struct Mock<'a> {
    calls: usize,
    stop_after: Option<(usize, &'a AtomicBool)>,
    fail_fma: bool,
}

impl Mock<'_> {
    fn tick(&mut self) {
        self.calls += 1;
        if let Some((n, flag)) = self.stop_after
            && self.calls >= n
        {
            flag.store(true, Ordering::SeqCst);
        }
    }
}

impl CpuBench for Mock<'_> {
    fn isa(&self) -> String {
        "mock".into()
    }
    fn stream(
        &mut self,
        s: Stream,
        threads: u32,
        _: u64,
        _: Budget,
    ) -> Result<Sample, CpuBenchError> {
        self.tick();
        let v = 10e9 * f64::from(threads.min(2)) * s.arrays() as f64;
        Ok(Sample {
            best: v,
            samples: vec![v * 0.9, v],
        })
    }
    fn fma(&mut self, threads: u32, _: Budget) -> Result<Sample, CpuBenchError> {
        self.tick();
        if self.fail_fma {
            return Err(CpuBenchError::ArrayTooLarge { bytes: u64::MAX });
        }
        let v = 70e9 * f64::from(threads);
        Ok(Sample {
            best: v,
            samples: vec![v],
        })
    }
    fn dot(
        &mut self,
        t: DotType,
        _: usize,
        _: usize,
        threads: u32,
        _: Budget,
    ) -> Result<Sample, CpuBenchError> {
        self.tick();
        let v = match t {
            DotType::Q4_0 => 12e9,
            DotType::Q8_0 => 8e9,
            DotType::Q4K => 13e9,
        } * f64::from(threads);
        Ok(Sample {
            best: v,
            samples: vec![v],
        })
    }
}

#[test]
fn quick_plan_sweeps_one_thread_and_all_cores() {
    let p = Plan::new(true, 8, (Some(512 << 10), Some(32 << 20)), 16 << 30, None);
    let threads: std::collections::BTreeSet<u32> = p.steps.iter().map(Step::threads).collect();
    assert_eq!(threads.into_iter().collect::<Vec<_>>(), vec![1, 8]);
    assert_eq!(p.stream_bytes, 256 << 20);
    // 3 streams + FMA at 2 thread counts, 3 dot types at 2.
    assert_eq!(p.steps.len(), 2 * 4 + 2 * 3);
    // Q8_0 rows of 4096 are 4352 bytes: 256 KiB (half the L2) holds 60 of them per thread.
    assert!(p.steps.contains(&Step::Dot {
        t: DotType::Q8_0,
        rows: 60 * 8,
        cols: 4096,
        threads: 8
    }));
    let full = Plan::new(false, 6, (None, None), 16 << 30, None);
    let threads: std::collections::BTreeSet<u32> = full.steps.iter().map(Step::threads).collect();
    assert_eq!(threads.into_iter().collect::<Vec<_>>(), vec![1, 2, 4, 6]);
}

#[test]
fn stream_arrays_shrink_to_fit_available_memory() {
    // 1 GiB available: three arrays may take an eighth of it.
    let p = Plan::new(true, 2, (None, Some(256 << 20)), 1 << 30, None);
    assert!(p.stream_bytes * 3 <= (1 << 30) / STREAM_MEMORY_SHARE);
    assert_eq!(p.notes.len(), 1, "{:?}", p.notes);
}

#[test]
fn every_step_is_recorded_with_its_threads_and_metric() {
    let plan = Plan::new(true, 2, (None, Some(32 << 20)), 16 << 30, None);
    let stop = AtomicBool::new(false);
    let mut bench = Mock {
        calls: 0,
        stop_after: None,
        fail_fma: false,
    };
    let mut seen = Vec::new();
    let mut progress = Vec::new();
    let out = run(
        &mut bench,
        &plan,
        &stop,
        &mut |i, n, _| progress.push((i, n)),
        &mut |m| {
            seen.push(m.step.metric());
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(out.measured.len(), plan.steps.len());
    assert!(!out.stopped);
    let total = plan.steps.len() * plan.budget.reps as usize;
    assert_eq!(progress.last(), Some(&(total, total)));
    let device = DeviceIdentity {
        profile: "cpu-x".into(),
        name: "CPU".into(),
        uuid: None,
    };
    let rows: Vec<NewMeasurement> = out
        .measured
        .iter()
        .map(|m| to_measurement(m, &device, "mock"))
        .collect();
    let triad2 = rows
        .iter()
        .find(|r| r.metric == "cpu_triad_bytes_per_s" && r.shape.threads == Some(2))
        .unwrap();
    assert_eq!(triad2.value, 60e9);
    assert!(triad2.model.is_none());
    assert!(rows.iter().any(|r| r.metric == "cpu_dot_q4_k_params_per_s"));
    // Every repetition is recorded, in rounds: the first round runs every step once.
    assert_eq!(seen.len(), total);
    assert_eq!(
        seen[..plan.steps.len()],
        plan.steps.iter().map(Step::metric).collect::<Vec<_>>()[..]
    );
    assert_eq!(
        out.measured[0].sample.samples.len(),
        plan.budget.reps as usize
    );
}

#[test]
fn a_slow_spell_costs_one_sample_not_the_figure() {
    // A bench whose every fifth call runs at a third of its rate: interleaved rounds put the slow calls on
    // different steps, so each step's best is its real rate.
    struct Spells(usize);
    impl CpuBench for Spells {
        fn isa(&self) -> String {
            "mock".into()
        }
        fn stream(
            &mut self,
            _: Stream,
            t: u32,
            _: u64,
            _: Budget,
        ) -> Result<Sample, CpuBenchError> {
            Ok(self.next(f64::from(t)))
        }
        fn fma(&mut self, t: u32, _: Budget) -> Result<Sample, CpuBenchError> {
            Ok(self.next(f64::from(t)))
        }
        fn dot(
            &mut self,
            _: DotType,
            _: usize,
            _: usize,
            t: u32,
            _: Budget,
        ) -> Result<Sample, CpuBenchError> {
            Ok(self.next(f64::from(t)))
        }
    }
    impl Spells {
        fn next(&mut self, v: f64) -> Sample {
            self.0 += 1;
            let v = if self.0.is_multiple_of(5) { v / 3.0 } else { v };
            Sample {
                best: v,
                samples: vec![v],
            }
        }
    }
    let plan = Plan::new(true, 2, (None, Some(32 << 20)), 16 << 30, None);
    let out = run(
        &mut Spells(0),
        &plan,
        &AtomicBool::new(false),
        &mut |_, _, _| {},
        &mut |_| Ok(()),
    )
    .unwrap();
    for m in &out.measured {
        assert_eq!(m.sample.best, f64::from(m.step.threads()), "{:?}", m.step);
    }
}

#[test]
fn a_raised_stop_flag_keeps_what_finished_and_runs_nothing_more() {
    let plan = Plan::new(true, 2, (None, Some(32 << 20)), 16 << 30, None);
    let stop = AtomicBool::new(false);
    let mut bench = Mock {
        calls: 0,
        stop_after: Some((3, &stop)),
        fail_fma: false,
    };
    let out = run(&mut bench, &plan, &stop, &mut |_, _, _| {}, &mut |_| Ok(())).unwrap();
    assert!(out.stopped);
    assert_eq!(out.measured.len(), 3);
    assert_eq!(bench.calls, 3);
}

#[test]
fn a_failing_step_is_reported_and_the_rest_still_run() {
    let plan = Plan::new(true, 2, (None, Some(32 << 20)), 16 << 30, None);
    let stop = AtomicBool::new(false);
    let mut bench = Mock {
        calls: 0,
        stop_after: None,
        fail_fma: true,
    };
    let out = run(&mut bench, &plan, &stop, &mut |_, _, _| {}, &mut |_| Ok(())).unwrap();
    assert_eq!(out.failed.len(), 2);
    assert!(
        matches!(out.failed[0].1, CpuBenchError::ArrayTooLarge { .. }),
        "{:?}",
        out.failed
    );
    assert_eq!(out.measured.len(), plan.steps.len() - 2);
}

#[test]
fn each_stream_array_is_the_size_its_bytes_are_counted_for() {
    // The triad counts 3 × `bytes` per pass: its two sources and its destination must each be `bytes` long.
    let mut m = Machine::default();
    let (_, a, b, c) = m.arrays(1 << 20).unwrap();
    assert_eq!(a.len() * 8, 1 << 20);
    assert_eq!(b.len() * 8, 1 << 20);
    assert_eq!(c.len() * 4, 2 << 20);
}

/// Bytes of weights each GEMV step of `p` allocates.
fn dot_weight_bytes(p: &Plan) -> Vec<u64> {
    p.steps
        .iter()
        .filter_map(|s| match *s {
            Step::Dot { t, rows, cols, .. } => {
                let (per, bytes, _) = t.block();
                Some((rows * (cols / per) * bytes) as u64)
            }
            _ => None,
        })
        .collect()
}

#[test]
fn an_absurd_l2_size_does_not_size_the_gemv_at_terabytes() {
    // An inventory claiming 1 TiB of L2 per core asked for a 550 GB GEMV (an abort on allocation).
    let p = Plan::new(true, 2, (Some(1 << 40), Some(32 << 20)), 16 << 30, None);
    let bytes = dot_weight_bytes(&p);
    assert!(!bytes.is_empty());
    assert!(
        bytes.iter().all(|b| *b <= 2 * L2_BYTES_MAX / DOT_L2_SHARE),
        "{bytes:?}"
    );
    assert!(p.notes.iter().any(|n| n.contains("L2")), "{:?}", p.notes);
}

#[test]
fn an_absurd_embedding_length_keeps_the_gemv_rows_of_a_real_layer() {
    // A GGUF may declare any u32 embedding length: 4294967040 asked for a 36 GB GEMV of eight rows a thread.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/gguf/llama-q4_k_m.gguf");
    let mut m = optimizer_model::load(&path).unwrap();
    m.hparams.embedding_length = Some(4_294_967_040);
    let p = Plan::new(
        true,
        2,
        (Some(512 << 10), Some(32 << 20)),
        16 << 30,
        Some(&m),
    );
    assert!(
        p.steps.iter().all(|s| match s {
            Step::Dot { cols, .. } => *cols == DEFAULT_DOT_COLS,
            _ => true,
        }),
        "{:?}",
        p.steps
    );
    assert!(
        p.notes.iter().any(|n| n.contains("4294967040")),
        "{:?}",
        p.notes
    );
}

#[test]
fn a_gemv_beyond_the_weight_bound_fails_its_step_without_allocating() {
    let budget = Budget {
        rep_secs: 0.001,
        reps: 1,
    };
    let e = Machine::default()
        .dot(DotType::Q8_0, 1 << 20, DOT_MAX_COLS, 1, budget)
        .unwrap_err();
    assert!(matches!(e, CpuBenchError::TooLarge { .. }), "{e}");
    assert!(e.to_string().contains("bytes of weights"), "{e}");
    assert!(
        Machine::default()
            .dot(DotType::Q8_0, usize::MAX / 2, 1 << 16, 1, budget)
            .is_err()
    );
}

#[test]
fn the_real_machine_reports_the_threads_and_memory_it_has() {
    let c = Machine::default().capacity();
    assert!(c.threads.is_some_and(|t| t >= 1), "{c:?}");
    assert!(c.available_bytes.is_some_and(|b| b > 0), "{c:?}");
}

#[test]
fn the_real_machine_measures_positive_rates() {
    // Tiny budgets: this checks the loops run and count their work, not the machine's speed.
    let budget = Budget {
        rep_secs: 0.001,
        reps: 1,
    };
    let mut m = Machine::default();
    for s in Stream::ALL {
        assert!(m.stream(s, 2, 1 << 20, budget).unwrap().best > 0.0);
    }
    assert!(m.fma(1, budget).unwrap().best > 0.0);
    for t in DotType::ALL {
        assert!(m.dot(t, 8, 512, 2, budget).unwrap().best > 0.0);
    }
    assert!(m.dot(DotType::Q4K, 8, 100, 1, budget).is_err());
}
