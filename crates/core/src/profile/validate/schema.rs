//! The JSON Schemas profile files are checked against first: one validator per profile kind, one per kind
//! of rule table, and the guess of a file's kind from its content.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde_json::Value;

use crate::profile::ProfileKind;

/// A profile kind's JSON Schema does not compile: a fault of this crate, reported on the file being checked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("schema {name} does not compile: {message}")]
pub(super) struct SchemaError {
    name: &'static str,
    message: String,
}

pub(super) fn validator(kind: ProfileKind) -> Result<&'static jsonschema::Validator, SchemaError> {
    static HW: OnceLock<Result<jsonschema::Validator, SchemaError>> = OnceLock::new();
    static WL: OnceLock<Result<jsonschema::Validator, SchemaError>> = OnceLock::new();
    static RU: OnceLock<Result<jsonschema::Validator, SchemaError>> = OnceLock::new();
    static NO: OnceLock<Result<jsonschema::Validator, SchemaError>> = OnceLock::new();
    let cell = match kind {
        ProfileKind::Hardware => &HW,
        ProfileKind::Workload => &WL,
        ProfileKind::Rules => &RU,
        ProfileKind::Node => &NO,
    };
    let name = kind.schema_name();
    cell.get_or_init(|| {
        let schema = crate::profile::json_schema(kind);
        jsonschema::validator_for(&schema).map_err(|e| SchemaError {
            name,
            message: e.to_string(),
        })
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// The validator for one kind of rule table: the `rules` schema with its `oneOf` narrowed to the branch whose
/// `kind` is `table_kind`, so an error inside a table is reported at its instance path (`/rules/0/runtime`)
/// rather than as "not valid under any of the schemas listed in the 'oneOf' keyword". `None` for an unknown
/// kind (the full schema reports it).
pub(super) fn rule_table_validator(table_kind: &str) -> Option<&'static jsonschema::Validator> {
    static BY_KIND: OnceLock<BTreeMap<String, jsonschema::Validator>> = OnceLock::new();
    BY_KIND
        .get_or_init(|| {
            let mut out = BTreeMap::new();
            let root = crate::profile::json_schema(ProfileKind::Rules);
            let branches = root
                .get("oneOf")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for branch in branches {
                let Some(kind) = branch
                    .pointer("/properties/kind/const")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                else {
                    continue;
                };
                let mut schema = branch.clone();
                if let (Some(o), Some(defs)) = (schema.as_object_mut(), root.get("$defs")) {
                    o.insert("$defs".into(), defs.clone());
                }
                if let Ok(v) = jsonschema::validator_for(&schema) {
                    out.insert(kind, v);
                }
            }
            out
        })
        .get(table_kind)
}

/// Guesses a file's kind from its content when its directory does not say.
pub(super) fn sniff(v: &Value) -> Option<ProfileKind> {
    let o = v.as_object()?;
    if o.contains_key("rules") && o.contains_key("kind") {
        Some(ProfileKind::Rules)
    } else if o.contains_key("gpus") && o.contains_key("host") {
        Some(ProfileKind::Node)
    } else if o.contains_key("mode") || o.contains_key("objective") {
        Some(ProfileKind::Workload)
    } else if o.contains_key("vendor") || o.contains_key("memory") {
        Some(ProfileKind::Hardware)
    } else {
        None
    }
}
