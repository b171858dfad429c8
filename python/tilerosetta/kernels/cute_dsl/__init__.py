"""CuTe DSL kernels (`import cutlass.cute as cute`, nvidia-cutlass-dsl 4.8.1), one module per op.

Each op module defines its @cute.kernel / @cute.jit functions and `build(dtype, variant, cfg)`, which
returns (jit function, fake arguments) for one compiled specialization. The extents are symbolic
(`cute.sym_int`), so one compile serves every shape of that dtype/variant/config: the adapter
(backends/cute_dsl.py) compiles on the first call of a signature and caches the result, the CPU test
(shared_tests/test_cute_dsl_compile.py) compiles the same builds for sm_90a without a GPU.

`variant` is what a call's tensors decide beyond the dtype: "vec" (every row length a multiple of the
128-bit vector and every base pointer 16-byte aligned: 128-bit loads) or "scalar" (anything else); for
the GEMMs (matmul, bmm) "wgmma" (fp16/bf16 that TMA can load: the Hopper fast path) or "simt" (the rest);
for attention "wgmma_d64" / "wgmma_d128" (attention_wgmma.py: TMA + wgmma for both products, the head dim
compiled in; q, k, v, out 16-byte aligned) or "d64" / "d128" (attention.py, the SIMT kernel: the rest, or
when the config knob WGMMA=0 or TILEROSETTA_CUTE_DSL_ATTENTION=simt turns the wgmma kernel off).
Import the op modules lazily (KERNEL_MODULES): they need the CuTe DSL runtime.
"""

import os

from tilerosetta.specs import OP_NAMES

# op -> module under tilerosetta.kernels.cute_dsl: the module named as the op, found by name (a spec op
# without one is not implemented by this backend)
KERNEL_MODULES = {op: op for op in OP_NAMES if os.path.isfile(os.path.join(os.path.dirname(__file__), f"{op}.py"))}
# ops whose kernel has only the element-wise ("scalar") variant
SCALAR_ONLY = frozenset()


# ops this backend does not have yet, with why (`tilerosetta list` shows the reason)
MISSING: dict[str, str] = {}
VECTOR_BYTES = 16


GEMM_OPS = frozenset({"matmul", "bmm"})
FORCE_GEMM_ENV = "TILEROSETTA_CUTE_DSL_GEMM"
FORCE_ATTENTION_ENV = "TILEROSETTA_CUTE_DSL_ATTENTION"  # "simt": the SIMT kernel; "simple": wgmma, PIPE=0 PACK=0 WS=0
TMA_ALIGN_BYTES = 16  # TMA: global base and every row stride a multiple of 16 bytes


def _half(dtype) -> bool:
    return str(dtype).removeprefix("torch.") in ("float16", "bfloat16")  # wgmma has no fp32 x fp32 form


def variants(op: str, dtype) -> tuple[str, ...]:
    """Every variant variant_of can pick for op at dtype (what the CPU compile test compiles)."""
    if op in GEMM_OPS:
        return ("wgmma", "simt") if _half(dtype) else ("simt",)
    if op == "attention":
        return ("wgmma_d64", "wgmma_d128", "d64", "d128")
    return ("scalar",) if op in SCALAR_ONLY else ("vec", "scalar")


def gemm_variant(tensors) -> str:
    """The GEMM kernel of one call (a, b, out; rank 2 or 3, row-major): "wgmma" (gemm_wgmma.py, TMA + wgmma)
    for fp16/bf16 whose row strides (K, N) are whole 16-byte multiples and whose bases are 16-byte
    aligned, as TMA needs; "simt" (gemm_simt.py, bounds-checked loads, fp32 FMA) for everything else.
    TILEROSETTA_CUTE_DSL_GEMM=simt forces the simt kernel for every call: on a GPU, to tell a fault of the
    wgmma path from one of the adapter or the shapes without a code change."""
    a = tensors[0]
    if not _half(a.dtype) or os.environ.get(FORCE_GEMM_ENV) == "simt":
        return "simt"
    for t in tensors:
        if t.data_ptr() % TMA_ALIGN_BYTES or (t.shape[-1] * t.element_size()) % TMA_ALIGN_BYTES:
            return "simt"
    return "wgmma"


def attention_variant(tensors, cfg: dict | None = None) -> str:
    """The attention kernel of one call (q, k, v, out): "wgmma_d<D>" (attention_wgmma.py) when TMA can load
    q, k and v (fp16/bf16 and 16-byte aligned bases; their D-element rows are 128 or 256 bytes) and the
    config does not turn it off (WGMMA=0), else "d<D>" (attention.py, SIMT). TILEROSETTA_CUTE_DSL_ATTENTION
    =simt forces the SIMT kernel for every call: on a GPU, to take the wgmma kernel out of a run without a
    code change."""
    simt = f"d{tensors[0].shape[-1]}"
    if os.environ.get(FORCE_ATTENTION_ENV) == "simt" or not (cfg or {}).get("WGMMA", 1):
        return simt
    if not _half(tensors[0].dtype) or any(t.data_ptr() % TMA_ALIGN_BYTES for t in tensors):
        return simt
    return "wgmma_" + simt


def variant_of(op: str, tensors, cfg: dict | None = None) -> str:
    """"vec" when every tensor's base is 16-byte aligned and every row (innermost extent; for rope each
    half of it, since the two halves are read apart) is a whole number of 128-bit vectors; else "scalar".
    cfg: the call's tile config, for the ops whose config can choose the kernel (attention's WGMMA)."""
    if op in GEMM_OPS:
        return gemm_variant(tensors)
    if op == "attention":
        return attention_variant(tensors, cfg)
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
