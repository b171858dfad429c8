"""rope: out = q * cos + rotate_half(q) * sin (Llama half rotation), q (B, H, S, D), cos/sin (S, D).

With q1 = q[..., :D/2], q2 = q[..., D/2:] (and c1/c2, s1/s2 the halves of cos and sin):
    out[..., :D/2] = q1 * c1 - q2 * s1
    out[..., D/2:] = q2 * c2 + q1 * s2
The host passes q and out viewed as (B*H, S, 2, D/2) and cos/sin as (S, 2, D/2) (free views), so each
half is one tile of HP = next_pow2(D/2) columns padded past D/2: any even D works, not only powers of
two. A block handles TS positions of one (b, h); blocks with the same positions are adjacent in the
flat grid (head fastest) so cos/sin tiles are reused from L2.

`rope_exact_kernel` serves the common case where every tile is whole: D/2 a power of two (the halves
are exactly one tile wide) and TS dividing S (the grid covers S exactly). q and out are viewed as
(B*H, S, D), each half is the column tile 0 or 1 of width D/2, and the loads and stores skip bounds
checks (check_bounds=False) because no tile can cross an edge. Why: with bounds checks the compiler
wraps each of the six loads in its own branch region (BSSY/BSYNC) and the loads went out one after
another (128 us against Triton's 75 us: bench/GAPS.md, cutile_py rope); without them the sm_90 cubin issues
six LDG.E.128 back to back (0 BSSY, 32-55 registers at TS 8-16).

Both kernels are safe in place (out is q, the spec's inplace_ok): block (s, bh) loads the q1 and q2 tiles
of positions [s*TS, (s+1)*TS) of head bh and stores the out tiles of exactly those positions; no other
block touches them (plan_rope's grid has one block per (position tile, head)). Each stored tile is computed
from both loaded halves, so neither store can be issued before both loads; padded columns (HP > D/2) are
clipped by the views' shapes and read nothing of the other half.
"""

import cuda.tile as ct

from tilerosetta.kernels.cutile.config import Launch, plan_rope
from tilerosetta.kernels.cutile.hints import hinted

ZERO = ct.PaddingMode.ZERO


@ct.kernel
def rope_kernel(q4, cos3, sin3, out4, TS: ct.Constant[int], HP: ct.Constant[int]):
    n_bh = q4.shape[0]
    pid = ct.bid(0)
    s = pid // n_bh
    bh = pid % n_bh
    q1 = ct.astype(ct.reshape(ct.load(q4, (bh, s, 0, 0), (1, TS, 1, HP), padding_mode=ZERO), (TS, HP)), ct.float32)
    q2 = ct.astype(ct.reshape(ct.load(q4, (bh, s, 1, 0), (1, TS, 1, HP), padding_mode=ZERO), (TS, HP)), ct.float32)
    c1 = ct.astype(ct.reshape(ct.load(cos3, (s, 0, 0), (TS, 1, HP), padding_mode=ZERO), (TS, HP)), ct.float32)
    c2 = ct.astype(ct.reshape(ct.load(cos3, (s, 1, 0), (TS, 1, HP), padding_mode=ZERO), (TS, HP)), ct.float32)
    s1 = ct.astype(ct.reshape(ct.load(sin3, (s, 0, 0), (TS, 1, HP), padding_mode=ZERO), (TS, HP)), ct.float32)
    s2 = ct.astype(ct.reshape(ct.load(sin3, (s, 1, 0), (TS, 1, HP), padding_mode=ZERO), (TS, HP)), ct.float32)
    o1 = q1 * c1 - q2 * s1
    o2 = q2 * c2 + q1 * s2
    ct.store(out4, (bh, s, 0, 0), ct.reshape(ct.astype(o1, out4.dtype), (1, TS, 1, HP)))
    ct.store(out4, (bh, s, 1, 0), ct.reshape(ct.astype(o2, out4.dtype), (1, TS, 1, HP)))


@ct.kernel
def rope_exact_kernel(q3, cos2, sin2, out3, TS: ct.Constant[int], HALF: ct.Constant[int]):
    n_bh = q3.shape[0]
    pid = ct.bid(0)
    s = pid // n_bh
    bh = pid % n_bh
    q1 = ct.astype(ct.reshape(ct.load(q3, (bh, s, 0), (1, TS, HALF), check_bounds=False), (TS, HALF)), ct.float32)
    q2 = ct.astype(ct.reshape(ct.load(q3, (bh, s, 1), (1, TS, HALF), check_bounds=False), (TS, HALF)), ct.float32)
    c1 = ct.astype(ct.load(cos2, (s, 0), (TS, HALF), check_bounds=False), ct.float32)
    c2 = ct.astype(ct.load(cos2, (s, 1), (TS, HALF), check_bounds=False), ct.float32)
    s1 = ct.astype(ct.load(sin2, (s, 0), (TS, HALF), check_bounds=False), ct.float32)
    s2 = ct.astype(ct.load(sin2, (s, 1), (TS, HALF), check_bounds=False), ct.float32)
    o1 = q1 * c1 - q2 * s1
    o2 = q2 * c2 + q1 * s2
    ct.store(out3, (bh, s, 0), ct.reshape(ct.astype(o1, out3.dtype), (1, TS, HALF)), check_bounds=False)
    ct.store(out3, (bh, s, 1), ct.reshape(ct.astype(o2, out3.dtype), (1, TS, HALF)), check_bounds=False)


def prepare(q, cos, sin, out, cfg):
    b, h, s, d = q.shape
    ts, hp, grid = plan_rope(b * h, s, d, cfg)
    half = d // 2
    occ = cfg.get("OCC", 0) or None
    if hp == half and s % ts == 0:  # every tile whole: no bounds checks
        views = (q.view(b * h, s, d), cos, sin, out.view(b * h, s, d))
        return [Launch(hinted(rope_exact_kernel, occupancy=occ), grid, (*views, ts, half))]
    kernel = hinted(rope_kernel, occupancy=cfg.get("OCC", 0) or None)
    return [Launch(kernel, grid, (q.view(b * h, s, 2, half), cos.view(s, 2, half),
                                       sin.view(s, 2, half), out.view(b * h, s, 2, half), ts, hp))]
