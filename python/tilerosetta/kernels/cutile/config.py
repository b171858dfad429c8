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

from tilerosetta.backends.base import H200_SM_COUNT
from tilerosetta.kernels.attention_split import MIN_SPLIT_BLOCKS, packed_rows, split_plan
from tilerosetta.specs import decode_panel, decode_tiles, family_ops

# The "rows" family (OpSpec.family): kernels that walk rows of (M, N) with plan_rows share the row table
# and sweep below.
ROW_OPS = family_ops("rows")

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
#  * transpose: TM x TN tile (square: both sides of the transpose coalesce); OUT_ROWS=1 runs x's row tiles
#    fastest, so consecutive blocks write along out's rows (kernels/cutile/transpose.py).
#  * row ops: a row of N fits one tile when next_pow2(N) <= MAX_SINGLE (one read of x, reductions in
#    registers); longer rows loop over LOOP_TN-wide tiles. Single-tile blocks take BM rows with
#    BM*width <= ROW_ELEMS. SM_ELEMS is the number of elements each SM should hold in flight: the
#    occupancy hint is SM_ELEMS / (BM*BN) CTAs per SM (1..4), which caps registers so that many fit.
#    WARPS is cuTile's num_worker_warps (4 or 8 with tileiras 13.4).
#  * rope: TS positions per block, all of D (two halves) at once; OCC the occupancy hint.
#  * matmul/bmm: BM x BN output tile, BK reduction step, GROUP_M rows of tiles swizzled for L2 reuse,
#    WARPS worker warps (a 128x256 fp32 accumulator needs 8 = two consumer warpgroups, or it spills).
#  * attention: BM queries per block, BN keys per inner step; by head dim D. OCC/WARPS as above.
# Hint knobs (OCC, WARPS, CTAS) take 0 for "let the compiler choose".
_ROW16 = {"MAX_SINGLE": 16384, "LOOP_TN": 2048, "ROW_ELEMS": 8192, "SM_ELEMS": 32768, "WARPS": 4}
_ROW32 = {"MAX_SINGLE": 16384, "LOOP_TN": 1024, "ROW_ELEMS": 8192, "SM_ELEMS": 32768, "WARPS": 4}
_MM16 = {"BM": 128, "BN": 256, "BK": 64, "GROUP_M": 8, "WARPS": 8, "CTAS": 0, "PERSIST": 0}
_MM32 = {"BM": 128, "BN": 128, "BK": 32, "GROUP_M": 8, "WARPS": 0, "CTAS": 0, "PERSIST": 0}
DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {
    "vector_add": {"*": {"TILE": 1024}},
    "silu_and_mul": {"*": {"TILE": 2048}},
    # 16-bit: the H200 sweep's winner at 8192^2 and 16384^2 (bench/results/transpose/; the same tile won on every
    # backend): 64x64 with x's column tiles fastest ran 68.6 / 285 us, this 67.0 / 260 us.
    "transpose": {"fp32": {"TM": 32, "TN": 32, "OUT_ROWS": 0}, "*": {"TM": 128, "TN": 128, "OUT_ROWS": 1}},
    **{op: {"fp32": dict(_ROW32), "*": dict(_ROW16)} for op in ROW_OPS},
    "rope": {"*": {"TS": 16, "OCC": 8}},  # 55 regs, 6 LDG.128 in flight per thread (exact kernel)
    "matmul": {"fp32": dict(_MM32), "*": dict(_MM16)},
    "bmm": {"fp32": dict(_MM32), "*": dict(_MM16)},
    # 8 worker warps = two consumer warpgroups of 64 query rows each (168 regs, no spills at BN=128);
    # without the hint tileiras picks one warpgroup at 255 regs and nothing overlaps its softmax.
    # SPLIT_MIN_BLOCKS: split-KV's least key tiles per chunk (kernels/attention_split.py; host-side).
    "attention": {"D64": {"BM": 128, "BN": 128, "OCC": 0, "WARPS": 8, "SPLIT_MIN_BLOCKS": MIN_SPLIT_BLOCKS},
                  "D128": {"BM": 128, "BN": 128, "OCC": 0, "WARPS": 8, "SPLIT_MIN_BLOCKS": MIN_SPLIT_BLOCKS}},
}
# The row ops' flags. softmax (kernels/cutile/softmax.py): EXACT=1 drops bounds checks on whole tiles (LOAD_TMA=0
# then keeps x on LDG), STORE_TMA=0 stores with STG instead of shared memory + TMA. The norms (rms_norm.py,
# layer_norm.py, add_rms_norm.py) take their exact kernels on whole tiles anyway; there LOAD_TMA=0 loads x and the
# weights with LDG and STORE_TMA=0 stores with STG. With neither, tileiras drops the producer warpgroup (128
# threads): softmax's 4096x16384 went 111 -> 72 us so on the H200. The defaults compile to the kernels from
# before the flags existed.
_TMA_FLAGS = {"LOAD_TMA": 1, "STORE_TMA": 1}
_SOFTMAX_FLAGS = {"EXACT": 0, **_TMA_FLAGS}
_SOFTMAX_FLAG_SWEEP = ((1, 1, 1), (1, 0, 1), (0, 1, 0), (1, 1, 0), (1, 0, 0))  # (EXACT, LOAD_TMA, STORE_TMA)
_NORM_FLAG_SWEEP = ((1, 0), (0, 1), (0, 0))  # (LOAD_TMA, STORE_TMA)
_ROW_FLAGS = {op: _SOFTMAX_FLAGS if op == "softmax" else _TMA_FLAGS for op in ROW_OPS}  # each row op's flags
for _op, _flags in _ROW_FLAGS.items():
    for _row in DEFAULTS[_op].values():
        _row.update(_flags)

# Allowed values per knob (check_config refuses others): pow2 tile sizes, hint knobs also 0 = auto.
_ROW_SPACE = {"MAX_SINGLE": (4096, 8192, 16384, 32768), "LOOP_TN": (512, 1024, 2048, 4096),
              "ROW_ELEMS": (2048, 4096, 8192, 16384), "SM_ELEMS": (8192, 16384, 32768, 65536), "WARPS": (4, 8)}
SPACES: dict[str, dict[str, tuple]] = {
    "vector_add": {"TILE": (256, 512, 1024, 2048, 4096)},
    "silu_and_mul": {"TILE": (256, 512, 1024, 2048, 4096)},
    "transpose": {"TM": (16, 32, 64, 128), "TN": (16, 32, 64, 128), "OUT_ROWS": (0, 1)},
    **{op: dict(_ROW_SPACE) for op in ROW_OPS},
    "rope": {"TS": (4, 8, 16, 32, 64, 128), "OCC": (0, 1, 2, 4, 8)},
    "matmul": {"BM": (16, 64, 128, 256), "BN": (32, 64, 128, 256), "BK": (32, 64, 128, 256, 512),
               "GROUP_M": (4, 8, 16), "WARPS": (0, 4, 8), "CTAS": (0, 1, 2), "PERSIST": (0, 1, 2)},
    "bmm": {"BM": (64, 128, 256), "BN": (64, 128, 256), "BK": (32, 64, 128), "GROUP_M": (4, 8, 16),
            "WARPS": (0, 4, 8), "CTAS": (0, 1, 2), "PERSIST": (0, 1, 2)},
    "attention": {"BM": (16, 64, 128, 256), "BN": (32, 64, 128), "OCC": (0, 1, 2), "WARPS": (0, 4, 8),
                  "SPLIT_MIN_BLOCKS": (1, 2, 4)},
}
for _op, _flags in _ROW_FLAGS.items():
    SPACES[_op].update({k: (0, 1) for k in _flags})
HINT_KEYS = ("OCC", "WARPS", "CTAS")  # 0 allowed (compiler's choice)
FLAG_KEYS = (*_SOFTMAX_FLAGS, "OUT_ROWS")  # 0 or 1


def _row_sweep(base):
    """The row ops' sweep: the default and one-knob variations of it (a full product would be
    hundreds of JIT compiles)."""
    out = [dict(base)]
    for k, vals in (("SM_ELEMS", (16384, 65536)), ("ROW_ELEMS", (4096, 16384)), ("WARPS", (8,)),
                    ("MAX_SINGLE", (8192, 32768)), ("LOOP_TN", (1024, 4096))):
        for v in vals:
            if v != base[k]:
                out.append({**base, k: v})
    out.append({**base, "WARPS": 8, "SM_ELEMS": 65536})
    return out


def _mm_sweep(base):
    out = [dict(base)]
    for bm, bn, bk, warps, ctas in ((128, 256, 64, 8, 0), (128, 256, 64, 0, 2), (256, 128, 64, 8, 0),
                                    (128, 128, 64, 0, 0), (128, 128, 64, 8, 0), (128, 128, 32, 0, 0),
                                    (128, 256, 32, 8, 0), (64, 128, 64, 0, 0)):
        for g in (8, 16):
            c = {"BM": bm, "BN": bn, "BK": bk, "GROUP_M": g, "WARPS": warps, "CTAS": ctas, "PERSIST": 0}
            if c not in out:
                out.append(c)
    # Persistent blocks (`sweep --where PERSIST=1`): the 1-CTA-per-SM tiles that win at 4096^3 and up.
    out += [{**c, "PERSIST": 1} for c in list(out) if c["BM"] * c["BN"] >= 128 * 256 and c["BK"] <= 64]
    return out


# Decode (M <= 16, specs.DECODE_TILE_MAX_M): the product streams the weight once, so the tiles are chosen
# for bytes in flight, not reuse: one 16-row tile of A, narrow BN, a deep BK per load. `sweep --where BM=16` times only these. The
# H200 sweep at M=1 (bench/results/decode/) preferred fewer, wider blocks to one per SM: BN 64 BK 128 at
# N 4096 (64 blocks, 16.4 us vs 17.1 for decode_config's 128) and BN 128 BK 256 at N 14336 (112 blocks,
# 32.3 vs 36.6 us); at M = 16 16 x 32 (N 4096) and 16 x 128 (N 14336) won: decode_config's panel rule.
_MM_DECODE = tuple({"BM": 16, "BN": bn, "BK": bk, "GROUP_M": 8, "WARPS": w, "CTAS": 0, "PERSIST": 0}
                   for bn in (32, 64, 128) for bk in (128, 256, 512) for w in (0, 4)
                   if bn * bk <= 32768)


def _attn_sweep(base):
    out = [dict(base)]
    for bm, bn in ((128, 128), (128, 64), (64, 64), (64, 128), (256, 64)):
        for occ, warps in ((0, 8), (0, 0), (2, 0), (1, 8)):
            c = {"BM": bm, "BN": bn, "OCC": occ, "WARPS": warps, "SPLIT_MIN_BLOCKS": base["SPLIT_MIN_BLOCKS"]}
            if c not in out:
                out.append(c)
    # Decode (`sweep --where BM=16`): the 16-row tile a packed group gets anyway, the key tile and how finely
    # split-KV cuts the keys when the row tiles are fewer than the SMs.
    out += [{"BM": 16, "BN": bn, "OCC": 0, "WARPS": 0, "SPLIT_MIN_BLOCKS": sp} for bn in (64, 128) for sp in (1, 2, 4)]
    # OCC 2: two decode tiles per SM, what the two-per-SM split plan (kernels/attention_split.py) schedules for;
    # tile_cpp's 16 x 128 tile at OCC 2 measured 74.9 vs 86.6 us at B 16 (H200, 2026-12-03).
    out += [{"BM": 16, "BN": bn, "OCC": 2, "WARPS": 0, "SPLIT_MIN_BLOCKS": 1} for bn in (64, 128)]
    return out


def table_key(op: str, dtype_name: str, dims: dict[str, int] | None = None) -> str:
    """Which row of DEFAULTS[op] applies (attention is keyed by head dim, the rest by dtype)."""
    rows = DEFAULTS[op]
    if op == "attention":
        d = (dims or {}).get("D", 128)
        return f"D{d}" if f"D{d}" in rows else "D128"
    return dtype_name if dtype_name in rows else "*"


def decode_config(n: int) -> dict[str, Any]:
    """The decode matmul default where no sweep entry applies: the spec's decode panel (N 4096 -> 32 columns,
    128 blocks; N 14336 -> 128, 112 blocks) and 256-deep K steps. The 128x256 GEMM tile gave 16 and 56
    blocks: 21.7% / 67% of the copy rate at M=1 on the H200, 48% / 85% with the swept tiles."""
    return {"BM": 16, "BN": decode_panel(n), "BK": 256, "GROUP_M": 8, "WARPS": 0, "CTAS": 0, "PERSIST": 0}


def default_config(op: str, dtype_name: str, dims: dict[str, int] | None = None) -> dict[str, Any]:
    if op == "matmul" and dtype_name != "fp32" and dims and decode_tiles(dims):
        return decode_config(dims.get("N", 4096))
    return dict(DEFAULTS[op][table_key(op, dtype_name, dims)])


def config_space(op: str, dtype_name: str) -> list[dict[str, Any]]:
    """What `tilerosetta sweep` tries: a curated list where the full product would be too big."""
    base = default_config(op, dtype_name)
    if op == "softmax":  # the row sweep at the default flags, then the default tiles under each other setting
        return _row_sweep(base) + [{**base, **dict(zip(_SOFTMAX_FLAGS, f))} for f in _SOFTMAX_FLAG_SWEEP]
    if op in ROW_OPS:  # the norms: the row sweep, then the flags at the default tiles; no TMA at all with other tiles
        flags = [{**base, **dict(zip(_TMA_FLAGS, f))} for f in _NORM_FLAG_SWEEP]
        no_tma = {**base, "LOAD_TMA": 0, "STORE_TMA": 0}
        return _row_sweep(base) + flags + [{**no_tma, "ROW_ELEMS": 4096}, {**no_tma, "ROW_ELEMS": 16384},
                                           {**no_tma, "WARPS": 8}]
    if op in ("matmul", "bmm"):
        space = _mm_sweep(base) if dtype_name != "fp32" else _mm_sweep(base)[:1] + [
            {**base, "BK": 64}, {**base, "BN": 256, "WARPS": 8}, {**base, "BM": 64}]
        return space + [dict(c) for c in _MM_DECODE] if op == "matmul" and dtype_name != "fp32" else space
    if op == "attention":
        return _attn_sweep(base)
    space = SPACES[op]
    keys = list(space)
    return [dict(zip(keys, vals)) for vals in itertools.product(*(space[k] for k in keys))]


def check_config(op: str, config: dict[str, Any]) -> None:
    """Refuse unknown knobs and non-power-of-two tile sizes before they reach the compiler."""
    if op not in SPACES:
        raise KeyError(f"unknown op '{op}': expected one of {list(SPACES)}")
    unknown = set(config) - set(SPACES[op])
    if unknown:
        raise ValueError(f"cutile_py.{op}: unknown config key(s) {sorted(unknown)}; expected {list(SPACES[op])}")
    for k, v in config.items():
        if k in HINT_KEYS and v == 0 and not isinstance(v, bool):
            continue  # the compiler's choice
        if k == "PERSIST":
            if v not in (0, 1, 2) or isinstance(v, bool):
                raise ValueError(f"cutile_py.{op}: config PERSIST={v!r} must be 0 (a block per tile), 1 or 2 "
                                 f"(blocks per SM that walk the tiles)")
            continue
        if k in FLAG_KEYS:
            if v not in (0, 1) or isinstance(v, bool):
                raise ValueError(f"cutile_py.{op}: config {k}={v!r} must be 0 or 1")
            continue
        if not isinstance(v, int) or isinstance(v, bool) or v < 1 or v & (v - 1):
            raise ValueError(f"cutile_py.{op}: config {k}={v!r} must be a positive power of two"
                             + (" (or 0 = compiler's choice)" if k in HINT_KEYS else ""))
        if k in ("WARPS",) and v not in (4, 8):
            raise ValueError(f"cutile_py.{op}: config WARPS={v} must be 0, 4 or 8 (tileiras 13.4)")
        if k in ("OCC",) and v > 32 or k == "CTAS" and v > 16:
            raise ValueError(f"cutile_py.{op}: config {k}={v} is out of range")


def check_grid(grid: tuple[int, ...]) -> tuple[int, ...]:
    # Every launch path calls this: the common 3-D grid is checked without a loop (same rule, ~1 µs less).
    if len(grid) == 3 and 1 <= grid[0] <= MAX_GRID[0] and 1 <= grid[1] <= MAX_GRID[1] and 1 <= grid[2] <= MAX_GRID[2]:
        return grid
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


# Widest row whose weight (and layer_norm's bias) the norms' exact kernels stage by TMA: at 16384 (the
# occupancy-2 plan) the extra shared memory drops layer_norm from 2 blocks/SM to 1 (sm_90, tileiras 13.4).
WB_TMA_MAX_N = 8192


def plan_rows(m: int, n: int, cfg: dict[str, Any]) -> dict[str, Any]:
    """Row ops: single-tile (whole row in one tile, BM rows per block) or looped (LOOP_TN-wide tiles).
    exact: single-tile and every block whole (the row is exactly one tile, BM rows divide M), so the
    kernels may load and store without bounds checks."""
    width = next_pow2(n)
    warps = cfg.get("WARPS", 4)
    if width <= cfg["MAX_SINGLE"]:
        bm = max(1, min(cfg["ROW_ELEMS"] // width, next_pow2(m)))
        return {"single": True, "exact": width == n and m % bm == 0, "BM": bm, "BN": width,
                "grid": check_grid((cdiv(m, bm), 1, 1)), "OCC": row_occupancy(bm * width, cfg), "WARPS": warps}
    bn = min(cfg["LOOP_TN"], width)
    return {"single": False, "exact": False, "BM": 1, "BN": bn, "grid": check_grid((m, 1, 1)),
            "OCC": row_occupancy(bn, cfg), "WARPS": warps}


def tma_flags(plan: dict[str, Any], cfg: dict[str, Any]) -> tuple[bool, bool, bool]:
    """The norms' exact kernels' (LOAD_TMA, WB_TMA, STORE_TMA): x by TMA, the weights (and bias) by TMA (only with
    x, and up to WB_TMA_MAX_N wide rows), the output by TMA. Absent flags mean TMA (the defaults)."""
    load = bool(cfg.get("LOAD_TMA", 1))
    return load, load and plan["BN"] <= WB_TMA_MAX_N, bool(cfg.get("STORE_TMA", 1))


def row_occupancy(tile_elems: int, cfg: dict[str, Any]) -> int:
    """CTAs per SM to ask for so that about SM_ELEMS elements are in flight per SM, in [1, 4].
    More than 4 would cap registers at 32 (256 threads) and the compiler spills (cuobjdump: LDL/STL)."""
    return max(1, min(4, cfg.get("SM_ELEMS", 32768) // tile_elems))


def plan_rope(bh: int, s: int, d: int, cfg: dict[str, Any]) -> tuple[int, int, tuple[int, ...]]:
    """(TS, HP, grid): HP = next_pow2(D/2) so any even D works (the halves are padded, not required pow2)."""
    ts = min(cfg["TS"], next_pow2(s))
    return ts, next_pow2(d // 2), check_grid((cdiv(s, ts) * bh, 1, 1))


def plan_matmul(bt: int, m: int, n: int, k: int, cfg: dict[str, Any], sms: int = H200_SM_COUNT) -> dict[str, Any]:
    """Tile sizes shrink to the problem (M=1 must not run 128-row tiles); the mma needs >= 16 per side.
    PERSIST > 0: min(tiles, PERSIST x sms) blocks walk the tiles (kernels/cutile/matmul.py), rounded down to
    whole clusters of CTAS; never for clamped tiles or fewer tiles than blocks (nothing to walk)."""
    bm = max(16, min(cfg["BM"], next_pow2(m)))
    bn = max(16, min(cfg["BN"], next_pow2(n)))
    bk = max(16, min(cfg["BK"], next_pow2(k)))
    tiles = cdiv(m, bm) * cdiv(n, bn)
    # Tiles clamped below the config's (a small problem): its warp / cluster hints were chosen for the full
    # tiles. A config that asks for small tiles itself (decode) keeps its hints.
    small = bm < min(cfg["BM"], 128) or bn < min(cfg["BN"], 128)
    ctas = 0 if small else cfg.get("CTAS", 0)
    blocks = cfg.get("PERSIST", 0) * sms // max(ctas, 1) * max(ctas, 1)
    persistent = not small and 0 < blocks < tiles * bt
    # Flat grid: output tiles x batch entries on axis x (unflattened in-kernel), so Bt > 65535 works.
    return {"BM": bm, "BN": bn, "BK": bk, "GROUP_M": cfg["GROUP_M"],
            "grid": check_grid((blocks if persistent else tiles * bt, 1, 1)), "persistent": persistent,
            "WARPS": 0 if small else cfg.get("WARPS", 0), "CTAS": ctas}


def plan_attention(b: int, h: int, hkv: int, s: int, sk: int, d: int, cfg: dict[str, Any],
                   sms: int = H200_SM_COUNT) -> dict[str, Any]:
    """Rows (NQ row sets of M rows: per head, or a group's G heads packed), tiles and the split-KV schedule
    (kernels/attention_split.py)."""
    packed = packed_rows(h, hkv, s, cfg["BM"])
    nq, m, gq = (b * hkv, (h // hkv) * s, 1) if packed else (b * h, s, h // hkv)
    bm = max(16, min(cfg["BM"], next_pow2(m)))
    bn = max(16, min(cfg["BN"], next_pow2(sk)))
    full = bm == cfg["BM"] and bn == cfg["BN"]  # clamped (short) tiles: leave the hints to the compiler
    tiles = nq * cdiv(m, bm)
    n_split, chunk = split_plan(tiles, sk, bn, sms, cfg.get("SPLIT_MIN_BLOCKS", MIN_SPLIT_BLOCKS))
    # Flat grid (splits x row blocks x row sets on axis x, unflattened in-kernel): B*H may exceed grid y's
    # 65535.
    return {"BM": bm, "BN": bn, "D": d, "NQ": nq, "M": m, "GQ": gq, "n_split": n_split, "CT": chunk // bn,
            "grid": check_grid((tiles * n_split, 1, 1)), "combine_grid": check_grid((tiles, 1, 1)),
            "OCC": cfg.get("OCC", 0) if full else 0, "WARPS": cfg.get("WARPS", 0) if full else 0}


class Launch(NamedTuple):
    """One kernel launch a kernel module's `prepare` asks for: the adapter runs it with ct.launch on
    torch's current stream; the compile test turns `args` into a KernelSignature instead."""

    kernel: Any
    grid: tuple[int, ...]
    args: tuple
