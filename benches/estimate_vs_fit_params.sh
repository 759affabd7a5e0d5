#!/usr/bin/env bash
# Side-by-side: whole-process `optimizer estimate` vs the engine's own dry run `llama-fit-params --fit-print on`
# (llama.cpp as vendored by llama-cpp-python==0.3.36; build it as tests/fixtures/llama-cpp/README.md says) on
# the same 8B-class GGUF (Llama-3.1-8B header, data a sparse hole). Target (issue 4): optimizer at least 10x
# faster. Usage: LLAMA_FIT_PARAMS=/path/to/llama-fit-params benches/estimate_vs_fit_params.sh
set -euo pipefail
cd "$(dirname "$0")/.."
: "${LLAMA_FIT_PARAMS:?set LLAMA_FIT_PARAMS to the llama-fit-params binary}"
runs=${RUNS:-20}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cargo build --release --locked --quiet --bin optimizer --example synth_gguf
model="$tmp/llama3-8b.gguf"
./target/release/examples/synth_gguf "$model" 8b
python3 - "$model" "$runs" "$LLAMA_FIT_PARAMS" <<'PY'
import statistics, subprocess, sys, time
model, runs, fit = sys.argv[1], int(sys.argv[2]), sys.argv[3]
inv = "tests/fixtures/inventories/cpu-server.yaml"
def timed(cmd, n):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out.append(time.perf_counter() - t)
    return statistics.median(out)
args = ["-c", "4096", "-fa", "off"]
ours = timed(["./target/release/optimizer", "--inventory", inv, "estimate", "-m", model, *args, "--format", "json"], runs)
theirs = timed([fit, "-m", model, *args, "-ngl", "0", "--fit-print", "on"], max(5, runs // 4))
print(f"optimizer estimate (whole process, median of {runs}): {ours*1e3:.1f} ms")
print(f"llama-fit-params --fit-print on (whole process, median): {theirs*1e3:.1f} ms")
print(f"ratio: {theirs/ours:.0f}x")
PY
