"""Issue 13, item 1: baselines and peers are timed as their users call them, never with a copy into our
buffer. On CPU with the real `torch` backend and fakes; each timed call runs under a TorchDispatchMode
(bench_fakes.CallerMemoryWrites) that lists every aten op writing into memory allocated before the call,
so `out.copy_(F.rms_norm(...))` or `torch.softmax(x, out=out)` inside the timed region is caught."""

import pytest
import torch

from bench_fakes import CountingBackend, watching_timer
from tilerosetta.backends import torch_ref
from tilerosetta.backends.base import DESTINATION, RETURNS, destination_from_returning
from tilerosetta.bench import results, runner
from tilerosetta.harness import compare, make_case_tensors, reference
from tilerosetta.specs import OP_NAMES, SPECS


class CpuTorch(torch_ref.TorchBackend):
    """torch on CPU tensors also on a GPU machine (where the torch backend itself runs on cuda): the
    memory watcher and these checks are CPU tests."""

    def __init__(self):
        self.device_type = "cpu"


def one_case_per_op():
    plan = []
    for op in OP_NAMES:
        spec = SPECS[op]
        dtype = torch.float32 if torch.float32 in spec.dtypes else torch.bfloat16
        plan.append((spec, dtype, spec.cases[min(3, len(spec.cases) - 1)]))
    return plan


def run_watched(tmp_path, backend, plan):
    """Run the bench on CPU; the timer runs the timed call once under CallerMemoryWrites."""
    seen = []
    timer = watching_timer(seen)

    with results.ResultsWriter(tmp_path / "r.jsonl") as w:
        recs = runner.Runner([backend], w, runner.Settings(cpu=True), timer=timer).run(plan)
    return recs, seen


def test_torch_baseline_is_timed_returning_its_own_output_without_a_copy(tmp_path):
    recs, watched = run_watched(tmp_path, CpuTorch(), one_case_per_op())
    assert [r["status"] for r in recs] == ["ok"] * len(OP_NAMES), [(r["op"], r.get("message")) for r in recs]
    assert {r["convention"] for r in recs} == {RETURNS}
    assert len(watched) == len(OP_NAMES)
    for r, w in zip(recs, watched):
        assert w.ops, f"{r['op']}: nothing ran inside the timed call"
        assert w.writes == [], f"torch.{r['op']} timed call writes into caller memory: {w.writes}"


def test_the_detector_sees_a_copy_into_out(tmp_path):
    """Negative control: the same bench on torch's destination form (out.copy_ / out=) is flagged, so
    the test above would fail if a copy were reintroduced into the timed call."""

    class TorchDestinationOnly(CpuTorch):
        def returning(self):
            return {}

    plan = [p for p in one_case_per_op() if p[0].name in ("softmax", "rms_norm", "attention")]
    recs, watched = run_watched(tmp_path, TorchDestinationOnly(), plan)
    assert {r["convention"] for r in recs} == {DESTINATION}
    for r, w in zip(recs, watched):
        assert r["status"] == "ok" and w.writes, f"{r['op']}: a write into out was not detected"
    assert any("copy_" in x for w in watched for x in w.writes)


class BothForms(CountingBackend):
    """A fake peer whose softmax has a destination form (counted) and a returning form (counted)."""

    def __init__(self, name="peer_fake", result=None):
        super().__init__(name)
        self.result = result

    def returning(self):
        def softmax(x):
            self.calls["returning"] = self.calls.get("returning", 0) + 1
            return self.result(x) if self.result else torch.softmax(x, dim=-1)
        return {"softmax": softmax}


def test_a_peer_with_a_returning_form_is_timed_through_it(tmp_path):
    b = BothForms()
    sm = SPECS["softmax"]
    recs, watched = run_watched(tmp_path, b, [(sm, torch.float32, sm.cases[3])])
    (r,) = recs
    assert r["status"] == "ok" and r["convention"] == RETURNS and watched[0].writes == []
    assert b.calls.get("softmax", 0) == 0, "the destination form was called by the bench"
    assert b.calls["returning"] >= 3  # first call, warm call, timed call (+ the fake timer's own)
    assert results.load(tmp_path / "r.jsonl").results[0]["convention"] == RETURNS


@pytest.mark.parametrize("bad, message", [
    (lambda x: x, "shares memory with an input"),
    (lambda x: torch.softmax(x, -1)[:, :-1], "came back"),
    (lambda x: torch.softmax(x, -1).double(), "came back"),
    (lambda x: torch.softmax(x, -1) * 2, "rel_err"),
])
def test_a_bad_returned_output_is_wrong_and_never_timed(tmp_path, bad, message):
    sm = SPECS["softmax"]
    recs, watched = run_watched(tmp_path, BothForms(result=bad), [(sm, torch.float32, sm.cases[3])])
    assert recs[0]["status"] == "wrong" and message in recs[0]["message"] and not watched


def test_conformance_form_of_a_returning_op_copies_into_out():
    spec, case = SPECS["layer_norm"], SPECS["layer_norm"].cases[4]
    fn = destination_from_returning("layer_norm", torch_ref.RETURNING["layer_norm"])
    inputs, outputs = make_case_tensors(spec, case, torch.float32, "cpu", 0)
    fn(*inputs.values(), *outputs.values(), **spec.full_params(case.params))
    assert compare(spec, torch.float32, outputs, reference(spec, case, inputs))[0]


def test_returning_op_validates_inputs_like_the_destination_form():
    from tilerosetta.errors import TileRosettaError

    op = CpuTorch().op_returning("silu_and_mul")
    assert op(torch.randn(3, 8))["out"].shape == (3, 4)
    with pytest.raises(TileRosettaError, match=r"torch\.silu_and_mul: argument 'x'.*multiple of 2"):
        op(torch.randn(3, 7))
