//! Embeds every file under `profiles/` into the binary, so an installed `optimizer` works anywhere: generates
//! `$OUT_DIR/embedded_profiles.rs` with `(relative path, contents)` pairs in sorted order, and the same files
//! converted to JSON (`EMBEDDED_JSON`, in the same order) so that loading the built-in set at run time is a
//! serde_json deserialization, not a YAML scan plus schema validation. The built-in files are validated when
//! they are built and tested (`tests/profiles_validate.rs`, `tests/startup_builtin.rs`), not on every run; a
//! built-in file that is not YAML fails the build here, naming the file.
//!
//! It also sets `OPTIMIZER_GIT_COMMIT` for `--version`: the checkout's short commit, the commit `cargo package`
//! recorded for a build from the crate archive, or "unknown" where neither is there (an exported tree, git
//! absent), so every build still succeeds.

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

/// The longest object name git prints (a SHA-256 repository's, in hex); anything longer is not a commit.
const MAX_COMMIT_CHARS: usize = 64;

/// The commit the binary is built from, for `--version`: `git rev-parse --short HEAD` of this checkout; for a
/// crate built from its `cargo package` tarball (`cargo install optimizer-cli`), the commit cargo recorded in
/// `.cargo_vcs_info.json` (`git.sha1`), shortened the same way and marked `-dirty` when cargo packed
/// uncommitted changes (`git.dirty`); "unknown" when neither is there (an exported
/// tree, which may sit inside some other repository) or git is missing or fails. Asks cargo to rebuild when
/// HEAD moves.
fn git_commit(root: &Path) -> String {
    if !root.join(".git").exists() {
        return packaged_commit(root).unwrap_or_else(|| "unknown".to_string());
    }
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(root)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    // HEAD, the branch it names and the packed refs; a worktree's `.git` is a file naming its git directory,
    // so the paths come from git. A path that does not exist is not watched (cargo would rerun every build).
    let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for w in &watched {
        if let Some(p) = git(&["rev-parse", "--git-path", w]) {
            let p = root.join(p);
            if p.exists() {
                println!("cargo:rerun-if-changed={}", p.display());
            }
        }
    }
    git(&["rev-parse", "--short", "HEAD"])
        .filter(|h| h.len() <= MAX_COMMIT_CHARS && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .unwrap_or_else(|| "unknown".to_string())
}

/// The length `git rev-parse --short` gives in a repository of this size.
const SHORT_COMMIT_CHARS: usize = 7;

/// `git.sha1` of `.cargo_vcs_info.json`, which `cargo package` writes into the crate it packs.
fn packaged_commit(root: &Path) -> Option<String> {
    let path = root.join(".cargo_vcs_info.json");
    let text = std::fs::read_to_string(&path).ok()?;
    println!("cargo:rerun-if-changed={}", path.display());
    let info: serde_json::Value = serde_json::from_str(&text).ok()?;
    let sha = info["git"]["sha1"].as_str()?;
    let dirty = info["git"]["dirty"].as_bool() == Some(true);
    (!sha.is_empty() && sha.len() <= MAX_COMMIT_CHARS && sha.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| {
            format!(
                "{}{}",
                &sha[..sha.len().min(SHORT_COMMIT_CHARS)],
                if dirty { "-dirty" } else { "" }
            )
        })
}

fn main() {
    let root =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    println!("cargo:rustc-env=OPTIMIZER_GIT_COMMIT={}", git_commit(&root));
    let profiles = root.join("profiles");
    println!("cargo:rerun-if-changed=profiles");
    let mut files = Vec::new();
    collect(&profiles, &mut files);
    files.sort();
    let mut code = String::from(
        "/// Profiles embedded at build time: (path relative to `profiles/`, contents).\npub static EMBEDDED: &[(&str, &str)] = &[\n",
    );
    let mut json = String::from(
        "/// `EMBEDDED`, each file as JSON (same order), converted from YAML by build.rs.\npub static EMBEDDED_JSON: &[&str] = &[\n",
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
