"""The `cutile_jl` backend: the ten ops written in cuTile.jl (julia/), called through juliacall.

Status: never executed by this project. No Julia runtime can be installed on the project's
machines or on its H200 node (no registry they reach carries one), so `available()` reports why,
and TILEROSETTA_REQUIRE_JULIA=1 turns the resulting skips into failures.

How a call works (when Julia exists):
  * each torch tensor becomes `(data_ptr, reversed shape)`: a row-major (M, N) tensor is the
    column-major (N, M) Julia array over the same memory, wrapped with `unsafe_wrap(CuArray, ...,
    own=false)`; no copy, Julia never frees it. The torch tensors stay referenced by this Python
    frame for the whole call, and the launch is stream-ordered like any torch kernel, so the
    caching allocator cannot reuse the memory before the kernel ran;
  * torch's current stream handle is passed along and installed as the Julia task's stream
    (`CUDA.stream!`), so cuTile launches on it: no host synchronisation. Handle 0 (torch's legacy
    default stream) is sent as CU_STREAM_LEGACY (1), whose meaning does not depend on whether the
    driver calls are the per-thread-default-stream variants;
  * one crossing into Julia per call: `TileRosetta.torch_call(op, eltype, device, stream,
    tensors...; params...)`.

Nothing is downloaded: juliacall is imported only once a Julia >= 1.11 executable is known, with
PYTHON_JULIACALL_EXE/PYTHON_JULIACALL_PROJECT both set (juliacall then skips juliapkg's resolve)
and juliapkg/Pkg offline. Import order: torch is always imported before juliacall here (every
adapter imports torch), which is the order reported to corrupt the heap on some systems (JuliaCall
issue 215, pytorch issue 78829; clashing C++ runtimes). So the first juliacall import happens in a
child process that imports torch first; only if that child survives is juliacall imported here.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

import torch

from tilerosetta.backends.base import Backend
from tilerosetta.errors import TileRosettaError
from tilerosetta.specs import OP_NAMES, SPECS, dtype_name

NAME = "cutile_jl"
REPO = Path(__file__).resolve().parents[3]
JULIA_PROJECT = REPO / "julia"
TILES_TOML = JULIA_PROJECT / "tiles.toml"
MIN_JULIA = (1, 11)
CU_STREAM_LEGACY = 1
# Tile IR bytecode each architecture needs (cuTile.jl's compatibility table).
MIN_BYTECODE = ((10, (13, 1)), (9, (13, 3)), (8, (13, 2)))
JULIA_ELTYPES = {torch.float32: "Float32", torch.float16: "Float16", torch.bfloat16: "BFloat16"}
PROBE_TIMEOUT_S = 900  # first load of CUDA.jl + cuTile precompiles for minutes

# TILEROSETTA_REQUIRE_JULIA=1 is the same as TILEROSETTA_REQUIRE=cutile_jl: the suite's conftest reads
# that variable when it decides skip-or-fail, after this module has been imported by the registry.
if os.environ.get("TILEROSETTA_REQUIRE_JULIA") == "1":
    _req = [r for r in os.environ.get("TILEROSETTA_REQUIRE", "").split(",") if r]
    if NAME not in _req:
        os.environ["TILEROSETTA_REQUIRE"] = ",".join(_req + [NAME])


def _fail(op: str, arg: str | None, msg: str):
    raise TileRosettaError(op, NAME, arg, msg)


# ---- pure mapping: torch tensor -> what Julia needs (unit-tested with fake tensors) ----------------
def julia_eltype(dtype, op: str = "?", arg: str | None = None) -> str:
    try:
        return JULIA_ELTYPES[dtype]
    except KeyError:
        _fail(op, arg, f"dtype {dtype_name(dtype)} has no cuTile.jl mapping; expected one of "
                       f"{[dtype_name(d) for d in JULIA_ELTYPES]}")


def row_major_strides(shape) -> tuple[int, ...]:
    strides, step = [], 1
    for extent in reversed(tuple(shape)):
        strides.append(step)
        step *= max(int(extent), 1)
    return tuple(reversed(strides))


def tensor_descriptor(t, op: str = "?", arg: str | None = None) -> tuple[int, tuple[int, ...]]:
    """(data pointer, Julia dims) for a contiguous row-major tensor: the dims are the shape reversed,
    since the column-major array over the same memory with reversed dims is the same data."""
    shape = tuple(int(s) for s in t.shape)
    if tuple(t.stride()) != row_major_strides(shape) and math.prod(shape) > 1:
        _fail(op, arg, f"tensor is not contiguous row-major (shape {shape}, strides {tuple(t.stride())})")
    ptr = int(t.data_ptr())
    if ptr == 0:
        _fail(op, arg, "tensor has a null data pointer")
    return ptr, tuple(reversed(shape))


def stream_handle(stream) -> int:
    """The CUstream value for torch's stream object; torch's default (0) is sent as CU_STREAM_LEGACY."""
    handle = int(stream.cuda_stream)
    return CU_STREAM_LEGACY if handle == 0 else handle


def julia_params(op: str, tensors, params: dict[str, Any]) -> dict[str, Any]:
    """Spec params as the Julia host functions take them (plain floats/bools; attention's scale
    resolved to 1/sqrt(D) here so Julia always gets a number)."""
    out: dict[str, Any] = {}
    decls = SPECS[op].params
    for key, value in params.items():
        # The raw path (implementations(), no BoundOp) gets here with the caller's values: the spec's Param
        # rules again, so causal="false" or 1 is refused rather than taken by truthiness, eps="1e-5" too.
        if key not in decls:
            _fail(op, key, f"unknown parameter; {op} takes {sorted(decls) or 'none'}")
        bad = decls[key].problem(value)
        if bad:
            raise bad[0](op, NAME, key, bad[1])
        if key == "scale":
            value = 1.0 / math.sqrt(int(tensors[0].shape[-1])) if value is None else float(value)
        elif key == "causal":
            value = bool(value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            value = float(value)
        out[key] = value
    return out


def marshal_call(op: str, tensors, params: dict[str, Any], config: dict[str, int]):
    """Everything `TileRosetta.torch_call` takes, as plain Python values:
    (op, julia eltype, device index, [(ptr, dims), ...], keyword args)."""
    spec = SPECS[op]
    names = list(spec.inputs) + list(spec.outputs)
    if len(tensors) != len(names):
        _fail(op, None, f"expected {len(names)} tensors ({', '.join(names)}), got {len(tensors)}")
    eltype = julia_eltype(tensors[0].dtype, op, names[0])
    descs = [tensor_descriptor(t, op, n) for t, n in zip(tensors, names)]
    device = tensors[0].device
    index = device.index if device.index is not None else 0
    kwargs = julia_params(op, tensors, params)
    kwargs.update({k: int(v) for k, v in config.items()})
    return op, eltype, index, descs, kwargs


# ---- grid limits ------------------------------------------------------------------------------------
# The counts each op's Julia host function puts on grid axes y and z (julia/src/ops/<op>.jl `grid = (...)`,
# in the spec's torch terms; x is unlimited in practice), which CUDA caps at 65535. Issue 16 wants them
# folded into grid x; until the Julia kernels do (they cannot be run on this project's machines), such
# calls are refused before launch with the limit, instead of failing inside cuLaunchKernel.
GRID_YZ_MAX = 65535
GRID_YZ: dict[str, tuple[tuple[str, Callable[[dict, dict], int]], ...]] = {
    "transpose": (("ceil(M / tile_m)", lambda d, c: -(-d["M"] // c["tile_m"])),),
    "matmul": (("ceil(M / tile_m)", lambda d, c: -(-d["M"] // c["tile_m"])),),
    "bmm": (("ceil(M / tile_m)", lambda d, c: -(-d["M"] // c["tile_m"])), ("Bt", lambda d, c: d["Bt"])),
    "silu_and_mul": (("ceil(M / tile_m)", lambda d, c: -(-d["M"] // c["tile_m"])),),
    "rope": (("B * H", lambda d, c: d["B"] * d["H"]),),
}


def check_grid(op: str, dims: dict[str, int], config: dict[str, int]) -> None:
    """Refuses (TileRosettaError naming the first input) a call whose grid y or z would pass 65535."""
    for what, count in GRID_YZ.get(op, ()):
        n = count(dims, config)
        if n > GRID_YZ_MAX:
            _fail(op, next(iter(SPECS[op].inputs)),
                  f"{what} = {n} on grid axis y/z, whose limit is {GRID_YZ_MAX} (cuTile.jl grids here are 2-D/3-D)")


# ---- tile-size table (julia/tiles.toml, shared with the Julia package) ------------------------------
@lru_cache(maxsize=1)
def tile_table() -> dict[str, Any]:
    with open(TILES_TOML, "rb") as f:
        return tomllib.load(f)


def op_tiles(op: str) -> dict[str, Any]:
    """The tile-table entry of `op`: its own [op.*] sections, else its kernel family's (OpSpec.family;
    the row ops share [rows.*]), as julia/src/config.jl's op_tiles reads it."""
    table = tile_table()
    key = op if op in table else SPECS[op].family
    if key not in table:
        raise KeyError(f"{NAME}.{op}: julia/tiles.toml has no [{op}.*] section"
                       + (f" nor one of its family [{key}.*]" if key else ""))
    return table[key]


def _next_pow2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def table_config(op: str, dtype, dims: dict[str, int] | None = None) -> dict[str, int]:
    table = op_tiles(op)
    sizes = dict(table["default"])
    sizes.update(table.get(dtype_name(dtype), {}))
    if dims:
        floors = table.get("floor", {})
        for key, size in sizes.items():
            extent = dims.get(table["covers"][key])
            if extent is not None:
                sizes[key] = max(min(size, _next_pow2(extent)), floors.get(key, 1))
    return {k: int(v) for k, v in sizes.items()}


def spec_dims(op: str, tensors) -> dict[str, int]:
    """Bind the spec's plain symbols (M, N, K, S, ...) from actual shapes."""
    return SPECS[op].dims_of(tensors)


# ---- finding Julia without importing juliacall -------------------------------------------------------
def julia_executable() -> str | None:
    exe = os.environ.get("PYTHON_JULIACALL_EXE")
    if exe:
        return exe if (os.path.isfile(exe) and os.access(exe, os.X_OK)) else None
    return shutil.which("julia")


def parse_julia_version(text: str) -> tuple[int, int, int] | None:
    m = re.search(r"julia version (\d+)\.(\d+)\.(\d+)", text)
    return tuple(int(g) for g in m.groups()) if m else None


def julia_env(exe: str) -> dict[str, str]:
    """Environment for juliacall: an existing Julia and this repo's project, everything offline."""
    env = {
        "PYTHON_JULIACALL_EXE": exe,
        "PYTHON_JULIACALL_PROJECT": os.environ.get("PYTHON_JULIACALL_PROJECT", str(JULIA_PROJECT)),
        "PYTHON_JULIAPKG_OFFLINE": "yes",
        "JULIA_PKG_OFFLINE": "yes",
        "PYTHON_JULIACALL_HANDLE_SIGNALS": "yes",  # PythonCall FAQ: needed to avoid segfaults with threads
    }
    return env


def arch_supported(capability: tuple[int, int], bytecode: tuple[int, int]) -> tuple[bool, str]:
    """Whether cuTile.jl can target this GPU with the Tile IR bytecode its tileiras emits."""
    major = capability[0]
    for min_major, need in MIN_BYTECODE:
        if major >= min_major:
            if tuple(bytecode) >= need:
                return True, ""
            return False, (f"sm_{capability[0]}{capability[1]} needs Tile IR bytecode >= "
                           f"{need[0]}.{need[1]}, but cuTile.jl's tileiras emits {bytecode[0]}.{bytecode[1]}")
    return False, f"sm_{capability[0]}{capability[1]} is older than Ampere (sm_80); cuTile.jl needs >= 8.0"


PROBE_SCRIPT = r"""
import json
import torch  # deliberately first: the order the harness always has (see the module docstring)
from juliacall import Main as jl
out = {"stage": "juliacall"}
try:
    jl.seval("using CUDA, cuTile")
    out["stage"] = "packages"
    jl.seval("using TileRosetta")
    out["stage"] = "tilerosetta"
    for key, value in jl.TileRosetta.probe().items():
        out[str(key)] = str(value).lower() if isinstance(value, bool) else str(value)
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"[:2000]
print("PROBE:" + json.dumps(out))
"""


def run_probe(exe: str) -> dict[str, Any]:
    """First juliacall import, in a child process with torch imported first. Returns the probe's
    JSON, or {"crash": reason} if the child died (the import-order hazard) or printed nothing."""
    env = dict(os.environ, **julia_env(exe))
    try:
        proc = subprocess.run([sys.executable, "-c", PROBE_SCRIPT], env=env, capture_output=True,
                              text=True, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"crash": f"probe did not finish in {PROBE_TIMEOUT_S}s"}
    for line in proc.stdout.splitlines():
        if line.startswith("PROBE:"):
            return json.loads(line[len("PROBE:"):])
    if proc.returncode < 0:
        return {"crash": f"importing juliacall after torch killed the process with signal {-proc.returncode} "
                         "(torch/juliacall import-order hazard: see julia/README.md)"}
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"crash": f"probe exited {proc.returncode}: {' | '.join(tail)}"}


def availability(find_spec=importlib.util.find_spec, find_exe=julia_executable,
                 version_of=None, probe=run_probe) -> tuple[bool, str]:
    """The checks, in order; the first failure is the reason. Hooks are injectable for tests."""
    exe = find_exe()
    if find_spec("juliacall") is None:
        also = "" if exe else ("; no Julia executable either (PYTHON_JULIACALL_EXE unset, no `julia` on PATH; "
                               "none can be installed on this project's machines: no reachable registry has Julia)")
        return False, ("juliacall is not installed (pip install juliacall; it is imported only once a Julia "
                       "executable is known, so juliapkg never downloads one)" + also)
    if exe is None:
        return False, ("no Julia executable: set PYTHON_JULIACALL_EXE or put `julia` on PATH "
                       "(none can be installed on this project's machines: no reachable registry has Julia)")
    if version_of is None:
        def version_of(path):
            try:
                r = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
                return r.stdout + r.stderr
            except (OSError, subprocess.TimeoutExpired) as exc:
                return f"failed: {exc}"
    text = version_of(exe)
    version = parse_julia_version(text)
    if version is None:
        return False, f"could not read the Julia version from `{exe} --version`: {text.strip()[:200]!r}"
    if version[:2] < MIN_JULIA:
        return False, (f"Julia {'.'.join(map(str, version))} at {exe} is too old; cuTile.jl needs "
                       f">= {MIN_JULIA[0]}.{MIN_JULIA[1]}")
    info = probe(exe)
    if "crash" in info:
        return False, info["crash"]
    if info.get("stage") == "juliacall":
        return False, (f"CUDA.jl/cuTile.jl not loadable in project {julia_env(exe)['PYTHON_JULIACALL_PROJECT']} "
                       f"(run `julia --project=julia -e 'using Pkg; Pkg.instantiate()'`): {info.get('error')}")
    if info.get("stage") == "packages":
        return False, f"the TileRosetta Julia package failed to load: {info.get('error')}"
    if str(info.get("functional")).lower() != "true":
        return False, "CUDA.functional() is false: CUDA.jl finds no usable GPU/driver"
    cap = tuple(int(x) for x in str(info["capability"]).split("."))
    bytecode = tuple(int(x) for x in str(info["cutile_bytecode"]).split(".")[:2])
    ok, why = arch_supported(cap, bytecode)
    if not ok:
        return False, why
    return True, f"Julia {info.get('julia')}, cuTile bytecode {info['cutile_bytecode']}, {info.get('device')}"


class CuTileJlBackend(Backend):
    name = NAME
    language = "cuTile.jl"
    device_type = "cuda"

    def __init__(self):
        self._jl = None

    def available(self):
        return availability()

    # The juliacall module, imported on first use only (after available() said yes).
    def _julia(self):
        if self._jl is None:
            exe = julia_executable()
            os.environ.update(julia_env(exe))
            from juliacall import Main as jl  # noqa: PLC0415  (deliberately lazy)

            jl.seval("using TileRosetta")
            self._jl = jl
        return self._jl

    def _make(self, op: str) -> Callable:
        def fn(*tensors, **params):
            dims = spec_dims(op, tensors)
            config = self.config_for(op, tensors[0].dtype, dims)
            check_grid(op, dims, config)
            name, eltype, device, descs, kwargs = marshal_call(op, tensors, params, config)
            handle = stream_handle(torch.cuda.current_stream(tensors[0].device))
            jl = self._julia()
            jl.TileRosetta.torch_call(name, eltype, device, handle, *descs, **kwargs)
            # `tensors` is referenced until here; the launch is ordered on torch's stream.

        fn.__name__ = op
        return fn

    def implementations(self):
        return {op: self._make(op) for op in OP_NAMES}

    def limits(self, op):
        text = super().limits(op)
        counts = " and ".join(what for what, _ in GRID_YZ.get(op, ()))
        return text + (f"; {counts} <= 65535 (grid axes y/z; refused before launch beyond)" if counts else "")

    def config_space(self, op, dtype):
        space = op_tiles(op).get("space", {})
        keys = sorted(space)
        return [dict(zip(keys, combo)) for combo in itertools.product(*(space[k] for k in keys))]

    def builtin_config(self, op, dtype, dims):
        return table_config(op, dtype, dims)

    def check_config(self, op, dtype, config):
        allowed = set(op_tiles(op)["default"])
        unknown = set(config) - allowed
        if unknown:
            raise ValueError(f"{NAME}.{op}: unknown tile parameter(s) {sorted(unknown)}; expected {sorted(allowed)}")
        bad = {k: v for k, v in config.items() if not (isinstance(v, int) and v > 0 and v & (v - 1) == 0)}
        if bad:
            raise ValueError(f"{NAME}.{op}: tile sizes must be powers of two, got {bad}")

    def versions(self):
        v = {}
        spec = importlib.util.find_spec("juliacall")
        if spec is not None:
            try:
                from importlib.metadata import version

                v["juliacall"] = version("juliacall")
            except Exception:
                pass
        exe = julia_executable()
        if exe:
            try:
                out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60).stdout
                ver = parse_julia_version(out)
                if ver:
                    v["julia"] = ".".join(map(str, ver))
            except (OSError, subprocess.TimeoutExpired):
                pass
        return v
