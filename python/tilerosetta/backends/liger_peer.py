"""The `liger` peer: Liger-Kernel (pip `liger-kernel`, Triton kernels for LLM training), its functional API.

API (liger_kernel.transformers.functional, 0.8.5), each returning a new tensor:
  softmax       liger_softmax(x): row softmax over the last dim.
  rms_norm      liger_rms_norm(X, W, eps, offset=0.0, casting_mode="llama"): y = x * rstd * W (Llama:
                rstd in fp32, the normalised x cast back to x's dtype before * W). offset 0 = our spec.
  layer_norm    liger_layer_norm(X, W, B, eps).
  silu_and_mul  liger_swiglu(a, b) = silu(a) * b on two tensors of the same (contiguous) layout: its kernel
                indexes a and b with the output's row stride, so the halves of our fused (M, 2H) x are
                handed over as two contiguous (M, H) tensors, split once per input (`prepare`), as a
                Liger user's gate and up projections come out. Bytes moved are the same.
  rope          missing: liger_rope(q, k, cos, sin) rotates q and k together, in place on a (B, S, H, D)
                storage (a (B, H, S, D) q is first copied by .contiguous()): that signature does not fit.
Liger 0.8.5 dispatches some ops across implementations (Triton, cuTile, CuTe DSL); the adapter pins
"nvidia-triton" with liger_kernel.set_impl so the peer is Liger's Triton kernels.
"""

from __future__ import annotations

from tilerosetta.backends.peer import PeerBackend

TRITON_IMPL = "nvidia-triton"


class LigerPeer(PeerBackend):
    name = "liger"
    language = "Liger-Kernel (Triton, peer)"
    peer = "Liger-Kernel"
    dist = "liger-kernel"
    modules = ("liger_kernel", "liger_kernel.transformers.functional")
    install_hint = "pip install liger-kernel==0.8.5 (or the GPU peers bundle: tools/peers-bundle.sh)"
    not_here = {
        "rope": "liger_rope rotates q and k together in place on a (B, S, H, D) storage: does not fit our rope",
        "vector_add": "Liger-Kernel has no element-wise add", "transpose": "Liger-Kernel has no transpose",
        "matmul": "Liger-Kernel has no GEMM", "bmm": "Liger-Kernel has no GEMM",
        "attention": "Liger-Kernel has no attention forward kernel",
    }

    def extra_problem(self, mods):
        lk = mods["liger_kernel"]
        if hasattr(lk, "set_impl"):
            lk.set_impl(TRITON_IMPL)
        return None

    def bind(self, mods):
        f = mods["liger_kernel.transformers.functional"]

        def softmax(x):
            return f.liger_softmax(x)

        def rms_norm(x, w, eps):
            return f.liger_rms_norm(x, w, eps, offset=0.0, casting_mode="llama")

        def layer_norm(x, w, b, eps):
            return f.liger_layer_norm(x, w, b, eps)

        def silu_and_mul(x):
            h = x.shape[-1] // 2
            gate, up = self.prepare("gate_up", x, lambda t: (t[:, :h].contiguous(), t[:, h:].contiguous()))
            return f.liger_swiglu(gate, up)

        return {"softmax": softmax, "rms_norm": rms_norm, "layer_norm": layer_norm, "silu_and_mul": silu_and_mul}

    def builtin_config(self, op, dtype, dims):
        if op == "silu_and_mul":
            return {"impl": TRITON_IMPL, "inputs": "gate, up as two contiguous tensors (split once, untimed)"}
        return {"impl": TRITON_IMPL} if op in ("softmax", "rms_norm", "layer_norm") else {}
