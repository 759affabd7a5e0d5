//! Hostile input, round 3 (issue 24): what `resolve -o` writes. A bundle (`-o DIR/`) is staged privately and
//! published as a whole, so a link planted in DIR is never written through, a new bundle never mixes with an
//! old one, and a directory holding files optimizer did not write is refused, not emptied; a hard-linked
//! `-o FILE` is refused rather than split from its other names; and exit 3 (nothing fits) writes no `-o`
//! target at all, leaving the plan that fitted in place.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::vllm_models;
use optimizer_testkit::gguf_builder::LlamaShape;

/// The marker every bundle holds (src/cli/bundle.rs).
const MARKER: &str = ".optimizer-bundle";

/// `optimizer --inventory INVENTORY resolve -m MODEL ARGS... -o OUT`.
fn resolve(inventory: &str, model: &Path, args: &[&str], out: &std::ffi::OsStr) -> Output {
    common::bin_on(inventory)
        .args(["resolve", "-m"])
        .arg(model)
        .args(args)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap()
}

/// `DIR/`: the bundle form of `-o`.
fn slash(dir: &Path) -> std::ffi::OsString {
    let mut s = dir.as_os_str().to_owned();
    s.push("/");
    s
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Model A: a GGUF planned for llama.cpp (llama-server, ollama, kubernetes/llama-server.yaml).
fn bundle_a(tmp: &Path, dir: &Path) -> Output {
    let (m, _) = common::synth(tmp, "a.gguf", LlamaShape::LLAMA3_8B);
    resolve("workstation-2x3090.yaml", &m, &["-w", "chat"], &slash(dir))
}

/// Every entry under `dir` without following links: files with their bytes, links with their target.
fn tree(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![PathBuf::new()];
    while let Some(rel) = todo.pop() {
        for e in std::fs::read_dir(dir.join(&rel)).unwrap() {
            let e = e.unwrap();
            let child = rel.join(e.file_name());
            let ft = e.file_type().unwrap();
            let path = dir.join(&child);
            if ft.is_dir() {
                todo.push(child.clone());
                out.insert(child, "<dir>".to_string());
            } else if ft.is_symlink() {
                let to = std::fs::read_link(&path).unwrap();
                out.insert(child, format!("-> {}", to.display()));
            } else {
                out.insert(
                    child,
                    String::from_utf8(std::fs::read(&path).unwrap()).unwrap(),
                );
            }
        }
    }
    out
}

/// Names in `dir`, sorted: a staging or set-aside directory left behind shows here.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Regression guard: the old writer made `DIR/llama-server/` with `create_dir_all` (which follows a link) and
/// wrote `command.sh` through a link planted at `DIR/llama-server`, replacing a file in another directory. The
/// link is now refused (exit 2) naming it; it is neither followed nor removed, and nothing changes anywhere.
#[test]
fn a_symlinked_subdirectory_in_a_bundle_is_never_written_through() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tmp.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("command.sh"), "keep me\n").unwrap();
    let dir = tmp.path().join("bundle");
    common::assert_exit(&bundle_a(tmp.path(), &dir), 0);
    // Planted into an earlier bundle.
    std::fs::remove_dir_all(dir.join("llama-server")).unwrap();
    std::os::unix::fs::symlink(&outside, dir.join("llama-server")).unwrap();
    let before = tree(&dir);
    let o = bundle_a(tmp.path(), &dir);
    let e = stderr(&o);
    common::assert_exit(&o, 2);
    assert!(
        e.contains("llama-server is a symbolic link"),
        "names the link: {e}"
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("command.sh")).unwrap(),
        "keep me\n"
    );
    assert_eq!(names(&outside), vec!["command.sh"]);
    assert_eq!(tree(&dir), before, "the bundle is left as it was");
    assert_eq!(
        names(tmp.path()),
        vec!["a.gguf", "bundle", "outside"],
        "no staging directory left"
    );

    // Planted into a directory with nothing else in it: not a bundle, refused the same way.
    let fresh = tmp.path().join("fresh");
    std::fs::create_dir(&fresh).unwrap();
    std::os::unix::fs::symlink(&outside, fresh.join("llama-server")).unwrap();
    let o = bundle_a(tmp.path(), &fresh);
    common::assert_exit(&o, 2);
    assert!(stderr(&o).contains("llama-server"), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(outside.join("command.sh")).unwrap(),
        "keep me\n"
    );
    assert_eq!(names(&fresh), vec!["llama-server"]);
}

/// `-o LINK/` where LINK points to a directory: refused (exit 2) as a link, not followed into the directory.
#[test]
fn a_bundle_directory_that_is_a_symlink_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let real = tmp.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = tmp.path().join("bundle");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let o = bundle_a(tmp.path(), &link);
    let e = stderr(&o);
    common::assert_exit(&o, 2);
    assert!(e.contains("bundle/: a symbolic link"), "{e}");
    assert!(names(&real).is_empty(), "nothing written through the link");
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

/// Regression guard: the old writer replaced files one by one and removed nothing, so a bundle for model B over
/// one for model A kept A's `llama-server/`, `ollama/` and `kubernetes/llama-server.yaml` beside B's plan. Now
/// the directory holds B's files exactly.
#[test]
fn a_new_bundle_for_another_model_leaves_no_file_of_the_previous_one() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("bundle");
    common::assert_exit(&bundle_a(tmp.path(), &dir), 0);
    assert!(dir.join("ollama/Modelfile").is_file());
    assert!(dir.join("kubernetes/llama-server.yaml").is_file());
    // Model B: a safetensors checkpoint planned for vLLM (vllm/, kubernetes/vllm.yaml).
    let b = vllm_models::materialize("Qwen2.5-7B");
    let o = resolve(
        "cpu-server.yaml",
        b.path(),
        &["-w", "chat", "--hardware", "a100-80gb-sxm"],
        &slash(&dir),
    );
    common::assert_exit(&o, 0);
    let doc: optimizer::emit::Deployment =
        serde_yaml_ng::from_str(&std::fs::read_to_string(dir.join("deploy.yaml")).unwrap())
            .unwrap();
    let mut want: Vec<PathBuf> = vec![PathBuf::from("deploy.yaml"), PathBuf::from(MARKER)];
    for a in &doc.launch {
        want.push(PathBuf::from(&a.name));
        want.extend(a.files.keys().map(|r| Path::new(&a.name).join(r)));
        if a.command.is_some() {
            want.push(Path::new(&a.name).join("command.sh"));
        }
    }
    want.sort();
    want.dedup();
    let got: Vec<PathBuf> = tree(&dir).into_keys().collect();
    assert_eq!(got, want);
    assert!(got.contains(&PathBuf::from("kubernetes/vllm.yaml")));
    assert_eq!(names(tmp.path()), vec!["a.gguf", "bundle"]);
}

/// A directory that is neither empty nor a bundle optimizer wrote is refused (exit 2) naming what is in it, and
/// every file stays; so is an earlier bundle someone added a file to.
#[test]
fn a_non_empty_foreign_directory_is_refused_with_its_files_intact() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("project");
    std::fs::create_dir_all(dir.join("kubernetes")).unwrap();
    std::fs::write(dir.join("deploy.yaml"), "mine\n").unwrap();
    std::fs::write(dir.join("kubernetes/site.yaml"), "also mine\n").unwrap();
    let before = tree(&dir);
    let o = bundle_a(tmp.path(), &dir);
    let e = stderr(&o);
    common::assert_exit(&o, 2);
    assert!(
        e.contains("not a bundle") && e.contains("deploy.yaml"),
        "{e}"
    );
    assert_eq!(tree(&dir), before);

    let bundle = tmp.path().join("bundle");
    common::assert_exit(&bundle_a(tmp.path(), &bundle), 0);
    std::fs::write(bundle.join("ollama/notes.txt"), "my notes\n").unwrap();
    let before = tree(&bundle);
    let o = bundle_a(tmp.path(), &bundle);
    let e = stderr(&o);
    common::assert_exit(&o, 2);
    assert!(e.contains("ollama/notes.txt is not listed"), "{e}");
    assert_eq!(tree(&bundle), before);
    assert_eq!(names(tmp.path()), vec!["a.gguf", "bundle", "project"]);
}

/// Regression guard: the old writer renamed a new file over a hard-linked target, so the other name silently
/// kept the old plan. Now refused (exit 2) naming the path and the link count; both names keep their content.
#[test]
fn a_hard_linked_output_file_is_refused_and_both_links_are_unchanged() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let (m, _) = common::synth(tmp.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    let plan = tmp.path().join("plan.yaml");
    let other = tmp.path().join("deployed.yaml");
    std::fs::write(&plan, "old plan\n").unwrap();
    std::fs::hard_link(&plan, &other).unwrap();
    let o = resolve(
        "workstation-2x3090.yaml",
        &m,
        &["-w", "chat"],
        plan.as_os_str(),
    );
    let e = stderr(&o);
    common::assert_exit(&o, 2);
    assert!(
        e.contains(&plan.display().to_string()) && e.contains("2 hard links"),
        "{e}"
    );
    assert!(e.contains("hint:"), "{e}");
    for p in [&plan, &other] {
        assert_eq!(std::fs::read_to_string(p).unwrap(), "old plan\n");
    }
    let (a, b) = (
        std::fs::metadata(&plan).unwrap(),
        std::fs::metadata(&other).unwrap(),
    );
    assert_eq!((a.ino(), a.nlink()), (b.ino(), 2), "still one file");
}

/// Regression guard: on exit 3 the old code wrote the no-fit document over the `-o` target, replacing a plan
/// that fitted, and created one where there was none. Now no target is written; the document goes to stdout and
/// stderr says nothing was written.
#[test]
fn no_fit_with_o_leaves_the_old_document_and_creates_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (m70, _) = common::synth(tmp.path(), "m70.gguf", LlamaShape::LLAMA3_70B);
    let nofit = |out: &Path, bundle: bool| {
        let target = if bundle {
            slash(out)
        } else {
            out.as_os_str().to_owned()
        };
        let o = resolve("laptop-rtx4060.yaml", &m70, &["--format", "json"], &target);
        common::assert_exit(&o, 3);
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(doc["status"], "no-fit", "the document is on stdout");
        let e = stderr(&o);
        assert!(
            e.contains(&format!("nothing was written to {}", out.display())),
            "{e}"
        );
    };
    // An existing file keeps the plan that fitted, byte for byte.
    let plan = tmp.path().join("plan.json");
    std::fs::write(&plan, "{\"the plan\": \"that fitted\"}\n").unwrap();
    nofit(&plan, false);
    assert_eq!(
        std::fs::read_to_string(&plan).unwrap(),
        "{\"the plan\": \"that fitted\"}\n"
    );
    // A new path is not created.
    let new = tmp.path().join("new.json");
    nofit(&new, false);
    assert!(!new.exists());
    // Nor is a bundle, new or earlier.
    let bundle = tmp.path().join("bundle");
    common::assert_exit(&bundle_a(tmp.path(), &bundle), 0);
    let before = tree(&bundle);
    nofit(&bundle, true);
    assert_eq!(tree(&bundle), before);
    let new_bundle = tmp.path().join("new-bundle");
    nofit(&new_bundle, true);
    assert!(!new_bundle.exists());
    assert_eq!(
        names(tmp.path()),
        vec!["a.gguf", "bundle", "m70.gguf", "plan.json"]
    );
}
