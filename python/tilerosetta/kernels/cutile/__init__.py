"""cuTile Python kernels (`import cuda.tile as ct`), one module per op; config.py holds the tile sizes.

Each kernel module defines its @ct.kernel function(s) and `prepare(*inputs, *outputs, cfg, **params)`,
which returns the Launch list (kernel, grid, args) for one call without launching anything: the
backend adapter launches them, the compile test turns the same args into signatures and compiles them
for every arch on the CPU. Import the op modules lazily (KERNEL_MODULES) since they need cuda.tile.
"""

# op -> (module under tilerosetta.kernels.cutile, name of its prepare function)
KERNEL_MODULES = {
    "vector_add": ("vector_add", "prepare"),
    "transpose": ("transpose", "prepare"),
    "softmax": ("softmax", "prepare"),
    "rms_norm": ("rms_norm", "prepare"),
    "layer_norm": ("layer_norm", "prepare"),
    "silu_and_mul": ("silu_and_mul", "prepare"),
    "rope": ("rope", "prepare"),
    "matmul": ("matmul", "prepare"),
    "bmm": ("matmul", "prepare_bmm"),
    "attention": ("attention", "prepare"),
}


def prepare_fn(op: str):
    """The host-side planner of one op (imports cuda.tile)."""
    import importlib

    module, fn = KERNEL_MODULES[op]
    return getattr(importlib.import_module(f"tilerosetta.kernels.cutile.{module}"), fn)
