"""The op set: one spec module per op, the single source of truth for every backend.

Every module `specs/<op>.py` (other than `base`) defines one `OpSpec` subclass named `<op>`; they are
found here by listing this package, so a new op is its module and nothing else in this file. `SPECS`
is ordered by each spec's `order`.
"""

import importlib
import pkgutil

from tilerosetta.specs.base import (DECODE_TILE_MAX_M, DTYPE_NAMES, FLOAT_DTYPES, HALF_DTYPES, Case, OpSpec,
                                    decode_panel, decode_tiles, dtype_name, parse_dtype, rel_error)

_NOT_SPECS = frozenset({"base"})  # modules of this package that hold no op


def _spec_of(module_name: str) -> OpSpec:
    """The one OpSpec subclass defined in specs/<module_name>.py, instantiated; it must be named like
    its module and declare an int `order`."""
    module = importlib.import_module(f"{__name__}.{module_name}")
    found = [c for c in vars(module).values()
             if isinstance(c, type) and issubclass(c, OpSpec) and c.__module__ == module.__name__]
    if len(found) != 1:
        raise ImportError(f"specs/{module_name}.py: expected exactly one OpSpec subclass, found "
                          f"{[c.__name__ for c in found]}")
    spec = found[0]()
    if getattr(spec, "name", None) != module_name:
        raise ImportError(f"specs/{module_name}.py: its spec's name is {getattr(spec, 'name', None)!r}; "
                          f"an op's spec lives in specs/<name>.py")
    if not isinstance(getattr(spec, "order", None), int):
        raise ImportError(f"specs/{module_name}.py: {type(spec).__name__}.order must be an int (its place in "
                          f"the op set)")
    return spec


def _discover() -> dict[str, OpSpec]:
    specs = [_spec_of(m.name) for m in pkgutil.iter_modules(__path__)
             if not m.ispkg and not m.name.startswith("_") and m.name not in _NOT_SPECS]
    specs.sort(key=lambda s: s.order)
    orders = [s.order for s in specs]
    clash = sorted({o for o in orders if orders.count(o) > 1})
    if clash:
        raise ImportError(f"specs: two ops share an order value {clash}: "
                          f"{[s.name for s in specs if s.order in clash]} (each op needs its own)")
    return {s.name: s for s in specs}


SPECS: dict[str, OpSpec] = _discover()
OP_NAMES = tuple(SPECS)


def family_ops(family: str) -> tuple[str, ...]:
    """The ops of one kernel family (OpSpec.family), in the specs' order."""
    return tuple(op for op, spec in SPECS.items() if spec.family == family)


def get_spec(op: str) -> OpSpec:
    try:
        return SPECS[op]
    except KeyError:
        raise KeyError(f"unknown op '{op}': expected one of {list(SPECS)}") from None


__all__ = ["SPECS", "OP_NAMES", "family_ops", "get_spec", "Case", "OpSpec", "FLOAT_DTYPES", "HALF_DTYPES",
           "DTYPE_NAMES", "dtype_name", "parse_dtype", "rel_error", "DECODE_TILE_MAX_M", "decode_tiles",
           "decode_panel"]
