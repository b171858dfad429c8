"""cuTile: a bounds-checked ct.load puts each global load in its own branch region, consumed before the
next load issues. The same kernel twice, differing only in check_bounds: out = silu(a) * b, one
(1, TILE) row tile of a and of b per block; every tile is whole, so no check can ever fail.

    python3 repro/cutile_py/bounds_checked_loads.py [--arch sm_90] [--out DIR]   # CPU: SASS facts
    python3 repro/cutile_py/bounds_checked_loads.py --time                      # GPU: one line per variant
"""
import cuda.tile as ct

from harness import main

M, N, TILE = 16384, 4096, 1024


@ct.kernel
def silu_mul(a, b, out, TILE: ct.Constant[int], CHECK: ct.Constant[bool]):
    tiles = ct.cdiv(out.shape[1], TILE)
    m, j = ct.bid(0) // tiles, ct.bid(0) % tiles
    g = ct.astype(ct.load(a, (m, j), (1, TILE), check_bounds=CHECK), ct.float32)
    u = ct.astype(ct.load(b, (m, j), (1, TILE), check_bounds=CHECK), ct.float32)
    den = 1.0 + ct.exp2(g * -1.4426950408889634, flush_to_zero=True)
    y = ct.truediv(g, den, rounding_mode=ct.RoundingMode.APPROX) * u
    ct.store(out, (m, j), ct.astype(y, out.dtype), check_bounds=CHECK)


def gpu_case(label):
    import torch

    a, b, out = (torch.randn(M, N, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    return (M * N // TILE, 1, 1), [a, b, out], 3 * M * N * 2, lambda: torch.nn.functional.silu(a.float()) * b.float()


if __name__ == "__main__":
    main(silu_mul, 3, {"check_bounds=True": (TILE, True), "check_bounds=False": (TILE, False)}, gpu_case)
