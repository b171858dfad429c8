"""rope in CuTe DSL: Llama half rotation, out = q*cos + rotate_half(q)*sin, q/out (B, H, S, D), cos/sin (S, D).

With h = D/2 and q1 = q[..., :h], q2 = q[..., h:]: out[..., :h] = q1*cos[:, :h] - q2*sin[:, :h] and
out[..., h:] = q2*cos[:, h:] + q1*sin[:, h:]. Every tensor is viewed as vectors (…, vec) along D; one
thread takes vector j of the first half and vector j + h/vec of the second (128-bit accesses in the "vec"
variant, which needs h to be a whole number of vectors) and writes both output vectors. THREADS threads
per CTA. fp32 math.

Safe in place (out is q, the spec's inplace_ok): thread `item` owns vector j and vector j + h/vec of one
(b, h, s) of q and out, no other thread touches them, and both stores take both loaded vectors as operands,
so neither can be issued before the loads of the elements it overwrites.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute

from tilerosetta.kernels.cute_dsl import common


@cute.kernel
def _rope_kernel(gQ: cute.Tensor, gC: cute.Tensor, gS: cute.Tensor, gO: cute.Tensor, threads: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    nb, nh, ns, nv = (cute.size(gQ, mode=[1, i]) for i in range(4))  # nv = D / vec vectors per position
    half = nv // 2
    item = bidx * threads + tidx
    if item < nb * nh * ns * half:
        j = item % half
        pos = item // half
        s = pos % ns
        bh = pos // ns
        h = bh % nh
        b = bh // nh
        q1 = gQ[(None, (b, h, s, j))].load().to(cutlass.Float32)
        q2 = gQ[(None, (b, h, s, j + half))].load().to(cutlass.Float32)
        c1 = gC[(None, (0, 0, s, j))].load().to(cutlass.Float32)
        c2 = gC[(None, (0, 0, s, j + half))].load().to(cutlass.Float32)
        s1 = gS[(None, (0, 0, s, j))].load().to(cutlass.Float32)
        s2 = gS[(None, (0, 0, s, j + half))].load().to(cutlass.Float32)
        gO[(None, (b, h, s, j))].store((q1 * c1 - q2 * s1).to(gO.element_type))
        gO[(None, (b, h, s, j + half))].store((q2 * c2 + q1 * s2).to(gO.element_type))


def _as_4d(t: cute.Tensor) -> cute.Tensor:
    """cos/sin (S, D) viewed as (1, 1, S, D), so they tile like q."""
    return cute.make_tensor(t.iterator, cute.make_layout((1, 1, t.shape[0], t.shape[1]),
                                                         stride=(0, 0, t.stride[0], t.stride[1])))


@cute.jit
def rope(mQ: cute.Tensor, mCos: cute.Tensor, mSin: cute.Tensor, mO: cute.Tensor, stream, vec: cutlass.Constexpr,
         threads: cutlass.Constexpr):
    tiler = (1, 1, 1, vec)
    gQ, gO = (cute.zipped_divide(t, tiler) for t in (mQ, mO))  # ((1, 1, 1, vec), (B, H, S, D / vec))
    gC, gS = (cute.zipped_divide(_as_4d(t), tiler) for t in (mCos, mSin))
    items = cute.size(gO, mode=[1]) // 2
    _rope_kernel(gQ, gC, gS, gO, threads).launch(grid=[cute.ceil_div(items, threads), 1, 1],
                                                 block=[threads, 1, 1], stream=stream)


def build(dtype, variant, cfg):
    vec = common.vec_width(dtype, variant)
    b, h, s, d = common.sym(), common.sym(), common.sym(), common.sym(2 * vec)
    q, out = common.fake(dtype, (b, h, s, d), vec), common.fake(dtype, (b, h, s, d), vec)
    cos, sin = common.fake(dtype, (s, d), vec), common.fake(dtype, (s, d), vec)
    return rope, (q, cos, sin, out, common.stream(), vec, cfg["THREADS"])


def launch(compiled, q, cos, sin, out):
    compiled(q, cos, sin, out)
