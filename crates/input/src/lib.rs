//! The lowest layer of `optimizer`: reading what a user hands us without trusting it. [`input`] opens regular
//! files only, with a bound on what is read; [`yaml`] parses YAML (and JSON, a subset) within budgets on depth,
//! aliases, nodes and bytes that are checked before anything is built, and writes YAML that YAML 1.1 readers read back unchanged.
//!
//! Depends on no other crate of the workspace (docs/architecture.md).

pub mod input;
pub mod yaml;
