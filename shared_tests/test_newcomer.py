"""What a newcomer meets first: `tilerosetta list` states, the skip-reason summary, `tilerosetta.ops`,
`--help`, and the committed GPU run that `make report` / `make bench` (no GPU) render."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from tilerosetta import backends
from tilerosetta.backends.base import Backend
from tilerosetta.commands import list as list_cmd
from tilerosetta.specs import OP_NAMES, SPECS, get_spec


def test_list_legend_covers_every_state_and_backends_report_one():
    assert set(list_cmd.LEGEND) >= set(Backend.STATES)
    for b in backends.all_backends():
        assert b.state() in Backend.STATES, b.name
        assert (b.state() == "runs") == b.is_available()[0], b.name


def test_torch_runs_and_julia_is_unavailable_not_built():
    assert backends.get("torch").state() == "runs"
    jl = backends.get("cutile_jl")
    if jl.is_available()[0]:
        pytest.skip("a Julia runtime is present here")
    assert jl.state() == "unavailable"  # never "built" when there is no Julia


class _NotBuilt(Backend):
    name, language = "fake_native", "fake"

    def available(self):
        return False, "extension not built: run make build-fake"

    def implementations(self):
        return {}

    def state_when_unavailable(self):
        return "not built"


def test_listing_shows_not_built_rather_than_missing(monkeypatch):
    monkeypatch.setattr(backends, "all_backends", lambda: [_NotBuilt()])
    table, notes = list_cmd.listing()
    cells = [c for col in table.columns[3:] for c in col._cells]
    assert cells and all("not built" in c for c in cells)
    assert notes == [("fake_native", "not built: extension not built: run make build-fake")]


def test_skip_reasons_are_folded_for_counting():
    import conftest

    class R:
        longrepr = ("f.py", 1, "Skipped: cutile_py unavailable: no CUDA GPU (case 17 at 0x7f3a)")

    class S:
        longrepr = ("f.py", 2, "Skipped: cutile_py unavailable: no CUDA GPU (case 3 at 0x1234)")

    assert conftest._skip_reason(R()) == conftest._skip_reason(S())
    assert "cutile_py unavailable: no CUDA GPU" in conftest._skip_reason(R())


@pytest.mark.parametrize("op", OP_NAMES)
def test_ops_wrappers_allocate_outputs_of_the_spec_shape(op):
    import tilerosetta.ops as tro

    spec = get_spec(op)
    case = spec.cases[0]
    dtype = spec.dtypes[-1] if op == "attention" else torch.float32
    gen = torch.Generator().manual_seed(0)
    inputs = spec.make_inputs(case, dtype, "cpu", gen)
    inputs = {k: v.to(backends.get("torch").device_type) for k, v in inputs.items()}  # cuda on a GPU machine
    out = getattr(tro, op)(*inputs.values(), backend="torch", **case.params)
    outs = out if isinstance(out, tuple) else (out,)
    want = spec.shapes(case)
    assert [tuple(o.shape) for o in outs] == [want[n] for n in spec.outputs]
    ref = spec.reference(spec.full_params(case.params), **{k: v.double() for k, v in inputs.items()})
    for name, o in zip(spec.outputs, outs):
        assert torch.allclose(o.double().cpu(), ref[name].cpu(), atol=5e-2, rtol=5e-2), name


def test_ops_refuses_bad_arity_naming_the_op():
    import tilerosetta.ops as tro
    from tilerosetta.errors import TileRosettaError

    with pytest.raises(TileRosettaError, match="softmax"):
        tro.softmax(torch.randn(2, 3), torch.randn(2, 3))
    assert set(SPECS) <= set(tro.__all__)


def test_help_is_clean():
    out = subprocess.run([sys.executable, "-m", "tilerosetta", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    first = out.stdout.split("\n\n")[1]
    assert first.strip().endswith(".") and "register(" not in out.stdout


def test_torch_baseline_does_not_import_triton():
    """Without a GPU the Triton adapter must pick the interpreter before triton is first imported; the
    torch baseline (loaded first by `tilerosetta list`) importing it made triton 'unavailable' there."""
    import subprocess
    import sys

    code = "import sys, tilerosetta.backends.torch_ref; print('triton' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr
