"""Triton kernels of the ten TileRosetta ops, one module per op (matmul's kernel also serves bmm).

Each module has the @triton.jit kernel(s) and `launch(*inputs, *outputs, [params,] cfg)`; tile sizes,
warps and stages come from config.py. Import through backends/triton_lang.py, which decides whether
Triton compiles for the GPU or runs its CPU interpreter (TRITON_INTERPRET must be set before the
kernels are decorated, i.e. before these modules are imported).
"""
