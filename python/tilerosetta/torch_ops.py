"""Every backend's ops as torch custom ops (issue 14 item 8), so code calling them runs under
torch.compile (fullgraph) and inside CUDA graphs without graph breaks: dynamo sees one opaque op with a
fake (meta) implementation that gives output shapes, instead of tracing into a language runtime.

    from tilerosetta import torch_ops
    ns = torch_ops.register("triton")          # defines tilerosetta_triton::<op> for every op of the spec set
    y = torch.ops.tilerosetta_triton.rms_norm(x, w, 1e-6)

One namespace per backend (tilerosetta_<backend>), holding the ops that backend has; each op allocates its outputs (like tilerosetta.ops)
and calls the backend's validated BoundOp. The schema is made from the spec (inputs, params), so a new op
gets its custom op with no edit here. Registration is done once per backend per process.

A pair a spec declares safe in place (OpSpec.inplace_ok: rope's out may be q) also gets an in-place op,
named by `inplace_name` (rope -> `rope_`, torch's trailing underscore): the input is written as the
output, declared mutated in the schema (`Tensor(a!)`, mutates_args) so torch.compile functionalizes it
and a CUDA graph replays the write; it returns the op's other outputs (none for rope).

    torch.ops.tilerosetta_triton.rope_(qk, cos, sin)   # qk rotated in place
"""
from __future__ import annotations

import torch

from tilerosetta import backends
from tilerosetta.ops import allocate_outputs
from tilerosetta.specs import OP_NAMES, get_spec

_REGISTERED: dict[str, object] = {}


def namespace(backend: str) -> str:
    return "tilerosetta_" + backend


def inplace_pairs(spec) -> list[tuple[str, str]]:
    """(output, input) pairs the spec declares safe in place, in declaration order."""
    return [(o, n) for o, ns in spec.inplace_ok.items() for n in ns]


def inplace_name(spec, out: str, inp: str) -> str:
    """The in-place custom op's name: `<op>_` when the spec declares one pair, else `<op>_<out>_as_<inp>_`."""
    return f"{spec.name}_" if len(inplace_pairs(spec)) == 1 else f"{spec.name}_{out}_as_{inp}_"


def _schema(spec, mutated: str | None = None, dropped: str | None = None) -> str:
    """The op's schema; with `mutated` (an input written as output `dropped`), that input is marked
    mutated (Tensor(a!)) and the output is not returned."""
    args = [f"Tensor{'(a!)' if n == mutated else ''} {n}" for n in spec.inputs]
    for name, p in spec.params.items():
        kind = "bool" if p.kind == "flag" else "float"
        args.append(f"{kind}{'?' if p.optional else ''} {name}={p.default!r}")
    outs = ["Tensor"] * (len(spec.outputs) - (dropped is not None))
    ret = "()" if not outs else outs[0] if len(outs) == 1 else "(" + ", ".join(outs) + ")"
    return f"({', '.join(args)}) -> {ret}"


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
    for out, inp in inplace_pairs(spec):
        _register_inplace(backend, spec, bound, out, inp)
    return custom


def _register_inplace(backend: str, spec, bound, out: str, inp: str):
    """<op>_: the op with output `out` being input `inp` itself (a declared in-place pair)."""
    n_in, param_names, names = len(spec.inputs), list(spec.params), list(spec.outputs)
    at, kept = list(spec.inputs).index(inp), [i for i, n in enumerate(names) if n != out]

    def others(args):
        return allocate_outputs(spec, args[:n_in], backend)

    def impl(*args):
        outs = others(args)
        outs[names.index(out)] = args[at]
        bound(*args[:n_in], *outs, **dict(zip(param_names, args[n_in:])))
        rest = [outs[i] for i in kept]
        return None if not rest else rest[0] if len(rest) == 1 else tuple(rest)

    def fake(*args):
        rest = [others(args)[i] for i in kept]
        return None if not rest else rest[0] if len(rest) == 1 else tuple(rest)

    qualname = f"{namespace(backend)}::{inplace_name(spec, out, inp)}"
    custom = torch.library.custom_op(qualname, impl, mutates_args=(inp,), schema=_schema(spec, inp, out))
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
