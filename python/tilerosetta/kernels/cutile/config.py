"""Tile sizes of the cuTile Python kernels: one small table per op and dtype, plus the host-side logic
that turns a config and the problem dims into launch parameters (tile shapes, grids).

Everything here is plain Python (no cuda.tile import), so it is unit-tested on any machine.

cuTile tile shapes must be compile-time powers of two; problem extents are not, so every kernel
loads with padding and stores with the bounds-checked `ct.store` (out-of-range elements dropped).
A config holds *knobs* (upper bounds, preferences); `plan_*` derives the exact constants per call,
shrinking a tile to the next power of two of a small extent so tiny problems don't launch mostly-empty
tiles (each distinct constant set is one JIT compile, cached by cuda.tile).
"""

from __future__ import annotations

import itertools
from typing import Any, NamedTuple

OPS = ("vector_add", "transpose", "softmax", "rms_norm", "layer_norm", "silu_and_mul", "rope", "matmul",
       "bmm", "attention")
ROW_OPS = ("softmax", "rms_norm", "layer_norm")

# CUDA grid limits: x up to 2^31-1, y and z up to 65535.
MAX_GRID = (2**31 - 1, 65535, 65535)


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (n >= 1)."""
    if n < 1:
        raise ValueError(f"next_pow2 needs n >= 1, got {n}")
    return 1 << (n - 1).bit_length()


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# ---- the default table ---------------------------------------------------------------------------------
# Keys: op -> dtype name ("fp32"/"fp16"/"bf16"/"*" for all) -> knobs.
#  * elementwise (vector_add, silu_and_mul): TILE elements per block.
#  * transpose: TM x TN tile (square: both sides of the transpose coalesce).
#  * row ops: a row of N fits one tile when next_pow2(N) <= MAX_SINGLE (one read of x, reductions in
#    registers); longer rows loop over LOOP_TN-wide tiles. Single-tile blocks take several rows while
#    rows*width <= ROW_ELEMS, so short rows still fill a block.
#  * rope: TS positions per block, all of D (two halves) at once.
#  * matmul/bmm: BM x BN output tile, BK reduction step, GROUP_M rows of tiles swizzled for L2 reuse.
#  * attention: BM queries per block, BN keys per inner step; by head dim D.
DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {
    "vector_add": {"*": {"TILE": 1024}},
    "silu_and_mul": {"*": {"TILE": 1024}},
    "transpose": {"fp32": {"TM": 32, "TN": 32}, "*": {"TM": 64, "TN": 64}},
    "softmax": {"fp32": {"MAX_SINGLE": 8192, "LOOP_TN": 1024, "ROW_ELEMS": 4096},
                "*": {"MAX_SINGLE": 8192, "LOOP_TN": 2048, "ROW_ELEMS": 4096}},
    "rms_norm": {"fp32": {"MAX_SINGLE": 8192, "LOOP_TN": 1024, "ROW_ELEMS": 4096},
                 "*": {"MAX_SINGLE": 8192, "LOOP_TN": 2048, "ROW_ELEMS": 4096}},
    "layer_norm": {"fp32": {"MAX_SINGLE": 8192, "LOOP_TN": 1024, "ROW_ELEMS": 4096},
                   "*": {"MAX_SINGLE": 8192, "LOOP_TN": 2048, "ROW_ELEMS": 4096}},
    "rope": {"*": {"TS": 16}},
    "matmul": {"fp32": {"BM": 128, "BN": 128, "BK": 32, "GROUP_M": 8},
               "*": {"BM": 128, "BN": 128, "BK": 64, "GROUP_M": 8}},
    "bmm": {"fp32": {"BM": 128, "BN": 128, "BK": 32, "GROUP_M": 8},
            "*": {"BM": 128, "BN": 128, "BK": 64, "GROUP_M": 8}},
    "attention": {"D64": {"BM": 128, "BN": 64}, "D128": {"BM": 128, "BN": 64}},
}

# Sweep spaces: the product of these per-knob choices (pow2 only).
_ROW_SPACE = {"MAX_SINGLE": (4096, 8192, 16384), "LOOP_TN": (512, 1024, 2048, 4096), "ROW_ELEMS": (2048, 4096, 8192)}
SPACES: dict[str, dict[str, tuple]] = {
    "vector_add": {"TILE": (256, 512, 1024, 2048, 4096)},
    "silu_and_mul": {"TILE": (256, 512, 1024, 2048, 4096)},
    "transpose": {"TM": (16, 32, 64, 128), "TN": (16, 32, 64, 128)},
    "softmax": dict(_ROW_SPACE),
    "rms_norm": dict(_ROW_SPACE),
    "layer_norm": dict(_ROW_SPACE),
    "rope": {"TS": (4, 8, 16, 32, 64)},
    "matmul": {"BM": (64, 128, 256), "BN": (64, 128, 256), "BK": (32, 64), "GROUP_M": (8,)},
    "bmm": {"BM": (64, 128, 256), "BN": (64, 128, 256), "BK": (32, 64), "GROUP_M": (8,)},
    "attention": {"BM": (64, 128), "BN": (32, 64, 128)},
}



def table_key(op: str, dtype_name: str, dims: dict[str, int] | None = None) -> str:
    """Which row of DEFAULTS[op] applies (attention is keyed by head dim, the rest by dtype)."""
    rows = DEFAULTS[op]
    if op == "attention":
        d = (dims or {}).get("D", 128)
        return f"D{d}" if f"D{d}" in rows else "D128"
    return dtype_name if dtype_name in rows else "*"


def default_config(op: str, dtype_name: str, dims: dict[str, int] | None = None) -> dict[str, Any]:
    return dict(DEFAULTS[op][table_key(op, dtype_name, dims)])


def config_space(op: str, dtype_name: str) -> list[dict[str, Any]]:
    space = SPACES[op]
    keys = list(space)
    return [dict(zip(keys, vals)) for vals in itertools.product(*(space[k] for k in keys))]


def check_config(op: str, config: dict[str, Any]) -> None:
    """Refuse unknown knobs and non-power-of-two tile sizes before they reach the compiler."""
    if op not in SPACES:
        raise KeyError(f"unknown op '{op}': expected one of {list(SPACES)}")
    unknown = set(config) - set(SPACES[op])
    if unknown:
        raise ValueError(f"cutile_py {op}: unknown config key(s) {sorted(unknown)}; expected {list(SPACES[op])}")
    for k, v in config.items():
        if not isinstance(v, int) or isinstance(v, bool) or v < 1 or v & (v - 1):
            raise ValueError(f"cutile_py {op}: config {k}={v!r} must be a positive power of two")


def check_grid(grid: tuple[int, ...]) -> tuple[int, ...]:
    for axis, (g, lim) in enumerate(zip(grid, MAX_GRID)):
        if not 1 <= g <= lim:
            raise ValueError(f"grid {grid}: axis {axis} extent {g} outside [1, {lim}]")
    return grid


# ---- plans: knobs + dims -> exact kernel constants and grid -----------------------------------------
def plan_elementwise(n: int, cfg: dict[str, Any]) -> tuple[int, tuple[int, ...]]:
    """(tile, grid) for a 1-D sweep over n elements."""
    tile = min(cfg["TILE"], next_pow2(n))
    return tile, check_grid((cdiv(n, tile), 1, 1))


def plan_silu(m: int, h: int, cfg: dict[str, Any]) -> tuple[int, tuple[int, ...]]:
    """(tile over H, grid): a flat grid of rows x H-tiles, so neither extent meets the 65535 limit."""
    tile = min(cfg["TILE"], next_pow2(h))
    return tile, check_grid((m * cdiv(h, tile), 1, 1))


def plan_transpose(m: int, n: int, cfg: dict[str, Any]) -> tuple[int, int, tuple[int, ...]]:
    tm, tn = min(cfg["TM"], next_pow2(m)), min(cfg["TN"], next_pow2(n))
    return tm, tn, check_grid((cdiv(m, tm) * cdiv(n, tn), 1, 1))  # flat grid, unflattened in-kernel


def plan_rows(m: int, n: int, cfg: dict[str, Any]) -> dict[str, Any]:
    """Row ops: single-tile (whole row in one tile, BM rows per block) or looped (LOOP_TN-wide tiles)."""
    width = next_pow2(n)
    if width <= cfg["MAX_SINGLE"]:
        bm = max(1, min(cfg["ROW_ELEMS"] // width, next_pow2(m)))
        return {"single": True, "BM": bm, "BN": width, "grid": check_grid((cdiv(m, bm), 1, 1))}
    bn = min(cfg["LOOP_TN"], width)
    return {"single": False, "BM": 1, "BN": bn, "grid": check_grid((m, 1, 1))}


def plan_rope(bh: int, s: int, d: int, cfg: dict[str, Any]) -> tuple[int, int, tuple[int, ...]]:
    """(TS, HP, grid): HP = next_pow2(D/2) so any even D works (the halves are padded, not required pow2)."""
    ts = min(cfg["TS"], next_pow2(s))
    return ts, next_pow2(d // 2), check_grid((cdiv(s, ts) * bh, 1, 1))


def plan_matmul(bt: int, m: int, n: int, k: int, cfg: dict[str, Any]) -> dict[str, Any]:
    """Tile sizes shrink to the problem (M=1 must not run 128-row tiles); the mma needs >= 16 per side."""
    bm = max(16, min(cfg["BM"], next_pow2(m)))
    bn = max(16, min(cfg["BN"], next_pow2(n)))
    bk = max(16, min(cfg["BK"], next_pow2(k)))
    tiles = cdiv(m, bm) * cdiv(n, bn)
    return {"BM": bm, "BN": bn, "BK": bk, "GROUP_M": cfg["GROUP_M"], "grid": check_grid((tiles, bt, 1))}


def plan_attention(bh: int, s: int, d: int, cfg: dict[str, Any]) -> dict[str, Any]:
    bm = max(16, min(cfg["BM"], next_pow2(s)))
    bn = max(16, min(cfg["BN"], next_pow2(s)))
    return {"BM": bm, "BN": bn, "D": d, "grid": check_grid((cdiv(s, bm), bh, 1))}


class Launch(NamedTuple):
    """One kernel launch a kernel module's `prepare` asks for: the adapter runs it with ct.launch on
    torch's current stream; the compile test turns `args` into a KernelSignature instead."""

    kernel: Any
    grid: tuple[int, ...]
    args: tuple
