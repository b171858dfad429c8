"""Attention peers: FlashAttention 4 (`fa4`) and torch SDPA with its backend pinned (`sdpa_cudnn`,
`sdpa_flash`), each a row of its own.

fa4         flash_attn.cute.flash_attn_func(q, k, v, softmax_scale=, causal=) from pip `flash-attn-4`
            (CuTe DSL), q (B, S, H, D), k/v (B, Sk, Hkv, D); returns (out, lse). Our (B, H, S, D) tensors
            are passed as (B, S, H, D) views (transpose(1, 2), no copy: its kernels read strides) and out is
            viewed back. Grouped-query heads are native (k/v with fewer heads, H divisible by Hkv, the same
            grouping as ours), and its causal mask is aligned to the bottom-right corner when S != Sk, as
            our spec's (FlashAttention's flash_attn_func documentation); top-left for equal lengths.
sdpa_cudnn  F.scaled_dot_product_attention under torch.nn.attention.sdpa_kernel(SDPBackend.CUDNN_ATTENTION)
sdpa_flash  the same under SDPBackend.FLASH_ATTENTION (FlashAttention 2 in torch). The `torch` baseline
            lets torch choose (cuDNN on an H200 with torch 2.11). GQA through enable_gqa=True; causal as
            is_causal for S == Sk, no mask for S == 1 (one query sees every key). Causal with 1 < S < Sk
            needs torch's causal_lower_right bias, which torch dispatches itself (nn/attention/bias.py)
            around the pinned backend, so these peers refuse it rather than time another kernel.
A pinned backend that cannot run a case raises (sdpa_kernel allows no fallback): the result is an error
with torch's reason, never a silent other kernel.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from tilerosetta.backends.peer import PeerBackend, dist_version
from tilerosetta.errors import TileRosettaError
from tilerosetta.specs import OP_NAMES

ONLY_ATTENTION = "an attention-only peer"


class Fa4Peer(PeerBackend):
    name = "fa4"
    language = "FlashAttention 4 (CuTe DSL, peer)"
    peer = "FlashAttention 4"
    dist = "flash-attn-4"
    modules = ("flash_attn.cute",)
    install_hint = ("pip install flash-attn-4==4.0.0b36 (with nvidia-cutlass-dsl, quack-kernels, apache-tvm-ffi; "
                    "on the GPU node: tools/peers-bundle.sh + tools/gpu-peers-stage.sh)")
    not_here = {op: ONLY_ATTENTION for op in OP_NAMES if op != "attention"}

    def bind(self, mods):
        fa = mods["flash_attn.cute"]

        def attention(q, k, v, causal, scale):
            scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
            out = fa.flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                     softmax_scale=scale, causal=bool(causal))
            out = out[0] if isinstance(out, (tuple, list)) else out
            return out.transpose(1, 2)
        return {"attention": attention}

    def versions(self):
        v = super().versions()
        if dist_version("nvidia-cutlass-dsl"):
            v["nvidia-cutlass-dsl"] = dist_version("nvidia-cutlass-dsl")
        return v


class _PinnedSdpa(PeerBackend):
    """torch's SDPA with one backend pinned; subclasses name the SDPBackend member."""

    dist = "torch"
    modules = ("torch.nn.attention",)
    install_hint = "ships with torch"
    not_here = {op: ONLY_ATTENTION for op in OP_NAMES if op != "attention"}
    sdp_backend = ""

    def version(self):
        return torch.__version__

    def extra_problem(self, mods):
        if not hasattr(mods["torch.nn.attention"].SDPBackend, self.sdp_backend):
            return f"torch {torch.__version__} has no SDPBackend.{self.sdp_backend}"
        return None

    def bind(self, mods):
        attn = mods["torch.nn.attention"]
        backend = getattr(attn.SDPBackend, self.sdp_backend)

        name = self.name

        def attention(q, k, v, causal, scale):
            s, sk = q.shape[-2], k.shape[-2]
            if causal and 1 < s != sk:
                raise TileRosettaError("attention", name, "causal",
                                       f"causal with S={s} < Sk={sk} needs torch's causal_lower_right bias, which "
                                       f"torch dispatches around the pinned {self.sdp_backend} backend")
            with attn.sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal) and s == sk, scale=scale,
                                                      enable_gqa=q.shape[1] != k.shape[1])
        return {"attention": attention}

    def versions(self):
        v = super().versions()
        if torch.backends.cudnn.is_available():
            v["cudnn"] = str(torch.backends.cudnn.version())
        v["sdpa_backend"] = self.sdp_backend
        return v

    def builtin_config(self, op, dtype, dims):
        return {"sdpa_backend": self.sdp_backend} if op == "attention" else {}


class SdpaCudnnPeer(_PinnedSdpa):
    name = "sdpa_cudnn"
    language = "torch SDPA, cuDNN backend pinned (peer)"
    peer = "torch SDPA (cuDNN)"
    sdp_backend = "CUDNN_ATTENTION"


class SdpaFlashPeer(_PinnedSdpa):
    name = "sdpa_flash"
    language = "torch SDPA, flash backend pinned (peer)"
    peer = "torch SDPA (flash)"
    sdp_backend = "FLASH_ATTENTION"
