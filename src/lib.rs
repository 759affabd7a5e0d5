//! `optimizer`: decides how to run a machine-learning model on the hardware at hand, and says why.
//!
//! The library holds every capability; `src/main.rs` only calls [`cli::main`]. Module plan and data flow:
//! `ARCHITECTURE.md` of the project (pure core: `model`; edges: `cli`).

pub mod app;
pub mod calibrate;
pub mod cli;
pub mod emit;
pub mod evidence;
pub mod fleet;
pub mod hardware;
pub mod input;
pub mod memory;
pub mod model;
pub mod perf;
pub mod plan;
pub mod profile;
pub mod runtime;
pub mod schema;
pub mod store;
pub mod yaml;
