"""transpose: out (N, M) = x (M, N)^T, row-major in and out."""

from tilerosetta.specs.base import Case, OpSpec, Scaling


class Transpose(OpSpec):
    name = "transpose"
    order = 20
    summary = "out (N, M) = x (M, N)^T"
    inputs = {"x": ("M", "N")}
    outputs = {"out": ("N", "M")}
    cases = tuple(Case({"M": m, "N": n}) for m, n in
                  ((1, 1), (1, 33), (33, 1), (17, 31), (64, 64), (127, 257), (300, 1000)))
    bench_cases = (Case({"M": 8192, "N": 8192}), Case({"M": 16384, "N": 16384}))
    scaling = (Scaling(("M", "N"), (256, 1024, 4096, 16384)),)  # bench --scaling: square matrices

    def reference(self, params, x):
        return {"out": x.t().contiguous()}

    def baseline(self, x):
        return x.t().contiguous()  # a user needing a row-major transpose materialises it like this

    def flops(self, case):
        return 0
