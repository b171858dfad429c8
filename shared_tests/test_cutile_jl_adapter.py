"""cutile_jl adapter: argument mapping with fake tensors, availability reasons, the Julia requirement.

Nothing here imports juliacall or needs Julia; the tests that do need Julia skip with the reason."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from tilerosetta import backends
from tilerosetta.backends import cutile_jl as cj
from tilerosetta.errors import TileRosettaError
from tilerosetta.specs import OP_NAMES, SPECS


class FakeTensor:
    """Just what the mapping reads: shape, stride(), dtype, data_ptr(), device."""

    def __init__(self, shape, dtype=torch.float32, ptr=0x7F0000001000, strides=None, index=0):
        self.shape, self.dtype, self._ptr = tuple(shape), dtype, ptr
        self._strides = tuple(strides) if strides is not None else cj.row_major_strides(shape)
        self.device = SimpleNamespace(type="cuda", index=index)

    def stride(self):
        return self._strides

    def data_ptr(self):
        return self._ptr


def test_descriptor_reverses_dims_and_keeps_pointer():
    assert cj.tensor_descriptor(FakeTensor((3, 5), ptr=4096)) == (4096, (5, 3))
    assert cj.tensor_descriptor(FakeTensor((2, 3, 17, 64)))[1] == (64, 17, 3, 2)
    assert cj.tensor_descriptor(FakeTensor((7,)))[1] == (7,)


def test_descriptor_matches_real_torch_memory():
    t = torch.arange(12.0).reshape(3, 4)
    ptr, dims = cj.tensor_descriptor(t)
    assert ptr == t.data_ptr() and dims == (4, 3)
    # column-major (4, 3) over the same memory: element (i, j) is t[j, i]
    flat = t.flatten()
    assert all(flat[i + 4 * j] == t[j, i] for i in range(4) for j in range(3))


def test_descriptor_refuses_non_contiguous_naming_op_and_arg():
    with pytest.raises(TileRosettaError, match=r"cutile_jl\.softmax: argument 'x'.*strides \(1, 3\)"):
        cj.tensor_descriptor(FakeTensor((3, 5), strides=(1, 3)), "softmax", "x")
    with pytest.raises(TileRosettaError, match="null data pointer"):
        cj.tensor_descriptor(FakeTensor((3,), ptr=0), "vector_add", "a")


def test_eltype_mapping():
    assert cj.julia_eltype(torch.float32) == "Float32"
    assert cj.julia_eltype(torch.float16) == "Float16"
    assert cj.julia_eltype(torch.bfloat16) == "BFloat16"
    with pytest.raises(TileRosettaError, match="fp64|float64"):
        cj.julia_eltype(torch.float64, "matmul", "a")


def test_stream_handle():
    assert cj.stream_handle(SimpleNamespace(cuda_stream=0)) == cj.CU_STREAM_LEGACY
    assert cj.stream_handle(SimpleNamespace(cuda_stream=0x5555AAAA)) == 0x5555AAAA


def _fakes(op, dims, dtype=torch.float16):
    spec = SPECS[op]
    from tilerosetta.specs import Case

    shapes = spec.shapes(Case(dims))
    names = list(spec.inputs) + list(spec.outputs)
    return [FakeTensor(shapes[n], dtype, ptr=0x1000 * (i + 1)) for i, n in enumerate(names)]


def test_marshal_attention_resolves_scale_and_orders_tensors():
    ts = _fakes("attention", {"B": 2, "H": 3, "S": 17, "D": 64})
    op, eltype, dev, descs, kw = cj.marshal_call("attention", ts, {"causal": True, "scale": None}, {"tile_m": 64})
    assert (op, eltype, dev) == ("attention", "Float16", 0)
    assert [d[0] for d in descs] == [0x1000, 0x2000, 0x3000, 0x4000]  # q, k, v, out
    assert all(d[1] == (64, 17, 3, 2) for d in descs)
    assert kw == {"causal": True, "scale": pytest.approx(1 / math.sqrt(64)), "tile_m": 64}
    assert cj.marshal_call("attention", ts, {"causal": False, "scale": 0.3}, {})[4]["scale"] == 0.3


def test_marshal_norm_params_are_floats_and_device_index_travels():
    ts = _fakes("rms_norm", {"M": 4, "N": 8}, torch.float32)
    for t in ts:
        t.device.index = 1
    _, eltype, dev, descs, kw = cj.marshal_call("rms_norm", ts, {"eps": 1e-6}, {"tile_n": 8, "tile_m": 1})
    assert eltype == "Float32" and dev == 1 and descs[1][1] == (8,)
    assert kw == {"eps": 1e-6, "tile_n": 8, "tile_m": 1} and isinstance(kw["eps"], float)


def test_marshal_refuses_params_the_spec_refuses():
    """The raw path has no BoundOp: marshal_call applies the spec's Param rules (no truthiness, no str)."""
    from tilerosetta.errors import TileRosettaTypeError

    ts = _fakes("attention", {"B": 1, "H": 2, "S": 5, "D": 64})
    for causal in ("false", 1, None):
        with pytest.raises(TileRosettaTypeError, match="'causal'"):
            cj.marshal_call("attention", ts, {"causal": causal, "scale": None}, {})
    with pytest.raises(TileRosettaError, match="'scale'"):
        cj.marshal_call("attention", ts, {"causal": True, "scale": -1.0}, {})
    ts = _fakes("rms_norm", {"M": 4, "N": 8}, torch.float32)
    for eps, cls in [("1e-5", TileRosettaTypeError), (math.nan, TileRosettaError), (0.0, TileRosettaError)]:
        with pytest.raises(cls, match="'eps'"):
            cj.marshal_call("rms_norm", ts, {"eps": eps}, {})
    with pytest.raises(TileRosettaError, match="'bogus': unknown parameter"):
        cj.marshal_call("rms_norm", ts, {"eps": 1e-5, "bogus": 1}, {})


def test_marshal_refuses_wrong_arity():
    with pytest.raises(TileRosettaError, match="expected 3 tensors"):
        cj.marshal_call("vector_add", _fakes("vector_add", {"N": 4})[:2], {}, {})


@pytest.mark.parametrize("op", OP_NAMES)
def test_every_op_marshals(op):
    spec = SPECS[op]
    dtype = spec.dtypes[0]
    case = spec.cases[-1]
    ts = _fakes(op, case.dims, dtype)
    params = spec.full_params(case.params)
    config = cj.table_config(op, dtype, cj.spec_dims(op, ts))
    _, _, _, descs, kw = cj.marshal_call(op, ts, params, config)
    assert len(descs) == len(spec.inputs) + len(spec.outputs)
    assert set(kw) == set(params) | set(config)


def test_table_config_clamps_and_floors():
    assert cj.table_config("vector_add", torch.float32, {"N": 7}) == {"tile": 8}
    mm = cj.table_config("matmul", torch.float32, {"M": 1, "N": 1000, "K": 257})
    assert mm == {"tile_m": 16, "tile_n": 128, "tile_k": 32}  # floor 16, fp32 tile_k override
    assert cj.table_config("matmul", torch.float16)["tile_k"] == 64


def test_tuning_hooks():
    b = cj.CuTileJlBackend()
    space = b.config_space("softmax", torch.float32)
    assert {"tile_n": 1024, "tile_m": 1} in space and len(space) == 12
    b.set_config("softmax", torch.float32, {"tile_n": 2048})
    assert b.config_for("softmax", torch.float32, {"M": 64, "N": 8192}) == {"tile_n": 2048, "tile_m": 1}
    with pytest.raises(ValueError, match="powers of two"):
        b.set_config("softmax", torch.float32, {"tile_n": 1000})
    with pytest.raises(ValueError, match="unknown tile parameter"):
        b.set_config("softmax", torch.float32, {"tile_q": 64})
    b.set_config("softmax", torch.float32, None)
    assert b.forced_config("softmax", torch.float32) == {}


# ---- availability: each check, in order, with injected probes -----------------------------------------
def _avail(**kw):
    hooks = dict(find_spec=lambda name: object(), find_exe=lambda: "/opt/julia/bin/julia",
                 version_of=lambda exe: "julia version 1.11.5",
                 probe=lambda exe: {"stage": "tilerosetta", "functional": "true", "capability": "9.0",
                                    "cutile_bytecode": "13.4", "julia": "1.11.5", "device": "H200"})
    hooks.update(kw)
    return cj.availability(**hooks)


def test_availability_all_good():
    ok, why = _avail()
    assert ok and "H200" in why


@pytest.mark.parametrize("hooks, expect", [
    ({"find_spec": lambda name: None}, "juliacall is not installed"),
    ({"find_exe": lambda: None}, "no Julia executable"),
    ({"version_of": lambda exe: "julia version 1.10.4"}, "1.10.4 at /opt/julia/bin/julia is too old"),
    ({"version_of": lambda exe: "garbage"}, "could not read the Julia version"),
    ({"probe": lambda exe: {"crash": "killed with signal 11"}}, "signal 11"),
    ({"probe": lambda exe: {"stage": "juliacall", "error": "ArgumentError: Package cuTile not found"}},
     "CUDA.jl/cuTile.jl not loadable"),
    ({"probe": lambda exe: {"stage": "tilerosetta", "functional": "false"}}, "CUDA.functional() is false"),
    ({"probe": lambda exe: {"stage": "tilerosetta", "functional": "true", "capability": "9.0",
                            "cutile_bytecode": "13.2"}}, "sm_90 needs Tile IR bytecode >= 13.3"),
])
def test_availability_reports_first_failure(hooks, expect):
    ok, why = _avail(**hooks)
    assert not ok and expect in why, why


def test_arch_table():
    assert cj.arch_supported((9, 0), (13, 3))[0]
    assert not cj.arch_supported((9, 0), (13, 2))[0]
    assert cj.arch_supported((8, 6), (13, 2))[0] and not cj.arch_supported((8, 0), (13, 1))[0]
    assert cj.arch_supported((10, 0), (13, 1))[0]
    assert "older than Ampere" in cj.arch_supported((7, 5), (13, 4))[1]


def test_availability_never_imports_juliacall():
    code = ("import sys; from tilerosetta import backends; b = backends.get('cutile_jl'); "
            "print(b.is_available()); assert 'juliacall' not in sys.modules")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONPATH="python"), timeout=300)
    assert r.returncode == 0, r.stderr


def test_require_julia_env_maps_onto_require():
    code = ("import os; import tilerosetta.backends.cutile_jl; "
            "print(os.environ['TILEROSETTA_REQUIRE'])")
    env = dict(os.environ, PYTHONPATH="python", TILEROSETTA_REQUIRE_JULIA="1", TILEROSETTA_REQUIRE="torch")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "torch,cutile_jl", r.stderr


def test_julia_backend_available_when_required():
    """Fails (not skips) under TILEROSETTA_REQUIRE_JULIA=1 when the backend cannot run."""
    ok, why = backends.get("cutile_jl").is_available()
    if ok:
        return
    if os.environ.get("TILEROSETTA_REQUIRE_JULIA") == "1":
        pytest.fail(f"TILEROSETTA_REQUIRE_JULIA=1 but cutile_jl is unavailable: {why}")
    pytest.skip(f"cutile_jl unavailable (set TILEROSETTA_REQUIRE_JULIA=1 to make this a failure): {why}")


def test_import_order_torch_then_juliacall():
    """The hazard check itself, on a machine with Julia: torch first, then juliacall, must not crash."""
    exe = cj.julia_executable()
    if exe is None or importlib_missing("juliacall"):
        pytest.skip("no Julia executable / juliacall here: the torch-before-juliacall import cannot be tried")
    info = cj.run_probe(exe)
    assert "crash" not in info, info["crash"]


def importlib_missing(name):
    import importlib.util

    return importlib.util.find_spec(name) is None


# ---- grid axes y/z (issue 16): counts past 65535 are refused before Julia or CUDA is touched --------
@pytest.mark.parametrize("op, dims, what", [
    ("transpose", {"M": 65536 * 64 + 1, "N": 1}, "ceil(M / tile_m)"),
    ("matmul", {"M": 65536 * 128 + 1, "K": 1, "N": 1}, "ceil(M / tile_m)"),
    ("bmm", {"Bt": 65536, "M": 1, "K": 1, "N": 1}, "Bt"),
    ("silu_and_mul", {"M": 65536 * 2 + 1, "H": 1}, "ceil(M / tile_m)"),
    ("rope", {"B": 65536, "H": 1, "S": 1, "D": 2}, "B * H"),
])
def test_grid_counts_past_65535_on_y_or_z_are_refused_before_launch(op, dims, what):
    from tilerosetta.specs import Case

    spec = SPECS[op]
    shapes = spec.shapes(Case(dims))
    tensors = [torch.zeros(shapes[n], dtype=torch.float16) for n in list(spec.inputs) + list(spec.outputs)]
    fn = cj.CuTileJlBackend().implementations()[op]  # the raw path: no BoundOp in front
    with pytest.raises(TileRosettaError) as info:
        fn(*tensors, **spec.full_params({}))
    err = info.value
    assert (err.op, err.backend, err.arg) == (op, "cutile_jl", next(iter(spec.inputs))), str(err)
    assert what in str(err) and "65535" in str(err), str(err)
    assert what in cj.CuTileJlBackend().limits(op)
    # One tile fewer on that axis fits: no refusal from the grid check.
    small = {k: (v - 1 if v > 65535 and k in ("Bt", "B") else v) for k, v in dims.items()}
    if small == dims:
        cfg = cj.CuTileJlBackend().config_for(op, torch.float16, dims)
        small = {**dims, "M": 65535 * cfg["tile_m"]}
    cj.check_grid(op, small, cj.CuTileJlBackend().config_for(op, torch.float16, small))
