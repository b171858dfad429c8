"""The host side of the wgmma attention's schedule (attention_wgmma.py): how many CTAs a call has, and
whether it takes the split-KV form. Pure Python (no CuTe DSL import): the adapter decides the compiled
specialization with it, the launch sizes the workspaces with it, and the CPU tests check it without the
runtime.

Split-KV (flash-decoding, the plan every language shares: kernels/attention_split.py): when the CTAs of a
call are too few to fill the GPU (decode at B=1, Llama 3.1 8B: B * Hkv = 8 CTAs of 4 packed rows for 132
SMs), each (query tile, head group, batch) CTA becomes `n_split` CTAs, one per chunk of `chunk` keys (a
whole number of key tiles), which write fp32 partials (row max m in log2 units, row sum l, unnormalised
O); a second kernel merges them (attention_wgmma.py, _combine_kernel).

Our rows are not attention_split.packed_rows': with PACK=1 a CTA's rows are always taken from the G * Sq
rows of a head group (a tile may span heads), so the CTA count is batch * groups * ceil(G * Sq / BM), and
split_plan is asked with that count. split_plan's own threshold (split unless the tiles fill the SMs)
assumes that a program is cheap to add; ours hold a 144-208 KB shared-memory ring, one or two CTAs per SM,
so a split that only turns one nearly full wave into two (B=16 decode: 128 CTAs -> 256) would be slower.
The plan is therefore taken only when the wave estimate (waves x key tiles per CTA) drops to at most
SPLIT_GAIN of the unsplit one.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from tilerosetta.backends.base import H200_SM_COUNT
from tilerosetta.kernels.attention_split import MIN_SPLIT_BLOCKS, cdiv, split_plan
from tilerosetta.kernels.cute_dsl.config import attention_smem_bytes

SMEM_PER_SM = 228 * 1024  # Hopper: shared memory of one SM, of which a CTA may hold 227 KB
SMEM_RESERVED = 1024  # per resident CTA (the runtime's own)
REGS_PER_SM = 65536
MAX_REGS = 255  # what we assume a thread holds: the pipelined loop compiles to ~230-248 registers
SPLIT_GAIN = 0.75  # a split must cut the wave estimate to this fraction or less


def shape_of(dims: dict) -> tuple[int, int, int, int, int, int]:
    """(B, H, Hkv, Sq, Sk, D) of a call's dims (Hkv, Sk default to H, Sq as in the spec)."""
    return dims["B"], dims["H"], dims.get("Hkv", dims["H"]), dims["S"], dims.get("Sk", dims["S"]), dims["D"]


def rows_and_groups(dims: dict, cfg: dict) -> tuple[int, int]:
    """(rows per head group, head groups per batch): G * Sq rows and Hkv groups when packed (PACK=1), else
    Sq rows and H groups."""
    _, h, hkv, sq, _, _ = shape_of(dims)
    gp = h // hkv if cfg.get("PACK", 0) else 1
    return gp * sq, h // gp


def tiles(dims: dict, cfg: dict) -> int:
    """CTAs of the unsplit kernel: batch x head groups x query tiles of BM rows."""
    rows, groups = rows_and_groups(dims, cfg)
    return dims["B"] * groups * cdiv(rows, cfg["BM"])


def ctas_per_sm(cfg: dict, d: int) -> int:
    """CTAs one SM holds at once: by shared memory and by registers (BM / 64 warpgroups of 128 threads, and
    with WS=1 the producer warpgroup: the unsplit kernel that a split is weighed against has it)."""
    by_smem = SMEM_PER_SM // (attention_smem_bytes(cfg, d) + SMEM_RESERVED)
    by_regs = REGS_PER_SM // ((2 * cfg["BM"] + 128 * bool(cfg.get("WS", 0))) * MAX_REGS)
    return max(1, min(by_smem, by_regs))


def plan(dims: dict, cfg: dict, sms: int = H200_SM_COUNT) -> tuple[int, int]:
    """(n_split, chunk) of a wgmma attention call: (1, Sk) unsplit, else n_split > 1 chunks of `chunk` keys
    (a multiple of BN; the last may be shorter). SPLIT_MIN_BLOCKS = 0 turns the split off."""
    min_blocks = cfg.get("SPLIT_MIN_BLOCKS", MIN_SPLIT_BLOCKS)
    _, _, _, _, sk, d = shape_of(dims)
    if not min_blocks:
        return 1, sk
    n_tiles = tiles(dims, cfg)
    n_split, chunk = split_plan(n_tiles, sk, cfg["BN"], sms, min_blocks)
    if n_split == 1:
        return 1, sk
    slots = sms * ctas_per_sm(cfg, d)
    unsplit = cdiv(n_tiles, slots) * cdiv(sk, cfg["BN"])
    split = cdiv(n_tiles * n_split, slots) * (chunk // cfg["BN"])
    return (n_split, chunk) if split <= SPLIT_GAIN * unsplit else (1, sk)


class Split(NamedTuple):
    """A split-KV call's plan, what its launch needs: n_split chunks of `chunk` keys = chunk_tiles key tiles
    of BN, and PACK (which decides the partials' row sets)."""
    n_split: int
    chunk: int
    chunk_tiles: int
    pack: int


def split_of(dims: dict, cfg: dict, sms: int = H200_SM_COUNT) -> Split | None:
    """plan's answer as a Split, None when the call is not split."""
    n_split, chunk = plan(dims, cfg, sms)
    return Split(n_split, chunk, chunk // cfg["BN"], int(bool(cfg.get("PACK", 0)))) if n_split > 1 else None


def workspace_shapes(dims: dict, cfg: dict, n_split: int) -> tuple[tuple, tuple]:
    """Shapes of the fp32 partials: m and l (B * groups, n_split, rows), O (B * groups, n_split, rows, D);
    row r of group n is the kernel's row r of head group n % groups of batch n // groups."""
    rows, groups = rows_and_groups(dims, cfg)
    nq = dims["B"] * groups
    return (nq, n_split, rows), (nq, n_split, rows, dims["D"])


def workspaces(q: torch.Tensor, k: torch.Tensor, split: Split):
    """(m, l, O) partials of a split call from torch's caching allocator on the current stream: no host sync,
    and a CUDA graph that captures the call keeps them (torch.empty: every entry the combine reads is
    written by the split kernel first)."""
    b, h, sq, d = q.shape
    dims = {"B": b, "H": h, "Hkv": k.shape[1], "S": sq, "Sk": k.shape[2], "D": d}
    ml_shape, acc_shape = workspace_shapes(dims, {"PACK": split.pack}, split.n_split)
    m_ws = torch.empty(ml_shape, dtype=torch.float32, device=q.device)
    return m_ws, torch.empty_like(m_ws), torch.empty(acc_shape, dtype=torch.float32, device=q.device)
