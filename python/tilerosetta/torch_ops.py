"""Every backend's ops as torch custom ops (issue 14 item 8), so code calling them runs under
torch.compile (fullgraph) and inside CUDA graphs without graph breaks: dynamo sees one opaque op with a
fake (meta) implementation that gives output shapes, instead of tracing into a language runtime.

    from tilerosetta import torch_ops
    ns = torch_ops.register("triton")          # defines tilerosetta_triton::<op> for every op of the spec set
    y = torch.ops.tilerosetta_triton.rms_norm(x, w, 1e-6)

One namespace per backend (tilerosetta_<backend>), holding the ops that backend has; each op allocates its outputs (like tilerosetta.ops)
and calls the backend's validated BoundOp. The schema is made from the spec (inputs, params), so a new op
gets its custom op with no edit here. Registration is done once per backend per process.
"""
from __future__ import annotations

import torch

from tilerosetta import backends
from tilerosetta.ops import allocate_outputs
from tilerosetta.specs import OP_NAMES, get_spec

_REGISTERED: dict[str, object] = {}


def namespace(backend: str) -> str:
    return "tilerosetta_" + backend


def _schema(spec) -> str:
    args = [f"Tensor {n}" for n in spec.inputs]
    for name, p in spec.params.items():
        kind = "bool" if p.kind == "flag" else "float"
        args.append(f"{kind}{'?' if p.optional else ''} {name}={p.default!r}")
    outs = ["Tensor"] * len(spec.outputs)
    return f"({', '.join(args)}) -> {outs[0] if len(outs) == 1 else '(' + ', '.join(outs) + ')'}"


def _register_op(backend: str, op: str):
    spec = get_spec(op)
    n_in, param_names = len(spec.inputs), list(spec.params)
    bound = backends.get(backend).op(op)

    def allocate(args):
        return allocate_outputs(spec, args[:n_in], backend)

    def impl(*args):
        outs = allocate(args)
        bound(*args[:n_in], *outs, **dict(zip(param_names, args[n_in:])))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def fake(*args):
        outs = allocate(args)
        return outs[0] if len(outs) == 1 else tuple(outs)

    qualname = f"{namespace(backend)}::{op}"
    custom = torch.library.custom_op(qualname, impl, mutates_args=(), schema=_schema(spec))
    custom.register_fake(fake)
    return custom


def register(backend: str):
    """Define tilerosetta_<backend>::<op> for every op; returns torch.ops.tilerosetta_<backend>."""
    if backend not in _REGISTERED:
        ok, why = backends.get(backend).available()
        if not ok:
            raise RuntimeError(f"cannot register {backend} ops as torch custom ops: {why}")
        have = backends.get(backend).implementations()
        for op in OP_NAMES:
            if op in have:  # an op the backend lacks has no custom op (calling it is an AttributeError)
                _register_op(backend, op)
        _REGISTERED[backend] = getattr(torch.ops, namespace(backend))
    return _REGISTERED[backend]
