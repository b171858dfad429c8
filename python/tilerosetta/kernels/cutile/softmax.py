"""softmax: numerically stable softmax over the last dim of x (M, N); fp32 math, one rounding out.

Two kernels, chosen on the host by config.plan_rows:
  * single: the whole row fits one BN = next_pow2(N) wide tile; BM rows per block. One read of x.
    Columns past N are loaded as -inf, so they add exp(-inf) = 0 to the sum and never win the max.
  * looped: rows longer than MAX_SINGLE. Pass 1 keeps a running max m and a running sum l rescaled
    by exp(m_old - m_new) whenever the max grows (online softmax); pass 2 writes exp(x - m) / l.
    Two reads of x instead of three.
Rows past M (in the last single block) are computed on -inf padding and produce NaN, but ct.store
drops them, so they never reach memory.

Knobs for the sweep (bench/GAPS.md, cutile_py softmax); the defaults (EXACT=0, STORE_TMA=1, LOAD_TMA=1)
compile to the same kernels as before the knobs existed:
  * EXACT=1: when every single-tile block is whole (N a power of two, BM dividing M), load and store
    without bounds checks (check_bounds=False): no predicates, fewer branch regions.
  * LOAD_TMA (EXACT tiles only): 1 lets tileiras load x by TMA, which it then does (UTMALDG through shared
    memory); 0 keeps LDG. The bounds-checked load is LDG either way (TMA cannot pad with -inf).
  * STORE_TMA=0: store with plain STG (allow_tma=False) instead of staging the output through shared
    memory for a TMA store (STS, fences and barriers, UTMASTG per 64 columns). With no TMA left, tileiras
    also drops the producer warpgroup: 128 threads instead of 256.
"""

import cuda.tile as ct

from tilerosetta.kernels.cutile.config import Launch, plan_rows
from tilerosetta.kernels.cutile.hints import hinted

NEG_INF = ct.PaddingMode.NEG_INF
# exp(x - m) as exp2((x - m) * log2e) with flush_to_zero: FADD, FMUL and a bare MUFU.EX2 per element
# (what Triton's tl.exp is; x - m first, so a row with large |x| loses nothing to rounding x*log2e). ct.exp's full-precision expansion and even its APPROX mode (which still
# tests for denormal results: FSETP + 2 FMUL) cost several ALU ops per element, a large share of a
# memory-bound row's time at 4 TB/s. Results below 2^-126 become 0 (the spec's norm-wise error
# does not notice).
LOG2E = 1.4426950408889634


@ct.kernel
def softmax_single_kernel(x, out, BM: ct.Constant[int], BN: ct.Constant[int], CHECK: ct.Constant[bool],
                          LOAD_TMA: ct.Constant[bool], STORE_TMA: ct.Constant[bool]):
    i = ct.bid(0)
    if CHECK:
        raw = ct.load(x, (i, 0), (BM, BN), padding_mode=NEG_INF)
    else:  # a whole tile (prepare): nothing to pad, and tileiras 13.4 refuses a padding mode here
        raw = ct.load(x, (i, 0), (BM, BN), check_bounds=False, allow_tma=LOAD_TMA)
    t = ct.astype(raw, ct.float32)
    m = ct.max(t, axis=1, keepdims=True)
    e = ct.exp2((t - m) * LOG2E, flush_to_zero=True)
    s = ct.sum(e, axis=1, keepdims=True)
    # One reciprocal per row and a multiply per element: e / s per element compiles to the IEEE
    # division with its slow-path check (FCHK + call) on every element.
    ct.store(out, (i, 0), ct.astype(e * (1.0 / s), out.dtype), check_bounds=CHECK, allow_tma=STORE_TMA)


@ct.kernel
def softmax_loop_kernel(x, out, BN: ct.Constant[int], STORE_TMA: ct.Constant[bool]):
    row = ct.bid(0)
    n_tiles = ct.cdiv(x.shape[1], BN)
    m = ct.full((1, 1), float("-inf"), ct.float32)
    l = ct.zeros((1, 1), ct.float32)
    for j in range(n_tiles):
        t = ct.astype(ct.load(x, (row, j), (1, BN), padding_mode=NEG_INF), ct.float32)
        m_new = ct.maximum(m, ct.max(t, axis=1, keepdims=True))
        # Every tile holds at least one real column, so m_new is finite and exp() never sees inf-inf.
        p = ct.exp2((t - m_new) * LOG2E, flush_to_zero=True)
        l = l * ct.exp2((m - m_new) * LOG2E, flush_to_zero=True) + ct.sum(p, axis=1, keepdims=True)
        m = m_new
    inv = 1.0 / l
    for j in range(n_tiles):
        t = ct.astype(ct.load(x, (row, j), (1, BN), padding_mode=NEG_INF), ct.float32)
        ct.store(out, (row, j), ct.astype(ct.exp2((t - m) * LOG2E, flush_to_zero=True) * inv, out.dtype),
                 allow_tma=STORE_TMA)


def prepare(x, out, cfg):
    m, n = x.shape
    p = plan_rows(m, n, cfg)
    hints = {"occupancy": p["OCC"], "num_worker_warps": p["WARPS"] or None}
    store_tma = bool(cfg.get("STORE_TMA", 1))
    if p["single"]:
        check = not (cfg.get("EXACT", 0) and p["exact"])
        load_tma = check or bool(cfg.get("LOAD_TMA", 1))  # read on exact tiles only: one compile otherwise
        args = (x, out, p["BM"], p["BN"], check, load_tma, store_tma)
        return [Launch(hinted(softmax_single_kernel, **hints), p["grid"], args)]
    return [Launch(hinted(softmax_loop_kernel, **hints), p["grid"], (x, out, p["BN"], store_tma))]
