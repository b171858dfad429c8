"""The `triton` backend: the ten ops as Triton kernels (python/tilerosetta/kernels/triton/).

With a CUDA GPU, Triton compiles the kernels for it and launches them on torch's current stream.
Without one, the same kernels run in Triton's CPU interpreter (TRITON_INTERPRET=1) on CPU tensors, so
CI checks every op for real (correctness only; interpreter runs are never timed as GPU results).
TRITON_INTERPRET is read when a kernel is decorated, so it is set here, before the kernel modules are
imported, unless the user set it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading
from functools import cached_property

import torch

from tilerosetta.backends.base import Backend, remember
from tilerosetta.specs import OP_NAMES, get_spec

_HAS_GPU = torch.cuda.is_available()
_USER_INTERPRET = os.environ.get("TRITON_INTERPRET")
# triton.language decorates its own helpers (tl.zeros, tl.sum, ...) when it is imported; if that
# happened before TRITON_INTERPRET=1 was set, they are compiled-mode functions and the interpreter
# cannot call them.
_LANG_IMPORTED_EARLY = "triton.language" in sys.modules and _USER_INTERPRET is None
if not _HAS_GPU and _USER_INTERPRET is None:
    os.environ["TRITON_INTERPRET"] = "1"
INTERPRET = os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")

import triton  # noqa: E402  (after TRITON_INTERPRET is decided)

from tilerosetta.backends import triton_direct  # noqa: E402
from tilerosetta.kernels.triton import config  # noqa: E402
from tilerosetta.kernels.triton import launch_kwargs as _launch_kwargs  # noqa: E402

if INTERPRET:
    from tilerosetta.kernels.triton import interpreter_compat  # noqa: E402

    interpreter_compat.apply()

_KERNELS = {op: importlib.import_module(f"tilerosetta.kernels.triton.{op}") for op in OP_NAMES}
# The interpreter swaps process-wide state (triton.language's builtins get a `_semantic` patched in for
# the duration of a kernel), so two threads interpreting at once break each other ("Did you forget to
# add @triton.jit?"). Interpreted calls are serialised; compiled GPU launches are not.
_INTERPRETER_LOCK = threading.Lock() if INTERPRET else contextlib.nullcontext()


class TritonBackend(Backend):
    name = "triton"
    language = "Triton"

    def __init__(self):
        # The interpreter copies CUDA tensors to the host and back, so with a GPU the tensors stay on it.
        self.device_type = "cuda" if _HAS_GPU else "cpu"

    def available(self):
        if _HAS_GPU and not INTERPRET:
            return True, f"CUDA: {torch.cuda.get_device_name()} (Triton compiles for it)"
        if _HAS_GPU:
            return True, (f"TRITON_INTERPRET={_USER_INTERPRET} set by the user: Triton's interpreter on CUDA "
                          f"tensors copied to the host (correctness only)")
        if not INTERPRET:
            return False, (f"no CUDA GPU and TRITON_INTERPRET={_USER_INTERPRET!r} set by the user; unset it "
                           f"(or set 1) to run Triton's interpreter on CPU tensors")
        if _LANG_IMPORTED_EARLY:
            return False, ("no CUDA GPU, and triton was imported before this backend could set "
                           "TRITON_INTERPRET=1; set TRITON_INTERPRET=1 in the environment to use the interpreter")
        return True, "no CUDA GPU: running Triton's interpreter (TRITON_INTERPRET=1) on CPU tensors (correctness only)"

    def implementations(self):
        return {op: self._bind(op) for op in OP_NAMES}

    def _bind(self, op):
        spec, prepare = get_spec(op), _KERNELS[op].prepare
        n_in = len(spec.inputs) + len(spec.outputs)

        def fn(*tensors, **params):
            def plan():
                cfg = self.config_for(op, tensors[0].dtype, spec.dims_of(tensors[:n_in]))
                return prepare(*tensors, cfg, **spec.full_params(params))

            launches = self.launch_plan(op, tensors, params, plan)  # planned once per call signature
            with _INTERPRETER_LOCK:
                for lx, args in launches:
                    self._launch(lx, args)

        fn.__name__ = op
        return fn

    def _launch(self, lx, args):
        """One launch: a kept plan's launch (Backend.launch_plan hands back its template, whose args hold
        None where the call's tensors go, so `args is not lx.args`) through triton_direct once it has run
        once; any other through JITFunction.run."""
        direct = self._direct
        kept = direct is not None and args is not lx.args
        if kept:
            entry = direct.get(id(lx))
            if entry is not None and entry[0] is lx:  # entries keep their template alive: ids stay unique
                if entry[1] is not None and triton_direct.launch(entry[1], args):
                    return
                kept = False  # built before: this launch goes through run()
        kw = _launch_kwargs(lx, args)
        # kernel[grid](...) is KernelInterface.__getitem__'s lambda around this same run()
        compiled = lx.kernel.run(*args, grid=lx.grid, warmup=False, **kw)
        if kept:  # a kept plan's first launch: keep what run() found for the next ones
            try:
                d = triton_direct.build(lx.kernel, compiled, tuple(args), lx.grid, kw)
            except Exception:  # Triton internals not as expected: this launch keeps using run()
                d = None
            remember(direct, id(lx), (lx, d))

    @cached_property
    def _direct(self) -> dict | None:
        """id(template launch) -> (template, triton_direct.Direct or None); None: every launch through run()
        (the interpreter; Triton internals other than 3.6's; TILEROSETTA_TRITON_DIRECT=0, the A/B switch)."""
        if INTERPRET or os.environ.get("TILEROSETTA_TRITON_DIRECT", "1").strip() == "0":
            return None
        return {} if triton_direct.available()[0] else None

    def element_limit(self, op):
        # vector_add computes its offsets in int64 (kernels/triton/vector_add.py); the others multiply
        # int32 program ids by int32 strides, which wraps past 2^31 elements.
        return None if op == "vector_add" else super().element_limit(op)

    # ---- tuning: declarations only (Backend merges, validates and forces) ---------------------
    def config_space(self, op, dtype):
        get_spec(op)
        return config.space(op, dtype)

    def builtin_config(self, op, dtype, dims):
        return config.default(op, dtype, dims, INTERPRET)

    def check_config(self, op, dtype, cfg):
        config.check(op, cfg)

    def versions(self):
        v = {"triton": triton.__version__, "torch": torch.__version__}
        if INTERPRET:
            v["triton_mode"] = "interpreter"
        return v

