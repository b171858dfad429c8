"""bmm: batched matmul (Bt, M, K) @ (Bt, K, N) -> (Bt, M, N); fp32 may use tf32."""

import torch

from tilerosetta.specs.base import Case, GemmSpec, OpSpec, Scaling


class Bmm(GemmSpec, OpSpec):
    name = "bmm"
    order = 90
    summary = "out (Bt, M, N) = a (Bt, M, K) @ b (Bt, K, N)"
    inputs = {"a": ("Bt", "M", "K"), "b": ("Bt", "K", "N")}
    outputs = {"out": ("Bt", "M", "N")}
    bound = "compute"
    cases = tuple(Case({"Bt": bt, "M": m, "N": n, "K": k}) for bt, m, n, k in
                  ((1, 1, 1, 1), (3, 7, 13, 5), (2, 64, 64, 64), (5, 127, 129, 131), (4, 1, 256, 64),
                   (2, 256, 128, 512)))
    bench_cases = (Case({"Bt": 16, "M": 2048, "N": 2048, "K": 2048}),
                   Case({"Bt": 4, "M": 4096, "N": 4096, "K": 4096}))
    scaling = (Scaling(("Bt",), (1, 4, 16, 64), {"M": 1024, "N": 1024, "K": 1024}),)  # bench --scaling: batch

    def reference(self, params, a, b):
        return {"out": a @ b}

    def baseline(self, a, b):
        return torch.bmm(a, b)

    def flops(self, case):
        d = case.dims
        return 2 * d["Bt"] * d["M"] * d["N"] * d["K"]
