//! Sets `OPTIMIZER_GIT_COMMIT` for `--version`: the checkout's short commit, the commit `cargo package`
//! recorded for a build from the crate archive, or "unknown" where neither is there (an exported tree, git
//! absent), so every build still succeeds. (The built-in profiles are embedded by `crates/core/build.rs`.)

use std::path::{Path, PathBuf};

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
}
