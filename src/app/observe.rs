//! `observe`: what a planned deployment really did (its speed, a memory peak, an out-of-memory), recorded against
//! the plan it came from.

use super::*;

/// What a deployment really did, as `observe` records it.
#[derive(Debug, Clone, PartialEq)]
pub enum Observation {
    /// Decode tokens per second over all its sequences.
    TokensPerS(f64),
    /// The most memory the engine took on one of its devices.
    PeakMemory { device: String, bytes: u64 },
    /// It ran out of memory on one of its devices.
    OutOfMemory { device: String },
}

/// Largest deployment document `observe` reads.
pub const MAX_DEPLOYMENT_BYTES: u64 = 16 << 20;

/// A deployment document `optimizer resolve` wrote, read for `observe` and `bench`: they record what the
/// deployment did against its device, model and configuration.
pub(super) struct Planned {
    pub(super) path: PathBuf,
    pub(super) doc: Deployment,
    pub(super) settings: crate::emit::LlamaCppSettings,
}

impl Planned {
    pub(super) fn read(path: &Path) -> Result<Planned, Failure> {
        let text = read_input(path, MAX_DEPLOYMENT_BYTES, "deployment")?;
        let doc: Deployment = crate::yaml::from_str(&text).map_err(|e| {
            Failure::new(
                exit::INVALID_INPUT,
                anyhow::anyhow!(
                    "{}: not an {} deployment document: {e}",
                    path.display(),
                    crate::emit::API_VERSION
                ),
            )
            .hint("this reads the document `optimizer resolve` wrote for the deployment")
        })?;
        let Some(settings) = doc.settings.llama_cpp().cloned() else {
            return Err(Failure::new(
                exit::USAGE,
                anyhow::anyhow!("{}: not a llama.cpp plan", path.display()),
            ));
        };
        Ok(Planned {
            path: path.to_path_buf(),
            doc,
            settings,
        })
    }

    pub(super) fn usage(&self, m: String) -> Failure {
        Failure::new(exit::USAGE, anyhow::anyhow!("{}: {m}", self.path.display()))
    }

    /// The store's identity of a device the plan uses (`cpu`, `cuda:0`).
    pub(super) fn device(&self, device: &str) -> Result<crate::store::DeviceIdentity, Failure> {
        let d = &self.doc;
        let found = if device == "cpu" {
            Some((d.hardware.cpu.profile.clone(), d.hardware.cpu.model.clone()))
        } else {
            d.hardware
                .gpus
                .iter()
                .find(|g| g.device == device && g.used)
                .map(|g| (g.profile.clone(), g.name.clone()))
        };
        let (profile, name) = found.ok_or_else(|| {
            self.usage(format!("{device}: the deployment does not use this device"))
        })?;
        Ok(crate::store::DeviceIdentity {
            profile,
            name,
            uuid: None,
        })
    }

    /// The device a throughput of the whole deployment is recorded against: the CPU, or its one GPU.
    pub(super) fn throughput_device(&self) -> Result<String, Failure> {
        let used: Vec<&str> = self
            .doc
            .hardware
            .gpus
            .iter()
            .filter(|g| g.used)
            .map(|g| g.device.as_str())
            .collect();
        match used.as_slice() {
            [] => Ok("cpu".to_string()),
            [one] => Ok(one.to_string()),
            many => Err(self.usage(format!(
                "the deployment uses {} GPUs ({}); a throughput is recorded against one device",
                many.len(),
                many.join(", ")
            ))),
        }
    }

    /// What bounds a token rate on `device` (`cpu`, `cuda:0`) for this model (see `optimizer_core::plausible`): the
    /// device's profile gives its peaks (none when the profile is not in force: nothing to bound by), the model file
    /// (when it is still there and still the planned one) what a token costs; without it, the document's totals at
    /// the sparsest expert share. `None` for a device the document does not have. Reads the model's header: take
    /// it once per command.
    pub(super) fn rate_bounds(
        &self,
        sources: &Sources,
        device: &str,
    ) -> Option<(
        optimizer_core::plausible::Peaks,
        optimizer_core::plausible::Work,
    )> {
        use optimizer_core::plausible;
        let d = &self.doc;
        let (profile, cores) = if device == "cpu" {
            (
                d.hardware.cpu.profile.as_str(),
                d.hardware.cpu.physical_cores,
            )
        } else {
            let g = d.hardware.gpus.iter().find(|g| g.device == device)?;
            (g.profile.as_str(), 0)
        };
        let peaks = match sources
            .profiles()
            .ok()
            .and_then(|set| set.hardware(profile))
        {
            Some(e) => plausible::profile_peaks(&e.value, cores),
            None => plausible::Peaks::default(),
        };
        let work = crate::model::load(Path::new(&d.model.path))
            .ok()
            .filter(|m| m.fingerprint == d.model.fingerprint)
            .map_or_else(
                || {
                    plausible::Work::of_totals(
                        d.model.tensor_bytes,
                        d.model.parameter_count,
                        plausible::MIN_ACTIVE_SHARE,
                    )
                },
                |m| plausible::Work::of_model(&m),
            );
        Some((peaks, work))
    }

    /// Memory of `device` as the document records it (the machine's RAM for `cpu`).
    pub(super) fn device_memory(&self, device: &str) -> u64 {
        let d = &self.doc;
        if device == "cpu" {
            return d.hardware.memory_total_bytes;
        }
        d.hardware
            .gpus
            .iter()
            .find(|g| g.device == device)
            .map_or(0, |g| g.memory_total_bytes)
    }

    pub(super) fn model(&self) -> crate::store::ModelIdentity {
        crate::store::ModelIdentity {
            fingerprint: self.doc.model.fingerprint.clone(),
            architecture: self.doc.model.architecture.clone(),
            tensor_bytes: self.doc.model.tensor_bytes,
        }
    }

    /// The configuration it runs, as the store's shape columns.
    pub(super) fn shape(&self) -> crate::store::Shape {
        let s = &self.settings;
        crate::store::Shape {
            context_tokens: Some(s.context_length),
            batch: Some(s.batch_size),
            ubatch: Some(s.ubatch_size),
            sequences: Some(s.parallel),
            threads: Some(s.threads),
            gpu_layers: Some(s.gpu_layers),
            kv_type: Some(s.cache_type_k.clone()),
            ..crate::store::Shape::default()
        }
    }

    /// A run of `tool` against the deployment's host and runtime, started now.
    pub(super) fn run(&self, tool: &str) -> crate::store::NewRun {
        let d = &self.doc;
        crate::store::NewRun {
            tool: tool.into(),
            runtime: d.runtime.id,
            runtime_version: Some(d.runtime.version.clone()),
            started_at: now_rfc3339(),
            settings: serde_json::to_string(&d.settings).unwrap_or_default(),
            host: crate::store::HostIdentity {
                cpu_model: d.hardware.cpu.model.clone(),
                physical_cores: d.hardware.cpu.physical_cores,
                memory_total_bytes: d.hardware.memory_total_bytes,
                hostname: String::new(),
            },
        }
    }
}

/// `observe`: records what a planned deployment really did against its device and model, in the shape it ran
/// at, so the next `resolve` for that device and model uses it: a decode rate as a measured throughput, a peak
/// above the estimate (or an out-of-memory, recorded as needing more than the device had) as extra reserve.
pub fn observe(
    sources: &Sources,
    deployment: &Path,
    what: &Observation,
) -> Result<Vec<i64>, Failure> {
    use crate::store::NewMeasurement;
    let planned = Planned::read(deployment)?;
    let d = &planned.doc;
    let (device, metric, value, context) = match what {
        Observation::TokensPerS(x) => {
            if !(x.is_finite() && *x > 0.0) {
                return Err(planned.usage(format!("--tokens-per-s {x}: a positive number")));
            }
            let device = planned.throughput_device()?;
            let sequences = u64::from(planned.settings.parallel.max(1));
            planned
                .rate_bounds(sources, &device)
                .map_or(Ok(()), |(peaks, work)| {
                    optimizer_core::plausible::check_tokens_per_s(
                        *x,
                        crate::profile::Phase::Decode,
                        peaks,
                        work,
                        sequences,
                    )
                })
                .map_err(|why| {
                    Failure::new(
                        exit::INVALID_INPUT,
                        anyhow::anyhow!("--tokens-per-s: {why}; not recorded"),
                    )
                    .hint("give the decode rate over all sequences, in tokens per second, as the engine reported it")
                })?;
            (device, "decode_tokens_per_s", *x, serde_json::json!({}))
        }
        Observation::PeakMemory { device, .. } | Observation::OutOfMemory { device }
            if !d.memory.devices.iter().any(|m| &m.device == device) =>
        {
            return Err(planned.usage(format!(
                "--device {device}: the deployment has memory on {}",
                d.memory
                    .devices
                    .iter()
                    .map(|m| m.device.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        Observation::PeakMemory { device, bytes } => {
            optimizer_core::plausible::check_peak_bytes(*bytes, planned.device_memory(device))
                .map_err(|why| {
                    Failure::new(
                        exit::INVALID_INPUT,
                        anyhow::anyhow!("--peak-memory-bytes on {device}: {why}; not recorded"),
                    )
                    .hint("give the most memory the engine took on that device, in bytes")
                })?;
            let m = d.memory.devices.iter().find(|m| &m.device == device);
            let estimated = m.map_or(0, |m| m.total_bytes);
            (
                device.clone(),
                "peak_memory_bytes",
                *bytes as f64,
                serde_json::json!({ "device": device, "estimated_bytes": estimated }),
            )
        }
        Observation::OutOfMemory { device } => {
            let m = d.memory.devices.iter().find(|m| &m.device == device);
            let (estimated, capacity) = m.map_or((0, 0), |m| (m.total_bytes, m.capacity_bytes));
            // It needed more than the device had free: a lower bound of the peak.
            (
                device.clone(),
                "peak_memory_bytes",
                capacity.saturating_add(1) as f64,
                serde_json::json!({ "device": device, "estimated_bytes": estimated, "oom": true }),
            )
        }
    };
    let device = planned.device(&device)?;
    let store = sources.store()?;
    let new_run = planned.run("observe");
    let run = store.begin_run(&new_run).map_err(store_failure)?;
    let row = store
        .record(
            run,
            &NewMeasurement {
                device,
                model: Some(planned.model()),
                metric: metric.into(),
                value,
                unit: if metric == "peak_memory_bytes" {
                    "bytes"
                } else {
                    "tokens/s"
                }
                .into(),
                shape: planned.shape(),
                context: context.to_string(),
            },
        )
        .map_err(store_failure)?;
    store
        .finish_run(run, &new_run.started_at)
        .map_err(store_failure)?;
    Ok(vec![row])
}
