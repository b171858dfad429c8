"""Every backend x op x dtype x conformance case from the op specs, checked against the reference."""

from __future__ import annotations

import pytest

from tilerosetta import backends
from tilerosetta.harness import check_case
from tilerosetta.specs import SPECS, dtype_name


def pytest_generate_tests(metafunc):
    if "conf_case" not in metafunc.fixturenames:
        return
    from conftest import selected_backends, selected_ops

    params = []
    for b in selected_backends(metafunc.config):
        for op in selected_ops(metafunc.config):
            spec = SPECS[op]
            for dtype in spec.dtypes:
                for i, case in enumerate(spec.cases):
                    params.append(pytest.param((b, op, dtype, i), id=f"{b}-{op}-{dtype_name(dtype)}-{case.name}"))
    metafunc.parametrize("conf_case", params)


def test_conformance(request, conf_case):
    from conftest import skip_or_fail_unavailable

    name, op, dtype, i = conf_case
    backend = backends.get(name)
    skip_or_fail_unavailable(request.config, backend)
    if op not in backend.implementations():
        pytest.skip(f"{name} lacks {op}: {backend.missing().get(op)}")
    if dtype not in backend.dtypes(op):
        pytest.skip(f"{name}.{op} does not support {dtype_name(dtype)}")
    spec = SPECS[op]
    result = check_case(backend, spec, dtype, spec.cases[i], seed=1000 + i)
    assert result.ok, str(result)
