"""Issue 15's targets, judged per case and backend from one results file (`tilerosetta report` shows the table).

The targets (H200, every bench case):
  * memory-bound cases (the memory-bound ops, decode matmuls and decode attention): >= 90% of the measured
    copy bandwidth, and no more than 3 points of it below the best peer's;
  * matmul and bmm GEMMs: >= 1.00x torch.mm / torch.bmm (cuBLAS);
  * attention (compute-bound cases): >= 1.00x the best of FlashAttention 4 and torch SDPA (cuDNN, flash, and
    torch's own dispatch).
A result inside the reference's p20-p80 spread (a tie) meets a ratio target: the difference is noise. A gap
names what it misses by and the cause bench/gap_causes.toml gives for it (class, what limits it, evidence,
reproducer); the evidence in full is in bench/GAPS.md and docs/upstream/.
"""
from __future__ import annotations

import fnmatch
import tomllib
from dataclasses import dataclass
from pathlib import Path

from tilerosetta.bench.results import RESULTS_DIR, Results, spreads_overlap

COPY_TARGET_PCT = 90.0  # % of the measured copy bandwidth
PEER_SLACK_PCT = 3.0  # points of copy bandwidth a memory-bound result may trail the best peer by
GEMM_REFERENCES = ("torch",)  # cuBLAS, as torch users call it
ATTENTION_REFERENCES = ("fa4", "sdpa_cudnn", "sdpa_flash", "torch")
MET, GAP, NONE = "met", "gap", "-"
CAUSES = RESULTS_DIR.parent / "gap_causes.toml"
CLASSES = ("upstream", "ours", "unknown")


@dataclass(frozen=True)
class Cause:
    backends: tuple[str, ...]  # "*": every backend
    ops: tuple[str, ...]
    cases: tuple[str, ...]  # fnmatch patterns of case names
    klass: str
    cause: str
    where: str
    repro: str

    def covers(self, backend: str, op: str, case: str) -> bool:
        return ((backend in self.backends or "*" in self.backends) and op in self.ops
                and any(fnmatch.fnmatchcase(case, pat) for pat in self.cases))


def _names(v) -> tuple[str, ...]:
    return (v,) if isinstance(v, str) else tuple(v)


def load_causes(path: Path = CAUSES) -> list[Cause]:
    """The entries of bench/gap_causes.toml, in file order (the first that covers a gap is its cause)."""
    if not path.exists():
        return []
    out = []
    for i, g in enumerate(tomllib.loads(path.read_text()).get("gap", [])):
        missing = {"backend", "op", "class", "cause", "where"} - g.keys()
        if missing or g["class"] not in CLASSES:
            raise ValueError(f"{path.name} entry {i + 1} ({g.get('backend')}/{g.get('op')}): "
                             + (f"missing {sorted(missing)}" if missing else f"class must be one of {CLASSES}"))
        out.append(Cause(_names(g["backend"]), _names(g["op"]), _names(g.get("cases", "*")), g["class"],
                         g["cause"], g["where"], g.get("repro", "")))
    return out


def cause_of(causes: list[Cause], backend: str, op: str, case: str) -> Cause | None:
    return next((c for c in causes if c.covers(backend, op, case)), None)


def judge(res: Results, rec: dict) -> tuple[str, str]:
    """(MET | GAP | NONE, why) for one of our results against its case's target."""
    if rec.get("status") != "ok" or not rec.get("timing"):
        return NONE, rec.get("status", "not run")
    op, dt, case = rec["op"], rec["dtype"], rec["case"]
    if rec.get("bound") == "memory":
        pct = rec.get("pct_of_ceiling")
        peer = res.best_peer(op, dt, case)
        peer_pct = peer.get("pct_of_ceiling") if peer else None
        if pct is None:
            return NONE, "no % of copy bandwidth recorded"
        short = []
        if pct < COPY_TARGET_PCT:
            short.append(f"{pct:.1f}% < {COPY_TARGET_PCT:.0f}% of copy")
        if peer_pct is not None and pct < peer_pct - PEER_SLACK_PCT and not spreads_overlap(peer["timing"], rec["timing"]):
            short.append(f"{pct:.1f}% vs {peer['backend']} {peer_pct:.1f}%")
        return (GAP, "; ".join(short)) if short else (MET, f"{pct:.0f}% of copy")
    names = GEMM_REFERENCES if op in ("matmul", "bmm") else ATTENTION_REFERENCES if op == "attention" else None
    if names is None:  # a compute-bound op without a stated target
        return NONE, "no target for this op"
    ref = res.best_peer(op, dt, case, among=names)
    if ref is None:
        return NONE, f"no {'/'.join(names)} result to compare with"
    ratio = ref["timing"]["median_ms"] / rec["timing"]["median_ms"]
    if ratio >= 1.0 or spreads_overlap(ref["timing"], rec["timing"]):
        return MET, f"{ratio:.2f}x {ref['backend']}" + (" (tie)" if ratio < 1.0 else "")
    return GAP, f"{ratio:.2f}x {ref['backend']}"


def table(res: Results, dtype: str = "bf16", causes: list[Cause] | None = None
          ) -> tuple[list[str], list[list[str]], dict[str, tuple[int, int]]]:
    """(header, rows, {backend: (met, judged)}): one row per case of `dtype`, one column per backend of ours.
    With `causes`, a GAP cell ends with the number of its cause, `[n]` (1-based index into `causes`), or
    `[no cause]`."""
    ours = [b for b in res.backends() if not res.is_reference(b)]
    index = res.by_key()
    cases = []
    for r in res.results:
        k = (r["op"], r["dtype"], r["case"])
        if r["dtype"] == dtype and not r.get("sweep") and k not in cases:
            cases.append(k)
    rows, counts = [], {b: [0, 0] for b in ours}
    for op, dt, case in cases:
        line = [op, case]
        for b in ours:
            rec = index.get((b, op, dt, case))
            verdict, why = judge(res, rec) if rec else (NONE, "not run")
            if verdict != NONE:
                counts[b][1] += 1
                counts[b][0] += verdict == MET
            if verdict == GAP and causes is not None:
                c = cause_of(causes, b, op, case)
                why += f" [{causes.index(c) + 1}]" if c else " [no cause]"
            line.append(why if verdict == MET else f"GAP {why}" if verdict == GAP else "-")
        rows.append(line)
    return ["op", "size", *ours], rows, {b: (m, n) for b, (m, n) in counts.items()}


def gaps_without_cause(res: Results, causes: list[Cause], dtypes: tuple[str, ...] = ("bf16", "fp16")
                       ) -> list[tuple[str, str, str, str]]:
    """(backend, op, dtype, case) of every GAP of ours that no entry of `causes` covers."""
    out = []
    for r in res.results:
        if r["dtype"] in dtypes and not r.get("sweep") and not res.is_reference(r["backend"]):
            if judge(res, r)[0] == GAP and cause_of(causes, r["backend"], r["op"], r["case"]) is None:
                out.append((r["backend"], r["op"], r["dtype"], r["case"]))
    return out


def cause_rows(causes: list[Cause], used: set[int] | None = None) -> list[list[str]]:
    """One row per cause (number, backend, op, class, cause, evidence, reproducer); `used`: only those numbers."""
    return [[str(i), ", ".join(c.backends), ", ".join(c.ops) + ("" if c.cases == ("*",) else f" ({', '.join(c.cases)})"),
             c.klass, c.cause, c.where, c.repro]
            for i, c in enumerate(causes, 1) if used is None or i in used]
