//! The machine `optimizer` runs on: the live probe (CPU, cgroup limits, NVML and the CUDA driver, sysfs,
//! macOS) that fills an `Inventory`, and `calibrate`: micro-benchmarks, engine runners, importers, server
//! benchmarking and feedback, written to the store. The only layer that touches devices and the clock.
//!
//! Depends on `optimizer-model`, `optimizer-memory`, `optimizer-core` and `optimizer-store`.

pub mod calibrate;
pub mod probe;
