//! `optimizer resolve`: the main job. Reads the model, the machine (probe, inventory or a profile), the profiles
//! and the workload preset, plans, and writes the deployment document (YAML by default) to stdout or, atomically,
//! to `-o FILE`. Exit code 3 when nothing fits; the document then explains the nearest candidate.

use std::io::Write as _;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::{Common, Failure, OutputFormat, exit, render, write_stdout};
use crate::app::{Hardware, ResolveRequest};
use crate::emit::{Deployment, Status};
use crate::plan::Overrides;
use crate::profile::Objective;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RawObjective {
    Latency,
    Throughput,
    Balanced,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RawRuntime {
    #[value(name = "llama.cpp")]
    LlamaCpp,
    Vllm,
    Torch,
}

#[derive(Debug, Args)]
pub struct RawResolve {
    /// The model: a .gguf (any shard of a split model), or a safetensors checkpoint (its directory with
    /// config.json, its *.safetensors.index.json, or a single .safetensors file).
    #[arg(short = 'm', long)]
    model: PathBuf,
    /// Workload preset id (`optimizer profiles list`): inference, chat, code-generation, batch-inference,
    /// long-context, embedding.
    #[arg(short = 'w', long, default_value = "inference")]
    workload: String,
    /// Plan for profiled GPUs instead of this machine's: ID or Nx:ID (e.g. a100-80gb-sxm, 2x:rtx-3090). The
    /// CPU and RAM stay this machine's (or --inventory's).
    #[arg(long)]
    hardware: Option<String>,
    /// Plan for a cluster description (`optimizer schema cluster`) instead of this machine: its node type,
    /// one replica per node.
    #[arg(long, conflicts_with = "hardware")]
    cluster: Option<PathBuf>,
    /// Pin the context per sequence: the tokens each conversation (server slot) can hold. The emitted
    /// llama-server `-c` is this times the sequences. Everything else is re-optimised around it.
    #[arg(short = 'c', long = "ctx-size")]
    ctx_size: Option<u32>,
    /// Pin the GPU layers (-ngl).
    #[arg(long = "n-gpu-layers")]
    n_gpu_layers: Option<u32>,
    /// Pin the parallel sequences (llama-server slots), at least 1.
    #[arg(long)]
    parallel: Option<u32>,
    /// The engine to plan for: llama.cpp (GGUF) or vllm (safetensors) to serve, torch to train. By default
    /// training and fine-tuning workloads go to torch and serving workloads follow the model's format.
    #[arg(long, value_enum)]
    runtime: Option<RawRuntime>,
    /// Pin vLLM's tensor-parallel size (GPUs one replica splits every layer over).
    #[arg(long = "tensor-parallel")]
    tensor_parallel: Option<u32>,
    /// Override the workload's objective.
    #[arg(long, value_enum)]
    objective: Option<RawObjective>,
    /// Explain the decision in words on stderr.
    #[arg(long)]
    explain: bool,
    /// Write the document to FILE atomically instead of stdout.
    #[arg(short = 'o', long = "output")]
    output: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = OutputFormat::Yaml)]
    format: OutputFormat,
}

#[derive(Debug)]
pub struct Settings {
    request: ResolveRequest,
    explain: bool,
    output: Option<PathBuf>,
    format: OutputFormat,
}

pub fn settle(raw: RawResolve) -> Result<Settings, Failure> {
    let hardware = match raw.hardware {
        None => None,
        Some(h) => Some(super::parse_hardware(&h)?),
    };
    if raw.format == OutputFormat::Table {
        return Err(Failure::new(
            exit::USAGE,
            anyhow::anyhow!("resolve writes a document: --format yaml or json"),
        ));
    }
    Ok(Settings {
        request: ResolveRequest {
            model: raw.model,
            workload: raw.workload,
            hardware: Hardware {
                gpus: hardware,
                cluster: raw.cluster,
            },
            overrides: Overrides {
                context_length: raw.ctx_size,
                gpu_layers: raw.n_gpu_layers,
                parallel: raw.parallel,
                objective: raw.objective.map(|o| match o {
                    RawObjective::Latency => Objective::Latency,
                    RawObjective::Throughput => Objective::Throughput,
                    RawObjective::Balanced => Objective::Balanced,
                }),
                runtime: raw.runtime.map(|r| match r {
                    RawRuntime::LlamaCpp => crate::profile::RuntimeId::LlamaCpp,
                    RawRuntime::Vllm => crate::profile::RuntimeId::Vllm,
                    RawRuntime::Torch => crate::profile::RuntimeId::Torch,
                }),
                tensor_parallel: raw.tensor_parallel,
            },
        },
        explain: raw.explain,
        output: raw.output,
        format: raw.format,
    })
}

fn explain(d: &Deployment) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let devices = d
        .topology
        .stages
        .iter()
        .map(|x| x.device.as_str())
        .collect::<Vec<_>>()
        .join("+");
    let verb = if d.status == Status::Fits {
        "Chose"
    } else {
        "Nothing fits; nearest"
    };
    let sequences = match &d.settings {
        crate::emit::Settings::LlamaCpp(s) => {
            let _ = writeln!(
                o,
                "{verb} for workload {} ({:?}): {} {:?} with -ngl {} on {devices}, {} tokens per sequence x {} sequences (-c {}), -ub {}, KV {}/{}, flash attention {}, {} threads{}.",
                d.workload.preset,
                d.workload.objective,
                d.runtime.id.name(),
                s.strategy,
                s.gpu_layers,
                s.context_per_sequence,
                s.parallel,
                s.context_length,
                s.ubatch_size,
                s.cache_type_k,
                s.cache_type_v,
                if s.flash_attention { "on" } else { "off" },
                s.threads,
                if d.topology.data_parallel > 1 {
                    format!(
                        ", one replica on each of {} nodes",
                        d.topology.data_parallel
                    )
                } else {
                    String::new()
                }
            );
            s.parallel
        }
        crate::emit::Settings::Vllm(s) => {
            let _ = writeln!(
                o,
                "{verb} for workload {} ({:?}): {} with tensor parallel {} on {devices}{}, --max-model-len {}, --max-num-seqs {}, --max-num-batched-tokens {}, KV cache {} ({} tokens per GPU, {:.2}x concurrency at the full length), {}{}.",
                d.workload.preset,
                d.workload.objective,
                d.runtime.id.name(),
                s.tensor_parallel_size,
                if s.replicas_per_node > 1 {
                    format!(", {} replicas per node", s.replicas_per_node)
                } else {
                    String::new()
                },
                s.max_model_len,
                s.max_num_seqs,
                s.max_num_batched_tokens,
                s.kv_cache_dtype,
                s.kv_cache_tokens,
                s.max_concurrency,
                if s.enforce_eager {
                    "eager (no CUDA graphs)"
                } else {
                    "CUDA graphs"
                },
                if d.topology.nodes > 1 {
                    format!(", on each of {} nodes", d.topology.nodes)
                } else {
                    String::new()
                }
            );
            s.max_num_seqs
        }
        crate::emit::Settings::Torch(s) => {
            let _ = writeln!(
                o,
                "{verb} for workload {}: {} training in {} on {} ({} process(es){}{}), micro-batch {} x {} tokens, {} accumulation step(s) to {} sequences per step, gradient checkpointing {}, {}, attention {} ({}).",
                d.workload.preset,
                s.method,
                s.precision,
                d.hardware
                    .gpus
                    .iter()
                    .filter(|g| g.used)
                    .map(|g| g.device.as_str())
                    .collect::<Vec<_>>()
                    .join("+"),
                s.data_parallel,
                match s.zero_stage {
                    0 => String::new(),
                    z => format!(", DeepSpeed ZeRO-{z}"),
                },
                if s.offload != "none" {
                    format!(", {} offloaded to the CPU", s.offload)
                } else {
                    String::new()
                },
                s.micro_batch,
                s.sequence_length,
                s.gradient_accumulation_steps,
                s.global_batch,
                if s.gradient_checkpointing {
                    "on"
                } else {
                    "off"
                },
                s.optimizer,
                s.attn_implementation,
                s.attention_kernel
            );
            if let Some(t) = &d.performance.training {
                let _ = writeln!(
                    o,
                    "Predicted ({:?}): {:.0} tokens/s trained, {:.1} s per optimizer step ({:.1} ms of it communication), {:.2e} FLOPs per token at efficiency {:.2}.",
                    d.performance.basis,
                    t.tokens_per_s,
                    t.step_time_ms / 1e3,
                    t.communication_ms,
                    t.flops_per_token,
                    t.efficiency
                );
            }
            0
        }
    };
    if d.performance.training.is_none() {
        let _ = writeln!(
            o,
            "Predicted ({:?}): {:.1} ms to first token, {:.1} ms per output token, {:.1} tokens/s decode over {} sequences, {:.0} tokens/s prefill.",
            d.performance.basis,
            d.performance.time_to_first_token_ms,
            d.performance.time_per_output_token_ms,
            d.performance.decode_tokens_per_s,
            sequences,
            d.performance.prefill_tokens_per_s
        );
    }
    for c in &d.performance.sla {
        let _ = writeln!(
            o,
            "SLA {}: {} (predicted {:.1} ms, target {:.1} ms, margin {:+.1} ms).",
            c.target.replace('_', " "),
            match c.status {
                crate::emit::SlaStatus::Met => "met",
                crate::emit::SlaStatus::Missed => "MISSED",
            },
            c.predicted_ms,
            c.target_ms,
            c.margin_ms
        );
    }
    for m in &d.memory.devices {
        let _ = writeln!(
            o,
            "Memory on {}: {:.2} GiB of {:.2} GiB free ({:.2} GiB reserved by the rules).",
            m.device,
            m.total_bytes as f64 / 1073741824.0,
            m.capacity_bytes as f64 / 1073741824.0,
            m.reserve_bytes as f64 / 1073741824.0
        );
    }
    for a in &d.alternatives {
        match &a.settings {
            crate::emit::Settings::LlamaCpp(s) => {
                let _ = writeln!(
                    o,
                    "Also considered {:?} -ngl {}, {} tokens x {} sequences: {}.",
                    s.strategy, s.gpu_layers, s.context_per_sequence, s.parallel, a.why
                );
            }
            crate::emit::Settings::Vllm(s) => {
                let _ = writeln!(
                    o,
                    "Also considered tensor parallel {}, KV {}, {} tokens x {} sequences{}: {}.",
                    s.tensor_parallel_size,
                    s.kv_cache_dtype,
                    s.max_model_len,
                    s.max_num_seqs,
                    if s.enforce_eager { ", eager" } else { "" },
                    a.why
                );
            }
            crate::emit::Settings::Torch(s) => {
                let _ = writeln!(
                    o,
                    "Also considered {} ZeRO-{} (offload {}), micro-batch {}, checkpointing {}: {}.",
                    s.method,
                    s.zero_stage,
                    s.offload,
                    s.micro_batch,
                    if s.gradient_checkpointing {
                        "on"
                    } else {
                        "off"
                    },
                    a.why
                );
            }
        }
    }
    for s in &d.suggestions {
        let _ = writeln!(o, "To fit: {s}.");
    }
    o
}

pub fn run(common: &Common, s: &Settings) -> Result<(), Failure> {
    let doc = crate::app::resolve(common, &s.request)?;
    if s.explain {
        let _ = std::io::stderr().write_all(explain(&doc).as_bytes());
    }
    let text = render(&doc, s.format)?;
    match &s.output {
        Some(p) => super::output::write_file(p, &text)?,
        None => write_stdout(&text)?,
    }
    if doc.status == Status::NoFit {
        return Err(Failure::new(
            exit::NO_FIT,
            anyhow::anyhow!(
                "no configuration fits; the document shows the nearest and what would make it fit"
            ),
        ));
    }
    Ok(())
}
