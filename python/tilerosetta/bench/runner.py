"""`tilerosetta bench`: every available backend x op x dtype x bench case, checked, then timed one way.

For each (op, dtype, case) the reference is computed once (float64, from pristine inputs); then each
backend gets fresh inputs from the same seed and NaN-poisoned outputs. Inputs are the spec's bench inputs
(make_bench_inputs: like real activations; the conformance stress inputs are never timed); an op whose
speed depends on the input distribution is timed on each of its spec's bench_distributions, the first
being the headline (records carry "distribution" and "headline"):

  0. the calling convention: a baseline or peer with a returning form (backend.returning()) is called
     and timed as its users call it, y = fn(*inputs, **params), allocating its own output; everyone
     else destination-passing into our NaN-poisoned outputs. Recorded as "convention".
  1. first call, host wall time to completion    -> first_call_ms (cold: JIT/compile + launch)
  2. compare with the reference                   -> status "wrong" (never timed) or go on
  3. second call, host wall time to completion   -> warm_call_ms
  4. GPU timing (timing.time_gpu)                 -> median/p20/p80/min in ms, method
  5. compare again (repeated calls must stay correct), then TFLOP/s, GB/s, % of ceiling

Every record is written (and fsynced) as it is produced; a "start" record precedes each case so that
`--resume FILE` can tell a case that killed the process ("crashed") from one never reached.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import torch

from tilerosetta.backends import Backend
from tilerosetta.backends.base import RETURNS
from tilerosetta.bench import timing
from tilerosetta.bench.ceilings import Ceilings
from tilerosetta.bench.results import ResultsWriter, clean_floats, key_of, metrics, now_iso, ratio_text
from tilerosetta.harness import compare, make_case_tensors, reference
from tilerosetta.specs import Case, OpSpec, dtype_name, get_spec

SEED = 0
SUSPECT_PCT = 110.0  # above this % of a measured ceiling a number is flagged, not believed
QUICK_DTYPES = ("bf16",)


class FatalCudaError(RuntimeError):
    """The CUDA context is unusable after a case (illegal address, ...): only a new process can go on."""


@dataclass
class Settings:
    warmup_ms: float = 25.0
    rep_ms: float = 100.0
    graph: bool = True
    flush: bool = True
    cpu: bool = False  # host timing of CPU tensors: bookkeeping runs / CI only, labelled not comparable
    quick: bool = False
    min_reps: int = 10  # fewest timed repetitions (bench --scaling uses fewer)
    eager: bool = True  # also record the host time per eager call (timing.eager_per_call)
    eager_budget_ms: float = 10.0

    def to_json(self) -> dict:
        # flush_kind: how timing.L2Flusher flushes (not a setting: it has one way); runs before 2026-12-02 lack
        # it and zeroed the buffer
        return {**self.__dict__, "flush_kind": timing.FLUSH_KIND}


# ---- what to run ----------------------------------------------------------------------------------
def dim_symbols(spec: OpSpec) -> set[str]:
    return {f.strip() for shape in list(spec.inputs.values()) + list(spec.outputs.values())
            for e in shape for f in e.split("*") if f.strip().isidentifier()}


def _parse_value(text: str):
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    try:
        return int(text)
    except ValueError:
        return float(text)


def select_cases(spec: OpSpec, size: str | None = None, quick: bool = False, cpu: bool = False) -> list[Case]:
    """The cases of one op: the spec's bench_cases (on CPU: its largest conformance case), narrowed by
    --size: an index into that list, or 'M=4096,N=8192' (a full set of dims makes a new case; a partial
    one filters; op params such as causal=true may be given too)."""
    base = list(spec.cases[-1:]) if cpu else list(spec.bench_cases)
    if not size:
        return base[:1] if quick else base
    size = size.strip()
    if size.isdigit():
        i = int(size)
        if i >= len(base):
            raise ValueError(f"--size {i}: {spec.name} has {len(base)} bench case(s) (0..{len(base) - 1})")
        return [base[i]]
    dims, params = {}, {}
    symbols = dim_symbols(spec)
    for part in filter(None, (p.strip() for p in size.split(","))):
        if "=" not in part:
            raise ValueError(f"--size '{size}': expected NAME=VALUE pairs or an index, got '{part}'")
        k, v = (s.strip() for s in part.split("=", 1))
        if k in symbols:
            dims[k] = int(v)
        elif k in spec.params:
            params[k] = _parse_value(v)
        # names of other ops' dims are ignored, so one --size can narrow several ops
    if not dims and not params:
        return []
    if set(dims) == symbols:  # name it as the spec names its cases, so equal sizes get equal names
        order = list(spec.bench_cases[0].dims) if spec.bench_cases and set(spec.bench_cases[0].dims) == symbols \
            else _dim_order(spec)
        ordered = {s: dims[s] for s in order}
        return [Case(ordered, params)]
    return [c for c in base if all(c.dims.get(k) == v for k, v in dims.items())
            and all(spec.full_params(c.params).get(k) == v for k, v in params.items())]


def _dim_order(spec: OpSpec) -> list[str]:
    seen = []
    for shape in list(spec.inputs.values()) + list(spec.outputs.values()):
        for e in shape:
            for f in e.split("*"):
                f = f.strip()
                if f.isidentifier() and f not in seen:
                    seen.append(f)
    return seen


def build_plan(ops: Iterable[str], dtypes: Iterable[str] | None, size: str | None, quick: bool,
               cpu: bool) -> list[tuple[OpSpec, torch.dtype, Case]]:
    plan = []
    for op in ops:
        spec = get_spec(op)
        wanted = list(dtypes) if dtypes else (QUICK_DTYPES if quick else [dtype_name(d) for d in spec.dtypes])
        for d in spec.dtypes:
            if dtype_name(d) in wanted:
                for case in select_cases(spec, size, quick, cpu):
                    plan.append((spec, d, case))
                    if not quick:  # an op timed on more than one input distribution: the others too
                        plan += [(spec, d, Case(case.dims, case.params, case.label, dist))
                                 for dist in list(spec.bench_distributions)[1:]]
    return plan


# ---- one backend on one case -------------------------------------------------------------------
def base_record(backend: Backend, spec: OpSpec, dtype: torch.dtype, case: Case) -> dict:
    return {"type": "result", "backend": backend.name, "op": spec.name, "dtype": dtype_name(dtype),
            "case": case.name, "dims": dict(case.dims), "params": spec.full_params(case.params),
            "bound": spec.case_bound(case), "distribution": spec.bench_distribution(case),
            "headline": spec.is_headline(case)}


def skip_reason(backend: Backend, spec: OpSpec, dtype: torch.dtype, settings: Settings) -> tuple[str, str] | None:
    if spec.name not in backend.implementations():
        return "missing", backend.missing().get(spec.name, "not implemented")
    if dtype not in backend.dtypes(spec.name):
        return "unsupported", f"{backend.name} does not accept {dtype_name(dtype)} for {spec.name}"
    want = "cpu" if settings.cpu else "cuda"
    if backend.device_type != want:
        return "unsupported", (f"{backend.name} runs on {backend.device_type} tensors; this run times "
                               f"{want} backends only")
    return None


def case_skip_reason(backend: Backend, spec: OpSpec, case: Case) -> tuple[str, str] | None:
    """A case outside what a peer's binding covers (Backend.unsupported_case): "unsupported", not an error."""
    why = backend.unsupported_case(spec.name, spec.case_dims(case), dict(case.params))
    return ("unsupported", why) if why else None


def _is_fatal(exc: BaseException) -> bool:
    if not torch.cuda.is_available():
        return False
    text = str(exc).lower()
    if any(s in text for s in ("illegal memory access", "illegal address", "unspecified launch failure",
                               "device-side assert", "misaligned address", "illegal instruction")):
        return True
    try:
        torch.cuda.synchronize()
        return False
    except Exception:
        return True


class CaseRunner:
    """Checks and times one backend on one case; the reference is cached per (op, dtype, case)."""

    def __init__(self, settings: Settings, ceilings: Ceilings | None,
                 timer: Callable[..., timing.Timing] | None = None):
        self.settings, self.ceilings = settings, ceilings
        self._ref_key, self._ref = None, None
        self._flusher = None
        self.timer = timer or self._default_timer

    def _default_timer(self, fn, device_type: str, verify) -> timing.Timing:
        s = self.settings
        if device_type != "cuda":
            return timing.time_host(fn, warmup_ms=s.warmup_ms, rep_ms=s.rep_ms, device_type=device_type)
        if s.flush and self._flusher is None:
            self._flusher = timing.L2Flusher()
        return timing.time_gpu(fn, warmup_ms=s.warmup_ms, rep_ms=s.rep_ms, graph=s.graph, flush=s.flush,
                               verify=verify, flusher=self._flusher, min_reps=s.min_reps)

    def reference_for(self, spec: OpSpec, dtype: torch.dtype, case: Case, device: str):
        key = (spec.name, dtype, case.name, device)
        if self._ref_key != key:
            self._ref_key, self._ref = None, None  # free the previous case's reference first
            inputs, _ = make_case_tensors(spec, case, dtype, device, SEED, bench=True)
            self._ref = reference(spec, case, inputs)
            self._ref_key = key
        return self._ref

    def run(self, backend: Backend, spec: OpSpec, dtype: torch.dtype, case: Case,
            config: dict | None = None) -> dict:
        rec = base_record(backend, spec, dtype, case)
        skip = skip_reason(backend, spec, dtype, self.settings) or case_skip_reason(backend, spec, case)
        if skip:
            rec.update(status=skip[0], message=skip[1])
            return rec
        try:
            self._measure(backend, spec, dtype, case, rec, config)
        except Exception as exc:
            rec.update(status="error", message=f"{type(exc).__name__}: {str(exc)[:2000]}")
            if isinstance(exc, torch.cuda.OutOfMemoryError):
                torch.cuda.empty_cache()
            elif backend.device_type == "cuda" and _is_fatal(exc):
                rec["fatal"] = True
        return clean_floats(rec)

    def _measure(self, backend, spec, dtype, case, rec, config):
        device = backend.device_type
        if config is None:
            try:
                rec["config"] = backend.default_config(spec.name, dtype, dict(case.dims)) or {}
            except Exception as exc:
                rec["config"] = {}
                rec["config_note"] = f"default_config failed: {type(exc).__name__}: {exc}"
        else:
            rec["config"], rec["config_forced"] = dict(config), True
        ref = self.reference_for(spec, dtype, case, device)
        inputs, outputs = make_case_tensors(spec, case, dtype, device, SEED, bench=True)
        rec["convention"] = backend.convention(spec.name)
        if rec["convention"] == RETURNS:
            # A baseline or peer timed as its users call it: it allocates its own output (inside the CUDA
            # graph, as torch's caching allocator would) and nothing is copied into our buffer. `outputs`
            # is rebound to what the latest call returned, so every check below looks at that.
            fn = backend.op_returning(spec.name)
            ins = list(inputs.values())
            outputs = {}

            def call():
                outputs.update(fn(*ins, **case.params))
        else:
            fn = backend.op(spec.name)
            args = [*inputs.values(), *outputs.values()]

            def call():
                fn(*args, **case.params)

        rec["first_call_ms"] = timing.wall_once(call, device)
        if rec["convention"] == RETURNS:
            problem = _returned_problem(spec, case, dtype, inputs, outputs)
            if problem:
                rec.update(status="wrong", message=f"returning form: {problem}")
                return
        ok, err, unwritten, msg = compare(spec, dtype, outputs, ref)
        rec.update(rel_err=err, tol=spec.tolerance(dtype))
        if not ok:
            rec.update(status="wrong", message=msg, unwritten=unwritten)
            return
        rec["warm_call_ms"] = timing.wall_once(call, device)

        def verify(run):  # does `run` (e.g. a graph replay) really compute the outputs?
            for o in outputs.values():  # returning form: the tensors the captured call returned
                o.fill_(float("nan"))
            run()
            if device == "cuda":
                torch.cuda.synchronize()
            good, _, _, problem = compare(spec, dtype, outputs, ref)
            return None if good else problem

        t = self.timer(call, device, verify)
        ok, err2, _, msg = compare(spec, dtype, outputs, ref)
        if not ok:
            rec.update(status="wrong", message=f"correct on the first call, wrong after timing: {msg}")
            return
        rec["timing"] = t.to_json()
        rec["method"] = t.method
        if self.settings.eager:  # launch cost beside the graph time (no graph, back-to-back calls)
            rec["eager"] = timing.eager_per_call(call, device, estimate_ms=t.median_ms,
                                                 budget_ms=self.settings.eager_budget_ms)
        extras = getattr(backend, "record_extras", None)  # e.g. torch_compile's compile time per shape
        if extras:
            rec.update(extras(spec.name, dtype, dict(case.dims)) or {})
        note = getattr(backend, "out_note", None)  # a peer whose timed call holds more than its kernel
        if note and note(spec.name):
            rec["note"] = note(spec.name)
        flops, nbytes = spec.flops(case), spec.bytes_moved(case, dtype)
        rec.update(flops=flops, bytes=nbytes)
        rec.update(metrics(flops, nbytes, t.median_ms, rec["bound"], rec["dtype"],
                           None if self.settings.cpu else self.ceilings))
        rec["status"] = "ok"
        if (rec.get("pct_of_ceiling") or 0) > SUSPECT_PCT:
            rec["suspect"] = (f"{rec['pct_of_ceiling']:.0f}% of the measured ceiling: the kernel may not run on "
                              f"the current stream, or skip work")


def _returned_problem(spec: OpSpec, case: Case, dtype, inputs: dict, outputs: dict) -> str | None:
    """Why a returning-form result cannot be checked as the op's output (shape, dtype, aliasing), or None."""
    shapes = spec.shapes(case)
    in_ptrs = {t.untyped_storage().data_ptr() for t in inputs.values()}
    for name, t in outputs.items():
        if tuple(t.shape) != shapes[name] or t.dtype != dtype:
            return (f"'{name}' came back {tuple(t.shape)} {dtype_name(t.dtype)}, expected {shapes[name]} "
                    f"{dtype_name(dtype)}")
        if t.untyped_storage().data_ptr() in in_ptrs:
            return f"'{name}' shares memory with an input (in-place ops are not a returning form)"
    return None


# ---- launch overhead ------------------------------------------------------------------------------
LAUNCH_CASE = Case({"N": 1024})


def launch_calls(backend: Backend, device: str) -> tuple[dict, Callable | None, Callable | None]:
    """(record, validated call, raw call) of vector_add N=1024 on backend: the calls whose host time is the
    launch overhead; (record with status and message, None, None) when the backend cannot make them."""
    spec = get_spec("vector_add")
    rec = {"type": "launch", "backend": backend.name, "op": spec.name, "case": LAUNCH_CASE.name}
    if spec.name not in backend.implementations():
        return {**rec, "status": "missing", "message": backend.missing().get(spec.name, "not implemented")}, None, None
    dtype = next((d for d in (torch.float32, torch.bfloat16, torch.float16) if d in backend.dtypes(spec.name)),
                 None)
    if dtype is None:
        return {**rec, "status": "unsupported", "message": "no float dtype accepted"}, None, None
    rec["dtype"] = dtype_name(dtype)
    inputs, outputs = make_case_tensors(spec, LAUNCH_CASE, dtype, device, SEED)
    args = [*inputs.values(), *outputs.values()]
    bound = backend.op(spec.name)
    raw = backend.implementations()[spec.name]
    full = spec.full_params({})
    return rec, lambda: bound(*args), lambda: raw(*args, **full)


def launch_overhead(backend: Backend, device: str) -> dict:
    """Host µs per call of vector_add N=1024 through the BoundOp (validation + binding) and the raw fn."""
    rec = {"type": "launch", "backend": backend.name, "op": "vector_add", "case": LAUNCH_CASE.name}
    try:
        rec, bound, raw = launch_calls(backend, device)
        if bound is None:
            return rec
        rec["bound_us"] = timing.launch_overhead_us(bound, device)
        rec["raw_us"] = timing.launch_overhead_us(raw, device)
        rec["status"] = "ok"
    except Exception as exc:
        rec.update(status="error", message=f"{type(exc).__name__}: {str(exc)[:1000]}")
    return rec


# ---- the run ----------------------------------------------------------------------------------------
@dataclass
class Progress:
    """What the runner reports as it goes (the CLI binds this to a rich progress bar)."""
    start: Callable[[int], None] = lambda total: None
    case: Callable[[str], None] = lambda label: None
    done: Callable[[dict], None] = lambda rec: None


@dataclass
class Runner:
    backends: list[Backend]
    writer: ResultsWriter
    settings: Settings
    ceilings: Ceilings | None = None
    timer: Callable | None = None
    done: set = field(default_factory=set)  # keys already in the file (--resume)
    launch_done: set = field(default_factory=set)
    budget: Any = None  # bench --scaling: scaling.Budget (skip(backend) -> reason | None, charge(backend, s))

    def run(self, plan, progress: Progress | None = None) -> list[dict]:
        progress = progress or Progress()
        device = "cpu" if self.settings.cpu else "cuda"
        runner = CaseRunner(self.settings, self.ceilings, self.timer)
        for b in self.backends:
            if b.name not in self.launch_done and b.device_type == device:
                self.writer.write(clean_floats(launch_overhead(b, device)))
        todo = [(b, spec, d, c) for spec, d, c in plan for b in self.backends
                if (b.name, spec.name, dtype_name(d), c.name) not in self.done]
        progress.start(len(todo))
        out = []
        for b, spec, d, case in todo:
            label = f"{b.name} {spec.name} {dtype_name(d)} {case.name}"
            progress.case(label)
            key = {"backend": b.name, "op": spec.name, "dtype": dtype_name(d), "case": case.name}
            why = self.budget.skip(b.name) if self.budget is not None else None
            if why:
                rec = {**base_record(b, spec, d, case), "status": "skipped", "message": why, "t": now_iso()}
                self.writer.write(rec)
                out.append(rec)
                progress.done(rec)
                continue
            self.writer.write({"type": "start", **key, "t": now_iso()})
            t0 = time.perf_counter()
            rec = runner.run(b, spec, d, case)
            if self.budget is not None:
                self.budget.charge(b.name, time.perf_counter() - t0)
            rec["t"] = now_iso()
            self.writer.write(rec)
            self.done.add(key_of(rec))
            out.append(rec)
            progress.done(rec)
            if rec.get("fatal"):
                raise FatalCudaError(f"{label}: {rec['message']}")
        return out


def crashed_records(started_keys) -> list[dict]:
    """Result records for cases that started but never finished (the process died inside them)."""
    return [{"type": "result", "backend": k[0], "op": k[1], "dtype": k[2], "case": k[3], "status": "crashed",
             "message": "the process died during this case (found by --resume); not retried",
             "t": now_iso()} for k in started_keys]


def fmt_ms(ms: float | None) -> str:
    if ms is None or (isinstance(ms, float) and math.isnan(ms)):
        return "-"
    return f"{ms * 1e3:.1f} µs" if ms < 1 else f"{ms:.3f} ms"


def summary_rows(results) -> tuple[list[str], list[list[str]]]:
    """A compact op/dtype/case x backend table of median time, % of ceiling and the ratio to the case's best
    peer (torch or a peer; > 1 = faster; 'tie' when the p20-p80 spreads overlap)."""
    backends = [b for b in results.backends() if any(r["backend"] == b for r in results.results)]
    rows: dict[tuple, dict] = {}
    for r in results.results:
        rows.setdefault((r["op"], r["dtype"], r["case"]), {})[r["backend"]] = r
    table = []
    for (op, dt, case), cells in rows.items():
        line = [op, dt, case]
        for b in backends:
            r = cells.get(b)
            if r is None:
                line.append("")
            elif r["status"] == "ok":
                pct = r.get("pct_of_ceiling")
                vs = results.vs_best_peer(r)
                text = fmt_ms(r["timing"]["median_ms"])
                if pct is not None:
                    text += f" {pct:.0f}%"
                if vs is not None and vs[2] != b:
                    text += " " + ratio_text(vs[0], vs[1])
                line.append(text)
            else:
                line.append(r["status"].upper() if r["status"] in ("wrong", "error", "crashed") else "-")
        table.append(line)
    return ["op", "dtype", "case", *backends], table
