"""One exception type for every refused call, so users can catch it the same way on every backend."""


class TileRosettaError(ValueError):
    """A call was refused before launch (or failed in a backend) — names the op, backend and argument."""

    def __init__(self, op: str, backend: str, arg: str | None, message: str):
        self.op, self.backend, self.arg = op, backend, arg
        where = f"{backend}.{op}"
        if arg:
            where += f": argument '{arg}'"
        super().__init__(f"{where}: {message}")


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
