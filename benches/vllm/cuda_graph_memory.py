#!/usr/bin/env python3
"""CUDA graph memory on a real GPU, the way vLLM 0.33 captures graphs, without vLLM.

vLLM 0.33 cannot run on the lent GPU machines (it needs torch 2.14 and a 336 MB wheel; the machines reach no
registry), so this script measures the quantity its `capture_model` logs ("Graph capturing finished in N secs,
took X GiB") on a stand-in for the model, with torch alone:

1. `nodes`: the CUDA driver's device memory per instantiated graph as a function of its kernel nodes (graphs of
   k in-place adds, k = 1..256, 256 graphs each): used device memory (cudaMemGetInfo) minus torch's reserved
   pool, before and after. This is the term the memory model calls the driver's cost
   (crates/memory/src/vllm/graphs.rs `CUDA_GRAPH_BYTES_PER_GRAPH`, `CUDA_GRAPH_BYTES_PER_NODE`), which no vLLM
   source states.
2. `piecewise`: a Llama-shaped model (default Llama-3.1-8B: 32 layers, hidden 4096, intermediate 14336, 32/8
   heads of 128, bf16, random weights) split at attention as vLLM's PIECEWISE mode splits it: `layers + 1`
   graphs per capture size, the sizes vLLM captures for 256 sequences (1, 2, 4, 8..248 by 8, 256..512 by 16:
   51), largest first, one shared graph pool, an eager warm-up before each capture, the caching allocator
   emptied only before the first reading (capture_model's own measurement).
3. `full`: FULL graphs over every layer (the pieces plus a decode attention stand-in, SDPA over a 64-token
   cache per request) at the 35 decode sizes (1..256), in the same pool.

Each part reports the device bytes, torch's share, the driver's share (the rest), graph counts and the kernel
nodes per graph (cudaGraphGetNodes through cuda-bindings where present, else torch.profiler's kernel count of
an eager run). The pieces are eager torch ops, not vLLM's inductor kernels: eager has more kernel nodes per
piece than inductor's fused ones, so part 2 bounds vLLM's driver share from above on the same GPU and driver,
and part 1 gives the per-node slope to scale it by.

Usage (on the GPU machine): python3 benches/vllm/cuda_graph_memory.py OUT.json [--layers N] [--hidden H] ...
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--intermediate", type=int, default=14336)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--max-num-seqs", type=int, default=256)
    ap.add_argument("--parts", default="nodes,piecewise,full")
    ap.add_argument("--node-counts", default="1,4,16,64,256", help="kernels per graph in part 1")
    ap.add_argument("--graphs", type=int, default=256, help="graphs per node count in part 1")
    a = ap.parse_args(argv)

    import torch
    import torch.nn.functional as F

    dev = torch.device("cuda")
    torch.cuda.init()
    result: dict = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "driver_total_bytes": torch.cuda.mem_get_info()[1],
        "model": vars(a),
    }

    def save() -> None:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)

    def used() -> int:
        free, total = torch.cuda.mem_get_info()
        return total - free

    def reading() -> tuple[int, int]:
        torch.cuda.synchronize()
        return used(), torch.cuda.memory_reserved()

    def delta(before: tuple[int, int], after: tuple[int, int]) -> dict:
        d_used = after[0] - before[0]
        d_torch = after[1] - before[1]
        return {"device_bytes": d_used, "torch_bytes": d_torch, "driver_bytes": d_used - d_torch}

    def node_count(fn) -> dict:
        """Kernel nodes of one captured graph of fn(), by the driver if it can say, else by the profiler."""
        try:
            from cuda.bindings import runtime as cudart

            g = torch.cuda.CUDAGraph(keep_graph=True)
            with torch.cuda.graph(g):
                fn()
            raw = g.raw_cuda_graph()
            err, _, n = cudart.cudaGraphGetNodes(cudart.cudaGraph_t(init_value=raw), 0)
            if int(err) == 0:
                del g
                return {"nodes": int(n), "counted_by": "cudaGraphGetNodes"}
            why = f"cudaGraphGetNodes error {err}"
        except Exception as e:  # noqa: BLE001 - fall back to the profiler, say why
            why = repr(e)[:200]
        from torch.profiler import ProfilerActivity, profile

        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        return {"nodes": len(kernels), "counted_by": "torch.profiler kernels", "why_not_driver": why}

    parts = set(a.parts.split(","))
    side = torch.cuda.Stream()

    # ---- 1. driver bytes per graph by kernel nodes ----
    if "nodes" in parts:
        x = torch.zeros(1 << 16, device=dev)
        x.add_(1.0)
        rows = []
        n_graphs = a.graphs
        for k in [int(c) for c in a.node_counts.split(",")]:
            gc.collect()
            torch.cuda.empty_cache()
            before = reading()
            graphs = []
            pool = torch.cuda.graph_pool_handle()
            t0 = time.time()
            for _ in range(n_graphs):
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, pool=pool, stream=side):
                    for _ in range(k):
                        x.add_(1.0)
                graphs.append(g)
            after = reading()
            row = {"kernels_per_graph": k, "graphs": n_graphs, "secs": round(time.time() - t0, 3)}
            row.update(delta(before, after))
            row["driver_bytes_per_graph"] = row["driver_bytes"] / n_graphs
            del graphs
            gc.collect()
            torch.cuda.synchronize()
            row["device_bytes_after_release"] = used() - after[0]
            rows.append(row)
            print("nodes", row, flush=True)
        result["nodes"] = {"rows": rows}
        if len(rows) >= 2:  # least squares: bytes per graph = a + b * k
            n = len(rows)
            xs = [r["kernels_per_graph"] for r in rows]
            ys = [r["driver_bytes_per_graph"] for r in rows]
            mx, my = sum(xs) / n, sum(ys) / n
            b = sum((xi - mx) * (yi - my) for xi, yi in zip(xs, ys)) / sum((xi - mx) ** 2 for xi in xs)
            result["nodes"].update({"fit_bytes_per_graph": my - b * mx, "fit_bytes_per_node": b})
        save()

    if not parts & {"piecewise", "full"}:
        return 0

    # ---- the Llama-shaped model ----
    L, H, I = a.layers, a.hidden, a.intermediate
    nh, nkv, hd = a.heads, a.kv_heads, a.head_dim
    dt = torch.bfloat16
    max_t = min(2 * a.max_num_seqs, 512)
    base = reading()
    layers = []
    for _ in range(L):
        layers.append(
            {
                "wqkv": torch.empty((nh + 2 * nkv) * hd, H, device=dev, dtype=dt).normal_(0, 0.02),
                "wo": torch.empty(H, nh * hd, device=dev, dtype=dt).normal_(0, 0.02),
                "wgu": torch.empty(2 * I, H, device=dev, dtype=dt).normal_(0, 0.02),
                "wd": torch.empty(H, I, device=dev, dtype=dt).normal_(0, 0.02),
                "n1": torch.ones(H, device=dev, dtype=dt),
                "n2": torch.ones(H, device=dev, dtype=dt),
            }
        )
    # static input buffers, as vLLM's runner keeps them
    hid = torch.empty(max_t, H, device=dev, dtype=dt).normal_(0, 1)
    res = torch.empty(max_t, H, device=dev, dtype=dt).normal_(0, 1)
    attn_out = torch.empty(max_t, nh * hd, device=dev, dtype=dt).normal_(0, 1)
    kcache = torch.empty(a.max_num_seqs, nkv, 64, hd, device=dev, dtype=dt).normal_(0, 1)
    vcache = torch.empty_like(kcache).normal_(0, 1)
    result["weights_bytes"] = reading()[0] - base[0]

    def piece(i: int, t: int, a_in: torch.Tensor, r: torch.Tensor):
        """From layer i-1's attention output to layer i's qkv: what vLLM captures between attention ops."""
        if i > 0:
            w = layers[i - 1]
            h = F.linear(a_in, w["wo"])
            r = h + r
            h = F.rms_norm(r, (H,), w["n2"], 1e-5)
            gu = F.linear(h, w["wgu"])
            h = F.silu(gu[:, :I]) * gu[:, I:]
            h = F.linear(h, w["wd"])
            r = h + r
        if i < L:
            w = layers[i]
            h = F.rms_norm(r, (H,), w["n1"], 1e-5)
            return F.linear(h, w["wqkv"]), r
        return F.rms_norm(r, (H,), layers[-1]["n1"], 1e-5), r

    def attention(qkv: torch.Tensor, t: int) -> torch.Tensor:
        q = qkv[:, : nh * hd].view(t, nh, 1, hd)
        o = F.scaled_dot_product_attention(q, kcache[:t], vcache[:t], enable_gqa=True)
        return o.reshape(t, nh * hd)

    def forward_pieces(t: int) -> None:
        r = res[:t]
        a_in = attn_out[:t]
        for i in range(L + 1):
            out, r = piece(i, t, a_in, r)

    def forward_full(t: int):
        r = res[:t]
        a_in = attn_out[:t]
        for i in range(L + 1):
            out, r = piece(i, t, a_in, r)
            if i < L:
                a_in = attention(out, t)
        return out

    sizes = [1, 2, 4] + list(range(8, min(max_t, 255) + 1, 8)) + list(range(256, max_t + 1, 16))
    sizes = sorted(set(s for s in sizes if s <= max_t), reverse=True)
    full_sizes = [s for s in sizes if s <= a.max_num_seqs]
    result["capture_sizes"] = {"piecewise": len(sizes), "full": len(full_sizes), "largest": max_t}
    pool = torch.cuda.graph_pool_handle()
    keep = []

    forward_pieces(8)
    forward_full(8)
    torch.cuda.synchronize()
    result["piece_nodes"] = {
        "first": node_count(lambda: piece(0, 8, attn_out[:8], res[:8])),
        "middle": node_count(lambda: piece(1, 8, attn_out[:8], res[:8])),
        "last": node_count(lambda: piece(L, 8, attn_out[:8], res[:8])),
        "full_graph": node_count(lambda: forward_full(8)),
    }
    save()
    print("nodes per piece", result["piece_nodes"], flush=True)

    gc.collect()
    torch.cuda.empty_cache()
    start = reading()
    if "piecewise" in parts:
        t0 = time.time()
        for t in sizes:
            forward_pieces(t)  # the eager warm-up vLLM runs before each capture
            r = res[:t]
            a_in = attn_out[:t]
            for i in range(L + 1):
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, pool=pool, stream=side):
                    out, r = piece(i, t, a_in, r)
                keep.append(g)
            del out, r  # vLLM keeps only weak references to graph outputs, so the pool reuses their blocks
        after = reading()
        row = delta(start, after)
        row.update({"graphs": len(sizes) * (L + 1), "secs": round(time.time() - t0, 2)})
        row["driver_bytes_per_graph"] = row["driver_bytes"] / row["graphs"]
        row["driver_bytes_per_graph_layer"] = row["driver_bytes"] / (len(sizes) * L)
        result["piecewise"] = row
        save()
        print("piecewise", row, flush=True)
        start = after
    if "full" in parts:
        t0 = time.time()
        for t in full_sizes:
            forward_full(t)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool, stream=side):
                out = forward_full(t)
            keep.append(g)
            del out
        after = reading()
        row = delta(start, after)
        row.update({"graphs": len(full_sizes), "secs": round(time.time() - t0, 2)})
        row["driver_bytes_per_graph"] = row["driver_bytes"] / row["graphs"]
        row["driver_bytes_per_graph_layer"] = row["driver_bytes"] / (len(full_sizes) * L)
        result["full"] = row
        save()
        print("full", row, flush=True)
    # replay one of each, so a broken capture shows here rather than in the figures
    for g in keep[:: max(1, len(keep) // 8)]:
        g.replay()
    torch.cuda.synchronize()
    result["replayed"] = True
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
