//! Embeds every file under `profiles/` into the binary, so an installed `optimizer` works anywhere: generates
//! `$OUT_DIR/embedded_profiles.rs` with `(relative path, contents)` pairs in sorted order.

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

fn main() {
    let root =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let profiles = root.join("profiles");
    println!("cargo:rerun-if-changed=profiles");
    let mut files = Vec::new();
    collect(&profiles, &mut files);
    files.sort();
    let mut code = String::from(
        "/// Profiles embedded at build time: (path relative to `profiles/`, contents).\npub static EMBEDDED: &[(&str, &str)] = &[\n",
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
    }
    code.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("embedded_profiles.rs");
    std::fs::write(out, code).expect("write embedded_profiles.rs");
}
