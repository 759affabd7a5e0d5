//! The committed JSON Schemas in `schemas/` must equal what the Rust types generate. After changing a type,
//! regenerate them with `OPTIMIZER_UPDATE_SCHEMAS=1 cargo test --test schemas` and commit the result.

mod common;
use common::{bin, root};

use optimizer::schema::{NAMES, render};

#[test]
fn committed_schemas_are_current() {
    let dir = root().join("schemas");
    let update = std::env::var_os("OPTIMIZER_UPDATE_SCHEMAS").is_some();
    let mut stale = Vec::new();
    for (name, file) in NAMES {
        let generated = render(name).expect("schema renders");
        let path = dir.join(file);
        if update {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &generated).unwrap();
            continue;
        }
        match std::fs::read_to_string(&path) {
            Ok(committed) if committed == generated => {}
            _ => stale.push(file.to_string()),
        }
    }
    assert!(
        stale.is_empty(),
        "stale or missing schemas {stale:?}: run `OPTIMIZER_UPDATE_SCHEMAS=1 cargo test --test schemas`"
    );
}

#[test]
fn schema_command_prints_each_schema() {
    for (name, _) in NAMES {
        let out = bin().args(["schema", name]).output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(v.get("$schema").is_some(), "{name}");
    }
    let out = bin().args(["schema", "nope"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("hardware-profile"));
}
