//! The pipelines, one module per command: what `resolve`, `estimate`, `measurements import`, `observe`,
//! `calibrate` and `bench` do from sources (model path, inventory or live probe, profile overlays, measurement
//! store) to a document, with every failure classified by exit code. The CLI, the benches and the tests call
//! these, so there is one path from flags to plan. This file holds what they share: the sources, the failure
//! type and its exit codes.
//!
//! Exit codes (contract, `docs/architecture.md`): 0 success · 1 runtime error · 2 usage error · 3 no configuration
//! fits · 4 invalid input file (model, profile, inventory, database).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::emit::Deployment;
use crate::evidence::Evidence;
use crate::hardware::Inventory;
use crate::memory::llama_cpp::{self, Estimate, GpuTarget, Machine, Params};
use crate::plan::{self, Inputs, Overrides, PlanError};
use crate::profile::{DeviceKind, Diagnostic, ProfileSet, ReserveTarget, RuntimeId};

mod bench;
mod calibrate;
mod estimate;
mod measurements;
mod observe;
mod recommend;
mod resolve;

pub use bench::*;
pub use calibrate::*;
pub use estimate::*;
pub use measurements::*;
pub use observe::*;
pub use recommend::*;
pub use resolve::*;

/// Exit codes of the `optimizer` binary.
pub mod exit {
    pub const SUCCESS: u8 = 0;
    pub const RUNTIME: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const NO_FIT: u8 = 3;
    pub const INVALID_INPUT: u8 = 4;
    /// `resolve`: the plan fits and is written, but no candidate meets the workload's SLA (`status: sla-missed`).
    pub const SLA_MISSED: u8 = 5;
    /// `resolve`: the plan fits and is written, but the workload's request is longer than the context the
    /// model allows (`status: workload-unmet`).
    pub const WORKLOAD_UNMET: u8 = 6;
    /// Stopped by Ctrl-C (SIGINT), the shell's 128 + 2: what finished is kept, marked incomplete.
    pub const INTERRUPTED: u8 = 130;
}

/// An error with its exit code and, when a fix is known, a hint.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub error: anyhow::Error,
    pub hint: Option<String>,
}

impl Failure {
    pub fn new(code: u8, error: impl Into<anyhow::Error>) -> Self {
        Failure {
            code,
            error: error.into(),
            hint: None,
        }
    }

    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

/// The exit code of an I/O error on an input file: a missing file is a usage error (2); a FIFO, a device or a
/// directory where a file belongs is the input's fault (4); anything else is the environment's (1).
pub fn io_exit_code(e: &std::io::Error) -> u8 {
    if e.kind() == std::io::ErrorKind::NotFound {
        exit::USAGE
    } else if crate::input::is_invalid_input(e) {
        exit::INVALID_INPUT
    } else {
        exit::RUNTIME
    }
}

/// An input text file read with its bound, its I/O failure classified by [`io_exit_code`] and naming the file.
fn read_input(path: &Path, limit: u64, kind: &'static str) -> Result<String, Failure> {
    crate::input::read_text_bounded(path, limit, kind)
        .map_err(|e| Failure::new(io_exit_code(&e), anyhow::anyhow!("{}: {e}", path.display())))
}

impl From<crate::model::ModelError> for Failure {
    fn from(e: crate::model::ModelError) -> Self {
        use crate::model::ModelError;
        match &e {
            ModelError::Io { source, .. } => {
                let code = io_exit_code(source);
                let f = Failure::new(code, e);
                if code == exit::USAGE {
                    f.hint("check the path to the model")
                } else {
                    f
                }
            }
            ModelError::Invalid { .. } | ModelError::InvalidModel { .. } => {
                Failure::new(exit::INVALID_INPUT, e)
            }
        }
    }
}

/// Where a setting's value came from, for messages and provenance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettingOrigin {
    Flag,
    Env,
}

/// Settings every command shares, resolved once with one precedence (flag > environment > default), and the
/// context a command builds from them, built once: the profile set (parsed and validated) and the inventory (a
/// live probe costs up to 200 ms of `cuInit`). One `Sources` serves one command: what it loaded stays loaded
/// for every step of that command (importing a load log used to load the profiles and probe twice). A clone
/// carries what was loaded; build a new one to load afresh.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// Inventory file replacing the live probe.
    pub inventory: Option<(PathBuf, SettingOrigin)>,
    /// Profile overlay directories, in order: the user directory, then each `--profiles`.
    pub profile_dirs: Vec<PathBuf>,
    /// The measurement database.
    pub db: Option<PathBuf>,
    /// How many of `profile_dirs`, at the end, were given with `--profiles`: those must be directories, where
    /// the default user directory may be absent ([`Sources::overlay_dirs`]).
    given_profile_dirs: usize,
    /// What this command has loaded so far.
    loaded: Loaded,
}

/// The profile set and the inventory, each loaded on first use. A failure is not kept: the next call tries
/// again and fails the same way.
#[derive(Debug, Clone, Default)]
struct Loaded {
    profiles: std::sync::OnceLock<ProfileSet>,
    inventory: std::sync::OnceLock<(Inventory, &'static str)>,
}

impl Sources {
    /// Sources with nothing loaded yet.
    pub fn new(
        inventory: Option<(PathBuf, SettingOrigin)>,
        profile_dirs: Vec<PathBuf>,
        db: Option<PathBuf>,
    ) -> Self {
        Sources {
            inventory,
            profile_dirs,
            db,
            given_profile_dirs: 0,
            loaded: Loaded::default(),
        }
    }

    /// The sources from flags, then the environment (`OPTIMIZER_INVENTORY`, `OPTIMIZER_DB`, XDG directories).
    pub fn from_env(
        inventory: Option<PathBuf>,
        profiles: Vec<PathBuf>,
        db: Option<PathBuf>,
    ) -> Self {
        let inventory = inventory.map(|p| (p, SettingOrigin::Flag)).or_else(|| {
            std::env::var_os("OPTIMIZER_INVENTORY")
                .filter(|v| !v.is_empty())
                .map(|v| (PathBuf::from(v), SettingOrigin::Env))
        });
        let xdg = std::env::var("XDG_CONFIG_HOME").ok();
        let home = std::env::var("HOME").ok();
        let mut profile_dirs: Vec<PathBuf> =
            crate::profile::user_dir(xdg.as_deref(), home.as_deref())
                .into_iter()
                .collect();
        let given_profile_dirs = profiles.len();
        profile_dirs.extend(profiles);
        let db = db
            .or_else(|| {
                std::env::var_os("OPTIMIZER_DB")
                    .filter(|v| !v.is_empty())
                    .map(PathBuf::from)
            })
            .or_else(|| {
                crate::store::default_path(
                    std::env::var("XDG_DATA_HOME").ok().as_deref(),
                    home.as_deref(),
                )
            });
        Sources {
            given_profile_dirs,
            ..Sources::new(inventory, profile_dirs, db)
        }
    }

    /// The overlay directories in force, in order: the user directory when it exists, then every `--profiles`
    /// directory. A `--profiles` path that is missing or is not a directory (a file, a typo) is a usage error
    /// (exit 2) naming it and what it is: skipping it silently planned without the profiles asked for.
    pub fn overlay_dirs(&self) -> Result<Vec<PathBuf>, Failure> {
        let first_given = self
            .profile_dirs
            .len()
            .saturating_sub(self.given_profile_dirs);
        let mut dirs = Vec::with_capacity(self.profile_dirs.len());
        for (i, d) in self.profile_dirs.iter().enumerate() {
            let what = match std::fs::metadata(d) {
                Ok(m) if m.is_dir() => {
                    dirs.push(d.clone());
                    continue;
                }
                _ if i < first_given => continue,
                Ok(m) if m.is_file() => "a file, not a directory".to_string(),
                Ok(m) => format!(
                    "{}, not a directory",
                    crate::input::describe_file_type(&m.file_type())
                ),
                Err(e) => e.to_string(),
            };
            return Err(Failure::new(
                exit::USAGE,
                anyhow::anyhow!("--profiles {}: {what}", d.display()),
            )
            .hint("--profiles takes a directory holding hardware/, workloads/ and rules/ profile files; `optimizer profiles validate FILE` checks a single file"));
        }
        Ok(dirs)
    }

    /// The inventory: the fixture file when one is set, else the live probe; read or probed once per
    /// command.
    pub fn inventory(&self) -> Result<(crate::hardware::Inventory, &'static str), Failure> {
        if let Some(found) = self.loaded.inventory.get() {
            return Ok(found.clone());
        }
        let found = self.read_inventory()?;
        Ok(self.loaded.inventory.get_or_init(|| found).clone())
    }

    fn read_inventory(&self) -> Result<(crate::hardware::Inventory, &'static str), Failure> {
        use crate::hardware::{FixtureProbe, InventoryError, PlanProbe, Probe};
        // A GPU a built-in profile describes needs no SM count from the CUDA driver (~200 ms of cuInit); the
        // set is loaded only when NVML reports a GPU.
        let builtin = std::cell::OnceCell::new();
        let probe: Box<dyn Probe + '_> = match &self.inventory {
            Some((p, _)) => Box::new(FixtureProbe(p.clone())),
            None => Box::new(PlanProbe(|g: &crate::hardware::Gpu| {
                !builtin
                    .get_or_init(|| crate::profile::builtin_set().unwrap_or_default())
                    .describes(g)
            })),
        };
        let source = probe.source();
        probe
            .inventory()
            .map(|inv| (inv, source))
            .map_err(|e| match &e {
                InventoryError::Io { source, .. }
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    let from = match self.inventory {
                        Some((_, SettingOrigin::Env)) => " (from OPTIMIZER_INVENTORY)",
                        _ => "",
                    };
                    Failure::new(exit::USAGE, e).hint(format!("check the inventory path{from}"))
                }
                InventoryError::Io { .. } => Failure::new(exit::RUNTIME, e),
                InventoryError::Invalid { .. } => Failure::new(exit::INVALID_INPUT, e)
                    .hint("`optimizer schema inventory` prints the inventory schema"),
            })
    }

    /// The measurement store, created on first use; for commands that need it. An invalid file exits 4, an
    /// unusable location (read-only, full, permission denied) exits 1.
    pub fn store(&self) -> Result<crate::store::Store, Failure> {
        let path = self.db_path()?.ok_or_else(|| {
            Failure::new(
                exit::USAGE,
                anyhow::anyhow!("no database path: set --db, OPTIMIZER_DB, XDG_DATA_HOME or HOME"),
            )
        })?;
        crate::store::Store::open(path).map_err(store_failure)
    }

    /// The database path in force; a name SQLite would not read as a file (`:memory:`, an empty name, a
    /// `file:` URI) is a usage error (exit 2): the command would report measurements recorded that no later
    /// command can find.
    fn db_path(&self) -> Result<Option<&Path>, Failure> {
        let Some(path) = self.db.as_deref() else {
            return Ok(None);
        };
        match crate::store::not_a_file_name(path) {
            None => Ok(Some(path)),
            Some(why) => Err(Failure::new(
                exit::USAGE,
                anyhow::anyhow!("--db/OPTIMIZER_DB {:?}: not a database file name: {why}", path),
            )
            .hint("give the path of a file (created on first use), e.g. --db ./measurements.db; for a file literally named so, prefix ./")),
        }
    }

    /// What the store holds for these device profiles and this model, for a command that can plan without it
    /// (`resolve`): when the store cannot be used for reasons of the environment (no path, no writable
    /// directory, a full disk, an I/O error), the evidence says why (printed on stderr too) instead of failing;
    /// an invalid database file still exits 4 (see the `store` module doc for why).
    pub fn evidence(
        &self,
        device_profiles: &[String],
        fingerprint: &str,
    ) -> Result<Evidence, Failure> {
        let looked_up = match self.db_path()? {
            None => {
                Err("no database path (set --db, OPTIMIZER_DB, XDG_DATA_HOME or HOME)".to_string())
            }
            Some(path) => match crate::store::Store::open_for_lookup(path)
                .and_then(|s| s.evidence(device_profiles, fingerprint))
            {
                Ok(found) => Ok(found),
                Err(e) if e.is_invalid_file() => return Err(store_failure(e)),
                Err(e) => Err(e.to_string()),
            },
        };
        Ok(match looked_up {
            Ok(ev) => ev,
            Err(why) => {
                let _ = writeln!(
                    std::io::stderr().lock(),
                    "warning: planned without the measurement store: {why}; measured figures, if any, were not used"
                );
                Evidence::unavailable(why)
            }
        })
    }

    /// The profile set in force (built-in + overlays), loaded once per command.
    pub fn profiles(&self) -> Result<&ProfileSet, Failure> {
        if let Some(set) = self.loaded.profiles.get() {
            return Ok(set);
        }
        let set = crate::profile::load(&self.overlay_dirs()?).map_err(invalid_profiles)?;
        Ok(self.loaded.profiles.get_or_init(|| set))
    }
}

/// The exit code and hint of a store error: the file's fault is 4, the environment's 1.
pub fn store_failure(e: crate::store::StoreError) -> Failure {
    let path = e.path().display().to_string();
    if e.is_invalid_file() {
        Failure::new(exit::INVALID_INPUT, e).hint(format!(
            "it was not modified; move it aside (mv {path} {path}.bak) or point --db at another file"
        ))
    } else if matches!(e, crate::store::StoreError::RunGone { .. }) {
        Failure::new(exit::RUNTIME, e).hint(
            "another process removed this run while it was recording (`measurements prune`); run the command again",
        )
    } else {
        Failure::new(exit::RUNTIME, e).hint(format!(
            "the measurement database needs a writable directory with free space: check {path}, or point --db or OPTIMIZER_DB at a writable location"
        ))
    }
}

/// The failure for invalid profile files: every diagnostic on stderr (file and defect), exit 4.
pub fn invalid_profiles(diags: Vec<Diagnostic>) -> Failure {
    let mut err = std::io::stderr().lock();
    for d in &diags {
        let _ = writeln!(err, "{d}");
    }
    let files: std::collections::BTreeSet<&str> = diags.iter().map(|d| d.path.as_str()).collect();
    Failure::new(
        exit::INVALID_INPUT,
        anyhow::anyhow!(
            "{} problem{} in {} profile file{}",
            diags.len(),
            if diags.len() == 1 { "" } else { "s" },
            files.len(),
            if files.len() == 1 { "" } else { "s" }
        ),
    )
}

/// A profile id that names nothing (or several): a usage error, exit code 2, pointing at the list of `kind`.
pub fn lookup_failure(e: crate::profile::lookup::LookupError, kind: &str) -> Failure {
    Failure::new(exit::USAGE, e).hint(format!(
        "`optimizer profiles list --kind {kind}` shows every id{}",
        if kind == "hardware" {
            " and product name"
        } else {
            ""
        }
    ))
}

/// The last second RFC 3339's four-digit year can write: 9999-12-31T23:59:59Z.
const LAST_RFC3339_SECOND: u64 = 253_402_300_799;

/// Seconds since the Unix epoch as RFC 3339 UTC (`2026-11-22T23:59:59Z`), through `humantime`; a time past
/// the year 9999 (no clock gives one) is written as its last second rather than failing.
pub fn rfc3339(secs: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs.min(LAST_RFC3339_SECOND));
    humantime::format_rfc3339_seconds(t).to_string()
}

/// The time now as RFC 3339 UTC (a run's start and finish).
pub fn now_rfc3339() -> String {
    rfc3339(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |t| t.as_secs()),
    )
}

/// The host a run is taken on, as the store keys it: the inventory's CPU, cores and memory.
pub fn host_identity(inv: &crate::hardware::Inventory) -> crate::store::HostIdentity {
    crate::store::HostIdentity {
        cpu_model: inv.cpu.model.clone(),
        physical_cores: inv.cpu.physical_cores,
        memory_total_bytes: inv.memory.total_bytes,
        hostname: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One command reads its inventory and its profiles once: a second step of the same command gets what the
    /// first loaded (the file may be gone by then), and a new `Sources` reads afresh.
    #[test]
    fn a_command_loads_its_inventory_and_profiles_once() {
        let dir = tempfile::tempdir().unwrap();
        let inv = dir.path().join("inventory.yaml");
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/inventories/laptop-rtx4060.yaml");
        std::fs::copy(&fixture, &inv).unwrap();
        let s = Sources::new(Some((inv.clone(), SettingOrigin::Flag)), Vec::new(), None);
        let (first, source) = s.inventory().unwrap();
        assert_eq!(source, "inventory");
        std::fs::remove_file(&inv).unwrap();
        assert_eq!(s.inventory().unwrap().0, first);
        assert!(std::ptr::eq(s.profiles().unwrap(), s.profiles().unwrap()));
        let again = Sources::new(Some((inv, SettingOrigin::Flag)), Vec::new(), None);
        assert_eq!(again.inventory().unwrap_err().code, exit::USAGE);
    }

    /// The store's timestamps: the epoch, a leap day, the last second of a year, and a time past year 9999.
    #[test]
    fn rfc3339_writes_utc_seconds() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_798_761_599), "2026-12-31T23:59:59Z");
        assert_eq!(rfc3339(u64::MAX), "9999-12-31T23:59:59Z");
    }
}
