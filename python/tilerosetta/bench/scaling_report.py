"""The report's "How cost grows with size" section, from a `bench --scaling` results file: one figure
per op (time log-log and % of ceiling against the swept size, every backend and peer, graph time beside
the eager per-call time) and a table of launch cost at the smallest sizes."""

from __future__ import annotations

from matplotlib.figure import Figure

from tilerosetta.bench.results import Results
from tilerosetta.specs import get_spec


def points(res: Results, op: str, sweep) -> dict[str, list[tuple[int, dict]]]:
    """backend -> [(swept value, ok record)] of one sweep, sorted by value."""
    out: dict[str, list] = {}
    for r in res.results:
        if r["op"] != op or r["status"] != "ok" or not r.get("timing"):
            continue
        v = sweep.matches(r.get("dims", {}), r.get("params"))
        if v is not None:
            out.setdefault(r["backend"], []).append((v, r))
    return {b: sorted(pts, key=lambda p: p[0]) for b, pts in out.items()}


def scaling_ops(res: Results) -> list[str]:
    return [op for op in res.ops() if get_spec(op).scaling and
            any(points(res, op, s) for s in get_spec(op).scaling)]


def figure(res: Results, op: str, colors: dict[str, str], png) -> bytes:
    sweeps = get_spec(op).scaling
    fig = Figure(figsize=(5.2 * len(sweeps) + 1.6, 6.4))
    axes = fig.subplots(2, len(sweeps), squeeze=False)
    shown = []
    for j, sweep in enumerate(sweeps):
        top, bottom = axes[0][j], axes[1][j]
        for b, pts in points(res, op, sweep).items():
            peer = res.is_reference(b)
            xs = [v for v, _ in pts]
            style = dict(color=colors.get(b, "#333"), marker="s" if peer else "o", ms=3.5,
                         ls="-." if peer else "-", lw=1.3)
            top.plot(xs, [r["timing"]["median_ms"] * 1e3 for _, r in pts], **style)
            eager = [(v, r["eager"]["wall_us"]) for v, r in pts if r.get("eager")]
            if eager:
                top.plot([v for v, _ in eager], [e for _, e in eager], color=style["color"], ls=":", lw=1.0,
                         alpha=0.8)
            pct = [(v, r["pct_of_ceiling"]) for v, r in pts if r.get("pct_of_ceiling") is not None]
            if pct:
                bottom.plot([v for v, _ in pct], [p for _, p in pct], **style)
            if b not in shown:
                shown.append(b)
        xlabel = "=".join(sweep.vary) + f"  ({sweep.name.split(' at ', 1)[1]})" if " at " in sweep.name \
            else "=".join(sweep.vary)
        for ax in (top, bottom):
            ax.set_xscale("log", base=2)
            ax.grid(True, which="both", alpha=0.2)
            ax.set_xlabel(xlabel, fontsize=8)
        if not any(line.get_xydata().size for line in bottom.get_lines()):
            bottom.text(0.5, 0.5, "no % of ceiling (CPU run, or no ceilings)", ha="center", va="center",
                        transform=bottom.transAxes, fontsize=8, color="#777")
        top.set_yscale("log")
        top.set_ylabel("µs per call (log)")
        bottom.set_ylabel("% of ceiling (graph time)")
        bottom.set_ylim(bottom=0)
    for b in shown:  # one legend: backends, then what the line styles mean
        peer = res.is_reference(b)
        axes[0][-1].plot([], [], color=colors.get(b, "#333"), marker="s" if peer else "o", ls="-." if peer else "-",
                         label=f"{b} ({res.role(b)})" if peer else b)
    axes[0][-1].plot([], [], color="#555", ls="-", label="CUDA-graph median")
    axes[0][-1].plot([], [], color="#555", ls=":", label="eager, per call (back-to-back)")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1))
    fig.suptitle(f"{op}: time and % of ceiling against size (log-log; lower time is better)", fontsize=10)
    return png(fig)


def _us(v) -> str:
    return "-" if v is None else (f"{v:.1f}" if v < 1000 else f"{v:.0f}")


def launch_rows(res: Results) -> tuple[list[str], list[list[str]]]:
    """At each op's smallest scaling size: graph median vs eager per-call wall and host time."""
    rows = []
    for op in scaling_ops(res):
        first = get_spec(op).scaling[0]
        smallest = None
        for b, pts in points(res, op, first).items():
            if pts and (smallest is None or pts[0][0] < smallest):
                smallest = pts[0][0]
        for b, pts in points(res, op, first).items():
            for v, r in pts:
                if v == smallest:
                    e = r.get("eager") or {}
                    rows.append([op, r["case"], b + (f" ({res.role(b)})" if res.is_reference(b) else ""),
                                 _us(r["timing"]["median_ms"] * 1e3), _us(e.get("wall_us")), _us(e.get("host_us"))])
    return ["op", "smallest size", "backend", "graph median µs", "eager µs/call (wall)",
            "eager µs/call (host)"], rows


def coverage_text(res: Results) -> str:
    skipped: dict[str, int] = {}
    for r in res.results:
        if r["status"] == "skipped":
            skipped[r["backend"]] = skipped.get(r["backend"], 0) + 1
    meta = res.meta.get("scaling") or {}
    text = (f"Scaling run: {meta.get('points', '?')} size point(s), budget {meta.get('budget_s', '?')} s, "
            f"settings {meta.get('settings', {})}.")
    if skipped:
        text += " Points not run (time budget): " + ", ".join(f"{b} {n}" for b, n in skipped.items()) + "."
    return text
