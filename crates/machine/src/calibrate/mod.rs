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

/// What a `llama-bench` row becomes: its metric (`prefill_tokens_per_s` for a prompt test,
/// `decode_tokens_per_s` for a generation test) on the device that ran it, or why it is skipped.
pub fn from_llama_bench(
    row: &BenchRow,
    fleet: &Fleet,
    model: &ModelSpec,
) -> Result<NewMeasurement, String> {
    let metric = match (row.n_prompt, row.n_gen) {
        (p, 0) if p > 0 => "prefill_tokens_per_s",
        (0, g) if g > 0 => "decode_tokens_per_s",
        (p, g) => {
            return Err(format!(
                "a combined test (-p {p} -n {g}) mixes prefill and decode; only pure prompt or generation tests are recorded"
            ));
        }
    };
    if row.n_depth > 0 {
        return Err(format!(
            "a test at depth {} (-d) measures a filled KV cache; only depth 0 is recorded",
            row.n_depth
        ));
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
                return Err(format!(
                    "run on {} with -ngl {}, but the machine described has no GPU to record it against",
                    row.backends, row.n_gpu_layers
                ));
            }
            _ => {
                return Err(
                    "run on a GPU of a machine with several: the row does not say which; import it with an inventory of that GPU"
                        .into(),
                );
            }
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
