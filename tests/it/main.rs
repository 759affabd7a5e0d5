//! The integration tests, one binary: each file was its own test binary, each linking the whole workspace
//! (53 binaries, 9.8 GB of executables, two thirds of the build). Shared helpers are `common` and
//! `vllm_builder`; heavy fixtures are read once per process there. Run one file's tests with its module name:
//! `cargo test --test it resolve::`.

mod common;
mod vllm_builder;

mod architecture;
mod arith_bounds;
mod bench_server;
mod calibrate;
mod calibrate_accuracy;
mod cli;
mod cli_completions;
mod cli_store;
mod cli_table;
mod compute_buffer_holdout;
mod estimate;
mod estimate_sweep;
mod gguf_errors;
mod gguf_fixtures;
mod hardware;
mod hostile3_figures;
mod hostile3_importers;
mod hostile3_inputs;
mod hostile3_output;
mod hostile3_store;
mod hostile_input;
mod kubernetes_manifests;
mod ladder_search;
mod llama_bench_import;
mod llama_bench_runner;
mod llama_bench_speed;
mod llama_cpp_argv;
mod llama_cpp_argv_table;
mod llama_cpp_measured;
mod llama_cpp_measured_cuda;
mod llama_cpp_public_logs;
mod llama_cpp_quant_suggestion;
mod llama_cpp_server_start;
mod load_log_import;
mod measurements_manage;
mod observe;
mod peak_memory;
mod plans_run;
mod profiles_validate;
mod resolve;
mod resolve_bundle;
mod resolve_stable;
mod rulebook;
mod rules;
mod safetensors_reader;
mod schemas;
mod startup_builtin;
mod store;
mod torch_fixtures;
mod torch_launch;
mod torch_memory;
mod torch_resolve;
mod torch_speed;
mod vllm_fixtures;
mod vllm_memory;
mod vllm_public_logs;
mod vllm_resolve;
mod vllm_speed;
