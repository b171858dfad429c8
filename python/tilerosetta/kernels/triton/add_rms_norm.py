"""add_rms_norm: sum = x + residual; out = sum / sqrt(mean(sum^2) + eps) * weight over rows of (M, N).

The rms_norm kernels (rms_norm.py) with the residual add in front, fp32 math, one row per program:
* add_rms_norm_block_kernel: the whole row in one next_pow2(N) block: x and residual read once.
* add_rms_norm_loop_kernel: long rows; pass 1 adds, stores `sum` and sums squares over BLOCK_N chunks,
  pass 2 re-adds x + residual (the fp32 sum, not the rounded one just stored) and writes `out`.
"""

import triton
import triton.language as tl

from tilerosetta.kernels.triton import row_launch, pdl


@triton.jit
def add_rms_norm_block_kernel(x_ptr, r_ptr, w_ptr, sum_ptr, out_ptr, N, eps, BLOCK_N: tl.constexpr,
                              PDL: tl.constexpr = False):
    pdl.enter(PDL)
    row = tl.program_id(0).to(tl.int64) * N
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    s = tl.load(x_ptr + row + cols, mask=mask, other=0.0).to(tl.float32) + \
        tl.load(r_ptr + row + cols, mask=mask, other=0.0).to(tl.float32)  # padding adds 0 to the sum
    tl.store(sum_ptr + row + cols, s.to(sum_ptr.dtype.element_ty), mask=mask)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(s * s, axis=0) / N + eps)
    tl.store(out_ptr + row + cols, (s * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def add_rms_norm_loop_kernel(x_ptr, r_ptr, w_ptr, sum_ptr, out_ptr, N, eps, BLOCK_N: tl.constexpr,
                             PDL: tl.constexpr = False):
    pdl.enter(PDL)
    row = tl.program_id(0).to(tl.int64) * N
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], tl.float32)
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        s = tl.load(x_ptr + row + start + cols, mask=mask, other=0.0).to(tl.float32) + \
            tl.load(r_ptr + row + start + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(sum_ptr + row + start + cols, s.to(sum_ptr.dtype.element_ty), mask=mask)
        acc += s * s
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        s = tl.load(x_ptr + row + start + cols, mask=mask, other=0.0).to(tl.float32) + \
            tl.load(r_ptr + row + start + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + row + start + cols, (s * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


def prepare(x, residual, weight, sum, out, cfg, eps):  # noqa: A002 (the spec's argument names)
    return row_launch(add_rms_norm_block_kernel, add_rms_norm_loop_kernel, (x, residual, weight, sum, out), (eps,),
                      cfg)
