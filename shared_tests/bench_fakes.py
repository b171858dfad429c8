"""Fake backends for the bench tests: CPU tensors, deterministic behaviour (correct, wrong, raising,
tunable). Not collected by pytest (no test_ prefix)."""

from __future__ import annotations

import torch

from tilerosetta.backends import torch_ref
from tilerosetta.backends.base import Backend
from tilerosetta.bench import timing


class CountingBackend(Backend):
    """Correct on CPU (torch_ref) for vector_add and softmax; counts raw calls per op."""

    language = "fake"
    device_type = "cpu"

    def __init__(self, name="good"):
        self.name = name
        self.calls = {}

    def available(self):
        return True, "fake backend for tests"

    def _wrap(self, op, fn):
        def call(*args, **kw):
            self.calls[op] = self.calls.get(op, 0) + 1
            return fn(*args, **kw)
        return call

    def implementations(self):
        return {"vector_add": self._wrap("vector_add", torch_ref.vector_add),
                "softmax": self._wrap("softmax", torch_ref.softmax)}

    def default_config(self, op, dtype, dims):
        return {"BLOCK": 128}


class WrongBackend(CountingBackend):
    """vector_add is off by one; softmax is correct."""

    def implementations(self):
        impls = super().implementations()
        impls["vector_add"] = lambda a, b, out: torch.add(a, b, out=out).add_(1.0)
        return impls


class RaisingBackend(CountingBackend):
    """vector_add raises inside the language runtime; softmax is correct."""

    def implementations(self):
        impls = super().implementations()

        def boom(a, b, out):
            raise RuntimeError("kernel exploded")
        impls["vector_add"] = boom
        return impls


class TunableBackend(CountingBackend):
    """vector_add with a config space; BLOCK=3 is a broken configuration (writes half the output)."""

    def __init__(self, name="tunable"):
        super().__init__(name)
        self.forced = None

    def config_space(self, op, dtype):
        return [{"BLOCK": b} for b in (64, 128, 3, 256)] if op == "vector_add" else []

    def set_config(self, op, dtype, config):
        self.forced = dict(config) if config else None

    def implementations(self):
        impls = super().implementations()

        def vadd(a, b, out):
            if self.forced and self.forced["BLOCK"] == 3:
                n = out.numel() // 2
                torch.add(a[:n], b[:n], out=out[:n])
            else:
                torch.add(a, b, out=out)
        impls["vector_add"] = vadd
        return impls


def fixed_timer(ms_by_backend: dict[str, float], backend_of=None):
    """A timer that never looks at the clock: median = the given ms (so tests are deterministic)."""
    def timer(fn, device_type, verify):
        fn()
        ms = ms_by_backend(fn) if callable(ms_by_backend) else ms_by_backend
        return timing.summarize([ms * 0.99, ms, ms * 1.01], timing.CPU_WALL)
    return timer


def watching_timer(watched: list):
    """fixed_timer(1.0) that first runs the timed call once under CallerMemoryWrites and appends the record
    to `watched`: what the benchmark's timed call wrote into caller memory, one record per timed case."""
    inner = fixed_timer(1.0)

    def timer(fn, device_type, verify):
        with CallerMemoryWrites() as rec:
            fn()
        watched.append(rec)
        return inner(fn, device_type, verify)
    return timer


class CallerMemoryWrites:
    """A TorchDispatchMode that lists every aten op run inside it which writes into memory the caller
    allocated before the call (an `out=` buffer, an input): e.g. `out.copy_(result)` or
    `torch.softmax(x, out=out)`. Writes into tensors allocated inside the call (a returning op's own
    output, temporaries of a decomposition) are allowed. `ops` lists every op seen, so a test can also
    check that something ran at all."""

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        recorder = self
        self.ops, self.writes, self._fresh = [], [], set()

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                name = str(func.overloadpacket.__name__) + "." + func._overloadname
                recorder.ops.append(name)
                for i, arg in enumerate(func._schema.arguments):
                    value = kwargs.get(arg.name, args[i] if i < len(args) and not arg.kwarg_only else None)
                    if arg.alias_info is not None and arg.alias_info.is_write and isinstance(value, torch.Tensor):
                        if value.untyped_storage().data_ptr() not in recorder._fresh:
                            recorder.writes.append(f"{name} writes '{arg.name}' (caller memory)")
                out = func(*args, **kwargs)
                for t in (out if isinstance(out, (tuple, list)) else (out,)):
                    if isinstance(t, torch.Tensor) and not func._schema.is_mutable:
                        recorder._fresh.add(t.untyped_storage().data_ptr())
                return out

        self._mode = Mode()

    def __enter__(self):
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self._mode.__exit__(*exc)
