//! JSON Schemas generated from the Rust types (schemars). The committed copies in `schemas/` are checked
//! current by a test; `optimizer schema NAME` prints one.

use schemars::JsonSchema;
use serde_json::Value;

use super::types::{HardwareProfile, RuleTable, WorkloadProfile};
use crate::hardware::Inventory;

/// Every schema the project publishes: (name, file name under `schemas/`).
pub const NAMES: &[(&str, &str)] = &[
    ("hardware-profile", "hardware-profile.schema.json"),
    ("workload", "workload.schema.json"),
    ("rules", "rules.schema.json"),
    ("inventory", "inventory.schema.json"),
    ("deployment", "deployment.schema.json"),
];

fn generate<T: JsonSchema>() -> Value {
    serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null)
}

/// The schema named `name` (one of [`NAMES`]).
pub fn by_name(name: &str) -> Option<Value> {
    Some(match name {
        "hardware-profile" => generate::<HardwareProfile>(),
        "workload" => generate::<WorkloadProfile>(),
        "rules" => generate::<RuleTable>(),
        "inventory" => generate::<Inventory>(),
        "deployment" => generate::<crate::emit::Deployment>(),
        _ => return None,
    })
}

/// The schema as committed: pretty JSON with a trailing newline.
pub fn render(name: &str) -> Option<String> {
    by_name(name).and_then(|v| serde_json::to_string_pretty(&v).ok().map(|s| s + "\n"))
}
