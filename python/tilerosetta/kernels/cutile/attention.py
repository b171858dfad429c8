"""attention: flash-attention forward, out = softmax(q k^T * scale [causal]) v, q/k/v/out (B, H, S, D).

One block owns BM queries of one (b, h) and streams the keys/values in BN-row tiles, keeping the
running row max m, running denominator l and the unnormalised output acc in registers (online
softmax): when the max grows, l and acc are rescaled by exp(m_old - m_new). Scores are computed in
base 2 (scale * log2 e folded into one constant, exp2 instead of exp). S tails: K and V are zero-padded
and the padded key columns are masked to -inf, so they get probability 0 (V is zero-padded too, so
0 * padding never makes NaN). Causal: key j is visible to query i iff j <= i (top-left aligned), and
the key loop stops at the block's last query. Only the tiles that hold padded or (causal) future keys
pay for the mask; the others run an unmasked copy of the same step. Every real query sees key 0 in
the first tile, so its max is finite after tile 0 and no exp(-inf - -inf) = NaN arises; padded query
rows are dropped by ct.store. fp32 accumulation; P is rounded to the input dtype for the second mma, as usual.
"""

import math

import cuda.tile as ct

from tilerosetta.kernels.cutile.config import Launch, plan_attention
from tilerosetta.kernels.cutile.hints import hinted

ZERO = ct.PaddingMode.ZERO
LOG2E = 1.4426950408889634


def _step(q, k3, v3, bh, j, m_i, l_i, acc, rows, cols0, s_len, QK_SCALE, CAUSAL, MASKED, BM, BN, D):
    """One key/value tile of the online softmax; MASKED (a constant) only on tiles that need it."""
    # K^T tile (D, BN) straight from row-major K via a permuted load (no register transpose).
    kt = ct.reshape(ct.load(k3, (bh, 0, j), (1, D, BN), order=(0, 2, 1), padding_mode=ZERO), (D, BN))
    s = ct.mma(q, kt, ct.zeros((BM, BN), ct.float32))
    if not QK_SCALE > 0.0:
        s = s * QK_SCALE  # scale <= 0 (a compile-time branch): scale first, as the max needs
    if MASKED:
        cols = cols0 + j * BN
        if CAUSAL:
            visible = (cols < s_len) & (cols <= rows)
        else:
            visible = cols < s_len
        s = ct.where(visible, s, float("-inf"))
    # flush_to_zero: a bare MUFU.EX2; without it every element also pays a denormal-range test and two
    # multiplies (cuobjdump: FSETP.GEU + 2 FMUL per exp2). Probabilities below 2^-126 become 0.
    if QK_SCALE > 0.0:
        # max(s * c) = max(s) * c for c > 0, so the scale is applied to BM row maxima and folded into
        # one FFMA per score (s * c - m) instead of a multiply and a subtract.
        m_new = ct.maximum(m_i, ct.max(s, axis=1, keepdims=True) * QK_SCALE)
        p = ct.exp2(s * QK_SCALE - m_new, flush_to_zero=True)
    else:
        m_new = ct.maximum(m_i, ct.max(s, axis=1, keepdims=True))
        p = ct.exp2(s - m_new, flush_to_zero=True)
    alpha = ct.exp2(m_i - m_new, flush_to_zero=True)
    l_i = l_i * alpha + ct.sum(p, axis=1, keepdims=True)
    v = ct.reshape(ct.load(v3, (bh, j, 0), (1, BN, D), padding_mode=ZERO), (BN, D))
    acc = ct.mma(ct.astype(p, q.dtype), v, acc * alpha)
    return m_new, l_i, acc


@ct.kernel
def attention_kernel(q3, k3, v3, out3, QK_SCALE: ct.Constant[float], CAUSAL: ct.Constant[bool],
                     BM: ct.Constant[int], BN: ct.Constant[int], D: ct.Constant[int]):
    # One flat grid axis of (batch-head, query block) pairs, query block fastest: B*H can exceed the
    # 65535 limit of grid y (the launch order is the one a (query blocks, B*H) grid had).
    # Heaviest query blocks first: under CAUSAL block qi streams qi+1 key tiles, so launching them in
    # reverse keeps the last wave from being one long block on an otherwise idle GPU.
    s_len = q3.shape[1]
    n_q = ct.cdiv(s_len, BM)
    bh = ct.bid(0) // n_q
    qi = n_q - 1 - ct.bid(0) % n_q
    q = ct.reshape(ct.load(q3, (bh, qi, 0), (1, BM, D), padding_mode=ZERO), (BM, D))
    m_i = ct.full((BM, 1), float("-inf"), ct.float32)
    l_i = ct.zeros((BM, 1), ct.float32)
    acc = ct.zeros((BM, D), ct.float32)
    rows = ct.reshape(ct.arange(BM, dtype=ct.int32), (BM, 1)) + qi * BM
    cols0 = ct.reshape(ct.arange(BN, dtype=ct.int32), (1, BN))
    # Tiles [0, n_full) have every key real and (causal) visible to every query of the block:
    # key (j+1)*BN - 1 <= first query qi*BM and < S. The rest up to n_kv need the mask.
    if CAUSAL:
        n_kv = ct.cdiv(ct.minimum(s_len, (qi + 1) * BM), BN)
        n_full = ct.minimum(qi * BM + 1, s_len) // BN
    else:
        n_kv = ct.cdiv(s_len, BN)
        n_full = s_len // BN
    for j in range(n_full):
        m_i, l_i, acc = _step(q, k3, v3, bh, j, m_i, l_i, acc, rows, cols0, s_len, QK_SCALE, CAUSAL, False,
                              BM, BN, D)
    for j in range(n_full, n_kv):
        m_i, l_i, acc = _step(q, k3, v3, bh, j, m_i, l_i, acc, rows, cols0, s_len, QK_SCALE, CAUSAL, True,
                              BM, BN, D)
    o = acc * (1.0 / l_i)  # BM reciprocals, not BM*D IEEE divisions
    ct.store(out3, (bh, qi, 0), ct.reshape(ct.astype(o, out3.dtype), (1, BM, D)))


def prepare(q, k, v, out, cfg, causal, scale):
    b, h, s, d = q.shape
    p = plan_attention(b * h, s, d, cfg)
    sm_scale = float(scale) if scale is not None else 1.0 / math.sqrt(d)
    views = [t.view(b * h, s, d) for t in (q, k, v, out)]
    kernel = hinted(attention_kernel, occupancy=p["OCC"] or None, num_worker_warps=p["WARPS"] or None)
    return [Launch(kernel, p["grid"], (*views, sm_scale * LOG2E, bool(causal), p["BM"], p["BN"], d))]
