#!/usr/bin/env python3
"""Where a B=1 decode step's GPU time goes, and how fast each decode GEMV is (issue 14 item 5). ~3 min.

    PYTHONPATH=python python tools/decode_profile.py OUT.json [--backends torch,triton,best] [--layers 8]
        [--ctx 4096] [--stream-sweep] [--attention-sweep triton] [--step-configs ...] [--skip-gemv] [--skip-model]

1. GEMV table: every weight of the model's B=1 decode step at M = 1 (q|k|v 4096x6144, o 4096x4096,
   gate|up 4096x28672, down 14336x4096, LM head 4096x128256), timed with the project's timer (CUDA graph,
   L2 flushed, median and p20-p80), as each contestant is called: torch.mm on our (K, N) weight,
   F.linear on the (N, K) weight transformers keeps, and every backend's matmul op; % of the copy
   bandwidth measured in the same process.
2. --stream-sweep / --attention-sweep: Triton's small-M matmul configs on those weights, and a backend's
   attention configs on a decode step, each timed with stream_us (distinct weights or caches back to back
   in one CUDA graph, as the step runs them): where Triton's decode tuned entries and defaults come from.
3. Decode profile: the 8-layer model on each --backends entry, one eager decode step under torch.profiler:
   GPU time summed per kernel name, against the CUDA-graph step time and the weight-streaming limit; then
   the eager step's wall time and its host time per function (cProfile): why eager decode is host-bound.
The figures that are published come from `tilerosetta e2e` and the bench; this says where time goes.
"""
from __future__ import annotations

import argparse
import json
import sys

import torch
import torch.nn.functional as F

from tilerosetta import backends
from tilerosetta.bench import ceilings
from tilerosetta.bench.timing import time_gpu

# The weights of one decoder layer as the model multiplies them (q|k|v and gate|up fused), and the LM head.
MODEL_SHAPES = {"qkv": (4096, 6144), "o": (4096, 4096), "gate|up": (4096, 28672), "down": (14336, 4096),
                "lm_head": (4096, 128256)}


def _t(fn):
    fn()
    t = time_gpu(fn, warmup_ms=10, rep_ms=60)
    return {"us": t.median_ms * 1e3, "p20_us": t.p20_ms * 1e3, "p80_us": t.p80_ms * 1e3, "method": t.method}


def gemv_table(names, copy_gbps, log):
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(0)
    for label, (k, n) in MODEL_SHAPES.items():
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16, generator=gen)
        w_nk = (torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=gen) * 0.02)
        w_kn = w_nk.t().contiguous()
        out = torch.empty(1, n, device="cuda", dtype=torch.bfloat16)
        limit_us = w_kn.numel() * 2 / (copy_gbps * 1e3)
        cands = {"torch.mm(x, W_kn)": lambda: torch.mm(x, w_kn), "F.linear(x, W_nk)": lambda: F.linear(x, w_nk)}
        for name in names:
            b = backends.get(name)
            if b.is_available()[0] and "matmul" in b.implementations():
                op = b.op("matmul")
                cands[f"{name} matmul"] = (lambda op=op: op(x, w_kn, out))
        for cname, fn in cands.items():
            try:
                r = _t(fn)
            except Exception as exc:  # one failing contestant must not lose the table
                r = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            r.update(shape=label, K=k, N=n, contestant=cname, limit_us=limit_us)
            if "us" in r:
                r["pct_copy"] = 100 * limit_us / r["us"]
            rows.append(r)
            log(f"{label:8s} {cname:48s} " + (f"{r['us']:8.1f} us {r['pct_copy']:5.1f}%" if "us" in r else r["error"]))
    return rows


def stream_us(calls, reps=10):
    """GPU µs per call of `calls` (each on its own weight) captured back to back in one CUDA graph, as a
    decode step runs them: no L2 flush or event between kernels, and no weight is read twice in a row."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for c in calls:
            c()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for c in calls:
            c()
    g.replay()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / len(calls))
    times.sort()
    return times[len(times) // 2], times[len(times) // 5], times[(4 * len(times)) // 5]


def stream_sweep(copy_gbps, log):
    """Triton's small-M matmul configs on the model's M=1 weight shapes, timed with stream_us; torch.mm beside."""
    tb = backends.get("triton")
    raw = tb.implementations()["matmul"]
    space = [c for c in tb.config_space("matmul", torch.bfloat16)
             if (c["BLOCK_M"], c["num_warps"], c["GROUP_M"]) == (64, 4, 8) and c["BLOCK_K"] in (128, 256)
             and c["SPLIT_K"] in (0, 1, 2, 4) and c["num_stages"] in (3, 4, 5)]
    rows = []
    for label, (k, n) in MODEL_SHAPES.items():
        reps = max(2, min(12, int(5e8 // (2 * k * n))))
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        ws = [torch.randn(k, n, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(reps)]
        outs = [torch.empty(1, n, device="cuda", dtype=torch.bfloat16) for _ in range(reps)]
        limit_us = 2 * k * n / (copy_gbps * 1e3)
        cands = [("torch.mm", None, [lambda w=w: torch.mm(x, w) for w in ws]),
                 ("triton default", {}, [lambda w=w, o=o: raw(x, w, o) for w, o in zip(ws, outs)])]
        cands += [(",".join(f"{a}={b}" for a, b in c.items() if a not in ("BLOCK_M", "GROUP_M", "num_warps")), c,
                   [lambda w=w, o=o: raw(x, w, o) for w, o in zip(ws, outs)]) for c in space]
        for name, cfg, calls in cands:
            try:
                tb.set_config("matmul", torch.bfloat16, cfg or None)
                med, p20, p80 = stream_us(calls)
                r = {"us": med, "p20_us": p20, "p80_us": p80, "pct_copy": 100 * limit_us / med}
            except Exception as exc:
                r = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            r.update(shape=label, K=k, N=n, contestant=name, config=cfg, limit_us=limit_us, reps=reps)
            rows.append(r)
        tb.set_config("matmul", torch.bfloat16, None)
        ok = sorted((r for r in rows if r["shape"] == label and "us" in r), key=lambda r: r["us"])
        base = {r["contestant"]: r for r in ok}
        log(f"{label} K{k} N{n} (limit {limit_us:.1f} us): torch.mm {base['torch.mm']['us']:.1f}, "
            f"triton default {base['triton default']['us']:.1f}; best:")
        for r in ok[:6]:
            log(f"   {r['us']:7.1f} us ({r['p20_us']:.1f}-{r['p80_us']:.1f}) {r['pct_copy']:5.1f}%  {r['contestant']}")
        del ws, outs
        torch.cuda.empty_cache()
    return rows


def attention_sweep(copy_gbps, log, backend="triton"):
    """The backend's attention configs (the split-KV chunk's minimum among them, SPLIT_MIN_BLOCKS, where the
    space has it) on a B=1 decode step (H 32, Hkv 8, D 128, 4096 keys, causal), timed with stream_us."""
    b = backends.get(backend)
    raw = b.implementations()["attention"]
    reps = 24
    q = torch.randn(1, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
    kv = [(torch.randn(1, 8, 4096, 128, device="cuda", dtype=torch.bfloat16),
           torch.randn(1, 8, 4096, 128, device="cuda", dtype=torch.bfloat16)) for _ in range(reps)]
    outs = [torch.empty_like(q) for _ in range(reps)]
    calls = [lambda k=k, v=v, o=o: raw(q, k, v, o, causal=True, scale=None) for (k, v), o in zip(kv, outs)]
    limit_us = 2 * 8 * 4096 * 128 * 2 / (copy_gbps * 1e3)
    space = [c for c in b.config_space("attention", torch.bfloat16) if c.get("BLOCK_M") in (64, None)]
    sdpa = [lambda k=k, v=v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True) for k, v in kv]
    rows = [{"contestant": "sdpa", "us": stream_us(sdpa)[0]}]
    for cfg in [None] + space:
        try:
            b.set_config("attention", torch.bfloat16, cfg)
            med, p20, p80 = stream_us(calls)
            r = {"us": med, "p20_us": p20, "p80_us": p80}
        except Exception as exc:
            r = {"error": f"{type(exc).__name__}: {exc}"[:200]}
        r.update(contestant=",".join(f"{a}={v}" for a, v in cfg.items()) if cfg else "default", config=cfg)
        rows.append(r)
    b.set_config("attention", torch.bfloat16, None)
    ok = sorted((r for r in rows if "us" in r), key=lambda r: r["us"])
    log(f"decode attention B1 H32 Hkv8 Sk4096 D128 on {backend} (KV read limit {limit_us:.1f} us):")
    for r in ok[:8] + [r for r in ok if r["contestant"] in ("sdpa", "default")]:
        log(f"   {r['us']:7.1f} us  {r['contestant']}")
    return rows


def decode_profile(name, layers, ctx, copy_gbps, log):
    from tilerosetta.models.llama import LlamaConfig, LlamaModel, best_backends, random_state
    cfg = LlamaConfig(layers=layers)
    state = random_state(cfg, 0, torch.bfloat16, "cuda")
    choice = best_backends(device_type="cuda") if name == "best" else None
    model = LlamaModel(cfg, state, name, choice=choice)
    del state
    model.prepare(ctx + 1)
    cache = model.new_cache(1, ctx)
    tok = torch.zeros(1, 1, dtype=torch.long, device="cuda")

    def step():
        cache["len"] = ctx - 1
        model.forward(tok, cache, last_only=True)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            step()
        torch.cuda.synchronize()
    kern = {}
    for e in prof.key_averages():
        if e.device_type.name == "CUDA" or getattr(e, "self_device_time_total", 0) > 0:
            us = getattr(e, "self_device_time_total", 0) / 3
            if us > 0:
                kern[e.key] = {"us": us, "calls": e.count / 3}
    graph_ms = stream_us([step], reps=30)[0] / 1e3
    limit_ms = model.weight_bytes() / (copy_gbps * 1e6)
    total = sum(v["us"] for v in kern.values())
    eager_ms, host = eager_host(step)
    log(f"== {name}: graph step {graph_ms:.3f} ms, kernels {total / 1e3:.3f} ms, limit {limit_ms:.3f} ms "
        f"({100 * limit_ms / graph_ms:.0f}% of limit); eager step {eager_ms:.3f} ms")
    log(f"   eager step's host time by function (cProfile, us per step, own / cumulative, calls per step):")
    for row in host[:14]:
        log(f"   {row['own_us']:9.1f} {row['cum_us']:9.1f}  {row['calls']:6.1f}x  {row['function']}")
    for k_, v in sorted(kern.items(), key=lambda kv: -kv[1]["us"])[:25]:
        log(f"   {v['us']:9.1f} us  {v['calls']:5.1f}x  {k_[:110]}")
    # The kernels of the last profiled step in launch order: layer 0's sequence and the LM head's.
    evs = sorted((e for e in prof.events() if e.device_type.name == "CUDA"), key=lambda e: e.time_range.start)
    per_step = len(evs) // 3
    seq = [(e.name[:60], e.time_range.elapsed_us()) for e in evs[-per_step:]]
    log(f"   one step: {per_step} kernels; the first 16 and the last 4 in order (us):")
    for n_, us in seq[:16] + [("...", 0.0)] + seq[-4:]:
        log(f"      {us:8.1f}  {n_}")
    return {"backend": name, "graph_ms": graph_ms, "kernel_ms": total / 1e3, "limit_ms": limit_ms,
            "eager_ms": eager_ms, "eager_host": host[:40], "where": model.where, "kernels": kern, "sequence": seq}


def eager_host(step, steps=10):
    """(ms per eager step, wall with a sync per step; [{function, own_us, cum_us, calls} per step by own time]
    from cProfile over `steps` more): where an eager decode step's host time goes (issue 14 item 7)."""
    import cProfile
    import pstats
    import time

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    eager_ms = (time.perf_counter() - t0) * 1e3 / steps
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    prof.disable()
    rows = []
    for (file, line, fn), (_cc, calls, own, cum, _callers) in pstats.Stats(prof).stats.items():
        where = f"{file.rsplit('/', 1)[-1]}:{line}({fn})" if file != "~" else fn
        rows.append({"function": where, "own_us": own * 1e6 / steps, "cum_us": cum * 1e6 / steps,
                     "calls": calls / steps})
    return eager_ms, sorted(rows, key=lambda r: -r["own_us"])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--backends", default="torch,triton,best")
    p.add_argument("--gemv-backends", default="triton,cutile_py,tile_cpp,cutile_rs,cute_dsl")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--ctx", type=int, default=4096)
    p.add_argument("--skip-model", action="store_true")
    p.add_argument("--stream-sweep", action="store_true", help="Triton small-M configs on the model's M=1 shapes, "
                   "timed back to back in one graph (how a decode step runs them)")
    p.add_argument("--skip-gemv", action="store_true")
    p.add_argument("--attention-sweep", default="", help="backends whose decode attention configs to sweep")
    p.add_argument("--step-configs", default="", help="Triton configs to profile the step with, one variant per "
                   "';'-separated item of op:KEY=V[,KEY=V], each forced for every call of that op (set_config), e.g. "
                   "'matmul:PREFETCH=16;attention:SPLIT_MIN_BLOCKS=2' (a variant 'default' profiles the tree's own)")
    a = p.parse_args(argv)

    def log(msg):
        print(msg, flush=True)

    copy_gbps = ceilings.measure_copy(torch.Generator(device="cuda").manual_seed(1), 10, 60)[0]
    log(f"copy bandwidth {copy_gbps:.0f} GB/s")
    res = {"copy_gbps": copy_gbps, "decode": []}

    def save():  # after every stage: a later failure or timeout keeps what was measured
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)

    if not a.skip_gemv:
        res["gemv"] = gemv_table([s for s in a.gemv_backends.split(",") if s], copy_gbps, log)
        save()
    for name in [x for x in a.attention_sweep.split(",") if x]:
        res.setdefault("attention_sweep", {})[name] = attention_sweep(copy_gbps, log, name)
        save()
    if a.stream_sweep:
        res["stream_sweep"] = stream_sweep(copy_gbps, log)
        save()
    for item in [x.strip() for x in a.step_configs.split(";") if x.strip()]:
        op, _, kvs = item.partition(":")
        forced = {k: int(v) for k, v in (kv.split("=") for kv in kvs.split(",") if kv)} if kvs else None
        tb = backends.get("triton")
        try:
            if forced:
                tb.set_config(op, torch.bfloat16, forced)
            log(f"-- triton step with {item}")
            r = decode_profile("triton", a.layers, a.ctx, copy_gbps, log)
            res.setdefault("step_configs", []).append({"variant": item, **r})
        except Exception as exc:  # one variant's failure is its line; the next variant still runs
            log(f"-- {item}: failed: {type(exc).__name__}: {exc}")
        finally:
            if forced:
                tb.set_config(op, torch.bfloat16, None)
        torch.cuda.empty_cache()
        save()
    if not a.skip_model:
        for name in [s for s in a.backends.split(",") if s]:
            try:
                res["decode"].append(decode_profile(name, a.layers, a.ctx, copy_gbps, log))
            except Exception as exc:
                log(f"== {name}: failed: {type(exc).__name__}: {exc}")
            torch.cuda.empty_cache()
            save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
