//! `--runner llama-bench`: runs a real `llama-bench` over a sweep (`-t`, `-ngl`, `-b`, `-ub`, `-fa`, `-ctk`) for one
//! model with `-o jsonl`, reads each result line as it arrives, and records it as it comes through the same
//! conversion as `measurements import` ([`super::from_llama_bench`]), all in one run: the run is begun at the
//! first result and finished only when `llama-bench` exits 0 having printed every test, so a killed, crashed or
//! failing `llama-bench` (or a Ctrl-C, which reaches it too) leaves an `incomplete` run that no plan uses.
//!
//! The seam: [`record_stream`] takes any reader of result lines and a [`Sink`], so tests drive it without a
//! process; [`run`] spawns the program and feeds its stdout through it. Trade-off: rows are recorded one
//! transaction each, as they arrive, rather than all at the end, so `measurements list` shows progress and a
//! crash keeps (as incomplete) what was measured, at the cost of one commit per result.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use optimizer_store::StoreError;

use super::BenchRowError;
use super::llama_bench::{BenchRow, LlamaBenchError, parse};

/// Most values one sweep axis takes: llama-bench runs every combination, so more would not finish.
pub(crate) const MAX_AXIS_VALUES: usize = 32;
/// Most parameter combinations one sweep runs (each runs a prompt and a generation test, repeated).
pub(crate) const MAX_SWEEP_POINTS: usize = 512;
/// Most threads a test may run: ggml's `GGML_MAX_N_THREADS` (ggml/include/ggml.h of the pinned build); more
/// abort its thread pool.
pub(crate) const MAX_THREADS: u32 = 512;
/// Largest batch or micro-batch: llama-bench reads `-b`/`-ub` as a C `int`.
pub(crate) const MAX_BATCH: u32 = i32::MAX as u32;
/// Longest result line read: a jsonl result is about 1 KiB; a longer line is not llama-bench's.
pub const MAX_LINE_BYTES: usize = 64 << 10;
/// Bytes of llama-bench's stderr kept to explain a failure (its last lines).
const STDERR_TAIL_BYTES: usize = 4 << 10;
/// How long llama-bench's stderr is read after it exited (its tail is ready at once unless a process it
/// started still holds the pipe).
const STDERR_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Why a sweep's settings are refused before anything runs; `flag` is the command-line flag of the axis.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SweepError {
    #[error("{flag}: {count} values; at most {MAX_AXIS_VALUES}")]
    TooManyValues { flag: &'static str, count: usize },
    #[error("the sweep has more than {MAX_SWEEP_POINTS} combinations; narrow an axis")]
    TooManyCombinations,
    #[error("--threads 0: at least one thread")]
    NoThreads,
    #[error("--threads {threads}: at most {MAX_THREADS} (ggml's thread limit)")]
    TooManyThreads { threads: u32 },
    #[error("{flag} {value}: 1 to {MAX_BATCH}")]
    Batch { flag: &'static str, value: u32 },
    #[error("no test: the prompt and generation lengths are both 0")]
    NoTest,
    #[error("--repetitions 0: at least one")]
    NoRepetitions,
}

/// The sweep: one llama-bench invocation, every combination of the axes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sweep {
    pub threads: Vec<u32>,
    pub gpu_layers: Vec<i32>,
    pub batch: Vec<u32>,
    pub ubatch: Vec<u32>,
    /// `on`, `off` or `auto`.
    pub flash_attn: Vec<String>,
    pub cache_type_k: Vec<String>,
    /// `-p`: prompt tokens of the prefill test (0: none).
    pub prompt_tokens: u32,
    /// `-n`: generated tokens of the decode test (0: none).
    pub gen_tokens: u32,
    /// `-r`.
    pub repetitions: u32,
}

impl Sweep {
    /// llama-bench's own defaults for the test sizes (`-p 512 -n 128 -r 5`).
    pub const FULL: (u32, u32, u32) = (512, 128, 5);
    /// `--quick`: a 64-token prompt, 16 generated tokens, 2 repetitions (the committed fixture outputs' sizes),
    /// enough to rank configurations in seconds on a 2-core CPU for a small model.
    pub const QUICK: (u32, u32, u32) = (64, 16, 2);

    /// Parameter combinations (the product of the non-empty axes).
    pub(crate) fn points(&self) -> Option<usize> {
        [
            self.threads.len(),
            self.gpu_layers.len(),
            self.batch.len(),
            self.ubatch.len(),
            self.flash_attn.len(),
            self.cache_type_k.len(),
        ]
        .into_iter()
        .try_fold(1usize, |a, n| a.checked_mul(n.max(1)))
    }

    /// Result lines llama-bench prints: one per test per combination.
    pub fn tests(&self) -> Option<usize> {
        let per = usize::from(self.prompt_tokens > 0) + usize::from(self.gen_tokens > 0);
        self.points()?.checked_mul(per)
    }

    /// Checks the limits and that there is a test to run.
    pub fn validate(&self) -> Result<(), SweepError> {
        for (flag, count) in [
            ("--threads", self.threads.len()),
            ("--ngl", self.gpu_layers.len()),
            ("--batch", self.batch.len()),
            ("--ubatch", self.ubatch.len()),
            ("--flash-attn", self.flash_attn.len()),
            ("--cache-type-k", self.cache_type_k.len()),
        ] {
            if count > MAX_AXIS_VALUES {
                return Err(SweepError::TooManyValues { flag, count });
            }
        }
        match self.points() {
            Some(n) if n <= MAX_SWEEP_POINTS => {}
            _ => return Err(SweepError::TooManyCombinations),
        }
        if self.threads.contains(&0) {
            return Err(SweepError::NoThreads);
        }
        if let Some(&threads) = self.threads.iter().find(|t| **t > MAX_THREADS) {
            return Err(SweepError::TooManyThreads { threads });
        }
        for (flag, values) in [("--batch", &self.batch), ("--ubatch", &self.ubatch)] {
            if let Some(&value) = values.iter().find(|b| !(1..=MAX_BATCH).contains(*b)) {
                return Err(SweepError::Batch { flag, value });
            }
        }
        if self.prompt_tokens == 0 && self.gen_tokens == 0 {
            return Err(SweepError::NoTest);
        }
        if self.repetitions == 0 {
            return Err(SweepError::NoRepetitions);
        }
        Ok(())
    }

    /// llama-bench's arguments for `model`, results as JSON lines on stdout.
    pub fn argv(&self, model: &Path) -> Vec<String> {
        let join = |v: &[String]| v.join(",");
        let list = |v: Vec<String>| join(&v);
        let mut a = vec![
            "-m".to_string(),
            model.display().to_string(),
            "-p".into(),
            self.prompt_tokens.to_string(),
            "-n".into(),
            self.gen_tokens.to_string(),
            "-r".into(),
            self.repetitions.to_string(),
        ];
        let mut axis = |flag: &str, values: String| {
            if !values.is_empty() {
                a.push(flag.into());
                a.push(values);
            }
        };
        axis(
            "-t",
            list(self.threads.iter().map(u32::to_string).collect()),
        );
        axis(
            "-ngl",
            list(self.gpu_layers.iter().map(i32::to_string).collect()),
        );
        axis("-b", list(self.batch.iter().map(u32::to_string).collect()));
        axis(
            "-ub",
            list(self.ubatch.iter().map(u32::to_string).collect()),
        );
        axis("-fa", join(&self.flash_attn));
        axis("-ctk", join(&self.cache_type_k));
        a.extend(["-o".into(), "jsonl".into()]);
        a
    }
}

/// Where results go: the store in the binary, a vector in tests.
pub trait Sink {
    /// Records one result (the first call begins the run); returns the row id, or why it was not recorded.
    fn record(&mut self, row: &BenchRow) -> Result<Recorded, StoreError>;
    /// Marks the run complete: every test was printed and the program exited 0.
    fn finish(&mut self) -> Result<(), StoreError>;
}

/// What became of one result.
#[derive(Debug, Clone, PartialEq)]
pub enum Recorded {
    Row(i64),
    /// Not a measurement the store keeps (a combined or depth test, a GPU row on a GPU-less machine), and why.
    Skipped(BenchRowError),
}

/// One result as the summary shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BenchResult {
    pub threads: u32,
    pub gpu_layers: i64,
    pub batch: u32,
    pub ubatch: u32,
    pub flash_attn: i64,
    pub cache_type_k: String,
    /// `pp64`, `tg16`.
    pub test: String,
    pub tokens_per_s: f64,
    pub stddev: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub row: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// What a stream gave.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Summary {
    pub results: Vec<BenchResult>,
    /// Lines that were not results (llama-bench prints nothing else on stdout with `-o jsonl`; counted anyway).
    pub other_lines: usize,
}

/// Why a sweep did not complete.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error("cannot start {program}: {source}", program = program.display())]
    Spawn {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("reading llama-bench's output: {0}")]
    Read(#[source] std::io::Error),
    /// Result line `line` (1-based) is longer than [`MAX_LINE_BYTES`].
    #[error("llama-bench result {line}: longer than {MAX_LINE_BYTES} bytes")]
    LongLine { line: usize },
    /// Result line `line` (1-based) does not read as a result. The error is quoted in the message rather than
    /// given as the `source` (this variant had none): the CLI prints a source chain as `caused by:` lines.
    #[error("llama-bench result {line}: {error}")]
    Result { line: usize, error: LlamaBenchError },
    /// Result line `line` (1-based) holds no result.
    #[error("llama-bench result {line}: empty")]
    Empty { line: usize },
    /// The store refused a result or the run's end; quoted in the message, not a `source`, as for
    /// [`RunnerError::Result`].
    #[error("recording a result: {0}")]
    Record(StoreError),
    #[error(
        "llama-bench {status} after {done} of {expected} results; the run stays incomplete and is never used{tail}"
    )]
    Failed {
        status: String,
        done: usize,
        expected: usize,
        tail: String,
    },
}

/// Reads result lines from `reader` as they arrive and records each in `sink`; `progress` is called after each
/// with the result and how many have come. Does not finish the run: that waits for the program's exit.
pub fn record_stream(
    mut reader: impl BufRead,
    sink: &mut dyn Sink,
    mut progress: impl FnMut(&BenchResult, usize),
) -> Result<Summary, RunnerError> {
    let mut summary = Summary::default();
    let mut line = Vec::new();
    for i in 0.. {
        line.clear();
        // At most MAX_LINE_BYTES and a newline are read into memory: an endless line is refused once it passes
        // the limit, not buffered until memory runs out.
        let read = (&mut reader)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .map_err(RunnerError::Read)?;
        if read == 0 {
            break;
        }
        if line.last() == Some(&b'\n') {
            line.pop();
        } else if line.len() > MAX_LINE_BYTES {
            return Err(RunnerError::LongLine { line: i + 1 });
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim();
        if !text.starts_with('{') {
            summary.other_lines = summary.other_lines.saturating_add(1);
            continue;
        }
        let row = parse(text)
            .map_err(|error| RunnerError::Result { line: i + 1, error })?
            .into_iter()
            .next()
            .ok_or(RunnerError::Empty { line: i + 1 })?;
        let recorded = sink.record(&row).map_err(RunnerError::Record)?;
        let r = BenchResult {
            threads: row.n_threads,
            gpu_layers: row.n_gpu_layers,
            batch: row.n_batch,
            ubatch: row.n_ubatch,
            flash_attn: row.flash_attn,
            cache_type_k: row.type_k.clone(),
            test: if row.n_gen == 0 {
                format!("pp{}", row.n_prompt)
            } else if row.n_prompt == 0 {
                format!("tg{}", row.n_gen)
            } else {
                format!("pp{}+tg{}", row.n_prompt, row.n_gen)
            },
            tokens_per_s: row.avg_ts,
            stddev: row.stddev_ts,
            row: match &recorded {
                Recorded::Row(id) => Some(*id),
                Recorded::Skipped(_) => None,
            },
            skipped: match recorded {
                Recorded::Row(_) => None,
                Recorded::Skipped(why) => Some(why.to_string()),
            },
        };
        summary.results.push(r);
        if let Some(last) = summary.results.last() {
            progress(last, summary.results.len());
        }
    }
    Ok(summary)
}

/// Runs `program` (llama-bench) with `sweep` on `model`, recording every result in `sink`, and finishes the run
/// when it exits 0 with every expected result printed. On any failure the run stays incomplete.
pub fn run(
    program: &Path,
    sweep: &Sweep,
    model: &Path,
    sink: &mut dyn Sink,
    progress: impl FnMut(&BenchResult, usize),
) -> Result<Summary, RunnerError> {
    let mut child = Command::new(program)
        .args(sweep.argv(model))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| RunnerError::Spawn {
            program: program.to_path_buf(),
            source,
        })?;
    // stderr is drained on its own thread so a chatty llama-bench cannot block on a full pipe; its tail
    // explains a failure.
    let (tail_tx, tail_rx) = std::sync::mpsc::channel();
    if let Some(mut e) = child.stderr.take() {
        std::thread::spawn(move || {
            let mut tail: Vec<u8> = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(n) = e.read(&mut buf) {
                if n == 0 {
                    break;
                }
                tail.extend_from_slice(&buf[..n]);
                if tail.len() > 2 * STDERR_TAIL_BYTES {
                    tail.drain(..tail.len() - STDERR_TAIL_BYTES);
                }
            }
            let start = tail.len().saturating_sub(STDERR_TAIL_BYTES);
            let _ = tail_tx.send(String::from_utf8_lossy(&tail[start..]).into_owned());
        });
    }
    // The reader (and with it the pipe) is dropped when the stream ends, so a child still writing gets EPIPE
    // rather than blocking on a full pipe.
    let streamed = match child.stdout.take() {
        Some(out) => record_stream(BufReader::new(out), sink, progress),
        None => Ok(Summary::default()),
    };
    if streamed.is_err() {
        // Stop it: its results can no longer be recorded (a line past the limit, a result that does not read).
        let _ = child.kill();
    }
    let status = child.wait().map_err(RunnerError::Read)?;
    // Its stderr ends when it exits, unless a process it started holds the pipe: then the tail is given up
    // after a grace period rather than waited for.
    let tail = tail_rx.recv_timeout(STDERR_GRACE).unwrap_or_default();
    let summary = streamed?;
    let expected = sweep.tests().unwrap_or(0);
    if !status.success() || summary.results.len() < expected {
        let tail = tail.trim();
        return Err(RunnerError::Failed {
            status: status.to_string(),
            done: summary.results.len(),
            expected,
            tail: if tail.is_empty() {
                String::new()
            } else {
                format!("\nits stderr ended:\n{tail}")
            },
        });
    }
    sink.finish().map_err(RunnerError::Record)?;
    Ok(summary)
}

/// Records results in the store as one run of `tool`, begun at the first result (so a llama-bench that fails
/// before measuring anything leaves no run at all) with the build it reports, finished by [`Sink::finish`].
pub struct StoreSink<'a> {
    pub store: &'a optimizer_store::Store,
    pub fleet: &'a optimizer_core::fleet::Fleet,
    pub model: &'a optimizer_model::ModelSpec,
    pub tool: String,
    pub host: optimizer_store::HostIdentity,
    /// The run's settings (JSON: the program and its argv).
    pub settings: String,
    /// RFC 3339 UTC now (the caller's clock, so tests can fix it).
    pub clock: &'a dyn Fn() -> String,
    pub run: Option<optimizer_store::RunId>,
}

impl Sink for StoreSink<'_> {
    fn record(&mut self, row: &BenchRow) -> Result<Recorded, StoreError> {
        let m = match super::from_llama_bench(row, self.fleet, self.model) {
            Ok(m) => m,
            Err(why) => return Ok(Recorded::Skipped(why)),
        };
        let run = match self.run {
            Some(r) => r,
            None => {
                let r = self.store.begin_run(&optimizer_store::NewRun {
                    tool: self.tool.clone(),
                    runtime: optimizer_core::profile::RuntimeId::LlamaCpp,
                    runtime_version: Some(row.build_commit.clone()).filter(|c| !c.is_empty()),
                    started_at: (self.clock)(),
                    settings: self.settings.clone(),
                    host: self.host.clone(),
                })?;
                self.run = Some(r);
                r
            }
        };
        self.store.record(run, &m).map(Recorded::Row)
    }

    fn finish(&mut self) -> Result<(), StoreError> {
        match self.run {
            Some(r) => self.store.finish_run(r, &(self.clock)()),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records into a vector; counts finishes.
    #[derive(Default)]
    struct Collect {
        rows: Vec<BenchRow>,
        finished: usize,
    }

    impl Sink for Collect {
        fn record(&mut self, row: &BenchRow) -> Result<Recorded, StoreError> {
            self.rows.push(row.clone());
            Ok(Recorded::Row(i64::try_from(self.rows.len()).unwrap()))
        }
        fn finish(&mut self) -> Result<(), StoreError> {
            self.finished += 1;
            Ok(())
        }
    }

    fn sweep() -> Sweep {
        Sweep {
            threads: vec![1, 2],
            gpu_layers: vec![],
            batch: vec![],
            ubatch: vec![256, 512],
            flash_attn: vec!["on".into()],
            cache_type_k: vec!["f16".into(), "q8_0".into()],
            prompt_tokens: 64,
            gen_tokens: 16,
            repetitions: 2,
        }
    }

    #[test]
    fn the_argv_names_every_axis_given_and_jsonl() {
        let a = sweep().argv(Path::new("m.gguf"));
        assert_eq!(
            a.join(" "),
            "-m m.gguf -p 64 -n 16 -r 2 -t 1,2 -ub 256,512 -fa on -ctk f16,q8_0 -o jsonl"
        );
        assert_eq!(sweep().points(), Some(8));
        assert_eq!(sweep().tests(), Some(16));
    }

    #[test]
    fn limits_are_checked_before_running() {
        let mut s = sweep();
        s.threads = (1..=33).collect();
        assert_eq!(
            s.validate(),
            Err(SweepError::TooManyValues {
                flag: "--threads",
                count: 33
            })
        );
        assert!(s.validate().unwrap_err().to_string().contains("at most 32"));
        let mut s = sweep();
        s.threads = (1..=32).collect();
        s.batch = (1..=32).collect();
        assert_eq!(s.validate(), Err(SweepError::TooManyCombinations));
        assert!(
            s.validate()
                .unwrap_err()
                .to_string()
                .contains("combinations")
        );
        let mut s = sweep();
        s.prompt_tokens = 0;
        s.gen_tokens = 0;
        assert_eq!(s.validate(), Err(SweepError::NoTest));
        assert!(sweep().validate().is_ok());
    }

    #[test]
    fn a_stream_is_recorded_line_by_line_and_not_finished() {
        let text =
            include_str!("../../../../tests/fixtures/llama-bench/outputs/tiny-q4_k_m-cpu.jsonl");
        let mut sink = Collect::default();
        let mut seen = Vec::new();
        let s = record_stream(
            format!("log noise\n{text}").as_bytes(),
            &mut sink,
            |r, n| seen.push((r.test.clone(), n)),
        )
        .unwrap();
        assert_eq!(s.results.len(), 4);
        assert_eq!(s.other_lines, 1);
        assert_eq!(sink.rows.len(), 4);
        assert_eq!(sink.finished, 0, "finishing waits for the exit status");
        assert_eq!(
            seen,
            [
                ("pp64".to_string(), 1),
                ("tg16".to_string(), 2),
                ("pp64".to_string(), 3),
                ("tg16".to_string(), 4)
            ]
        );
        let err = record_stream("{\"avg_ts\": 1}\n".as_bytes(), &mut sink, |_, _| {}).unwrap_err();
        assert!(err.to_string().contains("result 1"), "{err}");
    }
}
