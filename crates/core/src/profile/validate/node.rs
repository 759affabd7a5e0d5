//! The checks on node profiles that their schema cannot express: alone, counts within the planner's limits
//! and an interconnect that states the figures its kind needs; across files, a GPU profile in force for every
//! node and no node id that is also a hardware profile's (`--hardware ID` must name one thing).

use serde_json::Value;

use crate::hardware::MAX_LOGICAL_CPUS;
use crate::profile::ProfileSet;
use crate::profile::types::{DeviceKind, HardwareProfile, NodeLink, NodeProfile};

use super::Diagnostic;
use super::values::{check_positive, check_sources};

pub(super) fn check_node(n: &NodeProfile, v: &Value, d: &mut impl FnMut(String, String)) {
    check_positive(v, false, &[], d);
    check_sources(v, &n.sources, d);
    let max_gpus = crate::hardware::MAX_GPUS;
    if n.gpus.count as usize > max_gpus {
        d(
            "/gpus/count".into(),
            format!(
                "{} GPUs: a plan covers at most {max_gpus} on one machine",
                n.gpus.count
            ),
        );
    }
    let h = &n.host;
    for (at, count) in [
        ("/host/physical_cores", Some(h.physical_cores)),
        ("/host/logical_cpus", h.logical_cpus),
    ] {
        if let Some(c) = count
            && c > MAX_LOGICAL_CPUS
        {
            d(
                at.into(),
                format!("{c} is above {MAX_LOGICAL_CPUS}, the most CPUs a Linux kernel runs"),
            );
        }
    }
    if let Some(l) = h.logical_cpus
        && l < h.physical_cores
    {
        d(
            "/host/logical_cpus".into(),
            format!(
                "{l} logical CPUs is fewer than the {} physical cores",
                h.physical_cores
            ),
        );
    }
    let i = &n.interconnect;
    let pcie = i.pcie_gen.is_some() || i.pcie_lanes.is_some();
    let problem = match i.kind {
        NodeLink::Nvswitch | NodeLink::Nvlink if i.nvlink_gb_s.is_none() => {
            Some("an NVLink or NVSwitch node states nvlink_gb_s")
        }
        NodeLink::Pcie if i.pcie_gen.is_none() || i.pcie_lanes.is_none() => {
            Some("a PCIe node states pcie_gen and pcie_lanes")
        }
        NodeLink::Pcie if i.nvlink_gb_s.is_some() => {
            Some("a PCIe node has no NVLink: use kind nvlink or nvswitch")
        }
        NodeLink::Unified if i.nvlink_gb_s.is_some() || pcie => {
            Some("a unified-memory node has no GPU links to state")
        }
        NodeLink::Unified if n.gpus.count != 1 => {
            Some("a unified-memory node has one SoC GPU (gpus.count 1)")
        }
        _ => None,
    };
    if let Some(p) = problem {
        d("/interconnect".into(), p.into());
    }
    // The limits a cluster file's fabric is held to (`hardware/cluster.rs`): the same figures, the same checks.
    if let Some(f) = &n.fabric {
        use crate::hardware::cluster::{
            MAX_FABRIC_BANDWIDTH_GB_S, MAX_FABRIC_LATENCY_US, MAX_LINKS_PER_NODE,
        };
        if f.links_per_node > MAX_LINKS_PER_NODE {
            d(
                "/fabric/links_per_node".into(),
                format!("{} links is above {MAX_LINKS_PER_NODE}", f.links_per_node),
            );
        }
        if f.link_gb_s > MAX_FABRIC_BANDWIDTH_GB_S {
            d(
                "/fabric/link_gb_s".into(),
                format!(
                    "{} GB/s is above {MAX_FABRIC_BANDWIDTH_GB_S}: bits for bytes?",
                    f.link_gb_s
                ),
            );
        }
        if f.latency_us.is_some_and(|l| l > MAX_FABRIC_LATENCY_US) {
            d(
                "/fabric/latency_us".into(),
                format!("above {MAX_FABRIC_LATENCY_US} us: ms or ns for us?"),
            );
        }
    }
}

/// Each node's GPU profile exists in the set in force (for a partial set without hardware profiles, in the
/// built-in set when `with_builtin` holds), its kind fits the interconnect, and no node shares an id with a
/// hardware profile.
pub(super) fn check_nodes(set: &ProfileSet, with_builtin: bool, diags: &mut Vec<Diagnostic>) {
    if set.nodes.is_empty() {
        return;
    }
    let builtin;
    let mut hardware: Vec<&HardwareProfile> = set.hardware.iter().map(|e| &e.value).collect();
    if hardware.is_empty() && with_builtin {
        builtin = crate::profile::builtin_set().unwrap_or_default();
        hardware = builtin.hardware.iter().map(|e| &e.value).collect();
    }
    for e in &set.nodes {
        let n = &e.value;
        let mut d = |instance_path: &str, message: String| {
            diags.push(Diagnostic {
                path: e.origin.path.clone(),
                instance_path: instance_path.into(),
                message,
            });
        };
        if let Some(h) = set.hardware.iter().find(|h| h.value.id == n.id) {
            d(
                "/id",
                format!(
                    "node id {:?} is also a hardware profile's ({}): --hardware would name two things",
                    n.id, h.origin.path
                ),
            );
        }
        let Some(gpu) = hardware.iter().find(|h| h.id == n.gpus.profile) else {
            d(
                "/gpus/profile",
                format!(
                    "node {:?} names GPU profile {:?}, which no hardware profile in force has",
                    n.id, n.gpus.profile
                ),
            );
            continue;
        };
        let soc = gpu.kind == DeviceKind::Soc;
        if gpu.kind == DeviceKind::Cpu {
            d(
                "/gpus/profile",
                format!("{:?} is a CPU class, not a GPU", gpu.id),
            );
        } else if soc != (n.interconnect.kind == NodeLink::Unified) {
            d(
                "/interconnect/kind",
                format!(
                    "GPU profile {:?} is a {}: its node's interconnect kind is {}",
                    gpu.id,
                    if soc { "SoC" } else { "discrete GPU" },
                    if soc {
                        "unified"
                    } else {
                        "nvswitch, nvlink or pcie"
                    }
                ),
            );
        }
    }
}
