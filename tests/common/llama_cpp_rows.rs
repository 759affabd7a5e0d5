//! Reading the measured llama.cpp tables (tests/fixtures/llama-cpp/measured-*.json): a row's flags as
//! [`Params`], a table's CPU flags as a [`Machine`], the engine's 2-decimal MiB figures. Included by path
//! (`#[path = "common/llama_cpp_rows.rs"]`) so it needs no change to `tests/common/mod.rs`.

use std::path::{Path, PathBuf};

use optimizer::memory::llama_cpp::{CACHE_TYPES, FlashAttn, Machine, Params};
use optimizer::model::GgmlType;
use serde_json::Value;

/// Bytes in a MiB, the unit the engine prints.
pub const MIB: f64 = (1u64 << 20) as f64;

/// The fixture directory.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llama-cpp")
}

/// A fixture file, parsed.
pub fn read(name: &str) -> Value {
    let path = dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn cfg<'a>(row: &'a Value, flag: &str) -> Option<&'a str> {
    row["config"].get(flag).and_then(Value::as_str)
}

fn cfg_u32(row: &Value, flag: &str, default: u32) -> u32 {
    cfg(row, flag).map_or(default, |s| s.parse().unwrap())
}

/// A `-ctk`/`-ctv` value as a cache type (f16 when absent).
pub fn cache_type(s: Option<&str>) -> GgmlType {
    let name = s.unwrap_or("f16");
    CACHE_TYPES
        .iter()
        .copied()
        .find(|t| t.name().eq_ignore_ascii_case(name))
        .unwrap_or_else(|| panic!("cache type {name}"))
}

/// The row's flags as the memory model's parameters (the engine's defaults where a flag is absent).
pub fn params(row: &Value) -> Params {
    let flag = |f: &str| row["config"].get(f).is_some();
    Params {
        n_ctx: cfg_u32(row, "-c", 0),
        n_batch: cfg_u32(row, "-b", 2048),
        n_ubatch: cfg_u32(row, "-ub", 512),
        n_parallel: cfg_u32(row, "-np", 1),
        kv_unified: flag("--kv-unified") || flag("-kvu"),
        type_k: cache_type(cfg(row, "-ctk")),
        type_v: cache_type(cfg(row, "-ctv")),
        flash_attn: match cfg(row, "-fa") {
            Some("on") => FlashAttn::On,
            Some("off") => FlashAttn::Off,
            _ => FlashAttn::Auto,
        },
        n_gpu_layers: cfg(row, "-ngl").map_or(-1, |s| s.parse().unwrap()),
        no_kv_offload: flag("-nkvo"),
        n_cpu_moe: cfg_u32(row, "-ncmoe", 0),
        mmap: !flag("--no-mmap"),
        swa_full: flag("--swa-full"),
        repack: !flag("--no-repack") && !flag("-nr"),
        ..Params::default()
    }
}

/// The CPU features the repack rules read, from a table's `engine.cpu_flags`; no GPU.
pub fn cpu_machine(table: &Value) -> Machine {
    Machine {
        cpu_features: table["engine"]["cpu_flags"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap().to_string())
            .filter(|f| ["avx2", "avx512f"].contains(&f.as_str()))
            .collect(),
        gpus: vec![],
    }
}

/// A 2-decimal MiB buffer line of the row, if the engine printed it.
pub fn buffer_mib(row: &Value, name: &str) -> Option<f64> {
    row["buffers"]
        .get(name)
        .map(|v| v.as_str().unwrap().parse().unwrap())
}

/// The row's `{model} {config}` label.
pub fn label(row: &Value) -> String {
    format!(
        "{} {}",
        row["model"].as_str().unwrap(),
        serde_json::to_string(&row["config"]).unwrap()
    )
}
