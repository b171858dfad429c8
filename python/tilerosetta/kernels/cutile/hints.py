"""Compiler hints (occupancy, worker warps, CTAs per cluster) as per-call knobs.

cuTile takes these on @ct.kernel, not per launch; kernel.replace_hints() returns a copy with its own
JIT cache. Copies are cached here by (kernel, hints) so every call with the same hints reuses one
object (one compile), and the compile test sees a stable kernel id.

Why they matter (sm_90 cubins, cuobjdump --dump-resource-usage): with no hint, tileiras gives the
row kernels 255 registers x 256 threads = one CTA per SM, so a 4096-wide bf16 row (8 KB) is all an SM
has in flight; that is what made softmax 32768x4096 27x slower than Triton. occupancy=N caps the
registers so N CTAs fit (64 regs at N=4, no local-memory spills for the bench shapes).
"""

import cuda.tile as ct

_CACHE: dict = {}


def hinted(kernel: ct.kernel, **hints):
    """kernel with the given compiler hints; None values (auto) are left out."""
    hints = {k: v for k, v in hints.items() if v is not None}
    if not hints:
        return kernel
    key = (id(kernel), tuple(sorted(hints.items())))
    if key not in _CACHE:
        _CACHE[key] = (kernel, kernel.replace_hints(**hints))  # keep kernel alive so its id stays unique
    return _CACHE[key][1]
