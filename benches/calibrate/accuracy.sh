#!/bin/sh
# Issue 10's accuracy table: `optimizer calibrate --quick` on this machine (recorded against the inventory of
# the machine the pinned llama-bench table was measured on, tests/fixtures/llama-bench/), then what `resolve`
# predicts for every model of that table at the threads it picks, before (analytic) and after (calibrated), beside
# llama-bench's own figures. Writes tests/fixtures/calibrate/epyc-milan-2vcpu-quick.json (the calibration the test
# reads) and tests/fixtures/calibrate/accuracy.txt (the table). Run it on that machine: elsewhere the
# calibration describes another CPU and the table compares it with the wrong llama-bench.
#
#   benches/calibrate/accuracy.sh
#
# Run as root for `chrt -f 40` (SCHED_FIFO), as benches/llama-bench/run.py does: on a shared 2-core machine other
# processes otherwise take a core in the middle of a figure.
set -eu
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
cargo build --release --locked --quiet
db=$(mktemp -d)/calibrate.db
start=$(date +%s.%N)
chrt -f 40 target/release/optimizer --db "$db" \
    --inventory tests/fixtures/llama-bench/inventory-epyc-milan-2vcpu.yaml \
    calibrate --quick --format json > tests/fixtures/calibrate/epyc-milan-2vcpu-quick.json
end=$(date +%s.%N)
echo "calibrate --quick: $(echo "$end - $start" | bc) s (whole process)" >&2
rm -rf "$(dirname "$db")"
cargo test --release --locked --quiet --test calibrate_accuracy -- --nocapture \
    calibrated_predictions_match_llama_bench_within_15_percent 2>/dev/null \
    | grep -E '^(model |[a-z0-9._-]+ +(pp|tg)[0-9]+ )' > tests/fixtures/calibrate/accuracy.txt
cat tests/fixtures/calibrate/accuracy.txt
