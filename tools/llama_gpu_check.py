#!/usr/bin/env python3
"""GPU check of issue 14 items 1, 3 and 4 (gpu-session.sh E2E=1 or LLAMA=1 runs it). ~60-120 s on one H200.

    PYTHONPATH=python python tools/llama_gpu_check.py OUT.json [--layers 2] [--backends torch,triton,...,best]
    PYTHONPATH=python python tools/llama_gpu_check.py OUT.json --smoke-cpu   # tiny config on CPU: the script runs
    PYTHONPATH=python python tools/llama_gpu_check.py OUT.json --smoke       # tiny config on the torch backend's
                                                                             # device (cuda on a GPU machine)

A Llama-3.1-8B-shaped model (hidden 4096, 32/8 heads, MLP 14336, vocab 128256) with --layers layers and
random weights (seed 0, rounded to bf16 once, so every model below has exactly the same weights):
  - reference: transformers' LlamaForCausalLM, float32, eager attention: prefill logits (B=1, S=--prompt) and
    --steps (32) teacher-forced decode steps;
  - baseline of the tolerance: transformers' own bf16 model (SDPA) on the same inputs;
  - per backend (and `best`): our model in bf16, the same logits; agreement by models/hf_check.py's rule
    max|ours - ref| <= 3 * max|hf_bf16 - ref| + 2^-8 * max(1, max|ref|)  -> "ok";
    where each kind of call ran and the torch fallbacks;
  - per backend: tilerosetta.patch(transformers bf16 model) prefill + the decode steps, same rule.
Writes one JSON object to OUT.json; "all_ok" is true when every runnable backend passed both. A backend that
fails is recorded with its error; the run goes on. Exit status 1 when a runnable backend disagreed.
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
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--backends", default="", help="comma-separated (default: torch, every backend of ours, best)")
    ap.add_argument("--max-seconds", type=float, default=150.0, help="start no new backend after this")
    ap.add_argument("--smoke-cpu", action="store_true", help="tiny config on CPU, to check this script runs")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny config on the torch backend's device (cuda on a GPU machine, else cpu)")
    a = ap.parse_args()
    from tilerosetta import backends
    backends.get("triton")  # before transformers imports triton (sets TRITON_INTERPRET=1 without a GPU)
    import transformers

    import tilerosetta
    from tilerosetta.hf_patch import unpatch_rope
    from tilerosetta.models import hf_check
    from tilerosetta.models.llama import LlamaConfig, LlamaModel, best_backends, random_state

    if not a.backends:
        from tilerosetta.commands.e2e import our_backends
        a.backends = ",".join([*our_backends(), "best"])
    tiny = a.smoke_cpu or a.smoke
    dev = "cpu" if a.smoke_cpu else backends.get("torch").device_type if a.smoke else "cuda"
    cfg = (LlamaConfig(hidden=128, heads=4, kv_heads=2, head_dim=64, mlp=256, vocab=101, layers=a.layers,
                       rope_original_max=32) if tiny else LlamaConfig(layers=a.layers))
    state16 = {k: v.bfloat16() for k, v in random_state(cfg, seed=0, dtype=torch.float32, device=dev).items()}
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, cfg.vocab, (1, a.prompt), generator=g).to(dev)
    forced = torch.randint(0, cfg.vocab, (1, a.steps), generator=g).to(dev)
    ref_model = hf_check.hf_model(cfg, {k: v.float() for k, v in state16.items()}, torch.float32, "eager", dev)
    ref = hf_check.hf_logits(ref_model, prompt, forced)
    del ref_model
    hf16 = hf_check.hf_model(cfg, state16, torch.bfloat16, "sdpa", dev)
    same = hf_check.hf_logits(hf16, prompt, forced)
    del hf16
    if dev == "cuda":
        torch.cuda.empty_cache()
    result = {"config": vars(cfg), "prompt": list(prompt.shape), "decode_steps": a.steps,
              "reference": "transformers LlamaForCausalLM float32 eager, same (bf16-rounded) weights",
              "tolerance_baseline": "transformers bf16 (sdpa), same weights", "rule": hf_check.verdict(same, ref, same)["rule"],
              "hf_bf16_vs_ref": {k: v for k, v in hf_check.verdict(same, ref).items() if k.endswith("err")},
              "transformers": transformers.__version__, "torch": torch.__version__,
              "gpu": torch.cuda.get_device_name() if dev == "cuda" else "none (CPU smoke run)", "backends": {}}
    all_ok = True
    for name in a.backends.split(","):
        entry = result["backends"][name] = {}
        real = name if name != "best" else "torch"
        ok, why = backends.get(real).available()
        if ok and backends.get(real).device_type != dev:
            ok, why = False, f"runs on {backends.get(real).device_type} tensors, this check is on {dev}"
        if not ok:
            entry["skipped"] = why
            print(name, "skipped:", why, flush=True)
            continue
        if time.time() - T0 > a.max_seconds:
            entry["skipped"] = f"time budget ({a.max_seconds:.0f} s) spent before this backend"
            continue
        t = time.time()
        try:
            choice = best_backends(device_type=dev) if name == "best" else None
            m = LlamaModel(cfg, state16, name, choice=choice)
            entry["model"] = hf_check.verdict(hf_check.ours_logits(m, prompt, forced), ref, same)
            entry["where"], entry["fallbacks"] = m.where, m.fallbacks
            if choice:
                entry["choice"] = choice
            del m
            if name != "best":
                hf = hf_check.hf_model(cfg, state16, torch.bfloat16, "sdpa", dev)
                tilerosetta.patch(hf, backend=name)
                entry["hf_patch"] = hf_check.verdict(hf_check.hf_logits(hf, prompt, forced), ref, same)
                entry["hf_patch_fallbacks"] = sorted(hf.tilerosetta_fallbacks)
                unpatch_rope()
                del hf
            entry["ok"] = entry["model"]["ok"] and entry.get("hf_patch", {"ok": True})["ok"]
        except Exception as exc:  # record and go on: one backend must not hide the others
            entry["ok"] = False
            entry["error"] = f"{type(exc).__name__}: {exc}"
            entry["traceback"] = traceback.format_exc()[-2000:]
        all_ok &= entry["ok"]
        entry["seconds"] = round(time.time() - t, 1)
        if dev == "cuda":
            torch.cuda.empty_cache()
        short = {k: (v if not isinstance(v, dict) else {kk: v[kk] for kk in ("ok", "prefill_max_abs_err",
                 "decode_max_abs_err", "tol_prefill", "tol_decode", "decode_top1_agree") if kk in v})
                 for k, v in entry.items() if k not in ("traceback", "where")}
        print(name, json.dumps(short), flush=True)
    result["all_ok"] = all_ok
    result["seconds"] = round(time.time() - T0, 1)
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {a.out} in {result['seconds']} s; all_ok={all_ok}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
