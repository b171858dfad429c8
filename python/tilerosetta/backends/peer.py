"""The common part of the optional peers: someone else's kernels, timed beside ours as their users call them.

A peer (torch.compile, Liger-Kernel, Quack, FlashAttention 4, torch SDPA with a pinned backend, ...):
  * is optional: when its package does not import, `available()` says so and names the pip package, every
    op is listed missing with that reason, and nothing else changes (CI installs none of them);
  * is labelled "peer" everywhere (`peer` attribute, `peer_label()` with its version, recorded in results);
  * exposes only the returning form, fn(*inputs, **params) -> output, its users' call (`returning()`);
    the conformance suite gets a destination wrapper that copies (`implementations()`, never timed);
  * never serves one of our backends: it is its own registry entry, and an op it lacks is missing.

Inputs a peer's API wants in another form than our spec's (fp32 weights for Quack's layernorm, cos/sin of
width D/2, gate and up as two tensors) are prepared ONCE per input tensor (`prepare`), outside the timed
call, as that peer's users hold them; each adapter says which.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
from torch.utils.weak import WeakIdKeyDictionary
from typing import Callable

import torch

from tilerosetta.backends.base import Backend, destination_from_returning
from tilerosetta.specs import OP_NAMES, get_spec


def dist_version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


class PeerBackend(Backend):
    """Subclasses set name, language, peer, dist (pip name), modules (to import) and implement `bind`."""

    device_type = "cuda"
    peer: str = "?"  # e.g. "Liger-Kernel": marks a peer in listings, results and reports
    dist: str = ""  # the pip distribution whose version is recorded
    modules: tuple[str, ...] = ()  # imported (in order) before `bind`; the first failure is the reason
    install_hint: str = ""  # how to get it, appended to the not-importable reason
    not_here: dict[str, str] = {}  # op -> why this peer has no (fitting) version of it
    op_dtypes: dict[str, tuple[torch.dtype, ...]] = {}  # op -> dtypes the peer accepts (default: the spec's)

    def __init__(self):
        self._mods: dict[str, object] | None = None
        self._import_error: str | None = None
        self._bound: dict[str, Callable] | None = None
        self._prepared: dict[str, WeakIdKeyDictionary] = {}

    # ---- loading ---------------------------------------------------------------------------------
    def _load(self) -> dict[str, object] | None:
        if self._mods is None and self._import_error is None:
            mods = {}
            for name in self.modules:
                try:
                    mods[name] = importlib.import_module(name)
                except Exception as exc:
                    self._import_error = (f"{name} is not importable ({type(exc).__name__}: {str(exc)[:300]}); "
                                          f"optional peer: {self.install_hint or 'pip install ' + self.dist}")
                    return None
            self._mods = mods
        return self._mods

    def version(self) -> str:
        return dist_version(self.dist) or "?"

    def peer_label(self) -> str:
        return f"{self.peer} {self.version()}" if self._load() is not None else f"{self.peer} (not installed)"

    def bind(self, mods: dict[str, object]) -> dict[str, Callable]:
        """{op: fn(*inputs, **params) -> output} for the ops this peer has, from its imported modules."""
        raise NotImplementedError

    def extra_problem(self, mods) -> str | None:
        """Why the imported peer still cannot run here (e.g. an SDPA backend torch lacks), or None."""
        return None

    # ---- the Backend contract ---------------------------------------------------------------------
    def available(self):
        mods = self._load()
        if mods is None:
            return False, self._import_error
        if self.device_type == "cuda" and not torch.cuda.is_available():
            return False, f"{self.peer} {self.version()} imported, but no CUDA GPU is visible to torch"
        problem = self.extra_problem(mods)
        if problem:
            return False, problem
        where = f", {torch.cuda.get_device_name()}" if self.device_type == "cuda" else ""
        return True, f"peer: {self.peer} {self.version()}{where}"

    def returning(self):
        mods = self._load()
        if mods is None:
            return {}
        if self._bound is None:
            self._bound = {op: fn for op, fn in self.bind(mods).items() if op in OP_NAMES}
        return dict(self._bound)

    def implementations(self):
        return {op: destination_from_returning(op, fn) for op, fn in self.returning().items()}

    def missing(self):
        if self._load() is None:
            return {op: self._import_error for op in OP_NAMES}
        have = self.returning()
        return {op: self.not_here.get(op, f"{self.peer} has no {op}") for op in OP_NAMES if op not in have}

    def dtypes(self, op):
        return self.op_dtypes.get(op, get_spec(op).dtypes)

    def versions(self):
        v = {"torch": torch.__version__}
        if self.dist:
            v[self.dist] = self.version()
        return v

    # ---- inputs in the peer's own form, prepared once per input tensor ----------------------------
    def prepare(self, tag: str, t: torch.Tensor, make: Callable[[torch.Tensor], object]):
        """make(t), computed once per (tag, tensor object, tensor version) and reused by later calls (and by
        the CUDA-graph capture, which then holds no conversion kernel)."""
        cache = self._prepared.setdefault(tag, WeakIdKeyDictionary())
        hit = cache.get(t)
        if hit is None or hit[0] != t._version:
            hit = (t._version, make(t))
            cache[t] = hit
        return hit[1]
