//! The house has no cycle: arrows between the top-level modules of `src/` run one way (ARCHITECTURE.md). Reads
//! every source file, collects `crate::MODULE` references (code, not comments) per top-level module, and fails
//! naming the cycle when the graph has one, or naming the module when a pure-core module reaches an edge.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

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

/// Top-level module → modules it references.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(&src).expect("under src");
        let first = rel.components().next().expect("component");
        let module = first
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
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
                if !name.is_empty() && name != module {
                    deps.insert(name);
                }
            }
        }
    }
    g
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
fn top_level_modules_form_no_cycle() {
    let g = graph();
    assert!(g.contains_key("plan") && g.contains_key("runtime"), "{g:?}");
    if let Some(c) = cycle(&g) {
        panic!("module cycle: {}", c.join(" -> "));
    }
}

#[test]
fn the_pure_core_reaches_no_edge() {
    // The core takes values: it must not reach the CLI, the pipelines, the store or the probes' entry points.
    let g = graph();
    let edges = ["cli", "app", "store"];
    for core in [
        "model", "memory", "perf", "fleet", "runtime", "plan", "emit", "evidence",
    ] {
        for e in edges {
            assert!(
                !g.get(core).is_some_and(|d| d.contains(e)),
                "{core} references the edge module {e}"
            );
        }
    }
    assert!(
        !g.get("store").is_some_and(|d| d.contains("plan")),
        "store references plan: the store returns Evidence, a core type"
    );
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
