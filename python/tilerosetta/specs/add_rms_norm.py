"""add_rms_norm: the residual add fused with RMSNorm, as the Llama decoder runs it twice per layer.

    sum = x + residual                                   (the new residual stream, written out)
    out = sum / sqrt(mean(sum^2, -1) + eps) * weight     (the normalised input of the next block)

over rows of (M, N). Kernels add in fp32, store `sum` in the tensors' dtype and normalise the fp32 sum
(no second rounding before the norm); the reference is float64 throughout.
"""

import torch
import torch.nn.functional as F

from tilerosetta.specs.base import Case, OpSpec, Scaling, positive


class AddRmsNorm(OpSpec):
    name = "add_rms_norm"
    order = 110
    family = "rows"
    summary = "sum = x + residual; out = sum / sqrt(mean(sum^2, -1) + eps) * weight"
    inputs = {"x": ("M", "N"), "residual": ("M", "N"), "weight": ("N",)}
    outputs = {"sum": ("M", "N"), "out": ("M", "N")}
    params = {"eps": positive(1e-6, "added to mean(sum²) before the rsqrt")}
    cases = tuple(Case({"M": m, "N": n}) for m, n in
                  ((1, 1), (1, 4096), (3, 7), (17, 129), (64, 1024), (257, 4099), (2, 16384)))
    # Llama 3 8B (hidden 4096) and 70B (hidden 8192) at 4096 / 16384 tokens
    bench_cases = (Case({"M": 4096, "N": 8192}), Case({"M": 16384, "N": 4096}))
    scaling = (Scaling(("M",), (1, 8, 64, 512, 4096, 32768, 65536), {"N": 4096}),)

    def make_inputs(self, case, dtype, device, generator):
        s = self.shapes(case)
        x = torch.randn(s["x"], device=device, generator=generator)
        residual = torch.randn(s["residual"], device=device, generator=generator)
        weight = 1.0 + 0.5 * torch.randn(s["weight"], device=device, generator=generator)
        return {"x": x.to(dtype), "residual": residual.to(dtype), "weight": weight.to(dtype)}

    bench_distributions = {"randn": "x, residual standard normal, weight = 1 + 0.5 randn (as conformance)"}

    def make_bench_inputs(self, case, dtype, device, generator):
        self.bench_distribution(case)
        return self.make_inputs(case, dtype, device, generator)

    def reference(self, params, x, residual, weight):
        s = x + residual
        rms = torch.rsqrt(s.pow(2).mean(dim=-1, keepdim=True) + params["eps"])
        return {"sum": s, "out": s * rms * weight}

    def baseline(self, x, residual, weight, eps):
        s = x + residual  # the HF/Llama decoder: the residual add, then RMSNorm (two kernels)
        return s, F.rms_norm(s, (s.shape[-1],), weight, eps)

    def flops(self, case):
        return 5 * case.dims["M"] * case.dims["N"]  # add, square, sum, scale, weight
