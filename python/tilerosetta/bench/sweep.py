"""`tilerosetta sweep`: time one backend over its config space (backend.config_space + set_config).

Every configuration is checked against the reference before it is timed, with the same CaseRunner as
`bench`; the backend's default configuration is measured first as the baseline. Results go to a JSONL
file (records carry "sweep": true), a plot of time per configuration beside it, and optionally the
best configuration per size class into python/tilerosetta/tuned_configs.json (tuning.record).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from matplotlib.figure import Figure

from tilerosetta import tuning
from tilerosetta.backends import Backend
from tilerosetta.bench.runner import CaseRunner, Settings
from tilerosetta.bench.results import ResultsWriter, now_iso
from tilerosetta.specs import Case, OpSpec, dtype_name


def config_label(cfg: dict | None) -> str:
    return ",".join(f"{k}={v}" for k, v in (cfg or {}).items()) or "{}"


def parse_where(text: str) -> dict[str, int]:
    """'BLOCK_N=128,num_warps=4' -> {'BLOCK_N': 128, 'num_warps': 4} (values are ints, as in every space)."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise ValueError(f"expected KEY=VALUE, got {part!r}")
        try:
            out[key.strip()] = int(value)
        except ValueError:
            raise ValueError(f"{key.strip()}: expected an integer, got {value!r}") from None
    return out


def parse_where_args(texts: list[str]) -> list[dict[str, int]]:
    """The `--where` groups of a command line: each text one group or several joined by '/' (as
    tools/gpu-session.sh's SWEEPS write them)."""
    return [parse_where(group) for text in texts for group in text.split("/")]


def select(space: list[dict], where: list[dict[str, int]]) -> list[dict]:
    """The configurations matching any of the `where` groups (all of one group's pairs); all when none given.
    A key that no configuration has is an error (a typo would otherwise silently select nothing)."""
    if not where:
        return list(space)
    known = set().union(*(c.keys() for c in space)) if space else set()
    for group in where:
        unknown = set(group) - known
        if unknown:
            raise ValueError(f"unknown config key(s) {sorted(unknown)}; this space has {sorted(known)}")
    return [c for c in space if any(all(c.get(k) == v for k, v in g.items()) for g in where)]


def spread(space: list[dict], max_configs: int | None) -> list[dict]:
    """At most max_configs configurations evenly spread over the space (deterministic; first and last kept).
    Large spaces (Triton's matmul has >100) would otherwise cost minutes of JIT compilation per case."""
    if not max_configs or len(space) <= max_configs:
        return list(space)
    if max_configs == 1:
        return [space[0]]
    step = (len(space) - 1) / (max_configs - 1)
    return [space[round(i * step)] for i in range(max_configs)]


def plan(backend: Backend, spec: OpSpec, dtype, case: Case, max_configs: int | None = None,
         where: list[dict[str, int]] | None = None) -> tuple[list[dict], list[tuple[dict, str]]]:
    """(the configurations a sweep of this case times after the backend's default, in order; those the `where`
    groups selected that the backend refuses for this case, with its reason). Needs no GPU (`sweep --plan`)."""
    offered = select(backend.config_space(spec.name, dtype), where or [])
    if not offered:
        raise ValueError(f"{backend.name}.{spec.name}: no config space for {dtype_name(dtype)} "
                         f"(config_space returned [])" if not where else
                         f"{backend.name}.{spec.name}: no configuration of the {dtype_name(dtype)} space matches "
                         f"--where {' / '.join(config_label(g) for g in where)}")
    judged = [(c, backend.config_refusal(spec.name, dtype, dict(case.dims), c)) for c in offered]
    space = spread([c for c, why in judged if why is None], max_configs)
    if not space:
        raise ValueError(f"{backend.name}.{spec.name}: every config of the space is refused for {case.name} "
                         f"({dtype_name(dtype)}), e.g. {judged[0][0]}: {judged[0][1]}")
    return space, [(c, why) for c, why in judged if why is not None]


def sweep_case(backend: Backend, spec: OpSpec, dtype, case: Case, writer: ResultsWriter, settings: Settings,
               ceilings=None, timer=None, on_config=None, max_configs: int | None = None,
               where: list[dict[str, int]] | None = None,
               pick: Callable[[list[dict]], list[dict]] | None = None) -> list[dict]:
    space, _refused = plan(backend, spec, dtype, case, max_configs, where)
    if pick:  # a worker of `sweep --gpus`: its share of the configurations (the default always runs)
        space = pick(space)
    runner = CaseRunner(settings, ceilings, timer)
    recs = []
    for cfg in [None, *space]:  # None: the backend's default, the baseline
        if on_config:
            on_config(config_label(cfg) if cfg is not None else "default")
        try:
            if cfg is not None:
                backend.set_config(spec.name, dtype, cfg)
            rec = runner.run(backend, spec, dtype, case, config=cfg)
        except Exception as exc:  # set_config refused the configuration
            rec = {"type": "result", "backend": backend.name, "op": spec.name, "dtype": dtype_name(dtype),
                   "case": case.name, "dims": dict(case.dims), "config": dict(cfg or {}), "status": "error",
                   "message": f"set_config: {type(exc).__name__}: {exc}"}
        finally:
            backend.set_config(spec.name, dtype, None)
        rec.update(sweep=True, sweep_default=cfg is None, t=now_iso())
        if cfg is None:  # key the baseline apart from an explicit config equal to it
            rec["config"] = {"<default>": True, **rec.get("config", {})}
        writer.write(rec)
        recs.append(rec)
        if rec.get("fatal"):
            break
    return recs


def best(recs: list[dict]) -> dict | None:
    """The fastest correct explicit configuration (the default is only the baseline)."""
    ok = [r for r in recs if r.get("status") == "ok" and not r.get("sweep_default")]
    return min(ok, key=lambda r: r["timing"]["median_ms"]) if ok else None


def plot(recs: list[dict], path: Path, title: str) -> Path:
    """Median time (with p20-p80 whiskers) per configuration, fastest first; failed ones listed."""
    ok = sorted((r for r in recs if r.get("status") == "ok"), key=lambda r: r["timing"]["median_ms"])
    fig = Figure(figsize=(8, 0.9 + 0.28 * max(1, len(ok))))
    ax = fig.subplots()
    labels = [("default: " if r.get("sweep_default") else "") +
              config_label({k: v for k, v in r.get("config", {}).items() if k != "<default>"}) for r in ok]
    med = [r["timing"]["median_ms"] for r in ok]
    err = [[m - r["timing"]["p20_ms"] for m, r in zip(med, ok)], [r["timing"]["p80_ms"] - m for m, r in zip(med, ok)]]
    colors = ["#dd8452" if r.get("sweep_default") else "#4c72b0" for r in ok]
    ax.barh(range(len(ok)), med, xerr=err, color=colors)
    ax.set_yticks(range(len(ok)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("median ms (p20-p80), lower is better")
    bad = [r for r in recs if r.get("status") != "ok"]
    ax.set_title(title + (f"\n{len(bad)} config(s) wrong/failed, not shown" if bad else ""), fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return path


# A configuration replaces the default only when it is this much faster: repeated runs of one config
# differ by about 1% on the H200, and a table entry should record a real gain, not that noise.
MIN_GAIN = 0.02


def write_best(recs: list[dict], arch: str, source: str, table=tuning.TABLE) -> str | None:
    b = best(recs)
    if b is None:
        return None
    default = next((r for r in recs if r.get("sweep_default") and r.get("status") == "ok"), None)
    if default and b["timing"]["median_ms"] > default["timing"]["median_ms"] * (1 - MIN_GAIN):
        return None  # the backend's default is as fast, within noise: keep the table as it is
    evidence = {"median_ms": round(b["timing"]["median_ms"], 6), "case": b["case"], "date": now_iso()[:10],
                "source": source, "method": b.get("method")}
    if default:
        evidence["default_median_ms"] = round(default["timing"]["median_ms"], 6)
    return tuning.record(b["backend"], b["op"], b["dtype"], arch, b["dims"], b["config"], evidence, table)
