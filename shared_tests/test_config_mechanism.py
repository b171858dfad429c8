"""Issue 17 item 2: one config mechanism in Backend, the same on every backend.

Adapters only declare builtin_config / config_space / check_config; the merge of the tuned table, the
forced config and the validation live in backends/base.py. These tests fail if an adapter implements its
own merge (by overriding the mechanism, or by behaving differently on a fake tuned table). They also
cover issue 8 (a default configuration honours the committed tuned table). A private table file and a
pretend sm_90 device make them run on the CPU.
"""

from __future__ import annotations

import functools
import importlib
import warnings

import pytest
import torch

from tilerosetta import toolchain, tuning
from tilerosetta.backends import REGISTRY, base
from tilerosetta.backends.base import KNOB_NAMES, Backend
from tilerosetta.specs import OP_NAMES, get_spec

MECHANISM = ("tuned_config", "_valid_tuned", "default_config", "forced_config", "config_overrides", "config_for",
             "set_config")
TUNABLE = ("cutile_py", "triton", "tile_cpp", "cutile_rs", "cutile_jl")


def _cls(name):
    module, cls, _ = REGISTRY[name]
    try:
        return getattr(importlib.import_module(module), cls)
    except Exception as exc:  # an adapter that cannot import here (e.g. a missing optional package)
        pytest.skip(f"{name}: adapter does not import here: {type(exc).__name__}: {exc}")


@pytest.mark.parametrize("name", list(REGISTRY))
def test_no_adapter_reimplements_the_mechanism(name):
    cls = _cls(name)
    own = [m for m in MECHANISM if getattr(cls, m) is not getattr(Backend, m)]
    assert not own, f"{name} overrides {own}: declare builtin_config/config_space/check_config instead"


@pytest.fixture
def private_table(tmp_path, monkeypatch):
    path = tmp_path / "tuned.json"
    monkeypatch.setattr(tuning, "lookup", functools.partial(tuning.lookup, path=path))
    return path


def _tunable(name, monkeypatch):
    """A fresh adapter pretending to sit on an sm_90 GPU, with its matmul bf16 space and a case's dims."""
    b = _cls(name)()
    op, dtype = "matmul", torch.bfloat16
    space = b.config_space(op, dtype)
    if not space:
        pytest.skip(f"{name}: no config space here ({b.is_available()[1]})")
    monkeypatch.setattr(b, "device_type", "cuda")
    monkeypatch.setattr(b, "_arch", "sm_90", raising=False)
    monkeypatch.setattr(toolchain, "device_arch", lambda: "sm_90")
    return b, op, dtype, space, dict(get_spec(op).bench_cases[0].dims)


@pytest.mark.parametrize("name", TUNABLE)
def test_tuned_entry_is_merged_over_the_builtin_table(name, private_table, monkeypatch):
    b, op, dtype, space, dims = _tunable(name, monkeypatch)
    builtin = b.builtin_config(op, dtype, dims)
    other = next((c for c in space if any(builtin.get(k) != v for k, v in c.items())), None)
    if other is None:
        pytest.skip(f"{name}: every configuration of the space equals the default")
    # A partial entry (one knob the sweep did not change left out) must get that knob from the builtin table.
    same = [k for k, v in other.items() if builtin.get(k) == v]
    tuned = {k: v for k, v in other.items() if k != (same[0] if same else None)}
    tuning.record(name, op, dtype, "sm_90", dims, tuned, {"note": "test"}, path=private_table)
    assert b.default_config(op, dtype, dims) == {**builtin, **tuned}
    assert b.config_for(op, dtype, dims) == {**builtin, **tuned}
    assert b.config_overrides(op, dtype, dims) == tuned
    # Forced keys go on top of the merged default, and None restores it.
    b.set_config(op, dtype, space[0])
    assert b.config_for(op, dtype, dims) == {**builtin, **tuned, **space[0]}
    b.set_config(op, dtype, None)
    assert b.config_for(op, dtype, dims) == {**builtin, **tuned}
    # Another size class has no entry: its default is the builtin table's.
    small = {k: 64 for k in dims}
    assert tuning.lookup(name, op, dtype, "sm_90", small) is None
    assert b.default_config(op, dtype, small) == b.builtin_config(op, dtype, small)


@pytest.mark.parametrize("name", TUNABLE)
def test_invalid_tuned_entry_is_ignored_with_a_warning(name, private_table, monkeypatch):
    b, op, dtype, _space, dims = _tunable(name, monkeypatch)
    builtin = b.builtin_config(op, dtype, dims)
    bad = {"BOGUS_KNOB": 64}
    tuning.record(name, op, dtype, "sm_90", dims, bad, {"note": "test"}, path=private_table)
    with pytest.warns(RuntimeWarning, match=rf"{name}\.{op}: ignoring tuned config .*BOGUS_KNOB"):
        assert b.default_config(op, dtype, dims) == builtin
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per entry, not on every call
        assert b.config_for(op, dtype, dims) == builtin
        assert b.config_overrides(op, dtype, dims) == {}


@pytest.mark.parametrize("name", TUNABLE)
def test_forced_config_is_checked_the_same_way(name, monkeypatch):
    b, op, dtype, space, dims = _tunable(name, monkeypatch)
    with pytest.raises(ValueError, match=rf"{name}\.{op}: .*BOGUS_KNOB"):
        b.set_config(op, dtype, {"BOGUS_KNOB": 64})
    assert b.forced_config(op, dtype) == {}
    b.set_config(op, dtype, space[-1])  # every listed config is accepted
    assert b.forced_config(op, dtype) == space[-1]


def test_sm_count_falls_back_without_a_gpu_and_reads_the_device_with_one(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert base.sm_count() == base.H200_SM_COUNT
    assert base.sm_count(default=7) == 7

    class Props:
        multi_processor_count = 78

    base._sm_count_of.cache_clear()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev: Props())
    try:
        assert base.sm_count() == 78
    finally:
        base._sm_count_of.cache_clear()


@pytest.mark.parametrize("name", TUNABLE)
def test_knob_name_table_matches_each_space(name):
    b = _cls(name)()
    knobs = {k for op in OP_NAMES for dtype in get_spec(op).dtypes for c in b.config_space(op, dtype) for k in c}
    if not knobs:
        pytest.skip(f"{name}: no config space here ({b.is_available()[1]})")
    listed = {row[name] for row in KNOB_NAMES.values()} - {"-"}
    assert listed - knobs == set(), f"KNOB_NAMES names {sorted(listed - knobs)} that {name} has no knob for"


@pytest.mark.parametrize("entry", tuning.entries(), ids=lambda e: "/".join(e[:5]))
def test_every_committed_tuned_entry_is_still_honoured(entry, monkeypatch):
    """The committed table keeps steering the GPU: each entry passes its backend's check and is what a call
    of its own case uses (an entry the new validation refused would silently change GPU behaviour)."""
    import re

    from tilerosetta.specs import DTYPE_NAMES

    name, op, dt, arch, cls, e = entry
    b = _cls(name)()
    dtype = next(d for d, n in DTYPE_NAMES.items() if n == dt)
    if not b.config_space(op, dtype):
        pytest.skip(f"{name}: no config space here ({b.is_available()[1]})")
    dims = {k: int(v) for k, v in re.findall(r"([A-Za-z]+)(\d+)", e["case"])}
    assert tuning.size_class(dims, op) == cls, f"case {e['case']} is not of size class {cls}"
    monkeypatch.setattr(b, "device_type", "cuda")
    monkeypatch.setattr(b, "_arch", arch, raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = b.config_for(op, dtype, dims)
    assert got == {**b.builtin_config(op, dtype, dims), **e["config"]}
    assert b.config_overrides(op, dtype, dims) == e["config"]


@pytest.mark.parametrize("name", TUNABLE)
def test_config_for_is_memoised_but_follows_every_change(name, private_table, monkeypatch):
    """Launch paths call config_for on every call (issue 14 item 7: host cost), so it is memoised; the
    memo must still follow set_config, tuning.record and a table file rewritten by another process."""
    b, op, dtype, space, dims = _tunable(name, monkeypatch)
    builtin = b.builtin_config(op, dtype, dims)
    first = b.config_for(op, dtype, dims)
    first["MUTATED"] = 1  # a caller changing its copy must not change the next answer
    assert b.config_for(op, dtype, dims) == builtin
    assert b.config_overrides(op, dtype, dims) == {}
    b.set_config(op, dtype, space[-1])
    assert b.config_for(op, dtype, dims) == {**builtin, **space[-1]}
    assert b.config_overrides(op, dtype, dims) == space[-1]
    b.set_config(op, dtype, None)
    assert b.config_overrides(op, dtype, dims) == {}
    other = next((c for c in space if any(builtin.get(k) != v for k, v in c.items())), None)
    if other is None:
        pytest.skip(f"{name}: every configuration of the space equals the default")
    tuning.record(name, op, dtype, "sm_90", dims, other, {"note": "test"}, path=private_table)
    assert b.config_for(op, dtype, dims) == {**builtin, **other}
    # Another process rewrites the table (no record() here): seen once the stat interval has passed.
    monkeypatch.setattr(tuning, "_STAT_EVERY_S", 0.0)
    table = tuning.load_table(private_table)
    table["entries"][name][op] = {}
    private_table.write_text(__import__("json").dumps(table))
    import os
    st = private_table.stat()
    os.utime(private_table, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # a distinct mtime
    assert b.config_for(op, dtype, dims) == builtin


def test_a_plan_made_while_the_table_is_first_read_is_kept(private_table, monkeypatch):
    """A launch path takes the signature memo, plans (config_for reads the tuned table: on a process's first
    call that bumps tuning's generation), then stores its plan: the plan must land in the live memo, so the
    next call of the signature finds it (on the H200 every backend planned its first signature twice)."""
    b, op, dtype, _space, dims = _tunable("triton", monkeypatch)
    tensors = (torch.empty(4, 8), torch.empty(8, 4), torch.empty(4, 4))
    memo, key, plan = b.signature_memo("test", op, tensors, {})
    assert plan is base._NO_PLAN
    monkeypatch.setattr(tuning, "_generation", tuning.generation() + 1)  # what a first stat of the table does
    b.config_for(op, dtype, dims)  # the planning: it sees the newer generation
    b.keep(key, "the plan")
    assert b.signature_memo("test", op, tensors, {})[2] == "the plan"
    b.set_config(op, dtype, None)  # set_config still drops every plan
    assert b.signature_memo("test", op, tensors, {})[2] is base._NO_PLAN


def test_toolchain_activate_rechecks_when_the_environment_changes(monkeypatch):
    tc = toolchain.activate()
    if tc.root is None:
        pytest.skip(f"no pinned toolchain here: {tc.problems}")
    bin_dir = str(tc.bin_dir)
    assert toolchain.os.environ["PATH"].split(toolchain.os.pathsep)[0] == bin_dir
    assert toolchain.activate() is tc  # the fast path: nothing changed
    monkeypatch.setenv("PATH", "/usr/bin")
    monkeypatch.setenv("CUDA_HOME", "/nonexistent/cuda")
    toolchain.activate()  # the environment changed: the full check runs again
    assert toolchain.os.environ["PATH"].split(toolchain.os.pathsep)[0] == bin_dir
    assert "CUDA_HOME" not in toolchain.os.environ
