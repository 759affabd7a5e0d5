#!/usr/bin/env python3
"""Fit the CPU kernel constants of crates/core/src/perf on the training rows of a llama-bench table; report held-out error.

The model is the one in crates/core/src/perf/mod.rs (CPU branch), restated here on per-row aggregates:

  decode s/token = F0 + L*(Fl + Fs*[t>1]) + sum over weight types of max(bytes / (t*bw_core), params / (t*C*k_type))
  prefill s/token = sum over types of 2*params*rows / (t*C*e_pp*e_type) / tokens + floor per micro-batch

with C = clock x FP32 FLOP/cycle (inventory x class profile), e_pp the rule table's CPU prefill efficiency,
rows = tokens for block weights and 1 for the output projection. Tied Q6_K/Q5_K/other types use the fixed
ratios to Q4_K of crates/core/src/perf. Prefill includes causal attention (4 x heads x head size x layers per pair, at the
prefill FLOP rate); decode's KV and attention terms are below 1 % at tg128 and left out of the fit (the Rust
test includes them).

Usage: python3 benches/llama-bench/fit.py [--table tests/fixtures/llama-bench/cpu-epyc-milan-2vcpu.json]
Needs numpy and gguf (for the tiny fixture's tensor table). Deterministic: Nelder-Mead from a fixed start.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
import make_models as mm  # noqa: E402

HELD_OUT = {"gemma2-2b-q4_k_m", "qwen2-7b-q4_0", "llama3.2-1b-q4_k_m"}
GHZ = 2.445            # inventory-epyc-milan-2vcpu.yaml frequency_mhz
FPC = 32.0             # cpu-x86-64-avx2-ddr4-dual-channel fp32_flops_per_cycle_per_core
E_PP = 0.66            # rules: cpu-prefill-llama-cpp
RATIO = {"Q5_K": 0.70, "Q6_K": 0.76}
OTHER = 0.70
C = GHZ * 1e9 * FPC


def nbytes(typ, ne):
    return mm.M.tensor_nbytes(typ, ne)


def aggregates(model: dict) -> dict:
    """Per type: (bytes, params) for block weights and for the output projection, and the block count."""
    md = {e["key"]: e.get("value") for e in model["metadata"]}
    arch = md["general.architecture"]
    n_layer = md[f"{arch}.block_count"]
    names = {t["name"] for t in model["tensors"]}
    tied = "output.weight" not in names
    blocks, output = {}, {}

    def add(d, typ, b, p):
        x = d.setdefault(typ, [0.0, 0.0])
        x[0] += b
        x[1] += p

    for t in model["tensors"]:
        ne, typ = t["ne"], t["type"]
        b = nbytes(typ, ne)
        p = math.prod(ne)
        if t["name"] == "token_embd.weight":
            add(blocks, typ, b / ne[-1], 0)  # one row per token
            if tied:
                add(output, typ, b, p)
            continue
        matmul = len(ne) >= 2
        if t["name"].startswith("output"):
            add(output if matmul else blocks, typ, b, p if matmul else 0)
        else:
            add(blocks, typ, b, p if matmul else 0)
    n_head = md[f"{arch}.attention.head_count"]
    head_dim = md.get(f"{arch}.attention.key_length") or md[f"{arch}.embedding_length"] // n_head
    return {"blocks": blocks, "output": output, "layers": n_layer,
            "attn": 4.0 * n_head * head_dim * n_layer}


def rate(k, typ):
    base = {"Q4_0": k["Q4_0"], "Q8_0": k["Q8_0"], "Q4_K": k["Q4_K"]}
    if typ in base:
        return base[typ]
    return k["Q4_K"] * RATIO.get(typ, OTHER)


def predict(agg, row, th):
    t = row["threads"]
    bw = t * th["bw"]
    if row["n_gen"] > 0:
        s = th["F0"] + agg["layers"] * (th["Fl"] + th["Fs"] * (t > 1))
        for part in ("blocks", "output"):
            for typ, (b, p) in agg[part].items():
                s += max(b / bw, p / (t * C * rate(th["k"], typ)))
        return 1.0 / s
    n = row["n_prompt"]
    s = 0.0
    for part, rows in (("blocks", n), ("output", 1)):
        for typ, (_b, p) in agg[part].items():
            s += 2 * p * rows / (t * C * E_PP * rate(th["e"], typ))
    s += agg["attn"] * n * n / 2 / (t * C * E_PP * th["a"])
    s += math.ceil(n / 512) * (th["F0"] + agg["layers"] * (th["Fl"] + th["Fs"] * (t > 1)))
    return n / s


# Per-core bandwidth is not fitted: at one thread every row's decode was compute-bound, so the table only bounds
# it from below, by the most bytes/s one thread pulled (Llama-3.2-1B Q8_0 tg128: 1.313e9 B x 7.14/s).
BW_CORE = 9.38e9
KEYS = ["a", "F0", "Fl", "Fs", "k.Q4_0", "k.Q8_0", "k.Q4_K", "e.Q4_0", "e.Q8_0", "e.Q4_K"]
START = [0.2, 20e-6, 5e-6, 30e-6, 0.12, 0.10, 0.15, 1.3, 1.0, 1.2]


def unpack(x):
    v = dict(zip(KEYS, np.exp(x)))
    return {"bw": BW_CORE, "a": v["a"], "F0": v["F0"], "Fl": v["Fl"], "Fs": v["Fs"],
            "k": {q: v[f"k.{q}"] for q in ("Q4_0", "Q8_0", "Q4_K")},
            "e": {q: v[f"e.{q}"] for q in ("Q4_0", "Q8_0", "Q4_K")}}


def nelder_mead(f, x0, iters=6000, step=0.3):
    n = len(x0)
    pts = [x0] + [x0 + step * np.eye(n)[i] for i in range(n)]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = np.argsort(vals)
        pts = [pts[i] for i in order]
        vals = [vals[i] for i in order]
        c = np.mean(pts[:-1], axis=0)
        xr = c + (c - pts[-1])
        fr = f(xr)
        if fr < vals[0]:
            xe = c + 2 * (c - pts[-1])
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = c + 0.5 * (pts[-1] - c)
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                pts = [pts[0]] + [pts[0] + 0.5 * (p - pts[0]) for p in pts[1:]]
                vals = [vals[0]] + [f(p) for p in pts[1:]]
    i = int(np.argmin(vals))
    return pts[i], vals[i]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", default=str(ROOT / "tests/fixtures/llama-bench/cpu-epyc-milan-2vcpu.json"))
    a = ap.parse_args()
    table = json.loads(Path(a.table).read_text())
    specs = json.loads((Path(a.table).parent / "models.json").read_text())["models"]
    rows = [r for r in table["rows"] if not r["warmup"]]
    aggs = {}
    for r in rows:
        if r["model"] not in aggs:
            m = mm.model_from_gguf(ROOT / r["gguf"]) if "gguf" in r else specs[r["model"]]
            aggs[r["model"]] = aggregates(m)
    train = [r for r in rows if r["model"] not in HELD_OUT]

    def loss(x):
        th = unpack(x)
        return sum(math.log(predict(aggs[r["model"]], r, th) / r["avg_ts"]) ** 2 for r in train)

    x, v = nelder_mead(loss, np.log(np.array(START)))
    for _ in range(3):  # restarts from the best point
        x, v = nelder_mead(loss, x)
    th = unpack(x)
    print(f"fit on {len(train)} training rows, sum of squared log errors {v:.4f}")
    print(json.dumps(th, indent=1))
    print(f"{'model':<20} {'test':>6} {'t':>2} {'measured':>10} {'fit':>10} {'err':>8}")
    for r in rows:
        p = predict(aggs[r["model"]], r, th)
        tag = "held out" if r["model"] in HELD_OUT else ""
        print(f"{r['model']:<20} {r['test']:>6} {r['threads']:>2} {r['avg_ts']:>10.2f} {p:>10.2f} "
              f"{(p / r['avg_ts'] - 1) * 100:>+7.1f}% {tag}")


if __name__ == "__main__":
    main()
