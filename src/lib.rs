//! `optimizer`: decides how to run a machine-learning model on the hardware at hand, and says why.
//!
//! This package is the top layer: `app` (one pipeline per command) and `cli` (flags, settings, output, exit
//! codes); `src/main.rs` only calls [`cli::main`]. The layers below are crates of the workspace
//! (docs/architecture.md), re-exported here under the module names the tests, benches and fuzz targets use:
//! `optimizer::model` is `optimizer_model`, `optimizer::plan` is `optimizer_core::plan`, and so on.

pub mod app;
pub mod cli;

pub use optimizer_core::{emit, evidence, fleet, perf, plan, profile, runtime, schema, units};
pub use optimizer_input::{input, yaml};
pub use optimizer_machine::{calibrate, probe};
pub use optimizer_memory as memory;
pub use optimizer_model as model;
pub use optimizer_store as store;

/// Inventories and clusters as values (`optimizer_core::hardware`) and the live probe that fills them
/// (`optimizer_machine::probe`), under the one name the commands use.
pub mod hardware {
    pub use optimizer_core::hardware::*;
    pub use optimizer_machine::probe::*;
}
