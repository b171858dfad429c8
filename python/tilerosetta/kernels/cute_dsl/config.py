"""Tile configurations of the CuTe DSL kernels: the default table, the sweep space and its rules. Pure
Python (no CuTe DSL import), so `tilerosetta list` and the config tests run without the runtime.

Knobs:
  THREADS        threads per CTA of the element-wise kernels (vector_add, silu_and_mul, rope)
  ITEMS          silu_and_mul: output vectors per thread, all loads issued before the math
  WARPS_PER_ROW  warps sharing one row of a row op (1: shuffles only; >1: plus one shared-memory step)
  ROWS           rows in flight per CTA of a row op (CTA = ROWS * WARPS_PER_ROW warps)
  TILE           square tile edge of transpose (staged through shared memory)
  OUT_ROWS       transpose: 1 runs x's row tiles fastest (CTAs write along out's rows), 0 its column tiles
  BM, BN         C tile of a CTA in the Hopper GEMM (matmul, bmm: gemm_wgmma.py); BM / 64 warpgroups
  STAGES         depth of that GEMM's TMA -> shared-memory ring (each stage (BM + BN) x 64 halves)
  WS             1: that GEMM warp-specialised (a producer warpgroup issues the TMA loads, the BM / 64 consumer
                 warpgroups only run wgmmas); 0 (the default): warp 0 is also the producer
  (the SIMT GEMM that fp32 and unaligned shapes take has a fixed 64 x 64 x 16 tile: no knobs)
  attention (attention_wgmma.py):
  WGMMA          1: the TMA + wgmma kernel for calls it can take; 0: the SIMT kernel (attention.py) always
  BM             query rows per CTA (BM / 64 warpgroups); BN keys per step (the N of Q Kᵀ, the K of P V)
  STAGES         depth of the K/V ring (each stage 2 x BN x D halves)
  PIPE           1: the softmax of key tile j + 1 overlaps the P V wgmmas of tile j (a second score
                 accumulator, ~230-248 registers); 0: the simple loop, each step waited for in full (126-166)
  PACK           1: a CTA's query rows are those of the H / Hkv query heads sharing one K/V head (decode: their
                 single rows in one tile, each K/V tile loaded once for all of them); 0: one query head per CTA
  WS             1: warp-specialised (attention_wgmma.py, the unsplit kernel): a producer warpgroup after the
                 BM / 64 consumer ones issues every Q / K / V load and waits on the ring's empty barriers, the
                 consumers only wait on full barriers, compute and release stages; at BM=128 setmaxnreg gives
                 the producer 24 registers a thread and the consumers 240 (ptxas drops it where the whole kernel
                 fits the 168 of its 384 threads), and its pipelined loop converts P(j) before issuing Q K(j+1)ᵀ
                 (one score fragment live instead of two: no spills at 240). 0: warp 0 also
                 produces. A call that takes the split-KV form (below) runs the split kernel without it: WS is
                 ignored there. The default at BM=128 (B4 H32 S4096 on the H200: D64 1.909 -> 1.486 ms,
                 causal 1.030 -> 0.859, D128 2.223 -> 1.943, causal 1.270 -> 1.147; GQA B1 H32/8 S4096
                 337 -> 314 us); BM=64 keeps 0 (not measured)
  SPLIT_MIN_BLOCKS  split-KV (attention_plan.py): key tiles per chunk at least when a call's CTAs are too few
                 for the SMs; 0: never split. Host-side only: not part of the compiled specialization

Not a knob but part of a row op's compiled specialization: CHUNKS (`resident_chunks`), how many vectors of
its row each thread keeps in registers between the reduction and the write (one read of x from memory);
0 = rows too long for that: the kernel streams the row twice (the second read mostly from L2).
"""

from __future__ import annotations

from tilerosetta.specs import decode_tiles, family_ops

ROW_OPS = family_ops("rows")  # the spec's "rows" family: softmax, rms_norm, layer_norm, add_rms_norm
ELEMENTWISE_OPS = ("vector_add", "silu_and_mul", "rope")
GEMM_OPS = ("matmul", "bmm")
MAX_THREADS = 1024
GEMM_BK = 64  # K per pipeline stage (gemm_wgmma.BK)
SMEM_LIMIT = 227 * 1024  # H100/H200 shared memory per CTA (opt-in maximum)
SILU_ITEMS = (1, 2, 4)  # silu_and_mul's output vectors per thread (its sweep space and rule)
TRANSPOSE_TILES = (32, 64, 128)  # transpose's TILE edges: the sweep space and the rule read this one list


def gemm_smem_bytes(cfg: dict) -> int:
    """Shared memory of the wgmma GEMM's ring (16-bit operands) plus its two mbarriers per stage."""
    return cfg["STAGES"] * ((cfg["BM"] + cfg["BN"]) * GEMM_BK * 2 + 16)


ATTENTION_MAX_D = 128  # the largest head dim: attention configs must fit shared memory at it


def attention_smem_bytes(cfg: dict, d: int = ATTENTION_MAX_D) -> int:
    """Shared memory of the wgmma attention: the Q tile, the K and V ring (16-bit), the mbarriers."""
    return (cfg["BM"] * d + cfg["STAGES"] * 2 * cfg["BN"] * d) * 2 + 8 * (1 + 2 * cfg["STAGES"])


def default_config(op: str, dtype: str, dims: dict[str, int]) -> dict:
    if op == "silu_and_mul":
        return {"THREADS": 256, "ITEMS": 1}
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
    if op == "transpose":  # OUT_ROWS 1: the H200 sweep (bench/results/transpose/) 70.2 / 275 us vs 73.9 / 292
        return {"TILE": 64, "OUT_ROWS": 0 if dtype == "fp32" else 1}
    if op == "matmul" and decode_tiles(dims):
        # decode: the weight is streamed once; the narrowest tile the wgmma GEMM takes (64 x 64: N 4096 -> 64
        # CTAs, 14336 -> 224; 128 x 256 gave 16 and 56) and a deep ring (6 x 16 KB) for bytes in flight
        return {"BM": 64, "BN": 64, "STAGES": 6}
    if op in GEMM_OPS:
        # 128 x 256: two warpgroups of 64 x 256 wgmmas (128 fp32 accumulators per thread), 4 stages = 192 KB
        return {"BM": 128, "BN": 256, "STAGES": 4}
    if op == "attention":
        # one warpgroup (64 rows) when a CTA's query rows fit it (with PACK, the S rows of each of the
        # H / Hkv heads of a K/V head: decode, short prefills), a second one would only add padding rows;
        # else two. 128 x 128 score tiles (64 fp32 per thread) in both cases
        # pipelined loop, 3 stages: tile j + STAGES is loaded once tile j is done, a whole step ahead of use
        rows = dims.get("S", 1) * (dims.get("H", 1) // dims.get("Hkv", dims.get("H", 1)))
        # split-KV chunks of at least two key tiles: decode at B=1 (Llama 3.1 8B, Sk=4096) becomes 8 x 16 CTAs,
        # one wave of two pipelined tiles each (one tile per chunk would take two waves of one tile)
        # warp-specialised at BM 128 (H200, 2026-12-01, B4 H32 S4096: 1.13-1.28x the WS=0 kernel, GQA prefill
        # 1.07x); BM 64 (decode without a split, short prefills) keeps warp 0 as producer: not measured with WS
        big = rows > 64
        return {"WGMMA": 1, "BM": 128 if big else 64, "BN": 128, "STAGES": 3, "PIPE": 1,
                "PACK": 1, "SPLIT_MIN_BLOCKS": 2, **({"WS": 1} if big else {})}
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
    if op == "silu_and_mul":
        return [{"THREADS": t, "ITEMS": i} for i in SILU_ITEMS for t in (128, 256, 512)]
    if op in ELEMENTWISE_OPS:
        return [{"THREADS": t} for t in (128, 256, 512)]
    if op in ROW_OPS:
        return [{"WARPS_PER_ROW": w, "ROWS": r} for w in (1, 2, 4, 8, 16) for r in (1, 2, 4, 8)
                if w * r <= 16]
    if op == "transpose":
        return [{"TILE": t, "OUT_ROWS": o} for t in TRANSPOSE_TILES for o in (0, 1)]
    if op in GEMM_OPS:
        # each tile plain ({BM, BN, STAGES}, as the default) and warp-specialised (WS=1)
        return [c for bm in (64, 128) for bn in (64, 128, 256) for st in (2, 3, 4, 5, 6)
                for c in ({"BM": bm, "BN": bn, "STAGES": st}, {"BM": bm, "BN": bn, "STAGES": st, "WS": 1})
                if gemm_smem_bytes(c) <= SMEM_LIMIT]
    if op == "attention":
        # the split's chunk size only where splits happen (few CTAs: decode, BM=64 packed); it is host-side,
        # so these configs share their compiles. WS=1 (warp-specialised) only with the default chunk size: a
        # call that splits ignores WS, so other chunk sizes would only time the WS=0 split kernel again
        return [{"WGMMA": 1, "BM": bm, "BN": bn, "STAGES": st, "PIPE": pipe, "PACK": pack, "SPLIT_MIN_BLOCKS": sp,
                 **({"WS": 1} if ws else {})}
                for bm in (64, 128) for bn in (64, 128) for st in (2, 3) for pipe in (1, 0) for pack in (1, 0)
                for ws in (0, 1) for sp in ((1, 2, 4) if bm == 64 and pack and not ws else (2,))] + [{"WGMMA": 0}]
    return []


def check_config(op: str, config: dict) -> None:
    """Raises ValueError naming the knob this backend cannot run."""
    known = {k for c in config_space(op, "") for k in c}
    unknown = sorted(set(config) - known)
    if unknown:
        raise ValueError(f"cute_dsl.{op}: unknown config key(s) {unknown}; expected some of {sorted(known)}")
    for key in ("THREADS", "WARPS_PER_ROW", "ROWS", "TILE", "BM", "BN"):
        v = config.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1 or v & (v - 1)):
            raise ValueError(f"cute_dsl.{op}: {key}={v!r} must be a power of two >= 1")
    if config.get("THREADS", 32) % 32 or config.get("THREADS", 32) > MAX_THREADS:
        raise ValueError(f"cute_dsl.{op}: THREADS={config['THREADS']} must be a multiple of 32, at most {MAX_THREADS}")
    if 32 * config.get("WARPS_PER_ROW", 1) * config.get("ROWS", 1) > MAX_THREADS:
        raise ValueError(f"cute_dsl.{op}: WARPS_PER_ROW*ROWS={config['WARPS_PER_ROW'] * config['ROWS']} warps "
                         f"exceed {MAX_THREADS // 32} per CTA")
    if op in GEMM_OPS + ("attention",) and (config.get("WS", 0) not in (0, 1) or isinstance(config.get("WS"), bool)):
        raise ValueError(f"cute_dsl.{op}: WS={config['WS']!r} must be 1 (a producer warpgroup) or 0 (warp 0 produces)")
    if op in GEMM_OPS and set(config) >= {"BM", "BN", "STAGES"}:
        if config["BM"] not in (64, 128) or config["BN"] not in (64, 128, 256):
            raise ValueError(f"cute_dsl.{op}: BM={config['BM']} must be 64 or 128 (warpgroups of 64 rows), "
                             f"BN={config['BN']} 64, 128 or 256 (a wgmma's N)")
        if config["STAGES"] < 2 or gemm_smem_bytes(config) > SMEM_LIMIT:
            raise ValueError(f"cute_dsl.{op}: STAGES={config['STAGES']} must be >= 2 and fit "
                             f"{SMEM_LIMIT} B of shared memory (needs {gemm_smem_bytes(config)} B)")
    if op == "attention":
        if config.get("WGMMA", 1) not in (0, 1) or isinstance(config.get("WGMMA"), bool):
            raise ValueError(f"cute_dsl.{op}: WGMMA={config['WGMMA']!r} must be 1 (the wgmma kernel) or 0 (SIMT)")
        for knob, one, zero in (("PIPE", "pipelined loop", "simple loop"), ("PACK", "query heads of a K/V head "
                                "in one tile", "one query head per CTA")):
            if config.get(knob, 1) not in (0, 1) or isinstance(config.get(knob), bool):
                raise ValueError(f"cute_dsl.{op}: {knob}={config[knob]!r} must be 1 ({one}) or 0 ({zero})")
        sp = config.get("SPLIT_MIN_BLOCKS", 0)
        if not isinstance(sp, int) or isinstance(sp, bool) or sp < 0:
            raise ValueError(f"cute_dsl.{op}: SPLIT_MIN_BLOCKS={sp!r} must be an int >= 0 (key tiles per split-KV "
                             f"chunk at least; 0: never split)")
        if config.get("BM", 64) not in (64, 128) or config.get("BN", 64) not in (64, 128):
            raise ValueError(f"cute_dsl.{op}: BM={config.get('BM')} (warpgroups of 64 query rows) and "
                             f"BN={config.get('BN')} (keys per step) must each be 64 or 128")
        if set(config) >= {"BM", "BN", "STAGES"} and (
                config["STAGES"] < 2 or attention_smem_bytes(config) > SMEM_LIMIT):
            raise ValueError(f"cute_dsl.{op}: STAGES={config['STAGES']} must be >= 2 and fit {SMEM_LIMIT} B of "
                             f"shared memory at D={ATTENTION_MAX_D} (needs {attention_smem_bytes(config)} B)")
    if config.get("OUT_ROWS", 0) not in (0, 1) or isinstance(config.get("OUT_ROWS"), bool):
        raise ValueError(f"cute_dsl.{op}: OUT_ROWS={config['OUT_ROWS']!r} must be 1 (x's row tiles fastest) or 0")
    if config.get("ITEMS", 1) not in SILU_ITEMS or isinstance(config.get("ITEMS"), bool):
        raise ValueError(f"cute_dsl.{op}: ITEMS={config['ITEMS']!r} must be one of {SILU_ITEMS}")
    if config.get("TILE") is not None and config["TILE"] not in TRANSPOSE_TILES:
        raise ValueError(f"cute_dsl.{op}: TILE={config['TILE']} must be one of {TRANSPOSE_TILES}")
