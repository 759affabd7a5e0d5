//! Planning cost in process (issue 9): the planner alone (model read, profiles loaded once; no probe, no
//! store), for llama.cpp plans on N identical H100 SXM GPUs.
//!
//! Targets: any single-node plan up to 8 GPUs under 20 ms; a 64-GPU cluster (8 nodes x 8 H100) parsed and
//! planned under 250 ms and 64 MiB. Before criterion runs, a table of the median cost against the GPU count
//! (1 to 64 on one node, and the 8 x 8 cluster) is printed, with the peak heap the plan allocated, measured by a
//! counting allocator in this bench. Peer in the same run: `model::load` of the same file, the floor every plan
//! pays.
//!
//! `cargo bench --bench planning` (add `-- --quick` for a short run).

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use optimizer::app::{self, Hardware, ResolveRequest, Sources};
use optimizer::evidence::Evidence;
use optimizer::hardware::{FixtureProbe, Inventory, Probe};
use optimizer::model::{self, ModelSpec};
use optimizer::plan::{self, Inputs, Overrides};
use optimizer::profile::{self, ProfileSet};
use optimizer_testkit::gguf_builder::{LlamaShape, synthetic_llama, write_sparse};

/// Counts live heap bytes and their peak, so the table can report what a plan allocates.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = LIVE.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The host of the 8x H100 fixture with `n` H100 SXM GPUs from the profile.
fn node(set: &ProfileSet, n: u32) -> Inventory {
    let mut inv = FixtureProbe(root().join("tests/fixtures/inventories/cloud-8xh100.yaml"))
        .inventory()
        .expect("inventory");
    let p = &set.hardware("h100-sxm").expect("h100-sxm").value;
    let memory = inv.memory.total_bytes;
    inv.gpus = (0..n)
        .map(|i| profile::matching::gpu_from_profile(p, i, memory).expect("gpu"))
        .collect();
    inv
}

fn plan_once(spec: &ModelSpec, inv: &Inventory, set: &ProfileSet, workload: &str) {
    let w = &set.workload(workload).expect("workload").value;
    let d = plan::resolve(&Inputs {
        model: spec,
        model_path: "model.gguf",
        inventory: inv,
        hardware_source: "profile",
        profiles: set,
        workload: w,
        evidence: &Evidence::default(),
        overrides: &Overrides::default(),
    })
    .expect("plan");
    black_box(d);
}

/// Median wall time and peak heap of `f` over `runs` runs.
fn measure(runs: usize, mut f: impl FnMut()) -> (Duration, usize) {
    let mut times = Vec::with_capacity(runs);
    let mut peak = 0;
    for _ in 0..runs {
        let base = LIVE.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        let t = Instant::now();
        f();
        times.push(t.elapsed());
        peak = peak.max(PEAK.load(Ordering::Relaxed).saturating_sub(base));
    }
    times.sort();
    (times[runs / 2], peak)
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let set = profile::load(&[]).expect("profiles");
    let mut models = Vec::new();
    for (name, shape) in [
        ("llama3-8b", LlamaShape::LLAMA3_8B),
        ("llama3-70b", LlamaShape::LLAMA3_70B),
    ] {
        let path = dir.path().join(format!("{name}.gguf"));
        write_sparse(&synthetic_llama(shape), &path).expect("model");
        models.push((name, path.clone(), model::load(&path).expect("model")));
    }
    let cluster = root().join("tests/fixtures/clusters/h100-8x8.yaml");

    println!("\nplanning cost (median of 9, release): llama.cpp on N x H100 SXM, one node");
    println!(
        "{:<12} {:<16} {:>5} {:>10} {:>12}",
        "model", "workload", "GPUs", "ms", "peak MiB"
    );
    for (name, _, spec) in &models {
        for workload in ["chat", "batch-inference", "long-context"] {
            for n in [0u32, 1, 2, 4, 8, 16, 32, 64] {
                let inv = node(&set, n);
                let (t, peak) = measure(9, || plan_once(spec, &inv, &set, workload));
                println!(
                    "{name:<12} {workload:<16} {n:>5} {:>10.2} {:>12.2}",
                    t.as_secs_f64() * 1e3,
                    peak as f64 / f64::from(1u32 << 20)
                );
            }
        }
    }
    // The cluster: parsed from its description and planned through the same pipeline as `resolve --cluster`.
    let sources = Sources::new(None, Vec::new(), Some(dir.path().join("optimizer.db")));
    // The same node type 125 times over: 1,000 GPUs.
    let big = dir.path().join("h100-125x8.yaml");
    std::fs::write(
        &big,
        std::fs::read_to_string(&cluster)
            .expect("cluster")
            .replacen("count: 8", "count: 125", 1),
    )
    .expect("cluster");
    for (file, nodes) in [(&cluster, 8u32), (&big, 125)] {
        for (name, path, _) in &models {
            let req = ResolveRequest {
                stable: false,
                model: path.clone(),
                workload: "batch-inference".into(),
                hardware: Hardware {
                    gpus: None,
                    cluster: Some(file.clone()),
                    host: Default::default(),
                    nodes: None,
                },
                overrides: Overrides::default(),
                sla: Default::default(),
            };
            let (t, peak) = measure(9, || {
                black_box(app::resolve(&sources.clone(), &req).expect("cluster plan"));
            });
            println!(
                "{name:<12} {:<16} {:>5} {:>10.2} {:>12.2}   ({nodes} nodes x 8, parsed + model read + planned)",
                "batch-inference",
                nodes * 8,
                t.as_secs_f64() * 1e3,
                peak as f64 / f64::from(1u32 << 20)
            );
        }
    }

    let mut g = c.benchmark_group("planning");
    let (_, path70, spec70) = &models[1];
    for n in [1u32, 8] {
        let inv = node(&set, n);
        for workload in ["chat", "batch-inference"] {
            g.bench_function(format!("70b_{workload}_{n}xh100"), |b| {
                b.iter(|| plan_once(spec70, &inv, &set, workload))
            });
        }
    }
    let req = ResolveRequest {
        stable: false,
        model: path70.clone(),
        workload: "batch-inference".into(),
        hardware: Hardware {
            gpus: None,
            cluster: Some(cluster.clone()),
            host: Default::default(),
            nodes: None,
        },
        overrides: Overrides::default(),
        sla: Default::default(),
    };
    g.bench_function("70b_batch-inference_cluster_8x8", |b| {
        b.iter(|| black_box(app::resolve(&sources.clone(), &req).expect("cluster plan")))
    });
    g.bench_function("peer_model_load_70b", |b| {
        b.iter(|| black_box(model::load(path70).expect("model")))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
