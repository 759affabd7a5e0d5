//! Any byte string given to the llama-bench output reader, in whichever format it takes it for (a JSON array,
//! JSON lines, CSV, or SQL, which is parsed and never run), yields rows within the reader's limits or a typed
//! error: never a panic, an overflow, a hang or an allocation beyond a small multiple of the input
//! (libFuzzer's -rss_limit_mb and -timeout catch the last two).
//!
//! Run (seeded with the pinned llama-bench's outputs): `mkdir -p corpus/llama_bench && cp
//! ../tests/fixtures/llama-bench/outputs/* corpus/llama_bench/ && cargo +nightly fuzz run llama_bench
//! corpus/llama_bench -- -max_total_time=180 -rss_limit_mb=2048`. First run (issue 24): 7,447,430 executions in 181 s,
//! no crash, peak RSS 522 MiB.
#![no_main]

use libfuzzer_sys::fuzz_target;
use optimizer::calibrate::llama_bench::{self, MAX_ROWS};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(rows) = llama_bench::parse(&text) {
        assert!(rows.len() <= MAX_ROWS);
        for r in &rows {
            // A row that reads has a rate to record.
            assert!(r.avg_ts.is_finite() && r.avg_ts > 0.0, "{r:?}");
            assert!(r.stddev_ts.is_finite(), "{r:?}");
        }
    }
});
