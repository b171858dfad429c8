"""attention: flash-attention forward, out = softmax(q k^T * scale [+ causal mask]) v, (B, H, S, D).

One (BLOCK_M, D) block of queries per program (axis 0), one (batch, head) per program axis 1. Keys
and values stream through in BLOCK_N blocks with an online softmax: a running row max m, a running
row sum l and an fp32 accumulator rescaled by exp(m_old - m_new) whenever the max grows. Scores are
kept in log2 units (scale * log2(e) folded into one multiply) so the exponentials are exp2.

The key range is split in two stages so that only the blocks that need masking pay for it:
  stage 1: key blocks fully inside S and, if causal, fully at or below the diagonal: no mask;
  stage 2: the diagonal block(s) and the tail block of S: masked (key < S, and key <= query if causal).
Causal blocks entirely above the diagonal are never loaded. Key 0 is visible to every query row, so
the first block processed always gives a finite max and exp2(m_old - m_new) never sees -inf - -inf.

TMA (config key, GPU default on Hopper): q, k, v and out are read and written through tensor descriptors
of the (B*H, S, D) view, one head per leading index, so the copy engine does the address arithmetic and
zero-fills/clips rows past S. Why: with pointer loads the H200 cubin moves K/V with cp.async (48
LDGSTS per loop body, bench/GAPS.md, triton attention) and the warps spend issue slots on addresses.
"""

import math

import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from tilerosetta.kernels.triton import Launch


LOG2E = 1.4426950408889634


@triton.jit
def _load_kv(base, bh, start_n, n, offs_d, S, BLOCK_N: tl.constexpr, HEAD_D: tl.constexpr,
             MASKED: tl.constexpr, TMA: tl.constexpr):
    """One (BLOCK_N, D) block of k or v: `base` is a descriptor (TMA) or the head's base pointer."""
    if TMA:
        x = base.load([bh, start_n, 0]).reshape(BLOCK_N, HEAD_D)  # rows >= S read as zeros
    else:
        kv_offs = n[:, None].to(tl.int64) * HEAD_D + offs_d[None, :]
        if MASKED:
            x = tl.load(base + kv_offs, mask=n[:, None] < S, other=0.0)
        else:
            x = tl.load(base + kv_offs)
    return x


@triton.jit
def _attend(acc, l_i, m_i, q, k_base, v_base, bh, offs_m, offs_d, S, lo, hi, qk_scale,
            BLOCK_N: tl.constexpr, HEAD_D: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
            TMA: tl.constexpr):
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        n = start_n + offs_n
        k = _load_kv(k_base, bh, start_n, n, offs_d, S, BLOCK_N, HEAD_D, MASKED, TMA)
        qk = tl.dot(q, tl.trans(k)) * qk_scale  # (BLOCK_M, BLOCK_N) fp32
        if MASKED:
            keep = n[None, :] < S
            if CAUSAL:
                keep = keep & (n[None, :] <= offs_m[:, None])
            qk = tl.where(keep, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(qk - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = _load_kv(v_base, bh, start_n, n, offs_d, S, BLOCK_N, HEAD_D, MASKED, TMA)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, out_ptr, S, qk_scale, HEAD_D: tl.constexpr, CAUSAL: tl.constexpr,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, TMA: tl.constexpr):
    # With TMA the four *_ptr arguments are tensor descriptors of the (B*H, S, D) views.
    # One flat program axis of (batch-head, query block), query block fastest: B*H may exceed the 65535
    # programs of axis 1 (the launch order is the one a (query blocks, B*H) grid had).
    # Causal: the last query blocks have the most keys; start them first (reverse order) to balance.
    n_q = tl.cdiv(S, BLOCK_M)
    bh = tl.program_id(0) // n_q
    q_block = tl.program_id(0) % n_q
    pid_m = (n_q - 1 - q_block) if CAUSAL else q_block
    head_base = bh.to(tl.int64) * S * HEAD_D
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    q_offs = offs_m[:, None].to(tl.int64) * HEAD_D + offs_d[None, :]
    if TMA:
        q = q_ptr.load([bh, start_m, 0]).reshape(BLOCK_M, HEAD_D)
        k_base = k_ptr
        v_base = v_ptr
    else:
        q = tl.load(q_ptr + head_base + q_offs, mask=offs_m[:, None] < S, other=0.0)
        k_base = k_ptr + head_base
        v_base = v_ptr + head_base

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_D], tl.float32)
    if CAUSAL:
        full_end = min((start_m + 1) // BLOCK_N, S // BLOCK_N) * BLOCK_N
        hi = min(start_m + BLOCK_M, S)
    else:
        full_end = (S // BLOCK_N) * BLOCK_N
        hi = S
    acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_base, v_base, bh, offs_m, offs_d, S, 0, full_end, qk_scale,
                            BLOCK_N, HEAD_D, False, CAUSAL, TMA)
    acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_base, v_base, bh, offs_m, offs_d, S, full_end, hi, qk_scale,
                            BLOCK_N, HEAD_D, True, CAUSAL, TMA)
    out = (acc / l_i[:, None]).to(q.dtype)
    if TMA:
        out_ptr.store([bh, start_m, 0], out.reshape(1, BLOCK_M, HEAD_D))  # rows >= S are clipped
    else:
        tl.store(out_ptr + head_base + q_offs, out, mask=offs_m[:, None] < S)


def prepare(q, k, v, out, cfg, causal, scale):
    b, h, s, d = q.shape
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    grid = (triton.cdiv(s, cfg["BLOCK_M"]) * b * h,)
    tma = bool(cfg.get("TMA", 0))
    args = (q, k, v, out)
    if tma:
        bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
        args = tuple(TensorDescriptor.from_tensor(t.view(b * h, s, d), [1, blk, d])
                     for t, blk in ((q, bm), (k, bn), (v, bn), (out, bm)))
    return [Launch(attention_kernel, grid, (*args, s, scale * LOG2E),
                   {"HEAD_D": d, "CAUSAL": bool(causal), "BLOCK_M": cfg["BLOCK_M"], "BLOCK_N": cfg["BLOCK_N"],
                    "TMA": tma}, {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]})]
