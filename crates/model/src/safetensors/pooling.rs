//! The sentence-transformers pooling of a checkpoint directory: `modules.json` names a `Pooling` module whose
//! `config.json` says how token states become one vector. Read the way the pinned vLLM reads it
//! (vllm/transformers_utils/config.py `get_pooling_config` and `parse_pooling_type`, 0.33.0), so an embedding
//! plan can say which pooling `vllm serve --runner pooling` will use and pass it explicitly.
//!
//! May touch: `modules.json` and the pooling module's `config.json` in the model directory, bounded reads of
//! regular files only. A module path that leaves the directory is refused rather than followed.

use std::path::{Component, Path};

use serde_json::Value;

use super::super::source::read_bounded;
use super::{Defect, ModelError};

/// The file sentence-transformers writes beside a checkpoint listing its modules.
pub const MODULES_FILE: &str = "modules.json";
/// The metadata key the reader records the pooling under (`MEAN`, `CLS`, `LAST`, vLLM's spelling), for a
/// safetensors checkpoint whose `modules.json` names a pooling module. Not a safetensors `__metadata__` key.
pub const POOLING_KEY: &str = "sentence_transformers.pooling";
/// `modules.json` and a module's `config.json` are a few hundred bytes; 64 KiB bounds them generously.
const MAX_ST_CONFIG_BYTES: u64 = 64 << 10;
/// Module types vLLM takes as the pooling module (`_ST_POOLING_MODULE_TYPES`).
const POOLING_MODULE_TYPES: [&str; 2] = [
    "sentence_transformers.models.Pooling",
    "sentence_transformers.sentence_transformer.modules.pooling.Pooling",
];
/// Sequence pooling types vLLM accepts (vllm/config/pooler.py `SequencePoolingType`); token-wise types (`ALL`,
/// `STEP`) are not an embedding's.
const SEQ_POOLING_TYPES: [&str; 3] = ["CLS", "LAST", "MEAN"];

fn defect(path: &Path, msg: String) -> ModelError {
    ModelError::model(path, Defect::Config(msg))
}

fn parse_json(path: &Path) -> Result<Value, ModelError> {
    let bytes = read_bounded(
        path,
        MAX_ST_CONFIG_BYTES,
        "sentence-transformers config bytes",
    )?;
    serde_json::from_slice(&bytes).map_err(|e| defect(path, format!("invalid JSON: {e}")))
}

/// vLLM's `parse_pooling_type`: drop `pooling_mode_`, keep what precedes the first `_`, `lasttoken` is `last`,
/// upper case.
fn parse_pooling_type(name: &str) -> String {
    let name = name.replace("pooling_mode_", "");
    let name = name.split('_').next().unwrap_or("");
    let name = if name.contains("lasttoken") {
        "last"
    } else {
        name
    };
    name.to_ascii_uppercase()
}

/// The sequence pooling the checkpoint's sentence-transformers configuration declares, as vLLM reads it: the
/// first pooling module of `modules.json`, then in its `config.json` a string `pooling_mode` or each key set to
/// `true`, the last sequence type named winning (vLLM overwrites in file order, this reader in key order; real
/// configurations set one mode). `None` when there is no
/// `modules.json`, no pooling module, or no sequence type (vLLM then uses the architecture's default).
pub(crate) fn read_pooling(dir: &Path) -> Result<Option<&'static str>, ModelError> {
    let modules_path = dir.join(MODULES_FILE);
    if !modules_path.exists() {
        return Ok(None);
    }
    let modules = parse_json(&modules_path)?;
    let Value::Array(items) = modules else {
        return Err(defect(
            &modules_path,
            "sentence-transformers modules must be a JSON array of modules".into(),
        ));
    };
    let pooling = items.iter().find(|m| {
        m.get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| POOLING_MODULE_TYPES.contains(&t))
    });
    let Some(module) = pooling else {
        return Ok(None);
    };
    let Some(rel) = module.get("path").and_then(Value::as_str) else {
        return Err(defect(
            &modules_path,
            "the pooling module has no \"path\" string".into(),
        ));
    };
    let rel_path = Path::new(rel);
    if rel.is_empty()
        || !rel_path
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
    {
        return Err(defect(
            &modules_path,
            format!("the pooling module's path {rel:?} leaves the model directory"),
        ));
    }
    let config_path = dir.join(rel_path).join("config.json");
    if !config_path.exists() {
        // vLLM reads a missing file as `{}`: no pooling declared.
        return Ok(None);
    }
    let Value::Object(config) = parse_json(&config_path)? else {
        return Err(defect(
            &config_path,
            "a pooling configuration must be a JSON object".into(),
        ));
    };
    let mut found = None;
    for (key, value) in &config {
        let name = match value {
            Value::String(s) if key == "pooling_mode" => s.as_str(),
            Value::Bool(true) => key.as_str(),
            _ => continue,
        };
        let ty = parse_pooling_type(name);
        if let Some(t) = SEQ_POOLING_TYPES.iter().find(|t| **t == ty) {
            found = Some(*t);
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooling_names_parse_as_vllm_parses_them() {
        for (name, want) in [
            ("pooling_mode_mean_tokens", "MEAN"),
            ("pooling_mode_cls_token", "CLS"),
            ("pooling_mode_lasttoken", "LAST"),
            ("pooling_mode_max_tokens", "MAX"),
            ("mean", "MEAN"),
            ("lasttoken", "LAST"),
        ] {
            assert_eq!(parse_pooling_type(name), want, "{name}");
        }
    }
}
