"""The results file: JSON lines, one record per line, flushed as each is written (a crash loses nothing).

Records (each a JSON object with a "type"):
  meta      first line: schema version, date, git commit, GPU/driver/CUDA, toolchain, package versions,
            backends (availability, reason, versions), settings; "fixture": true on hand-made files
  ceilings  the machine's copy bandwidth and matrix rates (see ceilings.py)
  launch    host launch overhead of one backend (µs per call) on a tiny op
  start     a case is about to run (so a crash inside it is visible on --resume)
  result    one backend x op x dtype x case: status, timing, metrics, config
  resume    the run was resumed (date, commit)

A result's status is one of:
  ok           checked against the reference, then timed
  wrong        ran but disagreed with the reference: never timed
  error        raised (message recorded)
  crashed      started but the process died (written on --resume)
  missing      the backend does not implement the op (its reason)
  unsupported  the backend does not accept this dtype for the op
  skipped      not run: `bench --scaling` ran out of its time budget (reason recorded)
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from tilerosetta.bench.ceilings import Ceilings
from tilerosetta.toolchain import REPO_ROOT

SCHEMA = 1
RESULTS_DIR = REPO_ROOT / "bench" / "results"  # committed GPU runs only
# CPU-only runs (`bench/sweep --allow-cpu`, CI) and rendered reports go under build/ (ignored by git), so
# they never mix with committed GPU results or become "latest".
CPU_RESULTS_DIR = REPO_ROOT / "build" / "cpu-results"
REPORTS_DIR = REPO_ROOT / "build" / "reports"
FIXTURE = REPO_ROOT / "bench" / "fixtures" / "h200_sample.jsonl"
STATUSES = ("ok", "wrong", "error", "crashed", "missing", "unsupported", "skipped")
NOISE = 0.05  # default relative change `compare` treats as real


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def key_of(rec: dict) -> tuple[str, str, str, str]:
    """The identity of a case across files: backend, op, dtype, case name (plus config for sweeps)."""
    k = (rec["backend"], rec["op"], rec["dtype"], rec["case"])
    if rec.get("sweep"):
        k = k + (json.dumps(rec.get("config", {}), sort_keys=True),)
    return k


def metrics(flops: int, nbytes: int, median_ms: float, bound: str, dtype: str,
            ceilings: Ceilings | None) -> dict:
    """Derived numbers of a timed result: TFLOP/s, GB/s and % of the relevant ceiling."""
    sec = median_ms * 1e-3
    out = {"tflops": flops / sec / 1e12 if sec > 0 else None, "gbps": nbytes / sec / 1e9 if sec > 0 else None}
    if ceilings is not None and sec > 0:
        kind, value = ceilings.for_result(bound, dtype)
        achieved = out["tflops"] if bound == "compute" else out["gbps"]
        out.update(ceiling_kind=kind, ceiling=value, pct_of_ceiling=100.0 * achieved / value)
        sheet = ceilings.datasheet(dtype) if bound == "compute" else None
        if sheet:
            out["pct_of_datasheet"] = 100.0 * achieved / sheet
    return out


# ---- roles and noise -------------------------------------------------------------------------------
OURS, BASELINE, PEER = "ours", "baseline", "peer"
REFERENCE_ROLES = (BASELINE, PEER)  # what our backends are measured against; never one of ours


def role_from_meta(name: str, info: dict | None) -> str:
    """A backend's role from its meta entry: an explicit "role", else a "peer" label (the TileGym peer's
    mark), else "baseline" for torch, else ours."""
    info = info or {}
    role = info.get("role")
    if role in (OURS, BASELINE, PEER):
        return role
    if info.get("peer"):
        return PEER
    return BASELINE if name == "torch" else OURS


def spreads_overlap(a: dict, b: dict) -> bool:
    """True when two timings' p20-p80 ranges overlap: their difference is inside the noise, a tie."""
    return a["p20_ms"] <= b["p80_ms"] and b["p20_ms"] <= a["p80_ms"]


def ratio_text(ratio: float | None, tie: bool = False) -> str:
    """'1.12x', or 'tie (1.01x)' when the difference is inside the noise: never a win or loss."""
    if ratio is None:
        return "-"
    return f"tie ({ratio:.2f}x)" if tie else f"{ratio:.2f}x"


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "unknown"


def new_results_path(directory: Path, gpu: str, prefix: str = "") -> Path:
    """A fresh timestamped name; never an existing file."""
    directory.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    base = f"{prefix}{stamp}-{slug(gpu)}"
    path, i = directory / f"{base}.jsonl", 1
    while path.exists():
        path, i = directory / f"{base}-{i}.jsonl", i + 1
    return path


def default_out_dir(cpu: bool) -> Path:
    return CPU_RESULTS_DIR if cpu else RESULTS_DIR


def meta_line(path: str | os.PathLike) -> dict:
    """The meta record a results file (bench, scaling, e2e) starts with, or {} when it has none."""
    try:
        with open(path, encoding="utf-8") as f:
            meta = json.loads(f.readline() or "{}")
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) and meta.get("type") == "meta" else {}


def newest_in(directory: Path, pattern: str, command: str) -> Path:
    """The newest file of `directory` matching `pattern` (names start with their UTC stamp)."""
    files = sorted(directory.glob(pattern), key=lambda f: f.name)
    if not files:
        raise FileNotFoundError(f"no {pattern} in {directory}: run `{command}` on a GPU")
    return files[-1]


def _is_gpu_run(path: Path) -> bool:
    """A benchmark of a GPU: not a sweep, not CPU-only, not a hand-made fixture (read from its meta line)."""
    if path.name.startswith(("sweep-", "scaling-", "e2e-")):  # read with `report --scaling` / `report --e2e`
        return False
    meta = meta_line(path)
    return bool(meta) and not meta.get("cpu_only") and not meta.get("fixture")


def resolve_results_path(arg: str | os.PathLike) -> Path:
    """A results file from a path, or the newest GPU run (see _is_gpu_run) of a directory or '<dir>/latest'."""
    p = Path(arg)
    if p.is_file():
        return p
    directory = p if p.is_dir() else (p.parent if p.name == "latest" else None)
    if directory is not None and directory.is_dir():
        files = sorted((f for f in directory.glob("*.jsonl") if _is_gpu_run(f)), key=lambda f: f.name)
        if files:
            return files[-1]
        raise FileNotFoundError(f"no results (*.jsonl) in {directory}: run `tilerosetta bench` on a GPU, or "
                                f"render the committed fixture: tilerosetta report {FIXTURE.relative_to(REPO_ROOT)}")
    raise FileNotFoundError(f"results file {p} not found")


class ResultsWriter:
    """Appends records to a JSONL file, flushing and fsyncing each line."""

    def __init__(self, path: Path, append: bool = False):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # "x": a new run never overwrites a file; --resume appends to the file it resumes.
        self._f = open(self.path, "a" if append else "x", encoding="utf-8")
        if append and self.path.stat().st_size:
            with open(self.path, "rb") as f:  # a crash may have left a partial last line: end it
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    self._f.write("\n")

    def write(self, record: dict) -> None:
        self._f.write(json.dumps(record, default=_json_default, allow_nan=False) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self):
        self._f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _json_default(obj):
    if isinstance(obj, Path):
        return str(obj)
    return str(obj)


def clean_floats(d):
    """JSON has no NaN/inf: replace them with None (rel_err of a NaN output is recorded as null)."""
    if isinstance(d, float):
        return d if math.isfinite(d) else None
    if isinstance(d, dict):
        return {k: clean_floats(v) for k, v in d.items()}
    if isinstance(d, (list, tuple)):
        return [clean_floats(v) for v in d]
    return d


@dataclass
class Results:
    path: Path | None
    meta: dict = field(default_factory=dict)
    ceilings: Ceilings | None = None
    launch: list[dict] = field(default_factory=list)
    results: list[dict] = field(default_factory=list)  # last record per key wins
    started: list[tuple] = field(default_factory=list)  # keys started but never finished
    bad_lines: int = 0
    _index: dict | None = field(default=None, repr=False)

    @property
    def is_fixture(self) -> bool:
        return bool(self.meta.get("fixture"))

    @property
    def cpu_only(self) -> bool:
        return bool(self.meta.get("cpu_only"))

    def by_key(self) -> dict[tuple, dict]:
        if self._index is None or len(self._index) != len(self.results):
            self._index = {key_of(r): r for r in self.results}
        return self._index

    def backends(self) -> list[str]:
        """Backends with at least one result, in the registry order recorded in the meta line."""
        have = {r["backend"] for r in self.results}
        order = [b for b in self.meta.get("backends", {}) if b in have]
        for r in self.results:
            if r["backend"] not in order:
                order.append(r["backend"])
        return order

    def ops(self) -> list[str]:
        out = []
        for r in self.results:
            if r["op"] not in out:
                out.append(r["op"])
        return out

    def pct_of_datasheet(self, rec: dict) -> float | None:
        """% of the datasheet dense peak of a compute-bound ok result (computed for old files too)."""
        if rec.get("status") != "ok" or rec.get("bound") != "compute" or self.cpu_only:
            return None
        if rec.get("pct_of_datasheet") is not None:
            return rec["pct_of_datasheet"]
        sheet = self.ceilings.datasheet(rec["dtype"]) if self.ceilings else None
        return 100.0 * rec["tflops"] / sheet if sheet and rec.get("tflops") else None

    def role(self, backend: str) -> str:
        return role_from_meta(backend, self.meta.get("backends", {}).get(backend))

    def is_reference(self, backend: str) -> bool:
        """torch and the peers: what our backends are compared with."""
        return self.role(backend) in REFERENCE_ROLES

    def best_peer(self, op: str, dtype: str, case: str, among=None) -> dict | None:
        """The fastest ok result among torch and the peers on one case (never one of ours); `among`: only
        these backends (e.g. a target's named references)."""
        cands = [r for r in self.results if r["op"] == op and r["dtype"] == dtype and r["case"] == case
                 and r["status"] == "ok" and r.get("timing") and not r.get("sweep")
                 and self.is_reference(r["backend"]) and (among is None or r["backend"] in among)]
        return min(cands, key=lambda r: r["timing"]["median_ms"]) if cands else None

    def vs_best_peer(self, rec: dict) -> tuple[float, bool, str] | None:
        """(best peer's median / this median, tie, best peer's name): > 1 is faster than the best peer;
        tie = the two p20-p80 spreads overlap. None when either is not timed."""
        if rec.get("status") != "ok" or not rec.get("timing"):
            return None
        best = self.best_peer(rec["op"], rec["dtype"], rec["case"])
        if best is None:
            return None
        ratio = best["timing"]["median_ms"] / rec["timing"]["median_ms"]
        return ratio, spreads_overlap(best["timing"], rec["timing"]), best["backend"]

    def speedup(self, rec: dict) -> float | None:
        """median(torch) / median(this) on the same op, dtype and case; None without both timed."""
        if rec.get("status") != "ok":
            return None
        base = self.by_key().get(("torch", rec["op"], rec["dtype"], rec["case"]))
        if not base or base.get("status") != "ok":
            return None
        return base["timing"]["median_ms"] / rec["timing"]["median_ms"]


def load(path: str | os.PathLike) -> Results:
    """Read a results file; tolerates a truncated last line (crash) and counts unreadable lines."""
    path = resolve_results_path(path)
    res = Results(path)
    latest: dict[tuple, dict] = {}
    started: dict[tuple, bool] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                res.bad_lines += 1
                continue
            kind = rec.get("type")
            if kind == "meta":
                if not res.meta:
                    res.meta = rec
                    if rec.get("schema", SCHEMA) > SCHEMA:
                        raise ValueError(f"{path}: schema {rec['schema']} is newer than this tilerosetta ({SCHEMA})")
            elif kind == "ceilings":
                res.ceilings = Ceilings.from_json(rec, (res.meta.get("gpu") or {}).get("name"))
            elif kind == "launch":
                res.launch.append(rec)
            elif kind == "start":
                started[key_of(rec)] = True
            elif kind == "result":
                latest[key_of(rec)] = rec
                started.pop(key_of(rec), None)
    res.results = list(latest.values())
    res.started = list(started)
    return res
