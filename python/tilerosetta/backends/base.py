"""The backend adapter contract. The harness only ever talks to this interface.

A backend subclass provides:
  * `available() -> (ok, reason)`: whether it can run here; the reason is precise when it cannot.
  * `implementations() -> {op: fn}`: raw destination-passing callables, fn(*inputs, *outputs, **params),
    launching on torch's current CUDA stream (or running on `device_type` tensors).
  * `missing() -> {op: reason}`: ops it does not implement, each with why. An op is never silently
    served by another backend.
  * `device_type`: where its tensors must live ("cuda"; "cpu" for interpreters).
  * optionally `returning() -> {op: fn}`: the op in the form its own users call it, fn(*inputs, **params)
    returning its output (or a tuple of outputs, in the spec's order) in memory it allocated itself.
    Only baselines and peers (torch, torch.compile, Liger, Quack, FA4, TileGym, ...) have it: the
    benchmark times that form when present, so their numbers never include a copy into our buffer.
    Our own backends stay destination-passing. `destination_from_returning` derives the destination
    form of such an op for the conformance suite (a copy there is harmless: it is never timed).
  * optionally `peer`: set on someone else's kernels shown beside ours (labelled "peer" everywhere).

`op(name)` returns a BoundOp that validates every argument against the op spec before the raw call,
so bad inputs are refused the same way, with the same message shape, on every backend.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, Callable

import torch

from tilerosetta.errors import BackendUnavailable, OpMissing, TileRosettaError, runtime_failure
from tilerosetta.specs import OP_NAMES, get_spec


class BoundOp:
    """One op of one backend, validated on every call."""

    def __init__(self, backend: "Backend", op: str, fn: Callable):
        self.backend, self.spec, self.fn = backend, get_spec(op), fn

    def __call__(self, *tensors: torch.Tensor, **params: Any):
        spec, name = self.spec, self.backend.name
        names = list(spec.inputs) + list(spec.outputs)
        if len(tensors) != len(names):
            raise TileRosettaError(spec.name, name, None,
                                   f"expected {len(names)} tensors ({', '.join(names)}), got {len(tensors)}")
        spec.validate(name, self.backend.device_type, dict(zip(names, tensors)), params,
                      self.backend.dtypes(spec.name))
        limit = self.backend.element_limit(spec.name)
        if limit is not None:
            for n, t in zip(names, tensors):
                if t.numel() > limit:
                    raise TileRosettaError(spec.name, name, n, (
                        f"{t.numel()} elements exceed this backend's limit of {limit} per tensor (its kernels "
                        f"index with 32-bit integers); see `tilerosetta list --limits`"))
        full = spec.full_params(params)
        try:
            return self.fn(*tensors, **full)
        except TileRosettaError:
            raise
        except Exception as exc:  # name op and backend on every failure from the language runtime
            raise runtime_failure(spec.name, name, exc) from exc


INT32_ELEMENTS = 2**31 - 1  # the element limit of kernels that index with 32-bit integers


DESTINATION = "destination"  # fn(*inputs, *outputs, **params) writes into buffers the caller allocated
RETURNS = "returns"  # fn(*inputs, **params) -> output(s) it allocated itself (how torch users call torch)


class ReturningOp:
    """One op of a baseline or peer in its returning form, validated on every call like a BoundOp."""

    def __init__(self, backend: "Backend", op: str, fn: Callable):
        self.backend, self.spec, self.fn = backend, get_spec(op), fn

    def __call__(self, *tensors: torch.Tensor, **params: Any):
        spec, name = self.spec, self.backend.name
        if len(tensors) != len(spec.inputs):
            raise TileRosettaError(spec.name, name, None, f"expected {len(spec.inputs)} input tensors "
                                                          f"({', '.join(spec.inputs)}), got {len(tensors)}")
        spec.validate(name, self.backend.device_type, dict(zip(spec.inputs, tensors)), params,
                      self.backend.dtypes(spec.name), with_outputs=False)
        full = spec.full_params(params)
        try:
            result = self.fn(*tensors, **full)
        except TileRosettaError:
            raise
        except Exception as exc:
            raise RuntimeError(f"{name}.{spec.name}: {type(exc).__name__}: {exc}") from exc
        return as_outputs(spec, name, result)


def as_outputs(spec, backend: str, result) -> dict[str, torch.Tensor]:
    """A returning-form result as {output name: tensor}, in the spec's order; refuses a wrong count."""
    items = result if isinstance(result, (tuple, list)) else (result,)
    names = list(spec.outputs)
    if len(items) != len(names) or not all(isinstance(t, torch.Tensor) for t in items):
        raise TileRosettaError(spec.name, backend, None, f"returning form gave {type(result).__name__} "
                                                         f"({len(items)} item(s)); expected {len(names)} tensor(s) "
                                                         f"({', '.join(names)})")
    return dict(zip(names, items))


def destination_from_returning(op: str, fn: Callable) -> Callable:
    """The destination form fn(*inputs, *outputs, **params) of a returning-form op: calls it, then copies
    each result into the caller's output. For conformance only; the benchmark times `fn` itself."""
    spec = get_spec(op)
    n_in = len(spec.inputs)

    def destination(*tensors, **params):
        result = fn(*tensors[:n_in], **params)
        for out, value in zip(tensors[n_in:], as_outputs(spec, "?", result).values()):
            out.copy_(value)
    destination.__name__ = op
    destination.returning = fn  # so a test can tell the wrapper from a native destination op
    return destination


class Backend:
    name: str = "?"
    language: str = "?"
    device_type: str = "cuda"
    # True where the raw callables of implementations() check memory safety themselves (native layers:
    # dtype, device, shape, strides of every tensor), so a call that skips BoundOp is refused, never
    # out of bounds. Python backends are only called with validated arguments.
    raw_calls_checked: bool = False

    def available(self) -> tuple[bool, str]:
        raise NotImplementedError

    def implementations(self) -> dict[str, Callable]:
        raise NotImplementedError

    def returning(self) -> dict[str, Callable]:
        """Ops in the form their users call them, fn(*inputs, **params) -> output(s); {} = none (ours)."""
        return {}

    def convention(self, op: str) -> str:
        """How the benchmark calls (and times) op: RETURNS when the returning form exists, else DESTINATION."""
        return RETURNS if op in self.returning() else DESTINATION

    def missing(self) -> dict[str, str]:
        have = self.implementations()
        return {op: "not implemented in this backend yet" for op in OP_NAMES if op not in have}

    def dtypes(self, op: str) -> tuple[torch.dtype, ...]:
        """dtypes this backend accepts for an op (default: all the spec's)."""
        return get_spec(op).dtypes

    def element_limit(self, op: str) -> int | None:
        """Most elements one tensor of op may have (None: 64-bit offsets, no limit of our own). A bigger
        tensor is refused before launch by BoundOp, with the limit in the message."""
        return INT32_ELEMENTS

    def limits(self, op: str) -> str:
        """One line for `tilerosetta list --limits`: the sizes op accepts on this backend."""
        limit = self.element_limit(op)
        return "no element limit (64-bit offsets)" if limit is None else f"<= {limit} elements per tensor"

    # ---- tuning (issue: tile-size sweeps) ------------------------------------------------------
    def config_space(self, op: str, dtype: torch.dtype) -> list[dict[str, Any]]:
        """Configurations (tile sizes, warps, stages, ...) a sweep may try for op/dtype; [] = not tunable."""
        return []

    def default_config(self, op: str, dtype: torch.dtype, dims: dict[str, int]) -> dict[str, Any]:
        """The configuration an ordinary call uses (from the backend's committed table or its fallback)."""
        return {}

    def tuned_config(self, op: str, dtype: torch.dtype, dims: dict[str, int]) -> dict[str, Any] | None:
        """The committed sweep result (tilerosetta/tuned_configs.json) for op/dtype, this GPU's arch and the
        size class of dims, or None. Backends merge it over their own fallback table in default_config."""
        if self.device_type != "cuda":
            return None
        from tilerosetta import tuning

        if not hasattr(self, "_arch"):
            from tilerosetta import toolchain

            self._arch = toolchain.device_arch()
        return tuning.lookup(self.name, op, dtype, self._arch, dims)

    def set_config(self, op: str, dtype: torch.dtype, config: dict[str, Any] | None) -> None:
        """Force a configuration for later calls of op/dtype (None restores the default). Sweeps use this."""
        if config:
            raise NotImplementedError(f"{self.name} has no tunable configuration for {op}")

    def versions(self) -> dict[str, str]:
        """Versions of the language runtime and compilers, recorded in results."""
        return {}

    @cached_property
    def _availability(self) -> tuple[bool, str]:
        try:
            return self.available()
        except Exception as exc:  # an availability probe must never crash a listing
            return False, f"availability check failed: {type(exc).__name__}: {exc}"

    def is_available(self) -> tuple[bool, str]:
        return self._availability

    # What `tilerosetta list` shows for a backend (its legend explains each word):
    #   runs         available here
    #   built        compiled/installed here, but cannot run on this machine (e.g. no GPU)
    #   not built    could be built on this machine: the reason names the make target
    #   unavailable  cannot be built or run on this machine (reason says why)
    STATES = ("runs", "built", "not built", "unavailable")

    def state(self) -> str:
        if self.is_available()[0]:
            return "runs"
        return self.state_when_unavailable()

    def state_when_unavailable(self) -> str:
        """Adapters whose code is built or installed on this machine say so here (default: unavailable)."""
        return "unavailable"

    def op(self, name: str) -> BoundOp:
        get_spec(name)  # unknown op -> KeyError naming the valid ones
        ok, reason = self.is_available()
        if not ok:
            raise BackendUnavailable(self.name, reason)
        impls = self.implementations()
        if name not in impls:
            raise OpMissing(self.name, name, self.missing().get(name, "not implemented"))
        return BoundOp(self, name, impls[name])

    def op_returning(self, name: str) -> ReturningOp:
        """The returning form of op `name` (see returning()); OpMissing when this backend has none."""
        bound = self.op(name)  # same availability / missing checks as the destination form
        fn = self.returning().get(name)
        if fn is None:
            raise OpMissing(self.name, name, "no returning form (this backend is destination-passing)")
        return ReturningOp(self, bound.spec.name, fn)


class UnavailableBackend(Backend):
    """Stands in for a backend whose adapter module could not even be imported."""

    def __init__(self, name: str, language: str, reason: str):
        self.name, self.language, self._reason = name, language, reason

    def available(self):
        return False, self._reason

    def implementations(self):
        return {}

    def missing(self):
        return {op: self._reason for op in OP_NAMES}
