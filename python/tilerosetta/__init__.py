"""TileRosetta: one op set, many tile languages, one conformance and benchmark harness.

Public entry points:
    tilerosetta.specs.SPECS         op name -> OpSpec (the single source of truth)
    tilerosetta.backends.get(name)  a backend adapter (available(), op(name))
    tilerosetta.ops                 functional wrappers that allocate outputs
"""

from tilerosetta.errors import TileRosettaError

__all__ = ["TileRosettaError"]
__version__ = "0.1.0"
