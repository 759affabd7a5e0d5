//! Any byte string read as a deployment document (`optimizer::yaml::from_str::<Deployment>`, within the YAML
//! reader's depth and size budgets) yields a document or an error message, never a panic, a hang or an
//! unbounded allocation; a document that reads renders as YAML (`optimizer::yaml::to_string`) that reads back
//! and renders the same.
//!
//! Run (seeded with the committed documents: the device logs' YAML and the resolve snapshots' bodies): `mkdir -p
//! corpus/deployment && cp ../tests/fixtures/device/logs/*.yaml corpus/deployment/ && for f in
//! ../tests/it/snapshots/it__*resolve__*.snap; do sed '1,/^---$/d' "$f" > corpus/deployment/$(basename "$f"
//! .snap).yaml; done && cargo +nightly fuzz run deployment corpus/deployment -- -max_total_time=180
//! -rss_limit_mb=2048`. First run (issue 24): 49,597 executions in 181 s (a document is about 8 KiB of YAML, parsed and
//! rendered twice), no crash, peak RSS 382 MiB.
#![no_main]

use libfuzzer_sys::fuzz_target;
use optimizer::emit::Deployment;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(d) = optimizer::yaml::from_str::<Deployment>(&text) else {
        return;
    };
    let yaml = optimizer::yaml::to_string(&d).expect("a document that reads renders");
    let again: Deployment = optimizer::yaml::from_str(&yaml)
        .unwrap_or_else(|e| panic!("a rendered document reads back: {e}\n{yaml}"));
    let yaml_again = optimizer::yaml::to_string(&again).expect("renders again");
    assert_eq!(yaml_again, yaml);
});
