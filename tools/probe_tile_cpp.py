#!/usr/bin/env python3
"""Probe every tile_cpp kernel variant on the GPU, each in its own subprocess.

A fault ("illegal memory access") poisons the CUDA context of its process, so each (op, dtype, config,
twin) runs in a fresh child: it checks the result against the spec's reference (torch) and, when
correct, times it (triton.testing.do_bench, which flushes L2 before each run). Children run one after
another, so timings do not overlap. One line per variant:

    op dtype config twin status time metric   (status: ok / FAULT / WRONG / ERROR / TIMEOUT)

twin: a16 (aligned body: TMA / 128-bit accesses), generic (the unaligned body, forced with a16=False), or for
the row ops, silu_and_mul and rope exact (the `_exact` body, compile-time extents: the case is cut to whole tiles).
metric: TFLOP/s for matmul/bmm/attention, TB/s (fewest bytes moved) for the others.

    python3 tools/probe_tile_cpp.py --out probe.jsonl --max-seconds 200 [--ops matmul,bmm] [--sanitize]

--sanitize reruns the first faulting variant under `compute-sanitizer --tool memcheck` and prints the
tail of its report. Imports only torch, triton and tilerosetta (what the GPU bundle has).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time

# The probe case of an op is its spec's first bench case, except these (smaller, so a float32 reference
# fits on the GPU, or a shape the table needs); a new op needs no entry. A row kernel whose tile has no chunk
# loop (TN > 4096, cpp/include/tr_kernels.h) runs rows of N = TN where the case's are wider.
CASES = {
    "vector_add": ({"N": 1 << 26}, {}),
    "rms_norm": ({"M": 16384, "N": 4096}, {}),
    "layer_norm": ({"M": 16384, "N": 4096}, {}),
    "attention": ({"B": 2, "H": 16, "S": 2048, "D": None}, {"causal": False}),  # D from the kernel
}


def case_of(op: str) -> tuple[dict, dict]:
    """(dims, params) of op's probe case: CASES, else the spec's first bench case."""
    from tilerosetta.specs import get_spec

    if op in CASES:
        return CASES[op]
    case = get_spec(op).bench_cases[0]
    return dict(case.dims), dict(case.params)
FLOP_OPS = ("matmul", "bmm", "attention")


# How each twin is asked for: mod.launch's a16 and host arguments (cpp/src/module.cpp, checked_plan).
TWINS = {"exact": (None, {"EXACT": 1}), "a16": (True, {}), "generic": (False, {})}


def _variants(ops):
    import tilerosetta_tile_cpp as mod
    from tilerosetta.backends.tile_cpp import has_exact_twin

    out = []
    for k in mod.kernels():
        if k["op"] in ops:
            for twin in TWINS if has_exact_twin(k["op"]) else ("a16", "generic"):
                out.append({"kernel": k["name"], "op": k["op"], "dtype": k["dtype"], "config": k["config"],
                            "twin": twin})
    return out


def _case(v):
    from tilerosetta.specs import Case

    dims, params = case_of(v["op"])
    dims = dict(dims)
    if "D" in dims and dims["D"] is None:
        dims["D"] = v["config"]["D"]
    from tilerosetta.backends.tile_cpp import row_loop_refusal

    if row_loop_refusal(v["op"], v["config"], dims):  # a wide tile has no chunk loop: rows of its own width
        dims["N"] = v["config"]["TN"]
    cfg = v["config"]
    if v["twin"] == "exact" and v["op"] == "rope":  # whole tiles: S a multiple of TS, D/2 of TD
        dims["S"] = max(cfg["TS"], dims["S"] // cfg["TS"] * cfg["TS"])
        dims["D"] = 2 * max(cfg["TD"], dims["D"] // 2 // cfg["TD"] * cfg["TD"])
    elif v["twin"] == "exact":  # whole tiles only: rows of exactly TN (silu: H a multiple of TN), M of TM
        dims["M"] = max(cfg["TM"], dims["M"] // cfg["TM"] * cfg["TM"])
        if "H" in dims:
            dims["H"] = max(cfg["TN"], dims["H"] // cfg["TN"] * cfg["TN"])
        else:
            dims["N"] = cfg["TN"]
    return Case(dims, dict(params))


def run_one(v: dict, do_time: bool = True) -> dict:
    """In the child: check one variant against the reference, then time it."""
    import torch
    import tilerosetta_tile_cpp as mod
    from tilerosetta.specs import get_spec, parse_dtype, rel_error

    spec, case = get_spec(v["op"]), _case(v)
    dtype = parse_dtype(v["dtype"])
    params = spec.full_params(case.params)
    gen = torch.Generator(device="cuda").manual_seed(0)
    inputs = spec.make_inputs(case, dtype, "cuda", gen)
    outputs = spec.make_outputs(case, dtype, "cuda")
    tensors = list(inputs.values()) + list(outputs.values())
    stream = torch.cuda.current_stream().cuda_stream
    res = dict(v, case=case.name)

    a16, host = TWINS[v["twin"]]
    res["function"] = mod.plan(v["kernel"], tensors, params, a16, host)["function"]

    def call():
        mod.launch(v["kernel"], tensors, params, stream, a16, host)

    call()
    torch.cuda.synchronize()
    torch.backends.cuda.matmul.allow_tf32 = False
    ref = spec.reference(params, **{n: t.float() for n, t in inputs.items()})
    errs = {n: rel_error(outputs[n], ref[n]) for n in spec.outputs}
    err = max(errs.values())
    res["rel_error"] = err
    res["tolerance"] = spec.tolerance(dtype)
    if not err <= res["tolerance"]:
        res["status"] = "WRONG"
        return res
    res["status"] = "ok"
    if do_time:
        import triton.testing

        ms = triton.testing.do_bench(call, warmup=25, rep=100)
        res["ms"] = ms
        if v["op"] in FLOP_OPS:
            res["tflops"] = spec.flops(case) / (ms * 1e-3) / 1e12
        else:
            res["tbps"] = spec.bytes_moved(case, dtype) / (ms * 1e-3) / 1e12
    return res


def _child_cmd(v, do_time=True):
    return [sys.executable, os.path.abspath(__file__), "--one", json.dumps(v)] + ([] if do_time else ["--no-time"])


def _run_child(v, timeout, do_time=True):
    t0 = time.time()
    try:
        p = subprocess.run(_child_cmd(v, do_time), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict(v, status="TIMEOUT", wall_s=round(time.time() - t0, 1))
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode == 0 and lines:
        res = json.loads(lines[-1])
    else:
        tail = (p.stderr or p.stdout).strip().splitlines()[-6:]
        text = " | ".join(tail)
        fault = any(s in text for s in ("illegal memory access", "illegal address", "ILLEGAL_ADDRESS",
                                        "misaligned address", "unspecified launch failure", "Xid"))
        res = dict(v, status="FAULT" if fault else "ERROR", error=text[-800:])
    res["wall_s"] = round(time.time() - t0, 1)
    return res


def _fmt(r):
    cfg = ",".join(f"{k}{v}" for k, v in r["config"].items())
    twin = r["twin"]
    t = f"{r['ms']:.4f}ms" if "ms" in r else "-"
    m = (f"{r['tflops']:.1f}TFLOP/s" if "tflops" in r else f"{r['tbps']:.2f}TB/s" if "tbps" in r else "-")
    extra = f" err={r['rel_error']:.2e}" if r.get("status") == "WRONG" else ""
    extra += f" ({r['error'][-200:]})" if r.get("error") else ""
    return f"{r['op']:12s} {r['dtype']:5s} {cfg:22s} {twin:7s} {r['status']:7s} {t:>11s} {m:>14s}{extra}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="write one JSON object per variant to this .jsonl file")
    ap.add_argument("--max-seconds", type=float, default=600, help="stop starting variants after this")
    ap.add_argument("--ops", default="", help="comma-separated ops (default: every op of the specs, the "
                                                "compute-bound ones, GEMM/attention, first)")
    ap.add_argument("--dtypes", default="", help="comma-separated dtypes (default: all)")
    ap.add_argument("--twins", choices=("all", *TWINS), default="all",
                    help="which body of each kernel: the _exact twin (row ops, silu_and_mul), the aligned _a16 "
                         "twin, the generic one, or all")
    ap.add_argument("--timeout", type=float, default=90, help="seconds per variant")
    ap.add_argument("--sanitize", action="store_true", help="memcheck the first faulting variant")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--no-time", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.one:  # child
        print(json.dumps(run_one(json.loads(args.one), do_time=not args.no_time)), flush=True)
        return 0

    ops = [o for o in args.ops.split(",") if o]
    from tilerosetta.specs import OP_NAMES, SPECS

    ops = ops or sorted(OP_NAMES, key=lambda o: SPECS[o].bound != "compute")  # stable: specs' order within
    unknown = [o for o in ops if o not in OP_NAMES]
    if unknown:
        ap.error(f"--ops: unknown op(s) {unknown}; known: {list(OP_NAMES)}")
    order = list(TWINS)
    variants = sorted(_variants(ops), key=lambda v: (ops.index(v["op"]), v["dtype"], order.index(v["twin"]), v["kernel"]))
    if args.dtypes:
        variants = [v for v in variants if v["dtype"] in args.dtypes.split(",")]
    if args.twins != "all":
        variants = [v for v in variants if v["twin"] == args.twins]
    print(f"probe_tile_cpp: {len(variants)} variants, budget {args.max_seconds:.0f} s", flush=True)
    out = open(args.out, "w") if args.out else None
    start, first_fault, counts, skipped = time.time(), None, {}, 0
    for v in variants:
        if time.time() - start > args.max_seconds:
            skipped += 1
            continue
        r = _run_child(v, args.timeout)
        counts[r["status"]] = counts.get(r["status"], 0) + 1
        print(_fmt(r), flush=True)
        if out:
            out.write(json.dumps(r) + "\n")
            out.flush()
        if r["status"] == "FAULT" and first_fault is None:
            first_fault = v
    summary = ", ".join(f"{k} {n}" for k, n in sorted(counts.items()))
    print(f"probe_tile_cpp: {summary}; {skipped} not run (--max-seconds)", flush=True)
    if args.sanitize and first_fault is not None:
        tool = shutil.which("compute-sanitizer")
        if tool is None:
            print("probe_tile_cpp: --sanitize: compute-sanitizer not on PATH", flush=True)
        else:
            print(f"probe_tile_cpp: memcheck of {first_fault['kernel']} twin={first_fault['twin']}", flush=True)
            try:
                p = subprocess.run([tool, "--tool", "memcheck", *_child_cmd(first_fault, do_time=False)],
                                   capture_output=True, text=True, timeout=max(args.timeout, 300))
                print("\n".join((p.stdout + p.stderr).strip().splitlines()[-40:]), flush=True)
            except subprocess.TimeoutExpired:
                print("probe_tile_cpp: memcheck timed out", flush=True)
    if out:
        out.close()
    return 1 if counts.get("FAULT") or counts.get("WRONG") else 0


if __name__ == "__main__":
    sys.exit(main())
