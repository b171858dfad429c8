"""Tuned tile configurations: a committed, reviewable table written by `tilerosetta sweep --write-best`.

Backend.default_config (backends/base.py) calls `lookup(...)` and merges a valid entry over the adapter's
builtin_config; adapters never read this table themselves.

The table (tuned_configs.json) is keyed backend -> op -> dtype -> arch -> size class, where the size
class of a case is "le<P>": P is the smallest power of two >= the case's largest dimension (M=4096,
N=4096, K=4096 -> le4096; M=4096, H=14336 -> le16384). Each entry keeps the evidence of the sweep
that chose it (median time, the default's median, the case, the date and the results file).
"""

from __future__ import annotations

import json
import os
import re
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

TABLE = Path(__file__).with_name("tuned_configs.json")
SCHEMA = 1
ABOUT = ("Best tile configurations found by `tilerosetta sweep --write-best`, keyed backend -> op -> dtype -> "
         "arch -> size class (le<P>: P = smallest power of two >= the largest dim). Read with "
         "tilerosetta.tuning.lookup(); review changes like code.")


def _dtype(dtype) -> str:
    if isinstance(dtype, str):
        return dtype
    from tilerosetta.specs import dtype_name

    return dtype_name(dtype)


def size_class(dims: dict[str, int], op: str | None = None) -> str:
    """'le<P>' with P the smallest power of two >= the largest dim (at least 1), followed by the value of
    every structural dim of the op (the spec's dim_choices, e.g. attention's head dim: 'le4096_D128'),
    since the best tiles for D=64 and D=128 differ even at the same sequence length, and then the spec's own
    size_class_suffix (matmul at M <= 64: '_M<pow2>', a decode weight stream, not a 4096^3 GEMM)."""
    if not dims:
        raise ValueError("size_class of a case without dims")
    largest = max(int(v) for v in dims.values())
    if largest < 1:
        raise ValueError(f"size_class: dims must be positive, got {dims}")
    cls = f"le{1 << (largest - 1).bit_length()}"
    if op:
        from tilerosetta.specs import get_spec

        cls += "".join(f"_{k}{v}" for k, v in structural_dims(dims, op).items())
        cls += get_spec(op).size_class_suffix(dims)
    return cls


_LENGTHS = ("S", "Sk")  # dim_choices that only vary the random tests' lengths: not structural


def structural_dims(dims: dict[str, int], op: str) -> dict[str, int]:
    """The dims of a call that pick a kernel rather than only size it, in the spec's dim_choices order
    (attention's and rope's head dim D): a size class holds only calls that agree on them."""
    from tilerosetta.specs import get_spec

    return {k: int(dims[k]) for k in get_spec(op).dim_choices if k in dims and k not in _LENGTHS}


def class_structural_dims(cls: str, op: str) -> dict[str, int]:
    """structural_dims of the calls of size class `cls`, read back from the tokens size_class writes right
    after 'le<P>' (one '_<K><value>' per structural dim present, in dim_choices order; the spec's suffix
    follows them)."""
    from tilerosetta.specs import get_spec

    tokens, out = cls.split("_")[1:], {}
    for k in (k for k in get_spec(op).dim_choices if k not in _LENGTHS):
        if tokens and re.fullmatch(rf"{k}\d+", tokens[0]):
            out[k] = int(tokens.pop(0)[len(k):])
    return out


def empty_table() -> dict:
    return {"about": ABOUT, "schema": SCHEMA, "entries": {}}


@lru_cache(maxsize=8)
def _load_cached(path: str, mtime_ns: int) -> dict:
    with open(path, encoding="utf-8") as f:
        table = json.load(f)
    if table.get("schema") != SCHEMA or not isinstance(table.get("entries"), dict):
        raise ValueError(f"{path}: not a tuned-config table of schema {SCHEMA}")
    return table


_STAT_EVERY_S = 1.0  # how stale a file written by another process may look (a stat costs ~10 µs a call)
_seen: dict[str, tuple[float, int]] = {}  # path -> (when last stat'ed, its mtime_ns then; -1: absent)
_generation = 0  # bumped whenever a table's content may have changed: callers' memos key on it


def generation() -> int:
    """Changes whenever a table may hold other entries than before (record, or a newer file seen)."""
    return _generation


def _mtime(path: Path) -> int:
    global _generation
    key, now = str(path), time.monotonic()
    seen = _seen.get(key)
    if seen is None or now - seen[0] >= _STAT_EVERY_S:
        mtime = path.stat().st_mtime_ns if path.exists() else -1
        if seen is None or seen[1] != mtime:
            _generation += 1
        _seen[key] = seen = (now, mtime)
    return seen[1]


def load_table(path: str | os.PathLike = TABLE) -> dict:
    path = Path(path)
    mtime = _mtime(path)
    if mtime < 0:
        return empty_table()
    return _load_cached(str(path), mtime)


def entries(path: str | os.PathLike = TABLE) -> list[tuple[str, str, str, str, str, dict]]:
    """Every entry of the table as (backend, op, dtype, arch, size class, entry), in file order."""
    table = load_table(path)["entries"]
    return [(b, op, dt, arch, cls, e) for b, ops in table.items() for op, dts in ops.items()
            for dt, archs in dts.items() for arch, classes in archs.items() for cls, e in classes.items()]


def lookup(backend: str, op: str, dtype, arch: str | None, dims: dict[str, int],
           path: str | os.PathLike = TABLE) -> dict[str, Any] | None:
    """The tuned config for this backend/op/dtype/arch and the size class of dims, or None."""
    if not arch or not dims:
        return None
    entry = (load_table(path)["entries"].get(backend, {}).get(op, {}).get(_dtype(dtype), {})
             .get(arch, {}).get(size_class(dims, op)))
    return dict(entry["config"]) if entry else None


def record(backend: str, op: str, dtype, arch: str, dims: dict[str, int], config: dict[str, Any],
           evidence: dict[str, Any] | None = None, path: str | os.PathLike = TABLE) -> str:
    """Write (or replace) one entry; keys are sorted so a change reviews as a small diff. Returns its key."""
    if not arch:
        raise ValueError("record: arch is required (e.g. sm_90)")
    path = Path(path)
    table = json.loads(json.dumps(load_table(path)))  # a private copy of the cached table
    cls = size_class(dims, op)
    node = table["entries"].setdefault(backend, {}).setdefault(op, {}).setdefault(_dtype(dtype), {})
    node.setdefault(arch, {})[cls] = {"config": dict(config), **(evidence or {})}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(table, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    _seen.pop(str(path), None)  # the next read stats it again (and bumps the generation)
    return f"{backend}/{op}/{_dtype(dtype)}/{arch}/{cls}"
