//! `estimate` for vLLM: the machine as `resolve` sees it (probe, `--inventory`, or `--hardware N x:ID` GPUs of a
//! profile), the fleet vLLM plans on, and the core's estimate (`runtime::vllm::estimate`), which uses the memory
//! model the planner uses.

use super::super::*;
use crate::runtime::vllm::estimate::{ServeFlags, VllmEstimate};

/// `estimate` of a safetensors checkpoint for vLLM with `vllm serve`'s flags.
pub fn estimate_vllm(
    sources: &Sources,
    model: &Path,
    hardware: Option<(u32, String)>,
    flags: &ServeFlags,
) -> Result<VllmEstimate, Failure> {
    let spec = crate::model::load(model)?;
    crate::model::safetensors::require_config(model, &spec)?;
    let set = sources.profiles()?;
    let (mut inv, source) = sources.inventory()?;
    if let Some((n, id)) = &hardware {
        let p = &set
            .find_hardware(id)
            .map_err(|e| lookup_failure(e, "hardware"))?
            .value;
        let machine_memory = inv.memory.total_bytes;
        inv.gpus = (0..*n)
            .map(|i| crate::profile::matching::gpu_from_profile(p, i, machine_memory))
            .collect::<Result<_, _>>()
            .map_err(|e| Failure::new(exit::USAGE, anyhow::anyhow!("--hardware {id}: {e}")))?;
    }
    let fleet = crate::fleet::build(&inv, set, RuntimeId::Vllm)
        .map_err(|e| Failure::new(exit::INVALID_INPUT, anyhow::anyhow!("{source}: {}", e.0)))?;
    crate::runtime::vllm::estimate::estimate(&spec, &fleet, flags).map_err(|e| match e {
        PlanError::Model(_) | PlanError::VllmMemory(_) => Failure::new(
            exit::INVALID_INPUT,
            anyhow::anyhow!("{}: {e}", model.display()),
        ),
        PlanError::Hardware(_) | PlanError::Profile(_) => Failure::new(exit::INVALID_INPUT, e),
        _ => Failure::new(exit::USAGE, e),
    })
}
