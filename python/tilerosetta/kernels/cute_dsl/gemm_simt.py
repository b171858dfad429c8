"""The simple, always-correct GEMM of matmul and bmm: c (L, M, N) = a (L, M, K) @ b (L, K, N), any extents,
any dtype (fp32 math: fp32 inputs get full fp32 precision, not tf32).

Why a second path next to the wgmma one (gemm_wgmma.py): TMA needs 16-byte aligned row strides (K and N
whole multiples of 8 halves) and wgmma has no fp32 x fp32 form, so unaligned shapes (7x13x5, 127x129x131)
and fp32 come here. It is a classic shared-memory tiled SIMT GEMM:
  - one CTA computes a BM x BN tile of c with 256 threads in a 16 x 16 grid; the CTAs are one flat grid x of
    (M tile, batch, N tile), N tile fastest (y and z stop at 65535 CTAs, x does not: no valid shape is refused);
  - per K step it stages a BM x BK tile of a and a BK x BN tile of b in shared memory as fp32, every load
    bounds-checked (zeros past M, N, K, so partial tiles need no special case in the inner loop);
  - each thread accumulates a (BM/16) x (BN/16) block in registers; its rows are ty + 16*i and its columns
    tx + 16*j (strided, so the 16 threads of a half-warp read 16 consecutive shared words: no bank conflict);
  - the store is bounds-checked too.
The a tile is stored transposed (k, m) so the inner loop reads both tiles along their contiguous dimension.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute

from tilerosetta.kernels.cute_dsl import common

BM, BN, BK = 64, 64, 16
THREADS = 256  # 16 x 16
TM, TN = BM // 16, BN // 16  # outputs per thread along m and n


@cute.kernel
def _gemm_simt_kernel(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    bx, _, _ = cute.arch.block_idx()
    m, k = cute.size(mA, mode=[1]), cute.size(mA, mode=[2])
    n, batch = cute.size(mB, mode=[2]), cute.size(mA, mode=[0])
    n_tiles = cute.ceil_div(n, BN)
    rest = bx % (n_tiles * batch)
    bm, bn, bl = bx // (n_tiles * batch), rest % n_tiles, rest // n_tiles
    tx, ty = tidx % 16, tidx // 16
    m0, n0 = bm * BM, bn * BN

    smem = cutlass.memory.SmemAllocator()
    # a's tile transposed (k, m) and padded by one word per k row: the loads below write it down a column
    # (consecutive threads on consecutive k), which the padding spreads over the banks
    sA = smem.allocate_tensor(cutlass.Float32, cute.make_layout((BK, BM), stride=(BM + 1, 1)), byte_alignment=16)
    sB = smem.allocate_tensor(cutlass.Float32, cute.make_layout((BK, BN), stride=(BN, 1)), byte_alignment=16)
    acc = cute.make_rmem_tensor(cute.make_layout((TM, TN)), cutlass.Float32)
    acc.fill(0.0)
    zero = cutlass.Float32(0.0)

    for k0 in range(0, k, BK):
        # a tile: BM x BK elements, consecutive threads on consecutive k (coalesced along a's rows)
        for r in cutlass.range_constexpr(BM * BK // THREADS):
            idx = tidx + r * THREADS
            i, kk = idx // BK, idx % BK
            v = zero
            if m0 + i < m and k0 + kk < k:
                v = mA[bl, m0 + i, k0 + kk].to(cutlass.Float32)
            sA[kk, i] = v
        # b tile: BK x BN elements, consecutive threads on consecutive n (coalesced along b's rows)
        for r in cutlass.range_constexpr(BK * BN // THREADS):
            idx = tidx + r * THREADS
            kk, j = idx // BN, idx % BN
            v = zero
            if k0 + kk < k and n0 + j < n:
                v = mB[bl, k0 + kk, n0 + j].to(cutlass.Float32)
            sB[kk, j] = v
        cute.arch.sync_threads()
        for kk in cutlass.range_constexpr(BK):
            for i in cutlass.range_constexpr(TM):
                a = sA[kk, ty + 16 * i]
                for j in cutlass.range_constexpr(TN):
                    acc[i, j] = acc[i, j] + a * sB[kk, tx + 16 * j]
        cute.arch.sync_threads()  # the tiles are overwritten by the next K step

    for i in cutlass.range_constexpr(TM):
        for j in cutlass.range_constexpr(TN):
            row, col = m0 + ty + 16 * i, n0 + tx + 16 * j
            if row < m and col < n:
                mC[bl, row, col] = acc[i, j].to(mC.element_type)


@cute.jit
def gemm_simt(mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor, stream):
    m, n, batch = cute.size(mA, mode=[1]), cute.size(mB, mode=[2]), cute.size(mA, mode=[0])
    _gemm_simt_kernel(mA, mB, mC).launch(grid=[cute.ceil_div(n, BN) * batch * cute.ceil_div(m, BM), 1, 1],
                                          block=[THREADS, 1, 1], stream=stream)


def build(dtype):
    """(jit function, fake args) over rank-3 (L, M, K) @ (L, K, N) -> (L, M, N) with symbolic extents."""
    batch, m, n, k = common.sym(), common.sym(), common.sym(), common.sym()
    a, b, c = (common.fake(dtype, s, 1) for s in ((batch, m, k), (batch, k, n), (batch, m, n)))
    return gemm_simt, (a, b, c, common.stream())
