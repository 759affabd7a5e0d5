//! `optimizer resolve`: the main job. Reads the model, the machine (probe, inventory or a profile), the profiles
//! and the workload preset, plans, and writes the deployment document (YAML by default) to stdout or, atomically,
//! to `-o FILE` (or a bundle, `-o DIR/`: `bundle.rs`). Exit code 3 when nothing fits; the document then explains
//! the nearest candidate, on stdout, and no `-o` target is written. Exit codes 5 (`sla-missed`) and 6
//! (`workload-unmet`) mark a plan that runs but does not do all the workload asks: it is written as usual.

use crate::units::gib;
use std::io::Write as _;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::recommend::positive;
use super::{Common, Failure, OutputFormat, exit, render, write_stdout};
use crate::app::{Hardware, ResolveRequest, SlaTargets};
use crate::emit::{Deployment, Status, Strategy};
use crate::evidence::Basis;
use crate::plan::Overrides;
use crate::profile::Objective;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum RawObjective {
    Latency,
    Throughput,
    Balanced,
}

/// vLLM's `--distributed-executor-backend` for a replica spanning nodes: `mp` (vLLM's own launcher) or `ray`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum RawExecutor {
    Mp,
    Ray,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum RawRuntime {
    #[value(name = "llama.cpp")]
    LlamaCpp,
    Vllm,
    Torch,
}

#[derive(Debug, Args)]
pub(super) struct RawResolve {
    /// The model: a .gguf (any shard of a split model), or a safetensors checkpoint (its directory with
    /// config.json, its *.safetensors.index.json, or a single .safetensors file).
    #[arg(short = 'm', long)]
    model: PathBuf,
    /// Workload preset id, in any case (`optimizer profiles list --kind workloads`): inference, chat,
    /// code-generation, batch-inference, long-context, embedding, fine-tune-lora, fine-tune-qlora, training.
    #[arg(short = 'w', long, default_value = "inference")]
    workload: String,
    /// Plan for profiled GPUs instead of this machine's: ID or Nx:ID (e.g. a100-80gb-sxm, 2x:rtx-3090), the id
    /// in any case or the product name `profiles list` shows ("RTX 4090"). The CPU and RAM are --inventory's,
    /// else this machine's, unless --host-memory/--host-cores say otherwise (the document warns which).
    #[arg(long)]
    hardware: Option<String>,
    /// The planned node's host memory, replacing the probed or inventory host's (and a `--hardware` node's):
    /// bytes, or a number with a unit, binary (KiB, MiB, GiB, TiB) or decimal (KB, MB, GB, TB): `512GiB`.
    #[arg(long = "host-memory")]
    host_memory: Option<String>,
    /// The planned node's physical CPU cores, replacing the probed or inventory host's (threads and the
    /// Kubernetes CPU request follow them).
    #[arg(long = "host-cores")]
    host_cores: Option<u32>,
    /// Plan for a cluster description (`optimizer schema cluster`) instead of this machine: its node type,
    /// one replica per node.
    #[arg(long, conflicts_with = "hardware")]
    cluster: Option<PathBuf>,
    /// Plan N identical nodes of the node profile --hardware names (`--hardware p5-48xlarge --nodes 2`), joined
    /// by the fabric that profile states, as --cluster plans a cluster file of them; a node profile that states
    /// no fabric is refused (describe the nodes with --cluster).
    #[arg(long, value_name = "N", requires = "hardware")]
    nodes: Option<u32>,
    /// Pin the context per sequence: the tokens each conversation (server slot) can hold. The emitted
    /// llama-server `-c` is this times the sequences. Everything else is re-optimised around it.
    #[arg(short = 'c', long = "ctx-size")]
    ctx_size: Option<u32>,
    /// Plan a context per sequence past the model's trained length (-c, or a preset's own length) instead of
    /// refusing it: llama-server gets --rope-scaling yarn --rope-scale N --yarn-orig-ctx N_TRAIN, vllm serve
    /// VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, and the document a warning with the quality cost.
    #[arg(long = "allow-long-context")]
    allow_long_context: bool,
    /// A draft model (.gguf) for speculative decoding, llama.cpp only: llama-server gets `-md FILE` (and
    /// `-ngld`), and the plan charges the draft's weights, KV cache at the planned context and compute buffers
    /// to the devices that hold it. A draft whose vocabulary the engine would refuse is invalid input (exit 4).
    #[arg(long = "model-draft", value_name = "FILE")]
    model_draft: Option<PathBuf>,
    /// A multimodal projector (.gguf, general.architecture clip), llama.cpp only: llama-server gets
    /// `--mmproj FILE`, and the plan charges the projector's weights to the device the engine puts it on (the
    /// first planned GPU, or the host on a CPU-only plan). Its compute buffer is not charged yet (a warning
    /// says so).
    #[arg(long = "mmproj", value_name = "FILE")]
    mmproj: Option<PathBuf>,
    /// Pin the GPU layers (-ngl).
    #[arg(long = "n-gpu-layers")]
    n_gpu_layers: Option<u32>,
    /// Pin the parallel sequences (llama-server slots), at least 1.
    #[arg(long)]
    parallel: Option<u32>,
    /// Pin the KV cache type. llama.cpp: a type llama-server takes for both -ctk and -ctv (f32, f16, bf16,
    /// q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1; a quantized one needs flash attention on); vLLM: its
    /// --kv-cache-dtype, auto or fp8 (compute capability 8.9 or later). A type the engine would refuse here is a
    /// usage error (exit 2).
    #[arg(long = "kv-type", value_name = "TYPE")]
    kv_type: Option<String>,
    /// vLLM across nodes (--cluster): run the replica on a Ray cluster you start (`ray start`; the plan writes
    /// the commands and a LeaderWorkerSet that does it) instead of vLLM's own multi-node launcher (mp, the
    /// default). One node is unaffected.
    #[arg(long = "distributed-executor-backend", value_name = "BACKEND")]
    distributed_executor_backend: Option<RawExecutor>,
    /// The engine to plan for: llama.cpp (GGUF) or vllm (safetensors) to serve, torch to train. By default
    /// training and fine-tuning workloads go to torch and serving workloads follow the model's format.
    #[arg(long, value_enum)]
    runtime: Option<RawRuntime>,
    /// Pin vLLM's tensor-parallel size (GPUs one replica splits every layer over).
    #[arg(long = "tensor-parallel")]
    tensor_parallel: Option<u32>,
    /// The container image the Kubernetes manifests run (default: the engine's official image for the plan's
    /// devices, e.g. ghcr.io/ggml-org/llama.cpp:server-cuda, vllm/vllm-openai:v0.33.0).
    #[arg(long)]
    image: Option<String>,
    /// Override the workload's objective.
    #[arg(long, value_enum)]
    objective: Option<RawObjective>,
    /// Time-to-first-token target in ms, in place of the workload preset's (a number above 0): the plan is
    /// chosen and checked against it (status sla-missed, exit 5, when no candidate meets it).
    #[arg(long = "sla-ttft-ms", value_name = "MS")]
    sla_ttft_ms: Option<f64>,
    /// Time-per-output-token target in ms, in place of the workload preset's (a number above 0).
    #[arg(long = "sla-tpot-ms", value_name = "MS")]
    sla_tpot_ms: Option<f64>,
    /// Explain the decision in words on stderr.
    #[arg(long)]
    explain: bool,
    /// Write the document to FILE atomically instead of stdout (`-` is stdout); a FILE ending in .json gets
    /// JSON unless --format says otherwise.
    #[arg(short = 'o', long = "output")]
    output: Option<PathBuf>,
    /// yaml (the default) or json: the document; table: a summary for people (the decision, memory per
    /// device, predicted speed, alternatives).
    #[arg(long, value_enum)]
    format: Option<OutputFormat>,
    /// Round the probed free memory down to 256 MiB so that re-running on an idle machine gives the same
    /// document (the default with `-o FILE`; `--stable=false` turns it off).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    stable: Option<bool>,
}

#[derive(Debug)]
pub(super) struct Settings {
    request: ResolveRequest,
    explain: bool,
    output: Option<PathBuf>,
    format: OutputFormat,
}

pub(super) fn settle(raw: RawResolve) -> Result<Settings, Failure> {
    let hardware = match raw.hardware {
        None => None,
        Some(h) => Some(super::parse_hardware(&h)?),
    };
    if let Some(i) = &raw.image
        && (i.is_empty() || i.chars().any(|c| c.is_whitespace() || c.is_control()))
    {
        return Err(Failure::new(
            exit::USAGE,
            anyhow::anyhow!("--image {i:?}: an image reference has no spaces and is not empty"),
        ));
    }
    let stable = raw
        .stable
        .unwrap_or(raw.output.as_ref().is_some_and(|o| o.as_os_str() != "-"));
    let (output, format) = super::output::destination(raw.output, raw.format);
    Ok(Settings {
        request: ResolveRequest {
            model: raw.model,
            workload: raw.workload,
            hardware: Hardware {
                gpus: hardware,
                cluster: raw.cluster,
                host: super::parse_host(raw.host_memory.as_deref(), raw.host_cores)?,
                nodes: raw.nodes,
            },
            sla: SlaTargets {
                time_to_first_token_ms: positive("--sla-ttft-ms", raw.sla_ttft_ms, None)?,
                time_per_output_token_ms: positive("--sla-tpot-ms", raw.sla_tpot_ms, None)?,
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
                image: raw.image,
                allow_long_context: raw.allow_long_context,
                draft_model: raw.model_draft,
                draft: None,
                kv_type: raw.kv_type,
                fabric: None,
                ray: raw.distributed_executor_backend == Some(RawExecutor::Ray),
                mmproj: raw.mmproj.map(|p| crate::runtime::Projector {
                    path: p.display().to_string(),
                    spec: None,
                }),
            },
            stable,
        },
        explain: raw.explain,
        output,
        format,
    })
}

/// Words for the objective, as the workload profiles write it.
fn objective_word(o: Objective) -> &'static str {
    match o {
        Objective::Latency => "latency",
        Objective::Throughput => "throughput",
        Objective::Balanced => "balanced",
    }
}

/// Words for how llama.cpp spreads the model.
fn strategy_word(s: Strategy) -> &'static str {
    match s {
        Strategy::Gpu => "GPU",
        Strategy::MultiGpu => "multi-GPU",
        Strategy::Hybrid => "hybrid (GPU and CPU)",
        Strategy::MoeCpu => "GPU with the MoE experts on the CPU",
        Strategy::Cpu => "CPU",
    }
}

/// Words for where the predicted speed comes from.
fn basis_word(b: Basis) -> &'static str {
    match b {
        Basis::Analytic => "analytic",
        Basis::Calibrated => "calibrated",
        Basis::Measured => "measured",
    }
}

/// `1 thread`, `4 threads`.
fn count(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

fn on_off(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}

/// The sentences of a decision, grouped so that `--explain` (all of them, in this order) and
/// `--format table` (under headings, with memory as bars and the first alternatives) say the same thing.
struct Explanation {
    /// The configuration chosen (or the nearest one).
    decision: Vec<String>,
    /// The predicted speed.
    speed: Vec<String>,
    /// One line per latency target of the workload.
    sla: Vec<String>,
    /// One line per device.
    memory: Vec<String>,
    /// One line per candidate that lost, in the document's order.
    alternatives: Vec<String>,
    /// What would make a plan fit (only when nothing does).
    suggestions: Vec<String>,
}

fn explanation(d: &Deployment) -> Explanation {
    let mut decision = Vec::new();
    let mut speed = Vec::new();
    let devices = d
        .topology
        .stages
        .iter()
        .map(|x| x.device.as_str())
        .collect::<Vec<_>>()
        .join("+");
    let verb = if d.status.runnable() {
        "Chose"
    } else {
        "Nothing fits; nearest"
    };
    let sequences = match &d.settings {
        crate::emit::Settings::LlamaCpp(s) => {
            decision.push(format!(
                "{verb} for workload {} ({}): {} {} with -ngl {} on {devices}, {} per sequence x {} (-c {}), -ub {}, KV {}/{}, flash attention {}, {}{}.",
                d.workload.preset,
                objective_word(d.workload.objective),
                d.runtime.id.name(),
                strategy_word(s.strategy),
                s.gpu_layers,
                count(s.context_per_sequence, "token", "tokens"),
                count(s.parallel, "sequence", "sequences"),
                s.context_length,
                s.ubatch_size,
                s.cache_type_k,
                s.cache_type_v,
                on_off(s.flash_attention),
                count(s.threads, "thread", "threads"),
                if d.topology.data_parallel > 1 {
                    format!(", one replica on each of {} nodes", d.topology.data_parallel)
                } else {
                    String::new()
                }
            ));
            s.parallel
        }
        crate::emit::Settings::Vllm(s) => {
            decision.push(format!(
                "{verb} for workload {} ({}): {} with tensor parallel {} on {devices}{}, --max-model-len {}, --max-num-seqs {}, --max-num-batched-tokens {}, KV cache {} ({} per replica, {:.2}x concurrency at the full length), {}{}.",
                d.workload.preset,
                objective_word(d.workload.objective),
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
                count(s.kv_cache_tokens, "token", "tokens"),
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
            ));
            s.max_num_seqs
        }
        crate::emit::Settings::Torch(s) => {
            decision.push(format!(
                "{verb} for workload {}: {} training in {} on {} ({}{}{}), micro-batch {} x {}, {} to {} per step, gradient checkpointing {}, {}, attention {} ({}).",
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
                count(s.data_parallel, "process", "processes"),
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
                count(s.sequence_length, "token", "tokens"),
                count(s.gradient_accumulation_steps, "accumulation step", "accumulation steps"),
                count(s.global_batch, "sequence", "sequences"),
                on_off(s.gradient_checkpointing),
                s.optimizer,
                s.attn_implementation,
                s.attention_kernel
            ));
            if let Some(t) = &d.performance.training {
                speed.push(format!(
                    "Predicted ({}): {:.0} tokens/s trained, {:.1} s per optimizer step ({:.1} ms of it communication), {:.2e} FLOPs per token at efficiency {:.2}.",
                    basis_word(d.performance.basis),
                    t.tokens_per_s,
                    t.step_time_ms / 1e3,
                    t.communication_ms,
                    t.flops_per_token,
                    t.efficiency
                ));
            }
            0
        }
    };
    if d.performance.training.is_none() {
        speed.push(format!(
            "Predicted ({}): {:.1} ms to first token, {:.1} ms per output token, {:.1} tokens/s decode over {}, {:.0} tokens/s prefill.",
            basis_word(d.performance.basis),
            d.performance.time_to_first_token_ms,
            d.performance.time_per_output_token_ms,
            d.performance.decode_tokens_per_s,
            count(sequences, "sequence", "sequences"),
            d.performance.prefill_tokens_per_s
        ));
    }
    let sla = d
        .performance
        .sla
        .iter()
        .map(|c| {
            format!(
                "SLA {}: {} (predicted {:.1} ms, target {:.1} ms, margin {:+.1} ms).",
                c.target.replace('_', " "),
                match c.status {
                    crate::emit::SlaStatus::Met => "met",
                    crate::emit::SlaStatus::Missed => "MISSED",
                },
                c.predicted_ms,
                c.target_ms,
                c.margin_ms
            )
        })
        .collect();
    let memory = d
        .memory
        .devices
        .iter()
        .map(|m| {
            format!(
                "Memory on {}: {:.2} GiB of {:.2} GiB free ({:.2} GiB reserved by the rules).",
                m.device,
                gib(m.total_bytes),
                gib(m.capacity_bytes),
                gib(m.reserve_bytes)
            )
        })
        .collect();
    let alternatives = d
        .alternatives
        .iter()
        .map(|a| match &a.settings {
            crate::emit::Settings::LlamaCpp(s) => format!(
                "Also considered {} -ngl {}, {} x {}: {}.",
                strategy_word(s.strategy),
                s.gpu_layers,
                count(s.context_per_sequence, "token", "tokens"),
                count(s.parallel, "sequence", "sequences"),
                a.why
            ),
            crate::emit::Settings::Vllm(s) => format!(
                "Also considered tensor parallel {}, KV {}, {} x {}{}: {}.",
                s.tensor_parallel_size,
                s.kv_cache_dtype,
                count(s.max_model_len, "token", "tokens"),
                count(s.max_num_seqs, "sequence", "sequences"),
                if s.enforce_eager { ", eager" } else { "" },
                a.why
            ),
            crate::emit::Settings::Torch(s) => format!(
                "Also considered {} {}{}, micro-batch {}, checkpointing {}: {}.",
                s.method,
                match s.zero_stage {
                    0 => "without ZeRO".to_string(),
                    z => format!("with ZeRO-{z}"),
                },
                if s.offload == "none" {
                    String::new()
                } else {
                    format!(" and the {} offloaded", s.offload)
                },
                s.micro_batch,
                on_off(s.gradient_checkpointing),
                a.why
            ),
        })
        .collect();
    let suggestions = d
        .suggestions
        .iter()
        .map(|s| format!("To fit: {s}."))
        .collect();
    Explanation {
        decision,
        speed,
        sla,
        memory,
        alternatives,
        suggestions,
    }
}

/// `--explain`: every sentence, one a line.
fn explain(d: &Deployment) -> String {
    let e = explanation(d);
    let mut o = String::new();
    for line in e
        .decision
        .iter()
        .chain(&e.speed)
        .chain(&e.sla)
        .chain(&e.memory)
        .chain(&e.alternatives)
        .chain(&e.suggestions)
    {
        o.push_str(line);
        o.push('\n');
    }
    o
}

/// Characters of a memory bar: wide enough to show a 1 GiB reserve on an 80 GiB GPU as a cell, narrow enough
/// for the line (device, bar, figures) to fit 100 columns.
const BAR_CELLS: usize = 30;

/// Alternatives the summary lists; the document and `--explain` carry all of them.
const TABLE_ALTERNATIVES: usize = 3;

/// `[#####--.......]`: `#` the plan's memory, `-` the rules' reserve, `.` spare, of the memory the plan may use;
/// `!` in the last cell when the two together exceed it.
fn bar(used: u64, reserve: u64, capacity: u64) -> String {
    let cells = |b: u64| {
        if capacity == 0 {
            BAR_CELLS
        } else {
            ((b as f64 / capacity as f64) * BAR_CELLS as f64).round() as usize
        }
    };
    let over = used.saturating_add(reserve) > capacity;
    let u = cells(used).min(BAR_CELLS);
    let r = cells(reserve).min(BAR_CELLS - u);
    let mut s = String::with_capacity(BAR_CELLS + 2);
    s.push('[');
    s.push_str(&"#".repeat(u));
    s.push_str(&"-".repeat(r));
    s.push_str(&".".repeat(BAR_CELLS - u - r));
    if over {
        s.pop();
        s.push('!');
    }
    s.push(']');
    s
}

/// `8.03 B`, `125.0 M`: parameter counts as model cards write them.
fn parameters(n: u64) -> String {
    let n = n as f64;
    if n >= 1e9 {
        format!("{:.2} B", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.1} M", n / 1e6)
    } else {
        format!("{:.1} K", n / 1e3)
    }
}

/// `--format table`: the decision for people to read, from the same sentences as `--explain`.
fn table(d: &Deployment) -> String {
    use std::fmt::Write;
    let e = explanation(d);
    let mut o = String::new();
    let _ = writeln!(
        o,
        "Status:   {}",
        match d.status {
            Status::Fits => "fits".to_string(),
            Status::NoFit =>
                "NOTHING FITS (exit code 3); below is the nearest candidate".to_string(),
            Status::SlaMissed => format!(
                "fits, but SLA MISSED (exit code {}): no candidate meets the workload's targets",
                exit::SLA_MISSED
            ),
            Status::WorkloadUnmet => format!(
                "fits, but WORKLOAD UNMET (exit code {}): {}",
                exit::WORKLOAD_UNMET,
                d.workload.unmet.as_ref().map_or(String::new(), |u| format!(
                    "the request is {} tokens longer than the {} a sequence holds",
                    u.over_by_tokens, u.context_tokens
                ))
            ),
        }
    );
    let _ = writeln!(
        o,
        "Model:    {} ({} {}, {} parameters, {})",
        d.model.path,
        d.model.format,
        d.model.architecture,
        parameters(d.model.parameter_count),
        super::output::human_bytes(d.model.tensor_bytes)
    );
    let gpus: Vec<String> = d
        .hardware
        .gpus
        .iter()
        .map(|g| format!("{} {}", g.device, g.name))
        .collect();
    let _ = writeln!(
        o,
        "Hardware: {}{} (from the {})",
        d.hardware.cpu.model,
        if gpus.is_empty() {
            String::new()
        } else {
            format!(", {}", gpus.join(", "))
        },
        d.hardware.source
    );
    let _ = writeln!(
        o,
        "Runtime:  {}",
        if d.runtime.engine.contains(&d.runtime.version) {
            d.runtime.engine.clone()
        } else {
            format!("{} {}", d.runtime.engine, d.runtime.version)
        }
    );
    let section = |o: &mut String, title: &str, lines: &[String]| {
        if !lines.is_empty() {
            let _ = writeln!(o, "\n{title}");
            for l in lines {
                let _ = writeln!(o, "  {l}");
            }
        }
    };
    section(&mut o, "Decision", &e.decision);
    let w = d
        .memory
        .devices
        .iter()
        .map(|m| m.device.len())
        .max()
        .unwrap_or(0);
    let memory: Vec<String> = d
        .memory
        .devices
        .iter()
        .map(|m| {
            let needed = m.total_bytes.saturating_add(m.reserve_bytes);
            format!(
                "{:<w$} {} {:.2} GiB used + {:.2} GiB reserve of {:.2} GiB free, {}",
                m.device,
                bar(m.total_bytes, m.reserve_bytes, m.capacity_bytes),
                gib(m.total_bytes),
                gib(m.reserve_bytes),
                gib(m.capacity_bytes),
                if needed <= m.capacity_bytes {
                    format!("{:.2} GiB spare", gib(m.capacity_bytes - needed))
                } else {
                    format!("OVER by {:.2} GiB", gib(needed - m.capacity_bytes))
                }
            )
        })
        .collect();
    section(
        &mut o,
        "Memory (# used, - reserved by the rules, . spare)",
        &memory,
    );
    let speed: Vec<String> = e.speed.iter().chain(&e.sla).cloned().collect();
    section(&mut o, "Speed", &speed);
    let shown = e.alternatives.len().min(TABLE_ALTERNATIVES);
    section(
        &mut o,
        &if shown < e.alternatives.len() {
            format!(
                "Alternatives ({shown} of {}; --explain lists all)",
                e.alternatives.len()
            )
        } else {
            "Alternatives".to_string()
        },
        &e.alternatives[..shown],
    );
    let suggestions: Vec<String> = d.suggestions.iter().map(|s| format!("{s}.")).collect();
    section(&mut o, "To fit", &suggestions);
    o
}

pub(super) fn run(common: &Common, s: &Settings) -> Result<(), Failure> {
    let doc = crate::app::resolve(common, &s.request)?;
    if s.explain {
        let _ = std::io::stderr().write_all(explain(&doc).as_bytes());
    }
    let text = match s.format {
        OutputFormat::Table => table(&doc),
        f => render(&doc, f)?,
    };
    if doc.status == Status::NoFit {
        // Exit 3 writes no `-o` target (docs/resolve.md): a file or bundle there keeps the plan that fitted, and
        // no new one appears for an orchestrator to take for a plan. The document goes to stdout instead, so the
        // nearest candidate and what would make it fit are not lost.
        write_stdout(&text)?;
        let error = match &s.output {
            None => anyhow::anyhow!(
                "no configuration fits; the document shows the nearest and what would make it fit"
            ),
            Some(p) => anyhow::anyhow!(
                "no configuration fits, so nothing was written to {} (what was there is left as it was); the \
                 document on stdout shows the nearest candidate and what would make it fit",
                p.display()
            ),
        };
        return Err(Failure::new(exit::NO_FIT, error));
    }
    // A plan that misses the SLA or shortens the request still runs as written, so it is written like one that
    // fits; the exit code tells an orchestrator what it does not do.
    match &s.output {
        Some(p) if super::bundle::is_bundle(p) => {
            super::bundle::write_bundle(p, &doc, &text, s.format)?;
        }
        Some(p) => super::output::write_file(p, &text)?,
        None => write_stdout(&text)?,
    }
    match doc.status {
        Status::Fits | Status::NoFit => Ok(()),
        Status::SlaMissed => Err(Failure::new(
            exit::SLA_MISSED,
            anyhow::anyhow!(
                "the plan fits but no candidate meets workload {}'s SLA ({}); the plan was written (status: sla-missed)",
                doc.workload.preset,
                doc.performance
                    .sla
                    .iter()
                    .filter(|c| c.status == crate::emit::SlaStatus::Missed)
                    .map(|c| format!(
                        "{} {:.1} ms predicted against {:.1} ms",
                        c.target.replace('_', " "),
                        c.predicted_ms,
                        c.target_ms
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
        Status::WorkloadUnmet => Err(Failure::new(
            exit::WORKLOAD_UNMET,
            anyhow::anyhow!(
                "workload {} cannot be met: {}; the plan for the longest request that fits was written (status: workload-unmet)",
                doc.workload.preset,
                doc.workload.unmet.as_ref().map_or(String::new(), |u| format!(
                    "its {}-token prompt and {} generated tokens are {} tokens more than the {} a sequence holds",
                    u.requested_prompt_tokens,
                    u.requested_generation_tokens,
                    u.over_by_tokens,
                    u.context_tokens
                ))
            ),
        )
        .hint("--allow-long-context plans the preset's own length with the engine's long-context setting")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_singular_for_one() {
        assert_eq!(count(1u32, "thread", "threads"), "1 thread");
        assert_eq!(count(0u32, "thread", "threads"), "0 threads");
        assert_eq!(count(16u32, "thread", "threads"), "16 threads");
    }

    #[test]
    fn bars_show_used_reserve_and_spare_and_mark_an_overflow() {
        const G: u64 = 1 << 30;
        assert_eq!(bar(0, 0, 10 * G), format!("[{}]", ".".repeat(BAR_CELLS)));
        // A third used, a tenth reserved: 10 and 3 of 30 cells.
        assert_eq!(
            bar(10 * G, 3 * G, 30 * G),
            format!("[{}{}{}]", "#".repeat(10), "-".repeat(3), ".".repeat(17))
        );
        // Used and reserve past the capacity: full, the last cell `!`.
        assert_eq!(
            bar(29 * G, 3 * G, 30 * G),
            format!("[{}{}!]", "#".repeat(29), "")
        );
        assert_eq!(bar(40 * G, 0, 30 * G), format!("[{}!]", "#".repeat(29)));
        // No memory to use at all.
        assert_eq!(bar(1, 0, 0), format!("[{}!]", "#".repeat(29)));
    }
}
