"""add_rms_norm: sum = x + residual; out = sum / sqrt(mean(sum^2) + eps) * weight over rows of (M, N).

The rms_norm kernels (rms_norm.py) with the add in front: x and residual are added in fp32, `sum` is
stored once in the output dtype and the norm uses the fp32 sum. Single-tile when the row fits
(config.plan_rows), else looped: pass 1 adds, stores `sum` and accumulates squares per LOOP_TN tile;
pass 2 re-adds x + residual (not a re-read of `sum`: the fp32 value, and no read-after-write of global
memory within the block) to scale. Zero padding adds nothing to the sum of squares.
Whole tiles (N a power of two, BM dividing M) take the exact kernel: no bounds checks, and the weight
comes by TMA with x and residual up to WB_TMA_MAX_N wide rows, as in rms_norm.py (which says why).
The exact kernel takes rms_norm.py's LOAD_TMA / STORE_TMA flags (config.tma_flags): LDG / STG instead of TMA.
"""

import cuda.tile as ct

from tilerosetta.kernels.cutile.config import Launch, plan_rows, tma_flags
from tilerosetta.kernels.cutile.hints import hinted

ZERO = ct.PaddingMode.ZERO


def _added(x, residual, index, shape):
    a = ct.astype(ct.load(x, index, shape, padding_mode=ZERO), ct.float32)
    return a + ct.astype(ct.load(residual, index, shape, padding_mode=ZERO), ct.float32)


@ct.kernel
def add_rms_norm_single_kernel(x, residual, weight, sum_out, out, EPS: ct.Constant[float], BM: ct.Constant[int],
                               BN: ct.Constant[int]):
    i = ct.bid(0)
    s = _added(x, residual, (i, 0), (BM, BN))
    ct.store(sum_out, (i, 0), ct.astype(s, sum_out.dtype))
    wt = ct.reshape(ct.astype(ct.load(weight, (0,), (BN,), padding_mode=ZERO, allow_tma=False), ct.float32), (1, BN))
    ms = ct.sum(s * s, axis=1, keepdims=True) / x.shape[1]
    ct.store(out, (i, 0), ct.astype(s * ct.rsqrt(ms + EPS) * wt, out.dtype))


@ct.kernel
def add_rms_norm_exact_kernel(x, residual, weight, sum_out, out, EPS: ct.Constant[float], BM: ct.Constant[int],
                              BN: ct.Constant[int], LOAD_TMA: ct.Constant[bool], WB_TMA: ct.Constant[bool],
                              STORE_TMA: ct.Constant[bool]):
    i = ct.bid(0)
    s = ct.astype(ct.load(x, (i, 0), (BM, BN), check_bounds=False, allow_tma=LOAD_TMA), ct.float32) + \
        ct.astype(ct.load(residual, (i, 0), (BM, BN), check_bounds=False, allow_tma=LOAD_TMA), ct.float32)
    wt = ct.reshape(ct.astype(ct.load(weight, (0,), (BN,), check_bounds=False, allow_tma=WB_TMA), ct.float32),
                    (1, BN))
    ct.store(sum_out, (i, 0), ct.astype(s, sum_out.dtype), check_bounds=False, allow_tma=STORE_TMA)
    ms = ct.sum(s * s, axis=1, keepdims=True) / BN  # N == BN
    ct.store(out, (i, 0), ct.astype(s * ct.rsqrt(ms + EPS) * wt, out.dtype), check_bounds=False, allow_tma=STORE_TMA)


@ct.kernel
def add_rms_norm_loop_kernel(x, residual, weight, sum_out, out, EPS: ct.Constant[float], BN: ct.Constant[int]):
    row = ct.bid(0)
    n_tiles = ct.cdiv(x.shape[1], BN)
    acc = ct.zeros((1, BN), ct.float32)
    for j in range(n_tiles):
        s = _added(x, residual, (row, j), (1, BN))
        ct.store(sum_out, (row, j), ct.astype(s, sum_out.dtype))
        acc = acc + s * s
    r = ct.rsqrt(ct.sum(acc, axis=1, keepdims=True) / x.shape[1] + EPS)
    for j in range(n_tiles):
        s = _added(x, residual, (row, j), (1, BN))
        wt = ct.reshape(ct.astype(ct.load(weight, (j,), (BN,), padding_mode=ZERO, allow_tma=False), ct.float32),
                        (1, BN))
        ct.store(out, (row, j), ct.astype(s * r * wt, out.dtype))


def prepare(x, residual, weight, sum, out, cfg, eps):  # noqa: A002 (the spec's argument names)
    m, n = x.shape
    p = plan_rows(m, n, cfg)
    hints = {"occupancy": p["OCC"], "num_worker_warps": p["WARPS"] or None}
    args = (x, residual, weight, sum, out, float(eps))
    if p["exact"]:
        return [Launch(hinted(add_rms_norm_exact_kernel, **hints), p["grid"],
                       (*args, p["BM"], p["BN"], *tma_flags(p, cfg)))]
    if p["single"]:
        return [Launch(hinted(add_rms_norm_single_kernel, **hints), p["grid"], (*args, p["BM"], p["BN"]))]
    return [Launch(hinted(add_rms_norm_loop_kernel, **hints), p["grid"], (*args, p["BN"]))]
