"""CuTe DSL kernels (`import cutlass.cute as cute`, nvidia-cutlass-dsl 4.8.1), one module per op.

Each op module defines its @cute.kernel / @cute.jit functions and `build(dtype, variant, cfg)`, which
returns (jit function, fake arguments) for one compiled specialization. The extents are symbolic
(`cute.sym_int`), so one compile serves every shape of that dtype/variant/config: the adapter
(backends/cute_dsl.py) compiles on the first call of a signature and caches the result, the CPU test
(shared_tests/test_cute_dsl_compile.py) compiles the same builds for sm_90a without a GPU.

`variant` is what a call's tensors decide beyond the dtype: "vec" (every row length a multiple of the
128-bit vector and every base pointer 16-byte aligned: 128-bit loads) or "scalar" (anything else).
Import the op modules lazily (KERNEL_MODULES): they need the CuTe DSL runtime.
"""

# op -> module under tilerosetta.kernels.cute_dsl
KERNEL_MODULES = {
    "vector_add": "vector_add",
    "softmax": "softmax",
    "rms_norm": "rms_norm",
    "layer_norm": "layer_norm",
    "silu_and_mul": "silu_and_mul",
    "rope": "rope",
    "transpose": "transpose",
}
# ops whose kernel has only the element-wise ("scalar") variant
SCALAR_ONLY = frozenset()


# ops this backend does not have yet, with why (`tilerosetta list` shows the reason)
MISSING = {
    "matmul": "not written yet: the Hopper GEMM (wgmma through CuTe's MMA atoms, TMA, a pipelined mainloop) "
              "comes after the memory-bound ops (issue 18)",
    "bmm": "not written yet: the batched form of the Hopper GEMM that matmul lacks too (issue 18)",
    "attention": "not written yet: the flash-attention forward needs the Hopper GEMM first (issue 18)",
}
VECTOR_BYTES = 16


def variant_of(op: str, tensors) -> str:
    """"vec" when every tensor's base is 16-byte aligned and every row (innermost extent; for rope each
    half of it, since the two halves are read apart) is a whole number of 128-bit vectors; else "scalar"."""
    if op in SCALAR_ONLY:
        return "scalar"
    vec = VECTOR_BYTES // tensors[0].element_size()
    for t in tensors:
        inner = t.shape[-1] if t.dim() else 1
        if op == "rope":
            inner //= 2
        if t.data_ptr() % VECTOR_BYTES or inner % vec:
            return "scalar"
    return "vec"


def kernel_module(op: str):
    """The module of one op (imports cutlass.cute)."""
    import importlib

    return importlib.import_module(f"tilerosetta.kernels.cute_dsl.{KERNEL_MODULES[op]}")
