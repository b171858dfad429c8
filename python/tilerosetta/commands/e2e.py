"""`tilerosetta e2e`: the Llama-3.1-8B-shaped model end to end, per backend, `best`, transformers and
torch.compile of it (issue 14 items 5-7; what is measured: tilerosetta/bench/e2e.py).

Writes JSON lines: bench/results/e2e-<stamp>-<gpu>.jsonl on a GPU (beside the benchmark's, same meta
line), build/cpu-results/ for --dry-run. Render with `tilerosetta report E2E.jsonl` or add it to a
benchmark report with `tilerosetta report RESULTS --e2e E2E.jsonl`.

Time on one H200 with the defaults: about 6 minutes. --budget-s (300 s) bounds the contestants: each gets a
share of what is left when it starts (hf_compile counts twice: inductor compiles each new shape), so ~30 s
each for torch, hf, our 5 backends that run there (cutile_py, triton, tile_cpp, cutile_rs, cute_dsl) and
best, ~60 s for hf_compile, more when earlier ones finish early. A scenario past its contestant's share is a
"skipped" row; one started before the deadline may overrun it by its own length. Add ~40 s of imports,
per-call host cost, weights and the copy-bandwidth measurement. Why these defaults: 8 layers is the model
the issue's transformers numbers were measured on (so they compare); a B=1 step of it reads 4.5 GB (~1.1 ms
at 4.2 TB/s), so 24 eager steps and 48 graph replays cost well under a second per batch size even when
host-bound at ~15 ms a step; the time goes to first-call compilation of each new shape (JIT languages,
torch.compile), which the warm-up absorbs (`warmup_s` per row) and the budget bounds.
"""
from __future__ import annotations

import time
from pathlib import Path

from tilerosetta.console import make_console



def our_backends() -> list[str]:
    """torch (the baseline backend) and every backend of ours in registry order; never a peer (someone
    else's kernels: they have no model here)."""
    from tilerosetta import backends
    return [n for n in backends.BACKEND_NAMES if not hasattr(backends.get(n), "peer_label")]


def _csv(text):
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def weight_bytes(cfg, element_size: int) -> int:
    """Bytes of every layer's weights, the final norm and the LM head (LlamaModel.weight_bytes, from the
    config: known before any model is built)."""
    hd, kvd = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
    layer = 2 * cfg.hidden + cfg.hidden * hd + 2 * cfg.hidden * kvd + hd * cfg.hidden + 3 * cfg.hidden * cfg.mlp
    return (cfg.layers * layer + cfg.hidden + cfg.vocab * cfg.hidden) * element_size


def run(args) -> int:
    import torch

    from tilerosetta import backends, toolchain
    from tilerosetta.bench import e2e, environment, results

    # First: without a GPU the Triton adapter must set TRITON_INTERPRET=1 before anything imports triton
    # (torch._dynamo does, and transformers; so may another adapter's imports).
    backends.get("triton")
    console = make_console()
    cpu = not torch.cuda.is_available()
    if cpu and not (args.dry_run or args.host_cost_only):
        console.print("[red]tilerosetta e2e:[/] no CUDA GPU visible to torch. `--dry-run` runs the same "
                      "bookkeeping on CPU with a tiny config (torch and the Triton interpreter), labelled not "
                      "comparable, into build/cpu-results/.", highlight=False)
        return 2
    toolchain.activate()
    plan = e2e.dry_run_plan(args.layers or 2) if (args.dry_run or cpu) else e2e.Plan(layers=args.layers or 8)
    if args.dry_run and not cpu:
        plan.device = "cuda"
    for flag in ("decode_steps", "graph_replays", "prefill_reps", "budget_s"):
        if getattr(args, flag) is not None:
            setattr(plan, flag, getattr(args, flag))
    if args.ctx:
        plan.ctx = args.ctx
    if args.compile_backend:
        plan.compile_backend = args.compile_backend
    # Baselines first: a fatal CUDA error in one of our backends (the context is lost; later rows are
    # "skipped") then cannot cost the transformers rows. best last: it reuses the kernels compiled before it.
    ours = our_backends()
    wanted = _csv(args.backend) or [ours[0], e2e.HF, e2e.HF_COMPILE, *ours[1:], e2e.BEST]
    known = set(backends.BACKEND_NAMES) | {e2e.BEST, e2e.HF, e2e.HF_COMPILE}
    bad = [w for w in wanted if w not in known]
    if bad:
        console.print(f"[red]unknown contestant(s) {bad}[/]: expected backends of {list(backends.BACKEND_NAMES)} "
                      f"or {e2e.BEST}, {e2e.HF}, {e2e.HF_COMPILE}")
        return 2
    out_dir = Path(args.out_dir or results.default_out_dir(cpu))
    env = environment.collect([backends.get(n) for n in wanted if n in backends.BACKEND_NAMES])
    path = results.new_results_path(out_dir, "cpu" if cpu else env["gpu"]["name"], prefix="e2e-")
    cfg = plan.cfg()
    console.print(f"e2e -> {path}\nmodel: Llama-3.1-8B shapes with {cfg.layers} layers (hidden {cfg.hidden}, "
                  f"{cfg.heads}/{cfg.kv_heads} heads, MLP {cfg.mlp}, vocab {cfg.vocab}), {plan.dtype}, "
                  f"{plan.device}; budget {plan.budget_s:.0f} s", highlight=False)
    with results.ResultsWriter(path) as writer:
        write = lambda rec: writer.write(results.clean_floats(rec))  # noqa: E731
        write({"type": "meta", "schema": results.SCHEMA, "date": results.now_iso(), "fixture": False,
               "cpu_only": cpu, "e2e": {**plan.to_json(), "contestants": wanted, "config": vars(cfg)}, **env,
               "timing": "CPU host wall clock of a tiny config: NOT comparable with GPU timings" if cpu else
               "host wall clock around synchronized batches of calls (prefill reps, decode steps, graph "
               "replays); host time per step = CPU time to issue one step"})
        copy_gbps = None
        if not cpu:
            from tilerosetta.bench.ceilings import measure_copy
            with console.status("measuring copy bandwidth (the weight-streaming limit's denominator)"):
                gen = torch.Generator(device="cuda").manual_seed(1234)
                copy_gbps, _ = measure_copy(gen, 10.0, 40.0)
                torch.cuda.empty_cache()
        limit = e2e.weight_limit(weight_bytes(cfg, torch.tensor([], dtype=e2e._dtype(plan.dtype)).element_size()),
                                 copy_gbps)
        write(limit)
        console.print(f"weight-streaming limit (B=1 decode step): " + (
            f"{limit['weight_bytes'] / 1e9:.2f} GB / {copy_gbps:.0f} GB/s = {limit['limit_ms']:.3f} ms "
            f"({limit['limit_tokens_per_s_b1']:.0f} tok/s)" if copy_gbps else limit["reason"]), highlight=False)
        if not args.no_host_cost:
            for rec in e2e.host_cost([w for w in wanted if w in backends.BACKEND_NAMES], plan.device):
                write(rec)
                if rec.get("status") == "ok":
                    ratio = ""
                    if rec.get("ratio_to_torch"):
                        spread = f", rounds {rec['ratio_p20']:.2f}-{rec['ratio_p80']:.2f}x" if "ratio_p20" in rec else ""
                        ratio = f" ({rec['ratio_to_torch']:.2f}x torch{spread})"
                    console.print(f"host cost {rec['backend']}: {rec['bound_us']:.1f} µs/validated call{ratio}",
                                  highlight=False)
        if args.host_cost_only:
            console.print(f"results: {path}")
            return 0
        run_ = e2e.Run(plan, write, progress=lambda line: console.print(line, highlight=False, markup=False))
        run_.limit_ms = limit.get("limit_ms")
        names = [w for w in wanted if w not in backends.BACKEND_NAMES or _runs_here(backends.get(w), plan, write, console)]
        t0 = time.perf_counter()
        with console.status("random weights (seeded) on the device"):
            from tilerosetta.models.llama import random_state
            state = random_state(cfg, seed=0, dtype=e2e._dtype(plan.dtype), device=plan.device)
        weight = {e2e.HF_COMPILE: 2.0}  # compiles each new shape with inductor: the longest warm-ups
        for i, name in enumerate(names):
            left = plan.budget_s - (time.perf_counter() - t0)
            share = weight.get(name, 1.0) / sum(weight.get(n, 1.0) for n in names[i:])
            run_.contestant(name, state, time.perf_counter() + max(0.0, left) * share)
    console.print(f"results: {path}\nreport:  tilerosetta report {path}")
    return 0


def _runs_here(b, plan, write, console) -> bool:
    """Our backend can run here; else one 'unavailable' row with the reason (never silently absent)."""
    ok, why = b.is_available()
    if ok and b.device_type != plan.device:
        ok, why = False, f"runs on {b.device_type} tensors, this run is on {plan.device}"
    if not ok:
        write({"type": "e2e", "contestant": b.name, "status": "unavailable", "message": why, "phase": "all",
               "mode": "-", "layers": plan.layers, "dtype": plan.dtype})
        console.print(f"[yellow]skip[/] {b.name}: {why}", highlight=False)
    return ok


def register(sub):
    p = sub.add_parser("e2e", help="Llama-3.1-8B-shaped model end to end per backend, best, transformers and "
                                   "torch.compile: prefill/decode tok/s, CUDA graphs, host time, memory")
    p.add_argument("--backend", default="",
                   help="comma-separated contestants: our backends, 'best' (per op the fastest of ours in the latest "
                        "committed benchmark), 'hf' (transformers, SDPA), 'hf_compile' (torch.compile of it); "
                        "default: all")
    p.add_argument("--layers", type=int, default=0,
                   help="decoder layers (default 8, as the issue's transformers numbers; every backend + best + hf + "
                        "hf_compile fit in ~6 min on one H200 with --budget-s 300; 2 with --dry-run)")
    p.add_argument("--ctx", type=int, default=0, help="decode context length (default 4096; 32 with --dry-run)")
    p.add_argument("--decode-steps", type=int, default=None, help="timed eager decode steps per batch (default 24)")
    p.add_argument("--graph-replays", type=int, default=None, help="timed CUDA-graph replays per batch (default 48)")
    p.add_argument("--prefill-reps", type=int, default=None, help="timed prefill repetitions (default 2)")
    p.add_argument("--budget-s", type=float, default=None,
                   help="wall seconds for all contestants, shared equally (default 300); scenarios past a "
                        "contestant's share are recorded as skipped")
    p.add_argument("--compile-backend", default="",
                   help="torch.compile backend of hf_compile (default inductor; 'eager' with --dry-run)")
    p.add_argument("--no-host-cost", action="store_true", help="skip the per-call host cost rows")
    p.add_argument("--host-cost-only", action="store_true",
                   help="only the per-call host cost rows (validated call vs torch; runs on CPU in CI)")
    p.add_argument("--dry-run", action="store_true",
                   help="tiny config (2 layers, hidden 128, S <= 32) on CPU: the bookkeeping, labelled not comparable")
    p.add_argument("--out-dir", "--out", dest="out_dir", default="",
                   help="folder for the results (default bench/results/ on a GPU, build/cpu-results/ on CPU)")
    p.set_defaults(func=run)
