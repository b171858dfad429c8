"""The one rich Console the commands print with. In a pipe or a log, rich would wrap every line at 80
columns; there, lines are written whole (soft wrap) and tables get a width that fits their columns."""

from __future__ import annotations

from rich.console import Console


def make_console(min_width: int = 80) -> Console:
    probe = Console()
    if probe.is_terminal:
        return Console(width=max(min_width, probe.width)) if min_width > probe.width else probe
    return Console(width=max(min_width, 200), soft_wrap=True)


def cli_name() -> str:
    """How this user runs the CLI: `tilerosetta` when that is on PATH, else the venv's `python -m tilerosetta`."""
    import os
    import shutil
    import sys

    on_path = shutil.which("tilerosetta")
    if on_path and os.path.dirname(os.path.realpath(on_path)) == os.path.dirname(os.path.realpath(sys.executable)):
        return "tilerosetta"
    exe = sys.executable
    try:
        rel = os.path.relpath(exe)
        exe = rel if not rel.startswith("..") else exe
    except ValueError:
        pass
    return f"{exe} -m tilerosetta"
