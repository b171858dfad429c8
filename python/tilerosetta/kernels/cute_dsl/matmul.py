"""matmul in CuTe DSL: out (M, N) = a (M, K) @ b (K, N), row-major, fp32 accumulate.

matmul is bmm with one batch: the same kernels (gemm_wgmma.py, the Hopper fast path for aligned
fp16/bf16; gemm_simt.py for everything else), called on (1, M, K) @ (1, K, N) views of the operands.
The variant (kernels/cute_dsl/__init__.py, variant_of) picks the kernel per call.
"""

from __future__ import annotations

from tilerosetta.kernels.cute_dsl import bmm


def build(dtype, variant, cfg):
    return bmm.build(dtype, variant, cfg)


def launch(compiled, a, b, out):
    # unsqueeze(0) of a row-major tensor is row-major: the compiled rank-3 layout accepts it
    compiled(a.unsqueeze(0), b.unsqueeze(0), out.unsqueeze(0))
