"""attention in CuTe DSL: out = softmax(q kᵀ * scale [+ causal mask]) v, a SIMT flash-attention forward.

q, out (B, H, Sq, D); k, v (B, Hkv, Sk, D) with Hkv dividing H (grouped-query attention: query head h
reads key/value head h // (H / Hkv)); Hkv and Sk come from the tensors, so equal heads and lengths are
just the special case. Causal: query i sees keys j <= i + (Sk - Sq), the mask aligned to the end of the
keys (for Sk == Sq that is the top-left mask, j <= i). D (64 or 128) is compiled in: the "d64" / "d128"
variant.

The fallback path, not the fast one: no tensor cores. fp16/bf16 calls whose q, k, v, out are 16-byte
aligned take attention_wgmma.py (TMA + wgmma) instead; this kernel serves the rest, and every call when
the config knob WGMMA=0 or TILEROSETTA_CUTE_DSL_ATTENTION=simt turns the wgmma kernel off. One CTA holds ROWS query rows of one (b, h), one warp per row:
  - the CTA stages BKV keys and values at a time in shared memory as fp32 (bounds-checked: zeros past
    Sk), so the ROWS rows share each load;
  - lane j of a warp computes the score of key j of the tile (the q row in shared memory is read as a
    broadcast, each lane walks its key's row: the key rows are padded by one word, so the 32 lanes hit
    32 different banks);
  - online softmax per tile: the tile's max and sum by warp reductions, in base 2 (q pre-scaled by
    scale * log2(e), so exp2 replaces exp), the running output rescaled by exp2(old max - new max);
  - out[d] for d = lane + 32 t: each lane accumulates p_j * v[j, d] over the tile's keys, p_j broadcast
    from lane j by a shuffle.
A row whose keys are all masked so far keeps max -inf; the exponent base is then 0 (not -inf), so no
inf - inf = NaN appears and its sums stay 0.
"""

from __future__ import annotations

import math

import cutlass
import cutlass.cute as cute

from tilerosetta.kernels.cute_dsl import attention_plan, common

ROWS = 8  # query rows (warps) per CTA
BKV = 32  # keys per shared-memory tile: one per lane when scoring
LOG2E = math.log2(math.e)
HEAD_DIMS = (64, 128)


def _add(a, b):
    return a + b


def _max(a, b):
    return cutlass.max(a, b)


@cute.kernel
def _attention_kernel(mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor, causal: cutlass.Int32,
                      scale_log2: cutlass.Float32, d: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bx, _, _ = cute.arch.block_idx()
    warp, lane = tidx // 32, tidx % 32
    heads, sq = cute.size(mQ, mode=[1]), cute.size(mQ, mode=[2])
    q_tiles = cute.ceil_div(sq, ROWS)
    bq, bh = bx % q_tiles, bx // q_tiles  # grid x = (b, h, query tile): y and z stop at 65535, x does not
    h, b = bh % heads, bh // heads
    kv_heads, sk = cute.size(mK, mode=[1]), cute.size(mK, mode=[2])
    hk = h // (heads // kv_heads)
    shift = sk - sq  # causal: query i sees keys j <= i + shift
    row0 = bq * ROWS
    row = row0 + warp
    valid = row < sq
    if not valid:
        row = sq - 1  # a CTA's rows past Sq redo the last row (every warp reaches the barriers), not stored

    smem = cutlass.memory.SmemAllocator()
    sQ = smem.allocate_tensor(cutlass.Float32, cute.make_layout((ROWS, d), stride=(d, 1)), byte_alignment=16)
    sK = smem.allocate_tensor(cutlass.Float32, cute.make_layout((BKV, d), stride=(d + 1, 1)), byte_alignment=16)
    sV = smem.allocate_tensor(cutlass.Float32, cute.make_layout((BKV, d), stride=(d, 1)), byte_alignment=16)
    per_lane = d // 32
    for t in cutlass.range_constexpr(per_lane):
        sQ[warp, lane + 32 * t] = mQ[b, h, row, lane + 32 * t].to(cutlass.Float32) * scale_log2
    cute.arch.sync_threads()

    acc = cute.make_rmem_tensor(cute.make_layout(per_lane), cutlass.Float32)
    acc.fill(0.0)
    minus_inf = cutlass.Float32(-math.inf)
    run_max = minus_inf
    run_sum = cutlass.Float32(0.0)

    # keys this CTA needs: all of them, or (causal) up to its last row's diagonal
    kv_end = sk
    if causal != 0:
        kv_end = cutlass.min(sk, cutlass.max(row0 + ROWS - 1 + shift + 1, 0))
    for j0 in range(0, kv_end, BKV):
        for r in cutlass.range_constexpr(BKV * d // (32 * ROWS)):  # the tile, coalesced along D
            idx = tidx + r * 32 * ROWS
            j, c = idx // d, idx % d
            kv, vv = cutlass.Float32(0.0), cutlass.Float32(0.0)
            if j0 + j < sk:
                kv = mK[b, hk, j0 + j, c].to(cutlass.Float32)
                vv = mV[b, hk, j0 + j, c].to(cutlass.Float32)
            sK[j, c] = kv
            sV[j, c] = vv
        cute.arch.sync_threads()

        key = j0 + lane
        s = cutlass.Float32(0.0)
        for c in cutlass.range_constexpr(d):
            s += sQ[warp, c] * sK[lane, c]
        if key >= sk or (causal != 0 and key > row + shift):
            s = minus_inf
        new_max = _max(run_max, cute.arch.warp_reduction(s, _max))
        base = new_max
        if new_max == minus_inf:
            base = cutlass.Float32(0.0)
        p = cute.math.exp2(s - base, fastmath=True)
        corr = cute.math.exp2(run_max - base, fastmath=True)
        run_sum = run_sum * corr + cute.arch.warp_reduction(p, _add)
        run_max = new_max
        for t in cutlass.range_constexpr(per_lane):
            acc[t] = acc[t] * corr
        for j in cutlass.range_constexpr(BKV):
            pj = cute.arch.shuffle_sync(p, j)
            for t in cutlass.range_constexpr(per_lane):
                acc[t] = acc[t] + pj * sV[j, lane + 32 * t]
        cute.arch.sync_threads()  # the tile is overwritten by the next one

    if valid:
        inv = cutlass.Float32(1.0) / run_sum
        for t in cutlass.range_constexpr(per_lane):
            mO[b, h, row, lane + 32 * t] = (acc[t] * inv).to(mO.element_type)


@cute.jit
def attention(mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor, mO: cute.Tensor, causal: cutlass.Int32,
              scale_log2: cutlass.Float32, stream, d: cutlass.Constexpr):
    batch, heads, sq = cute.size(mQ, mode=[0]), cute.size(mQ, mode=[1]), cute.size(mQ, mode=[2])
    _attention_kernel(mQ, mK, mV, mO, causal, scale_log2, d).launch(
        grid=[cute.ceil_div(sq, ROWS) * heads * batch, 1, 1], block=[32 * ROWS, 1, 1], stream=stream)


def build(dtype, variant, cfg):
    """The SIMT kernel for "d64" / "d128"; the tensor-core one (attention_wgmma.py) for "wgmma_d64" /
    "wgmma_d128". Both take the same arguments, so `launch` serves both."""
    if variant.startswith("wgmma_"):
        from tilerosetta.kernels.cute_dsl import attention_wgmma

        d = int(variant.removeprefix("wgmma_d"))
        if d not in attention_wgmma.HEAD_DIMS:
            raise ValueError(f"cute_dsl.attention: variant {variant!r}: head dim must be one of {HEAD_DIMS}")
        return attention_wgmma.build(dtype, d, cfg)
    d = int(variant.removeprefix("d"))
    if d not in HEAD_DIMS:
        raise ValueError(f"cute_dsl.attention: variant {variant!r}: head dim must be one of {HEAD_DIMS}")
    b, h, hkv, sq, sk = (common.sym() for _ in range(5))
    q, out = common.fake(dtype, (b, h, sq, d), 1), common.fake(dtype, (b, h, sq, d), 1)
    k, v = common.fake(dtype, (b, hkv, sk, d), 1), common.fake(dtype, (b, hkv, sk, d), 1)
    return attention, (q, k, v, out, cutlass.Int32(0), cutlass.Float32(1.0), common.stream(), d)


def launch(compiled, q, k, v, out, causal=False, scale=None, split=None):
    """split: None (one kernel) or the attention_plan.Split of the split-KV form, whose compiled function also
    takes the partials' workspaces and the chunk's key tiles."""
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    if split is None:
        compiled(q, k, v, out, int(bool(causal)), float(scale) * LOG2E)
        return
    compiled(q, k, v, out, *attention_plan.workspaces(q, k, split), int(bool(causal)), float(scale) * LOG2E,
             split.chunk_tiles)
