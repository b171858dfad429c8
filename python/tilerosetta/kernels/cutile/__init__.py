"""cuTile Python kernels (`import cuda.tile as ct`), one module per op; config.py holds the tile sizes.

Each kernel module defines its @ct.kernel function(s) and `prepare(*inputs, *outputs, cfg, **params)`,
which returns the Launch list (kernel, grid, args) for one call without launching anything: the
backend adapter launches them, the compile test turns the same args into signatures and compiles them
for every arch on the CPU. Import the op modules lazily (KERNEL_MODULES) since they need cuda.tile.
"""

from tilerosetta.specs import OP_NAMES

# op -> (module under tilerosetta.kernels.cutile, name of its prepare function): the module named as the
# op, except where one module serves two ops.
KERNEL_MODULES = {**{op: (op, "prepare") for op in OP_NAMES}, "bmm": ("matmul", "prepare_bmm")}


def prepare_fn(op: str):
    """The host-side planner of one op (imports cuda.tile)."""
    import importlib

    module, fn = KERNEL_MODULES[op]
    return getattr(importlib.import_module(f"tilerosetta.kernels.cutile.{module}"), fn)
