"""End to end (issue 14 items 5, 6, 7): a Llama-3.1-8B-shaped model with fewer layers, per backend, for
`backend="best"`, for transformers (SDPA) and for torch.compile of it, timed the same way.

Per contestant, rows (type "e2e") of:
  prefill  B x S tokens, last-position logits (what generation needs), eager        -> tokens/s
  decode   one token per sequence at context `ctx` (the step is re-run at the same position, so every
           timed step attends over ctx keys), eager and with the step captured in a CUDA graph
           -> tokens/s (B / step time), host ms per step (CPU time to issue one step: when it is close to
           the step time the step is host-bound), peak GPU memory, and for B=1 the % of the
           weight-streaming limit: weight bytes / measured copy bandwidth (bench.ceilings.measure_copy),
           the fastest a step that reads every weight once can be
Each row says where every kind of call ran (`where`) and the torch fallbacks (`fallbacks`). A failing
contestant or scenario is a row with status "error" and the message; the run goes on. A fatal CUDA error
(the context is unusable) marks every later row "skipped" with that reason.

Also rows of type "host_cost" (item 7): host µs per call of vector_add N=1024 through each backend's
validated BoundOp (the call path the model uses) and the raw function (bench.runner.launch_overhead), as a
ratio to torch's validated call and to torch's own `torch.add(out=)`; and the validation layer alone
(a BoundOp around a kernel that does nothing), the part of the path TileRosetta adds.
"""
from __future__ import annotations

import gc
import statistics
import time
from dataclasses import asdict, dataclass, field

import torch

from tilerosetta.models.llama import LlamaConfig

HF, HF_COMPILE, BEST = "hf", "hf_compile", "best"
HOST_COST_TARGET = 2.0  # issue 14 item 7: validated call within 2x of torch's


@dataclass
class Plan:
    layers: int = 8
    prefill: list = field(default_factory=lambda: [(1, 2048), (4, 4096)])  # (B, S)
    decode: list = field(default_factory=lambda: [1, 16, 64])  # B at context ctx
    ctx: int = 4096
    decode_steps: int = 24  # timed eager steps per batch size
    graph_replays: int = 48  # timed replays of the captured step
    prefill_reps: int = 2
    dtype: str = "bf16"
    device: str = "cuda"
    compile_backend: str = "inductor"
    budget_s: float = 300.0  # wall seconds for the contestants (shared; later scenarios past a share skip)
    model: dict = field(default_factory=dict)  # LlamaConfig fields that differ from Llama-3.1-8B

    def cfg(self) -> LlamaConfig:
        return LlamaConfig(**{**self.model, "layers": self.layers})

    def to_json(self) -> dict:
        return {**asdict(self), "prefill": [list(p) for p in self.prefill]}


def dry_run_plan(layers: int = 2) -> Plan:
    """Tiny shapes on CPU (CI, --dry-run): the bookkeeping, not a measurement."""
    return Plan(layers=layers, prefill=[(1, 16), (2, 32)], decode=[1, 2], ctx=32, decode_steps=3, graph_replays=3,
                prefill_reps=1, device="cpu", compile_backend="eager", budget_s=600.0,
                model={"hidden": 128, "heads": 4, "kv_heads": 2, "head_dim": 64, "mlp": 256, "vocab": 101,
                       "rope_original_max": 32})


def _dtype(name):
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def _peak_reset(device):
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()


def _peak_gib(device):
    return torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None


def is_fatal(exc: BaseException) -> bool:
    from tilerosetta.bench.runner import _is_fatal
    return _is_fatal(exc)


# ---- one contestant's callables ------------------------------------------------------------------------
class Ours:
    """tilerosetta's model on one backend (or 'best')."""

    def __init__(self, name, cfg, state, plan):
        from tilerosetta.models.llama import LlamaModel
        choice = None
        if name == BEST:
            from tilerosetta.models.llama import best_backends
            choice = best_backends(device_type=plan.device)
        self.model = LlamaModel(cfg, state, name, choice=choice)
        self.model.prepare(plan.ctx + 1)
        self.cache = None

    def prefill(self, ids):
        return self.model.forward(ids, None, last_only=True)

    def decode_setup(self, batch, ctx):
        self.cache = None
        gc.collect()
        self.cache = self.model.new_cache(batch, ctx)  # max_len == ctx: the slice read is the whole cache

    def decode_step(self, tok, ctx):
        self.cache["len"] = ctx - 1
        return self.model.forward(tok, self.cache, last_only=True)

    def reset(self):
        """Each row says what ran in its own scenario."""
        self.model.ops.where.clear()
        self.model.ops.fallbacks.clear()

    def info(self):
        return {"where": self.model.where, "fallbacks": self.model.fallbacks,
                **({"choice": self.model.ops.choice} if self.model.ops.name == BEST else {})}


class HFContestant:
    """transformers' LlamaForCausalLM (SDPA), eager or torch.compile'd. Decode eager uses a DynamicCache
    cropped back to ctx-1 after each step (how a transformers user decodes); compiled decode uses a
    StaticCache (what transformers recommends for torch.compile), and its CUDA-graph row is
    torch.compile(mode="reduce-overhead")."""

    def __init__(self, name, cfg, state, plan):
        from tilerosetta.models import hf_check
        self.name, self.plan = name, plan
        self.model = hf_check.hf_model(cfg, state, _dtype(plan.dtype), attn="sdpa", device=plan.device)
        self.hc = self.model.config
        self.fwd = self.model
        if name == HF_COMPILE:
            # 2 prefill + 3 decode shapes, then 3 more with mode="reduce-overhead": past dynamo's default
            # recompile limit (8) it would fall back to eager silently and a row would time eager as compiled
            for knob in ("recompile_limit", "cache_size_limit"):
                if hasattr(torch._dynamo.config, knob):
                    setattr(torch._dynamo.config, knob, max(64, getattr(torch._dynamo.config, knob)))
            self.fwd = torch.compile(self.model, backend=plan.compile_backend)
        self.graph_fwd = None
        self.cache = None

    def prefill(self, ids):
        with torch.no_grad():
            return self.fwd(ids, use_cache=False, logits_to_keep=1).logits

    def decode_setup(self, batch, ctx):
        from transformers import DynamicCache, StaticCache
        self.cache = None
        gc.collect()
        c, dev, dt = self.plan.cfg(), self.plan.device, _dtype(self.plan.dtype)
        if self.name == HF:
            self.cache = DynamicCache(config=self.hc)
            for i in range(c.layers):
                z = torch.zeros(batch, c.kv_heads, ctx - 1, c.head_dim, dtype=dt, device=dev)
                self.cache.update(z, z.clone(), i)
        else:
            self.cache = StaticCache(config=self.hc, max_cache_len=ctx)
        self.pos = torch.full((1,), ctx - 1, dtype=torch.long, device=dev)

    def decode_step(self, tok, ctx, fwd=None):
        with torch.no_grad():
            if self.name == HF:
                out = self.model(tok, past_key_values=self.cache, use_cache=True, logits_to_keep=1).logits
                self.cache.crop(-1)  # drop the token just added: the context stays ctx - 1
                return out
            return (fwd or self.fwd)(tok, past_key_values=self.cache, use_cache=True, cache_position=self.pos,
                                     position_ids=self.pos.expand(tok.shape[0], 1), logits_to_keep=1).logits

    def reset(self):
        pass

    def info(self):
        return {"where": {"model": f"transformers {self.name} (attn sdpa)" +
                          (f", torch.compile backend={self.plan.compile_backend}" if self.name == HF_COMPILE else "")},
                "fallbacks": []}


# ---- timing ---------------------------------------------------------------------------------------------
def time_prefill(c, B, S, plan, gen):
    ids = torch.randint(0, plan.cfg().vocab, (B, S), generator=gen).to(plan.device)
    w0 = time.perf_counter()
    c.prefill(ids)  # warm-up: compiles this shape
    _sync(plan.device)
    warmup_s = time.perf_counter() - w0
    _peak_reset(plan.device)
    t0 = time.perf_counter()
    for _ in range(plan.prefill_reps):
        c.prefill(ids)
    _sync(plan.device)
    ms = (time.perf_counter() - t0) * 1e3 / plan.prefill_reps
    return {"ms": ms, "tokens_per_s": B * S / (ms * 1e-3), "reps": plan.prefill_reps,
            "peak_mem_gib": _peak_gib(plan.device), "warmup_s": warmup_s}


def time_decode_eager(c, B, plan, gen):
    tok = torch.randint(0, plan.cfg().vocab, (B, 1), generator=gen).to(plan.device)
    c.decode_setup(B, plan.ctx)
    w0 = time.perf_counter()
    for _ in range(2):
        c.decode_step(tok, plan.ctx)
    _sync(plan.device)
    warmup_s = time.perf_counter() - w0
    _peak_reset(plan.device)
    host = 0.0
    t0 = time.perf_counter()
    for _ in range(plan.decode_steps):
        h0 = time.perf_counter()
        c.decode_step(tok, plan.ctx)
        host += time.perf_counter() - h0
    _sync(plan.device)
    ms = (time.perf_counter() - t0) * 1e3 / plan.decode_steps
    return {"ms": ms, "tokens_per_s": B / (ms * 1e-3), "host_ms_per_step": host * 1e3 / plan.decode_steps,
            "steps": plan.decode_steps, "peak_mem_gib": _peak_gib(plan.device), "warmup_s": warmup_s}


def time_decode_graph(c, B, plan, gen):
    """The decode step captured once in a CUDA graph and replayed (ours: torch.cuda.graph around the step;
    hf_compile: torch.compile(mode='reduce-overhead'), its own CUDA graphs)."""
    tok = torch.randint(0, plan.cfg().vocab, (B, 1), generator=gen).to(plan.device)
    c.decode_setup(B, plan.ctx)
    w0 = time.perf_counter()
    if isinstance(c, HFContestant):
        if c.graph_fwd is None:
            c.graph_fwd = torch.compile(c.model, mode="reduce-overhead")
        for _ in range(3):
            c.decode_step(tok, plan.ctx, fwd=c.graph_fwd)
        replay = lambda: c.decode_step(tok, plan.ctx, fwd=c.graph_fwd)  # noqa: E731
    else:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                c.decode_step(tok, plan.ctx)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            c.decode_step(tok, plan.ctx)
        replay = graph.replay
        replay()
    _sync(plan.device)
    warmup_s = time.perf_counter() - w0  # warm-up calls and the capture (hf_compile: its compile)
    _peak_reset(plan.device)
    host = 0.0
    t0 = time.perf_counter()
    for _ in range(plan.graph_replays):
        h0 = time.perf_counter()
        replay()
        host += time.perf_counter() - h0
    _sync(plan.device)
    ms = (time.perf_counter() - t0) * 1e3 / plan.graph_replays
    return {"ms": ms, "tokens_per_s": B / (ms * 1e-3), "host_ms_per_step": host * 1e3 / plan.graph_replays,
            "steps": plan.graph_replays, "peak_mem_gib": _peak_gib(plan.device), "warmup_s": warmup_s}


# ---- the run --------------------------------------------------------------------------------------------
def _label(sc: dict) -> str:
    return f"{sc['phase']} {sc['mode']} B={sc['B']} " + (f"S={sc['S']}" if "S" in sc else f"ctx={sc.get('ctx')}")


def scenarios(plan: Plan) -> list[dict]:
    out = [{"phase": "prefill", "mode": "eager", "B": b, "S": s} for b, s in plan.prefill]
    for mode in ("eager", "graph"):
        out += [{"phase": "decode", "mode": mode, "B": b, "ctx": plan.ctx} for b in plan.decode]
    return out


def weight_limit(weight_bytes: int, copy_gbps: float | None) -> dict:
    """The weight-streaming limit of a B=1 decode step: every weight read once at the copy bandwidth."""
    rec = {"type": "limit", "weight_bytes": weight_bytes, "copy_gbps": copy_gbps}
    if copy_gbps:
        ms = weight_bytes / (copy_gbps * 1e9) * 1e3
        rec.update(limit_ms=ms, limit_tokens_per_s_b1=1e3 / ms)
    else:
        rec["reason"] = "no copy bandwidth measured (CPU run): no weight-streaming limit"
    return rec


class Run:
    def __init__(self, plan: Plan, write, progress=print):
        self.plan, self.write, self.say = plan, write, progress
        self.t0 = time.perf_counter()
        self.fatal: str | None = None
        self.limit_ms: float | None = None

    def elapsed(self):
        return time.perf_counter() - self.t0

    def contestant(self, name: str, state, deadline: float):
        plan, cfg = self.plan, self.plan.cfg()
        base = {"type": "e2e", "contestant": name, "layers": plan.layers, "dtype": plan.dtype}
        rows = []

        def emit(sc, **kw):
            rec = {**base, **sc, **kw}
            self.write(rec)
            rows.append(rec)
            detail = (f"{rec['tokens_per_s']:.0f} tok/s" if rec.get("tokens_per_s") else rec.get("message", "")[:160])
            self.say(f"[e2e {self.elapsed():5.0f} s] {name} {_label(sc)}: {rec['status']} {detail}")

        todo = scenarios(plan)
        if self.fatal:
            for sc in todo:
                emit(sc, status="skipped", message=self.fatal)
            return rows
        self.say(f"[e2e {self.elapsed():5.0f} s] {name}: building the model")
        try:
            c = (HFContestant if name in (HF, HF_COMPILE) else Ours)(name, cfg, state, plan)
        except Exception as exc:
            msg = f"{type(exc).__name__}: {str(exc)[:1500]}"
            if is_fatal(exc):
                self.fatal = f"not run: the CUDA context is unusable after {name}'s fatal error ({msg[:200]})"
            for sc in todo:
                emit(sc, status="error", message=f"setup failed: {msg}")
            return rows
        gen = torch.Generator().manual_seed(7)
        for sc in todo:
            if self.fatal:
                emit(sc, status="skipped", message=self.fatal)
                continue
            if time.perf_counter() > deadline:
                emit(sc, status="skipped", message=f"time budget: {name}'s share of --budget-s "
                                                   f"{plan.budget_s:.0f} s was spent before this scenario")
                continue
            if sc["mode"] == "graph" and plan.device != "cuda":
                emit(sc, status="unsupported", message="CUDA graphs need a CUDA device (CPU run)")
                continue
            if sc["mode"] == "graph" and name == HF:
                emit(sc, status="unsupported", message="transformers eager has no CUDA-graph path of its own; "
                     "torch.compile(mode='reduce-overhead') of it is the hf_compile graph row")
                continue
            t = time.perf_counter()
            self.say(f"[e2e {self.elapsed():5.0f} s] {name} {_label(sc)} ...")
            try:
                c.reset()
                if sc["phase"] == "prefill":
                    m = time_prefill(c, sc["B"], sc["S"], plan, gen)
                elif sc["mode"] == "eager":
                    m = time_decode_eager(c, sc["B"], plan, gen)
                else:
                    m = time_decode_graph(c, sc["B"], plan, gen)
                if sc["phase"] == "decode" and sc["B"] == 1 and self.limit_ms:
                    m["pct_of_weight_limit"] = 100.0 * self.limit_ms / m["ms"]
                emit(sc, status="ok", seconds=round(time.perf_counter() - t, 2), **m, **c.info())
            except Exception as exc:
                msg = f"{type(exc).__name__}: {str(exc)[:1500]}"
                if is_fatal(exc):
                    self.fatal = f"not run: the CUDA context is unusable after {name}'s fatal error ({msg[:200]})"
                info = {}
                try:
                    info = c.info()
                except Exception:
                    pass
                emit(sc, status="error", message=msg, seconds=round(time.perf_counter() - t, 2), **info)
        c = None
        gc.collect()
        if plan.device == "cuda" and not self.fatal:
            torch.cuda.empty_cache()
        return rows


# ---- host cost per call (item 7) ------------------------------------------------------------------------
def host_cost(names, device: str, rounds: int = 21) -> list[dict]:
    """Host µs per validated call of each backend (vector_add N=1024), as a ratio to torch's. Every
    contestant's calls are timed in the same rounds (timing.interleaved_overhead_us), so a host whose speed
    drifts during the run (the H200's moved torch's figure from 9.9 to 15 µs between two calls of one
    session) cannot favour the backend timed in its fast minute. ratio_to_torch is the median of the per-round
    ratios (p20-p80 beside it: the noise); ratio_of_medians, of the two medians, is kept for comparison."""
    from tilerosetta import backends
    from tilerosetta.backends.base import BoundOp
    from tilerosetta.bench import timing
    from tilerosetta.bench.runner import launch_calls

    a, b = torch.randn(1024, device=device), torch.randn(1024, device=device)
    out = torch.empty_like(a)
    null = BoundOp(backends.get("torch"), "vector_add", lambda *args, **kw: None)  # validation + dispatch only
    fns = {"torch.add(out=)": lambda: torch.add(a, b, out=out), "validation only (null kernel)": lambda: null(a, b, out)}
    recs = {}
    for n in dict.fromkeys(["torch", *names]):
        be = backends.get(n)
        if not be.is_available()[0] or be.device_type != device:
            continue
        try:
            rec, bound, raw = launch_calls(be, device)
            if bound is not None:
                bound(), raw()  # a failing call is this backend's error row, not the whole measurement's
                fns[n], fns[n + " (raw)"] = bound, raw
        except Exception as exc:
            rec = {"backend": n, "op": "vector_add", "status": "error", "message": f"{type(exc).__name__}: {exc}"[:1000]}
        recs[n] = rec
    per_round = timing.interleaved_overhead_us(fns, device, rounds=rounds)
    med = {n: statistics.median(v) for n, v in per_round.items()}
    native = med["torch.add(out=)"]
    rows = [{"type": "host_cost", "backend": "validation only (null kernel)", "op": "vector_add", "case": "N1024",
             "status": "ok", "bound_us": med["validation only (null kernel)"], "torch_native_us": native,
             "note": "BoundOp around a kernel that does nothing: what TileRosetta's checked path adds to any "
                     "backend's call"}]
    torch_rounds = per_round.get("torch")
    for n, rec in recs.items():
        rec = {**rec, "type": "host_cost", "torch_native_us": native, "rounds": rounds}
        if n in per_round:
            rec.update(status="ok", bound_us=med[n], raw_us=med[n + " (raw)"],
                       bound_p20_us=_pct(per_round[n], 20), bound_p80_us=_pct(per_round[n], 80))
            if torch_rounds:  # the ratio within each round: what the host's drift cannot move
                ratios = [x / t for x, t in zip(per_round[n], torch_rounds)]
                rec.update(ratio_to_torch=statistics.median(ratios), ratio_p20=_pct(ratios, 20),
                           ratio_p80=_pct(ratios, 80))
        if device == "cpu" and n != "torch":
            rec["note"] = ("CPU run: this backend runs in an interpreter here, so its time is the interpreter's "
                           "kernel execution, not a launch cost")
        rows.append(rec)
    torch_us = med.get("torch")
    for r in rows:
        if r.get("status") == "ok" and torch_us:
            r["ratio_of_medians"] = r["bound_us"] / torch_us
            r.setdefault("ratio_to_torch", r["ratio_of_medians"])  # the null kernel's: no rounds of its own kept
            r["ratio_to_torch_native"] = r["bound_us"] / native
            r["within_target"] = r["ratio_to_torch"] <= HOST_COST_TARGET
            r["target"] = f"<= {HOST_COST_TARGET}x torch's validated call (issue 14 item 7)"
    return rows


def _pct(values: list[float], p: int) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]
