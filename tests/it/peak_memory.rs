//! Peak heap of the GGUF reader on hostile and huge headers must stay under 64 MiB (issue 2), however large the
//! declared counts. Measured with a counting global allocator: the peak of live heap bytes during one parse,
//! above what was live before it (the input image itself is built before the measurement starts).
//!
//! The allocator counts per thread (`common::alloc`), so other tests of the binary running beside these do not
//! disturb the figures; the tests here still run one at a time (a mutex).

use std::sync::Mutex;

use optimizer::model::gguf::{self, MAX_INLINE_STRING, MAX_MATERIALIZED_ARRAY, MAX_TENSORS};
use optimizer::model::{Defect, MetaValue};
use optimizer_testkit::gguf_builder::{GgufBuilder, LlamaShape, synthetic_llama, value_type};

static SERIAL: Mutex<()> = Mutex::new(());

const BUDGET: usize = 64 << 20;

/// Runs `f` on this thread and returns its result with the peak heap growth it caused (the binary's counting
/// allocator, `common::alloc`).
fn peak_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let (out, peak) = crate::common::alloc::peak_during(f);
    (
        out,
        usize::try_from(peak).expect("a peak that fits in memory"),
    )
}

fn mib(b: usize) -> f64 {
    b as f64 / (1 << 20) as f64
}

#[test]
fn seventy_b_header_parses_under_budget() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (bytes, _) = synthetic_llama(LlamaShape::LLAMA3_70B).build_header();
    // The data section is absent, so parse only the header (offsets are checked by `load`).
    let (res, peak) = peak_during(|| gguf::parse_header_bytes(&bytes));
    let h = res.unwrap();
    assert_eq!(h.tensors.len(), 724);
    eprintln!(
        "70B header ({:.1} MiB): peak heap {:.2} MiB",
        mib(bytes.len()),
        mib(peak)
    );
    assert!(peak < BUDGET, "peak {peak}");
    // The vocabulary is skipped, not materialized: far less heap than the header's size.
    assert!(
        peak < bytes.len() / 4,
        "peak {peak} vs header {}",
        bytes.len()
    );
}

#[test]
fn the_largest_tensor_table_allowed_stays_under_budget() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut b = GgufBuilder::new();
    b.kv_str("general.architecture", "llama");
    for i in 0..MAX_TENSORS {
        // 63-byte names, the longest ggml allows, in blocks so roles and layers are computed too.
        let name = format!(
            "blk.{i}.attn_q.weight.{:0>w$}",
            0,
            w = 63 - format!("blk.{i}.attn_q.weight.").len()
        );
        assert_eq!(name.len(), 63);
        b.tensor(&name, &[32, 1, 1, 1], 0, 128);
    }
    let image = b.build();
    let path = std::path::Path::new("max-tensors.gguf");
    let (res, peak) = peak_during(|| gguf::load_bytes(&image, path));
    let spec = res.unwrap();
    assert_eq!(spec.tensors.len() as u64, MAX_TENSORS);
    eprintln!(
        "{MAX_TENSORS} tensors with 63-byte names: peak heap {:.2} MiB",
        mib(peak)
    );
    assert!(peak < BUDGET, "peak {:.1} MiB", mib(peak));
}

#[test]
fn hostile_counts_are_refused_before_allocation() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for (n_kv, n_tensors) in [(u64::MAX, 0), (0, u64::MAX), (60_000, 0), (0, 60_000)] {
        let mut b = GgufBuilder::new();
        b.n_kv_override = Some(n_kv);
        b.n_tensors_override = Some(n_tensors);
        let image = b.build();
        let (res, peak) = peak_during(|| gguf::parse_header_bytes(&image));
        let (_, defect) = res.unwrap_err();
        assert!(
            matches!(
                defect,
                Defect::TooMany { .. } | Defect::CountExceedsFile { .. }
            ),
            "{defect}"
        );
        assert!(
            peak < 1 << 20,
            "peak {peak} for n_kv {n_kv}, n_tensors {n_tensors}"
        );
    }
}

#[test]
fn metadata_heap_is_capped_however_many_arrays_and_strings() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut b = GgufBuilder::new();
    // 2,048 arrays of 4,096 UINT8 each (each small enough to materialize on its own) and 40 strings of 1 MiB
    // (each small enough to keep inline): together far over the metadata heap cap.
    for i in 0..2048 {
        let mut v = b.array_header(value_type::UINT8, MAX_MATERIALIZED_ARRAY);
        v.resize(v.len() + MAX_MATERIALIZED_ARRAY as usize, 7);
        b.kv_raw(format!("bomb.array.{i}").as_bytes(), value_type::ARRAY, &v);
    }
    let big = "x".repeat(MAX_INLINE_STRING as usize);
    for i in 0..40 {
        b.kv_str(&format!("bomb.string.{i}"), &big);
    }
    let image = b.build();
    let (res, peak) = peak_during(|| gguf::parse_header_bytes(&image));
    let h = res.unwrap();
    let skipped = h
        .metadata
        .iter()
        .filter(|(_, v)| {
            matches!(
                v,
                MetaValue::SkippedArray { .. } | MetaValue::SkippedString { .. }
            )
        })
        .count();
    eprintln!(
        "metadata bomb ({:.1} MiB of values): peak heap {:.2} MiB, {skipped} values left in the file",
        mib(image.len()),
        mib(peak)
    );
    assert!(skipped > 0, "the heap cap never engaged");
    assert!(peak < BUDGET, "peak {:.1} MiB", mib(peak));
}

#[test]
fn every_budget_exhausted_at_once_stays_under_budget() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut b = GgufBuilder::new();
    // Keys: as many 100-byte keys as the key heap admits (each is kept twice, plus bookkeeping).
    let key_cost = 2 * (100 + std::mem::size_of::<MetaValue>() as u64);
    let n_keys = gguf::MAX_KEY_HEAP / key_cost - 1200;
    for i in 0..n_keys {
        b.kv_raw(format!("k.{i:0>98}").as_bytes(), value_type::UINT8, &[1]);
    }
    // Values: 1,100 arrays of 4,096 bytes, past the value heap cap.
    for i in 0..1100 {
        let mut v = b.array_header(value_type::UINT8, MAX_MATERIALIZED_ARRAY);
        v.resize(v.len() + MAX_MATERIALIZED_ARRAY as usize, 7);
        b.kv_raw(format!("v.{i:0>98}").as_bytes(), value_type::ARRAY, &v);
    }
    // Tensors: the most allowed, with the longest names.
    for i in 0..MAX_TENSORS {
        let prefix = format!("blk.{i}.ffn_up.weight.");
        let name = format!("{prefix}{:0>w$}", 0, w = 63 - prefix.len());
        b.tensor(&name, &[32], 0, 128);
    }
    let image = b.build();
    let (res, peak) = peak_during(|| gguf::load_bytes(&image, std::path::Path::new("all.gguf")));
    let spec = res.unwrap();
    assert_eq!(spec.tensors.len() as u64, MAX_TENSORS);
    eprintln!(
        "{n_keys} keys + value bomb + {MAX_TENSORS} tensors ({:.1} MiB header): peak heap {:.2} MiB",
        mib(image.len()),
        mib(peak)
    );
    assert!(peak < BUDGET, "peak {:.1} MiB", mib(peak));
}
