"""bmm in CuTe DSL: out (Bt, M, N) = a (Bt, M, K) @ b (Bt, K, N), row-major, fp32 accumulate.

Two kernels, picked per call by the variant (kernels/cute_dsl/__init__.py, variant_of):
  "wgmma": fp16/bf16 with K and N whole multiples of 8 and 16-byte aligned bases (what TMA needs):
           gemm_wgmma.py, TMA loads into a multi-stage shared-memory pipeline feeding warpgroup MMAs;
  "simt":  anything else (fp32, unaligned extents such as 7x13x5): gemm_simt.py, bounds-checked loads
           into shared memory and an fp32 FMA tile per thread.
The batch shares the grid's x dimension with the N tiles in both (y and z stop at 65535 CTAs, x does not).
"""

from __future__ import annotations


def build(dtype, variant, cfg):
    if variant == "wgmma":
        from tilerosetta.kernels.cute_dsl import gemm_wgmma

        return gemm_wgmma.build(dtype, cfg)
    if variant == "simt":
        from tilerosetta.kernels.cute_dsl import gemm_simt

        return gemm_simt.build(dtype)
    raise ValueError(f"cute_dsl.bmm/matmul: unknown variant {variant!r}; expected 'wgmma' or 'simt'")


def launch(compiled, a, b, out):
    compiled(a, b, out)
