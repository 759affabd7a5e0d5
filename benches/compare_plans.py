#!/usr/bin/env python3
"""Compares the plans of two optimizer binaries on the fixture matrix, for refactors that must keep the numbers.

Usage: benches/compare_plans.py OLD_BINARY NEW_BINARY
Models: synthetic Llama-3 8B and 70B headers (target/release/examples/synth_gguf, built if missing). Machines:
every fixture inventory, plus profiled GPUs (--hardware) on the cpu-server host. Workloads: the inference
presets. For each plan it compares status, strategy, -ngl, context per sequence, sequences, micro-batch, KV type,
threads and the predicted decode tokens/s, time to first token and time per output token, reading documents of
either apiVersion (optimizer/v1 kept placement and settings apart; v2 tags settings by runtime), and prints every
difference and the count of plans compared.
"""
import itertools
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
INVENTORIES = sorted(p.stem for p in (ROOT / "tests/fixtures/inventories").glob("*.yaml") if p.stem != "h100-probed")
PROFILED = ["2x:h100-sxm", "4x:h100-sxm", "8x:h100-sxm", "2x:rtx-4090", "3x:rtx-3090", "2x:a100-40gb-pcie"]
WORKLOADS = ["chat", "inference", "batch-inference", "long-context", "code-generation"]


def key(d):
    s, p = d["settings"], d["performance"]
    v1 = d["apiVersion"] == "optimizer/v1"
    place = d["placement"] if v1 else s
    return (d["status"], place["strategy"], place["gpu_layers"], s["context_per_sequence"], s["parallel"],
            s["ubatch_size"], s["cache_type_k"], s["threads"], p["decode_tokens_per_s"],
            p["time_to_first_token_ms"], p["time_per_output_token_ms"])


def main():
    old, new = sys.argv[1], sys.argv[2]
    synth = ROOT / "target/release/examples/synth_gguf"
    if not synth.exists():
        subprocess.run(["cargo", "build", "--release", "--locked", "--example", "synth_gguf"], cwd=ROOT, check=True)
    tmp = Path(tempfile.mkdtemp())
    models = []
    for size in ["8b", "70b"]:
        m = tmp / f"llama3-{size}.gguf"
        subprocess.run([str(synth), str(m), size], check=True, stdout=subprocess.DEVNULL)
        models.append(m)
    cases = [(["--inventory", str(ROOT / f"tests/fixtures/inventories/{i}.yaml")], []) for i in INVENTORIES]
    cases += [(["--inventory", str(ROOT / "tests/fixtures/inventories/cpu-server.yaml")], ["--hardware", h])
              for h in PROFILED]
    compared = diffs = 0
    for (glob, extra), m, w in itertools.product(cases, models, WORKLOADS):
        # One database per binary: a newer store schema is refused by an older binary.
        args = lambda db: glob + ["--db", str(tmp / db), "resolve", "-m", str(m), "-w", w] + extra
        a = subprocess.run([old] + args("db-old"), capture_output=True, text=True)
        b = subprocess.run([new] + args("db-new"), capture_output=True, text=True)
        label = f"{' '.join(glob[1:] + extra).replace(str(ROOT) + '/', '')} {m.name} {w}"
        if a.returncode != b.returncode:
            diffs += 1
            print(f"EXIT {label}: {a.returncode} -> {b.returncode} {b.stderr.strip()[:200]}")
            continue
        if not a.stdout:
            continue
        ka, kb = key(yaml.safe_load(a.stdout)), key(yaml.safe_load(b.stdout))
        compared += 1
        if ka != kb:
            diffs += 1
            print(f"DIFF {label}\n  old {ka}\n  new {kb}")
    print(f"{compared} plans compared, {diffs} differ")


if __name__ == "__main__":
    main()
