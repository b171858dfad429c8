"""matmul and bmm: out (Bt, M, N) = a (Bt, M, K) @ b (Bt, K, N), fp32 accumulation with ct.mma.

One kernel serves both ops: matmul passes its 2-D tensors as (1, M, K) views. Each block owns one
BM x BN output tile of one batch entry (one flat grid axis x: batch-major, then tile; so Bt may
exceed 65535) and walks K in BK steps; K tails are zero-padded
on both operands, so they add 0 to the dot products. M/N tails are padded on load and dropped by
ct.store. fp32 operands are rounded to tf32 for the tensor cores (the spec's fp32 tolerance is tf32's);
fp16/bf16 feed the mma directly. Output tiles are visited in GROUP_M-tall column-major groups so that
blocks running together share A rows and B columns in L2.

PERSIST (config, 0 = off): PERSIST x SMs blocks each walk the output tiles t = bid, bid + blocks, ... in the
same order. tileiras warp-specialises the tile loop as it does one tile (sm_90: a TMA producer warpgroup with
its own copy of the loop, two consumer warpgroups that hand the finished tile to a store warp through shared
memory), so the producer starts the next tile's loads while the consumers finish the last one: no per-tile
pipeline fill, which one block per tile pays (inference from the SASS; the timing is the sweep's to show).
"""

import cuda.tile as ct

from tilerosetta.backends.base import sm_count
from tilerosetta.kernels.cutile.config import Launch, plan_matmul
from tilerosetta.kernels.cutile.hints import hinted

ZERO = ct.PaddingMode.ZERO


def _tile(a, b, out, batch, pid, tiles_m, tiles_n, BM, BN, BK, GROUP_M):
    """Output tile `pid` (flat, of tiles_m x tiles_n) of batch entry `batch`."""
    # Swizzle the flat tile id into (pm, pn): GROUP_M rows of tiles, column by column.
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = ct.minimum(tiles_m - first_m, GROUP_M)
    pm = first_m + (pid % per_group) % group_rows
    pn = (pid % per_group) // group_rows

    acc = ct.zeros((BM, BN), ct.float32)
    for kk in range(ct.cdiv(a.shape[2], BK)):
        x = ct.reshape(ct.load(a, (batch, pm, kk), (1, BM, BK), padding_mode=ZERO), (BM, BK))
        y = ct.reshape(ct.load(b, (batch, kk, pn), (1, BK, BN), padding_mode=ZERO), (BK, BN))
        if a.dtype == ct.float32:
            x = ct.astype(x, ct.tfloat32)
            y = ct.astype(y, ct.tfloat32)
        acc = ct.mma(x, y, acc)
    ct.store(out, (batch, pm, pn), ct.reshape(ct.astype(acc, out.dtype), (1, BM, BN)))


@ct.kernel
def matmul_kernel(a, b, out, BM: ct.Constant[int], BN: ct.Constant[int], BK: ct.Constant[int],
                  GROUP_M: ct.Constant[int]):
    tiles_m = ct.cdiv(a.shape[1], BM)
    tiles_n = ct.cdiv(b.shape[2], BN)
    # One flat grid axis of (batch entry, output tile), tile fastest: Bt may exceed grid y's 65535.
    _tile(a, b, out, ct.bid(0) // (tiles_m * tiles_n), ct.bid(0) % (tiles_m * tiles_n), tiles_m, tiles_n,
          BM, BN, BK, GROUP_M)


@ct.kernel
def matmul_persistent_kernel(a, b, out, BM: ct.Constant[int], BN: ct.Constant[int], BK: ct.Constant[int],
                             GROUP_M: ct.Constant[int], CLUSTER: ct.Constant[int]):
    tiles_m = ct.cdiv(a.shape[1], BM)
    tiles_n = ct.cdiv(b.shape[2], BN)
    per_entry = tiles_m * tiles_n
    # The walk is the non-persistent grid's order. Its length is rounded up to whole clusters (CTAS) so the
    # CTAs of a cluster, which may share multicast loads, run the same number of tiles; a tile past the
    # last (batch index Bt) loads zeros and its store falls outside out, so it is dropped.
    total = ct.cdiv(a.shape[0] * per_entry, CLUSTER) * CLUSTER
    for t in range(ct.bid(0), total, ct.num_blocks(0)):
        _tile(a, b, out, t // per_entry, t % per_entry, tiles_m, tiles_n, BM, BN, BK, GROUP_M)


def _launch(a3, b3, out3, cfg):
    bt, m, k = a3.shape
    # the device's SM count only for a persistent walk: the one-block-per-tile path asks nothing more per call
    sms = sm_count(device=a3.device) if cfg.get("PERSIST", 0) else 0
    p = plan_matmul(bt, m, b3.shape[2], k, cfg, sms)
    body = matmul_persistent_kernel if p["persistent"] else matmul_kernel
    kernel = hinted(body, num_worker_warps=p["WARPS"] or None, num_ctas=p["CTAS"] or None)
    cluster = (max(p["CTAS"], 1),) if p["persistent"] else ()
    return [Launch(kernel, p["grid"], (a3, b3, out3, p["BM"], p["BN"], p["BK"], p["GROUP_M"], *cluster))]


def prepare(a, b, out, cfg):
    """matmul: 2-D operands as a batch of one."""
    return _launch(a.unsqueeze(0), b.unsqueeze(0), out.unsqueeze(0), cfg)


def prepare_bmm(a, b, out, cfg):
    return _launch(a, b, out, cfg)
