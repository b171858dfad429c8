"""transpose: out (N, M) = x (M, N)^T.

Each block loads a TM x TN tile of x, transposes it in registers and stores it as the TN x TM tile
(j, i) of out; both the load and the store are row-contiguous, so both coalesce. The grid is flat
(one axis can hold 2^31 blocks) and unflattened here, column tiles fastest.
"""

import cuda.tile as ct

from tilerosetta.kernels.cutile.config import Launch, plan_transpose


@ct.kernel
def transpose_kernel(x, out, TM: ct.Constant[int], TN: ct.Constant[int]):
    tiles_n = ct.cdiv(x.shape[1], TN)
    pid = ct.bid(0)
    i = pid // tiles_n
    j = pid % tiles_n
    t = ct.load(x, (i, j), (TM, TN), padding_mode=ct.PaddingMode.ZERO)
    ct.store(out, (j, i), ct.transpose(t))


def prepare(x, out, cfg):
    tm, tn, grid = plan_transpose(x.shape[0], x.shape[1], cfg)
    return [Launch(transpose_kernel, grid, (x, out, tm, tn))]
