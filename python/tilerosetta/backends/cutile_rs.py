"""The `cutile_rs` backend: kernels written in cuTile-rs (Rust), called through the PyO3 extension
module `tilerosetta_cutile_rs` (rust/, built by `make build-rust` as an abi3 wheel).

The adapter hands Rust plain integers: each tensor's data pointer, shape, strides, dtype name and
device, the launch dtype name, the device index and torch's current stream handle. Rust validates them again, borrows the memory and
the stream (never frees or destroys what torch owns) and launches without a host synchronisation.
That request is validated once per call signature (`prepare` returns a `Prepared` handle, kept in the
signature memo); a later call of the signature hands the handle only its data pointers and stream
(issue 14 item 7: the per-call host cost).
cuTile-rs JIT-compiles each kernel specialisation on its first launch (Tile IR -> tileiras -> cubin),
so the pinned tileiras 13.4 must be found: `_prepare_env` points CUTILE_TILEIRAS_PATH at it and
removes CUDA_HOME before the first call. `first_call_seconds` measures that JIT cost.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, Callable

import torch

from tilerosetta import toolchain
from tilerosetta.backends.base import _NO_PLAN, Backend, _raw_stream, current_stream_handle
from tilerosetta.errors import BackendUnavailable, TileRosettaError, native_refusal
from tilerosetta.specs import OP_NAMES, get_spec
from tilerosetta.specs.base import dtype_name

MODULE = "tilerosetta_cutile_rs"
# The tile counts cuTile-rs puts on grid axis y or z (the output partition's 2nd and 3rd dims; rust/src/ops/
# <op>.rs `out.partition([...])`): past 65535 the launch folds the tile grid into grid x instead (a mapped
# partition, `<op>_folded`; rust/src/ops/mod.rs foldable_grid). The other ops launch 1-D grids.
GRID_FOLDS = {"transpose": "ceil(M / BM)", "silu_and_mul": "ceil(H / BH)", "rope": "ceil(S / BS)",
              "matmul": "ceil(N / BN)", "bmm": "ceil(M / BM) or ceil(N / BN)", "attention": "ceil(S / BM)"}
TENSOR_FIELDS = 6  # (name, data_ptr, shape, strides, dtype, device): rust/src/python.rs PyTensor
PREPARED = 1  # prepare() / Prepared.launch(pointers, stream): rust/src/python.rs PREPARED
_CUDA_DEVICE_NAMES: dict[int, str] = {}
_PREPARED = "rs-prepared"  # the signature memo's kind of the kept Prepared handles (prepared(), the launch path)


def _device_str(t: torch.Tensor) -> str:
    """str(t.device) ("cuda:0", "cpu"), the CUDA spellings kept per index: str(t.device) builds a device
    object and formats it, per tensor and call."""
    if not t.is_cuda:
        return str(t.device)
    index = t.get_device()
    name = _CUDA_DEVICE_NAMES.get(index)
    if name is None:
        name = _CUDA_DEVICE_NAMES[index] = str(t.device)
    return name


def _import_module():
    import importlib

    return importlib.import_module(MODULE)


def _prepare_env(tc) -> None:
    """Point cuTile-rs at the pinned tileiras before its first JIT (it reads these at compile time)."""
    toolchain.activate()  # bin first on PATH, CUDA_HOME/CUDA_PATH removed
    if tc.root is not None:
        os.environ.setdefault("CUTILE_TILEIRAS_PATH", str(tc.bin_dir / "tileiras"))
        # cuTile-rs also derives the toolkit (tileiras' bytecode version) from CUDA_TOOLKIT_PATH.
        os.environ.setdefault("CUDA_TOOLKIT_PATH", str(tc.root))


class CuTileRsBackend(Backend):
    name = "cutile_rs"
    language = "cuTile-rs"
    device_type = "cuda"
    raw_calls_checked = True  # the native module checks every tensor itself (a raw call can't go out of bounds)

    def __init__(self):
        self._first_call: dict[str, float] = {}
        try:
            self._mod = _import_module()
            self._import_error = None
        except ImportError as exc:
            self._mod, self._import_error = None, exc

    # ---- availability ---------------------------------------------------------------------------
    def available(self):
        if self._mod is None:
            return False, f"extension not built: run make build-rust ({self._import_error})"
        fields = getattr(self._mod, "TENSOR_FIELDS", 4)
        if fields != TENSOR_FIELDS:
            return False, (f"extension built from older sources (tensors of {fields} fields, this adapter sends "
                           f"{TENSOR_FIELDS}: each tensor's dtype and device): rebuild with make build-rust")
        prepared = getattr(self._mod, "PREPARED", 0)
        if prepared != PREPARED:
            return False, (f"extension built from older sources (PREPARED={prepared}, this adapter launches "
                           f"through prepare() version {PREPARED}): rebuild with make build-rust")
        if not torch.cuda.is_available():
            return False, "no CUDA GPU"
        tc = toolchain.find()
        arch = toolchain.device_arch()
        ok, why = tc.can_target(arch)
        if not ok:
            return False, why
        _prepare_env(tc)
        return True, f"{why}; {torch.cuda.get_device_name()}"

    def state_when_unavailable(self):
        return "not built" if self._mod is None else "built"

    def implementations(self) -> dict[str, Callable]:
        ops = self._mod.ops_implemented() if self._mod is not None else OP_NAMES
        return {op: self._make(op) for op in ops if op in OP_NAMES}

    def missing(self):
        have = self.implementations()
        return {op: "not implemented in cuTile-rs yet" for op in OP_NAMES if op not in have}

    def dtypes(self, op):
        from tilerosetta.specs import get_spec

        return get_spec(op).dtypes

    # ---- calls ----------------------------------------------------------------------------------
    def request(self, op: str, tensors: tuple[torch.Tensor, ...], params: dict[str, Any]):
        """The plain arguments Rust receives (also used by the CPU tests of the validation path). Runs on
        every call: what depends only on the op (argument names, param declarations) is worked out once."""
        spec, names, decls = self._op_layout(op)
        t0 = tensors[0]
        dtype = t0.dtype
        scalars = {}
        for key, decl in decls:  # every spec param, as a float (causal as 0/1, scale resolved here)
            if key not in params:
                raise TileRosettaError(op, self.name, key, "missing parameter")
            value = params[key]
            bad = decl.problem(value)  # the raw path skips BoundOp: the spec's rule again, never float("1e-5")
            if bad:
                raise bad[0](op, self.name, key, bad[1])
            if key == "scale" and value is None:
                value = 1.0 / math.sqrt(t0.shape[-1])
            scalars[key] = float(value)
        device = t0.get_device() if t0.is_cuda else 0
        # Every tensor's own dtype and device go with it: Rust refuses any that differ from the launch's
        # (a raw call that skipped BoundOp must not read or write out of bounds, nor fault on a host pointer).
        # shape (a torch.Size) and stride() are tuples of ints: Rust reads any sequence of ints (no list copy).
        arrays = [(n, t.data_ptr(), t.shape, t.stride(), dtype_name(t.dtype), _device_str(t))
                  for n, t in zip(names, tensors)]
        # Only what differs from the crate's own table (valid tuned entry, forced keys on top): Rust resolves
        # its builtin default from the call itself (rust/src/config.rs `resolve`) and merges these over it.
        overrides = self.config_overrides(op, dtype, spec.dims_of(tensors))
        config = {k: int(v) for k, v in overrides.items()} if overrides else {}
        return (op, dtype_name(dtype), device, current_stream_handle(t0), arrays, scalars, config)

    def prepared(self, op: str, tensors: tuple[torch.Tensor, ...], params: dict[str, Any]):
        """The extension's Prepared handle for this call signature (op; each tensor's dtype, shape, strides and
        CUDA device; each param's type and value): made by prepare() from request() on the first call of the
        signature (which validates it as a launch would: Rust's ValueError/TypeError as they are) and kept in
        config_for's memo (so set_config and a changed tuned table drop it). None for a call that is not kept
        (a host tensor, which Rust refuses by its device; an unhashable param): such a call goes through
        launch() with its whole request every time. Memory safety: a handle launches the extents it was
        validated with, so it is only ever given the pointers of tensors of its own signature (the key)."""
        memo, key, kept = self.signature_memo(_PREPARED, op, tensors, params)
        return kept[0] if kept is not _NO_PLAN else self._prepare(op, tensors, params, memo, key)[0]

    def _prepare(self, op: str, tensors, params, memo, key):
        """(Prepared handle or None, request) of a call whose signature has no handle yet (see prepared())."""
        req = self.request(op, tensors, params)  # names what is wrong with a call of something else
        if memo is None or not all(t.is_cuda for t in tensors):
            return None, req
        prepare = getattr(self._mod, "prepare", None)
        if prepare is None:  # a call through implementations() that skipped available()
            raise BackendUnavailable(self.name, "extension built from older sources (no prepare()): rebuild "
                                                "with make build-rust")
        prepared = prepare(*req)
        # (handle, its device index): a kept call asks torch for that device's current stream.
        self.keep(key, (prepared, req[2]))
        return prepared, req

    def _op_layout(self, op: str):
        """(spec, argument names, ((param, declaration), ...)) of op, kept per op."""
        layouts = self.__dict__.setdefault("_layouts", {})
        layout = layouts.get(op)
        if layout is None:
            spec = get_spec(op)
            layout = layouts[op] = (spec, tuple(spec.inputs) + tuple(spec.outputs), tuple(spec.params.items()))
        return layout

    def _make(self, op: str) -> Callable:
        def fn(*tensors, **params):
            try:
                memo, key, kept = self.signature_memo(_PREPARED, op, tensors, params)
                if kept is not _NO_PLAN:  # this signature launched before: its JIT compile is behind it
                    kept[0].launch([t.data_ptr() for t in tensors], _raw_stream(kept[1]))
                    return
                prepared, req = self._prepare(op, tensors, params, memo, key)
                if prepared is None:
                    run, args = self._mod.launch, req
                else:
                    run, args = prepared.launch, ([a[1] for a in req[4]], req[3])
                first = f"{op}/{req[1]}"
                if first in self._first_call:
                    run(*args)
                    return
                # cuTile-rs JIT-compiles on the host inside the first launch of a specialisation, so timing
                # the call (no device sync needed) measures Tile IR generation + tileiras + module load.
                _prepare_env(toolchain.find())  # also when called without backend.op()'s availability check
                t0 = time.perf_counter()
                run(*args)
                self._first_call[first] = time.perf_counter() - t0
            except (ValueError, TypeError) as exc:  # Rust's argument checks (args.rs), or request() on junk
                raise native_refusal(op, self.name, exc) from exc

        fn.__name__ = op
        return fn

    def first_call_seconds(self) -> dict[str, float]:
        """Host time of the first call per "op/dtype" in this process: mostly the JIT compile of that
        kernel (a later call with a new row width N, head dim or tile config compiles again)."""
        return dict(self._first_call)

    def limits(self, op):
        # args.rs refuses tensors beyond i32 (cuTile-rs shapes and strides are i32). A folded grid has one
        # block per tile, <= the element count, so within grid x's 2^31 - 1 (ops::check_grid says so too).
        text = super().limits(op)
        if op in GRID_FOLDS:
            text += f"; {GRID_FOLDS[op]} > 65535 folds the tile grid into grid x (no 65535 limit)"
        return text

    # ---- tuning ---------------------------------------------------------------------------------
    def config_space(self, op, dtype):
        if self._mod is None:
            return []
        return self._mod.config_space(op, dtype_name(dtype))

    def builtin_config(self, op, dtype, dims):
        if self._mod is None:
            return {}
        return self._mod.default_config(op, dtype_name(dtype), {k: int(v) for k, v in dims.items()})

    def check_config(self, op, dtype, config):
        """Known knobs (Backend's rule) holding non-negative ints; the value rules (tile sizes powers of two, OCC
        any count up to 32, W a power of two) are Rust's `resolve`, which refuses a bad value at launch naming it."""
        if self._mod is not None:
            super().check_config(op, dtype, config)
        bad = {k: v for k, v in config.items() if not isinstance(v, int) or isinstance(v, bool) or v < 0}
        if bad:
            raise ValueError(f"{self.name}.{op}: config values must be non-negative ints, got {bad}")

    def versions(self):
        v = {}
        if self._mod is not None:
            v.update({f"{k}": str(x) for k, x in self._mod.versions().items()})
        tc = toolchain.find()
        if tc.tileiras_version:
            v["tileiras"] = tc.version_str()
        return v
