//! Writes a sparse, Llama-3-shaped GGUF file (real header, zero-length data holes) for measurements:
//! `cargo run --release --example synth_gguf -- /tmp/llama3-8b.gguf 8b` (or `70b`).

use optimizer_testkit::gguf_builder::{LlamaShape, synthetic_llama, write_sparse};

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(path), size) = (args.next(), args.next()) else {
        eprintln!("usage: synth_gguf PATH [8b|70b]");
        std::process::exit(2);
    };
    let shape = match size.as_deref() {
        None | Some("8b") => LlamaShape::LLAMA3_8B,
        Some("70b") => LlamaShape::LLAMA3_70B,
        Some(other) => {
            eprintln!("unknown size {other:?}: expected 8b or 70b");
            std::process::exit(2);
        }
    };
    let b = synthetic_llama(shape);
    let total = write_sparse(&b, std::path::Path::new(&path))?;
    eprintln!(
        "wrote {path}: {} tensors, {total} bytes (sparse)",
        b.tensors.len()
    );
    Ok(())
}
