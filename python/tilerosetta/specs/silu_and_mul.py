"""silu_and_mul (SwiGLU): out (M, H) = silu(x[:, :H]) * x[:, H:] for x (M, 2H)."""

import torch
import torch.nn.functional as F

from tilerosetta.specs.base import Case, OpSpec, Scaling


class SiluAndMul(OpSpec):
    name = "silu_and_mul"
    order = 60
    summary = "out = silu(x[:, :H]) * x[:, H:]"
    inputs = {"x": ("M", "2*H")}
    outputs = {"out": ("M", "H")}
    cases = tuple(Case({"M": m, "H": h}) for m, h in
                  ((1, 1), (1, 4096), (3, 7), (17, 129), (64, 1024), (257, 4099)))
    bench_cases = (Case({"M": 4096, "H": 14336}), Case({"M": 16384, "H": 4096}))
    scaling = (Scaling(("M",), (1, 16, 256, 4096, 32768), {"H": 4096}),)  # bench --scaling: tokens

    def reference(self, params, x):
        h = x.shape[-1] // 2
        gate, up = x[:, :h], x[:, h:]
        return {"out": gate * torch.sigmoid(gate) * up}

    def baseline(self, x):
        h = x.shape[-1] // 2
        return F.silu(x[:, :h]) * x[:, h:]  # torch has no fused SwiGLU: two kernels, as users run it

    def flops(self, case):
        return 5 * case.dims["M"] * case.dims["H"]
