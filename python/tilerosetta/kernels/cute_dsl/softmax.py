"""softmax in CuTe DSL: numerically stable softmax of each row of (M, N).

`ROWS` rows in flight per CTA, each read by WARPS_PER_ROW warps in 128-bit vectors (the "vec" variant).
Pass 1 keeps a running (max, sum of exp) per thread (online softmax: the sum is rescaled when the max
grows), then combines them over the row: the max first, then each thread's sum rescaled to the row max.
Pass 2 reads the row again (from L2: the CTAs in flight hold a few MB) and writes exp(x - max) / sum.
fp32 math throughout.
"""

from __future__ import annotations

import math

import cutlass
import cutlass.cute as cute

from tilerosetta.kernels.cute_dsl import common

LOG2E = math.log2(math.e)


@cute.kernel
def _softmax_kernel(gX: cute.Tensor, gO: cute.Tensor, m: cutlass.Int32, warps_per_row: cutlass.Constexpr,
                    rows: cutlass.Constexpr):
    row, slot, t, warp, lane, valid = common.row_slot(warps_per_row, rows, m)
    scratch = common.row_scratch(rows, warps_per_row)
    n_vectors = cute.size(gX, mode=[1, 1])
    step = 32 * warps_per_row

    run_max = -cutlass.Float32.inf
    run_sum = cutlass.Float32(0.0)
    for j in range(t, n_vectors, step):
        x = gX[(None, (row, j))].load().to(cutlass.Float32) * LOG2E  # base-2 logits: exp2 is one instruction
        new_max = cute.arch.fmax(run_max, x.reduce(cute.ReductionOp.MAX, -cutlass.Float32.inf, 0))
        run_sum = run_sum * cute.math.exp2(run_max - new_max, fastmath=True) + \
            cute.math.exp2(x - new_max, fastmath=True).reduce(cute.ReductionOp.ADD, cutlass.Float32(0.0), 0)
        run_max = new_max

    row_max = common.row_reduce(run_max, cute.arch.fmax, scratch, slot, warp, lane, warps_per_row)
    mine = run_sum * cute.math.exp2(run_max - row_max, fastmath=True)  # a thread that saw nothing adds 0
    row_sum = common.row_reduce(mine, lambda a, b: a + b, scratch, slot, warp, lane, warps_per_row)
    inv = cutlass.Float32(1.0) / row_sum

    if valid:
        for j in range(t, n_vectors, step):
            x = gX[(None, (row, j))].load().to(cutlass.Float32) * LOG2E
            y = cute.math.exp2(x - row_max, fastmath=True) * inv
            gO[(None, (row, j))].store(y.to(gO.element_type))


@cute.jit
def softmax(mX: cute.Tensor, mO: cute.Tensor, stream, vec: cutlass.Constexpr, warps_per_row: cutlass.Constexpr,
            rows: cutlass.Constexpr):
    gX, gO = (cute.zipped_divide(t, (1, vec)) for t in (mX, mO))  # ((1, vec), (M, N / vec))
    m = cute.size(mX, mode=[0])
    _softmax_kernel(gX, gO, m, warps_per_row, rows).launch(
        grid=common.row_grid(m, rows), block=[32 * warps_per_row * rows, 1, 1], stream=stream)


def build(dtype, variant, cfg):
    vec = common.vec_width(dtype, variant)
    m, n = common.sym(), common.sym(vec)
    x, out = common.fake(dtype, (m, n), vec), common.fake(dtype, (m, n), vec)
    return softmax, (x, out, common.stream(), vec, cfg["WARPS_PER_ROW"], cfg["ROWS"])


def launch(compiled, x, out):
    compiled(x, out)
