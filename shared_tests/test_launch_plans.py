"""Backend.launch_plan keeps the launches a Python backend plans for a call signature (issue 14 item 7: host
cost per call), so cutile_py and triton skip config_for and the kernel module's prepare on a repeated call.
A kept plan must never serve a call it was not planned for: each field of the signature (device, dtype,
shape, strides of every tensor, each param's type and value) and set_config must lead to a fresh plan, and
the tensors launched are always the call's own. Also the cheap reads of torch's current stream that the
native backends (raw handle) and cutile_py (a kept Stream object) launch on."""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest
import torch

from tilerosetta.backends.base import Backend


class Launch(NamedTuple):  # the shape of the kernel modules' Launch (cutile and triton alike)
    kernel: Any
    grid: tuple[int, ...]
    args: tuple


class Planned(Backend):
    """A backend whose planner counts its runs and whose launch records what it is given."""

    name = "planned"
    device_type = "cpu"

    def __init__(self):
        self.prepared, self.launched = [], []

    def builtin_config(self, op, dtype, dims):
        return {"BLOCK": 8}

    def config_space(self, op, dtype):
        return [{"BLOCK": 8}, {"BLOCK": 16}]

    def call(self, *tensors, extra=None, **params):
        """Plans (like the adapters: config_for, then a prepare) and launches through launch_plan."""
        def prepare():
            cfg = self.config_for("vector_add", tensors[0].dtype, {"N": tensors[0].shape[0]})
            self.prepared.append(tensors[0].shape)
            n = tensors[0].numel()
            args = (*tensors, n, params.get("eps", 1.0))
            return [Launch("kernel", (-(-n // cfg["BLOCK"]),), args if extra is None else (*args, extra))]

        for lx, args in self.launch_plan("vector_add", tensors, params, prepare):
            self.launched.append((lx.kernel, lx.grid, tuple(args)))


def same(a, b):
    return len(a) == len(b) and all(x is y if isinstance(x, torch.Tensor) else x == y for x, y in zip(a, b))


def test_a_repeated_signature_is_planned_once_and_launches_its_own_tensors():
    b = Planned()
    for _ in range(3):
        a, c, out = torch.zeros(20), torch.zeros(20), torch.empty(20)
        b.call(a, c, out)
        assert same(b.launched[-1][2], (a, c, out, 20, 1.0))  # this call's tensors, not the first call's
    assert len(b.prepared) == 1
    assert b.launched[-1][1] == (3,)


@pytest.mark.parametrize("change", ["shape", "dtype", "stride", "param value", "param type", "param added"])
def test_each_field_of_the_signature_gets_a_fresh_plan(change):
    b = Planned()
    a, c, out = torch.zeros(20), torch.zeros(20), torch.empty(20)
    b.call(a, c, out, eps=0.5)
    args, params = [a, c, out], {"eps": 0.5}
    if change == "shape":
        args = [torch.zeros(40) for _ in range(3)]
    elif change == "dtype":
        args = [t.half() for t in args]
    elif change == "stride":
        args[0] = torch.zeros(40)[::2]  # same shape and dtype, stride 2
    elif change == "param value":
        params = {"eps": 0.25}
    elif change == "param type":
        params = {"eps": 1}  # == 1.0 and the same hash as 1.0: the type is in the key
        b.call(a, c, out, eps=1.0)
    elif change == "param added":
        params = {"eps": 0.5, "other": True}
    before = len(b.prepared)
    b.call(*args, **params)
    assert len(b.prepared) == before + 1, f"a call with another {change} was served a kept plan"
    if change == "shape":
        assert b.launched[-1][1] == (5,) and b.launched[-1][2][3] == 40


def test_set_config_drops_the_kept_plans():
    b = Planned()
    a, c, out = torch.zeros(32), torch.zeros(32), torch.empty(32)
    b.call(a, c, out)
    assert b.launched[-1][1] == (4,)
    b.set_config("vector_add", torch.float32, {"BLOCK": 16})
    b.call(a, c, out)
    assert b.launched[-1][1] == (2,) and len(b.prepared) == 2
    b.set_config("vector_add", torch.float32, None)
    b.call(a, c, out)
    assert b.launched[-1][1] == (4,)


def test_a_plan_holding_another_tensor_is_not_kept():
    """A view or workspace made for one call must not be launched by the next: such plans run every time."""
    b = Planned()
    for _ in range(3):
        a, c, out = torch.zeros(8), torch.zeros(8), torch.empty(8)
        ws = torch.empty(4)
        b.call(a, c, out, extra=ws)
        assert b.launched[-1][2][-1] is ws
    assert len(b.prepared) == 3
    b.call(a, c, out, extra=object())  # an unknown object: not kept either
    assert len(b.prepared) == 4


def test_aliased_tensors_never_build_the_plan_of_distinct_ones():
    """A call passing one tensor twice cannot say which position each argument came from: it is not kept,
    and the next call with distinct tensors gets its own arguments."""
    b = Planned()
    x, out = torch.zeros(8), torch.empty(8)
    b.call(x, x, out)
    a, c = torch.zeros(8), torch.ones(8)
    b.call(a, c, out)
    assert same(b.launched[-1][2], (a, c, out, 8, 1.0))
    b.call(x, x, out)  # a kept plan serves the aliased call by position: both slots are x
    assert same(b.launched[-1][2], (x, x, out, 8, 1.0))


def test_junk_arguments_reach_the_planner_unkept():
    b = Planned()
    b.call(torch.zeros(4), torch.zeros(4), torch.empty(4), eps=[1.0])  # unhashable param: planned, not kept
    b.call(torch.zeros(4), torch.zeros(4), torch.empty(4), eps=[1.0])
    assert len(b.prepared) == 2


# ---- the real planners: a kept plan launches what the planner itself gives --------------------------
def _cutile_or_skip():
    pytest.importorskip("cuda.tile", reason="cuda-tile not installed")
    from tilerosetta.backends import cutile_py

    return cutile_py


def test_cutile_py_launches_what_its_planner_gives_on_every_call(monkeypatch):
    """cutile_py's launch path (no GPU: ct.launch and the stream stubbed) against the planner called directly,
    for each op's conformance cases, twice with fresh tensors each (the second from the kept plan)."""
    cutile_py = _cutile_or_skip()
    import cuda.tile as ct

    from tilerosetta.harness import make_case_tensors
    from tilerosetta.kernels.cutile import prepare_fn
    from tilerosetta.specs import OP_NAMES, SPECS

    launched = []
    monkeypatch.setattr(ct, "launch", lambda stream, grid, kernel, args: launched.append((kernel, grid, args)))
    monkeypatch.setattr(cutile_py, "current_stream", lambda t: "stream")
    b = cutile_py.CuTilePyBackend()
    checked = 0
    for op in OP_NAMES:
        spec, fn = SPECS[op], b.implementations()[op]
        for case in spec.cases[:3]:
            dtype = spec.dtypes[0]
            params = spec.full_params(case.params)
            for seed in (0, 1):
                inputs, outputs = make_case_tensors(spec, case, dtype, "cpu", seed)
                tensors = (*inputs.values(), *outputs.values())
                launched.clear()
                fn(*tensors, **params)
                cfg = b.config_for(op, dtype, spec.dims_of(tensors))
                want = [(lx.kernel, lx.grid, lx.args) for lx in prepare_fn(op)(*tensors, cfg, **params)]
                assert len(launched) == len(want), (op, case.name)
                for (k, g, args), (wk, wg, wargs) in zip(launched, want):
                    assert k is wk and g == wg, (op, case.name)
                    for x, y in zip(args, wargs, strict=True):
                        if isinstance(y, torch.Tensor) and any(y is t for t in tensors):
                            assert x is y, (op, case.name, "launched another call's tensor")
                        elif not isinstance(y, torch.Tensor):
                            assert x == y, (op, case.name)
                        else:  # a view or workspace of this call: the plan is not kept, shapes agree
                            assert x.shape == y.shape, (op, case.name)
                checked += 1
    assert checked >= 2 * len(OP_NAMES)


# ---- torch's current stream, cheaply ----------------------------------------------------------------
class _CudaLike:
    """Says it is a CUDA tensor on device `index` (the helpers read only is_cuda and get_device())."""

    is_cuda = True

    def __init__(self, index):
        self.index = index

    def get_device(self):
        return self.index


class _Stream:
    def __init__(self, handle):
        self.cuda_stream = handle


def test_current_stream_handle_follows_the_current_stream(monkeypatch):
    from tilerosetta.backends import base

    current = {0: 111, 1: 222}
    monkeypatch.setattr(base, "_raw_stream", lambda index: current[index])
    assert base.current_stream_handle(torch.zeros(1)) == 0  # not a CUDA tensor: the native layer refuses it
    assert base.current_stream_handle(_CudaLike(1)) == 222  # the tensor's own device, not the current one
    current[1] = 333  # torch.cuda.stream(s) switched it: read again on every call, never kept
    assert base.current_stream_handle(_CudaLike(1)) == 333


def test_current_stream_object_is_kept_per_device_and_handle(monkeypatch):
    from tilerosetta.backends import base

    current, made = {0: 111}, []

    def torch_current_stream(index):
        made.append(index)
        return _Stream(current[index])
    monkeypatch.setattr(base, "_raw_stream", lambda index: current[index])
    monkeypatch.setattr(base.torch.cuda, "current_stream", torch_current_stream)
    monkeypatch.setattr(base, "_STREAMS", {})
    first = base.current_stream(_CudaLike(0))
    assert first.cuda_stream == 111 and base.current_stream(_CudaLike(0)) is first and made == [0]
    current[0] = 444  # another stream made current: a Stream object for it, not the kept one
    other = base.current_stream(_CudaLike(0))
    assert other.cuda_stream == 444 and other is not first
    current[0] = 111
    assert base.current_stream(_CudaLike(0)) is first
    # torch answering with an object of another handle (a race with a stream switch) is used, not kept
    monkeypatch.setattr(base.torch.cuda, "current_stream", lambda index: _Stream(999))
    current[0] = 555
    assert base.current_stream(_CudaLike(0)).cuda_stream == 999 and (0, 555) not in base._STREAMS
