"""The one conformance suite, parametrized over backend x op x dtype x case.

Select with --backend a,b and --op x,y. A backend that cannot run here is skipped with its precise
reason; `--require-backend NAME` (or TILEROSETTA_REQUIRE=NAME,...) turns that skip into a failure on
machines that are supposed to run it, so nobody mistakes a skip for a pass.
"""

from __future__ import annotations

import os

import pytest

from tilerosetta import backends
from tilerosetta.specs import OP_NAMES


def _csv(value):
    return [v for v in (value or "").split(",") if v]


def pytest_addoption(parser):
    parser.addoption("--backend", default="", help="comma-separated backends (default: all)")
    parser.addoption("--op", default="", help="comma-separated ops (default: all)")
    parser.addoption("--require-backend", default="", help="comma-separated backends that must be available")


def selected_backends(config):
    names = _csv(config.getoption("--backend")) or list(backends.BACKEND_NAMES)
    for n in names:
        backends.get(n)  # unknown name -> KeyError listing the valid ones
    return names


def selected_ops(config):
    ops = _csv(config.getoption("--op")) or list(OP_NAMES)
    unknown = [o for o in ops if o not in OP_NAMES]
    if unknown:
        raise pytest.UsageError(f"unknown op(s) {unknown}; expected some of {list(OP_NAMES)}")
    return ops


def required_backends(config):
    return set(_csv(config.getoption("--require-backend")) + _csv(os.environ.get("TILEROSETTA_REQUIRE")))


def skip_or_fail_unavailable(config, backend):
    ok, reason = backend.is_available()
    if ok:
        return
    if backend.name in required_backends(config):
        pytest.fail(f"backend '{backend.name}' is required here but unavailable: {reason}")
    pytest.skip(f"{backend.name} unavailable: {reason}")


def pytest_generate_tests(metafunc):
    if "backend_name" in metafunc.fixturenames:
        metafunc.parametrize("backend_name", selected_backends(metafunc.config))
    if "op_name" in metafunc.fixturenames:
        metafunc.parametrize("op_name", selected_ops(metafunc.config))


def pytest_configure(config):
    config.addinivalue_line("markers", "xdist_group(name): pytest-xdist --dist loadgroup keeps a group in one worker")
    config.addinivalue_line("markers", "big_memory: needs a GPU with 16 GiB free (deselect with -m 'not big_memory')")


def pytest_collection_modifyitems(config, items):
    """With pytest-xdist `--dist loadgroup`, keep each backend x op in one worker: a kernel fault (illegal
    address) leaves that process's CUDA context unusable, and it must not take other backends down with it."""
    for item in items:
        params = getattr(item, "callspec", None)
        params = params.params if params else {}
        backend = params.get("backend_name") or (params.get("conf_case") or (None,))[0]
        op = params.get("op_name") or (params.get("conf_case") or (None, None))[1]
        if backend:
            item.add_marker(pytest.mark.xdist_group(f"{backend}-{op or 'misc'}"))


@pytest.fixture
def backend(request, backend_name):
    b = backends.get(backend_name)
    skip_or_fail_unavailable(request.config, b)
    return b
