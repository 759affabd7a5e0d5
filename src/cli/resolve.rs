//! `optimizer resolve`: the main job. Reads the model, the machine (probe, inventory or a profile), the profiles
//! and the workload preset, plans, and writes the deployment document (YAML by default) to stdout or, atomically,
//! to `-o FILE`. Exit code 3 when nothing fits; the document then explains the nearest candidate.

use std::io::Write as _;
use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::{Common, Failure, OutputFormat, exit, render, write_stdout};
use crate::emit::{Deployment, Status};
use crate::hardware::{Gpu, GpuSource, GpuVendor, Inventory};
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
    /// Pin the context length (-c); everything else is re-optimised around it.
    #[arg(short = 'c', long = "ctx-size")]
    ctx_size: Option<u32>,
    /// Pin the GPU layers (-ngl).
    #[arg(long = "n-gpu-layers")]
    n_gpu_layers: Option<u32>,
    /// Pin the parallel sequences.
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
    if p.kind != DeviceKind::Gpu {
        return Err(Failure::new(
            exit::USAGE,
            anyhow::anyhow!(
                "--hardware {id}: a {:?} profile; resolve plans GPUs from profiles, the host from the probe or --inventory",
                p.kind
            ),
        ));
    }
    let bytes = p.memory.size_bytes.unwrap_or(0);
    inv.gpus = (0..n)
        .map(|i| Gpu {
            index: i,
            name: p.name.clone(),
            vendor: GpuVendor::Nvidia,
            memory_total_bytes: bytes,
            memory_free_bytes: bytes,
            compute_capability: p.compute_capability.clone(),
            uuid: None,
            pci_bus_id: None,
            pci_id: p.matching.pci_ids.first().cloned(),
            memory_used_bytes: None,
            sm_count: p.sms,
            max_sm_clock_mhz: p.boost_clock_mhz,
            max_memory_clock_mhz: None,
            memory_bus_width_bits: p.memory.bus_width_bits,
            peak_bandwidth_bytes_per_s: Some((p.memory.bandwidth_gb_s * 1e9) as u64),
            pcie_generation: None,
            pcie_width: None,
            power_limit_w: p.tdp_w,
            driver_version: None,
            cuda_driver_version: None,
            mig_enabled: None,
            processes: Vec::new(),
            unified_memory: false,
            source: Some(GpuSource::Fixture),
        })
        .collect();
    Ok(inv)
}

fn explain(d: &Deployment) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let s = &d.settings;
    let p = &d.placement;
    let _ = writeln!(
        o,
        "{} for workload {} ({:?}): {:?} with -ngl {} on {}, -c {}, -np {}, -ub {}, KV {}/{}, flash attention {}, {} threads.",
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
        s.context_length,
        s.parallel,
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
            "Also considered {:?} -ngl {} -c {}: {}.",
            a.strategy, a.gpu_layers, a.context_length, a.why
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
    let store = common.store()?;
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
                crate::profile::matching::Resolution::Derived { profile, .. } => Some(profile.id),
                crate::profile::matching::Resolution::Unresolved { .. } => None,
            },
        )
        .collect();
    let (measurements, rows) = store
        .measurements(&device_ids, &spec.fingerprint)
        .map_err(|e| Failure::new(exit::INVALID_INPUT, e))?;
    let path = s.model.display().to_string();
    let inputs = Inputs {
        model: &spec,
        model_path: &path,
        inventory: &inv,
        hardware_source: source,
        profiles: &set,
        workload,
        measurements: &measurements,
        overrides: &s.overrides,
    };
    let mut doc = plan::resolve(&inputs).map_err(|e| Failure::new(exit::USAGE, e))?;
    doc.provenance.insert(
        "performance.basis".into(),
        crate::emit::Provenance {
            source: crate::emit::Source::Rule,
            detail: format!(
                "analytic: the measurement store holds {rows} measurements for these devices and this model, so the efficiency rules apply"
            ),
        },
    );
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
