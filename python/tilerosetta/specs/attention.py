"""attention: flash-attention forward, softmax(q k^T * scale [+ causal mask]) v.

q, k, v, out are (B, H, S, D) with D in {64, 128}; scale defaults to 1/sqrt(D). Causal masking is
top-left aligned (query i sees keys j <= i), as torch's is_causal for equal lengths.
"""

import math

import torch

from tilerosetta.specs.base import HALF_DTYPES, Case, OpSpec, Scaling, flag, positive

HEAD_DIMS = (64, 128)


class Attention(OpSpec):
    name = "attention"
    summary = "out = softmax(q k^T * scale, causal?) v, D in {64, 128}"
    inputs = {"q": ("B", "H", "S", "D"), "k": ("B", "H", "S", "D"), "v": ("B", "H", "S", "D")}
    outputs = {"out": ("B", "H", "S", "D")}
    params = {"causal": flag(False, "top-left aligned causal mask"),
              "scale": positive(None, "score scale; None means 1/sqrt(D)", optional=True)}
    dtypes = HALF_DTYPES
    dim_choices = {"D": HEAD_DIMS, "S": (1, 2, 17, 64, 65, 127, 128, 200, 257)}
    bound = "compute"
    cases = tuple(Case({"B": b, "H": h, "S": s, "D": d}, {"causal": c}) for b, h, s, d in
                  ((1, 1, 1, 64), (1, 2, 17, 64), (2, 3, 128, 64), (1, 2, 129, 128), (1, 1, 300, 128),
                   (2, 2, 64, 128)) for c in (False, True)) + (
        Case({"B": 1, "H": 2, "S": 77, "D": 64}, {"causal": True, "scale": 0.3}),)
    bench_cases = tuple(Case({"B": 4, "H": 32, "S": 4096, "D": d}, {"causal": c})
                        for d in HEAD_DIMS for c in (False, True))
    # bench --scaling: S from 128 to 32768 at a fixed B*H*S (B derived), D=128, not causal. 65536 keeps the
    # float64 reference's S x S scores at S=32768 to ~17 GB per head pair.
    scaling = (Scaling(("S",), (128, 512, 2048, 8192, 32768), {"H": 2, "D": 128}, {"causal": False},
                       solve="B", product_of=("B", "H", "S"), product=65536),)

    def check_extra(self, dims, params):
        if dims["D"] not in HEAD_DIMS:
            return "q", f"head dim D={dims['D']} not supported; expected one of {HEAD_DIMS}"
        return None

    def reference(self, params, q, k, v):
        scale = params["scale"] if params["scale"] is not None else 1.0 / math.sqrt(q.shape[-1])
        s = (q @ k.transpose(-1, -2)) * scale
        if params["causal"]:
            n = q.shape[-2]
            mask = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
            s = s.masked_fill(~mask, float("-inf"))
        return {"out": torch.softmax(s, dim=-1) @ v}

    def flops(self, case):
        d = case.dims
        total = 4 * d["B"] * d["H"] * d["S"] * d["S"] * d["D"]
        return total // 2 if case.params.get("causal") else total
