"""layer_norm in CuTe DSL: out = (x - mean) / sqrt(var + eps) * w + b over each row of (M, N).

Same row layout as softmax and rms_norm, and the same two ways through a row (resident: one read into
registers; streaming: a second read, mostly from L2). The moments are sums of d = x - k and d², with k the
row's first element: the shift keeps var = E[d²] - E[d]² well conditioned when the row's mean is far from
0 (k is an element of the row, so |mean - k| is of the order of the row's spread), at one read of x. Both
sums are reduced over the row (row_reduce). fp32 math.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute

from tilerosetta.kernels.cute_dsl import common


def _add(a, b):
    return a + b


@cute.kernel
def _layer_norm_kernel(gX: cute.Tensor, gW: cute.Tensor, gB: cute.Tensor, gO: cute.Tensor, m: cutlass.Int32,
                       n: cutlass.Int32, eps: cutlass.Float32, vec: cutlass.Constexpr,
                       warps_per_row: cutlass.Constexpr, rows: cutlass.Constexpr, chunks: cutlass.Constexpr):
    row, slot, t, warp, lane, valid = common.row_slot(warps_per_row, rows, m)
    scratch = common.row_scratch(rows, warps_per_row)
    n_vectors = cute.size(gX, mode=[1, 1])
    step = 32 * warps_per_row
    zero = cutlass.Float32(0.0)
    shift = gX[(None, (row, 0))].load().to(cutlass.Float32)[0]
    inv_n = cutlass.Float32(1.0) / n.to(cutlass.Float32)

    if cutlass.const_expr(chunks > 0):
        # regs holds d = x - shift, 0 past the row end (adds nothing). Those vectors are zeroed after the
        # loads: filling them with shift would make every load wait for shift's
        regs = common.row_registers(chunks, vec)
        regs.store(common.load_row(gX, row, t, step, chunks, vec, n_vectors, zero).load().to(cutlass.Float32) - shift)
        for k in cutlass.range_constexpr(chunks):
            if t + k * step >= n_vectors:
                regs[None, k].fill(zero)
        d = regs.load()
        s1 = common.row_reduce(d.reduce(cute.ReductionOp.ADD, zero, 0), _add, scratch, slot, warp, lane,
                               warps_per_row)
        s2 = common.row_reduce((d * d).reduce(cute.ReductionOp.ADD, zero, 0), _add, scratch, slot, warp, lane,
                               warps_per_row)
        mean_d = s1 * inv_n
        rstd = cute.math.rsqrt(cute.arch.fmax(s2 * inv_n - mean_d * mean_d, zero) + eps)
        if valid:
            for k in cutlass.range_constexpr(chunks):
                j = t + k * step
                if j < n_vectors:
                    w = gW[(None, (0, j))].load().to(cutlass.Float32)
                    b = gB[(None, (0, j))].load().to(cutlass.Float32)
                    y = (regs[None, k].load() - mean_d) * rstd * w + b
                    gO[(None, (row, j))].store(y.to(gO.element_type))
    else:
        s1 = zero
        s2 = zero
        for j in range(t, n_vectors, step):
            d = gX[(None, (row, j))].load().to(cutlass.Float32) - shift
            s1 += d.reduce(cute.ReductionOp.ADD, zero, 0)
            s2 += (d * d).reduce(cute.ReductionOp.ADD, zero, 0)
        s1 = common.row_reduce(s1, _add, scratch, slot, warp, lane, warps_per_row)
        s2 = common.row_reduce(s2, _add, scratch, slot, warp, lane, warps_per_row)
        mean_d = s1 * inv_n
        rstd = cute.math.rsqrt(cute.arch.fmax(s2 * inv_n - mean_d * mean_d, zero) + eps)
        mean = mean_d + shift
        if valid:
            for j in range(t, n_vectors, step):
                x = gX[(None, (row, j))].load().to(cutlass.Float32)
                w = gW[(None, (0, j))].load().to(cutlass.Float32)
                b = gB[(None, (0, j))].load().to(cutlass.Float32)
                gO[(None, (row, j))].store(((x - mean) * rstd * w + b).to(gO.element_type))


@cute.jit
def layer_norm(mX: cute.Tensor, mW: cute.Tensor, mB: cute.Tensor, mO: cute.Tensor, eps: cutlass.Float32, stream,
               vec: cutlass.Constexpr, warps_per_row: cutlass.Constexpr, rows: cutlass.Constexpr,
               chunks: cutlass.Constexpr):
    gX, gO = (cute.zipped_divide(t, (1, vec)) for t in (mX, mO))  # ((1, vec), (M, N / vec))
    gW, gB = (cute.zipped_divide(common.as_row(t), (1, vec)) for t in (mW, mB))  # ((1, vec), (1, N / vec))
    m, n = cute.size(mX, mode=[0]), cute.size(mX, mode=[1])
    _layer_norm_kernel(gX, gW, gB, gO, m, n, eps, vec, warps_per_row, rows, chunks).launch(
        grid=common.row_grid(m, rows), block=[32 * warps_per_row * rows, 1, 1], stream=stream)


def build(dtype, variant, cfg):
    vec = common.vec_width(dtype, variant)
    m, n = common.sym(), common.sym(vec)
    x, out = common.fake(dtype, (m, n), vec), common.fake(dtype, (m, n), vec)
    w, b = common.fake(dtype, (n,), vec), common.fake(dtype, (n,), vec)
    return layer_norm, (x, w, b, out, cutlass.Float32(1e-5), common.stream(), vec, cfg["WARPS_PER_ROW"], cfg["ROWS"],
                        cfg.get("CHUNKS", 0))


def launch(compiled, x, w, b, out, eps):
    compiled(x, w, b, out, eps)
