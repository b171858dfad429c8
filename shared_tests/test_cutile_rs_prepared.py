"""CPU tests of cutile_rs's per-signature launch handle (issue 14 item 7: the per-call host cost).

`prepare()` validates a request once and returns a `Prepared` handle; a later call of the same signature
hands it only its data pointers and stream. Here, without a GPU: the built extension's prepare() refuses
exactly what validate() refuses, and Prepared.launch refuses bad pointers before any CUDA call; the
adapter, with a recording fake extension, prepares once per signature and launches the kept handle with
each call's own pointers. Launches themselves: test_cutile_rs_prepared_gpu.py.
"""

from __future__ import annotations

import importlib

import pytest
import torch

from cuda_fakes import cuda_like
from cutile_rs_requests import fake_request

from tilerosetta.backends import cutile_rs
from tilerosetta.backends.cutile_rs import MODULE, CuTileRsBackend
from tilerosetta.errors import BackendUnavailable, TileRosettaError
from tilerosetta.specs.base import FP32

try:
    ext = importlib.import_module(MODULE)
    NO_EXT = None if getattr(ext, "PREPARED", 0) == 1 else (
        f"extension {MODULE} built from older sources (no prepare()): rebuild with make build-rust")
except ImportError as exc:
    ext, NO_EXT = None, f"extension {MODULE} not built (make build-rust): {exc}"
needs_ext = pytest.mark.skipif(NO_EXT is not None, reason=NO_EXT or "")


# ---- the built extension: prepare() and Prepared.launch's checks ------------------------------------
_args = fake_request


VEC = dict(a=(1000,), b=(1000,), out=(1000,))
ROWS = dict(x=(6, 32), w=(32,), out=(6, 32))


def _with(args, i, **field):
    """args with tensor i's tuple changed (fields: ptr, shape, strides, dtype, device)."""
    args = list(args)
    arrays = list(args[4])
    name, ptr, shape, strides, dt, dev = arrays[i]
    new = {**dict(ptr=ptr, shape=shape, strides=strides, dtype=dt, device=dev), **field}
    arrays[i] = (name, new["ptr"], new["shape"], new["strides"], new["dtype"], new["device"])
    args[4] = arrays
    return args


BAD_REQUESTS = {
    "null pointer": lambda: _with(_args("vector_add", **VEC), 0, ptr=0),
    "misaligned": lambda: _with(_args("vector_add", **VEC), 1, ptr=(1 << 20) + 2),
    "non-contiguous": lambda: _with(_args("vector_add", **VEC), 1, strides=[2]),
    "shape mismatch": lambda: _with(_args("rms_norm", **ROWS), 2, shape=[6, 16], strides=[16, 1]),
    "tensor dtype": lambda: _with(_args("vector_add", **VEC), 2, dtype="bf16"),
    "host tensor": lambda: _with(_args("rms_norm", **ROWS), 1, device="cpu"),
    "out aliases x": lambda: _with(_args("softmax", x=(4, 64), out=(4, 64)), 1, ptr=1 << 20),
    "launch dtype": lambda: _args("vector_add", "fp64", **VEC),
    "attention fp32": lambda: _args("attention", "fp32", q=(1, 2, 17, 64), k=(1, 2, 17, 64), v=(1, 2, 17, 64),
                                    out=(1, 2, 17, 64)),
    "bad tile": lambda: [*_args("vector_add", **VEC)[:6], {"BLOCK": 1000}],
    "unknown op": lambda: ["gelu", "fp32", 0, 0, [], {}, {}],
    "device index": lambda: [*_args("vector_add", **VEC)[:2], -1, *_args("vector_add", **VEC)[3:]],
    "tensor count": lambda: [*_args("vector_add", **VEC)[:4], _args("vector_add", **VEC)[4][:2], {}, {}],
}


@needs_ext
@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
def test_prepare_refuses_what_validate_refuses(case):
    args = BAD_REQUESTS[case]()
    with pytest.raises(ValueError) as want:
        ext.validate(*args)
    with pytest.raises(ValueError) as got:
        ext.prepare(*args)
    assert str(got.value) == str(want.value) and str(got.value).startswith("cutile_rs."), case


@needs_ext
def test_prepare_refuses_junk_types_as_validate_does():
    """What pyo3 refuses while reading the arguments (before any check of ours): the same for both."""
    short = _args("vector_add", **VEC)
    short[4] = [(n, p, s, st, dt) for n, p, s, st, dt, _ in short[4]]  # 5-field tuples (an old adapter)
    text_eps = _args("rms_norm", **ROWS)
    text_eps[5] = {"eps": "1e-5"}
    text_shape = _with(_args("vector_add", **VEC), 0, shape="1000")
    for args in (short, text_eps, text_shape):
        with pytest.raises((TypeError, ValueError)) as want:
            ext.validate(*args)
        with pytest.raises(type(want.value)) as got:
            ext.prepare(*args)
        assert str(got.value) == str(want.value)


@needs_ext
@pytest.mark.parametrize("op,dtype,shapes,config", [
    ("vector_add", "fp32", VEC, {}),
    ("rms_norm", "bf16", ROWS, {"BR": 2}),
    ("attention", "fp16", dict(q=(1, 4, 17, 64), k=(1, 2, 17, 64), v=(1, 2, 17, 64), out=(1, 4, 17, 64)), {})])
def test_prepared_holds_what_validate_resolves(op, dtype, shapes, config):
    args = _args(op, dtype, **shapes)
    args[6] = config
    p = ext.prepare(*args)
    assert p.config == ext.validate(*args) and p.config.items() >= config.items()
    assert (p.op, p.dtype, p.device) == (op, dtype, 0)
    assert p.tensor_names == [a[0] for a in args[4]] and p.num_tensors == len(args[4])
    assert len(p.dims) >= 1 and op in repr(p)


@needs_ext
def test_prepared_launch_refuses_bad_pointers_naming_op_and_argument():
    """Before any CUDA call (so on CPU): a wrong count (argument 'pointers'), then each refusal validate()
    gives for the same request with those pointers, with its message (the tensor is the argument)."""
    args = _args("rms_norm", **ROWS)
    p = ext.prepare(*args)
    good = [a[1] for a in args[4]]
    for ptrs in (good[:2], good + [1 << 30], []):
        with pytest.raises(ValueError, match=rf"cutile_rs\.rms_norm: argument 'pointers': expected 3 data pointers "
                                             rf"\(x, w, out\), got {len(ptrs)}"):
            p.launch(ptrs, 0)
    cases = [(1, 0, "argument 'w': null data pointer"),
             (0, good[0] + 2, "argument 'x': data pointer .* is not aligned"),
             (2, good[0], "argument 'out': output is the same memory as input 'x'"),
             (2, good[0] + 64, "argument 'out': output overlaps input 'x'")]
    for i, ptr, want in cases:
        ptrs = list(good)
        ptrs[i] = ptr
        with pytest.raises(ValueError, match=want) as got:
            p.launch(tuple(ptrs), 0)
        with pytest.raises(ValueError) as same:
            ext.validate(*_with(args, i, ptr=ptr))
        assert str(got.value) == str(same.value)
    with pytest.raises(TypeError):
        p.launch("x", 0)


@needs_ext
def test_prepared_launch_lets_the_declared_inplace_pair_through_its_checks():
    """rope's out may be q itself (OpSpec.inplace_ok): the handle's pointer checks let it pass like validate()
    (what refuses it here is the missing GPU, after the checks: not a ValueError)."""
    shapes = dict(q=(1, 2, 8, 64), cos=(8, 64), sin=(8, 64), out=(1, 2, 8, 64))
    args = _args("rope", **shapes)
    ptrs = [a[1] for a in args[4]]
    ptrs[3] = ptrs[0]
    assert ext.validate(*_with(args, 3, ptr=ptrs[0]))
    if torch.cuda.is_available():
        pytest.skip("on a GPU these fake pointers would reach a launch; the GPU file covers launches")
    with pytest.raises(RuntimeError, match="CUDA") as info:  # no driver / no device: a runtime failure
        ext.prepare(*args).launch(ptrs, 0)
    assert not isinstance(info.value, ValueError), info.value


# ---- the adapter with a recording fake extension ------------------------------------------------------
class FakePrepared:
    def __init__(self, ext, req):
        self.ext, self.req = ext, req

    def launch(self, pointers, stream):
        self.ext.calls.append(("launch", self, list(pointers), stream))


class FakeExt:
    """Records prepare() and launches; no validation (the real module's is tested above)."""
    TENSOR_FIELDS, PREPARED = 6, 1

    def __init__(self):
        self.calls = []

    def prepare(self, *req):
        p = FakePrepared(self, req)
        self.calls.append(("prepare", p))
        return p

    def launch(self, *req):
        self.calls.append(("plain", req))

    def config_space(self, op, dtype):
        return [{"BLOCK": 1024, "OCC": 0, "W": 0}, {"BLOCK": 256, "OCC": 0, "W": 0}]


@pytest.fixture()
def fake(monkeypatch):
    """(backend, fake extension): tensors said to be on cuda:0, torch's stream 77 on a first call (request())
    and 88 + device index on a kept call (_raw_stream), no toolchain environment changes."""
    monkeypatch.setattr(cutile_rs, "_CUDA_DEVICE_NAMES", {0: "cuda:0"})
    monkeypatch.setattr(cutile_rs, "current_stream_handle", lambda t: 77)
    monkeypatch.setattr(cutile_rs, "_raw_stream", lambda index: 88 + index)
    monkeypatch.setattr(cutile_rs, "_prepare_env", lambda tc: None)
    b = CuTileRsBackend()
    b._mod = FakeExt()
    return b, b._mod


def _rows(m=4, n=8, dtype=torch.float32):
    return cuda_like(torch.randn(m, n, dtype=dtype), torch.randn(n, dtype=dtype), torch.empty(m, n, dtype=dtype))


def test_kept_calls_launch_the_prepared_handle_with_their_own_pointers(fake):
    b, fx = fake
    fn = b._make("rms_norm")
    calls = [_rows() for _ in range(3)]
    for ts in calls:
        fn(*ts, eps=1e-5)
    prepares = [c for c in fx.calls if c[0] == "prepare"]
    assert len(prepares) == 1, fx.calls
    handle = prepares[0][1]
    assert handle.req == b.request("rms_norm", calls[0], {"eps": 1e-5}), "prepared from request()'s arguments"
    launches = [c for c in fx.calls if c[0] == "launch"]
    assert [c[1] for c in launches] == [handle] * 3
    assert [c[2] for c in launches] == [[t.data_ptr() for t in ts] for ts in calls]
    assert len({c[2][0] for c in launches}) == 3, "each call's own pointers"
    assert [c[3] for c in launches] == [77, 88, 88], "first: request()'s stream; kept: _raw_stream(device)"
    assert not [c for c in fx.calls if c[0] == "plain"]
    assert list(b.first_call_seconds()) == ["rms_norm/fp32"]
    assert b.prepared("rms_norm", calls[1], {"eps": 1e-5}) is handle
    assert sum(1 for k in b._current_memo()[1] if k[0] == "rs-prepared") == 1


def test_a_new_signature_prepares_again(fake):
    b, fx = fake
    fn = b._make("rms_norm")
    x, w, out = _rows()
    fn(x, w, out, eps=1e-5)
    xt = cuda_like(torch.randn(8, 4).t())[0]  # same shape and dtype, other strides
    variants = [((x, w, out), {"eps": 1e-3}),  # another param value
                (_rows(m=5), {"eps": 1e-5}),  # another shape
                ((xt, w, out), {"eps": 1e-5}),
                (_rows(dtype=torch.float16), {"eps": 1e-5})]
    for ts, params in variants:
        n = len(fx.calls)
        fn(*ts, **params)
        new = fx.calls[n:]
        assert [c[0] for c in new] == ["prepare", "launch"], (params, new)
        assert new[0][1].req == b.request("rms_norm", ts, params) and new[1][1] is new[0][1]
    assert [c[1].req[4][0][3] for c in fx.calls if c[0] == "prepare"][3] == (1, 4)  # xt's strides reach Rust
    assert sorted(b.first_call_seconds()) == ["rms_norm/fp16", "rms_norm/fp32"]
    for ts, params in variants:  # each kept now
        n = len(fx.calls)
        fn(*ts, **params)
        assert [c[0] for c in fx.calls[n:]] == ["launch"]


def test_set_config_drops_the_handles(fake):
    b, fx = fake
    fn = b._make("vector_add")
    args = cuda_like(torch.zeros(4), torch.zeros(4), torch.zeros(4))
    fn(*args)
    fn(*args)
    b.set_config("vector_add", FP32, {"BLOCK": 256})
    fn(*args)
    b.set_config("vector_add", FP32, None)
    fn(*args)
    assert [c[0] for c in fx.calls] == ["prepare", "launch", "launch", "prepare", "launch", "prepare", "launch"]
    configs = [c[1].req[6] for c in fx.calls if c[0] == "prepare"]
    assert configs == [{}, {"BLOCK": 256}, {}]


def test_host_tensors_are_never_kept(fake):
    """A host tensor's request goes to launch() whole on every call (Rust refuses it, naming its device)."""
    b, fx = fake
    fn = b._make("rms_norm")
    ts = (torch.randn(4, 8), torch.randn(8), torch.empty(4, 8))
    fn(*ts, eps=1e-5)
    fn(*ts, eps=1e-5)
    assert [c[0] for c in fx.calls] == ["plain", "plain"]
    assert fx.calls[0][1] == b.request("rms_norm", ts, {"eps": 1e-5}) and fx.calls[0][1][4][0][5] == "cpu"
    assert b.prepared("rms_norm", ts, {"eps": 1e-5}) is None
    assert not [k for k in b._current_memo()[1] if k[0] == "rs-prepared"]


def test_bad_params_are_refused_every_time_before_the_extension(fake):
    b, fx = fake
    fn = b._make("rms_norm")
    for _ in range(2):
        with pytest.raises(TileRosettaError, match="eps") as info:
            fn(*_rows(), eps=-1.0)
        assert (info.value.op, info.value.backend, info.value.arg) == ("rms_norm", "cutile_rs", "eps")
    assert fx.calls == []


def test_rust_refusals_become_tilerosetta_errors(fake):
    b, fx = fake

    def refuse(*req):
        raise ValueError("cutile_rs.rms_norm: argument 'out': shape [4, 9] does not match")

    fx.prepare = refuse
    with pytest.raises(TileRosettaError) as info:
        b._make("rms_norm")(*_rows(), eps=1e-5)
    assert (info.value.op, info.value.backend, info.value.arg) == ("rms_norm", "cutile_rs", "out")
    assert not [k for k in b._current_memo()[1] if k[0] == "rs-prepared"], "a refused request is not kept"


def test_an_extension_without_prepare_is_unavailable(fake, monkeypatch):
    b, fx = fake
    monkeypatch.delattr(FakeExt, "PREPARED")
    ok, reason = b.available()
    assert not ok and "PREPARED=0" in reason and "rebuild with make build-rust" in reason, reason
    fx.prepare = None
    with pytest.raises(BackendUnavailable, match="no prepare"):
        b._make("rms_norm")(*_rows(), eps=1e-5)
