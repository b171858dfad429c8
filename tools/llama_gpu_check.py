#!/usr/bin/env python3
"""GPU check of issue 14 items 1 and 3 (for the lead; NOT wired into gpu-session.sh). < 120 s on one H200.

    PYTHONPATH=python python tools/llama_gpu_check.py OUT.json [--layers 2] [--backends torch,triton,...]

Builds a Llama-3.1-8B-shaped model (hidden 4096, 32/8 heads, MLP 14336, vocab 128256) with --layers layers
and random weights (seed 0), and for every runnable backend:
  - our model (bf16) vs transformers' LlamaForCausalLM (float32 eager reference, same weights): prefill
    logits (B=1, S=128) and 8 teacher-forced decode steps: max |diff|, max |ref|, top-1 agreement;
  - tilerosetta.patch(HF bf16 model, backend) vs the unpatched HF bf16 model: prefill max |diff|;
  - greedy decode tok/s at B=1 (32 steps after a warm-up, eager, no CUDA graph);
  - the torch fallbacks the model recorded.
Writes one JSON object to OUT.json. A backend that fails is recorded with its error; the run goes on.
Stops starting new backends after 100 s so the whole run stays under 120 s.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import traceback

import torch

T0 = time.time()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--backends", default="torch,triton,cutile_py,tile_cpp,cutile_rs,cutile_jl")
    ap.add_argument("--smoke-cpu", action="store_true",
                    help="tiny config on CPU, to check this script runs (no GPU numbers)")
    a = ap.parse_args()
    import transformers

    import tilerosetta
    from tilerosetta import backends
    from tilerosetta.hf_patch import unpatch_rope
    from tilerosetta.models.llama import LlamaConfig, LlamaModel, random_state

    dev = "cpu" if a.smoke_cpu else "cuda"
    cfg = (LlamaConfig(hidden=128, heads=4, kv_heads=2, head_dim=64, mlp=256, vocab=101, layers=a.layers,
                       rope_original_max=32) if a.smoke_cpu else LlamaConfig(layers=a.layers))
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    state32 = random_state(cfg, seed=0, dtype=torch.float32, device=dev)
    state16 = {k: v.bfloat16() for k, v in state32.items()}
    hc = transformers.LlamaConfig(
        hidden_size=cfg.hidden, num_attention_heads=cfg.heads, num_key_value_heads=cfg.kv_heads,
        head_dim=cfg.head_dim, intermediate_size=cfg.mlp, vocab_size=cfg.vocab, num_hidden_layers=cfg.layers,
        rms_norm_eps=cfg.eps, rope_theta=cfg.rope_theta, max_position_embeddings=131072,
        rope_scaling={"rope_type": "llama3", "factor": cfg.rope_factor, "low_freq_factor": cfg.rope_low_freq_factor,
                      "high_freq_factor": cfg.rope_high_freq_factor,
                      "original_max_position_embeddings": cfg.rope_original_max},
        tie_word_embeddings=False, attn_implementation="eager")
    with torch.device(dev):
        hf32 = transformers.LlamaForCausalLM(hc).eval()
    hf32.load_state_dict({k: v.float() for k, v in state16.items()}, strict=False)  # bf16-rounded weights
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, cfg.vocab, (1, 128), generator=g).to(dev)
    forced = torch.randint(0, cfg.vocab, (1, 8), generator=g).to(dev)
    with torch.no_grad():
        ref = hf32(prompt, use_cache=True)
        ref_logits, past = [ref.logits[:, -1].float()], ref.past_key_values
        ref_prefill = ref.logits.float()
        for t in range(forced.shape[1]):
            r = hf32(forced[:, t:t + 1], past_key_values=past, use_cache=True)
            past = r.past_key_values
            ref_logits.append(r.logits[:, -1].float())
    del hf32, past
    torch.cuda.empty_cache() if dev == 'cuda' else None
    result = {"config": vars(cfg), "prompt": list(prompt.shape), "decode_steps_checked": forced.shape[1],
              "reference": "transformers LlamaForCausalLM float32 eager, same (bf16-rounded) weights",
              "transformers": transformers.__version__, "torch": torch.__version__,
              "gpu": torch.cuda.get_device_name() if dev == "cuda" else "none (--smoke-cpu)", "backends": {}}
    for name in a.backends.split(","):
        entry = result["backends"][name] = {}
        ok, why = backends.get(name).available()
        if not ok:
            entry["skipped"] = why
            print(name, "skipped:", why, flush=True)
            continue
        if time.time() - T0 > 100:
            entry["skipped"] = "time budget (100 s) spent before this backend"
            continue
        t = time.time()
        try:
            m = LlamaModel(cfg, state16, name)
            cache = m.new_cache(1, 256)
            got = [m(prompt, cache).float()]
            entry["prefill_max_abs_diff"] = (got[0] - ref_prefill).abs().max().item()
            entry["prefill_top1_agree"] = (got[0].argmax(-1) == ref_prefill.argmax(-1)).float().mean().item()
            diffs, agree = [], []
            for i in range(forced.shape[1]):
                lo = m(forced[:, i:i + 1], cache)[:, -1].float()
                diffs.append((lo - ref_logits[i + 1]).abs().max().item())
                agree.append(bool(lo.argmax(-1).eq(ref_logits[i + 1].argmax(-1)).all()))
            entry["decode_max_abs_diff"] = max(diffs)
            entry["decode_top1_agree"] = sum(agree) / len(agree)
            entry["ref_max_abs_logit"] = ref_prefill.abs().max().item()
            m.greedy(prompt[:, :16], 4)  # warm-up (compiles decode shapes)
            sync()
            t1 = time.perf_counter()
            m.greedy(prompt[:, :16], 32)
            sync()
            entry["decode_tok_s_b1_eager"] = 32 / (time.perf_counter() - t1)  # includes one 16-token prefill
            entry["fallbacks"] = m.fallbacks
            del m, cache
            with torch.device(dev):
                hf = transformers.LlamaForCausalLM(hc.__class__(**{**hc.to_dict(), "attn_implementation": "sdpa"})).eval()
            hf.load_state_dict({k: v for k, v in state16.items()}, strict=False)
            hf = hf.bfloat16()
            with torch.no_grad():
                plain = hf(prompt, use_cache=False).logits.float()
                tilerosetta.patch(hf, backend=name)
                patched = hf(prompt, use_cache=False).logits.float()
            entry["hf_patch_prefill_max_abs_diff"] = (patched - plain).abs().max().item()
            entry["hf_patch_fallbacks"] = sorted(hf.tilerosetta_fallbacks)
            unpatch_rope()
            del hf
        except Exception as exc:  # record and go on: one backend must not hide the others
            entry["error"] = f"{type(exc).__name__}: {exc}"
            entry["traceback"] = traceback.format_exc()[-2000:]
        entry["seconds"] = round(time.time() - t, 1)
        torch.cuda.empty_cache() if dev == 'cuda' else None
        print(name, json.dumps({k: v for k, v in entry.items() if k != "traceback"}), flush=True)
    result["seconds"] = round(time.time() - T0, 1)
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {a.out} in {result['seconds']} s")


if __name__ == "__main__":
    sys.exit(main())
