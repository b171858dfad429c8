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
import importlib
import json
import os
import sys

if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
    sys.exit("aot_check compiles kernels: run it with TRITON_INTERPRET=0")

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

import torch  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

from tilerosetta.kernels.triton import RUN_CONSTEXPRS, config  # noqa: E402
from tilerosetta.specs import SPECS, Case, dtype_name  # noqa: E402

HOPPER_SMEM = 232448  # bytes of shared memory one block may opt into on sm_90 (227 KB)
_TT = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.int32: "i32"}


def arg_type(value) -> str:
    """Triton's signature type of one runtime argument, as a launch would specialise it."""
    if isinstance(value, torch.Tensor):
        return "*" + _TT[value.dtype]
    if isinstance(value, TensorDescriptor):
        return f"tensordesc<{_TT[value.base.dtype]}[{','.join(map(str, value.block_shape))}]>"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"no signature type for a launch argument of type {type(value).__name__}")
    if isinstance(value, float):
        return "fp32"
    return "i32" if -2**31 <= value < 2**31 else "i64"


COMPILE_OPTIONS = ("maxnreg",)  # launch options besides warps/stages that change the compiled kernel


def variants(op, dtype, case, cfg):
    """(kernel, {arg: type}, constexprs, num_warps, num_stages, extra, divisible) of each launch the backend
    would make for this case (a Case, or plain dims): the module's own prepare() on meta tensors, so the
    signatures are read, not re-derived. extra: the launch's other compile options (e.g. maxnreg), so a
    compile here builds the kernel that runs. divisible: the integer arguments whose value is a multiple of
    16, which Triton's launcher specialises on (at M = 1 the strides still are)."""
    spec = SPECS[op]
    case = case if isinstance(case, Case) else Case(dict(case))  # plain dims: the spec's default params
    prepare = importlib.import_module(f"tilerosetta.kernels.triton.{op}").prepare
    shapes = spec.shapes(case)
    tensors = [torch.empty(shapes[n], dtype=dtype, device="meta") for n in list(spec.inputs) + list(spec.outputs)]
    out = []
    for lx in prepare(*tensors, cfg, **spec.full_params(case.params)):
        runtime = [n for n in lx.kernel.arg_names if n not in lx.constexprs and n not in RUN_CONSTEXPRS]
        sig = {n: arg_type(v) for n, v in zip(runtime, lx.args, strict=True)}
        extra = {k: v for k, v in lx.options.items() if k in COMPILE_OPTIONS}
        divisible = {n for n, v in zip(runtime, lx.args) if type(v) is int and v % 16 == 0}
        out.append((lx.kernel, sig, lx.constexprs, lx.options.get("num_warps", 4), lx.options.get("num_stages", 3),
                    extra, divisible))
    return out


def cases(op, dtype):
    """(case, cfg) pairs to compile: the conformance and benchmark cases with the GPU table's config, plus
    the paths the table's defaults do not reach on them (looped row kernels; both attention load paths
    and both masks)."""
    spec = SPECS[op]
    all_cases = list(spec.cases + spec.bench_cases)
    if op in config.ROW_OPS:  # rows longer than the one-block limit: the looped kernel
        all_cases.append(Case({"M": 1, "N": config.default(op, dtype, {}, False)["single_max"] + 1}))
    for case in all_cases:
        cfg = config.default(op, dtype, case.dims, interpret=False)
        if op != "attention":
            yield case, cfg
            if op in ("matmul", "bmm") and case.dims.get("M", 1 << 30) <= 64:  # split-K: the reduce kernel too
                yield case, {**cfg, "FIXUP": 0}
            continue
        for tma in (0, 1):
            for causal in (False, True):
                yield Case(case.dims, {**case.params, "causal": causal}), {**cfg, "TMA": tma}
        yield case, {**cfg, "TMA": 1, "FIXUP": 0}  # a split-KV case: the combine kernel too


def compile_one(kernel, sig, constexprs, num_warps, num_stages, arch, aligned, extra=None):
    """The kernel compiled as the launch would (Triton's CompiledKernel: .asm["cubin"], .metadata.shared).
    aligned: True (every integer argument 16-divisible), False (none), or the names of those that are."""
    names = kernel.arg_names
    signature = {n: sig.get(n, "constexpr") for n in names}
    # A real launch specialises on 16-divisibility: torch's pointers always are, and the integer sizes
    # are when every dim of the case is (the benchmark sizes): that path vectorises and pipelines
    # (cp.async / wgmma) and needs the most shared memory, so it is the one to check.
    div = (lambda n: aligned) if isinstance(aligned, bool) else (lambda n: n in aligned)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n, ty in sig.items()
             if ty.startswith("*") or (ty == "i32" and div(n))}
    pdl = "PDL" in names and "PDL" not in constexprs and arch >= 90  # as run() launches it there
    if "PDL" in names and "PDL" not in constexprs:
        constexprs = {**constexprs, "PDL": pdl}
        signature["PDL"] = "constexpr"
    src = ASTSource(kernel, signature=signature, constexprs=constexprs, attrs=attrs)
    compiled = triton.compile(src, target=GPUTarget("cuda", arch, 32),
                              options={"num_warps": num_warps, "num_stages": num_stages, "launch_pdl": pdl,
                                       **(extra or {})})
    return compiled


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", type=int, default=90)
    ap.add_argument("--op", default="")
    args = ap.parse_args(argv)
    ops = [o for o in args.op.split(",") if o] or list(SPECS)
    ok, fail, seen = [], [], set()
    for op in ops:
        for dtype in SPECS[op].dtypes:
            for case, cfg in cases(op, dtype):
                dims = case.dims
                for kernel, sig, consts, w, s, extra, _div in variants(op, dtype, case, cfg):
                    aligned = all(v % 16 == 0 for k, v in dims.items() if k not in ("B", "H", "Hkv", "Bt"))
                    key = (op, kernel.fn.__name__, dtype_name(dtype), tuple(sorted(consts.items())),
                           tuple(sig.items()), w, s, tuple(extra.items()), aligned)
                    if key in seen:
                        continue
                    seen.add(key)
                    label = (f"{op}/{dtype_name(dtype)}/{kernel.fn.__name__}{consts} warps={w} stages={s}"
                             f"{' 16-aligned sizes' if aligned else ''}")
                    try:
                        smem = compile_one(kernel, sig, consts, w, s, args.arch, aligned, extra).metadata.shared
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
