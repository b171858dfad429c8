"""cuTile: splitting a loaded tile into its two halves (ct.extract) and joining them back (ct.cat) moves the
tile through shared memory, where loading the halves as two tiles does not. rope: y = x*c + [-x2 | x1]*s,
x (R, D) rows, c and s (S, D), BS rows per block, bf16, all tiles whole (check_bounds=False).
  MODE 0: x1, x2 loaded as two (BS, D/2) tiles (the split done by the loads)
  MODE 1: one (2BS, D/2) tile of x viewed (2R, D/2), reshaped (BS, 2, D/2), halves extracted on axis 1
  MODE 2: one (BS, D) tile, halves extracted on the last axis

    python3 repro/cutile_py/split_halves.py [--arch sm_90] [--out DIR]    # CPU: SASS facts per MODE
    python3 repro/cutile_py/split_halves.py --time                      # GPU: one line per MODE
"""
import cuda.tile as ct

from harness import main

BS, D, H = 32, 128, 64  # H = D // 2
R, S = 4 * 32 * 4096, 4096  # rows = B * heads * positions (the bench's rope case), positions


def ld(a, idx, shape):
    return ct.astype(ct.load(a, idx, shape, check_bounds=False), ct.float32)


@ct.kernel
def rope(x, c, s, out, S_BLOCKS: ct.Constant[int], MODE: ct.Constant[int]):
    i = ct.bid(0)
    j = i % S_BLOCKS
    if MODE == 0:  # x, c, s, out are (rows, D): every half is its own (BS, H) tile
        x1, x2 = ld(x, (i, 0), (BS, H)), ld(x, (i, 1), (BS, H))
        y1 = x1 * ld(c, (j, 0), (BS, H)) - x2 * ld(s, (j, 0), (BS, H))
        y2 = x2 * ld(c, (j, 1), (BS, H)) + x1 * ld(s, (j, 1), (BS, H))
        ct.store(out, (i, 0), ct.astype(y1, out.dtype), check_bounds=False)
        ct.store(out, (i, 1), ct.astype(y2, out.dtype), check_bounds=False)
        return
    if MODE == 1:  # x, c, s, out are (2 * rows, H): row 2r holds x1 of row r, row 2r + 1 its x2
        xt = ct.reshape(ld(x, (i, 0), (2 * BS, H)), (BS, 2, H))
        ct_, st = ct.reshape(ld(c, (j, 0), (2 * BS, H)), (BS, 2, H)), ct.reshape(ld(s, (j, 0), (2 * BS, H)), (BS, 2, H))
        x1, x2 = ct.extract(xt, (0, 0, 0), (BS, 1, H)), ct.extract(xt, (0, 1, 0), (BS, 1, H))
        y = xt * ct_ + ct.cat((-x2, x1), 1) * st
        ct.store(out, (i, 0), ct.astype(ct.reshape(y, (2 * BS, H)), out.dtype), check_bounds=False)
        return
    xt, ct_, st = ld(x, (i, 0), (BS, D)), ld(c, (j, 0), (BS, D)), ld(s, (j, 0), (BS, D))  # MODE 2
    x1, x2 = ct.extract(xt, (0, 0), (BS, H)), ct.extract(xt, (0, 1), (BS, H))
    ct.store(out, (i, 0), ct.astype(xt * ct_ + ct.cat((-x2, x1), 1) * st, out.dtype), check_bounds=False)


def gpu_case(label):
    import torch

    x, out = (torch.randn(R, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    c, s = (torch.randn(S, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    arrays = [x, c, s, out] if label != "MODE=1" else [t.view(-1, H) for t in (x, c, s, out)]
    xf, cf, sf = x.float().view(-1, S, D), c.float(), s.float()
    ref = lambda: (xf * cf + torch.cat((-xf[..., H:], xf[..., :H]), -1) * sf).view(R, D)  # noqa: E731
    return (R // BS, 1, 1), arrays, (2 * R + 2 * S) * D * 2, ref


if __name__ == "__main__":
    main(rope, 4, {f"MODE={m}": (S // BS, m) for m in (0, 1, 2)}, gpu_case)
