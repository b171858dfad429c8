"""Tile configurations of the CuTe DSL kernels: the default table, the sweep space and its rules. Pure
Python (no CuTe DSL import), so `tilerosetta list` and the config tests run without the runtime.

Knobs:
  THREADS        threads per CTA of the element-wise kernels (vector_add, silu_and_mul, rope)
  WARPS_PER_ROW  warps sharing one row of a row op (1: shuffles only; >1: plus one shared-memory step)
  ROWS           rows in flight per CTA of a row op (CTA = ROWS * WARPS_PER_ROW warps)
  TILE           square tile edge of transpose (staged through shared memory)

Not a knob but part of a row op's compiled specialization: CHUNKS (`resident_chunks`), how many vectors of
its row each thread keeps in registers between the reduction and the write (one read of x from memory);
0 = rows too long for that: the kernel streams the row twice (the second read mostly from L2).
"""

from __future__ import annotations

ROW_OPS = ("softmax", "rms_norm", "layer_norm")
ELEMENTWISE_OPS = ("vector_add", "silu_and_mul", "rope")
MAX_THREADS = 1024


def default_config(op: str, dtype: str, dims: dict[str, int]) -> dict:
    if op in ELEMENTWISE_OPS:
        return {"THREADS": 256}
    if op in ROW_OPS:
        n = dims.get("N", 1)
        # short rows: one warp per row, several rows per CTA; long rows: a whole CTA per row
        if n <= 1024:
            return {"WARPS_PER_ROW": 1, "ROWS": 4}
        if n <= 4096:
            return {"WARPS_PER_ROW": 4, "ROWS": 2}
        if n <= 16384:
            return {"WARPS_PER_ROW": 8, "ROWS": 1}
        return {"WARPS_PER_ROW": 16, "ROWS": 1}
    if op == "transpose":
        return {"TILE": 64}
    return {}


MAX_RESIDENT_BYTES = 256  # fp32 bytes of its row a thread may hold in registers (64 registers)
MAX_CHUNKS = 16  # vectors per thread: each is an unrolled, predicated load and store


def resident_chunks(op: str, dims: dict[str, int], cfg: dict, vec: int) -> int:
    """Vectors of `vec` elements per thread that hold a whole row of op in registers (a power of two, so
    few specializations), or 0 when that would take more than MAX_RESIDENT_BYTES: then the row streams."""
    if op not in ROW_OPS:
        return 0
    n_vectors = -(-dims["N"] // vec)
    per_thread = -(-n_vectors // (32 * cfg["WARPS_PER_ROW"]))
    chunks = 1 << (per_thread - 1).bit_length()
    return chunks if chunks * vec * 4 <= MAX_RESIDENT_BYTES and chunks <= MAX_CHUNKS else 0


def config_space(op: str, dtype: str) -> list[dict]:
    if op in ELEMENTWISE_OPS:
        return [{"THREADS": t} for t in (128, 256, 512)]
    if op in ROW_OPS:
        return [{"WARPS_PER_ROW": w, "ROWS": r} for w in (1, 2, 4, 8, 16) for r in (1, 2, 4, 8)
                if w * r <= 16]
    if op == "transpose":
        return [{"TILE": t} for t in (32, 64)]
    return []


def check_config(op: str, config: dict) -> None:
    """Raises ValueError naming the knob this backend cannot run."""
    known = {k for c in config_space(op, "") for k in c}
    unknown = sorted(set(config) - known)
    if unknown:
        raise ValueError(f"cute_dsl.{op}: unknown config key(s) {unknown}; expected some of {sorted(known)}")
    for key in ("THREADS", "WARPS_PER_ROW", "ROWS", "TILE"):
        v = config.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1 or v & (v - 1)):
            raise ValueError(f"cute_dsl.{op}: {key}={v!r} must be a power of two >= 1")
    if config.get("THREADS", 32) % 32 or config.get("THREADS", 32) > MAX_THREADS:
        raise ValueError(f"cute_dsl.{op}: THREADS={config['THREADS']} must be a multiple of 32, at most {MAX_THREADS}")
    if 32 * config.get("WARPS_PER_ROW", 1) * config.get("ROWS", 1) > MAX_THREADS:
        raise ValueError(f"cute_dsl.{op}: WARPS_PER_ROW*ROWS={config['WARPS_PER_ROW'] * config['ROWS']} warps "
                         f"exceed {MAX_THREADS // 32} per CTA")
    if config.get("TILE") is not None and config["TILE"] not in (32, 64):
        raise ValueError(f"cute_dsl.{op}: TILE={config['TILE']} must be 32 or 64")
