"""transpose in CuTe DSL: out (N, M) = x (M, N)ᵀ, through a shared-memory tile.

Each CTA moves one TILE x TILE tile: it reads rows of x (consecutive threads on consecutive columns:
coalesced) into shared memory, then reads the tile's columns and writes them as rows of out (coalesced
again). The tile has one padding column so that threads reading down a column spread over the banks.
  "vec" variant (M and N whole numbers of 128-bit vectors, bases aligned): each thread reads one vector of
    a row of x, and writes one vector of a row of out gathered from `vec` rows of the tile.
  "scalar" variant (any M, N): one element per access, bounds-checked.
At most 256 threads per CTA (fewer when a tile has fewer vectors); each moves TILE * TILE / threads elements.
OUT_ROWS picks the fastest tile index of the flat grid: 0 x's column tiles (CTAs read along x's rows), 1 x's row
tiles (CTAs write along out's rows, the order of tile_cpp's and TileGym's kernels; bench/GAPS.md).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute

from tilerosetta.kernels.cute_dsl import common

MAX_THREADS = 256


def _threads(tile: int, vec: int) -> int:
    """Threads of a CTA: a whole number of tile rows of vectors, at most MAX_THREADS and at most the tile."""
    per_row = tile // vec
    return per_row * min(tile, MAX_THREADS // per_row)


@cute.kernel
def _transpose_kernel(gX: cute.Tensor, gO: cute.Tensor, m: cutlass.Int32, n: cutlass.Int32,
                      tile: cutlass.Constexpr, vec: cutlass.Constexpr, threads: cutlass.Constexpr,
                      out_rows: cutlass.Constexpr):
    # gX: ((1, vec), (M, N / vec)) and gO: ((1, vec), (N, M / vec)): vectors along rows
    tidx, _, _ = cute.arch.thread_idx()
    bid, _, _ = cute.arch.block_idx()
    # One flat grid axis (x allows 2^31 - 1 blocks; y and z only 65535): tile (by, bx) of x.
    if cutlass.const_expr(out_rows):
        tiles_m = (m + tile - 1) // tile
        by = bid % tiles_m
        bx = bid // tiles_m
    else:
        tiles_n = (n + tile - 1) // tile
        bx = bid % tiles_n
        by = bid // tiles_n
    smem = cutlass.memory.SmemAllocator()
    buf = smem.allocate_tensor(gX.element_type, cute.make_layout((tile, tile + 1), stride=(tile + 1, 1)),
                               byte_alignment=16)
    per_row = tile // vec  # vectors per tile row
    step = threads // per_row  # tile rows handled at once (divides tile: both powers of two, step <= tile)
    tx = tidx % per_row
    ty = tidx // per_row
    row0 = by * tile  # tile origin in x
    col0 = bx * tile
    # every load of the thread first, each alone in its bounds branch, then the shared-memory stores: a branch
    # that also stored its vector waited there for the load, so a thread's loads went out one after another.
    # A vector outside x leaves its registers unset; what they put in the tile is never written out
    loads = tile // step
    regs = cute.make_rmem_tensor(cute.make_layout(((1, vec), loads)), gX.element_type)
    for k in cutlass.range_constexpr(loads):
        r = row0 + ty + k * step
        c = col0 + tx * vec
        if r < m and c < n:  # vec variant: n is a multiple of vec, so the whole vector is inside
            regs[None, k].store(gX[(None, (r, (col0 // vec) + tx))].load())
    for k in cutlass.range_constexpr(loads):
        for i in cutlass.range_constexpr(vec):
            buf[ty + k * step, tx * vec + i] = regs[(0, i), k]
    cute.arch.sync_threads()
    # the same on the way out: the tile's columns gathered first, then the bounds-checked stores
    for k in cutlass.range_constexpr(loads):
        for i in cutlass.range_constexpr(vec):
            regs[(0, i), k] = buf[tx * vec + i, ty + k * step]
    for k in cutlass.range_constexpr(loads):
        r = col0 + ty + k * step  # row of out = column of x
        c = row0 + tx * vec  # first column of out = row of x
        if r < n and c < m:
            gO[(None, (r, (row0 // vec) + tx))].store(regs[None, k].load())


@cute.jit
def transpose(mX: cute.Tensor, mO: cute.Tensor, stream, vec: cutlass.Constexpr, tile: cutlass.Constexpr,
              out_rows: cutlass.Constexpr):
    m, n = cute.size(mX, mode=[0]), cute.size(mX, mode=[1])
    gX, gO = (cute.zipped_divide(t, (1, vec)) for t in (mX, mO))
    threads = _threads(tile, vec)
    _transpose_kernel(gX, gO, m, n, tile, vec, threads, out_rows).launch(
        grid=[cute.ceil_div(n, tile) * cute.ceil_div(m, tile), 1, 1], block=[threads, 1, 1], stream=stream)


def build(dtype, variant, cfg):
    vec = common.vec_width(dtype, variant)
    m, n = common.sym(vec), common.sym(vec)
    x, out = common.fake(dtype, (m, n), vec), common.fake(dtype, (n, m), vec)
    return transpose, (x, out, common.stream(), vec, cfg["TILE"], bool(cfg.get("OUT_ROWS", 0)))


def launch(compiled, x, out):
    compiled(x, out)
