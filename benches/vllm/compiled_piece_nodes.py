#!/usr/bin/env python3
"""Kernel nodes of one PIECEWISE graph when the piece is compiled by torch inductor, as vLLM 0.33 compiles it
(its default backend is inductor with custom ops off, so norms, activations and rotary embeddings become fused
Triton kernels; GEMMs stay cuBLAS), against the same piece in eager torch: the node count that scales the
driver's per-node cost measured by cuda_graph_memory.py. Llama-3.1-8B shapes by default; the rotary embedding is
included here (neox style on q and k), which the eager stand-in leaves out.
Usage (on the GPU machine): python3 benches/vllm/compiled_piece_nodes.py OUT.json
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    import torch
    import torch.nn.functional as F
    from cuda.bindings import runtime as cudart

    out = argv[0]
    H, I, nh, nkv, hd = 4096, 14336, 32, 8, 128
    dev, dt = torch.device("cuda"), torch.bfloat16
    w = {
        "wqkv": torch.randn((nh + 2 * nkv) * hd, H, device=dev, dtype=dt) * 0.02,
        "wo": torch.randn(H, nh * hd, device=dev, dtype=dt) * 0.02,
        "wgu": torch.randn(2 * I, H, device=dev, dtype=dt) * 0.02,
        "wd": torch.randn(H, I, device=dev, dtype=dt) * 0.02,
        "n1": torch.ones(H, device=dev, dtype=dt),
        "n2": torch.ones(H, device=dev, dtype=dt),
    }
    inv = 1.0 / (500000 ** (torch.arange(0, hd, 2, device=dev, dtype=torch.float32) / hd))
    cos_sin = torch.cat([torch.cos(torch.arange(8192, device=dev)[:, None] * inv),
                         torch.sin(torch.arange(8192, device=dev)[:, None] * inv)], dim=-1)

    def rope(x, pos, n):
        t = x.shape[0]
        x = x.view(t, n, hd).float()
        cs = cos_sin[pos][:, None, :]
        c, s = cs[..., : hd // 2], cs[..., hd // 2 :]
        x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(dt).view(t, n * hd)

    def piece(a_in, r, pos):
        h = F.linear(a_in, w["wo"])
        r = h + r
        h = F.rms_norm(r, (H,), w["n2"], 1e-5)
        gu = F.linear(h, w["wgu"])
        h = F.silu(gu[:, :I]) * gu[:, I:]
        h = F.linear(h, w["wd"])
        r = h + r
        h = F.rms_norm(r, (H,), w["n1"], 1e-5)
        qkv = F.linear(h, w["wqkv"])
        q, k, v = qkv.split([nh * hd, nkv * hd, nkv * hd], dim=-1)
        return rope(q, pos, nh), rope(k, pos, nkv), v, r

    def nodes(fn, *args) -> int:
        for _ in range(3):
            fn(*args)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph(keep_graph=True)
        with torch.cuda.graph(g):
            fn(*args)
        err, _, n = cudart.cudaGraphGetNodes(cudart.cudaGraph_t(init_value=g.raw_cuda_graph()), 0)
        assert int(err) == 0, err
        return int(n)

    compiled = torch.compile(piece, dynamic=False)
    res = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "rows": []}
    for t in (1, 8, 256, 512):
        a_in = torch.randn(t, nh * hd, device=dev, dtype=dt)
        r = torch.randn(t, H, device=dev, dtype=dt)
        pos = torch.arange(t, device=dev)
        row = {"tokens": t, "eager_nodes": nodes(piece, a_in, r, pos), "inductor_nodes": nodes(compiled, a_in, r, pos)}
        res["rows"].append(row)
        print(row, flush=True)
        with open(out, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
