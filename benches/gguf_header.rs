//! Header parse of a 70B-class GGUF (80 layers, 724 tensors, 128,256-token vocabulary with 280,147 merges),
//! built at bench time as a sparse file. Target (issue 2): under 5 ms for `model::load` (open, parse, check
//! offsets, assemble the ModelSpec). Peer in the same run: reading the same header bytes with `std::fs::read`
//! up to the data section, the floor any reader that looks at every header byte must pay.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use optimizer::model;
use optimizer_testkit::gguf_builder::{LlamaShape, synthetic_llama, write_sparse};

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("llama3-70b-synthetic.gguf");
    let builder = synthetic_llama(LlamaShape::LLAMA3_70B);
    write_sparse(&builder, &path).expect("write synthetic model");
    let header_len = builder.build_header().0.len();

    let mut g = c.benchmark_group("gguf_70b_header");
    g.bench_function("model_load", |b| {
        b.iter(|| black_box(model::load(black_box(&path)).expect("valid model")))
    });
    g.bench_function("parse_header_only", |b| {
        b.iter(|| {
            let f = std::fs::File::open(&path).expect("open");
            let len = f.metadata().expect("len").len();
            black_box(
                model::gguf::parse_header(std::io::BufReader::with_capacity(256 << 10, f), len)
                    .expect("valid header"),
            )
        })
    });
    g.bench_function("peer_read_header_bytes", |b| {
        b.iter(|| {
            use std::io::Read;
            let mut f = std::fs::File::open(&path).expect("open");
            let mut buf = vec![0u8; header_len];
            f.read_exact(&mut buf).expect("read");
            black_box(buf)
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
