//! `resolve --stable` (the default with `-o FILE`): the probed free memory is rounded down to 256 MiB so that
//! re-running on an idle machine writes the same document; an inventory file is taken as it is.

use crate::common;

use optimizer::app::{STABLE_FREE_GRANULARITY, stabilize};
use optimizer_testkit::gguf_builder::LlamaShape;

fn doc(args: &[&str], model: &std::path::Path, out: Option<&std::path::Path>) -> serde_json::Value {
    let mut c = common::bin();
    c.env_remove("OPTIMIZER_INVENTORY")
        .args(["resolve", "-w", "chat", "-c", "2048", "-m"])
        .arg(model)
        .args(args);
    if let Some(o) = out {
        c.arg("-o").arg(o);
    }
    let o = c.output().unwrap();
    assert!(
        // 5: the probed machine's plan may miss the chat preset's SLA (`sla-missed`), and is written all the same.
        matches!(o.status.code(), Some(0 | 3 | 5)),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = match out {
        Some(p) => std::fs::read_to_string(p).unwrap(),
        None => String::from_utf8(o.stdout).unwrap(),
    };
    serde_yaml_ng::from_str(&text).unwrap()
}

#[test]
fn a_probed_plan_written_to_a_file_rounds_free_memory_down() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = common::synth(dir.path(), "m.gguf", LlamaShape::LLAMA3_8B);
    let out = dir.path().join("deploy.yaml");
    let d = doc(&[], &m, Some(&out));
    assert_eq!(d["hardware"]["source"], "probe");
    let avail = d["hardware"]["memory_available_bytes"].as_u64().unwrap();
    assert_eq!(avail % STABLE_FREE_GRANULARITY, 0, "{avail}");
    for g in d["hardware"]["gpus"].as_array().unwrap() {
        assert_eq!(
            g["memory_free_bytes"].as_u64().unwrap() % STABLE_FREE_GRANULARITY,
            0
        );
    }
    // --stable on stdout rounds too.
    let d = doc(&["--stable"], &m, None);
    assert_eq!(
        d["hardware"]["memory_available_bytes"].as_u64().unwrap() % STABLE_FREE_GRANULARITY,
        0
    );
}

#[test]
fn stabilize_rounds_down_and_keeps_exact_multiples() {
    let mut inv = common::inventory("workstation-2x3090.yaml");
    inv.memory.available_bytes = 3 * STABLE_FREE_GRANULARITY + 1;
    inv.gpus[0].memory_free_bytes = 5 * STABLE_FREE_GRANULARITY;
    inv.gpus[1].memory_free_bytes = STABLE_FREE_GRANULARITY - 1;
    stabilize(&mut inv);
    assert_eq!(inv.memory.available_bytes, 3 * STABLE_FREE_GRANULARITY);
    assert_eq!(inv.gpus[0].memory_free_bytes, 5 * STABLE_FREE_GRANULARITY);
    assert_eq!(inv.gpus[1].memory_free_bytes, 0);
}
