"""layer_norm: out = (x - mean) / sqrt(var + eps) * w + b over rows of (M, N), biased variance, fp32 math.

The variance is the mean of (x - mean)^2, not E[x^2] - E[x]^2, which cancels catastrophically when
the row has a large common offset. One row per program:
* layer_norm_block_kernel: the whole row in one next_pow2(N) block.
* layer_norm_loop_kernel: long rows; pass 1 mean, pass 2 variance around it, pass 3 normalise and write
  (passes 2 and 3 re-read the row, mostly from L2).
"""

import triton
import triton.language as tl

from tilerosetta.kernels.triton import row_launch


@triton.jit
def _block_row(x_ptr, w_ptr, b_ptr, N, BLOCK_N: tl.constexpr):
    """This program's row offset, columns, mask, and x, w, b in fp32 (padding 0)."""
    row = tl.program_id(0).to(tl.int64) * N
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row + cols, mask=mask, other=0.0).to(tl.float32)
    # w and b are loaded with x, before the reductions: loaded after them (Triton keeps the source order)
    # they were a dependent round trip at the end of every row with nothing else of the program in flight.
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    return row, cols, mask, x, w, b


@triton.jit
def layer_norm_block_kernel(x_ptr, w_ptr, b_ptr, out_ptr, N, eps, BLOCK_N: tl.constexpr):
    row, cols, mask, x, w, b = _block_row(x_ptr, w_ptr, b_ptr, N, BLOCK_N)
    mean = tl.sum(x, axis=0) / N
    xc = tl.where(mask, x - mean, 0.0)  # padding must not add mean^2 to the variance
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / N + eps)
    tl.store(out_ptr + row + cols, (xc * rstd * w + b).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def layer_norm_loop_kernel(x_ptr, w_ptr, b_ptr, out_ptr, N, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64) * N
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], tl.float32)
    for start in range(0, N, BLOCK_N):
        acc += tl.load(x_ptr + row + start + cols, mask=start + cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / N
    acc = tl.zeros([BLOCK_N], tl.float32)
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        x = tl.load(x_ptr + row + start + cols, mask=mask, other=0.0).to(tl.float32)
        xc = tl.where(mask, x - mean, 0.0)
        acc += xc * xc
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        x = tl.load(x_ptr + row + start + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + row + start + cols, ((x - mean) * rstd * w + b).to(out_ptr.dtype.element_ty),
                 mask=mask)


# Registers per thread for a one-block row at 16 elements per thread (row_warps' choice for N 2048-8192).
# With w and b loaded beside x, ptxas takes 47-49 registers there (2 programs/SM at 16 warps, 5 at 8);
# capped at 40, the pre-hoist count, it keeps 3 and 6 (sm_90 cubins, ptxas of Triton 3.6): no spill at
# 16 warps, one 4-byte STL/LDL pair per thread at 8 and 4 warps, between the two reductions.
_BLOCK_MAXNREG = {16: 40}


def prepare(x, w, b, out, cfg, eps):
    launches = row_launch(layer_norm_block_kernel, layer_norm_loop_kernel, (x, w, b, out), (eps,), cfg)
    out_launches = []
    for lx in launches:
        per_thread = lx.constexprs["BLOCK_N"] // (32 * lx.options["num_warps"])
        cap = _BLOCK_MAXNREG.get(per_thread) if lx.kernel is layer_norm_block_kernel else None
        # a config's own maxnreg (row_launch) wins over this table
        out_launches.append(lx._replace(options={**lx.options, "maxnreg": cap}) if cap and "maxnreg" not in lx.options
                            else lx)
    return out_launches
