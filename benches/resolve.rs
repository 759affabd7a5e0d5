//! `resolve` end to end in process through `app::resolve`, the CLI's pipeline: live probe, profiles, store (open +
//! lookup), model header, plan, YAML. Target (issue 5): under 50 ms on an 8B-class GGUF. Peer in the same run: `model::load`
//! alone, the floor any plan pays to read the model.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use optimizer::app::{self, Hardware, ResolveRequest, Sources};
use optimizer::model;
use optimizer::plan::Overrides;
use optimizer_testkit::gguf_builder::{LlamaShape, synthetic_llama, write_sparse};

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("llama3-8b.gguf");
    write_sparse(&synthetic_llama(LlamaShape::LLAMA3_8B), &path).expect("model");
    // The CLI's own pipeline: live probe, built-in profiles, the store, the model header, the plan, YAML.
    // A fresh clone per run: `Sources` keeps what one command loaded (profiles, the probe), and each run is a whole
    // command.
    let sources = Sources::new(None, Vec::new(), Some(dir.path().join("optimizer.db")));
    let req = ResolveRequest {
        stable: false,
        model: path.clone(),
        workload: "chat".into(),
        hardware: Hardware::default(),
        overrides: Overrides::default(),
        sla: Default::default(),
    };
    let mut g = c.benchmark_group("resolve_8b");
    g.bench_function("end_to_end", |b| {
        b.iter(|| {
            let d = app::resolve(&sources.clone(), &req).expect("plan");
            black_box(optimizer::yaml::to_string(&d).expect("yaml"))
        })
    });
    g.bench_function("peer_model_load", |b| {
        b.iter(|| black_box(model::load(&path).expect("model")))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
