#!/usr/bin/env python3
"""Where the host time of one eager call goes, per backend (issue 14 item 7). ~20 s on one GPU.

    PYTHONPATH=python python tools/host_cost_profile.py OUT.json [--backends torch,triton,...] [--calls 2000]

For every runnable backend: the bench's launch-overhead figures (vector_add N=1024, validated BoundOp and
raw callable, µs per call, tilerosetta.bench.runner.launch_overhead), then cProfile over --calls validated
calls, printing the functions with the most own time. The figures to publish are the bench's; the
profile (which slows every Python call) only says where the time goes.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats

import torch

from tilerosetta import backends
from tilerosetta.bench.runner import LAUNCH_CASE, launch_overhead
from tilerosetta.specs import get_spec
from tilerosetta.harness import make_case_tensors


def profile_calls(backend, device: str, calls: int, top: int) -> list[dict]:
    spec = get_spec("vector_add")
    dtype = torch.float32 if torch.float32 in backend.dtypes(spec.name) else backend.dtypes(spec.name)[0]
    inputs, outputs = make_case_tensors(spec, LAUNCH_CASE, dtype, device, 0)
    args = [*inputs.values(), *outputs.values()]
    bound = backend.op(spec.name)
    for _ in range(50):
        bound(*args)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        bound(*args)
    prof.disable()
    if device == "cuda":
        torch.cuda.synchronize()
    stats = pstats.Stats(prof, stream=io.StringIO())
    rows = []
    for (file, line, fn), (_cc, nc, tt, ct, _callers) in stats.stats.items():
        rows.append({"where": f"{file.rsplit('/', 2)[-1] if '/' in file else file}:{line}({fn})",
                     "calls_per_op": nc / calls, "own_us": tt * 1e6 / calls, "cum_us": ct * 1e6 / calls})
    return sorted(rows, key=lambda r: -r["own_us"])[:top]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--backends", default="torch,cutile_py,triton,tile_cpp,cutile_rs")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: a smoke run of the tool itself
    report = {"gpu": torch.cuda.get_device_name() if device == "cuda" else "none (CPU)", "torch": torch.__version__, "backends": {}}
    for name in args.backends.split(","):
        b = backends.get(name)
        ok, why = b.available()
        if not ok:
            report["backends"][name] = {"status": "unavailable", "reason": why}
            print(f"{name}: unavailable: {why}")
            continue
        try:
            rec = launch_overhead(b, device)
            rec["profile"] = profile_calls(b, device, args.calls, args.top)
        except Exception as exc:  # recorded, the next backend still runs
            rec = {"status": "error", "message": f"{type(exc).__name__}: {exc}"}
        report["backends"][name] = rec
        print(f"== {name}: validated {rec.get('bound_us', float('nan')):.1f} us, raw {rec.get('raw_us', float('nan')):.1f} us")
        for r in rec.get("profile", []):
            print(f"   {r['own_us']:7.2f} own {r['cum_us']:7.2f} cum  x{r['calls_per_op']:.0f}  {r['where']}")
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
