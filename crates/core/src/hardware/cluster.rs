//! A cluster: groups of identical nodes, each described by an inventory, and the fabric between the nodes.
//! Pure data and its checks; nothing here probes a machine. Multi-node plans consume it (issue 9 parses it;
//! planning across nodes comes later).
//!
//! The YAML form (`optimizer schema cluster`):
//! ```yaml
//! nodes:
//!   - name: dgx          # unique in the file
//!     count: 8           # identical nodes of this shape (default 1)
//!     inventory: {cpu: ..., memory: ..., gpus: [...]}   # an inventory document, inline
//! fabric:                # optional: the link between nodes
//!   kind: infiniband     # infiniband, roce, ethernet, nvlink
//!   links_per_node: {value: 8, source: "..."}
//!   bandwidth_gb_s: {value: 50, source: "..."}   # per link, one direction
//!   latency_us: {value: 1.0, source: "..."}
//! ```
//! Every fabric figure is optional and, when given, carries the source it comes from (the same rule as a
//! profile's numbers). Unknown fields are refused.
//!
//! Trade-off: a node group repeats an inventory by `count` instead of naming each machine, so "8 identical
//! nodes" is one entry; nodes that differ (a node with a failed GPU) are separate entries.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Inventory;

/// Most nodes a cluster may hold, counting every group's `count`: the largest published training runs use
/// 2,000-3,000 8-GPU nodes (Llama 3: 16,384 H100 = 2,048 nodes), but a single-runtime plan over more than
/// 1,024 nodes is beyond what this planner is built for, and a larger figure in a file is far more likely a
/// typo (a GPU count written as a node count) than a real fleet.
pub const MAX_CLUSTER_NODES: u64 = 1024;

/// Most GPUs one node may hold: 8-GPU boards (HGX) are the norm and the largest single-system GPU domains
/// are 72 (GB200 NVL72, sold as 18 trays of 4); 256 leaves room for any server while keeping a typo (a
/// cluster's GPU count inside one node) from reading as one machine.
const MAX_GPUS_PER_NODE: usize = 256;

/// Cluster files hold one inventory per node group; an inventory with every optional field is about 1 KiB per
/// GPU, so [`MAX_CLUSTER_NODES`] distinct 8-GPU groups fit in 8 MiB. Twice that is not a cluster description.
pub const MAX_CLUSTER_BYTES: u64 = 16 << 20;

/// Fastest fabric link accepted, in GB/s one direction: NVLink 5 gives 900 GB/s per direction per GPU and
/// InfiniBand XDR 100 GB/s per port; 10,000 GB/s per link is a unit mistake (bits for bytes, MB for GB).
pub(crate) const MAX_FABRIC_BANDWIDTH_GB_S: f64 = 10_000.0;

/// Slowest fabric latency accepted, in microseconds: InfiniBand is about 1 µs and TCP over Ethernet tens of
/// µs; one second is a unit mistake (ms or ns for µs).
pub(crate) const MAX_FABRIC_LATENCY_US: f64 = 1_000_000.0;

/// Most links (NICs, ports) per node: an 8-GPU node has 8 compute NICs plus a few for storage; 64 covers any
/// node with headroom.
pub(crate) const MAX_LINKS_PER_NODE: u32 = 64;

/// The inter-node link technology.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum FabricKind {
    Infiniband,
    /// RDMA over Converged Ethernet.
    Roce,
    /// TCP over Ethernet.
    Ethernet,
    /// NVLink between nodes (an NVLink switch domain such as GB200 NVL72).
    Nvlink,
}

/// A figure and where it comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Sourced<T> {
    pub value: T,
    /// Datasheet, specification or measurement the figure comes from.
    pub source: String,
}

/// The link between nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Fabric {
    pub kind: FabricKind,
    /// Links (NICs, ports) per node that carry inter-node traffic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub links_per_node: Option<Sourced<u32>>,
    /// Bandwidth of one link, one direction, in GB/s (10^9 bytes per second).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth_gb_s: Option<Sourced<f64>>,
    /// One-way latency between two nodes, in microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<Sourced<f64>>,
}

fn one() -> u32 {
    1
}

/// A group of identical nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Node {
    /// Unique in the cluster.
    pub name: String,
    /// How many identical nodes of this shape (at least 1).
    #[serde(default = "one")]
    pub count: u32,
    /// What each node has: the inventory document (`optimizer schema inventory`), inline.
    pub inventory: Inventory,
}

/// Nodes and the fabric between them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    pub nodes: Vec<Node>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<Fabric>,
}

/// A count over the cluster that does not fit 64 bits (cannot happen within the limits; checked anyway).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the cluster's {what} overflows 64-bit arithmetic")]
pub struct CountOverflow {
    pub what: &'static str,
}

impl Cluster {
    /// Nodes in the cluster, every group's `count` added up.
    pub fn node_count(&self) -> Result<u64, CountOverflow> {
        self.nodes.iter().try_fold(0u64, |n, g| {
            n.checked_add(u64::from(g.count))
                .ok_or(CountOverflow { what: "node count" })
        })
    }

    /// GPUs in the cluster: each group's GPUs per node times its `count`, added up.
    pub fn device_count(&self) -> Result<u64, CountOverflow> {
        let overflow = CountOverflow {
            what: "device count",
        };
        self.nodes.iter().try_fold(0u64, |n, g| {
            let gpus = u64::try_from(g.inventory.gpus.len()).map_err(|_| overflow.clone())?;
            gpus.checked_mul(u64::from(g.count))
                .and_then(|d| n.checked_add(d))
                .ok_or_else(|| overflow.clone())
        })
    }
}

/// Why cluster text is not a usable cluster. `at` names the node group as `nodes[1] (dgx)` or the fabric
/// field as `fabric.latency_us`; the messages are those `InventoryError::Invalid` carries after the path.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvalidCluster {
    /// The YAML does not parse or type (the message of `optimizer_input::yaml::from_str`).
    #[error("{0}")]
    Yaml(optimizer_input::yaml::YamlError),
    #[error("nodes: a cluster needs at least one node group")]
    NoNodes,
    #[error("nodes[{index}]: name is empty")]
    EmptyName { index: usize },
    #[error("{at}: name appears twice")]
    DuplicateName { at: String },
    #[error("{at}: count is 0; a node group has at least 1 node")]
    ZeroCount { at: String },
    #[error("{at}: count {count} brings the cluster past the limit of {MAX_CLUSTER_NODES} nodes")]
    TooManyNodes { at: String, count: u32 },
    #[error("{at}: {gpus} GPUs in one node exceed the limit of {MAX_GPUS_PER_NODE}")]
    TooManyGpus { at: String, gpus: usize },
    /// A node group's inventory fails [`super::parse_inventory`]'s checks; its message is in this one's text,
    /// so it is not also a `source` (a printed cause chain would repeat it).
    #[error("{at}: inventory: {error}")]
    Inventory {
        at: String,
        error: super::InvalidInventory,
    },
    #[error("{at}: {value} must be a positive finite number at most {max}")]
    Figure {
        at: &'static str,
        value: f64,
        max: f64,
    },
    #[error("fabric.links_per_node: {links} must be in 1..={MAX_LINKS_PER_NODE}")]
    LinksPerNode { links: u32 },
    #[error("{at}: empty source; say where the figure comes from")]
    EmptySource { at: &'static str },
}

/// Parses cluster YAML and checks what the types cannot: every node group's inventory (as
/// [`super::parse_inventory`] does), counts within [`MAX_CLUSTER_NODES`] and [`MAX_GPUS_PER_NODE`], unique
/// names, and fabric figures that are finite, positive, within their limits and sourced.
pub fn parse_cluster(text: &str) -> Result<Cluster, InvalidCluster> {
    let c: Cluster = optimizer_input::yaml::from_str(text).map_err(InvalidCluster::Yaml)?;
    validate(&c)?;
    Ok(c)
}

fn validate(c: &Cluster) -> Result<(), InvalidCluster> {
    if c.nodes.is_empty() {
        return Err(InvalidCluster::NoNodes);
    }
    let mut names = std::collections::BTreeSet::new();
    let mut total = 0u64;
    for (i, g) in c.nodes.iter().enumerate() {
        let at = format!("nodes[{i}] ({})", g.name);
        if g.name.trim().is_empty() {
            return Err(InvalidCluster::EmptyName { index: i });
        }
        if !names.insert(g.name.as_str()) {
            return Err(InvalidCluster::DuplicateName { at });
        }
        if g.count == 0 {
            return Err(InvalidCluster::ZeroCount { at });
        }
        // Each count is a u32, at most 2^32 per group; the sum is checked before it can pass the limit far.
        total = total.saturating_add(u64::from(g.count));
        if total > MAX_CLUSTER_NODES {
            return Err(InvalidCluster::TooManyNodes { at, count: g.count });
        }
        if g.inventory.gpus.len() > MAX_GPUS_PER_NODE {
            return Err(InvalidCluster::TooManyGpus {
                at,
                gpus: g.inventory.gpus.len(),
            });
        }
        super::validate(&g.inventory).map_err(|error| InvalidCluster::Inventory { at, error })?;
    }
    if let Some(f) = &c.fabric {
        check_figure(
            "fabric.bandwidth_gb_s",
            f.bandwidth_gb_s.as_ref(),
            MAX_FABRIC_BANDWIDTH_GB_S,
        )?;
        check_figure(
            "fabric.latency_us",
            f.latency_us.as_ref(),
            MAX_FABRIC_LATENCY_US,
        )?;
        if let Some(l) = &f.links_per_node {
            if l.value == 0 || l.value > MAX_LINKS_PER_NODE {
                return Err(InvalidCluster::LinksPerNode { links: l.value });
            }
            check_source("fabric.links_per_node", &l.source)?;
        }
    }
    Ok(())
}

fn check_figure(
    at: &'static str,
    figure: Option<&Sourced<f64>>,
    max: f64,
) -> Result<(), InvalidCluster> {
    let Some(f) = figure else { return Ok(()) };
    if !(f.value.is_finite() && f.value > 0.0 && f.value <= max) {
        return Err(InvalidCluster::Figure {
            at,
            value: f.value,
            max,
        });
    }
    check_source(at, &f.source)
}

fn check_source(at: &'static str, source: &str) -> Result<(), InvalidCluster> {
    if source.trim().is_empty() {
        return Err(InvalidCluster::EmptySource { at });
    }
    Ok(())
}

/// Reads and checks a cluster YAML file: a regular file of at most [`MAX_CLUSTER_BYTES`], then
/// [`parse_cluster`]. Errors name the file.
pub fn load_cluster(path: &std::path::Path) -> Result<Cluster, super::InventoryError> {
    let text = super::read_bounded(path, MAX_CLUSTER_BYTES, "a cluster description")?;
    parse_cluster(&text).map_err(|e| super::InventoryError::Invalid {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}
