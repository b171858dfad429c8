"""The `torch_compile` peer: torch.compile (inductor) of the plain torch code a user would write, per shape.

Memory-bound ops only (matmul, bmm and attention compile to the same cuBLAS/SDPA calls as eager torch); the
code compiled is each spec's `baseline`, what the `torch` backend runs eagerly.
Each (op, shapes, dtype, params) gets its own compiled function (dynamic=False, fullgraph=True), built on
its first call; that first call's wall time (compile + one run) is recorded per result as `compile_ms`,
separately from the timed run. Every specialization gets a fresh code object, so dynamo's per-code
recompile limit (8) never silently falls back to eager across shapes.
"""

from __future__ import annotations

import time
import types

import torch

from tilerosetta.backends.peer import PeerBackend
from tilerosetta.specs import SPECS


# The code a torch.compile user writes (what inductor then fuses): each memory-bound spec's `baseline`,
# the plain torch code the `torch` backend runs eagerly.
SOURCES = {op: spec.baseline for op, spec in SPECS.items() if spec.bound == "memory"}
COMPUTE_BOUND = "compute-bound: torch.compile calls the same cuBLAS / SDPA kernel as eager torch (the baseline)"


def _signature(args, params) -> tuple:
    return tuple((tuple(a.shape), a.dtype, str(a.device)) for a in args) + tuple(sorted(params.items()))


class TorchCompilePeer(PeerBackend):
    name = "torch_compile"
    language = "torch.compile (inductor, peer)"
    peer = "torch.compile"
    dist = "torch"
    modules = ("torch._dynamo", "torch._inductor")
    install_hint = "ships with torch"
    not_here = {op: COMPUTE_BOUND for op, spec in SPECS.items() if spec.bound != "memory"}
    compile_backend = "inductor"  # tests use "eager" (no C++/Triton compiler on a CI runner)

    def __init__(self):
        super().__init__()
        self._compiled: dict[tuple, object] = {}
        self._compile_ms: dict[tuple, float] = {}  # (op, dtype, dims tuple) -> ms of the first compiled call

    def extra_problem(self, mods):
        if self.compile_backend == "inductor" and self.device_type == "cuda":
            try:
                import triton  # noqa: F401  inductor's GPU code generator
            except Exception as exc:
                return f"torch.compile needs triton for CUDA code: {type(exc).__name__}: {exc}"
        return None

    def version(self):
        return torch.__version__

    def _specialized(self, op, args, params):
        key = (op,) + _signature(args, params)
        fn = self._compiled.get(key)
        if fn is None:
            src = SOURCES[op].__func__  # the spec's method; bound again below to the same spec
            tag = f"{op}_{len(self._compiled)}"  # a distinct code object per specialization
            fresh = types.MethodType(types.FunctionType(src.__code__.replace(co_name=tag), src.__globals__, tag),
                                     SOURCES[op].__self__)
            fn = torch.compile(fresh, backend=self.compile_backend, dynamic=False, fullgraph=True)
            if args[0].is_cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn(*args, **params)
            if args[0].is_cuda:
                torch.cuda.synchronize()
            self._compile_ms[(op, args[0].dtype, tuple(args[0].shape))] = (time.perf_counter() - t0) * 1e3
            self._compiled[key] = fn
        return fn

    def bind(self, mods):
        def make(op):
            def call(*args, **params):
                return self._specialized(op, args, params)(*args, **params)
            call.__name__ = op
            return call
        return {op: make(op) for op in SOURCES}

    def record_extras(self, op, dtype, dims):
        """compile_ms of the specialization this result timed (its first call: compile + one run)."""
        hits = [ms for (o, d, _), ms in self._compile_ms.items() if o == op and d == dtype]
        return {"compile_ms": hits[-1]} if hits else {}

    def builtin_config(self, op, dtype, dims):
        return {"mode": "default", "backend": self.compile_backend, "dynamic": False} if op in SOURCES else {}
