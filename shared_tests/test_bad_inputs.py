"""Bad calls are refused with an error naming op, backend and argument, and write nothing."""

from __future__ import annotations

import pytest
import torch

from tilerosetta.errors import TileRosettaError
from tilerosetta.harness import make_case_tensors
from tilerosetta.specs import SPECS


def _setup(backend, op_name):
    spec = SPECS[op_name]
    if op_name not in backend.implementations():
        pytest.skip(f"{backend.name} lacks {op_name}: {backend.missing().get(op_name)}")
    dtype = backend.dtypes(op_name)[-1]
    case = spec.cases[min(3, len(spec.cases) - 1)]
    inputs, outputs = make_case_tensors(spec, case, dtype, backend.device_type, seed=7)
    return spec, case, inputs, outputs


def _expect_refusal(backend, spec, tensors, params, arg, outputs, match=None):
    with pytest.raises(TileRosettaError) as info:
        backend.op(spec.name)(*tensors, **params)
    err = info.value
    assert (err.op, err.backend) == (spec.name, backend.name), str(err)
    assert err.arg == arg, f"expected the error to name '{arg}', got: {err}"
    assert spec.name in str(err) and backend.name in str(err)
    if match:
        assert match in str(err), str(err)
    for n, out in outputs.items():  # refused before launch: the poison is untouched
        assert torch.isnan(out).all(), f"{backend.name}.{spec.name} wrote into '{n}' on a refused call"


def test_wrong_dtype(backend, op_name):
    spec, case, inputs, outputs = _setup(backend, op_name)
    first = next(iter(inputs))
    inputs[first] = inputs[first].to(torch.float64)
    _expect_refusal(backend, spec, [*inputs.values(), *outputs.values()], case.params, first, outputs, "float64")


def test_mismatched_dtypes(backend, op_name):
    spec, case, inputs, outputs = _setup(backend, op_name)
    if len(backend.dtypes(op_name)) < 2:
        pytest.skip("op has a single dtype")
    other = [d for d in backend.dtypes(op_name) if d != next(iter(inputs.values())).dtype][0]
    last = list(outputs)[-1]
    outputs_bad = dict(outputs)
    outputs_bad[last] = outputs[last].to(other)
    with pytest.raises(TileRosettaError) as info:
        backend.op(spec.name)(*inputs.values(), *outputs_bad.values(), **case.params)
    assert info.value.arg == last


def test_wrong_shape(backend, op_name):
    spec, case, inputs, outputs = _setup(backend, op_name)
    last_in = list(inputs)[-1]
    t = inputs[last_in]
    grown = torch.randn(*t.shape[:-1], t.shape[-1] + 1, device=t.device).to(t.dtype)
    inputs[last_in] = grown
    tensors = [*inputs.values(), *outputs.values()]
    with pytest.raises(TileRosettaError) as info:
        backend.op(spec.name)(*tensors, **case.params)
    # The mismatch is reported on the first argument that disagrees with an earlier binding.
    assert info.value.arg in list(inputs) + list(outputs)
    assert "shape" in str(info.value)
    for n, out in outputs.items():
        assert torch.isnan(out).all(), f"wrote into '{n}' on a refused call"


def test_wrong_rank(backend, op_name):
    spec, case, inputs, outputs = _setup(backend, op_name)
    first = next(iter(inputs))
    inputs[first] = inputs[first].reshape(-1)[None, None, None, None, :]
    _expect_refusal(backend, spec, [*inputs.values(), *outputs.values()], case.params, first, outputs, "-D")


def test_cpu_tensor_on_gpu_backend(backend, op_name):
    if backend.device_type == "cpu":
        pytest.skip(f"{backend.name} runs on CPU tensors here; no other device to misuse")
    spec, case, inputs, outputs = _setup(backend, op_name)
    first = next(iter(inputs))
    inputs[first] = inputs[first].cpu()
    _expect_refusal(backend, spec, [*inputs.values(), *outputs.values()], case.params, first, outputs, "cpu")


def test_non_contiguous_refused(backend, op_name):
    spec, case, inputs, outputs = _setup(backend, op_name)
    first = next(iter(inputs))
    t = inputs[first]
    doubled = torch.cat([t, t], dim=-1)
    strided = doubled[..., ::2]  # same shape, not contiguous
    assert not strided.is_contiguous() or t.numel() == 1
    if strided.is_contiguous():
        pytest.skip("a single element is always contiguous")
    inputs[first] = strided
    _expect_refusal(backend, spec, [*inputs.values(), *outputs.values()], case.params, first, outputs,
                    "contiguous")


def test_wrong_arity_and_unknown_param(backend, op_name):
    spec, case, inputs, outputs = _setup(backend, op_name)
    with pytest.raises(TileRosettaError, match="expected"):
        backend.op(spec.name)(*inputs.values())
    _expect_refusal(backend, spec, [*inputs.values(), *outputs.values()], {"bogus": 1}, "bogus", outputs)


def test_not_a_tensor(backend, op_name):
    spec, case, inputs, outputs = _setup(backend, op_name)
    first = next(iter(inputs))
    inputs[first] = inputs[first].tolist()
    _expect_refusal(backend, spec, [*inputs.values(), *outputs.values()], case.params, first, outputs, "list")
