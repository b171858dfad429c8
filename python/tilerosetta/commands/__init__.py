"""Subcommands of the `tilerosetta` CLI, one module each (see tilerosetta.cli.COMMANDS)."""
