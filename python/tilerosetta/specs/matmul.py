"""matmul: C (M, N) = A (M, K) @ B (K, N); fp32 may use tf32 (tf32 tolerance)."""

import torch

from tilerosetta.specs.base import Case, GemmSpec, OpSpec, Scaling


class Matmul(GemmSpec, OpSpec):
    name = "matmul"
    order = 80
    summary = "out (M, N) = a (M, K) @ b (K, N), fp32 accumulate"
    inputs = {"a": ("M", "K"), "b": ("K", "N")}
    outputs = {"out": ("M", "N")}
    bound = "compute"
    cases = tuple(Case({"M": m, "N": n, "K": k}) for m, n, k in
                  ((1, 1, 1), (1, 64, 64), (64, 1, 64), (7, 13, 5), (64, 64, 64), (127, 129, 131),
                   # (3, 200, 1536): decode-like, few rows against a deep K (split-K schedules), ragged N.
                   # The last case stays the largest (the CPU bench times cases[-1]).
                   (256, 256, 512), (1, 1000, 257), (3, 200, 1536), (97, 31, 1024)))
    bench_cases = (Case({"M": 4096, "N": 4096, "K": 4096}), Case({"M": 8192, "N": 8192, "K": 8192})) + tuple(
        # Llama 3.1 8B decode (B = 1 and 16 tokens): q/o projections (N 4096) and the MLP's down-projection
        # width (N 14336) against K 4096; memory-bound weight streams (2*N*K bytes).
        Case({"M": m, "N": n, "K": 4096}) for m in (1, 16) for n in (4096, 14336))
    # bench --scaling: M from 1 (a GEMV) to 16384 at N = K = 4096
    scaling = (Scaling(("M",), (1, 16, 128, 1024, 4096, 16384), {"N": 4096, "K": 4096}),)

    def reference(self, params, a, b):
        return {"out": a @ b}

    def baseline(self, a, b):
        return torch.mm(a, b)

    def flops(self, case):
        d = case.dims
        return 2 * d["M"] * d["N"] * d["K"]
