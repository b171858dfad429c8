"""The schedule choices every language's attention shares: grouped-query packing and split-KV.

Grouped-query packing: when the G = H / Hkv query heads of one key/value head hold few rows together
(G * S <= the query tile, e.g. decode: G rows), they are one tile of G * S rows against their shared K/V:
q and out, (B, H, S, D) row-major, are then the (B * Hkv, G * S, D) view, row r being head r // S, query
r % S. K/V are read once per group instead of once per head, and a decode tile holds G real rows, not 1.
Otherwise each (b, h) is its own row set ((B * H, S, D)) and reads K/V head (b * H + h) // G.

Split-KV (flash-decoding): when those row tiles are too few to fill the GPU (decode at small batch: B=1,
Hkv=8 gives 8 tiles for 132 SMs), the keys are cut into `n_split` chunks of `chunk` keys (a multiple of the
key tile); each (tile, chunk) program writes its partial row max m, row sum l and unnormalised fp32
accumulator to a workspace, and a combine kernel merges them: out = sum_s 2^(m_s - M) acc_s /
sum_s 2^(m_s - M) l_s with M = max_s m_s (scores in log2 units). A chunk a row cannot see (causal) gives
m = -inf, l = 0, acc = 0 and weight 0; chunk 0 holds key 0, which every row sees, so M is finite.
"""

from __future__ import annotations

# Without a GPU (interpreter, compile checks) plans are made for the H200's SM count.
from tilerosetta.backends.base import H200_SM_COUNT
MIN_SPLIT_BLOCKS = 4  # key tiles per chunk at least: fewer, and the combine's traffic stops paying off


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def packed_rows(h: int, hkv: int, s: int, block_m: int) -> bool:
    """True when the G = h / hkv heads of a group are one row tile (G * S <= block_m), G > 1."""
    g = h // hkv
    return g > 1 and g * s <= block_m


def split_plan(tiles: int, sk: int, block_n: int, sms: int = H200_SM_COUNT,
               min_blocks: int = MIN_SPLIT_BLOCKS) -> tuple[int, int]:
    """(n_split, chunk): 1 split (chunk = sk) when `tiles` programs already fill `sms` SMs or the keys are
    too few; else at most two programs per SM, each chunk at least `min_blocks` key tiles (a backend's
    config may lower it: wide key tiles already amortise a chunk's prologue). At most, not about: every
    program streams a chunk, so programs past a whole number of waves cost a chunk's time for a fraction of
    the SMs (B16 decode, 128 tiles: 3 splits are 384 programs for 2 x 132 slots, 1.45 waves; 2 are one)."""
    if min_blocks < 1:
        raise ValueError(f"attention split plan: min_blocks must be >= 1, got {min_blocks}")
    min_chunk = min_blocks * block_n
    if tiles >= sms or sk < 2 * min_chunk:
        return 1, sk
    n_split = min(cdiv(sk, min_chunk), 2 * sms // tiles)
    chunk = cdiv(cdiv(sk, n_split), block_n) * block_n
    return cdiv(sk, chunk), chunk
