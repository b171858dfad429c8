"""The one conformance suite, parametrized over backend x op x dtype x case.

Select with --backend a,b and --op x,y. A backend that cannot run here is skipped with its precise
reason; `--require-backend NAME` (or TILEROSETTA_REQUIRE=NAME,...) turns that skip into a failure on
machines that are supposed to run it, so nobody mistakes a skip for a pass.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

import pytest

from tilerosetta import backends
from tilerosetta.specs import OP_NAMES


def _csv(value):
    return [v for v in (value or "").split(",") if v]


def pytest_addoption(parser):
    parser.addoption("--backend", default="", help="comma-separated backends (default: all)")
    parser.addoption("--op", default="", help="comma-separated ops (default: all)")
    parser.addoption("--require-backend", default="", help="comma-separated backends that must be available")
    parser.addoption("--shard", default="", metavar="i/n",
                     help="run share i of n (backend x op groups kept together; `tilerosetta test --gpus`)")


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


def pytest_ignore_collect(collection_path: Path, config):
    """`--backend a,b` also leaves out the other backends' own test files (test_<backend>_*.py), so
    `tilerosetta test --backend torch --op softmax` runs what it names, not every module test."""
    names = _csv(config.getoption("--backend"))
    if not names or not collection_path.name.startswith("test_"):
        return None
    for b in backends.BACKEND_NAMES:
        if collection_path.name.startswith(f"test_{b}_") and b not in names:
            return True
    return None


def _skip_reason(report) -> str:
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    reason = reason.removeprefix("Skipped: ")
    # Fold the per-case details (sizes, dtypes, addresses) so equal reasons are counted together.
    return re.sub(r"0x[0-9a-f]+|\b\d+\b", "N", reason)[:200]


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Skips are never silent: count them per reason at the end of every run (before pytest's last line)."""
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    counts = Counter(_skip_reason(r) for r in skipped)
    terminalreporter.section(f"skip reasons ({len(skipped)} skipped)")
    for reason, n in counts.most_common():
        terminalreporter.write_line(f"{n:6d}  {reason}")


def pytest_configure(config):
    config.addinivalue_line("markers", "xdist_group(name): pytest-xdist --dist loadgroup keeps a group in one worker")
    config.addinivalue_line("markers", "big_memory: needs a GPU with 16 GiB free (deselect with -m 'not big_memory')")


def _group(item):
    """(backend, op) of a parametrized item, else None."""
    params = getattr(item, "callspec", None)
    params = params.params if params else {}
    backend = params.get("backend_name") or (params.get("conf_case") or (None,))[0]
    op = params.get("op_name") or (params.get("conf_case") or (None, None))[1]
    return (backend, op or "misc") if backend else None


def pytest_collection_modifyitems(config, items):
    """With pytest-xdist `--dist loadgroup`, keep each backend x op in one worker: a kernel fault (illegal
    address) leaves that process's CUDA context unusable, and it must not take other backends down with it.
    With --shard i/n keep share i of the same groups (items of no backend: grouped by test file), split by
    item count and spread per backend (a slow JIT backend's matmul and attention land on different shares);
    every process collects the same items in the same order, so the n shares are a partition."""
    for item in items:
        group = _group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group("-".join(group)))
    text = config.getoption("--shard")
    if text:
        from tilerosetta import shard

        unit = lambda item: _group(item) or ("", item.nodeid.split("::")[0])  # noqa: E731 (file of no backend)
        sizes = {}
        for item in items:
            sizes[unit(item)] = sizes.get(unit(item), 0) + 1
        try:
            keep = shard.my_share(items, text, unit=unit, weight=lambda u: sizes[u], kind=lambda u: u[0])
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
        kept = set(map(id, keep))
        config.hook.pytest_deselected(items=[i for i in items if id(i) not in kept])
        items[:] = keep


@pytest.fixture
def backend(request, backend_name):
    b = backends.get(backend_name)
    skip_or_fail_unavailable(request.config, b)
    return b
