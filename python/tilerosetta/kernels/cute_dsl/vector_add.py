"""vector_add in CuTe DSL: out = a + b over a 1-D tensor of any length.

The tensor is viewed as (vector, index) with zipped_divide: each thread moves one vector of `vec`
elements (128 bits in the "vec" variant, so one ld.global.v4 per operand; one element in the "scalar"
variant for lengths or pointers that do not allow it). THREADS threads per CTA, one vector each.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute

from tilerosetta.kernels.cute_dsl import common


@cute.kernel
def _add_kernel(gA: cute.Tensor, gB: cute.Tensor, gC: cute.Tensor, threads: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    v = bidx * threads + tidx
    if v < cute.size(gA, mode=[1]):
        total = gA[(None, v)].load().to(cutlass.Float32) + gB[(None, v)].load().to(cutlass.Float32)
        gC[(None, v)].store(total.to(gC.element_type))


@cute.jit
def vector_add(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, stream, vec: cutlass.Constexpr,
               threads: cutlass.Constexpr):
    gA, gB, gC = (cute.zipped_divide(t, (vec,)) for t in (mA, mB, mC))
    n_vectors = cute.size(gA, mode=[1])
    _add_kernel(gA, gB, gC, threads).launch(grid=[cute.ceil_div(n_vectors, threads), 1, 1],
                                            block=[threads, 1, 1], stream=stream)


def build(dtype, variant, cfg):
    vec = common.vec_width(dtype, variant)
    n = common.sym(vec)
    tensors = [common.fake(dtype, (n,), vec) for _ in range(3)]
    return vector_add, (*tensors, common.stream(), vec, cfg["THREADS"])


def launch(compiled, a, b, out):
    compiled(a, b, out)
