"""`tilerosetta compare OLD NEW`: per-case changes beyond noise between two results files."""

from __future__ import annotations

from tilerosetta.console import make_console
from rich.table import Table


def flush_kind(res) -> str:
    """How a run flushed the L2 between repetitions: runs before settings recorded it zeroed a buffer."""
    settings = res.meta.get("settings", {})
    return settings.get("flush_kind", "zero") if settings.get("flush", True) else "none"


def run(args) -> int:
    from tilerosetta.bench import compare as cmp
    from tilerosetta.bench.results import load

    console = make_console()
    try:
        old, new = load(args.old), load(args.new)
    except FileNotFoundError as exc:
        console.print(f"[red]tilerosetta compare:[/] {exc}", highlight=False)
        return 2
    changes = cmp.compare(old, new, args.threshold)
    for label, r in (("old", old), ("new", new)):
        gpu = r.meta.get("gpu", {}).get("name", "?")
        tag = " [FIXTURE]" if r.is_fixture else (" [CPU ONLY]" if r.cpu_only else "")
        console.print(f"{label}: {r.path} ({gpu}, {r.meta.get('date', '?')}, "
                      f"{r.meta.get('git', {}).get('commit', '?')[:10]}){tag}", highlight=False)
    if old.meta.get("gpu", {}).get("name") != new.meta.get("gpu", {}).get("name"):
        console.print("[yellow]the two files come from different GPUs[/]")
    kinds = [flush_kind(r) for r in (old, new)]
    if kinds[0] != kinds[1]:
        console.print(f"[yellow]the two files flushed the L2 differently (old: {kinds[0]}, new: {kinds[1]}): a "
                      f"zeroing flush charges its dirty lines' write-back to each timed call, so small memory-"
                      f"bound cases read slower in the old file for that reason alone[/]", highlight=False)
    # Real changes first (slower, faster, status), then cases present in one file only; new/gone are
    # only counted unless --all, so a few changes are never buried under rows of "gone".
    order = {"slower": 0, "status": 1, "faster": 2, "new": 3, "gone": 4, "same": 5}
    shown = sorted((c for c in changes if args.all or c.verdict in ("slower", "faster", "status")),
                   key=lambda c: order.get(c.verdict, 9))
    table = Table(title=f"changes beyond noise (threshold {args.threshold:.0%} or the runs' own p20-p80 spread)")
    colors = {"slower": "red", "faster": "green", "status": "yellow"}
    for h in cmp.HEADER:
        table.add_column(h)
    for c in shown:
        color = colors.get(c.verdict)
        table.add_row(*[f"[{color}]{x}[/]" if color else x for x in c.row()])
    console.print(table)
    counts = {}
    for c in changes:
        counts[c.verdict] = counts.get(c.verdict, 0) + 1
    console.print(", ".join(f"{k}: {v}" for k, v in sorted(counts.items(), key=lambda kv: order.get(kv[0], 9)))
                  or "no comparable cases", highlight=False)
    if not args.all and (counts.get("new") or counts.get("gone")):
        console.print("(cases in only one of the files are counted above; --all lists them)")
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as f:
            f.write("| " + " | ".join(cmp.HEADER) + " |\n|" + "---|" * len(cmp.HEADER) + "\n")
            for c in shown:
                f.write("| " + " | ".join(c.row()) + " |\n")
    bad = counts.get("slower", 0) + sum(1 for c in changes if c.verdict == "status" and c.new_status != "ok")
    return 1 if (args.fail_on_regression and bad) else 0


def register(sub):
    p = sub.add_parser("compare", help="per-case changes beyond noise between two results files")
    p.add_argument("old", help="results .jsonl (or a folder: its newest)")
    p.add_argument("new", help="results .jsonl (or a folder: its newest)")
    p.add_argument("--threshold", type=float, default=0.05, help="relative change treated as real (default 0.05)")
    p.add_argument("--all", action="store_true", help="list unchanged cases too")
    p.add_argument("--markdown", default="", help="also write the table to this Markdown file")
    p.add_argument("--fail-on-regression", action="store_true",
                   help="exit 1 if a case got slower or stopped being correct")
    p.set_defaults(func=run)
