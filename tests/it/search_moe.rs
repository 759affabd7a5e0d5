//! Partial MoE expert offload (issue 25, item 1): a mixture-of-experts model whose experts do not all fit on the
//! GPUs keeps the experts of only the first N layers on the host (`--n-cpu-moe N`, llama.cpp's `-ncmoe`: the
//! first N layers' `ffn_(up|down|gate)_exps` on the CPU), with every layer's attention and dense weights on the
//! GPUs, instead of all experts or none. Mixtral 8x7B Q4_K_M (26 GiB) on a 16 GiB RTX 4080 is the case: every
//! layer does not fit, and every expert on the host leaves most of the GPU idle.

use crate::common::{self, fixture, inventory, plan, profiles};

use optimizer::emit::{Deployment, Status, Strategy};
use optimizer::evidence::Evidence;
use optimizer::fleet;
use optimizer::model::ModelSpec;
use optimizer::plan::{self, Overrides};
use optimizer::runtime::llama_cpp::{LlamaCpp, Point, drivable_gpus};
use optimizer::runtime::{Request, Runtime};

fn mixtral(dir: &std::path::Path) -> ModelSpec {
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("llama-cpp/models.json")).unwrap())
            .unwrap();
    common::build(
        &json["models"]["mixtral-8x7b-q4_k_m"],
        &dir.join("mixtral.gguf"),
    )
}

/// The plan's point, read back from its settings and memory devices (host first, then the GPUs in layer order).
fn point_of(d: &Deployment, gpus: &[&optimizer::fleet::FleetGpu]) -> (Point, u32) {
    let s = common::llama(d);
    let used = d.memory.devices[1..]
        .iter()
        .map(|m| {
            gpus.iter()
                .position(|g| g.id.to_string() == m.device)
                .unwrap()
        })
        .collect();
    (
        Point {
            strategy: s.strategy,
            gpus: used,
            ngl: s.gpu_layers,
            cpu_moe: s.n_cpu_moe,
            kv: common::cache_type(Some(&s.cache_type_k)),
            ubatch: s.ubatch_size,
            parallel: s.parallel,
        },
        s.context_per_sequence,
    )
}

/// Mixtral on an RTX 4080, every serving preset: the plan keeps the experts of only some layers on the host,
/// says so in its argv, and scores better than the same point with every expert on the host.
#[test]
fn mixtral_on_a_16_gib_gpu_offloads_only_some_experts() {
    let dir = tempfile::tempdir().unwrap();
    let set = profiles();
    let inv = inventory("desktop-rtx4080.yaml");
    let model = mixtral(dir.path());
    let n_layer = model.hparams.block_count.unwrap() as u32;
    for preset in [
        "inference",
        "code-generation",
        "long-context",
        "batch-inference",
    ] {
        let d = plan(&model, "m.gguf", &inv, &set, preset, &Overrides::default()).unwrap();
        assert_ne!(d.status, Status::NoFit, "{preset}");
        let s = common::llama(&d);
        assert_eq!(s.strategy, Strategy::MoeCpu, "{preset}: {s:?}");
        assert!(
            (1..n_layer).contains(&s.n_cpu_moe),
            "{preset}: --n-cpu-moe {} is not partial (the model has {n_layer} layers)",
            s.n_cpu_moe
        );
        let argv = &common::artifact(&d, "llama-server").argv;
        let at = argv.iter().position(|a| a == "--n-cpu-moe").unwrap();
        assert_eq!(argv[at + 1], s.n_cpu_moe.to_string(), "{preset}");

        // The same point with every expert on the host, scored by the same models.
        let w = &set.workload(preset).unwrap().value;
        let overrides = Overrides::default();
        let mut fleet = fleet::build(&inv, &set, plan::runtime_for(&model, w, &overrides)).unwrap();
        fleet.apply(&Evidence::default());
        let req = Request {
            model: &model,
            model_path: "m.gguf",
            fleet: &fleet,
            profiles: &set,
            workload: w,
            objective: w.objective,
            overrides: &overrides,
        };
        let rt = LlamaCpp::new(&req).unwrap();
        let (gpus, _) = drivable_gpus(&fleet);
        let (p, size) = point_of(&d, &gpus);
        let score = |p: &Point| {
            let e = rt.evaluate(p, size).unwrap();
            (
                plan::explain::score(w.objective, w, &e.prediction),
                e.fits(),
            )
        };
        let (partial, fits) = score(&p);
        assert!(fits, "{preset}: the plan's point does not fit");
        let (all_experts, _) = score(&Point {
            cpu_moe: n_layer,
            ..p.clone()
        });
        assert!(
            partial < all_experts,
            "{preset}: --n-cpu-moe {} scores {partial:.3}, every expert on the host {all_experts:.3}",
            s.n_cpu_moe
        );
    }
}

/// Timing of the Mixtral plans (not a check): `cargo test --test it search_moe::timing -- --ignored --nocapture`.
#[test]
#[ignore]
fn timing() {
    let dir = tempfile::tempdir().unwrap();
    let set = profiles();
    let model = mixtral(dir.path());
    for machine in [
        "desktop-rtx4080.yaml",
        "amd-radeon.yaml",
        "workstation-2x3090.yaml",
    ] {
        let inv = inventory(machine);
        for preset in ["inference", "long-context", "batch-inference"] {
            let runs = 5;
            let t = std::time::Instant::now();
            for _ in 0..runs {
                let _ = plan(&model, "m.gguf", &inv, &set, preset, &Overrides::default());
            }
            eprintln!(
                "{machine} {preset}: {:.1} ms per plan",
                t.elapsed().as_secs_f64() * 1e3 / f64::from(runs)
            );
        }
    }
}
