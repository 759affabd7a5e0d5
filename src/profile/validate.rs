//! Validation of profile files: JSON Schema first (every error, with its instance path), then the typed value,
//! then what a schema cannot say. Per file: the id is the file name in lower-kebab-case; every number is
//! positive and finite and has a source; PCI ids and compute capabilities are well formed. Across files: ids
//! are unique, a hardware profile's architecture exists and its TFLOPS agree with SMs × boost clock × the
//! architecture's per-SM rate (within [`TFLOPS_TOLERANCE`]), and no device would match two profiles.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use serde_json::Value;

use super::matching::{candidates, tflops};
use super::types::{DeviceKind, HardwareProfile, Mode, RuleTable, Vendor, WorkloadProfile};
use super::{Entry, Origin, ProfileKind, ProfileSet, SourceFile};
use crate::hardware::parse_capability;

/// Published TFLOPS and SMs × boost clock × per-SM rate agree within 5 %: vendors round, and some quote a
/// clock a few MHz off the one in their own tables.
pub const TFLOPS_TOLERANCE: f64 = 0.05;

/// One problem in one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub path: String,
    /// JSON pointer into the document (`/memory/bandwidth_gb_s`), empty for the whole file.
    pub instance_path: String,
    pub message: String,
}

impl std::fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.instance_path.is_empty() {
            write!(f, "{}: {}", self.path, self.message)
        } else {
            write!(f, "{}: {}: {}", self.path, self.instance_path, self.message)
        }
    }
}

fn validator(kind: ProfileKind) -> Result<&'static jsonschema::Validator, String> {
    static HW: OnceLock<Result<jsonschema::Validator, String>> = OnceLock::new();
    static WL: OnceLock<Result<jsonschema::Validator, String>> = OnceLock::new();
    static RU: OnceLock<Result<jsonschema::Validator, String>> = OnceLock::new();
    let (cell, name) = match kind {
        ProfileKind::Hardware => (&HW, "hardware-profile"),
        ProfileKind::Workload => (&WL, "workload"),
        ProfileKind::Rules => (&RU, "rules"),
    };
    cell.get_or_init(|| {
        let schema = super::schema::by_name(name).ok_or_else(|| format!("no schema {name}"))?;
        jsonschema::validator_for(&schema)
            .map_err(|e| format!("schema {name} does not compile: {e}"))
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// Guesses a file's kind from its content when its directory does not say.
fn sniff(v: &Value) -> Option<ProfileKind> {
    let o = v.as_object()?;
    if o.contains_key("rules") && o.contains_key("kind") {
        Some(ProfileKind::Rules)
    } else if o.contains_key("mode") || o.contains_key("objective") {
        Some(ProfileKind::Workload)
    } else if o.contains_key("vendor") || o.contains_key("memory") {
        Some(ProfileKind::Hardware)
    } else {
        None
    }
}

fn file_stem(path: &str) -> &str {
    let name = path.rsplit(['/', '\\']).next().unwrap_or(path);
    let name = name.strip_prefix("builtin:").unwrap_or(name);
    name.strip_suffix(".yaml")
        .or_else(|| name.strip_suffix(".yml"))
        .unwrap_or(name)
}

fn is_kebab(id: &str) -> bool {
    !id.is_empty()
        && id.split('-').all(|part| {
            !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        })
}

/// Every numeric leaf of `v` with its dotted path (`memory.bandwidth_gb_s`; array items as `list.0`).
fn numbers(v: &Value, prefix: &str, out: &mut Vec<(String, f64)>) {
    match v {
        Value::Number(n) => out.push((prefix.to_string(), n.as_f64().unwrap_or(f64::NAN))),
        Value::Object(m) => {
            for (k, x) in m {
                if k == "sources" && prefix.is_empty() {
                    continue;
                }
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                numbers(x, &p, out);
            }
        }
        Value::Array(items) => {
            for (i, x) in items.iter().enumerate() {
                numbers(x, &format!("{prefix}.{i}"), out);
            }
        }
        _ => {}
    }
}

fn pointer(dotted: &str) -> String {
    format!("/{}", dotted.replace('.', "/"))
}

/// Every number has a source (its path or a parent path is a key of `sources`), and every source key names a
/// field of the profile (sourcing a string such as `compute_capability` is welcome; a stale key is not).
fn check_sources(
    v: &Value,
    sources: &BTreeMap<String, String>,
    d: &mut impl FnMut(String, String),
) {
    let mut nums = Vec::new();
    numbers(v, "", &mut nums);
    let covers = |key: &str, path: &str| path == key || path.starts_with(&format!("{key}."));
    for (path, _) in &nums {
        if !sources.keys().any(|k| covers(k, path)) {
            d(
                pointer(path),
                format!(
                    "number has no source: add `sources.{path}` (or a parent path) saying where it comes from"
                ),
            );
        }
    }
    for (k, text) in sources {
        let field = k.split('.').try_fold(v, |node, seg| match node {
            Value::Object(m) => m.get(seg),
            Value::Array(items) => seg.parse::<usize>().ok().and_then(|i| items.get(i)),
            _ => None,
        });
        if k == "sources" || field.is_none() {
            d(
                format!("/sources/{k}"),
                format!("source for {k:?}, which is not a field of this profile"),
            );
        }
        if text.trim().is_empty() {
            d(format!("/sources/{k}"), "empty source".into());
        }
    }
}

/// Numbers must be positive and finite; `zero_ok` lists the paths where 0 is meaningful.
fn check_positive(
    v: &Value,
    allow_zero: bool,
    zero_ok: &[&str],
    d: &mut impl FnMut(String, String),
) {
    let mut nums = Vec::new();
    numbers(v, "", &mut nums);
    for (path, x) in nums {
        let allow_zero = allow_zero || zero_ok.contains(&path.as_str());
        let ok = x.is_finite() && (x > 0.0 || (allow_zero && x == 0.0));
        if !ok {
            d(
                pointer(&path),
                format!(
                    "{x} must be {}",
                    if allow_zero {
                        "non-negative"
                    } else {
                        "positive"
                    }
                ),
            );
        }
    }
}

fn check_capability(cc: Option<&str>, at: &str, d: &mut impl FnMut(String, String)) {
    if let Some(cc) = cc
        && parse_capability(cc).is_none()
    {
        d(
            at.into(),
            format!("compute capability {cc:?} is not MAJOR.MINOR"),
        );
    }
}

fn check_hardware(h: &HardwareProfile, v: &Value, d: &mut impl FnMut(String, String)) {
    check_positive(v, false, &[], d);
    check_sources(v, &h.sources, d);
    check_capability(h.compute_capability.as_deref(), "/compute_capability", d);
    for (i, id) in h.matching.pci_ids.iter().enumerate() {
        let ok = id.len() == 9
            && id.as_bytes()[4] == b':'
            && id
                .chars()
                .enumerate()
                .all(|(j, c)| j == 4 || c.is_ascii_digit() || ('a'..='f').contains(&c));
        if !ok {
            d(
                format!("/match/pci_ids/{i}"),
                format!("{id:?} is not a lower-case PCI id `vvvv:dddd`"),
            );
        }
    }
    if h.kind == DeviceKind::Gpu && h.memory.size_bytes.is_none() {
        d(
            "/memory".into(),
            "a GPU profile needs memory.size_bytes".into(),
        );
    }
    if h.kind == DeviceKind::Gpu && h.vendor == Vendor::Nvidia && h.compute_capability.is_none() {
        d(
            "/".into(),
            "an NVIDIA GPU profile needs compute_capability".into(),
        );
    }
    if h.kind == DeviceKind::Gpu
        && h.matching.pci_ids.is_empty()
        && h.matching.name_contains.is_empty()
    {
        d(
            "/match".into(),
            "a GPU profile needs pci_ids or name_contains to be matched".into(),
        );
    }
    if h.kind == DeviceKind::Soc && !h.memory.unified {
        d(
            "/memory/unified".into(),
            "a SoC profile's memory is unified".into(),
        );
    }
}

fn check_workload(w: &WorkloadProfile, v: &Value, d: &mut impl FnMut(String, String)) {
    // Embedding and training workloads generate no tokens.
    check_positive(v, false, &["generation_tokens"], d);
    check_sources(v, &w.sources, d);
    let trains = matches!(w.mode, Mode::FineTune | Mode::Training);
    if trains != w.training.is_some() {
        d(
            "/training".into(),
            if trains {
                "a fine-tune or training workload needs a `training` section".into()
            } else {
                "only fine-tune and training workloads have a `training` section".into()
            },
        );
    }
}

fn check_rules(t: &RuleTable, v: &Value, d: &mut impl FnMut(String, String)) {
    check_positive(v, true, &[], d);
    // (row id, compute-capability range) of every row, whatever the table kind.
    let rows: Vec<(&str, Option<&super::CapabilityRange>)> = match t {
        RuleTable::Precision { rules, .. } => rules
            .iter()
            .map(|r| (r.id.as_str(), Some(&r.compute_capability)))
            .collect(),
        RuleTable::Attention { rules, .. } => rules
            .iter()
            .map(|r| (r.id.as_str(), Some(&r.compute_capability)))
            .collect(),
        RuleTable::GpuArchitectures { rules, .. } => rules
            .iter()
            .map(|r| (r.id.as_str(), Some(&r.compute_capability)))
            .collect(),
        RuleTable::MemoryReserves { rules, .. } => {
            rules.iter().map(|r| (r.id.as_str(), None)).collect()
        }
        RuleTable::CpuThreads { rules, .. } => {
            rules.iter().map(|r| (r.id.as_str(), None)).collect()
        }
        RuleTable::Efficiency { rules, .. } => {
            rules.iter().map(|r| (r.id.as_str(), None)).collect()
        }
    };
    let mut ids = BTreeSet::new();
    for (i, (id, cc)) in rows.into_iter().enumerate() {
        if !is_kebab(id) {
            d(
                format!("/rules/{i}/id"),
                format!("rule id {id:?} is not lower-kebab-case"),
            );
        }
        if !ids.insert(id) {
            d(
                format!("/rules/{i}/id"),
                format!("duplicate rule id {id:?}"),
            );
        }
        let Some(cc) = cc else { continue };
        check_capability(
            cc.min.as_deref(),
            &format!("/rules/{i}/compute_capability/min"),
            d,
        );
        check_capability(
            cc.max.as_deref(),
            &format!("/rules/{i}/compute_capability/max"),
            d,
        );
        if let (Some(a), Some(b)) = (
            cc.min.as_deref().and_then(parse_capability),
            cc.max.as_deref().and_then(parse_capability),
        ) && a > b
        {
            d(
                format!("/rules/{i}/compute_capability"),
                "min is above max".into(),
            );
        }
    }
    match t {
        RuleTable::MemoryReserves { rules, .. } => {
            for (i, r) in rules.iter().enumerate() {
                if !(0.0..1.0).contains(&r.fraction) {
                    d(
                        format!("/rules/{i}/fraction"),
                        format!("{} must be in [0, 1)", r.fraction),
                    );
                }
            }
        }
        RuleTable::Efficiency { rules, .. } => {
            for (i, r) in rules.iter().enumerate() {
                if !(r.efficiency > 0.0 && r.efficiency <= 1.0) {
                    d(
                        format!("/rules/{i}/efficiency"),
                        format!("{} must be in (0, 1]", r.efficiency),
                    );
                }
            }
        }
        RuleTable::CpuThreads { rules, .. } => {
            for (i, r) in rules.iter().enumerate() {
                if r.threads_per_core == 0 {
                    d(
                        format!("/rules/{i}/threads_per_core"),
                        "must be at least 1".into(),
                    );
                }
            }
        }
        _ => {}
    }
}

fn table_id(t: &RuleTable) -> &str {
    match t {
        RuleTable::Precision { id, .. }
        | RuleTable::Attention { id, .. }
        | RuleTable::MemoryReserves { id, .. }
        | RuleTable::CpuThreads { id, .. }
        | RuleTable::GpuArchitectures { id, .. }
        | RuleTable::Efficiency { id, .. } => id,
    }
}

/// Adds `value` to `list`, replacing an entry of the same id from the built-in layer (an override) or
/// reporting a duplicate within one layer.
fn insert<T>(
    list: &mut Vec<Entry<T>>,
    value: T,
    origin: Origin,
    id: impl Fn(&T) -> &str,
    diags: &mut Vec<Diagnostic>,
) {
    let new_id = id(&value).to_string();
    if let Some(pos) = list.iter().position(|e| id(&e.value) == new_id) {
        let old = &list[pos];
        if old.origin.builtin && !origin.builtin {
            let overrides = Some(old.origin.clone());
            list[pos] = Entry {
                value,
                origin,
                overrides,
            };
        } else {
            diags.push(Diagnostic {
                path: origin.path.clone(),
                instance_path: "/id".into(),
                message: format!("duplicate id {new_id:?} (also in {})", old.origin.path),
            });
        }
        return;
    }
    list.push(Entry {
        value,
        origin,
        overrides: None,
    });
}

/// Validates files as one set. `with_builtin_rules`: when the files hold no `gpu-architectures` table, check
/// hardware TFLOPS against the built-in one (so a contributor can validate a single new profile).
pub fn validate_files(
    files: &[SourceFile],
    with_builtin_rules: bool,
) -> (ProfileSet, Vec<Diagnostic>) {
    let mut set = ProfileSet::default();
    let mut diags = Vec::new();
    let mut raw: BTreeMap<String, Value> = BTreeMap::new();
    for f in files {
        let path = f.origin.path.clone();
        let mut d = |instance_path: String, message: String| {
            diags.push(Diagnostic {
                path: path.clone(),
                instance_path,
                message,
            });
        };
        let value: Value = match crate::yaml::from_str(&f.text) {
            Ok(v) => v,
            Err(e) => {
                d(String::new(), format!("invalid YAML: {e}"));
                continue;
            }
        };
        let Some(kind) = f.kind.or_else(|| sniff(&value)) else {
            d(
                String::new(),
                "cannot tell the kind of profile: put it under hardware/, workloads/ or rules/"
                    .into(),
            );
            continue;
        };
        let validator = match validator(kind) {
            Ok(v) => v,
            Err(e) => {
                d(String::new(), e);
                continue;
            }
        };
        let errors: Vec<(String, String)> = validator
            .iter_errors(&value)
            .map(|e| (e.instance_path().to_string(), e.to_string()))
            .collect();
        if !errors.is_empty() {
            for (p, m) in errors {
                d(if p.is_empty() { "/".into() } else { p }, m);
            }
            continue;
        }
        let stem = file_stem(&path).to_string();
        let check_id = |id: &str, d: &mut dyn FnMut(String, String)| {
            if !is_kebab(id) {
                d("/id".into(), format!("id {id:?} is not lower-kebab-case"));
            }
            if id != stem {
                d(
                    "/id".into(),
                    format!("id {id:?} differs from the file name {stem:?}"),
                );
            }
        };
        match kind {
            ProfileKind::Hardware => match serde_json::from_value::<HardwareProfile>(value.clone())
            {
                Ok(h) => {
                    check_id(&h.id, &mut d);
                    check_hardware(&h, &value, &mut d);
                    raw.insert(h.id.clone(), value);
                    insert(
                        &mut set.hardware,
                        h,
                        f.origin.clone(),
                        |x| &x.id,
                        &mut diags,
                    );
                }
                Err(e) => d("/".into(), e.to_string()),
            },
            ProfileKind::Workload => match serde_json::from_value::<WorkloadProfile>(value.clone())
            {
                Ok(w) => {
                    check_id(&w.id, &mut d);
                    check_workload(&w, &value, &mut d);
                    insert(
                        &mut set.workloads,
                        w,
                        f.origin.clone(),
                        |x| &x.id,
                        &mut diags,
                    );
                }
                Err(e) => d("/".into(), e.to_string()),
            },
            ProfileKind::Rules => match serde_json::from_value::<RuleTable>(value.clone()) {
                Ok(t) => {
                    check_id(table_id(&t), &mut d);
                    check_rules(&t, &value, &mut d);
                    insert(
                        &mut set.rules,
                        t,
                        f.origin.clone(),
                        |x| table_id(x),
                        &mut diags,
                    );
                }
                Err(e) => d("/".into(), e.to_string()),
            },
        }
    }
    check_set(&set, with_builtin_rules, &mut diags);
    (set, diags)
}

fn check_set(set: &ProfileSet, with_builtin_rules: bool, diags: &mut Vec<Diagnostic>) {
    // Architecture rules: from the set, else (for a partial set) from the built-in tables.
    let builtin;
    let mut archs: Vec<&super::ArchitectureRule> = set.architectures().collect();
    if archs.is_empty() && with_builtin_rules {
        builtin = super::validate::validate_files(&super::builtin_files(), false).0;
        archs = builtin.architectures().collect();
    }
    let mut arch_ids = BTreeSet::new();
    for a in &archs {
        arch_ids.insert(a.id.as_str());
    }
    for e in &set.hardware {
        let h = &e.value;
        let mut d = |instance_path: &str, message: String| {
            diags.push(Diagnostic {
                path: e.origin.path.clone(),
                instance_path: instance_path.into(),
                message,
            });
        };
        let Some(arch_id) = &h.architecture else {
            continue;
        };
        let Some(a) = archs.iter().find(|a| &a.id == arch_id) else {
            if !archs.is_empty() {
                d(
                    "/architecture",
                    format!(
                        "unknown architecture {arch_id:?}; the gpu-architectures rules define {:?}",
                        arch_ids
                    ),
                );
            }
            continue;
        };
        if let Some(cc) = h.compute_capability.as_deref().and_then(parse_capability)
            && !a.compute_capability.contains(cc)
        {
            d(
                "/compute_capability",
                format!(
                    "compute capability {}.{} is outside architecture {arch_id}'s range",
                    cc.0, cc.1
                ),
            );
        }
        let (Some(sms), Some(clk)) = (h.sms, h.boost_clock_mhz) else {
            continue;
        };
        let mut compare = |at: &str, stated: Option<f64>, rate: f64| {
            let Some(stated) = stated else { return };
            let derived = tflops(sms, clk, rate);
            if derived > 0.0 && ((stated - derived) / derived).abs() > TFLOPS_TOLERANCE {
                d(
                    at,
                    format!(
                        "{stated} TFLOPS disagrees with {sms} SMs × {clk} MHz × {rate} FLOP/clk/SM ({arch_id}) = {derived:.1} by more than {:.0} %",
                        TFLOPS_TOLERANCE * 100.0
                    ),
                );
            }
        };
        if let Some(t) = &h.tensor_tflops {
            compare(
                "/tensor_tflops/fp16_fp32acc",
                t.fp16_fp32acc,
                a.fp16_fp32acc_flops_per_clock_per_sm,
            );
            compare(
                "/tensor_tflops/bf16_fp32acc",
                t.bf16_fp32acc,
                a.fp16_fp32acc_flops_per_clock_per_sm,
            );
            compare(
                "/tensor_tflops/fp16_fp16acc",
                t.fp16_fp16acc,
                a.fp16_fp16acc_flops_per_clock_per_sm,
            );
        }
        if let Some(v) = &h.vector_tflops {
            compare("/vector_tflops/fp32", v.fp32, a.fp32_flops_per_clock_per_sm);
        }
    }
    // Overlapping match rules: a device described by a profile itself (its name, each of its PCI ids, its
    // memory) must match that profile and no other.
    let profiles: Vec<&HardwareProfile> = set.hardware.iter().map(|e| &e.value).collect();
    for e in &set.hardware {
        let h = &e.value;
        if h.kind != DeviceKind::Gpu {
            continue;
        }
        let memory = h.matching.memory_bytes.or(h.memory.size_bytes).unwrap_or(0);
        let pcis: Vec<Option<&str>> = if h.matching.pci_ids.is_empty() {
            vec![None]
        } else {
            h.matching
                .pci_ids
                .iter()
                .map(|s| Some(s.as_str()))
                .collect()
        };
        for pci in pcis {
            let (c, _) = candidates(profiles.iter().copied(), &h.name, pci, memory);
            let others: Vec<&str> = c
                .iter()
                .filter(|p| p.id != h.id)
                .map(|p| p.id.as_str())
                .collect();
            let msg = if !c.iter().any(|p| p.id == h.id) {
                Some(format!(
                    "a device named {:?}{} does not match this profile's own rules{}",
                    h.name,
                    pci.map(|p| format!(" with PCI id {p}")).unwrap_or_default(),
                    if others.is_empty() {
                        String::new()
                    } else {
                        format!(" (it matches {others:?})")
                    }
                ))
            } else if !others.is_empty() {
                Some(format!(
                    "match rules overlap: a device named {:?}{} also matches {others:?}",
                    h.name,
                    pci.map(|p| format!(" with PCI id {p}")).unwrap_or_default()
                ))
            } else {
                None
            };
            if let Some(message) = msg {
                diags.push(Diagnostic {
                    path: e.origin.path.clone(),
                    instance_path: "/match".into(),
                    message,
                });
            }
        }
    }
}
