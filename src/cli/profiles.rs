//! `optimizer profiles validate|list|show` and the diagnostics of invalid profiles.

use std::fmt::Write;
use std::path::PathBuf;

use serde::Serialize;

use super::{Common, Failure, OutputFormat, exit, render, write_stdout};
use crate::profile::{self, Origin, RuleTable};

/// Every diagnostic on stderr, then a failure with exit code 4.
pub(super) use crate::app::invalid_profiles as invalid;

pub(super) fn validate(common: &Common, paths: &[PathBuf]) -> Result<(), Failure> {
    let (files, mut diags) = if paths.is_empty() {
        let mut files = profile::builtin_files();
        let (user, d) = profile::read_paths(&common.overlay_dirs()?);
        files.extend(user);
        (files, d)
    } else {
        for p in paths {
            if !p.exists() {
                return Err(Failure::new(
                    exit::USAGE,
                    anyhow::anyhow!("{}: no such file or directory", p.display()),
                ));
            }
        }
        profile::read_paths(paths)
    };
    let (set, d) = profile::validate::validate_files(&files, true);
    diags.extend(d);
    if !diags.is_empty() {
        return Err(invalid(diags));
    }
    let overrides = set
        .hardware
        .iter()
        .map(|e| &e.overrides)
        .chain(set.workloads.iter().map(|e| &e.overrides))
        .chain(set.rules.iter().map(|e| &e.overrides))
        .chain(set.nodes.iter().map(|e| &e.overrides))
        .filter(|o| o.is_some())
        .count();
    write_stdout(&format!(
        "{} files valid: {} hardware profiles, {} workloads, {} rule tables, {} nodes{}\n",
        files.len(),
        set.hardware.len(),
        set.workloads.len(),
        set.rules.len(),
        set.nodes.len(),
        if overrides > 0 {
            format!(" ({overrides} overriding built-ins)")
        } else {
            String::new()
        }
    ))
}

/// The kinds `profiles list --kind` selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum ListKind {
    Hardware,
    Workloads,
    Rules,
    /// Node profiles: the machines GPUs sit in (`--hardware dgx-h100`).
    #[value(alias = "nodes")]
    Node,
}

#[derive(Serialize)]
struct Listed<'a> {
    id: &'a str,
    kind: &'static str,
    description: String,
    origin: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    overrides: Option<&'a str>,
    /// Hardware: the device's memory in bytes (absent for CPU and SoC classes, whose memory is the machine's).
    #[serde(skip_serializing_if = "Option::is_none")]
    memory_bytes: Option<u64>,
    /// Hardware: peak memory bandwidth, GB/s (10^9 bytes per second).
    #[serde(skip_serializing_if = "Option::is_none")]
    bandwidth_gb_s: Option<f64>,
    /// Hardware: dense BF16 tensor TFLOPS with FP32 accumulation.
    #[serde(skip_serializing_if = "Option::is_none")]
    bf16_tflops: Option<f64>,
    /// Hardware: dense FP16 TFLOPS with FP32 accumulation (tensor cores, else the vector units).
    #[serde(skip_serializing_if = "Option::is_none")]
    fp16_tflops: Option<f64>,
    /// Workloads: inference, embedding, fine-tune or training.
    #[serde(skip_serializing_if = "Option::is_none")]
    mode: Option<&'static str>,
    /// Workloads: latency, throughput or balanced.
    #[serde(skip_serializing_if = "Option::is_none")]
    objective: Option<&'static str>,
    /// Workloads: how the context is chosen (`fixed 8192`, `model max`, `largest fit >= 4096`).
    #[serde(skip_serializing_if = "Option::is_none")]
    context: Option<String>,
    /// Rules: the rows of the table.
    #[serde(skip_serializing_if = "Option::is_none")]
    rows: Option<usize>,
    /// Nodes: the GPUs (`8 x h100-sxm`).
    #[serde(skip_serializing_if = "Option::is_none")]
    gpus: Option<String>,
    /// Nodes: the host's physical cores (its memory is `memory_bytes`).
    #[serde(skip_serializing_if = "Option::is_none")]
    physical_cores: Option<u32>,
}

impl<'a> Listed<'a> {
    fn new(id: &'a str, kind: &'static str, description: String, origin: &'a Origin) -> Self {
        Listed {
            id,
            kind,
            description,
            origin: origin_path(origin),
            overrides: None,
            memory_bytes: None,
            bandwidth_gb_s: None,
            bf16_tflops: None,
            fp16_tflops: None,
            mode: None,
            objective: None,
            context: None,
            rows: None,
            gpus: None,
            physical_cores: None,
        }
    }
}

fn table_kind(t: &RuleTable) -> (&str, &'static str) {
    match t {
        RuleTable::Precision { id, .. } => (id, "rules: precision"),
        RuleTable::Attention { id, .. } => (id, "rules: attention"),
        RuleTable::MemoryReserves { id, .. } => (id, "rules: memory-reserves"),
        RuleTable::CpuThreads { id, .. } => (id, "rules: cpu-threads"),
        RuleTable::GpuArchitectures { id, .. } => (id, "rules: gpu-architectures"),
        RuleTable::Efficiency { id, .. } => (id, "rules: efficiency"),
        RuleTable::KvCache { id, .. } => (id, "rules: kv-cache"),
    }
}

fn table_rows(t: &RuleTable) -> usize {
    match t {
        RuleTable::Precision { rules, .. } => rules.len(),
        RuleTable::Attention { rules, .. } => rules.len(),
        RuleTable::MemoryReserves { rules, .. } => rules.len(),
        RuleTable::CpuThreads { rules, .. } => rules.len(),
        RuleTable::GpuArchitectures { rules, .. } => rules.len(),
        RuleTable::Efficiency { rules, .. } => rules.len(),
        RuleTable::KvCache { rules, .. } => rules.len(),
    }
}

fn origin_path(o: &Origin) -> &str {
    o.path.as_str()
}

fn device_kind(k: profile::DeviceKind) -> &'static str {
    match k {
        profile::DeviceKind::Gpu => "GPU",
        profile::DeviceKind::Cpu => "CPU",
        profile::DeviceKind::Soc => "SoC",
    }
}

fn mode(m: profile::Mode) -> &'static str {
    match m {
        profile::Mode::Inference => "inference",
        profile::Mode::Embedding => "embedding",
        profile::Mode::FineTune => "fine-tune",
        profile::Mode::Training => "training",
    }
}

fn objective(o: profile::Objective) -> &'static str {
    match o {
        profile::Objective::Latency => "latency",
        profile::Objective::Throughput => "throughput",
        profile::Objective::Balanced => "balanced",
    }
}

fn context(c: &profile::ContextPolicy) -> String {
    match c {
        profile::ContextPolicy::Fixed { tokens } => format!("fixed {tokens}"),
        profile::ContextPolicy::ModelMax => "model max".to_string(),
        profile::ContextPolicy::LargestFit { floor } => format!("largest fit >= {floor}"),
    }
}

/// A figure in a column, `-` when the profile has none.
fn figure(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.decimals$}"))
}

fn overrides(r: &Listed) -> String {
    r.overrides
        .map(|p| format!("  [{} overrides {p}]", r.origin))
        .unwrap_or_default()
}

/// `profiles list`: one section per kind, each with a header line and its key figures.
pub(super) fn list(
    common: &Common,
    kind: Option<ListKind>,
    format: OutputFormat,
) -> Result<(), Failure> {
    let set = common.profiles()?;
    let wanted = |k: ListKind| kind.is_none_or(|w| w == k);
    let mut hardware = Vec::new();
    let mut workloads = Vec::new();
    let mut rules = Vec::new();
    let mut nodes = Vec::new();
    if wanted(ListKind::Hardware) {
        for e in &set.hardware {
            let p = &e.value;
            let t = p.tensor_tflops.as_ref();
            let mut r = Listed::new(&p.id, "hardware", p.name.clone(), &e.origin);
            r.overrides = e.overrides.as_ref().map(origin_path);
            r.memory_bytes = p.memory.size_bytes;
            r.bandwidth_gb_s = Some(p.memory.bandwidth_gb_s);
            r.bf16_tflops = t.and_then(|t| t.bf16_fp32acc);
            r.fp16_tflops = t
                .and_then(|t| t.fp16_fp32acc)
                .or_else(|| p.vector_tflops.as_ref().and_then(|v| v.fp16));
            hardware.push((device_kind(p.kind), r));
        }
    }
    if wanted(ListKind::Workloads) {
        for e in &set.workloads {
            let p = &e.value;
            let mut r = Listed::new(&p.id, "workload", p.description.clone(), &e.origin);
            r.overrides = e.overrides.as_ref().map(origin_path);
            r.mode = Some(mode(p.mode));
            r.objective = Some(objective(p.objective));
            r.context = Some(context(&p.context));
            workloads.push(r);
        }
    }
    if wanted(ListKind::Rules) {
        for e in &set.rules {
            let (id, kind) = table_kind(&e.value);
            let mut r = Listed::new(id, kind, String::new(), &e.origin);
            r.overrides = e.overrides.as_ref().map(origin_path);
            r.rows = Some(table_rows(&e.value));
            rules.push(r);
        }
    }
    if wanted(ListKind::Node) {
        for e in &set.nodes {
            let p = &e.value;
            let mut r = Listed::new(&p.id, "node", p.name.clone(), &e.origin);
            r.overrides = e.overrides.as_ref().map(origin_path);
            r.gpus = Some(format!("{} x {}", p.gpus.count, p.gpus.profile));
            r.memory_bytes = Some(p.host.memory_bytes);
            r.physical_cores = Some(p.host.physical_cores);
            nodes.push(r);
        }
    }
    let text = match format {
        OutputFormat::Table => {
            let mut o = String::new();
            let w = hardware
                .iter()
                .map(|(_, r)| r)
                .chain(&workloads)
                .chain(&rules)
                .chain(&nodes)
                .map(|r| r.id.len())
                .max()
                .unwrap_or(2)
                .max(2);
            if !hardware.is_empty() {
                let _ = writeln!(
                    o,
                    "{:<w$}  {:<4}  {:>7}  {:>7}  {:>7}  {:>7}  NAME",
                    "HARDWARE", "KIND", "MEM GiB", "BW GB/s", "BF16 TF", "FP16 TF"
                );
                for (kind, r) in &hardware {
                    let _ = writeln!(
                        o,
                        "{:<w$}  {:<4}  {:>7}  {:>7}  {:>7}  {:>7}  {}{}",
                        r.id,
                        kind,
                        figure(r.memory_bytes.map(crate::units::gib), 1),
                        figure(r.bandwidth_gb_s, 0),
                        figure(r.bf16_tflops, 1),
                        figure(r.fp16_tflops, 1),
                        r.description,
                        overrides(r)
                    );
                }
            }
            if !workloads.is_empty() {
                if !o.is_empty() {
                    o.push('\n');
                }
                let _ = writeln!(
                    o,
                    "{:<w$}  {:<9}  {:<10}  {:<20}  DESCRIPTION",
                    "WORKLOAD", "MODE", "OBJECTIVE", "CONTEXT"
                );
                for r in &workloads {
                    let _ = writeln!(
                        o,
                        "{:<w$}  {:<9}  {:<10}  {:<20}  {}{}",
                        r.id,
                        r.mode.unwrap_or("-"),
                        r.objective.unwrap_or("-"),
                        r.context.as_deref().unwrap_or("-"),
                        r.description,
                        overrides(r)
                    );
                }
            }
            if !rules.is_empty() {
                if !o.is_empty() {
                    o.push('\n');
                }
                let _ = writeln!(
                    o,
                    "{:<w$}  {:<17}  {:>4}  FROM",
                    "RULE TABLE", "KIND", "ROWS"
                );
                for r in &rules {
                    let _ = writeln!(
                        o,
                        "{:<w$}  {:<17}  {:>4}  {}{}",
                        r.id,
                        r.kind.trim_start_matches("rules: "),
                        r.rows.unwrap_or(0),
                        r.origin,
                        overrides(r)
                    );
                }
            }
            if !nodes.is_empty() {
                if !o.is_empty() {
                    o.push('\n');
                }
                let _ = writeln!(
                    o,
                    "{:<w$}  {:<18}  {:>5}  {:>7}  NAME",
                    "NODE", "GPUS", "CORES", "MEM GiB"
                );
                for r in &nodes {
                    let _ = writeln!(
                        o,
                        "{:<w$}  {:<18}  {:>5}  {:>7}  {}{}",
                        r.id,
                        r.gpus.as_deref().unwrap_or("-"),
                        r.physical_cores.map_or("-".into(), |c| c.to_string()),
                        figure(r.memory_bytes.map(crate::units::gib), 0),
                        r.description,
                        overrides(r)
                    );
                }
            }
            o
        }
        f => {
            let rows: Vec<&Listed> = hardware
                .iter()
                .map(|(_, r)| r)
                .chain(&workloads)
                .chain(&rules)
                .chain(&nodes)
                .collect();
            render(&rows, f)?
        }
    };
    write_stdout(&text)
}

/// `profiles show ID`: the id exactly as any kind, then a hardware profile or workload by its id in any case or
/// its product name (`crate::profile::lookup`), then a rule table's id in any case; otherwise the nearest id.
pub(super) fn show(common: &Common, id: &str, format: OutputFormat) -> Result<(), Failure> {
    use crate::profile::lookup::{self, LookupError};
    let set = common.profiles()?;
    let rule =
        |same: &dyn Fn(&str) -> bool| set.rules.iter().find(|e| same(table_kind(&e.value).0));
    let hardware = || set.find_hardware(id);
    let workload = || set.find_workload(id);
    // An exact id of any kind first, so a workload is never shadowed by a hardware profile's fuzzy match.
    let (value, origin) = if let Some(e) = set.hardware(id) {
        (serde_json::to_value(&e.value), &e.origin)
    } else if let Some(e) = set.workload(id) {
        (serde_json::to_value(&e.value), &e.origin)
    } else if let Some(e) = rule(&|t| t == id) {
        (serde_json::to_value(&e.value), &e.origin)
    } else if let Ok(e) = workload() {
        (serde_json::to_value(&e.value), &e.origin)
    } else if let Some(e) = rule(&|t| t.eq_ignore_ascii_case(id)) {
        (serde_json::to_value(&e.value), &e.origin)
    } else {
        match hardware() {
            Ok(e) => (serde_json::to_value(&e.value), &e.origin),
            Err(e @ LookupError::Ambiguous { .. }) => {
                return Err(crate::app::lookup_failure(e, "hardware"));
            }
            Err(LookupError::Unknown { .. }) => {
                let ids = set
                    .hardware
                    .iter()
                    .map(|e| e.value.id.as_str())
                    .chain(set.workloads.iter().map(|e| e.value.id.as_str()))
                    .chain(set.rules.iter().map(|e| table_kind(&e.value).0));
                let e = lookup::unknown("profile with id", id, ids);
                return Err(
                    Failure::new(exit::USAGE, e).hint("`optimizer profiles list` shows every id")
                );
            }
        }
    };
    let value = value.map_err(|e| Failure::new(exit::RUNTIME, e))?;
    let text = match format {
        OutputFormat::Json => render(&value, format)?,
        _ => format!("# {}\n{}", origin.path, render(&value, OutputFormat::Yaml)?),
    };
    write_stdout(&text)
}
