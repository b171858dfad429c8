"""transpose: out (N, M) = x (M, N)^T with one (BLOCK_M, BLOCK_N) tile per program.

The tile is read along x's rows and written along out's rows (tl.trans), so both the load and the
store are coalesced; Triton stages the layout change through shared memory. A 1-D grid (tile index
split into row and column blocks) avoids CUDA's 65535 limit on the second grid axis.
"""

import triton
import triton.language as tl

from tilerosetta.kernels.triton import Launch


@triton.jit
def transpose_kernel(x_ptr, out_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(N, BLOCK_N)
    rm = (pid // tiles_n).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = (pid % tiles_n).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    tile = tl.load(x_ptr + rm[:, None] * N + rn[None, :], mask=(rm[:, None] < M) & (rn[None, :] < N))
    # out[n, m] = x[m, n]: write the (BLOCK_N, BLOCK_M) tile of out.
    tl.store(out_ptr + rn[:, None] * M + rm[None, :], tl.trans(tile),
             mask=(rn[:, None] < N) & (rm[None, :] < M))


def prepare(x, out, cfg):
    m, n = x.shape
    grid = (triton.cdiv(m, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"]),)
    return [Launch(transpose_kernel, grid, (x, out, m, n), {"BLOCK_M": cfg["BLOCK_M"], "BLOCK_N": cfg["BLOCK_N"]},
                   {"num_warps": cfg.get("num_warps", 4)})]
