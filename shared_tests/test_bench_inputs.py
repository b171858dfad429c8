"""Issue 13, item 2: benchmark inputs are drawn like real activations; the conformance stress
distributions (softmax's x30 logits, layer_norm's +3 offset) are never what the headline times, and an
op timed on more than one distribution declares them in its spec, the first being the headline."""

import pytest
import torch

from bench_fakes import CountingBackend, fixed_timer
from tilerosetta.bench import report, results, runner
from tilerosetta.harness import make_case_tensors
from tilerosetta.specs import OP_NAMES, SPECS, Case

F32 = torch.float32


def _stats(t):
    t = t.double()
    return t.mean().item(), t.std().item()


def _dtype(spec):
    return F32 if F32 in spec.dtypes else spec.dtypes[0]


@pytest.mark.parametrize("op", OP_NAMES)
def test_headline_bench_inputs_are_standard_normal_activations(op):
    """The first input of every op (the activation: x, a, q) is ~N(0, 1) in the headline bench inputs."""
    spec = SPECS[op]
    case = spec.cases[-1]
    inputs, _ = make_case_tensors(spec, case, _dtype(spec), "cpu", 0, bench=True)
    first = next(iter(inputs.values()))
    if first.numel() < 2000:
        pytest.skip(f"{op}: largest conformance case too small for statistics ({first.numel()} elements)")
    mean, std = _stats(first)
    assert abs(mean) < 0.1 and 0.9 < std < 1.1, f"{op}: bench input mean {mean:.3g}, std {std:.3g}"


def test_softmax_and_layer_norm_stress_inputs_stay_in_conformance():
    sm, ln = SPECS["softmax"], SPECS["layer_norm"]
    case = Case({"M": 64, "N": 1024})
    conf = make_case_tensors(sm, case, F32, "cpu", 0)[0]["x"]
    bench = make_case_tensors(sm, case, F32, "cpu", 0, bench=True)[0]["x"]
    assert _stats(conf)[1] > 25 and _stats(bench)[1] < 1.1  # conformance x30, bench plain logits
    conf = make_case_tensors(ln, case, F32, "cpu", 0)[0]["x"]
    bench = make_case_tensors(ln, case, F32, "cpu", 0, bench=True)[0]["x"]
    assert _stats(conf)[0] > 2.5 and abs(_stats(bench)[0]) < 0.1  # conformance +3 offset, bench none


def test_softmax_declares_its_two_distributions_headline_first():
    sm = SPECS["softmax"]
    assert list(sm.bench_distributions) == ["randn", "randn_x30"]
    x30 = Case({"M": 64, "N": 1024}, dist="randn_x30")
    assert x30.name == "M64_N1024_randn_x30" and not sm.is_headline(x30) and sm.is_headline(Case({"M": 1}))
    assert _stats(make_case_tensors(sm, x30, F32, "cpu", 0, bench=True)[0]["x"])[1] > 25
    with pytest.raises(ValueError, match="softmax: unknown bench distribution 'nope'"):
        make_case_tensors(sm, Case({"M": 2, "N": 2}, dist="nope"), F32, "cpu", 0, bench=True)
    assert all(list(SPECS[o].bench_distributions)[0] for o in OP_NAMES)


def test_plan_times_softmax_on_both_and_quick_on_the_headline_only():
    plan = runner.build_plan(["softmax", "rms_norm"], ["bf16"], None, quick=False, cpu=False)
    names = [(s.name, c.name) for s, _, c in plan]
    assert ("softmax", "M4096_N16384") in names and ("softmax", "M4096_N16384_randn_x30") in names
    assert not any(n.endswith("randn_x30") for op, n in names if op == "rms_norm")
    quick = runner.build_plan(["softmax"], None, None, quick=True, cpu=False)
    assert [c.name for _, _, c in quick] == ["M4096_N16384"]


def test_runner_times_the_bench_inputs_and_the_report_keeps_x30_out_of_the_headline(tmp_path):
    seen = []

    class Watching(CountingBackend):
        def implementations(self):
            impls = super().implementations()
            inner = impls["softmax"]

            def softmax(x, out):
                seen.append(x.double().std().item())
                return inner(x, out)
            impls["softmax"] = softmax
            return impls

    sm = SPECS["softmax"]
    base = Case({"M": 64, "N": 1024})
    plan = [(sm, F32, base), (sm, F32, Case(base.dims, dist="randn_x30"))]
    path = tmp_path / "r.jsonl"
    with results.ResultsWriter(path) as w:
        recs = runner.Runner([Watching("torch")], w, runner.Settings(cpu=True), timer=fixed_timer(1.0)).run(plan)
    assert [(r["distribution"], r["headline"], r["status"]) for r in recs] == [("randn", True, "ok"),
                                                                               ("randn_x30", False, "ok")]
    assert max(seen[:3]) < 1.1 and min(seen[-3:]) > 25  # headline calls on N(0,1), then the x30 case
    res = results.load(path)
    assert report.cell_stats(res, "softmax", "torch", "fp32")["n"] == 1
    text = " ".join(b.text for b in report.distribution_notes(res))
    assert "softmax: headline on randn inputs; also timed on randn_x30" in text
