//! `optimizer probe`: the inventory, and the profile each GPU resolves to.

use std::fmt::Write;

use super::output::human_bytes;
use super::{Common, Failure, OutputFormat, render, write_stdout};
use crate::hardware::{Bound, Inventory};
use crate::profile::matching::{MatchedBy, Resolution, resolve};
use crate::profile::{ArchitectureRule, HardwareProfile, ProfileSet};

pub(super) fn run(common: &Common, format: OutputFormat) -> Result<(), Failure> {
    // Showing the machine is this command's job: a live probe here asks every library, the CUDA driver's SM
    // counts included, where planning commands skip what their plan does not need.
    let (inv, source) = match &common.inventory {
        None => (crate::hardware::probe_live(), "probe"),
        Some(_) => common.inventory()?,
    };
    let text = match format {
        // The machine formats are the inventory contract itself, so `probe --format yaml` reads back with
        // `--inventory`; which profile matched is a table-only view.
        OutputFormat::Yaml | OutputFormat::Json => render(&inv, format)?,
        OutputFormat::Table => {
            let profiles = common.profiles()?;
            table(&inv, source, profiles)
        }
    };
    write_stdout(&text)
}

fn bound(b: Option<Bound>) -> &'static str {
    match b {
        Some(Bound::CgroupV2) => " (cgroup v2 limit)",
        Some(Bound::CgroupV1) => " (cgroup v1 limit)",
        _ => "",
    }
}

/// One line per GPU saying which profile it resolves to and how.
pub(super) fn describe_match(gpu: &crate::hardware::Gpu, set: &ProfileSet) -> String {
    let hw: Vec<&HardwareProfile> = set.hardware.iter().map(|e| &e.value).collect();
    let archs: Vec<&ArchitectureRule> = set.architectures().collect();
    match resolve(gpu, &hw, &archs) {
        Resolution::Profile { profile, by } => format!(
            "profile {} (matched by {})",
            profile.id,
            match by {
                MatchedBy::PciId => "PCI id",
                MatchedBy::Name => "name",
                MatchedBy::NormalizedName => "normalized name",
            }
        ),
        Resolution::Derived { profile, notes } => {
            let mut s = format!(
                "no profile; derived {} ({:.0} GB/s",
                profile.id, profile.memory.bandwidth_gb_s
            );
            if let Some(t) = profile.tensor_tflops.as_ref().and_then(|t| t.fp16_fp32acc) {
                let _ = write!(s, ", {t:.1} FP16 tensor TFLOPS");
            }
            if let Some(v) = profile.vector_tflops.as_ref().and_then(|v| v.fp32) {
                let _ = write!(s, ", {v:.1} FP32 vector TFLOPS");
            }
            s.push(')');
            for n in notes {
                let _ = write!(s, "; {n}");
            }
            s
        }
        Resolution::Heuristic {
            profile,
            basis,
            hint,
        } => format!(
            "no profile; heuristic {} ({basis}); hint: {hint}",
            profile.id
        ),
        Resolution::Unresolved { notes } => format!("no profile: {}", notes.join("; ")),
    }
}

fn table(inv: &Inventory, source: &str, set: &ProfileSet) -> String {
    use super::table::left;
    // Labelled lines: the label column, then what was found.
    let mut t = super::table::Table::headless(&[left("", 13), left("", 0)]);
    let c = &inv.cpu;
    t.row(["source", source]);
    t.row([
        "cpu".to_string(),
        format!(
            "{} ({}), {} physical cores, {} logical CPUs{}",
            c.model,
            c.vendor,
            c.physical_cores,
            c.logical_cpus,
            c.effective_cpus
                .map(|e| format!(", {e:.2} usable{}", bound(c.cpu_bound)))
                .unwrap_or_default()
        ),
    ]);
    t.row(["features".to_string(), c.features.join(" ")]);
    let m = &inv.memory;
    t.row([
        "memory".to_string(),
        format!(
            "{} total, {} available{}{}{}",
            human_bytes(m.total_bytes),
            human_bytes(m.available_bytes),
            bound(m.bound),
            m.host_total_bytes
                .map(|h| format!(" (host {})", human_bytes(h)))
                .unwrap_or_default(),
            if m.unified {
                ", unified with the GPU"
            } else {
                ""
            }
        ),
    ]);
    if inv.gpus.is_empty() {
        t.row(["gpus", "none"]);
    }
    for g in &inv.gpus {
        t.row([
            format!("gpu {}", g.index),
            format!(
                "{}, {} total, {} free{}{}",
                g.name,
                human_bytes(g.memory_total_bytes),
                human_bytes(g.memory_free_bytes),
                g.compute_capability
                    .as_ref()
                    .map(|c| format!(", compute {c}"))
                    .unwrap_or_default(),
                g.peak_bandwidth_bytes_per_s
                    .map(|b| format!(", {:.0} GB/s peak (computed)", b as f64 / 1e9))
                    .unwrap_or_default(),
            ),
        ]);
        t.row(["", &describe_match(g, set)]);
        if !g.processes.is_empty() {
            let held: u64 = g.processes.iter().filter_map(|p| p.used_bytes).sum();
            t.row([
                String::new(),
                format!(
                    "{} other processes hold {}",
                    g.processes.len(),
                    human_bytes(held)
                ),
            ]);
        }
    }
    for n in &inv.notes {
        t.row(["note", n]);
    }
    t.render()
}
