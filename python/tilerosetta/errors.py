"""One exception family for every refused or failed call, so users catch it the same way on every backend.

* `TileRosettaError` (a ValueError): a call refused before launch — names op, backend and argument.
  `TileRosettaTypeError` is the same refusal for an argument of the wrong Python type (also a TypeError).
  Refusals raised by a native layer (the C++ and Rust modules raise ValueError/TypeError worded
  "<backend>.<op>: argument '<arg>': <message>") are translated into these by the adapters
  (`native_refusal`), so the raw `implementations()` path reports them the same way.
* `TileRosettaRuntimeError` (a RuntimeError): the language runtime failed after validation (compile
  error, CUDA error, ...) — names op and backend; the original exception is its `__cause__`.
"""

from __future__ import annotations

import re


class TileRosettaError(ValueError):
    """A call was refused before launch — names the op, backend and argument."""

    def __init__(self, op: str, backend: str, arg: str | None, message: str):
        self.op, self.backend, self.arg, self.message = op, backend, arg, message
        where = f"{backend}.{op}"
        if arg:
            where += f": argument '{arg}'"
        super().__init__(f"{where}: {message}")

    def __reduce__(self):  # picklable (pytest-xdist workers send exceptions across processes)
        return type(self), (self.op, self.backend, self.arg, self.message)


class TileRosettaTypeError(TileRosettaError, TypeError):
    """A refusal because an argument has the wrong Python type (a str for eps, a list for a tensor)."""


class TileRosettaRuntimeError(RuntimeError):
    """A validated call failed inside the language runtime; `__cause__` holds the original exception."""

    def __init__(self, op: str, backend: str, message: str):
        self.op, self.backend, self.message = op, backend, message
        super().__init__(f"{backend}.{op}: {message}")

    def __reduce__(self):
        return type(self), (self.op, self.backend, self.message)


_NATIVE = re.compile(r"^(?P<backend>\w+)\.(?P<op>\w+): argument '(?P<arg>[^']*)': (?P<msg>.*)$", re.S)


def native_refusal(op: str, backend: str, exc: BaseException) -> TileRosettaError:
    """The TileRosettaError for a ValueError/TypeError raised by a native module's argument checks.

    The native message already names the argument ("tile_cpp.rms_norm: argument 'eps': ..."); without
    that shape the whole message is kept and no argument is named.
    """
    cls = TileRosettaTypeError if isinstance(exc, TypeError) else TileRosettaError
    m = _NATIVE.match(str(exc))
    if m and m["op"] == op:
        return cls(op, backend, m["arg"], m["msg"])
    prefix = f"{backend}.{op}: "
    text = str(exc)
    return cls(op, backend, None, text[len(prefix):] if text.startswith(prefix) else text)


def runtime_failure(op: str, backend: str, exc: BaseException) -> TileRosettaRuntimeError:
    """The TileRosettaRuntimeError for an exception a launch raised (raise it `from exc`)."""
    text = str(exc)
    prefix = f"{backend}.{op}: "
    if text.startswith(prefix):  # the native layers already name themselves: don't say it twice
        text = text[len(prefix):]
    return TileRosettaRuntimeError(op, backend, f"{type(exc).__name__}: {text}")


class BackendUnavailable(RuntimeError):
    """Raised when an op of a backend that cannot run on this machine is called."""

    def __init__(self, backend: str, reason: str):
        self.backend, self.reason = backend, reason
        super().__init__(f"backend '{backend}' is unavailable: {reason}")


class OpMissing(NotImplementedError):
    """Raised when a backend does not implement an op; never silently replaced by another backend."""

    def __init__(self, backend: str, op: str, reason: str):
        self.backend, self.op, self.reason = backend, op, reason
        super().__init__(f"backend '{backend}' has no '{op}': {reason}")
