"""cuTile: a bounds-checked ct.load puts each global load in its own branch region, consumed before the
next load issues. Same kernel twice, differing only in check_bounds (out = silu(a) * b, one (1, TILE)
row tile of a, b per block).

    python3 repro/cutile_py/bounds_checked_loads.py [--arch sm_90] [--out DIR]   # CPU: cubins + SASS facts
    python3 repro/cutile_py/bounds_checked_loads.py --time                      # GPU: one line per variant
"""
import argparse, io, math, sys
from pathlib import Path

import cuda.tile as ct

M, N, TILE = 16384, 4096, 1024  # every tile whole: the bounds checks can never fail


@ct.kernel
def silu_mul(a, b, out, TILE: ct.Constant[int], CHECK: ct.Constant[bool]):
    tiles = ct.cdiv(out.shape[1], TILE)
    m, j = ct.bid(0) // tiles, ct.bid(0) % tiles
    g = ct.astype(ct.load(a, (m, j), (1, TILE), check_bounds=CHECK), ct.float32)
    u = ct.astype(ct.load(b, (m, j), (1, TILE), check_bounds=CHECK), ct.float32)
    den = 1.0 + ct.exp2(g * -1.4426950408889634, flush_to_zero=True)
    y = ct.truediv(g, den, rounding_mode=ct.RoundingMode.APPROX) * u
    ct.store(out, (m, j), ct.astype(y, out.dtype), check_bounds=CHECK)


def cubin(check: bool, arch: str) -> bytes:
    from cuda.tile.compilation import ArrayConstraint, CallingConvention, KernelSignature, export_kernel
    arr = ArrayConstraint(ct.bfloat16, 2, index_dtype=ct.int32, stride_lower_bound_incl=0, alias_groups=(),
                          may_alias_internally=False, stride_constant=[None, 1], shape_divisible_by=[16, 16],
                          stride_divisible_by=[16, 1], base_addr_divisible_by=16)
    sig = KernelSignature([arr, arr, arr, TILE, check], CallingConvention.cutile_python_v1())
    buf = io.BytesIO()
    export_kernel(silu_mul, [sig], buf, gpu_code=arch, output_format="cubin")
    return buf.getvalue()


def time_on_gpu():
    import torch, triton.testing
    a, b, out = (torch.randn(M, N, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    grid = (M * math.ceil(N / TILE), 1, 1)
    for check in (True, False):
        us = 1e3 * triton.testing.do_bench(lambda: ct.launch(torch.cuda.current_stream(), grid, silu_mul,
                                                             (a, b, out, TILE, check)), warmup=25, rep=200)
        print(f"check_bounds={check} {us:.1f} us {3 * a.numel() * 2 / us / 1e6:.2f} TB/s")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--arch", default="sm_90"); ap.add_argument("--out", default="/tmp/repro_bounds")
    ap.add_argument("--time", action="store_true")
    args = ap.parse_args()
    if args.time:
        sys.exit(time_on_gpu())
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from sass_stats import activate_tileiras, line, stats
    activate_tileiras()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    for check in (True, False):
        path = Path(args.out) / f"silu_mul_check_{int(check)}.{args.arch}.cubin"
        path.write_bytes(cubin(check, args.arch))
        for name, row in stats(str(path)).items():
            print(f"check_bounds={check}", line(name, row))
