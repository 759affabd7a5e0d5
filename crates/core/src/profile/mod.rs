//! Profiles: hardware devices, nodes (the machines GPUs sit in), workload presets and rule tables as validated
//! YAML data.
//!
//! The built-in set is embedded in the binary (an installed `optimizer` works anywhere) and overlaid by user
//! directories (`$XDG_CONFIG_HOME/optimizer/profiles`, then each `--profiles DIR`). Every file is checked against
//! its JSON Schema (generated from [`types`]; [`json_schema`]), then deserialized, then checked for what a
//! schema cannot say (sources for every number, finite numbers, named limits, TFLOPS consistent with SMs ×
//! clock, unique ids, non-overlapping match rules). May touch: profile files.
//!
//! # Overlay semantics
//! - A file whose id equals a built-in one (a hardware profile, a workload, or a rule *table*) replaces it
//!   whole, and `profiles list` says which built-in it overrides. The user directories form one layer: the same
//!   id in two user files is an error naming both.
//! - Rule rows of one kind from every table in force are merged. A query ([`ProfileSet::reserve`],
//!   [`ProfileSet::efficiency`], [`ProfileSet::cpu_threads`], [`ProfileSet::precision`],
//!   [`ProfileSet::attention`], [`ProfileSet::kv_cache`]) takes the rows of the runtime it plans before
//!   runtime-neutral (`any`) rows, so a llama.cpp plan never cites a vLLM or PyTorch rule.
//! - Memory reserves add up (every `reserve` row for the device and runtime applies), with checked arithmetic.
//!   Every other kind answers a query with one row: two rows in force that would answer the same case (the
//!   same runtime, device and phase for efficiency; the same objective for threads; the same runtime and
//!   device with overlapping compute capabilities, and for attention the same `min_sequence`; one runtime
//!   overhead per runtime and device; one kv-cache row per runtime and type) are an error naming both rows and
//!   both files, as is a rule id defined twice (provenance cites a rule by its id alone).
//! - To change a built-in row, replace its table (same table id); to add rows, add a table with a new id.
//!
//! Built-in files are validated when they are built and tested, user overlays when they are loaded: a run
//! without overlays deserializes the built-in set from JSON converted at build time ([`builtin_set`]) and
//! compiles no schema. Trade-off: a binary built from edited profiles without running the tests trusts them.
//!
//! Trade-off: conflicting rows are refused rather than resolved by file order, so an overlay cannot shadow a
//! built-in row silently, at the cost of copying a whole table to change one row of it.

pub mod lookup;
pub mod matching;
mod node_inventory;
pub mod prices;
mod rulebook;
pub mod types;
pub mod validate;

use std::path::{Path, PathBuf};

pub use node_inventory::node_inventory;
pub(crate) use rulebook::RuleBook;
pub use rulebook::RuleRow;
pub use types::*;
pub use validate::Diagnostic;

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/embedded_profiles.rs"));
}

/// The folder of the built-in price tables (`profiles/prices/`), which are not profiles of a [`ProfileKind`]:
/// `recommend` reads them (issue 29).
const PRICES_DIR: &str = "prices";

/// The kinds of profile file, by directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileKind {
    Hardware,
    Workload,
    Rules,
    /// A machine: its GPUs (a hardware profile and a count), host and GPU links.
    Node,
}

impl ProfileKind {
    /// The directory a kind lives in under `crates/core/profiles/`.
    pub fn dir(self) -> &'static str {
        match self {
            ProfileKind::Hardware => "hardware",
            ProfileKind::Workload => "workloads",
            ProfileKind::Rules => "rules",
            ProfileKind::Node => "nodes",
        }
    }

    /// The name of its schema (`optimizer schema NAME`, `schemas/NAME.schema.json`).
    fn schema_name(self) -> &'static str {
        match self {
            ProfileKind::Hardware => "hardware-profile",
            ProfileKind::Workload => "workload",
            ProfileKind::Rules => "rules",
            ProfileKind::Node => "node",
        }
    }

    fn from_dir(name: &str) -> Option<Self> {
        match name {
            "hardware" => Some(ProfileKind::Hardware),
            "workloads" => Some(ProfileKind::Workload),
            "rules" => Some(ProfileKind::Rules),
            "nodes" => Some(ProfileKind::Node),
            _ => None,
        }
    }
}

/// The JSON Schema of one kind of profile file, generated from its type. Profile validation builds its
/// validators from it; the registry in [`crate::schema`] publishes it (the registry sits above this module, so
/// this module never imports it).
pub(crate) fn json_schema(kind: ProfileKind) -> serde_json::Value {
    let schema = match kind {
        ProfileKind::Hardware => schemars::schema_for!(HardwareProfile),
        ProfileKind::Workload => schemars::schema_for!(WorkloadProfile),
        ProfileKind::Rules => schemars::schema_for!(RuleTable),
        ProfileKind::Node => schemars::schema_for!(NodeProfile),
    };
    serde_json::to_value(schema).unwrap_or(serde_json::Value::Null)
}

/// Where a profile came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// `builtin:hardware/rtx-4090.yaml` for embedded files, else the file's path.
    pub path: String,
    pub builtin: bool,
}

/// A profile with its origin, and the one it replaced, if any.
#[derive(Debug, Clone)]
pub struct Entry<T> {
    pub value: T,
    pub origin: Origin,
    pub overrides: Option<Origin>,
}

/// Every profile in force, and the rule book indexed from its rule tables.
///
/// The fields are read-only once a set is loaded: the book is built from `rules` once ([`load`] and
/// [`validate::validate_files`] build it; a set built by hand with [`ProfileSet::new`] builds it on its first
/// query), so rows changed afterwards would not be seen by the queries.
#[derive(Clone, Default)]
pub struct ProfileSet {
    pub hardware: Vec<Entry<HardwareProfile>>,
    pub workloads: Vec<Entry<WorkloadProfile>>,
    pub rules: Vec<Entry<RuleTable>>,
    /// Node profiles (`--hardware dgx-h100`); [`ProfileSet::new`] leaves them empty.
    pub nodes: Vec<Entry<NodeProfile>>,
    book: std::sync::OnceLock<RuleBook>,
}

/// The entries; the rule book is derived from them.
impl std::fmt::Debug for ProfileSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProfileSet")
            .field("hardware", &self.hardware)
            .field("workloads", &self.workloads)
            .field("rules", &self.rules)
            .field("nodes", &self.nodes)
            .finish_non_exhaustive()
    }
}

/// A rule query that cannot be answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// The reserves that apply sum past `u64::MAX` bytes (validation bounds each row, so only many huge rows
    /// reach this).
    #[error(
        "memory reserves {rules:?} for {runtime} on a {target:?} of {capacity_bytes} bytes overflow 64-bit arithmetic"
    )]
    ReserveOverflow {
        target: ReserveTarget,
        runtime: RuntimeId,
        capacity_bytes: u64,
        rules: Vec<String>,
    },
}

impl ProfileSet {
    pub fn hardware(&self, id: &str) -> Option<&Entry<HardwareProfile>> {
        self.hardware.iter().find(|e| e.value.id == id)
    }

    pub fn workload(&self, id: &str) -> Option<&Entry<WorkloadProfile>> {
        self.workloads.iter().find(|e| e.value.id == id)
    }

    /// The node profile with exactly this id.
    pub fn node(&self, id: &str) -> Option<&Entry<NodeProfile>> {
        self.nodes.iter().find(|e| e.value.id == id)
    }

    /// llama.cpp's per-GPU runtime overhead in bytes and the rule it comes from (0 and `None` without one):
    /// the `runtime-overhead` row for GPUs and llama.cpp.
    pub fn llama_cpp_gpu_overhead(&self) -> (u64, Option<&str>) {
        self.runtime_overhead(ReserveTarget::Gpu, RuntimeId::LlamaCpp)
            .map_or((0, None), |r| (r.fixed_bytes, Some(r.id.as_str())))
    }

    /// Whether a hardware profile of this set describes `gpu` (by PCI id, name or normalized name), so its SM
    /// count and peaks come from the profile rather than from the probe.
    pub fn describes(&self, gpu: &crate::hardware::Gpu) -> bool {
        let hw: Vec<&HardwareProfile> = self.hardware.iter().map(|e| &e.value).collect();
        matches!(
            matching::resolve(gpu, &hw, &[]),
            matching::Resolution::Profile { .. }
        )
    }

    /// A set of these entries (its rule book is built on the first query).
    pub fn new(
        hardware: Vec<Entry<HardwareProfile>>,
        workloads: Vec<Entry<WorkloadProfile>>,
        rules: Vec<Entry<RuleTable>>,
    ) -> Self {
        ProfileSet {
            hardware,
            workloads,
            rules,
            nodes: Vec::new(),
            book: std::sync::OnceLock::new(),
        }
    }

    /// The rule book of this set's tables, built once.
    fn rule_book(&self) -> &RuleBook {
        self.book
            .get_or_init(|| RuleBook::new(self.rules.iter().map(|e| &e.value)))
    }

    /// Every row of kind `T` in force (`set.rows::<EfficiencyRule>()`), in table order.
    pub fn rows<'a, T: RuleRow + 'a>(&'a self) -> impl Iterator<Item = &'a T> {
        rulebook::rows(self.rules.iter().map(|e| &e.value))
    }

    /// The GPU architecture rows of every `gpu-architectures` table.
    pub fn architectures(&self) -> impl Iterator<Item = &ArchitectureRule> {
        self.rows()
    }

    /// Memory to leave alone on a device of `capacity_bytes` when `runtime` runs there: the sum, over every
    /// `reserve` row for the device kind and the runtime (or `any`), of `fixed_bytes + fraction × capacity`
    /// (rounded down), with the ids of those rows in table order. `runtime-overhead` rows are left out: the
    /// runtime's memory model counts them ([`Self::runtime_overhead`]). Checked arithmetic: an overflow is an
    /// error, never a wrapped small number.
    pub fn reserve(
        &self,
        target: ReserveTarget,
        runtime: RuntimeId,
        capacity_bytes: u64,
    ) -> Result<(u64, Vec<String>), RuleError> {
        self.rule_book().reserve(target, runtime, capacity_bytes)
    }

    /// The runtime's own per-device allocation (the `runtime-overhead` row for the device kind and runtime;
    /// validation allows at most one per pair, `any` rows counting for every runtime).
    pub fn runtime_overhead(
        &self,
        target: ReserveTarget,
        runtime: RuntimeId,
    ) -> Option<&ReserveRule> {
        self.rule_book().runtime_overhead(target, runtime)
    }

    /// The efficiency a runtime reaches on a device kind in one phase: the runtime's own row, else an `any`
    /// row; a row whose compute-capability range holds `cc` before one without a range.
    pub fn efficiency(
        &self,
        device: ReserveTarget,
        runtime: RuntimeId,
        phase: Phase,
        cc: Option<Capability>,
    ) -> Option<&EfficiencyRule> {
        self.rule_book().efficiency(device, runtime, phase, cc)
    }

    /// The thread rule for an objective (validation allows one per objective).
    pub fn cpu_threads(&self, objective: Objective) -> Option<&ThreadRule> {
        self.rule_book().cpu_threads(objective)
    }

    /// Compute precision for `runtime` on a GPU of compute capability `cc`, or on the CPU when `cc` is `None`:
    /// the runtime's own row, else an `any` row. Rows for one runtime and device do not overlap (validated), so
    /// the answer does not depend on table order.
    pub fn precision(&self, runtime: RuntimeId, cc: Option<Capability>) -> Option<&PrecisionRule> {
        self.rule_book().precision(runtime, cc)
    }

    /// Attention kernel for `runtime` on a GPU of compute capability `cc` (the CPU when `None`) at a sequence of
    /// `sequence_tokens`: among the rows whose range and `min_sequence` admit the case, the runtime's own rows
    /// before `any` rows, then the largest `min_sequence` (the most specific row).
    pub fn attention(
        &self,
        runtime: RuntimeId,
        cc: Option<Capability>,
        sequence_tokens: u64,
    ) -> Option<&AttentionRule> {
        self.rule_book().attention(runtime, cc, sequence_tokens)
    }

    /// When `runtime` may store the KV cache as `cache_type` instead of the workload's preference: the
    /// runtime's own row, else an `any` row. `None`: only when memory requires it.
    pub fn kv_cache(&self, runtime: RuntimeId, cache_type: &str) -> Option<&KvCacheRule> {
        self.rule_book().kv_cache(runtime, cache_type)
    }
}

/// One profile file to read.
#[derive(Debug, Clone)]
pub struct SourceFile {
    pub origin: Origin,
    pub kind: Option<ProfileKind>,
    pub text: String,
}

/// Profile files are a few KiB; anything larger is not a profile.
pub const MAX_PROFILE_BYTES: u64 = 1 << 20;

/// The embedded built-in profile files (the price tables apart, [`PRICES_DIR`]).
pub fn builtin_files() -> Vec<SourceFile> {
    embedded::EMBEDDED
        .iter()
        .filter(|(rel, _)| rel.split('/').next() != Some(PRICES_DIR))
        .map(|(rel, text)| SourceFile {
            origin: Origin {
                path: format!("builtin:{rel}"),
                builtin: true,
            },
            kind: rel.split('/').next().and_then(ProfileKind::from_dir),
            text: (*text).to_string(),
        })
        .collect()
}

/// Reads profile files from paths: a file, or a directory searched for `*.yaml` (recursively). A file's kind
/// comes from its parent directory's name (`hardware`, `workloads`, `rules`, `nodes`), else from its content.
///
/// A file reached by several names (links, hard links, a path given twice) is read once, under the first of
/// its names in sorted order: files are identified by (device, inode) before anything is read, so 3,000 links
/// to one 1 MB profile cost one read and one validation (issue 24: they took 2.9 GB and 71 s). Over all
/// `paths` together at most [`MAX_OVERLAY_FILES`] distinct files and [`MAX_OVERLAY_BYTES`] are read; past
/// either the path that brought them is reported (and the load refused) rather than read on.
pub fn read_paths(paths: &[PathBuf]) -> (Vec<SourceFile>, Vec<Diagnostic>) {
    let mut files = Vec::new();
    let mut diags = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut bytes = 0u64;
    for p in paths {
        let mut found = Vec::new();
        if p.is_dir() {
            let mut walk = Walk {
                visited: std::collections::HashSet::new(),
                files: &mut found,
                diags: &mut diags,
            };
            walk.dir(p, 0);
            found.sort_by(|a, b| a.0.cmp(&b.0));
        } else {
            found.push((p.clone(), std::fs::metadata(p).ok()));
        }
        for (f, meta) in found {
            // A name for a file already taken is skipped; one that cannot be stat'ed goes to `read_file`,
            // which reports why.
            let size = match &meta {
                Some(m) if m.is_file() => {
                    if !seen.insert(file_id(m)) {
                        continue;
                    }
                    m.len().min(MAX_PROFILE_BYTES)
                }
                _ => 0,
            };
            let over = if files.len() >= MAX_OVERLAY_FILES {
                Some(format!(
                    "more than {MAX_OVERLAY_FILES} distinct profile files under the overlays (the built-in set has about a hundred); not read past {}",
                    f.display()
                ))
            } else if bytes.saturating_add(size) > MAX_OVERLAY_BYTES {
                Some(format!(
                    "the overlays' profile files pass {} MiB together (the built-in set is under 1 MiB); not read past {}",
                    MAX_OVERLAY_BYTES >> 20,
                    f.display()
                ))
            } else {
                None
            };
            if let Some(message) = over {
                diags.push(Diagnostic {
                    path: p.display().to_string(),
                    instance_path: String::new(),
                    message,
                });
                return (files, diags);
            }
            match read_file(&f) {
                Ok(sf) => {
                    bytes = bytes.saturating_add(sf.text.len() as u64);
                    files.push(sf);
                }
                Err(d) => diags.push(d),
            }
        }
    }
    (files, diags)
}

/// Directory levels below an overlay root that are searched. Real overlays are `DIR/{hardware,workloads,
/// rules}/*.yaml`, two levels; 16 leaves room for any grouping while bounding the recursion.
const MAX_OVERLAY_DEPTH: usize = 16;
/// Distinct profile files read from all overlays together. The built-in set has 75; a thousand is more than
/// any user set of devices, workloads and rule tables, and bounds the validations (each file is schema-checked
/// and compared with every other).
pub const MAX_OVERLAY_FILES: usize = 1_000;
/// Bytes of profile files read from all overlays together. The built-in set is 183 KB (75 files, the largest
/// under 10 KB); 16 MiB is 90 times that, and 16 files at the per-file limit [`MAX_PROFILE_BYTES`].
const MAX_OVERLAY_BYTES: u64 = 16 << 20;
/// Names ending in `.yaml` the walk of one overlay tree collects before duplicates are dropped: bounds the
/// list of names (a few hundred bytes each) however many links a tree holds.
const MAX_OVERLAY_NAMES: usize = 65_536;

/// The walk of one overlay tree. Directories are identified by (device, inode), so symbolic links that lead
/// back up the tree (two self-links once made the walk exponential) are entered once; entries named `*.yaml`
/// that are not regular files (FIFOs, devices, dangling links) are reported instead of opened. Each file found
/// comes with its metadata (links followed), so [`read_paths`] can drop a second name for one file unread.
struct Walk<'a> {
    visited: std::collections::HashSet<(u64, u64)>,
    files: &'a mut Vec<(PathBuf, Option<std::fs::Metadata>)>,
    diags: &'a mut Vec<Diagnostic>,
}

impl Walk<'_> {
    fn diag(&mut self, path: &Path, message: String) {
        self.diags.push(Diagnostic {
            path: path.display().to_string(),
            instance_path: String::new(),
            message,
        });
    }

    fn dir(&mut self, dir: &Path, depth: usize) {
        let Ok(meta) = std::fs::metadata(dir) else {
            return;
        };
        if !self.visited.insert(file_id(&meta)) {
            return;
        }
        if depth > MAX_OVERLAY_DEPTH {
            self.diag(
                dir,
                format!("nested deeper than {MAX_OVERLAY_DEPTH} directories below the overlay; not searched"),
            );
            return;
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let is_yaml = p.extension().is_some_and(|x| x == "yaml" || x == "yml");
            // Follows links: a linked profile or directory counts as what it points to.
            match std::fs::metadata(&p) {
                Ok(m) if m.is_dir() => self.dir(&p, depth + 1),
                Ok(m) if is_yaml && !m.is_file() => {
                    let what = optimizer_input::input::NotRegular {
                        what: optimizer_input::input::describe_file_type(&m.file_type()),
                    };
                    self.diag(&p, format!("{what}; skipped"));
                }
                found if is_yaml => {
                    if self.files.len() >= MAX_OVERLAY_NAMES {
                        self.diag(
                            dir,
                            format!("more than {MAX_OVERLAY_NAMES} names of profile files in the overlay; the rest are not read"),
                        );
                        return;
                    }
                    // A dangling link named like a profile (no metadata): `read_file` reports it.
                    self.files.push((p, found.ok()));
                }
                _ => {}
            }
        }
    }
}

/// (device, inode) of a file, for the walk's visited set; 0 off Unix, where links cannot form cycles the
/// same way and the depth bound still holds.
fn file_id(meta: &std::fs::Metadata) -> (u64, u64) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        (meta.dev(), meta.ino())
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        (0, 0)
    }
}

fn read_file(path: &Path) -> Result<SourceFile, Diagnostic> {
    let diag = |message: String| Diagnostic {
        path: path.display().to_string(),
        instance_path: String::new(),
        message,
    };
    // Regular files only, at most MAX_PROFILE_BYTES: a FIFO must not hang every command that loads profiles.
    let text = optimizer_input::input::read_text_bounded(path, MAX_PROFILE_BYTES, "a profile")
        .map_err(|e| diag(e.to_string()))?;
    let kind = path
        .parent()
        .and_then(|p| p.file_name())
        .and_then(|n| n.to_str())
        .and_then(ProfileKind::from_dir);
    Ok(SourceFile {
        origin: Origin {
            path: path.display().to_string(),
            builtin: false,
        },
        kind,
        text,
    })
}

/// The user overlay directory: `$XDG_CONFIG_HOME/optimizer/profiles`, else `~/.config/optimizer/profiles`.
pub fn user_dir(xdg_config_home: Option<&str>, home: Option<&str>) -> Option<PathBuf> {
    match (xdg_config_home.filter(|s| !s.is_empty()), home) {
        (Some(x), _) => Some(PathBuf::from(x).join("optimizer/profiles")),
        (None, Some(h)) => Some(PathBuf::from(h).join(".config/optimizer/profiles")),
        _ => None,
    }
}

/// The built-in set, deserialized from the JSON that build.rs converted the embedded YAML into. It is not
/// validated here: every embedded file is validated when it is built and tested (`tests/it/profiles_validate.rs`
/// checks the files, `tests/it/startup_builtin.rs` that this set equals the validated one), which takes the
/// schema compilation and YAML scan off every run. A file that does not deserialize (possible only where
/// those tests were not run) is a diagnostic naming it, never a panic.
pub fn builtin_set() -> Result<ProfileSet, Vec<Diagnostic>> {
    fn entry<T: serde::de::DeserializeOwned>(
        json: &str,
        origin: &Origin,
    ) -> Result<Entry<T>, Diagnostic> {
        serde_json::from_str(json)
            .map(|value| Entry {
                value,
                origin: origin.clone(),
                overrides: None,
            })
            .map_err(|e| Diagnostic {
                path: origin.path.clone(),
                instance_path: String::new(),
                message: format!("built-in profile does not deserialize: {e}"),
            })
    }
    let mut set = ProfileSet::default();
    let mut diags = Vec::new();
    for ((rel, _), json) in embedded::EMBEDDED.iter().zip(embedded::EMBEDDED_JSON) {
        let origin = Origin {
            path: format!("builtin:{rel}"),
            builtin: true,
        };
        let top = rel.split('/').next();
        // Price tables (issue 29, `recommend`) live beside the profiles but are not profiles of these kinds.
        if top == Some(PRICES_DIR) {
            continue;
        }
        let kind = top.and_then(ProfileKind::from_dir);
        let pushed = match kind {
            Some(ProfileKind::Hardware) => entry(json, &origin).map(|e| set.hardware.push(e)),
            Some(ProfileKind::Workload) => entry(json, &origin).map(|e| set.workloads.push(e)),
            Some(ProfileKind::Rules) => entry(json, &origin).map(|e| set.rules.push(e)),
            Some(ProfileKind::Node) => entry(json, &origin).map(|e| set.nodes.push(e)),
            None => Err(Diagnostic {
                path: origin.path.clone(),
                instance_path: String::new(),
                message: "built-in profile outside hardware/, workloads/, rules/ or nodes/".into(),
            }),
        };
        if let Err(d) = pushed {
            diags.push(d);
        }
    }
    if diags.is_empty() {
        // Built once, here: every query of a loaded set reads this index.
        set.rule_book();
        Ok(set)
    } else {
        Err(diags)
    }
}

/// Loads the built-in set ([`builtin_set`]) overlaid by `overlay_dirs` (in order; missing directories are
/// skipped). Every overlay file is validated (schema, values, and the checks across files over the whole set
/// in force); any error fails the load with every diagnostic. Without overlay files nothing is validated at
/// run time.
pub fn load(overlay_dirs: &[PathBuf]) -> Result<ProfileSet, Vec<Diagnostic>> {
    let builtin = builtin_set()?;
    let existing: Vec<PathBuf> = overlay_dirs
        .iter()
        .filter(|d| d.is_dir())
        .cloned()
        .collect();
    if existing.is_empty() {
        return Ok(builtin);
    }
    let (user, mut diags) = read_paths(&existing);
    if user.is_empty() && diags.is_empty() {
        return Ok(builtin);
    }
    let (set, d) = validate::validate_overlay(builtin, &user);
    diags.extend(d);
    if diags.is_empty() {
        Ok(set)
    } else {
        Err(diags)
    }
}
