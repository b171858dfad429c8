"""Checking one backend on one case: fresh inputs, poisoned outputs, reference, tolerance.

Used by the conformance suite, by `tilerosetta bench` (every result is checked before it is timed) and
by the sweep, so "correct" means the same thing everywhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tilerosetta.backends import Backend
from tilerosetta.specs import Case, OpSpec, dtype_name, rel_error


@dataclass
class CheckResult:
    backend: str
    op: str
    dtype: str
    case: str
    ok: bool
    rel_err: float
    tol: float
    unwritten: int  # output elements still holding the NaN poison
    message: str

    def __str__(self):
        state = "ok" if self.ok else "FAIL"
        return (f"{state} {self.backend}.{self.op}[{self.dtype}, {self.case}] rel_err={self.rel_err:.3g} "
                f"tol={self.tol:g}{'' if self.ok else ': ' + self.message}")


def make_case_tensors(spec: OpSpec, case: Case, dtype: torch.dtype, device, seed: int, bench: bool = False):
    """Inputs and NaN-poisoned outputs. bench=True draws the benchmark inputs (like real activations,
    spec.make_bench_inputs); otherwise the conformance inputs, which may be stress distributions."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    inputs = (spec.make_bench_inputs if bench else spec.make_inputs)(case, dtype, device, gen)
    outputs = spec.make_outputs(case, dtype, device)
    return inputs, outputs


def reference(spec: OpSpec, case: Case, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The spec's reference in float64 on upcast inputs (same device: float64 is exact enough)."""
    up = {n: t.to(torch.float64) for n, t in inputs.items()}
    return spec.reference(spec.full_params(case.params), **up)


def compare(spec: OpSpec, dtype, outputs, ref) -> tuple[bool, float, int, str]:
    tol = spec.tolerance(dtype)
    worst, unwritten, msgs = 0.0, 0, []
    for n, out in outputs.items():
        nan = int(torch.isnan(out).sum().item())
        unwritten += nan
        err = rel_error(out, ref[n])
        worst = max(worst, err)
        if nan:
            msgs.append(f"'{n}': {nan} of {out.numel()} elements NaN (unwritten or non-finite)")
        elif not math.isfinite(err):
            msgs.append(f"'{n}': non-finite values")
        elif err > tol:
            msgs.append(f"'{n}': rel_err {err:.3g} > tol {tol:g}")
    return not msgs, worst, unwritten, "; ".join(msgs)


def check_case(backend: Backend, spec: OpSpec, dtype: torch.dtype, case: Case, seed: int = 0,
               device=None) -> CheckResult:
    """Run one case on one backend and compare with the reference. Exceptions propagate to the caller."""
    device = device or backend.device_type
    inputs, outputs = make_case_tensors(spec, case, dtype, device, seed)
    fn = backend.op(spec.name)
    fn(*inputs.values(), *outputs.values(), **case.params)
    if device != "cpu" and torch.cuda.is_available():
        torch.cuda.synchronize()
    ref = reference(spec, case, inputs)
    ok, err, unwritten, msg = compare(spec, dtype, outputs, ref)
    return CheckResult(backend.name, spec.name, dtype_name(dtype), case.name, ok, err, spec.tolerance(dtype),
                       unwritten, msg)
