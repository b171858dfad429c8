"""Issue 8: a backend's default configuration honours the committed tuned-config table.

Uses a private table file (never the committed one) and a pretend sm_90 device, so it runs on the CPU.
"""

from __future__ import annotations

import functools

import pytest
import torch

from tilerosetta import backends, tuning
from tilerosetta.specs import get_spec


@pytest.fixture
def private_table(tmp_path, monkeypatch):
    path = tmp_path / "tuned.json"
    monkeypatch.setattr(tuning, "lookup", functools.partial(tuning.lookup, path=path))
    return path


def _pretend_gpu(backend, monkeypatch):
    from tilerosetta import toolchain

    monkeypatch.setattr(backend, "device_type", "cuda")
    monkeypatch.setattr(backend, "_arch", "sm_90", raising=False)
    monkeypatch.setattr(toolchain, "device_arch", lambda: "sm_90")


@pytest.mark.parametrize("name", ["triton", "tile_cpp", "cutile_py", "cutile_rs"])
def test_default_config_takes_the_table_entry(name, private_table, monkeypatch):
    b = backends.get(name)
    spec = get_spec("matmul")
    dims = dict(spec.bench_cases[0].dims)
    space = b.config_space("matmul", torch.bfloat16)
    if not space:
        pytest.skip(f"{name}: no config space here ({b.is_available()[1]})")
    _pretend_gpu(b, monkeypatch)
    before = b.default_config("matmul", torch.bfloat16, dims)
    # pick a configuration from the backend's own space that differs from its default
    other = next((c for c in space if any(before.get(k) != v for k, v in c.items())), None)
    if other is None:
        pytest.skip(f"{name}: config space has a single configuration")
    tuning.record(name, "matmul", torch.bfloat16, "sm_90", dims, other, {"note": "test"}, path=private_table)
    after = b.default_config("matmul", torch.bfloat16, dims)
    assert {k: after.get(k) for k in other} == other, f"{name} ignored the tuned table: {after} vs {other}"
    # another size class is not affected
    small = {k: 64 for k in dims}
    assert b.default_config("matmul", torch.bfloat16, small) == b.default_config("matmul", torch.bfloat16, small)
    assert tuning.lookup(name, "matmul", torch.bfloat16, "sm_90", small) is None
