"""vector_add: c = a + b over a 1-D tensor of any length (not only multiples of a tile)."""

from tilerosetta.specs.base import Case, OpSpec, Scaling


class VectorAdd(OpSpec):
    name = "vector_add"
    order = 10
    summary = "out = a + b, 1-D, any length"
    inputs = {"a": ("N",), "b": ("N",)}
    outputs = {"out": ("N",)}
    cases = tuple(Case({"N": n}) for n in (1, 7, 127, 1000, 4099, 65537))
    bench_cases = (Case({"N": 1 << 28}),)
    scaling = (Scaling(("N",), (1 << 10, 1 << 14, 1 << 18, 1 << 22, 1 << 26, 1 << 28)),)  # bench --scaling

    def reference(self, params, a, b):
        return {"out": a + b}

    def baseline(self, a, b):
        return a + b

    def flops(self, case):
        return case.dims["N"]
