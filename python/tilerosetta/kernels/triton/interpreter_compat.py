"""Two small fixes to Triton 3.6's CPU interpreter (TRITON_INTERPRET=1), applied only when interpreting.

The kernels are the same source on the GPU and in the interpreter; these patches make the interpreter
compute what the compiled kernel computes, instead of changing the kernels:

1. Scalars are 1-element numpy arrays in the interpreter and `tensor.__index__` calls `int(array)`,
   which numpy >= 2.4 refuses ("only 0-dimensional arrays can be converted to Python scalars"), so any
   `range(0, K, BLOCK_K)` over a runtime K fails (triton-lang/triton#9171). We take the single element.
2. The interpreter stores bfloat16 as raw uint16 bits and `tl.dot` multiplies those bits as integers.
   Compiled Triton multiplies the bf16 values exactly and accumulates in fp32; we upcast bf16 and fp16
   operands to fp32 (exact) and accumulate in fp32, which is the same arithmetic (fp32 inputs stay fp32
   where the GPU would use tf32: more precise, within the spec's tf32 tolerance either way). This is also
   far faster than the original's generic numpy loop (attention and matmul dominate CI time).
"""

from __future__ import annotations

import numpy as np

_APPLIED = False


def apply() -> None:
    global _APPLIED
    if _APPLIED:
        return
    import triton.language as tl
    from triton.runtime import interpreter as interp

    original_patch_tensor = interp._patch_lang_tensor

    def patch_tensor(tensor, scope):
        original_patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))

    interp._patch_lang_tensor = patch_tensor

    original_dot = interp.InterpreterBuilder.create_dot
    floats = (tl.float16, tl.bfloat16, tl.float32)

    def as_fp32(handle):
        if handle.dtype.scalar == tl.bfloat16:
            return self_cast(handle)
        return handle.data.astype(np.float32, copy=False)

    def self_cast(handle):
        return interp.interpreter_builder.cast_impl(handle, tl.float32).data

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if a.dtype.scalar in floats and b.dtype.scalar in floats and d.dtype.scalar == tl.float32:
            # fp32 operands (exact for fp16/bf16 values), fp32 sums. einsum, not np.matmul: numpy's
            # matmul with `dtype=` (the original) is its slow generic loop, and without it the
            # multithreaded BLAS stalls for tens of ms on tiny tiles when the CPU is shared.
            return interp.TensorHandle(np.einsum("ik,kj->ij", as_fp32(a), as_fp32(b)) + d.data, tl.float32)
        return original_dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    interp.InterpreterBuilder.create_dot = create_dot
    _APPLIED = True
