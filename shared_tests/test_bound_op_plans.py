"""BoundOp validates a call signature once and keeps the result (issue 14 item 7: host cost per call);
what depends on addresses (an output overlapping an input) is still checked on every call, and anything that
differs from a validated call (a param's type, a dtype, a stride) is validated again."""

from __future__ import annotations

import math

import pytest
import torch

from tilerosetta.backends.base import PLAN_CACHE_SIZE
from tilerosetta.backends.torch_ref import TorchBackend
from tilerosetta.errors import TileRosettaError, TileRosettaTypeError


class CpuTorch(TorchBackend):
    def __init__(self):
        self.device_type = "cpu"  # CPU tensors on a GPU machine too


@pytest.fixture
def counted(monkeypatch):
    """(backend, calls): calls counts the spec validations of that backend's ops."""
    b = CpuTorch()
    calls = []
    from tilerosetta.specs.base import OpSpec
    real = OpSpec.validate

    def counting(self, *args, **kwargs):
        calls.append(self.name)
        return real(self, *args, **kwargs)
    monkeypatch.setattr(OpSpec, "validate", counting)
    return b, calls


def test_one_validation_per_signature(counted):
    b, calls = counted
    op = b.op("rms_norm")
    x, w = torch.randn(4, 64), torch.randn(64)
    for _ in range(5):
        out = torch.empty(4, 64)
        op(x, w, out, eps=1e-5)
        torch.testing.assert_close(out, torch.nn.functional.rms_norm(x, (64,), w, eps=1e-5))
    assert calls == ["rms_norm"]
    op(torch.randn(8, 64), w, torch.empty(8, 64), eps=1e-5)  # another shape: validated once more
    op(x, w, torch.empty(4, 64))  # eps left to its default: another signature
    assert calls == ["rms_norm"] * 3


def test_overlap_is_checked_on_every_call_of_a_cached_signature(counted):
    b, calls = counted
    op = b.op("softmax")
    x = torch.randn(4, 32)
    op(x, torch.empty(4, 32))
    with pytest.raises(TileRosettaError, match=r"softmax: argument 'out': output is the same memory as 'x'"):
        op(x, x)  # same shapes, dtype and strides as the validated call: only the addresses differ
    buf = torch.randn(8, 32)
    with pytest.raises(TileRosettaError, match="partly overlaps"):
        op(buf[:4], buf[2:6])
    assert calls == ["softmax"]


@pytest.mark.parametrize("first, then", [(True, 1), (False, 0), (True, "true")])
def test_a_param_of_another_type_is_validated_again(counted, first, then):
    """1 == True and hash(1) == hash(True): the signature keeps each param's type, so causal=1 after a
    validated causal=True is refused, not served from the cache."""
    b, _ = counted
    op = b.op("attention")
    q, k, v = (torch.randn(1, 2, 8, 64, dtype=torch.bfloat16) for _ in range(3))
    op(q, k, v, torch.empty_like(q), causal=first)
    with pytest.raises(TileRosettaTypeError, match="causal"):
        op(q, k, v, torch.empty_like(q), causal=then)


def test_eps_nan_is_refused_every_time(counted):
    b, calls = counted
    op = b.op("rms_norm")
    x, w = torch.randn(2, 8), torch.randn(8)
    for _ in range(2):  # NaN != NaN: never a cache hit, always the full check
        with pytest.raises(TileRosettaError, match="eps"):
            op(x, w, torch.empty(2, 8), eps=math.nan)
    assert calls == ["rms_norm"] * 2


def test_a_changed_stride_or_dtype_is_validated_again(counted):
    b, _ = counted
    op = b.op("vector_add")
    a, c = torch.randn(16), torch.randn(16)
    op(a, c, torch.empty(16))
    with pytest.raises(TileRosettaError, match="not contiguous"):
        op(torch.randn(32)[::2], c, torch.empty(16))
    with pytest.raises(TileRosettaError, match="differs"):
        op(a.half(), c, torch.empty(16))


def test_the_cache_is_bounded(counted):
    b, _ = counted
    op = b.op("vector_add")
    for n in range(1, PLAN_CACHE_SIZE + 10):
        op(torch.randn(n), torch.randn(n), torch.empty(n))
    assert 0 < len(op._plans) <= PLAN_CACHE_SIZE


def test_the_returning_form_shares_the_mechanism(counted):
    """ReturningOp (baselines and peers as their users call them) validates once per signature too, and a
    runtime failure reaches the caller as TileRosettaRuntimeError naming op and backend."""
    from tilerosetta.errors import TileRosettaRuntimeError

    b, calls = counted
    op = b.op_returning("softmax")
    x = torch.randn(4, 32)
    for _ in range(3):
        torch.testing.assert_close(op(x)["out"], torch.softmax(x, -1))
    assert calls == ["softmax"]
    with pytest.raises(TileRosettaError, match=r"expected 1 input tensors"):
        op(x, x)

    def broken(x):
        raise RuntimeError("launch failed")
    op.fn = broken
    with pytest.raises(TileRosettaRuntimeError, match=r"torch\.softmax: RuntimeError: launch failed"):
        op(x)


def test_op_returns_one_bound_op_per_implementation(counted):
    """The validated signatures serve every caller of backend.op(name), e.g. tilerosetta.ops on each call;
    a new implementation object gets a new BoundOp."""
    b, calls = counted
    assert b.op("softmax") is b.op("softmax")
    x = torch.randn(3, 5)
    for _ in range(3):
        b.op("softmax")(x, torch.empty(3, 5))
    assert calls == ["softmax"]
    impls = dict(b.implementations())
    impls["softmax"] = lambda x, out: out.copy_(torch.softmax(x, -1))
    b.implementations = lambda: impls
    assert b.op("softmax").fn is impls["softmax"]
