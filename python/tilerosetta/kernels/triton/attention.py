"""attention: flash-attention forward, out = softmax(q k^T * scale [+ causal mask]) v; q/out (B, H, S, D),
k/v (B, Hkv, Sk, D) with Hkv | H (grouped-query), causal mask aligned to the end of the keys.

The rows: q and out are seen as (NQ, M, D): (B*H, S, D) with K/V head n // G (G = H / Hkv), or, when the
G heads of a group fit one query tile (decode), the packed (B*Hkv, G*S, D) with K/V head n
(kernels/attention_split.py). Row r is query r % S; the causal limit of row r is key r % S + Sk - S.

One (BLOCK_M, D) block of rows per program, with keys and values streaming through in BLOCK_N blocks and
an online softmax: a running row max m, a running row sum l and an fp32 accumulator rescaled by
exp(m_old - m_new) whenever the max grows. Scores are kept in log2 units (scale * log2(e) folded into one
multiply) so the exponentials are exp2.

The key range is split in two stages so that only the blocks that need masking pay for it:
  stage 1: key blocks fully inside Sk and, if causal, visible to the block's first query: no mask;
  stage 2: the diagonal block(s) and the tail block of Sk: masked (key < Sk, and key <= query + Sk - S).
Causal blocks beyond the block's last query's limit are never loaded. Key 0 is visible to every row, so
the first block of the key range always gives a finite max and exp2(m_old - m_new) never sees -inf - -inf.

Split-KV (SPLIT, decode at small batch): program (tile, split) covers keys [split*CHUNK, +CHUNK) and writes
its m, l and unnormalised acc to fp32 workspaces. A split may hold no key a row can see, so its masked
stage guards the max (an all -inf row keeps m at -inf and gets p = 0). Who merges the splits (config
FIXUP): 1 = the tile's last program to arrive (it counts arrivals on the tile's counter,
kernels/arrival_counters.py, and merges in split order: no second launch); 0, or no counters to be had:
`combine_kernel`, a second launch with one output row per program.

TMA (config key, GPU default on Hopper): q, k, v and out are read and written through tensor descriptors
of the 3-D views, one head (or group) per leading index, so the copy engine does the address arithmetic
and zero-fills/clips rows past the extent. Why: with pointer loads the H200 cubin moves K/V with cp.async
(48 LDGSTS per loop body, bench/GAPS.md, triton attention) and the warps spend issue slots on addresses.
"""

import math

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from tilerosetta.backends.base import sm_count
from tilerosetta.kernels import arrival_counters
from tilerosetta.kernels.attention_split import MIN_SPLIT_BLOCKS, packed_rows, split_plan
from tilerosetta.kernels.triton import Launch, pdl


LOG2E = 1.4426950408889634


@triton.jit
def _load_kv(base, kv, start_n, n, offs_d, SK, BLOCK_N: tl.constexpr, HEAD_D: tl.constexpr,
             MASKED: tl.constexpr, TMA: tl.constexpr):
    """One (BLOCK_N, D) block of k or v: `base` is a descriptor (TMA) or the head's base pointer."""
    if TMA:
        x = base.load([kv, start_n, 0]).reshape(BLOCK_N, HEAD_D)  # rows >= Sk read as zeros
    else:
        kv_offs = n[:, None].to(tl.int64) * HEAD_D + offs_d[None, :]
        if MASKED:
            x = tl.load(base + kv_offs, mask=n[:, None] < SK, other=0.0)
        else:
            x = tl.load(base + kv_offs)
    return x


@triton.jit
def _attend(acc, l_i, m_i, q, k_base, v_base, kv, limit, offs_d, SK, lo, hi, qk_scale,
            BLOCK_N: tl.constexpr, HEAD_D: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
            TMA: tl.constexpr, SAFE: tl.constexpr):
    # limit: (BLOCK_M,) last visible key of each row (causal). SAFE: a row may have no visible key yet.
    offs_n = tl.arange(0, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        n = start_n + offs_n
        k = _load_kv(k_base, kv, start_n, n, offs_d, SK, BLOCK_N, HEAD_D, MASKED, TMA)
        qk = tl.dot(q, tl.trans(k)) * qk_scale  # (BLOCK_M, BLOCK_N) fp32
        if MASKED:
            keep = n[None, :] < SK
            if CAUSAL:
                keep = keep & (n[None, :] <= limit[:, None])
            qk = tl.where(keep, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, axis=1))
        if SAFE:
            m_new = tl.where(m_new == float("-inf"), 0.0, m_new)  # all masked so far: p = alpha = 0
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(qk - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = _load_kv(v_base, kv, start_n, n, offs_d, SK, BLOCK_N, HEAD_D, MASKED, TMA)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _store_rows(out_ptr, out, nq, r0, q_base, q_offs, rows, M, BLOCK_M: tl.constexpr, HEAD_D: tl.constexpr,
                TMA: tl.constexpr):
    if TMA:
        out_ptr.store([nq, r0, 0], out.reshape(1, BLOCK_M, HEAD_D))  # rows >= M are clipped
    else:
        tl.store(out_ptr + q_base + q_offs, out, mask=rows[:, None] < M)


@triton.jit
def _merge_splits(m_ws, l_ws, acc_ws, row_ws0, stride_split, keep, offs_d, N_SPLIT, BLOCK_M: tl.constexpr,
                  HEAD_D: tl.constexpr):
    """The splits' partials of BLOCK_M rows merged in split order (online, like the key loop): acc / l.
    Loaded through L2 (.cg): other programs stored them, no L1 line of this SM may be trusted."""
    m_t = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_t = tl.zeros([BLOCK_M], tl.float32)
    acc_t = tl.zeros([BLOCK_M, HEAD_D], tl.float32)
    for s in range(0, N_SPLIT):
        row_ws = row_ws0 + s * stride_split
        m_s = tl.load(m_ws + row_ws, mask=keep, other=float("-inf"), cache_modifier=".cg")
        l_s = tl.load(l_ws + row_ws, mask=keep, other=0.0, cache_modifier=".cg")
        a_s = tl.load(acc_ws + row_ws[:, None] * HEAD_D + offs_d[None, :], mask=keep[:, None], other=0.0,
                      cache_modifier=".cg")
        m_new = tl.maximum(m_t, m_s)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # no visible key yet: both weights 0
        alpha = tl.exp2(m_t - m_safe)
        beta = tl.exp2(m_s - m_safe)
        l_t = l_t * alpha + l_s * beta
        acc_t = acc_t * alpha[:, None] + a_s * beta[:, None]
        m_t = m_new
    return acc_t / tl.where(keep, l_t, 1.0)[:, None]  # split 0 sees key 0: l > 0 on every real row


@triton.jit
def attention_kernel(q_ptr, k_ptr, v_ptr, out_ptr, m_ws, l_ws, acc_ws, cnt_ptr, M, S, SK, GQ, N_SPLIT, CHUNK,
                     qk_scale, HEAD_D: tl.constexpr, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, TMA: tl.constexpr, SPLIT: tl.constexpr, FIXUP: tl.constexpr,
                     PDL: tl.constexpr = False):
    pdl.enter(PDL)
    # With TMA, q/k/v/out are tensor descriptors of the (NQ, M, D) and (B*Hkv, SK, D) views.
    # One flat program axis of (row set n, row block, split), split fastest, then row block: B*H may
    # exceed the 65535 programs of axis 1. Causal: the last row blocks have the most keys; start them
    # first (reverse order) to balance.
    n_rb = tl.cdiv(M, BLOCK_M)
    pid = tl.program_id(0)
    split = pid % N_SPLIT
    rb = (pid // N_SPLIT) % n_rb
    nq = pid // (N_SPLIT * n_rb)
    if CAUSAL:
        rb = n_rb - 1 - rb
    kv = nq // GQ
    r0 = rb * BLOCK_M
    rows = r0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_D)
    off = SK - S  # end-aligned mask: query i sees keys <= i + off
    limit = rows % S + off
    # The block's smallest and largest query index (all of 0..S-1 when it spans two heads of a group).
    r_last = min(r0 + BLOCK_M, M) - 1
    i_lo = r0 % S
    i_hi = r_last % S
    if r0 // S != r_last // S:
        i_lo = 0
        i_hi = S - 1
    if CAUSAL:
        hi = min(i_hi + off + 1, SK)
        full_end = min((i_lo + off + 1) // BLOCK_N, SK // BLOCK_N) * BLOCK_N
    else:
        hi = SK
        full_end = (SK // BLOCK_N) * BLOCK_N
    lo = 0
    if SPLIT:
        lo = split * CHUNK
        hi = min(hi, lo + CHUNK)
    f1 = max(lo, min(full_end, hi))

    q_offs = rows[:, None].to(tl.int64) * HEAD_D + offs_d[None, :]
    q_base = nq.to(tl.int64) * M * HEAD_D
    if TMA:
        q = q_ptr.load([nq, r0, 0]).reshape(BLOCK_M, HEAD_D)
        k_base = k_ptr
        v_base = v_ptr
    else:
        q = tl.load(q_ptr + q_base + q_offs, mask=rows[:, None] < M, other=0.0)
        kv_base = kv.to(tl.int64) * SK * HEAD_D
        k_base = k_ptr + kv_base
        v_base = v_ptr + kv_base

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_D], tl.float32)
    acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_base, v_base, kv, limit, offs_d, SK, lo, f1, qk_scale,
                            BLOCK_N, HEAD_D, False, CAUSAL, TMA, False)
    acc, l_i, m_i = _attend(acc, l_i, m_i, q, k_base, v_base, kv, limit, offs_d, SK, f1, hi, qk_scale,
                            BLOCK_N, HEAD_D, True, CAUSAL, TMA, SPLIT)
    if SPLIT:
        # Partials of this (row set, split): m and l (NQ, N_SPLIT, M), acc (NQ, N_SPLIT, M, D), fp32.
        row_ws = (nq.to(tl.int64) * N_SPLIT + split) * M + rows
        keep = rows < M
        m_out = tl.where(l_i > 0, m_i, float("-inf"))  # no visible key in this split: weight 0
        tl.store(m_ws + row_ws, m_out, mask=keep)
        tl.store(l_ws + row_ws, l_i, mask=keep)
        tl.store(acc_ws + row_ws[:, None] * HEAD_D + offs_d[None, :], acc, mask=keep[:, None])
        if FIXUP:
            tl.debug_barrier()  # every thread's partials are stored before the arrival counts
            ticket = cnt_ptr + nq * n_rb + rb
            if tl.atomic_add(ticket, 1, sem="acq_rel", scope="gpu") == N_SPLIT - 1:
                row_ws0 = nq.to(tl.int64) * N_SPLIT * M + rows
                out = _merge_splits(m_ws, l_ws, acc_ws, row_ws0, M, keep, offs_d, N_SPLIT, BLOCK_M, HEAD_D)
                _store_rows(out_ptr, out.to(q.dtype), nq, r0, q_base, q_offs, rows, M, BLOCK_M, HEAD_D, TMA)
                tl.store(ticket, 0)  # zero again for the next launch that uses these counters
    else:
        _store_rows(out_ptr, (acc / l_i[:, None]).to(q.dtype), nq, r0, q_base, q_offs, rows, M, BLOCK_M, HEAD_D,
                    TMA)


@triton.jit
def combine_kernel(out_ptr, m_ws, l_ws, acc_ws, M, N_SPLIT, HEAD_D: tl.constexpr, SPLIT_P2: tl.constexpr,
                   PDL: tl.constexpr = False):
    """One output row per program: the splits' partials merged (kernels/attention_split.py)."""
    pdl.enter(PDL)
    pid = tl.program_id(0)  # = nq * M + r
    nq = pid // M
    r = pid % M
    s = tl.arange(0, SPLIT_P2)
    offs_d = tl.arange(0, HEAD_D)
    row_ws = (nq.to(tl.int64) * N_SPLIT + s) * M + r
    m = tl.load(m_ws + row_ws, mask=s < N_SPLIT, other=float("-inf"))
    l = tl.load(l_ws + row_ws, mask=s < N_SPLIT, other=0.0)
    acc = tl.load(acc_ws + row_ws[:, None] * HEAD_D + offs_d[None, :], mask=(s < N_SPLIT)[:, None], other=0.0)
    w = tl.exp2(m - tl.max(m, axis=0))  # split 0 sees key 0: the max is finite
    out = tl.sum(acc * w[:, None], axis=0) / tl.sum(l * w, axis=0)
    tl.store(out_ptr + pid.to(tl.int64) * HEAD_D + offs_d, out.to(out_ptr.dtype.element_ty))


def prepare(q, k, v, out, cfg, causal, scale):
    b, h, s, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    g = h // hkv
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    block_m = cfg["BLOCK_M"]
    packed = packed_rows(h, hkv, s, block_m)
    nq, m, gq = (b * hkv, g * s, 1) if packed else (b * h, s, g)
    # The tile shrinks to the rows there are (decode: G rows); tl.dot needs >= 16.
    bm = max(16, min(block_m, triton.next_power_of_2(m)))
    bn = cfg["BLOCK_N"]
    tiles = nq * triton.cdiv(m, bm)
    n_split, chunk = split_plan(tiles, sk, bn, sm_count(device=q.device), cfg.get("SPLIT_MIN_BLOCKS", MIN_SPLIT_BLOCKS))
    split = n_split > 1
    tma = bool(cfg.get("TMA", 0))
    if split:
        m_ws = torch.empty((nq, n_split, m), dtype=torch.float32, device=q.device)
        l_ws = torch.empty_like(m_ws)
        acc_ws = torch.empty((nq, n_split, m, d), dtype=torch.float32, device=q.device)
    else:
        m_ws = l_ws = acc_ws = q  # unused (SPLIT is a constexpr): any pointer of the right kind
    counters = arrival_counters.region(q.device, tiles) if split and cfg.get("FIXUP", 0) else None
    fixup = counters is not None
    args = (q, k, v, out)
    if tma:
        args = (TensorDescriptor.from_tensor(q.view(nq, m, d), [1, bm, d]),
                *(TensorDescriptor.from_tensor(t.view(b * hkv, sk, d), [1, bn, d]) for t in (k, v)),
                TensorDescriptor.from_tensor(out.view(nq, m, d), [1, bm, d]))
    launches = [Launch(attention_kernel, (tiles * n_split,),
                       (*args, m_ws, l_ws, acc_ws, counters if fixup else m_ws, m, s, sk, gq, n_split, chunk,
                        scale * LOG2E),
                       {"HEAD_D": d, "CAUSAL": bool(causal), "BLOCK_M": bm, "BLOCK_N": bn, "TMA": tma,
                        "SPLIT": split, "FIXUP": fixup},
                       {"num_warps": cfg["num_warps"], "num_stages": cfg["num_stages"]})]
    if split and not fixup:
        launches.append(Launch(combine_kernel, (nq * m,), (out, m_ws, l_ws, acc_ws, m, n_split),
                               {"HEAD_D": d, "SPLIT_P2": triton.next_power_of_2(n_split)}, {"num_warps": 4}))
    return launches
