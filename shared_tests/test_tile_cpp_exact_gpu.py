"""tile_cpp's `_exact` twins compute what the checked twins compute, for every instantiated config.

`_exact` (cpp/kernels/common.cuh, tr::row_tiles / tr::tile_at) views each block's tile at a base the kernel
computes, with compile-time extents, and the module launches it only where every block's tile is whole (row
ops: N == TN, TM divides M; silu_and_mul: TM divides M, TN divides H; rope: TS divides S, TD divides D/2; config
key EXACT, default 1). A wrong base offset would read or write another block's tile, so each config runs 3 x 2
tiles' worth (rows of exactly TN on 3 * TM rows; silu_and_mul 3 * TM rows of H = 2 * TN; rope 3 * TS positions of
D = 4 * TD, two heads), against the spec's reference and with EXACT 0 (the
`_a16` twin) on the same inputs; the plan must name the twin the test means. Needs a CUDA GPU with the built
module.
"""

from __future__ import annotations

import pytest
import torch

from tilerosetta import backends
from tilerosetta.harness import compare, make_case_tensors, reference
from tilerosetta.specs import SPECS, Case, dtype_name, parse_dtype

EXACT_OPS = (*(op for op in SPECS if SPECS[op].family == "rows"), "silu_and_mul", "rope")


def _kernels():
    try:
        import tilerosetta_tile_cpp as mod
    except ImportError:
        return []
    return [k for k in mod.kernels() if k["op"] in EXACT_OPS]


@pytest.mark.parametrize("kernel", _kernels(), ids=lambda k: k["name"])
def test_exact_twin_matches_the_reference_and_the_checked_twin(request, kernel):
    from conftest import skip_or_fail_unavailable

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: launches the tile_cpp kernels")
    import tilerosetta_tile_cpp as mod

    backend = backends.get("tile_cpp")
    skip_or_fail_unavailable(request.config, backend)
    op, cfg = kernel["op"], dict(kernel["config"])
    spec = SPECS[op]
    dtype = parse_dtype(kernel["dtype"])
    if op == "rope":
        case = Case({"B": 1, "H": 2, "S": 3 * cfg["TS"], "D": 4 * cfg["TD"]})
    elif op == "silu_and_mul":
        case = Case({"M": 3 * cfg["TM"], "H": 2 * cfg["TN"]})
    else:
        case = Case({"M": 3 * cfg["TM"], "N": cfg["TN"]})
    inputs, _ = make_case_tensors(spec, case, dtype, "cuda", seed=7)
    ref = reference(spec, case, inputs)
    params = {k: v for k, v in spec.full_params(case.params).items() if v is not None}
    results = {}
    for exact in (1, 0):
        outs = make_case_tensors(spec, case, dtype, "cuda", seed=7)[1]  # fresh NaN-poisoned outputs
        tensors = [*inputs.values(), *outs.values()]
        plan = mod.plan(kernel["name"], tensors, params, None, {"EXACT": exact})
        assert plan["function"] == kernel["name"] + ("_exact" if exact else "_a16"), plan["function"]
        mod.launch(kernel["name"], tensors, params, torch.cuda.current_stream().cuda_stream, None, {"EXACT": exact})
        torch.cuda.synchronize()
        ok, err, unwritten, msg = compare(spec, dtype, outs, ref)
        assert ok, f"tile_cpp.{op} {dtype_name(dtype)} {kernel['name']} EXACT={exact}: {msg} (err {err})"
        results[exact] = outs
    for name in results[1]:  # the same body on the same rows: the two twins agree to the bit
        assert torch.equal(results[1][name], results[0][name]), f"{kernel['name']}: output '{name}' differs by twin"
