"""`tilerosetta report RESULTS`: Markdown + one self-contained HTML page (plots as base64 PNG).

Contents: headline table (per op, dtype and size: our best backend, the best peer, every backend's ratio
to the best peer with ties marked), a per-op overview (op x backend: % of ceiling, ratio), per-op grouped bars
(TFLOP/s or GB/s by backend), a backend x op heatmap of % of roofline, a roofline chart, first-call
(compile) and launch-overhead tables, every result, problems, and the environment of the run.

The report is built once as a list of blocks (paragraph, table, image) and rendered twice, so the
Markdown and the HTML always say the same thing.
"""

from __future__ import annotations

import base64
import html
import io
import math
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib.figure import Figure

from tilerosetta.bench.results import Results, load, newest_in, ratio_text
from tilerosetta.bench.runner import fmt_ms

HEADLINE_DTYPE = "bf16"
BAD = ("wrong", "error", "crashed")


@dataclass
class Block:
    kind: str  # "p", "table", "img", "pre"
    text: str = ""
    header: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    name: str = ""  # image file name
    png: bytes = b""


@dataclass
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)


# ---- numbers -------------------------------------------------------------------------------------
def geomean(values) -> float | None:
    v = [x for x in values if x is not None and x > 0]
    return math.exp(statistics.fmean(math.log(x) for x in v)) if v else None


def cell_stats(res: Results, op: str, backend: str, dtype: str) -> dict:
    """Aggregate of one op x backend at one dtype over its bench sizes (geometric means): % of ceiling and
    ratio to the best peer of each case, with how many of those cases are ties (spreads overlap)."""
    recs = [r for r in res.results if r["op"] == op and r["backend"] == backend and r["dtype"] == dtype
            and r.get("headline", True)]  # a non-headline input distribution (softmax x30) is not aggregated
    ok = [r for r in recs if r["status"] == "ok"]
    vs = [v for v in (res.vs_best_peer(r) for r in ok) if v is not None]
    return {"n": len(recs), "ok": len(ok), "bad": sorted({r["status"] for r in recs if r["status"] in BAD}),
            "missing": all(r["status"] in ("missing", "unsupported", "skipped") for r in recs) if recs else True,
            "pct": geomean(r.get("pct_of_ceiling") for r in ok),
            "vs_peer": geomean(v[0] for v in vs), "cases_vs": len(vs), "ties": sum(v[1] for v in vs)}


def headline_dtype(res: Results, op: str, preferred: str = HEADLINE_DTYPE) -> str:
    dts = [r["dtype"] for r in res.results if r["op"] == op]
    return preferred if preferred in dts else (dts[0] if dts else preferred)


def peer_of(res: Results, backend: str) -> str | None:
    """'NVIDIA TileGym 1.5.1' for a peer backend (someone else's kernels shown beside ours), else None."""
    return (res.meta.get("backends", {}).get(backend) or {}).get("peer")


def backend_label(res: Results, backend: str) -> str:
    peer = peer_of(res, backend)
    return f"{backend} — peer ({peer})" if peer else backend


def short_label(res: Results, backend: str) -> str:
    """Column header: the name, with its role when it is not one of ours."""
    role = res.role(backend)
    return backend if role == "ours" else f"{backend} ({role})"


def ordered_backends(res: Results) -> list[str]:
    """Ours first, then torch and the peers (registry order within each)."""
    bs = res.backends()
    return [b for b in bs if not res.is_reference(b)] + [b for b in bs if res.is_reference(b)]


def peer_notes(res: Results) -> dict[tuple[str, str], str]:
    """(backend, op) -> note, for ok results whose timed call holds more than the backend's kernel."""
    return {(r["backend"], r["op"]): r["note"] for r in res.results if r["status"] == "ok" and r.get("note")}


def _bad_text(statuses) -> str:
    return "/".join(x.upper() for x in statuses)


def main_rows(res: Results, dtypes: str | None = None, pct: bool = True):
    """The headline: per op, dtype and size, our best backend, the best peer (torch or a peer, never one of
    ours) and every backend's ratio to that best peer (> 1 = faster), ties marked. dtypes: None = every
    dtype; else the preferred dtype per op (the op's first dtype where it lacks it)."""
    backends = ordered_backends(res)
    notes = peer_notes(res)
    cases: list[tuple[str, str, str]] = []
    for r in res.results:
        k = (r["op"], r["dtype"], r["case"])
        if k not in cases and not r.get("sweep"):
            cases.append(k)
    if dtypes is not None:
        cases = [k for k in cases if k[1] == headline_dtype(res, k[0], dtypes)]
    index = res.by_key()
    rows = []
    for op, dt, case in cases:
        recs = {b: index.get((b, op, dt, case)) for b in backends}
        best_peer = res.best_peer(op, dt, case)
        ours = [r for b, r in recs.items() if r and r["status"] == "ok" and not res.is_reference(b)]
        best_ours = min(ours, key=lambda r: r["timing"]["median_ms"]) if ours else None
        line = [op, dt, case]
        if best_ours is not None:
            v = res.vs_best_peer(best_ours)
            line.append(f"{best_ours['backend']} " + (ratio_text(v[0], v[1]) if v else
                                                         _f(best_ours.get("pct_of_ceiling"), 0, "%")))
        else:
            line.append("-")
        peer_pct = best_peer.get("pct_of_ceiling") if best_peer else None
        line.append("-" if best_peer is None else
                    best_peer["backend"] + (f" {peer_pct:.0f}%" if peer_pct is not None else ""))
        for b in backends:
            r = recs[b]
            if r is None or r["status"] in ("missing", "unsupported", "skipped"):
                line.append("-")
            elif r["status"] != "ok":
                line.append(_bad_text([r["status"]]))
            else:
                v = res.vs_best_peer(r)
                parts = ["best peer" if r is best_peer else ratio_text(v[0], v[1])] if v else []
                if pct and r.get("pct_of_ceiling") is not None:
                    ds = res.pct_of_datasheet(r)
                    parts.append(f"{r['pct_of_ceiling']:.0f}%" + (f"/{ds:.0f}%ds" if ds is not None else ""))
                if (b, op) in notes:
                    parts.append("†")
                line.append(" ".join(parts) or "ok")
        rows.append(line)
    header = ["op", "dtype", "size", "best of ours", "best peer", *(short_label(res, b) for b in backends)]
    return header, rows


def headline(res: Results, preferred: str = HEADLINE_DTYPE) -> tuple[list[str], list[list[str]]]:
    """Per-op overview at the preferred dtype: geometric mean over sizes of % of ceiling and of the ratio
    to each case's best peer; '(k/n tie)' counts the sizes whose difference is inside the noise."""
    backends = ordered_backends(res)
    notes = peer_notes(res)
    rows = []
    for op in res.ops():
        dt = headline_dtype(res, op, preferred)
        line = [op, dt]
        for b in backends:
            s = cell_stats(res, op, b, dt)
            if s["ok"]:
                parts = []
                if s["pct"] is not None:
                    parts.append(f"{s['pct']:.0f}%")
                if s["vs_peer"] is not None:
                    all_tie = s["ties"] == s["cases_vs"]
                    parts.append(ratio_text(s["vs_peer"], all_tie))
                    if s["ties"] and not all_tie:
                        parts.append(f"({s['ties']}/{s['cases_vs']} tie)")
                if s["bad"]:
                    parts.append("(some " + "/".join(s["bad"]) + ")")
                if (b, op) in notes:
                    parts.append("†")
                line.append(" ".join(parts) or "ok")
            elif s["bad"]:
                line.append(_bad_text(s["bad"]))
            else:
                line.append("-")
        rows.append(line)
    return ["op", "dtype", *(short_label(res, b) for b in backends)], rows


def readme_table(res: Results, preferred: str = HEADLINE_DTYPE) -> str:
    """The Markdown table the README pastes: the headline (main_rows) at the preferred dtype."""
    header, rows = main_rows(res, preferred)
    return "\n".join(["| " + " | ".join(_md_cell(h) for h in header) + " |", "|" + "---|" * len(header),
                      *("| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows)])


README_START = "<!-- tilerosetta:bench-table:start (tilerosetta report RESULTS --readme rewrites this) -->"
README_END = "<!-- tilerosetta:bench-table:end -->"


def rewrite_readme(readme: Path, table: str) -> None:
    """Replace what lies between the two marker comments of `readme` with `table`."""
    text = Path(readme).read_text(encoding="utf-8")
    i, j = text.find(README_START), text.find(README_END)
    if i < 0 or j < i:
        raise ValueError(f"{readme}: no '{README_START}' ... '{README_END}' marker pair to rewrite between")
    Path(readme).write_text(text[:i + len(README_START)] + "\n" + table.rstrip("\n") + "\n" + text[j:],
                            encoding="utf-8")


def peer_blocks(res: Results) -> list[Block]:
    """What the peer columns are, and the footnotes (†) of the headline table."""
    peers = [(b, peer_of(res, b)) for b in res.backends() if peer_of(res, b)]
    if not peers:
        return []
    out = [Block("p", "Peers: " + "; ".join(f"{b} = {p}" for b, p in peers) + ": someone else's kernels, called "
                      "through their own API and timed exactly like ours, for comparison; not TileRosetta "
                      "implementations; their first calls include their own autotuning, if any. Ops they lack are listed under Problems and gaps.")]
    notes = peer_notes(res)
    if notes:
        out.append(Block("p", "† the timed call includes more than the peer's kernel: " + "; ".join(
            f"{b}.{op}: {n}" for (b, op), n in sorted(notes.items()))))
    return out


def pct_matrix(res: Results, preferred: str = HEADLINE_DTYPE):
    backends, ops = res.backends(), res.ops()
    data = [[cell_stats(res, op, b, headline_dtype(res, op, preferred))["pct"] for op in ops] for b in backends]
    return backends, ops, data


# ---- plots --------------------------------------------------------------------------------------
def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return buf.getvalue()


def _colors(backends):
    palette = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c"]
    return {b: palette[i % len(palette)] for i, b in enumerate(backends)}


def op_bars(res: Results, op: str) -> bytes:
    recs = [r for r in res.results if r["op"] == op]
    groups = []
    for r in recs:
        g = (r["dtype"], r["case"])
        if g not in groups:
            groups.append(g)
    backends = [b for b in res.backends() if any(r["backend"] == b for r in recs)]
    compute = recs[0].get("bound") == "compute" if recs else False
    metric, unit = ("tflops", "TFLOP/s") if compute else ("gbps", "GB/s")
    colors = _colors(res.backends())
    fig = Figure(figsize=(min(14, max(6, 0.65 * len(groups) * max(1, len(backends)))), 3.8))
    ax = fig.subplots()
    width = 0.8 / max(1, len(backends))
    index = {(r["dtype"], r["case"], r["backend"]): r for r in recs}
    for j, b in enumerate(backends):
        xs, ys = [], []
        for i, g in enumerate(groups):
            r = index.get((*g, b))
            x = i - 0.4 + width * (j + 0.5)
            if r and r["status"] == "ok" and r.get(metric) is not None:
                xs.append(x)
                ys.append(r[metric])
            elif r and r["status"] in BAD:
                ax.text(x, 0, r["status"], rotation=90, color="#c44e52", fontsize=7, ha="center", va="bottom")
        ax.bar(xs, ys, width, label=b, color=colors[b])
    if res.ceilings and not res.cpu_only:
        styles = iter(["--", ":", "-.", (0, (5, 1))])
        if compute:
            for dt in sorted({g[0] for g in groups}):
                kind, val = res.ceilings.for_result("compute", dt)
                ax.axhline(val, ls=next(styles), lw=0.9, color="#444",
                           label=f"ceiling: measured GEMM peak {kind.split(':')[1]} {val:.0f}")
                sheet = res.ceilings.datasheet(dt)
                if sheet:
                    ax.axhline(sheet, ls=next(styles), lw=0.9, color="#a33",
                               label=f"datasheet {dt} {sheet:.0f}")
        else:
            ax.axhline(res.ceilings.copy_gbps, ls="--", lw=0.9, color="#444",
                       label=f"ceiling: copy {res.ceilings.copy_gbps:.0f}")
    ax.set_xticks(range(len(groups)), [f"{d}\n{c}" for d, c in groups], fontsize=7)
    ax.set_ylabel(unit)
    ax.set_title(f"{op} ({'compute' if compute else 'memory'}-bound): {unit} by backend, higher is better")
    ax.legend(fontsize=7, ncols=min(8, len(backends) + 3), loc="upper left", bbox_to_anchor=(0, -0.18))
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def heatmap(res: Results, preferred: str = HEADLINE_DTYPE) -> bytes:
    backends, ops, data = pct_matrix(res, preferred)
    fig = Figure(figsize=(1.0 + 0.9 * len(ops), 0.8 + 0.45 * len(backends)))
    ax = fig.subplots()
    values = [[(v if v is not None else float("nan")) for v in row] for row in data]
    im = ax.imshow(values, cmap="viridis", vmin=0, vmax=100, aspect="auto")
    for i, row in enumerate(data):
        for j, v in enumerate(row):
            ax.text(j, i, "-" if v is None else f"{v:.0f}", ha="center", va="center", fontsize=8,
                    color="white" if v is None or v < 60 else "black")
    ax.set_xticks(range(len(ops)), ops, rotation=35, ha="right", fontsize=8)
    ax.set_yticks(range(len(backends)), backends, fontsize=8)
    ax.set_title(f"% of roofline ceiling ({preferred} where the op has it; geometric mean over sizes)", fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.03)
    return _png(fig)


def roofline(res: Results, dtype: str = HEADLINE_DTYPE) -> bytes | None:
    if not res.ceilings:
        return None
    pts = [r for r in res.results if r["status"] == "ok" and r.get("flops") and r.get("bytes")]
    if not pts:
        return None
    bw = res.ceilings.copy_gbps / 1e3  # TB/s
    peak = res.ceilings.mm_tflops.get(dtype) or max(res.ceilings.mm_tflops.values())
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    ais = [r["flops"] / r["bytes"] for r in pts]
    lo, hi = min(ais + [peak / bw]) / 4, max(ais + [peak / bw]) * 4
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(xs, [min(peak, x * bw) for x in xs], color="#222", lw=1.2,
            label=f"roof: copy {bw * 1e3:.0f} GB/s, measured GEMM peak {dtype} {peak:.0f} TFLOP/s")
    colors = _colors(res.backends())
    markers = "osD^v<>phX*"
    ops = res.ops()
    for b in res.backends():
        for k, op in enumerate(ops):
            sel = [r for r in pts if r["backend"] == b and r["op"] == op]
            if sel:
                ax.scatter([r["flops"] / r["bytes"] for r in sel], [r["tflops"] for r in sel], s=22,
                           color=colors[b], marker=markers[k % len(markers)], alpha=0.85)
    for b in res.backends():
        if any(r["backend"] == b for r in pts):
            ax.scatter([], [], color=colors[b], label=b)
    for k, op in enumerate(ops):
        if any(r["op"] == op for r in pts):
            ax.scatter([], [], color="#888", marker=markers[k % len(markers)], label=op)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte moved)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title("Roofline (every timed result; ops without FLOPs, e.g. transpose, are not shown)", fontsize=9)
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.grid(True, which="both", alpha=0.2)
    return _png(fig)


# ---- tables ---------------------------------------------------------------------------------------
def _f(v, digits=1, suffix=""):
    return "-" if v is None else f"{v:.{digits}f}{suffix}"


def compile_table(res: Results):
    rows = []
    for b in res.backends():
        for op in res.ops():
            sel = [r for r in res.results if r["backend"] == b and r["op"] == op and r.get("first_call_ms")]
            if not sel:
                continue
            first = [r["first_call_ms"] for r in sel]
            warm = [r["warm_call_ms"] for r in sel if r.get("warm_call_ms") is not None]
            rows.append([b, op, str(len(sel)), _f(statistics.median(first), 1), _f(max(first), 1),
                         _f(statistics.median(warm), 3) if warm else "-"])
    return ["backend", "op", "cases", "first call ms (median)", "first call ms (max)", "warm call ms (median)"], rows


def launch_table(res: Results):
    """Host µs per call, and the validated call as a ratio to torch's (issue 14 item 7: target within 2x)."""
    torch_us = next((r["bound_us"] for r in res.launch if r["backend"] == "torch" and r.get("status") == "ok"), None)
    rows = []
    for r in res.launch:
        if r.get("status") == "ok":
            ratio = r["bound_us"] / torch_us if torch_us else None
            rows.append([r["backend"], f"{r['op']} {r.get('dtype', '')} {r['case']}", _f(r["bound_us"], 1),
                         _f(r["raw_us"], 1), _f(r["bound_us"] - r["raw_us"], 1),
                         "-" if ratio is None else f"{ratio:.2f}x" + ("" if ratio <= 2.0 else " (over 2x)")])
        else:
            rows.append([r["backend"], r["op"], r.get("status", "?"), r.get("message", "")[:80], "", ""])
    return ["backend", "case", "BoundOp µs/call", "raw fn µs/call", "validation µs", "BoundOp / torch's"], rows


CALL_NOTE = ("call: the calling convention timed. 'returns' = y = fn(x, ...) as the baseline's or peer's users "
             "call it, allocating its own output (inside the CUDA graph); 'destination' = fn(x, ..., out) "
             "writing into a buffer we allocated (our backends, and ops a library itself takes an out= for).")


def distribution_notes(res: Results) -> list[Block]:
    """Which input distribution is each op's headline, for ops also timed on another one (softmax)."""
    other: dict[str, set] = {}
    head: dict[str, str] = {}
    for r in res.results:
        if "distribution" in r:
            (head.__setitem__(r["op"], r["distribution"]) if r.get("headline", True)
             else other.setdefault(r["op"], set()).add(r["distribution"]))
    if not other:
        return []
    return [Block("p", "Input distributions: " + "; ".join(
        f"{op}: headline on {head.get(op, '?')} inputs; also timed on {', '.join(sorted(d))} (cases named "
        f"..._{'/'.join(sorted(d))}, in the table below only, not in the headline aggregates)" for op, d in other.items()))]


def results_table(res: Results):
    rows = []
    for r in sorted(res.results, key=lambda r: (res.ops().index(r["op"]), r["dtype"], r["case"],
                                                res.backends().index(r["backend"]))):
        if r["status"] in ("missing", "unsupported"):
            continue
        t = r.get("timing") or {}
        v = res.vs_best_peer(r)
        rows.append([r["op"], r["dtype"], r["case"], short_label(res, r["backend"]),
                     r["status"] + (" (suspect)" if r.get("suspect") else ""),
                     r.get("method", "-"), r.get("convention", "-"), fmt_ms(t.get("median_ms")),
                     f"{fmt_ms(t.get('p20_ms'))} – {fmt_ms(t.get('p80_ms'))}" if t else "-",
                     _f((r.get("eager") or {}).get("wall_us"), 1), _f(r.get("tflops"), 1), _f(r.get("gbps"), 0),
                     _f(r.get("pct_of_ceiling"), 0, "%"),
                     _f(res.pct_of_datasheet(r), 0, "%"),
                     f"{ratio_text(v[0], v[1])} vs {v[2]}" if v else "-", _config_text(r.get("config"))])
    return ["op", "dtype", "case", "backend", "status", "method", "call", "median", "p20 – p80", "eager µs/call",
            "TFLOP/s", "GB/s",
            "% ceiling", "% datasheet", "vs best peer", "config"], rows


def _config_text(cfg) -> str:
    if not cfg:
        return "-"
    return ", ".join(f"{k}={v}" for k, v in cfg.items())


def problems(res: Results) -> list[Block]:
    out = []
    bad = [r for r in res.results if r["status"] in BAD]
    if bad:
        out.append(Block("table", header=["backend", "op", "dtype", "case", "status", "message"],
                         rows=[[r["backend"], r["op"], r["dtype"], r["case"], r["status"],
                                r.get("message", "")[:300]] for r in bad]))
    else:
        out.append(Block("p", "No wrong, failing or crashed case."))
    suspect = [r for r in res.results if r.get("suspect")]
    if suspect:
        out.append(Block("p", "Suspiciously fast (above the measured ceiling): " + "; ".join(
            f"{r['backend']}.{r['op']} {r['dtype']} {r['case']}: {r['suspect']}" for r in suspect)))
    gaps: dict[str, dict[str, list[str]]] = {}
    for r in res.results:
        if r["status"] in ("missing", "unsupported"):
            gaps.setdefault(r["backend"], {}).setdefault(r.get("message", r["status"]), []).append(
                f"{r['op']}/{r['dtype']}")
    for b, reasons in gaps.items():
        for why, which in reasons.items():
            uniq = sorted(set(which))
            out.append(Block("p", f"{b}: not run for {len(uniq)} op/dtype pair(s) ({', '.join(uniq[:12])}"
                                  f"{' ...' if len(uniq) > 12 else ''}): {why}"))
    unavailable = [(n, b) for n, b in res.meta.get("backends", {}).items() if not b.get("available")]
    for n, b in unavailable:
        out.append(Block("p", f"{n} unavailable: {b.get('reason', '?')}"))
    return out


def method_notes(res: Results) -> list[Block]:
    counts: dict[str, int] = {}
    notes = []
    for r in res.results:
        if r["status"] == "ok":
            counts[r.get("method", "?")] = counts.get(r.get("method", "?"), 0) + 1
            note = (r.get("timing") or {}).get("note")
            if note:
                notes.append(f"{r['backend']}.{r['op']} {r['dtype']} {r['case']}: {note}")
    text = ("Timing: " + str(res.meta.get("timing", "")) + ". Methods used: " +
            ", ".join(f"{k}: {v} result(s)" for k, v in counts.items()) + ".")
    blocks = [Block("p", text + " 'eager µs/call': wall time per call of back-to-back eager calls (no graph, L2 "
                              "not flushed): at small sizes, the launch cost the graph median hides.")]
    if notes:
        blocks.append(Block("p", "Results not timed as a CUDA graph, and why: " + "; ".join(notes[:40])))
    return blocks


def environment_rows(res: Results):
    m = res.meta
    gpu = m.get("gpu", {})
    tc = m.get("toolchain", {})
    git = m.get("git", {})
    rows = [["GPU", f"{gpu.get('name', '?')} {gpu.get('arch') or ''}"],
            ["driver / driver CUDA", f"{gpu.get('driver', '?')} / {gpu.get('driver_cuda', '?')}"],
            ["torch CUDA runtime", str(m.get("cuda_runtime"))],
            ["tileiras / ptxas", f"{tc.get('tileiras')} / {tc.get('ptxas')}"],
            ["packages", ", ".join(f"{k} {v}" for k, v in m.get("packages", {}).items())],
            ["git commit", f"{git.get('commit', '?')}{' (dirty)' if git.get('dirty') else ''}"],
            ["date", str(m.get("date", "?"))],
            ["settings", ", ".join(f"{k}={v}" for k, v in m.get("settings", {}).items())]]
    for name, b in m.get("backends", {}).items():
        if b.get("available"):
            peer = f"peer ({b['peer']}); " if b.get("peer") else ""
            rows.append([f"backend {name}", peer + ", ".join(f"{k} {v}" for k, v in b.get("versions", {}).items())])
    if res.ceilings:
        c = res.ceilings
        rows.append(["ceilings", f"copy {c.copy_gbps:.0f} GB/s; {c.describe_compute()}"])
    return ["", ""], rows


# ---- assembly --------------------------------------------------------------------------------------
def scaling_section(scal: Results, colors_of: list[str]) -> Section:
    from tilerosetta.bench import scaling_report as sr

    sec = Section("How cost grows with size", [Block("p", (
        "From `tilerosetta bench --scaling` (sizes: each op's spec.scaling). Top: µs per call against the swept "
        "size, log-log; solid/dash-dot = CUDA-graph median (L2 flushed), dotted = eager per-call wall time "
        "(back-to-back calls, no graph: at small sizes this is the launch cost). Bottom: % of the ceiling. "
        "Circles = ours, squares = torch and peers.")),
        Block("p", sr.coverage_text(scal))])
    colors = _colors(colors_of)
    for op in sr.scaling_ops(scal):
        sec.blocks.append(Block("img", name=f"scaling_{op}.png", png=sr.figure(scal, op, colors, _png),
                                text=f"{op}: cost against size"))
    h, rows = sr.launch_rows(scal)
    sec.blocks += [Block("p", "Launch cost at each op's smallest size: graph median vs eager per call (wall: until "
                              "the GPU finished; host: CPU time to issue one call)."),
                   Block("table", header=h, rows=rows)]
    return sec


def targets_section(res: Results, dtype: str = HEADLINE_DTYPE) -> Section:
    """Issue 15's per-case targets (bench/targets.py): met, or the gap, by how much, and its cause
    (bench/gap_causes.toml) with the evidence and reproducer."""
    from tilerosetta.bench import targets

    causes = targets.load_causes()
    header, rows, counts = targets.table(res, dtype, causes)
    tally = ", ".join(f"{b} {m}/{n}" for b, (m, n) in counts.items() if n)
    used = {int(n) for row in rows for cell in row[2:] for n in re.findall(r"\[(\d+)\]$", cell)}
    missing = sum(cell.endswith("[no cause]") for row in rows for cell in row[2:])
    blocks = [
        Block("p", f"Per case at {dtype}: memory-bound cases (memory-bound ops, decode matmuls and attention) "
                   f"need >= {targets.COPY_TARGET_PCT:.0f}% of the measured copy bandwidth and at most "
                   f"{targets.PEER_SLACK_PCT:.0f} points below the best peer; matmul/bmm GEMMs >= 1.00x torch "
                   f"(cuBLAS); attention >= 1.00x the best of FlashAttention 4 and torch SDPA. A tie (p20-p80 "
                   f"spreads overlap) meets a ratio target. [n]: the gap's cause, in the table below "
                   f"(bench/gap_causes.toml). Met: {tally or 'nothing judged'}."
                   + (f" {missing} gaps have no cause yet." if missing else "")),
        Block("table", header=header, rows=rows)]
    if used:
        blocks += [Block("p", "Causes. upstream: the language or its compiler (report in docs/upstream/ with a "
                              "reproducer); ours: our kernel, launch or config; unknown: the compiled code does not "
                              "explain it yet."),
                   Block("table", header=["#", "backend", "op (cases)", "class", "what limits it", "evidence",
                                          "reproducer"], rows=targets.cause_rows(causes, used))]
    return Section("Targets", blocks)


def targets_markdown(runs: list[tuple[Results, str]]) -> str:
    """The targets section of every dtype of each run (its results and repo-relative path; the first is the
    headline run, e.g. bf16; a later one adds only the dtypes before it lack) as one Markdown page
    (bench/TARGETS.md)."""
    sections, seen = [], set()
    for res, _ in runs:
        for d in ("bf16", "fp16", "fp32"):
            if d not in seen and any(r["dtype"] == d for r in res.results):
                seen.add(d)
                sec = targets_section(res, d)
                sec.title = f"Targets at {d}"
                sections.append(sec)
    cmd = f"tilerosetta report {runs[0][1]} --targets bench/TARGETS.md" + "".join(
        f" --targets-with {src}" for _, src in runs[1:])
    head = (f"Generated by `{cmd}` from those H200 runs and bench/gap_causes.toml; do not edit by hand. "
            f"Runs: " + ", ".join(f"{src} ({res.meta.get('date', '?')})" for res, src in runs) + ".")
    return to_markdown("Issue 15 targets, per case and backend", [Section("Source", [Block("p", head)]), *sections])


def build(res: Results, preferred: str = HEADLINE_DTYPE, scal: Results | None = None,
          e2e=None) -> tuple[str, list[Section]]:
    gpu = res.meta.get("gpu", {}).get("name", "unknown GPU")
    title = f"TileRosetta benchmark: {gpu}"
    warn = []
    if res.is_fixture:
        warn.append(Block("p", "**FIXTURE**: hand-made sample data for tests and for rendering without a GPU. "
                               "These numbers are NOT measurements."))
    if res.cpu_only:
        warn.append(Block("p", "**CPU ONLY**: host wall-clock timings of CPU tensors. NOT comparable with GPU "
                               "results; no % of ceiling."))
    ceil_text = ""
    if res.ceilings and not res.cpu_only:
        ceil_text = (f" Ceilings: copy {res.ceilings.copy_gbps:.0f} GB/s for memory-bound ops; for compute-bound "
                     f"ops the {res.ceilings.describe_compute()}; % of ceiling is of the measured peak.")
    legend = ("Ratio = the best peer's median time / this backend's median on the same op, dtype and size "
              "(> 1: faster than the best peer). Peers = torch and the other libraries marked baseline/peer, "
              "never one of ours; the best peer is the fastest of them on that size. 'tie (1.01x)': the two "
              "results' p20–p80 spreads overlap, so the difference is inside the noise: neither wins. "
              "Then % of the ceiling; compute-bound: '83%/61%ds' = 83% of the measured GEMM peak, 61% of the "
              "datasheet peak. WRONG = disagreed with the reference (never timed); ERROR = raised; - = not run.")
    h_main, r_main = main_rows(res)
    h_over, r_over = headline(res, preferred)
    intro = Section("Summary", warn + [
        Block("p", "Headline: each of our backends against the best peer, per op, dtype and size; then "
                   "% of the ceiling." + ceil_text),
        Block("p", legend),
        Block("table", header=h_main, rows=r_main),
        *peer_blocks(res),
        Block("p", f"Per-op overview at {preferred} (the op's first dtype where it has no {preferred}): "
                   f"geometric mean over the op's sizes of % of ceiling and of the ratio to each size's best "
                   f"peer; '(k/n tie)' = k of the n sizes are ties."),
        Block("table", header=h_over, rows=r_over)])
    sections = [intro]
    if not res.cpu_only:
        sections.append(targets_section(res, preferred))
    if not res.cpu_only:
        sections.append(Section("% of roofline", [Block("img", name="heatmap.png", png=heatmap(res, preferred),
                                                        text="backend x op heatmap of % of ceiling")]))
        roof = roofline(res, preferred)
        if roof:
            sections.append(Section("Roofline", [Block("img", name="roofline.png", png=roof, text="roofline")]))
    per_op = Section("Per op")
    for op in res.ops():
        if any(r["op"] == op and r["status"] in ("ok",) + BAD for r in res.results):
            per_op.blocks.append(Block("img", name=f"op_{op}.png", png=op_bars(res, op), text=f"{op} by backend"))
    sections.append(per_op)
    if scal is not None:
        sections.append(scaling_section(scal, res.backends() + [b for b in scal.backends()
                                                                 if b not in res.backends()]))
    if e2e is not None:  # `report --e2e`: the end-to-end model section (bench/e2e_report.py)
        from tilerosetta.bench import e2e_report
        sections += e2e_report.sections(e2e)
    h, rows = compile_table(res)
    sections.append(Section("First call (compile) vs warm call", [
        Block("p", "Host wall time of one call up to its completion. The first call of a case in the process "
                   "includes JIT compilation / module loading; first minus warm approximates the compile cost."),
        Block("table", header=h, rows=rows)]))
    h, rows = launch_table(res)
    sections.append(Section("Launch overhead", [
        Block("p", "Host time per asynchronous call on a tiny problem (the GPU never holds the host back): through "
                   "the validating BoundOp and through the backend's raw function; the BoundOp's time as a ratio to "
                   "torch's BoundOp (target: within 2x, issue 14 item 7; `tilerosetta e2e` also reports it)."),
        Block("table", header=h, rows=rows)]))
    h, rows = results_table(res)
    sections.append(Section("All results", method_notes(res) + distribution_notes(res) +
                            [Block("p", CALL_NOTE), Block("table", header=h, rows=rows)]))
    sections.append(Section("Problems and gaps", problems(res)))
    h, rows = environment_rows(res)
    sections.append(Section("Environment", [Block("table", header=["item", "value"], rows=rows)]))
    return title, sections


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def to_markdown(title: str, sections: list[Section], image_dir: str = "plots") -> str:
    out = [f"# {title}", ""]
    for s in sections:
        out += [f"## {s.title}", ""]
        for b in s.blocks:
            if b.kind == "p":
                out += [b.text, ""]
            elif b.kind == "pre":
                out += ["```", b.text, "```", ""]
            elif b.kind == "img":
                out += [f"![{b.text}]({image_dir}/{b.name})", ""]
            elif b.kind == "table":
                out.append("| " + " | ".join(_md_cell(h) for h in b.header) + " |")
                out.append("|" + "---|" * len(b.header))
                out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b.rows]
                out.append("")
    return "\n".join(out)


CSS = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse;"
       "font-size:13px;margin:0.5em 0}td,th{border:1px solid #ccc;padding:3px 7px;text-align:left}"
       "th{background:#f2f2f2}td.bad{color:#b00;font-weight:bold}img{max-width:100%}.warn{background:#fee;"
       "padding:0.6em;border:1px solid #c00}")


def _html_text(text: str) -> str:
    t = html.escape(text)
    while "**" in t:  # the only Markdown the paragraphs use
        t = t.replace("**", "<b>", 1).replace("**", "</b>", 1)
    return t


def to_html(title: str, sections: list[Section]) -> str:
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
           f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>"]
    for s in sections:
        out.append(f"<h2>{html.escape(s.title)}</h2>")
        for b in s.blocks:
            if b.kind == "p":
                cls = " class='warn'" if b.text.startswith("**") else ""
                out.append(f"<p{cls}>{_html_text(b.text)}</p>")
            elif b.kind == "pre":
                out.append(f"<pre>{html.escape(b.text)}</pre>")
            elif b.kind == "img":
                data = base64.b64encode(b.png).decode("ascii")
                out.append(f"<img alt='{html.escape(b.text)}' src='data:image/png;base64,{data}'>")
            elif b.kind == "table":
                out.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in b.header) + "</tr>")
                for row in b.rows:
                    cells = []
                    for c in row:
                        bad = any(w in str(c) for w in ("WRONG", "ERROR", "CRASHED", "wrong", "error", "crashed"))
                        cells.append(f"<td{' class=bad' if bad else ''}>{html.escape(str(c))}</td>")
                    out.append("<tr>" + "".join(cells) + "</tr>")
                out.append("</table>")
    out.append("</body></html>")
    return "\n".join(out)


def load_scaling(arg) -> Results:
    """A `bench --scaling` file: a path, or a folder (its newest scaling-*.jsonl)."""
    p = Path(arg)
    if p.is_dir():
        p = newest_in(p, "scaling-*.jsonl", "tilerosetta bench --scaling")
    res = load(p)
    if not res.meta.get("scaling"):
        raise ValueError(f"{p} is not a `bench --scaling` results file (its meta line has no 'scaling')")
    return res


def default_out_dir(results_path: Path) -> Path:
    """Renders are regenerated from the results file, never committed: they go under build/reports/."""
    from tilerosetta.bench.results import REPORTS_DIR

    return REPORTS_DIR / f"{results_path.stem}-report"


def write(results_path, out_dir: Path | None = None, preferred: str = HEADLINE_DTYPE,
          scaling=None, e2e=None) -> dict[str, Path]:
    from tilerosetta.bench import e2e_report

    if Path(results_path).is_file() and e2e_report.is_e2e_file(results_path):  # an e2e file alone
        return e2e_report.write(results_path, out_dir)
    e2e = e2e_report.load_e2e(e2e) if e2e else None
    res = load(results_path)
    scal = load_scaling(scaling) if scaling else (res if res.meta.get("scaling") else None)
    out_dir = Path(out_dir) if out_dir else default_out_dir(res.path)
    title, sections = build(res, preferred, scal, e2e)
    plots = out_dir / "plots"
    plots.mkdir(parents=True, exist_ok=True)
    for s in sections:
        for b in s.blocks:
            if b.kind == "img":
                (plots / b.name).write_bytes(b.png)
    md = out_dir / "report.md"
    md.write_text(to_markdown(title, sections), encoding="utf-8")
    page = out_dir / "report.html"
    page.write_text(to_html(title, sections), encoding="utf-8")
    return {"markdown": md, "html": page, "plots": plots}
