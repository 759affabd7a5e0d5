//! Any byte string given to the llama.cpp load-log reader yields a log within its limits (buffer lines,
//! breakdown rows, malformed lines, context fields) or a typed error, and whatever reads sums per device and
//! resolves to engine parameters or a typed error: never a panic, an overflow (debug assertions are on in fuzz
//! builds), a hang or an unbounded allocation.
//!
//! Run (seeded with the committed load logs): `mkdir -p corpus/load_log && cp ../tests/fixtures/llama-cpp/load-logs/*
//! corpus/load_log/ && cargo +nightly fuzz run load_log corpus/load_log -- -max_total_time=180 -rss_limit_mb=2048`.
//! First run (issue 24): 773,999 executions in 181 s, no crash, peak RSS 414 MiB.
#![no_main]

use libfuzzer_sys::fuzz_target;
use optimizer::calibrate::load_log::{
    self, MALFORMED_TEXT_CHARS, MAX_BUFFER_LINES, MAX_CONTEXT_FIELDS, MAX_MALFORMED_LINES,
};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = load_log::looks_like(&text);
    let Ok(log) = load_log::parse(&text) else {
        return;
    };
    assert!(log.buffers.len() <= MAX_BUFFER_LINES);
    assert!(log.malformed.len() <= MAX_MALFORMED_LINES);
    assert!(log.context.len() <= MAX_CONTEXT_FIELDS);
    assert!(
        log.malformed
            .iter()
            .all(|(_, l)| l.chars().count() <= MALFORMED_TEXT_CHARS)
    );
    if let Ok((totals, other)) = log.totals() {
        let listed: usize = totals.iter().map(|t| t.buffers.len()).sum::<usize>() + other.len();
        assert_eq!(
            listed,
            log.buffers.len(),
            "every buffer is summed or set apart"
        );
    }
    let _ = log.params();
    let _ = (log.flash_attn(), log.mmap());
});
