#!/usr/bin/env python3
"""Write real-shaped GGUF files with realistic tensor data, for timing llama.cpp (`llama-bench`).

`tests/fixtures/llama-cpp/measure.py` writes *sparse* GGUFs (all-zero data): enough for a dry run,
useless for timing, because zeros and NaN/denormal scales can run at a different speed than real
weights. This script writes the same tensor tables (`tests/fixtures/llama-cpp/models.json`, plus the
few extra shapes below) with data:

* quantized blocks: random bytes, then every f16 scale field (`d`, `dmin`, `m`) overwritten with a
  positive normal f16 in a realistic range for the type (no NaN, inf, zero or denormal);
* F32/F16/BF16 matrices and biases: normal(0, 0.02); norm weights: 1 + normal(0, 0.02);
  `rope_freqs`: 1.0 + uniform(0, 0.01) (they are frequency factors);
* one random pattern of about PATTERN_BYTES per type, repeated through each tensor from a
  tensor-dependent offset (weight values do not change the arithmetic done, only their bytes do).

Usage:
    python3 make_models.py --out DIR llama3.2-1b-q8_0 llama3-8b-q4_k_m ...
    python3 make_models.py --out DIR --from-gguf tests/fixtures/gguf/llama-q4_k_m.gguf
    python3 make_models.py --list

Needs `gguf==0.19.0` and `numpy`. Downloads nothing. Output files are written to a temporary name
and renamed, so an interrupted run leaves no partial model under the final name.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
MEASURE = ROOT / "tests" / "fixtures" / "llama-cpp" / "measure.py"

# A few MiB of pattern per type: large enough to defeat any cache (L2 is ~1 MiB/core here) when
# repeated, small enough to generate instantly.
PATTERN_BYTES = 4 << 20
SEED = 20240808


def load_measure():
    spec = importlib.util.spec_from_file_location("llcpp_measure", MEASURE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


M = load_measure()

# Shapes not in models.json. Real hyper-parameters of the checkpoints (config.json on the Hub).
EXTRA_ARCHS = {
    "gemma2-2b": dict(
        arch="gemma2", name="Gemma-2-2B (shape)", n_layer=26, n_embd=2304, n_ff=9216,
        n_head=8, n_head_kv=4, head_dim=256, n_vocab=256000, n_ctx_train=8192,
        rope_base=10000.0, eps=1e-6, tied=True, swa=4096,
        attn_softcap=50.0, final_softcap=30.0),
    # Not a real checkpoint: the tiny fixture (tests/fixtures/gguf/llama-q4_k_m.gguf: 2 layers of width 256)
    # made 16 layers deep, so that the per-token overhead can be split into a fixed and a per-layer part.
    "tiny16": dict(
        arch="llama", name="Tiny Llama 16 layers", n_layer=16, n_embd=256, n_ff=256,
        n_head=8, n_head_kv=2, head_dim=32, n_vocab=320, n_ctx_train=8192,
        rope_base=500000.0, eps=1e-5, tied=False),
}
# (shape, mix) pairs offered beyond models.json
EXTRA_MODELS = [("llama3.2-1b", "q4_0"), ("gemma2-2b", "q4_k_m"), ("tiny16", "q4_k_m")]

# ggml block layouts (ggml/src/ggml-common.h): (block bytes, [(offset of an f16 scale, lo, hi)]).
# lo..hi is the range of the scale drawn log-uniformly, chosen so that dequantized weights are of
# order 0.01-0.1 like a trained checkpoint's. Every value is a normal f16 (> 6.1e-5).
QUANT_LAYOUT = {
    "Q4_0": (18, [(0, 3e-3, 1.2e-2)]),
    "Q4_1": (20, [(0, 3e-3, 1.2e-2), (2, 1e-2, 5e-2)]),
    "Q5_0": (22, [(0, 1.5e-3, 6e-3)]),
    "Q5_1": (24, [(0, 1.5e-3, 6e-3), (2, 1e-2, 5e-2)]),
    "Q8_0": (34, [(0, 2e-4, 8e-4)]),
    "Q2_K": (84, [(80, 2e-3, 8e-3), (82, 2e-3, 8e-3)]),
    "Q3_K": (110, [(108, 5e-4, 2e-3)]),
    "Q4_K": (144, [(0, 2e-4, 8e-4), (2, 2e-4, 8e-4)]),
    "Q5_K": (176, [(0, 1e-4, 4e-4), (2, 1e-4, 4e-4)]),
    "Q6_K": (210, [(208, 1e-4, 4e-4)]),
}


def model_ids() -> dict[str, str]:
    """id -> where it comes from."""
    spec = M.json.loads(M.SPEC_PATH.read_text())
    ids = {mid: "models.json" for mid in spec["models"]}
    for shape, mix in EXTRA_MODELS:
        ids[f"{shape}-{mix}"] = "make_models.py EXTRA_MODELS"
    return ids


def get_model(mid: str) -> dict:
    spec = M.json.loads(M.SPEC_PATH.read_text())
    if mid in spec["models"]:
        return spec["models"][mid]
    for shape, mix in EXTRA_MODELS:
        if f"{shape}-{mix}" == mid:
            M.ARCHS.update(EXTRA_ARCHS)
            return M.build_model(shape, mix)
    sys.exit(f"unknown model id {mid!r}; see --list")


def model_from_gguf(path: Path) -> dict:
    """The metadata and tensor table of an existing GGUF, in the models.json form."""
    import gguf
    r = gguf.GGUFReader(str(path))
    md = []
    for key, f in r.fields.items():
        if key.startswith("GGUF."):
            continue
        vt = f.types[0]
        e = {"key": key, "type": vt.name, "value": f.contents()}
        if vt == gguf.GGUFValueType.ARRAY:
            e["item_type"] = f.types[-1].name
        md.append(e)
    arch = next(e for e in md if e["key"] == "general.architecture")
    md.remove(arch)
    md.insert(0, arch)
    tensors = [{"name": t.name, "type": t.tensor_type.name, "ne": [int(x) for x in t.shape]}
               for t in r.tensors]
    return {"metadata": md, "tensors": tensors}


def f16_scales(rng: np.random.Generator, n: int, lo: float, hi: float) -> np.ndarray:
    v = np.exp(rng.uniform(np.log(lo), np.log(hi), n)).astype(np.float16)
    assert np.all(np.isfinite(v)) and np.all(v >= np.float16(6.2e-5)), "scale not a normal f16"
    return v


def make_pattern(typ: str, kind: str, rng: np.random.Generator) -> bytes:
    """PATTERN_BYTES (rounded to whole blocks / elements) of data for one tensor type and role."""
    if typ in ("F32", "F16", "BF16"):
        esize = {"F32": 4, "F16": 2, "BF16": 2}[typ]
        n = PATTERN_BYTES // esize
        if kind == "norm":
            x = 1.0 + rng.normal(0.0, 0.02, n)
        elif kind == "rope_freqs":
            x = 1.0 + rng.uniform(0.0, 0.01, n)
        else:
            x = rng.normal(0.0, 0.02, n)
        x = x.astype(np.float32)
        if typ == "F32":
            return x.tobytes()
        if typ == "F16":
            return x.astype(np.float16).tobytes()
        return (x.view(np.uint32) >> 16).astype(np.uint16).tobytes()  # BF16 = top half of F32
    if typ not in QUANT_LAYOUT:
        sys.exit(f"tensor type {typ} is not supported by make_models.py (add its block layout)")
    bsize, scales = QUANT_LAYOUT[typ]
    nblk = PATTERN_BYTES // bsize
    a = rng.integers(0, 256, size=(nblk, bsize), dtype=np.uint8)
    for off, lo, hi in scales:
        a[:, off:off + 2] = f16_scales(rng, nblk, lo, hi).view(np.uint8).reshape(nblk, 2)
    return a.tobytes()


def role(name: str, ne: list[int]) -> str:
    if name.startswith("rope_freqs"):
        return "rope_freqs"
    if "norm" in name:
        return "norm"
    return "matrix"


def write_model(model: dict, path: Path, alignment: int = 32) -> int:
    import gguf
    tmp = path.with_name(path.name + ".tmp")
    w = gguf.GGUFWriter(str(tmp), model["metadata"][0]["value"])
    for kv in model["metadata"]:
        vt = gguf.GGUFValueType[kv["type"]]
        if kv["key"] == "general.architecture":
            continue  # added by the writer itself
        if vt == gguf.GGUFValueType.ARRAY:
            val = M.gen_array(kv["generator"], kv["length"]) if "generator" in kv else kv["value"]
            w.add_key_value(kv["key"], val, vt, sub_type=gguf.GGUFValueType[kv["item_type"]])
        else:
            w.add_key_value(kv["key"], kv["value"], vt)
    sizes = []
    for t in model["tensors"]:
        nb = M.tensor_nbytes(t["type"], t["ne"])
        sizes.append(nb)
        w.add_tensor_info(t["name"], list(reversed(t["ne"])), np.dtype(np.float32), nb,
                          raw_dtype=gguf.GGMLQuantizationType[t["type"]])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    f = w.fout[0]
    pos = f.tell()
    f.write(b"\0" * ((pos + alignment - 1) // alignment * alignment - pos))
    rng = np.random.default_rng(SEED)
    patterns: dict[tuple[str, str], bytes] = {}
    for i, (t, nb) in enumerate(zip(model["tensors"], sizes)):
        key = (t["type"], role(t["name"], t["ne"]))
        if key not in patterns:
            patterns[key] = make_pattern(key[0], key[1], rng)
        pat = patterns[key]
        unit = QUANT_LAYOUT.get(t["type"], (4 if t["type"] == "F32" else 2, None))[0]
        nunits = len(pat) // unit
        start = (i * 7919 % nunits) * unit  # a different phase per tensor
        doubled = pat + pat
        left = nb
        first = True
        while left > 0:
            chunk = doubled[start:start + len(pat)] if first else pat
            first = False
            n = min(left, len(chunk))
            f.write(memoryview(chunk)[:n])
            left -= n
        f.write(b"\0" * ((nb + alignment - 1) // alignment * alignment - nb))
    f.flush()
    size = f.tell()
    w.close()
    os.replace(tmp, path)
    return size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ids", nargs="*", help="model ids (see --list)")
    ap.add_argument("--out", default="/tmp/llama-bench-models", help="output directory")
    ap.add_argument("--from-gguf", action="append", default=[], metavar="PATH",
                    help="copy the metadata and tensor table of this GGUF, fill its data (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the model ids and exit")
    a = ap.parse_args()
    if a.list:
        for mid, src in model_ids().items():
            print(f"{mid}\t{src}")
        return
    if not a.ids and not a.from_gguf:
        ap.error("give model ids or --from-gguf (see --list)")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    jobs = [(mid, get_model(mid)) for mid in a.ids]
    jobs += [(Path(p).stem + "-filled", model_from_gguf(Path(p))) for p in a.from_gguf]
    for mid, model in jobs:
        p = out / f"{mid}.gguf"
        n = write_model(model, p)
        print(f"wrote {p} ({n / 2**20:.1f} MiB)", flush=True)


if __name__ == "__main__":
    main()
