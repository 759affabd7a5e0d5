#!/bin/sh
# Two llama-bench runs of one real-shaped model on this machine, minutes apart: the first is imported into the
# measurement store by tests/it/calibrate_accuracy.rs (`an_imported_run_is_what_resolve_reports_and_agrees_with_a_second_run`), the
# second is the truth the imported prediction is checked against (issue 10: "with a llama-bench run of the model
# itself imported, the prediction for that model is `measured` and within 5 %").
#
#   benches/calibrate/imported.sh PATH/TO/llama-bench WORKDIR
#
# WORKDIR receives the 766 MiB GGUF (benches/llama-bench/make_models.py writes it with random data; delete it
# afterwards). The outputs go to tests/fixtures/calibrate/llama-bench-1b-q4_k_m-{a,b}.json. About 5 minutes on
# 2 cores. Run as root for `chrt -f 40` (SCHED_FIFO), as benches/llama-bench/run.py does, so other processes on
# a shared machine do not take the cores mid-test.
set -eu
bench=$1
work=$2
here=$(cd "$(dirname "$0")/../.." && pwd)
model=llama3.2-1b-q4_k_m
python3 "$here/benches/llama-bench/make_models.py" --out "$work" "$model"
for run in a b; do
    # -p 512 -n 128 at 2 threads, 5 repetitions; llama-bench's own warm-up run first.
    chrt -f 40 "$bench" -m "$work/$model.gguf" -p 512 -n 128 -t 2 -r 5 -o json \
        > "$here/tests/fixtures/calibrate/llama-bench-1b-q4_k_m-$run.json"
    sleep 30
done
