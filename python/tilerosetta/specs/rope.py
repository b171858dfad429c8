"""rope: rotary position embedding, Llama half-rotation convention.

out = q * cos + rotate_half(q) * sin, with rotate_half(q) = cat(-q[..., D/2:], q[..., :D/2]);
q (B, H, S, D), cos and sin (S, D) broadcast over B and H.
"""

import torch

from tilerosetta.specs.base import Case, OpSpec, Scaling


class Rope(OpSpec):
    name = "rope"
    order = 70
    summary = "out = q*cos + rotate_half(q)*sin (Llama half rotation)"
    inputs = {"q": ("B", "H", "S", "D"), "cos": ("S", "D"), "sin": ("S", "D")}
    outputs = {"out": ("B", "H", "S", "D")}
    # out may be q itself (the Llama decode step rotates q|k in the fused qkv projection's output and writes
    # k|v to the cache with one copy). Every backend's kernel was audited for it (a comment at each kernel
    # says why it is safe): each element of q is read once, by the program that writes the same element
    # of out, and both halves of a row feed both stored halves, so no store can precede the loads it
    # overwrites; programs own disjoint rows. Partial overlap stays refused.
    inplace_ok = {"out": ("q",)}
    dim_choices = {"D": (2, 8, 32, 64, 128)}
    cases = tuple(Case({"B": b, "H": h, "S": s, "D": d}) for b, h, s, d in
                  ((1, 1, 1, 2), (1, 1, 7, 64), (2, 3, 17, 128), (1, 4, 129, 64), (3, 2, 31, 32),
                   (1, 1, 1000, 128), (2, 4, 64, 128)))  # the last: whole position tiles (exact-tile kernels)
    bench_cases = (Case({"B": 4, "H": 32, "S": 4096, "D": 128}),)
    scaling = (Scaling(("S",), (128, 512, 2048, 8192, 32768), {"B": 1, "H": 32, "D": 128}),)  # bench --scaling

    def make_inputs(self, case, dtype, device, generator):
        s = self.shapes(case)
        S, D = case.dims["S"], case.dims["D"]
        q = torch.randn(s["q"], device=device, generator=generator)
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, D, 2, device=device, dtype=torch.float64) / D))
        angles = torch.arange(S, device=device, dtype=torch.float64)[:, None] * inv_freq[None, :]
        angles = torch.cat([angles, angles], dim=-1)
        return {"q": q.to(dtype), "cos": angles.cos().to(dtype), "sin": angles.sin().to(dtype)}

    def check_extra(self, dims, params):
        if dims["D"] % 2:
            return "q", f"head dim D={dims['D']} must be even for half rotation"
        return None

    bench_distributions = {"randn": "q standard normal, cos/sin of real Llama angles (as conformance)"}

    def make_bench_inputs(self, case, dtype, device, generator):
        self.bench_distribution(case)
        return self.make_inputs(case, dtype, device, generator)

    def reference(self, params, q, cos, sin):
        h = q.shape[-1] // 2
        rotated = torch.cat([-q[..., h:], q[..., :h]], dim=-1)
        return {"out": q * cos + rotated * sin}

    def baseline(self, q, cos, sin):
        h = q.shape[-1] // 2
        return q * cos + torch.cat([-q[..., h:], q[..., :h]], dim=-1) * sin  # the HF/Llama eager code

    def flops(self, case):
        d = case.dims
        return 3 * d["B"] * d["H"] * d["S"] * d["D"]
