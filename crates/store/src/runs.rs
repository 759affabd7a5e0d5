//! Recording: a run begun `incomplete` with the process recording it ([`RunOwner`]), its measurements (with the
//! host, device and model rows they refer to, created on first use), and the run marked complete, each write
//! retried while the database is busy; and imports ([`Store::import_runs`]), written whole in one transaction.
//!
//! **Imports are idempotent under concurrency.** Each imported run carries an identity ([`import_key`]: a digest
//! of what it came from) in a UNIQUE column; the check that no run has it and the writing of the run happen in
//! one `BEGIN IMMEDIATE` transaction, which holds the write lock from its start, so of ten processes importing the
//! same file at once exactly one writes and the other nine find its run. Trade-off: the write lock is held for a
//! whole import (milliseconds for a llama-bench file, about a second for the largest export
//! `MAX_IMPORT_BYTES` admits), which other writers wait out within the busy timeout.

use optimizer_core::profile::RuntimeId;
use rusqlite::OptionalExtension;
use sha2::{Digest, Sha256};

use crate::owner::RunOwner;
use crate::{Store, StoreError, classify, retrying, write_transaction};

/// The machine a run was taken on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostIdentity {
    pub cpu_model: String,
    pub physical_cores: u32,
    pub memory_total_bytes: u64,
    pub hostname: String,
}

/// One benchmark or calibration run, as it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRun {
    /// `calibrate`, `llama-bench import`, ...
    pub tool: String,
    pub runtime: RuntimeId,
    pub runtime_version: Option<String>,
    /// RFC 3339, UTC.
    pub started_at: String,
    /// The runtime flags used, as JSON.
    pub settings: String,
    pub host: HostIdentity,
}

/// A device as the store keys it: its hardware profile, the driver's name and its UUID when known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceIdentity {
    pub profile: String,
    pub name: String,
    pub uuid: Option<String>,
}

/// The model a measurement was taken with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelIdentity {
    pub fingerprint: String,
    pub architecture: String,
    pub tensor_bytes: u64,
}

/// The shape a measurement was taken at (`None`: not applicable or not recorded).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shape {
    pub context_tokens: Option<u32>,
    pub batch: Option<u32>,
    pub ubatch: Option<u32>,
    pub sequences: Option<u32>,
    pub threads: Option<u32>,
    pub gpu_layers: Option<u32>,
    pub kv_type: Option<String>,
    pub tensor_parallel: Option<u32>,
    pub pipeline_parallel: Option<u32>,
}

/// One measured quantity.
#[derive(Debug, Clone, PartialEq)]
pub struct NewMeasurement {
    pub device: DeviceIdentity,
    /// `None`: a device figure that holds for every model (a calibration).
    pub model: Option<ModelIdentity>,
    /// `decode_tokens_per_s`, `prefill_tokens_per_s`, `decode_efficiency`, `peak_memory_bytes`, ...
    pub metric: String,
    pub value: f64,
    pub unit: String,
    pub shape: Shape,
    /// Anything else about the conditions, as JSON.
    pub context: String,
}

/// A run being recorded; [`Store::finish_run`] marks it complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunId(pub i64);

impl Store {
    /// Records that a run started: it is `incomplete` (and ignored by lookups) until [`Store::finish_run`], so a
    /// run killed at any point leaves rows no plan uses.
    /// The run records this process as its recorder, so `measurements prune` leaves it alone while the process
    /// runs (see the `owner` module).
    pub fn begin_run(&self, run: &NewRun) -> Result<RunId, StoreError> {
        self.begin_run_as(run, &RunOwner::current())
    }

    /// [`Store::begin_run`] with the recorder given: a process that records on behalf of another, and tests.
    pub fn begin_run_as(&self, run: &NewRun, owner: &RunOwner) -> Result<RunId, StoreError> {
        retrying(|| self.begin_run_once(run, owner))
    }

    fn begin_run_once(&self, run: &NewRun, owner: &RunOwner) -> Result<RunId, StoreError> {
        let e = classify(&self.path);
        let tx = write_transaction(&self.conn).map_err(&e)?;
        let host = host_id(&tx, &run.host).map_err(&e)?;
        tx.execute(
            "INSERT INTO run (tool, runtime, runtime_version, started_at, settings, host_id, status, owner_host, \
             owner_boot_id, owner_pid_namespace, owner_pid, owner_started_ticks) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'incomplete', ?7, ?8, ?9, ?10, ?11)",
            rusqlite::params![
                &run.tool,
                run.runtime.name(),
                &run.runtime_version,
                &run.started_at,
                &run.settings,
                host,
                &owner.host,
                &owner.boot_id,
                &owner.pid_namespace,
                owner.pid,
                owner.started_ticks.and_then(|t| i64::try_from(t).ok()),
            ],
        )
        .map_err(&e)?;
        let id = tx.last_insert_rowid();
        tx.commit().map_err(&e)?;
        Ok(RunId(id))
    }

    /// Records one measurement of a run (its device and model rows created on first use); returns its row id.
    /// A non-finite value is refused: nothing downstream could use it.
    pub fn record(&self, run: RunId, m: &NewMeasurement) -> Result<i64, StoreError> {
        if !m.value.is_finite() {
            return Err(StoreError::Value {
                path: self.path.clone(),
                what: format!("{} = {}: not a finite number", m.metric, m.value),
            });
        }
        retrying(|| self.record_once(run, m))
    }

    fn record_once(&self, run: RunId, m: &NewMeasurement) -> Result<i64, StoreError> {
        let e = classify(&self.path);
        let tx = write_transaction(&self.conn).map_err(&e)?;
        let exists: bool = tx
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM run WHERE id = ?1)",
                [run.0],
                |r| r.get(0),
            )
            .map_err(&e)?;
        if !exists {
            return Err(StoreError::RunGone {
                path: self.path.clone(),
                run: run.0,
            });
        }
        let id = insert_measurement(&tx, run, m).map_err(&e)?;
        tx.commit().map_err(&e)?;
        Ok(id)
    }

    /// Marks a run complete: from now on lookups use its rows.
    pub fn finish_run(&self, run: RunId, finished_at: &str) -> Result<(), StoreError> {
        let changed = retrying(|| {
            self.conn
                .execute(
                    "UPDATE run SET status = 'complete', finished_at = ?2 WHERE id = ?1",
                    (run.0, finished_at),
                )
                .map_err(classify(&self.path))
        })?;
        if changed == 0 {
            return Err(StoreError::RunGone {
                path: self.path.clone(),
                run: run.0,
            });
        }
        Ok(())
    }

    /// Imports runs whole (see the module doc), in one write transaction: each is written complete with its
    /// measurements, unless a run with its key is here already, or (`same_as_recorded`) a complete run with
    /// the same host, tool, runtime, start and settings, recorded here and exported. Nothing is written when any
    /// of them fails. Returns one outcome per run, in order.
    pub fn import_runs(&self, runs: &[ImportRun]) -> Result<Vec<ImportOutcome>, StoreError> {
        for m in runs.iter().flat_map(|r| &r.measurements) {
            if !m.value.is_finite() {
                return Err(StoreError::Value {
                    path: self.path.clone(),
                    what: format!("{} = {}: not a finite number", m.metric, m.value),
                });
            }
        }
        retrying(|| self.import_runs_once(runs))
    }

    fn import_runs_once(&self, runs: &[ImportRun]) -> Result<Vec<ImportOutcome>, StoreError> {
        let e = classify(&self.path);
        let tx = write_transaction(&self.conn).map_err(&e)?;
        let mut out = Vec::with_capacity(runs.len());
        for r in runs {
            if let Some(id) = already_imported(&tx, r).map_err(&e)? {
                out.push(ImportOutcome::Already(RunId(id)));
                continue;
            }
            let host = host_id(&tx, &r.run.host).map_err(&e)?;
            tx.execute(
                "INSERT INTO run (tool, runtime, runtime_version, started_at, settings, host_id, status, \
                 finished_at, import_key) VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'complete', ?7, ?8)",
                rusqlite::params![
                    &r.run.tool,
                    r.run.runtime.name(),
                    &r.run.runtime_version,
                    &r.run.started_at,
                    &r.run.settings,
                    host,
                    &r.finished_at,
                    &r.key,
                ],
            )
            .map_err(&e)?;
            let run = RunId(tx.last_insert_rowid());
            let rows = r
                .measurements
                .iter()
                .map(|m| insert_measurement(&tx, run, m))
                .collect::<rusqlite::Result<Vec<i64>>>()
                .map_err(&e)?;
            out.push(ImportOutcome::Written { run, rows });
        }
        tx.commit().map_err(&e)?;
        Ok(out)
    }
}

/// One run to import whole with [`Store::import_runs`].
#[derive(Debug, Clone, PartialEq)]
pub struct ImportRun {
    /// Its identity ([`import_key`]): a run with this key already here is not written again.
    pub key: String,
    /// Whether a complete run recorded here with the same host, tool, runtime, start and settings (one this store
    /// exported, now coming back) counts as this one: true for exports, whose lines carry exactly those.
    pub same_as_recorded: bool,
    pub run: NewRun,
    /// RFC 3339, UTC.
    pub finished_at: String,
    pub measurements: Vec<NewMeasurement>,
}

/// What [`Store::import_runs`] did with one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImportOutcome {
    /// Written complete, with these measurement row ids.
    Written { run: RunId, rows: Vec<i64> },
    /// Already here as this run; nothing written.
    Already(RunId),
}

/// The identity of an imported run: `kind` (what was imported: `llama-bench`, `export`, ...) and a SHA-256 of
/// `content` (what it was imported from, in a form the caller fixes), as `kind:hex`.
pub fn import_key(kind: &str, content: &[u8]) -> String {
    let digest = Sha256::digest(content);
    let mut key = String::with_capacity(kind.len() + 1 + 2 * digest.len());
    key.push_str(kind);
    key.push(':');
    for b in digest.iter() {
        use std::fmt::Write as _;
        let _ = write!(key, "{b:02x}");
    }
    key
}

/// The run already here for `r`, if any: its key, else (`same_as_recorded`) a complete run recorded with the same
/// identifying fields.
fn already_imported(tx: &rusqlite::Connection, r: &ImportRun) -> rusqlite::Result<Option<i64>> {
    let keyed = tx
        .query_row(
            "SELECT id FROM run WHERE import_key = ?1",
            [&r.key],
            |row| row.get(0),
        )
        .optional()?;
    if keyed.is_some() || !r.same_as_recorded {
        return Ok(keyed);
    }
    let h = &r.run.host;
    tx.query_row(
        "SELECT min(r.id) FROM run r JOIN host h ON h.id = r.host_id WHERE r.status = 'complete' \
         AND r.tool = ?1 AND r.runtime = ?2 AND r.started_at = ?3 AND r.settings = ?4 \
         AND h.cpu_model = ?5 AND h.physical_cores = ?6 AND h.memory_total_bytes = ?7 AND h.hostname = ?8",
        rusqlite::params![
            &r.run.tool,
            r.run.runtime.name(),
            &r.run.started_at,
            &r.run.settings,
            &h.cpu_model,
            h.physical_cores,
            i64::try_from(h.memory_total_bytes).unwrap_or(i64::MAX),
            &h.hostname
        ],
        |row| row.get(0),
    )
}

/// The row id of `h`, inserted on first use.
fn host_id(tx: &rusqlite::Connection, h: &HostIdentity) -> rusqlite::Result<i64> {
    let memory = i64::try_from(h.memory_total_bytes).unwrap_or(i64::MAX);
    tx.execute(
        "INSERT INTO host (cpu_model, physical_cores, memory_total_bytes, hostname) VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT DO NOTHING",
        (&h.cpu_model, h.physical_cores, memory, &h.hostname),
    )?;
    tx.query_row(
        "SELECT id FROM host WHERE cpu_model = ?1 AND physical_cores = ?2 AND memory_total_bytes = ?3 \
         AND hostname = ?4",
        (&h.cpu_model, h.physical_cores, memory, &h.hostname),
        |r| r.get(0),
    )
}

/// Inserts one measurement of `run` (its device and model rows created on first use); returns its row id.
fn insert_measurement(
    tx: &rusqlite::Connection,
    run: RunId,
    m: &NewMeasurement,
) -> rusqlite::Result<i64> {
    let d = &m.device;
    tx.execute(
        "INSERT INTO device (profile, name, uuid) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
        (&d.profile, &d.name, &d.uuid),
    )?;
    let device: i64 = tx.query_row(
        "SELECT id FROM device WHERE profile = ?1 AND name = ?2 AND ifnull(uuid, '') = ifnull(?3, '')",
        (&d.profile, &d.name, &d.uuid),
        |r| r.get(0),
    )?;
    let model: Option<i64> = match &m.model {
        None => None,
        Some(o) => {
            tx.execute(
                "INSERT INTO model (fingerprint, architecture, tensor_bytes) VALUES (?1, ?2, ?3) \
                 ON CONFLICT DO NOTHING",
                (
                    &o.fingerprint,
                    &o.architecture,
                    i64::try_from(o.tensor_bytes).unwrap_or(i64::MAX),
                ),
            )?;
            Some(tx.query_row(
                "SELECT id FROM model WHERE fingerprint = ?1",
                [&o.fingerprint],
                |r| r.get(0),
            )?)
        }
    };
    let sh = &m.shape;
    tx.execute(
        "INSERT INTO measurement (run_id, device_id, model_id, metric, value, unit, context, context_tokens, \
         batch, ubatch, sequences, threads, gpu_layers, kv_type, tensor_parallel, pipeline_parallel) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
        rusqlite::params![
            run.0,
            device,
            model,
            &m.metric,
            m.value,
            &m.unit,
            &m.context,
            sh.context_tokens,
            sh.batch,
            sh.ubatch,
            sh.sequences,
            sh.threads,
            sh.gpu_layers,
            &sh.kv_type,
            sh.tensor_parallel,
            sh.pipeline_parallel,
        ],
    )?;
    Ok(tx.last_insert_rowid())
}
