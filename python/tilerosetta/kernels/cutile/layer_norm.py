"""layer_norm: out = (x - mean) / sqrt(var + eps) * w + b over rows of x (M, N), biased variance.

The variance is taken around the mean (sum((x - mean)^2)), not as E[x^2] - E[x]^2, which cancels
catastrophically when |mean| >> std (the spec's inputs have mean 3 to catch that). Padded columns
would contribute (0 - mean)^2, so they are masked out with `where(col < N)`.
  * single: the whole row in one tile (BM rows per block), one read of x.
  * looped: pass 1 the mean, pass 2 the centred sum of squares, pass 3 normalise and store
    (three reads of x; simple and exact, at 1.5x the traffic of the single-tile path).
  * exact: the single-tile case when every tile is whole (N a power of two, BM dividing M): no bounds
    checks, and w and b come by TMA like x, so the producer warp issues all three at the start of the
    block. Why: loaded with LDG, tileiras sinks the w/b loads to their use after both reductions, and
    issues them there as 4-8 serial LDG -> STS -> fence steps per block (bench/GAPS.md, cutile_py
    layer_norm). Staging w and b raises shared memory from 33.9 to 50-54 KB per block, which still fits
    the 4 blocks the occupancy hint asks for up to 8192-wide tiles (sm_90 cubins); wider tiles (the
    occupancy-2 plan of N 16384) would drop to 1 block/SM, so they keep w/b on LDG (WB_TMA=False).
The other kernels load w and b without TMA (allow_tma=False): they are the same for every block (L2
hits), and TMA would stage them through shared memory, which limits how many blocks fit on an SM.
The exact kernel takes rms_norm.py's LOAD_TMA / STORE_TMA flags (config.tma_flags): LDG / STG instead of TMA.
"""

import cuda.tile as ct

from tilerosetta.kernels.cutile.config import Launch, plan_rows, tma_flags
from tilerosetta.kernels.cutile.hints import hinted

ZERO = ct.PaddingMode.ZERO


@ct.kernel
def layer_norm_single_kernel(x, w, b, out, EPS: ct.Constant[float], BM: ct.Constant[int],
                             BN: ct.Constant[int]):
    i = ct.bid(0)
    n = x.shape[1]
    t = ct.astype(ct.load(x, (i, 0), (BM, BN), padding_mode=ZERO), ct.float32)
    mean = ct.sum(t, axis=1, keepdims=True) / n
    valid = ct.reshape(ct.arange(BN, dtype=ct.int32) < n, (1, BN))
    d = ct.where(valid, t - mean, 0.0)
    rstd = ct.rsqrt(ct.sum(d * d, axis=1, keepdims=True) / n + EPS)
    wt = ct.reshape(ct.astype(ct.load(w, (0,), (BN,), padding_mode=ZERO, allow_tma=False), ct.float32), (1, BN))
    bt = ct.reshape(ct.astype(ct.load(b, (0,), (BN,), padding_mode=ZERO, allow_tma=False), ct.float32), (1, BN))
    ct.store(out, (i, 0), ct.astype(d * rstd * wt + bt, out.dtype))


@ct.kernel
def layer_norm_exact_kernel(x, w, b, out, EPS: ct.Constant[float], BM: ct.Constant[int], BN: ct.Constant[int],
                            LOAD_TMA: ct.Constant[bool], WB_TMA: ct.Constant[bool], STORE_TMA: ct.Constant[bool]):
    i = ct.bid(0)  # N == BN: no padded columns, so no mask on the centred values
    t = ct.astype(ct.load(x, (i, 0), (BM, BN), check_bounds=False, allow_tma=LOAD_TMA), ct.float32)
    wt = ct.reshape(ct.astype(ct.load(w, (0,), (BN,), check_bounds=False, allow_tma=WB_TMA), ct.float32), (1, BN))
    bt = ct.reshape(ct.astype(ct.load(b, (0,), (BN,), check_bounds=False, allow_tma=WB_TMA), ct.float32), (1, BN))
    mean = ct.sum(t, axis=1, keepdims=True) / BN
    d = t - mean
    rstd = ct.rsqrt(ct.sum(d * d, axis=1, keepdims=True) / BN + EPS)
    ct.store(out, (i, 0), ct.astype(d * rstd * wt + bt, out.dtype), check_bounds=False, allow_tma=STORE_TMA)


@ct.kernel
def layer_norm_loop_kernel(x, w, b, out, EPS: ct.Constant[float], BN: ct.Constant[int]):
    row = ct.bid(0)
    n = x.shape[1]
    n_tiles = ct.cdiv(n, BN)
    acc = ct.zeros((1, BN), ct.float32)
    for j in range(n_tiles):
        acc = acc + ct.astype(ct.load(x, (row, j), (1, BN), padding_mode=ZERO), ct.float32)
    mean = ct.sum(acc, axis=1, keepdims=True) / n
    cols = ct.reshape(ct.arange(BN, dtype=ct.int32), (1, BN))
    acc2 = ct.zeros((1, BN), ct.float32)
    for j in range(n_tiles):
        t = ct.astype(ct.load(x, (row, j), (1, BN), padding_mode=ZERO), ct.float32)
        d = ct.where(cols + j * BN < n, t - mean, 0.0)
        acc2 = acc2 + d * d
    rstd = ct.rsqrt(ct.sum(acc2, axis=1, keepdims=True) / n + EPS)
    for j in range(n_tiles):
        t = ct.astype(ct.load(x, (row, j), (1, BN), padding_mode=ZERO), ct.float32)
        wt = ct.reshape(ct.astype(ct.load(w, (j,), (BN,), padding_mode=ZERO, allow_tma=False), ct.float32), (1, BN))
        bt = ct.reshape(ct.astype(ct.load(b, (j,), (BN,), padding_mode=ZERO, allow_tma=False), ct.float32), (1, BN))
        ct.store(out, (row, j), ct.astype((t - mean) * rstd * wt + bt, out.dtype))


def prepare(x, w, b, out, cfg, eps):
    m, n = x.shape
    p = plan_rows(m, n, cfg)
    hints = {"occupancy": p["OCC"], "num_worker_warps": p["WARPS"] or None}
    if p["exact"]:
        return [Launch(hinted(layer_norm_exact_kernel, **hints), p["grid"],
                       (x, w, b, out, float(eps), p["BM"], p["BN"], *tma_flags(p, cfg)))]
    if p["single"]:
        return [Launch(hinted(layer_norm_single_kernel, **hints), p["grid"], (x, w, b, out, float(eps), p["BM"], p["BN"]))]
    return [Launch(hinted(layer_norm_loop_kernel, **hints), p["grid"], (x, w, b, out, float(eps), p["BN"]))]
