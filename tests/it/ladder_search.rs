//! The ladder search finds what brute force finds. For every fixture machine, synthetic 8B and 70B model and
//! latency or balanced workload (no knee follow-ups), every rung of every ladder is fitted (the size knob by
//! the same rule: fixed, or the largest step that fits) and scored; the best fitting score of that exhaustive
//! walk must equal the best of `plan::search`, and when nothing fits anywhere, the search must fit nothing
//! either. A search that skipped the winning rung, or bisected a ladder that is not monotone, fails here
//! naming the case.

use crate::common;
use common::{inventory, profiles, synth};

use optimizer::evidence::Evidence;
use optimizer::fleet;
use optimizer::plan::{self, Overrides};
use optimizer::profile::Objective;
use optimizer::runtime::llama_cpp::LlamaCpp;
use optimizer::runtime::{Request, Runtime, Size};
use optimizer_testkit::gguf_builder::LlamaShape;

#[test]
fn the_ladder_search_finds_the_exhaustive_optimum() {
    let dir = tempfile::tempdir().unwrap();
    let set = profiles();
    let models = [
        synth(dir.path(), "m8.gguf", LlamaShape::LLAMA3_8B).1,
        synth(dir.path(), "m70.gguf", LlamaShape::LLAMA3_70B).1,
    ];
    let mut compared = 0;
    for inv_name in [
        "laptop-rtx4060.yaml",
        "gtx1650-4gb.yaml",
        "workstation-2x3090.yaml",
        "cloud-8xh100.yaml",
        "cpu-server.yaml",
        "apple-m2-max.yaml",
    ] {
        let inv = inventory(inv_name);
        for model in &models {
            for w in set.workloads.iter().map(|e| &e.value) {
                if w.objective == Objective::Throughput
                    || w.mode != optimizer::profile::Mode::Inference
                {
                    continue;
                }
                let mut fleet =
                    fleet::build(&inv, &set, plan::runtime_for(model, w, &Default::default()))
                        .unwrap();
                fleet.apply(&Evidence::default());
                let overrides = Overrides::default();
                let req = Request {
                    model,
                    model_path: "m.gguf",
                    fleet: &fleet,
                    profiles: &set,
                    workload: w,
                    objective: w.objective,
                    overrides: &overrides,
                };
                let rt = LlamaCpp::new(&req).unwrap();
                let score = |e: &optimizer::runtime::Eval| {
                    plan::explain::score(w.objective, w, &e.prediction)
                };
                let found = plan::search::search(&rt, &score).unwrap();
                let best_found = found
                    .iter()
                    .filter(|c| c.fits())
                    .map(|c| c.score)
                    .fold(f64::INFINITY, f64::min);
                // Brute force: every rung, the size fitted the same way.
                let mut best_all = f64::INFINITY;
                for ladder in rt.ladders() {
                    for p in &ladder {
                        let e = match rt.size() {
                            Size::Fixed(s) => rt.evaluate(p, s).unwrap(),
                            Size::LargestFit { floor, max, step } => {
                                let mut last = rt.evaluate(p, floor).unwrap();
                                if last.fits() {
                                    let mut s = (floor / step + 1) * step;
                                    while s <= max {
                                        let e = rt.evaluate(p, s).unwrap();
                                        if !e.fits() {
                                            break;
                                        }
                                        last = e;
                                        s += step;
                                    }
                                }
                                last
                            }
                        };
                        if e.fits() {
                            best_all = best_all.min(score(&e));
                        }
                    }
                }
                let case = format!("{inv_name} {} {}", model.architecture, w.id);
                assert_eq!(
                    best_found.is_finite(),
                    best_all.is_finite(),
                    "{case}: search fits {best_found}, brute force {best_all}"
                );
                if best_all.is_finite() {
                    assert!(
                        (best_found - best_all).abs() <= 1e-9 * best_all.abs(),
                        "{case}: search best {best_found}, brute force best {best_all}"
                    );
                }
                compared += 1;
            }
        }
    }
    assert!(compared >= 30, "only {compared} cases compared");
}
