//! The house: the crates follow the layers of docs/architecture.md, and nothing else.
//!
//! The compiler refuses a cycle between crates but would accept an arrow the design forbids (the core reaching
//! the store, say): the table in docs/architecture.md is the design, and the `Cargo.toml` files must say exactly
//! what it says, crate for crate and arrow for arrow. Inside a crate, the top-level modules form no cycle (the
//! core's `plan`, `runtime`, `emit`, ... are modules, not crates).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The workspace's own dependencies of the package whose manifest is `manifest`: the `optimizer-*` keys of its
/// `[dependencies]` table (build and dev dependencies are not arrows between layers).
fn workspace_deps(manifest: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(manifest).expect("manifest");
    let mut section = String::new();
    let mut deps = BTreeSet::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            section = line.to_string();
            continue;
        }
        // `[dependencies]` and `[target.'cfg(..)'.dependencies]`; not `[workspace.dependencies]` (the versions
        // every member may use) nor build or dev dependencies.
        let plain = section == "[dependencies]"
            || (section.starts_with("[target.") && section.ends_with(".dependencies]"));
        let dev_or_build =
            section.contains("dev-dependencies") || section.contains("build-dependencies");
        if plain && !dev_or_build && line.starts_with("optimizer-") {
            let name: String = line
                .chars()
                .take_while(|c| *c != '.' && *c != ' ' && *c != '=')
                .collect();
            deps.insert(name);
        }
    }
    deps
}

fn package_name(manifest: &Path) -> String {
    let text = std::fs::read_to_string(manifest).expect("manifest");
    let mut in_package = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_package = line == "[package]";
        } else if in_package && let Some(rest) = line.strip_prefix("name = ") {
            return rest.trim_matches('"').to_string();
        }
    }
    panic!("{}: no package name", manifest.display())
}

/// The packages of the workspace: name → (directory relative to the root, workspace dependencies).
fn workspace() -> BTreeMap<String, (String, BTreeSet<String>)> {
    let mut out = BTreeMap::new();
    let top = root().join("Cargo.toml");
    out.insert(package_name(&top), (".".to_string(), workspace_deps(&top)));
    let mut dirs: Vec<_> = std::fs::read_dir(root().join("crates"))
        .expect("crates/")
        .map(|e| e.expect("entry").path())
        .collect();
    dirs.sort();
    for d in dirs {
        let manifest = d.join("Cargo.toml");
        let rel = format!("crates/{}", d.file_name().unwrap().to_string_lossy());
        out.insert(package_name(&manifest), (rel, workspace_deps(&manifest)));
    }
    out
}

/// The crate table of docs/architecture.md: name → (directory, crates it may depend on), in row order.
fn documented() -> Vec<(String, String, BTreeSet<String>)> {
    let text =
        std::fs::read_to_string(root().join("docs/architecture.md")).expect("docs/architecture.md");
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in text.lines() {
        if line.starts_with("| crate | directory | depends on |") {
            in_table = true;
            continue;
        }
        if !in_table || line.starts_with("|---") {
            continue;
        }
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let unquote = |c: &str| c.trim_matches('`').to_string();
        let deps = cells[3]
            .split(',')
            .map(str::trim)
            .filter(|c| c.starts_with('`'))
            .map(unquote)
            .collect();
        rows.push((unquote(cells[1]), unquote(cells[2]), deps));
    }
    rows
}

#[test]
fn the_crate_table_in_the_architecture_doc_is_the_workspace() {
    let ws = workspace();
    let doc = documented();
    assert!(
        doc.len() >= 7,
        "the crate table of docs/architecture.md was not found: {doc:?}"
    );
    let doc_names: BTreeSet<&String> = doc.iter().map(|(n, _, _)| n).collect();
    let ws_names: BTreeSet<&String> = ws.keys().collect();
    assert_eq!(
        doc_names, ws_names,
        "crates in docs/architecture.md vs the workspace"
    );
    for (name, dir, deps) in &doc {
        let (ws_dir, ws_deps) = &ws[name];
        assert_eq!(
            dir, ws_dir,
            "{name}: directory in docs/architecture.md vs the workspace"
        );
        assert_eq!(
            deps, ws_deps,
            "{name}: documented arrows vs its Cargo.toml [dependencies]"
        );
    }
}

#[test]
fn every_arrow_points_to_an_earlier_layer() {
    // The table's row order is the layer order: a crate may only depend on crates in rows above it.
    let doc = documented();
    for (i, (name, _, deps)) in doc.iter().enumerate() {
        let below: BTreeSet<&String> = doc[..i].iter().map(|(n, _, _)| n).collect();
        for d in deps {
            assert!(
                below.contains(d),
                "{name} depends on {d}, which is not a lower layer"
            );
        }
    }
}

/// Top-level module of the crate rooted at `src` → modules of the same crate it references.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let modules: BTreeSet<String> = files
        .iter()
        .map(|f| top_module(src, f))
        .filter(|m| m != "lib" && m != "main")
        .collect();
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let module = top_module(src, &f);
        if module == "lib" || module == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&f).expect("read");
        let deps = g.entry(module.clone()).or_default();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or("");
            let mut rest = code;
            while let Some(i) = rest.find("crate::") {
                rest = &rest[i + "crate::".len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if modules.contains(&name) && name != module {
                    deps.insert(name);
                }
            }
        }
    }
    g
}

fn top_module(src: &Path, f: &Path) -> String {
    let rel = f.strip_prefix(src).expect("under src");
    let first = rel.components().next().expect("component");
    first
        .as_os_str()
        .to_string_lossy()
        .trim_end_matches(".rs")
        .to_string()
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("src") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = stack.iter().position(|s| s == n) {
            let mut c = stack[i..].to_vec();
            c.push(n.to_string());
            return Some(c);
        }
        if done.contains(n) {
            return None;
        }
        stack.push(n.to_string());
        for d in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(d, g, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for n in g.keys() {
        if let Some(c) = visit(n, g, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

#[test]
fn the_modules_of_each_crate_form_no_cycle() {
    let core = graph(&root().join("crates/core/src"));
    assert!(
        core.contains_key("plan") && core.contains_key("runtime"),
        "{core:?}"
    );
    for (dir, _) in workspace().into_values() {
        let g = graph(&root().join(&dir).join("src"));
        if let Some(c) = cycle(&g) {
            panic!("module cycle in {dir}: {}", c.join(" -> "));
        }
    }
}

#[test]
fn the_cycle_check_finds_a_planted_cycle() {
    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    g.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(
        cycle(&g).map(|c| c.join(" -> ")),
        Some("a -> b -> c -> a".to_string())
    );
    g.get_mut("c").unwrap().clear();
    assert_eq!(cycle(&g), None);
}

/// Issue 23: no source file of the workspace over 800 lines (src/app.rs had 1,821); a file that grows past it
/// is split by responsibility.
#[test]
fn no_source_file_is_over_800_lines() {
    const MAX_LINES: usize = 800;
    let mut files = Vec::new();
    sources(&root().join("src"), &mut files);
    for (dir, _) in workspace().into_values().filter(|(d, _)| d != ".") {
        sources(&root().join(dir).join("src"), &mut files);
    }
    assert!(files.len() > 100, "{} files", files.len());
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let n = std::fs::read_to_string(f).expect("read").lines().count();
            (n > MAX_LINES).then(|| format!("{}: {n} lines", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "over {MAX_LINES} lines: {long:?}");
}
