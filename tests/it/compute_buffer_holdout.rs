//! Holding out the compute-buffer constants (issue 9): [`ComputeConstants`] are the llama.cpp memory model's
//! only fitted numbers. Here they are fitted on the measured CPU rows of some model families and the error is
//! reported on the rows of the others, which the fit never saw.
//!
//! - Data: every CPU dry run of the pinned engine (tests/fixtures/llama-cpp/measured-cpu.json and
//!   measured-cpu-avx2.json) that printed a compute buffer. Only the engine's own `CPU compute buffer` line
//!   (2-decimal MiB, ±0.005) is compared with the model's compute bytes.
//! - Partition by model family (models.json `shape`): [`FIT_FAMILIES`] to fit, every other family held out.
//! - Fit: every constant over 0..=[`GRID_MAX`]; the best tuple matches the most fit rows within the engine's
//!   print rounding, then has the least mean relative error beyond it ([`Score`]). Exhaustive over the grid,
//!   pruned by branch and bound: every compute buffer is non-decreasing in every constant, so with some
//!   constants fixed, the rest at 0 and at [`GRID_MAX`] bound every row's prediction, and a subtree with fewer
//!   rows that can still match than the best tuple matches is skipped. Ties are kept: the result is the whole
//!   set of best tuples, and the test asserts it is the committed constants alone.
//! - Why exact matches first: the model's phases are meant to be the engine's allocation exactly, and they are
//!   on most f16-cache rows; rows with a quantized K cache are off by whole activation rows the model does not
//!   describe (see `KNOWN_COMPUTE_DEVIATIONS` in tests/it/llama_cpp_measured.rs). Minimising the mean relative
//!   error alone picks (4, 3, 4, 3, 8, 2), which matches 133 fit rows instead of 224 to gain 0.009 points
//!   of mean error (0.666 % against 0.675 %), and does worse on the held-out families (max 2.83 %, mean
//!   0.388 %, against 2.43 % and 0.382 % for the committed constants).
//! - The grid search evaluates `ComputeTerms::buffers`, the function the estimate itself uses; the test checks on
//!   every row that it gives the estimate's compute bytes.

use crate::common;
#[path = "common/llama_cpp_rows.rs"]
mod rows;

use std::collections::{BTreeMap, BTreeSet};

use optimizer::memory::llama_cpp::{
    COMPUTE_CONSTANTS, ComputeConstants, ComputeTerms, GpuTarget, Machine, Params, compute_terms,
    estimate, estimate_with,
};
use optimizer::model::ModelSpec;
use rows::MIB;
use serde_json::Value;

/// Families the constants are fitted on; every other family of the tables is held out. Each is needed for a
/// constant: Llama-2-7B is multi-head (its K rows are as wide as its activation rows, so it fixes only
/// `attn_embd_rows + attn_kv_rows`), Mixtral-8x7B is grouped-query (4 query heads per KV head) and a mixture of
/// experts (`n_ff` × 2 experts used), and Llama-3-8B has the 128,256-token vocabulary that makes the output
/// phase the peak. Without Llama-3-8B, `output_live_rows` is not identifiable (with Llama-2's and Mixtral's
/// 32,000-token vocabularies the output phase never peaks: 0..=4 tie) and `input_rows_i32` comes out 7.
const FIT_FAMILIES: &[&str] = &["llama2-7b", "mixtral-8x7b", "llama3-8b"];
/// Each constant is searched over 0..=GRID_MAX.
const GRID_MAX: u64 = 8;
/// The engine prints buffers in MiB with 2 decimals: a difference within half a unit is no error.
const ROUNDING_BYTES: f64 = 0.005 * MIB;
/// Two objective values this close are a tie (float sums over the same rows in the same order).
const TIE: f64 = 1e-12;

/// A measured CPU row with what the model needs to reproduce its compute buffer.
struct Row {
    family: String,
    label: String,
    row: Value,
    spec: usize,
    params: Params,
    machine: usize,
    terms: ComputeTerms,
    /// The engine's `CPU compute buffer`, bytes.
    engine: f64,
}

fn constants(v: [u64; 6]) -> ComputeConstants {
    ComputeConstants {
        attn_embd_rows: v[0],
        attn_kv_rows: v[1],
        ffn_embd_rows: v[2],
        ffn_wide_activations: v[3],
        input_rows_i32: v[4],
        output_live_rows: v[5],
    }
}

fn as_array(c: &ComputeConstants) -> [u64; 6] {
    [
        c.attn_embd_rows,
        c.attn_kv_rows,
        c.ffn_embd_rows,
        c.ffn_wide_activations,
        c.input_rows_i32,
        c.output_live_rows,
    ]
}

const NAMES: [&str; 6] = [
    "attn_embd_rows",
    "attn_kv_rows",
    "ffn_embd_rows",
    "ffn_wide_activations",
    "input_rows_i32",
    "output_live_rows",
];

/// The host's compute bytes of a CPU-only row with constants `c`.
fn host_compute(r: &Row, c: &[u64; 6]) -> f64 {
    r.terms.buffers(&constants(*c)).unwrap()[0] as f64
}

/// How well a prediction somewhere in `[lo, hi]` can match the engine: whether it can match within the print
/// rounding, and the least relative error beyond the rounding.
fn bounded_error(r: &Row, lo: f64, hi: f64) -> (bool, f64) {
    let off = if r.engine > hi {
        r.engine - hi
    } else if r.engine < lo {
        lo - r.engine
    } else {
        0.0
    };
    (
        off <= ROUNDING_BYTES,
        (off - ROUNDING_BYTES).max(0.0) / r.engine,
    )
}

/// The fit's objective, best first: most rows matched within the print rounding, then least mean relative error.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Score {
    exact: usize,
    mean_rel: f64,
}

impl Score {
    const WORST: Score = Score {
        exact: 0,
        mean_rel: f64::INFINITY,
    };
    /// Whether `self`, a bound on a subtree, can reach `best`: the subtree is searched only if so.
    fn can_reach(&self, best: &Score) -> bool {
        self.exact > best.exact
            || (self.exact == best.exact && self.mean_rel <= best.mean_rel + TIE)
    }
}

/// The order the constants are fixed in: `output_live_rows` alone decides the rows whose peak is the output
/// phase, the feed-forward and attention constants most of the rest, and the input rows (the smallest term)
/// move every row by a few KiB only. With this order the search visits about 1,700 nodes, against 18,000 for
/// the feed-forward constants first and 160,000 for the input rows first.
const ORDER: [usize; 6] = [5, 3, 2, 0, 1, 4];

/// The score of one tuple.
fn score(rows: &[&Row], c: &[u64; 6]) -> Score {
    let mut s = Score {
        exact: 0,
        mean_rel: 0.0,
    };
    for r in rows {
        let v = host_compute(r, c);
        let (exact, rel) = bounded_error(r, v, v);
        s.exact += usize::from(exact);
        s.mean_rel += rel / rows.len() as f64;
    }
    s
}

/// Branch and bound over the constants: `fixed` holds the first constants in [`ORDER`], `open` the rows that
/// may still match within the rounding. A subtree is skipped when fewer of its rows can match than the best
/// tuple matches; whole tuples are then scored on every row. Keeps `best` and every tuple that reaches it.
fn search(
    rows: &[&Row],
    open: &[usize],
    fixed: &mut Vec<u64>,
    best: &mut Score,
    argmin: &mut Vec<[u64; 6]>,
    nodes: &mut u64,
) {
    *nodes += 1;
    let with = |fill: u64| -> [u64; 6] {
        let mut c = [fill; 6];
        for (&i, &v) in ORDER.iter().zip(fixed.iter()) {
            c[i] = v;
        }
        c
    };
    let (lo, hi) = (with(0), with(GRID_MAX));
    if fixed.len() == 6 {
        // Only the open rows can match; score every row only when enough of them do.
        let exact = open
            .iter()
            .filter(|&&i| {
                let r = rows[i];
                let v = host_compute(r, &lo);
                bounded_error(r, v, v).0
            })
            .count();
        if exact < best.exact {
            return;
        }
        let s = score(rows, &lo);
        if s.can_reach(best) {
            if !best.can_reach(&s) {
                *best = s;
                argmin.clear();
            }
            argmin.push(lo);
        }
        return;
    }
    let open: Vec<usize> = open
        .iter()
        .copied()
        .filter(|&i| {
            let r = rows[i];
            bounded_error(r, host_compute(r, &lo), host_compute(r, &hi)).0
        })
        .collect();
    if open.len() < best.exact {
        return;
    }
    for v in 0..=GRID_MAX {
        fixed.push(v);
        search(rows, &open, fixed, best, argmin, nodes);
        fixed.pop();
    }
}

/// Max and mean of absolute bytes and relative error over rows.
#[derive(Default, Debug)]
struct Errors {
    n: usize,
    max_abs: f64,
    sum_abs: f64,
    max_rel: f64,
    sum_rel: f64,
    worst: String,
}

impl Errors {
    fn see(&mut self, ours: f64, engine: f64, label: &str) {
        let abs = (ours - engine).abs();
        let rel = abs / engine;
        self.n += 1;
        self.sum_abs += abs;
        self.sum_rel += rel;
        self.max_abs = self.max_abs.max(abs);
        if rel > self.max_rel {
            self.max_rel = rel;
            self.worst = format!(
                "{label}: ours {:.2} MiB, engine {:.2}",
                ours / MIB,
                engine / MIB
            );
        }
    }
    fn mean_rel(&self) -> f64 {
        self.sum_rel / self.n as f64
    }
    fn report(&self, what: &str) -> String {
        format!(
            "{what}: {} rows; max {:.2} MiB, mean {:.2} MiB; max {:.2} %, mean {:.3} % (worst {})",
            self.n,
            self.max_abs / MIB,
            self.sum_abs / self.n as f64 / MIB,
            self.max_rel * 100.0,
            self.mean_rel() * 100.0,
            self.worst
        )
    }
}

fn load() -> (Vec<ModelSpec>, Vec<Machine>, Vec<Row>, tempfile::TempDir) {
    let models = rows::read("models.json");
    let tmp = tempfile::tempdir().unwrap();
    let mut specs = Vec::new();
    let mut spec_of: BTreeMap<String, usize> = BTreeMap::new();
    let mut machines = Vec::new();
    let mut out = Vec::new();
    for name in ["measured-cpu.json", "measured-cpu-avx2.json"] {
        let table = rows::read(name);
        machines.push(rows::cpu_machine(&table));
        let machine = machines.len() - 1;
        for row in table["rows"].as_array().unwrap() {
            let Some(engine) = rows::buffer_mib(row, "CPU compute buffer") else {
                continue;
            };
            if row["rc"] != 0 || row["breakdown"].get("Host").is_none() {
                continue;
            }
            let id = row["model"].as_str().unwrap().to_string();
            let m = &models["models"][&id];
            let spec = *spec_of.entry(id.clone()).or_insert_with(|| {
                specs.push(common::build(m, &tmp.path().join(format!("{id}.gguf"))));
                specs.len() - 1
            });
            let params = rows::params(row);
            let terms = compute_terms(&specs[spec], &params, &machines[machine]).unwrap();
            out.push(Row {
                family: m["shape"].as_str().unwrap().to_string(),
                label: rows::label(row),
                row: row.clone(),
                spec,
                params,
                machine,
                terms,
                engine: engine * MIB,
            });
        }
    }
    (specs, machines, out, tmp)
}

/// Held-out compute buffers, CPU: the issue 4 target for every row (5 % or 16 MiB) holds on rows the fit never
/// saw, and on average the model is within 1 % (measured 0.38 %).
const HELD_COMPUTE_MAX_REL: f64 = 0.05;
const HELD_COMPUTE_ABS_MIB: f64 = 16.0;
const HELD_COMPUTE_MEAN_REL: f64 = 0.01;
/// Held-out whole estimate, CPU: the issue 4 target (within 2 % of the engine's total, never more than 1 % below
/// it), with 2 MiB for the engine's whole-MiB weights.
const HELD_TOTAL_REL: f64 = 0.02;
const HELD_TOTAL_UNDER_REL: f64 = 0.01;
const WEIGHTS_SLACK_MIB: f64 = 2.0;
/// Held-out GPU compute buffer at full offload (`-ngl 99`): the bound tests/it/llama_cpp_measured_cuda.rs asserts
/// on every family (10 % or 16 MiB).
const HELD_GPU_COMPUTE_REL: f64 = 0.10;

#[test]
fn compute_constants_fitted_on_some_families_hold_on_the_others() {
    let (specs, machines, all, _tmp) = load();
    // The search weighs `ComputeTerms::buffers`; the estimate must be the same function.
    for r in &all {
        let e = estimate(&specs[r.spec], &r.params, &machines[r.machine]).unwrap();
        assert_eq!(
            r.terms.buffers(&COMPUTE_CONSTANTS).unwrap(),
            e.devices
                .iter()
                .map(|d| d.compute_bytes)
                .collect::<Vec<_>>(),
            "{}",
            r.label
        );
    }
    let (fit, held): (Vec<&Row>, Vec<&Row>) = all
        .iter()
        .partition(|r| FIT_FAMILIES.contains(&r.family.as_str()));
    let held_families: BTreeSet<&str> = held.iter().map(|r| r.family.as_str()).collect();
    eprintln!(
        "fit on {FIT_FAMILIES:?}: {} CPU rows; held out {held_families:?}: {} rows",
        fit.len(),
        held.len()
    );
    assert!(
        held_families.len() >= 3 && held.len() >= 300,
        "too little held out"
    );

    let (mut best, mut argmin, mut nodes) = (Score::WORST, Vec::new(), 0);
    let all_open: Vec<usize> = (0..fit.len()).collect();
    search(
        &fit,
        &all_open,
        &mut Vec::new(),
        &mut best,
        &mut argmin,
        &mut nodes,
    );
    eprintln!(
        "grid 0..={GRID_MAX}, {nodes} nodes searched: {} of {} fit rows within the engine's rounding, mean relative error {:.3} %; minimisers {argmin:?}",
        best.exact,
        fit.len(),
        best.mean_rel * 100.0
    );
    // Every constant is identified: moving any one by 1 either way loses rows that matched exactly.
    let committed = as_array(&COMPUTE_CONSTANTS);
    for (i, name) in NAMES.iter().enumerate() {
        let lost: Vec<String> = [committed[i].wrapping_sub(1), committed[i] + 1]
            .into_iter()
            .filter(|&v| v <= GRID_MAX)
            .map(|v| {
                let mut c = committed;
                c[i] = v;
                let s = score(&fit, &c);
                format!("{v}: {} exact, {:.3} %", s.exact, s.mean_rel * 100.0)
            })
            .collect();
        eprintln!(
            "  {name} = {} (neighbours {})",
            committed[i],
            lost.join("; ")
        );
    }
    assert_eq!(
        argmin,
        vec![committed],
        "the fit part alone should give the committed constants"
    );
    let fitted = constants(argmin[0]);

    // Held out, compute buffer per device (the host: these are CPU-only runs), through the whole estimate.
    let (mut compute, mut total) = (Errors::default(), Errors::default());
    let mut in_sample = Errors::default();
    let mut failures = Vec::new();
    for (rows, is_held) in [(&held, true), (&fit, false)] {
        for r in rows.iter() {
            let e =
                estimate_with(&specs[r.spec], &r.params, &machines[r.machine], &fitted).unwrap();
            let d = &e.devices[0];
            let ours = d.compute_bytes as f64;
            if !is_held {
                in_sample.see(ours, r.engine, &r.label);
                continue;
            }
            compute.see(ours, r.engine, &r.label);
            if (ours - r.engine).abs()
                > (r.engine * HELD_COMPUTE_MAX_REL).max(HELD_COMPUTE_ABS_MIB * MIB)
            {
                failures.push(format!(
                    "{}: compute {:.2} MiB, engine {:.2}",
                    r.label,
                    ours / MIB,
                    r.engine / MIB
                ));
            }
            // The engine's total: weights from the breakdown (whole MiB), KV, output and compute lines.
            let bd = &r.row["breakdown"];
            let weights = bd["Host"]["model"].as_u64().unwrap()
                + bd.get("CPU_REPACK")
                    .map_or(0, |x| x["model"].as_u64().unwrap());
            let kv: f64 = r.row["kv"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["size_mib"].as_str().unwrap().parse::<f64>().unwrap())
                .sum();
            let output = rows::buffer_mib(&r.row, "CPU output buffer").unwrap();
            let engine_total = (weights as f64 + kv + output) * MIB + r.engine;
            let ours_total = d.total_bytes as f64;
            total.see(ours_total, engine_total, &r.label);
            let rel = (ours_total - engine_total) / engine_total;
            let slack = WEIGHTS_SLACK_MIB * MIB / engine_total;
            if rel > HELD_TOTAL_REL + slack || rel < -(HELD_TOTAL_UNDER_REL + slack) {
                failures.push(format!(
                    "{}: total {:.1} MiB, engine {:.1}",
                    r.label,
                    ours_total / MIB,
                    engine_total / MIB
                ));
            }
        }
    }
    eprintln!("{}", in_sample.report("fit part, cpu compute buffer"));
    eprintln!("{}", compute.report("held out, cpu compute buffer"));
    eprintln!("{}", total.report("held out, whole estimate (cpu total)"));
    assert!(
        compute.mean_rel() <= HELD_COMPUTE_MEAN_REL,
        "{}",
        compute.report("held out compute")
    );
    assert!(
        failures.is_empty(),
        "held-out rows off:\n{}",
        failures.join("\n")
    );
}

/// The same constants on the CUDA build's rows of the held-out families at full offload (`-ngl 99`, KV on the
/// GPU, no expert override): per device, the GPU's compute buffer and the host's. The host's is reported only:
/// next to a GPU the model charges the host the CPU graph's inputs, a known gap (tests/it/llama_cpp_measured_cuda.rs).
#[test]
fn held_out_families_on_the_gpu_per_device() {
    let models = rows::read("models.json");
    let table = rows::read("measured-cuda-h100.json");
    let free_mib = table["engine"]["gpu_free_mib_alone"]
        .as_object()
        .unwrap()
        .values()
        .next()
        .unwrap()
        .as_u64()
        .unwrap();
    let machine = Machine {
        gpus: vec![GpuTarget {
            name: table["engine"]["gpus"][0]["name"]
                .as_str()
                .unwrap()
                .to_string(),
            free_bytes: free_mib << 20,
            overhead_bytes: 0,
        }],
        ..rows::cpu_machine(&table)
    };
    let tmp = tempfile::tempdir().unwrap();
    let mut specs: BTreeMap<String, ModelSpec> = BTreeMap::new();
    let (mut gpu, mut host) = (Errors::default(), Errors::default());
    let mut failures = Vec::new();
    for row in table["rows"].as_array().unwrap() {
        let id = row["model"].as_str().unwrap().to_string();
        let m = &models["models"][&id];
        let family = m["shape"].as_str().unwrap();
        let config = &row["config"];
        if FIT_FAMILIES.contains(&family)
            || config["-ngl"] != "99"
            || config.get("-nkvo").is_some()
            || config.get("-ncmoe").is_some()
        {
            continue;
        }
        let spec = specs
            .entry(id.clone())
            .or_insert_with(|| common::build(m, &tmp.path().join(format!("{id}.gguf"))));
        let e = estimate_with(spec, &rows::params(row), &machine, &COMPUTE_CONSTANTS).unwrap();
        let label = rows::label(row);
        let engine_gpu = rows::buffer_mib(row, "CUDA0 compute buffer").unwrap() * MIB;
        let engine_host = ["CUDA_Host compute buffer", "CPU compute buffer"]
            .iter()
            .find_map(|n| rows::buffer_mib(row, n))
            .unwrap()
            * MIB;
        let ours_gpu = e.devices[1].compute_bytes as f64;
        gpu.see(ours_gpu, engine_gpu, &label);
        host.see(e.devices[0].compute_bytes as f64, engine_host, &label);
        if (ours_gpu - engine_gpu).abs()
            > (engine_gpu * HELD_GPU_COMPUTE_REL).max(HELD_COMPUTE_ABS_MIB * MIB)
        {
            failures.push(format!(
                "{label}: gpu compute {:.2} MiB, engine {:.2}",
                ours_gpu / MIB,
                engine_gpu / MIB
            ));
        }
    }
    eprintln!(
        "{}",
        gpu.report("held out, cuda:0 compute buffer (-ngl 99)")
    );
    eprintln!(
        "{}",
        host.report("held out, host compute buffer next to the GPU (reported only)")
    );
    assert!(gpu.n >= 100, "only {} held-out GPU rows", gpu.n);
    assert!(
        failures.is_empty(),
        "held-out GPU rows off:\n{}",
        failures.join("\n")
    );
}
