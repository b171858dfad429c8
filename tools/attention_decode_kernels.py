#!/usr/bin/env python3
"""Where a decode attention call's GPU time goes, per kernel and per backend (bench/GAPS.md, decode attention).

    PYTHONPATH=python python tools/attention_decode_kernels.py OUT.json [--backends torch,cutile_py,...]
        [--batches 1,16,64] [--calls 20]

For the bench's decode case (B x H32 Hkv8 S1 Sk4096 D128, causal, bf16) and each backend: the call timed
with the project's timer (CUDA graph, L2 flushed), then `calls` eager calls under torch.profiler, the GPU time
of every kernel they launched averaged per call (a split-KV backend shows its split and combine kernels
apart). torch is F.scaled_dot_product_attention with enable_gqa, as a user calls it. Not a published figure:
the bench is; this says which kernel the time is in.
"""
from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from tilerosetta import backends
from tilerosetta.bench.timing import time_gpu

H, HKV, SK, D = 32, 8, 4096, 128


def callable_for(name: str, q, k, v, out):
    if name == "torch":
        # One query against the whole cache: the end-aligned causal mask hides no key, so no mask is the same op.
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=False, enable_gqa=True)
    b = backends.get(name)
    ok, why = b.is_available()
    if not ok:
        raise RuntimeError(f"{name} unavailable here: {why}")
    raw = b.implementations()["attention"]
    return lambda: raw(q, k, v, out, causal=True, scale=None)


def kernels_per_call(fn, calls: int) -> list[dict]:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    per: dict[str, dict] = {}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        us = getattr(e, "device_time", None)
        if us is None:
            us = e.cuda_time
        r = per.setdefault(e.name, {"kernel": e.name[:160], "total_us": 0.0, "count": 0})
        r["total_us"] += us
        r["count"] += 1
    rows = [dict(r, us_per_call=r["total_us"] / calls, launches_per_call=r["count"] / calls) for r in per.values()]
    return sorted(rows, key=lambda r: -r["total_us"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--backends", default="torch,cutile_py,triton,tile_cpp,cutile_rs")
    p.add_argument("--batches", default="1,16,64")
    p.add_argument("--calls", type=int, default=20)
    a = p.parse_args()
    res = []
    for bsz in [int(x) for x in a.batches.split(",")]:
        gen = torch.Generator(device="cuda").manual_seed(0)
        q = torch.randn(bsz, H, 1, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        k = torch.randn(bsz, HKV, SK, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        v = torch.randn(bsz, HKV, SK, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        out = torch.empty_like(q)
        for name in [x for x in a.backends.split(",") if x]:
            row = {"backend": name, "B": bsz}
            try:
                fn = callable_for(name, q, k, v, out)
                fn()  # compiles
                torch.cuda.synchronize()
                t = time_gpu(fn, warmup_ms=10, rep_ms=60)
                row.update(graph_us=t.median_ms * 1e3, p20_us=t.p20_ms * 1e3, p80_us=t.p80_ms * 1e3, method=t.method)
                row["kernels"] = kernels_per_call(fn, a.calls)
            except Exception as exc:  # one backend's failure must not lose the others' rows
                row["error"] = f"{type(exc).__name__}: {exc}"[:400]
            res.append(row)
            line = f"B{bsz:<3} {name:10s} "
            if "error" in row:
                print(line + row["error"], flush=True)
                continue
            print(line + f"graph {row['graph_us']:7.1f} us ({row['p20_us']:.1f}-{row['p80_us']:.1f})", flush=True)
            for kr in row["kernels"][:4]:
                print(f"      {kr['us_per_call']:7.1f} us x{kr['launches_per_call']:.0f}  {kr['kernel'][:100]}", flush=True)
        del q, k, v, out
        torch.cuda.empty_cache()
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
