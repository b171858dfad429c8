"""The `torch` backend: what a user would call instead of writing a kernel (cuBLAS, cuDNN, ATen).

It is timed like every other backend and is the baseline for speedups. Without a GPU it runs on CPU
tensors, so the harness itself is exercised for real in CI.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tilerosetta.backends.base import Backend


def vector_add(a, b, out):
    torch.add(a, b, out=out)


def transpose(x, out):
    out.copy_(x.t())


def softmax(x, out):
    torch.softmax(x, dim=-1, out=out)


def rms_norm(x, w, out, eps):
    out.copy_(F.rms_norm(x, (x.shape[-1],), w, eps))


def layer_norm(x, w, b, out, eps):
    out.copy_(F.layer_norm(x, (x.shape[-1],), w, b, eps))


def silu_and_mul(x, out):
    h = out.shape[-1]
    torch.mul(F.silu(x[:, :h]), x[:, h:], out=out)


def rope(q, cos, sin, out):
    h = q.shape[-1] // 2
    rotated = torch.cat([-q[..., h:], q[..., :h]], dim=-1)
    torch.addcmul(q * cos, rotated, sin, out=out)


def matmul(a, b, out):
    torch.mm(a, b, out=out)


def bmm(a, b, out):
    torch.bmm(a, b, out=out)


def attention(q, k, v, out, causal, scale):
    out.copy_(F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale))


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
        return {f.__name__: f for f in (vector_add, transpose, softmax, rms_norm, layer_norm, silu_and_mul,
                                         rope, matmul, bmm, attention)}

    def versions(self):
        v = {"torch": torch.__version__}
        if torch.version.cuda:
            v["torch_cuda"] = torch.version.cuda
        return v
