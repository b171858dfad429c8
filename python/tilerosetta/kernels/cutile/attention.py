"""attention: flash-attention forward, out = softmax(q k^T * scale [causal]) v; q/out (B, H, S, D), k/v
(B, Hkv, Sk, D) with Hkv | H (grouped-query), causal mask aligned to the end of the keys.

Rows: q and out are seen as (NQ, M, D): (B*H, S, D) with K/V head n // GQ (GQ = H / Hkv), or, when the G
heads of a group fit one query tile (decode), the packed (B*Hkv, G*S, D) with K/V head n (GQ = 1);
kernels/attention_split.py. Row r is query r % S and sees keys j <= r % S + Sk - S (causal).

One block owns BM rows of one row set and streams the keys/values in BN-row tiles, keeping the running
row max m, running denominator l and the unnormalised output acc in registers (online softmax): when the
max grows, l and acc are rescaled by exp(m_old - m_new). Scores are computed in base 2 (scale * log2 e
folded into one constant, exp2 instead of exp). Sk tails: K and V are zero-padded and the padded key
columns are masked to -inf, so they get probability 0 (V is zero-padded too, so 0 * padding never makes
NaN). Causal: the key loop stops at the block's last query's limit. Only the tiles that hold padded or
(causal) invisible keys pay for the mask; the others run an unmasked copy of the same step. Every real
query sees key 0, so its max is finite after the first tile of the key range and no exp(-inf - -inf) = NaN
arises; padded query rows are dropped by ct.store. fp32 accumulation; P is rounded to the input dtype for
the second mma, as usual.

Split-KV (SPLIT, decode at small batch): block (tile, split) covers key tiles [split*CT, +CT) and writes
m, l and the unnormalised acc to fp32 workspaces; `combine_kernel` merges the splits. A split may hold no
key some row can see, so its masked tiles guard the max (such a row keeps m = -inf and gets p = 0).
"""

import math

import cuda.tile as ct
import torch

from tilerosetta.backends.base import sm_count
from tilerosetta.kernels.cutile.config import Launch, plan_attention
from tilerosetta.kernels.cutile.hints import hinted

ZERO = ct.PaddingMode.ZERO
LOG2E = 1.4426950408889634


def _step(q, k3, v3, kv, j, m_i, l_i, acc, limit, cols0, sk, QK_SCALE, CAUSAL, MASKED, SAFE, BM, BN, D):
    """One key/value tile of the online softmax; MASKED (a constant) only on tiles that need it."""
    # K^T tile (D, BN) straight from row-major K via a permuted load (no register transpose).
    kt = ct.reshape(ct.load(k3, (kv, 0, j), (1, D, BN), order=(0, 2, 1), padding_mode=ZERO), (D, BN))
    s = ct.mma(q, kt, ct.zeros((BM, BN), ct.float32))
    if not QK_SCALE > 0.0:
        s = s * QK_SCALE  # scale <= 0 (a compile-time branch): scale first, as the max needs
    if MASKED:
        cols = cols0 + j * BN
        if CAUSAL:
            visible = (cols < sk) & (cols <= limit)
        else:
            visible = cols < sk
        s = ct.where(visible, s, float("-inf"))
    # flush_to_zero: a bare MUFU.EX2; without it every element also pays a denormal-range test and two
    # multiplies (cuobjdump: FSETP.GEU + 2 FMUL per exp2). Probabilities below 2^-126 become 0.
    if QK_SCALE > 0.0:
        # max(s * c) = max(s) * c for c > 0, so the scale is applied to BM row maxima and folded into
        # one FFMA per score (s * c - m) instead of a multiply and a subtract.
        m_new = ct.maximum(m_i, ct.max(s, axis=1, keepdims=True) * QK_SCALE)
        if SAFE:
            m_new = ct.where(m_new == float("-inf"), 0.0, m_new)  # nothing visible yet: p = alpha = 0
        p = ct.exp2(s * QK_SCALE - m_new, flush_to_zero=True)
    else:
        m_new = ct.maximum(m_i, ct.max(s, axis=1, keepdims=True))
        if SAFE:
            m_new = ct.where(m_new == float("-inf"), 0.0, m_new)
        p = ct.exp2(s - m_new, flush_to_zero=True)
    alpha = ct.exp2(m_i - m_new, flush_to_zero=True)
    l_i = l_i * alpha + ct.sum(p, axis=1, keepdims=True)
    v = ct.reshape(ct.load(v3, (kv, j, 0), (1, BN, D), padding_mode=ZERO), (BN, D))
    acc = ct.mma(ct.astype(p, q.dtype), v, acc * alpha)
    return m_new, l_i, acc


@ct.kernel  # outputs last (workspaces, then out): the compile test checks the last array is the output
def attention_kernel(q3, k3, v3, m_ws, l_ws, acc_ws, out3, s_len: int, gq: int, n_split: int,
                     QK_SCALE: ct.Constant[float], CAUSAL: ct.Constant[bool], SPLIT: ct.Constant[bool],
                     CT: ct.Constant[int], BM: ct.Constant[int], BN: ct.Constant[int], D: ct.Constant[int]):
    # One flat grid axis of (row set, row block, split) triples, split fastest: B*H can exceed the 65535
    # limit of grid y (the launch order is the one a (row blocks, B*H) grid had).
    # Heaviest row blocks first: under CAUSAL a later block streams more key tiles, so launching them in
    # reverse keeps the last wave from being one long block on an otherwise idle GPU.
    m_len = q3.shape[1]
    sk = k3.shape[1]
    n_q = ct.cdiv(m_len, BM)
    split = ct.bid(0) % n_split
    nq = ct.bid(0) // n_split // n_q
    qi = n_q - 1 - (ct.bid(0) // n_split) % n_q
    kv = nq // gq
    q = ct.reshape(ct.load(q3, (nq, qi, 0), (1, BM, D), padding_mode=ZERO), (BM, D))
    m_i = ct.full((BM, 1), float("-inf"), ct.float32)
    l_i = ct.zeros((BM, 1), ct.float32)
    acc = ct.zeros((BM, D), ct.float32)
    off = sk - s_len  # end-aligned causal mask: query i sees keys j <= i + off
    rows = ct.reshape(ct.arange(BM, dtype=ct.int32), (BM, 1)) + qi * BM
    limit = rows % s_len + off
    cols0 = ct.reshape(ct.arange(BN, dtype=ct.int32), (1, BN))
    # The block's smallest and largest query index; all of 0..S-1 when its rows span two heads (packed).
    r0 = qi * BM
    r_last = ct.minimum(r0 + BM, m_len) - 1
    spans = ct.minimum(r_last // s_len - r0 // s_len, 1)
    i_lo = (r0 % s_len) * (1 - spans)
    i_hi = r_last % s_len + spans * (s_len - 1 - r_last % s_len)
    # Tiles [0, n_full) have every key real and (causal) visible to every row of the block:
    # key (j+1)*BN - 1 <= i_lo + off and < Sk. The rest up to n_kv need the mask.
    if CAUSAL:
        n_kv = ct.cdiv(ct.minimum(sk, i_hi + off + 1), BN)
        n_full = ct.minimum(i_lo + off + 1, sk) // BN
    else:
        n_kv = ct.cdiv(sk, BN)
        n_full = sk // BN
    j0 = 0
    if SPLIT:
        j0 = split * CT
        n_kv = ct.minimum(n_kv, j0 + CT)
        n_full = ct.maximum(j0, ct.minimum(n_full, n_kv))
    for j in range(j0, n_full):
        m_i, l_i, acc = _step(q, k3, v3, kv, j, m_i, l_i, acc, limit, cols0, sk, QK_SCALE, CAUSAL, False, False,
                              BM, BN, D)
    for j in range(n_full, n_kv):
        m_i, l_i, acc = _step(q, k3, v3, kv, j, m_i, l_i, acc, limit, cols0, sk, QK_SCALE, CAUSAL, True, SPLIT,
                              BM, BN, D)
    if SPLIT:
        w = nq * n_split + split  # partials (NQ * n_split, M[, D]) in fp32
        m_out = ct.where(l_i > 0.0, m_i, float("-inf"))  # no visible key in this split: weight 0
        ct.store(m_ws, (w, qi), ct.reshape(m_out, (1, BM)))
        ct.store(l_ws, (w, qi), ct.reshape(l_i, (1, BM)))
        ct.store(acc_ws, (w, qi, 0), ct.reshape(acc, (1, BM, D)))
    else:
        o = acc * (1.0 / l_i)  # BM reciprocals, not BM*D IEEE divisions
        ct.store(out3, (nq, qi, 0), ct.reshape(ct.astype(o, out3.dtype), (1, BM, D)))


@ct.kernel
def combine_kernel(m_ws, l_ws, acc_ws, out3, n_split: int, BM: ct.Constant[int], D: ct.Constant[int]):
    """Merge the splits of BM rows of one row set: out = sum 2^(m_s - M) acc_s / sum 2^(m_s - M) l_s."""
    n_q = ct.cdiv(out3.shape[1], BM)
    nq = ct.bid(0) // n_q
    qi = ct.bid(0) % n_q
    w0 = nq * n_split
    m = ct.reshape(ct.load(m_ws, (w0, qi), (1, BM), padding_mode=ZERO), (BM, 1))  # split 0: finite m
    l_i = ct.reshape(ct.load(l_ws, (w0, qi), (1, BM), padding_mode=ZERO), (BM, 1))
    acc = ct.reshape(ct.load(acc_ws, (w0, qi, 0), (1, BM, D), padding_mode=ZERO), (BM, D))
    for s in range(1, n_split):
        m_s = ct.reshape(ct.load(m_ws, (w0 + s, qi), (1, BM), padding_mode=ZERO), (BM, 1))
        l_s = ct.reshape(ct.load(l_ws, (w0 + s, qi), (1, BM), padding_mode=ZERO), (BM, 1))
        a_s = ct.reshape(ct.load(acc_ws, (w0 + s, qi, 0), (1, BM, D), padding_mode=ZERO), (BM, D))
        m_new = ct.maximum(m, m_s)
        a = ct.exp2(m - m_new, flush_to_zero=True)
        b = ct.exp2(m_s - m_new, flush_to_zero=True)
        l_i = l_i * a + l_s * b
        acc = acc * a + a_s * b
        m = m_new
    ct.store(out3, (nq, qi, 0), ct.reshape(ct.astype(acc * (1.0 / l_i), out3.dtype), (1, BM, D)))


def prepare(q, k, v, out, cfg, causal, scale):
    b, h, s, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    p = plan_attention(b, h, hkv, s, sk, d, cfg, sm_count(device=q.device))
    sm_scale = float(scale) if scale is not None else 1.0 / math.sqrt(d)
    nq, m = p["NQ"], p["M"]
    qv, ov = q.view(nq, m, d), out.view(nq, m, d)
    kv = [t.view(b * hkv, sk, d) for t in (k, v)]
    n_split = p["n_split"]
    split = n_split > 1
    if split:
        m_ws = torch.empty((nq * n_split, m), dtype=torch.float32, device=q.device)
        l_ws = torch.empty_like(m_ws)
        acc_ws = torch.empty((nq * n_split, m, d), dtype=torch.float32, device=q.device)
    else:  # unused (SPLIT is a constant): small stand-ins of the right rank and dtype
        m_ws = l_ws = torch.empty((1, 1), dtype=torch.float32, device=q.device)
        acc_ws = torch.empty((1, 1, 1), dtype=torch.float32, device=q.device)
    kernel = hinted(attention_kernel, occupancy=p["OCC"] or None, num_worker_warps=p["WARPS"] or None)
    launches = [Launch(kernel, p["grid"], (qv, *kv, m_ws, l_ws, acc_ws, ov, s, p["GQ"], n_split,
                                           sm_scale * LOG2E, bool(causal), split, p["CT"], p["BM"], p["BN"], d))]
    if split:
        launches.append(Launch(combine_kernel, p["combine_grid"], (m_ws, l_ws, acc_ws, ov, n_split, p["BM"], d)))
    return launches
