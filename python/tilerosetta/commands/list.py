"""`tilerosetta list`: backends x ops, with availability and the reason for every gap."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from tilerosetta import backends
from tilerosetta.specs import OP_NAMES


def listing() -> tuple[Table, list[tuple[str, str]]]:
    table = Table(title="TileRosetta backends x ops", show_lines=False)
    table.add_column("backend")
    table.add_column("language")
    table.add_column("available")
    for op in OP_NAMES:
        table.add_column(op, justify="center")
    notes = []
    for b in backends.all_backends():
        ok, reason = b.is_available()
        impls = b.implementations()
        missing = b.missing()
        cells = []
        gaps = {op: missing.get(op, "not implemented") for op in OP_NAMES if op not in impls}
        for op in OP_NAMES:
            cells.append(("[green]yes[/]" if ok else "[yellow]built[/]") if op in impls else "[red]missing[/]")
        if gaps and len(set(gaps.values())) == 1 and len(gaps) > 1:
            notes.append((f"{b.name} ({len(gaps)} ops)", f"missing: {next(iter(gaps.values()))}"))
        else:
            notes += [(f"{b.name}.{op}", f"missing: {why}") for op, why in gaps.items()]
        table.add_row(b.name + (" (peer)" if getattr(b, "peer", None) else ""), b.language, ("[green]yes[/]" if ok else "[red]no[/]"), *cells)
        notes.insert(0, (b.name, reason)) if not ok else notes.append((b.name, reason))
    return table, notes


def run(args) -> int:
    console = Console(width=max(200, Console().width))
    table, notes = listing()
    console.print(table)
    for who, why in notes:
        console.print(f"  [bold]{who}[/]: {why}", highlight=False)
    return 0


def register(sub):
    p = sub.add_parser("list", help="backends x ops with availability and reasons")
    p.set_defaults(func=run)
