"""matmul: C (M, N) = A (M, K) @ B (K, N); fp32 may use tf32 (tf32 tolerance)."""

from tilerosetta.specs.base import FP32, TF32_TOLERANCE, Case, OpSpec, Scaling


class Matmul(OpSpec):
    name = "matmul"
    summary = "out (M, N) = a (M, K) @ b (K, N), fp32 accumulate"
    inputs = {"a": ("M", "K"), "b": ("K", "N")}
    outputs = {"out": ("M", "N")}
    bound = "compute"
    cases = tuple(Case({"M": m, "N": n, "K": k}) for m, n, k in
                  ((1, 1, 1), (1, 64, 64), (64, 1, 64), (7, 13, 5), (64, 64, 64), (127, 129, 131),
                   (256, 256, 512), (1, 1000, 257), (97, 31, 1024)))
    bench_cases = (Case({"M": 4096, "N": 4096, "K": 4096}), Case({"M": 8192, "N": 8192, "K": 8192}))
    # bench --scaling: M from 1 (a GEMV) to 16384 at N = K = 4096
    scaling = (Scaling(("M",), (1, 16, 128, 1024, 4096, 16384), {"N": 4096, "K": 4096}),)

    def tolerance(self, dtype):
        return TF32_TOLERANCE if dtype == FP32 else super().tolerance(dtype)

    def reference(self, params, a, b):
        return {"out": a @ b}

    def flops(self, case):
        d = case.dims
        return 2 * d["M"] * d["N"] * d["K"]
