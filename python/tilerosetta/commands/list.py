"""`tilerosetta list`: backends x ops, what each backend's state is on this machine, and why."""

from __future__ import annotations

from tilerosetta.console import make_console
from rich.table import Table

from tilerosetta import backends
from tilerosetta.specs import OP_NAMES

# One word per backend state (Backend.state()); the legend printed under the table explains them.
STATE_STYLE = {"runs": "green", "built": "yellow", "not built": "magenta", "unavailable": "red"}
LEGEND = {
    "runs": "available on this machine: its ops run here",
    "built": "compiled/installed here, but cannot run on this machine (reason beside its name)",
    "not built": "could be built here and is not: the reason names the make target",
    "unavailable": "can be neither built nor run here (reason beside its name)",
    "missing": "the backend does not implement this op (reason below)",
}


def listing() -> tuple[Table, list[tuple[str, str]]]:
    table = Table(title="TileRosetta backends x ops", show_lines=False)
    table.add_column("backend")
    table.add_column("language")
    table.add_column("state")
    for op in OP_NAMES:
        table.add_column(op, justify="center")
    notes = []
    for b in backends.all_backends():
        _ok, reason = b.is_available()
        state = b.state()
        style = STATE_STYLE[state]
        impls = b.implementations()
        missing = b.missing()
        gaps = {op: missing.get(op, "not implemented") for op in OP_NAMES if op not in impls}
        # A backend that is not built (or cannot be) does not know its ops yet: its state says it all.
        unknown = not impls and state in ("not built", "unavailable")
        cells = [f"[{style}]{state}[/]" if op in impls or unknown else "[red]missing[/]" for op in OP_NAMES]
        table.add_row(b.name + (" (peer)" if getattr(b, "peer", None) else ""), b.language, f"[{style}]{state}[/]", *cells)
        notes.append((b.name, f"{state}: {reason}"))
        if unknown:
            continue
        if gaps and len(set(gaps.values())) == 1 and len(gaps) > 1:
            notes.append((f"{b.name} ({len(gaps)} ops)", f"missing: {next(iter(gaps.values()))}"))
        else:
            notes += [(f"{b.name}.{op}", f"missing: {why}") for op, why in gaps.items()]
    return table, notes


def limits_table() -> Table:
    """`list --limits`: the sizes each backend accepts per op (element limits, grid limits), issue 16."""
    table = Table(title="TileRosetta size limits (backend x op)", show_lines=False)
    table.add_column("backend")
    table.add_column("op")
    table.add_column("limit")
    for b in backends.all_backends():
        for op in OP_NAMES:
            table.add_row(b.name, op, b.limits(op))
    return table


def run(args) -> int:
    console = make_console(min_width=200)
    if getattr(args, "limits", False):
        console.print(limits_table())
        return 0
    table, notes = listing()
    console.print(table)
    for who, why in notes:
        console.print(f"  [bold]{who}[/]: {why}", highlight=False)
    console.print("legend: " + "; ".join(f"[{STATE_STYLE.get(k, 'red')}]{k}[/] = {v}" for k, v in LEGEND.items()),
                  highlight=False)
    return 0


def register(sub):
    p = sub.add_parser("list", help="backends x ops: state on this machine (runs/built/not built/unavailable) and why")
    p.add_argument("--limits", action="store_true", help="the size limits of every backend x op instead")
    p.set_defaults(func=run)
