//! `resolve` end to end in process: live probe, profiles (embedded, validated), store (open + lookup), model
//! header, plan, YAML. Target (issue 5): under 50 ms on an 8B-class GGUF. Peer in the same run: `model::load`
//! alone, the floor any plan pays to read the model.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use optimizer::model::{
    self,
    gguf_builder::{LlamaShape, synthetic_llama, write_sparse},
};
use optimizer::plan::{self, Inputs, Overrides};
use optimizer::{hardware, profile, store};

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("llama3-8b.gguf");
    write_sparse(&synthetic_llama(LlamaShape::LLAMA3_8B), &path).expect("model");
    let db = dir.path().join("optimizer.db");
    let label = path.display().to_string();
    let mut g = c.benchmark_group("resolve_8b");
    g.bench_function("end_to_end", |b| {
        b.iter(|| {
            let inv = hardware::probe_live();
            let set = profile::load(&[]).expect("profiles");
            let s = store::Store::open(&db).expect("store");
            let spec = model::load(&path).expect("model");
            let (measurements, _) = s.measurements(&[], &spec.fingerprint).expect("lookup");
            let w = &set.workload("chat").expect("chat").value;
            let d = plan::resolve(&Inputs {
                model: &spec,
                model_path: &label,
                inventory: &inv,
                hardware_source: "probe",
                profiles: &set,
                workload: w,
                measurements: &measurements,
                overrides: &Overrides::default(),
            })
            .expect("plan");
            black_box(serde_yaml_ng::to_string(&d).expect("yaml"))
        })
    });
    g.bench_function("peer_model_load", |b| {
        b.iter(|| black_box(model::load(&path).expect("model")))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
