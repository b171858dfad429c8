"""Functional wrappers that allocate their outputs, like torch.nn.functional:

    import tilerosetta.ops as tro
    y = tro.softmax(x, backend="triton")
    out = tro.attention(q, k, v, causal=True, backend="cutile_py")

One function per op of the spec set, made from the spec (inputs, outputs, params), so a new op gets its
wrapper with no edit here. Each call validates like every backend call (BoundOp) and returns the output
(a tuple when an op has several). `backend` defaults to $TILEROSETTA_BACKEND, else "torch".
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Any

import torch

from tilerosetta import backends
from tilerosetta.errors import TileRosettaError
from tilerosetta.specs import OP_NAMES, OpSpec, get_spec
from tilerosetta.specs.base import eval_dim, free_factor


def output_shapes(spec: OpSpec, inputs: dict[str, torch.Tensor], backend: str = "ops") -> dict[str, tuple]:
    """Bind the spec's dimension symbols from the input shapes (solving factors such as 2*H) and evaluate
    the outputs' shapes. Shape errors are left to the validator, which names the argument."""
    dims: dict[str, int] = {}
    pending = []
    for name, t in inputs.items():
        if not isinstance(t, torch.Tensor):
            raise TileRosettaError(spec.name, backend, name, f"expected a torch.Tensor, got {type(t).__name__}")
        for expr, extent in zip(spec.inputs[name], t.shape):
            if expr.isidentifier():
                dims.setdefault(expr, int(extent))
            else:
                pending.append((expr, int(extent)))
    for expr, extent in pending:  # e.g. "2*H": the one unknown factor is extent / (product of the others)
        solved = free_factor(expr, dims)
        if solved:
            free, known = solved
            dims[free] = extent // known if known else 0
    unbound = defaultdict(int, dims)  # a shape the validator will refuse: evaluate it to something
    return {name: tuple(eval_dim(expr, unbound) for expr in sym) for name, sym in spec.outputs.items()}


def allocate_outputs(spec: OpSpec, inputs, backend: str = "ops") -> list[torch.Tensor]:
    """Empty outputs of the spec's shapes for these inputs, like the first input (dtype, device)."""
    shapes = output_shapes(spec, dict(zip(spec.inputs, inputs)), backend)
    first = inputs[0]
    return [torch.empty(shapes[n], dtype=first.dtype, device=first.device) for n in spec.outputs]


def call(op: str, *inputs: torch.Tensor, backend: str | None = None, **params: Any):
    """Run `op` on `backend`, allocating its outputs like the first input (dtype, device)."""
    spec = get_spec(op)
    name = backend or os.environ.get("TILEROSETTA_BACKEND", "torch")
    if len(inputs) != len(spec.inputs):
        raise TileRosettaError(op, name, None, f"expected {len(spec.inputs)} input tensors "
                                               f"({', '.join(spec.inputs)}), got {len(inputs)}")
    outs = allocate_outputs(spec, inputs, name)
    backends.get(name).op(op)(*inputs, *outs, **params)
    return outs[0] if len(outs) == 1 else tuple(outs)


def _wrapper(op: str):
    spec = get_spec(op)

    def fn(*inputs, backend: str | None = None, **params):
        return call(op, *inputs, backend=backend, **params)

    fn.__name__ = fn.__qualname__ = op
    params = ", ".join(f"{k}={v!r}" for k, v in spec.full_params({}).items())
    fn.__doc__ = (f"{spec.summary}\n\n{op}({', '.join(spec.inputs)}{', ' + params if params else ''}, "
                  f"backend=None) -> {', '.join(spec.outputs)} (allocated)")
    return fn


for _op in OP_NAMES:
    globals()[_op] = _wrapper(_op)

__all__ = ["call", "output_shapes", "allocate_outputs", *OP_NAMES]
