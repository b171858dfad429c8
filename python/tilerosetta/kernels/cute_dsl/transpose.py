"""transpose in CuTe DSL: out (N, M) = x (M, N)ᵀ, through a shared-memory tile.

Each CTA moves one TILE x TILE tile with TILE * 8 threads: reads rows of x (consecutive threads on
consecutive columns: coalesced), writes them into shared memory, then reads the tile's columns and writes
them as rows of out (coalesced again). The tile has one padding column so that a column read hits 32
different banks. Element-wise accesses (no 128-bit variant: it would need a register transpose of the
vectors, not written yet), bounds-checked for any M, N.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute

from tilerosetta.kernels.cute_dsl import common

ROWS_PER_STEP = 8  # thread rows: the CTA is TILE x 8 threads, each moving TILE / 8 elements


@cute.kernel
def _transpose_kernel(mX: cute.Tensor, mO: cute.Tensor, tile: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bx, by, _ = cute.arch.block_idx()
    m, n = cute.size(mX, mode=[0]), cute.size(mX, mode=[1])
    smem = cutlass.memory.SmemAllocator()
    buf = smem.allocate_tensor(mX.element_type, cute.make_layout((tile, tile + 1), stride=(tile + 1, 1)),
                               byte_alignment=16)
    tx = tidx % tile
    ty = tidx // tile
    row0 = by * tile  # tile origin in x
    col0 = bx * tile
    for k in cutlass.range_constexpr(0, tile, ROWS_PER_STEP):
        r = row0 + ty + k
        c = col0 + tx
        if r < m and c < n:
            buf[ty + k, tx] = mX[r, c]
    cute.arch.sync_threads()
    for k in cutlass.range_constexpr(0, tile, ROWS_PER_STEP):
        r = col0 + ty + k  # row of out = column of x
        c = row0 + tx
        if r < n and c < m:
            mO[r, c] = buf[tx, ty + k]


@cute.jit
def transpose(mX: cute.Tensor, mO: cute.Tensor, stream, tile: cutlass.Constexpr):
    m, n = cute.size(mX, mode=[0]), cute.size(mX, mode=[1])
    _transpose_kernel(mX, mO, tile).launch(grid=[cute.ceil_div(n, tile), cute.ceil_div(m, tile), 1],
                                           block=[tile * ROWS_PER_STEP, 1, 1], stream=stream)


def build(dtype, variant, cfg):
    m, n = common.sym(), common.sym()
    x, out = common.fake(dtype, (m, n), 1), common.fake(dtype, (n, m), 1)
    return transpose, (x, out, common.stream(), cfg["TILE"])


def launch(compiled, x, out):
    compiled(x, out)
