"""A Llama 3.1 decoder whose kernel calls go through one TileRosetta backend (issue 14 item 1).

rms_norm, rope, silu_and_mul, matmul (every linear layer) and attention (prefill, no cache) are the
backend's ops, called through their validated BoundOp. Embedding lookup, KV-cache writes and argmax stay
in torch. Where our ops cannot express a call yet, the model uses torch and records why in
`model.fallbacks` (a set of strings), so a report never claims a kernel that did not run:
  - attention with Sq < Sk (decode, prefill continuing a cache): the attention spec has no such case yet;
  - attention in float32: the attention spec's dtypes are fp16/bf16.
Linear weights are kept transposed once, (in, out) contiguous, because our matmul takes b as (K, N) and
refuses non-contiguous tensors: no copy per call.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tilerosetta import backends
from tilerosetta.specs import get_spec

SDPA_DECODE = ("attention(Sq<Sk): torch SDPA until the attention spec grows GQA/Sq<Sk, issue 14 item 2")


@dataclass
class LlamaConfig:
    hidden: int = 4096
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    mlp: int = 14336
    vocab: int = 128256
    layers: int = 32
    rope_theta: float = 500000.0
    rope_factor: float = 8.0          # llama3 rope scaling
    rope_low_freq_factor: float = 1.0
    rope_high_freq_factor: float = 4.0
    rope_original_max: int = 8192
    eps: float = 1e-5


def llama3_inv_freq(cfg: LlamaConfig) -> torch.Tensor:
    """Inverse rotary frequencies with Llama 3.1's scaling: long wavelengths divided by `factor`, short
    kept, a smooth blend between (Meta's published rule)."""
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float64) / cfg.head_dim))
    if not cfg.rope_factor:
        return inv
    low_wl = cfg.rope_original_max / cfg.rope_low_freq_factor
    high_wl = cfg.rope_original_max / cfg.rope_high_freq_factor
    wl = 2 * math.pi / inv
    smooth = (cfg.rope_original_max / wl - cfg.rope_low_freq_factor) / (
        cfg.rope_high_freq_factor - cfg.rope_low_freq_factor)
    blended = (1 - smooth) * inv / cfg.rope_factor + smooth * inv
    return torch.where(wl > low_wl, inv / cfg.rope_factor, torch.where(wl < high_wl, inv, blended))


class Ops:
    """One backend's ops as allocating calls; records every torch fallback in `fallbacks`.

    custom_ops=True calls them as torch custom ops (tilerosetta.torch_ops), so the model traces under
    torch.compile(fullgraph=True); False calls the validated BoundOps directly (least host overhead)."""

    def __init__(self, backend: str, custom_ops: bool = False):
        self.name = backend
        self.backend = backends.get(backend)
        self.fallbacks: set[str] = set()
        self._bound = {}
        self._ns = None
        if custom_ops:
            from tilerosetta import torch_ops
            self._ns = torch_ops.register(backend)

    def _run(self, op, inputs, out_shape, **params):
        if self._ns is not None:
            return getattr(self._ns, op)(*inputs, *params.values())
        if op not in self._bound:
            self._bound[op] = self.backend.op(op)
        out = torch.empty(out_shape, dtype=inputs[0].dtype, device=inputs[0].device)
        self._bound[op](*inputs, out, **params)
        return out

    def rms_norm(self, x, w, eps):
        x2 = x.reshape(-1, x.shape[-1])
        return self._run("rms_norm", (x2, w), x2.shape, eps=eps).view(x.shape)

    def linear(self, x, w_t):
        x2 = x.reshape(-1, x.shape[-1])
        out = self._run("matmul", (x2, w_t), (x2.shape[0], w_t.shape[1]))
        return out.view(*x.shape[:-1], w_t.shape[1])

    def silu_and_mul(self, x):
        x2 = x.reshape(-1, x.shape[-1])
        out = self._run("silu_and_mul", (x2,), (x2.shape[0], x2.shape[1] // 2))
        return out.view(*x.shape[:-1], x2.shape[1] // 2)

    def rope(self, q, cos, sin):
        q = q.contiguous()
        return self._run("rope", (q, cos, sin), q.shape)

    def attention(self, q, k, v, causal):
        """q (B, H, Sq, D); k, v (B, Hkv, Sk, D). Our op when Sq == Sk and dtype allowed, else SDPA."""
        H, Hkv = q.shape[1], k.shape[1]
        if q.shape[2] != k.shape[2]:
            self.fallbacks.add(SDPA_DECODE)
            return _sdpa_end_aligned(q, k, v, causal)
        if q.dtype not in self.backend.dtypes("attention"):
            self.fallbacks.add(f"attention({q.dtype}): torch SDPA, the attention spec's dtypes are "
                               f"{[str(d) for d in get_spec('attention').dtypes]}")
            return _sdpa_end_aligned(q, k, v, causal)
        if Hkv != H:  # GQA: our op wants the same H for q, k, v (issue 14 item 2 adds GQA)
            k = k.repeat_interleave(H // Hkv, dim=1)
            v = v.repeat_interleave(H // Hkv, dim=1)
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        return self._run("attention", (q, k, v), q.shape, causal=causal, scale=None)


def _sdpa_end_aligned(q, k, v, causal):
    """SDPA with GQA and the causal mask aligned to the end of the keys (query i sees keys <= Sk-Sq+i)."""
    Sq, Sk = q.shape[2], k.shape[2]
    if k.shape[1] != q.shape[1]:
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    mask = None
    if causal and Sq > 1:
        mask = torch.ones(Sq, Sk, dtype=torch.bool, device=q.device).tril(Sk - Sq)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


# Hugging Face key names of one layer's tensors, and whether the tensor is a linear weight (kept transposed)
_LAYER_KEYS = {
    "input_layernorm.weight": False, "post_attention_layernorm.weight": False,
    "self_attn.q_proj.weight": True, "self_attn.k_proj.weight": True, "self_attn.v_proj.weight": True,
    "self_attn.o_proj.weight": True, "mlp.gate_proj.weight": True, "mlp.up_proj.weight": True,
    "mlp.down_proj.weight": True,
}


class LlamaModel:
    """Llama 3.1 decoder-only LM. `forward(ids, cache)` returns logits (B, S, vocab) and fills the cache."""

    def __init__(self, cfg: LlamaConfig, state: dict[str, torch.Tensor], backend: str = "torch",
                 custom_ops: bool = False):
        self.cfg, self.ops = cfg, Ops(backend, custom_ops)
        self.embed = state["model.embed_tokens.weight"]
        self.norm = state["model.norm.weight"]
        head = state.get("lm_head.weight", self.embed)  # tied embeddings when absent
        self.lm_head_t = head.t().contiguous()
        self.layers = []
        for i in range(cfg.layers):
            p = f"model.layers.{i}."
            lay = {k: (state[p + k].t().contiguous() if lin else state[p + k]) for k, lin in _LAYER_KEYS.items()}
            # gate and up fused into one (hidden, 2*mlp) matmul: silu_and_mul takes [gate | up]
            lay["gate_up_t"] = torch.cat([lay.pop("mlp.gate_proj.weight"), lay.pop("mlp.up_proj.weight")], 1)
            self.layers.append(lay)
        self.inv_freq = llama3_inv_freq(cfg)

    @property
    def fallbacks(self) -> list[str]:
        return sorted(self.ops.fallbacks)

    @classmethod
    def random(cls, cfg: LlamaConfig, seed: int = 0, dtype=torch.float32, device="cpu", backend="torch"):
        return cls(cfg, random_state(cfg, seed, dtype, device), backend)

    @classmethod
    def from_safetensors(cls, path, cfg: LlamaConfig, dtype=None, device="cpu", backend="torch"):
        from safetensors.torch import load_file
        state = load_file(str(path), device=str(device))
        if dtype is not None:
            state = {k: v.to(dtype) for k, v in state.items()}
        return cls(cfg, state, backend)

    def new_cache(self, batch: int, max_len: int):
        c, e = self.cfg, self.embed
        shape = (batch, c.kv_heads, max_len, c.head_dim)
        return {"len": 0, "k": [torch.zeros(shape, dtype=e.dtype, device=e.device) for _ in range(c.layers)],
                "v": [torch.zeros(shape, dtype=e.dtype, device=e.device) for _ in range(c.layers)]}

    def _cos_sin(self, start, n, dtype, device):
        pos = torch.arange(start, start + n, dtype=torch.float64)
        ang = pos[:, None] * self.inv_freq[None, :]
        ang = torch.cat([ang, ang], -1)
        return ang.cos().to(dtype=dtype, device=device).contiguous(), ang.sin().to(dtype=dtype, device=device).contiguous()

    @torch.no_grad()
    def forward(self, ids: torch.Tensor, cache=None) -> torch.Tensor:
        c, ops = self.cfg, self.ops
        B, S = ids.shape
        start = cache["len"] if cache is not None else 0
        x = self.embed[ids]
        cos, sin = self._cos_sin(start, S, x.dtype, x.device)
        for i, lay in enumerate(self.layers):
            h = ops.rms_norm(x, lay["input_layernorm.weight"], c.eps)
            q = ops.linear(h, lay["self_attn.q_proj.weight"]).view(B, S, c.heads, c.head_dim).transpose(1, 2)
            k = ops.linear(h, lay["self_attn.k_proj.weight"]).view(B, S, c.kv_heads, c.head_dim).transpose(1, 2)
            v = ops.linear(h, lay["self_attn.v_proj.weight"]).view(B, S, c.kv_heads, c.head_dim).transpose(1, 2)
            q, k = ops.rope(q, cos, sin), ops.rope(k, cos, sin)
            if cache is not None:
                cache["k"][i][:, :, start:start + S] = k
                cache["v"][i][:, :, start:start + S] = v
                k, v = cache["k"][i][:, :, :start + S], cache["v"][i][:, :, :start + S]
            a = ops.attention(q, k, v, causal=True)
            a = a.transpose(1, 2).reshape(B, S, c.heads * c.head_dim)
            x = x + ops.linear(a, lay["self_attn.o_proj.weight"])
            h = ops.rms_norm(x, lay["post_attention_layernorm.weight"], c.eps)
            x = x + ops.linear(ops.silu_and_mul(ops.linear(h, lay["gate_up_t"])), lay["mlp.down_proj.weight"])
        if cache is not None:
            cache["len"] = start + S
        return ops.linear(ops.rms_norm(x, self.norm, c.eps), self.lm_head_t)

    __call__ = forward

    def greedy(self, ids: torch.Tensor, steps: int, max_len: int | None = None) -> torch.Tensor:
        cache = self.new_cache(ids.shape[0], max_len or ids.shape[1] + steps)
        logits = self.forward(ids, cache)
        out = []
        for _ in range(steps):
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            out.append(nxt)
            logits = self.forward(nxt, cache)
        return torch.cat(out, 1)


def random_state(cfg: LlamaConfig, seed=0, dtype=torch.float32, device="cpu") -> dict[str, torch.Tensor]:
    """HF-named random weights (std 0.02 like HF's init; norms 1 + small noise so they matter)."""
    g = torch.Generator().manual_seed(seed)
    hd, kvd = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    shapes = {"input_layernorm.weight": (cfg.hidden,), "post_attention_layernorm.weight": (cfg.hidden,),
              "self_attn.q_proj.weight": (hd, cfg.hidden), "self_attn.k_proj.weight": (kvd, cfg.hidden),
              "self_attn.v_proj.weight": (kvd, cfg.hidden), "self_attn.o_proj.weight": (cfg.hidden, hd),
              "mlp.gate_proj.weight": (cfg.mlp, cfg.hidden), "mlp.up_proj.weight": (cfg.mlp, cfg.hidden),
              "mlp.down_proj.weight": (cfg.hidden, cfg.mlp)}

    def t(shape, norm=False):
        r = torch.randn(shape, generator=g)
        return (1 + 0.1 * r if norm else 0.02 * r).to(dtype=dtype, device=device)
    state = {"model.embed_tokens.weight": t((cfg.vocab, cfg.hidden)), "model.norm.weight": t((cfg.hidden,), True),
             "lm_head.weight": t((cfg.vocab, cfg.hidden))}
    for i in range(cfg.layers):
        for k, shp in shapes.items():
            state[f"model.layers.{i}.{k}"] = t(shp, k.endswith("layernorm.weight"))
    return state
