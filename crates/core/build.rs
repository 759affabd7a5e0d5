//! Embeds every file under `crates/core/profiles/` into the crate, so an installed `optimizer` works anywhere: generates
//! `$OUT_DIR/embedded_profiles.rs` with `(relative path, contents)` pairs in sorted order, and the same files
//! converted to JSON (`EMBEDDED_JSON`, in the same order) so that loading the built-in set at run time is a
//! serde_json deserialization, not a YAML scan plus schema validation. The built-in files are validated when
//! they are built and tested (`tests/it/profiles_validate.rs`, `tests/it/startup_builtin.rs`), not on every run;
//! a built-in file that is not YAML fails the build here, naming the file.

use std::path::{Path, PathBuf};

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().is_some_and(|x| x == "yaml" || x == "yml") {
            out.push(p);
        }
    }
}

/// The file as compact JSON, the way profile validation converts it (YAML value, then JSON value). A file
/// that is not YAML, or that holds a number JSON cannot carry (NaN, infinity), stops the build.
fn to_json(path: &Path, rel: &str) -> String {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("profiles/{rel}: cannot read: {e}"));
    let yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text)
        .unwrap_or_else(|e| panic!("profiles/{rel}: invalid YAML: {e}"));
    if let Some(bad) = non_finite(&yaml) {
        panic!("profiles/{rel}: {bad} is not a finite number");
    }
    serde_json::to_string(&yaml)
        .unwrap_or_else(|e| panic!("profiles/{rel}: not JSON-representable: {e}"))
}

fn non_finite(v: &serde_yaml_ng::Value) -> Option<f64> {
    use serde_yaml_ng::Value as Y;
    match v {
        Y::Number(n) => n.as_f64().filter(|x| !x.is_finite()),
        Y::Mapping(m) => m.values().find_map(non_finite),
        Y::Sequence(items) => items.iter().find_map(non_finite),
        Y::Tagged(t) => non_finite(&t.value),
        _ => None,
    }
}

fn main() {
    let root =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let profiles = root.join("profiles");
    println!("cargo:rerun-if-changed=profiles");
    let mut files = Vec::new();
    collect(&profiles, &mut files);
    files.sort();
    let mut code = String::from(
        "/// Profiles embedded at build time: (path relative to `profiles/`, contents).\npub(crate) static EMBEDDED: &[(&str, &str)] = &[\n",
    );
    let mut json = String::from(
        "/// `EMBEDDED`, each file as JSON (same order), converted from YAML by build.rs.\npub(crate) static EMBEDDED_JSON: &[&str] = &[\n",
    );
    for f in &files {
        // Every directory is watched so an added or removed file triggers a rebuild.
        if let Some(parent) = f.parent() {
            println!("cargo:rerun-if-changed={}", parent.display());
        }
        println!("cargo:rerun-if-changed={}", f.display());
        let rel = f.strip_prefix(&profiles).expect("under profiles/");
        let rel = rel.to_string_lossy().replace('\\', "/");
        code.push_str(&format!(
            "    ({rel:?}, include_str!({:?})),\n",
            f.display().to_string()
        ));
        json.push_str(&format!("    {:?},\n", to_json(f, &rel)));
    }
    code.push_str("];\n");
    json.push_str("];\n");
    code.push_str(&json);
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("embedded_profiles.rs");
    std::fs::write(out, code).expect("write embedded_profiles.rs");
}
