"""transpose: out (N, M) = x (M, N)^T with one (BLOCK_M, BLOCK_N) tile per program.

The tile is read along x's rows and written along out's rows (tl.trans), so both the load and the
store are coalesced; Triton stages the layout change through shared memory. A 1-D grid (tile index
split into row and column blocks) avoids CUDA's 65535 limit on the second grid axis. OUT_ROWS picks the
fastest tile index: 0 x's column blocks (programs read along x's rows), 1 x's row blocks (programs write
along out's rows, the order of tile_cpp's and TileGym's kernels; bench/GAPS.md).
"""

import triton
import triton.language as tl

from tilerosetta.kernels.triton import Launch


@triton.jit
def transpose_kernel(x_ptr, out_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, OUT_ROWS: tl.constexpr):
    pid = tl.program_id(0)
    if OUT_ROWS:
        tiles_m = tl.cdiv(M, BLOCK_M)
        bm, bn = pid % tiles_m, pid // tiles_m
    else:
        tiles_n = tl.cdiv(N, BLOCK_N)
        bm, bn = pid // tiles_n, pid % tiles_n
    rm = bm.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = bn.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    tile = tl.load(x_ptr + rm[:, None] * N + rn[None, :], mask=(rm[:, None] < M) & (rn[None, :] < N))
    # out[n, m] = x[m, n]: write the (BLOCK_N, BLOCK_M) tile of out.
    tl.store(out_ptr + rn[:, None] * M + rm[None, :], tl.trans(tile),
             mask=(rn[:, None] < N) & (rm[None, :] < M))


def prepare(x, out, cfg):
    m, n = x.shape
    grid = (triton.cdiv(m, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"]),)
    return [Launch(transpose_kernel, grid, (x, out, m, n), {"BLOCK_M": cfg["BLOCK_M"], "BLOCK_N": cfg["BLOCK_N"],
                                                        "OUT_ROWS": cfg.get("OUT_ROWS", 0)},
                   {"num_warps": cfg.get("num_warps", 4)})]
