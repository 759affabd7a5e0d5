//! The planning core of `optimizer`: hardware inventories as values, profiles and rule tables, the fleet of
//! devices a plan may use, the speed model, the engines (the `Runtime` seam), the generic search and the
//! deployment document. Pure: nothing here probes the machine, opens the store or reads the clock; files are
//! read only where a caller names them (profiles, inventories, clusters). See docs/architecture.md.
//!
//! Depends on `optimizer-input`, `optimizer-model` and `optimizer-memory` only.

pub mod emit;
pub mod evidence;
pub mod fleet;
pub mod hardware;
pub mod perf;
pub mod plan;
pub mod plausible;
pub mod profile;
pub mod runtime;
pub mod schema;
pub mod units;
