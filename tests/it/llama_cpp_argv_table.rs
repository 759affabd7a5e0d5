//! Every `launch.llama_server.argv` the planner emits is one the pinned llama-server accepts and means as
//! written, checked without the engine against its own argument table: tests/fixtures/llama-cpp/
//! llama-server-args.json, generated from the pinned source (`common/arg.cpp` at llama.cpp 0c1e570) by
//! tests/fixtures/llama-cpp/server_args.py and cross-checked there against the built `llama-server --help`.
//!
//! The checker follows `common_params_parse_ex`: argv[0] is the program, every other element is a flag of the
//! table (no positional arguments) or the value of the flag before it; a flag takes a value iff the table says
//! so; the value must parse as its handler parses it. It is stricter than the engine where the engine would
//! accept a spelling that means something other than what is written, because a plan must mean what it says:
//! a flag given twice (llama-server warns and keeps only the last), an integer that `std::stoi` reads only in
//! part (`8k` is 8), a `-ts` proportion that is NaN, infinite, negative or all zero (issue 8).
//!
//! Coverage: every built-in workload preset × every fixture inventory × every fixture GGUF (library), and
//! `--hardware` variants through the CLI, whose YAML must also read back unchanged in a YAML 1.1 reader
//! (PyYAML, Kubernetes tooling: `- on` would come back as `True`, and `llama-server -fa True` fails).

use crate::common;
use common::{bin, fixture, profiles, root};

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use optimizer::evidence::Evidence;
use optimizer::hardware;
use optimizer::model;
use optimizer::plan::Overrides;
use serde::Deserialize;

// ------------------------------------------------------------------ the engine's argument table

#[derive(Debug, Deserialize)]
pub(crate) struct Table {
    program: String,
    engine: Engine,
    parser: ParserRules,
    kv_cache_types: Vec<String>,
    options: Vec<Opt>,
}

#[derive(Debug, Deserialize)]
struct Engine {
    llama_cpp_commit: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ParserRules {
    underscore_to_dash_in_long_flags: bool,
    repeatable: Vec<String>,
    positional_arguments: bool,
}

#[derive(Debug, Deserialize)]
struct Opt {
    flags: Vec<String>,
    #[serde(default)]
    negated: Vec<String>,
    /// How many argv elements after the flag it consumes (0, 1 or 2).
    values: usize,
    value: Option<ValueSpec>,
    /// The environment variable the option is also read from (`common_arg::set_env`).
    env: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Reject {
    op: String,
    value: i64,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum ValueSpec {
    Int {
        #[serde(default)]
        rejects: Vec<Reject>,
        unmodelled_checks: bool,
    },
    Enum {
        values: Vec<String>,
    },
    IntOrEnum {
        values: Vec<String>,
    },
    FloatOrEnum {
        values: Vec<String>,
    },
    Float,
    FloatList {
        separators: String,
        max_items_exclusive: usize,
    },
    DeviceList {
        none: String,
        separator: String,
        device_name_prefixes: Vec<String>,
    },
    String {
        unmodelled_checks: bool,
    },
}

pub(crate) fn table() -> Table {
    let path = fixture("llama-cpp/llama-server-args.json");
    let text = std::fs::read_to_string(&path).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One spelling's option and whether it is the negated (`--no-…`) spelling.
fn spellings(t: &Table) -> HashMap<&str, usize> {
    let mut m = HashMap::new();
    for (i, o) in t.options.iter().enumerate() {
        for f in o.flags.iter().chain(&o.negated) {
            m.insert(f.as_str(), i);
        }
    }
    m
}

// ------------------------------------------------------------------ the checker

/// Whether `s` is an integer `std::stoi` reads whole and as written: optional `-`, decimal digits, no
/// leading zeros, within `i32`.
fn parse_int(s: &str) -> Result<i64, String> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{s:?} is not a decimal integer"));
    }
    if digits.len() > 1 && digits.starts_with('0') {
        return Err(format!("{s:?} has leading zeros"));
    }
    let v: i64 = s.parse().map_err(|_| format!("{s:?} is out of range"))?;
    if i32::try_from(v).is_err() {
        return Err(format!("{s:?} is outside std::stoi's 32-bit range"));
    }
    Ok(v)
}

/// A finite decimal number `std::stof` reads whole.
fn parse_float(s: &str) -> Result<f64, String> {
    let ok_chars = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'+' | b'e' | b'E'));
    match s.parse::<f64>() {
        Ok(v) if ok_chars && v.is_finite() && (v as f32).is_finite() => Ok(v),
        _ => Err(format!("{s:?} is not a finite decimal number")),
    }
}

fn check_value(flag: &str, spec: &ValueSpec, v: &str) -> Result<(), String> {
    let listed = |values: &[String]| values.iter().any(|x| x == v);
    match spec {
        ValueSpec::Int {
            rejects,
            unmodelled_checks,
        } => {
            if *unmodelled_checks {
                return Err(format!(
                    "{flag}: the table cannot verify its values (the handler has checks server_args.py does not model)"
                ));
            }
            let n = parse_int(v)?;
            for r in rejects {
                let hit = match r.op.as_str() {
                    "<" => n < r.value,
                    "<=" => n <= r.value,
                    "==" => n == r.value,
                    ">=" => n >= r.value,
                    ">" => n > r.value,
                    op => return Err(format!("{flag}: unknown comparison {op:?} in the table")),
                };
                if hit {
                    return Err(format!(
                        "{v} is refused by the engine (value {} {})",
                        r.op, r.value
                    ));
                }
            }
            Ok(())
        }
        ValueSpec::Enum { values } => {
            if listed(values) {
                Ok(())
            } else {
                Err(format!("{v:?} is not one of {values:?}"))
            }
        }
        ValueSpec::IntOrEnum { values } => {
            if listed(values) {
                Ok(())
            } else {
                parse_int(v).map(drop)
            }
        }
        ValueSpec::FloatOrEnum { values } => {
            if listed(values) {
                Ok(())
            } else {
                parse_float(v).map(drop)
            }
        }
        ValueSpec::Float => parse_float(v).map(drop),
        ValueSpec::FloatList {
            separators,
            max_items_exclusive,
        } => {
            let items: Vec<&str> = v.split(|c| separators.contains(c)).collect();
            if items.len() >= *max_items_exclusive {
                return Err(format!(
                    "{} proportions; the engine takes fewer than {max_items_exclusive}",
                    items.len()
                ));
            }
            let mut sum = 0.0;
            for item in items {
                let x = parse_float(item)?;
                if x < 0.0 {
                    return Err(format!("proportion {item} is negative"));
                }
                sum += x;
            }
            if sum > 0.0 {
                Ok(())
            } else {
                Err(format!("{v:?}: the proportions sum to zero"))
            }
        }
        ValueSpec::DeviceList {
            none,
            separator,
            device_name_prefixes,
        } => {
            if v == none {
                return Ok(());
            }
            let mut seen = BTreeSet::new();
            for name in v.split(separator.as_str()) {
                // ggml_backend_dev_by_name compares case-insensitively; GPU backends name a device
                // `<backend><index>` (CUDA0, Vulkan1, MTL0).
                let known = device_name_prefixes.iter().any(|p| {
                    name.len() > p.len()
                        && name[..p.len()].eq_ignore_ascii_case(p)
                        && name[p.len()..].bytes().all(|b| b.is_ascii_digit())
                });
                if !known {
                    return Err(format!(
                        "device {name:?} is not <backend><index> for a backend in {device_name_prefixes:?}"
                    ));
                }
                if !seen.insert(name.to_ascii_lowercase()) {
                    return Err(format!("device {name:?} is listed twice"));
                }
            }
            Ok(())
        }
        // --host's one check (common/arg.cpp at the pinned commit): the comma-separated list, each entry
        // stripped, keeps at least one address.
        ValueSpec::String { .. } if flag == "--host" => {
            if v.split(',').any(|h| !h.trim().is_empty()) {
                Ok(())
            } else {
                Err(format!("--host {v:?}: no address"))
            }
        }
        ValueSpec::String { unmodelled_checks } => {
            if *unmodelled_checks {
                Err(format!(
                    "{flag}: the table cannot verify its values (the handler has checks server_args.py does not model)"
                ))
            } else {
                Ok(())
            }
        }
    }
}

/// Asserts that the argv of a plan's `llama-server` and `kubernetes` artifacts (those it has, with an argv) passes
/// the pinned engine's argument table.
pub(crate) fn assert_launch_argv_passes(d: &optimizer::emit::Deployment) {
    let t = table();
    for name in ["llama-server", "kubernetes"] {
        let Some(a) = d.artifact(name) else { continue };
        if a.argv.is_empty() {
            continue;
        }
        let problems = check_argv(&t, &a.argv);
        assert!(problems.is_empty(), "{name}: {problems:?} in {:?}", a.argv);
    }
}

/// Every problem llama-server (as pinned) has with `argv`, or would run it with another meaning.
pub(crate) fn check_argv(t: &Table, argv: &[String]) -> Vec<String> {
    let by_flag = spellings(t);
    let mut problems = Vec::new();
    match argv.first() {
        Some(p) if *p == t.program => {}
        other => problems.push(format!("program is {other:?}, not {:?}", t.program)),
    }
    let mut seen: BTreeMap<usize, String> = BTreeMap::new();
    let mut i = 1;
    while i < argv.len() {
        let raw = &argv[i];
        let mut flag = raw.clone();
        if t.parser.underscore_to_dash_in_long_flags && flag.starts_with("--") {
            flag = flag.replace('_', "-");
        }
        let Some(&idx) = by_flag.get(flag.as_str()) else {
            if t.parser.positional_arguments || raw.starts_with('-') {
                problems.push(format!("{raw}: not a llama-server flag"));
            } else {
                problems.push(format!("{raw}: llama-server takes no positional arguments"));
            }
            i += 1;
            continue;
        };
        let opt = &t.options[idx];
        if let Some(first) = seen.insert(idx, raw.clone())
            && !t.parser.repeatable.iter().any(|r| opt.flags.contains(r))
        {
            problems.push(format!(
                "{raw}: the option is already given as {first}; llama-server keeps only the last"
            ));
        }
        if i + opt.values >= argv.len() {
            problems.push(format!("{raw}: expects {} value(s), argv ends", opt.values));
            break;
        }
        if opt.values == 1 {
            let v = &argv[i + 1];
            match &opt.value {
                Some(spec) => {
                    if let Err(e) = check_value(raw, spec, v) {
                        problems.push(format!("{raw} {v}: {e}"));
                    }
                }
                None => problems.push(format!("{raw}: the table gives no value kind")),
            }
        }
        i += 1 + opt.values;
    }
    problems
}

fn argv(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

#[test]
fn the_table_is_the_pinned_engines_llama_server_parser() {
    let t = table();
    assert_eq!(t.program, "llama-server");
    let commit = t.engine.llama_cpp_commit.as_deref().unwrap_or("");
    assert!(commit.starts_with("0c1e570"), "engine commit {commit:?}");
    let by = spellings(&t);
    // Spellings the planner uses or may use, and ones the pinned engine removed.
    for f in [
        "-m",
        "-c",
        "-b",
        "-ub",
        "-np",
        "-ngl",
        "-fa",
        "-ctk",
        "-ctv",
        "-t",
        "-ts",
        "--n-cpu-moe",
        "-dev",
        "-sm",
        "-mg",
        "-kvu",
        "-lm",
        "--host",
        "--port",
    ] {
        assert!(by.contains_key(f), "{f} missing from the table");
    }
    for f in ["--no-mmap", "--mmap", "--no-kv-offload-all", "-p"] {
        assert!(
            !by.contains_key(f),
            "{f} is not a llama-server flag of the pinned engine"
        );
    }
    assert_eq!(
        t.kv_cache_types,
        [
            "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"
        ]
    );
    assert!(t.options.len() > 200, "{} options", t.options.len());
}

#[test]
fn the_checker_rejects_what_the_engine_rejects_or_misreads() {
    let t = table();
    let ok = "llama-server -m m.gguf -c 8192 -b 2048 -ub 512 -np 4 -ngl 99 -fa on -ctk q8_0 -ctv f16 -t 8 \
              -ts 3,1 --n-cpu-moe 4 -dev CUDA0,CUDA1 -sm layer -mg 0 -kvu -lm mmap";
    assert_eq!(check_argv(&t, &argv(ok)), Vec::<String>::new());
    for auto in [
        "-fa auto",
        "-ngl all",
        "-ngl auto",
        "-dev none",
        "-no-kvu",
        "--ctx_size 4096",
        "--host 0.0.0.0 --port 8080",
        "--host 127.0.0.1,::1",
        "--alias m --embedding --pooling mean",
    ] {
        let a = argv(&format!("llama-server -m m.gguf {auto}"));
        assert_eq!(check_argv(&t, &a), Vec::<String>::new(), "{auto}");
    }
    // Each of these must be refused, and the message must name the culprit.
    for (bad, culprit) in [
        ("--no-mmap", "--no-mmap"),
        ("-fa True", "-fa True"),
        ("-fa yes", "-fa yes"),
        ("-c", "-c"),
        ("-c 8k", "-c 8k"),
        ("-c 4294967295", "-c 4294967295"),
        ("-c 08192", "-c 08192"),
        ("-c 1 -c 2", "-c"),
        ("-c 1 --ctx-size 2", "--ctx-size"),
        ("-np 0", "-np 0"),
        ("--n-cpu-moe -1", "--n-cpu-moe -1"),
        ("-ctk q4_k", "-ctk q4_k"),
        ("-ts nan,1", "-ts nan,1"),
        ("-ts 1,-1", "-ts 1,-1"),
        ("-ts 0,0", "-ts 0,0"),
        ("-ts inf", "-ts inf"),
        ("-dev cuda:0", "-dev cuda:0"),
        ("-dev CPU", "-dev CPU"),
        ("-dev CUDA0,CUDA0", "-dev CUDA0,CUDA0"),
        ("-sm rows", "-sm rows"),
        ("-kvu on", "on"),
        ("extra.gguf", "extra.gguf"),
        ("--host ,", "--host"),
        ("--api-key-file k", "--api-key-file"),
    ] {
        let a = argv(&format!("llama-server -m m.gguf {bad}"));
        let problems = check_argv(&t, &a);
        assert!(
            problems.iter().any(|p| p.contains(culprit)),
            "{bad:?} passed the checker: {problems:?}"
        );
    }
    assert!(!check_argv(&t, &argv("llama-cli -m m.gguf")).is_empty());
    assert!(!check_argv(&t, &[]).is_empty());
}

// ------------------------------------------------------------------ plans from the library

/// Fixture GGUFs: every file under tests/fixtures/gguf (split shards included), sorted.
fn fixture_ggufs() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "gguf") {
                out.push(p);
            }
        }
    }
    let mut v = Vec::new();
    walk(&fixture("gguf"), &mut v);
    v.sort();
    v
}

fn fixture_inventories() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(fixture("inventories"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    v.sort();
    v
}

/// A split GGUF (`NAME-0000i-of-0000n.gguf`) must be started from its first shard.
fn split_shard(path: &str) -> Option<(u32, u32)> {
    let stem = path.strip_suffix(".gguf")?;
    let (head, n) = stem.rsplit_once("-of-")?;
    let (_, i) = head.rsplit_once('-')?;
    if i.len() != 5 || n.len() != 5 {
        return None;
    }
    Some((i.parse().ok()?, n.parse().ok()?))
}

/// Flag-like words in prose: `-x` or `--xy-z` at the start or after a space, quote, backquote or parenthesis.
fn mentioned_flags(s: &str) -> Vec<String> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let starts = b[i] == b'-'
            && (i == 0 || matches!(b[i - 1], b' ' | b'"' | b'\'' | b'`' | b'(' | b'\n'));
        if !starts {
            i += 1;
            continue;
        }
        let dashes = if b.get(i + 1) == Some(&b'-') { 2 } else { 1 };
        let mut j = i + dashes;
        if !b.get(j).is_some_and(u8::is_ascii_alphabetic) {
            i = j;
            continue;
        }
        while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'-' || b[j] == b'_') {
            j += 1;
        }
        out.push(s[i..j].trim_end_matches('-').to_string());
        i = j;
    }
    out
}

/// The flags of `optimizer resolve` (its `--help`, global flags included), which a plan's messages may name.
/// Other commands' flags do not count: `estimate` mirrors llama.cpp's spellings, and a plan naming one of
/// those speaks of the engine.
fn optimizer_flags() -> BTreeSet<String> {
    let mut flags = BTreeSet::new();
    {
        let out = bin().args(["resolve", "--help"]).output().unwrap();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let line = line.trim_start();
            if line.starts_with('-') {
                for f in mentioned_flags(line.split("  ").next().unwrap_or("")) {
                    flags.insert(f);
                }
            }
        }
    }
    assert!(flags.contains("--hardware"), "{flags:?}");
    flags
}

/// Every string of the document outside the argv and the model path, with where it is.
fn prose(v: &serde_json::Value, at: &str, out: &mut Vec<(String, String)>) {
    match v {
        serde_json::Value::String(s) => out.push((at.to_string(), s.clone())),
        serde_json::Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                prose(x, &format!("{at}[{i}]"), out);
            }
        }
        serde_json::Value::Object(o) => {
            for (k, x) in o {
                let path = format!("{at}.{k}");
                // Argv are checked as argv (each against its own program), not as prose.
                let is_argv = path.starts_with(".launch[")
                    && (path.ends_with("].argv") || path.ends_with("].command"));
                if !is_argv && path != ".model.path" {
                    prose(x, &path, out);
                }
            }
        }
        _ => {}
    }
}

/// Flags the document names in words that are neither llama-server's (as pinned) nor the optimizer's own.
fn check_mentions(t: &Table, own: &BTreeSet<String>, doc: &serde_json::Value) -> Vec<String> {
    let by_flag = spellings(t);
    let mut strings = Vec::new();
    prose(doc, "", &mut strings);
    let mut problems = Vec::new();
    for (at, s) in strings {
        for f in mentioned_flags(&s) {
            if !by_flag.contains_key(f.as_str()) && !own.contains(&f) {
                let field: String = at.chars().filter(|c| !c.is_ascii_digit()).collect();
                problems.push(format!(
                    "{field} mentions {f}, which the pinned llama-server rejects — e.g. {s:?}"
                ));
            }
        }
    }
    problems
}

/// One defect reported once: a problem without its example text and the fixture directory.
fn group_key(p: &str) -> String {
    let head = p.split(" — e.g. ").next().unwrap_or(p);
    head.replace(&root().display().to_string(), "")
}

/// The launch artifact named `name` in a document (`launch` is a list of artifacts).
fn launch<'a>(doc: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    doc["launch"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["name"] == name))
        .unwrap_or(&serde_json::Value::Null)
}

/// Problems with the launch as a whole: the argv's own, the model it names, and Ollama's parameter names.
fn check_launch(t: &Table, doc: &serde_json::Value) -> Vec<String> {
    let argv: Vec<String> = launch(doc, "llama-server")["argv"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|v| v.as_str().unwrap_or("<not a string>").to_string())
                .collect()
        })
        .unwrap_or_default();
    let mut problems = check_argv(t, &argv);
    if let Some(i) = argv.iter().position(|a| a == "-m" || a == "--model")
        && let Some(m) = argv.get(i + 1)
    {
        if !Path::new(m).is_file() {
            problems.push(format!("-m {m}: not a file"));
        }
        if let Some((shard, n)) = split_shard(m)
            && shard != 1
        {
            problems.push(format!(
                "-m {m}: shard {shard} of {n}; llama-server loads a split model from shard 1"
            ));
        }
    } else {
        problems.push("no -m".into());
    }
    // The Ollama server environment the plan's memory depends on (ollama/ollama envconfig/config.go):
    // parallel requests and default context as positive integers, flash attention as a boolean, the K/V
    // cache type one Ollama offers (docs/faq.md: f16, q8_0, q4_0).
    if let Some(env) = launch(doc, "ollama")["env"].as_object() {
        for (k, v) in env {
            let v = v.as_str().unwrap_or_default();
            let positive = || v.parse::<u32>().is_ok_and(|n| n >= 1);
            let ok = match k.as_str() {
                "OLLAMA_NUM_PARALLEL" | "OLLAMA_CONTEXT_LENGTH" => positive(),
                "OLLAMA_FLASH_ATTENTION" => v == "0" || v == "1",
                "OLLAMA_KV_CACHE_TYPE" => ["f16", "q8_0", "q4_0"].contains(&v),
                _ => false,
            };
            if !ok {
                problems.push(format!(
                    "ollama env {k}={v}: not an Ollama server setting with a valid value"
                ));
            }
        }
        for k in [
            "OLLAMA_NUM_PARALLEL",
            "OLLAMA_CONTEXT_LENGTH",
            "OLLAMA_FLASH_ATTENTION",
        ] {
            if !env.contains_key(k) {
                problems.push(format!("ollama env has no {k}"));
            }
        }
    }
    // A server in a pod or reached from another machine must listen on every interface, on a stated port.
    if argv_value(doc, "--host").as_deref() != Some("0.0.0.0")
        || argv_value(doc, "--port").is_none()
    {
        problems.push("llama-server does not listen on 0.0.0.0 on a stated --port".into());
    }
    // The one-line command runs the argv with the environment, word for word.
    let command = launch(doc, "llama-server")["command"]
        .as_str()
        .unwrap_or_default();
    if !command.ends_with(
        &argv
            .iter()
            .map(|a| optimizer::emit::shell_quote(a))
            .collect::<Vec<_>>()
            .join(" "),
    ) {
        problems.push(format!(
            "llama-server command {command:?} is not the quoted argv"
        ));
    }
    // The llama-server environment pins devices: the visible list has as many entries as -dev names, each an
    // inventory index, and CUDA numbers devices in PCI bus order as NVML does.
    if let Some(env) = launch(doc, "llama-server")["env"].as_object() {
        let dev = argv_value(doc, "-dev");
        for (k, v) in env {
            let v = v.as_str().unwrap_or_default();
            match k.as_str() {
                "CUDA_VISIBLE_DEVICES" | "HIP_VISIBLE_DEVICES" => {
                    let ids: Vec<&str> = v.split(',').collect();
                    if ids.iter().any(|i| i.parse::<u32>().is_err()) {
                        problems.push(format!("{k}={v}: not a list of device indices"));
                    }
                    let named = dev.as_deref().map_or(0, |d| d.split(',').count());
                    if named != ids.len() {
                        problems.push(format!(
                            "{k}={v} exposes {} devices, -dev names {named}",
                            ids.len()
                        ));
                    }
                }
                _ if known_env(t, k, v) => {}
                _ => problems.push(format!(
                    "llama-server env {k}={v} is neither a device-pinning variable nor one llama-server reads"
                )),
            }
        }
    }
    // Replicas: every line of the script, split into words by a real POSIX shell, is an environment prefix
    // that pins one device, then an argv the engine's table accepts, on a port no other replica uses.
    if let Some(script) =
        launch(doc, "llama-server-replicas")["files"]["llama-server-replicas.sh"].as_str()
    {
        problems.extend(check_replicas(t, script));
    }
    // The Modelfile, by its grammar (below): FROM the planned model, documented PARAMETERs.
    let modelfile = launch(doc, "ollama")["files"]["Modelfile"]
        .as_str()
        .unwrap_or_default();
    match parse_modelfile(modelfile) {
        Ok(m) => {
            if !Path::new(&m.from).is_file() {
                problems.push(format!("Modelfile FROM {}: not a file", m.from));
            }
            let planned = argv_value(doc, "-c")
                .and_then(|c| c.parse::<u64>().ok())
                .zip(argv_value(doc, "-np").and_then(|n| n.parse::<u64>().ok()))
                .map(|(c, n)| c / n.max(1));
            let num_ctx = m.parameters.iter().find(|(k, _)| k == "num_ctx");
            if num_ctx.map(|(_, v)| v.parse::<u64>().ok()) != Some(planned) {
                problems.push(format!(
                    "Modelfile num_ctx {num_ctx:?} is not the planned context per sequence {planned:?}"
                ));
            }
        }
        Err(e) => problems.push(format!("Modelfile: {e}")),
    }
    problems
}

/// Whether a launch may set variable `k` (other than the visible-device list, checked on its own): CUDA's
/// bus-order switch, or one llama-server reads (the table's `env` names, e.g. the API key placeholder).
fn known_env(t: &Table, k: &str, v: &str) -> bool {
    (k == "CUDA_DEVICE_ORDER" && v == "PCI_BUS_ID")
        || t.options.iter().any(|o| o.env.as_deref() == Some(k))
}

/// The words of one shell line as `sh` itself splits them (quotes removed), without running the command.
fn shell_words(line: &str) -> Result<Vec<String>, String> {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("set -- {line}; printf '%s\\0' \"$@\""))
        .output()
        .map_err(|e| format!("sh: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "sh cannot split {line:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .split('\0')
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect())
}

/// Problems with a replicas script: each backgrounded line must pin exactly one device through its
/// environment prefix, start an argv the pinned llama-server accepts, and listen on its own port.
fn check_replicas(t: &Table, script: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let mut ports = BTreeSet::new();
    let mut devices = BTreeSet::new();
    let lines: Vec<&str> = script
        .lines()
        .filter_map(|l| l.strip_suffix(" &"))
        .collect();
    if lines.len() < 2 {
        problems.push(format!("replicas script starts {} servers", lines.len()));
    }
    for line in lines {
        let words = match shell_words(line) {
            Ok(w) => w,
            Err(e) => {
                problems.push(e);
                continue;
            }
        };
        let program = words
            .iter()
            .position(|w| !w.contains('=') || w.starts_with('-'))
            .unwrap_or(words.len());
        let (env, argv) = words.split_at(program);
        for kv in env {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            match k {
                "CUDA_VISIBLE_DEVICES" | "HIP_VISIBLE_DEVICES" => {
                    if v.parse::<u32>().is_err() || !devices.insert(v.to_string()) {
                        problems.push(format!(
                            "replica {k}={v}: not one device of its own"
                        ));
                    }
                }
                _ if known_env(t, k, v) => {}
                _ => problems.push(format!(
                    "replica env {k}={v} is neither a device-pinning variable nor one llama-server reads"
                )),
            }
        }
        if !argv.first().is_some_and(|p| p.ends_with("llama-server")) {
            problems.push(format!("replica line {line:?} does not run llama-server"));
            continue;
        }
        problems.extend(
            check_argv(t, argv)
                .into_iter()
                .map(|p| format!("replica: {p}")),
        );
        let port = argv
            .iter()
            .position(|a| a == "--port")
            .and_then(|i| argv.get(i + 1));
        match port {
            Some(p) if ports.insert(p.clone()) => {}
            p => problems.push(format!("replica port {p:?}: missing or shared")),
        }
    }
    problems
}

/// The value after `flag` in the document's llama-server argv.
fn argv_value(doc: &serde_json::Value, flag: &str) -> Option<String> {
    let argv = launch(doc, "llama-server")["argv"].as_array()?;
    let i = argv.iter().position(|a| a == flag)?;
    argv.get(i + 1)?.as_str().map(str::to_string)
}

#[test]
fn every_planned_argv_is_one_the_pinned_llama_server_accepts() {
    let t = table();
    let set = profiles();
    let own = optimizer_flags();
    let mut checked = 0usize;
    let mut skipped: Vec<String> = Vec::new();
    let mut failures: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut flags_seen = BTreeSet::new();
    let mut replica_plans = 0usize;
    for inv_path in fixture_inventories() {
        let inv = hardware::load_inventory(&inv_path).unwrap();
        for gguf in fixture_ggufs() {
            let spec = match model::load(&gguf) {
                Ok(s) => s,
                Err(e) => {
                    skipped.push(format!("{}: {e}", gguf.display()));
                    continue;
                }
            };
            let label = gguf.display().to_string();
            for w in &set.workloads {
                let case = format!(
                    "{} × {} × {}",
                    w.value.id,
                    inv_path.file_name().unwrap().to_string_lossy(),
                    gguf.file_name().unwrap().to_string_lossy()
                );
                let doc = match common::plan_workload(
                    &spec,
                    &label,
                    &inv,
                    &set,
                    &w.value,
                    &Overrides::default(),
                    &Evidence::default(),
                ) {
                    Ok(d) => d,
                    Err(e) => {
                        skipped.push(format!("{case}: {e}"));
                        continue;
                    }
                };
                let json = serde_json::to_value(&doc).unwrap();
                for a in &common::artifact(&doc, "llama-server").argv {
                    if a.starts_with('-') && a.parse::<f64>().is_err() {
                        flags_seen.insert(a.clone());
                    }
                }
                let mut problems = check_launch(&t, &json);
                problems.extend(check_mentions(&t, &own, &json));
                if !launch(&json, "llama-server-replicas").is_null() {
                    replica_plans += 1;
                }
                if !problems.is_empty() {
                    failures.insert(case, problems);
                }
                checked += 1;
            }
        }
    }
    eprintln!(
        "checked {checked} plans; flags emitted: {flags_seen:?}; {} combinations not planned (first: {:?})",
        skipped.len(),
        skipped.first()
    );
    // 7 inventories × 16 GGUFs × 9 presets, less what the planner refuses (training presets, unsupported
    // architectures): a floor well below the product so that a refusal here and there does not break it,
    // and well above zero so that a planner refusing everything does.
    assert!(checked >= 300, "only {checked} plans checked");
    // The multi-GPU inventories give throughput presets replicas; their scripts must have been checked too.
    eprintln!("{replica_plans} plans with a replicas script");
    assert!(replica_plans > 0, "no plan with replicas was checked");
    if !failures.is_empty() {
        let mut by_problem: BTreeMap<String, Vec<(&String, &String)>> = BTreeMap::new();
        for (case, ps) in &failures {
            for p in ps {
                by_problem.entry(group_key(p)).or_default().push((case, p));
            }
        }
        let report: Vec<String> = by_problem
            .iter()
            .map(|(k, cases)| {
                format!(
                    "{k}\n    in {} plans, e.g. {}: {}",
                    cases.len(),
                    cases[0].0,
                    cases[0].1
                )
            })
            .collect();
        panic!(
            "{} of {checked} planned argvs would not start as written:\n{}",
            failures.len(),
            report.join("\n")
        );
    }
}

/// The replica check itself: a clean two-replica script passes; a shared port, a device pinned twice, a flag
/// llama-server lacks and an unknown variable are each reported.
#[test]
fn the_replica_check_refuses_shared_ports_devices_and_foreign_flags() {
    let t = table();
    let good = "#!/bin/sh\ntrap 'kill 0' EXIT INT TERM\nCUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0 llama-server -m '/m dir/x.gguf' --port 8080 &\nCUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=1 llama-server -m '/m dir/x.gguf' --port 8081 &\nwait\n";
    assert_eq!(check_replicas(&t, good), Vec::<String>::new());
    let bad = "CUDA_VISIBLE_DEVICES=0 llama-server -m x.gguf --port 8080 &\nCUDA_VISIBLE_DEVICES=0 FOO=1 llama-server -m x.gguf --port 8080 --no-such-flag &\n";
    let p = check_replicas(&t, bad);
    for want in [
        "not one device of its own",
        "FOO=1",
        "--no-such-flag",
        "missing or shared",
    ] {
        assert!(
            p.iter().any(|x| x.contains(want)),
            "{want} not reported in {p:?}"
        );
    }
}

// ------------------------------------------------------------------ plans from the CLI, as YAML

/// What a YAML 1.1 reader (PyYAML's resolver, Kubernetes' go-yaml v2) makes of a plain scalar, when not a
/// string: the implicit types of yaml.org/type (bool, null, int, float, timestamp).
fn yaml11_retyped(s: &str) -> Option<&'static str> {
    const BOOLS: [&str; 22] = [
        "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "true", "True", "TRUE", "false",
        "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF",
    ];
    if BOOLS.contains(&s) {
        return Some("bool");
    }
    if matches!(s, "" | "~" | "null" | "Null" | "NULL") {
        return Some("null");
    }
    let unsigned = s.strip_prefix(['-', '+']).unwrap_or(s);
    let digits_ =
        |x: &str, ok: fn(u8) -> bool| !x.is_empty() && x.bytes().all(|b| ok(b) || b == b'_');
    // int: 0b…, 0x…, 0… (octal), decimal, base 60 (1:30).
    if let Some(b) = unsigned.strip_prefix("0b")
        && digits_(b, |c| c == b'0' || c == b'1')
    {
        return Some("int");
    }
    if let Some(h) = unsigned.strip_prefix("0x")
        && digits_(h, |c| c.is_ascii_hexdigit())
    {
        return Some("int");
    }
    if digits_(unsigned, |c| c.is_ascii_digit()) && unsigned.as_bytes()[0].is_ascii_digit() {
        return Some("int");
    }
    let sexagesimal = |x: &str| {
        let mut parts = x.split(':');
        let head = parts.next().unwrap_or("");
        x.contains(':')
            && digits_(head, |c| c.is_ascii_digit())
            && parts.all(|p| !p.is_empty() && p.len() <= 2 && p.bytes().all(|c| c.is_ascii_digit()))
    };
    if sexagesimal(unsigned) {
        return Some("int");
    }
    // float: [digits].[digits][e±N], base 60 with a fraction, .inf, .nan.
    if matches!(unsigned, ".inf" | ".Inf" | ".INF") || matches!(s, ".nan" | ".NaN" | ".NAN") {
        return Some("float");
    }
    if let Some((int, frac)) = unsigned.split_once('.') {
        let (frac, exp) = match frac.find(['e', 'E']) {
            Some(k) => (&frac[..k], Some(&frac[k + 1..])),
            None => (frac, None),
        };
        let int_ok = int.is_empty() || digits_(int, |c| c.is_ascii_digit()) || sexagesimal(int);
        let frac_ok = frac
            .bytes()
            .all(|c| c.is_ascii_digit() || c == b'_' || c == b'.');
        let exp_ok = exp.is_none_or(|e| {
            e.len() > 1
                && (e.starts_with('-') || e.starts_with('+'))
                && e[1..].bytes().all(|c| c.is_ascii_digit())
        });
        if int_ok && frac_ok && exp_ok && !(int.is_empty() && frac.is_empty()) {
            return Some("float");
        }
    }
    // timestamp: yyyy-mm-dd…
    let b = s.as_bytes();
    if b.len() >= 8
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && b[5].is_ascii_digit()
    {
        return Some("timestamp");
    }
    if s == "<<" || s == "=" {
        return Some("merge/value key");
    }
    None
}

/// The raw text of each item of the `argv:` sequence in emitted YAML.
fn yaml_argv_items(yaml: &str) -> Vec<String> {
    let mut lines = yaml.lines().skip_while(|l| l.trim() != "argv:");
    let Some(key) = lines.next() else {
        return Vec::new();
    };
    let key_indent = key.len() - key.trim_start().len();
    lines
        .take_while(|l| {
            let indent = l.len() - l.trim_start().len();
            l.trim_start().starts_with("- ") && indent >= key_indent
        })
        .map(|l| l.trim_start()[2..].to_string())
        .collect()
}

/// Items a YAML 1.1 reader would not read back as the strings written.
fn yaml11_problems(yaml: &str, argv: &[String]) -> Vec<String> {
    let items = yaml_argv_items(yaml);
    if items.len() != argv.len() {
        return vec![format!(
            "found {} argv items in the YAML, the document has {}",
            items.len(),
            argv.len()
        )];
    }
    items
        .iter()
        .filter(|raw| !raw.starts_with(['\'', '"']))
        .filter_map(|raw| {
            yaml11_retyped(raw)
                .map(|ty| format!("argv item {raw} is unquoted: a YAML 1.1 reader reads a {ty}"))
        })
        .collect()
}

#[test]
fn the_yaml_11_check_flags_what_pyyaml_retypes() {
    for (plain, ty) in [
        ("on", "bool"),
        ("Off", "bool"),
        ("y", "bool"),
        ("~", "null"),
        ("8192", "int"),
        ("0755", "int"),
        ("0x1F", "int"),
        ("1_000", "int"),
        ("1:30", "int"),
        ("3.5", "float"),
        (".5", "float"),
        ("1.0e+3", "float"),
        (".inf", "float"),
        ("2024-01-02", "timestamp"),
    ] {
        assert_eq!(yaml11_retyped(plain), Some(ty), "{plain}");
    }
    for s in [
        "llama-server",
        "-fa",
        "q8_0",
        "3,1",
        "CUDA0",
        "1e3",
        "/m/x.gguf",
        "-c",
        "mmap+mlock",
    ] {
        assert_eq!(yaml11_retyped(s), None, "{s}");
    }
    let yaml = "launch:\n  llama_server:\n    argv:\n    - llama-server\n    - -fa\n    - on\n    - -c\n    - '8192'\n  ollama:\n";
    let argv = argv("llama-server -fa on -c 8192");
    let problems = yaml11_problems(yaml, &argv);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("on is unquoted"), "{problems:?}");
}

#[test]
fn cli_plans_for_profiled_gpus_start_as_written_in_yaml_and_json() {
    let t = table();
    let tmp = tempfile::tempdir().unwrap();
    let models = ["llama-q4_k_m.gguf", "mixtral-moe-q4_k.gguf"];
    // Several GPUs of one profile (tensor split, device pinning) and one small GPU (partial offload).
    let hardware = [
        None,
        Some("2x:rtx-3090"),
        Some("8x:h100-sxm"),
        Some("gtx-1650"),
    ];
    let set = profiles();
    let mut checked = 0usize;
    let own = optimizer_flags();
    let mut failures: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for m in models {
        let model = fixture("gguf").join(m);
        for hw in hardware {
            for w in &set.workloads {
                let mut c = bin();
                c.env("OPTIMIZER_DB", tmp.path().join("store.db"))
                    .env("XDG_CONFIG_HOME", tmp.path())
                    .env("HOME", tmp.path())
                    .arg("resolve")
                    .arg("-m")
                    .arg(&model)
                    .args(["-w", &w.value.id])
                    .arg("--inventory")
                    .arg(fixture("inventories/cpu-server.yaml"));
                if let Some(h) = hw {
                    c.args(["--hardware", h]);
                }
                let case = format!("{m} {hw:?} {}", w.value.id);
                let out = c.output().unwrap();
                if !out.status.success() {
                    // A refusal is the planner's business (e.g. training presets); it must say why.
                    assert!(
                        !out.stderr.is_empty(),
                        "{case}: exit {:?} without a message",
                        out.status.code()
                    );
                    continue;
                }
                let yaml = String::from_utf8(out.stdout).unwrap();
                let doc: serde_json::Value = serde_yaml_ng::from_str(&yaml).unwrap();
                let argv: Vec<String> = launch(&doc, "llama-server")["argv"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap().to_string())
                    .collect();
                let mut problems = check_launch(&t, &doc);
                problems.extend(yaml11_problems(&yaml, &argv));
                problems.extend(check_mentions(&t, &own, &doc));
                for p in problems {
                    failures
                        .entry(group_key(&p))
                        .or_default()
                        .push(format!("{case}: {p}"));
                }
                checked += 1;
            }
        }
    }
    eprintln!("checked {checked} CLI plans");
    assert!(checked >= 40, "only {checked} CLI plans checked");
    let report: Vec<String> = failures
        .iter()
        .map(|(p, cases)| format!("{p}\n    in {} plans, e.g. {}", cases.len(), cases[0]))
        .collect();
    assert!(
        failures.is_empty(),
        "problems in CLI plans:\n{}",
        report.join("\n")
    );
}

#[test]
fn prose_that_names_a_flag_the_engine_lacks_is_caught() {
    let t = table();
    let own: BTreeSet<String> = ["--hardware".to_string()].into();
    assert_eq!(
        mentioned_flags("x; --no-mmap reads (-ngl 99), `-fa on`, GPU-based, -1 and --hardware"),
        ["--no-mmap", "-ngl", "-fa", "--hardware"]
    );
    let doc = serde_json::json!({
        "warnings": ["with mmap the host maps the whole file; --no-mmap reads only the host's tensors"],
        "hint": "raise -ngl or pass --hardware",
        "launch": [{"name": "llama-server", "argv": ["--not-checked-here"]}],
    });
    let problems = check_mentions(&t, &own, &doc);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with(".warnings[] mentions --no-mmap"),
        "{problems:?}"
    );
}

// ------------------------------------------------------------------ the Ollama Modelfile grammar

/// The Modelfile instructions and PARAMETER names the current reference documents (ollama/ollama
/// docs/modelfile.md, "Instructions" and "Valid Parameters and Values").
const MODELFILE_INSTRUCTIONS: [&str; 7] = [
    "FROM",
    "PARAMETER",
    "TEMPLATE",
    "SYSTEM",
    "ADAPTER",
    "LICENSE",
    "MESSAGE",
];
const MODELFILE_PARAMETERS: [&str; 14] = [
    "mirostat",
    "mirostat_eta",
    "mirostat_tau",
    "num_ctx",
    "repeat_last_n",
    "repeat_penalty",
    "temperature",
    "seed",
    "stop",
    "tfs_z",
    "num_predict",
    "top_k",
    "top_p",
    "min_p",
];
/// The documented integer parameters ("Value Type: int").
const MODELFILE_INT_PARAMETERS: [&str; 6] = [
    "mirostat",
    "num_ctx",
    "repeat_last_n",
    "seed",
    "num_predict",
    "top_k",
];

#[derive(Debug, PartialEq)]
struct Modelfile {
    from: String,
    parameters: Vec<(String, String)>,
}

/// Parses a Modelfile as we emit it: `# comment` lines, blank lines, one `FROM path`, and
/// `PARAMETER name value` lines whose name the reference documents and whose int values parse. Instructions
/// are case-insensitive (the reference's "Notes"); any other documented instruction is refused because the
/// plan never writes one, and an undocumented one is refused as Ollama's parser would.
fn parse_modelfile(text: &str) -> Result<Modelfile, String> {
    let mut from = None;
    let mut parameters = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let n = n + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (instruction, rest) = line
            .split_once(char::is_whitespace)
            .ok_or_else(|| format!("line {n}: {line:?} has an instruction and no argument"))?;
        let instruction = instruction.to_ascii_uppercase();
        let rest = rest.trim();
        match instruction.as_str() {
            "FROM" => {
                if from.replace(rest.to_string()).is_some() {
                    return Err(format!("line {n}: a second FROM"));
                }
            }
            "PARAMETER" => {
                let (name, value) = rest
                    .split_once(char::is_whitespace)
                    .ok_or_else(|| format!("line {n}: PARAMETER {rest:?} has no value"))?;
                let value = value.trim();
                if !MODELFILE_PARAMETERS.contains(&name) {
                    return Err(format!(
                        "line {n}: PARAMETER {name} is not in the Modelfile reference"
                    ));
                }
                if MODELFILE_INT_PARAMETERS.contains(&name) && value.parse::<i64>().is_err() {
                    return Err(format!(
                        "line {n}: PARAMETER {name} {value:?} is not an int"
                    ));
                }
                parameters.push((name.to_string(), value.to_string()));
            }
            i if MODELFILE_INSTRUCTIONS.contains(&i) => {
                return Err(format!("line {n}: {i} is not one the plan writes"));
            }
            i => return Err(format!("line {n}: unknown instruction {i}")),
        }
    }
    Ok(Modelfile {
        from: from.ok_or("no FROM")?,
        parameters,
    })
}

#[test]
fn the_modelfile_grammar_accepts_the_reference_and_refuses_the_rest() {
    let ok = parse_modelfile(
        "# planned\nFROM /m/a.gguf\n\nparameter num_ctx 4096\nPARAMETER temperature 0.7\n",
    )
    .unwrap();
    assert_eq!(ok.from, "/m/a.gguf");
    assert_eq!(
        ok.parameters,
        [
            ("num_ctx".to_string(), "4096".to_string()),
            ("temperature".to_string(), "0.7".to_string())
        ]
    );
    for (bad, why) in [
        ("PARAMETER num_ctx 1\n", "no FROM"),
        ("FROM a\nFROM b\n", "a second FROM"),
        (
            "FROM a\nPARAMETER num_gpu 33\n",
            "not in the Modelfile reference",
        ),
        ("FROM a\nPARAMETER num_ctx 8k\n", "not an int"),
        ("FROM a\nPARAMETER num_ctx\n", "no value"),
        ("FROM a\nRUN x\n", "unknown instruction"),
        ("FROM a\nSYSTEM hi\n", "not one the plan writes"),
    ] {
        let e = parse_modelfile(bad).unwrap_err();
        assert!(e.contains(why), "{bad:?}: {e}");
    }
}
