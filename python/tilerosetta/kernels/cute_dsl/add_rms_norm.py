"""add_rms_norm in CuTe DSL: sum = x + residual (stored), out = sum / sqrt(mean(sum²) + eps) * w.

The rms_norm kernel (rms_norm.py) with the add in front, same row layout and the same two ways through a
row: resident (chunks > 0: x + residual added once into registers in fp32, `sum` stored from there, the
squares reduced, `out` written from the registers) or streaming (pass 1 adds, stores `sum` and sums the
squares; pass 2 re-adds x + residual, so `out` normalises the fp32 sum, not the rounded one just stored,
as the spec asks).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute

from tilerosetta.kernels.cute_dsl import common


def _add(a, b):
    return a + b


@cute.kernel
def _add_rms_norm_kernel(gX: cute.Tensor, gR: cute.Tensor, gW: cute.Tensor, gS: cute.Tensor, gO: cute.Tensor,
                         m: cutlass.Int32, n: cutlass.Int32, eps: cutlass.Float32, vec: cutlass.Constexpr,
                         warps_per_row: cutlass.Constexpr, rows: cutlass.Constexpr, chunks: cutlass.Constexpr):
    row, slot, t, warp, lane, valid = common.row_slot(warps_per_row, rows, m)
    scratch = common.row_scratch(rows, warps_per_row)
    n_vectors = cute.size(gX, mode=[1, 1])
    step = 32 * warps_per_row
    zero = cutlass.Float32(0.0)

    if cutlass.const_expr(chunks > 0):
        regs = common.row_registers(chunks, vec)
        # vectors past the row end read 0 and add nothing
        x_raw = common.load_row(gX, row, t, step, chunks, vec, n_vectors, zero)
        r_raw = common.load_row(gR, row, t, step, chunks, vec, n_vectors, zero)
        regs.store(x_raw.load().to(cutlass.Float32) + r_raw.load().to(cutlass.Float32))
        if valid:
            for k in cutlass.range_constexpr(chunks):
                j = t + k * step
                if j < n_vectors:
                    gS[(None, (row, j))].store(regs[None, k].load().to(gS.element_type))
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
            s = gX[(None, (row, j))].load().to(cutlass.Float32) + gR[(None, (row, j))].load().to(cutlass.Float32)
            if valid:
                gS[(None, (row, j))].store(s.to(gS.element_type))
            squares += (s * s).reduce(cute.ReductionOp.ADD, zero, 0)
        total = common.row_reduce(squares, _add, scratch, slot, warp, lane, warps_per_row)
        rstd = cute.math.rsqrt(total / n.to(cutlass.Float32) + eps)
        if valid:
            for j in range(t, n_vectors, step):
                s = gX[(None, (row, j))].load().to(cutlass.Float32) + gR[(None, (row, j))].load().to(cutlass.Float32)
                w = gW[(None, (0, j))].load().to(cutlass.Float32)
                gO[(None, (row, j))].store((s * rstd * w).to(gO.element_type))


@cute.jit
def add_rms_norm(mX: cute.Tensor, mR: cute.Tensor, mW: cute.Tensor, mS: cute.Tensor, mO: cute.Tensor,
                 eps: cutlass.Float32, stream, vec: cutlass.Constexpr, warps_per_row: cutlass.Constexpr,
                 rows: cutlass.Constexpr, chunks: cutlass.Constexpr):
    gX, gR, gS, gO = (cute.zipped_divide(t, (1, vec)) for t in (mX, mR, mS, mO))  # ((1, vec), (M, N / vec))
    gW = cute.zipped_divide(common.as_row(mW), (1, vec))  # ((1, vec), (1, N / vec))
    m, n = cute.size(mX, mode=[0]), cute.size(mX, mode=[1])
    _add_rms_norm_kernel(gX, gR, gW, gS, gO, m, n, eps, vec, warps_per_row, rows, chunks).launch(
        grid=common.row_grid(m, rows), block=[32 * warps_per_row * rows, 1, 1], stream=stream)


def build(dtype, variant, cfg):
    vec = common.vec_width(dtype, variant)
    m, n = common.sym(), common.sym(vec)
    x, r, s, out = (common.fake(dtype, (m, n), vec) for _ in range(4))
    w = common.fake(dtype, (n,), vec)
    return add_rms_norm, (x, r, w, s, out, cutlass.Float32(1e-6), common.stream(), vec, cfg["WARPS_PER_ROW"],
                          cfg["ROWS"], cfg.get("CHUNKS", 0))


def launch(compiled, x, residual, weight, sum_, out, eps):
    compiled(x, residual, weight, sum_, out, eps)
