"""attention on Hopper tensor cores: out = softmax(q kᵀ * scale [+ causal mask]) v with TMA loads and
warpgroup MMAs (wgmma) for both products, fp16/bf16, head dim D in {64, 128} compiled in.

q, out (B, H, Sq, D); k, v (B, Hkv, Sk, D), Hkv dividing H: query head h reads key/value head
h // (H / Hkv). Causal: query i sees keys j <= i + (Sk - Sq) (aligned to the end of the keys).

Query rows are packed by K/V head (config PACK=1): the G = H / Hkv heads sharing K/V head hk are heads
hk*G .. hk*G+G-1, whose (Sq, D) blocks are consecutive in row-major q, so q is viewed as
(B, Hkv, G*Sq, D) without a copy and a CTA's BM rows are taken from those G*Sq: row i is position i % Sq
of head hk*G + i // Sq. Each K/V tile then serves all G heads (decode, Sq = 1: the G single rows share one
tile instead of G CTAs each padding 63 rows and reading the same K/V), and the causal mask reads a row's
position as i % Sq (a tile that holds rows of two heads spans every position). PACK=0: G taken as 1.

One CTA computes BM query rows of one (b, head group): BM / 64 warpgroups, each owning 64 rows (one m64
wgmma per product). Its loop walks BN keys at a time:
  1. S = Q Kᵀ   (BM x BN, fp32 in registers): D / 16 wgmmas, Q and the K tile both read from shared memory
     (K-major: k's rows are D-contiguous, as wgmma's B wants for Kᵀ);
  2. online softmax on S in registers: per row the running max m and sum l; a thread holds two rows of
     its warp's 16 and its values of those rows, a row's four threads (a quad) combine maxima by two
     shuffles. Scores are scaled in base 2 (scale * log2 e), so exp2 replaces exp; masked scores (keys
     past Sk, causal keys past the diagonal) are -inf before the max;
  3. O = O * exp2(m_old - m_new) + P V: P (fp16/bf16) is fed to BN / 16 wgmmas straight from registers.
     The accumulator layout of a 64 x BN wgmma and the A-register layout of a 64 x 16 one give a thread
     the same (row, column) pairs in the same order (16 columns = 8 values per K block), so P is S's
     fragment converted element for element, no shuffle (checked on the CPU: test_cute_dsl_compile.py).
     V is read MN-major from shared memory (v's rows are D-contiguous = N-contiguous for P V).
The running sum l is kept per thread over its own columns and combined across the quad once, at the
end (every term of a row was rescaled by the same factors). A row with all keys masked so far keeps
m = -inf; its exponent base is then 0, not -inf, so no inf - inf = NaN arises (causal rows always see
key 0 in the first tile, so only padded rows could meet it).

Loads: Q once by TMA (its own mbarrier), K and V tiles by TMA into a STAGES-deep ring (one full barrier
per stage for both tiles, one empty barrier per stage that every warp arrives on when its MMAs of the
stage have completed). TMA zero-fills rows past a group's G*Sq rows and keys past Sk, which the mask
and the bounds-checked store ignore. By default no warp specialisation: warp 0 is also the producer and refills a stage
once every warp has released it (the ring's order is the one of gemm_wgmma.py).

Warp-specialised form (config WS=1, the unsplit kernel only; the split form below ignores it): one more
warpgroup after the BM / 64 consumer ones. Its first warp (_produce) issues Q and then every key tile in
order, each once the consumers released its stage (empty barrier); its other three warps exit. The
consumers (_consume, the same code as the plain form without the refills) only wait on full barriers,
compute and release. At BM=128 (384 threads, which ptxas caps at 168 registers a thread) setmaxnreg moves
registers from the producer warpgroup (down to 24) to the two consumer ones (up to 240: ws_registers); the
pipelined loop then converts P(j) into the A registers before it issues Q K(j+1)ᵀ into the same score
fragment (the plain order keeps a second fragment of 64 fp32 live for the overlap and needs ~248
registers). WS=0 compiles exactly the kernel it did before WS existed (same PTX).

Two main loops, chosen at compile time by the config knob PIPE:
  PIPE=0, simple: per key tile, Q Kᵀ, wait, softmax, P V, wait. The tensor cores idle during the softmax
    (only the CTA's other warpgroup, unscheduled, can fill the gap).
  PIPE=1, pipelined (the default): the order of FlashAttention-3's intra-warpgroup overlap, written from
    its paper's description: Q K(j+1)ᵀ is issued into a second score accumulator before P(j) V, and the
    softmax of tile j + 1 runs while P(j) V is on the tensor cores. Both groups of an iteration retire
    before the next rescale of O (ptxas serialises every wgmma of the kernel, warning C7514, when code
    reads accumulators it cannot prove retired; the compile test checks the SASS for it).

CTAs walk the query tiles of a head group from the last one down, so causal CTAs with the most keys start
first.

Split-KV (flash-decoding; when and how many: attention_plan.py): when a call's CTAs cannot fill the SMs
(decode at B=1: B * Hkv = 8), attention_wgmma_split launches n_split CTAs per (query tile, head group,
batch), split fastest; CTA split s loads only the key tiles of chunk s (chunk_tiles tiles from
s * chunk_tiles, cut at the causal limit of its rows) and stores fp32 partials instead of O / l: m = row max
* scale * log2 e (the exponent base of its P), l and the unnormalised O. A second, small kernel
(_combine_kernel: one warp per output row) merges them on the same stream. Why a second kernel and not the
last-arriving CTA: the merge would need an arrival counter per tile that is zero before every call (a
memset or a self-resetting counter, inside CUDA graphs too) and release/acquire fences between the partial
stores and the last CTA's reads, which no CPU check here can exercise; the combine's cost is one launch and
n_split * rows * D * 4 bytes read (512 KB at B=1, Sk=4096), next to 16 MB of K/V. Both kernels trace the
same CTA body (_cta); the unsplit kernel's trace is unchanged by it (same PTX and SASS as before split-KV).
"""

from __future__ import annotations

import math

import torch

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.tensor_utils import LayoutEnum

from tilerosetta.kernels.cute_dsl import common

HEAD_DIMS = (64, 128)
ALIGN_ELEMS = 8  # TMA: 16-byte aligned bases (the adapter checks; D * 2 bytes row strides always are)
K_MAJOR = LayoutEnum.ROW_MAJOR  # an operand whose reduction dim is contiguous (q, k: D; p: keys)
MN_MAJOR = LayoutEnum.COL_MAJOR  # an operand whose output dim is contiguous (v: D is P V's N)


def mmas(dtype, bm: int, bn: int, d: int):
    """The two tiled MMAs: S = Q Kᵀ (BM x BN, reduction D, both operands from shared memory) and
    O = P V (BM x D, reduction BN, P from registers). BM / 64 warpgroups along M."""
    wgs = (bm // 64, 1, 1)
    qk = sm90.make_trivial_tiled_mma(dtype, dtype, K_MAJOR.sm90_mma_major_mode(), K_MAJOR.sm90_mma_major_mode(),
                                     cutlass.Float32, wgs, (64, bn))
    pv = sm90.make_trivial_tiled_mma(dtype, dtype, K_MAJOR.sm90_mma_major_mode(), MN_MAJOR.sm90_mma_major_mode(),
                                     cutlass.Float32, wgs, (64, d), a_source=warpgroup.OperandSource.RMEM)
    return qk, pv


# ---- the CTA's share of the work. Plain Python on purpose: traced inline in the kernel (Int32s), and run
# with ints on the CPU by shared_tests/test_cute_dsl_compile.py, which replays the kernel's schedule on the
# conformance cases against the spec's reference (no `if`: a traced Int32 has no Python truth value).
def cta_coords(bx, m_tiles, groups):
    """(query tile, head group, batch) of CTA bx; the grid is x only (y and z stop at 65535). The query
    tiles of a head group run from the last one down: causal CTAs with the most key tiles start first."""
    bg = bx // m_tiles
    return m_tiles - 1 - bx % m_tiles, bg % groups, bg // groups


def kv_head(hg, gp, heads, kv_heads):
    """The K/V head of head group hg (its first query head hg * gp, over H / Hkv query heads per K/V head)."""
    return hg * gp // (heads // kv_heads)


def query_span(m0, bm, rows, sq):
    """(smallest, largest) query position (0..Sq-1) among the rows m0 .. m0 + bm - 1 (those < rows) of a
    head group, where row i is position i % sq: the positions between, or all of them when the rows
    reach into the next head."""
    last = cutlass.min(m0 + bm, rows) - 1
    wraps = cutlass.min((m0 % sq + last - m0) // sq, 1)
    return (m0 % sq) * (1 - wraps), (last % sq) * (1 - wraps) + (sq - 1) * wraps


def key_tiles(sk, bn, causal, max_pos, shift):
    """Key tiles a CTA loads: all of them, or (causal = 1) those up to the diagonal of its largest query
    position (never none: with Sq <= Sk every position sees key 0)."""
    n_all = (sk + bn - 1) // bn
    n_causal = cutlass.max(cutlass.min(n_all, (max_pos + shift) // bn + 1), 1)
    return n_all + causal * (n_causal - n_all)


def split_coords(bx, n_split):
    """(split, unsplit CTA index) of CTA bx of the split kernel: a CTA's n_split chunks are adjacent."""
    return bx % n_split, bx // n_split


def chunk_of(n_tiles, split, chunk_tiles):
    """(first key tile, key tiles) a split CTA loads: its chunk's tiles among the n_tiles its rows need.
    A chunk past the causal limit of every row of the CTA still loads one tile (its first, which exists:
    chunks start below Sk) and masks all of it: its rows keep m = -inf, l = 0, O = 0 and weigh 0 in the
    combine, and the loop needs no zero-trip form (the pipelined one starts on tile 0 unconditionally)."""
    t0 = split * chunk_tiles
    return t0, cutlass.max(cutlass.min(n_tiles - t0, chunk_tiles), 1)


WS_PRODUCER_REGS = 24  # setmaxnreg's floor: the producer warp only computes TMA coordinates and waits
REGS_PER_CTA = 65536  # one CTA per SM (its shared-memory ring): the whole register file


def ws_registers(bm: int) -> tuple[int, int] | None:
    """(producer, consumer) registers per thread after setmaxnreg in the warp-specialised form, or None when
    no reallocation is needed. The CTA is launched with its registers split evenly (ptxas caps the kernel at
    65536 / threads: 168 for 384 threads at BM=128, less than the pipelined loop's ~230-248); the producer
    warpgroup then returns all but 24 a thread to the CTA's pool and the BM / 64 consumer warpgroups take
    them (a multiple of 8: 240 at BM=128, what 65536 - 128 x 24 leaves for 256 threads). At BM=64 (256
    threads) every thread already gets 255 at launch: no reallocation. ptxas (CUDA 13, via nvidia-cutlass-dsl
    4.8.1) drops both instructions itself when the whole kernel fits the launch registers (BM=128 with BN=64
    at D=64: 106), so only the tiles that need them keep them (the compile test checks which)."""
    consumers = 2 * bm  # threads: BM / 64 warpgroups of 128
    if (consumers + 128) * 255 <= REGS_PER_CTA:
        return None
    return WS_PRODUCER_REGS, min(256, (REGS_PER_CTA - 128 * WS_PRODUCER_REGS) // consumers // 8 * 8)


def refill_parity(j, stages):
    """The empty-barrier phase parity a producer (the WS=1 form's, or warp 0 of the simple loop) waits for
    before it loads key tile j >= STAGES into stage j % STAGES: that of the stage's (j // STAGES - 1)-th release
    (0-based), the one of tile j - STAGES. Plain Python: shared_tests/test_cute_dsl_compile.py replays the ring with it on the CPU."""
    return (j // stages + 1) % 2


def _max(a, b):
    return cutlass.max(a, b)


def _add(a, b):
    return a + b


@cute.jit
def _load_kv(tma_k: cute.CopyAtom, tKgK: cute.Tensor, tKsK: cute.Tensor, tma_v: cute.CopyAtom, tVgV: cute.Tensor,
             tVsV: cute.Tensor, bar, j: cutlass.Int32, s: cutlass.Int32, tx_bytes: cutlass.Constexpr):
    """Called by the whole producer warp (the TMA copy elects its lane with a warp-wide elect.sync): the
    stage's bytes expected on `bar`, then the K and V tiles j into stage s."""
    with cute.arch.elect_one():
        cute.arch.mbarrier_arrive_and_expect_tx(bar, tx_bytes)
    cute.copy(tma_k, tKgK[None, j], tKsK[None, s], tma_bar_ptr=bar)
    cute.copy(tma_v, tVgV[None, j], tVsV[None, s], tma_bar_ptr=bar)


@cute.jit
def _online_softmax(acc_s: cute.Tensor, row_max: cute.Tensor, row_sum: cute.Tensor, corr: cute.Tensor,
                    tScS: cute.Tensor, pos: cute.Tensor, kv0: cutlass.Int32, min_pos: cutlass.Int32,
                    sk: cutlass.Int32, shift: cutlass.Int32, causal: cutlass.Int32, scale_log2: cutlass.Float32,
                    bn_: cutlass.Constexpr):
    """One key tile of the online softmax on a thread's scores acc_s (two rows: value i on row slot
    (i // 2) % 2): masks it, updates the row maxima and sums, leaves P = exp2((S - max) * scale_log2) in
    acc_s (fp32) and the factor that rescales what came before in corr. pos: the query position (0..Sq-1)
    of the thread's two rows; min_pos: the smallest of the CTA's rows."""
    minus_inf = cutlass.Float32(-math.inf)
    # mask only tiles that reach past Sk or past the diagonal of the CTA's first query position
    n = cute.size(acc_s)
    if kv0 + bn_ > sk or (causal != 0 and kv0 + bn_ - 1 > min_pos + shift):
        for i in cutlass.range_constexpr(n):
            key = kv0 + tScS[i][1]
            if key >= sk or (causal != 0 and key > pos[(i // 2) % 2] + shift):
                acc_s[i] = minus_inf
    base = cute.make_rmem_tensor(cute.make_layout(2), cutlass.Float32)
    for r in cutlass.range_constexpr(2):
        mx = row_max[r]
        for i in cutlass.range_constexpr(n):
            if cutlass.const_expr((i // 2) % 2 == r):
                mx = _max(mx, acc_s[i])
        mx = cute.arch.warp_reduction(mx, _max, threads_in_group=4)  # the row's quad
        b2 = mx * scale_log2
        if mx == minus_inf:
            b2 = cutlass.Float32(0.0)
        corr[r] = cute.math.exp2(row_max[r] * scale_log2 - b2, fastmath=True)
        base[r] = b2
        row_max[r] = mx
    part = cute.make_rmem_tensor(cute.make_layout(2), cutlass.Float32)
    part.fill(0.0)
    for i in cutlass.range_constexpr(n):
        r = (i // 2) % 2
        p = cute.math.exp2(acc_s[i] * scale_log2 - base[r], fastmath=True)
        acc_s[i] = p
        part[r] = part[r] + p
    for r in cutlass.range_constexpr(2):
        row_sum[r] = row_sum[r] * corr[r] + part[r]


@cute.jit
def _rescale(acc_o: cute.Tensor, corr: cute.Tensor):
    for i in cutlass.range_constexpr(cute.size(acc_o)):
        acc_o[i] = acc_o[i] * corr[(i // 2) % 2]


@cute.jit
def _cta(qk_mma: cute.TiledMma, pv_mma: cute.TiledMma, tma_q: cute.CopyAtom, mQ: cute.Tensor, tma_k: cute.CopyAtom,
         mK: cute.Tensor, tma_v: cute.CopyAtom, mV: cute.Tensor, mO: cute.Tensor, sq: cutlass.Int32,
         q_layout: cute.ComposedLayout, k_layout: cute.ComposedLayout, v_layout: cute.ComposedLayout,
         causal: cutlass.Int32, scale_log2: cutlass.Float32, bm_: cutlass.Constexpr, bn_: cutlass.Constexpr,
         d: cutlass.Constexpr, stages: cutlass.Constexpr, pipelined: cutlass.Constexpr, q_bytes: cutlass.Constexpr,
         kv_bytes: cutlass.Constexpr, split: cutlass.Constexpr, mM, mL, mAcc, chunk_tiles, ws: cutlass.Constexpr):
    """One CTA of either kernel (traced inline into each). split=False: the unsplit kernel, every key tile
    its rows need, O / l stored to mO (mM, mL, mAcc, chunk_tiles unused: None). split=True: the CTA's key
    tiles are one chunk of chunk_tiles tiles, and its partials go to the workspaces mM, mL (B * groups,
    n_split, rows) and mAcc (B * groups, n_split, rows, D), fp32: m in log2 units (row max * scale_log2,
    -inf for a row that saw no key), the row sum l and the unnormalised O."""
    tidx, _, _ = cute.arch.thread_idx()
    bx, _, _ = cute.arch.block_idx()
    warp, lane = tidx // 32, tidx % 32
    n_warps = cute.size(qk_mma) // 32  # the consumer warps (WS=1: the producer warpgroup's four follow them)
    # mQ, mO (GP * Sq, D, H / GP, B): the query rows of GP consecutive heads (one head group) are one
    # block of rows (see attention_wgmma); mK (Sk, D, Hkv, B), mV (D, Sk, Hkv, B); mQ, mK, mV are TMA
    # coordinate tensors. Row i of a group is query position i % Sq of head i // Sq of the group.
    rows, groups = cute.size(mO, mode=[0]), cute.size(mO, mode=[2])
    sk, kv_heads = cute.size(mK, mode=[0]), cute.size(mK, mode=[2])
    m_tiles = cute.ceil_div(rows, bm_)
    sp = None  # the split-KV chunk of this CTA (split=True only)
    if cutlass.const_expr(split):
        sp, bx = split_coords(bx, cute.size(mM, mode=[1]))
    mt, hg, b = cta_coords(bx, m_tiles, groups)
    gp = rows // sq  # heads per group: H / Hkv when packed, else 1
    hk = kv_head(hg, gp, groups * gp, kv_heads)
    m0 = mt * bm_
    shift = sk - sq  # causal: query position i sees keys j <= i + shift
    min_pos, max_pos = query_span(m0, bm_, rows, sq)
    n_tiles = key_tiles(sk, bn_, causal, max_pos, shift)
    t0 = 0  # the first key tile (a split's chunk start); tile j of the loops is key tile t0 + j
    if cutlass.const_expr(split):
        t0, n_tiles = chunk_of(n_tiles, sp, chunk_tiles)

    # ---- shared memory: Q, the K and V rings (swizzled as wgmma's descriptors expect), the barriers
    smem = cutlass.memory.SmemAllocator()
    dtype = mO.element_type
    sQ = smem.allocate_tensor(dtype, q_layout.outer, byte_alignment=1024, swizzle=q_layout.inner)
    sK = smem.allocate_tensor(dtype, k_layout.outer, byte_alignment=1024, swizzle=k_layout.inner)
    sV = smem.allocate_tensor(dtype, v_layout.outer, byte_alignment=1024, swizzle=v_layout.inner)
    q_bar = smem.allocate_array(cutlass.Int64, 1)
    full = smem.allocate_array(cutlass.Int64, stages)
    empty = smem.allocate_array(cutlass.Int64, stages)
    if tidx == 0:
        cpasync.prefetch_descriptor(tma_q)
        cpasync.prefetch_descriptor(tma_k)
        cpasync.prefetch_descriptor(tma_v)
        cute.arch.mbarrier_init(q_bar, 1)
        for s in cutlass.range_constexpr(stages):
            cute.arch.mbarrier_init(full + s, 1)
            cute.arch.mbarrier_init(empty + s, n_warps)
    cute.arch.mbarrier_init_fence()
    cute.arch.sync_threads()

    # ---- this CTA's tiles in TMA coordinates and their shared-memory destinations
    gQ = cute.local_tile(mQ[None, None, hg, b], (bm_, d), (None, 0))  # (BM, D, query tiles)
    gK = cute.local_tile(mK[None, None, hk, b], (bn_, d), (None, 0))  # (BN, D, key tiles)
    gV = cute.local_tile(mV[None, None, hk, b], (d, bn_), (0, None))  # (D, BN, key tiles)
    tQsQ, tQgQ = cpasync.tma_partition(tma_q, 0, cute.make_layout(1), cute.group_modes(sQ, 0, 2),
                                       cute.group_modes(gQ, 0, 2))
    tKsK, tKgK = cpasync.tma_partition(tma_k, 0, cute.make_layout(1), cute.group_modes(sK, 0, 2),
                                       cute.group_modes(gK, 0, 2))
    tVsV, tVgV = cpasync.tma_partition(tma_v, 0, cute.make_layout(1), cute.group_modes(sV, 0, 2),
                                       cute.group_modes(gV, 0, 2))

    if cutlass.const_expr(ws):
        # ---- warp-specialised (WS=1): the warpgroup after the consumers issues every load, the consumers
        # only wait on full barriers; with two consumer warpgroups the producer's registers go to them
        wg = cute.arch.make_warp_uniform(warp // 4)
        regs = ws_registers(bm_)
        if wg == n_warps // 4:
            if cutlass.const_expr(regs is not None):
                cute.arch.setmaxregister_decrease(regs[0])
            if warp == n_warps:
                _produce(tma_q, tQgQ, tQsQ, q_bar, mt, tma_k, tKgK, tKsK, tma_v, tVgV, tVsV, full, empty, n_tiles,
                         stages, q_bytes, kv_bytes)
        else:
            if cutlass.const_expr(regs is not None):
                cute.arch.setmaxregister_increase(regs[1])
            _consume(qk_mma, pv_mma, sQ, sK, sV, q_bar, full, empty, tma_k, tKgK, tKsK, tma_v, tVgV, tVsV, tidx, warp,
                     lane, mO, sq, rows, groups, mt, hg, b, m0, sk, shift, min_pos, n_tiles, t0, causal, scale_log2,
                     bm_, bn_, d, stages, pipelined, kv_bytes, split, mM, mL, mAcc, None, False)
    else:
        # ---- prologue: Q and the first key tiles in flight (fresh stages: no empty wait)
        if warp == 0:
            with cute.arch.elect_one():
                cute.arch.mbarrier_arrive_and_expect_tx(q_bar, q_bytes)
            cute.copy(tma_q, tQgQ[None, mt], tQsQ[None, 0], tma_bar_ptr=q_bar)
            # the simple loop refills a stage at the top of the iteration after its release, the pipelined
            # one at the end of the iteration that releases it: it starts with every stage in flight
            for j in range(cutlass.min(stages if pipelined else stages - 1, n_tiles)):
                _load_kv(tma_k, tKgK, tKsK, tma_v, tVgV, tVsV, full + j, _tile(t0, j), j, kv_bytes)
        _consume(qk_mma, pv_mma, sQ, sK, sV, q_bar, full, empty, tma_k, tKgK, tKsK, tma_v, tVgV, tVsV, tidx, warp,
                 lane, mO, sq, rows, groups, mt, hg, b, m0, sk, shift, min_pos, n_tiles, t0, causal, scale_log2,
                 bm_, bn_, d, stages, pipelined, kv_bytes, split, mM, mL, mAcc, sp, True)


@cute.jit
def _produce(tma_q: cute.CopyAtom, tQgQ: cute.Tensor, tQsQ: cute.Tensor, q_bar, mt: cutlass.Int32,
             tma_k: cute.CopyAtom, tKgK: cute.Tensor, tKsK: cute.Tensor, tma_v: cute.CopyAtom, tVgV: cute.Tensor,
             tVsV: cute.Tensor, full, empty, n_tiles: cutlass.Int32, stages: cutlass.Constexpr,
             q_bytes: cutlass.Constexpr, kv_bytes: cutlass.Constexpr):
    """The producer warp of the warp-specialised form (WS=1, the unsplit kernel: key tiles from 0): Q, then
    every key tile of the CTA in order, each into its stage once every consumer warp released the stage's
    previous tile (tile j is the (j // STAGES)-th use of stage j % STAGES: it waits for the completion of
    release number j // STAGES - 1, parity (j // STAGES + 1) % 2)."""
    with cute.arch.elect_one():
        cute.arch.mbarrier_arrive_and_expect_tx(q_bar, q_bytes)
    cute.copy(tma_q, tQgQ[None, mt], tQsQ[None, 0], tma_bar_ptr=q_bar)
    for j in range(n_tiles):
        s = j % stages
        if j >= stages:
            cute.arch.mbarrier_wait(empty + s, refill_parity(j, stages))
        _load_kv(tma_k, tKgK, tKsK, tma_v, tVgV, tVsV, full + s, j, s, kv_bytes)


@cute.jit
def _consume(qk_mma: cute.TiledMma, pv_mma: cute.TiledMma, sQ: cute.Tensor, sK: cute.Tensor, sV: cute.Tensor, q_bar,
             full, empty, tma_k: cute.CopyAtom, tKgK: cute.Tensor, tKsK: cute.Tensor, tma_v: cute.CopyAtom,
             tVgV: cute.Tensor, tVsV: cute.Tensor, tidx: cutlass.Int32, warp: cutlass.Int32, lane: cutlass.Int32,
             mO: cute.Tensor, sq: cutlass.Int32, rows: cutlass.Int32, groups: cutlass.Int32, mt: cutlass.Int32,
             hg: cutlass.Int32, b: cutlass.Int32, m0: cutlass.Int32, sk: cutlass.Int32, shift: cutlass.Int32,
             min_pos: cutlass.Int32, n_tiles: cutlass.Int32, t0, causal: cutlass.Int32, scale_log2: cutlass.Float32,
             bm_: cutlass.Constexpr, bn_: cutlass.Constexpr, d: cutlass.Constexpr, stages: cutlass.Constexpr,
             pipelined: cutlass.Constexpr, kv_bytes: cutlass.Constexpr, split: cutlass.Constexpr, mM, mL, mAcc, sp,
             refill: cutlass.Constexpr):
    """The consumer warps' part (every warp of the plain form): both MMAs, the online softmax, the stage
    releases and the epilogue. refill (the plain form): warp 0 is also the producer and refills each stage
    once every warp released it; without (WS=1) the producer warp of _produce does."""
    dtype = mO.element_type
    # ---- the MMA views: descriptors over Q and every stage of K and V; S, P and O in registers
    thr_qk, thr_pv = qk_mma.get_slice(tidx), pv_mma.get_slice(tidx)
    tSrQ = qk_mma.make_fragment_A(thr_qk.partition_A(sQ))  # (MMA, 1, D / 16, 1)
    tSrK = qk_mma.make_fragment_B(thr_qk.partition_B(sK))  # (MMA, 1, D / 16, stages)
    tOrV = pv_mma.make_fragment_B(thr_pv.partition_B(sV))  # (MMA, 1, BN / 16, stages)
    acc_s = qk_mma.make_fragment_C(thr_qk.partition_shape_C((bm_, bn_)))  # ((2, 2, BN / 8), 1, 1) fp32
    acc_o = pv_mma.make_fragment_C(thr_pv.partition_shape_C((bm_, d)))  # ((2, 2, D / 8), 1, 1) fp32
    tOrP = pv_mma.make_fragment_A(pv_mma.partition_shape_A((bm_, bn_)))  # ((2, 2, 2), 1, BN / 16) 16-bit
    # the same registers seen with S's layout: P = S element for element (see the module docstring)
    tOrP_as_s = cute.make_tensor(tOrP.iterator, acc_s.layout)
    tScS = thr_qk.partition_C(cute.make_identity_tensor((bm_, bn_)))  # (row, key) in the tile of each S value
    pos = cute.make_rmem_tensor(cute.make_layout(2), cutlass.Int32)  # query position of the thread's two rows
    for r in cutlass.range_constexpr(2):
        pos[r] = (m0 + tScS[2 * r][0]) % sq  # values 2r, 2r + 1 lie on row slot r
    qk_mma.set(warpgroup.Field.ACCUMULATE, True)
    pv_mma.set(warpgroup.Field.ACCUMULATE, True)
    acc_o.fill(0.0)
    # a thread's two rows: value i of S / O lies on row slot (i // 2) % 2 (the (2, 2, N / 8) fragment)
    row_max = cute.make_rmem_tensor(cute.make_layout(2), cutlass.Float32)
    row_sum = cute.make_rmem_tensor(cute.make_layout(2), cutlass.Float32)
    minus_inf = cutlass.Float32(-math.inf)
    row_max.fill(minus_inf)
    row_sum.fill(0.0)
    cute.arch.mbarrier_wait(q_bar, 0)

    corr = cute.make_rmem_tensor(cute.make_layout(2), cutlass.Float32)  # a tile's rescale factor per row
    if cutlass.const_expr(not pipelined):
        for j in range(n_tiles):
            s = j % stages
            if cutlass.const_expr(refill):
                nt = j + stages - 1  # producer warp: refill the stage tile j - 1 used (released by every warp)
                if warp == 0 and nt < n_tiles:
                    if nt >= stages:
                        cute.arch.mbarrier_wait(empty + nt % stages, refill_parity(nt, stages))
                    _load_kv(tma_k, tKgK, tKsK, tma_v, tVgV, tVsV, full + nt % stages, _tile(t0, nt), nt % stages,
                             kv_bytes)
            cute.arch.mbarrier_wait(full + s, (j // stages) % 2)

            # 1. S = Q Kᵀ
            acc_s.fill(0.0)
            warpgroup.fence()
            for kb in cutlass.range_constexpr(d // 16):
                cute.gemm(qk_mma, acc_s, tSrQ[None, None, kb, 0], tSrK[None, None, kb, s], acc_s)
            warpgroup.commit_group()
            warpgroup.wait_group(0)
            # 2. mask, online softmax: S -> P (fp32), O rescaled, P converted into the A registers
            _online_softmax(acc_s, row_max, row_sum, corr, tScS, pos, _tile(t0, j) * bn_, min_pos, sk, shift,
                            causal, scale_log2, bn_)
            _rescale(acc_o, corr)
            tOrP_as_s.store(acc_s.load().to(dtype))
            # 3. O += P V
            warpgroup.fence()  # the register writes of P and of the rescaled O before the wgmmas read them
            for kb in cutlass.range_constexpr(bn_ // 16):
                cute.gemm(pv_mma, acc_o, tOrP[None, None, kb], tOrV[None, None, kb, s], acc_o)
            warpgroup.commit_group()
            warpgroup.wait_group(0)
            if lane == 0:
                cute.arch.mbarrier_arrive(empty + s)  # this warp is done with stage s
    else:
        # Pipelined: the softmax of tile j + 1 runs while the tensor cores compute P(j) V, the order of
        # FlashAttention-3's intra-warpgroup overlap. Per iteration j (P(j) and its rescale factor ready):
        #   issue Q K(j+1)ᵀ into acc_n; rescale O; issue P(j) V; wait_group(1) (groups retire in order:
        #   the scores are in); softmax of tile j + 1 -> P(j+1); wait_group(0) (P(j) V done); release stage.
        # O is only rescaled with no P V in flight (ptxas serialises every wgmma when registers it cannot
        # prove retired are read). The last tile recomputes its own scores (its stage is never released),
        # so every iteration issues the same wgmmas; its softmax is skipped.
        # WS=1 (no refill): one score fragment, P(j) leaves it for the A registers before Q K(j+1)ᵀ is issued
        # into it (see below)
        acc_n = acc_s if not refill else qk_mma.make_fragment_C(thr_qk.partition_shape_C((bm_, bn_)))
        cute.arch.mbarrier_wait(full, 0)
        acc_s.fill(0.0)
        warpgroup.fence()
        for kb in cutlass.range_constexpr(d // 16):
            cute.gemm(qk_mma, acc_s, tSrQ[None, None, kb, 0], tSrK[None, None, kb, 0], acc_s)
        warpgroup.commit_group()
        warpgroup.wait_group(0)
        _online_softmax(acc_s, row_max, row_sum, corr, tScS, pos, t0 * bn_, min_pos, sk, shift, causal,
                        scale_log2, bn_)
        for j in range(n_tiles):
            s = j % stages
            jn = cutlass.min(j + 1, n_tiles - 1)
            s1 = jn % stages
            if cutlass.const_expr(not refill):
                # WS=1 (240 registers a consumer thread): P(j) converted before the scores of tile j + 1 are
                # issued into the same fragment (acc_n is acc_s), so no second score fragment is live (the
                # plain order keeps both: S(j) is converted while Q K(j+1)ᵀ runs)
                tOrP_as_s.store(acc_s.load().to(dtype))
            cute.arch.mbarrier_wait(full + s1, (jn // stages) % 2)
            acc_n.fill(0.0)
            warpgroup.fence()
            for kb in cutlass.range_constexpr(d // 16):
                cute.gemm(qk_mma, acc_n, tSrQ[None, None, kb, 0], tSrK[None, None, kb, s1], acc_n)
            warpgroup.commit_group()
            _rescale(acc_o, corr)
            if cutlass.const_expr(refill):
                tOrP_as_s.store(acc_s.load().to(dtype))
            warpgroup.fence()
            for kb in cutlass.range_constexpr(bn_ // 16):
                cute.gemm(pv_mma, acc_o, tOrP[None, None, kb], tOrV[None, None, kb, s], acc_o)
            warpgroup.commit_group()
            warpgroup.wait_group(1)  # the scores of tile j + 1 are in (P(j) V may still run)
            if j + 1 < n_tiles:
                _online_softmax(acc_n, row_max, row_sum, corr, tScS, pos, _tile(t0, j + 1) * bn_, min_pos, sk,
                                shift, causal, scale_log2, bn_)
                if cutlass.const_expr(refill):
                    acc_s.store(acc_n.load())
            warpgroup.wait_group(0)  # P(j) V done: stage s is free
            if lane == 0:
                cute.arch.mbarrier_arrive(empty + s)
            if cutlass.const_expr(refill):
                nt = j + stages  # producer warp: tile j + STAGES into stage s once every warp released it
                if warp == 0 and nt < n_tiles:
                    cute.arch.mbarrier_wait(empty + s, (j // stages) % 2)
                    _load_kv(tma_k, tKgK, tKsK, tma_v, tVgV, tVsV, full + s, _tile(t0, nt), s, kv_bytes)

    tOcO = thr_pv.partition_C(cute.make_identity_tensor((bm_, d)))
    if cutlass.const_expr(split):
        # ---- split epilogue: the partials of the real rows, fp32 (one quad's first lane stores m and l)
        n = b * groups + hg
        for r in cutlass.range_constexpr(2):
            total = cute.arch.warp_reduction(row_sum[r], _add, threads_in_group=4)
            row, _ = tOcO[2 * r]
            if lane % 4 == 0 and m0 + row < rows:
                mM[n, sp, m0 + row] = row_max[r] * scale_log2  # -inf stays -inf: weight 0 in the combine
                mL[n, sp, m0 + row] = total
        tOgA = thr_pv.partition_C(cute.local_tile(mAcc[n, sp, None, None], (bm_, d), (mt, 0)))
        for i in cutlass.range_constexpr(0, cute.size(acc_o), 2):
            row, _ = tOcO[i]
            if m0 + row < rows:
                tOgA[i] = acc_o[i]
                tOgA[i + 1] = acc_o[i + 1]
    else:
        # ---- epilogue: O / l, bounds-checked store of the real rows (pairs of adjacent columns: 32-bit stores)
        inv = cute.make_rmem_tensor(cute.make_layout(2), cutlass.Float32)
        for r in cutlass.range_constexpr(2):
            total = cute.arch.warp_reduction(row_sum[r], _add, threads_in_group=4)
            inv[r] = cutlass.Float32(1.0) / total
        gO = cute.local_tile(mO[None, None, hg, b], (bm_, d), (mt, 0))
        tOgO = thr_pv.partition_C(gO)
        for i in cutlass.range_constexpr(0, cute.size(acc_o), 2):
            row, _ = tOcO[i]
            if m0 + row < rows:
                r = (i // 2) % 2
                tOgO[i] = (acc_o[i] * inv[r]).to(dtype)
                tOgO[i + 1] = (acc_o[i + 1] * inv[r]).to(dtype)


def _tile(t0, j):
    """Key tile j of a CTA's range that starts at key tile t0 (the unsplit kernel: t0 = 0, j itself, so
    its trace holds no extra add)."""
    return j if isinstance(t0, int) and t0 == 0 else t0 + j


@cute.kernel
def _attention_wgmma_kernel(qk_mma: cute.TiledMma, pv_mma: cute.TiledMma, tma_q: cute.CopyAtom, mQ: cute.Tensor,
                            tma_k: cute.CopyAtom, mK: cute.Tensor, tma_v: cute.CopyAtom, mV: cute.Tensor,
                            mO: cute.Tensor, sq: cutlass.Int32, q_layout: cute.ComposedLayout, k_layout: cute.ComposedLayout,
                            v_layout: cute.ComposedLayout, causal: cutlass.Int32, scale_log2: cutlass.Float32,
                            bm_: cutlass.Constexpr, bn_: cutlass.Constexpr, d: cutlass.Constexpr,
                            stages: cutlass.Constexpr, pipelined: cutlass.Constexpr, q_bytes: cutlass.Constexpr,
                            kv_bytes: cutlass.Constexpr, ws: cutlass.Constexpr):
    _cta(qk_mma, pv_mma, tma_q, mQ, tma_k, mK, tma_v, mV, mO, sq, q_layout, k_layout, v_layout, causal, scale_log2,
         bm_, bn_, d, stages, pipelined, q_bytes, kv_bytes, False, None, None, None, None, ws)


@cute.kernel
def _attention_wgmma_split_kernel(qk_mma: cute.TiledMma, pv_mma: cute.TiledMma, tma_q: cute.CopyAtom,
                                  mQ: cute.Tensor, tma_k: cute.CopyAtom, mK: cute.Tensor, tma_v: cute.CopyAtom,
                                  mV: cute.Tensor, mO: cute.Tensor, sq: cutlass.Int32, q_layout: cute.ComposedLayout,
                                  k_layout: cute.ComposedLayout, v_layout: cute.ComposedLayout, causal: cutlass.Int32,
                                  scale_log2: cutlass.Float32, mM: cute.Tensor, mL: cute.Tensor, mAcc: cute.Tensor,
                                  chunk_tiles: cutlass.Int32, bm_: cutlass.Constexpr, bn_: cutlass.Constexpr,
                                  d: cutlass.Constexpr, stages: cutlass.Constexpr, pipelined: cutlass.Constexpr,
                                  q_bytes: cutlass.Constexpr, kv_bytes: cutlass.Constexpr):
    _cta(qk_mma, pv_mma, tma_q, mQ, tma_k, mK, tma_v, mV, mO, sq, q_layout, k_layout, v_layout, causal, scale_log2,
         bm_, bn_, d, stages, pipelined, q_bytes, kv_bytes, True, mM, mL, mAcc, chunk_tiles, False)


COMBINE_WARPS = 4  # output rows per combine CTA: one warp per row


@cute.kernel
def _combine_kernel(mM: cute.Tensor, mL: cute.Tensor, mAcc: cute.Tensor, mO: cute.Tensor, d: cutlass.Constexpr):
    """out row = sum_s 2^(m_s - M) O_s / sum_s 2^(m_s - M) l_s, M = max_s m_s, for the row (n, r) of warp w
    of CTA bx: n * rows + r = bx * COMBINE_WARPS + w. Lane t holds the D / 32 adjacent columns from
    t * D / 32 (one vector load of each split's fp32 O, one vector store). Split 0 holds key 0, which every
    row sees: M is finite, and a split whose row saw no key (m = -inf) weighs exp2(-inf) = 0."""
    tidx, _, _ = cute.arch.thread_idx()
    bx, _, _ = cute.arch.block_idx()
    warp, lane = tidx // 32, tidx % 32
    vec = d // 32
    nq, n_split, rows = cute.size(mM, mode=[0]), cute.size(mM, mode=[1]), cute.size(mM, mode=[2])
    groups = cute.size(mO, mode=[2])
    g = bx * COMBINE_WARPS + warp
    if g < nq * rows:
        n, r = g // rows, g % rows
        mx = cutlass.Float32(-math.inf)
        for s in range(n_split):
            mx = _max(mx, mM[n, s, r])
        total = cutlass.Float32(0.0)
        acc = cute.make_rmem_tensor(cute.make_layout(vec), cutlass.Float32)
        acc.fill(0.0)
        for s in range(n_split):
            w = cute.math.exp2(mM[n, s, r] - mx, fastmath=True)
            total = total + w * mL[n, s, r]
            part = cute.local_tile(mAcc[n, s, r, None], (vec,), (lane,))
            acc.store(acc.load() + w * part.load())
        dst = cute.local_tile(mO[r, None, n % groups, n // groups], (vec,), (lane,))
        dst.store((acc.load() / total).to(mO.element_type))


def _operands(q, k, v, out, d, bm_, bn_, stages, pack):
    """What both host functions hand their kernel: torch's row-major (B, H, S, D) as TMA coordinate tensors
    (q, k (S, D, H, B) K-major operands of Q Kᵀ; v (D, Sk, Hkv, B), D-contiguous = the N-major B operand of
    P V), the output view, the two MMAs, the shared-memory layouts, the TMA atoms and their byte counts."""
    batch, heads, sq = cute.size(q, mode=[0]), cute.size(q, mode=[1]), cute.size(q, mode=[2])
    gp = heads // cute.size(k, mode=[1]) if pack else 1  # query heads per CTA row block
    qs, os_ = q.layout.stride, out.layout.stride
    mQ = cute.make_tensor(q.iterator, cute.make_layout((gp * sq, d, heads // gp, batch),
                                                       stride=(qs[2], 1, gp * qs[1], qs[0])))
    mO = cute.make_tensor(out.iterator, cute.make_layout((gp * sq, d, heads // gp, batch),
                                                         stride=(os_[2], 1, gp * os_[1], os_[0])))
    mK = cute.make_tensor(k.iterator, cute.select(k.layout, mode=[2, 3, 1, 0]))
    mV = cute.make_tensor(v.iterator, cute.select(v.layout, mode=[3, 2, 1, 0]))
    dtype = q.element_type
    qk_mma, pv_mma = mmas(dtype, bm_, bn_, d)
    q_layout = sm90.make_smem_layout_a(K_MAJOR, (bm_, bn_, d), dtype, 1)  # (BM, D, 1)
    k_layout = sm90.make_smem_layout_b(K_MAJOR, (bm_, bn_, d), dtype, stages)  # (BN, D, stages)
    v_layout = sm90.make_smem_layout_b(MN_MAJOR, (bm_, d, bn_), dtype, stages)  # (D, BN, stages)
    op = cpasync.CopyBulkTensorTileG2SOp()
    tma_q, tma_mQ = cpasync.make_tiled_tma_atom(op, mQ, cute.slice_(q_layout, (None, None, 0)), (bm_, d))
    tma_k, tma_mK = cpasync.make_tiled_tma_atom(op, mK, cute.slice_(k_layout, (None, None, 0)), (bn_, d))
    tma_v, tma_mV = cpasync.make_tiled_tma_atom(op, mV, cute.slice_(v_layout, (None, None, 0)), (d, bn_))
    q_bytes = bm_ * d * dtype.width // 8
    kv_bytes = 2 * bn_ * d * dtype.width // 8
    grid_x = cute.ceil_div(gp * sq, bm_) * (heads // gp) * batch  # unsplit CTAs
    return (qk_mma, pv_mma, tma_q, tma_mQ, tma_k, tma_mK, tma_v, tma_mV, mO, sq, q_layout, k_layout, v_layout,
            q_bytes, kv_bytes, grid_x)


@cute.jit
def attention_wgmma(q: cute.Tensor, k: cute.Tensor, v: cute.Tensor, out: cute.Tensor, causal: cutlass.Int32,
                    scale_log2: cutlass.Float32, stream, d: cutlass.Constexpr, bm_: cutlass.Constexpr,
                    bn_: cutlass.Constexpr, stages: cutlass.Constexpr, pipelined: cutlass.Constexpr,
                    pack: cutlass.Constexpr, ws: cutlass.Constexpr):
    (qk_mma, pv_mma, tma_q, tma_mQ, tma_k, tma_mK, tma_v, tma_mV, mO, sq, q_layout, k_layout, v_layout, q_bytes,
     kv_bytes, grid_x) = _operands(q, k, v, out, d, bm_, bn_, stages, pack)
    _attention_wgmma_kernel(qk_mma, pv_mma, tma_q, tma_mQ, tma_k, tma_mK, tma_v, tma_mV, mO, sq, q_layout, k_layout,
                            v_layout, causal, scale_log2, bm_, bn_, d, stages, pipelined, q_bytes,
                            kv_bytes, ws).launch(grid=[grid_x, 1, 1], block=[cute.size(qk_mma) + (128 if ws else 0), 1, 1],
                                                 stream=stream)


@cute.jit
def attention_wgmma_split(q: cute.Tensor, k: cute.Tensor, v: cute.Tensor, out: cute.Tensor, m_ws: cute.Tensor,
                          l_ws: cute.Tensor, acc_ws: cute.Tensor, causal: cutlass.Int32, scale_log2: cutlass.Float32,
                          chunk_tiles: cutlass.Int32, stream, d: cutlass.Constexpr, bm_: cutlass.Constexpr,
                          bn_: cutlass.Constexpr, stages: cutlass.Constexpr, pipelined: cutlass.Constexpr,
                          pack: cutlass.Constexpr):
    """Split-KV (attention_plan.py): n_split = m_ws's extent 1 CTAs per unsplit CTA, each over chunk_tiles
    key tiles, writing the partials m_ws, l_ws (B * groups, n_split, rows) and acc_ws (.., D); then the
    combine kernel, on the same stream, writes out."""
    (qk_mma, pv_mma, tma_q, tma_mQ, tma_k, tma_mK, tma_v, tma_mV, mO, sq, q_layout, k_layout, v_layout, q_bytes,
     kv_bytes, grid_x) = _operands(q, k, v, out, d, bm_, bn_, stages, pack)
    n_split = cute.size(m_ws, mode=[1])
    _attention_wgmma_split_kernel(qk_mma, pv_mma, tma_q, tma_mQ, tma_k, tma_mK, tma_v, tma_mV, mO, sq, q_layout,
                                  k_layout, v_layout, causal, scale_log2, m_ws, l_ws, acc_ws, chunk_tiles, bm_, bn_, d,
                                  stages, pipelined, q_bytes, kv_bytes).launch(
        grid=[grid_x * n_split, 1, 1], block=[cute.size(qk_mma), 1, 1], stream=stream)
    rows_all = cute.size(m_ws, mode=[0]) * cute.size(m_ws, mode=[2])
    _combine_kernel(m_ws, l_ws, acc_ws, mO, d).launch(grid=[cute.ceil_div(rows_all, COMBINE_WARPS), 1, 1],
                                                      block=[32 * COMBINE_WARPS, 1, 1], stream=stream)


def build(dtype, d: int, cfg: dict):
    """(jit function, fake args): q, k, v 16-byte aligned (what TMA needs; TVM-FFI refuses a tensor that
    breaks it), every extent but D symbolic. cfg SPLIT=1: the split-KV form, with the fp32 workspaces
    (their base 16-byte aligned: the combine reads D / 32 columns of O per lane as one vector)."""
    b, h, hkv, sq, sk = (common.sym() for _ in range(5))
    q, out = (common.fake(dtype, (b, h, sq, d), ALIGN_ELEMS) for _ in range(2))
    k, v = common.fake(dtype, (b, hkv, sk, d), ALIGN_ELEMS), common.fake(dtype, (b, hkv, sk, d), ALIGN_ELEMS)
    knobs = (d, cfg["BM"], cfg["BN"], cfg["STAGES"], bool(cfg.get("PIPE", 0)), bool(cfg.get("PACK", 0)))
    if cfg.get("SPLIT"):  # WS does not apply to the split form (config.py): its kernel ignores it
        nq, n_split, rows = (common.sym() for _ in range(3))
        m_ws, l_ws = (common.fake(torch.float32, (nq, n_split, rows), 1) for _ in range(2))
        acc_ws = common.fake(torch.float32, (nq, n_split, rows, d), 4)
        return attention_wgmma_split, (q, k, v, out, m_ws, l_ws, acc_ws, cutlass.Int32(0), cutlass.Float32(1.0),
                                       cutlass.Int32(1), common.stream(), *knobs)
    return attention_wgmma, (q, k, v, out, cutlass.Int32(0), cutlass.Float32(1.0), common.stream(), *knobs,
                             bool(cfg.get("WS", 0)))
