"""rms_norm in CuTe DSL: out = x / sqrt(mean(x²) + eps) * w over each row of (M, N).

Same row layout as softmax (ROWS rows per CTA, WARPS_PER_ROW warps per row, 128-bit vectors in the
"vec" variant). Pass 1: each thread sums the squares of its vectors, row_reduce sums them over the row.
Pass 2: reads x again (from L2) and w, writes x * rstd * w. fp32 math.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute

from tilerosetta.kernels.cute_dsl import common


@cute.kernel
def _rms_norm_kernel(gX: cute.Tensor, gW: cute.Tensor, gO: cute.Tensor, m: cutlass.Int32, n: cutlass.Int32,
                     eps: cutlass.Float32, warps_per_row: cutlass.Constexpr, rows: cutlass.Constexpr):
    row, slot, t, warp, lane, valid = common.row_slot(warps_per_row, rows, m)
    scratch = common.row_scratch(rows, warps_per_row)
    n_vectors = cute.size(gX, mode=[1, 1])
    step = 32 * warps_per_row

    squares = cutlass.Float32(0.0)
    for j in range(t, n_vectors, step):
        x = gX[(None, (row, j))].load().to(cutlass.Float32)
        squares += (x * x).reduce(cute.ReductionOp.ADD, cutlass.Float32(0.0), 0)
    total = common.row_reduce(squares, lambda a, b: a + b, scratch, slot, warp, lane, warps_per_row)
    rstd = cute.math.rsqrt(total / n.to(cutlass.Float32) + eps)

    if valid:
        for j in range(t, n_vectors, step):
            x = gX[(None, (row, j))].load().to(cutlass.Float32)
            w = gW[(None, (0, j))].load().to(cutlass.Float32)
            gO[(None, (row, j))].store((x * rstd * w).to(gO.element_type))


@cute.jit
def rms_norm(mX: cute.Tensor, mW: cute.Tensor, mO: cute.Tensor, eps: cutlass.Float32, stream,
             vec: cutlass.Constexpr, warps_per_row: cutlass.Constexpr, rows: cutlass.Constexpr):
    gX, gO = (cute.zipped_divide(t, (1, vec)) for t in (mX, mO))  # ((1, vec), (M, N / vec))
    gW = cute.zipped_divide(common.as_row(mW), (1, vec))  # ((1, vec), (1, N / vec))
    m, n = cute.size(mX, mode=[0]), cute.size(mX, mode=[1])
    _rms_norm_kernel(gX, gW, gO, m, n, eps, warps_per_row, rows).launch(
        grid=common.row_grid(m, rows), block=[32 * warps_per_row * rows, 1, 1], stream=stream)


def build(dtype, variant, cfg):
    vec = common.vec_width(dtype, variant)
    m, n = common.sym(), common.sym(vec)
    x, out = common.fake(dtype, (m, n), vec), common.fake(dtype, (m, n), vec)
    w = common.fake(dtype, (n,), vec)
    return rms_norm, (x, w, out, cutlass.Float32(1e-6), common.stream(), vec, cfg["WARPS_PER_ROW"], cfg["ROWS"])


def launch(compiled, x, w, out, eps):
    compiled(x, w, out, eps)
