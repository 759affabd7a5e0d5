//! Any byte string given to the safetensors header parser yields tensors or an error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = optimizer::model::safetensors::parse_header_bytes(data);
});
