#!/usr/bin/env python3
"""Measure the activation memory of real training steps (forward + backward) on CPU with PyTorch's own accounting.

Writes tests/fixtures/torch/activations-cpu.json so the planner's activation model (issue 12) can be compared
against what autograd actually keeps. Three figures per case:

- saved_bytes: the storages autograd saves for backward during the forward, seen through
  torch.autograd.graph.saved_tensors_hooks (pack hook), deduplicated by untyped storage, excluding storages of model
  parameters and buffers. Split by region with forward pre/post hooks on each decoder layer. Under non-reentrant
  gradient checkpointing the checkpoint saves its positional inputs through the same hooks (SavedTensor), so the
  retained layer input is counted; the tensors recomputed in backward are not (they are not alive during forward).
- peak_bytes: the peak of live CPU tensor memory during forward + backward above the level before the forward,
  from torch.profiler memory events (cumulative sum of the allocator's deltas in time order), with the parameter
  gradients allocated beforehand (zeroed, not None) so the peak is activations plus backward temporaries only.
  Cross-checked with a TorchDispatchMode that tracks op-output storages (peak_bytes_dispatch), which cannot see
  allocations made inside a kernel and is therefore a lower bound.
- The same figures for GPT-2 blocks next to Korthikanti et al. 2022, eq. (1): s*b*h*(34 + 5*a*s/h) bytes per layer.

Trade-off: one process, cases in sequence, small random-init models, so the whole run fits on 2 CPU cores in minutes;
absolute sizes are small but every figure is per element and scales with b, s, h, a, intermediate and vocab.

Usage: python benches/torch/measure_activations.py [--out PATH] [--only NAME_SUBSTRING] [--quick]
"""

import argparse
import gc
import json
import os
import platform
import sys
import time
import warnings

import torch
import transformers
import peft
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}

# Llama configs: small so that 30 cases x 3 training steps fit in ~20 min on 2 shared cores. "B" has vocab 32000 so
# the logits/loss term is larger than the layers; "A" and "C" use GQA (kv heads 2).
LLAMA_CONFIGS = {
    "A": dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2,
              intermediate_size=688, vocab_size=4096, max_position_embeddings=1024),
    "B": dict(hidden_size=512, num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=8,
              intermediate_size=1376, vocab_size=32000, max_position_embeddings=1024),
    "C": dict(hidden_size=384, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
              intermediate_size=1024, vocab_size=8192, max_position_embeddings=1024),
}

LORA_QV = ["q_proj", "v_proj"]
LORA_ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def lora(r, targets, dropout):
    return {"r": r, "alpha": 2 * r, "dropout": dropout, "target_modules": targets}


# (config, dtype, attn, checkpointing, lora-or-None, b, s[, dropout kernel, default "cpu"; see GPT2_CASES])
LLAMA_CASES = [
    ("A", "bf16", "sdpa", False, None, 2, 256),
    ("A", "bf16", "eager", False, None, 2, 256),
    ("A", "fp32", "sdpa", False, None, 2, 256),
    ("A", "fp32", "eager", False, None, 2, 256),
    ("A", "bf16", "sdpa", True, None, 2, 256),
    ("A", "bf16", "eager", True, None, 2, 256),
    ("A", "fp32", "sdpa", True, None, 2, 256),
    ("A", "bf16", "sdpa", False, None, 1, 128),
    ("A", "bf16", "sdpa", False, None, 4, 128),
    ("A", "bf16", "sdpa", False, None, 1, 512),
    ("A", "bf16", "eager", False, None, 1, 512),
    ("A", "bf16", "eager", False, None, 4, 256),
    ("A", "bf16", "sdpa", False, lora(8, LORA_QV, 0.0), 2, 256),
    ("A", "bf16", "sdpa", False, lora(8, LORA_QV, 0.05), 2, 256),
    ("A", "bf16", "sdpa", False, lora(16, LORA_ALL, 0.0), 2, 256),
    ("A", "bf16", "sdpa", False, lora(16, LORA_ALL, 0.05), 2, 256),
    ("A", "bf16", "sdpa", False, lora(16, LORA_ALL, 0.05), 2, 256, "native"),
    ("A", "bf16", "eager", False, lora(8, LORA_QV, 0.05), 2, 256),
    ("A", "bf16", "sdpa", True, lora(16, LORA_ALL, 0.05), 2, 256),
    ("A", "fp32", "sdpa", False, lora(8, LORA_ALL, 0.0), 2, 256),
    ("B", "bf16", "sdpa", False, None, 1, 256),
    ("B", "bf16", "sdpa", False, None, 2, 512),
    ("B", "bf16", "eager", True, None, 2, 256),
    ("B", "fp32", "sdpa", False, None, 1, 256),
    ("B", "bf16", "sdpa", False, lora(16, LORA_ALL, 0.05), 2, 256),
    ("B", "bf16", "sdpa", True, lora(8, LORA_QV, 0.0), 4, 128),
    ("C", "bf16", "sdpa", False, None, 2, 256),
    ("C", "bf16", "eager", False, None, 2, 128),
    ("C", "bf16", "sdpa", False, lora(8, LORA_QV, 0.0), 2, 256),
    ("C", "fp32", "eager", True, lora(16, LORA_ALL, 0.05), 1, 512),
]

# GPT-2 blocks for Korthikanti et al. 2022: 16-bit, eager attention, dropout 0.1 everywhere (GPT2Config defaults),
# n_inner = 4h. "gelu_new" is GPT2Config's default (a Python tanh formula that saves several intermediates);
# "gelu_pytorch_tanh" is the fused kernel the paper's 8sbh GeLU term assumes. Dropout kernel: on CPU
# torch.nn.functional.dropout takes the composite path (input * scaled Bernoulli noise, the noise saved in the input
# dtype); on CUDA it calls native_dropout, which saves a bool mask (1 byte/element, the paper's assumption).
# "native" patches torch.nn.functional.dropout to call torch.native_dropout (the CUDA path, run by its CPU kernel).
# (h, a, layers, b, s, activation, dropout kernel)
GPT2_CASES = [
    (256, 8, 2, 2, 256, "gelu_new", "cpu"),
    (256, 4, 2, 1, 512, "gelu_new", "cpu"),
    (512, 8, 2, 2, 128, "gelu_new", "cpu"),
    (384, 12, 2, 4, 128, "gelu_new", "cpu"),
    (512, 16, 2, 1, 256, "gelu_new", "cpu"),
    (256, 8, 2, 2, 256, "gelu_pytorch_tanh", "cpu"),
    (256, 8, 2, 2, 256, "gelu_pytorch_tanh", "native"),
    (256, 4, 2, 1, 512, "gelu_pytorch_tanh", "native"),
    (512, 8, 2, 2, 128, "gelu_pytorch_tanh", "native"),
    (384, 12, 2, 4, 128, "gelu_pytorch_tanh", "native"),
    (512, 16, 2, 1, 256, "gelu_pytorch_tanh", "native"),
]
GPT2_VOCAB = 4096

# Cases whose layer-0 (and layer-1) saved tensors are listed under "breakdown".
BREAKDOWN_KEYS = {
    "llama-A-bf16-sdpa-full-b2-s256",
    "llama-A-bf16-sdpa-lora-r16-all-d0.05-b2-s256",
    "llama-A-bf16-sdpa-lora-r16-all-d0.05-native_dropout-b2-s256",
    "gpt2-h256-a8-gelu_new-cpu_dropout-b2-s256",
    "gpt2-h256-a8-gelu_pytorch_tanh-native_dropout-b2-s256",
}


def case_key(kind, **k):
    if kind == "llama":
        m = "full" if k["lora"] is None else (
            f"lora-r{k['lora']['r']}-{'qv' if k['lora']['target_modules'] == LORA_QV else 'all'}"
            f"-d{k['lora']['dropout']}")
        ck = "-ckpt" if k["ckpt"] else ""
        nd = "-native_dropout" if k.get("drop") == "native" else ""
        return f"llama-{k['cfg']}-{k['dtype']}-{k['attn']}-{m}{nd}{ck}-b{k['b']}-s{k['s']}"
    return f"gpt2-h{k['h']}-a{k['a']}-{k['act']}-{k['drop']}_dropout-b{k['b']}-s{k['s']}"


_DROPOUT = torch.nn.functional.dropout


def _native_dropout(input, p=0.5, training=True, inplace=False):  # noqa: A002 - the F.dropout signature
    if not training or p == 0.0:
        return input
    return torch.native_dropout(input, p, True)[0]


class dropout_kernel:
    """Context: "native" routes torch.nn.functional.dropout to torch.native_dropout (bool mask, the CUDA path)."""

    def __init__(self, kind):
        self.kind = kind

    def __enter__(self):
        if self.kind == "native":
            torch.nn.functional.dropout = _native_dropout

    def __exit__(self, *exc):
        torch.nn.functional.dropout = _DROPOUT


def decoder_layers(model):
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer
    return [m for m in model.modules() if isinstance(m, (LlamaDecoderLayer, GPT2Block))]


def model_storages(model):
    ptrs = set()
    for t in list(model.parameters()) + list(model.buffers()):
        ptrs.add(t.untyped_storage().data_ptr())
    return ptrs


def storage_nbytes(t):
    return t.untyped_storage().nbytes()


def measure_saved(model, batch, breakdown):
    """One forward with a pack hook; returns the saved-bytes split and (optionally) the layer-0/1 tensor lists."""
    layers = decoder_layers(model)
    n_layers = len(layers)
    excluded = model_storages(model)
    region = ["other"]
    handles = []
    for i, layer in enumerate(layers):
        handles.append(layer.register_forward_pre_hook(lambda mod, args, i=i: region.__setitem__(0, i)))
        handles.append(layer.register_forward_hook(
            lambda mod, args, out, i=i: region.__setitem__(0, "logits_loss" if i == n_layers - 1 else "other")))
    seen = {}  # data_ptr -> (storage, region, nbytes); the storage reference keeps the address from being reused
    records = []  # every pack call, for the breakdown
    param_saves = [0]

    def pack(t):
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr in excluded:
            param_saves[0] += 1
            records.append((region[0], t, ptr, True, False))
            return t
        first = ptr not in seen
        if first:
            seen[ptr] = (st, region[0], st.nbytes())
        records.append((region[0], t, ptr, False, first))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(**batch)
    for h in handles:
        h.remove()
    per_layer = [0] * n_layers
    split = {"layers": 0, "logits_loss": 0, "other": 0}
    for _st, reg, nb in seen.values():
        if isinstance(reg, int):
            per_layer[reg] += nb
            split["layers"] += nb
        else:
            split[reg] += nb
    result = {
        "saved_bytes": sum(split.values()),
        "saved_bytes_layers": split["layers"],
        "saved_bytes_logits_loss": split["logits_loss"],
        "saved_bytes_other": split["other"],
        "saved_bytes_per_layer": per_layer[0],
        "saved_bytes_each_layer": per_layer,
        "saved_tensor_count": len(records),
        "saved_param_or_buffer_tensor_count": param_saves[0],
    }
    bd = None
    if breakdown:
        names = grad_fn_names(out.loss)
        bd = {}
        for want in (0, 1, "logits_loss"):
            rows = []
            for reg, t, ptr, is_param, first in records:
                if reg != want:
                    continue
                rows.append({
                    "shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
                    "tensor_bytes": t.numel() * t.element_size(), "storage_bytes": storage_nbytes(t),
                    "counted": (not is_param) and first,
                    "why_not_counted": "parameter/buffer" if is_param else (None if first else "storage already counted"),
                    "saved_by": sorted(names.get(ptr, [])),
                })
            bd[f"layer{want}" if isinstance(want, int) else want] = rows
    del seen, records
    return out, result, bd


def grad_fn_names(loss):
    """Map storage data_ptr -> {"NodeName._saved_attr"} by walking the autograd graph (not used under checkpointing,
    where reading a saved attribute would trigger recomputation)."""
    names = {}
    stack, visited = [loss.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in visited:
            continue
        visited.add(node)
        for attr in dir(node):
            if not attr.startswith("_saved_"):
                continue
            try:
                val = getattr(node, attr)
            except Exception:  # noqa: BLE001 - some saved attributes are not readable; skip them
                continue
            vals = val if isinstance(val, (tuple, list)) else [val]
            for v in vals:
                if isinstance(v, torch.Tensor):
                    names.setdefault(v.untyped_storage().data_ptr(), set()).add(f"{type(node).__name__}.{attr}")
        for nxt, _ in node.next_functions:
            stack.append(nxt)
    return names


def preallocate_grads(model):
    for p in model.parameters():
        if p.requires_grad and p.grad is None:
            p.grad = torch.zeros_like(p)
    model.zero_grad(set_to_none=False)


def grad_bytes(model):
    return sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)


def measure_peak_profiler(model, batch):
    """Peak of the cumulative allocator deltas from torch.profiler memory events over forward + backward."""
    from torch.profiler import ProfilerActivity, profile, record_function
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with record_function("measure_forward"):
            out = model(**batch)
        with record_function("measure_backward"):
            out.loss.backward()
        del out
    # prof.events() folds most memory events into the op that allocated; the raw kineto events keep every one.
    fwd_end = None
    mem = []
    threads = set()
    for e in prof.profiler.kineto_results.events():
        if e.name() == "measure_forward" and fwd_end is None:
            fwd_end = e.end_ns()
        elif e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU:
            mem.append((e.start_ns(), e.nbytes()))
            threads.add(e.start_thread_id())
    mem.sort(key=lambda x: x[0])
    level = peak = 0
    at_fwd_end = None
    peak_fwd = 0
    for ts, delta in mem:
        if fwd_end is not None and ts > fwd_end and at_fwd_end is None:
            at_fwd_end = level
        level += delta
        peak = max(peak, level)
        if fwd_end is not None and ts <= fwd_end:
            peak_fwd = max(peak_fwd, level)
    if at_fwd_end is None:
        at_fwd_end = level
    return {"peak_bytes": peak, "peak_forward_bytes": at_fwd_end, "peak_during_forward_bytes": peak_fwd,
            "end_level_bytes": level, "memory_events": len(mem), "memory_event_threads": len(threads)}


class StorageTracker(TorchDispatchMode):
    """Live bytes of storages created by ops (outputs) while active; frees seen through storage weak references."""

    def __init__(self, excluded):
        super().__init__()
        self.excluded = excluded
        self.live = {}  # data_ptr -> (StorageWeakRef, nbytes)
        self.level = 0
        self.peak = 0

    def sweep(self):
        dead = [p for p, (w, _) in self.live.items() if w.expired()]
        for p in dead:
            self.level -= self.live.pop(p)[1]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.sweep()
        flat = out if isinstance(out, (tuple, list)) else [out]
        for t in flat:
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                st = t.untyped_storage()
                ptr = st.data_ptr()
                if ptr == 0 or ptr in self.excluded:
                    continue
                cur = self.live.get(ptr)
                if cur is not None and not cur[0].expired():
                    continue
                nb = st.nbytes()
                self.live[ptr] = (StorageWeakRef(st), nb)
                self.level += nb
        self.peak = max(self.peak, self.level)
        return out


def measure_peak_dispatch(model, batch):
    excluded = model_storages(model)
    for p in model.parameters():
        if p.grad is not None:
            excluded.add(p.grad.untyped_storage().data_ptr())
    for t in batch.values():
        excluded.add(t.untyped_storage().data_ptr())
    tracker = StorageTracker(excluded)
    with tracker:
        out = model(**batch)
        tracker.sweep()
        fwd_end = tracker.level
        out.loss.backward()
        del out
    return {"peak_bytes_dispatch": tracker.peak, "peak_forward_bytes_dispatch": fwd_end}


def run_case(model, batch, breakdown, notes):
    t0 = time.time()
    model.train()
    # Step 1 (also the warm-up): saved tensors.
    out, saved, bd = measure_saved(model, batch, breakdown)
    out.loss.backward()
    del out
    gc.collect()
    preallocate_grads(model)
    gb = grad_bytes(model)
    peak = measure_peak_profiler(model, batch)
    model.zero_grad(set_to_none=False)
    gc.collect()
    peak.update(measure_peak_dispatch(model, batch))
    model.zero_grad(set_to_none=False)
    res = {**saved, **peak, "grad_bytes": gb, "wall_s": round(time.time() - t0, 2)}
    if peak["peak_bytes"] < peak["peak_bytes_dispatch"]:
        notes.append("profiler peak below the dispatch-mode lower bound: profiler memory events incomplete here")
    return res, bd


def llama_case(cfg_name, dtype, attn, ckpt, lcfg, b, s, drop="cpu", breakdown=False):
    cfg_in = dict(LLAMA_CONFIGS[cfg_name])
    torch.manual_seed(0)
    config = LlamaConfig(**cfg_in, attn_implementation=attn)
    model = LlamaForCausalLM(config)
    model.to(DTYPES[dtype])
    if ckpt:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # deprecated alias of activation_checkpointing_enable
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if lcfg is not None:
        lc = peft.LoraConfig(r=lcfg["r"], lora_alpha=lcfg["alpha"], lora_dropout=lcfg["dropout"],
                             target_modules=lcfg["target_modules"], task_type="CAUSAL_LM")
        model = peft.get_peft_model(model, lc)
    model.train()
    assert model.config._attn_implementation == attn, model.config._attn_implementation
    ids = torch.randint(0, cfg_in["vocab_size"], (b, s), generator=torch.Generator().manual_seed(1))
    batch = {"input_ids": ids, "labels": ids}
    key = case_key("llama", cfg=cfg_name, dtype=dtype, attn=attn, ckpt=ckpt, lora=lcfg, b=b, s=s, drop=drop)
    notes = []
    with dropout_kernel(drop):
        res, bd = run_case(model, batch, breakdown, notes)
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    n_all = sum(p.numel() for p in model.parameters())
    rec = {
        "key": key,
        "model": "LlamaForCausalLM", "config_name": cfg_name, "config_input": cfg_in,
        "config": json.loads(config.to_json_string(use_diff=False)),
        "dtype": dtype, "attn_implementation": attn, "gradient_checkpointing": ckpt,
        "method": "full" if lcfg is None else "lora", "lora": lcfg,
        "micro_batch": b, "seq_len": s, "dropout_kernel": drop, "trainable_params": n_train, "total_params": n_all,
        **res, "notes": notes,
    }
    h, inter, v = cfg_in["hidden_size"], cfg_in["intermediate_size"], cfg_in["vocab_size"]
    bsh, bsi, bsv = b * s * h, b * s * inter, b * s * v
    rec["per_layer_over_bsh"] = round(res["saved_bytes_per_layer"] / bsh, 4)
    rec["per_layer_over_bsi"] = round(res["saved_bytes_per_layer"] / bsi, 4)
    rec["last_layer_over_bsh"] = round(res["saved_bytes_each_layer"][-1] / bsh, 4)
    rec["logits_loss_over_bsv"] = round(res["saved_bytes_logits_loss"] / bsv, 4)
    return rec, bd


def korthikanti_bytes(s, b, h, a):
    # Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", eq. (1):
    # activations per transformer layer = s*b*h*(34 + 5*a*s/h) bytes (16-bit, dropout, no recomputation).
    return s * b * h * 34 + 5 * a * s * s * b


def gpt2_case(h, a, n_layer, b, s, act, drop, breakdown):
    torch.manual_seed(0)
    cfg_in = dict(n_embd=h, n_head=a, n_layer=n_layer, n_inner=4 * h, n_positions=1024, vocab_size=GPT2_VOCAB,
                  activation_function=act, resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1)
    config = GPT2Config(**cfg_in, attn_implementation="eager")
    model = GPT2LMHeadModel(config)
    model.to(torch.bfloat16)
    model.train()
    assert model.config._attn_implementation == "eager"
    ids = torch.randint(0, GPT2_VOCAB, (b, s), generator=torch.Generator().manual_seed(1))
    batch = {"input_ids": ids, "labels": ids}
    notes = []
    with dropout_kernel(drop):
        res, bd = run_case(model, batch, breakdown, notes)
    k = korthikanti_bytes(s, b, h, a)
    rec = {
        "key": case_key("gpt2", h=h, a=a, act=act, b=b, s=s, drop=drop),
        "model": "GPT2LMHeadModel", "config_input": cfg_in, "config": json.loads(config.to_json_string(use_diff=False)),
        "dtype": "bf16", "attn_implementation": "eager", "gradient_checkpointing": False, "method": "full",
        "lora": None, "micro_batch": b, "seq_len": s, "dropout_kernel": drop, **res,
        "korthikanti_per_layer_bytes": k,
        "per_layer_error_pct_vs_korthikanti": round(100.0 * (res["saved_bytes_per_layer"] - k) / k, 2),
        "last_layer_error_pct_vs_korthikanti": round(100.0 * (res["saved_bytes_each_layer"][-1] - k) / k, 2),
        "per_layer_over_bsh": round(res["saved_bytes_per_layer"] / (b * s * h), 4),
        "korthikanti_over_bsh": round(k / (b * s * h), 4),
        "notes": notes,
    }
    return rec, bd


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "..", "tests", "fixtures", "torch", "activations-cpu.json"))
    ap.add_argument("--only", default=None, help="run only cases whose key contains this substring")
    args = ap.parse_args()
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    transformers.logging.set_verbosity_error()
    t_start = time.time()
    cases, breakdown = [], {}
    jobs = []
    for c in LLAMA_CASES:
        cfg, dt, attn, ck, lc, b, s = c[:7]
        key = case_key("llama", cfg=cfg, dtype=dt, attn=attn, ckpt=ck, lora=lc, b=b, s=s,
                       drop=c[7] if len(c) > 7 else "cpu")
        jobs.append((key, lambda c=c, key=key: llama_case(*c, breakdown=key in BREAKDOWN_KEYS)))
    for c in GPT2_CASES:
        h, a, n, b, s, act, drop = c
        key = case_key("gpt2", h=h, a=a, act=act, b=b, s=s, drop=drop)
        jobs.append((key, lambda c=c, key=key: gpt2_case(*c, breakdown=key in BREAKDOWN_KEYS)))
    for key, job in jobs:
        if args.only and args.only not in key:
            continue
        rec, bd = job()
        cases.append(rec)
        if bd is not None:
            breakdown[key] = bd
        print(f"{key}: saved/layer0={rec['saved_bytes_per_layer']} ({rec['per_layer_over_bsh']} bsh) "
              f"logits_loss={rec['saved_bytes_logits_loss']} saved={rec['saved_bytes']} peak={rec['peak_bytes']} "
              f"peak_dispatch={rec['peak_bytes_dispatch']} fwd_end={rec['peak_forward_bytes']} "
              f"wall={rec['wall_s']}s", flush=True)
        gc.collect()
    doc = {
        "schema": "optimizer/torch-activations-cpu/1",
        "generated_by": "benches/torch/measure_activations.py",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
                     "python": platform.python_version()},
        "machine": {"platform": platform.platform(), "processor": platform.processor(),
                    "torch_threads": torch.get_num_threads()},
        "methods": {
            "saved_bytes": "torch.autograd.graph.saved_tensors_hooks pack hook during the forward; each saved "
                           "tensor's untyped storage counted once (by data_ptr, storage nbytes), storages of model "
                           "parameters and buffers excluded; regions from forward pre/post hooks on each decoder "
                           "layer: layers (pre-hook of layer i to its post-hook), logits_loss (after the last "
                           "layer's post-hook: final norm, lm_head, loss), other (embedding, rotary, mask). A storage "
                           "saved in several regions is counted in the first. Inputs (input_ids, saved by the "
                           "embedding) are counted in other.",
            "peak_bytes": "torch.profiler.profile(activities=[CPU], profile_memory=True): '[memory]' events sorted "
                          "by time, cumulative sum of cpu_memory_usage deltas from the profile start (the level "
                          "before the forward = 0), maximum over forward + backward. Parameter gradients are "
                          "allocated (zeroed) before the step, so grad_bytes is not part of the peak; backward "
                          "temporaries (including the new gradient before it is accumulated into .grad) are.",
            "peak_forward_bytes": "same cumulative sum at the end of the 'measure_forward' record_function range "
                                  "(live at the end of forward, before backward starts); peak_during_forward_bytes "
                                  "is the maximum reached inside the forward.",
            "peak_bytes_dispatch": "TorchDispatchMode tracking the untyped storages of op outputs (not parameters, "
                                   "gradients or inputs), freed when their StorageWeakRef expires (checked after "
                                   "every op); cannot see allocations inside a kernel, so a lower bound on the "
                                   "profiler figure.",
            "korthikanti_per_layer_bytes": "Korthikanti et al. 2022 eq. (1): s*b*h*(34 + 5*a*s/h) bytes per "
                                           "transformer layer, 16-bit activations, dropout masks 1 byte/element, "
                                           "no recomputation, no tensor/sequence parallelism.",
        },
        "notes": [
            "CPU only; CPU kernels choose what to save like CUDA ones for these ops except SDPA: on CPU "
            "scaled_dot_product_attention runs the flash-attention-for-CPU kernel (saves q, k, v, output and "
            "fp32 logsumexp); on CUDA the flash/mem-efficient kernels save the same tensor set.",
            "gradient_checkpointing_enable is a deprecated alias of activation_checkpointing_enable in "
            "transformers 5; it was called as written (use_reentrant=False).",
            "LoRA: the first decoder layer's input does not require grad (frozen embedding), so layer 0 saves "
            "less than later layers; saved_bytes_each_layer and last_layer_over_bsh show the steady-state layer.",
            "saved_bytes counts storages, so a saved view of a larger tensor counts the whole storage.",
            "Dropout: on CPU torch.nn.functional.dropout is the composite input*noise (noise saved in the input "
            "dtype, e bytes/element); on CUDA it is native_dropout (bool mask, 1 byte/element). dropout_kernel "
            "'native' routes F.dropout to torch.native_dropout's CPU kernel to reproduce what CUDA saves; 'cpu' is "
            "what a CPU run saves.",
            "Breakdown rows are every pack-hook call in the region in order; saved_by lists the autograd nodes that "
            "hold that storage (from walking the graph after the forward), counted=false marks a storage already "
            "counted or a parameter.",
        ],
        "cases": cases,
        "breakdown": breakdown,
        "total_wall_s": round(time.time() - t_start, 1),
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, default=str)
        f.write("\n")
    os.replace(tmp, args.out)
    print(f"wrote {args.out}: {len(cases)} cases in {doc['total_wall_s']} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
