"""Tile sizes, warps and stages of every Triton kernel: one table per op and dtype, nothing buried in kernels.

`default(op, dtype, dims, interpret)` is the configuration an ordinary call uses. `space(op, dtype)` lists
what a sweep may try; `check(op, config)` refuses unknown keys and bad values before any launch.

GPU numbers target an H200 (Hopper, sm_90, 228 KB shared memory per SM): e.g. bf16/fp16 matmul 128x256x64
with 8 warps and 3 stages (A 16 KB + B 32 KB per stage), fp32 (tf32) 128x128x32. Under the CPU interpreter
warps and stages mean nothing and each program instance costs Python time, so the interpreter table uses
tiles that keep the number of program instances small on the conformance shapes.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch

from tilerosetta.specs import family_ops
from tilerosetta.specs.base import DTYPE_NAMES, FP32

# Row ops (the "rows" family): one row per program. Rows up to `single_max` are held in one
# block of next_pow2(N) (one read of x); longer rows use the looped kernel with `loop_block` columns.
# maxnreg: ptxas's register cap per thread (0: its own choice), for more programs (rows) in flight per SM.
_ROW_GPU = {"single_max": 16384, "loop_block": 4096, "maxnreg": 0}
# Register caps the sweep tries, per op: (the row width N they are for, the config). sm_90 cubins, Triton 3.6, bf16:
# softmax's 16384 block at 8 warps takes 112 registers (2 programs = 2 rows per SM), capped at 80 it keeps every
# value in registers (no STL) and 3 fit (at 16 warps 64 registers = 2 programs, and a cap of 40 spills);
# rms_norm's 8192 block at 16 warps takes 39 (3 programs), capped at 32 no STL and 4 fit (layer_norm spills there).
_ROW_CAPS: dict[str, tuple[tuple[int, dict[str, int]], ...]] = {
    "softmax": ((16384, {"single_max": 16384, "loop_block": 4096, "num_warps": 8, "maxnreg": 80}),),
    "rms_norm": ((8192, {"single_max": 16384, "loop_block": 4096, "num_warps": 16, "maxnreg": 32}),),
}
_MAXNREG = (24, 255)  # ptxas's range for .maxnreg
ROW_OPS = family_ops("rows")  # OpSpec.family: the kernels launched by row_launch

_GPU: dict[str, dict[str, dict[str, Any]]] = {
    # key "*" = every dtype; a dtype name overrides it.
    "vector_add": {"*": {"BLOCK": 4096, "num_warps": 8}},
    # OUT_ROWS: 1 = x's row tiles fastest, consecutive programs write along out's rows (transpose.py). 16-bit:
    # the H200 sweep's winner at 8192^2 and 16384^2 (bench/results/transpose/: 67.2 / 260 us; 64 x 64 with
    # OUT_ROWS 0, the old default, was not among the 5 fastest).
    "transpose": {"*": {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "OUT_ROWS": 1},
                  "fp32": {"BLOCK_M": 32, "BLOCK_N": 64, "num_warps": 4, "OUT_ROWS": 0}},
    **{op: {"*": dict(_ROW_GPU)} for op in ROW_OPS},
    "silu_and_mul": {"*": {"BLOCK_M": 1, "BLOCK_H": 2048, "num_warps": 8}},
    # EVICT: L2 eviction hints (rope.py): 0 none, 1 cos/sin evict_last (as inductor marks broadcast loads),
    # 2 also q and out evict_first. WIDE: 1 64-bit offsets, 0 32-bit ones where they fit (rope.py).
    "rope": {"*": {"BLOCK_R": 16, "num_warps": 4, "EVICT": 0, "WIDE": 1}},
    # SPLIT_K: 0 = the split-K plan decides (kernels/matmul_split.py: splits only small-M products whose
    # tiles underfill the GPU), 1 = never split, n = n K chunks. BLOCK_M shrinks to the rows there are.
    # FIXUP: 1 = a split tile's last program sums the partials (one launch), 0 = a separate reduce kernel.
    # 0 by default: measured on the H200 decode step (decode_profile, 2026-12-01) the one-launch form gave
    # no gain for the GEMVs (matmul kernels 1151 us vs 1141 + 10 us of reduces) and made attention slower
    # (the last program's serial merge of 32 splits: 143 us per step vs 75 us with the combine kernel).
    # TMA: 1 = unsplit tiles through tensor descriptors (matmul.py `matmul_tma_kernel`), 0 = pointer loads.
    # PERSIST (with TMA): n = n x SMs programs walk the tiles (`matmul_tma_persistent_kernel`), 0 = one per tile.
    "matmul": {"*": {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8,
                     "num_stages": 3, "SPLIT_K": 0, "FIXUP": 0, "PREFETCH": 0, "TMA": 0, "PERSIST": 0},
               "fp32": {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 8,
                        "num_stages": 3, "SPLIT_K": 0, "FIXUP": 0, "PREFETCH": 0, "TMA": 0, "PERSIST": 0}},
    # TMA: 1 = tensor-descriptor loads/stores (attention.py); 0 = pointer loads (cp.async). SPLIT_MIN_BLOCKS:
    # key tiles per split-KV chunk at least (kernels/attention_split.py; decode only). FIXUP: 1 = a split
    # tile's last program merges the splits (one launch), 0 = a separate combine kernel.
    "attention": {"*": {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3, "TMA": 0,
                        "SPLIT_MIN_BLOCKS": 4, "FIXUP": 0}},
}
_GPU["bmm"] = _GPU["matmul"]

# Small M (decode: 1..64 tokens) is a weight stream: narrow column panels and deep K tiles give many
# programs (with split-K, >= 4 per SM) that each keep 3 B tiles of 16 KB in flight (128-bit loads).
_MATMUL_SMALL_M = 64
# PREFETCH (with PDL, kernels/triton/pdl.py): BLOCK_K tiles of its weight panel each program pulls into L2
# before it waits for the previous kernel of the step. 0 by default: on the H200 decode step (decode_profile
# --step-configs 'matmul:PREFETCH=0;...', 2026-12-01) 0, 4 and 16 gave the same graph step (1.355, 1.363, 1.352 ms).
_MATMUL_SMALL = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 4, "num_stages": 4,
                 "SPLIT_K": 0, "FIXUP": 0, "PREFETCH": 0, "TMA": 0, "PERSIST": 0}
# Decode (G * S <= 64 query rows per K/V head, one 16-row tile against the cache): 128-key TMA tiles, 4 warps,
# 2 stages and split-KV chunks of one key tile (256 programs at B=1, Hkv=8, 4096 keys). decode_profile
# --attention-sweep on the H200 (B1 H32 Hkv8 D128, 4096 keys, 24 caches back to back in one graph): 10.0 us
# per call against 11.2 for the prefill default and 12.0 for torch SDPA.
_ATTENTION_DECODE = {"BLOCK_M": 64, "BLOCK_N": 128, "num_warps": 4, "num_stages": 2, "TMA": 1, "SPLIT_MIN_BLOCKS": 1,
                     "FIXUP": 0}
_ATTENTION_D64 = {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3, "TMA": 0, "SPLIT_MIN_BLOCKS": 4,
                  "FIXUP": 0}

_INTERPRET: dict[str, dict[str, Any]] = {
    "vector_add": {"BLOCK": 8192},
    "transpose": {"BLOCK_M": 64, "BLOCK_N": 64},
    "silu_and_mul": {"BLOCK_M": 16, "BLOCK_H": 1024},
    "rope": {"BLOCK_R": 64},
    "matmul": {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64},
    "bmm": {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64},
    "attention": {"BLOCK_M": 128, "BLOCK_N": 128},
}

_POW2_KEYS = {"BLOCK", "BLOCK_M", "BLOCK_N", "BLOCK_K", "BLOCK_H", "BLOCK_R", "loop_block", "num_warps", "SPLIT_MIN_BLOCKS"}


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def row_warps(block: int) -> int:
    """Warps for a one-row block: about 8-16 elements per thread, 4..16 warps."""
    return max(4, min(16, block // 512))


def _query_rows_per_kv_head(dims: dict[str, int]) -> int:
    """G * S: the query rows that share one K/V head (a decode step's are few: the cache stream dominates)."""
    h = dims.get("H", 1)
    return h // max(1, dims.get("Hkv", h)) * dims.get("S", 1 << 30)


def default(op: str, dtype: torch.dtype, dims: dict[str, int], interpret: bool) -> dict[str, Any]:
    table = _GPU[op]
    cfg = dict(table.get(DTYPE_NAMES[dtype], table["*"]))
    if op in ROW_OPS:
        n = dims.get("N", 1)
        block = next_pow2(n) if n <= cfg["single_max"] else cfg["loop_block"]
        cfg["num_warps"] = row_warps(block)
    elif op in ("matmul", "bmm") and dtype != FP32 and dims.get("M", 1 << 30) <= _MATMUL_SMALL_M:
        cfg = dict(_MATMUL_SMALL)
    elif op == "attention" and _query_rows_per_kv_head(dims) <= 64:
        cfg = dict(_ATTENTION_DECODE)
    elif op == "attention" and dims.get("D") == 64:
        cfg = dict(_ATTENTION_D64)
    if interpret:
        cfg.update(_INTERPRET.get(op, {}))
    return cfg


def space(op: str, dtype: torch.dtype) -> list[dict[str, Any]]:
    """Configurations a sweep may try (GPU); each fits Hopper's shared memory by construction."""
    size = torch.tensor([], dtype=dtype).element_size()
    out: list[dict[str, Any]] = []
    if op == "vector_add":
        out = [{"BLOCK": b, "num_warps": w} for b, w in itertools.product((1024, 2048, 4096, 8192), (4, 8))]
    elif op == "transpose":
        out = [{"BLOCK_M": m, "BLOCK_N": n, "num_warps": w, "OUT_ROWS": o}
               for m, n, w, o in itertools.product((32, 64, 128), (32, 64, 128), (4, 8), (0, 1))]
    elif op in ROW_OPS:
        out = [{"single_max": s, "loop_block": lb, "num_warps": w, "maxnreg": 0}
               for s, lb, w in itertools.product((4096, 16384, 32768), (2048, 4096, 8192), (4, 8, 16))]
        out += [dict(c) for _n, c in _ROW_CAPS.get(op, ())]
    elif op == "silu_and_mul":
        out = [{"BLOCK_M": m, "BLOCK_H": h, "num_warps": w}
               for m, h, w in itertools.product((1, 2, 4), (512, 1024, 2048, 4096), (4, 8))]
    elif op == "rope":
        out = [{"BLOCK_R": r, "num_warps": w, "EVICT": e, "WIDE": wd}
               for wd, e, r, w in itertools.product((1, 0), (0, 1, 2), (4, 8, 16, 32, 64), (2, 4, 8))]
    elif op in ("matmul", "bmm"):
        for bm, bn, bk, w, s in itertools.product((64, 128), (64, 128, 256), (32, 64, 128), (4, 8), (2, 3, 4, 5)):
            smem = s * (bm * bk + bk * bn) * size
            if smem <= 200 * 1024:
                out.append({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "num_warps": w,
                            "num_stages": s, "SPLIT_K": 0})
        # Small M (decode): panel width, K depth and the K split (0 = the plan's choice), at 4 warps.
        for bn, bk, sk, s in itertools.product((32, 64, 128), (64, 128, 256), (0, 1, 2, 4, 8, 16), (3, 4, 5)):
            cfg = {"BLOCK_M": 64, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "num_warps": 4, "num_stages": s,
                   "SPLIT_K": sk}
            if s * (64 * bk + bk * bn) * size <= 200 * 1024 and cfg not in out:  # fits at M = 64 rows too
                out.append(cfg)
        # The 8-warp 128-row tiles through tensor descriptors too (`sweep --where TMA=1`).
        tma = [{**c, "TMA": 1} for c in out if c["BLOCK_M"] == 128 and c["num_warps"] == 8 and c["BLOCK_K"] == 64
               and c["BLOCK_N"] >= 128]
        # and those walked by one program per SM (`--where PERSIST=1`) where the ring and the output tile, which
        # the persistent kernel also stages in shared memory, fit (sm_90, 128 x 256 x 64, 3 stages: 213 KB)
        out += tma + [{**c, "PERSIST": 1} for c in tma
                      if (c["num_stages"] * (c["BLOCK_M"] + c["BLOCK_N"]) * c["BLOCK_K"] + c["BLOCK_M"] * c["BLOCK_N"])
                      * size <= 220 * 1024]
    elif op == "attention":
        out = [{"BLOCK_M": m, "BLOCK_N": n, "num_warps": w, "num_stages": s, "TMA": t, "SPLIT_MIN_BLOCKS": sp}
               for t, m, n, w, s, sp in itertools.product((0, 1), (64, 128), (32, 64, 128), (4, 8), (2, 3, 4), (1, 4))]
    return out


def check(op: str, config: dict[str, Any]) -> None:
    """Refuse a forced configuration with an unknown key or a value the kernels cannot take."""
    known = set(_GPU[op]["*"]) | ({"num_warps"} if op in ROW_OPS else set())
    for key, value in config.items():
        if key not in known:
            raise ValueError(f"triton.{op}: unknown config key '{key}'; expected some of {sorted(known)}")
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"triton.{op}: config '{key}' must be a non-negative int, got {value!r}")
        if key == "maxnreg" and value and not _MAXNREG[0] <= value <= _MAXNREG[1]:
            raise ValueError(f"triton.{op}: config 'maxnreg' must be 0 (ptxas's choice) or in "
                             f"[{_MAXNREG[0]}, {_MAXNREG[1]}], got {value}")
        if key in ("FIXUP", "OUT_ROWS", "TMA", "WIDE") and value > 1:
            raise ValueError(f"triton.{op}: config '{key}' must be 0 or 1, got {value}")
        if key in ("EVICT", "PERSIST") and value > 2:
            raise ValueError(f"triton.{op}: config '{key}' must be 0, 1 or 2, got {value}")
        if key in _POW2_KEYS and (value < 1 or value & (value - 1)):
            raise ValueError(f"triton.{op}: config '{key}' must be a power of two, got {value}")
