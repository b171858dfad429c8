"""The split-K schedule of matmul/bmm at small M (decode), shared by every language that has one.

A decode step multiplies M = 1..64 token rows by weights of K x N = 4096 x 4096 .. 4096 x 28672: its
(BLOCK_M, BLOCK_N) output tiles number N / BLOCK_N (32..448), too few programs to keep 132 SMs streaming
the weight, which is all the work there is (memory-bound). Split-K cuts K into `n_split` chunks of `chunk`
(a multiple of BLOCK_K); each (tile, chunk) program writes an fp32 partial tile to a workspace and a reduce
sums the chunks in a fixed order (deterministic). The split costs 8 bytes per output element and chunk
(fp32 partial written and read back), against B's `itemsize * K` bytes per output column, so it pays only
while M is small: the automatic plan keeps that extra traffic under 1/8 of B's, which never splits a
large-M (compute-bound) product.
"""

from __future__ import annotations

from tilerosetta.backends.base import H200_SM_COUNT
from tilerosetta.kernels.attention_split import cdiv

TARGET_WAVES = 4  # split until the programs fill every SM about this many times over (load balance)
MIN_CHUNK_BLOCKS = 2  # K tiles per chunk at least: shorter chunks are mostly prologue and partial traffic
MAX_PARTIAL_TRAFFIC = 8  # the partials' extra traffic stays under 1/8 of B's


def split_plan(tiles: int, m: int, k: int, block_k: int, itemsize: int, split_k: int = 0,
               sms: int = H200_SM_COUNT) -> tuple[int, int]:
    """(n_split, chunk) for `tiles` output tiles of an (m, k) @ (k, n) product. split_k: 1 = never split,
    n >= 2 = n chunks (fewer if K has fewer BLOCK_K tiles), 0 = automatic: enough chunks for TARGET_WAVES
    programs per SM, each chunk >= MIN_CHUNK_BLOCKS K tiles, the partials' traffic
    (8 * n_split * m per column) <= 1/MAX_PARTIAL_TRAFFIC of B's (itemsize * k per column)."""
    if split_k < 0:
        raise ValueError(f"matmul split plan: SPLIT_K must be >= 0, got {split_k}")
    k_tiles = cdiv(k, block_k)
    if split_k == 0:
        if tiles >= TARGET_WAVES * sms:
            return 1, k
        by_traffic = itemsize * k // (8 * MAX_PARTIAL_TRAFFIC * max(m, 1))
        n_split = min(cdiv(TARGET_WAVES * sms, tiles), k_tiles // MIN_CHUNK_BLOCKS, by_traffic)
    else:
        n_split = min(split_k, k_tiles)
    if n_split < 2:
        return 1, k
    chunk = cdiv(k_tiles, n_split) * block_k
    return cdiv(k, chunk), chunk
