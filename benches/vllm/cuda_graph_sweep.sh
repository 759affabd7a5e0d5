#!/usr/bin/env bash
# CUDA graph memory on a real GPU, each measurement in a fresh process (the driver keeps graph memory it has
# released for later graphs of the same process, so one process per figure is the clean reading): graphs of k
# kernel nodes, then PIECEWISE and FULL captures (benches/vllm/cuda_graph_memory.py) of three model shapes.
# Usage on the GPU machine, from the repository root: benches/vllm/cuda_graph_sweep.sh DIR
set -u
D=${1:?output directory}
mkdir -p $D
S=benches/vllm/cuda_graph_memory.py
export PYTHONUNBUFFERED=1
for k in 1 16 64 256 1024; do
  timeout 60 python3 $S $D/nodes-$k.json --parts nodes --node-counts $k --graphs 512 > $D/nodes-$k.log 2>&1
  echo "nodes $k rc=$?"
done
# name layers hidden intermediate heads kv-heads head-dim
while read -r name l h i nh nkv hd; do
  for part in piecewise full; do
    timeout 90 python3 $S $D/$name-$part.json --parts $part --layers $l --hidden $h --intermediate $i \
      --heads $nh --kv-heads $nkv --head-dim $hd > $D/$name-$part.log 2>&1
    echo "$name $part rc=$?"
  done
done <<'MODELS'
llama31-8b 32 4096 14336 32 8 128
qwen3-8b 36 4096 12288 32 8 128
qwen25-05b 24 896 4864 14 2 64
MODELS
