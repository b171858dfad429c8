"""silu_and_mul (SwiGLU): out (M, H) = silu(x[:, :H]) * x[:, H:] for x (M, 2H), fp32 math.

One (BLOCK_M, BLOCK_H) tile of out per program; gate and up are the same tile shifted by H columns in
x's row of 2H. A 1-D grid avoids CUDA's 65535 limit on the second grid axis.
"""

import triton
import triton.language as tl

from tilerosetta.kernels.triton import Launch, pdl


@triton.jit
def silu_and_mul_kernel(x_ptr, out_ptr, M, H, BLOCK_M: tl.constexpr, BLOCK_H: tl.constexpr, PDL: tl.constexpr = False):
    pdl.enter(PDL)
    pid = tl.program_id(0)
    tiles_h = tl.cdiv(H, BLOCK_H)
    rows = (pid // tiles_h).to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (pid % tiles_h) * BLOCK_H + tl.arange(0, BLOCK_H)
    mask = (rows[:, None] < M) & (cols[None, :] < H)
    gate_ptrs = x_ptr + rows[:, None] * (2 * H) + cols[None, :]
    gate = tl.load(gate_ptrs, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(gate_ptrs + H, mask=mask, other=0.0).to(tl.float32)
    out = gate * tl.sigmoid(gate) * up
    tl.store(out_ptr + rows[:, None] * H + cols[None, :], out.to(out_ptr.dtype.element_ty), mask=mask)


def prepare(x, out, cfg):
    m, h = out.shape
    grid = (triton.cdiv(m, cfg["BLOCK_M"]) * triton.cdiv(h, cfg["BLOCK_H"]),)
    return [Launch(silu_and_mul_kernel, grid, (x, out, m, h), {"BLOCK_M": cfg["BLOCK_M"], "BLOCK_H": cfg["BLOCK_H"]},
                   {"num_warps": cfg["num_warps"] if "num_warps" in cfg else 4})]
