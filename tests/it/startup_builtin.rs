//! The built-in profiles are validated here, when they are built and tested, instead of on every run: a run
//! deserializes the JSON that build.rs converted them to (`profile::builtin_set`). These tests make that
//! shortcut safe: the fast set must equal the set full validation produces, and user overlays are still
//! validated at load with the file and the defect named (exit 4).

use std::process::Command;

use optimizer::profile::{self, validate::validate_files};

/// Every embedded file passes schema and semantic validation; a failure names the file and the defect.
#[test]
fn every_embedded_profile_is_valid() {
    let files = profile::builtin_files();
    let (_, diags) = validate_files(&files, true);
    let report: Vec<String> = diags.iter().map(|d| d.to_string()).collect();
    assert!(
        report.is_empty(),
        "built-in profiles that fail validation:\n{}",
        report.join("\n")
    );
}

/// The set a run loads without validating is the set validation accepts, entry for entry (values, origins,
/// order): build.rs's YAML-to-JSON conversion loses nothing.
#[test]
fn the_unvalidated_builtin_set_equals_the_validated_one() {
    let (validated, diags) = validate_files(&profile::builtin_files(), true);
    assert!(diags.is_empty());
    let fast = profile::builtin_set().expect("built-in set deserializes");
    assert_eq!(fast.hardware.len(), validated.hardware.len());
    assert_eq!(fast.workloads.len(), validated.workloads.len());
    assert_eq!(fast.rules.len(), validated.rules.len());
    assert_eq!(format!("{fast:?}"), format!("{validated:?}"));
    // And `load` without overlays is that set.
    let loaded = profile::load(&[]).expect("loads");
    assert_eq!(format!("{loaded:?}"), format!("{validated:?}"));
}

/// A user overlay is still validated at load: a schema error in a `--profiles` file exits 4 naming the file
/// and the field, and nothing is printed on stdout.
#[test]
fn an_invalid_overlay_still_fails_at_load_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let workloads = dir.path().join("workloads");
    std::fs::create_dir_all(&workloads).unwrap();
    let file = workloads.join("chat.yaml");
    let chat = profile::builtin_files()
        .into_iter()
        .find(|f| f.origin.path == "builtin:workloads/chat.yaml")
        .expect("built-in chat workload");
    std::fs::write(&file, format!("{}colour: red\n", chat.text)).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_optimizer"))
        .arg("--profiles")
        .arg(dir.path())
        .args(["profiles", "list"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(4));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&file.display().to_string()) && err.contains("colour"),
        "{err}"
    );
    assert!(o.stdout.is_empty());
}

/// An empty overlay directory leaves the built-in set as it is.
#[test]
fn an_empty_overlay_directory_loads_the_builtin_set() {
    let dir = tempfile::tempdir().unwrap();
    let loaded = profile::load(&[dir.path().to_path_buf()]).expect("loads");
    let builtin = profile::builtin_set().expect("built-in");
    assert_eq!(format!("{loaded:?}"), format!("{builtin:?}"));
}
