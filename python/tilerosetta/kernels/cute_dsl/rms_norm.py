"""rms_norm in CuTe DSL: out = x / sqrt(mean(x²) + eps) * w over each row of (M, N).

Same row layout as softmax (ROWS rows per CTA, WARPS_PER_ROW warps per row, 128-bit vectors in the
"vec" variant) and the same two ways through a row: resident (chunks > 0: the row read once into
registers, the sum of squares reduced over the row, the result written from the registers) or streaming
(pass 1 sums the squares, pass 2 reads x again, mostly from L2). fp32 math.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute

from tilerosetta.kernels.cute_dsl import common


def _add(a, b):
    return a + b


@cute.kernel
def _rms_norm_kernel(gX: cute.Tensor, gW: cute.Tensor, gO: cute.Tensor, m: cutlass.Int32, n: cutlass.Int32,
                     eps: cutlass.Float32, vec: cutlass.Constexpr, warps_per_row: cutlass.Constexpr,
                     rows: cutlass.Constexpr, chunks: cutlass.Constexpr):
    row, slot, t, warp, lane, valid = common.row_slot(warps_per_row, rows, m)
    scratch = common.row_scratch(rows, warps_per_row)
    n_vectors = cute.size(gX, mode=[1, 1])
    step = 32 * warps_per_row
    zero = cutlass.Float32(0.0)

    if cutlass.const_expr(chunks > 0):
        regs = common.row_registers(chunks, vec)
        # vectors past the row end read 0 and add nothing
        regs.store(common.load_row(gX, row, t, step, chunks, vec, n_vectors, zero).load().to(cutlass.Float32))
        x = regs.load()
        total = common.row_reduce((x * x).reduce(cute.ReductionOp.ADD, zero, 0), _add, scratch, slot, warp, lane,
                                  warps_per_row)
        rstd = cute.math.rsqrt(total / n.to(cutlass.Float32) + eps)
        if valid:
            for k in cutlass.range_constexpr(chunks):
                j = t + k * step
                if j < n_vectors:
                    w = gW[(None, (0, j))].load().to(cutlass.Float32)
                    gO[(None, (row, j))].store((regs[None, k].load() * rstd * w).to(gO.element_type))
    else:
        squares = zero
        for j in range(t, n_vectors, step):
            x = gX[(None, (row, j))].load().to(cutlass.Float32)
            squares += (x * x).reduce(cute.ReductionOp.ADD, zero, 0)
        total = common.row_reduce(squares, _add, scratch, slot, warp, lane, warps_per_row)
        rstd = cute.math.rsqrt(total / n.to(cutlass.Float32) + eps)
        if valid:
            for j in range(t, n_vectors, step):
                x = gX[(None, (row, j))].load().to(cutlass.Float32)
                w = gW[(None, (0, j))].load().to(cutlass.Float32)
                gO[(None, (row, j))].store((x * rstd * w).to(gO.element_type))


@cute.jit
def rms_norm(mX: cute.Tensor, mW: cute.Tensor, mO: cute.Tensor, eps: cutlass.Float32, stream,
             vec: cutlass.Constexpr, warps_per_row: cutlass.Constexpr, rows: cutlass.Constexpr,
             chunks: cutlass.Constexpr):
    gX, gO = (cute.zipped_divide(t, (1, vec)) for t in (mX, mO))  # ((1, vec), (M, N / vec))
    gW = cute.zipped_divide(common.as_row(mW), (1, vec))  # ((1, vec), (1, N / vec))
    m, n = cute.size(mX, mode=[0]), cute.size(mX, mode=[1])
    _rms_norm_kernel(gX, gW, gO, m, n, eps, vec, warps_per_row, rows, chunks).launch(
        grid=common.row_grid(m, rows), block=[32 * warps_per_row * rows, 1, 1], stream=stream)


def build(dtype, variant, cfg):
    vec = common.vec_width(dtype, variant)
    m, n = common.sym(), common.sym(vec)
    x, out = common.fake(dtype, (m, n), vec), common.fake(dtype, (m, n), vec)
    w = common.fake(dtype, (n,), vec)
    return rms_norm, (x, w, out, cutlass.Float32(1e-6), common.stream(), vec, cfg["WARPS_PER_ROW"], cfg["ROWS"],
                      cfg.get("CHUNKS", 0))


def launch(compiled, x, w, out, eps):
    compiled(x, w, out, eps)
