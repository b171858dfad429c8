"""The `torch` backend: what a user would call instead of writing a kernel (cuBLAS, cuDNN, ATen).

It is timed like every other backend and is the baseline for speedups. Without a GPU it runs on CPU
tensors, so the harness itself is exercised for real in CI.

Two forms of every op:
  * `returning()` -- what a torch user writes, `y = F.rms_norm(x, ...)`: torch's fused call where it has
    one (softmax, rms_norm, layer_norm, sdpa, mm, bmm are single kernels), allocating its own output.
    This is the form the benchmark times (issue 13: a copy into our buffer made torch look 1.5x slower).
  * `implementations()` -- destination-passing, for the conformance suite and the launch-overhead probe;
    some of these copy into `out` (that copy is never timed).
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
    out.copy_(_attention(q, k, v, causal, scale))


def add_rms_norm(x, residual, weight, sum, out, eps):
    torch.add(x, residual, out=sum)
    out.copy_(F.rms_norm(sum, (sum.shape[-1],), weight, eps))


# ---- the returning form: what a torch user calls (timed) --------------------------------------------
def _vector_add(a, b):
    return a + b


def _transpose(x):
    return x.t().contiguous()  # a user needing a row-major transpose materialises it like this


def _softmax(x):
    return torch.softmax(x, dim=-1)


def _rms_norm(x, w, eps):
    return F.rms_norm(x, (x.shape[-1],), w, eps)


def _layer_norm(x, w, b, eps):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


def _silu_and_mul(x):
    h = x.shape[-1] // 2
    return F.silu(x[:, :h]) * x[:, h:]  # torch has no fused SwiGLU: two kernels, as users run it


def _rope(q, cos, sin):
    h = q.shape[-1] // 2
    return q * cos + torch.cat([-q[..., h:], q[..., :h]], dim=-1) * sin  # the HF/Llama eager code


def _matmul(a, b):
    return torch.mm(a, b)


def _bmm(a, b):
    return torch.bmm(a, b)


def _attention(q, k, v, causal, scale):
    """As torch users call SDPA for GQA and a KV cache: enable_gqa when k/v have fewer heads (SDPA's own
    grouping, k.repeat_interleave(H // Hkv, 1)); the spec's end-aligned causal mask is is_causal only for
    S == Sk (SDPA's is_causal is top-left), nothing for S == 1 (one query sees every key; HF Llama passes
    is_causal=q_len > 1 likewise) and torch's causal_lower_right bias for 1 < S < Sk. That bias is dispatched
    by torch itself (nn/attention/bias.py: flash, memory-efficient or a materialised mask), without
    enable_gqa on its fused paths, so k/v are repeated to H heads there, as HF's repeat_kv does."""
    s, sk = q.shape[-2], k.shape[-2]
    gqa = q.shape[1] != k.shape[1]
    if causal and s != sk and s > 1:
        if gqa:
            g = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        # Imported here: torch.nn.attention.bias imports triton, which must not load before the Triton
        # adapter has chosen the interpreter on a machine without a GPU (backends/triton_lang.py).
        from torch.nn.attention.bias import causal_lower_right

        return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(s, sk), scale=scale)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal and s == sk, scale=scale, enable_gqa=gqa)


def _add_rms_norm(x, residual, weight, eps):
    s = x + residual  # the HF/Llama decoder: the residual add, then RMSNorm (two kernels)
    return s, F.rms_norm(s, (s.shape[-1],), weight, eps)


RETURNING = {f.__name__[1:]: f for f in (_vector_add, _transpose, _softmax, _rms_norm, _layer_norm,
                                         _silu_and_mul, _rope, _matmul, _bmm, _attention, _add_rms_norm)}


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
                                         rope, matmul, bmm, attention, add_rms_norm)}

    def returning(self):
        return dict(RETURNING)

    def versions(self):
        v = {"torch": torch.__version__}
        if torch.version.cuda:
            v["torch_cuda"] = torch.version.cuda
        return v
