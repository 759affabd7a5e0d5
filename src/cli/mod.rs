//! Command line: clap definitions, two-phase parsing (raw flags → validated settings), output formats and exit
//! codes. May touch everything, through the library modules; `main.rs` only calls [`main`].
//!
//! Exit codes (contract, `ARCHITECTURE.md`): 0 success · 1 runtime error · 2 usage error · 3 no configuration
//! fits · 4 invalid input file (model, profile, database).

mod estimate;
mod inspect;
pub mod output;
mod probe;
mod profiles;
mod resolve;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// Exit codes of the `optimizer` binary.
pub mod exit {
    pub const SUCCESS: u8 = 0;
    pub const RUNTIME: u8 = 1;
    pub const USAGE: u8 = 2;
    pub const NO_FIT: u8 = 3;
    pub const INVALID_INPUT: u8 = 4;
}

#[derive(Debug, Parser)]
#[command(
    name = "optimizer",
    version,
    about = "Decides how to run a machine-learning model on the hardware at hand, and says why."
)]
struct RawArgs {
    /// Use this inventory YAML instead of probing the machine (also: OPTIMIZER_INVENTORY).
    #[arg(long, global = true, value_name = "FILE")]
    inventory: Option<PathBuf>,
    /// Overlay profiles from DIR (with hardware/, workloads/, rules/ inside) over the built-in set and
    /// $XDG_CONFIG_HOME/optimizer/profiles; repeatable, later wins.
    #[arg(long = "profiles", global = true, value_name = "DIR")]
    profiles: Vec<PathBuf>,
    /// The measurement database (also: OPTIMIZER_DB); default $XDG_DATA_HOME/optimizer/optimizer.db, created on
    /// first use.
    #[arg(long, global = true, value_name = "FILE")]
    db: Option<PathBuf>,
    #[command(subcommand)]
    command: RawCommand,
}

#[derive(Debug, Subcommand)]
enum RawCommand {
    /// Read a model's headers (GGUF or safetensors) and describe it exactly: architecture, parameters, bytes per
    /// layer, quantization mix, fingerprint. Tensor data is never read.
    Inspect {
        /// A .gguf file (any shard of a split model), a .safetensors file, a model.safetensors.index.json, or a
        /// directory holding safetensors weights and config.json.
        model: PathBuf,
        /// Output format.
        #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
        format: OutputFormat,
        /// List every tensor (name, type, shape, bytes, role, layer).
        #[arg(long)]
        tensors: bool,
    },
    /// Describe this machine: CPU and SIMD features, memory (bounded by container limits), NVIDIA GPUs and the
    /// profile each matches. `--format yaml` writes an inventory that `--inventory` reads back.
    Probe {
        #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
        format: OutputFormat,
    },
    /// List, show and validate hardware profiles, workload presets and rule tables.
    Profiles {
        #[command(subcommand)]
        command: RawProfilesCommand,
    },
    /// The main job: plan how to run a model on this machine (or profiled GPUs) for a workload, and write the
    /// resolved, explained deployment document.
    Resolve(resolve::RawResolve),
    /// Estimate llama.cpp's memory per device (weights, repacked copies, KV cache, compute and output
    /// buffers, runtime overhead) for a model and llama.cpp's own flags. Paste your llama.cpp flags.
    Estimate(estimate::RawEstimate),
    /// Print a JSON Schema: hardware-profile, workload, rules or inventory.
    Schema {
        /// Schema name.
        name: String,
    },
}

#[derive(Debug, Subcommand)]
enum RawProfilesCommand {
    /// Check profile files against their schemas and the semantic rules; every error is reported with its file
    /// and instance path. Exit code 4 if any file is invalid.
    Validate {
        /// Files or directories (default: the built-in set with its overlays).
        paths: Vec<PathBuf>,
    },
    /// List every profile in force, with where it comes from.
    List {
        #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
        format: OutputFormat,
    },
    /// Print one profile.
    Show {
        id: String,
        #[arg(long, value_enum, default_value_t = OutputFormat::Yaml)]
        format: OutputFormat,
    },
}

/// How a command renders its result on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Table,
    Yaml,
    Json,
}

/// Where a setting's value came from, for messages and provenance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettingOrigin {
    Flag,
    Env,
}

/// Settings every command shares, resolved once with one precedence (flag > environment > default).
#[derive(Debug, Clone, Default)]
pub struct Common {
    /// Inventory file replacing the live probe.
    pub inventory: Option<(PathBuf, SettingOrigin)>,
    /// Profile overlay directories, in order: the user directory, then each `--profiles`.
    pub profile_dirs: Vec<PathBuf>,
    /// The measurement database.
    pub db: Option<PathBuf>,
}

impl Common {
    fn resolve(inventory: Option<PathBuf>, profiles: Vec<PathBuf>, db: Option<PathBuf>) -> Self {
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
        Common {
            inventory,
            profile_dirs,
            db,
        }
    }

    /// The inventory: the fixture file when one is set, else the live probe.
    pub fn inventory(&self) -> Result<(crate::hardware::Inventory, &'static str), Failure> {
        use crate::hardware::{FixtureProbe, InventoryError, LiveProbe, Probe};
        let probe: Box<dyn Probe> = match &self.inventory {
            Some((p, _)) => Box::new(FixtureProbe(p.clone())),
            None => Box::new(LiveProbe),
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
        let path = self.db.clone().ok_or_else(|| {
            Failure::new(
                exit::USAGE,
                anyhow::anyhow!("no database path: set --db, OPTIMIZER_DB, XDG_DATA_HOME or HOME"),
            )
        })?;
        crate::store::Store::open(&path).map_err(store_failure)
    }

    /// Measured figures for these devices and this model, for a command that can plan without them (`resolve`):
    /// when the store cannot be used for reasons of the environment (no path, no writable directory, a full disk,
    /// an I/O error), the result says so in `warning` (also printed on stderr) instead of failing; an invalid
    /// database file still exits 4 (see the `store` module doc for why).
    pub fn measurements(
        &self,
        device_profiles: &[String],
        fingerprint: &str,
    ) -> Result<Measured, Failure> {
        let looked_up = match &self.db {
            None => {
                Err("no database path (set --db, OPTIMIZER_DB, XDG_DATA_HOME or HOME)".to_string())
            }
            Some(path) => match crate::store::Store::open(path)
                .and_then(|s| s.measurements(device_profiles, fingerprint))
            {
                Ok(found) => Ok(found),
                Err(e) if e.is_invalid_file() => return Err(store_failure(e)),
                Err(e) => Err(e.to_string()),
            },
        };
        Ok(match looked_up {
            Ok((measurements, rows)) => Measured {
                measurements,
                rows: Some(rows),
                warning: None,
            },
            Err(why) => {
                let warning = format!(
                    "planned without the measurement store: {why}; measured figures, if any, were not used"
                );
                let _ = writeln!(std::io::stderr().lock(), "warning: {warning}");
                Measured {
                    measurements: crate::plan::Measurements::default(),
                    rows: None,
                    warning: Some(warning),
                }
            }
        })
    }
    /// The profile set in force (built-in + overlays).
    pub fn profiles(&self) -> Result<crate::profile::ProfileSet, Failure> {
        crate::profile::load(&self.profile_dirs).map_err(profiles::invalid)
    }
}

/// What the measurement store gave a planning command.
#[derive(Debug)]
pub struct Measured {
    pub measurements: crate::plan::Measurements,
    /// Rows found, or `None` when the store could not be used.
    pub rows: Option<u64>,
    /// Why the store was not used, for the document's `warnings`.
    pub warning: Option<String>,
}

impl Measured {
    /// The provenance of `performance.basis`.
    pub fn basis_detail(&self) -> String {
        match self.rows {
            Some(rows) => format!(
                "analytic: the measurement store holds {rows} measurements for these devices and this model, so the efficiency rules apply"
            ),
            None => "analytic: planned without the measurement store (see warnings), so the efficiency rules apply".into(),
        }
    }
}

/// The exit code and hint of a store error: the file's fault is 4, the environment's 1.
fn store_failure(e: crate::store::StoreError) -> Failure {
    let path = e.path().display().to_string();
    if e.is_invalid_file() {
        Failure::new(exit::INVALID_INPUT, e).hint(format!(
            "it was not modified; move it aside (mv {path} {path}.bak) or point --db at another file"
        ))
    } else {
        Failure::new(exit::RUNTIME, e).hint(format!(
            "the measurement database needs a writable directory with free space: check {path}, or point --db or OPTIMIZER_DB at a writable location"
        ))
    }
}

/// Validated settings: what commands see instead of clap types.
#[derive(Debug)]
enum Command {
    Inspect(inspect::Settings),
    Probe(OutputFormat),
    ProfilesValidate(Vec<PathBuf>),
    ProfilesList(OutputFormat),
    ProfilesShow(String, OutputFormat),
    Schema(String),
    Estimate(estimate::Settings),
    Resolve(resolve::Settings),
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

impl From<crate::model::ModelError> for Failure {
    fn from(e: crate::model::ModelError) -> Self {
        use crate::model::ModelError;
        match &e {
            ModelError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                Failure::new(exit::USAGE, e).hint("check the path to the model")
            }
            // A FIFO, a device or a directory where a model file belongs: the input is wrong, not the system.
            ModelError::Io { source, .. } if crate::input::is_invalid_input(source) => {
                Failure::new(exit::INVALID_INPUT, e)
            }
            ModelError::Io { .. } => Failure::new(exit::RUNTIME, e),
            ModelError::Invalid { .. } | ModelError::InvalidModel { .. } => {
                Failure::new(exit::INVALID_INPUT, e)
            }
        }
    }
}

fn settle(raw: RawArgs) -> Result<(Command, Common), Failure> {
    let common = Common::resolve(raw.inventory, raw.profiles, raw.db);
    let command = match raw.command {
        RawCommand::Inspect {
            model,
            format,
            tensors,
        } => Command::Inspect(inspect::Settings {
            model,
            format,
            tensors,
        }),
        RawCommand::Probe { format } => Command::Probe(format),
        RawCommand::Profiles { command } => match command {
            RawProfilesCommand::Validate { paths } => Command::ProfilesValidate(paths),
            RawProfilesCommand::List { format } => Command::ProfilesList(format),
            RawProfilesCommand::Show { id, format } => Command::ProfilesShow(id, format),
        },
        RawCommand::Estimate(raw) => Command::Estimate(estimate::settle(raw)?),
        RawCommand::Resolve(raw) => Command::Resolve(resolve::settle(raw)?),
        RawCommand::Schema { name } => {
            if crate::schema::by_name(&name).is_none() {
                let names: Vec<&str> = crate::schema::NAMES
                    .iter()
                    .map(|(n, _)| *n)
                    .collect();
                return Err(
                    Failure::new(exit::USAGE, anyhow::anyhow!("unknown schema {name:?}"))
                        .hint(format!("schemas: {}", names.join(", "))),
                );
            }
            Command::Schema(name)
        }
    };
    Ok((command, common))
}

/// Writes `text` to stdout; a closed pipe (`optimizer inspect m.gguf | head`) is not an error.
pub(crate) fn write_stdout(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Failure::new(
            exit::RUNTIME,
            anyhow::Error::new(e).context("writing to stdout"),
        )),
    }
}

/// Renders a serializable value in a machine format. Every YAML document goes through here.
pub(crate) fn render<T: serde::Serialize>(
    value: &T,
    format: OutputFormat,
) -> Result<String, Failure> {
    let text = match format {
        OutputFormat::Json => serde_json::to_string_pretty(value)
            .map(|s| s + "\n")
            .map_err(anyhow::Error::from),
        // Strings a YAML 1.1 reader would retype (`on`, `yes`, `0777`) are quoted: `crate::yaml::to_string`.
        OutputFormat::Yaml | OutputFormat::Table => {
            crate::yaml::to_string(value).map_err(anyhow::Error::from)
        }
    };
    text.map_err(|e| Failure::new(exit::RUNTIME, e.context("rendering output")))
}

fn run((command, common): (Command, Common)) -> Result<(), Failure> {
    match command {
        Command::Inspect(s) => inspect::run(&s),
        Command::Probe(format) => probe::run(&common, format),
        Command::ProfilesValidate(paths) => profiles::validate(&common, &paths),
        Command::ProfilesList(format) => profiles::list(&common, format),
        Command::ProfilesShow(id, format) => profiles::show(&common, &id, format),
        Command::Estimate(s) => estimate::run(&common, &s),
        Command::Resolve(s) => resolve::run(&common, &s),
        Command::Schema(name) => {
            write_stdout(&crate::schema::render(&name).unwrap_or_default())
        }
    }
}

fn report(f: &Failure) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "error: {}", f.error);
    for cause in f.error.chain().skip(1) {
        let _ = writeln!(err, "  caused by: {cause}");
    }
    if let Some(h) = &f.hint {
        let _ = writeln!(err, "hint: {h}");
    }
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let raw = match RawArgs::try_parse_from(estimate::llama_flags(std::env::args_os())) {
        Ok(raw) => raw,
        Err(e) => {
            let code = if e.use_stderr() {
                exit::USAGE
            } else {
                exit::SUCCESS
            };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match settle(raw).and_then(run) {
        Ok(()) => ExitCode::from(exit::SUCCESS),
        Err(f) => {
            report(&f);
            ExitCode::from(f.code)
        }
    }
}
