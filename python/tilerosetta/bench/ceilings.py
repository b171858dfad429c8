"""The machine's ceilings, measured at the start of every run with the same timing method as results.

* copy bandwidth: the faster of two large fp32 copies, bytes = read + written: dst.copy_(src) (torch
  turns it into cudaMemcpyAsync, which on the H200 streams only ~2.8 TB/s) and a streaming elementwise
  kernel (torch.neg(src, out=dst): one read, one write, ~4.3 TB/s). Memory-bound ops are reported as a %
  of this (an achievable ceiling, not the datasheet number); both figures are kept in the details.
* matrix rate: torch.mm of random 8192^3 matrices per dtype (bf16, fp16; fp32 with tf32 allowed, the
  precision the fp32 matmul/bmm specs accept). Compute-bound ops are reported as a % of the rate of
  their dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from tilerosetta.bench import timing

COPY_ELEMS = 1 << 28  # 1 GiB of fp32: far beyond any L2
MM_SIZE = 8192


@dataclass
class Ceilings:
    copy_gbps: float  # GB/s (1e9 bytes/s), read + written
    mm_tflops: dict[str, float]  # dtype name -> TFLOP/s of a large torch.mm
    details: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"copy_gbps": self.copy_gbps, "mm_tflops": dict(self.mm_tflops), "details": self.details}

    @classmethod
    def from_json(cls, d: dict | None) -> "Ceilings | None":
        if not d:
            return None
        return cls(float(d["copy_gbps"]), {k: float(v) for k, v in d["mm_tflops"].items()}, d.get("details", {}))

    def for_result(self, bound: str, dtype: str) -> tuple[str, float]:
        """(kind, value) of the ceiling a result is compared with: ('copy_gbps', GB/s) or ('mm_tflops:bf16',
        TFLOP/s). A dtype without its own matrix rate falls back to bf16's."""
        if bound == "compute":
            key = dtype if dtype in self.mm_tflops else "bf16"
            return f"mm_tflops:{key}", self.mm_tflops[key]
        return "copy_gbps", self.copy_gbps


def measure(quick: bool = False, warmup_ms: float = 25.0, rep_ms: float = 100.0) -> Ceilings:
    """Measure on the current CUDA device (GPU only)."""
    if quick:
        warmup_ms, rep_ms = min(warmup_ms, 10.0), min(rep_ms, 40.0)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234)
    src = torch.randn(COPY_ELEMS, device="cuda", generator=gen)
    dst = torch.empty_like(src)
    copy_bytes = 2 * src.numel() * src.element_size()
    details = {}
    copies = {"copy": lambda: dst.copy_(src), "copy_kernel": lambda: torch.neg(src, out=dst)}
    rates = {}
    for name, fn in copies.items():
        t = timing.time_gpu(fn, warmup_ms=warmup_ms, rep_ms=rep_ms, flush=False)
        details[name] = {"bytes": copy_bytes, **t.to_json()}
        rates[name] = copy_bytes / (t.median_ms * 1e-3) / 1e9
    copy_gbps = max(rates.values())
    details["copy_source"] = max(rates, key=rates.get)
    del src, dst

    mm = {}
    n = MM_SIZE
    dtypes = {"bf16": torch.bfloat16} if quick else {"bf16": torch.bfloat16, "fp16": torch.float16,
                                                       "fp32": torch.float32}
    prev_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        for name, dt in dtypes.items():
            torch.backends.cuda.matmul.allow_tf32 = dt == torch.float32  # fp32 ceiling = tf32 rate
            a = torch.randn(n, n, device="cuda", generator=gen).to(dt)
            b = torch.randn(n, n, device="cuda", generator=gen).to(dt)
            c = torch.empty(n, n, device="cuda", dtype=dt)
            torch.mm(a, b, out=c)
            t = timing.time_gpu(lambda: torch.mm(a, b, out=c), warmup_ms=warmup_ms, rep_ms=rep_ms, flush=False)
            mm[name] = 2 * n**3 / (t.median_ms * 1e-3) / 1e12
            details[f"mm_{name}"] = {"size": n, "tf32": dt == torch.float32, **t.to_json()}
            del a, b, c
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev_tf32
    torch.cuda.empty_cache()
    return Ceilings(copy_gbps, mm, details)
