"""Issue 17 item 3: one kernel-module convention for both Python languages.

Every cuTile Python and Triton op module exposes `prepare(*inputs, *outputs, cfg, **params)` returning
the list of launches for one call (nothing launched), so the adapters run them and the compile checks
(test_cutile_py_compile.py, kernels/triton/aot_check.py) read the signatures from the same list.
"""

from __future__ import annotations

import inspect

import pytest
import torch

from tilerosetta import backends
from tilerosetta.specs import OP_NAMES, SPECS


def _expected(op):
    spec = SPECS[op]
    return [*spec.inputs, *spec.outputs, "cfg", *spec.params]


def _triton_module(op):
    b = backends.get("triton")  # imports the kernels after TRITON_INTERPRET is decided
    if type(b).__name__ != "TritonBackend":
        pytest.skip(f"triton adapter did not import: {b.is_available()[1]}")
    from tilerosetta.backends import triton_lang

    return triton_lang._KERNELS[op]


@pytest.mark.parametrize("op", OP_NAMES)
def test_triton_prepare_takes_the_spec_arguments(op):
    prepare = _triton_module(op).prepare
    assert list(inspect.signature(prepare).parameters) == _expected(op)


@pytest.mark.parametrize("op", OP_NAMES)
def test_cutile_prepare_takes_the_spec_arguments(op):
    pytest.importorskip("cuda.tile", reason="cuda.tile not installed: its kernel modules cannot be imported")
    from tilerosetta.kernels.cutile import prepare_fn

    assert list(inspect.signature(prepare_fn(op)).parameters) == _expected(op)


@pytest.mark.parametrize("op", OP_NAMES)
def test_triton_prepare_plans_without_launching(op):
    """On meta tensors: the launches name their kernel's runtime arguments exactly (what aot_check reads)."""
    from tilerosetta.kernels.triton import RUN_CONSTEXPRS, Launch, config

    spec = SPECS[op]
    module = _triton_module(op)
    dtype = spec.dtypes[0]
    for case in spec.cases:
        shapes = spec.shapes(case)
        tensors = [torch.empty(shapes[n], dtype=dtype, device="meta") for n in [*spec.inputs, *spec.outputs]]
        cfg = config.default(op, dtype, case.dims, interpret=False)
        launches = module.prepare(*tensors, cfg, **spec.full_params(case.params))
        assert launches and all(isinstance(lx, Launch) for lx in launches), (op, case.name)
        for lx in launches:
            runtime = [n for n in lx.kernel.arg_names if n not in lx.constexprs and n not in RUN_CONSTEXPRS]
            assert len(runtime) == len(lx.args), (op, case.name, runtime)
            assert all(g >= 1 for g in lx.grid), (op, case.name, lx.grid)
