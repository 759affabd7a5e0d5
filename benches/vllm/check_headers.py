#!/usr/bin/env python3
"""Checks the generated safetensors headers (tests/fixtures/vllm/models/<id>/header.json) against transformers'
own model classes: for each unquantized fixture, builds the model on the meta device from the committed
config.json (no weights, no internet), takes the tensors save_pretrained would write (parameters with tied
duplicates dropped, plus persistent buffers) and compares names, shapes and dtypes with the header.

Run on a machine with torch and transformers (written for torch 2.11 + transformers 5.17, works with 4.4x):

    python3 benches/vllm/check_headers.py /tmp/check_headers.json [ID ...]

Prints one line per model, `OK`, `DIFF` (with the first differences) or `SKIP`/`ERROR` (with why), and writes a
JSON summary to the path given. Exit status 0 when no model is DIFF or ERROR, 1 otherwise.

transformers 5 stores some MoE experts fused (one 3-D tensor per layer instead of one 2-D tensor per expert)
and converts checkpoint names on load. Where names differ, the summary also compares the total element count
per dtype: equal totals with different names is reported as `DIFF (layout only)`, which still confirms the
parameter count the header declares.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "tests" / "fixtures" / "vllm" / "models"
SHOW = 8  # differences printed per model


def torch_dtype_name(t) -> str:
    import torch

    return {
        torch.bfloat16: "BF16",
        torch.float16: "F16",
        torch.float32: "F32",
        torch.float8_e4m3fn: "F8_E4M3",
        torch.int32: "I32",
        torch.int8: "I8",
        torch.uint8: "U8",
    }.get(t, str(t))


def build(model_dir: Path, cfg_json: dict):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(str(model_dir))
    name = cfg_json.get("torch_dtype") or cfg_json.get("dtype") or "bfloat16"
    dtype = getattr(torch, name)
    with torch.device("meta"):
        try:
            model = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
        except TypeError:
            model = AutoModelForCausalLM.from_config(cfg, torch_dtype=dtype)
    return model


def saved_tensors(model) -> dict[str, tuple[str, list[int]]]:
    """What save_pretrained writes: each parameter once (a tied parameter under its first name, as
    named_parameters' duplicate removal keeps it) and the persistent buffers."""
    out: dict[str, tuple[str, list[int]]] = {}
    for name, p in model.named_parameters(remove_duplicate=True):
        out[name] = (torch_dtype_name(p.dtype), list(p.shape))
    persistent = set(model.state_dict().keys())
    for name, b in model.named_buffers(remove_duplicate=True):
        if name in persistent:
            out[name] = (torch_dtype_name(b.dtype), list(b.shape))
    return out


def totals(tensors: dict[str, tuple[str, list[int]]]) -> dict[str, int]:
    t: dict[str, int] = {}
    for dtype, shape in tensors.values():
        t[dtype] = t.get(dtype, 0) + math.prod(shape)
    return t


def check(mid: str) -> dict:
    d = MODELS / mid
    cfg_json = json.loads((d / "config.json").read_text())
    if cfg_json.get("quantization_config"):
        return {"id": mid, "status": "SKIP", "why": "quantized checkpoint (transformers builds it unquantized)"}
    header = json.loads((d / "header.json").read_text())
    header.pop("__metadata__", None)
    ours = {k: (v["dtype"], v["shape"]) for k, v in header.items()}
    t0 = time.monotonic()
    model = build(d, cfg_json)
    theirs = saved_tensors(model)
    secs = round(time.monotonic() - t0, 2)
    only_ours = sorted(set(ours) - set(theirs))
    only_theirs = sorted(set(theirs) - set(ours))
    mismatched = sorted(k for k in set(ours) & set(theirs) if ours[k] != theirs[k])
    result = {
        "id": mid,
        "model_class": type(model).__name__,
        "seconds": secs,
        "header_tensors": len(ours),
        "transformers_tensors": len(theirs),
        "header_elements": totals(ours),
        "transformers_elements": totals(theirs),
        "only_in_header": only_ours[:SHOW],
        "only_in_transformers": only_theirs[:SHOW],
        "shape_or_dtype_differs": [{"name": k, "header": ours[k], "transformers": theirs[k]} for k in mismatched[:SHOW]],
        "counts": {"only_in_header": len(only_ours), "only_in_transformers": len(only_theirs), "differs": len(mismatched)},
    }
    if not only_ours and not only_theirs and not mismatched:
        result["status"] = "OK"
    elif result["header_elements"] == result["transformers_elements"]:
        result["status"] = "DIFF (layout only)"
    else:
        result["status"] = "DIFF"
    return result


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    out_path = Path(argv[0])
    ids = argv[1:] or sorted(p.name for p in MODELS.iterdir() if (p / "header.json").is_file())
    import torch
    import transformers

    summary = {"torch": torch.__version__, "transformers": transformers.__version__, "models": []}
    bad = 0
    for mid in ids:
        try:
            r = check(mid)
        except Exception as e:  # noqa: BLE001 - one model's failure must not hide the others
            r = {"id": mid, "status": "ERROR", "why": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()}
        summary["models"].append(r)
        line = f"{r['status']:<20} {mid}"
        if "seconds" in r:
            line += f"  ({r['header_tensors']} vs {r['transformers_tensors']} tensors, {r['seconds']} s)"
        if r["status"].startswith("DIFF"):
            bad += r["status"] == "DIFF"
            for k, n in (
                ("only_in_header", "only_in_header"),
                ("only_in_transformers", "only_in_transformers"),
                ("shape_or_dtype_differs", "differs"),
            ):
                if r[k]:
                    line += f"\n    {k} ({r['counts'][n]}): {r[k][:3]}"
        elif r["status"] in ("SKIP", "ERROR"):
            bad += r["status"] == "ERROR"
            line += f"  {r['why']}"
        print(line, flush=True)
    out_path.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"summary: {out_path}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
