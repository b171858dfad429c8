"""rms_norm: out = x / sqrt(mean(x^2) + eps) * w over rows of (M, N), fp32 math, one row per program.

* rms_norm_block_kernel: the whole row in one next_pow2(N) block.
* rms_norm_loop_kernel: long rows; pass 1 sums x^2 over BLOCK_N chunks, pass 2 re-reads and writes.
"""

import triton
import triton.language as tl

from tilerosetta.kernels.triton import row_launch, pdl


@triton.jit
def rms_norm_block_kernel(x_ptr, w_ptr, out_ptr, N, eps, BLOCK_N: tl.constexpr, PDL: tl.constexpr = False):
    pdl.enter(PDL)
    row = tl.program_id(0).to(tl.int64) * N
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row + cols, mask=mask, other=0.0).to(tl.float32)  # padding adds 0 to the sum
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    tl.store(out_ptr + row + cols, (x * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def rms_norm_loop_kernel(x_ptr, w_ptr, out_ptr, N, eps, BLOCK_N: tl.constexpr, PDL: tl.constexpr = False):
    pdl.enter(PDL)
    row = tl.program_id(0).to(tl.int64) * N
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], tl.float32)  # lane-wise partial sums, reduced once after the loop
    for start in range(0, N, BLOCK_N):
        x = tl.load(x_ptr + row + start + cols, mask=start + cols < N, other=0.0).to(tl.float32)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        x = tl.load(x_ptr + row + start + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + row + start + cols, (x * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


def prepare(x, w, out, cfg, eps):
    return row_launch(rms_norm_block_kernel, rms_norm_loop_kernel, (x, w, out), (eps,), cfg)
