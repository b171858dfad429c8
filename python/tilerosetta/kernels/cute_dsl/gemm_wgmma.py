"""The Hopper GEMM of matmul and bmm (fp16/bf16, fp32 accumulate): TMA loads into a STAGES-deep ring of
shared-memory buffers, consumed by warpgroup MMAs (wgmma) straight from shared memory.

c (L, M, N) = a (L, M, K) @ b (L, K, N), all row-major. In CuTe's GEMM convention the operands are
A (M, K, L) and B (N, K, L): a is K-major, b is N-major (wgmma reads an MN-major B for 16-bit types
through its shared-memory descriptor, so b needs no transpose). Only for what TMA can address: K and N
multiples of 8 halves (16-byte row strides) and 16-byte aligned bases (the adapter checks, variant_of).
M, N, K need not be tile multiples: TMA fills out-of-range rows/columns with zeros (which add nothing to
the dot products) and the epilogue store is bounds-checked.

One CTA computes a BM x BN tile of c; its BM / 64 warpgroups each own 64 rows (one 64 x BN x 16 wgmma
per 16 of K). No warp specialisation: every thread is a consumer, and warp 0 is also the producer,
which issues the TMA loads of K tile kt + STAGES - 1 while the MMAs of tile kt run (a whole warp, since
the TMA copy elects its issuing lane with a warp-wide elect.sync). Two mbarriers per stage keep the ring
in order:
  full[s]  : 1 arrival (one lane's arrive_and_expect_tx) + the stage's bytes landed by TMA -> data ready;
  empty[s] : one arrival per warp (its lane 0) once the wgmmas reading the stage completed -> reusable.
Tile kt is the (kt // STAGES)-th use of stage kt % STAGES, so it waits for that completion's parity.
One wgmma group stays in flight (wait_group(1)): tile kt's MMAs overlap the wait for tile kt + 1, and the
stage of tile kt - 1 is released once its group has retired.

Warp-specialised form (config WS=1): one more warpgroup, the producer, after the BM / 64 consumer ones. Its
first warp issues every TMA load (waiting on each stage's empty barrier before refilling it), its other
three warps do nothing; the consumers only wait on full barriers, run the wgmmas and release stages. So no
consumer warp stops between its MMAs to refill the ring (in the plain form warp 0 waits there for the
slowest warp's release), at the price of 128 more threads per CTA whose registers are allocated like the
consumers': the kernel must stay within 65536 / (threads) registers a thread (170 at BM=128: checked on the
CPU), as no setmaxnreg hands the producer's registers to the consumers yet. WS=0 compiles the plain form
exactly as before (the same PTX).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.tensor_utils import LayoutEnum

from tilerosetta.kernels.cute_dsl import common

BK = 64  # K per stage: 64 halves = one 128-byte swizzle row of a K-major A tile (config.GEMM_BK)
ALIGN_ELEMS = 8  # TMA: every row stride a multiple of 16 bytes = 8 halves
GROUP_M = 8  # M tiles a group of consecutive CTAs walks before moving to the next N tile (_tile_of)


def _tile_of(linear, m_tiles, n_tiles):
    """(M tile, N tile, batch) of CTA `linear` in a 1-D grid (y and z stop at 65535 CTAs, x does not).
    Grouped order, for L2 reuse: CTAs launched together walk GROUP_M tiles down M before the next N tile,
    so a wave of CTAs shares a few A row panels and a few B column panels instead of reading all of B.
    Plain Python on purpose: traced inline in the kernel (Int32s), and checked on the CPU with ints."""
    per_batch = m_tiles * n_tiles
    bl = linear // per_batch
    t = linear % per_batch
    per_group = GROUP_M * n_tiles
    first_m = (t // per_group) * GROUP_M
    rows = cutlass.min(m_tiles - first_m, GROUP_M)  # the last group may hold fewer M tiles
    in_group = t % per_group
    return first_m + in_group % rows, in_group // rows, bl


@cute.jit
def _load_stage(tma_a: cute.CopyAtom, tAgA: cute.Tensor, tAsA: cute.Tensor, tma_b: cute.CopyAtom,
                tBgB: cute.Tensor, tBsB: cute.Tensor, bar, kt: cutlass.Int32, s: cutlass.Int32,
                tx_bytes: cutlass.Constexpr):
    """Called by the whole producer warp: one elected lane expects the stage's bytes on its full barrier
    `bar`, then the two TMA loads that deliver them (K tile kt of A and B into stage s). cute.copy of a TMA
    atom elects its issuing lane itself (elect.sync over the full warp), so it must see all 32 lanes:
    called from one thread it would wait for the other 31 forever."""
    with cute.arch.elect_one():
        cute.arch.mbarrier_arrive_and_expect_tx(bar, tx_bytes)
    cute.copy(tma_a, tAgA[None, kt], tAsA[None, s], tma_bar_ptr=bar)
    cute.copy(tma_b, tBgB[None, kt], tBsB[None, s], tma_bar_ptr=bar)


@cute.kernel
def _gemm_wgmma_kernel(tiled_mma: cute.TiledMma, tma_a: cute.CopyAtom, mA: cute.Tensor, tma_b: cute.CopyAtom,
                       mB: cute.Tensor, mC: cute.Tensor, a_layout: cute.ComposedLayout,
                       b_layout: cute.ComposedLayout, bm_: cutlass.Constexpr, bn_: cutlass.Constexpr,
                       stages: cutlass.Constexpr, tx_bytes: cutlass.Constexpr, ws: cutlass.Constexpr):
    tidx, _, _ = cute.arch.thread_idx()
    bx, _, _ = cute.arch.block_idx()
    warp, lane = tidx // 32, tidx % 32
    n_warps = cute.size(tiled_mma) // 32  # the consumer warps (WS=1: the producer warpgroup's follow them)
    m, n, k = cute.size(mC, mode=[0]), cute.size(mC, mode=[1]), cute.size(mA, mode=[1])
    bm, bn, bl = _tile_of(bx, cute.ceil_div(m, bm_), cute.ceil_div(n, bn_))
    k_tiles = cute.ceil_div(k, BK)

    # ---- shared memory (a, b and c share one dtype; mA / mB are TMA coordinate tensors): the A and B rings (swizzled, as wgmma's descriptors expect) and the barriers
    smem = cutlass.memory.SmemAllocator()
    sA = smem.allocate_tensor(mC.element_type, a_layout.outer, byte_alignment=1024, swizzle=a_layout.inner)
    sB = smem.allocate_tensor(mC.element_type, b_layout.outer, byte_alignment=1024, swizzle=b_layout.inner)
    full = smem.allocate_array(cutlass.Int64, stages)
    empty = smem.allocate_array(cutlass.Int64, stages)
    if tidx == 0:
        cpasync.prefetch_descriptor(tma_a)
        cpasync.prefetch_descriptor(tma_b)
        for s in cutlass.range_constexpr(stages):
            cute.arch.mbarrier_init(full + s, 1)
            cute.arch.mbarrier_init(empty + s, n_warps)
    cute.arch.mbarrier_init_fence()
    cute.arch.sync_threads()

    # ---- this CTA's K tiles of A and B in TMA coordinates, and their shared-memory destinations
    gA = cute.local_tile(mA[None, None, bl], (bm_, BK), (bm, None))  # (BM, BK, k_tiles)
    gB = cute.local_tile(mB[None, None, bl], (bn_, BK), (bn, None))  # (BN, BK, k_tiles)
    tAsA, tAgA = cpasync.tma_partition(tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2),
                                       cute.group_modes(gA, 0, 2))
    tBsB, tBgB = cpasync.tma_partition(tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 2),
                                       cute.group_modes(gB, 0, 2))

    if cutlass.const_expr(ws):
        if warp == n_warps:  # the producer warp: every K tile, each stage refilled once its consumers released it
            for kt in range(k_tiles):
                s = kt % stages
                if kt >= stages:
                    cute.arch.mbarrier_wait(empty + s, (kt // stages + 1) % 2)
                _load_stage(tma_a, tAgA, tAsA, tma_b, tBgB, tBsB, full + s, kt, s, tx_bytes)
        if warp < n_warps:
            _consume(tiled_mma, sA, sB, mC, tma_a, tAgA, tAsA, tma_b, tBgB, tBsB, full, empty, tidx, warp, lane, m, n,
                     bm, bn, bl, k_tiles, bm_, bn_, stages, tx_bytes, False)
    else:
        _consume(tiled_mma, sA, sB, mC, tma_a, tAgA, tAsA, tma_b, tBgB, tBsB, full, empty, tidx, warp, lane, m, n, bm,
                 bn, bl, k_tiles, bm_, bn_, stages, tx_bytes, True)


@cute.jit
def _consume(tiled_mma: cute.TiledMma, sA: cute.Tensor, sB: cute.Tensor, mC: cute.Tensor, tma_a: cute.CopyAtom,
             tAgA: cute.Tensor, tAsA: cute.Tensor, tma_b: cute.CopyAtom, tBgB: cute.Tensor, tBsB: cute.Tensor, full,
             empty, tidx: cutlass.Int32, warp: cutlass.Int32, lane: cutlass.Int32, m: cutlass.Int32, n: cutlass.Int32,
             bm: cutlass.Int32, bn: cutlass.Int32, bl: cutlass.Int32, k_tiles: cutlass.Int32, bm_: cutlass.Constexpr,
             bn_: cutlass.Constexpr, stages: cutlass.Constexpr, tx_bytes: cutlass.Constexpr,
             refill: cutlass.Constexpr):
    """The consumer warps' part (every warp of the plain form): the wgmmas over the ring and the epilogue.
    refill (the plain form): warp 0 is also the producer (the prologue loads and each refill)."""
    # ---- the MMA view: each thread's accumulators, wgmma descriptors over every stage of sA / sB
    thr_mma = tiled_mma.get_slice(tidx)
    tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))  # (MMA, MMA_M, MMA_K, stages)
    tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
    acc = tiled_mma.make_fragment_C(thr_mma.partition_shape_C((bm_, bn_)))
    acc.fill(0.0)
    tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
    k_blocks = cute.size(tCrA, mode=[2])  # BK / 16 wgmmas per stage

    # ---- prologue: the first STAGES - 1 tiles in flight (their stages are fresh: no empty wait)
    if cutlass.const_expr(refill):
        if warp == 0:
            for kt in range(cutlass.min(stages - 1, k_tiles)):
                _load_stage(tma_a, tAgA, tAsA, tma_b, tBgB, tBsB, full + kt, kt, kt, tx_bytes)

    # ---- mainloop
    for kt in range(k_tiles):
        s = kt % stages
        cute.arch.mbarrier_wait(full + s, (kt // stages) % 2)
        warpgroup.fence()
        for kb in cutlass.range_constexpr(k_blocks):
            cute.gemm(tiled_mma, acc, tCrA[None, None, kb, s], tCrB[None, None, kb, s], acc)
        warpgroup.commit_group()
        warpgroup.wait_group(1)  # tile kt - 1's MMAs have retired: release its stage
        if kt > 0 and lane == 0:
            cute.arch.mbarrier_arrive(empty + (kt - 1) % stages)
        if cutlass.const_expr(refill):
            nt = kt + stages - 1  # producer warp: refill the stage tile kt - 1 used
            if warp == 0 and nt < k_tiles:
                if nt >= stages:
                    cute.arch.mbarrier_wait(empty + nt % stages, (nt // stages + 1) % 2)
                _load_stage(tma_a, tAgA, tAsA, tma_b, tBgB, tBsB, full + nt % stages, nt, nt % stages,
                            tx_bytes)
    warpgroup.wait_group(0)

    # ---- epilogue: registers -> global, bounds-checked (c's dtype; fp32 accumulate rounded once)
    gC = cute.local_tile(mC[None, None, bl], (bm_, bn_), (bm, bn))
    cC = cute.local_tile(cute.make_identity_tensor((m, n)), (bm_, bn_), (bm, bn))
    tCgC, tCcC = thr_mma.partition_C(gC), thr_mma.partition_C(cC)
    # the accumulator fragment holds pairs of adjacent columns (i, i + 1) starting at an even column, and
    # N is a multiple of 8 here: one bounds check covers both, and the pair is one 32-bit store
    for i in cutlass.range_constexpr(0, cute.size(acc), 2):
        row, col = tCcC[i]
        if row < m and col < n:
            tCgC[i] = acc[i].to(mC.element_type)
            tCgC[i + 1] = acc[i + 1].to(mC.element_type)


@cute.jit
def gemm_wgmma(a: cute.Tensor, b: cute.Tensor, c: cute.Tensor, stream, bm_: cutlass.Constexpr,
               bn_: cutlass.Constexpr, stages: cutlass.Constexpr, ws: cutlass.Constexpr):
    # torch's row-major (L, M, K), (L, K, N), (L, M, N) as CuTe's A (M, K, L), B (N, K, L), C (M, N, L)
    mA = cute.make_tensor(a.iterator, cute.select(a.layout, mode=[1, 2, 0]))
    mB = cute.make_tensor(b.iterator, cute.select(b.layout, mode=[2, 1, 0]))
    mC = cute.make_tensor(c.iterator, cute.select(c.layout, mode=[1, 2, 0]))
    dtype = a.element_type
    tile = (bm_, bn_, BK)
    a_layout = sm90.make_smem_layout_a(LayoutEnum.ROW_MAJOR, tile, dtype, stages)  # K-major
    b_layout = sm90.make_smem_layout_b(LayoutEnum.COL_MAJOR, tile, dtype, stages)  # N-major
    tiled_mma = sm90.make_trivial_tiled_mma(dtype, dtype, LayoutEnum.ROW_MAJOR.sm90_mma_major_mode(),
                                            LayoutEnum.COL_MAJOR.sm90_mma_major_mode(), cutlass.Float32,
                                            (bm_ // 64, 1, 1), (64, bn_))
    op = cpasync.CopyBulkTensorTileG2SOp()
    tma_a, tma_mA = cpasync.make_tiled_tma_atom(op, mA, cute.slice_(a_layout, (None, None, 0)), (bm_, BK))
    tma_b, tma_mB = cpasync.make_tiled_tma_atom(op, mB, cute.slice_(b_layout, (None, None, 0)), (bn_, BK))
    tx_bytes = (bm_ + bn_) * BK * dtype.width // 8
    m, n, batch = cute.size(mC, mode=[0]), cute.size(mC, mode=[1]), cute.size(mC, mode=[2])
    threads = cute.size(tiled_mma) + (128 if ws else 0)  # WS=1: the producer warpgroup
    _gemm_wgmma_kernel(tiled_mma, tma_a, tma_mA, tma_b, tma_mB, mC, a_layout, b_layout, bm_, bn_, stages,
                       tx_bytes, ws).launch(grid=[cute.ceil_div(m, bm_) * cute.ceil_div(n, bn_) * batch, 1, 1],
                                            block=[threads, 1, 1], stream=stream)


def build(dtype, cfg):
    """(jit function, fake args): rank-3 operands whose K and N are multiples of 8 and bases 16-byte aligned
    (what TMA needs; TVM-FFI refuses a tensor that breaks it), M and L any."""
    batch, m = common.sym(), common.sym()
    n, k = common.sym(ALIGN_ELEMS), common.sym(ALIGN_ELEMS)
    a, b, c = (common.fake(dtype, s, ALIGN_ELEMS) for s in ((batch, m, k), (batch, k, n), (batch, m, n)))
    return gemm_wgmma, (a, b, c, common.stream(), cfg["BM"], cfg["BN"], cfg["STAGES"], bool(cfg.get("WS", 0)))
