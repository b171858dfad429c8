"""`tilerosetta compare OLD NEW`: which cases changed beyond noise between two results files.

A timed case is "slower" when new/old median > 1 + noise AND the spreads do not overlap (new p20 above
old p80), "faster" symmetrically; noise = max(--threshold (5%), each run's own (p80 - p20) / median).
A status change (ok -> wrong, error -> ok, ...) is always flagged. Cases in one file only are listed
as new / gone.
"""

from __future__ import annotations

from dataclasses import dataclass

from tilerosetta.bench.results import NOISE, Results, key_of

FLAGGED = ("slower", "faster", "status", "new", "gone")


@dataclass
class Change:
    key: tuple
    verdict: str  # same | slower | faster | status | new | gone
    old_ms: float | None = None
    new_ms: float | None = None
    old_status: str | None = None
    new_status: str | None = None

    @property
    def ratio(self) -> float | None:
        """new time / old time (> 1 is slower)."""
        if self.old_ms and self.new_ms:
            return self.new_ms / self.old_ms
        return None

    def row(self) -> list[str]:
        b, op, dt, case = self.key[:4]
        r = self.ratio
        return [op, dt, case, b, self.verdict, _ms(self.old_ms), _ms(self.new_ms),
                "-" if r is None else f"{(r - 1) * 100:+.1f}%", f"{self.old_status or '-'} -> {self.new_status or '-'}"]


def _ms(v):
    return "-" if v is None else f"{v:.4g} ms"


def _timed(rec):
    return rec is not None and rec.get("status") == "ok" and rec.get("timing")


def classify(old: dict | None, new: dict | None, threshold: float = NOISE) -> Change:
    key = key_of(new or old)
    if old is None:
        return Change(key, "new", new_status=new.get("status"))
    if new is None:
        return Change(key, "gone", old_status=old.get("status"))
    c = Change(key, "same", old_status=old["status"], new_status=new["status"])
    if old["status"] != new["status"]:
        c.verdict = "status"
    if not (_timed(old) and _timed(new)):
        return c
    to, tn = old["timing"], new["timing"]
    c.old_ms, c.new_ms = to["median_ms"], tn["median_ms"]
    spread = max((t["p80_ms"] - t["p20_ms"]) / t["median_ms"] for t in (to, tn))
    noise = max(threshold, spread)
    r = c.ratio
    if r > 1 + noise and tn["p20_ms"] > to["p80_ms"]:
        c.verdict = "slower"
    elif r < 1 / (1 + noise) and tn["p80_ms"] < to["p20_ms"]:
        c.verdict = "faster"
    return c


def compare(old: Results, new: Results, threshold: float = NOISE) -> list[Change]:
    a, b = old.by_key(), new.by_key()
    keys = list(a) + [k for k in b if k not in a]
    skip = ("missing", "unsupported", "skipped")
    out = []
    for k in keys:
        o, n = a.get(k), b.get(k)
        if (o is None or o["status"] in skip) and (n is None or n["status"] in skip):
            continue
        out.append(classify(o, n, threshold))
    return out


HEADER = ["op", "dtype", "case", "backend", "verdict", "old median", "new median", "change", "status"]
