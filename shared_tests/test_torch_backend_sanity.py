"""The harness must be able to fail: a deliberately wrong backend is caught on every kind of error."""

from __future__ import annotations

import torch

from tilerosetta.backends.base import Backend
from tilerosetta.harness import check_case
from tilerosetta.specs import SPECS, Case


class _Broken(Backend):
    name, language, device_type = "broken", "test", "cpu"

    def __init__(self, fn):
        self._fn = fn

    def available(self):
        return True, "test double"

    def implementations(self):
        return {"vector_add": self._fn, "softmax": self._fn}


def _check(fn, op="vector_add", dims=None):
    spec = SPECS[op]
    case = Case(dims or {"N": 1000})
    return check_case(_Broken(fn), spec, torch.float32, case, seed=0, device="cpu")


def test_correct_double_passes():
    assert _check(lambda a, b, out: torch.add(a, b, out=out)).ok


def test_unwritten_tail_is_caught():
    def partial(a, b, out):
        out[:-1] = a[:-1] + b[:-1]  # forgets the last element, as a kernel without a tail mask would

    r = _check(partial)
    assert not r.ok and r.unwritten == 1 and "NaN" in r.message


def test_small_error_is_caught():
    r = _check(lambda a, b, out: torch.add(a, b * 1.001, out=out))
    assert not r.ok and r.rel_err > r.tol


def test_unstable_softmax_is_caught():
    def naive(x, out):
        e = torch.exp(x)  # no max-subtraction: overflows on the spec's scaled inputs
        out.copy_(e / e.sum(-1, keepdim=True))

    r = _check(naive, op="softmax", dims={"M": 8, "N": 512})
    assert not r.ok


def test_the_torch_backend_is_every_spec_baseline():
    """The torch backend has no op list of its own: its returning form is each spec's `baseline`, and an
    op without a hand-written out= form gets the baseline plus a copy, so a new spec is served as is."""
    from tilerosetta.backends import torch_ref

    tb = torch_ref.TorchBackend()
    assert set(tb.returning()) == set(tb.implementations()) == set(SPECS) and tb.missing() == {}
    assert tb.returning()["layer_norm"] == SPECS["layer_norm"].baseline
    derived = tb.implementations()["rms_norm"]
    assert derived.returning == SPECS["rms_norm"].baseline  # no out= form: derived from the spec
    assert tb.implementations()["softmax"] is torch_ref.softmax  # torch's out= form kept
    case = Case({"M": 3, "N": 33})
    assert check_case(tb, SPECS["rms_norm"], torch.float32, case, seed=0, device=tb.device_type).ok
