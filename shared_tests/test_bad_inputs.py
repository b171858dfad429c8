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


# ---- issue 16: aliasing, parameters, raw path, sizes, threads, graphs -----------------------------
import math  # noqa: E402
import threading  # noqa: E402

from tilerosetta.errors import TileRosettaTypeError  # noqa: E402
from tilerosetta.harness import compare, reference  # noqa: E402
from tilerosetta.specs import Case  # noqa: E402
from tilerosetta.specs.base import FP16  # noqa: E402


def _check(spec, case, dtype, inputs, outputs, label=""):
    """The outputs match the float64 reference of these inputs (what the conformance suite asserts)."""
    if any(t.is_cuda for t in outputs.values()):
        torch.cuda.synchronize()
    ok, err, _, msg = compare(spec, dtype, outputs, reference(spec, case, inputs))
    assert ok, f"{label}: rel_err {err:.3g}: {msg}"


def _carve(buf, start, like):
    """A contiguous view of `like`'s shape into the flat buffer `buf` at element `start`, holding like's data."""
    view = buf[start:start + like.numel()].view(like.shape)
    view.copy_(like)
    return view


def _overlap_calls(spec, inputs, outputs):
    """(label, output name, input name, inputs, outputs) where the output shares memory with an input:
    the very same tensor (when shapes match), starting at the same address, and half-way into it."""
    for o, out in outputs.items():
        for n, inp in inputs.items():
            if inp.shape == out.shape:
                yield "identical", o, n, {**inputs, n: inp}, {**outputs, o: inp}
            starts = [0] + ([inp.numel() // 2] if inp.numel() > 1 else [])
            for label, start in zip(("same start", "partial"), starts):
                buf = torch.empty(inp.numel() + out.numel(), dtype=inp.dtype, device=inp.device)
                ins = {**inputs, n: _carve(buf, 0, inp)}
                outs = {**outputs, o: buf[start:start + out.numel()].view(out.shape)}
                yield label, o, n, ins, outs


def _declared_identical(spec, o, n, ins, outs):
    """Output o is input n's very memory (same start and shape: "identical", and "same start" where the
    shapes agree) and the spec declares that pair safe in place: accepted, not refused."""
    same = outs[o].data_ptr() == ins[n].data_ptr() and outs[o].shape == ins[n].shape
    return same and n in spec.inplace_ok.get(o, ())


def test_output_overlapping_an_input_is_refused(backend, op_name):
    spec, case, inputs, outputs = _setup(backend, op_name)
    tried = 0
    for label, o, n, ins, outs in _overlap_calls(spec, inputs, outputs):
        if _declared_identical(spec, o, n, ins, outs):
            continue  # declared safe in place: test_declared_inplace_pairs runs it
        before = {k: v.clone() for k, v in ins.items()}
        with pytest.raises(TileRosettaError) as info:
            backend.op(op_name)(*ins.values(), *outs.values(), **case.params)
        err = info.value
        assert (err.op, err.backend, err.arg) == (op_name, backend.name, o), f"{label} {o}~{n}: {err}"
        assert f"'{n}'" in str(err) and ("overlaps" in str(err) or "same memory" in str(err)), str(err)
        for k, v in ins.items():  # refused before launch: no input byte changed
            assert torch.equal(v, before[k]), f"{label} {o}~{n}: '{k}' changed on a refused call"
        tried += 1
    assert tried >= 2 * len(inputs) * len(outputs) - len(inputs), "every output x input pair was tried"


def test_adjacent_slices_of_one_buffer_are_accepted(backend, op_name):
    """No false alarm: inputs and outputs carved side by side from one allocation do not overlap."""
    spec, case, inputs, outputs = _setup(backend, op_name)
    tensors = {**inputs, **outputs}
    buf = torch.empty(sum(t.numel() for t in tensors.values()), dtype=next(iter(inputs.values())).dtype,
                      device=next(iter(inputs.values())).device)
    at, carved = 0, {}
    for n, t in tensors.items():
        carved[n] = _carve(buf, at, t)
        at += t.numel()
    ins = {n: carved[n] for n in inputs}
    outs = {n: carved[n] for n in outputs}
    backend.op(op_name)(*ins.values(), *outs.values(), **case.params)
    _check(spec, case, ins[next(iter(ins))].dtype, ins, outs, "adjacent slices")


def _declared_pairs(spec, op_name):
    pairs = [(o, n) for o, ns in spec.inplace_ok.items() for n in ns]
    if not pairs:
        pytest.skip(f"{op_name} declares no in-place pair (spec.inplace_ok): every overlap is refused")
    return pairs


def _run_in_place(spec, case, inputs, outputs, fn, params, pairs, how):
    """Each declared pair run with the output being the input itself, checked against the reference of
    the untouched inputs."""
    for o, n in pairs:
        ins = {k: v.clone() for k, v in inputs.items()}
        kept = {k: v.clone() for k, v in inputs.items()}
        outs = {**outputs, o: ins[n]}
        fn(*ins.values(), *outs.values(), **params)
        assert outs[o].data_ptr() == ins[n].data_ptr()
        _check(spec, case, ins[n].dtype, kept, outs, f"{how} in place {o}={n}")


def _each_case(backend, op_name):
    """Every conformance case of the op (tails, one row, one tile, many tiles all run in place)."""
    spec = SPECS[op_name]
    dtype = backend.dtypes(op_name)[-1]
    for i, case in enumerate(spec.cases):
        inputs, outputs = make_case_tensors(spec, case, dtype, backend.device_type, seed=7 + i)
        yield case, inputs, outputs


def test_declared_inplace_pairs(backend, op_name):
    spec, case, inputs, outputs = _setup(backend, op_name)
    pairs = _declared_pairs(spec, op_name)
    for each, ins, outs in _each_case(backend, op_name):
        _run_in_place(spec, each, ins, outs, backend.op(op_name), each.params, pairs, "validated")
    # Repeated: the BoundOp's cached plan lets the very same tensor through without the full check, but a
    # partial overlap with the same shapes and strides (the same plan key) is still refused.
    for o, n in pairs:
        _run_in_place(spec, case, inputs, outputs, backend.op(op_name), case.params, [(o, n)], "repeated")
        t = inputs[n]
        buf = torch.empty(2 * t.numel(), dtype=t.dtype, device=t.device)
        ins = {**inputs, n: _carve(buf, 0, t)}
        outs = {**outputs, o: buf[t.numel() // 2:t.numel() // 2 + t.numel()].view(t.shape)}
        with pytest.raises(TileRosettaError, match="partly overlaps"):
            backend.op(op_name)(*ins.values(), *outs.values(), **case.params)


BAD_VALUES = {  # kind -> (value, must be a TypeError) for Param declarations (specs/base.py)
    "positive": [("1e-5", True), ("abc", True), (True, True), (False, True), ([1e-5], True),
                 (torch.tensor(1e-5), True), (-1e-5, False), (0.0, False), (0, False), (math.nan, False),
                 (math.inf, False), (-math.inf, False)],
    "flag": [("false", True), ("true", True), ("yes", True), (1, True), (0, True), (1.0, True), (None, True),
             ([True], True)],
}
GOOD_VALUES = {"positive": [1e-3, 1, 0.5], "flag": [False, True]}


def _params_of(op_name):
    spec = SPECS[op_name]
    if not spec.params:
        pytest.skip(f"{op_name} takes no scalar parameters")
    return spec.params


def test_bad_param_values_are_refused(backend, op_name):
    params = _params_of(op_name)
    spec, case, inputs, outputs = _setup(backend, op_name)
    for key, decl in params.items():
        bad = list(BAD_VALUES[decl.kind]) + ([] if decl.optional or decl.kind == "flag" else [(None, True)])
        for value, type_error in bad:
            call = {**case.params, key: value}
            with pytest.raises(TileRosettaError) as info:
                backend.op(op_name)(*inputs.values(), *outputs.values(), **call)
            err = info.value
            assert (err.op, err.backend, err.arg) == (op_name, backend.name, key), f"{key}={value!r}: {err}"
            assert isinstance(err, TypeError) == type_error, f"{key}={value!r}: {type(err).__name__}: {err}"
            assert isinstance(err, TileRosettaTypeError) == type_error
            for n, out in outputs.items():
                assert torch.isnan(out).all(), f"{key}={value!r} wrote into '{n}' on a refused call"


def test_good_param_values_compute(backend, op_name):
    params = _params_of(op_name)
    spec, case, inputs, _ = _setup(backend, op_name)
    dtype = next(iter(inputs.values())).dtype
    for key, decl in params.items():
        for value in GOOD_VALUES[decl.kind] + ([None] if decl.optional else []):
            c = Case(case.dims, {**case.params, key: value})
            outputs = spec.make_outputs(c, dtype, backend.device_type)
            backend.op(op_name)(*inputs.values(), *outputs.values(), **c.params)
            _check(spec, c, dtype, inputs, outputs, f"{key}={value!r}")


# -- the raw path (backend.implementations()[op], no BoundOp): native layers must still guard memory --
def _raw(backend, op_name):
    if not getattr(backend, "raw_calls_checked", False):
        pytest.skip(f"{backend.name}'s raw callables do no checks of their own (only native layers must: "
                    f"a Python kernel is called with validated arguments through backend.op())")
    return backend.implementations()[op_name]


def _expect_raw_refusal(backend, op_name, tensors, params, outputs, arg):
    with pytest.raises(TileRosettaError) as info:
        _raw(backend, op_name)(*tensors, **params)
    assert (info.value.op, info.value.backend) == (op_name, backend.name), str(info.value)
    assert info.value.arg == arg, str(info.value)
    for n, out in outputs.items():
        assert torch.isnan(out).all(), f"raw call wrote into '{n}' when refused"


def test_raw_mixed_dtypes_refused(backend, op_name):
    spec, case, inputs, outputs = _setup(backend, op_name)
    _raw(backend, op_name)
    params = spec.full_params(case.params)
    names = list(inputs) + list(outputs)
    # An input of another dtype than the output: reading it as the output's type would read past its end.
    # The launch dtype comes from the first tensor, so the refusal may name the first one that differs.
    first = next(iter(inputs))
    other = next(d for d in (*backend.dtypes(op_name), torch.float32, FP16) if d != inputs[first].dtype)
    bad = {**inputs, first: inputs[first].to(other)}
    with pytest.raises(TileRosettaError) as info:
        _raw(backend, op_name)(*bad.values(), *outputs.values(), **params)
    assert (info.value.op, info.value.backend) == (op_name, backend.name) and info.value.arg in names, str(info.value)
    for n, out in outputs.items():
        assert torch.isnan(out).all(), f"raw call wrote into '{n}' when refused"
    # An output of a wider dtype than the inputs: writing it as the inputs' type would miss half of it,
    # and the other way round write past its end.
    last = list(outputs)[-1]
    wide = {**outputs, last: outputs[last].to(other)}
    with pytest.raises(TileRosettaError) as info:
        _raw(backend, op_name)(*inputs.values(), *wide.values(), **params)
    assert info.value.arg == last, str(info.value)
    assert torch.isnan(wide[last]).all(), "raw call wrote into an output of the wrong dtype"


def test_raw_cpu_tensor_refused(backend, op_name):
    spec, case, inputs, outputs = _setup(backend, op_name)
    _raw(backend, op_name)
    first = next(iter(inputs))
    bad = {**inputs, first: inputs[first].cpu()}
    _expect_raw_refusal(backend, op_name, [*bad.values(), *outputs.values()], spec.full_params(case.params),
                        outputs, first)


def test_raw_bad_param_values_refused(backend, op_name):
    """The Param rules of item 2 on the raw path: a native layer's adapter or module applies them itself."""
    params = _params_of(op_name)
    spec, case, inputs, outputs = _setup(backend, op_name)
    fn = _raw(backend, op_name)
    for key, decl in params.items():
        bad = list(BAD_VALUES[decl.kind]) + ([] if decl.optional or decl.kind == "flag" else [(None, True)])
        for value, type_error in bad:
            with pytest.raises(TileRosettaError) as info:
                fn(*inputs.values(), *outputs.values(), **{**spec.full_params(case.params), key: value})
            err = info.value
            assert (err.op, err.backend, err.arg) == (op_name, backend.name, key), f"raw {key}={value!r}: {err}"
            assert isinstance(err, TypeError) == type_error, f"raw {key}={value!r}: {type(err).__name__}: {err}"
            for n, out in outputs.items():
                assert torch.isnan(out).all(), f"raw {key}={value!r} wrote into '{n}' on a refused call"


def test_raw_output_overlapping_an_input_is_refused(backend, op_name):
    """The aliasing check of item 1 again, on the raw path: a native layer refuses it by itself, all but
    the spec's declared in-place pairs as the very same tensor (test_raw_declared_inplace_pairs)."""
    spec, case, inputs, outputs = _setup(backend, op_name)
    fn = _raw(backend, op_name)
    tried = 0
    for label, o, n, ins, outs in _overlap_calls(spec, inputs, outputs):
        if _declared_identical(spec, o, n, ins, outs):
            continue
        before = {k: v.clone() for k, v in ins.items()}
        with pytest.raises(TileRosettaError) as info:
            fn(*ins.values(), *outs.values(), **spec.full_params(case.params))
        err = info.value
        assert (err.op, err.backend, err.arg) == (op_name, backend.name, o), f"{label} {o}~{n}: {err}"
        assert f"'{n}'" in str(err) and ("overlaps" in str(err) or "same memory" in str(err)), str(err)
        for k, v in ins.items():
            assert torch.equal(v, before[k]), f"raw {label} {o}~{n}: '{k}' changed on a refused call"
        tried += 1
    assert tried >= 2 * len(inputs) * len(outputs) - len(inputs), "every output x input pair was tried"


def test_raw_declared_inplace_pairs(backend, op_name):
    """The native layers let the declared pairs through on their own (from the generated tables) and the
    kernel is right in place."""
    spec, _, _, _ = _setup(backend, op_name)
    fn = _raw(backend, op_name)
    pairs = _declared_pairs(spec, op_name)
    for case, inputs, outputs in _each_case(backend, op_name):
        _run_in_place(spec, case, inputs, outputs, fn, spec.full_params(case.params), pairs, "raw")


class _CudaLooking:
    """A CPU tensor that says it is on cuda:0: what tile_cpp's module sees of a CUDA tensor (data_ptr,
    shape, stride, dtype, device). It refuses the call before the driver is touched, so host addresses
    are never dereferenced. is_cuda stays False only so the adapter asks torch for no CUDA stream."""

    is_cuda = False

    def __init__(self, t):
        self._t, self.shape, self.dtype, self.device = t, t.shape, t.dtype, torch.device("cuda", 0)

    def data_ptr(self):
        return self._t.data_ptr()

    def stride(self):
        return self._t.stride()


def test_tile_cpp_raw_path_refuses_overlap_without_a_gpu(op_name):
    """tile_cpp's raw entry (implementations(): adapter, then the pybind module) refuses an output that
    shares memory with an input on its own (cpp/src/ops.cpp check_no_overlap), on any machine: the
    module checks before it touches the driver."""
    from tilerosetta.backends import tile_cpp

    if tile_cpp._mod is None:
        pytest.skip(f"tile_cpp's module is not built here: {tile_cpp._IMPORT_ERROR}")
    backend = tile_cpp.TileCppBackend()
    if op_name not in backend.implementations():
        pytest.skip(f"tile_cpp lacks {op_name}: {backend.missing().get(op_name)}")
    spec = SPECS[op_name]
    dtype = backend.dtypes(op_name)[-1]
    case = spec.cases[min(3, len(spec.cases) - 1)]
    inputs, outputs = make_case_tensors(spec, case, dtype, "cpu", seed=7)
    params = spec.full_params(case.params)
    fn = backend.implementations()[op_name]
    kernel = backend.kernel_for(op_name, dtype, spec.dims_of([*inputs.values(), *outputs.values()]))
    # No false alarm: separate tensors give a launch plan.
    assert tile_cpp._mod.plan(kernel, [_CudaLooking(t) for t in (*inputs.values(), *outputs.values())],
                              {k: v for k, v in params.items() if v is not None})
    tried = accepted = 0
    for label, o, n, ins, outs in _overlap_calls(spec, inputs, outputs):
        fakes = [_CudaLooking(t) for t in (*ins.values(), *outs.values())]
        if _declared_identical(spec, o, n, ins, outs):
            # the declared in-place pair (OpSpec.inplace_ok, the generated table's inplace_ok): a plan
            assert tile_cpp._mod.plan(kernel, fakes, {k: v for k, v in params.items() if v is not None}), f"{o}={n}"
            accepted += 1
            continue
        with pytest.raises(TileRosettaError) as info:
            fn(*fakes, **params)
        err = info.value
        assert (err.op, err.backend, err.arg) == (op_name, "tile_cpp", o), f"{label} {o}~{n}: {err}"
        assert f"'{n}'" in str(err) and ("overlaps" in str(err) or "same memory" in str(err)), str(err)
        tried += 1
    assert accepted >= sum(len(ns) for ns in spec.inplace_ok.values()), "each declared pair was accepted"
    assert tried + accepted >= 2 * len(inputs) * len(outputs) - len(inputs), "every output x input pair was tried"


def _size1_case(spec, case):
    """The case with the first plain dim of the first input set to 1 (a size-1 dim to give odd strides)."""
    first = next(iter(spec.inputs.values()))
    sym = next(s for s in first if s.isidentifier() and s not in spec.dim_choices)
    return Case({**case.dims, sym: 1}, case.params)


def _odd_strides(t):
    """The same elements with every size-1 dim given stride 3: still contiguous for torch (e.g.
    torch.randn(5, 1).t()), and a layout a native check that compares all strides would refuse."""
    strides = [3 if size == 1 else st for size, st in zip(t.shape, t.stride())]
    v = t.as_strided(t.shape, strides)
    assert v.is_contiguous() and v.data_ptr() == t.data_ptr()
    return v


@pytest.mark.parametrize("path", ["validated", "raw"])
def test_size1_dims_with_odd_strides_are_contiguous(backend, op_name, path):
    spec, case, _, _ = _setup(backend, op_name)
    case = _size1_case(spec, case)
    dtype = backend.dtypes(op_name)[-1]
    inputs, outputs = make_case_tensors(spec, case, dtype, backend.device_type, seed=11)
    ins = {n: _odd_strides(t) for n, t in inputs.items()}
    outs = {n: _odd_strides(t) for n, t in outputs.items()}
    fn = backend.op(op_name) if path == "validated" else backend.implementations()[op_name]
    fn(*ins.values(), *outs.values(), **spec.full_params(case.params))
    _check(spec, case, dtype, inputs, outs, f"odd strides on size-1 dims ({path})")


# -- sizes --------------------------------------------------------------------------------------------
def _slow_interpreter(backend, programs):
    if backend.device_type == "cpu" and backend.name != "torch":
        pytest.skip(f"{backend.name} runs an interpreter here: {programs} programs one after another take "
                    f"minutes; the GPU run covers it")


# Valid inputs a backend still cannot run because its grid puts a count > 65535 on axis y/z: refused
# before launch with the limit in the message (`tilerosetta list --limits`). Expected failures only if
# refused cleanly (raises=...): a wrong result or a crash still fails. strict: known to be refused.
_JL_YZ = "cuTile.jl puts {} on grid {} (refused before launch by backends/cutile_jl.py check_grid)"
GRID_GAPS: dict[tuple[str, str], tuple[bool, str]] = {
    ("cutile_jl", "transpose_tall"): (True, _JL_YZ.format("ceil(M / tile_m)", "y")),
    ("cutile_jl", "bmm_rows"): (True, _JL_YZ.format("ceil(M / tile_m)", "y")),
    ("cutile_jl", "bmm"): (True, _JL_YZ.format("the batch", "z")),
}


def _grid_gap(request, backend, what):
    gap = GRID_GAPS.get((backend.name, what))
    if gap:
        from tilerosetta.errors import TileRosettaRuntimeError

        strict, reason = gap
        raises = TileRosettaError if strict else (TileRosettaError, TileRosettaRuntimeError)
        request.applymarker(pytest.mark.xfail(strict=strict, raises=raises, reason=f"issue 16: {reason}"))


def _big_case(backend, op, dims, params, seed):
    spec = SPECS[op]
    if op not in backend.implementations():
        pytest.skip(f"{backend.name} lacks {op}")
    case = Case(dims, params)
    dtype = backend.dtypes(op)[-1]
    inputs, outputs = make_case_tensors(spec, case, dtype, backend.device_type, seed=seed)
    backend.op(op)(*inputs.values(), *outputs.values(), **case.params)
    _check(spec, case, dtype, inputs, outputs, f"{op} {dims}")
    return inputs, outputs


def test_attention_more_than_65535_heads(backend, request):
    _slow_interpreter(backend, "65540")
    _grid_gap(request, backend, "attention")
    _big_case(backend, "attention", {"B": 2, "H": 32770, "S": 2, "D": 64}, {"causal": True}, 3)


def test_attention_more_than_65535_grouped_heads(backend, request):
    # B*H = 65552 query heads on 8194 K/V heads (G = 8), a decode step against 3 keys: every backend's
    # head -> K/V head mapping past grid y's limit (and cutile_py/triton's packed decode rows).
    _slow_interpreter(backend, "65552")
    _grid_gap(request, backend, "attention")
    _big_case(backend, "attention", {"B": 2, "H": 32776, "Hkv": 4097, "S": 1, "Sk": 3, "D": 64}, {"causal": True}, 4)


def test_bmm_more_than_65535_batches(backend, request):
    _slow_interpreter(backend, "65537")
    _grid_gap(request, backend, "bmm")
    _big_case(backend, "bmm", {"Bt": 65537, "M": 3, "K": 5, "N": 2}, {}, 5)


@pytest.mark.parametrize("shape", ["wide", "tall"])
def test_transpose_more_than_65535_tiles_per_axis(backend, request, shape):
    _slow_interpreter(backend, "131072+")
    _grid_gap(request, backend, f"transpose_{shape}")
    # 65536 * 128 + 3: more than 65535 tiles along that dim for any tile width <= 128, in x and in out.
    big = 65536 * 128 + 3
    dims = {"M": 2, "N": big} if shape == "wide" else {"M": big, "N": 2}
    inputs, outputs = _big_case(backend, "transpose", dims, {}, 4)
    assert torch.equal(outputs["out"], inputs["x"].t()), "transpose with > 65535 tiles per axis"


def _gpu_sized(backend, gib):
    """Cases of a few GiB (inputs, outputs and the float64 reference): the GPU run's, not the CPU's."""
    if backend.device_type != "cuda" or not torch.cuda.is_available():
        pytest.skip(f"needs ~{gib} GiB for tensors and the float64 reference: run on a GPU")
    if torch.cuda.mem_get_info()[0] < (gib + 2) << 30:
        pytest.skip(f"less than {gib + 2} GiB of GPU memory free")


# More than 65535 tiles along an output dim whose tile count a 2-D grid would put on grid y (tile sizes
# up to the largest default of any backend: 1024 for silu_and_mul's H, 256 for N, 128 for M, 16 for rope's
# S, 64 for attention's queries). Each backend folds such counts into grid x, or refuses them cleanly.
def test_silu_and_mul_more_than_65535_tiles_per_row(backend, request):
    _gpu_sized(backend, 2)
    _grid_gap(request, backend, "silu_and_mul_cols")
    _big_case(backend, "silu_and_mul", {"M": 1, "H": 65536 * 1024 + 3}, {}, 6)


def test_rope_more_than_65535_position_tiles(backend, request):
    _gpu_sized(backend, 2)
    _grid_gap(request, backend, "rope_rows")
    _big_case(backend, "rope", {"B": 1, "H": 2, "S": 65536 * 16 + 3, "D": 32}, {}, 7)


def test_matmul_more_than_65535_column_tiles(backend, request):
    _gpu_sized(backend, 1)
    _grid_gap(request, backend, "matmul_cols")
    _big_case(backend, "matmul", {"M": 2, "K": 3, "N": 65536 * 256 + 3}, {}, 8)


@pytest.mark.parametrize("shape", ["rows", "cols"])
def test_bmm_more_than_65535_tiles_per_axis(backend, request, shape):
    _gpu_sized(backend, 1)
    _grid_gap(request, backend, f"bmm_{shape}")
    dims = {"Bt": 2, "M": 65536 * 128 + 3, "K": 3, "N": 2} if shape == "rows" else \
        {"Bt": 2, "M": 2, "K": 3, "N": 65536 * 256 + 3}
    _big_case(backend, "bmm", dims, {}, 9)


def test_attention_more_than_65535_query_tiles(backend, request):
    # 4.2M queries of one head against 3 keys (not causal: causal needs S <= Sk).
    _gpu_sized(backend, 8)
    _grid_gap(request, backend, "attention_rows")
    _big_case(backend, "attention", {"B": 1, "H": 1, "S": 65536 * 64 + 3, "Sk": 3, "D": 64}, {"causal": False}, 10)


@pytest.mark.big_memory
def test_more_than_2_31_elements_computed_or_refused_with_the_limit(backend):
    """vector_add of 2^31 + 5 fp16 elements (12 GiB): computed exactly, or refused before launch with the
    limit in the message (`tilerosetta list --limits`) — never wrapped indices or a runtime failure."""
    if backend.device_type != "cuda" or not torch.cuda.is_available():
        pytest.skip("needs a GPU with 16 GiB free (three 4 GiB tensors and a check)")
    if torch.cuda.mem_get_info()[0] < 16 << 30:
        pytest.skip("less than 16 GiB of GPU memory free")
    if "vector_add" not in backend.implementations() or FP16 not in backend.dtypes("vector_add"):
        pytest.skip(f"{backend.name} has no fp16 vector_add")
    n = (1 << 31) + 5
    a = torch.ones(n, dtype=FP16, device="cuda")
    b = torch.full((n,), 2.0, dtype=FP16, device="cuda")
    a[-7:] = torch.arange(7, dtype=FP16, device="cuda")
    out = torch.full((n,), math.nan, dtype=FP16, device="cuda")
    try:
        backend.op("vector_add")(a, b, out)
    except TileRosettaError as err:
        assert err.arg in ("a", "b", "out") and "2147483647" in str(err), str(err)
        assert torch.isnan(out[:1 << 20]).all() and torch.isnan(out[-(1 << 20):]).all(), "refused but wrote"
        return
    torch.cuda.synchronize()
    assert torch.equal(out[-7:], torch.arange(7, dtype=FP16, device="cuda") + 2), "tail wrong: wrapped index"
    assert bool((out[:-7] == 3).all()), "some element wrong"


# -- threads and CUDA graphs ------------------------------------------------------------------------
def test_calls_from_several_threads(backend, op_name):
    """4 threads, each with its own tensors (and its own stream on a GPU), 3 calls each: all correct."""
    spec, case, _, _ = _setup(backend, op_name)
    dtype = backend.dtypes(op_name)[-1]
    fn = backend.op(op_name)
    errors, results = [], {}

    def work(i):
        try:
            inputs, outputs = make_case_tensors(spec, case, dtype, backend.device_type, seed=100 + i)
            stream = torch.cuda.Stream() if backend.device_type == "cuda" else None
            if stream is not None:  # the tensors were written on this thread's current stream: wait for them
                stream.wait_stream(torch.cuda.current_stream())
            for _ in range(3):
                if stream is not None:
                    with torch.cuda.stream(stream):
                        fn(*inputs.values(), *outputs.values(), **case.params)
                    stream.synchronize()
                else:
                    fn(*inputs.values(), *outputs.values(), **case.params)
            results[i] = (inputs, outputs)
        except Exception as exc:  # reported in the main thread
            errors.append(f"thread {i}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i, (inputs, outputs) in results.items():
        _check(spec, case, dtype, inputs, outputs, f"thread {i}")


def test_cuda_graph_capture_and_replay(backend, op_name):
    if backend.device_type != "cuda" or not torch.cuda.is_available():
        pytest.skip("CUDA graphs need a GPU")
    spec, case, inputs, outputs = _setup(backend, op_name)
    dtype = next(iter(inputs.values())).dtype
    fn = backend.op(op_name)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # compile / JIT / module load happen outside the capture
        fn(*inputs.values(), *outputs.values(), **case.params)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(*inputs.values(), *outputs.values(), **case.params)
    fresh, _ = make_case_tensors(spec, case, dtype, "cuda", seed=99)
    for n, t in fresh.items():
        inputs[n].copy_(t)
    for out in outputs.values():
        out.fill_(math.nan)
    graph.replay()
    torch.cuda.synchronize()
    _check(spec, case, dtype, inputs, outputs, "graph replay on new inputs")


# -- the error family, without a GPU --------------------------------------------------------------
def test_element_limit_refused_before_launch_with_the_limit():
    from tilerosetta.backends.torch_ref import TorchBackend

    class Tiny(TorchBackend):
        name = "tiny"

        def __init__(self):
            self.device_type = "cpu"  # CPU tensors on a GPU machine too (torch itself runs on cuda there)

        def element_limit(self, op):
            return 10

    a, b, out = torch.ones(11), torch.ones(11), torch.full((11,), math.nan)
    with pytest.raises(TileRosettaError, match=r"tiny\.vector_add: argument 'a': 11 elements exceed .* 10 "):
        Tiny().op("vector_add")(a, b, out)
    assert torch.isnan(out).all()


def test_native_refusals_and_runtime_failures_are_translated():
    from tilerosetta.backends.cutile_rs import CuTileRsBackend
    from tilerosetta.errors import TileRosettaRuntimeError

    class FakeRs:  # what the PyO3 module raises (rust/src/python.rs)
        def __init__(self, exc):
            self.exc = exc

        def launch(self, *args):
            raise self.exc

        def ops_implemented(self):
            return ["vector_add"]

    b = CuTileRsBackend()
    tensors = (torch.ones(4), torch.ones(4), torch.ones(4))
    b._mod = FakeRs(ValueError("cutile_rs.vector_add: argument 'b': dtype fp16 differs from 'a' (fp32)"))
    b._first_call["vector_add/fp32"] = 0.0  # skip the JIT timing path (it needs the toolchain)
    with pytest.raises(TileRosettaError) as info:
        b._make("vector_add")(*tensors)
    err = info.value
    assert (err.op, err.backend, err.arg) == ("vector_add", "cutile_rs", "b") and "differs" in str(err)
    assert isinstance(err.__cause__, ValueError)
    b._mod = FakeRs(TypeError("cutile_rs.vector_add: argument 'out': not an int"))
    with pytest.raises(TileRosettaTypeError):
        b._make("vector_add")(*tensors)
    # A failure after validation: BoundOp names op and backend and keeps the original as the cause.
    b._mod = FakeRs(RuntimeError("CUDA_ERROR_ILLEGAL_ADDRESS"))
    b._availability = (True, "faked")  # cached_property slot: pretend the backend runs here
    b.device_type = "cpu"  # so the CPU tensors pass the shared validation and reach the (fake) module
    with pytest.raises(TileRosettaRuntimeError) as info:
        b.op("vector_add")(*tensors)
    assert str(info.value).startswith("cutile_rs.vector_add: RuntimeError: CUDA_ERROR_ILLEGAL_ADDRESS")
    assert isinstance(info.value.__cause__, RuntimeError) and isinstance(info.value, RuntimeError)


def test_list_limits_has_a_row_per_backend_and_op():
    from tilerosetta import backends
    from tilerosetta.commands.list import limits_table
    from tilerosetta.specs import OP_NAMES

    table = limits_table()
    assert table.row_count == len(list(backends.all_backends())) * len(OP_NAMES)
    limits = dict(zip(zip(table.columns[0]._cells, table.columns[1]._cells), table.columns[2]._cells))
    assert limits[("torch", "vector_add")] == "no element limit (64-bit offsets)"
    assert limits[("triton", "vector_add")] == "no element limit (64-bit offsets)"
    assert "2147483647" in limits[("cutile_py", "vector_add")]
