//! Hostile input and faults (issue 8): FIFOs, devices and link cycles where inputs belong, `-o` aimed at
//! links, devices and private files, YAML that hides its nesting, and YAML output that YAML 1.1 readers would
//! retype. Every command runs under a deadline and is killed past it, so a regression that hangs fails here
//! instead of hanging the suite.

use crate::common;
use common::{bin, fixture, root};

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

/// Past this a command is taken to hang. Every command here finishes in well under a second when correct; the
/// deadline only has to separate "finished" from "blocked forever" on a loaded machine.
const DEADLINE: Duration = Duration::from_secs(60);

/// Runs the binary with `args` (and no environment overlays), killing it at [`DEADLINE`].
fn run(args: &[&str], home: &Path) -> Output {
    let mut cmd = bin();
    cmd.args(args)
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_DATA_HOME", home.join("data"))
        .env_remove("OPTIMIZER_INVENTORY")
        .env_remove("OPTIMIZER_DB");
    common::output_within(cmd, DEADLINE)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn mkfifo(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    let rc = unsafe { libc::mkfifo(c.as_ptr(), 0o644) };
    assert_eq!(rc, 0, "mkfifo {}", path.display());
}

fn is_fifo(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_fifo())
}

/// `resolve` of the small Llama fixture on the CPU-server inventory, with a private database.
fn resolve_args<'a>(home: &'a str, extra: &[&'a str]) -> Vec<String> {
    let mut v: Vec<String> = vec![
        "resolve".into(),
        "-m".into(),
        fixture("gguf/llama-q4_k_m.gguf").display().to_string(),
        "--inventory".into(),
        fixture("inventories/cpu-server.yaml").display().to_string(),
        "--db".into(),
        format!("{home}/optimizer.db"),
    ];
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn run_strings(args: &[String], home: &Path) -> Output {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    run(&a, home)
}

fn assert_invalid_input_naming(o: &Output, path: &Path, what: &str) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(4), "exit code; stderr: {e}");
    assert!(
        e.contains(&path.display().to_string()),
        "names the file: {e}"
    );
    assert!(e.contains(what), "says what it is ({what}): {e}");
}

// ------------------------------------------------------------------------------------------------------------
// Readers: regular files only, bounded
// ------------------------------------------------------------------------------------------------------------

#[test]
fn fifo_model_is_refused_without_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("model.gguf");
    mkfifo(&fifo);
    let o = run(&["inspect", fifo.to_str().unwrap()], dir.path());
    assert_invalid_input_naming(&o, &fifo, "FIFO");
}

#[test]
fn fifo_split_shard_is_refused_without_hanging() {
    let dir = tempfile::tempdir().unwrap();
    for i in [1, 3] {
        let name = format!("llama-split-0000{i}-of-00003.gguf");
        std::fs::copy(
            fixture(format!("gguf/split/{name}")),
            dir.path().join(&name),
        )
        .unwrap();
    }
    let shard2 = dir.path().join("llama-split-00002-of-00003.gguf");
    mkfifo(&shard2);
    let first = dir.path().join("llama-split-00001-of-00003.gguf");
    let o = run(&["inspect", first.to_str().unwrap()], dir.path());
    assert_invalid_input_naming(&o, &shard2, "FIFO");
}

#[test]
fn fifo_config_json_is_refused_without_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m");
    std::fs::create_dir(&model).unwrap();
    std::fs::copy(
        fixture("safetensors/llama-bf16/model.safetensors"),
        model.join("model.safetensors"),
    )
    .unwrap();
    let config = model.join("config.json");
    mkfifo(&config);
    let o = run(&["inspect", model.to_str().unwrap()], dir.path());
    assert_invalid_input_naming(&o, &config, "FIFO");
}

#[test]
fn fifo_safetensors_file_is_refused_without_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("model.safetensors");
    mkfifo(&fifo);
    let o = run(&["inspect", fifo.to_str().unwrap()], dir.path());
    assert_invalid_input_naming(&o, &fifo, "FIFO");
}

#[test]
fn fifo_inventory_is_refused_without_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("inventory.yaml");
    mkfifo(&fifo);
    let o = run(
        &["probe", "--inventory", fifo.to_str().unwrap()],
        dir.path(),
    );
    assert_invalid_input_naming(&o, &fifo, "FIFO");
}

#[test]
fn dev_zero_inventory_is_refused_instead_of_read_forever() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(&["probe", "--inventory", "/dev/zero"], dir.path());
    assert_invalid_input_naming(&o, Path::new("/dev/zero"), "character device");
}

#[test]
fn oversized_inventory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("inventory.yaml");
    let limit = usize::try_from(optimizer::hardware::MAX_INVENTORY_BYTES).unwrap();
    std::fs::write(&big, "#".repeat(limit + 1)).unwrap();
    let o = run(&["probe", "--inventory", big.to_str().unwrap()], dir.path());
    assert_invalid_input_naming(&o, &big, "byte limit for an inventory");
}

#[test]
fn fifo_in_a_profile_overlay_is_reported_without_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let overlay = dir.path().join("overlay");
    std::fs::create_dir_all(overlay.join("hardware")).unwrap();
    let fifo = overlay.join("hardware/stuck.yaml");
    mkfifo(&fifo);
    let o = run(
        &["profiles", "list", "--profiles", overlay.to_str().unwrap()],
        dir.path(),
    );
    assert_invalid_input_naming(&o, &fifo, "FIFO");
}

#[test]
fn profile_linked_to_dev_zero_is_refused_instead_of_read_forever() {
    let dir = tempfile::tempdir().unwrap();
    let overlay = dir.path().join("overlay");
    std::fs::create_dir_all(overlay.join("rules")).unwrap();
    let link = overlay.join("rules/zero.yaml");
    std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
    let o = run(
        &["profiles", "list", "--profiles", overlay.to_str().unwrap()],
        dir.path(),
    );
    assert_invalid_input_naming(&o, &link, "character device");
}

#[test]
fn fifo_given_to_profiles_validate_is_refused_without_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("p.yaml");
    mkfifo(&fifo);
    let o = run(
        &["profiles", "validate", fifo.to_str().unwrap()],
        dir.path(),
    );
    assert_invalid_input_naming(&o, &fifo, "FIFO");
}

#[test]
fn self_links_in_a_profile_overlay_are_walked_once() {
    let dir = tempfile::tempdir().unwrap();
    let overlay = dir.path().join("overlay");
    std::fs::create_dir_all(overlay.join("workloads")).unwrap();
    // Two links to the directory itself: following both at every level made 2^40 paths before ELOOP.
    std::os::unix::fs::symlink(".", overlay.join("a")).unwrap();
    std::os::unix::fs::symlink(".", overlay.join("b")).unwrap();
    std::os::unix::fs::symlink("..", overlay.join("workloads/up")).unwrap();
    let o = run(
        &["profiles", "list", "--profiles", overlay.to_str().unwrap()],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn profiles_reached_through_a_link_are_read_once() {
    let dir = tempfile::tempdir().unwrap();
    let overlay = dir.path().join("overlay");
    std::fs::create_dir_all(overlay.join("workloads")).unwrap();
    std::os::unix::fs::symlink("workloads", overlay.join("again")).unwrap();
    let text =
        std::fs::read_to_string(root().join("crates/core/profiles/workloads/chat.yaml")).unwrap();
    std::fs::write(overlay.join("workloads/chat.yaml"), text).unwrap();
    let o = run(
        &[
            "profiles",
            "list",
            "--format",
            "json",
            "--profiles",
            overlay.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn yaml_nesting_hidden_behind_a_hash_or_quote_is_refused_quickly() {
    let dir = tempfile::tempdir().unwrap();
    // Valid YAML, so that libyaml would really descend 100,000 levels (a minute) if the check missed them.
    let n = 100_000;
    for (name, opener) in [
        ("hash", "[a#b, "),
        ("quote", "[a'b, "),
        ("escaped", "[\"\\\"\", "),
    ] {
        let p = dir.path().join(format!("{name}.yaml"));
        let text = format!("{opener}{}{}]", "[".repeat(n), "]".repeat(n));
        std::fs::write(&p, text).unwrap();
        let o = run(&["probe", "--inventory", p.to_str().unwrap()], dir.path());
        assert_invalid_input_naming(&o, &p, "nested deeper than 64");
    }
}

// ------------------------------------------------------------------------------------------------------------
// -o FILE
// ------------------------------------------------------------------------------------------------------------

#[test]
fn output_keeps_the_mode_of_the_file_it_replaces() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().to_str().unwrap();
    let out = dir.path().join("plan.yaml");
    std::fs::write(&out, "old\n").unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o600)).unwrap();
    let o = run_strings(
        &resolve_args(home, &["-o", out.to_str().unwrap()]),
        dir.path(),
    );
    assert!(matches!(o.status.code(), Some(0 | 3)), "{}", stderr(&o));
    let meta = std::fs::metadata(&out).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert!(std::fs::read_to_string(&out).unwrap().contains("status:"));
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("plan.yaml"))
        .collect();
    assert_eq!(
        names,
        vec!["plan.yaml".to_string()],
        "no temporary file left"
    );
}

#[test]
fn output_refuses_to_replace_a_fifo() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().to_str().unwrap();
    let fifo = dir.path().join("plan.yaml");
    mkfifo(&fifo);
    let o = run_strings(
        &resolve_args(home, &["-o", fifo.to_str().unwrap()]),
        dir.path(),
    );
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("plan.yaml") && e.contains("FIFO"), "{e}");
    assert!(is_fifo(&fifo), "the FIFO is still there");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().contains(".tmp"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}

#[test]
fn output_refuses_to_replace_a_symlink_or_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().to_str().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "keep me\n").unwrap();
    let link = dir.path().join("plan.yaml");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let o = run_strings(
        &resolve_args(home, &["-o", link.to_str().unwrap()]),
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("symbolic link"), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me\n");
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );

    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).unwrap();
    let o = run_strings(
        &resolve_args(home, &["-o", sub.to_str().unwrap()]),
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("a directory"), "{}", stderr(&o));
    assert!(sub.is_dir());
}

#[test]
fn output_temporary_file_never_follows_a_link_at_the_old_predictable_name() {
    // The old writer used `.NAME.tmp.PID` and `File::create`, which follows a link planted at that name.
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "keep me\n").unwrap();
    let target = dir.path().join("plan.yaml");
    let planted = dir
        .path()
        .join(format!(".plan.yaml.tmp.{}", std::process::id()));
    std::os::unix::fs::symlink(&victim, &planted).unwrap();
    optimizer::cli::output::write_atomic(&target, b"document\n").unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me\n");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "document\n");
}

#[test]
fn output_write_failure_is_a_runtime_error_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().to_str().unwrap();
    let missing = dir.path().join("no-such-dir/plan.yaml");
    let o = run_strings(
        &resolve_args(home, &["-o", missing.to_str().unwrap()]),
        dir.path(),
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no-such-dir/plan.yaml"),
        "{}",
        stderr(&o)
    );
}

// ------------------------------------------------------------------------------------------------------------
// YAML output read by YAML 1.1 readers
// ------------------------------------------------------------------------------------------------------------

#[test]
fn yaml_output_quotes_on_for_yaml_1_1_readers() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().to_str().unwrap();
    let o = run_strings(&resolve_args(home, &[]), dir.path());
    assert!(matches!(o.status.code(), Some(0 | 3)), "{}", stderr(&o));
    let y = stdout(&o);
    assert!(y.contains("- -fa\n"), "the argv holds -fa: {y}");
    for line in y.lines() {
        let t = line.trim_start();
        for bad in [
            "- on", "- off", ": on", ": off", "- yes", "- no", ": yes", ": no",
        ] {
            assert!(t != bad, "plain {bad:?} in {line:?}");
        }
    }
    assert!(
        y.contains("- 'on'") || y.contains("- 'off'"),
        "the -fa value is quoted: {y}"
    );
}

/// Every string of `v`, keys included.
fn strings(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::String(s) => out.push(s.clone()),
        serde_json::Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                out.push(k.clone());
                strings(x, out);
            }
        }
        _ => {}
    }
}

/// Documents of every kind the CLI renders: resolve (three workloads), estimate, inspect, probe, profiles.
fn documents(home: &Path) -> Vec<(String, String, String)> {
    let h = home.to_str().unwrap();
    let model = fixture("gguf/llama-q4_k_m.gguf").display().to_string();
    let inv = fixture("inventories/workstation-2x3090.yaml")
        .display()
        .to_string();
    let db = format!("{h}/optimizer.db");
    let mut cases: Vec<Vec<String>> = Vec::new();
    for w in ["inference", "chat", "batch-inference"] {
        cases.push(
            [
                "resolve",
                "-m",
                &model,
                "--inventory",
                &inv,
                "--db",
                &db,
                "-w",
                w,
            ]
            .map(String::from)
            .to_vec(),
        );
    }
    cases.push(["inspect", &model].map(String::from).to_vec());
    cases.push(["probe", "--inventory", &inv].map(String::from).to_vec());
    cases.push(
        ["estimate", "-m", &model, "--inventory", &inv, "--db", &db]
            .map(String::from)
            .to_vec(),
    );
    cases.push(["profiles", "show", "rtx-4090"].map(String::from).to_vec());
    let mut docs = Vec::new();
    for args in cases {
        let mut y = args.clone();
        let mut j = args.clone();
        y.extend(["--format".into(), "yaml".into()]);
        j.extend(["--format".into(), "json".into()]);
        let oy = run_strings(&y, home);
        let oj = run_strings(&j, home);
        assert!(
            matches!(oy.status.code(), Some(0 | 3)),
            "{args:?}: {}",
            stderr(&oy)
        );
        docs.push((args.join(" "), stdout(&oy), stdout(&oj)));
    }
    docs
}

#[test]
fn every_string_in_real_documents_survives_yaml_1_1_resolution() {
    let dir = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for (what, yaml, json) in documents(dir.path()) {
        let v: serde_json::Value =
            serde_json::from_str(&json).unwrap_or_else(|e| panic!("{what}: {e}"));
        let mut all = Vec::new();
        strings(&v, &mut all);
        for s in all {
            // Each string on its own, through the same emitter: never plain where PyYAML would retype it.
            let emitted = optimizer::yaml::to_string(&s).unwrap();
            let scalar = emitted.trim_end_matches('\n');
            assert!(
                !pyyaml::retypes(scalar),
                "{what}: {s:?} is emitted as {scalar:?}, which PyYAML reads as another type"
            );
            checked += 1;
        }
        // And the document reads back equal to the JSON under a YAML 1.2 reader.
        let back: serde_json::Value = serde_yaml_ng::from_str(&yaml).unwrap();
        assert_eq!(back, v, "{what}");
    }
    assert!(checked > 100, "only {checked} strings checked");
}

#[test]
fn crafted_yaml_1_1_look_alikes_are_quoted() {
    let crafted = [
        "y",
        "Y",
        "yes",
        "Yes",
        "YES",
        "n",
        "N",
        "no",
        "No",
        "NO",
        "true",
        "True",
        "TRUE",
        "false",
        "False",
        "FALSE",
        "on",
        "On",
        "ON",
        "off",
        "Off",
        "OFF",
        "~",
        "null",
        "Null",
        "NULL",
        "",
        "0b1010",
        "-0b1_0",
        "0x1F",
        "+0x_a",
        "0777",
        "0_7",
        "-0",
        "+12",
        "1_000",
        "1:20",
        "-190:20:30",
        "1.5",
        ".5",
        "1.",
        "-.inf",
        ".Inf",
        "+.INF",
        ".nan",
        ".NaN",
        "1e3",
        "1E3",
        "6.8523015e+5",
        "685.230_15e+03",
        "685_230.15",
        "190:20:30.15",
        "2001-12-14",
        "2001-12-14t21:59:43.10-05:00",
        "2001-12-14 21:59:43.10 -5",
        "2001-12-15T02:59:43.1Z",
        "2002-12-14",
        "=",
        "<<",
        "+inf",
        "-Infinity",
        "NaN",
        "0o17",
        "1.2.3",
        ".",
        "0x1p-2",
    ];
    for s in crafted {
        let emitted = optimizer::yaml::to_string(&vec![s]).unwrap();
        let scalar = emitted.trim_start_matches("- ").trim_end_matches('\n');
        assert!(
            !pyyaml::retypes(scalar),
            "{s:?} emitted plain as {scalar:?}"
        );
        assert!(
            optimizer::yaml::yaml11_retypes(s) || !pyyaml::retypes(s),
            "{s:?}: PyYAML retypes it but yaml11_retypes says no"
        );
        // Keys too.
        let mut m = std::collections::BTreeMap::new();
        m.insert(s, 1);
        let emitted = optimizer::yaml::to_string(&m).unwrap();
        let key = emitted.rsplit_once(": 1").unwrap().0;
        assert!(!pyyaml::retypes(key), "key {s:?} emitted plain as {key:?}");
    }
    // Strings that are strings to every reader stay plain.
    for s in [
        "llama-server",
        "-fa",
        "q4_0",
        "0.3.36a",
        "cuda:0",
        "a:b",
        "8x",
    ] {
        let emitted = optimizer::yaml::to_string(&s).unwrap();
        assert_eq!(emitted, format!("{s}\n"), "{s:?} is quoted needlessly");
    }
}

#[test]
fn resolve_documents_round_trip_through_pyyaml() {
    let probe = Command::new("python3").args(["-c", "import yaml"]).output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: python3 with PyYAML (`import yaml`) is not available");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = "import sys, json, yaml\n\
                  y = yaml.safe_load(open(sys.argv[1]))\n\
                  j = json.load(open(sys.argv[2]))\n\
                  sys.exit(0 if y == j else print(json.dumps(y, sort_keys=True, default=str)) or 1)\n";
    for (i, (what, yaml, json)) in documents(dir.path()).into_iter().enumerate() {
        let yp = dir.path().join(format!("{i}.yaml"));
        let jp = dir.path().join(format!("{i}.json"));
        std::fs::write(&yp, &yaml).unwrap();
        std::fs::write(&jp, &json).unwrap();
        let o = Command::new("python3")
            .args(["-c", script, yp.to_str().unwrap(), jp.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{what}: PyYAML reads the YAML differently from the JSON:\n{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// PyYAML's implicit resolvers (PyYAML 6.0, `lib/yaml/resolver.py`, `Resolver.add_implicit_resolver`), the
/// regular expressions copied verbatim (whitespace of the `re.X` forms removed) and matched with the
/// jsonschema crate's `pattern` (ECMA 262 regular expressions, which these use only the common subset of):
/// an oracle independent of the hand-written matcher in `optimizer::yaml`.
mod pyyaml {
    use std::sync::OnceLock;

    const BOOL: &str =
        r"^(?:yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$";
    const FLOAT: &str = r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$";
    const INT: &str = r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$";
    const MERGE: &str = r"^(?:<<)$";
    const NULL: &str = r"^(?:~|null|Null|NULL|)$";
    const TIMESTAMP: &str = r"^(?:[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]|[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?(?:[Tt]|[ \t]+)[0-9][0-9]?:[0-9][0-9]:[0-9][0-9](?:\.[0-9]*)?(?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?)$";
    const VALUE: &str = r"^(?:=)$";

    fn validators() -> &'static Vec<jsonschema::Validator> {
        static V: OnceLock<Vec<jsonschema::Validator>> = OnceLock::new();
        V.get_or_init(|| {
            [BOOL, FLOAT, INT, MERGE, NULL, TIMESTAMP, VALUE]
                .iter()
                .map(|p| {
                    jsonschema::validator_for(&serde_json::json!({"type": "string", "pattern": p}))
                        .unwrap()
                })
                .collect()
        })
    }

    /// Whether PyYAML's SafeLoader resolves this scalar, read plain, to a type other than a string. Quoted
    /// scalars (starting with `'` or `"`) are strings whatever their content.
    pub(super) fn retypes(scalar: &str) -> bool {
        if scalar.starts_with(['\'', '"']) {
            return false;
        }
        let v = serde_json::Value::String(scalar.to_owned());
        validators().iter().any(|val| val.is_valid(&v))
    }

    #[test]
    fn the_oracle_reads_what_pyyaml_reads() {
        for s in [
            "on",
            "0777",
            "1:20",
            "1_000",
            ".inf",
            "190:20:30.15",
            "2001-12-14",
            "=",
            "<<",
            "",
        ] {
            assert!(retypes(s), "{s:?}");
        }
        for s in ["y", "n", "1e3", "llama", "'on'", "0.3.36"] {
            assert!(!retypes(s), "{s:?}");
        }
    }
}

/// An alias-expansion bomb read untyped: an anchor of 100,000 scalars replayed by 1,000 aliases (203 KB of
/// text, 100 million nodes). serde_yaml_ng built it whole as a profile (`profiles validate`: 60.7 s and 16.4 GB
/// in a release build before the reader moved to serde-saphyr); its node budget refuses it as it parses, and
/// the command exits 4 naming the file.
#[test]
fn an_alias_expansion_bomb_in_a_profile_is_refused_by_the_node_budget() {
    let dir = tempfile::tempdir().unwrap();
    let hw = dir.path().join("hardware");
    std::fs::create_dir_all(&hw).unwrap();
    let p = hw.join("bomb.yaml");
    let text = format!(
        "a: &a [{}]\nb: [{}]\n",
        vec!["x"; 100_000].join(","),
        vec!["*a"; 1000].join(",")
    );
    std::fs::write(&p, text).unwrap();
    let o = run(
        &["profiles", "validate", dir.path().to_str().unwrap()],
        dir.path(),
    );
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(4), "{e}");
    assert!(e.contains("bomb.yaml"), "names the file: {e}");
    assert!(e.contains("budget"), "says which limit refused it: {e}");
}
