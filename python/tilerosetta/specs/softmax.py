"""softmax: numerically stable row softmax over the last dim of (M, N)."""

import torch

from tilerosetta.specs.base import Case, OpSpec, Scaling


class Softmax(OpSpec):
    name = "softmax"
    order = 30
    family = "rows"
    summary = "out = softmax(x, dim=-1) over rows of (M, N)"
    inputs = {"x": ("M", "N")}
    outputs = {"out": ("M", "N")}
    cases = tuple(Case({"M": m, "N": n}) for m, n in
                  ((1, 1), (1, 1000), (3, 7), (17, 129), (64, 1024), (257, 4099), (5, 16384)))
    bench_cases = (Case({"M": 4096, "N": 16384}), Case({"M": 32768, "N": 4096}))
    # bench --scaling: row length at fixed rows, then rows (1 = one token) at a fixed row length
    scaling = (Scaling(("N",), (128, 512, 2048, 8192, 32768, 131072, 262144), {"M": 2048}),
               Scaling(("M",), (1, 8, 64, 512, 4096, 32768, 65536), {"N": 4096}))
    # softmax's speed depends on the logits' range (torch's is ~3x slower on x30 logits on an H200):
    # the headline is activation-like logits; the large-range case is timed beside it, labelled.
    bench_distributions = {"randn": "standard normal logits (headline)",
                           "randn_x30": "standard normal x30: large-range logits, the conformance stress input"}

    def make_inputs(self, case, dtype, device, generator):
        # Scale so exp() would overflow without max-subtraction: checks numerical stability.
        x = torch.randn(self.shapes(case)["x"], device=device, generator=generator) * 30.0
        return {"x": x.to(dtype)}

    def make_bench_inputs(self, case, dtype, device, generator):
        scale = 30.0 if self.bench_distribution(case) == "randn_x30" else 1.0
        x = torch.randn(self.shapes(case)["x"], device=device, generator=generator) * scale
        return {"x": x.to(dtype)}

    def reference(self, params, x):
        return {"out": torch.softmax(x, dim=-1)}

    def baseline(self, x):
        return torch.softmax(x, dim=-1)

    def flops(self, case):
        return 5 * case.dims["M"] * case.dims["N"]  # max, sub, exp, sum, div
