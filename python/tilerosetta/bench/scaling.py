"""`tilerosetta bench --scaling`: how cost grows with size.

Each op's `spec.scaling` (data in the spec files, see specs/base.py `Scaling`) lists size sweeps; this
module turns them into a plan of (spec, dtype, case) points and keeps the run inside a time budget:

* one dtype per op (bf16, or the op's first dtype), each point checked then timed like any bench case
  but with short budgets (SETTINGS: 3 ms warm-up, 12 ms of repetitions, at least 5), plus the host time
  per eager call (runner records it for every case);
* points run coarse to fine (every op's smallest and largest size first, then the middle, then the
  quarters ...), so a run cut short by the budget still spans every op's whole range;
* each backend gets an equal share of the budget (its compile time included); a backend past its share,
  or any backend once the whole budget is spent, has its remaining points recorded as `skipped` with
  the reason. The default budget keeps `bench --scaling` near 4 minutes on one H200 with every backend
  and peer (imports and ceilings included).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable

import torch

from tilerosetta.specs import Case, OpSpec, dtype_name, get_spec, parse_dtype
from tilerosetta.specs.base import Scaling

BUDGET_S = 200.0  # seconds of the timed points (the process adds ~30-40 s: imports, modules, ceilings)
WARMUP_MS, REP_MS, MIN_REPS = 3.0, 12.0, 5
PREFERRED_DTYPE = "bf16"


def coarse_to_fine(n: int) -> list[tuple[int, int]]:
    """(index, level) for 0..n-1: the ends first (level 0), then the midpoint of each gap (level 1, 2,
    ...): 7 -> [(0, 0), (6, 0), (3, 1), (1, 2), (4, 2), (2, 3), (5, 3)]."""
    if n <= 0:
        return []
    order = [(0, 0)] + ([(n - 1, 0)] if n > 1 else [])
    spans, level = [(0, n - 1)], 0
    while spans:
        level += 1
        nxt = []
        for lo, hi in spans:
            if hi - lo >= 2:
                mid = (lo + hi) // 2
                order.append((mid, level))
                nxt += [(lo, mid), (mid, hi)]
        spans = nxt
    return order


def _case_of(spec: OpSpec, sweep: Scaling, value: int) -> Case:
    dims = sweep.dims_at(value)
    order = list(spec.bench_cases[0].dims) if spec.bench_cases else sorted(dims)
    ordered = {k: dims[k] for k in order if k in dims}
    ordered.update({k: v for k, v in dims.items() if k not in ordered})
    return Case(ordered, dict(sweep.params))


@dataclass(frozen=True)
class Point:
    spec: OpSpec
    dtype: torch.dtype
    case: Case
    level: int
    sweeps: tuple[str, ...]  # the sweeps (names) this point belongs to


def scaling_dtype(spec: OpSpec, wanted: list[str] | None = None) -> torch.dtype | None:
    names = [dtype_name(d) for d in spec.dtypes]
    for name in (wanted or [PREFERRED_DTYPE]):
        if name in names:
            return parse_dtype(name)
    return None if wanted else spec.dtypes[0]


CPU_MAX_ELEMS = 1 << 20  # --allow-cpu: only points this small (bookkeeping runs, CI)


def elements(spec: OpSpec, case: Case) -> int:
    return sum(math.prod(shape) for shape in spec.shapes(case).values())


def build_plan(ops, dtypes: list[str] | None = None, max_elems: int | None = None) -> list[Point]:
    """Every point of every sweep of the ops (a point shared by two sweeps once), coarse to fine;
    max_elems drops points with more input + output elements (CPU runs)."""
    points: dict[tuple, Point] = {}
    for op_index, op in enumerate(ops):
        spec = get_spec(op)
        dt = scaling_dtype(spec, dtypes)
        if dt is None:
            continue
        for sweep in spec.scaling:
            levels = dict(coarse_to_fine(len(sweep.values)))
            for i, v in enumerate(sweep.values):
                case = _case_of(spec, sweep, v)
                if max_elems is not None and elements(spec, case) > max_elems:
                    continue
                key = (op, case.name)
                old = points.get(key)
                lvl = min(levels[i], old.level) if old else levels[i]
                names = (old.sweeps if old else ()) + (sweep.name,)
                points[key] = Point(spec, dt, case, lvl, names)
    op_rank = {op: i for i, op in enumerate(ops)}
    return sorted(points.values(), key=lambda p: (p.level, op_rank[p.spec.name],
                                                  sum(p.case.dims.values())))


@dataclass
class Budget:
    """Wall-time budget of a scaling run: `total_s` overall, shared by the backends in proportion to
    `weights` (the number of plan points each one runs: a peer with two ops gets less than a backend
    with all ten)."""
    total_s: float
    weights: dict[str, float]
    clock: Callable[[], float] = time.perf_counter
    spent: dict[str, float] = field(default_factory=dict)
    started: float | None = None

    def share_s(self, backend: str) -> float:
        total_w = sum(self.weights.values()) or 1.0
        return self.total_s * self.weights.get(backend, 0.0) / total_w

    def skip(self, backend: str) -> str | None:
        """Why `backend` must not run another point now, or None."""
        if self.started is None:
            self.started = self.clock()
        if self.clock() - self.started >= self.total_s:
            return f"not run: the scaling time budget ({self.total_s:.0f} s) was spent"
        share = self.share_s(backend)
        if self.spent.get(backend, 0.0) >= share:
            return (f"not run: {backend} used its share of the scaling time budget "
                    f"({share:.1f} s of {self.total_s:.0f} s, compile time included)")
        return None

    def charge(self, backend: str, seconds: float) -> None:
        self.spent[backend] = self.spent.get(backend, 0.0) + seconds


def weights(plan: list[Point], backends, runs) -> dict[str, float]:
    """backend -> number of plan points it runs; runs(backend, point) -> bool."""
    return {b.name: float(sum(1 for p in plan if runs(b, p))) for b in backends}


def seconds_used(res) -> float:
    """Wall seconds a (resumed) scaling file already spent: its first to its last timestamped record."""
    stamps = [r.get("t") for r in res.results if r.get("t")]
    if not stamps:
        return 0.0
    first, last = min(stamps), max(stamps)
    return max(0.0, (datetime.fromisoformat(last) - datetime.fromisoformat(first)).total_seconds())


def describe(plan: list[Point]) -> dict:
    """What the meta line records about the plan."""
    return {"points": len(plan), "ops": sorted({p.spec.name for p in plan}),
            "sweeps": {op: [s.name for s in get_spec(op).scaling] for op in sorted({p.spec.name for p in plan})},
            "settings": {"warmup_ms": WARMUP_MS, "rep_ms": REP_MS, "min_reps": MIN_REPS}}
