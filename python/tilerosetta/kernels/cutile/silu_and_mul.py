"""silu_and_mul (SwiGLU): out (M, H) = silu(x[:, :H]) * x[:, H:].

The host passes x viewed as (M, 2, H) (a free view of the contiguous (M, 2H) tensor), so the gate
and up halves are tiles (m, 0, j) and (m, 1, j) of one array, with padding at H for any H (no need
for H to be a multiple of the tile). Math in fp32, one rounding to the output dtype.

`silu_and_mul_exact_kernel` serves H a multiple of TILE (every benchmark shape): x stays (M, 2H), the gate
is column tile j and the up half column tile H/TILE + j, and no tile can cross an edge, so loads and stores
skip bounds checks. Why: with them each load sat in its own branch region and was consumed before the next
was issued (sm_90 SASS, bench/GAPS.md, tile_cpp silu_and_mul), the pattern that held rope at 50% of copy bandwidth.
"""

import cuda.tile as ct

from tilerosetta.kernels.cutile.config import Launch, plan_silu

# exp(-g) = exp2(-g*log2e) as a bare MUFU.EX2 (flush_to_zero skips the denormal-result handling).
NEG_LOG2E = -1.4426950408889634


@ct.kernel
def silu_and_mul_kernel(x3, out, TILE: ct.Constant[int]):
    tiles_h = ct.cdiv(out.shape[1], TILE)
    pid = ct.bid(0)
    m = pid // tiles_h
    j = pid % tiles_h
    gate = ct.load(x3, (m, 0, j), (1, 1, TILE), padding_mode=ct.PaddingMode.ZERO)
    up = ct.load(x3, (m, 1, j), (1, 1, TILE), padding_mode=ct.PaddingMode.ZERO)
    g = ct.astype(ct.reshape(gate, (1, TILE)), ct.float32)
    u = ct.astype(ct.reshape(up, (1, TILE)), ct.float32)
    # silu(g) = g * sigmoid(g) = g / (1 + exp(-g)); exp(-g) -> inf for very negative g gives g/inf = -0.
    # The approximate division (reciprocal + multiply, ~2 ulp) instead of the IEEE one, whose
    # slow-path check (FCHK + call) on every element costs more than the memory traffic here.
    sig_den = 1.0 + ct.exp2(g * NEG_LOG2E, flush_to_zero=True)
    y = ct.truediv(g, sig_den, rounding_mode=ct.RoundingMode.APPROX) * u
    ct.store(out, (m, j), ct.astype(y, out.dtype))


@ct.kernel
def silu_and_mul_exact_kernel(x, out, TILE: ct.Constant[int]):
    tiles_h = out.shape[1] // TILE
    pid = ct.bid(0)
    m = pid // tiles_h
    j = pid % tiles_h
    g = ct.astype(ct.load(x, (m, j), (1, TILE), check_bounds=False), ct.float32)
    u = ct.astype(ct.load(x, (m, tiles_h + j), (1, TILE), check_bounds=False), ct.float32)
    sig_den = 1.0 + ct.exp2(g * NEG_LOG2E, flush_to_zero=True)
    y = ct.truediv(g, sig_den, rounding_mode=ct.RoundingMode.APPROX) * u
    ct.store(out, (m, j), ct.astype(y, out.dtype), check_bounds=False)


def prepare(x, out, cfg):
    m, h = out.shape
    tile, grid = plan_silu(m, h, cfg)
    if h % tile == 0:  # every tile whole
        return [Launch(silu_and_mul_exact_kernel, grid, (x, out, tile))]
    return [Launch(silu_and_mul_kernel, grid, (x.view(m, 2, h), out, tile))]
