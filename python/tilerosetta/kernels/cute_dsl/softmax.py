"""softmax in CuTe DSL: numerically stable softmax of each row of (M, N).

`ROWS` rows in flight per CTA, each read by WARPS_PER_ROW warps in 128-bit vectors (the "vec" variant).
Two ways through a row, chosen per compiled specialization (`chunks`, config.resident_chunks):
  resident (chunks > 0): each thread loads its `chunks` vectors of the row into registers once, the row
    max and then the sum of exp are reduced over the row (row_reduce), and the result is written from the
    registers: one read, one write of the row.
  streaming (chunks = 0, rows too long for registers): pass 1 keeps a running (max, sum of exp) per thread
    (online softmax: the sum is rescaled when the max grows), combined over the row as the max first, then
    each thread's sum rescaled to the row max; pass 2 reads the row again (mostly from L2) and writes.
Logits are scaled by log2(e) so that every exp is one ex2 instruction. fp32 math throughout.
"""

from __future__ import annotations

import math

import cutlass
import cutlass.cute as cute

from tilerosetta.kernels.cute_dsl import common

LOG2E = math.log2(math.e)


def _add(a, b):
    return a + b


@cute.kernel
def _softmax_kernel(gX: cute.Tensor, gO: cute.Tensor, m: cutlass.Int32, vec: cutlass.Constexpr,
                    warps_per_row: cutlass.Constexpr, rows: cutlass.Constexpr, chunks: cutlass.Constexpr):
    row, slot, t, warp, lane, valid = common.row_slot(warps_per_row, rows, m)
    scratch = common.row_scratch(rows, warps_per_row)
    n_vectors = cute.size(gX, mode=[1, 1])
    step = 32 * warps_per_row
    minus_inf = -cutlass.Float32.inf

    if cutlass.const_expr(chunks > 0):
        regs = common.row_registers(chunks, vec)
        # vectors past the row end read -inf: exp2 makes them 0
        x = common.load_row(gX, row, t, step, chunks, vec, n_vectors, minus_inf).load().to(cutlass.Float32) * LOG2E
        row_max = common.row_reduce(x.reduce(cute.ReductionOp.MAX, minus_inf, 0), cute.arch.fmax, scratch,
                                    slot, warp, lane, warps_per_row)
        e = cute.math.exp2(x - row_max, fastmath=True)
        row_sum = common.row_reduce(e.reduce(cute.ReductionOp.ADD, cutlass.Float32(0.0), 0), _add, scratch,
                                    slot, warp, lane, warps_per_row)
        regs.store(e * (cutlass.Float32(1.0) / row_sum))
        if valid:
            for k in cutlass.range_constexpr(chunks):
                j = t + k * step
                if j < n_vectors:
                    gO[(None, (row, j))].store(regs[None, k].load().to(gO.element_type))
    else:
        run_max = minus_inf
        run_sum = cutlass.Float32(0.0)
        for j in range(t, n_vectors, step):
            x = gX[(None, (row, j))].load().to(cutlass.Float32) * LOG2E
            new_max = cute.arch.fmax(run_max, x.reduce(cute.ReductionOp.MAX, minus_inf, 0))
            run_sum = run_sum * cute.math.exp2(run_max - new_max, fastmath=True) + \
                cute.math.exp2(x - new_max, fastmath=True).reduce(cute.ReductionOp.ADD, cutlass.Float32(0.0), 0)
            run_max = new_max
        row_max = common.row_reduce(run_max, cute.arch.fmax, scratch, slot, warp, lane, warps_per_row)
        mine = run_sum * cute.math.exp2(run_max - row_max, fastmath=True)  # a thread that saw nothing adds 0
        row_sum = common.row_reduce(mine, _add, scratch, slot, warp, lane, warps_per_row)
        inv = cutlass.Float32(1.0) / row_sum
        if valid:
            for j in range(t, n_vectors, step):
                x = gX[(None, (row, j))].load().to(cutlass.Float32) * LOG2E
                gO[(None, (row, j))].store((cute.math.exp2(x - row_max, fastmath=True) * inv).to(gO.element_type))


@cute.jit
def softmax(mX: cute.Tensor, mO: cute.Tensor, stream, vec: cutlass.Constexpr, warps_per_row: cutlass.Constexpr,
            rows: cutlass.Constexpr, chunks: cutlass.Constexpr):
    gX, gO = (cute.zipped_divide(t, (1, vec)) for t in (mX, mO))  # ((1, vec), (M, N / vec))
    m = cute.size(mX, mode=[0])
    _softmax_kernel(gX, gO, m, vec, warps_per_row, rows, chunks).launch(
        grid=common.row_grid(m, rows), block=[32 * warps_per_row * rows, 1, 1], stream=stream)


def build(dtype, variant, cfg):
    vec = common.vec_width(dtype, variant)
    m, n = common.sym(), common.sym(vec)
    x, out = common.fake(dtype, (m, n), vec), common.fake(dtype, (m, n), vec)
    return softmax, (x, out, common.stream(), vec, cfg["WARPS_PER_ROW"], cfg["ROWS"], cfg.get("CHUNKS", 0))


def launch(compiled, x, out):
    compiled(x, out)
