"""Compile every Triton kernel ahead of time for a GPU target, without a GPU (CI) — or on one.

    TRITON_INTERPRET=0 python -m tilerosetta.kernels.triton.aot_check [--arch 90] [--op softmax,...]

For each op and dtype it compiles, with the GPU configuration table (config.py), the kernel variants the
backend would launch for the spec's conformance and benchmark sizes, all the way to a cubin (Triton
ships its own ptxas), and checks the shared memory each needs against Hopper's 227 KB per block. This
catches what the CPU interpreter cannot: type errors of the compiler front end, unsupported constructs,
layouts that do not lower, tiles that do not fit. Prints one JSON object: {"ok": [...], "fail": [...]}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    sys.exit("aot_check compiles kernels: run it with TRITON_INTERPRET=0")

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from tilerosetta.kernels.triton import (attention, config, layer_norm, matmul, rms_norm, rope,  # noqa: E402
                                        silu_and_mul, softmax, transpose, vector_add)
from tilerosetta.specs import SPECS, dtype_name  # noqa: E402

HOPPER_SMEM = 232448  # bytes of shared memory one block may opt into on sm_90 (227 KB)
_TT = {"fp32": "fp32", "fp16": "fp16", "bf16": "bf16"}


def variants(op, dtype, dims, cfg):
    """(kernel, {arg: type}, constexprs, num_warps, num_stages) the launcher would use for these dims."""
    t = "*" + _TT[dtype_name(dtype)]
    w, s = cfg.get("num_warps", 4), cfg.get("num_stages", 3)
    if op == "vector_add":
        return [(vector_add.vector_add_kernel, {"a_ptr": t, "b_ptr": t, "out_ptr": t, "N": "i32"},
                 {"BLOCK": cfg["BLOCK"]}, w, s)]
    if op == "transpose":
        return [(transpose.transpose_kernel, {"x_ptr": t, "out_ptr": t, "M": "i32", "N": "i32"},
                 {"BLOCK_M": cfg["BLOCK_M"], "BLOCK_N": cfg["BLOCK_N"]}, w, s)]
    if op in config.ROW_OPS:
        mod = {"softmax": softmax, "rms_norm": rms_norm, "layer_norm": layer_norm}[op]
        sig = {"x_ptr": t}
        sig.update({"w_ptr": t} if op != "softmax" else {})
        sig.update({"b_ptr": t} if op == "layer_norm" else {})
        sig.update({"out_ptr": t, "N": "i32"})
        sig.update({"eps": "fp32"} if op != "softmax" else {})
        n = dims["N"]
        if n <= cfg["single_max"]:
            return [(getattr(mod, f"{op}_block_kernel"), sig, {"BLOCK_N": triton.next_power_of_2(n)}, w, s)]
        return [(getattr(mod, f"{op}_loop_kernel"), sig, {"BLOCK_N": cfg["loop_block"]}, w, s)]
    if op == "silu_and_mul":
        return [(silu_and_mul.silu_and_mul_kernel, {"x_ptr": t, "out_ptr": t, "M": "i32", "H": "i32"},
                 {"BLOCK_M": cfg["BLOCK_M"], "BLOCK_H": cfg["BLOCK_H"]}, w, s)]
    if op == "rope":
        return [(rope.rope_kernel, {"q_ptr": t, "cos_ptr": t, "sin_ptr": t, "out_ptr": t, "R": "i32", "S": "i32",
                                    "HALF": "i32"},
                 {"BLOCK_R": cfg["BLOCK_R"], "BLOCK_HALF": max(2, triton.next_power_of_2(dims["D"] // 2))}, w, s)]
    if op in ("matmul", "bmm"):
        sig = {"a_ptr": t, "b_ptr": t, "out_ptr": t, "M": "i32", "N": "i32", "K": "i32", "stride_ab": "i32",
               "stride_bb": "i32", "stride_ob": "i32"}
        prec = "tf32" if dtype_name(dtype) == "fp32" else "ieee"
        return [(matmul.matmul_kernel, sig, {k: cfg[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")}
                 | {"INPUT_PRECISION": prec}, w, s)]
    if op == "attention":
        # Both load paths, whatever the table's default: pointers, and tensor descriptors (TMA=1).
        bm, bn, d, e = cfg["BLOCK_M"], cfg["BLOCK_N"], dims["D"], _TT[dtype_name(dtype)]
        out = []
        for tma in (False, True):
            if tma:
                desc = {n: f"tensordesc<{e}[1,{blk},{d}]>" for n, blk in
                        (("q_ptr", bm), ("k_ptr", bn), ("v_ptr", bn), ("out_ptr", bm))}
            sig = {**({"q_ptr": t, "k_ptr": t, "v_ptr": t, "out_ptr": t} if not tma else desc),
                   "S": "i32", "qk_scale": "fp32"}
            out += [(attention.attention_kernel, sig, {"HEAD_D": d, "CAUSAL": causal, "BLOCK_M": bm,
                                                       "BLOCK_N": bn, "TMA": tma}, w, s) for causal in (False, True)]
        return out
    raise KeyError(op)


def compile_one(kernel, sig, constexprs, num_warps, num_stages, arch, aligned):
    names = kernel.arg_names
    signature = {n: sig.get(n, "constexpr") for n in names}
    # A real launch specialises on 16-divisibility: torch's pointers always are, and the integer sizes
    # are when every dim of the case is (the benchmark sizes): that path vectorises and pipelines
    # (cp.async / wgmma) and needs the most shared memory, so it is the one to check.
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n, ty in sig.items()
             if ty.startswith("*") or (aligned and ty == "i32")}
    src = ASTSource(kernel, signature=signature, constexprs=constexprs, attrs=attrs)
    compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32),
                              options={"num_warps": num_warps, "num_stages": num_stages})
    return compiled.metadata.shared


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", type=int, default=90)
    ap.add_argument("--op", default="")
    args = ap.parse_args(argv)
    ops = [o for o in args.op.split(",") if o] or list(SPECS)
    ok, fail, seen = [], [], set()
    for op in ops:
        spec = SPECS[op]
        for dtype in spec.dtypes:
            all_dims = [c.dims for c in spec.cases + spec.bench_cases]
            if op in config.ROW_OPS:  # rows longer than the one-block limit: the looped kernel
                all_dims.append({"M": 1, "N": config.default(op, dtype, {}, False)["single_max"] + 1})
            for dims in all_dims:
                cfg = config.default(op, dtype, dims, interpret=False)
                for kernel, sig, consts, w, s in variants(op, dtype, dims, cfg):
                    aligned = all(v % 16 == 0 for k, v in dims.items() if k not in ("B", "H", "Bt"))
                    key = (op, kernel.fn.__name__, dtype_name(dtype), tuple(sorted(consts.items())), w, s, aligned)
                    if key in seen:
                        continue
                    seen.add(key)
                    label = (f"{op}/{dtype_name(dtype)}/{kernel.fn.__name__}{consts} warps={w} stages={s}"
                             f"{' 16-aligned sizes' if aligned else ''}")
                    try:
                        smem = compile_one(kernel, sig, consts, w, s, args.arch, aligned)
                    except Exception as exc:  # report every failure, not only the first
                        fail.append(f"{label}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
                        continue
                    if smem > HOPPER_SMEM:
                        fail.append(f"{label}: needs {smem} B shared memory > {HOPPER_SMEM}")
                    else:
                        ok.append(f"{label}: {smem} B shared")
    print(json.dumps({"ok": ok, "fail": fail}, indent=1))
    return 1 if fail else 0


if __name__ == "__main__":
    sys.exit(main())
