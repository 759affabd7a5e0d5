//! `recommend` in process (issue 29, item 5: "the whole ranking for a 70B model over the full profile set in
//! under 1 s"): Llama-3.1-70B-Instruct BF16 (the real header and config of tests/fixtures/vllm/models, the data a
//! sparse hole), chat at 10 req/s, every built-in price row planned through `resolve`'s planner and sized to the
//! rate, on the desktop-rtx4080 fixture inventory (the host of rows that state none) with an empty store. Peer
//! in the same run: `resolve` of the ranking's top option (its own model read and plan), so the ratio says what
//! the ranking costs in plans, independent of the machine.
//!
//! Before criterion runs, the median of a few whole runs of each and their ratio are printed.
//! `cargo bench --bench recommend` (add `-- --quick` for a short run).

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use optimizer::app::{self, Acquire, RecommendRequest, SettingOrigin, Sources};
use optimizer::plan::Overrides;
use serde_json::Value;

/// Runs of each measured for the printed medians (criterion's own samples follow).
const RUNS: usize = 7;
/// The day the built-in price files were read: the ages (not the timing) depend on it.
const AS_OF: &str = "2026-11-27";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The checkpoint as a directory: its `config.json` and one `model.safetensors` holding the fixture's header
/// (padded to 8 bytes as the safetensors writer pads it) and a sparse hole as long as the tensors' data.
fn checkpoint(dir: &Path) -> PathBuf {
    let src = root().join("tests/fixtures/vllm/models/Llama-3.1-70B-Instruct");
    let out = dir.join("Llama-3.1-70B-Instruct");
    std::fs::create_dir(&out).expect("model dir");
    std::fs::copy(src.join("config.json"), out.join("config.json")).expect("config");
    let header: Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("header.json")).expect("header"))
            .expect("header json");
    let data = header
        .as_object()
        .expect("header object")
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .map(|(_, v)| v["data_offsets"][1].as_u64().expect("offset"))
        .max()
        .expect("tensors");
    let mut bytes = serde_json::to_vec(&header).expect("header bytes");
    bytes.resize(bytes.len().div_ceil(8) * 8, b' ');
    let mut file = std::fs::File::create(out.join("model.safetensors")).expect("safetensors");
    use std::io::Write;
    file.write_all(&(bytes.len() as u64).to_le_bytes())
        .expect("write");
    file.write_all(&bytes).expect("write");
    file.set_len(8 + bytes.len() as u64 + data)
        .expect("sparse data");
    out
}

fn median(mut f: impl FnMut()) -> Duration {
    let mut t: Vec<Duration> = (0..RUNS)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed()
        })
        .collect();
    t.sort();
    t[RUNS / 2]
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let model = checkpoint(dir.path());
    // A fresh `Sources` per run: it keeps what one command loaded (profiles, inventory), and each run is a
    // whole command.
    let sources = Sources::new(
        Some((
            root().join("tests/fixtures/inventories/desktop-rtx4080.yaml"),
            SettingOrigin::Flag,
        )),
        Vec::new(),
        Some(dir.path().join("optimizer.db")),
    );
    let req = RecommendRequest {
        model: model.clone(),
        workload: "chat".into(),
        overrides: Overrides::default(),
        sla_ttft_ms: None,
        sla_tpot_ms: None,
        rate_req_per_s: Some(10.0),
        budget_usd_per_hour: None,
        acquire: Acquire::Rent,
        prices: Vec::new(),
        as_of: Some(AS_OF.into()),
        owned: false,
    };
    let first = app::recommend(&sources.clone(), &req).expect("recommend");
    let top = first.options.first().expect("an option").clone();
    let recommend = || {
        black_box(app::recommend(&sources.clone(), &req).expect("recommend"));
    };
    let resolve = || {
        black_box(app::resolve(&sources.clone(), &top.request).expect("resolve"));
    };
    let (r, p) = (median(recommend), median(resolve));
    println!(
        "\nrecommend, 70B BF16 chat at 10 req/s: {} priced offers, {} machines, {} plans; top option {} ({})",
        first.priced_offers, first.machines_planned, first.plans_run, top.id, top.resolve_flags
    );
    println!(
        "median of {RUNS}: recommend {:.1} ms, resolve of the top option {:.1} ms, ratio {:.1}",
        r.as_secs_f64() * 1e3,
        p.as_secs_f64() * 1e3,
        r.as_secs_f64() / p.as_secs_f64()
    );
    let mut g = c.benchmark_group("recommend_70b");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(8));
    g.bench_function("chat_rate10_all_offers", |b| b.iter(recommend));
    g.bench_function("peer_resolve_top_option", |b| b.iter(resolve));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
