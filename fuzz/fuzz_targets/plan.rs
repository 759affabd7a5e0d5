//! The whole planning chain on hostile models: any byte string read as a GGUF model, estimated by the llama.cpp
//! memory model under a few parameter sets and planned by `plan::resolve` on a fixture inventory with a
//! built-in workload, yields values or typed errors: never a panic, an arithmetic overflow (debug assertions
//! are on in fuzz builds), a hang or an unbounded allocation (libFuzzer's -rss_limit_mb and -timeout catch the
//! last two). The inventory and workload are picked from the input's bytes, so the corpus covers them all.
//!
//! Run (seeded with the fixture GGUFs): `mkdir -p corpus/plan && cp ../tests/fixtures/gguf/*.gguf
//! ../tests/fixtures/gguf/split/*.gguf corpus/plan/ && cargo fuzz run plan corpus/plan -- -max_total_time=600
//! -rss_limit_mb=2048 -max_len=2000000`. First run (issue 8): 431,229 executions in 661 s, no crash, peak RSS
//! 732 MiB (most of it the 505 MiB in-memory corpus).
#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use optimizer::hardware::{self, GpuVendor, Inventory};
use optimizer::memory::llama_cpp::{self, FlashAttn, GpuTarget, Machine, Params};
use optimizer::model::GgmlType;
use optimizer::evidence::Evidence;
use optimizer::plan::{self, Inputs, Overrides};
use optimizer::profile::{self, ProfileSet};

struct Fixtures {
    inventories: Vec<Inventory>,
    profiles: ProfileSet,
}

fn fixtures() -> &'static Fixtures {
    static F: OnceLock<Fixtures> = OnceLock::new();
    F.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/inventories");
        let mut paths: Vec<_> = std::fs::read_dir(&dir)
            .expect("fixture inventories")
            .map(|e| e.expect("dir entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .collect();
        paths.sort();
        Fixtures {
            inventories: paths
                .iter()
                .map(|p| hardware::load_inventory(p).expect("fixture inventory loads"))
                .collect(),
            profiles: profile::load(&[]).expect("built-in profiles load"),
        }
    })
}

/// Parameter sets: the engine's defaults, a long multi-sequence context with a quantized cache, flash
/// attention off with the largest micro-batch, and the largest flags the engine accepts.
fn param_sets() -> [Params; 4] {
    [
        Params::default(),
        Params {
            n_ctx: 131_072,
            n_parallel: 4,
            type_k: GgmlType::Q8_0,
            type_v: GgmlType::Q8_0,
            flash_attn: FlashAttn::On,
            n_gpu_layers: 7,
            ..Params::default()
        },
        Params {
            n_ctx: 4096,
            n_batch: 4096,
            n_ubatch: 4096,
            flash_attn: FlashAttn::Off,
            swa_full: true,
            repack: false,
            ..Params::default()
        },
        Params {
            n_ctx: llama_cpp::MAX_CTX_FLAG,
            n_batch: llama_cpp::MAX_BATCH_FLAG,
            n_ubatch: llama_cpp::MAX_BATCH_FLAG,
            n_parallel: llama_cpp::MAX_SEQ,
            kv_unified: true,
            ..Params::default()
        },
    ]
}

fuzz_target!(|data: &[u8]| {
    let path = Path::new("fuzz.gguf");
    let Ok(spec) = optimizer::model::gguf::load_bytes(data, path) else {
        return;
    };
    let f = fixtures();
    let pick = data
        .iter()
        .fold(0usize, |a, &b| a.wrapping_mul(31).wrapping_add(usize::from(b)));
    let inv = &f.inventories[pick % f.inventories.len()];
    let machine = Machine {
        cpu_features: inv.cpu.features.clone(),
        gpus: inv
            .gpus
            .iter()
            .filter(|g| g.vendor == GpuVendor::Nvidia)
            .map(|g| GpuTarget {
                name: g.name.clone(),
                free_bytes: g.memory_free_bytes,
                overhead_bytes: 512 << 20,
            })
            .collect(),
    };
    for p in param_sets() {
        if let Ok(e) = llama_cpp::estimate(&spec, &p, &machine) {
            let sum = e
                .devices
                .iter()
                .try_fold(0u64, |a, d| a.checked_add(d.total_bytes));
            assert_eq!(sum, Some(e.total_bytes), "device totals add up");
            assert_eq!(e.devices.len(), machine.gpus.len() + 1);
            assert!(e.resolved.n_ctx >= e.resolved.n_ctx_seq);
            assert!(e.resolved.n_ubatch <= e.resolved.n_batch);
        }
    }
    let workloads = &f.profiles.workloads;
    let w = &workloads[(pick / 7) % workloads.len()].value;
    let overrides = [
        Overrides::default(),
        Overrides {
            context_length: Some(llama_cpp::MAX_CTX_FLAG),
            parallel: Some(llama_cpp::MAX_SEQ),
            ..Overrides::default()
        },
    ];
    for o in &overrides[..1 + pick % 2] {
        let _ = plan::resolve(&Inputs {
            model: &spec,
            model_path: "fuzz.gguf",
            inventory: inv,
            hardware_source: "inventory",
            profiles: &f.profiles,
            workload: w,
            evidence: &Evidence::default(),
            overrides: o,
        });
    }
});
