"""GPU smoke test of the peers (about a minute): each peer's availability and versions, then every op it
has, once, on one small case in bf16 (fp16 where the peer takes no bf16), in its returning form (the form
the benchmark times), checked against the float64 reference, then captured into a CUDA graph the way the
benchmark captures it (the replay re-checked). Prints one line per (peer, op) and a summary; exit 1 if an
available peer's op is wrong or raises, or a peer named in --require is unavailable.

    gpu-bundle/run.sh shell python3 tools/peers_smoke.py [--peers a,b] [--require a,b] [--max-seconds 90]
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from tilerosetta import backends
from tilerosetta.bench import timing
from tilerosetta.harness import compare, make_case_tensors, reference
from tilerosetta.specs import Case, get_spec

# TileGym last: it autotunes each shape on its first call (the slowest to smoke)
PEERS = ("fa4", "quack", "liger", "torch_compile", "sdpa_cudnn", "sdpa_flash", "tilegym")
# one small case per op (shapes the peers' kernels accept: D % 16 == 0, N % 8 == 0, ...); an op not
# listed takes its spec's first bench case (the shapes every peer is benchmarked on), see case_of
CASES = {
    "vector_add": Case({"N": 65537}), "transpose": Case({"M": 300, "N": 1000}),
    "softmax": Case({"M": 257, "N": 4096}), "rms_norm": Case({"M": 257, "N": 4096}),
    "layer_norm": Case({"M": 257, "N": 4096}), "silu_and_mul": Case({"M": 257, "H": 4096}),
    "rope": Case({"B": 2, "H": 4, "S": 129, "D": 128}), "matmul": Case({"M": 256, "N": 512, "K": 1024}),
    "bmm": Case({"Bt": 2, "M": 256, "N": 256, "K": 512}),
    "attention": Case({"B": 1, "H": 4, "S": 512, "D": 128}, {"causal": True}),
}


def case_of(op: str) -> Case:
    return CASES.get(op) or get_spec(op).bench_cases[0]


def graph_check(fn, inputs, case, spec, dtype, ref) -> str:
    """Capture the returning call into a CUDA graph as the benchmark does; say whether its replay is right."""
    outs = {}

    def call():
        outs.update(fn(*inputs.values(), **case.params))

    def verify(run):
        for o in outs.values():
            o.fill_(float("nan"))
        run()
        torch.cuda.synchronize()
        good, _, _, problem = compare(spec, dtype, outs, ref)
        return None if good else problem

    call()
    replay, note = timing.try_graph(call, verify)
    return "cuda_graph ok" if replay is not None else f"NO GRAPH (bench times plain launches): {note}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--peers", default=",".join(PEERS))
    ap.add_argument("--require", default="", help="peers that must be available (comma-separated)")
    ap.add_argument("--max-seconds", type=float, default=90.0)
    args = ap.parse_args()
    t_end = time.time() + args.max_seconds
    bad, ran = [], 0
    for name in args.peers.split(","):
        b = backends.get(name)
        ok, reason = b.is_available()
        print(f"== {name}: {'available' if ok else 'UNAVAILABLE'}: {reason}", flush=True)
        if not ok:
            if name in args.require.split(","):
                bad.append(f"{name} (unavailable)")
            continue
        print(f"   versions: {b.versions()}", flush=True)
        ops = sorted(b.implementations())  # each in the form the bench times (returning where it has one)
        for op in ops:
            if time.time() > t_end:
                print(f"   {op}: not run (smoke time budget spent)")
                continue
            spec = get_spec(op)
            dtype = next(d for d in (torch.bfloat16, torch.float16, torch.float32) if d in b.dtypes(op))
            case = case_of(op)
            t0 = time.perf_counter()
            try:
                inputs, outputs = make_case_tensors(spec, case, dtype, "cuda", 0, bench=True)
                if op in b.returning():
                    outputs, form = b.op_returning(op)(*inputs.values(), **case.params), "returns"
                else:
                    b.op(op)(*inputs.values(), *outputs.values(), **case.params)
                    form = "destination"
                torch.cuda.synchronize()
                ref = reference(spec, case, inputs)
                good, err, _, msg = compare(spec, dtype, outputs, ref)
                line = f"rel_err {err:.2e}" + ("" if good else f" WRONG: {msg}")
                if good and form == "returns":
                    line += "; " + graph_check(b.op_returning(op), inputs, case, spec, dtype, ref)
            except Exception as exc:
                good, form, line = False, "-", f"ERROR {type(exc).__name__}: {str(exc)[:300]}"
            ran += 1
            print(f"   {op} [{case.name}, {dtype}, {form}]: {'ok' if good else 'FAIL'} {line} "
                  f"({time.perf_counter() - t0:.1f} s incl. compile)", flush=True)
            if not good:
                bad.append(f"{name}.{op}")
    print(f"peers smoke: {ran} op(s) run, {len(bad)} bad{': ' + ', '.join(bad) if bad else ''}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
