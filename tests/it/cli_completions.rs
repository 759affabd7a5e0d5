//! `optimizer completions SHELL` and `optimizer man`: the bash script is loaded by bash itself and registers the
//! completion; every script and the manual page name every subcommand.

use crate::common;

const SUBCOMMANDS: &[&str] = &[
    "inspect",
    "probe",
    "profiles",
    "resolve",
    "estimate",
    "calibrate",
    "measurements",
    "observe",
    "bench",
    "schema",
    "completions",
    "man",
];

fn run(args: &[&str]) -> String {
    let o = common::bin().args(args).output().unwrap();
    common::assert_exit(&o, 0);
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn completion_scripts_name_every_subcommand_and_bash_loads_its_own() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = run(&["completions", shell]);
        for sub in SUBCOMMANDS {
            assert!(script.contains(sub), "{shell}: no {sub}");
        }
        // The flags of the main job complete too.
        assert!(script.contains("hardware"), "{shell}");
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("optimizer.bash");
    std::fs::write(&path, run(&["completions", "bash"])).unwrap();
    let o = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source {} && complete -p optimizer",
            path.display()
        ))
        .output()
        .unwrap();
    common::assert_exit(&o, 0);
    assert!(String::from_utf8_lossy(&o.stdout).contains("optimizer"));
}

#[test]
fn the_manual_page_is_roff_with_every_subcommand() {
    let man = run(&["man"]);
    assert!(
        man.contains(".TH optimizer 1"),
        "{}",
        &man[..man.len().min(200)]
    );
    for sub in SUBCOMMANDS {
        assert!(man.contains(sub), "no {sub}");
    }
}

#[test]
fn an_unknown_shell_is_a_usage_error() {
    let o = common::bin()
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    common::assert_exit(&o, 2);
}
