"""The driver the cuTile Python reproducers share (the kernels are in their own files).

Without --time: compile each variant of the kernel for --arch with tileiras (export_kernel; no GPU) and
print the SASS facts of its cubin (../sass_stats.py), one line per variant. With --time (a GPU): time
each variant with triton.testing.do_bench (L2 flushed before every run) and print one line per variant:
microseconds and the bandwidth of the bytes the kernel must move.
Every array is 2-D bf16, row-major, 16-byte aligned, extents and row stride multiples of 16 elements:
the facts cuTile's JIT derives from such torch tensors, so the CPU cubin is the one a GPU run compiles.
"""
from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

import cuda.tile as ct

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sass_stats import activate_tileiras, line, stats  # noqa: E402


def _array_2d():
    from cuda.tile.compilation import ArrayConstraint

    return ArrayConstraint(ct.bfloat16, 2, index_dtype=ct.int32, stride_lower_bound_incl=0, alias_groups=(),
                           may_alias_internally=False, stride_constant=[None, 1], shape_divisible_by=[16, 16],
                           stride_divisible_by=[16, 1], base_addr_divisible_by=16)


def cubin(kernel, n_arrays: int, consts: tuple, arch: str) -> bytes:
    """tileiras output for kernel(n_arrays 2-D bf16 arrays, *consts)."""
    from cuda.tile.compilation import CallingConvention, KernelSignature, export_kernel

    sig = KernelSignature([_array_2d()] * n_arrays + list(consts), CallingConvention.cutile_python_v1())
    buf = io.BytesIO()
    export_kernel(kernel, [sig], buf, gpu_code=arch, output_format="cubin")
    return buf.getvalue()


def main(kernel, n_arrays: int, variants: dict, gpu_case=None):
    """variants: label -> consts. gpu_case(label) -> (grid, arrays, bytes moved, reference), only for --time:
    reference() is the expected last array (the output), checked after the first launch."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--out", default=f"/tmp/repro_{kernel._annotated_function.pyfunc.__name__}")
    ap.add_argument("--time", action="store_true", help="time each variant on the GPU")
    args = ap.parse_args()
    activate_tileiras()
    if args.time:
        import torch
        import triton.testing

        for label, consts in variants.items():
            grid, arrays, nbytes, reference = gpu_case(label)
            stream = torch.cuda.current_stream()
            ct.launch(stream, grid, kernel, (*arrays, *consts))
            ref = reference().float()
            err = ((arrays[-1].reshape(ref.shape).float() - ref).norm() / ref.norm()).item()
            us = 1e3 * triton.testing.do_bench(lambda: ct.launch(stream, grid, kernel, (*arrays, *consts)),
                                               warmup=25, rep=200)
            print(f"{label} {us:.1f} us {nbytes / us / 1e6:.2f} TB/s rel_err={err:.1e}")
        return
    Path(args.out).mkdir(parents=True, exist_ok=True)
    for label, consts in variants.items():
        path = Path(args.out) / f"{label.replace('=', '')}.{args.arch}.cubin"
        path.write_bytes(cubin(kernel, n_arrays, consts, args.arch))
        for name, row in stats(str(path)).items():
            print(label, "|", line(name.split("_Kt")[0], row))  # name less its signature suffix
