"""rms_norm: out = x / sqrt(mean(x^2) + eps) * w over rows of x (M, N); fp32 math, one rounding out.

Single-tile (row fits BN = next_pow2(N), BM rows per block) or looped (sum of squares over LOOP_TN
tiles, then a second pass that scales), chosen by config.plan_rows. Padding is zero, which adds
nothing to the sum of squares; the mean divides by the true N. eps is a compile-time constant (a
handful of distinct values in practice), which keeps the kernel signature free of float scalars.
The exact kernel serves the single-tile case when every tile is whole (N a power of two, BM dividing
M): no bounds checks, and w comes by TMA like x, so the producer warp issues both at the start of the
block. Why: loaded with LDG, tileiras sinks the w load to its use after the reduction and issues it
there as 4-8 serial LDG -> STS -> fence steps per block (bench/GAPS.md, cutile_py rms_norm). Staging w
raises shared memory from 33.9 to ~50 KB per block, which still fits the 4 blocks the occupancy hint asks
for up to 8192-wide tiles (sm_90 cubins); wider tiles keep w on LDG (WB_TMA=False, see WB_TMA_MAX_N).
The other kernels load w without TMA (allow_tma=False): every block reads the same w from L2, and a TMA
load would stage it through shared memory, which limits how many blocks fit on an SM.
The exact kernel's flags LOAD_TMA=0 / STORE_TMA=0 (config.tma_flags) load x and w with LDG / store with STG
instead: without any TMA tileiras drops the producer warpgroup (128 threads instead of 256), which made
softmax's whole-row kernel 1.5x faster on the H200 (config.py); the sweep decides per shape.
"""

import cuda.tile as ct

from tilerosetta.kernels.cutile.config import Launch, plan_rows, tma_flags
from tilerosetta.kernels.cutile.hints import hinted

ZERO = ct.PaddingMode.ZERO


@ct.kernel
def rms_norm_single_kernel(x, w, out, EPS: ct.Constant[float], BM: ct.Constant[int], BN: ct.Constant[int]):
    i = ct.bid(0)
    t = ct.astype(ct.load(x, (i, 0), (BM, BN), padding_mode=ZERO), ct.float32)
    wt = ct.reshape(ct.astype(ct.load(w, (0,), (BN,), padding_mode=ZERO, allow_tma=False), ct.float32), (1, BN))
    ms = ct.sum(t * t, axis=1, keepdims=True) / x.shape[1]
    ct.store(out, (i, 0), ct.astype(t * ct.rsqrt(ms + EPS) * wt, out.dtype))


@ct.kernel
def rms_norm_exact_kernel(x, w, out, EPS: ct.Constant[float], BM: ct.Constant[int], BN: ct.Constant[int],
                          LOAD_TMA: ct.Constant[bool], WB_TMA: ct.Constant[bool], STORE_TMA: ct.Constant[bool]):
    i = ct.bid(0)
    t = ct.astype(ct.load(x, (i, 0), (BM, BN), check_bounds=False, allow_tma=LOAD_TMA), ct.float32)
    wt = ct.reshape(ct.astype(ct.load(w, (0,), (BN,), check_bounds=False, allow_tma=WB_TMA), ct.float32), (1, BN))
    ms = ct.sum(t * t, axis=1, keepdims=True) / BN  # N == BN
    ct.store(out, (i, 0), ct.astype(t * ct.rsqrt(ms + EPS) * wt, out.dtype), check_bounds=False, allow_tma=STORE_TMA)


@ct.kernel
def rms_norm_loop_kernel(x, w, out, EPS: ct.Constant[float], BN: ct.Constant[int]):
    row = ct.bid(0)
    n_tiles = ct.cdiv(x.shape[1], BN)
    acc = ct.zeros((1, BN), ct.float32)  # elementwise partial sums; one tree reduction at the end
    for j in range(n_tiles):
        t = ct.astype(ct.load(x, (row, j), (1, BN), padding_mode=ZERO), ct.float32)
        acc = acc + t * t
    r = ct.rsqrt(ct.sum(acc, axis=1, keepdims=True) / x.shape[1] + EPS)
    for j in range(n_tiles):
        t = ct.astype(ct.load(x, (row, j), (1, BN), padding_mode=ZERO), ct.float32)
        wt = ct.reshape(ct.astype(ct.load(w, (j,), (BN,), padding_mode=ZERO, allow_tma=False), ct.float32), (1, BN))
        ct.store(out, (row, j), ct.astype(t * r * wt, out.dtype))


def prepare(x, w, out, cfg, eps):
    m, n = x.shape
    p = plan_rows(m, n, cfg)
    hints = {"occupancy": p["OCC"], "num_worker_warps": p["WARPS"] or None}
    if p["exact"]:
        return [Launch(hinted(rms_norm_exact_kernel, **hints), p["grid"],
                       (x, w, out, float(eps), p["BM"], p["BN"], *tma_flags(p, cfg)))]
    if p["single"]:
        return [Launch(hinted(rms_norm_single_kernel, **hints), p["grid"], (x, w, out, float(eps), p["BM"], p["BN"]))]
    return [Launch(hinted(rms_norm_loop_kernel, **hints), p["grid"], (x, w, out, float(eps), p["BN"]))]
