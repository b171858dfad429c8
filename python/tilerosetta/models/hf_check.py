"""Agreement with Hugging Face (issue 14 item 4): our Llama model, or a `tilerosetta.patch`ed transformers
model, against transformers' LlamaForCausalLM in float32 eager with the same weights: prefill logits and
teacher-forced decode steps (each step feeds the given token, so one early difference cannot send the two
models down different paths and every step is compared).

The tolerance, for a model running in `dtype`:
    max |ours - ref| <= FACTOR * max |hf_dtype - ref| + ulp * max(1, max |ref|)
where hf_dtype is transformers' own model in that dtype with the same weights, against the same float32
reference, and ulp is the dtype's relative rounding step (bf16: 2^-8; the logits themselves are stored in
bf16, so two correct bf16 models may differ by that much at the largest logit). In bf16 every product and
sum is rounded to 8 significant bits, so even a correct model differs from the float32 one by an amount
that depends on the weights, the shapes and the depth; transformers' own bf16 run measures that amount on
the very logits compared. A correct implementation rounds at other places (bf16 norms where transformers
norms in fp32, fp32 accumulation in other tile orders), so it may be worse by a small factor: FACTOR = 3
(on the tiny CPU config the Triton kernels reached 2.0x transformers' bf16 error on one sequence, the
torch backend 1.4x). A wrong op (a missing or mis-scaled weight, a wrong eps) moves the logits by far more
than the rounding (tests check that such an error fails). In float32 hf_dtype is the reference itself
(difference 0) and ulp = FLOOR = 2e-4 bounds op-order differences (~1e-6 seen).
"""
from __future__ import annotations

import torch

FACTOR = 3.0
FLOOR = 2e-4  # float32: op-order differences, relative to logits of order 1
HALF_ULP = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}


def hf_config(cfg, attn: str = "eager"):
    import transformers

    return transformers.LlamaConfig(
        hidden_size=cfg.hidden, num_attention_heads=cfg.heads, num_key_value_heads=cfg.kv_heads,
        head_dim=cfg.head_dim, intermediate_size=cfg.mlp, vocab_size=cfg.vocab, num_hidden_layers=cfg.layers,
        rms_norm_eps=cfg.eps, rope_theta=cfg.rope_theta, max_position_embeddings=max(131072, 4 * cfg.rope_original_max),
        rope_scaling={"rope_type": "llama3", "factor": cfg.rope_factor, "low_freq_factor": cfg.rope_low_freq_factor,
                      "high_freq_factor": cfg.rope_high_freq_factor,
                      "original_max_position_embeddings": cfg.rope_original_max},
        tie_word_embeddings=False, attn_implementation=attn)


def hf_model(cfg, state, dtype=torch.float32, attn: str = "eager", device=None):
    """transformers' LlamaForCausalLM with exactly these (HF-named) weights, in `dtype`, on `device`."""
    import transformers

    first = next(iter(state.values()))
    with torch.device(device or first.device):
        m = transformers.LlamaForCausalLM(hf_config(cfg, attn)).eval()
    missing, unexpected = m.load_state_dict(state, strict=False)
    if unexpected or not all("rotary" in k for k in missing):
        raise ValueError(f"weights do not match transformers' Llama: missing {missing}, unexpected {unexpected}")
    return m.to(dtype)


@torch.no_grad()
def hf_logits(model, prompt, forced) -> list[torch.Tensor]:
    """[prefill logits (B, S, V), then the last-position logits (B, V) of each teacher-forced step], fp32."""
    out = model(prompt, use_cache=True)
    logits, past = [out.logits.float()], out.past_key_values
    for t in range(forced.shape[1]):
        out = model(forced[:, t:t + 1], past_key_values=past, use_cache=True)
        past = out.past_key_values
        logits.append(out.logits[:, -1].float())
    return logits


@torch.no_grad()
def ours_logits(model, prompt, forced) -> list[torch.Tensor]:
    """The same sequence of logits from a tilerosetta LlamaModel (KV cache of prompt + forced length)."""
    cache = model.new_cache(prompt.shape[0], prompt.shape[1] + forced.shape[1])
    logits = [model(prompt, cache).float()]
    for t in range(forced.shape[1]):
        logits.append(model(forced[:, t:t + 1], cache)[:, -1].float())
    return logits


def max_err(got: list[torch.Tensor], ref: list[torch.Tensor]) -> tuple[float, float]:
    """(max |got - ref| over the prefill, over the decode steps); NaN anywhere is an infinite error."""
    def one(a, b):
        d = (a - b).abs().max().item()
        return float("inf") if d != d else d
    return one(got[0], ref[0]), max((one(a, b) for a, b in zip(got[1:], ref[1:])), default=0.0)


def verdict(got, ref, hf_same_dtype=None, dtype=torch.bfloat16) -> dict:
    """The comparison record: errors, the tolerance (see the module's docstring) and ok. hf_same_dtype None:
    a float32 model (no rounding baseline, FLOOR only); else transformers' logits in `dtype`."""
    scale = max(1.0, max(r.abs().max().item() for r in ref))
    ulp = FLOOR if hf_same_dtype is None else max(FLOOR, HALF_ULP.get(dtype, FLOOR))
    pre, dec = max_err(got, ref)
    base_pre, base_dec = max_err(hf_same_dtype, ref) if hf_same_dtype is not None else (0.0, 0.0)
    tol_pre, tol_dec = FACTOR * base_pre + ulp * scale, FACTOR * base_dec + ulp * scale
    top1 = sum(bool(a.argmax(-1).eq(b.argmax(-1)).all()) for a, b in zip(got[1:], ref[1:]))
    return {"prefill_max_abs_err": pre, "decode_max_abs_err": dec, "hf_same_dtype_prefill_err": base_pre,
            "hf_same_dtype_decode_err": base_dec, "tol_prefill": tol_pre, "tol_decode": tol_dec,
            "ref_max_abs_logit": scale, "decode_steps": len(ref) - 1,
            "decode_top1_agree": top1 / max(1, len(ref) - 1),
            "ok": pre <= tol_pre and dec <= tol_dec,
            "rule": f"max|ours-ref| <= {FACTOR} * max|hf_same_dtype-ref| + {ulp:.3g} * max(1, max|ref|)"}
