"""The `tile_cpp` backend: CUDA Tile C++ kernels (cpp/kernels) through the pybind11 module
`tilerosetta_tile_cpp`.

The kernels are compiled at build time (`pip install -e .` / `make build-python`) by the pinned nvcc 13.4
into cubins for sm_80/90/100/120 and embedded in the module; at run time the module loads the cubin of
the current device through the CUDA driver API and launches on torch's current stream. No compiler
runs at call time.

Tile sizes are template arguments: the module holds a small table of instantiated configs per op and
dtype (cpp/include/tr_kernels.h). This adapter chooses among them: DEFAULTS below (by op, dtype and
problem size, merged with tuned_configs.json by Backend), or whatever `set_config` forced (sweeps). Some configs carry compiler hints
as keys too: OCC (occupancy) for the row ops and rope, W (worker warps) for the row ops and matmul/bmm/attention.

Each config is compiled twice, generic and `_a16` (pointers 16-byte aligned, row strides multiples of
16 bytes: TMA and 128-bit loads); the module picks the twin per call from the tensors, so the adapter
never has to (cpp/README.md). A "rows" family config (softmax and the norms) has two entry points, the
one-tile `<name>` for rows of N <= TN and the multi-chunk `<name>_loop` for wider rows, and the module
picks that per call too (row_entry below mirrors it for `tilerosetta inspect`); the one-tile body has a third
twin, `_exact`, for aligned calls whose every block's tile is whole, as silu_and_mul and rope have (exact_twin
below).
"""

from __future__ import annotations

import itertools
import os
from typing import Callable

import torch

from tilerosetta.backends.base import _NO_PLAN, Backend, current_stream_handle, sm_count
from tilerosetta.errors import native_refusal
from tilerosetta.kernels.attention_split import MIN_SPLIT_BLOCKS, packed_rows
from tilerosetta.specs import OP_NAMES, decode_panel, decode_tiles, dtype_name, get_spec

try:
    import tilerosetta_tile_cpp as _mod

    _IMPORT_ERROR = ""
except ImportError as exc:  # not built here (no tile-capable nvcc at build time) or not installed
    _mod = None
    _IMPORT_ERROR = (f"extension module tilerosetta_tile_cpp is not built ({exc}); build it with "
                     f"`make build-python` (needs the pinned nvcc 13.4 in .toolchain/)")

# TILEROSETTA_TILE_CPP_A16=0 makes every call use the generic (unaligned, no TMA) kernel bodies: an
# escape hatch should an _a16 kernel misbehave on a GPU; unset = the module picks per call.
_A16 = False if os.environ.get("TILEROSETTA_TILE_CPP_A16", "").strip() == "0" else None



def _row_default(dtype, dims, widest=8192):
    # A row that fits one chunk (N <= TN) is read once; the smallest such TN keeps registers low.
    # Short rows: several rows per block so a block still moves a useful amount of data.
    # Spills (cuobjdump --dump-resource-usage, sm_90) bound the single-read width: a 16384-wide fp32
    # row spills, so fp32 stops at 8192 (occupancy 2); the norms keep w (and b) beside the row and spill
    # at 16384 even in 16-bit, so the family default stops at 8192 (`widest`; softmax goes to 16384);
    # wider rows loop.
    # W 0: the compiler's 4 worker warps (the 8-warp configs are the sweep's to pick, tr_kernels.h).
    n = dims.get("N", 1 << 30)
    if n <= 512:
        return {"TM": 4, "TN": 512, "OCC": 4, "W": 0}
    if dtype == torch.float32:
        single = ((1024, 4), (4096, 4), (8192, 2))
    else:
        single = tuple(c for c in ((1024, 4), (4096, 4), (8192, 4), (16384, 2)) if c[0] <= widest)
    for tn, occ in single:
        if n <= tn:
            return {"TM": 1, "TN": tn, "OCC": occ, "W": 0}
    return {"TM": 1, "TN": 1024, "OCC": 4, "W": 0}


# The widest chunk that has the multi-chunk `_loop` entry (TR_ROW_LOOP_MAX_TN in cpp/include/tr_kernels.h says
# why wider ones have none); test_tile_cpp_module.py checks it against the built module's ROW_LOOP_MAX_TN.
ROW_LOOP_MAX_TN = 4096


def row_loop_refusal(op: str, config: dict, dims: dict) -> str | None:
    """Why a "rows" family config cannot run rows this wide (N > TN > ROW_LOOP_MAX_TN: no loop), else None."""
    if get_spec(op).family != "rows" or dims["N"] <= config["TN"] or config["TN"] <= ROW_LOOP_MAX_TN:
        return None
    return (f"rows of N={dims['N']} columns are wider than the config's tile (TN={config['TN']}), and the "
            f"multi-chunk loop is compiled only for TN <= {ROW_LOOP_MAX_TN} (cpp/include/tr_kernels.h)")


def row_entry(op: str, kernel: str, config: dict, dims: dict) -> str:
    """The entry point (symbol without `_a16`) the module launches for `kernel` on a call with these dims:
    for a "rows" family op `<kernel>_loop` (multi-chunk) when the row is wider than the tile (N > TN), else
    `<kernel>` (the one-tile body, which computes only the first TN columns); ValueError where that config
    has no loop. The module decides this itself (row_entry in cpp/src/ops.cpp); this copy is for tools that
    read a cubin without launching, and test_tile_cpp_module.py checks that the two agree."""
    if get_spec(op).family != "rows":
        return kernel
    why = row_loop_refusal(op, config, dims)
    if why:
        raise ValueError(f"tile_cpp.{op}: argument 'x': {why}")
    return kernel if dims["N"] <= config["TN"] else kernel + "_loop"


def exact_twin(op: str, config: dict, dims: dict) -> bool:
    """Whether a 16-byte aligned call of `op` with this config takes the `_exact` twin, unless the config's host
    key EXACT is 0: every block's tile whole (a "rows" family op's one-tile entry: N == TN and TM divides M;
    silu_and_mul: TM divides M and TN divides H; rope: TS divides S and TD divides D/2); compile-time extents, no
    bounds branches (cpp/kernels/common.cuh, row_tiles / tile_at). The module decides it itself (make_plan in
    cpp/src/ops.cpp); this copy is for tools that read a cubin without launching, checked against it by
    test_tile_cpp_module.py."""
    if not has_exact_twin(op) or config.get("EXACT", 1) != 1:
        return False
    if op == "rope":
        return dims["S"] % config["TS"] == 0 and (dims["D"] // 2) % config["TD"] == 0
    if dims["M"] % config["TM"]:
        return False
    if get_spec(op).family == "rows":
        return dims["N"] == config["TN"]
    return dims["H"] % config["TN"] == 0  # silu_and_mul


def _matmul_default(dtype, dims):
    # Decode (M <= 16, 16-bit): the weight is streamed once; the spec's decode panel (N 4096: 16 x 32, 128
    # blocks; N 14336: 16 x 128, 112 blocks), 256-deep K steps (H200 sweeps: bench/results/decode/).
    if dtype != torch.float32 and decode_tiles(dims):
        return {"TM": 16, "TN": decode_panel(dims.get("N", 4096)), "TK": 256, "W": 0, "P": 0}
    return _gemm_default(dtype, dims)


def _gemm_default(dtype, dims):
    # 16-bit: 128x256 tiles with 8 worker warps when there are enough of them to fill the SMs (the fastest
    # tile on the H200 at matmul 4096^3 and bmm 16x2048^3: bench/GAPS.md, tile_cpp); 64x64 for smaller
    # problems.
    m, n, bt, sms = dims.get("M", 1 << 20), dims.get("N", 1 << 20), dims.get("Bt", 1), sm_count()
    if dtype == torch.float32:
        big = -(-m // 128) * -(-n // 128) * bt >= sms
        return {"TM": 128, "TN": 128, "TK": 32, "W": 0, "P": 0} if big else {"TM": 64, "TN": 64, "TK": 32, "W": 0, "P": 0}
    if -(-m // 128) * -(-n // 256) * bt >= sms:
        return {"TM": 128, "TN": 256, "TK": 64, "W": 8, "P": 0}  # P 1: persistent blocks (a sweep option)
    return {"TM": 64, "TN": 64, "TK": 64, "W": 0, "P": 0}


def _attention_default(dtype, dims):
    # Two instantiated configs per head dim (cpp/include/tr_kernels.h): 16-row tiles when every row set holds
    # at most 16 rows (decode: a packed group of G = H / Hkv query heads, or S <= 16 alone), else 128 rows
    # (D 64 with W 8: tr_kernels.h says why).
    h, s = dims.get("H", 1), dims.get("S", 1 << 20)
    hkv = dims.get("Hkv", h)
    if ((h // hkv) * s if packed_rows(h, hkv, s, 16) else s) <= 16:
        return {"TQ": 16, "TK": 128, "W": 0, "OCC": 0}
    return {"TQ": 128, "TK": 64, "W": 8 if dims.get("D") == 64 else 0, "OCC": 0}


# op -> fn(dtype, dims) -> config (a subset of the template arguments; attention's D comes from the call).
# An op of the "rows" family (OpSpec.family) without an entry takes _row_default.
DEFAULTS: dict[str, Callable[[torch.dtype, dict], dict]] = {
    "vector_add": lambda dtype, dims: {"TILE": 4096 if dims.get("N", 1 << 30) >= 1 << 20 else 1024},
    # 16-bit 128 x 128: the H200 sweep's winner at 8192^2 and 16384^2 (bench/results/transpose/: 67.0 / 260 us
    # against 68.5 / 272 us for 64 x 64)
    "transpose": lambda dtype, dims: {"TM": 32, "TN": 32} if dtype == torch.float32 else {"TM": 128, "TN": 128},
    "softmax": lambda dtype, dims: _row_default(dtype, dims, widest=16384),  # no weights beside the row
    "silu_and_mul": lambda dtype, dims: {"TM": 4, "TN": 256, "AX": 0},
    # 16-bit: 32 positions at 4 CTAs/SM (OCC 8 caps at 64 registers and spills a little on sm_90;
    # the sweep can still pick it); fp32 tiles are twice the bytes, so 16 positions.
    "rope": lambda dtype, dims: {"TS": 16, "TD": 64, "OCC": 4} if dtype == torch.float32
    else {"TS": 32, "TD": 64, "OCC": 4},
    "matmul": _matmul_default,
    "bmm": _gemm_default,
    "attention": _attention_default,
}
CALL_FIXED = {"attention": ("D",)}  # template arguments fixed by the call's shapes, not tunable
# Config keys the module takes per call, not per kernel (prepare's `host`), by op or family: they pick or size
# the launch and compile nothing; the values a sweep tries, the first the default. attention's
# SPLIT_MIN_BLOCKS is split-KV's least key tiles per chunk (kernels/attention_split.py split_plan); EXACT (row
# ops, silu_and_mul, rope) says whether an aligned call whose every block's tile is whole takes the `_exact` twin
# (exact_twin above; 0 keeps `_a16`, which loads add_rms_norm's rows by TMA).
HOST_KEYS = {"attention": {"SPLIT_MIN_BLOCKS": (MIN_SPLIT_BLOCKS, 2, 1)}, "rows": {"EXACT": (1, 0)},
             "silu_and_mul": {"EXACT": (1, 0)}, "rope": {"EXACT": (1, 0)}}
# The values the module accepts for each host key (ops.cpp, check_host_keys): (least, most or None).
HOST_RANGE = {"SPLIT_MIN_BLOCKS": (1, None), "EXACT": (0, 1)}


def host_keys(op: str) -> dict:
    """HOST_KEYS of the op, else of its family."""
    return HOST_KEYS.get(op) or HOST_KEYS.get(get_spec(op).family or "", {})


def has_exact_twin(op: str) -> bool:
    """Whether op's kernels have an `_exact` twin: the ops whose host keys hold EXACT."""
    return "EXACT" in host_keys(op)


def split_host(op: str, config: dict) -> tuple[dict, dict]:
    """(the keys that name a kernel, the host-side keys of HOST_KEYS) of a config."""
    host = host_keys(op)
    return ({k: v for k, v in config.items() if k not in host}, {k: v for k, v in config.items() if k in host})


class TileCppBackend(Backend):
    name = "tile_cpp"
    language = "CUDA Tile C++"
    device_type = "cuda"
    raw_calls_checked = True  # the native module checks every tensor itself (a raw call can't go out of bounds)

    def __init__(self):
        self._kernels = _mod.kernels() if _mod else []

    # ---- availability ---------------------------------------------------------------------------
    def available(self):
        if _mod is None:
            return False, _IMPORT_ERROR
        if not hasattr(_mod, "prepare"):
            return False, "extension built from older sources (no prepare()): rebuild with make build-python"
        ok, why = _mod.driver_status()
        if not ok:
            return False, f"no CUDA GPU: {why}"
        if not torch.cuda.is_available():
            return False, "no CUDA GPU (torch.cuda.is_available() is False)"
        arch = _mod.device_arch(torch.cuda.current_device())
        if not self._arch_supported(arch):
            return False, f"device is {arch}; the module holds cubins for {', '.join(_mod.ARCHS)}"
        return True, f"{torch.cuda.get_device_name()} ({arch}); cubins for {', '.join(_mod.ARCHS)}"

    def state_when_unavailable(self):
        return "not built" if _mod is None else "built"

    @staticmethod
    def _arch_supported(arch: str) -> bool:
        # The module's rule: same arch, or an older minor of the same major (sm_86/89 run sm_80 SASS).
        cc = int(arch.removeprefix("sm_"))
        return any(int(a.removeprefix("sm_")) // 10 == cc // 10 and int(a.removeprefix("sm_")) <= cc
                   for a in _mod.ARCHS)

    # ---- ops ------------------------------------------------------------------------------------
    def _built_ops(self) -> set[str]:
        return {op for op, _dt, _arch, _size in _mod.cubins()} if _mod else set()

    def implementations(self):
        built = self._built_ops()
        return {op: self._make_fn(op) for op in OP_NAMES if op in built}

    def missing(self):
        if _mod is None:
            return {op: _IMPORT_ERROR for op in OP_NAMES}
        built = self._built_ops()
        return {op: "no cubin of this op in the module (not compiled: see the build log)"
                for op in OP_NAMES if op not in built}

    def dtypes(self, op):
        have = {k["dtype"] for k in self._kernels if k["op"] == op}
        return tuple(d for d in get_spec(op).dtypes if dtype_name(d) in have)

    def _make_fn(self, op: str):
        spec = get_spec(op)

        def fn(*tensors, **params):
            try:
                # One checked plan per call signature (incl. pointer alignment, which picks the _a16 twin): a
                # later call of it only hands its data pointers and stream to the module (issue 14 item 7).
                memo, key, prepared = self.signature_memo("cpp-launch", op, tensors, params, aligned=True)
                if prepared is _NO_PLAN:
                    dims = spec.dims_of(tensors)
                    kernel = self.kernel_for(op, tensors[0].dtype, dims)
                    host = self.host_config(op, tensors[0].dtype, dims)
                    # Positional arguments: pybind11's keyword matching costs more than the rest of the binding.
                    prepared = _mod.prepare(kernel, tensors, params, _A16, host)
                    if memo is not None:
                        self.keep(key, prepared)
                prepared.launch(tuple([t.data_ptr() for t in tensors]), current_stream_handle(tensors[0]))
            except (ValueError, TypeError, AttributeError) as exc:  # ops.cpp's checks; junk on the raw path
                raise native_refusal(op, self.name, exc) from exc

        fn.__name__ = op
        return fn

    def limits(self, op):
        # Every launch is one flat grid axis x (cpp/src/ops.cpp, issue 16): no 65535 limit of grid y/z.
        return super().limits(op) + " (the kernels index with 32-bit ints; refused before launch beyond)"

    # ---- tuning ---------------------------------------------------------------------------------
    def _candidates(self, op: str, dtype: torch.dtype) -> list[dict]:
        return [k for k in self._kernels if k["op"] == op and k["dtype"] == dtype_name(dtype)]

    def config_space(self, op, dtype):
        fixed = CALL_FIXED.get(op, ())
        space = []
        for k in self._candidates(op, dtype):
            cfg = {key: v for key, v in k["config"].items() if key not in fixed}
            for host in self._host_variants(op):
                if {**cfg, **host} not in space:
                    space.append({**cfg, **host})
        return space

    @staticmethod
    def _host_variants(op: str) -> list[dict]:
        keys = host_keys(op)
        return [dict(zip(keys, vals)) for vals in itertools.product(*keys.values())]

    def host_config(self, op: str, dtype: torch.dtype, dims: dict) -> dict:
        """The host-side keys (HOST_KEYS) of the config a call with these dims uses."""
        return split_host(op, self.config_for(op, dtype, dims))[1]

    def builtin_config(self, op, dtype, dims):
        default = DEFAULTS.get(op) or {"rows": _row_default}.get(get_spec(op).family)
        if default is None:
            raise KeyError(f"tile_cpp.{op}: no default config (add it to DEFAULTS in backends/tile_cpp.py)")
        return {**default(dtype, dims), **self._host_variants(op)[0]}

    def config_refusal(self, op, dtype, dims, config):
        return row_loop_refusal(op, config, dims)

    def check_config(self, op, dtype, config):
        """A config is runnable when some instantiated kernel has these values (the module holds no other) and its
        host-side keys (HOST_KEYS) are ints in their HOST_RANGE."""
        config, host = split_host(op, dict(config))
        for k, v in host.items():
            lo, hi = HOST_RANGE[k]
            if not isinstance(v, int) or isinstance(v, bool) or v < lo or (hi is not None and v > hi):
                want = f"an int >= {lo}" if hi is None else f"an int in [{lo}, {hi}]"
                raise ValueError(f"tile_cpp.{op}: config {k}={v!r} must be {want}")
        space = [split_host(op, c)[0] for c in self.config_space(op, dtype)]
        if not any(c.items() >= config.items() for c in space):
            raise ValueError(f"tile_cpp.{op}: config {config} is not instantiated for {dtype_name(dtype)}; "
                             f"choose one of {space} (or add it to cpp/include/tr_kernels.h)")

    def kernel_for(self, op: str, dtype: torch.dtype, dims: dict[str, int]) -> str:
        """The name of the instantiated kernel a call with these dims uses. A launch path asks on every call:
        the answer is kept per (op, dtype, dims) beside config_for's, so set_config and a changed tuned table
        drop it the same way."""
        return self._memo_value("kernel", op, dtype, dims, lambda: self._search_kernel(op, dtype, dims))

    def _search_kernel(self, op: str, dtype: torch.dtype, dims: dict[str, int]) -> str:
        cfg = split_host(op, self.config_for(op, dtype, dims))[0]
        for key in CALL_FIXED.get(op, ()):
            cfg[key] = dims[key]
        found = self.__dict__.setdefault("_kernel_names", {})
        key = (op, dtype, tuple(sorted(cfg.items())))
        if key not in found:
            found[key] = next((k["name"] for k in self._candidates(op, dtype)
                               if all(k["config"].get(n) == v for n, v in cfg.items())), None)
        if found[key] is None:
            raise ValueError(f"tile_cpp.{op}: no kernel instantiated for {dtype_name(dtype)} with {cfg}")
        return found[key]

    def versions(self):
        if _mod is None:
            return {}
        return {"nvcc": _mod.NVCC_VERSION, "cubin_archs": ",".join(_mod.ARCHS)}
