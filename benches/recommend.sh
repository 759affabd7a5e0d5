#!/usr/bin/env bash
# `optimizer recommend` over the full built-in price table for a 70B model (issue 29, target: under 1 s), with
# `optimizer resolve` for one of its options measured in the same loop, so the figure is also a ratio that does
# not depend on the machine: recommend plans every distinct priced machine with resolve's planner, and re-plans the
# ones that fit to size them to --rate, so its cost is about (plans made) x (one plan) plus one model read. Runs are interleaved round-robin (load drifts over
# both alike); each figure is the median of RUNS whole-process wall times.
# The 70B is Llama-3.1-70B-Instruct BF16 (tests/fixtures/vllm/models: its config.json and the complete safetensors
# header, data a sparse hole), planned for vLLM; MODEL=path plans another model.
# Usage: benches/recommend.sh           (RUNS=11 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-11}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cargo build --release --locked --quiet --bin optimizer
bin=${CARGO_TARGET_DIR:-target}/release/optimizer
model=${MODEL:-}
if [ -z "$model" ]; then
  model="$tmp/Llama-3.1-70B-Instruct"
  python3 - "$model" <<'PY'
import json, os, struct, sys
src = "tests/fixtures/vllm/models/Llama-3.1-70B-Instruct"
d = sys.argv[1]; os.makedirs(d)
open(d + "/config.json", "w").write(open(src + "/config.json").read())
h = json.load(open(src + "/header.json"))
data = max(v["data_offsets"][1] for k, v in h.items() if k != "__metadata__")
b = json.dumps(h, separators=(",", ":")).encode()
b += b" " * ((8 - len(b) % 8) % 8)  # the safetensors writer's 8-byte alignment
with open(d + "/model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(b))); f.write(b); f.truncate(8 + len(b) + data)
PY
fi
python3 - "$bin" "$model" "$runs" "$tmp/store.db" <<'PY'
import json, os, statistics, subprocess, sys, time
bin, model, runs, db = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
inv = "tests/fixtures/inventories/desktop-rtx4080.yaml"
env = dict(os.environ, XDG_CONFIG_HOME=os.path.dirname(db))  # no user profile overlay
base = [bin, "--inventory", inv, "--db", db]
rec = base + ["recommend", "-m", model, "-w", "chat", "--rate", "10", "--format", "json"]
out = json.loads(subprocess.run(rec, env=env, capture_output=True, check=True).stdout)
top = out["options"][0]
res = base + ["resolve", "-m", model, "-w", "chat", "--format", "json"] + top["resolve_flags"].split()
cmds = {"recommend (all offers)": rec, "resolve (the top option)": res}
times = {k: [] for k in cmds}
for _ in range(runs):
    for k, c in cmds.items():
        t = time.perf_counter()
        subprocess.run(c, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times[k].append(time.perf_counter() - t)
print(f"{out['priced_offers']} priced offers, {out['machines_planned']} distinct machines planned ({out['plans_run']} plans, sized to --rate 10); model {model}")
for k, v in times.items():
    print(f"{k:28} median {statistics.median(v)*1e3:8.1f} ms  (min {min(v)*1e3:.1f}, max {max(v)*1e3:.1f}, {runs} runs)")
r = statistics.median(times["recommend (all offers)"]) / statistics.median(times["resolve (the top option)"])
print(f"ratio recommend / resolve: {r:.1f} (plans made: {out['plans_run']})")
PY
