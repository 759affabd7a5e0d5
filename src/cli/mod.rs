//! Command line: clap definitions, two-phase parsing (raw flags → validated settings), output formats and exit
//! codes. May touch everything, through the library modules; `main.rs` only calls [`main`].
//!
//! Exit codes (contract, `docs/architecture.md`): 0 success · 1 runtime error · 2 usage error · 3 no configuration
//! fits · 4 invalid input file (model, profile, database).

mod bench;
mod bundle;
mod calibrate;
mod calibrate_runner;
mod estimate;
mod inspect;
mod measurements;
pub mod output;
mod probe;
mod profiles;
mod recommend;
mod resolve;
mod table;
pub(crate) mod terminal;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

pub use crate::app::{Failure, Sources as Common, exit};

#[derive(Debug, Parser)]
#[command(
    name = "optimizer",
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
    /// What to rent or buy for a model and workload: every priced offer planned as `resolve --hardware` plans
    /// it, ranked by cost per hour and per million tokens, with each price's age.
    Recommend(recommend::RawRecommend),
    /// Estimate llama.cpp's memory per device (weights, repacked copies, KV cache, compute and output
    /// buffers, runtime overhead) for a model and llama.cpp's own flags. Paste your llama.cpp flags.
    Estimate(estimate::RawEstimate),
    /// Measure this machine (CPU memory bandwidth, FP32 FMA rate, llama.cpp's quantized dot products) and
    /// record the figures in the measurement store, so `resolve` predicts from them (basis `calibrated`).
    Calibrate(calibrate::RawCalibrate),
    /// The measurement store: `import FILE` records a llama-bench output (-o json, jsonl, csv or sql) or another
    /// store's export; `export` writes this one's as JSON lines; `list` shows what it holds.
    Measurements {
        #[command(subcommand)]
        command: RawMeasurementsCommand,
    },
    /// Record what a deployment really did, so the next `resolve` for its device and model uses it: its decode
    /// rate (measured throughput), a memory peak on one device (extra reserve where it beat the estimate), or an
    /// out-of-memory on one device.
    Observe {
        /// The document `optimizer resolve` wrote for the deployment.
        #[arg(long)]
        deployment: PathBuf,
        /// Decode tokens per second over all its sequences.
        #[arg(long, conflicts_with_all = ["peak_memory_bytes", "oom"])]
        tokens_per_s: Option<f64>,
        /// The most memory the engine took on --device, in bytes.
        #[arg(long, requires = "device", conflicts_with = "oom")]
        peak_memory_bytes: Option<u64>,
        /// The engine ran out of memory on --device.
        #[arg(long, requires = "device")]
        oom: bool,
        /// The device of --peak-memory-bytes or --oom, as the document names it (cpu, cuda:0).
        #[arg(long)]
        device: Option<String>,
    },
    /// Measure a running OpenAI-compatible server (llama-server, vLLM, Ollama): time to first token, time per
    /// output token and decode throughput at a few concurrencies; with --deployment, record them against it.
    Bench(bench::RawBench),
    /// Print a JSON Schema: deployment, hardware-profile, workload, rules, inventory or cluster.
    Schema {
        /// Schema name.
        name: String,
    },
    /// Print a shell completion script: `optimizer completions bash > ~/.local/share/bash-completion/completions/optimizer`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff): `optimizer man > optimizer.1 && man ./optimizer.1`.
    Man,
}

#[derive(Debug, Subcommand)]
enum RawProfilesCommand {
    /// Check profile files against their schemas and the semantic rules; every error is reported with its file
    /// and instance path. Exit code 4 if any file is invalid.
    Validate {
        /// Files or directories (default: the built-in set with its overlays).
        paths: Vec<PathBuf>,
    },
    /// List every profile in force with its key figures (hardware: memory, bandwidth, dense BF16/FP16 TFLOPS;
    /// workloads: mode, objective, context; rules: kind, rows) and where it comes from.
    List {
        /// Only this kind.
        #[arg(long, value_enum)]
        kind: Option<profiles::ListKind>,
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

#[derive(Debug, Subcommand)]
enum RawMeasurementsCommand {
    /// Import another store's `measurements export` (idempotent), or a llama-bench output as one complete run on
    /// this machine (or --inventory): prompt tests become
    /// prefill tokens/s, generation tests decode tokens/s, for the model each row names, with the threads,
    /// batch, micro-batch, -ngl and KV type they ran at. `resolve` then reports them as measured.
    Import {
        file: PathBuf,
        /// The model the results are for, when the path llama-bench recorded has moved.
        #[arg(long)]
        model: Option<PathBuf>,
        #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
        format: OutputFormat,
    },
    /// Write every measurement of every complete run as JSON lines (host, run, device, model, shape), for
    /// `measurements import` on another machine.
    Export,
    /// List every recorded measurement with its run, device, model, metric and shape.
    List {
        #[arg(long, value_enum, default_value_t = OutputFormat::Table)]
        format: OutputFormat,
    },
    /// Show one measurement (row id) or a whole run (run:ID) with its host, run, device, model, shape and
    /// context.
    Show(measurements::RawShow),
    /// Remove measurements by explicit selectors (all must hold), with their emptied runs and whatever devices,
    /// models and hosts nothing refers to any more; --dry-run prints what would go.
    Prune(measurements::RawPrune),
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

/// Validated settings: what commands see instead of clap types.
#[derive(Debug)]
enum Command {
    Inspect(inspect::Settings),
    Probe(OutputFormat),
    ProfilesValidate(Vec<PathBuf>),
    ProfilesList(Option<profiles::ListKind>, OutputFormat),
    ProfilesShow(String, OutputFormat),
    Schema(String),
    Completions(clap_complete::Shell),
    Man,
    MeasurementsImport(PathBuf, Option<PathBuf>, OutputFormat),
    MeasurementsList(OutputFormat),
    MeasurementsExport,
    MeasurementsShow(measurements::ShowSettings),
    MeasurementsPrune(measurements::PruneSettings),
    Observe(PathBuf, crate::app::Observation),
    Estimate(estimate::Settings),
    Resolve(resolve::Settings),
    Recommend(recommend::Settings),
    Calibrate(calibrate::Mode),
    Bench(bench::Settings),
}

fn settle(raw: RawArgs) -> Result<(Command, Common), Failure> {
    let common = Common::from_env(raw.inventory, raw.profiles, raw.db);
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
            RawProfilesCommand::List { kind, format } => Command::ProfilesList(kind, format),
            RawProfilesCommand::Show { id, format } => Command::ProfilesShow(id, format),
        },
        RawCommand::Measurements {
            command:
                RawMeasurementsCommand::Import {
                    file,
                    model,
                    format,
                },
        } => Command::MeasurementsImport(file, model, format),
        RawCommand::Measurements {
            command: RawMeasurementsCommand::List { format },
        } => Command::MeasurementsList(format),
        RawCommand::Measurements {
            command: RawMeasurementsCommand::Export,
        } => Command::MeasurementsExport,
        RawCommand::Measurements {
            command: RawMeasurementsCommand::Show(raw),
        } => Command::MeasurementsShow(measurements::settle_show(raw)?),
        RawCommand::Measurements {
            command: RawMeasurementsCommand::Prune(raw),
        } => Command::MeasurementsPrune(measurements::settle_prune(raw)?),
        RawCommand::Observe {
            deployment,
            tokens_per_s,
            peak_memory_bytes,
            oom,
            device,
        } => {
            use crate::app::Observation;
            let what = match (tokens_per_s, peak_memory_bytes, oom, device) {
                (Some(x), None, false, None) => Observation::TokensPerS(x),
                (None, Some(bytes), false, Some(device)) => {
                    Observation::PeakMemory { device, bytes }
                }
                (None, None, true, Some(device)) => Observation::OutOfMemory { device },
                _ => {
                    return Err(Failure::new(
                        exit::USAGE,
                        anyhow::anyhow!(
                            "observe needs one of --tokens-per-s X, --peak-memory-bytes N --device D, --oom --device D"
                        ),
                    ));
                }
            };
            Command::Observe(deployment, what)
        }
        RawCommand::Estimate(raw) => Command::Estimate(estimate::settle(raw)?),
        RawCommand::Resolve(raw) => Command::Resolve(resolve::settle(raw)?),
        RawCommand::Recommend(raw) => Command::Recommend(recommend::settle(raw)?),
        RawCommand::Calibrate(raw) => Command::Calibrate(calibrate::settle(raw)),
        RawCommand::Bench(raw) => Command::Bench(bench::settle(raw)?),
        RawCommand::Completions { shell } => Command::Completions(shell),
        RawCommand::Man => Command::Man,
        RawCommand::Schema { name } => {
            if crate::schema::by_name(&name).is_none() {
                let names: Vec<&str> = crate::schema::NAMES.iter().map(|(n, _)| *n).collect();
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

/// `ID` or `Nx:ID` (`2x:rtx-3090`).
/// Shared by `resolve` and `estimate`.
pub(crate) fn parse_hardware(h: &str) -> Result<(u32, String), Failure> {
    match h.split_once("x:") {
        Some((n, id)) => {
            let max = crate::plan::MAX_GPUS;
            let n: u32 = n
                .parse()
                .ok()
                .filter(|n| (1..=max as u32).contains(n))
                .ok_or_else(|| {
                    Failure::new(
                        exit::USAGE,
                        anyhow::anyhow!(
                            "--hardware {h:?}: expected ID or Nx:ID with 1 <= N <= {max} (GPUs one machine holds)"
                        ),
                    )
                })?;
            Ok((n, id.to_string()))
        }
        None => Ok((1, h.to_string())),
    }
}

/// A size in bytes: digits, optionally with a unit, binary (`KiB` … `TiB`, and `K`/`M`/`G`/`T` as their
/// shorthand) or decimal (`KB` … `TB`), case-insensitive; `512GiB`, `1.5TiB`, `2000000000`. Fractions are
/// allowed with a unit and rounded down to a byte; an overflow of 64 bits is refused, never wrapped.
pub(crate) fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = (&t[..split], t[split..].trim());
    let factor: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return None,
    };
    if num.is_empty() || num.starts_with('.') || num.ends_with('.') || num.matches('.').count() > 1
    {
        return None;
    }
    let (whole, frac) = num.split_once('.').unwrap_or((num, ""));
    let whole: u64 = whole.parse().ok()?;
    let mut bytes = whole.checked_mul(factor)?;
    if !frac.is_empty() {
        // At most 18 fractional digits keep 10^digits and digits × factor (< 2^41) inside u128.
        if factor == 1 || frac.len() > 18 {
            return None;
        }
        let digits: u128 = frac.parse().ok()?;
        let part = digits * u128::from(factor) / 10u128.pow(frac.len() as u32);
        bytes = bytes.checked_add(u64::try_from(part).ok()?)?;
    }
    Some(bytes)
}

/// `--host-memory` and `--host-cores`, checked: a size above 0 bytes and 1 to
/// [`crate::hardware::MAX_LOGICAL_CPUS`] cores.
pub(crate) fn parse_host(
    memory: Option<&str>,
    cores: Option<u32>,
) -> Result<crate::app::HostOverride, Failure> {
    let memory_bytes = match memory {
        None => None,
        Some(m) => Some(parse_size(m).filter(|&b| b > 0).ok_or_else(|| {
            Failure::new(
                exit::USAGE,
                anyhow::anyhow!(
                    "--host-memory {m:?}: expected a size above 0, such as 512GiB, 1.5TiB, 64GB or a number of bytes"
                ),
            )
        })?),
    };
    let max = crate::hardware::MAX_LOGICAL_CPUS;
    if let Some(c) = cores
        && !(1..=max).contains(&c)
    {
        return Err(Failure::new(
            exit::USAGE,
            anyhow::anyhow!("--host-cores {c}: expected 1 to {max} physical cores"),
        ));
    }
    Ok(crate::app::HostOverride {
        memory_bytes,
        cores,
    })
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
        Command::ProfilesList(kind, format) => profiles::list(&common, kind, format),
        Command::ProfilesShow(id, format) => profiles::show(&common, &id, format),
        Command::MeasurementsImport(file, model, format) => {
            let done = crate::app::import_measurements(&common, &file, model.as_deref())?;
            let text = match format {
                OutputFormat::Table => {
                    let mut t = String::new();
                    for run in &done.already_imported {
                        t.push_str(&format!(
                            "{}: already imported: run {run}; nothing recorded for it\n",
                            done.file
                        ));
                    }
                    if !done.runs.is_empty() || done.already_imported.is_empty() {
                        t.push_str(&format!(
                            "{}: run(s) {}, {} measurement{} recorded (rows {})\n",
                            done.file,
                            done.runs
                                .iter()
                                .map(i64::to_string)
                                .collect::<Vec<_>>()
                                .join(", "),
                            done.rows.len(),
                            if done.rows.len() == 1 { "" } else { "s" },
                            done.rows
                                .iter()
                                .map(i64::to_string)
                                .collect::<Vec<_>>()
                                .join(", ")
                        ));
                    }
                    for s in &done.skipped {
                        t.push_str(&format!("skipped {s}\n"));
                    }
                    t
                }
                f => render(&done, f)?,
            };
            write_stdout(&text)
        }
        Command::Observe(deployment, what) => {
            let rows = crate::app::observe(&common, &deployment, &what)?;
            write_stdout(&format!(
                "{}: recorded as row {}\n",
                deployment.display(),
                rows.iter()
                    .map(i64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        }
        Command::MeasurementsExport => {
            let lines = common
                .store()?
                .export()
                .map_err(crate::app::store_failure)?;
            let mut text = String::new();
            for l in &lines {
                text.push_str(
                    &serde_json::to_string(l).map_err(|e| Failure::new(exit::RUNTIME, e))?,
                );
                text.push('\n');
            }
            write_stdout(&text)
        }
        Command::MeasurementsList(format) => {
            let rows = common.store()?.list().map_err(crate::app::store_failure)?;
            let text = match format {
                OutputFormat::Table => measurements::list_table(&rows),
                f => render(&rows, f)?,
            };
            write_stdout(&text)
        }
        Command::MeasurementsShow(s) => measurements::show(&common, &s),
        Command::MeasurementsPrune(s) => measurements::prune(&common, &s),
        Command::Estimate(s) => estimate::run(&common, &s),
        Command::Resolve(s) => resolve::run(&common, &s),
        Command::Recommend(s) => recommend::run(&common, &s),
        Command::Calibrate(mode) => calibrate::run(&common, &mode),
        Command::Bench(s) => bench::run(&common, &s),
        Command::Schema(name) => write_stdout(&crate::schema::render(&name).unwrap_or_default()),
        Command::Completions(shell) => {
            let mut buf = Vec::new();
            clap_complete::generate(shell, &mut cli_command(), "optimizer", &mut buf);
            write_stdout(&String::from_utf8_lossy(&buf))
        }
        Command::Man => {
            let mut buf = Vec::new();
            clap_mangen::Man::new(cli_command())
                .render(&mut buf)
                .map_err(|e| {
                    Failure::new(
                        exit::RUNTIME,
                        anyhow::Error::new(e).context("rendering the manual page"),
                    )
                })?;
            write_stdout(&String::from_utf8_lossy(&buf))
        }
    }
}

fn report(f: &Failure) {
    let mut err = std::io::stderr().lock();
    // Messages quote file, store and server content: printed with its control characters escaped.
    let _ = writeln!(err, "error: {}", terminal::safe_lines(&f.error.to_string()));
    for cause in f.error.chain().skip(1) {
        let _ = writeln!(
            err,
            "  caused by: {}",
            terminal::safe_lines(&cause.to_string())
        );
    }
    if let Some(h) = &f.hint {
        let _ = writeln!(err, "hint: {}", terminal::safe_lines(h));
    }
}

/// The commit the binary was built from (`build.rs`; "unknown" outside a git checkout).
pub const GIT_COMMIT: &str = env!("OPTIMIZER_GIT_COMMIT");

/// `-V`: the crate version and the commit.
pub fn short_version() -> String {
    format!("{} (commit {GIT_COMMIT})", env!("CARGO_PKG_VERSION"))
}

/// `--version`: [`short_version`] and the engine versions the plans follow (the memory models and launch
/// artifacts are proven against these).
pub fn long_version() -> String {
    format!(
        "{}\nplans follow the pinned engines:\n  {}\n  vLLM {}\n  torch stack: {}",
        short_version(),
        crate::memory::llama_cpp::ENGINE,
        crate::memory::vllm::VERSION,
        crate::memory::torch::STACK
            .iter()
            .map(|(name, version)| format!("{name} {version}"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn parse<I, T>(args: I) -> Result<RawArgs, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    // clap takes `&'static str` (without its `string` feature): the strings are built once per process.
    let matches = cli_command().try_get_matches_from(args)?;
    RawArgs::from_arg_matches(&matches)
}

/// The command-line definition with its versions (for parsing, completions and the manual page).
fn cli_command() -> clap::Command {
    // clap takes `&'static str` (without its `string` feature): the strings are built once per process.
    static SHORT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    static LONG: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    RawArgs::command()
        .version(SHORT.get_or_init(short_version).as_str())
        .long_version(LONG.get_or_init(long_version).as_str())
}

/// Entry point of the binary.
pub fn main() -> ExitCode {
    let raw = match parse(estimate::llama_flags(std::env::args_os())) {
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
