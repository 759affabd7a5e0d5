//! The test kit of `optimizer`: what tests, benchmarks, examples and fuzz seeds build their inputs with, kept
//! out of the crates that ship. [`gguf_builder`] writes GGUF headers with exact control over every field,
//! invalid ones included, and synthetic Llama-shaped models of any size (a sparse file: the data section is a
//! hole).
//!
//! Depends on `optimizer-model` only (for the GGUF value types it writes).

pub mod gguf_builder;
