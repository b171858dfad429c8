"""`tilerosetta test`: run the conformance suite (pytest over shared_tests/)."""

from __future__ import annotations

from pathlib import Path

from tilerosetta import shard
from tilerosetta.toolchain import REPO_ROOT


def run(args) -> int:
    import pytest

    if args.gpus:  # one pytest process per GPU on its share of the items (tilerosetta/shard.py)
        return shard.run_test(args)
    suite = Path(args.suite or REPO_ROOT / "shared_tests")
    argv = [str(suite), "-q", "-p", "no:cacheprovider"]
    if args.backend:
        argv += ["--backend", args.backend]
    if args.op:
        argv += ["--op", args.op]
    if args.require_backend:
        argv += ["--require-backend", args.require_backend]
    return pytest.main(argv + list(args.pytest_args))


def register(sub):
    p = sub.add_parser("test", help="run the conformance suite")
    p.add_argument("--backend", default="", help="comma-separated backends (default: all)")
    p.add_argument("--op", default="", help="comma-separated ops (default: all)")
    p.add_argument("--require-backend", default="", help="fail instead of skip if these are unavailable")
    p.add_argument("--suite", default="", help="path of the suite (default: shared_tests/)")
    p.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    shard.add_arguments(p, worker_shard=False)  # a worker's share goes to pytest: -- --shard i/n
    p.set_defaults(func=run)
