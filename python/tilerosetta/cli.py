"""`tilerosetta` command line. Each subcommand lives in tilerosetta/commands/<name>.py and exposes
`register(subparsers)`; a command module that fails to import is reported, not fatal."""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = ("list", "doctor", "test", "bench", "report", "compare", "compare-gpus", "sweep")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tilerosetta", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"tilerosetta.commands.{name.replace('-', '_')}")
        except ModuleNotFoundError as exc:
            if exc.name == f"tilerosetta.commands.{name.replace('-', '_')}":
                continue  # command not written yet
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
