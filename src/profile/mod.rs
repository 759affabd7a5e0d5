//! Profiles: hardware devices, workload presets and rule tables as validated YAML data.
//!
//! The built-in set is embedded in the binary (an installed `optimizer` works anywhere) and overlaid by user
//! directories (`$XDG_CONFIG_HOME/optimizer/profiles`, then each `--profiles DIR`); a profile whose id matches
//! an earlier one replaces it and says so. Every file is checked against its JSON Schema (generated from
//! [`types`]), then deserialized, then checked for what a schema cannot say (sources for every number,
//! TFLOPS consistent with SMs × clock, unique ids, non-overlapping match rules). May touch: profile files.

pub mod matching;
pub mod schema;
pub mod types;
pub mod validate;

use std::path::{Path, PathBuf};

pub use types::*;
pub use validate::Diagnostic;

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/embedded_profiles.rs"));
}

/// The three kinds of profile file, by directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileKind {
    Hardware,
    Workload,
    Rules,
}

impl ProfileKind {
    /// The directory a kind lives in under `profiles/`.
    pub fn dir(self) -> &'static str {
        match self {
            ProfileKind::Hardware => "hardware",
            ProfileKind::Workload => "workloads",
            ProfileKind::Rules => "rules",
        }
    }

    fn from_dir(name: &str) -> Option<Self> {
        match name {
            "hardware" => Some(ProfileKind::Hardware),
            "workloads" => Some(ProfileKind::Workload),
            "rules" => Some(ProfileKind::Rules),
            _ => None,
        }
    }
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

/// Every profile in force.
#[derive(Debug, Clone, Default)]
pub struct ProfileSet {
    pub hardware: Vec<Entry<HardwareProfile>>,
    pub workloads: Vec<Entry<WorkloadProfile>>,
    pub rules: Vec<Entry<RuleTable>>,
}

impl ProfileSet {
    pub fn hardware(&self, id: &str) -> Option<&Entry<HardwareProfile>> {
        self.hardware.iter().find(|e| e.value.id == id)
    }

    pub fn workload(&self, id: &str) -> Option<&Entry<WorkloadProfile>> {
        self.workloads.iter().find(|e| e.value.id == id)
    }

    /// Id of the memory-reserve row giving llama.cpp's per-GPU runtime overhead (CUDA context, cuBLAS
    /// workspace); the memory model adds it to each GPU, so the planner does not reserve it again.
    pub const LLAMA_CPP_GPU_OVERHEAD_RULE: &'static str = "gpu-llama-cpp-cuda-context";

    /// llama.cpp's per-GPU runtime overhead in bytes and the rule it comes from (0 and `None` without one).
    pub fn llama_cpp_gpu_overhead(&self) -> (u64, Option<&str>) {
        self.rules
            .iter()
            .find_map(|e| match &e.value {
                RuleTable::MemoryReserves { rules, .. } => rules
                    .iter()
                    .find(|r| r.id == Self::LLAMA_CPP_GPU_OVERHEAD_RULE)
                    .map(|r| (r.fixed_bytes, Some(r.id.as_str()))),
                _ => None,
            })
            .unwrap_or((0, None))
    }

    /// The GPU architecture rows of every `gpu-architectures` table.
    pub fn architectures(&self) -> impl Iterator<Item = &ArchitectureRule> {
        self.rules.iter().flat_map(|e| match &e.value {
            RuleTable::GpuArchitectures { rules, .. } => rules.as_slice(),
            _ => &[],
        })
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

/// The embedded built-in files.
pub fn builtin_files() -> Vec<SourceFile> {
    embedded::EMBEDDED
        .iter()
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
/// comes from its parent directory's name (`hardware`, `workloads`, `rules`), else from its content.
pub fn read_paths(paths: &[PathBuf]) -> (Vec<SourceFile>, Vec<Diagnostic>) {
    let mut files = Vec::new();
    let mut diags = Vec::new();
    for p in paths {
        let mut found = Vec::new();
        if p.is_dir() {
            collect_yaml(p, &mut found);
            found.sort();
        } else {
            found.push(p.clone());
        }
        for f in found {
            match read_file(&f) {
                Ok(sf) => files.push(sf),
                Err(d) => diags.push(d),
            }
        }
    }
    (files, diags)
}

fn collect_yaml(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect_yaml(&p, out);
        } else if p.extension().is_some_and(|x| x == "yaml" || x == "yml") {
            out.push(p);
        }
    }
}

fn read_file(path: &Path) -> Result<SourceFile, Diagnostic> {
    let diag = |message: String| Diagnostic {
        path: path.display().to_string(),
        instance_path: String::new(),
        message,
    };
    let len = std::fs::metadata(path)
        .map_err(|e| diag(e.to_string()))?
        .len();
    if len > MAX_PROFILE_BYTES {
        return Err(diag(format!(
            "{len} bytes exceeds the {MAX_PROFILE_BYTES}-byte limit for a profile"
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| diag(e.to_string()))?;
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

/// Loads the built-in set overlaid by `overlay_dirs` (in order; missing directories are skipped). Every file
/// is validated; any error fails the load with every diagnostic.
pub fn load(overlay_dirs: &[PathBuf]) -> Result<ProfileSet, Vec<Diagnostic>> {
    let mut files = builtin_files();
    let mut diags = Vec::new();
    let existing: Vec<PathBuf> = overlay_dirs
        .iter()
        .filter(|d| d.is_dir())
        .cloned()
        .collect();
    let (user, d) = read_paths(&existing);
    files.extend(user);
    diags.extend(d);
    let (set, d) = validate::validate_files(&files, true);
    diags.extend(d);
    if diags.is_empty() {
        Ok(set)
    } else {
        Err(diags)
    }
}
