"""transpose: out (N, M) = x (M, N)^T.

Each block loads a TM x TN tile of x, transposes it in registers and stores it as the TN x TM tile
(j, i) of out; both the load and the store are row-contiguous, so both coalesce. The grid is flat
(one axis can hold 2^31 blocks) and unflattened here. OUT_ROWS picks which tile index runs fastest:
  * 0: x's column tiles (j): consecutive blocks read along a row band of x and write down a column
    band of out;
  * 1: x's row tiles (i): consecutive blocks write along a row band of out (the order of tile_cpp's
    kernel and TileGym's, the two fastest transposes on the H200 with the same SASS shape as this one:
    bench/GAPS.md).
"""

import cuda.tile as ct

from tilerosetta.kernels.cutile.config import Launch, plan_transpose


@ct.kernel
def transpose_kernel(x, out, TM: ct.Constant[int], TN: ct.Constant[int], OUT_ROWS: ct.Constant[bool]):
    pid = ct.bid(0)
    if OUT_ROWS:
        tiles_m = ct.cdiv(x.shape[0], TM)
        i = pid % tiles_m
        j = pid // tiles_m
    else:
        tiles_n = ct.cdiv(x.shape[1], TN)
        i = pid // tiles_n
        j = pid % tiles_n
    t = ct.load(x, (i, j), (TM, TN), padding_mode=ct.PaddingMode.ZERO)
    ct.store(out, (j, i), ct.transpose(t))


def prepare(x, out, cfg):
    tm, tn, grid = plan_transpose(x.shape[0], x.shape[1], cfg)
    return [Launch(transpose_kernel, grid, (x, out, tm, tn, bool(cfg.get("OUT_ROWS", 0))))]
