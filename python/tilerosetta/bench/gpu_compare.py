"""Results from several GPU kinds side by side: per op, dtype and backend, the geometric mean of the median
time over the cases every kind timed, each kind's % of its own measured ceiling, and the speedup of each
kind over the first (`tilerosetta compare-gpus A.jsonl B.jsonl ...`).

A result's GPU kind is its own "gpu" stamp (records of a `--gpus` run, where one file may hold several
kinds when a Ray cluster mixes nodes), else the file's meta. When a kind has the same case twice (two
files of one kind), the later file wins, as within one results file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tilerosetta.bench.results import Results, load


def gpu_kind(rec: dict, res: Results) -> str:
    stamp = rec.get("gpu")
    if isinstance(stamp, dict) and stamp.get("name"):
        return stamp["name"]
    name = (res.meta.get("gpu") or {}).get("name") or "unknown GPU"
    return f"{name} [CPU timing]" if res.cpu_only else name


def _geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


@dataclass
class Row:
    op: str
    dtype: str
    backend: str
    cases: int  # the cases every kind timed correctly
    ms: dict  # kind -> geomean median ms (None: this kind has no common case)
    pct: dict  # kind -> geomean % of that kind's own ceiling (None without ceilings)
    missing: dict  # kind -> why it has nothing here ("wrong", "error", "not run", ...)


def collect(files: list[Results]) -> tuple[list[str], dict]:
    """kinds in order of first appearance, and (op, dtype, backend) -> kind -> case -> record."""
    kinds: list[str] = []
    table: dict = {}
    for res in files:
        for r in res.results:
            kind = gpu_kind(r, res)
            if kind not in kinds:
                kinds.append(kind)
            table.setdefault((r["op"], r["dtype"], r["backend"]), {}).setdefault(kind, {})[r["case"]] = r
    return kinds, table


def rows(files: list[Results], baseline: str | None = None) -> tuple[list[str], list[Row]]:
    kinds, table = collect(files)
    if baseline:
        if baseline not in kinds:
            raise ValueError(f"--baseline {baseline!r}: the files hold {kinds}")
        kinds = [baseline] + [k for k in kinds if k != baseline]
    out = []
    for (op, dtype, backend), by_kind in table.items():
        ok = {k: {c: r for c, r in cases.items() if r.get("status") == "ok"} for k, cases in by_kind.items()}
        common = set.intersection(*(set(ok.get(k, {})) for k in kinds))
        ms, pct, missing = {}, {}, {}
        for k in kinds:
            recs = [ok[k][c] for c in sorted(common)] if k in ok else []
            ms[k] = _geomean([r["timing"]["median_ms"] for r in recs]) if common else None
            pcts = [r.get("pct_of_ceiling") for r in recs]
            pct[k] = _geomean(pcts) if recs and all(p is not None for p in pcts) else None
            if k not in by_kind:
                missing[k] = "not run"
            elif not ok.get(k):
                missing[k] = "/".join(sorted({r["status"] for r in by_kind[k].values()}))
        out.append(Row(op, dtype, backend, len(common), ms, pct, missing))
    return kinds, out


def _fmt_ms(ms: float) -> str:
    return f"{ms * 1e3:.1f} µs" if ms < 1 else f"{ms:.3f} ms"


def markdown(kinds: list[str], table: list[Row]) -> str:
    """One Markdown table: a column per kind (time and % of its ceiling), then each kind vs the first."""
    head = ["op", "dtype", "backend", "cases", *kinds, *[f"{k} vs {kinds[0]}" for k in kinds[1:]]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table:
        cells = [r.op, r.dtype, r.backend, str(r.cases)]
        for k in kinds:
            if r.ms.get(k) is None:
                cells.append(r.missing.get(k, "no common case"))
            else:
                cells.append(_fmt_ms(r.ms[k]) + (f" ({r.pct[k]:.0f}%)" if r.pct.get(k) is not None else ""))
        base = r.ms.get(kinds[0])
        for k in kinds[1:]:
            cells.append(f"{base / r.ms[k]:.2f}x" if base and r.ms.get(k) else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def compare_files(paths: list[str], baseline: str | None = None) -> tuple[list[str], list[Row], list[Results]]:
    files = [load(p) for p in paths]
    kinds, table = rows(files, baseline)
    return kinds, table, files
