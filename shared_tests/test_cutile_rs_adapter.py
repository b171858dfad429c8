"""CPU-side tests of the cutile_rs backend (cuTile-rs through PyO3).

What runs here without a GPU: the adapter's availability reasons, the plain arguments it hands to
Rust, and — when the extension is built (`make build-rust`) — the extension's own validation, tile
tables and driver-free compilation of kernels to sm_90 cubins with the pinned tileiras. Launches are
covered by the shared conformance suite on a GPU (`--backend cutile_rs`).
"""

from __future__ import annotations

import importlib
import math

import pytest
import torch

from cuda_fakes import cuda_like
from cutile_rs_requests import fake_request

from tilerosetta import backends, toolchain
from tilerosetta.backends.cutile_rs import MODULE, CuTileRsBackend
from tilerosetta.specs import OP_NAMES, SPECS
from tilerosetta.specs.base import FP16, FP32

try:
    ext = importlib.import_module(MODULE)
    NO_EXT = None
except ImportError as exc:
    ext, NO_EXT = None, f"extension {MODULE} not built (make build-rust): {exc}"

if ext is not None and getattr(ext, "TENSOR_FIELDS", 4) != 6:
    NO_EXT = (f"extension {MODULE} built from older sources (tensor tuples without dtype/device): rebuild with "
              f"make build-rust")
needs_ext = pytest.mark.skipif(NO_EXT is not None, reason=NO_EXT or "")


def test_registered_under_its_name():
    b = backends.get("cutile_rs")
    assert isinstance(b, CuTileRsBackend), f"adapter failed to import: {b.is_available()}"
    assert (b.name, b.language, b.device_type) == ("cutile_rs", "cuTile-rs", "cuda")


def test_unavailable_reason_is_precise():
    ok, reason = CuTileRsBackend().available()
    if ext is None:
        assert not ok and reason.startswith("extension not built: run make build-rust"), reason
    elif getattr(ext, "TENSOR_FIELDS", 4) != 6:  # a stale wheel: the adapter sends dtype/device per tensor
        assert not ok and "extension built from older sources" in reason, reason
    elif getattr(ext, "PREPARED", 0) != 1:  # a stale wheel: the adapter launches through prepare()
        assert not ok and "extension built from older sources (PREPARED=0" in reason, reason
    elif not torch.cuda.is_available():
        assert (ok, reason) == (False, "no CUDA GPU")
    else:
        arch_ok, why = toolchain.find().can_target(toolchain.device_arch())
        assert ok == arch_ok, reason


def test_request_carries_plain_integers():
    b = CuTileRsBackend()
    q, k, v, out = (torch.zeros(2, 3, 5, 64, dtype=FP16) for _ in range(4))
    op, dtype, device, stream, arrays, scalars, config = b.request("attention", (q, k, v, out),
                                                                 {"causal": True, "scale": None})
    assert (op, dtype, device, stream) == ("attention", "fp16", 0, 0)
    assert [a[0] for a in arrays] == ["q", "k", "v", "out"]
    assert arrays[0][1] == q.data_ptr() and arrays[3][1] == out.data_ptr()
    name, ptr, shape, strides, *rest = arrays[0]
    assert all(type(x) is int for x in (*shape, *strides))  # plain ints (a torch.Size / stride tuple carries them)
    assert (list(shape), list(strides), *rest) == ([2, 3, 5, 64], [960, 320, 64, 1], "fp16", "cpu")  # dtype, device
    assert scalars == {"causal": 1.0, "scale": pytest.approx(1 / math.sqrt(64))}
    assert config == {}
    _, _, _, _, _, scalars, _ = b.request("rms_norm", (torch.zeros(2, 4), torch.zeros(4), torch.zeros(2, 4)),
                                          {"eps": 1e-6})
    assert scalars == {"eps": 1e-6}


def test_request_refuses_params_the_spec_refuses():
    """The raw path (implementations(), no BoundOp) reaches request() with the caller's params: the spec's
    Param rules apply there too, instead of float("1e-5") or float(True) reaching the kernel."""
    from tilerosetta.errors import TileRosettaError, TileRosettaTypeError

    b = CuTileRsBackend()
    x, w, out = torch.zeros(3, 8), torch.ones(8), torch.zeros(3, 8)
    assert b.request("rms_norm", (x, w, out), {"eps": 1e-5})[5] == {"eps": 1e-5}
    for eps, cls in [("1e-5", TileRosettaTypeError), (True, TileRosettaTypeError), (None, TileRosettaTypeError),
                     (-1e-5, TileRosettaError), (math.nan, TileRosettaError), (0, TileRosettaError)]:
        with pytest.raises(cls) as info:
            b.request("rms_norm", (x, w, out), {"eps": eps})
        assert (info.value.op, info.value.backend, info.value.arg) == ("rms_norm", "cutile_rs", "eps"), eps
        assert isinstance(info.value, TypeError) == (cls is TileRosettaTypeError), eps
    q = torch.zeros(1, 2, 5, 64, dtype=FP16)
    for causal in ("false", 1, None):
        with pytest.raises(TileRosettaTypeError, match="'causal'"):
            b.request("attention", (q, q, q, q), {"causal": causal, "scale": None})
    with pytest.raises(TileRosettaError, match="'eps': missing parameter"):
        b.request("rms_norm", (x, w, out), {})


def test_every_op_is_implemented_or_explained():
    b = CuTileRsBackend()
    have, missing = set(b.implementations()), b.missing()
    assert have | set(missing) == set(OP_NAMES)
    assert all(reason for reason in missing.values())
    if ext is not None:
        assert set(ext.ops_implemented()) == set(OP_NAMES), "the extension should implement all ten ops"


# ---- the built extension ---------------------------------------------------------------------------
_args = fake_request


@needs_ext
def test_the_extension_reads_what_request_sends():
    """request() hands Rust each tensor's torch.Size and stride() tuple as they are (no list copies, a host
    cost saving): the extension must read them as the ints they hold. CPU tensors reach Rust's device check
    (refused); the same request with the devices said to be cuda:0 validates, shapes and strides included."""
    b = CuTileRsBackend()
    x, w, out = torch.zeros(6, 32), torch.ones(32), torch.zeros(6, 32)
    args = list(b.request("rms_norm", (x, w, out), {"eps": 1e-6}))
    with pytest.raises(ValueError, match="cpu"):
        ext.validate(*args)
    args[4] = [(*a[:5], "cuda:0") for a in args[4]]
    assert isinstance(ext.validate(*args), dict)
    wrong = torch.zeros(6, 16)  # a stale or misread shape would pass; this one must be refused by Rust
    args[4][2] = ("out", wrong.data_ptr(), wrong.shape, wrong.stride(), "fp32", "cuda:0")
    with pytest.raises(ValueError, match="out"):
        ext.validate(*args)


def _valid_shapes(op: str) -> dict[str, tuple[int, ...]]:
    """One valid call's shapes, from the spec: its smallest conformance case whose extents are all >= 2
    (a size-1 extent would hide a swapped pair), so a new op needs no entry here."""
    spec = SPECS[op]
    full = [c for c in spec.cases if min(spec.case_dims(c).values()) >= 2] or list(spec.cases)
    case = min(full, key=lambda c: spec.bytes_moved(c, FP32))
    return spec.shapes(case)


VALID = {op: _valid_shapes(op) for op in OP_NAMES}
VECTOR_1000 = dict(a=(1000,), b=(1000,), out=(1000,))  # the raw-argument tests below: N = 1000 -> BLOCK 1024


def test_valid_shapes_come_from_the_specs():
    assert VALID["transpose"]["out"] == tuple(reversed(VALID["transpose"]["x"]))
    assert VALID["attention"]["q"][-1] in (64, 128) and min(VALID["vector_add"]["out"]) >= 2


@needs_ext
@pytest.mark.parametrize("op", OP_NAMES)
def test_extension_accepts_valid_and_names_bad_argument(op):
    dtype = "fp16" if op == "attention" else "fp32"
    cfg = ext.validate(*_args(op, dtype, **VALID[op]))
    assert set(cfg) == {k for c in ext.config_space(op, dtype) for k in c}
    # Grow the last dim of the output: refused, naming op and the output argument.
    out_name = list(SPECS[op].outputs)[0]
    bad = dict(VALID[op])
    bad[out_name] = (*bad[out_name][:-1], bad[out_name][-1] + 1)
    with pytest.raises(ValueError, match=rf"cutile_rs\.{op}: argument '{out_name}'"):
        ext.validate(*_args(op, dtype, **bad))


@needs_ext
def test_extension_refuses_bad_raw_arguments():
    args = _args("vector_add", **VECTOR_1000)
    args[4][0] = ("a", 0, [1000], [1], "fp32", "cuda:0")
    with pytest.raises(ValueError, match=r"argument 'a': null data pointer"):
        ext.validate(*args)
    args = _args("vector_add", **VECTOR_1000)
    args[4][1] = ("b", 1 << 20, [1000], [2], "fp32", "cuda:0")
    with pytest.raises(ValueError, match=r"argument 'b': must be contiguous"):
        ext.validate(*args)
    with pytest.raises(ValueError, match=r"argument 'dtype'"):
        ext.validate(*_args("vector_add", "fp64", **VECTOR_1000))
    with pytest.raises(ValueError, match=r"attention: argument 'dtype'"):
        ext.validate(*_args("attention", "fp32", **VALID["attention"]))
    args = _args("vector_add", **VECTOR_1000)
    args[6] = {"BLOCK": 1000}
    with pytest.raises(ValueError, match=r"argument 'config': tile size BLOCK=1000"):
        ext.validate(*args)
    args[6] = {"OCC": 33}
    with pytest.raises(ValueError, match=r"argument 'config': hint OCC=33"):
        ext.validate(*args)
    args[6] = {"W": 3}  # worker warps: a power of two; occupancy any count (3 below)
    with pytest.raises(ValueError, match=r"argument 'config': hint W=3 must be 0 \(none\) or a power of two"):
        ext.validate(*args)
    args[6] = {"OCC": 3, "W": 4}
    assert ext.validate(*args) == {"BLOCK": 1024, "OCC": 3, "W": 4}


@needs_ext
def test_extension_lets_only_the_declared_inplace_pairs_through():
    """The crate refuses an output sharing memory with another tensor on its own, except the pairs the
    spec declares safe in place (OpSpec.inplace_ok, via rust/src/generated.rs), and those only as the very
    same tensor: rope's out may be q; half-way into q, or softmax's out on x, stays refused."""
    declared = {op: spec.inplace_ok for op, spec in SPECS.items() if spec.inplace_ok}
    assert declared, "no op declares an in-place pair: nothing to check"
    for op, pairs in declared.items():
        for out_name, ins in pairs.items():
            for in_name in ins:
                args = _args(op, **VALID[op])
                arrays = {a[0]: i for i, a in enumerate(args[4])}
                src = args[4][arrays[in_name]]
                args[4][arrays[out_name]] = (out_name, *src[1:])
                assert ext.validate(*args), f"{op}: {out_name} = {in_name} is declared safe in place"
                n_bytes = math.prod(src[2]) * 4
                args[4][arrays[out_name]] = (out_name, src[1] + n_bytes // 2, *src[2:])
                with pytest.raises(ValueError, match=rf"{op}: argument '{out_name}': output overlaps input '{in_name}'"):
                    ext.validate(*args)
    args = _args("softmax", **VALID["softmax"])
    args[4][1] = ("out", *args[4][0][1:])
    with pytest.raises(ValueError, match=r"softmax: argument 'out': output is the same memory as input 'x'"):
        ext.validate(*args)


@needs_ext
def test_extension_checks_each_tensors_dtype_device_and_size1_strides():
    """The raw path (implementations(), no BoundOp) reaches Rust with whatever the caller passed: every
    tensor's own dtype and device must match the launch's, or the kernel reads/writes out of bounds."""
    for i, dtype, device, want in [(0, "fp16", "cuda:0", r"argument 'a': dtype fp16 differs"),
                                   (2, "bf16", "cuda:0", r"argument 'out': dtype bf16 differs"),
                                   (1, "fp32", "cpu", r"argument 'b': tensor is on cpu")]:
        args = _args("vector_add", **VECTOR_1000)
        args[4][i] = (*args[4][i][:4], dtype, device)
        with pytest.raises(ValueError, match=want):
            ext.validate(*args)
    args = _args("softmax", x=(1, 4099), out=(1, 4099))
    args[4] = [(n, p, shape, [3, 1], dt, dev) for n, p, shape, _, dt, dev in args[4]]  # torch: contiguous
    assert ext.validate(*args)


@needs_ext
def test_tile_tables():
    b = CuTileRsBackend()
    for op in OP_NAMES:
        for dtype in SPECS[op].dtypes:
            space = b.config_space(op, dtype)
            assert space, f"{op} {dtype}: empty config space"
            assert set(b.default_config(op, dtype, {})) == set(space[0])
    assert b.default_config("softmax", FP32, {"M": 3, "N": 7}) == {"BR": 1, "BN": 8, "TMA": 1, "OCC": 4, "W": 0}
    # Compiler hints are config keys a sweep can vary (0 = none).
    assert {"OCC", "W"} <= set(space[0])
    # The crate's own defaults (on a GPU, a tuned_configs.json entry for the size class is merged over them).
    builtin = b._mod.default_config
    assert builtin("bmm", "bf16", {"Bt": 16, "M": 2048, "N": 2048, "K": 2048}) == \
        {"BM": 128, "BN": 256, "BK": 64, "GM": 0, "OCC": 0, "W": 8}
    att = {"B": 4, "H": 32, "S": 4096, "D": 128}
    assert builtin("attention", "bf16", att) == {"BM": 64, "BN": 128, "SPLIT_MIN_BLOCKS": 4, "QO": 0, "OCC": 2, "W": 0}
    tuned = b.tuned_config("attention", torch.bfloat16, att)
    assert b.default_config("attention", torch.bfloat16, att) == {**builtin("attention", "bf16", att), **(tuned or {})}
    assert any(c["OCC"] != 0 for c in b.config_space("softmax", FP32)), "the sweep space varies OCC"
    assert any(c["W"] == 8 for c in b.config_space("bmm", torch.bfloat16)), "the sweep space varies W"
    # Every entry of the sweep space is a config set_config takes (a sweep sets each: OCC 3 was refused once).
    for c in b.config_space("softmax", torch.bfloat16):
        b.check_config("softmax", torch.bfloat16, c)
    assert any(c["OCC"] == 3 and c["W"] == 8 for c in b.config_space("softmax", torch.bfloat16))
    for bad in ({"OCC": -1}, {"BN": "4096"}, {"W": True}):
        with pytest.raises(ValueError, match=r"cutile_rs\.softmax: config values must be non-negative ints"):
            b.check_config("softmax", torch.bfloat16, bad)
    b.set_config("vector_add", FP32, {"BLOCK": 256})
    assert b.request("vector_add", (torch.zeros(4),) * 3, {})[6] == {"BLOCK": 256}
    with pytest.raises(ValueError, match="unknown config key"):
        b.set_config("vector_add", FP32, {"TILE": 256})
    b.set_config("vector_add", FP32, None)
    assert b.request("vector_add", (torch.zeros(4),) * 3, {})[6] == {}


@needs_ext
@pytest.mark.skipif(not toolchain.find().can_target("sm_90")[0], reason="pinned tileiras (>= 13.3) not found")
@pytest.mark.parametrize("op,dtype,dims,config", [
    ("vector_add", "bf16", [1000], {}),
    ("softmax", "fp16", [3, 4099], {}),
    ("softmax", "bf16", [3, 40000], {"OCC": 2}),  # chunked kernel
    ("rope", "bf16", [1, 2, 17, 96], {}),  # D/2 = 48 is not a power of two
    ("bmm", "bf16", [2, 64, 256, 64], {}),  # W=8 default
    ("attention", "bf16", [1, 2, 17, 128, 1], {})])
def test_extension_compiles_kernels_for_sm90_without_gpu(op, dtype, dims, config, monkeypatch):
    tc = toolchain.activate()
    monkeypatch.setenv("CUTILE_TILEIRAS_PATH", str(tc.bin_dir / "tileiras"))
    sizes = ext.compile_only(op, dtype, dims, config)
    assert sizes and all(s > 0 for s in sizes), sizes


@needs_ext
def test_compile_only_refuses_wrong_dims():
    with pytest.raises(ValueError, match=r"cutile_rs\.bmm: argument 'dims'"):
        ext.compile_only("bmm", "bf16", [64, 64, 64], assemble=False)


@needs_ext
def test_decode_matmul_default_takes_narrow_tiles_in_the_sweep_space():
    """M <= 16 streams the weight once: about one block per SM (N 4096 / BN 32 = 128; the 128x256 GEMM tile
    gave 16 blocks), and the sweep space holds those tiles."""
    from tilerosetta.specs import decode_panel  # rust decode_panel is a native copy of the spec's rule

    space = ext.config_space("matmul", "bf16")
    for n, bn in ((4096, 32), (14336, 128)):
        cfg = ext.default_config("matmul", "bf16", {"M": 1, "N": n, "K": 4096})
        assert (cfg["BM"], cfg["BN"], cfg["BK"]) == (16, bn, 256), cfg
        assert cfg in space
    for n in (1, 3072, 3073, 6144, 6145, 12288, 12289, 14336, 1 << 20):
        assert ext.default_config("matmul", "bf16", {"M": 1, "N": n, "K": 64})["BN"] == decode_panel(n), n
    from tilerosetta.specs import DECODE_TILE_MAX_M  # the Rust DECODE_MAX_M must agree with the spec's
    assert ext.default_config("matmul", "bf16", {"M": DECODE_TILE_MAX_M, "N": 4096, "K": 4096})["BM"] == 16
    assert ext.default_config("matmul", "bf16", {"M": DECODE_TILE_MAX_M + 1, "N": 4096, "K": 4096})["BM"] == 128
    assert ext.default_config("bmm", "bf16", {"Bt": 1, "M": 1, "N": 4096, "K": 4096})["BM"] == 128
    assert ext.default_config("matmul", "fp32", {"M": 1, "N": 4096, "K": 4096})["BM"] == 128
