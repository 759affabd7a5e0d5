//! Measurements from outside the planner: importers of engine results (today `llama-bench`'s outputs), turned
//! into store rows keyed by device, model and the shape they were taken at. The micro-benchmarks, engine
//! runners and server benchmarking of `optimizer calibrate` come next (issue 10).

pub mod cpu;
pub mod gpu;
pub mod llama_bench;
pub mod load_log;
pub mod runner;
pub mod server;

use llama_bench::BenchRow;
use optimizer_core::fleet::Fleet;
use optimizer_model::ModelSpec;
use optimizer_store::{DeviceIdentity, ModelIdentity, NewMeasurement, Shape};

/// Why a `llama-bench` row is not recorded as a measurement.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BenchRowError {
    /// A test of both a prompt and a generation (`-pg`).
    #[error(
        "a combined test (-p {prompt} -n {generated}) mixes prefill and decode; only pure prompt or generation tests are recorded"
    )]
    Combined { prompt: u64, generated: u64 },
    /// A test at a depth (`-d`) other than 0.
    #[error("a test at depth {depth} (-d) measures a filled KV cache; only depth 0 is recorded")]
    Depth { depth: u64 },
    /// A GPU row on a machine described without a GPU.
    #[error(
        "run on {backends} with -ngl {gpu_layers}, but the machine described has no GPU to record it against"
    )]
    NoGpu { backends: String, gpu_layers: i64 },
    /// A GPU row on a machine of several GPUs: which one ran it is unknown.
    #[error(
        "run on a GPU of a machine with several: the row does not say which; import it with an inventory of that GPU"
    )]
    WhichGpu,
}

/// What a `llama-bench` row becomes: its metric (`prefill_tokens_per_s` for a prompt test,
/// `decode_tokens_per_s` for a generation test) on the device that ran it, or why it is skipped.
pub fn from_llama_bench(
    row: &BenchRow,
    fleet: &Fleet,
    model: &ModelSpec,
) -> Result<NewMeasurement, BenchRowError> {
    let metric = match (row.n_prompt, row.n_gen) {
        (p, 0) if p > 0 => "prefill_tokens_per_s",
        (0, g) if g > 0 => "decode_tokens_per_s",
        (prompt, generated) => return Err(BenchRowError::Combined { prompt, generated }),
    };
    if row.n_depth > 0 {
        return Err(BenchRowError::Depth { depth: row.n_depth });
    }
    let device = if row.on_gpu() {
        let gpus: Vec<_> = fleet.gpus.iter().collect();
        match gpus.as_slice() {
            [one] => DeviceIdentity {
                profile: one.profile.clone(),
                name: one.name.clone(),
                uuid: None,
            },
            [] => {
                return Err(BenchRowError::NoGpu {
                    backends: row.backends.clone(),
                    gpu_layers: row.n_gpu_layers,
                });
            }
            _ => return Err(BenchRowError::WhichGpu),
        }
    } else {
        DeviceIdentity {
            profile: fleet.host.class_id().to_string(),
            name: fleet.host.inventory.cpu.model.clone(),
            uuid: None,
        }
    };
    let gpu_layers = if row.on_gpu() {
        u32::try_from(row.n_gpu_layers).ok()
    } else {
        Some(0)
    };
    Ok(NewMeasurement {
        device,
        model: Some(ModelIdentity {
            fingerprint: model.fingerprint.clone(),
            architecture: model.architecture.clone(),
            tensor_bytes: model.tensor_bytes(),
        }),
        metric: metric.into(),
        value: row.avg_ts,
        unit: "tokens/s".into(),
        shape: Shape {
            batch: Some(row.n_batch),
            ubatch: Some(row.n_ubatch),
            sequences: Some(1),
            threads: Some(row.n_threads),
            gpu_layers,
            kv_type: Some(row.type_k.clone()),
            ..Shape::default()
        },
        context: serde_json::json!({
            "n_prompt": row.n_prompt,
            "n_gen": row.n_gen,
            "flash_attn": row.flash_attn,
            "n_gpu_layers": row.n_gpu_layers,
            "stddev_ts": row.stddev_ts,
            "build_commit": row.build_commit,
            "test_time": row.test_time,
            "backends": row.backends,
        })
        .to_string(),
    })
}
