//! `measurements import`: llama-bench output, llama.cpp load logs and our own exports into the store.

use super::*;

/// Largest file `measurements import` reads: a llama-bench sweep's results are kilobytes, and an export of
/// every measurement a fleet made stays within it.
pub const MAX_IMPORT_BYTES: u64 = 64 << 20;

/// What an import recorded.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Imported {
    pub file: String,
    /// Runs written.
    pub runs: Vec<i64>,
    /// Measurement row ids written (for an export, the count of lines recorded).
    pub rows: Vec<i64>,
    /// Results not recorded, and why.
    pub skipped: Vec<String>,
    /// Runs already in the store that this file's runs are (imported before): nothing was recorded for them.
    pub already_imported: Vec<i64>,
}

/// The identity of a llama-bench import: its result rows, every field in a fixed order, so the same file (or
/// the same results in another of llama-bench's formats) is recorded once. The rows carry llama-bench's test
/// time, so two real runs never share it.
fn llama_bench_key(rows: &[crate::calibrate::llama_bench::BenchRow]) -> String {
    let canonical: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!([
                r.build_commit,
                r.model_filename,
                r.backends,
                r.gpu_info,
                r.n_threads,
                r.n_batch,
                r.n_ubatch,
                r.type_k,
                r.n_gpu_layers,
                r.flash_attn,
                r.n_prompt,
                r.n_gen,
                r.n_depth,
                r.avg_ts,
                r.stddev_ts,
                r.test_time,
            ])
        })
        .collect();
    crate::store::import_key(
        "llama-bench",
        serde_json::Value::Array(canonical).to_string().as_bytes(),
    )
}

/// Writes one imported run whole (or finds it imported before), in one transaction of the store.
fn import_one(
    sources: &Sources,
    file: &Path,
    run: crate::store::ImportRun,
    skipped: Vec<String>,
) -> Result<Imported, Failure> {
    use crate::store::ImportOutcome;
    let store = sources.store()?;
    let outcome = store
        .import_runs(std::slice::from_ref(&run))
        .map_err(store_failure)?;
    let mut done = Imported {
        file: file.display().to_string(),
        runs: Vec::new(),
        rows: Vec::new(),
        skipped,
        already_imported: Vec::new(),
    };
    for o in outcome {
        match o {
            ImportOutcome::Written { run, rows } => {
                done.runs.push(run.0);
                done.rows = rows;
            }
            ImportOutcome::Already(run) => done.already_imported.push(run.0),
        }
    }
    Ok(done)
}

/// `measurements import FILE`: another store's export (merged, idempotently), or a `llama-bench` output (JSON,
/// JSON lines, CSV or SQL) recorded as one complete run
/// against this machine's devices (probe or `--inventory`) and the model each row names (or `model`, when the
/// file was moved). The run is written whole, complete, in one transaction, so an interrupted import leaves
/// nothing; its identity (the rows, or a load log's bytes, or an export's runs) makes a second import of the same
/// results, even one running at the same moment, record nothing and name the run already there
/// (`already_imported`).
pub fn import_measurements(
    sources: &Sources,
    file: &Path,
    model: Option<&Path>,
) -> Result<Imported, Failure> {
    let text = read_input(file, MAX_IMPORT_BYTES, "measurements file")?;
    // `measurements export` lines carry a metric; llama-bench's results an avg_ts. The first line is probed
    // for the key without building it as a value (a one-line 64 MiB JSON array peaked at 881 MB as one).
    #[derive(serde::Deserialize)]
    struct Probe {
        metric: Option<serde::de::IgnoredAny>,
    }
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    if first.trim_start().starts_with('{')
        && serde_json::from_str::<Probe>(first).is_ok_and(|p| p.metric.is_some())
    {
        return import_export(sources, file, &text);
    }
    if crate::calibrate::load_log::looks_like(&text) {
        return import_load_log(sources, file, &text, model);
    }
    let rows = crate::calibrate::llama_bench::parse(&text).map_err(|e| {
        Failure::new(
            exit::INVALID_INPUT,
            anyhow::anyhow!("{}: {e}", file.display()),
        )
        .hint("expected the output of llama-bench -o json, jsonl, csv or sql, a llama.cpp load log (llama-server -lv 4 stderr), or a measurements export")
    })?;
    if rows.is_empty() {
        return Err(Failure::new(
            exit::INVALID_INPUT,
            anyhow::anyhow!("{}: no results", file.display()),
        ));
    }
    let set = sources.profiles()?;
    let (inv, _) = sources.inventory()?;
    let fleet = crate::fleet::build(&inv, set, crate::profile::RuntimeId::LlamaCpp)
        .map_err(|e| Failure::new(exit::INVALID_INPUT, e))?;
    let mut models: std::collections::BTreeMap<String, crate::model::ModelSpec> =
        std::collections::BTreeMap::new();
    let mut measurements = Vec::new();
    let mut skipped = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        let path = model.map_or_else(|| PathBuf::from(&row.model_filename), Path::to_path_buf);
        let key = path.display().to_string();
        if !models.contains_key(&key) {
            let spec = crate::model::load(&path).map_err(|e| {
                Failure::from(e).hint(
                    "the row names the model llama-bench ran; pass --model PATH if the file moved",
                )
            })?;
            models.insert(key.clone(), spec);
        }
        match crate::calibrate::from_llama_bench(row, &fleet, &models[&key]) {
            Ok(m) => measurements.push(m),
            Err(why) => skipped.push(format!("result {}: {why}", i + 1)),
        }
    }
    let first = &rows[0];
    let finished = rows
        .iter()
        .map(|r| r.test_time.as_str())
        .max()
        .unwrap_or_default()
        .to_string();
    let run = crate::store::ImportRun {
        key: llama_bench_key(&rows),
        same_as_recorded: false,
        run: crate::store::NewRun {
            tool: "llama-bench import".into(),
            runtime: crate::profile::RuntimeId::LlamaCpp,
            runtime_version: Some(first.build_commit.clone()).filter(|c| !c.is_empty()),
            started_at: first.test_time.clone(),
            settings: serde_json::json!({ "file": file.display().to_string() }).to_string(),
            host: host_identity(&inv),
        },
        finished_at: finished,
        measurements,
    };
    import_one(sources, file, run, skipped)
}

/// A llama.cpp load log (`crate::calibrate::load_log`): one `peak_memory_bytes` row per device the log
/// allocated on, valued at the buffers it states (file mappings left out, as the memory model leaves them out of
/// its totals), with the memory model's estimate for the configuration the log resolved (context, batch,
/// micro-batch, sequences, flash attention, KV types, offloaded layers, load mode, repacking) as
/// `estimated_bytes`, so the planner widens that device class's reserve by what the model missed. The estimate
/// leaves out what the log cannot show either: the per-GPU runtime overhead (CUDA context) and, with mmap, the
/// host's mapped weights.
fn import_load_log(
    sources: &Sources,
    file: &Path,
    text: &str,
    model: Option<&Path>,
) -> Result<Imported, Failure> {
    use crate::calibrate::load_log;
    use crate::store::{DeviceIdentity, ModelIdentity, NewMeasurement, NewRun, Shape};
    let invalid = |m: String| {
        Failure::new(
            exit::INVALID_INPUT,
            anyhow::anyhow!("{}: {m}", file.display()),
        )
    };
    let log = load_log::parse(text).map_err(|e| invalid(e.to_string()))?;
    let Some(model) = model else {
        return Err(Failure::new(
            exit::USAGE,
            anyhow::anyhow!("{}: a llama.cpp load log needs --model M, the model it loaded", file.display()),
        )
        .hint("the model's fingerprint keys the measurement, and its tensors are checked against the log"));
    };
    if log.loads > 1 {
        return Err(invalid(format!(
            "{} model loads in one log (a draft model, or several runs); import one load at a time",
            log.loads
        )));
    }
    let (totals, other) = log.totals().map_err(|e| invalid(e.to_string()))?;
    if totals.is_empty() {
        return Err(invalid(
            "no buffer size lines for a device the planner models".into(),
        )
        .hint("run llama-server or llama-cli with -lv 4 (or --verbose) so the loader prints its buffers, and import its stderr"));
    }
    let spec = crate::model::load(model)?;
    log.check_model(&spec).map_err(|e| {
        Failure::new(
            exit::USAGE,
            anyhow::anyhow!("{}: not a load of {}: {e}", file.display(), model.display()),
        )
    })?;
    let params = log.params().map_err(|e| invalid(e.to_string()))?;
    let est = estimate_loaded(
        sources,
        &EstimateRequest {
            model: model.to_path_buf(),
            params: params.clone(),
            hardware: None,
        },
        &spec,
    )?;
    let set = sources.profiles()?;
    let (inv, _) = sources.inventory()?;
    let fleet = crate::fleet::build(&inv, set, crate::profile::RuntimeId::LlamaCpp)
        .map_err(|e| Failure::new(exit::INVALID_INPUT, e))?;
    let mut skipped: Vec<String> = log
        .malformed
        .iter()
        .map(|(n, l)| {
            format!("line {n}: not a buffer or breakdown line as llama.cpp prints them: {l:?}")
        })
        .collect();
    skipped.extend(other.iter().map(|b| {
        format!(
            "line {}: {} buffer: a backend the planner does not model",
            b.line, b.name
        )
    }));
    let mut measurements = Vec::new();
    for t in &totals {
        let device = if t.device == "cpu" {
            Some(DeviceIdentity {
                profile: fleet.host.class_id().to_string(),
                name: inv.cpu.model.clone(),
                uuid: None,
            })
        } else {
            fleet
                .gpus
                .iter()
                .find(|g| g.id.to_string() == t.device)
                .map(|g| DeviceIdentity {
                    profile: g.profile.clone(),
                    name: g.name.clone(),
                    uuid: None,
                })
        };
        let Some(device) = device else {
            skipped.push(format!(
                "{}: the machine described has no such device to record it against (import with --inventory of that machine)",
                t.device
            ));
            continue;
        };
        // What the device can hold at all: the host's memory and swap, a GPU's memory. A log that allocates more
        // is not a load on this machine (or not a real log), and its peak would make every later plan no-fit.
        let holds = if t.device == "cpu" {
            inv.memory
                .host_total_bytes
                .unwrap_or(inv.memory.total_bytes)
                .max(inv.memory.total_bytes)
                .saturating_add(inv.memory.swap_total_bytes.unwrap_or(0))
        } else {
            fleet
                .gpus
                .iter()
                .find(|g| g.id.to_string() == t.device)
                .map_or(u64::MAX, |g| g.memory_total_bytes)
        };
        if t.allocated_bytes > holds {
            let largest = t.buffers.iter().max_by_key(|b| b.bytes);
            return Err(invalid(format!(
                "the log allocates {} bytes on {}, more than the {holds} bytes it has{}: not a load on this machine",
                t.allocated_bytes,
                t.device,
                largest.map_or_else(String::new, |b| format!(
                    " (line {}: {} {:?} buffer of {} bytes)",
                    b.line, b.name, b.kind, b.bytes
                ))
            ))
            .hint("import a load log with --inventory of the machine that wrote it"));
        }
        let e = est.devices.iter().find(|d| d.device == t.device);
        let estimated = e.map(|d| {
            let mapped = if t.device == "cpu" && est.resolved.mmap {
                d.weights_bytes
            } else {
                0
            };
            d.total_bytes
                .saturating_sub(d.overhead_bytes)
                .saturating_sub(mapped)
        });
        let breakdown: Vec<&load_log::BreakdownRow> = log
            .breakdown
            .iter()
            .filter(|r| load_log::device_of(&r.name).as_deref() == Some(t.device.as_str()))
            .collect();
        measurements.push(NewMeasurement {
            device,
            model: Some(ModelIdentity {
                fingerprint: spec.fingerprint.clone(),
                architecture: spec.architecture.clone(),
                tensor_bytes: spec.tensor_bytes(),
            }),
            metric: "peak_memory_bytes".into(),
            value: t.allocated_bytes as f64,
            unit: "bytes".into(),
            shape: Shape {
                context_tokens: Some(params.n_ctx),
                batch: Some(params.n_batch),
                ubatch: Some(params.n_ubatch),
                sequences: Some(params.n_parallel),
                threads: log.threads,
                gpu_layers: Some(est.resolved.n_gpu_layers),
                kv_type: Some(params.type_k.name().to_lowercase()),
                ..Shape::default()
            },
            context: serde_json::json!({
                "source": "llama.cpp load log",
                "device": t.device,
                "buffers": t.buffers,
                "mapped_bytes": t.mapped_bytes,
                "estimated_bytes": estimated,
                "estimate": e,
                "breakdown_mib": breakdown,
                "flash_attn": est.resolved.flash_attn,
                "kv_unified": params.kv_unified,
                "type_v": params.type_v.name().to_lowercase(),
                "mmap": est.resolved.mmap,
                "build_commit": log.build,
            })
            .to_string(),
        });
    }
    if measurements.is_empty() {
        return Err(invalid(format!(
            "no device of the log is one of this machine's: {}",
            skipped.join("; ")
        )));
    }
    let now = now_rfc3339();
    let run = crate::store::ImportRun {
        // The log's bytes: the same log imported again is the same load.
        key: crate::store::import_key("llama.cpp load log", text.as_bytes()),
        same_as_recorded: false,
        run: NewRun {
            tool: "llama.cpp load log".into(),
            runtime: crate::profile::RuntimeId::LlamaCpp,
            runtime_version: log.build.clone(),
            started_at: now.clone(),
            settings: serde_json::json!({ "file": file.display().to_string() }).to_string(),
            host: host_identity(&inv),
        },
        finished_at: now,
        measurements,
    };
    import_one(sources, file, run, skipped)
}

/// Lines of `measurements export`, merged into this store (idempotent: runs already here are skipped).
fn import_export(sources: &Sources, file: &Path, text: &str) -> Result<Imported, Failure> {
    let lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str::<crate::store::Exported>(l).map_err(|e| {
                Failure::new(
                    exit::INVALID_INPUT,
                    anyhow::anyhow!("{}: line {}: {e}", file.display(), i + 1),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    if let Some((i, l)) = lines.iter().enumerate().find(|(_, l)| {
        serde_json::from_value::<crate::profile::RuntimeId>(serde_json::Value::String(
            l.run.runtime.clone(),
        ))
        .is_err()
    }) {
        return Err(Failure::new(
            exit::INVALID_INPUT,
            anyhow::anyhow!(
                "{}: measurement {}: runtime {:?} is not one this build knows",
                file.display(),
                i + 1,
                l.run.runtime
            ),
        ));
    }
    if let Some((i, l)) = lines.iter().enumerate().find(|(_, l)| !l.value.is_finite()) {
        return Err(Failure::new(
            exit::INVALID_INPUT,
            anyhow::anyhow!(
                "{}: measurement {}: {} is not finite",
                file.display(),
                i + 1,
                l.value
            ),
        ));
    }
    let store = sources.store()?;
    let done = store.import(&lines).map_err(store_failure)?;
    Ok(Imported {
        file: file.display().to_string(),
        rows: done.rows,
        skipped: Vec::new(),
        runs: done.written.into_iter().map(|r| r.0).collect(),
        already_imported: done.already.into_iter().map(|r| r.0).collect(),
    })
}
