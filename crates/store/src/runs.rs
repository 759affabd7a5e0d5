//! Recording: a run begun `incomplete`, its measurements (with the host, device and model rows they refer to,
//! created on first use), and the run marked complete, each write retried while the database is busy.

use optimizer_core::profile::RuntimeId;

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
    pub fn begin_run(&self, run: &NewRun) -> Result<RunId, StoreError> {
        retrying(|| self.begin_run_once(run))
    }

    fn begin_run_once(&self, run: &NewRun) -> Result<RunId, StoreError> {
        let e = classify(&self.path);
        let tx = write_transaction(&self.conn).map_err(&e)?;
        let h = &run.host;
        tx.execute(
            "INSERT INTO host (cpu_model, physical_cores, memory_total_bytes, hostname) VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT DO NOTHING",
            (
                &h.cpu_model,
                h.physical_cores,
                i64::try_from(h.memory_total_bytes).unwrap_or(i64::MAX),
                &h.hostname,
            ),
        )
        .map_err(&e)?;
        let host: i64 = tx
            .query_row(
                "SELECT id FROM host WHERE cpu_model = ?1 AND physical_cores = ?2 AND memory_total_bytes = ?3 \
                 AND hostname = ?4",
                (
                    &h.cpu_model,
                    h.physical_cores,
                    i64::try_from(h.memory_total_bytes).unwrap_or(i64::MAX),
                    &h.hostname,
                ),
                |r| r.get(0),
            )
            .map_err(&e)?;
        tx.execute(
            "INSERT INTO run (tool, runtime, runtime_version, started_at, settings, host_id, status) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'incomplete')",
            (
                &run.tool,
                run.runtime.name(),
                &run.runtime_version,
                &run.started_at,
                &run.settings,
                host,
            ),
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
        let d = &m.device;
        tx.execute(
            "INSERT INTO device (profile, name, uuid) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
            (&d.profile, &d.name, &d.uuid),
        )
        .map_err(&e)?;
        let device: i64 = tx
            .query_row(
                "SELECT id FROM device WHERE profile = ?1 AND name = ?2 AND ifnull(uuid, '') = ifnull(?3, '')",
                (&d.profile, &d.name, &d.uuid),
                |r| r.get(0),
            )
            .map_err(&e)?;
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
                )
                .map_err(&e)?;
                Some(
                    tx.query_row(
                        "SELECT id FROM model WHERE fingerprint = ?1",
                        [&o.fingerprint],
                        |r| r.get(0),
                    )
                    .map_err(&e)?,
                )
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
        )
        .map_err(&e)?;
        let id = tx.last_insert_rowid();
        tx.commit().map_err(&e)?;
        Ok(id)
    }

    /// Marks a run complete: from now on lookups use its rows.
    pub fn finish_run(&self, run: RunId, finished_at: &str) -> Result<(), StoreError> {
        retrying(|| {
            self.conn
                .execute(
                    "UPDATE run SET status = 'complete', finished_at = ?2 WHERE id = ?1",
                    (run.0, finished_at),
                )
                .map(|_| ())
                .map_err(classify(&self.path))
        })
    }
}
