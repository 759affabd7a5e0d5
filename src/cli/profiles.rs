//! `optimizer profiles validate|list|show` and the diagnostics of invalid profiles.

use std::fmt::Write;
use std::path::PathBuf;

use serde::Serialize;

use super::{Common, Failure, OutputFormat, exit, render, write_stdout};
use crate::profile::{self, Origin, RuleTable};

/// Every diagnostic on stderr, then a failure with exit code 4.
pub use crate::app::invalid_profiles as invalid;

pub fn validate(common: &Common, paths: &[PathBuf]) -> Result<(), Failure> {
    let (files, mut diags) = if paths.is_empty() {
        let mut files = profile::builtin_files();
        let dirs: Vec<PathBuf> = common
            .profile_dirs
            .iter()
            .filter(|d| d.is_dir())
            .cloned()
            .collect();
        let (user, d) = profile::read_paths(&dirs);
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
        .filter(|o| o.is_some())
        .count();
    write_stdout(&format!(
        "{} files valid: {} hardware profiles, {} workloads, {} rule tables{}\n",
        files.len(),
        set.hardware.len(),
        set.workloads.len(),
        set.rules.len(),
        if overrides > 0 {
            format!(" ({overrides} overriding built-ins)")
        } else {
            String::new()
        }
    ))
}

#[derive(Serialize)]
struct Listed<'a> {
    id: &'a str,
    kind: &'static str,
    description: String,
    origin: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    overrides: Option<&'a str>,
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

fn origin(o: &Origin) -> &str {
    o.path.as_str()
}

pub fn list(common: &Common, format: OutputFormat) -> Result<(), Failure> {
    let set = common.profiles()?;
    let mut rows = Vec::new();
    for e in &set.hardware {
        rows.push(Listed {
            id: &e.value.id,
            kind: "hardware",
            description: e.value.name.clone(),
            origin: origin(&e.origin),
            overrides: e.overrides.as_ref().map(origin),
        });
    }
    for e in &set.workloads {
        rows.push(Listed {
            id: &e.value.id,
            kind: "workload",
            description: e.value.description.clone(),
            origin: origin(&e.origin),
            overrides: e.overrides.as_ref().map(origin),
        });
    }
    for e in &set.rules {
        let (id, kind) = table_kind(&e.value);
        rows.push(Listed {
            id,
            kind,
            description: String::new(),
            origin: origin(&e.origin),
            overrides: e.overrides.as_ref().map(origin),
        });
    }
    let text = match format {
        OutputFormat::Table => {
            let mut o = String::new();
            let w = rows.iter().map(|r| r.id.len()).max().unwrap_or(2).max(2);
            for r in &rows {
                let _ = writeln!(
                    o,
                    "{:<w$}  {:<26} {}{}",
                    r.id,
                    r.kind,
                    r.description,
                    r.overrides
                        .map(|p| format!("  [{} overrides {p}]", r.origin))
                        .unwrap_or_default()
                );
            }
            o
        }
        f => render(&rows, f)?,
    };
    write_stdout(&text)
}

/// `profiles show ID`: the id exactly as any kind, then a hardware profile or workload by its id in any case or
/// its product name (`crate::profile::lookup`), then a rule table's id in any case; otherwise the nearest id.
pub fn show(common: &Common, id: &str, format: OutputFormat) -> Result<(), Failure> {
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
