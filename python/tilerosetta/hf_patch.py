"""tilerosetta.patch(model, backend=...): run a Hugging Face transformers Llama model on one backend's ops
(issue 14 item 3), as Liger's apply_liger_kernel_to_llama and TileGym do for theirs.

Swapped, through the backend's torch custom ops (tilerosetta.torch_ops, so the patched model compiles
with torch.compile(fullgraph=True)):
  - every LlamaRMSNorm's forward        -> rms_norm
  - modeling_llama.apply_rotary_pos_emb -> rope (a module global in transformers: the LAST patch's backend
    is used by every Llama model of the process; `unpatch` restores it)
  - the attention function              -> attention, registered as attn implementation "tilerosetta_<b>";
    k/v as they are (GQA heads, decode / Sq < Sk) whenever the op's spec accepts them (asked through the
    spec's validation), else, for equal lengths, k/v heads repeated to H
  - every LlamaMLP's forward            -> silu_and_mul (gate and up outputs are concatenated first: one
    copy per call until the MLP's weights are fused)
Linear layers stay torch (nn.Linear). Where our ops cannot express a call, torch runs it and the reason is
listed in model.tilerosetta_fallbacks (a recorded set, filled only outside torch.compile tracing):
  - attention with a padding mask, float32 (spec: fp16/bf16), or Sq != Sk while the spec lacks it: torch SDPA;
  - rope when position ids differ across the batch (our cos/sin are (S, D), shared by the batch).
KNOWN GAP: under torch.compile, transformers 5.17 hands the attention function a materialized mask (seen
on CPU: the compiled graph holds tilerosetta rms_norm/rope/silu_and_mul but torch SDPA for attention), so
compiled attention is SDPA; this is not recorded in tilerosetta_fallbacks (nothing is noted while tracing).
"""
from __future__ import annotations

import types

import torch
import torch.nn.functional as F

from tilerosetta import backends, torch_ops
from tilerosetta.errors import TileRosettaError
from tilerosetta.specs import get_spec

_ORIGINAL_ROPE = None


def _note(model_fallbacks: set, why: str):
    if not torch.compiler.is_compiling():
        model_fallbacks.add(why)


def patch(model, backend: str = "torch"):
    """Patch a transformers LlamaForCausalLM / LlamaModel in place; returns it."""
    global _ORIGINAL_ROPE
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, causal_mask_function, sdpa_mask
    from transformers.models.llama import modeling_llama as ml

    ops = torch_ops.register(backend)
    fallbacks: set[str] = set()
    model.tilerosetta_fallbacks = fallbacks
    model.tilerosetta_backend = backend
    half = (torch.float16, torch.bfloat16)

    def rms_forward(self, x):
        out = ops.rms_norm(x.reshape(-1, x.shape[-1]).contiguous(), self.weight.to(x.dtype),
                           float(self.variance_epsilon))
        return out.view(x.shape)

    def mlp_forward(self, x):
        gate_up = torch.cat([self.gate_proj(x), self.up_proj(x)], dim=-1)
        act = ops.silu_and_mul(gate_up.reshape(-1, gate_up.shape[-1]))
        return self.down_proj(act.view(*x.shape[:-1], -1))

    def rope(q, k, cos, sin, unsqueeze_dim=1):
        if cos.dim() != 3 or cos.shape[0] != 1 or unsqueeze_dim != 1:
            _note(fallbacks, "rope: position ids differ across the batch; torch (our cos/sin are (S, D))")
            return _ORIGINAL_ROPE(q, k, cos, sin, unsqueeze_dim)
        c, s = cos[0].to(q.dtype).contiguous(), sin[0].to(q.dtype).contiguous()
        return ops.rope(q.contiguous(), c, s), ops.rope(k.contiguous(), c, s)

    spec = get_spec("attention")
    declared_gqa = spec.inputs["k"][1] != spec.inputs["q"][1]  # the spec names k's heads apart from q's
    declared_lengths = spec.inputs["k"][2] != spec.inputs["q"][2]  # ... and the key length apart from Sq
    be = backends.get(backend)
    has_attention = "attention" in be.implementations()  # cute_dsl has none yet: SDPA, recorded

    def accepts(q, k, v) -> bool:
        """Does the backend's attention take q, k, v as they are (GQA heads, Sq < Sk)? The spec's own
        validation of the inputs; while torch.compile traces, the spec's declared shapes."""
        if torch.compiler.is_compiling():
            return ((declared_gqa or k.shape[1] == q.shape[1]) and (declared_lengths or k.shape[2] == q.shape[2])
                    and q.dtype in half)
        try:
            spec.validate(backend, be.device_type, {"q": q, "k": k, "v": v}, {"causal": True}, be.dtypes("attention"),
                          with_outputs=False)
            return True
        except TileRosettaError:
            return False

    def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        H, Hkv = query.shape[1], key.shape[1]
        out = None
        if attention_mask is None and query.dtype in half and has_attention:  # causal, end-aligned if Sq < Sk
            q, k, v = query.contiguous(), key.contiguous(), value.contiguous()
            if accepts(q, k, v):  # GQA and/or Sq < Sk where the spec has them
                out = ops.attention(q, k, v, True, scaling)
            elif query.shape[2] == key.shape[2] and Hkv != H:  # a spec without GQA: k/v heads repeated to H
                out = ops.attention(q, k.repeat_interleave(H // Hkv, dim=1).contiguous(),
                                    v.repeat_interleave(H // Hkv, dim=1).contiguous(), True, scaling)
            elif query.shape[2] == key.shape[2]:
                out = ops.attention(q, k, v, True, scaling)
        if out is None:
            why = (f"attention: torch SDPA, {backend} has no attention: {be.missing().get('attention', '')}"
                   if not has_attention else
                   f"attention({query.dtype}): torch SDPA, the attention spec's dtypes are fp16/bf16"
                   if query.dtype not in half else "attention with a padding mask: torch SDPA"
                   if attention_mask is not None and query.shape[2] == key.shape[2] else
                   "attention(Sq<Sk): torch SDPA until the attention spec grows GQA/Sq<Sk, issue 14 item 2")
            _note(fallbacks, why)
            Sq, Sk = query.shape[2], key.shape[2]
            mask = attention_mask
            if mask is None and 1 < Sq < Sk:  # None means causal aligned to the end of the keys (see mask())
                mask = torch.ones(Sq, Sk, dtype=torch.bool, device=query.device).tril(Sk - Sq)
            out = F.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=scaling,
                                                 is_causal=attention_mask is None and 1 < Sq == Sk,
                                                 enable_gqa=Hkv != H)
        return out.transpose(1, 2).contiguous(), None

    name = f"tilerosetta_{backend}"
    AttentionInterface.register(name, attention)
    def mask(batch_size, q_length, kv_length, q_offset=0, kv_offset=0, mask_function=causal_mask_function,
             attention_mask=None, **kwargs):
        # None means "pure causal, no padding, the queries are the last q_length of the kv_length positions":
        # our attention's causal flag, aligned to the end of the keys (a DynamicCache decode or continued
        # prefill; not a StaticCache, whose kv_length is its whole capacity). Decided from shapes only
        # (sdpa_mask materializes the mask while torch.compile traces, which would send every compiled call
        # to SDPA).
        if (attention_mask is None and mask_function is causal_mask_function and q_length <= kv_length
                and q_offset + q_length == kv_offset + kv_length):
            return None
        return sdpa_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
                         kv_offset=kv_offset, mask_function=mask_function, attention_mask=attention_mask, **kwargs)

    AttentionMaskInterface.register(name, mask)
    model.set_attn_implementation(name)
    for m in model.modules():
        if isinstance(m, ml.LlamaRMSNorm):
            m.forward = types.MethodType(rms_forward, m)
        elif isinstance(m, ml.LlamaMLP):
            m.forward = types.MethodType(mlp_forward, m)
    if _ORIGINAL_ROPE is None:
        _ORIGINAL_ROPE = ml.apply_rotary_pos_emb
    ml.apply_rotary_pos_emb = rope
    return model


def unpatch_rope():
    """Restore transformers' apply_rotary_pos_emb (the one process-wide thing `patch` changes)."""
    global _ORIGINAL_ROPE
    if _ORIGINAL_ROPE is not None:
        from transformers.models.llama import modeling_llama as ml
        ml.apply_rotary_pos_emb = _ORIGINAL_ROPE
        _ORIGINAL_ROPE = None
