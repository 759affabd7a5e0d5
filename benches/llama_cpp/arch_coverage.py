#!/usr/bin/env python3
"""Architecture coverage against the pinned llama.cpp (issue 26): small, structurally faithful GGUFs for every
architecture in benches/llama_cpp/arch_specs/*.py, and the engine's own dry-run breakdown of each over a fixed set
of configurations.

    python3 benches/llama_cpp/arch_coverage.py discover [--models ID,ID]   # learn each tensor table from the engine
    python3 benches/llama_cpp/arch_coverage.py run [--models ID,ID]        # dry-run every config, write the table

The engine is `llama-fit-params` of llama.cpp 0c1e57098bba as vendored by llama-cpp-python 0.3.36, built for the
CPU as tests/fixtures/llama-cpp/README.md says; pass --bin or set LLAMA_FIT_PARAMS.

How a tensor table is learned (`discover`): a spec gives only the metadata of a released checkpoint (its keys and
values, with the source). The script writes a sparse GGUF with that metadata and the tensors known so far, and
runs the engine's loader on it. The loader names the first tensor it needs and does not find ("missing tensor
'blk.3.attn_sinks'"), or the shape it expected ("wrong shape; expected 64, 24, got ..."): the script adds or fixes
that tensor and runs again. A tensor missing on layer i is guessed on every later layer with the same shape;
when the engine then counts more tensors in the file than it created ("wrong number of tensors"), a run with
`-ot .=CPU -v` lists every tensor it did create (llama-model-loader.cpp: "buffer type overridden"), and the rest
are removed. The loop ends when the dry run succeeds. So every table is the one the engine's own loader asks
for, by construction; optional tensors (TENSOR_NOT_REQUIRED, e.g. QKV biases) come from the spec's `optional`.

Outputs (tests/fixtures/llama-cpp/arch/): models.json (same format as ../models.json: metadata and tensor table
per model) and measured-cpu.json (same row format as ../measured-cpu.json). tests/it/llama_cpp_arch.rs compares
the memory model with every row. Requires gguf==0.19.0 and numpy; downloads nothing.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import importlib.util
import json
import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "llama-cpp"
OUT_DIR = FIXTURES / "arch"
SPEC_OUT = OUT_DIR / "models.json"
ROWS_OUT = OUT_DIR / "measured-cpu.json"

sys.path.insert(0, str(FIXTURES))
import measure  # noqa: E402  (the existing ground-truth script: GGUF writer, log parser, row format)

MAX_ROUNDS = 4000

# Tensors kept in F32 whatever the mix (as llama-quantize leaves them): norms, biases, routers, convolutions,
# recurrent state parameters, attention sinks, rope factors.
F32_NAMES = re.compile(
    r"(norm|\.bias$|ffn_gate_inp|exp_probs|conv1d|ssm_a$|ssm_a\b|ssm_d\b|ssm_dt|attn_sinks|rope_freqs|"
    r"shortconv\.conv|altup_router|laurel_.*norm|_scale|time_mix_(?!key|value|receptance|output)|per_layer_proj_norm)"
)


def load_specs() -> dict[str, dict]:
    specs: dict[str, dict] = {}
    for path in sorted((HERE / "arch_specs").glob("*.py")):
        mod_spec = importlib.util.spec_from_file_location(f"arch_specs_{path.stem}", path)
        mod = importlib.util.module_from_spec(mod_spec)
        mod_spec.loader.exec_module(mod)
        for s in getattr(mod, "SPECS", []):
            if s["id"] in specs:
                sys.exit(f"{path}: model id {s['id']} defined twice")
            s = dict(s)
            s["module"] = path.name
            specs[s["id"]] = s
    return specs


def default_type(name: str, ne: list[int], spec: dict) -> str:
    import gguf
    for pat, typ in spec.get("types", {}).items():
        # an override applies once the shape fits its blocks (a guessed [1] shape is written as F32 until the
        # engine names the real one)
        if re.search(pat, name) and ne[0] % gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[typ]][0] == 0:
            return typ
    if len([d for d in ne if d > 1]) < 2 or F32_NAMES.search(name):
        return "F32"
    if name == "output.weight":
        return "Q6_K" if ne[0] % 256 == 0 else "Q8_0" if ne[0] % 32 == 0 else "F16"
    if ne[0] % 256 == 0:
        return "Q4_K"
    if ne[0] % 32 == 0:
        return "Q8_0"
    return "F16"


def metadata_of(spec: dict) -> list[dict]:
    a = spec["arch"]
    nv = spec["n_vocab"]
    md = [
        {"key": "general.architecture", "type": "STRING", "value": a},
        {"key": "general.name", "type": "STRING", "value": f"{spec['name']} (shape) synthetic"},
        {"key": "general.quantization_version", "type": "UINT32", "value": 2},
    ]
    for key, typ, val in spec["metadata"]:
        if key in ("general.architecture",) or key.startswith("tokenizer."):
            continue
        if typ.startswith("ARRAY:"):
            md.append({"key": key, "type": "ARRAY", "item_type": typ.split(":", 1)[1], "value": list(val)})
        else:
            md.append({"key": key, "type": typ, "value": val})
    md += [
        {"key": "tokenizer.ggml.model", "type": "STRING", "value": "llama"},
        {"key": "tokenizer.ggml.tokens", "type": "ARRAY", "item_type": "STRING", "generator": "spm_tokens", "length": nv},
        {"key": "tokenizer.ggml.scores", "type": "ARRAY", "item_type": "FLOAT32", "generator": "spm_scores", "length": nv},
        {"key": "tokenizer.ggml.token_type", "type": "ARRAY", "item_type": "INT32", "generator": "spm_token_type",
         "length": nv},
        {"key": "tokenizer.ggml.bos_token_id", "type": "UINT32", "value": 1},
        {"key": "tokenizer.ggml.eos_token_id", "type": "UINT32", "value": 2},
        {"key": "tokenizer.ggml.unknown_token_id", "type": "UINT32", "value": 0},
    ]
    return md


def block_count(spec: dict) -> int:
    for key, _typ, val in spec["metadata"]:
        if key == f"{spec['arch']}.block_count":
            return int(val)
    sys.exit(f"{spec['id']}: no {spec['arch']}.block_count in metadata")


LAYER = re.compile(r"^blk\.(\d+)\.(.+)$")


def order_key(name: str, first_seen: dict[str, int]):
    m = LAYER.match(name)
    if m:
        return (1, int(m.group(1)), first_seen.get(m.group(2), 0), name)
    return (0, 0, first_seen.get(name, 0), name)


class Table:
    """The tensor table being learned: name -> [ne, confirmed]. Guesses are unconfirmed until the engine checks them."""

    def __init__(self, spec: dict):
        self.spec = spec
        self.t: dict[str, list] = {}
        self.first_seen: dict[str, int] = {}
        self.n_layer = block_count(spec)
        self.optional: set[str] = set()
        for tmpl, ne, layers in spec.get("optional", []):
            for i in (range(self.n_layer) if "{i}" in tmpl else [None]):
                if layers is not None and i not in layers:
                    continue
                self.t[tmpl.format(i=i)] = [list(ne), True]
                self.optional.add(tmpl.format(i=i))

    def _suffix(self, name: str) -> str:
        m = LAYER.match(name)
        return m.group(2) if m else name

    def add_missing(self, name: str) -> None:
        suffix = self._suffix(name)
        self.first_seen.setdefault(suffix, len(self.first_seen))
        m = LAYER.match(name)
        known = [v[0] for k, v in self.t.items() if self._suffix(k) == suffix and v[1]]
        guess = list(known[-1]) if known else [1]
        if name in self.t:
            raise RuntimeError(f"the engine asks again for {name}, which the file has")
        if not m:
            self.t[name] = [guess, False]
            return
        for j in range(int(m.group(1)), self.n_layer):
            self.t.setdefault(f"blk.{j}.{suffix}", [list(guess), False])

    def fix_shape(self, name: str, ne: list[int]) -> None:
        if name not in self.t:
            raise RuntimeError(f"wrong shape reported for {name}, which the file does not have")
        if self.t[name][0] == ne and self.t[name][1]:
            raise RuntimeError(f"{name}: the engine refuses the shape it asked for ({ne})")
        self.t[name] = [ne, True]
        suffix = self._suffix(name)
        m = LAYER.match(name)
        if m:
            for j in range(int(m.group(1)) + 1, self.n_layer):
                k = f"blk.{j}.{suffix}"
                if k in self.t and not self.t[k][1]:
                    self.t[k][0] = list(ne)

    def keep_only(self, created: set[str]) -> list[str]:
        gone = [k for k in self.t if k not in created]
        listed = [k for k in gone if k in self.optional]
        if listed:
            raise RuntimeError(f"{self.spec['id']}: the engine does not load tensors the spec lists as optional: "
                               f"{listed[:5]}")
        for k in gone:
            del self.t[k]
        for k in self.t:
            self.t[k][1] = True
        return gone

    def model(self) -> dict:
        spec = self.spec
        names = sorted(self.t, key=lambda n: order_key(n, self.first_seen))
        tensors = []
        for n in names:
            ne = self.t[n][0]
            tensors.append({"name": n, "type": default_type(n, ne, spec), "ne": ne})
        return {
            "shape": spec["id"], "quant_mix": "q4_k_m-like (arch_coverage.default_type)",
            "hparams": {"arch": spec["arch"], "name": spec["name"], "source": spec["source"],
                        "n_vocab": spec["n_vocab"], "n_ctx_train": spec["n_ctx_train"],
                        "note": spec.get("note", "")},
            "metadata": metadata_of(spec),
            "tensors": tensors,
        }


RE_MISSING = re.compile(r"missing tensor '([^']+)'|tensor '([^']+)' not found")
RE_SHAPE = re.compile(r"tensor '([^']+)' has wrong shape; expected ([\d,\s]+), got")
RE_COUNT = re.compile(r"wrong number of tensors; expected (\d+), got (\d+)")
# Created tensors: those given a buffer type, and those the loader counts as created but skips (MTP/NextN weights
# with load_mtp off: "model has unused tensor X (size = N bytes) -- ignoring").
RE_CREATED = re.compile(r"tensor (\S+) \(\d+ MiB \w+\) buffer type overridden to|model has unused tensor (\S+) \(size")
RE_RS = re.compile(
    r"llama_memory_recurrent: size = \s*" + measure.F + r" MiB \(\s*(\d+) cells,\s*(\d+) layers,\s*(\d+) seqs\s+(\d+) rs_seq\), "
    r"R \((\w+)\):\s*" + measure.F + r" MiB, S \((\w+)\):\s*" + measure.F + r" MiB, P \((\w+)\):\s*" + measure.F + " MiB")
DISCOVERY_ARGS = ["-c", "512", "-fa", "on", "-ot", ".=CPU"]


def discover_one(spec: dict, binary: str, work: Path) -> dict:
    table = Table(spec)
    path = work / f"{spec['id']}.gguf"
    retries = 0
    rnd = 0
    while rnd < MAX_ROUNDS:
        rnd += 1
        model = table.model()
        measure.write_gguf(model, path, 32)
        rc, out, err, _ = measure.run_one(binary, path, DISCOVERY_ARGS)
        if rc == 0 and "compute buffer size" in err:
            print(f"{spec['id']}: loads after {rnd} rounds, {len(model['tensors'])} tensors", flush=True)
            return model
        retries = 0 if (RE_MISSING.search(err) or RE_SHAPE.search(err) or RE_COUNT.search(err)) else retries
        m = RE_MISSING.search(err)
        if m:
            table.add_missing(m.group(1) or m.group(2))
            continue
        m = RE_SHAPE.search(err)
        if m:
            table.fix_shape(m.group(1), [int(x) for x in m.group(2).replace(",", " ").split()])
            continue
        if RE_COUNT.search(err):
            created = {a or b for a, b in RE_CREATED.findall(err)}
            gone = table.keep_only(created)
            print(f"{spec['id']}: removed {len(gone)} guessed tensors the engine does not create", flush=True)
            if not gone:
                raise RuntimeError(f"{spec['id']}: tensor count mismatch but every tensor was created")
            continue
        # The engine logs from a worker thread; an abort can lose the last lines (measure.py README, caveat 5).
        # A run whose error went missing is run again before the file is called refused.
        if retries < 6:
            retries += 1
            continue
        tail = "\n".join(ln for ln in err.splitlines() if re.search(r"error|failed|key not found|assert|wrong|"
                                                                      r"invalid|what\(\)|exception", ln, re.I))
        raise RuntimeError(f"{spec['id']}: the engine refuses the file (rc={rc}):\n{tail or err[-3000:]}")
    raise RuntimeError(f"{spec['id']}: no loadable table after {MAX_ROUNDS} rounds")


def read_doc(path: Path, key: str) -> dict:
    if path.exists():
        return json.loads(path.read_text())
    return {}


def cmd_discover(args) -> None:
    specs = load_specs()
    binary = args.bin or os.environ.get("LLAMA_FIT_PARAMS")
    if not binary:
        sys.exit("need --bin or $LLAMA_FIT_PARAMS")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    only = set(args.models.split(",")) if args.models else None
    doc = read_doc(SPEC_OUT, "models") or {
        "format": 1,
        "note": "Generated by benches/llama_cpp/arch_coverage.py discover: metadata from each released "
                "checkpoint's config (hparams.source), tensor tables learned from the pinned llama.cpp's loader. "
                "Same format as ../models.json; ne innermost-first; data sparse (zero).",
        "alignment": 32,
        "generators": measure.GENERATORS,
        "models": {},
    }
    failed = []
    tables = work / "tables"
    tables.mkdir(exist_ok=True)
    for sid, spec in specs.items():
        if only and sid not in only:
            continue
        try:
            model = discover_one(spec, binary, work)
        except RuntimeError as e:
            failed.append(sid)
            print(str(e), flush=True)
            continue
        (tables / f"{sid}.json").write_text(json.dumps(model))
        if args.write:
            doc["models"][sid] = model
    if args.write:
        doc["models"] = dict(sorted(doc["models"].items()))
        OUT_DIR.mkdir(parents=True, exist_ok=True)
        SPEC_OUT.write_text(measure.dump_spec(doc))
        print(f"wrote {SPEC_OUT} ({len(doc['models'])} models)")
    if failed:
        sys.exit(f"{len(failed)} did not load: {', '.join(failed)}")


def cmd_collect(args) -> None:
    """Merges the tables `discover` learned (WORK/tables/*.json) into models.json, for the ids given or all."""
    doc = read_doc(SPEC_OUT, "models") or {
        "format": 1,
        "note": "Generated by benches/llama_cpp/arch_coverage.py: metadata from each released checkpoint's config "
                "(hparams.source), tensor tables learned from the pinned llama.cpp's loader (discover). Same format "
                "as ../models.json; ne innermost-first; data sparse (zero).",
        "alignment": 32,
        "generators": measure.GENERATORS,
        "models": {},
    }
    specs = load_specs()
    only = set(args.models.split(",")) if args.models else None
    for path in sorted((Path(args.work) / "tables").glob("*.json")):
        sid = path.stem
        if (only and sid not in only) or sid not in specs:
            continue
        doc["models"][sid] = json.loads(path.read_text())
    doc["models"] = dict(sorted(doc["models"].items()))
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    SPEC_OUT.write_text(measure.dump_spec(doc))
    print(f"wrote {SPEC_OUT} ({len(doc['models'])} models)")


# Architectures whose loader marks tensors TENSOR_READ_LAZY (src/models/gemma4.cpp per_layer_token_embd,
# src/models/qwen4exp.cpp): they also get a `-lzm on` row.
LAZY_ARCHS = ("gemma4", "qwen4exp")


def configs(n_ctx_train: int, arch: str = "") -> list[list[str]]:
    """Twelve configurations per architecture: contexts, sequences, flash attention on/off, quantized caches,
    micro-batch sizes, the full-size SWA cache and no repacking."""
    cap = lambda c: str(min(c, n_ctx_train))  # noqa: E731
    big = cap(131072)
    return [
        ["-c", cap(4096), "-np", "1", "-fa", "on"],
        ["-c", cap(4096), "-np", "1", "-fa", "off"],
        ["-c", cap(32768), "-np", "1", "-fa", "on"],
        ["-c", cap(32768), "-np", "4", "-fa", "on"],
        ["-c", cap(32768), "-np", "4", "-fa", "off"],
        ["-c", cap(4096), "-np", "1", "-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"],
        ["-c", cap(32768), "-np", "1", "-fa", "on", "-ctk", "q4_0", "-ctv", "q4_0"],
        ["-c", cap(4096), "-np", "1", "-fa", "on", "-b", "2048", "-ub", "128"],
        ["-c", cap(4096), "-np", "1", "-fa", "off", "-b", "2048", "-ub", "2048"],
        ["-c", big, "-np", "1", "-fa", "on"],
        ["-c", cap(8192), "-np", "2", "-fa", "on", "--swa-full"],
        ["-c", cap(4096), "-np", "1", "-fa", "on", "--no-repack"],
    ] + ([["-c", cap(4096), "-np", "1", "-fa", "on", "-lzm", "on"]] if arch in LAZY_ARCHS else [])


def cmd_run(args) -> None:
    doc = json.loads(SPEC_OUT.read_text())
    binary = args.bin or os.environ.get("LLAMA_FIT_PARAMS")
    if not binary:
        sys.exit("need --bin or $LLAMA_FIT_PARAMS")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    only = set(args.models.split(",")) if args.models else None
    jobs = []
    for mid, m in doc["models"].items():
        if only and mid not in only:
            continue
        p = work / f"{mid}.gguf"
        measure.write_gguf(m, p, doc.get("alignment", 32))
        for a in configs(m["hparams"]["n_ctx_train"], m["hparams"]["arch"]):
            jobs.append((mid, p, a))

    def work_fn(job):
        mid, p, a = job
        rc, out, err, _ = measure.run_one(binary, p, a)
        return mid, a, rc, out, err

    old = read_doc(ROWS_OUT, "rows").get("rows", [])
    rows = [r for r in old if only and r["model"] not in only]
    with cf.ThreadPoolExecutor(max_workers=args.jobs) as ex:
        for n, (mid, a, rc, out, err) in enumerate(ex.map(work_fn, jobs)):
            pr = measure.parse(out, err)
            row = measure.make_row(mid, a, rc, pr)
            row["rs"] = [{"size_mib": m[0], "cells": int(m[1]), "layers": int(m[2]), "seqs": int(m[3]),
                          "rs_seq": int(m[4]), "r_type": m[5], "r_mib": m[6], "s_type": m[7], "s_mib": m[8],
                          "p_type": m[9], "p_mib": m[10]} for m in RE_RS.findall(err)]
            rows.append(row)
            print(f"[{n + 1}/{len(jobs)}] {mid} {' '.join(a)} rc={rc} fit={pr['fit_print']}", flush=True)
            if args.keep_logs:
                ld = work / "logs"
                ld.mkdir(exist_ok=True)
                (ld / f"{mid}-{n:03d}.log").write_text(" ".join(a) + "\n--stdout--\n" + out + "\n--stderr--\n" + err)
    rows.sort(key=lambda r: r["model"])
    out_doc = {
        "engine": measure.engine_doc(),
        "units": "MiB strings are exactly as printed by the engine (2 decimals = bytes/2^20 rounded); "
                 "fit_print and breakdown values are integer MiB = floor(bytes/2^20)",
        "rows": rows,
    }
    ROWS_OUT.write_text(measure.dump_rows_doc(out_doc))
    print(f"wrote {ROWS_OUT}: {len(rows)} rows")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("discover", "collect", "run"):
        p = sub.add_parser(name)
        p.add_argument("--bin", help="llama-fit-params (default $LLAMA_FIT_PARAMS)")
        p.add_argument("--models", help="comma-separated model ids (default: all)")
        p.add_argument("--work", default="/tmp/arch-cov", help="where the GGUFs go")
        if name == "collect":
            pass
        elif name == "discover":
            p.add_argument("--write", action="store_true",
                           help="merge the learned tables into tests/fixtures/llama-cpp/arch/models.json")
        else:
            p.add_argument("-j", "--jobs", type=int, default=1)
            p.add_argument("--keep-logs", action="store_true")
    args = ap.parse_args()
    {"discover": cmd_discover, "collect": cmd_collect, "run": cmd_run}[args.cmd](args)


if __name__ == "__main__":
    main()
