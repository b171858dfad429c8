"""vector_add: out = a + b over a 1-D tensor of any length; one BLOCK of elements per program."""

import triton
import triton.language as tl

from tilerosetta.kernels.triton import Launch


@triton.jit
def vector_add_kernel(a_ptr, b_ptr, out_ptr, N, BLOCK: tl.constexpr):
    # int64 offsets: N may exceed 2^31 / BLOCK programs' worth of int32 products on large tensors.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N  # the tail block of a length that is not a multiple of BLOCK
    a = tl.load(a_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    # Add in fp32 and round once: matches the reference and works in the interpreter's bf16 storage.
    tl.store(out_ptr + offs, (a.to(tl.float32) + b.to(tl.float32)).to(out_ptr.dtype.element_ty), mask=mask)


def prepare(a, b, out, cfg):
    n = a.numel()
    return [Launch(vector_add_kernel, (triton.cdiv(n, cfg["BLOCK"]),), (a, b, out, n), {"BLOCK": cfg["BLOCK"]},
                   {"num_warps": cfg.get("num_warps", 4)})]
