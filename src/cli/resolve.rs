//! `optimizer resolve`: the main job. Reads the model, the machine (probe, inventory or a profile), the profiles
//! and the workload preset, plans, and writes the deployment document (YAML by default) to stdout or, atomically,
//! to `-o FILE`. Exit code 3 when nothing fits; the document then explains the nearest candidate.

use std::io::Write as _;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::{Common, Failure, OutputFormat, exit, render, write_stdout};
use crate::emit::{Deployment, Status};
use crate::hardware::Inventory;
use crate::plan::{self, Inputs, Overrides};
use crate::profile::{DeviceKind, Objective, ProfileSet};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RawObjective {
    Latency,
    Throughput,
    Balanced,
}

#[derive(Debug, Args)]
pub struct RawResolve {
    /// The model (.gguf, any shard of a split model).
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
    model: PathBuf,
    workload: String,
    hardware: Option<(u32, String)>,
    overrides: Overrides,
    explain: bool,
    output: Option<PathBuf>,
    format: OutputFormat,
}

pub fn settle(raw: RawResolve) -> Result<Settings, Failure> {
    let hardware = match raw.hardware {
        None => None,
        Some(h) => Some(super::estimate::parse_hardware(&h)?),
    };
    if raw.format == OutputFormat::Table {
        return Err(Failure::new(
            exit::USAGE,
            anyhow::anyhow!("resolve writes a document: --format yaml or json"),
        ));
    }
    Ok(Settings {
        model: raw.model,
        workload: raw.workload,
        hardware,
        overrides: Overrides {
            context_length: raw.ctx_size,
            gpu_layers: raw.n_gpu_layers,
            parallel: raw.parallel,
            objective: raw.objective.map(|o| match o {
                RawObjective::Latency => Objective::Latency,
                RawObjective::Throughput => Objective::Throughput,
                RawObjective::Balanced => Objective::Balanced,
            }),
        },
        explain: raw.explain,
        output: raw.output,
        format: raw.format,
    })
}

/// This machine (or the inventory) with its GPUs replaced by `n` GPUs of a profile.
fn with_profiled_gpus(
    mut inv: Inventory,
    n: u32,
    id: &str,
    set: &ProfileSet,
) -> Result<Inventory, Failure> {
    let p = &set
        .hardware(id)
        .ok_or_else(|| {
            Failure::new(exit::USAGE, anyhow::anyhow!("no hardware profile {id:?}"))
                .hint("`optimizer profiles list` shows every id")
        })?
        .value;
    if p.kind == DeviceKind::Soc && n > 1 {
        return Err(Failure::new(
            exit::USAGE,
            anyhow::anyhow!("--hardware {n}x:{id}: a machine has one {} GPU", p.name),
        ));
    }
    // An Apple SoC's GPU shares the machine's memory: the host's (probed or --inventory) memory stands for it.
    let machine_memory = inv.memory.total_bytes;
    inv.gpus = (0..n)
        .map(|i| crate::profile::matching::gpu_from_profile(p, i, machine_memory))
        .collect::<Result<_, _>>()
        .map_err(|e| {
            Failure::new(
                exit::USAGE,
                anyhow::anyhow!(
                    "--hardware {id}: {e}; resolve plans GPUs from profiles, the host from the probe or --inventory"
                ),
            )
        })?;
    Ok(inv)
}

/// The exit code and message of a planner refusal: defects of the model or the inventory are invalid input (4)
/// naming the file; what the user asked for is a usage error (2).
fn plan_failure(e: plan::PlanError, s: &Settings, hardware_source: &str) -> Failure {
    use plan::PlanError;
    match e {
        PlanError::Model(_) => Failure::new(
            exit::INVALID_INPUT,
            anyhow::anyhow!("{}: {e}", s.model.display()),
        ),
        PlanError::Profile(_) => Failure::new(exit::INVALID_INPUT, e)
            .hint("`optimizer profiles validate` checks the rule tables in force"),
        PlanError::Hardware(_) => Failure::new(
            if hardware_source == "profile" {
                exit::USAGE
            } else {
                exit::INVALID_INPUT
            },
            anyhow::anyhow!("{hardware_source}: {e}"),
        ),
        PlanError::UnsupportedFormat(_) => {
            Failure::new(exit::USAGE, anyhow::anyhow!("{}: {e}", s.model.display())).hint(
                "convert it to GGUF with llama.cpp's convert_hf_to_gguf.py, then resolve the .gguf",
            )
        }
        PlanError::UnsupportedMode(..) | PlanError::Usage(_) => Failure::new(exit::USAGE, e),
    }
}

fn explain(d: &Deployment) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let s = &d.settings;
    let p = &d.placement;
    let _ = writeln!(
        o,
        "{} for workload {} ({:?}): {:?} with -ngl {} on {}, {} tokens per sequence x {} sequences (-c {}), -ub {}, KV {}/{}, flash attention {}, {} threads.",
        if d.status == Status::Fits {
            "Chose"
        } else {
            "Nothing fits; nearest"
        },
        d.workload.preset,
        d.workload.objective,
        p.strategy,
        p.gpu_layers,
        p.devices
            .iter()
            .map(|x| x.device.as_str())
            .collect::<Vec<_>>()
            .join("+"),
        s.context_per_sequence,
        s.parallel,
        s.context_length,
        s.ubatch_size,
        s.cache_type_k,
        s.cache_type_v,
        if s.flash_attention { "on" } else { "off" },
        s.threads
    );
    let _ = writeln!(
        o,
        "Predicted ({:?}): {:.1} ms to first token, {:.1} ms per output token, {:.1} tokens/s decode over {} sequences, {:.0} tokens/s prefill.",
        d.performance.basis,
        d.performance.time_to_first_token_ms,
        d.performance.time_per_output_token_ms,
        d.performance.decode_tokens_per_s,
        s.parallel,
        d.performance.prefill_tokens_per_s
    );
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
        let _ = writeln!(
            o,
            "Also considered {:?} -ngl {}, {} tokens x {} sequences: {}.",
            a.strategy, a.gpu_layers, a.context_per_sequence, a.parallel, a.why
        );
    }
    for s in &d.suggestions {
        let _ = writeln!(o, "To fit: {s}.");
    }
    o
}

pub fn run(common: &Common, s: &Settings) -> Result<(), Failure> {
    let spec = crate::model::load(&s.model)?;
    let set = common.profiles()?;
    let workload = &set
        .workload(&s.workload)
        .ok_or_else(|| {
            Failure::new(
                exit::USAGE,
                anyhow::anyhow!("no workload preset {:?}", s.workload),
            )
            .hint("`optimizer profiles list` shows the presets")
        })?
        .value;
    let (mut inv, mut source) = common.inventory()?;
    if let Some((n, id)) = &s.hardware {
        inv = with_profiled_gpus(inv, *n, id, &set)?;
        source = "profile";
    }
    // Measured figures for these devices and this model, when calibration has recorded any.
    let hw: Vec<&crate::profile::HardwareProfile> = set.hardware.iter().map(|e| &e.value).collect();
    let archs: Vec<_> = set.architectures().collect();
    let device_ids: Vec<String> = inv
        .gpus
        .iter()
        .filter_map(
            |g| match crate::profile::matching::resolve(g, &hw, &archs) {
                crate::profile::matching::Resolution::Profile { profile, .. } => {
                    Some(profile.id.clone())
                }
                crate::profile::matching::Resolution::Derived { profile, .. }
                | crate::profile::matching::Resolution::Heuristic { profile, .. } => {
                    Some(profile.id)
                }
                crate::profile::matching::Resolution::Unresolved { .. } => None,
            },
        )
        .collect();
    let measured = common.measurements(&device_ids, &spec.fingerprint)?;
    let path = s.model.display().to_string();
    let inputs = Inputs {
        model: &spec,
        model_path: &path,
        inventory: &inv,
        hardware_source: source,
        profiles: &set,
        workload,
        measurements: &measured.measurements,
        overrides: &s.overrides,
    };
    let mut doc = plan::resolve(&inputs).map_err(|e| plan_failure(e, s, source))?;
    doc.provenance.insert(
        "performance.basis".into(),
        crate::emit::Provenance {
            source: crate::emit::Source::Rule,
            detail: measured.basis_detail(),
        },
    );
    doc.warnings.extend(measured.warning);
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
