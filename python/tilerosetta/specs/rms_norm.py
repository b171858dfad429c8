"""rms_norm: y = x / sqrt(mean(x^2) + eps) * w over rows of (M, N)."""

import torch
import torch.nn.functional as F

from tilerosetta.specs.base import Case, OpSpec, Scaling, positive


class RmsNorm(OpSpec):
    name = "rms_norm"
    order = 40
    family = "rows"
    summary = "out = x / sqrt(mean(x^2, -1) + eps) * w"
    inputs = {"x": ("M", "N"), "w": ("N",)}
    outputs = {"out": ("M", "N")}
    params = {"eps": positive(1e-6, "added to mean(x²) before the rsqrt")}
    cases = tuple(Case({"M": m, "N": n}) for m, n in
                  ((1, 1), (1, 4096), (3, 7), (17, 129), (64, 1024), (257, 4099), (2, 16384)))
    bench_cases = (Case({"M": 4096, "N": 8192}), Case({"M": 16384, "N": 4096}))
    # bench --scaling: row length at fixed rows, then rows (1 = one token) at a fixed row length
    scaling = (Scaling(("N",), (128, 512, 2048, 8192, 32768, 131072, 262144), {"M": 2048}),
               Scaling(("M",), (1, 8, 64, 512, 4096, 32768, 65536), {"N": 4096}))

    def make_inputs(self, case, dtype, device, generator):
        s = self.shapes(case)
        x = torch.randn(s["x"], device=device, generator=generator)
        w = 1.0 + 0.5 * torch.randn(s["w"], device=device, generator=generator)
        return {"x": x.to(dtype), "w": w.to(dtype)}

    bench_distributions = {"randn": "x standard normal, w = 1 + 0.5 randn (as conformance: no stress input)"}

    def make_bench_inputs(self, case, dtype, device, generator):
        self.bench_distribution(case)
        return self.make_inputs(case, dtype, device, generator)

    def reference(self, params, x, w):
        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + params["eps"])
        return {"out": x * rms * w}

    def baseline(self, x, w, eps):
        return F.rms_norm(x, (x.shape[-1],), w, eps)

    def flops(self, case):
        return 4 * case.dims["M"] * case.dims["N"]
