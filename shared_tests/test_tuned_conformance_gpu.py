"""Every committed tuned configuration computes its op's conformance cases correctly on this GPU.

A sweep checks a configuration only on the bench case it times, yet the tuned entry then steers every call of
its size class. Forcing each entry's configuration (set_config) over the spec's conformance cases (ragged
rows and columns, tails, tiny shapes) checks the kernel it selects beyond that one shape. Runs on a GPU of the
entry's arch; elsewhere each entry is skipped with the reason.

TILEROSETTA_TUNED_SINCE=PATH (a copy of the table from before a sweep) keeps only the entries whose configuration
PATH lacks or holds differently: the ones the sweep just wrote (tools/gpu-session.sh, AFTER_SWEEPS).
"""

from __future__ import annotations

import os

import pytest
import torch

from tilerosetta import backends, toolchain, tuning
from tilerosetta.harness import check_case
from tilerosetta.specs import DTYPE_NAMES, SPECS


def _changed_since(path: str | None):
    """(backend, op, dtype, arch, class) -> config of the table at path (None: no filter)."""
    if not path:
        return None
    if not os.path.isfile(path):  # an empty filter would quietly check every entry instead
        raise FileNotFoundError(f"TILEROSETTA_TUNED_SINCE={path}: no such table")
    return {(b, op, dt, arch, cls): e["config"] for b, op, dt, arch, cls, e in tuning.entries(path)}


def _entries():
    seen, out = set(), []
    before = _changed_since(os.environ.get("TILEROSETTA_TUNED_SINCE"))
    for name, op, dt, arch, cls, e in tuning.entries():
        if before is not None and before.get((name, op, dt, arch, cls)) == e["config"]:
            continue  # unchanged since the saved table
        # one check per distinct configuration and class structure: the same config tuned for D 64 and D 128
        # runs on different conformance cases (_in_class)
        key = (name, op, dt, arch, tuple(sorted(e["config"].items())),
               tuple(tuning.class_structural_dims(cls, op).items()))
        if key not in seen:
            seen.add(key)
            out.append(pytest.param((name, op, dt, arch, dict(e["config"]), cls), id=f"{name}-{op}-{dt}-{arch}-{cls}"))
    return out


def _in_class(op: str, case, cls: str) -> bool:
    """Whether the entry of size class cls steers this case's calls as far as structure goes: the case's
    structural dims (tuning.structural_dims: e.g. attention's head dim) are the class's. A D 128 entry never
    runs a D 64 call, and may name a kernel only D 128 has."""
    return tuning.structural_dims(case.dims, op) == tuning.class_structural_dims(cls, op)


@pytest.mark.parametrize("entry", _entries())
def test_tuned_configuration_passes_the_conformance_cases(request, entry):
    from conftest import skip_or_fail_unavailable

    name, op, dt, arch, config, cls = entry
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: runs the tuned kernels")
    if toolchain.device_arch() != arch:
        pytest.skip(f"entry for {arch}; this GPU is {toolchain.device_arch()}")
    backend = backends.get(name)
    skip_or_fail_unavailable(request.config, backend)
    dtype = next(d for d, n in DTYPE_NAMES.items() if n == dt)
    if op not in backend.implementations() or dtype not in backend.dtypes(op):
        pytest.skip(f"{name}.{op} {dt} not built here")
    spec = SPECS[op]
    backend.set_config(op, dtype, config)
    try:
        bad = []
        cases = [(i, c) for i, c in enumerate(spec.cases) if _in_class(op, c, cls)]
        assert cases, f"no conformance case of {op} has the structural dims of class {cls}"
        for i, case in cases:
            result = check_case(backend, spec, dtype, case, seed=2000 + i)
            if not result.ok:
                bad.append(f"{case.name}: {result}")
    finally:
        backend.set_config(op, dtype, None)
    assert not bad, f"{name}.{op} {dt} with tuned {config}: {len(bad)} case(s) wrong: {bad[:4]}"
