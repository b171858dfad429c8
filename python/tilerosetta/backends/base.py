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
  * for tile configurations, only declarations: `builtin_config`, `config_space`, `check_config`. The
    tuned table, forced configs and their validation are Backend's, once (see "configuration" below).

`op(name)` returns a BoundOp that validates every argument against the op spec before the raw call,
so bad inputs are refused the same way, with the same message shape, on every backend.
"""

from __future__ import annotations

import warnings
from functools import cached_property, lru_cache
from typing import Any, Callable

import torch

from tilerosetta import tuning as _tuning  # stdlib-only module; imported here, not per call (~0.5 µs each)
from tilerosetta.errors import BackendUnavailable, OpMissing, TileRosettaError, runtime_failure
from tilerosetta.specs import OP_NAMES, dtype_name, get_spec


PLAN_CACHE_SIZE = 256  # validated call signatures kept per op (a model uses a few dozen shapes)


class _ValidatedOp:
    """What BoundOp and ReturningOp share: the spec's validation, run once per call signature (each tensor's
    type, shape, strides, dtype, device; each param's type and value) and kept, since a decode loop calls
    the same shapes thousands of times and the checks cost more host time than the launch (issue 14 item
    7); and every failure from the language runtime named with op and backend."""

    with_outputs = True  # the call passes the outputs (destination form)
    arity_word = "tensors"

    def __init__(self, backend: "Backend", op: str, fn: Callable):
        self.backend, self.spec, self.fn = backend, get_spec(op), fn
        self.names = tuple(self.spec.inputs) + (tuple(self.spec.outputs) if self.with_outputs else ())
        # signature -> (params with defaults, each tensor's byte length: validated tensors are contiguous)
        self._plans: dict[tuple, tuple[dict[str, Any], tuple[int, ...]]] = {}

    def _validate(self, tensors, params) -> dict[str, Any]:
        """The full check of one call; returns the params with defaults."""
        self.spec.validate(self.backend.name, self.backend.device_type, dict(zip(self.names, tensors)), params,
                           self.backend.dtypes(self.spec.name), with_outputs=self.with_outputs)
        return self.spec.full_params(params)

    def _checked(self, tensors, params) -> dict[str, Any]:
        """Refuses a bad call (TileRosettaError); returns the params with defaults."""
        spec, name = self.spec, self.backend.name
        if len(tensors) != len(self.names):
            raise TileRosettaError(spec.name, name, None, f"expected {len(self.names)} {self.arity_word} "
                                                          f"({', '.join(self.names)}), got {len(tensors)}")
        try:
            # List comprehensions, not generator expressions: this runs on every call, and a genexpr's frame
            # costs more than the tuples themselves (~0.8 µs of ~2 here, CPU-measured).
            key = (self.backend.device_type,
                   tuple([(type(t), t.shape, t.stride(), t.dtype, t.device) for t in tensors]),
                   tuple([(k, type(v), v) for k, v in params.items()]) if params else ())
            plan = self._plans.get(key)
        except (AttributeError, TypeError):  # not tensors, or unhashable params: the full check names it
            return self._validate(tensors, params)
        if plan is None:
            full = self._validate(tensors, params)
            if len(self._plans) >= PLAN_CACHE_SIZE:
                self._plans.clear()
            self._plans[key] = (full, self._overlap_pairs(tensors))
            return full
        full, pairs = plan
        if pairs:  # what depends on the addresses is checked on every call: (output, other) byte ranges
            ptrs = [t.data_ptr() for t in tensors]
            for i, j, size_i, size_j, same_ok in pairs:
                pi, pj = ptrs[i], ptrs[j]
                if same_ok and pi == pj:  # a declared in-place pair as the very same tensor
                    continue
                if pi < pj + size_j and pj < pi + size_i:  # shared bytes: the full check
                    bad = spec.overlap(dict(zip(self.names, tensors)))  # names it (or allows in place)
                    if bad:
                        raise TileRosettaError(spec.name, name, *bad)
        return full

    def _overlap_pairs(self, tensors) -> tuple[tuple[int, int, int, int, bool], ...]:
        """The spec's (output, other argument) pairs on one device, with their byte lengths (validated
        tensors are contiguous) and whether the spec lets them be the very same tensor (inplace_ok, and the
        shapes of this signature agree: then equal addresses mean the same tensor, accepted with no full
        check, as a decode step's in-place rope is on every call): the ranges checked on every call; none
        when the call passes no outputs."""
        if not self.with_outputs:
            return ()
        sizes = [t.numel() * t.element_size() for t in tensors]
        names, allowed = self.names, self.spec.inplace_ok
        return tuple((i, j, sizes[i], sizes[j], names[j] in allowed.get(names[i], ()) and
                      tensors[i].shape == tensors[j].shape and sizes[i] == sizes[j])
                     for i, j in self.spec.overlap_pairs()
                     if tensors[i].device == tensors[j].device and sizes[i] and sizes[j])

    def _run(self, *args, **full):
        try:
            return self.fn(*args, **full)
        except TileRosettaError:
            raise
        except Exception as exc:  # name op and backend on every failure from the language runtime
            raise runtime_failure(self.spec.name, self.backend.name, exc) from exc


class BoundOp(_ValidatedOp):
    """One op of one backend in destination form, validated (once per call signature; the overlap of an
    output with another argument on every call) before the raw call."""

    def _validate(self, tensors, params) -> dict[str, Any]:
        full = super()._validate(tensors, params)
        limit = self.backend.element_limit(self.spec.name)
        if limit is not None:
            for n, t in zip(self.names, tensors):
                if t.numel() > limit:
                    raise TileRosettaError(self.spec.name, self.backend.name, n, (
                        f"{t.numel()} elements exceed this backend's limit of {limit} per tensor (its kernels "
                        f"index with 32-bit integers); see `tilerosetta list --limits`"))
        return full

    def __call__(self, *tensors: torch.Tensor, **params: Any):
        full = self._checked(tensors, params)
        try:  # _run's body, inlined: one Python frame less on the hot path
            return self.fn(*tensors, **full)
        except TileRosettaError:
            raise
        except Exception as exc:  # name op and backend on every failure from the language runtime
            raise runtime_failure(self.spec.name, self.backend.name, exc) from exc


INT32_ELEMENTS = 2**31 - 1  # the element limit of kernels that index with 32-bit integers


DESTINATION = "destination"  # fn(*inputs, *outputs, **params) writes into buffers the caller allocated
RETURNS = "returns"  # fn(*inputs, **params) -> output(s) it allocated itself (how torch users call torch)


class ReturningOp(_ValidatedOp):
    """One op of a baseline or peer in its returning form, validated like a BoundOp (inputs only: the callee
    allocates the outputs)."""

    with_outputs = False
    arity_word = "input tensors"

    def __call__(self, *tensors: torch.Tensor, **params: Any):
        return as_outputs(self.spec, self.backend.name, self._run(*tensors, **self._checked(tensors, params)))


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


_NO_PLAN = object()  # launch_plan: a signature not seen yet (None = seen, not kept)
_PLAIN = (int, float, bool, type(None))


def remember(memo: dict, key, value) -> None:
    """Keep value under key in a signature memo (Backend.signature_memo), which random shapes must not grow
    without bound."""
    if len(memo) >= 4096:
        memo.clear()
    memo[key] = value


def _launch_template(launches: list, tensors: tuple):
    """((launch with None for each tensor argument, ((arg index, tensor position), ...)), ...), or None when
    the launches hold anything else than the call's own tensors and plain values (see launch_plan)."""
    ids = [id(t) for t in tensors]
    if len(set(ids)) != len(ids):  # a tensor passed twice: its position would be ambiguous
        return None
    out = []
    for lx in launches:
        args, slots = list(lx.args), []
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                if id(a) not in ids:  # a view or a workspace made for this call
                    return None
                args[i] = None
                slots.append((i, ids.index(id(a))))
            elif type(a) not in _PLAIN:
                return None
        out.append((lx._replace(args=tuple(args)), tuple(slots)))
    return tuple(out)


# torch's current CUDA stream as a raw handle (cudaStream_t as an int), from the device index: what Triton's
# own driver (triton/backends/driver.py) and Inductor's generated code call. torch.cuda.current_stream(device)
# .cuda_stream gives the same handle but parses the device and builds a Stream object on every call (~10 µs
# under cProfile, several µs of every launch: issue 14 item 7).
try:
    from torch._C import _cuda_getCurrentRawStream as _raw_stream
except ImportError:  # a torch built without CUDA
    def _raw_stream(index: int) -> int:
        return torch.cuda.current_stream(index).cuda_stream


# torch's current CUDA device index, without torch.cuda.current_device()'s Python layer (launch paths ask
# on every call whether the device they planned for is still current).
try:
    from torch._C import _cuda_getDevice as current_device_index
except ImportError:  # a torch built without CUDA
    current_device_index = torch.cuda.current_device


def current_stream_handle(t: torch.Tensor) -> int:
    """The raw handle of torch's current stream on t's CUDA device (what a launch must use so it is ordered
    with torch's own work and captured by a CUDA graph); 0 when t is not a CUDA tensor (a native layer then
    refuses the tensor itself). t being a CUDA tensor means torch's CUDA state is initialised already."""
    return _raw_stream(t.get_device()) if t.is_cuda else 0


_STREAMS: dict[tuple[int, int], torch.cuda.Stream] = {}


def current_stream(t: torch.Tensor) -> torch.cuda.Stream:
    """torch's current stream on t's CUDA device as a torch Stream object (for runtimes that take one, such
    as cuda.tile's launch), kept per (device, raw handle): the object only carries the handle, so the one
    built when this handle was first current stands for it on later calls (same handle, same stream). A
    tensor off CUDA gets torch's own answer (which refuses it), as before this shortcut."""
    if not t.is_cuda:
        return torch.cuda.current_stream(t.device)
    index = t.get_device()
    key = (index, _raw_stream(index))
    stream = _STREAMS.get(key)
    if stream is None:
        stream = torch.cuda.current_stream(index)
        if stream.cuda_stream != key[1]:  # never cache an object that names another stream
            return stream
        if len(_STREAMS) >= 64:  # streams made per call (a user's pool) must not grow it without bound
            _STREAMS.clear()
        _STREAMS[key] = stream
    return stream


H200_SM_COUNT = 132  # what sm_count() answers without a GPU, so tables that depend on it read the same on a CPU


@lru_cache(maxsize=None)
def _sm_count_of(device: int) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def sm_count(default: int = H200_SM_COUNT, device=None) -> int:
    """Streaming multiprocessors of `device` (a torch.device, 'cuda:N' or index; None: the current CUDA
    device) from torch's multi_processor_count, or `default` for a CPU device, where there is no GPU (or
    torch cannot say)."""
    try:
        if isinstance(device, str):
            device = torch.device(device)
        if isinstance(device, torch.device):
            if device.type != "cuda":
                return default
            device = device.index
        if torch.cuda.is_available():
            return _sm_count_of(torch.cuda.current_device() if device is None else device)
    except Exception:  # a driver problem must not break a config lookup
        pass
    return default


# One knob, its name in each language. The names stay the languages' own: C++ and Rust spell them as
# template / const-generic parameters (cpp/include/tr_kernels.h, rust/src/config.rs), Julia reads
# julia/tiles.toml, Triton's warps/stages are its launch keywords, and the committed tuned_configs.json
# holds cutile_py / cutile_rs names, so a rename would mean translating on load for no behaviour gained.
# This table is the mapping (shared_tests/test_config_mechanism.py checks each name against the
# backend's config space, so it cannot go stale). "-" = no such knob in that language.
_KNOB_COLUMNS = ("cutile_py", "triton", "tile_cpp", "cutile_rs", "cutile_jl")
_KNOB_ROWS = (
    # knob                       cutile_py   triton       tile_cpp  cutile_rs  cutile_jl
    ("output tile rows (M)",     "BM",       "BLOCK_M",   "TM",     "BM",      "tile_m"),
    ("output tile columns (N)",  "BN",       "BLOCK_N",   "TN",     "BN",      "tile_n"),
    ("reduction step (K)",       "BK",       "BLOCK_K",   "TK",     "BK",      "tile_k"),
    ("elementwise block",        "TILE",     "BLOCK",     "TILE",   "BLOCK",   "tile"),
    ("attention query rows",     "BM",       "BLOCK_M",   "TQ",     "BM",      "tile_m"),
    ("attention keys per step",  "BN",       "BLOCK_N",   "TK",     "BN",      "tile_n"),
    ("row-op rows per block",    "-",        "-",         "TM",     "BR",      "tile_m"),
    ("rope positions per block", "TS",       "BLOCK_R",   "TS",     "BS",      "tile_s"),
    ("worker warps",             "WARPS",    "num_warps", "W",      "W",       "-"),
    ("occupancy (CTAs per SM)",  "OCC",      "-",         "OCC",    "OCC",     "-"),
    ("L2 swizzle group",         "GROUP_M",  "GROUP_M",   "-",      "-",       "-"),
)
KNOB_NAMES: dict[str, dict[str, str]] = {row[0]: dict(zip(_KNOB_COLUMNS, row[1:])) for row in _KNOB_ROWS}


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

    def unsupported_case(self, op: str, dims: dict[str, int], params: dict[str, Any]) -> str | None:
        """Why a valid case of op lies outside what this backend covers (a peer bound for a subset of the
        spec, e.g. self-attention only), or None. The benchmark records such a case as "unsupported" with
        this reason instead of timing it; a call still gets the refusal from the op itself."""
        return None

    def element_limit(self, op: str) -> int | None:
        """Most elements one tensor of op may have (None: 64-bit offsets, no limit of our own). A bigger
        tensor is refused before launch by BoundOp, with the limit in the message."""
        return INT32_ELEMENTS

    def limits(self, op: str) -> str:
        """One line for `tilerosetta list --limits`: the sizes op accepts on this backend."""
        limit = self.element_limit(op)
        return "no element limit (64-bit offsets)" if limit is None else f"<= {limit} elements per tensor"

    # ---- configuration (tile sizes, warps, hints): one mechanism for every backend ----------------
    # An adapter declares three things and nothing more:
    #   builtin_config(op, dtype, dims)  its own table: what a call uses when nothing is tuned or forced
    #   config_space(op, dtype)          what `tilerosetta sweep` tries
    #   check_config(op, dtype, config)  the rules of its space: raises ValueError naming the bad knob
    # Everything else is here, once. The one merge policy:
    #   default_config = builtin_config with the committed tuned entry (tuned_configs.json) merged over it,
    #                    if that merged config passes check_config; otherwise the builtin one, and a
    #                    warning (once per entry) names op, backend, config and why.
    #   config_for     = default_config with the keys forced by set_config on top.
    # Why merge rather than replace: a tuned entry written before a knob existed still gets that knob's
    # default, so the table only ever says what the sweep changed. Why validate: a stale entry (a knob
    # renamed or retired, a C++ config no longer instantiated) must never reach a compiler or fail every
    # call; it is ignored loudly and the backend runs as if it had no entry.
    # A Python language may keep its tables in one pure-Python module instead of overriding the three
    # declarations below: config_space(op, dtype_name), default_config(op, dtype_name, dims) and
    # check_config(op, config) (kernels/cutile/config.py, kernels/cute_dsl/config.py).
    config_tables = None

    def config_space(self, op: str, dtype: torch.dtype) -> list[dict[str, Any]]:
        """Configurations a sweep may try for op/dtype; [] = not tunable."""
        if self.config_tables is not None:
            get_spec(op)
            return self.config_tables.config_space(op, dtype_name(dtype))
        return []

    def config_refusal(self, op: str, dtype: torch.dtype, dims: dict[str, int],
                       config: dict[str, Any]) -> str | None:
        """Why a config of the space cannot run a call of these dims (a sweep leaves it out), else None."""
        return None

    def builtin_config(self, op: str, dtype: torch.dtype, dims: dict[str, int]) -> dict[str, Any]:
        """The adapter's own table for op/dtype/dims (peers: a note on how the call is made)."""
        if self.config_tables is not None:
            return self.config_tables.default_config(op, dtype_name(dtype), dims)
        return {}

    def check_config(self, op: str, dtype: torch.dtype, config: dict[str, Any]) -> None:
        """Refuse a (possibly partial) config this backend cannot run. Default: every key must be a knob
        of the space (and the config tables' rules, where the adapter has them). Adapters add their value
        rules (powers of two, instantiated kernels, ...)."""
        if self.config_tables is not None:
            self.config_tables.check_config(op, config)
            return
        known = {k for c in self.config_space(op, dtype) for k in c}
        unknown = sorted(set(config) - known)
        if unknown:
            raise ValueError(f"{self.name}.{op}: unknown config key(s) {unknown}; expected some of {sorted(known)}")

    def tuned_config(self, op: str, dtype: torch.dtype, dims: dict[str, int]) -> dict[str, Any] | None:
        """The committed sweep result for op/dtype, this GPU's arch and the size class of dims, or None
        (as written: default_config validates it)."""
        if self.device_type != "cuda":
            return None
        from tilerosetta import tuning

        arch = self.__dict__.get("_arch")
        if not arch:  # asked again until a device answers (never caches "no GPU")
            from tilerosetta import toolchain

            arch = toolchain.device_arch()
            if arch:
                self._arch = arch
        return tuning.lookup(self.name, op, dtype, arch, dims)

    def _valid_tuned(self, op: str, dtype: torch.dtype, dims: dict[str, int]) -> dict[str, Any]:
        """The tuned entry if its merge over the builtin table passes check_config, else {} (warned once).
        Memoised per entry and dims: a launch path may ask on every call."""
        tuned = self.tuned_config(op, dtype, dims)
        if not tuned:
            return {}
        cache = self.__dict__.setdefault("_tuned_checked", {})
        key = (op, dtype, tuple(sorted(dims.items())), tuple(sorted(tuned.items())))
        if key not in cache:
            try:
                self.check_config(op, dtype, {**self.builtin_config(op, dtype, dims), **tuned})
                cache[key] = dict(tuned)
            except (KeyError, ValueError) as exc:
                warnings.warn(f"{self.name}.{op}: ignoring tuned config {tuned} for {dtype} (tuned_configs.json): "
                              f"{exc}; using the built-in default", RuntimeWarning, stacklevel=3)
                cache[key] = {}
        return dict(cache[key])

    def default_config(self, op: str, dtype: torch.dtype, dims: dict[str, int]) -> dict[str, Any]:
        """What an ordinary call uses: builtin_config with the valid tuned entry merged over it."""
        get_spec(op)
        return {**self.builtin_config(op, dtype, dims), **self._valid_tuned(op, dtype, dims)}

    def forced_config(self, op: str, dtype: torch.dtype) -> dict[str, Any]:
        """The keys set_config forced for op/dtype ({} = none)."""
        return dict(self.__dict__.get("_forced_configs", {}).get((op, dtype), {}))

    def config_overrides(self, op: str, dtype: torch.dtype, dims: dict[str, int]) -> dict[str, Any]:
        """Only what differs from the builtin table: the valid tuned entry with the forced keys on top. For
        a native layer that resolves its own builtin table from the call (cutile_rs). Memoised like
        config_for."""
        return self._memoised("overrides", op, dtype, dims, lambda: {
            **self._valid_tuned(op, dtype, dims), **self.forced_config(op, dtype)})

    def config_for(self, op: str, dtype: torch.dtype, dims: dict[str, int]) -> dict[str, Any]:
        """What a call with these dims uses: default_config with the forced keys on top. Launch paths ask
        on every call, so the answer is memoised per (op, dtype, dims) until set_config or the tuned table
        changes (tuning.generation; tuning.lookup is in the key too, as tools and tests may swap it)."""
        return self._memoised("config", op, dtype, dims, lambda: {
            **self.default_config(op, dtype, dims), **self.forced_config(op, dtype)})

    def _memoised(self, kind: str, op: str, dtype: torch.dtype, dims: dict[str, int], compute) -> dict[str, Any]:
        return dict(self._memo_value(kind, op, dtype, dims, compute))  # a copy: callers may change theirs

    def _memo_value(self, kind: str, op: str, dtype: torch.dtype, dims: dict[str, int], compute):
        """compute() kept per (kind, op, dtype, dims) until set_config or the tuned table changes (a None
        answer is not kept). What config_for and the adapters' launch-path lookups (tile_cpp's kernel
        name) share."""
        token, memo = self._current_memo()
        key = (kind, op, dtype, tuple(dims.items()))
        value = memo.get(key)
        if value is None:
            value = compute()
            if len(memo) >= 4096:  # random shapes must not grow it without bound
                memo.clear()
            memo[key] = value
            if token != (_tuning.generation(), _tuning.lookup):  # the lookup itself saw a newer table
                self.__dict__.pop("_config_memo", None)
        return value

    def _current_memo(self) -> tuple[tuple, dict]:
        """(token, the memo dict) valid for the tuned table and forced configs as they are now."""
        token = (_tuning.generation(), _tuning.lookup)
        memo = self.__dict__.get("_config_memo")
        if memo is None or memo[0] != token:
            memo = self._config_memo = (token, {})
        return token, memo[1]

    def signature_memo(self, kind: str, op: str, tensors: tuple, params: dict[str, Any], aligned: bool = False):
        """(memo, key, what the memo holds for this call signature or _NO_PLAN): the per-signature store of the
        launch paths (launch_plan; cutile_rs's requests; cute_dsl's launches). The signature: kind and op, each
        tensor's dtype, shape, strides and CUDA index (get_device(): -1 off CUDA), with `aligned` whether its
        data pointer is 16-byte aligned (for a plan that picks a kernel by it), and each param's type and
        value. The memo is config_for's, so set_config and a changed tuned table drop what it holds; store
        with keep(). (None, None, _NO_PLAN) when the call passes something else than tensors or an
        unhashable param: such a call is planned every time, and the planner names what is wrong."""
        try:
            sig = ([(t.dtype, t.shape, t.stride(), t.get_device(), t.data_ptr() & 15) for t in tensors] if aligned
                   else [(t.dtype, t.shape, t.stride(), t.get_device()) for t in tensors])
            key = (kind, op, tuple(sig), tuple([(k, type(v), v) for k, v in params.items()]) if params else ())
            memo = self._current_memo()[1]
            return memo, key, memo.get(key, _NO_PLAN)
        except (AttributeError, TypeError):
            return None, None, _NO_PLAN

    def keep(self, key, value) -> None:
        """remember() a plan under its signature_memo key, in the memo as it is now: planning runs config_for,
        whose first read of a tuned table (or of a newer one) drops the memo signature_memo returned, and a
        plan stored there would be lost (every backend planned its first signature twice on the H200)."""
        remember(self._current_memo()[1], key, value)

    def launch_plan(self, op: str, tensors: tuple, params: dict[str, Any], prepare: Callable[[], list]):
        """The launches of one call as [(launch, args)], kept per call signature (issue 14 item 7).

        prepare() (the adapter's planner applied to this call: config_for, then the kernel module's
        prepare) returns a list of launch NamedTuples with an `args` field. Every argument that is one of
        the call's tensors is kept as its position, the rest as the values themselves: a later call of the
        same signature (signature_memo: each tensor's dtype, shape, strides and device, each param) gets
        the same launches with its own tensors, and no planner runs. Kept only when each argument is one of
        the call's tensors or a plain int, float, bool or None, and the call passes no tensor twice: a plan
        holding a view, a workspace or a descriptor depends on more than the signature, so such a call
        runs prepare() every time. The plans live in config_for's memo, so set_config and a changed tuned
        table drop them too. `launch.args` of a kept plan holds None where a tensor goes: use `args`."""
        memo, key, plan = self.signature_memo("launch", op, tensors, params)
        if memo is None:  # not tensors, unhashable params: no plan, the call says
            return [(lx, lx.args) for lx in prepare()]
        if plan is _NO_PLAN:  # first call of this signature: plan it and keep the template if it is one
            launches = prepare()
            self.keep(key, _launch_template(launches, tensors))
            return [(lx, lx.args) for lx in launches]
        if plan is None:  # this signature's launches depend on more than the signature
            return [(lx, lx.args) for lx in prepare()]
        out = []
        for lx, slots in plan:
            if slots:
                args = list(lx.args)
                for i, j in slots:
                    args[i] = tensors[j]
                out.append((lx, args))
            else:
                out.append((lx, lx.args))
        return out

    def set_config(self, op: str, dtype: torch.dtype, config: dict[str, Any] | None) -> None:
        """Force config's keys for later calls of op/dtype (None or {} restores the default). Sweeps use
        this. Refused (ValueError naming backend, op and knob) when check_config refuses it."""
        get_spec(op)
        forced = self.__dict__.setdefault("_forced_configs", {})
        self.__dict__.pop("_config_memo", None)
        if not config:
            forced.pop((op, dtype), None)
            return
        self.check_config(op, dtype, dict(config))
        forced[(op, dtype)] = dict(config)

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
        # One BoundOp per op while the implementation stays the same object, so its validated signatures
        # serve every caller (tilerosetta.ops calls op() on each call).
        known = self.__dict__.setdefault("_bound_ops", {})
        bound = known.get(name)
        if bound is None or bound.fn is not impls[name]:
            bound = known[name] = BoundOp(self, name, impls[name])
        return bound

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
