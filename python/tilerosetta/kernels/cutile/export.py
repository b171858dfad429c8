"""Compiling cuTile Python launches to cubins without a GPU (tileiras needs none).

A `prepare` function returns Launches whose args are torch tensors (meta tensors will do) and scalars.
Here each tensor becomes the ArrayConstraint cuda.tile's JIT derives from a real tensor: last stride 1,
shapes and strides divisible by up to 16 as the actual extents are, base 16-byte aligned (torch's
allocations are). So a bench shape compiles to the aligned, TMA-friendly variant a GPU run would JIT.
Used by the compile test (shared_tests/test_cutile_py_compile.py) and `tilerosetta inspect`.
"""

from __future__ import annotations

import io
import math

import torch


def array_constraint(t: torch.Tensor):
    import cuda.tile as ct
    from cuda.tile.compilation import ArrayConstraint

    dt = {torch.float32: ct.float32, torch.float16: ct.float16, torch.bfloat16: ct.bfloat16}[t.dtype]
    return ArrayConstraint(
        dt, t.dim(), index_dtype=ct.int32, stride_lower_bound_incl=0, alias_groups=(),
        may_alias_internally=False, stride_constant=[None] * (t.dim() - 1) + [1],
        shape_divisible_by=[math.gcd(s, 16) for s in t.shape],
        stride_divisible_by=[math.gcd(s, 16) for s in t.stride()[:-1]] + [1],
        base_addr_divisible_by=16)


def signature(launch):
    """The KernelSignature a launch with these args JIT-compiles."""
    from cuda.tile.compilation import CallingConvention, KernelSignature

    params = [array_constraint(a) if isinstance(a, torch.Tensor) else a for a in launch.args]
    return KernelSignature(params, CallingConvention.cutile_python_v1())


def compile_cubin(launch, sig, arch: str) -> bytes:
    """tileiras output for one launch's kernel and signature (call toolchain.activate() first)."""
    from cuda.tile.compilation import export_kernel

    buf = io.BytesIO()
    export_kernel(launch.kernel, [sig], buf, gpu_code=arch, output_format="cubin")
    return buf.getvalue()


def kernel_name(launch) -> str:
    return launch.kernel._annotated_function.pyfunc.__name__
