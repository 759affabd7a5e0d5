//! `measurements show` and `measurements prune`: one measurement or one run read back with everything that
//! identifies it, and deletion by explicit selectors inside one write transaction.
//!
//! **What a prune removes.** The selectors pick measurements (all of them must hold: `--incomplete` and
//! `--older-than` and `--run` test the measurement's run, `--device` its device's profile). Those rows go; then
//! every run the run selectors pick that is left without measurements (an interrupted run killed before its first
//! row included; with `--device`, only runs that lost a row to this prune); then devices, models and hosts that
//! nothing refers to any more, so the store keeps no orphan rows and the foreign keys (enforced on every
//! connection) always hold. Trade-off: selectors combine with AND, not OR, so adding a selector can only narrow
//! what goes; deleting more than meant is the failure a user cannot undo.
//!
//! **A run still being recorded is never removed.** Whatever the selectors, an incomplete run goes only when its
//! recorder is provably gone (the `owner` module: this host under another boot, or a pid that no longer exists or
//! now belongs to a later process); one whose recorder is running is kept, and one whose recorder cannot be checked
//! (another host, another pid namespace, a run from before schema version 3) is kept until it is
//! [`UNCHECKABLE_RUN_MAX_AGE_DAYS`] old. Kept runs keep every row and are reported ([`Pruned::kept_running`]).
//! Removing a run its recorder is still writing made the recorder fail on the foreign key at its next row and keep
//! nothing (issue 24).
//!
//! A prune is one write transaction: rows before the runs they belong to, runs before the hosts they name, so no
//! statement meets a foreign key; any error rolls the whole of it back (the transaction is dropped unfinished)
//! and the store keeps everything. A dry run takes the same path in the same kind of transaction and rolls it
//! back, so what it reports is exactly what the real prune would remove at that moment.

use rusqlite::OptionalExtension;

use super::{
    ExportedDevice, ExportedHost, ExportedModel, ExportedShape, Store, StoreError, classify,
    retrying, write_transaction,
};
use crate::owner::{Liveness, RecordedOwner, RunOwner, UNCHECKABLE_RUN_MAX_AGE_DAYS, liveness};

/// A run as `measurements show` prints it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ShownRun {
    pub id: i64,
    pub tool: String,
    pub runtime: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_version: Option<String>,
    pub started_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// `complete`, or `incomplete` (interrupted; never used by plans).
    pub status: String,
    /// The runtime flags used, as recorded (JSON, parsed when it parses).
    pub settings: serde_json::Value,
    /// Absent for runs of schema version 1, which did not record a host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<ExportedHost>,
}

/// One measurement as `measurements show` prints it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Shown {
    pub row: i64,
    pub device: ExportedDevice,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<ExportedModel>,
    pub metric: String,
    pub value: f64,
    pub unit: String,
    pub shape: ExportedShape,
    /// The conditions as recorded (JSON, parsed when it parses).
    pub context: serde_json::Value,
}

/// `measurements show ID`: a measurement with its run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ShownMeasurement {
    pub run: ShownRun,
    #[serde(flatten)]
    pub measurement: Shown,
}

/// `measurements show run:ID`: a run with every measurement it recorded.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ShownRunWithRows {
    pub run: ShownRun,
    pub measurements: Vec<Shown>,
}

/// Which rows `measurements prune` removes (all given selectors must hold; see the module doc).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Prune {
    /// Runs still `incomplete` (interrupted).
    pub incomplete: bool,
    /// Runs started before this RFC 3339 UTC instant.
    pub started_before: Option<String>,
    /// Measurements on devices of this profile.
    pub device_profile: Option<String>,
    pub run: Option<i64>,
}

impl Prune {
    /// Whether any selector is set: a prune without one is refused by the CLI (it would empty the store).
    pub fn is_empty(&self) -> bool {
        !self.incomplete
            && self.started_before.is_none()
            && self.device_profile.is_none()
            && self.run.is_none()
    }
}

/// What a prune removed (or, dry, would remove).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Pruned {
    pub dry_run: bool,
    /// Measurement row ids.
    pub measurements: Vec<i64>,
    /// Run ids removed whole.
    pub runs: Vec<i64>,
    /// Devices, models and hosts left unreferenced and removed with them.
    pub devices: u64,
    pub models: u64,
    pub hosts: u64,
    /// Incomplete runs the selectors picked but kept, with every row, because their recorder may still be
    /// writing them (see the module doc).
    pub kept_running: Vec<KeptRun>,
}

/// An incomplete run a prune kept, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KeptRun {
    pub run: i64,
    pub why: String,
}

fn parsed(json: String) -> serde_json::Value {
    serde_json::from_str(&json).unwrap_or(serde_json::Value::String(json))
}

fn small(v: Option<i64>) -> Option<u32> {
    v.and_then(|v| u32::try_from(v).ok())
}

const RUN_COLUMNS: &str = "r.id, r.tool, r.runtime, r.runtime_version, r.started_at, r.finished_at, r.status, \
     r.settings, h.cpu_model, h.physical_cores, h.memory_total_bytes, h.hostname";

fn run_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<ShownRun> {
    let cpu_model: Option<String> = r.get(8)?;
    Ok(ShownRun {
        id: r.get(0)?,
        tool: r.get(1)?,
        runtime: r.get(2)?,
        runtime_version: r.get(3)?,
        started_at: r.get(4)?,
        finished_at: r.get(5)?,
        status: r.get(6)?,
        settings: parsed(r.get(7)?),
        host: match cpu_model {
            None => None,
            Some(cpu_model) => Some(ExportedHost {
                cpu_model,
                physical_cores: u32::try_from(r.get::<_, i64>(9)?).unwrap_or(0),
                memory_total_bytes: u64::try_from(r.get::<_, i64>(10)?).unwrap_or(0),
                hostname: r.get(11)?,
            }),
        },
    })
}

const ROW_COLUMNS: &str = "m.id, d.profile, d.name, d.uuid, o.fingerprint, o.architecture, o.tensor_bytes, \
     m.metric, m.value, m.unit, m.context_tokens, m.batch, m.ubatch, m.sequences, m.threads, m.gpu_layers, \
     m.kv_type, m.tensor_parallel, m.pipeline_parallel, m.context";

fn shown_of(r: &rusqlite::Row<'_>) -> rusqlite::Result<Shown> {
    let fingerprint: Option<String> = r.get(4)?;
    Ok(Shown {
        row: r.get(0)?,
        device: ExportedDevice {
            profile: r.get(1)?,
            name: r.get(2)?,
            uuid: r.get(3)?,
        },
        model: match fingerprint {
            None => None,
            Some(fingerprint) => Some(ExportedModel {
                fingerprint,
                architecture: r.get(5)?,
                tensor_bytes: u64::try_from(r.get::<_, i64>(6)?).unwrap_or(0),
            }),
        },
        metric: r.get(7)?,
        value: r.get(8)?,
        unit: r.get(9)?,
        shape: ExportedShape {
            context_tokens: small(r.get(10)?),
            batch: small(r.get(11)?),
            ubatch: small(r.get(12)?),
            sequences: small(r.get(13)?),
            threads: small(r.get(14)?),
            gpu_layers: small(r.get(15)?),
            kv_type: r.get(16)?,
            tensor_parallel: small(r.get(17)?),
            pipeline_parallel: small(r.get(18)?),
        },
        context: parsed(r.get(19)?),
    })
}

impl Store {
    /// The run `id` (`None`: no such run), read in one transaction.
    fn shown_run(&self, id: i64) -> Result<Option<ShownRun>, StoreError> {
        self.conn
            .query_row(
                &format!(
                    "SELECT {RUN_COLUMNS} FROM run r LEFT JOIN host h ON h.id = r.host_id WHERE r.id = ?1"
                ),
                [id],
                run_of,
            )
            .optional()
            .map_err(classify(&self.path))
    }

    /// Measurement `row` with its run, host, device and model (`None`: no such row).
    pub fn show(&self, row: i64) -> Result<Option<ShownMeasurement>, StoreError> {
        let e = classify(&self.path);
        let _snapshot = self.conn.unchecked_transaction().map_err(&e)?;
        let found: Option<(i64, Shown)> = self
            .conn
            .query_row(
                &format!(
                    "SELECT {ROW_COLUMNS}, m.run_id FROM measurement m JOIN device d ON d.id = m.device_id \
                     LEFT JOIN model o ON o.id = m.model_id WHERE m.id = ?1"
                ),
                [row],
                |r| Ok((r.get(20)?, shown_of(r)?)),
            )
            .optional()
            .map_err(&e)?;
        let Some((run, measurement)) = found else {
            return Ok(None);
        };
        Ok(self
            .shown_run(run)?
            .map(|run| ShownMeasurement { run, measurement }))
    }

    /// Run `id` with every measurement it recorded, oldest first (`None`: no such run).
    pub fn show_run(&self, id: i64) -> Result<Option<ShownRunWithRows>, StoreError> {
        let e = classify(&self.path);
        let _snapshot = self.conn.unchecked_transaction().map_err(&e)?;
        let Some(run) = self.shown_run(id)? else {
            return Ok(None);
        };
        let mut stmt = self
            .conn
            .prepare(&format!(
                "SELECT {ROW_COLUMNS} FROM measurement m JOIN device d ON d.id = m.device_id \
                 LEFT JOIN model o ON o.id = m.model_id WHERE m.run_id = ?1 ORDER BY m.id"
            ))
            .map_err(&e)?;
        let measurements = stmt
            .query_map([id], shown_of)
            .map_err(&e)?
            .collect::<Result<_, _>>()
            .map_err(&e)?;
        Ok(Some(ShownRunWithRows { run, measurements }))
    }

    /// Removes what `sel` selects (see the module doc) in one write transaction; with `dry_run` the transaction
    /// is rolled back and nothing changes. An empty selector selects nothing.
    pub fn prune(&self, sel: &Prune, dry_run: bool) -> Result<Pruned, StoreError> {
        retrying(|| self.prune_once(sel, dry_run))
    }

    fn prune_once(&self, sel: &Prune, dry_run: bool) -> Result<Pruned, StoreError> {
        let e = classify(&self.path);
        let mut out = Pruned {
            dry_run,
            ..Pruned::default()
        };
        if sel.is_empty() {
            return Ok(out);
        }
        let tx = write_transaction(&self.conn).map_err(&e)?;
        // The run selectors, as a condition on `r`: ?1 started before, ?2 run id.
        let run_filter = "(?1 IS NULL OR r.started_at < ?1) AND (?2 IS NULL OR r.id = ?2)"
            .to_string()
            + if sel.incomplete {
                " AND r.status = 'incomplete'"
            } else {
                ""
            };
        out.kept_running = kept_running(&tx, &run_filter, sel).map_err(&e)?;
        let kept =
            serde_json::to_string(&out.kept_running.iter().map(|k| k.run).collect::<Vec<_>>())
                .unwrap_or_else(|_| "[]".into());
        // ?3: the device profile, ?4: the kept runs (a JSON array).
        let not_kept = "r.id NOT IN (SELECT value FROM json_each(?4))";
        let params = rusqlite::params![&sel.started_before, sel.run, &sel.device_profile, &kept];
        let selected: Vec<(i64, i64)> = {
            let mut stmt = tx
                .prepare(&format!(
                    "SELECT m.id, m.run_id FROM measurement m JOIN run r ON r.id = m.run_id \
                     JOIN device d ON d.id = m.device_id WHERE {run_filter} AND (?3 IS NULL OR d.profile = ?3) \
                     AND {not_kept} ORDER BY m.id"
                ))
                .map_err(&e)?;
            stmt.query_map(params, |r| Ok((r.get(0)?, r.get(1)?)))
                .map_err(&e)?
                .collect::<Result<_, _>>()
                .map_err(&e)?
        };
        for (id, _) in &selected {
            tx.execute("DELETE FROM measurement WHERE id = ?1", [id])
                .map_err(&e)?;
        }
        out.measurements = selected.iter().map(|(m, _)| *m).collect();
        let touched: std::collections::BTreeSet<i64> = selected.iter().map(|(_, r)| *r).collect();
        let empty_runs: Vec<i64> = {
            let mut stmt = tx
                .prepare(&format!(
                    "SELECT r.id FROM run r WHERE {run_filter} AND {not_kept} \
                     AND NOT EXISTS (SELECT 1 FROM measurement m WHERE m.run_id = r.id) ORDER BY r.id"
                ))
                .map_err(&e)?;
            // ?3, the device, is bound but not used: it picks rows, not runs.
            stmt.query_map(params, |r| r.get(0))
                .map_err(&e)?
                .collect::<Result<_, _>>()
                .map_err(&e)?
        };
        for id in empty_runs {
            // With a device selector, a run goes only when this prune emptied it.
            if sel.device_profile.is_some() && !touched.contains(&id) {
                continue;
            }
            tx.execute("DELETE FROM run WHERE id = ?1", [id])
                .map_err(&e)?;
            out.runs.push(id);
        }
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        out.devices = count(
            tx.execute(
                "DELETE FROM device WHERE id NOT IN (SELECT device_id FROM measurement)",
                [],
            )
            .map_err(&e)?,
        );
        out.models = count(
            tx.execute(
                "DELETE FROM model WHERE id NOT IN (SELECT model_id FROM measurement WHERE model_id IS NOT NULL)",
                [],
            )
            .map_err(&e)?,
        );
        out.hosts = count(
            tx.execute(
                "DELETE FROM host WHERE id NOT IN (SELECT host_id FROM run WHERE host_id IS NOT NULL)",
                [],
            )
            .map_err(&e)?,
        );
        if dry_run {
            tx.rollback().map_err(&e)?;
        } else {
            tx.commit().map_err(&e)?;
        }
        Ok(out)
    }
}

/// The incomplete runs the selectors pick (`run_filter` on `r`, and with a device selector only runs with a row
/// on that device) whose recorder may still be writing them: running, or not checkable and younger than
/// [`UNCHECKABLE_RUN_MAX_AGE_DAYS`] (by its recorded start; one whose start does not read as a time is kept).
fn kept_running(
    tx: &rusqlite::Connection,
    run_filter: &str,
    sel: &Prune,
) -> rusqlite::Result<Vec<KeptRun>> {
    let mut stmt = tx.prepare(&format!(
        "SELECT r.id, r.owner_host, r.owner_boot_id, r.owner_pid_namespace, r.owner_pid, r.owner_started_ticks, \
         ifnull(julianday(r.started_at) < julianday('now', ?4), 0) FROM run r \
         WHERE r.status = 'incomplete' AND {run_filter} AND (?3 IS NULL OR EXISTS (SELECT 1 FROM measurement m \
         JOIN device d ON d.id = m.device_id WHERE m.run_id = r.id AND d.profile = ?3)) ORDER BY r.id"
    ))?;
    let max_age = format!("-{UNCHECKABLE_RUN_MAX_AGE_DAYS} days");
    let here = RunOwner::current();
    let rows = stmt.query_map(
        rusqlite::params![&sel.started_before, sel.run, &sel.device_profile, &max_age],
        |r| {
            Ok((
                r.get::<_, i64>(0)?,
                RecordedOwner {
                    host: r.get(1)?,
                    boot_id: r.get(2)?,
                    pid_namespace: r.get(3)?,
                    pid: r.get(4)?,
                    started_ticks: r.get(5)?,
                },
                r.get::<_, bool>(6)?,
            ))
        },
    )?;
    let mut kept = Vec::new();
    for row in rows {
        let (run, owner, old) = row?;
        let why = match liveness(&owner, &here) {
            Liveness::Gone => continue,
            Liveness::Running(why) => why,
            Liveness::Unknown(_) if old => continue,
            Liveness::Unknown(why) => {
                format!("{why}; kept until it is {UNCHECKABLE_RUN_MAX_AGE_DAYS} days old")
            }
        };
        kept.push(KeptRun { run, why });
    }
    Ok(kept)
}
