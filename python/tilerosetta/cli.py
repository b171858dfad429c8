"""`tilerosetta` command line.

Each subcommand lives in tilerosetta/commands/<name>.py and exposes `register(subparsers)`."""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = ("list", "doctor", "test", "bench", "report", "compare", "compare-gpus", "sweep", "inspect", "e2e")
DESCRIPTION = ("One op set in several tile GPU languages (cuTile Python, CUDA Tile C++, cuTile-rs, cuTile.jl, "
               "Triton), checked and timed by one harness.")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tilerosetta", description=DESCRIPTION,
        epilog="Without a GPU, `test` runs every CPU case and counts the skipped GPU cases per reason; "
               "`bench` and `sweep` refuse (see --allow-cpu) and `report` renders committed GPU runs.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"tilerosetta.commands.{name.replace('-', '_')}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
