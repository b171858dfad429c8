"""The `quack` peer: Quack (pip `quack-kernels`, Tri Dao's CuTe DSL kernels), its public functions.

API (quack 0.6.5), each allocating and returning its result:
  softmax     quack.softmax(x): row softmax of (M, N).
  rms_norm    quack.rmsnorm(x, weight, eps=eps): y = x * rstd * weight (weight_offset 0 = our spec).
  layer_norm  quack.rmsnorm.layernorm_fwd(x, weight, bias, eps): weight and bias must be float32, so they
              are converted once per weight tensor (`prepare`), as a Quack user keeps them.
  rope        quack.rotary.apply_rotary(x, cos, sin): x (B, S, H, D), cos/sin (S, D/2), non-interleaved
              (rotate-half, our convention). Our (B, H, S, D) q is passed as the (B, S, H, D) view
              q.transpose(1, 2) (no copy; Quack reads strides) and the result viewed back; cos/sin are
              our (S, D) tables' first halves (cos = cat(f, f)), made contiguous once (`prepare`).
  matmul/bmm  quack.gemm_interface.gemm(A, B, tuned=...): (M, K) @ (K, N) or batched (L, M, K) @ (L, K, N),
              half dtypes (Hopper/Blackwell tensor-core kernels). Its default, tuned=True, autotunes on the
              first call of a shape by JIT-compiling many CuTe DSL kernels (minutes per shape), too long for
              a GPU session here: the adapter calls tuned=False (Quack's heuristic config) unless
              TILEROSETTA_QUACK_GEMM_TUNED=1; the config column records which.
"""

from __future__ import annotations

import os

from tilerosetta.backends.peer import PeerBackend, dist_version
from tilerosetta.specs.base import HALF_DTYPES


def gemm_tuned() -> bool:
    return os.environ.get("TILEROSETTA_QUACK_GEMM_TUNED", "0") == "1"


class QuackPeer(PeerBackend):
    name = "quack"
    language = "Quack (CuTe DSL, peer)"
    peer = "Quack"
    dist = "quack-kernels"
    modules = ("quack", "quack.rmsnorm", "quack.rotary", "quack.gemm_interface")
    install_hint = ("pip install quack-kernels==0.6.5 nvidia-cutlass-dsl==4.8.1 (needs the CuTe DSL runtime; "
                    "on the GPU node: tools/peers-bundle.sh + tools/gpu-peers-stage.sh)")
    not_here = {"vector_add": "Quack has no element-wise add", "transpose": "Quack has no transpose",
                "silu_and_mul": "Quack's SwiGLU exists only fused into a GEMM epilogue (gemm_act), not standalone",
                "attention": "Quack has no attention (FlashAttention 4 is the `fa4` peer)"}
    op_dtypes = {"matmul": HALF_DTYPES, "bmm": HALF_DTYPES}

    def bind(self, mods):
        q, rms, rot, gemm = (mods[m] for m in self.modules)

        def softmax(x):
            return q.softmax(x)

        def rms_norm(x, w, eps):
            return q.rmsnorm(x, w, eps=eps)

        def layer_norm(x, w, b, eps):
            w32 = self.prepare("w_fp32", w, lambda t: t.float())
            b32 = self.prepare("b_fp32", b, lambda t: t.float())
            return rms.layernorm_fwd(x, w32, b32, eps)

        def rope(x, cos, sin):
            h = x.shape[-1] // 2
            c = self.prepare("cos_half", cos, lambda t: t[:, :h].contiguous())
            s = self.prepare("sin_half", sin, lambda t: t[:, :h].contiguous())
            return rot.apply_rotary(x.transpose(1, 2), c, s, interleaved=False).transpose(1, 2)

        def matmul(a, b):
            return gemm.gemm(a, b, tuned=gemm_tuned())

        def bmm(a, b):
            return gemm.gemm(a, b, tuned=gemm_tuned())

        return {"softmax": softmax, "rms_norm": rms_norm, "layer_norm": layer_norm, "rope": rope,
                "matmul": matmul, "bmm": bmm}

    def versions(self):
        v = super().versions()
        for dist in ("nvidia-cutlass-dsl", "apache-tvm-ffi"):
            if dist_version(dist):
                v[dist] = dist_version(dist)
        return v

    def builtin_config(self, op, dtype, dims):
        notes = {"layer_norm": {"weights": "fp32 (converted once, untimed)"},
                 "rope": {"layout": "q as a (B, S, H, D) view; cos/sin (S, D/2)"},
                 "matmul": {"tuned": gemm_tuned()}, "bmm": {"tuned": gemm_tuned()}}
        return notes.get(op, {})


