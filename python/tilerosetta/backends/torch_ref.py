"""The `torch` backend: what a user would call instead of writing a kernel (cuBLAS, cuDNN, ATen).

It is timed like every other backend and is the baseline for speedups. Without a GPU it runs on CPU
tensors, so the harness itself is exercised for real in CI.

Two forms of every op:
  * `returning()` -- what a torch user writes, `y = F.rms_norm(x, ...)`: each spec's `baseline` (torch's
    fused call where it has one: softmax, rms_norm, layer_norm, sdpa, mm, bmm are single kernels),
    allocating its own output.
    This is the form the benchmark times (issue 13: a copy into our buffer made torch look 1.5x slower).
  * `implementations()` -- destination-passing, for the conformance suite and the launch-overhead probe;
    some of these copy into `out` (that copy is never timed).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tilerosetta.backends.base import Backend, destination_from_returning
from tilerosetta.specs import SPECS, OpSpec


# ---- destination forms written through torch's own out= (no copy of a returned tensor) ---------------
# Every other op's destination form is its spec's baseline followed by a copy into `out`
# (destination_from_returning); a new op needs nothing here.
def vector_add(a, b, out):
    torch.add(a, b, out=out)


def transpose(x, out):
    out.copy_(x.t())


def softmax(x, out):
    torch.softmax(x, dim=-1, out=out)


def silu_and_mul(x, out):
    h = out.shape[-1]
    torch.mul(F.silu(x[:, :h]), x[:, h:], out=out)


def rope(q, cos, sin, out):
    # Safe in place (out is q, the spec's inplace_ok): q * cos and rotated are new tensors computed in
    # full before addcmul writes out, which then reads only them and sin.
    h = q.shape[-1] // 2
    rotated = torch.cat([-q[..., h:], q[..., :h]], dim=-1)
    torch.addcmul(q * cos, rotated, sin, out=out)


def matmul(a, b, out):
    torch.mm(a, b, out=out)


def bmm(a, b, out):
    torch.bmm(a, b, out=out)


def add_rms_norm(x, residual, weight, sum, out, eps):
    torch.add(x, residual, out=sum)  # the model's residual stream: no second copy of it
    out.copy_(F.rms_norm(sum, (sum.shape[-1],), weight, eps))


_OUT_FORMS = {f.__name__: f for f in (vector_add, transpose, softmax, silu_and_mul, rope, matmul, bmm, add_rms_norm)}


def _has_baseline(spec) -> bool:
    return type(spec).baseline is not OpSpec.baseline


# The returning form (what a torch user calls; timed): each spec's `baseline`.
RETURNING = {op: spec.baseline for op, spec in SPECS.items() if _has_baseline(spec)}
# The destination form (conformance, the model's calls). Built once: Backend.op keeps a BoundOp per
# implementation object, so the same callables must come back on every implementations() call.
IMPLEMENTATIONS = {op: _OUT_FORMS.get(op) or destination_from_returning(op, fn) for op, fn in RETURNING.items()}


class TorchBackend(Backend):
    name = "torch"
    language = "PyTorch"

    def __init__(self):
        self.device_type = "cuda" if torch.cuda.is_available() else "cpu"

    def element_limit(self, op):
        return None  # ATen indexes with 64 bits

    def available(self):
        if self.device_type == "cuda":
            return True, f"CUDA: {torch.cuda.get_device_name()}"
        return True, "no CUDA GPU: runs on CPU tensors (correctness only, never timed as GPU)"

    def implementations(self):
        return dict(IMPLEMENTATIONS)

    def missing(self):
        return {op: "its spec has no `baseline` (what a torch user writes)" for op in SPECS if op not in RETURNING}

    def returning(self):
        return dict(RETURNING)

    def versions(self):
        v = {"torch": torch.__version__}
        if torch.version.cuda:
            v["torch_cuda"] = torch.version.cuda
        return v
