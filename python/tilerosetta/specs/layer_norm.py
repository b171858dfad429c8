"""layer_norm: y = (x - mean) / sqrt(var + eps) * w + b over rows of (M, N) (biased variance)."""

import torch
import torch.nn.functional as F

from tilerosetta.specs.base import Case, OpSpec, Scaling, positive


class LayerNorm(OpSpec):
    name = "layer_norm"
    order = 50
    family = "rows"
    summary = "out = (x - mean) / sqrt(var + eps) * w + b"
    inputs = {"x": ("M", "N"), "w": ("N",), "b": ("N",)}
    outputs = {"out": ("M", "N")}
    params = {"eps": positive(1e-5, "added to the variance before the rsqrt")}
    cases = tuple(Case({"M": m, "N": n}) for m, n in
                  ((1, 2), (1, 4096), (3, 7), (17, 129), (64, 1024), (257, 4099), (2, 16384)))
    bench_cases = (Case({"M": 4096, "N": 8192}), Case({"M": 16384, "N": 4096}))
    # bench --scaling: row length at fixed rows, then rows (1 = one token) at a fixed row length
    scaling = (Scaling(("N",), (128, 512, 2048, 8192, 32768, 131072, 262144), {"M": 2048}),
               Scaling(("M",), (1, 8, 64, 512, 4096, 32768, 65536), {"N": 4096}))

    def make_inputs(self, case, dtype, device, generator):
        s = self.shapes(case)
        # A large common offset checks that variance is computed around the mean, not as E[x²]-E[x]².
        x = 3.0 + torch.randn(s["x"], device=device, generator=generator)
        w = 1.0 + 0.5 * torch.randn(s["w"], device=device, generator=generator)
        b = torch.randn(s["b"], device=device, generator=generator)
        return {"x": x.to(dtype), "w": w.to(dtype), "b": b.to(dtype)}

    def make_bench_inputs(self, case, dtype, device, generator):
        self.bench_distribution(case)
        s = self.shapes(case)
        x = torch.randn(s["x"], device=device, generator=generator)  # activations: no +3 offset here
        w = 1.0 + 0.5 * torch.randn(s["w"], device=device, generator=generator)
        b = torch.randn(s["b"], device=device, generator=generator)
        return {"x": x.to(dtype), "w": w.to(dtype), "b": b.to(dtype)}

    def reference(self, params, x, w, b):
        mean = x.mean(dim=-1, keepdim=True)
        var = (x - mean).pow(2).mean(dim=-1, keepdim=True)
        return {"out": (x - mean) * torch.rsqrt(var + params["eps"]) * w + b}

    def baseline(self, x, w, b, eps):
        return F.layer_norm(x, (x.shape[-1],), w, b, eps)

    def flops(self, case):
        return 8 * case.dims["M"] * case.dims["N"]
