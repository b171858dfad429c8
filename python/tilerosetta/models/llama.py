"""A Llama 3.1 decoder whose kernel calls go through one TileRosetta backend (issue 14 item 1).

rms_norm, rope, silu_and_mul, matmul (every linear layer), attention and, where the backend has it,
add_rms_norm (residual add fused with the next norm) are the backend's ops, called through their validated
BoundOp (backend="best": per op the fastest of ours in the latest committed benchmark). Embedding lookup,
KV-cache writes (one copy of k|v per layer where rope ran in place, see forward) and argmax stay in torch.
Attention asks the op's spec whether it accepts the call as is (GQA heads, decode Sq=1, Sq < Sk), and uses
our op whenever it does. Where our ops cannot express a call,
the model uses torch and records why in `model.fallbacks`, and `model.where` says which backend ran each
kind of call, so a report never claims a kernel that did not run:
  - an op the backend lacks (cute_dsl has no matmul or attention yet): the torch backend's op;
  - attention the backend's spec refuses (fp32: the attention spec's dtypes are fp16/bf16; Sq < Sk or GQA
    on a spec without them): torch SDPA.
The rotary table lives on the device (no host work per step), so a decode step can be captured in a CUDA
graph.
Linear weights are kept transposed once, (in, out) contiguous, because our matmul takes b as (K, N) and
refuses non-contiguous tensors: no copy per call.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tilerosetta import backends
from tilerosetta.errors import TileRosettaError
from tilerosetta.specs import get_spec
from tilerosetta.specs.base import SMALL_M

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
    """One backend's ops (or, for backend="best", one backend per op) as allocating calls.

    Records where every call ran: `where` maps a call kind ("matmul", "attention(prefill)",
    "attention(decode)", ...) to the backend that ran it or to "torch ... (fallback: why)", and every torch
    fallback's reason is also in `fallbacks`. custom_ops=True calls the ops as torch custom ops
    (tilerosetta.torch_ops), so the model traces under torch.compile(fullgraph=True); False calls the
    validated BoundOps directly (least host overhead)."""

    def __init__(self, backend: str, custom_ops: bool = False, choice: dict[str, str] | None = None):
        self.name = backend
        if backend == "best":
            choice = choice if choice is not None else best_backends()
        self.choice = dict(choice or {})  # op -> backend for ops not served by `backend`
        self.fallbacks: set[str] = set()
        self.where: dict[str, str] = {}
        self._missing: dict[tuple, str | None] = {}
        self._bound = {}
        self._custom = custom_ops
        self._verdicts: dict[tuple, str | None] = {}
        # Decided here, not while torch.compile traces a call: registration and spec look-ups are host work
        # dynamo cannot (and need not) trace.
        self._ns = {}
        if custom_ops:
            from tilerosetta import torch_ops
            self._ns = {b: torch_ops.register(b) for b in {self.backend_of(op, bound) for op in MODEL_OPS
                                                           for bound in (None, "memory")}}
        self._add_rms_why = "no add_rms_norm op in this backend"
        self._add_rms = self._find_add_rms()
        spec = get_spec("attention")
        self._attn_static = (spec.inputs["k"][1] != spec.inputs["q"][1], spec.inputs["k"][2] != spec.inputs["q"][2],
                             backends.get(self.backend_of("attention")).dtypes("attention"))

    def chosen(self, op: str, bound: str | None = None) -> str:
        """The backend chosen for `op`, whether or not it has the op. bound="memory": a call of a
        compute-bound op at a memory-bound size (a decode matmul or attention), which `best` chooses for
        separately ("op@memory") when the benchmark timed such cases."""
        name = self.choice.get(f"{op}@{bound}") if bound else None
        return name or self.choice.get(op, self.name if self.name != "best" else "torch")

    def backend_of(self, op: str, bound: str | None = None) -> str:
        """The backend that runs `op`: the chosen one, or torch when it lacks the op (see missing_why)."""
        name = self.chosen(op, bound)
        return name if self.missing_why(op, name) is None else "torch"

    def missing_why(self, op: str, name: str | None = None) -> str | None:
        """Why the chosen backend cannot serve `op` at all (it lacks the op), or None. The model then runs
        the torch backend's op for it, and `where`/`fallbacks` say so."""
        name = name or self.chosen(op)
        key = (op, name)
        if key not in self._missing:  # asked on every call: decided once
            b = backends.get(name)
            self._missing[key] = (None if name == "torch" or op in b.implementations() else
                                  f"{name} has no {op}: {b.missing().get(op, 'not implemented')}")
        return self._missing[key]

    def _note(self, kind: str, ran: str):
        if not torch.compiler.is_compiling():
            self.where.setdefault(kind, ran)

    def note(self, kind: str, ran: str):
        """Record a call the model makes in torch itself (a KV-cache write), so `where` lists it too."""
        self._note(kind, ran)

    def _fallback(self, kind: str, why: str):
        if not torch.compiler.is_compiling():
            self.fallbacks.add(why)
            self.where.setdefault(kind, f"torch (fallback: {why})")

    def _backend_for(self, op, kind, bound=None) -> str:
        """The backend that runs this call (the chosen one, or torch when it lacks the op), noted in `where`."""
        chosen = self.chosen(op, bound)
        why = self.missing_why(op, chosen)
        if why is None:
            self._note(kind or op, chosen)
            return chosen
        self._fallback(kind or op, f"{op}: torch ({why})")
        return "torch"

    def _fn(self, op, name):
        fn = self._bound.get((op, name))
        if fn is None:
            fn = self._bound[(op, name)] = backends.get(name).op(op)
        return fn

    def _run(self, op, inputs, out_shapes, kind=None, bound=None, **params):
        name = self._backend_for(op, kind, bound)
        if self._custom:
            return getattr(self._ns[name], op)(*inputs, *params.values())
        outs = [torch.empty(s, dtype=inputs[0].dtype, device=inputs[0].device) for s in out_shapes]
        self._fn(op, name)(*inputs, *outs, **params)
        return outs[0] if len(outs) == 1 else outs

    def accepts(self, op: str, inputs: tuple, bound: str | None = None, **params) -> str | None:
        """None when `op` of its backend accepts these inputs and params (the spec's own validation, inputs
        only, once per signature), else the refusal's text. How the model asks whether e.g. a GQA or
        decode (Sq < Sk) attention call is one the backend's spec takes, without knowing that spec.
        While torch.compile traces (custom ops), attention is decided from the spec's declared shapes
        (k's head and length symbols distinct from q's) instead; the custom op validates when it runs."""
        if torch.compiler.is_compiling():
            q, k, v = inputs
            gqa, lengths, dtypes = self._attn_static
            ok = ((gqa or k.shape[1] == q.shape[1]) and (lengths or k.shape[2] == q.shape[2]) and q.dtype in dtypes
                  and k.is_contiguous() and v.is_contiguous())
            return None if ok else "refused by the attention spec's declared shapes"
        key = (op, bound, tuple((t.shape, t.stride(), t.dtype, t.device.type) for t in inputs),
               tuple(sorted(params.items())))
        if key not in self._verdicts:
            b = backends.get(self.backend_of(op, bound))
            if op not in b.implementations():
                self._verdicts[key] = f"{b.name} has no {op}"
            else:
                spec = get_spec(op)
                try:
                    spec.validate(b.name, b.device_type, dict(zip(spec.inputs, inputs)), params,
                                  b.dtypes(op), with_outputs=False)
                    self._verdicts[key] = None
                except TileRosettaError as exc:
                    self._verdicts[key] = str(exc)
        return self._verdicts[key]

    def rms_norm(self, x, w, eps):
        x2 = x.reshape(-1, x.shape[-1])
        return self._run("rms_norm", (x2, w), [x2.shape], eps=eps).view(x.shape)

    def add_rms_norm(self, x, residual, w, eps):
        """(rms_norm(x + residual) * w, x + residual): the backend's fused add_rms_norm when it has one
        (guarded: the op may not exist yet), else a torch add and our rms_norm."""
        fused = self._add_rms
        if fused is None:
            if not torch.compiler.is_compiling():
                self.where.setdefault("add(residual)", f"torch ({self._add_rms_why})")
            s = x + residual
            return self.rms_norm(s, w, eps), s
        order, normed_i, sum_i = fused
        x2, r2 = x.reshape(-1, x.shape[-1]), residual.reshape(-1, x.shape[-1])
        args = {"x": x2, "r": r2, "w": w}
        outs = self._run("add_rms_norm", tuple(args[k] for k in order), [x2.shape, x2.shape], eps=eps)
        return outs[normed_i].view(x.shape), outs[sum_i].view(x.shape)

    def _find_add_rms(self):
        """(input order as 'x'/'r'/'w', index of the normed output, index of the sum) of the backend's
        add_rms_norm, or None when the backend (or the spec set) has none or its names are not the expected
        kind (then the unfused path runs, and `where` says so)."""
        try:
            spec = get_spec("add_rms_norm")
        except KeyError:
            return None
        b = backends.get(self.backend_of("add_rms_norm"))
        if not b.is_available()[0] or "add_rms_norm" not in b.implementations() or len(spec.outputs) != 2:
            return None
        order = ["w" if len(dims) == 1 else ("r" if "res" in n else "x") for n, dims in spec.inputs.items()]
        outs = list(spec.outputs)
        sum_i = next((i for i, n in enumerate(outs) if "res" in n or "sum" in n), None)
        if sorted(order) != ["r", "w", "x"] or sum_i is None or "eps" not in spec.params:
            self._add_rms_why = (f"add_rms_norm's spec is not the expected kind: inputs {list(spec.inputs)}, outputs "
                                 f"{outs}, params {list(spec.params)} (want x, a 'res*' input, a 1-D weight; a "
                                 f"'res*'/'sum*' output; eps)")
            return None
        return tuple(order), 1 - sum_i, sum_i

    def linear(self, x, w_t):
        x2 = x.reshape(-1, x.shape[-1])
        # M <= 64 rows (decode): a weight stream, the matmul spec's memory-bound class
        small = x2.shape[0] <= SMALL_M
        out = self._run("matmul", (x2, w_t), [(x2.shape[0], w_t.shape[1])], kind="matmul(decode)" if small else None,
                        bound="memory" if small else None)
        return out.view(*x.shape[:-1], w_t.shape[1])

    def silu_and_mul(self, x):
        x2 = x.reshape(-1, x.shape[-1])
        out = self._run("silu_and_mul", (x2,), [(x2.shape[0], x2.shape[1] // 2)])
        return out.view(*x.shape[:-1], x2.shape[1] // 2)

    def rope(self, q, cos, sin):
        q = q.contiguous()
        return self._run("rope", (q, cos, sin), [q.shape])

    def rope_(self, q, cos, sin):
        """q rotated in place (rope's declared in-place pair: out is q; q contiguous, e.g. the q|k heads of
        the fused projection at B=1, S=1). `where` notes it as "rope(in place)"."""
        name = self._backend_for("rope", "rope(in place)")
        if self._custom:
            from tilerosetta.torch_ops import inplace_name
            getattr(self._ns[name], inplace_name(get_spec("rope"), "out", "q"))(q, cos, sin)
        else:
            self._fn("rope", name)(q, cos, sin, q)
        return q

    def attention(self, q, k, v, causal):
        """q (B, H, Sq, D); k, v (B, Hkv, Sk, D), causal mask aligned to the end of the keys.

        Our op whenever its spec accepts the call, tried in this order: as is (GQA and Sq < Sk where the
        spec has them); k/v made contiguous (a KV-cache slice is strided: one copy); k/v heads repeated to H
        (a spec without GQA, equal lengths only). Else torch SDPA, recorded in `fallbacks` and `where`."""
        H, Hkv, Sq, Sk = q.shape[1], k.shape[1], q.shape[2], k.shape[2]
        kind = "attention(prefill)" if Sq == Sk else ("attention(decode)" if Sq == 1 else "attention(Sq<Sk)")
        params = {"causal": causal, "scale": None}
        q = q.contiguous()
        bound = "memory" if Sq == 1 else None  # one query row per head: a KV-cache stream (the spec's case_bound)
        why = self.accepts("attention", (q, k, v), bound=bound, **params)
        if why is None:
            return self._run("attention", (q, k, v), [q.shape], kind=kind, bound=bound, **params)
        if not (k.is_contiguous() and v.is_contiguous()):
            kc, vc = k.contiguous(), v.contiguous()
            if self.accepts("attention", (q, kc, vc), bound=bound, **params) is None:
                self._note(kind + " k/v copy", "torch (k/v made contiguous: a transposed projection or a KV-cache slice)")
                return self._run("attention", (q, kc, vc), [q.shape], kind=kind, bound=bound, **params)
            k, v = kc, vc
        if Hkv != H and Sq == Sk:
            kr = k.repeat_interleave(H // Hkv, dim=1)
            vr = v.repeat_interleave(H // Hkv, dim=1)
            if self.accepts("attention", (q, kr, vr), bound=bound, **params) is None:
                self._note(kind + " GQA", "torch (k/v heads repeated to H: the op has no GQA)")
                return self._run("attention", (q, kr, vr), [q.shape], kind=kind, bound=bound, **params)
        if q.dtype not in backends.get(self.backend_of("attention", bound)).dtypes("attention"):
            why = (f"attention({q.dtype}): torch SDPA, the attention spec's dtypes are "
                   f"{[str(d) for d in get_spec('attention').dtypes]}")
        elif Sq != Sk:
            why = SDPA_DECODE
        else:
            why = f"attention: torch SDPA, {self.backend_of('attention', bound)} refuses the call ({why})"
        self._fallback(kind, why)
        return _sdpa_end_aligned(q, k, v, causal)


# Ops the model calls through a backend; `best` picks one backend per op among these.
MODEL_OPS = ("rms_norm", "matmul", "silu_and_mul", "rope", "attention", "add_rms_norm")


def best_backends(results_path=None, dtype: str = "bf16", candidates=None, device_type: str | None = None) -> dict[str, str]:
    """op -> the fastest of OUR backends runnable here, from the latest committed benchmark: for each op the
    backend with the lowest geometric mean of its median times over the op's headline cases at `dtype`
    (only backends timed ok on all of them). An op timed at both compute- and memory-bound sizes (matmul:
    GEMMs and decode GEMVs; attention: prefill and decode) gets two choices, "op" over the compute-bound
    cases and "op@memory" over the memory-bound ones (Ops.backend_of asks for the latter on a decode call):
    the fastest GEMM is not the fastest weight stream. An op no runnable backend of ours was timed on
    takes the choice of the op it extends (AKIN: add_rms_norm -> rms_norm) when that backend has it, else
    torch."""
    from tilerosetta.bench.results import RESULTS_DIR, load

    res = load(results_path or RESULTS_DIR / "latest")
    names = candidates or [n for n in backends.BACKEND_NAMES if res.role(n) == "ours"
                           and backends.get(n).is_available()[0]
                           and (device_type is None or backends.get(n).device_type == device_type)]
    out = {}
    for op in MODEL_OPS:
        recs = [r for r in res.results if r["op"] == op and r["dtype"] == dtype and r.get("headline", True)]
        by_bound = {}
        for r in recs:
            by_bound.setdefault(r.get("bound"), set()).add(r["case"])
        if not by_bound:
            out[op] = None
        for bound, cases in by_bound.items():
            key = f"{op}@memory" if bound == "memory" and len(by_bound) > 1 else op
            out[key] = _fastest(res, names, op, dtype, cases)
    for op, like in AKIN.items():  # not benchmarked yet: the choice of the op it extends, if that backend has it
        if out.get(op) is None and out.get(like) and op in backends.get(out[like]).implementations():
            out[op] = out[like]
    return {op: b or "torch" for op, b in out.items()}


def _fastest(res, names, op, dtype, cases) -> str | None:
    """The backend of `names` with the lowest geometric mean of median times over `cases` (all timed ok)."""
    best, best_t = None, None
    for n in names:
        rs = [r for r in res.results if r["backend"] == n and r["op"] == op and r["dtype"] == dtype
              and r["case"] in cases and r["status"] == "ok" and not r.get("sweep")]
        if not rs or len(rs) < len(cases):
            continue
        t = math.exp(sum(math.log(r["timing"]["median_ms"]) for r in rs) / len(rs))
        if best_t is None or t < best_t:
            best, best_t = n, t
    return best


# An op the committed benchmark may not have timed yet -> the benchmarked op whose kernel it extends.
AKIN = {"add_rms_norm": "rms_norm"}


def _sdpa_end_aligned(q, k, v, causal):
    """SDPA with GQA (enable_gqa: k/v heads are not copied to H, which at B=64 and a 4096 context would move
    four times the KV cache per step) and the causal mask aligned to the end of the keys (query i sees keys
    <= Sk-Sq+i)."""
    Sq, Sk = q.shape[2], k.shape[2]
    mask = None
    if causal and Sq > 1:
        mask = torch.ones(Sq, Sk, dtype=torch.bool, device=q.device).tril(Sk - Sq)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=k.shape[1] != q.shape[1])


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
                 custom_ops: bool = False, choice: dict[str, str] | None = None):
        """backend: one backend's name, or "best" (per op the fastest of ours in the latest committed
        benchmark, or the explicit `choice` op -> backend)."""
        self.cfg, self.ops = cfg, Ops(backend, custom_ops, choice)
        self.embed = state["model.embed_tokens.weight"]
        self.norm = state["model.norm.weight"]
        head = state.get("lm_head.weight", self.embed)  # tied embeddings when absent
        self.lm_head_t = head.t().contiguous()
        self.layers = []
        for i in range(cfg.layers):
            p = f"model.layers.{i}."
            lay = {k: (state[p + k].t().contiguous() if lin else state[p + k]) for k, lin in _LAYER_KEYS.items()}
            # q, k and v fused into one (hidden, (H + 2 Hkv) D) matmul, gate and up into one (hidden, 2 mlp)
            # matmul (silu_and_mul takes [gate | up]): a decode step streams each weight in one launch, and
            # the 4096 x 1024 k/v weights (8 MB, too small to reach the copy bandwidth alone) ride along
            lay["qkv_t"] = torch.cat([lay.pop(f"self_attn.{n}_proj.weight") for n in "qkv"], 1)
            lay["gate_up_t"] = torch.cat([lay.pop("mlp.gate_proj.weight"), lay.pop("mlp.up_proj.weight")], 1)
            self.layers.append(lay)
        self.inv_freq = llama3_inv_freq(cfg)
        self._rope_table = None  # (cos, sin) of positions [0, n) on the weights' device and dtype

    def weight_bytes(self) -> int:
        """Bytes a decode step must read from memory at least: every layer's weights, the final norm and
        the LM head (the embedding lookup reads only B rows of its table)."""
        n = sum(t.numel() * t.element_size() for lay in self.layers for t in lay.values())
        return n + self.norm.numel() * self.norm.element_size() + self.lm_head_t.numel() * self.lm_head_t.element_size()

    @property
    def where(self) -> dict[str, str]:
        """Which backend ran each kind of call (or the torch fallback and why)."""
        return dict(sorted(self.ops.where.items()))

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
        """{"len": tokens cached, "kv": per layer one (2, B, Hkv, max_len, D) tensor: k is kv[0], v is kv[1]}.
        k and v of a layer side by side in one tensor: where rope ran in place, k|v are adjacent heads of the
        fused projection's output and reach the cache in one copy (see forward)."""
        c, e = self.cfg, self.embed
        shape = (2, batch, c.kv_heads, max_len, c.head_dim)
        return {"len": 0, "kv": [torch.zeros(shape, dtype=e.dtype, device=e.device) for _ in range(c.layers)]}

    def _cos_sin(self, start, n, dtype, device):
        """Rows [start, start+n) of a cos/sin table kept on the device (grown by doubling): no host work or
        host-to-device copy per step, so a decode step can be captured in a CUDA graph."""
        tab = self._rope_table
        if tab is None or tab[0].shape[0] < start + n or tab[0].dtype != dtype or tab[0].device != torch.device(device):
            size = max(64, 1 << (start + n - 1).bit_length())
            pos = torch.arange(size, dtype=torch.float64)
            ang = pos[:, None] * self.inv_freq[None, :]
            ang = torch.cat([ang, ang], -1)
            tab = self._rope_table = (ang.cos().to(dtype=dtype, device=device).contiguous(),
                                      ang.sin().to(dtype=dtype, device=device).contiguous())
        return tab[0][start:start + n], tab[1][start:start + n]  # row slices: contiguous

    def prepare(self, max_len: int):
        """Build the rotary table for positions < max_len now (before a CUDA-graph capture)."""
        self._cos_sin(0, max_len, self.embed.dtype, self.embed.device)

    @torch.no_grad()
    def forward(self, ids: torch.Tensor, cache=None, last_only: bool = False) -> torch.Tensor:
        """Logits (B, S, vocab), or (B, 1, vocab) of the last position with last_only (what generation
        needs: the LM head of a long prefill is then one row per sequence)."""
        c, ops = self.cfg, self.ops
        B, S = ids.shape
        start = cache["len"] if cache is not None else 0
        # torch's embedding kernel; self.embed[ids]'s generic index kernel took 4.3 us of the H200 decode step
        x = F.embedding(ids, self.embed)
        cos, sin = self._cos_sin(start, S, x.dtype, x.device)
        h = ops.rms_norm(x, self.layers[0]["input_layernorm.weight"], c.eps) if self.layers else x
        H, Hkv, D = c.heads, c.kv_heads, c.head_dim
        for i, lay in enumerate(self.layers):
            qkv = ops.linear(h, lay["qkv_t"]).view(B, S, H + 2 * Hkv, D).transpose(1, 2)
            # q's and k's heads rotated by one rope call (rope is per head: H + Hkv heads of one tensor). At
            # B=1, S=1 (decode) those heads are contiguous rows of qkv: rotated in place, so k and v stay
            # adjacent heads of qkv and reach the cache in one copy (one kernel per layer, not two and no
            # rope output to allocate); else (prefill, B > 1) rope writes a new tensor.
            qk = qkv[:, :H + Hkv]
            inplace = qk.is_contiguous()
            qk = ops.rope_(qk, cos, sin) if inplace else ops.rope(qk, cos, sin)
            q, k, v = qk[:, :H], qk[:, H:], qkv[:, H + Hkv:]
            if cache is not None:
                kv = cache["kv"][i]  # (2, B, Hkv, max_len, D)
                if inplace:  # heads [H, H + 2 Hkv) of qkv are k | v: (B, 2 Hkv, S, D) -> (2, B, Hkv, S, D)
                    kv[:, :, :, start:start + S] = qkv[:, H:].unflatten(1, (2, Hkv)).transpose(0, 1)
                    ops.note("kv-cache write(in place)", "torch (one copy of k|v per layer: rope ran in place in qkv)")
                else:
                    kv[0, :, :, start:start + S] = k
                    kv[1, :, :, start:start + S] = v
                    ops.note("kv-cache write", "torch (two copies per layer: k from rope's output, v from qkv)")
                k, v = kv[0, :, :, :start + S], kv[1, :, :, :start + S]
            a = ops.attention(q, k, v, causal=True)
            a = a.transpose(1, 2).reshape(B, S, c.heads * c.head_dim)
            # residual add fused with the next norm where the backend has add_rms_norm
            h, x = ops.add_rms_norm(ops.linear(a, lay["self_attn.o_proj.weight"]), x,
                                    lay["post_attention_layernorm.weight"], c.eps)
            mlp = ops.linear(ops.silu_and_mul(ops.linear(h, lay["gate_up_t"])), lay["mlp.down_proj.weight"])
            nxt = self.layers[i + 1]["input_layernorm.weight"] if i + 1 < len(self.layers) else self.norm
            h, x = ops.add_rms_norm(mlp, x, nxt, c.eps)
        if cache is not None:
            cache["len"] = start + S
        if not self.layers:
            h = ops.rms_norm(x, self.norm, c.eps)
        if last_only:
            h = h[:, -1:].contiguous()
        return ops.linear(h, self.lm_head_t)

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
    # generated where the weights live (a CUDA generator for an 8B-shaped model: seconds, not a minute)
    g = torch.Generator(device=device).manual_seed(seed)
    hd, kvd = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    shapes = {"input_layernorm.weight": (cfg.hidden,), "post_attention_layernorm.weight": (cfg.hidden,),
              "self_attn.q_proj.weight": (hd, cfg.hidden), "self_attn.k_proj.weight": (kvd, cfg.hidden),
              "self_attn.v_proj.weight": (kvd, cfg.hidden), "self_attn.o_proj.weight": (cfg.hidden, hd),
              "mlp.gate_proj.weight": (cfg.mlp, cfg.hidden), "mlp.up_proj.weight": (cfg.mlp, cfg.hidden),
              "mlp.down_proj.weight": (cfg.hidden, cfg.mlp)}

    def t(shape, norm=False):
        r = torch.randn(shape, generator=g, device=device)
        return (1 + 0.1 * r if norm else 0.02 * r).to(dtype=dtype)
    state = {"model.embed_tokens.weight": t((cfg.vocab, cfg.hidden)), "model.norm.weight": t((cfg.hidden,), True),
             "lm_head.weight": t((cfg.vocab, cfg.hidden))}
    for i in range(cfg.layers):
        for k, shp in shapes.items():
            state[f"model.layers.{i}.{k}"] = t(shp, k.endswith("layernorm.weight"))
    return state
