//! Command line: clap definitions, two-phase parsing (raw flags → validated settings), output formats and exit
//! codes. May touch everything, through the library modules; `main.rs` only calls [`main`].
//!
//! Exit codes (contract, `ARCHITECTURE.md`): 0 success · 1 runtime error · 2 usage error · 3 no configuration
//! fits · 4 invalid input file (model, profile, database).

mod inspect;

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
}

/// How a command renders its result on stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Table,
    Yaml,
    Json,
}

/// Validated settings: what commands see instead of clap types.
#[derive(Debug)]
enum Command {
    Inspect(inspect::Settings),
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
            ModelError::Io { .. } => Failure::new(exit::RUNTIME, e),
            ModelError::Invalid { .. } | ModelError::InvalidModel { .. } => {
                Failure::new(exit::INVALID_INPUT, e)
            }
        }
    }
}

fn settle(raw: RawArgs) -> Result<Command, Failure> {
    match raw.command {
        RawCommand::Inspect {
            model,
            format,
            tensors,
        } => Ok(Command::Inspect(inspect::Settings {
            model,
            format,
            tensors,
        })),
    }
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

/// Renders a serializable value in a machine format.
pub(crate) fn render<T: serde::Serialize>(
    value: &T,
    format: OutputFormat,
) -> Result<String, Failure> {
    let text = match format {
        OutputFormat::Json => serde_json::to_string_pretty(value)
            .map(|s| s + "\n")
            .map_err(anyhow::Error::from),
        OutputFormat::Yaml | OutputFormat::Table => {
            serde_yaml_ng::to_string(value).map_err(anyhow::Error::from)
        }
    };
    text.map_err(|e| Failure::new(exit::RUNTIME, e.context("rendering output")))
}

fn run(command: Command) -> Result<(), Failure> {
    match command {
        Command::Inspect(s) => inspect::run(&s),
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
    let raw = match RawArgs::try_parse() {
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
