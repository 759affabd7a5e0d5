#!/usr/bin/env bash
# Side-by-side: whole-process `optimizer inspect --format json` vs the official reader gguf.GGUFReader
# (gguf==0.19.0) on the same 8B-class GGUF (Llama-3.1-8B header: 292 tensors, 128,256-token vocabulary,
# 280,147 merges; data a sparse hole). Target (issue 2): optimizer at least 100x faster.
# Needs: pip install -r tests/fixtures/requirements.txt
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-20}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cargo build --release --locked --quiet --bin optimizer --example synth_gguf
model="$tmp/llama3-8b.gguf"
./target/release/examples/synth_gguf "$model" 8b
python3 - "$model" "$runs" <<'PY'
import statistics, subprocess, sys, time
model, runs = sys.argv[1], int(sys.argv[2])
def timed(cmd, n):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        out.append(time.perf_counter() - t)
    return statistics.median(out)
ours = timed(["./target/release/optimizer", "inspect", "--format", "json", model], runs)
theirs = timed([sys.executable, "-c", "import sys, gguf; gguf.GGUFReader(sys.argv[1])", model], max(3, runs // 5))
import gguf
t = time.perf_counter(); r = gguf.GGUFReader(model); inproc = time.perf_counter() - t
print(f"optimizer inspect --format json (whole process, median of {runs}): {ours*1e3:.1f} ms")
print(f"gguf {gguf.__version__ if hasattr(gguf, '__version__') else '0.19'} GGUFReader (whole process, median): {theirs*1e3:.1f} ms"
      f"  (in-process constructor alone: {inproc*1e3:.1f} ms, {len(r.tensors)} tensors)")
print(f"ratio: {theirs/ours:.0f}x (whole process), {inproc/ours:.0f}x (vs GGUFReader constructor alone)")
PY
