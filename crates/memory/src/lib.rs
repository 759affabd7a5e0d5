//! Memory models per runtime: per-device bytes of weights, KV cache, compute and output buffers, runtime
//! overhead. Pure: takes a [`optimizer_model::ModelSpec`] and parameter values, touches nothing.

pub mod llama_cpp;
pub mod torch;
pub mod vllm;
