//! Reading the measured llama.cpp tables (tests/fixtures/llama-cpp/measured-*.json): a row's flags as
//! `Params` (the harness's `engine_params`), a table's CPU flags as a [`Machine`], the engine's 2-decimal MiB
//! figures. Included by path (`#[path = "common/llama_cpp_rows.rs"]`) next to `mod common;`.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// Bytes in a MiB, the unit the engine prints.
pub(super) const MIB: f64 = (1u64 << 20) as f64;

/// The fixture directory.
pub(super) fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/llama-cpp")
}

/// A fixture file, parsed.
pub(super) fn read(name: &str) -> Value {
    let path = dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The row's flags as the memory model's parameters: the harness's one reader of engine command lines.
pub(super) use super::common::engine_params as params;

/// A table's CPU flags as a [`Machine`]: the harness's one reader of them.
pub(super) use super::common::cpu_machine;

/// A 2-decimal MiB buffer line of the row, if the engine printed it.
pub(super) fn buffer_mib(row: &Value, name: &str) -> Option<f64> {
    row["buffers"]
        .get(name)
        .map(|v| v.as_str().unwrap().parse().unwrap())
}

/// The row's `{model} {config}` label.
pub(super) fn label(row: &Value) -> String {
    format!(
        "{} {}",
        row["model"].as_str().unwrap(),
        serde_json::to_string(&row["config"]).unwrap()
    )
}
