"""The one rich Console the commands print with. In a pipe or a log, rich would wrap every line at 80
columns; there, lines are written whole (soft wrap) and tables get a width that fits their columns."""

from __future__ import annotations

from rich.console import Console


def make_console(min_width: int = 80) -> Console:
    probe = Console()
    if probe.is_terminal:
        return Console(width=max(min_width, probe.width)) if min_width > probe.width else probe
    return Console(width=max(min_width, 200), soft_wrap=True)
