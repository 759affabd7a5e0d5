//! `measurements export` and `measurements import`: every measurement of the complete runs as self-describing
//! lines ([`Exported`]), and those lines written back as complete runs in one transaction, skipping runs already
//! present (see `runs.rs` for why that holds under concurrent imports).

use optimizer_core::profile::RuntimeId;

use crate::{
    DeviceIdentity, HostIdentity, ImportOutcome, ImportRun, ModelIdentity, NewMeasurement, NewRun,
    RunId, Shape, Store, StoreError, classify, import_key,
};

/// One measurement as `measurements export` writes it (one JSON object per line) and `measurements import`
/// reads it back: the row with everything that identifies it (host, run, device, model) and its shape, so a
/// fleet can merge what every machine measured and keep where each figure came from.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Exported {
    pub host: ExportedHost,
    pub run: ExportedRun,
    pub device: ExportedDevice,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ExportedModel>,
    pub metric: String,
    pub value: f64,
    pub unit: String,
    #[serde(default)]
    pub shape: ExportedShape,
    pub context: String,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportedHost {
    pub cpu_model: String,
    pub physical_cores: u32,
    pub memory_total_bytes: u64,
    pub hostname: String,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportedRun {
    pub tool: String,
    pub runtime: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_version: Option<String>,
    pub started_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    pub settings: String,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportedDevice {
    pub profile: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportedModel {
    pub fingerprint: String,
    pub architecture: String,
    pub tensor_bytes: u64,
}

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportedShape {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ubatch: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequences: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_layers: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor_parallel: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline_parallel: Option<u32>,
}

impl Store {
    /// Every measurement of every complete run, oldest first, as exported lines (incomplete runs stay home).
    pub fn export(&self) -> Result<Vec<Exported>, StoreError> {
        let e = classify(&self.path);
        let _snapshot = self.conn.unchecked_transaction().map_err(&e)?;
        let mut stmt = self
            .conn
            .prepare(
                "SELECT ifnull(h.cpu_model, ''), ifnull(h.physical_cores, 0), ifnull(h.memory_total_bytes, 0), \
                 ifnull(h.hostname, ''), r.tool, r.runtime, r.runtime_version, r.started_at, r.finished_at, \
                 r.settings, d.profile, d.name, d.uuid, o.fingerprint, o.architecture, o.tensor_bytes, m.metric, \
                 m.value, m.unit, m.context_tokens, m.batch, m.ubatch, m.sequences, m.threads, m.gpu_layers, \
                 m.kv_type, m.tensor_parallel, m.pipeline_parallel, m.context \
                 FROM measurement m JOIN run r ON r.id = m.run_id JOIN device d ON d.id = m.device_id \
                 LEFT JOIN host h ON h.id = r.host_id LEFT JOIN model o ON o.id = m.model_id \
                 WHERE r.status = 'complete' ORDER BY m.id",
            )
            .map_err(&e)?;
        let small = |v: Option<i64>| v.and_then(|v| u32::try_from(v).ok());
        let rows = stmt
            .query_map([], |r| {
                let fingerprint: Option<String> = r.get(13)?;
                Ok(Exported {
                    host: ExportedHost {
                        cpu_model: r.get(0)?,
                        physical_cores: u32::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
                        memory_total_bytes: u64::try_from(r.get::<_, i64>(2)?).unwrap_or(0),
                        hostname: r.get(3)?,
                    },
                    run: ExportedRun {
                        tool: r.get(4)?,
                        runtime: r.get(5)?,
                        runtime_version: r.get(6)?,
                        started_at: r.get(7)?,
                        finished_at: r.get(8)?,
                        settings: r.get(9)?,
                    },
                    device: ExportedDevice {
                        profile: r.get(10)?,
                        name: r.get(11)?,
                        uuid: r.get(12)?,
                    },
                    model: match fingerprint {
                        None => None,
                        Some(fingerprint) => Some(ExportedModel {
                            fingerprint,
                            architecture: r.get(14)?,
                            tensor_bytes: u64::try_from(r.get::<_, i64>(15)?).unwrap_or(0),
                        }),
                    },
                    metric: r.get(16)?,
                    value: r.get(17)?,
                    unit: r.get(18)?,
                    shape: ExportedShape {
                        context_tokens: small(r.get(19)?),
                        batch: small(r.get(20)?),
                        ubatch: small(r.get(21)?),
                        sequences: small(r.get(22)?),
                        threads: small(r.get(23)?),
                        gpu_layers: small(r.get(24)?),
                        kv_type: r.get(25)?,
                        tensor_parallel: small(r.get(26)?),
                        pipeline_parallel: small(r.get(27)?),
                    },
                    context: r.get(28)?,
                })
            })
            .map_err(&e)?;
        rows.collect::<Result<_, _>>().map_err(&e)
    }

    /// Imports exported lines: one run per distinct (host, run) they name, written complete, all in one write
    /// transaction ([`Store::import_runs`]). A run already here is skipped whole: one imported before (its key is a
    /// digest of the host and run fields the lines carry), or one recorded here and exported (same host, tool,
    /// runtime, start and settings, complete); so importing the same file twice, or ten times at once, adds it
    /// once.
    pub fn import(&self, lines: &[Exported]) -> Result<ImportedRuns, StoreError> {
        let mut groups: Vec<(&ExportedHost, &ExportedRun, Vec<&Exported>)> = Vec::new();
        for l in lines {
            match groups
                .iter_mut()
                .find(|(h, r, _)| *h == &l.host && *r == &l.run)
            {
                Some(g) => g.2.push(l),
                None => groups.push((&l.host, &l.run, vec![l])),
            }
        }
        let mut runs = Vec::with_capacity(groups.len());
        for (host, run, rows) in groups {
            let runtime: RuntimeId = serde_json::from_value(serde_json::Value::String(
                run.runtime.clone(),
            ))
            .map_err(|_| StoreError::Value {
                path: self.path.clone(),
                what: format!("runtime {:?}: not a runtime this build knows", run.runtime),
            })?;
            // The identity of an exported run: the fields that name it, as JSON (fixed field order).
            let identity = serde_json::to_vec(&(host, run)).map_err(|err| StoreError::Value {
                path: self.path.clone(),
                what: format!("a run that does not serialize: {err}"),
            })?;
            runs.push(ImportRun {
                key: import_key("export", &identity),
                same_as_recorded: true,
                run: NewRun {
                    tool: run.tool.clone(),
                    runtime,
                    runtime_version: run.runtime_version.clone(),
                    started_at: run.started_at.clone(),
                    settings: run.settings.clone(),
                    host: HostIdentity {
                        cpu_model: host.cpu_model.clone(),
                        physical_cores: host.physical_cores,
                        memory_total_bytes: host.memory_total_bytes,
                        hostname: host.hostname.clone(),
                    },
                },
                finished_at: run
                    .finished_at
                    .clone()
                    .unwrap_or_else(|| run.started_at.clone()),
                measurements: rows.into_iter().map(measurement_of).collect(),
            });
        }
        let mut done = ImportedRuns::default();
        for outcome in self.import_runs(&runs)? {
            match outcome {
                ImportOutcome::Written { run, rows } => {
                    done.written.push(run);
                    done.rows.extend(rows);
                }
                ImportOutcome::Already(run) => done.already.push(run),
            }
        }
        Ok(done)
    }
}

/// What [`Store::import`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImportedRuns {
    /// Runs written.
    pub written: Vec<RunId>,
    /// Their measurement row ids.
    pub rows: Vec<i64>,
    /// Runs of the file already here (nothing written for them).
    pub already: Vec<RunId>,
}

fn measurement_of(l: &Exported) -> NewMeasurement {
    NewMeasurement {
        device: DeviceIdentity {
            profile: l.device.profile.clone(),
            name: l.device.name.clone(),
            uuid: l.device.uuid.clone(),
        },
        model: l.model.as_ref().map(|m| ModelIdentity {
            fingerprint: m.fingerprint.clone(),
            architecture: m.architecture.clone(),
            tensor_bytes: m.tensor_bytes,
        }),
        metric: l.metric.clone(),
        value: l.value,
        unit: l.unit.clone(),
        shape: Shape {
            context_tokens: l.shape.context_tokens,
            batch: l.shape.batch,
            ubatch: l.shape.ubatch,
            sequences: l.shape.sequences,
            threads: l.shape.threads,
            gpu_layers: l.shape.gpu_layers,
            kv_type: l.shape.kv_type.clone(),
            tensor_parallel: l.shape.tensor_parallel,
            pipeline_parallel: l.shape.pipeline_parallel,
        },
        context: l.context.clone(),
    }
}
