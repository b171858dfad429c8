"""rope: out = q * cos + rotate_half(q) * sin (Llama half rotation), q (B, H, S, D), cos/sin (S, D).

With q1 = q[..., :D/2], q2 = q[..., D/2:] (and c1/c2, s1/s2 the halves of cos and sin):
    out[..., :D/2] = q1 * c1 - q2 * s1
    out[..., D/2:] = q2 * c2 + q1 * s2
The host passes q and out viewed as (B*H, S, 2, D/2) and cos/sin as (S, 2, D/2) (free views), so each
half is one tile of HP = next_pow2(D/2) columns padded past D/2: any even D works, not only powers of
two. A block handles TS positions of one (b, h); blocks with the same positions are adjacent in the
flat grid (head fastest) so cos/sin tiles are reused from L2.
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


def prepare(q, cos, sin, out, cfg):
    b, h, s, d = q.shape
    ts, hp, grid = plan_rope(b * h, s, d, cfg)
    half = d // 2
    kernel = hinted(rope_kernel, occupancy=cfg.get("OCC", 0) or None)
    return [Launch(kernel, grid, (q.view(b * h, s, 2, half), cos.view(s, 2, half),
                                       sin.view(s, 2, half), out.view(b * h, s, 2, half), ts, hp))]
