#!/usr/bin/env python3
"""Runs DeepSpeed's own ZeRO model-state memory estimators on real models and writes the results as a fixture
(Python 3.11, stdlib only; no torch, no deepspeed import).

    python3 benches/torch/deepspeed_estimates.py /path/to/deepspeed-X.Y.Z   # the unpacked sdist

writes
    tests/fixtures/torch/deepspeed-estimates.json   versions, sources, model counts, one entry per case
    tests/fixtures/torch/deepspeed-estimators.py.txt  the two functions' source, verbatim

How: `ast` finds the module-level functions `estimate_zero2_model_states_mem_needs`
(deepspeed/runtime/zero/stage_1_and_2.py) and `estimate_zero3_model_states_mem_needs`
(deepspeed/runtime/zero/stage3.py); their exact source lines are compiled and executed with only `int` and
`max` as builtins (they need nothing else), and called with every keyword argument spelled out.

Model counts, the way DeepSpeed's `*_all_live(model)` helpers take them from a live `nn.Module`
(`model_to_params` next to each estimator):
- total_params = sum of numel over `model.parameters()`, deduplicated by `data_ptr()`, so a tied `lm_head`
  (the same tensor as `model.embed_tokens.weight`) counts once. A checkpoint's safetensors header holds every
  parameter of a Llama/Qwen2 causal LM exactly once (the rotary `inv_freq` is a buffer, not a parameter, and a
  tied `lm_head.weight` is not stored), so total_params = sum over the header's tensors of prod(shape).
- largest_layer_params = max over `model.modules()` of sum(numel of `m.parameters(recurse=False)`), the
  module's own parameters. A header tensor `a.b.c.weight` (or `.bias`) belongs to module `a.b.c`; grouping the
  header's tensors by that prefix gives every module's own count. A tied `lm_head` is still a module whose own
  parameter is the shared [vocab, hidden] weight, so it is added with that count (DeepSpeed's loop does not
  deduplicate within the max: "assuming no shared params within a single layer"). The container modules
  (`LlamaForCausalLM`, `model`, `model.layers`, each decoder layer, `self_attn`, `mlp`, `rotary_emb`) own no
  parameters. The name reported is the first module in `model.modules()` order with the largest count:
  transformers registers `model` before `lm_head` (LlamaForCausalLM.__init__, modeling_llama.py; the same in
  Qwen2ForCausalLM) and `embed_tokens` first inside `model`, so ties go to `model.embed_tokens`; every module
  with that count is listed in `largest_layer_ties`.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import itertools
import json
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODELS_DIR = REPO / "tests" / "fixtures" / "vllm" / "models"
OUT_JSON = REPO / "tests" / "fixtures" / "torch" / "deepspeed-estimates.json"
OUT_SRC = REPO / "tests" / "fixtures" / "torch" / "deepspeed-estimators.py.txt"

FUNCTIONS = {
    "estimate_zero2_model_states_mem_needs": "deepspeed/runtime/zero/stage_1_and_2.py",
    "estimate_zero3_model_states_mem_needs": "deepspeed/runtime/zero/stage3.py",
}

# Fixture ids under tests/fixtures/vllm/models. Llama-3.1-70B-Instruct has the base Llama-3.1-70B's shapes
# (only the eos ids and transformers version of its config differ), so its counts are the base model's.
MODELS = ["Llama-3.1-8B", "Llama-3.1-70B-Instruct", "Qwen2.5-7B", "Llama-3.2-1B"]

GPUS_PER_NODE = [1, 2, 8]
NODES = [1, 2]
# DeepSpeed's default `additional_buffer_factor`, passed explicitly so every argument is in the fixture.
BUFFER_FACTOR = 1.5
# ZeRO-3 offload settings, as `estimate_zero3_model_states_mem_needs_all_cold` enumerates them
# (offload_param without offload_optimizer is skipped there too).
ZERO3_OFFLOADS = [(True, True), (True, False), (False, False)]  # (cpu_offload, cpu_offload_params)


def extract(root: Path, func: str, rel: str) -> tuple[str, int, int]:
    """The verbatim source of the module-level function `func` in `root/rel`, with its first and last line."""
    text = (root / rel).read_text()
    tree = ast.parse(text, filename=rel)
    hits = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == func]
    if len(hits) != 1:
        raise SystemExit(f"{rel}: expected one module-level def {func}, found {len(hits)}")
    node = hits[0]
    first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
    lines = text.splitlines(keepends=True)[first - 1 : node.end_lineno]
    return "".join(lines), first, node.end_lineno


def load(src: str, func: str, rel: str):
    """Compiles and executes the extracted source with only the builtins it uses; returns the function."""
    ns: dict = {"__builtins__": {"int": builtins.int, "max": builtins.max}}
    exec(compile(src, rel, "exec"), ns)
    return ns[func]


def model_counts(mid: str) -> dict:
    d = MODELS_DIR / mid
    cfg = json.loads((d / "config.json").read_text())
    header = json.loads((d / "header.json").read_text())
    own: dict[str, int] = {}
    order: list[str] = []
    total = 0
    for name, t in header.items():
        if name == "__metadata__":
            continue
        n = math.prod(t["shape"])
        total += n
        module, leaf = name.rsplit(".", 1)
        if leaf not in ("weight", "bias"):
            raise SystemExit(f"{mid}: tensor {name} is neither a weight nor a bias")
        if module not in own:
            own[module] = 0
            order.append(module)
        own[module] += n
    tied = cfg.get("tie_word_embeddings", False)  # LlamaConfig and Qwen2Config default to untied
    if tied:
        if "lm_head" in own:
            raise SystemExit(f"{mid}: tied embeddings but lm_head.weight in the header")
        own["lm_head"] = own["model.embed_tokens"]
        order.append("lm_head")
    # model.modules() order: everything under `model` (embed_tokens first), then lm_head.
    def rank(m: str) -> tuple:
        if m == "model.embed_tokens":
            return (0, 0, "")
        if m == "lm_head":
            return (2, 0, "")
        parts = m.split(".")
        if parts[:2] == ["model", "layers"]:
            return (1, int(parts[2]), m)
        return (1, 10**9, m)

    largest = max(own.values())
    ties = sorted((m for m, n in own.items() if n == largest), key=rank)
    return {
        "total_params": total,
        "largest_layer_params": largest,
        "largest_layer": ties[0],
        "largest_layer_ties": ties,
        "tie_word_embeddings": tied,
        "derived_from": [f"tests/fixtures/vllm/models/{mid}/config.json", f"tests/fixtures/vllm/models/{mid}/header.json"],
    }


def integer_zero2(p: int, gpn: int, nodes: int, offload: bool) -> tuple[int, int]:
    """DeepSpeed's ZeRO-2 formula redone in integers (buffer factor 1.5 = 3/2), to check float exactness."""
    g = gpn * nodes
    if offload:
        return p * max(4 * g, 16) * 3 // 2, 2 * p
    return p * 4 * gpn * 3 // 2, 2 * p + 18 * p // g


def integer_zero3(p: int, lp: int, gpn: int, nodes: int, off: bool, off_p: bool, init: bool) -> tuple[int, int, int]:
    """DeepSpeed's ZeRO-3 formula redone in integers (1.5 = 3/2; gpus_factor = 1/nodes), for nodes 1 and 2."""
    g = gpn * nodes
    llm = 4 * lp
    if off:
        per_param = 18 if off_p else 16
        gpu = llm if off_p else llm + 2 * p // g
        if init:
            cpu = p * per_param * 3 // (2 * nodes)
        else:
            # max(4 * gpn, per_param / nodes), kept as a fraction over `nodes`
            cpu = p * max(4 * gpn * nodes, per_param) * 3 // (2 * nodes)
        return cpu, gpu, llm
    gpu = llm + 18 * p // g
    cpu = (lp if init else p) * 4 * gpn * 3 // 2
    return cpu, gpu, llm


def render(out: dict) -> str:
    """Indented JSON with one case per line, so a diff shows which cases changed."""
    head = {k: v for k, v in out.items() if k != "cases"}
    text = json.dumps(head, indent=1)[:-2]  # drop the closing "\n}"
    rows = ",\n".join("  " + json.dumps(c, separators=(", ", ": ")) for c in out["cases"])
    return f'{text},\n "cases": [\n{rows}\n ]\n}}\n'


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    root = Path(argv[0])
    version = (root / "version.txt").read_text().strip()
    sources, funcs, texts = {}, {}, []
    for func, rel in FUNCTIONS.items():
        src, first, last = extract(root, func, rel)
        sources[func] = f"{rel}:{first}-{last}"
        funcs[func] = load(src, func, rel)
        texts.append(f"# deepspeed {version}, {rel}, lines {first}-{last}\n{src}")

    models = {mid: model_counts(mid) for mid in MODELS}
    cases = []
    for mid, m in models.items():
        p, lp = m["total_params"], m["largest_layer_params"]
        for gpn, nodes, offload in itertools.product(GPUS_PER_NODE, NODES, [True, False]):
            args = {
                "total_params": p,
                "num_gpus_per_node": gpn,
                "num_nodes": nodes,
                "cpu_offload": offload,
                "additional_buffer_factor": BUFFER_FACTOR,
            }
            cpu, gpu = funcs["estimate_zero2_model_states_mem_needs"](**args)
            assert (cpu, gpu) == integer_zero2(p, gpn, nodes, offload), (mid, args, cpu, gpu)
            cases.append(
                {"function": "estimate_zero2_model_states_mem_needs", "model": mid, "args": args, "cpu_bytes": cpu, "gpu_bytes": gpu}
            )
        for gpn, nodes, (off, off_p), init in itertools.product(GPUS_PER_NODE, NODES, ZERO3_OFFLOADS, [True, False]):
            args = {
                "total_params": p,
                "largest_layer_params": lp,
                "num_gpus_per_node": gpn,
                "num_nodes": nodes,
                "cpu_offload": off,
                "cpu_offload_params": off_p,
                "zero_init": init,
                "additional_buffer_factor": BUFFER_FACTOR,
            }
            cpu, gpu, llm = funcs["estimate_zero3_model_states_mem_needs"](**args)
            assert (cpu, gpu, llm) == integer_zero3(p, lp, gpn, nodes, off, off_p, init), (mid, args, cpu, gpu, llm)
            cases.append(
                {
                    "function": "estimate_zero3_model_states_mem_needs",
                    "model": mid,
                    "args": args,
                    "cpu_bytes": cpu,
                    "gpu_bytes": gpu,
                    "largest_layer_memory": llm,
                }
            )

    out = {
        "deepspeed": version,
        "sources": sources,
        "source_sha256": {
            rel: hashlib.sha256((root / rel).read_bytes()).hexdigest() for rel in sorted(set(FUNCTIONS.values()))
        },
        "models": models,
        "cases": cases,
    }
    OUT_JSON.parent.mkdir(parents=True, exist_ok=True)
    OUT_JSON.write_text(render(out))
    OUT_SRC.write_text(
        f"# Verbatim source of DeepSpeed {version}'s ZeRO model-state memory estimators, extracted from the sdist\n"
        "# by benches/torch/deepspeed_estimates.py (Apache-2.0, (c) Microsoft Corporation / DeepSpeed Team).\n\n"
        + "\n\n".join(texts)
    )
    print(f"deepspeed {version}: {len(cases)} cases over {len(models)} models -> {OUT_JSON.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
