"""Hypothesis-drawn shapes and params: the same function on any valid input, not only the listed cases."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tilerosetta.harness import check_case
from tilerosetta.specs import SPECS, Case

MAX_EXAMPLES = int(os.environ.get("TILEROSETTA_HYPOTHESIS_EXAMPLES", "8"))


def case_strategy(spec):
    """Draw every plain symbol of the spec's shapes; total elements kept small so CPU runs stay quick."""
    symbols = []
    for shape in list(spec.inputs.values()) + list(spec.outputs.values()):
        symbols += [e for e in shape if e.isidentifier() and e not in symbols]
    cap = {1: 5000, 2: 300, 3: 64, 4: 24}.get(len(symbols), 16)

    @st.composite
    def draw(draw_fn):
        dims = {}
        for s in symbols:
            choices = spec.dim_choices.get(s)
            dims[s] = draw_fn(st.sampled_from(choices) if choices else st.integers(1, cap))
        params = {}
        if "causal" in spec.params:
            params["causal"] = draw_fn(st.booleans())
        if "eps" in spec.params:
            params["eps"] = draw_fn(st.sampled_from([1e-6, 1e-5, 1e-3]))
        return Case(spec.random_dims(dims, params), params)

    return draw()


@pytest.mark.parametrize("dtype_name", ["fp32", "fp16", "bf16"])
def test_random_shapes(backend, op_name, dtype_name):
    from tilerosetta.specs import parse_dtype

    dtype = parse_dtype(dtype_name)
    spec = SPECS[op_name]
    if op_name not in backend.implementations():
        pytest.skip(f"{backend.name} lacks {op_name}: {backend.missing().get(op_name)}")
    if dtype not in spec.dtypes or dtype not in backend.dtypes(op_name):
        pytest.skip(f"{op_name} is not defined for {dtype_name} on {backend.name}")

    @settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(case=case_strategy(spec), seed=st.integers(0, 2**31 - 1))
    def run(case, seed):
        result = check_case(backend, spec, dtype, case, seed=seed)
        assert result.ok, str(result)

    run()
