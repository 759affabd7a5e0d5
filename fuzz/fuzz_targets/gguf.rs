//! Any byte string given to the GGUF reader yields a model or an error, never a panic, an overflow, or an
//! allocation beyond the reader's limits (libFuzzer's -rss_limit_mb catches the last).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::path::Path::new("fuzz.gguf");
    if let Ok(spec) = optimizer::model::gguf::load_bytes(data, path) {
        // A model that loads must be internally consistent.
        let sum: u64 = spec.tensors.iter().map(|t| t.bytes).sum();
        assert_eq!(sum, spec.tensor_bytes());
        assert!(spec.tensor_bytes() <= data.len() as u64);
    }
});
