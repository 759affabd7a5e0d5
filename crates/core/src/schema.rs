//! The JSON-schema registry: every schema the project publishes, generated from the Rust types (schemars).
//! The committed copies in `schemas/` are checked current by a test (`tests/it/schemas.rs`); `optimizer schema
//! NAME` prints one.
//!
//! It sits above `profile`, `hardware` and `emit` and imports their types, so none of them imports another
//! to reach a schema: profile validation generates its own schemas ([`crate::profile::json_schema`]), the
//! deployment document's lives with `emit`, and this module only names them. May touch: nothing.

use schemars::JsonSchema;
use serde_json::Value;

use crate::hardware::{Cluster, Inventory};
use crate::profile::ProfileKind;

/// Every schema the project publishes: (name, file name under `schemas/`).
pub const NAMES: &[(&str, &str)] = &[
    ("hardware-profile", "hardware-profile.schema.json"),
    ("workload", "workload.schema.json"),
    ("rules", "rules.schema.json"),
    ("node", "node.schema.json"),
    ("inventory", "inventory.schema.json"),
    ("cluster", "cluster.schema.json"),
    ("deployment", "deployment.schema.json"),
    ("prices", "prices.schema.json"),
];

fn generate<T: JsonSchema>() -> Value {
    serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null)
}

/// The schema named `name` (one of [`NAMES`]).
pub fn by_name(name: &str) -> Option<Value> {
    Some(match name {
        "hardware-profile" => crate::profile::json_schema(ProfileKind::Hardware),
        "workload" => crate::profile::json_schema(ProfileKind::Workload),
        "rules" => crate::profile::json_schema(ProfileKind::Rules),
        "node" => crate::profile::json_schema(ProfileKind::Node),
        "inventory" => generate::<Inventory>(),
        "cluster" => generate::<Cluster>(),
        "deployment" => generate::<crate::emit::Deployment>(),
        "prices" => crate::profile::prices::json_schema(),
        _ => return None,
    })
}

/// The schema as committed: pretty JSON with a trailing newline.
pub fn render(name: &str) -> Option<String> {
    by_name(name).and_then(|v| serde_json::to_string_pretty(&v).ok().map(|s| s + "\n"))
}
