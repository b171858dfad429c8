"""rope: out = q * cos + rotate_half(q) * sin (Llama half rotation), q (B, H, S, D), cos/sin (S, D).

q is viewed as R = B*H*S rows of D; row r has position s = r % S. Each program handles BLOCK_R rows and
both halves of D, so each q element is read once:
    out[:, :D/2] = q1 * cos[:, :D/2] - q2 * sin[:, :D/2]
    out[:, D/2:] = q2 * cos[:, D/2:] + q1 * sin[:, D/2:]
cos and sin are read per column as given (not assumed to repeat across the halves).

Safe in place (out is q, the spec's inplace_ok): a program owns rows [pid*BLOCK_R, (pid+1)*BLOCK_R) of q
and out, and no other program reads or writes them; within it each element q[r, c] is loaded once (as q1
or q2) and both stores of row r take both q1 and q2 of that row as operands, so neither store can be
issued before the loads of the elements it overwrites. Masked lanes (rows >= R, cols >= D/2) store nothing.

EVICT (L2 eviction hints, a sweep option): 0 = none; 1 = cos/sin `evict_last` (each table row is read by all
B*H rows of its position; inductor marks such broadcast loads so); 2 = that, plus q's loads and out's stores
`evict_first` (each is touched once).
WIDE (a sweep option): 1 = 64-bit row and element offsets (the default); 0 = 32-bit ones, taken only where every
offset fits (q under 2**31 elements): `rows % S` is then a 32-bit remainder instead of a call to the 64-bit
division routine before the first load.
"""

import triton
import triton.language as tl

from tilerosetta.kernels.triton import Launch, pdl


@triton.jit
def rope_kernel(q_ptr, cos_ptr, sin_ptr, out_ptr, R, S, HALF, BLOCK_R: tl.constexpr, BLOCK_HALF: tl.constexpr,
                EVICT: tl.constexpr = 0, WIDE: tl.constexpr = True, PDL: tl.constexpr = False):
    pdl.enter(PDL)
    pid = tl.program_id(0).to(tl.int64) if WIDE else tl.program_id(0)
    rows = pid * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, BLOCK_HALF)
    mask = (rows[:, None] < R) & (cols[None, :] < HALF)
    D = 2 * HALF
    q_lo = rows[:, None] * D + cols[None, :]
    t_lo = (rows % S)[:, None] * D + cols[None, :]  # position s of each row, into the (S, D) tables
    table: tl.constexpr = "evict_last" if EVICT >= 1 else ""
    stream: tl.constexpr = "evict_first" if EVICT >= 2 else ""
    q1 = tl.load(q_ptr + q_lo, mask=mask, other=0.0, eviction_policy=stream).to(tl.float32)
    q2 = tl.load(q_ptr + q_lo + HALF, mask=mask, other=0.0, eviction_policy=stream).to(tl.float32)
    cos1 = tl.load(cos_ptr + t_lo, mask=mask, other=0.0, eviction_policy=table).to(tl.float32)
    cos2 = tl.load(cos_ptr + t_lo + HALF, mask=mask, other=0.0, eviction_policy=table).to(tl.float32)
    sin1 = tl.load(sin_ptr + t_lo, mask=mask, other=0.0, eviction_policy=table).to(tl.float32)
    sin2 = tl.load(sin_ptr + t_lo + HALF, mask=mask, other=0.0, eviction_policy=table).to(tl.float32)
    dtype = out_ptr.dtype.element_ty
    tl.store(out_ptr + q_lo, (q1 * cos1 - q2 * sin1).to(dtype), mask=mask, eviction_policy=stream)
    tl.store(out_ptr + q_lo + HALF, (q2 * cos2 + q1 * sin2).to(dtype), mask=mask, eviction_policy=stream)


def prepare(q, cos, sin, out, cfg):
    s, d = cos.shape
    rows = q.numel() // d
    # At least 2 columns per half: a 1-wide block (D = 2) is legal but gains nothing over a masked 2.
    block_half = max(2, triton.next_power_of_2(d // 2))
    # 32-bit offsets only where the largest one (rows padded to whole blocks, times D) fits in an int32
    wide = bool(cfg.get("WIDE", 1)) or triton.cdiv(rows, cfg["BLOCK_R"]) * cfg["BLOCK_R"] * d >= 2**31
    return [Launch(rope_kernel, (triton.cdiv(rows, cfg["BLOCK_R"]),), (q, cos, sin, out, rows, s, d // 2),
                   {"BLOCK_R": cfg["BLOCK_R"], "BLOCK_HALF": block_half, "EVICT": cfg.get("EVICT", 0), "WIDE": wide},
                   {"num_warps": cfg.get("num_warps", 4)})]
