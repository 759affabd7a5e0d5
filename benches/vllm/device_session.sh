#!/usr/bin/env bash
# GPU evidence for issue 28 item 5 and a real run of the optimizer's GPU paths, on a lent H100 through the
# `run` tool, from the repository root with the carried folder .devcarry/ (optimizer.xz: the stripped release
# binary of this commit). One call; every step has its own time limit and its output goes to $W, packed into
# $OUT/results.tar.xz at the end (graphs*.json also copied alone). Results are committed under
# tests/fixtures/vllm/device/ (README there).
set -u
T0=$(date +%s)
W=/tmp/w
mkdir -p $W
log() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $W/session.log; }
finish() {
  (cd $W && tar cJf $OUT/results.tar.xz --exclude=optimizer --exclude=Llama-3.1-8B-Instruct --exclude='*.db-*' . ) 2>/dev/null
  cp -f $W/graphs-*.json $W/session.log $OUT/ 2>/dev/null
  log "done"
}
trap finish EXIT
export PYTHONUNBUFFERED=1 XDG_DATA_HOME=$W/xdg XDG_CONFIG_HOME=$W/xdgc

{ nvidia-smi; nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.max.sm,clocks.max.mem --format=csv; } > $W/nvidia-smi.txt 2>&1
python3 -c "import torch; print(torch.__version__, torch.version.cuda)" >> $W/nvidia-smi.txt 2>&1
log "gpu: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1)"

# 1. CUDA graph memory as vLLM captures it (benches/vllm/cuda_graph_memory.py), Llama-3.1-8B and Qwen3-8B shapes
# (SKIP_GRAPHS=1: only part 2, the optimizer's own GPU paths)
[ -n "${SKIP_GRAPHS:-}" ] || timeout 200 python3 benches/vllm/cuda_graph_memory.py $W/graphs-llama31-8b.json > $W/graphs-llama31-8b.log 2>&1
log "graphs llama31-8b rc=$?"
[ -n "${SKIP_GRAPHS:-}" ] || timeout 120 python3 benches/vllm/cuda_graph_memory.py $W/graphs-qwen3-8b.json --parts piecewise,full \
  --layers 36 --intermediate 12288 > $W/graphs-qwen3-8b.log 2>&1
log "graphs qwen3-8b rc=$?"

# 2. The optimizer's own GPU paths on the real machine: NVML/CUDA probe, GPU micro-benchmarks, plans
OPT=$W/optimizer
xz -dc .devcarry/optimizer.xz > $OPT && chmod +x $OPT
$OPT --version > $W/optimizer.txt 2>&1
( time timeout 60 $OPT probe ) > $W/probe.txt 2>&1; log "probe rc=$?"
timeout 60 $OPT probe --format yaml > $W/probe.yaml 2> $W/probe.err; log "probe yaml rc=$?"
# a header-only checkpoint directory (sparse model.safetensors) from the committed fixture header
M=$W/Llama-3.1-8B-Instruct
python3 - tests/fixtures/vllm/models/Llama-3.1-8B-Instruct $M <<'PY'
import json, os, shutil, struct, sys
src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst, exist_ok=True)
shutil.copy(os.path.join(src, "config.json"), dst)
h = json.load(open(os.path.join(src, "header.json")))
raw = json.dumps(h, separators=(",", ":")).encode()
end = max(v["data_offsets"][1] for k, v in h.items() if k != "__metadata__")
with open(os.path.join(dst, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(raw))); f.write(raw); f.truncate(8 + len(raw) + end)
PY
G=tests/fixtures/gguf/llama-q4_k_m.gguf
timeout 60 $OPT resolve -m $M -w chat --explain > $W/resolve-vllm-8b-chat.yaml 2> $W/resolve-vllm-8b-chat.explain
log "resolve vllm 8b chat rc=$?"
timeout 60 $OPT estimate vllm serve $M --gpu-memory-utilization 0.9 > $W/estimate-vllm-8b.txt 2>&1
log "estimate vllm serve 8b 0.9 rc=$?"
timeout 60 $OPT resolve -m $G -w chat > $W/resolve-gguf-chat-before.yaml 2>&1; log "resolve gguf before rc=$?"
( time timeout 240 $OPT calibrate --quick --db $W/cal.db --format json ) > $W/calibrate.json 2> $W/calibrate.err
log "calibrate --quick rc=$?"
timeout 60 $OPT resolve -m $G -w chat --db $W/cal.db > $W/resolve-gguf-chat-after.yaml 2>&1
log "resolve gguf after calibrate rc=$?"
timeout 30 $OPT measurements list --db $W/cal.db > $W/measurements.txt 2>&1
