"""TileRosetta: one op set, many tile languages, one conformance and benchmark harness.

Public entry points:
    tilerosetta.specs.SPECS         op name -> OpSpec (the single source of truth)
    tilerosetta.backends.get(name)  a backend adapter (available(), op(name))
    tilerosetta.ops                 functional wrappers that allocate outputs
    tilerosetta.patch(model, backend=...)  a transformers Llama model on one backend's ops (hf_patch.py)
    tilerosetta.torch_ops.register(b)      backend b's ops as torch custom ops (torch.compile-safe)
"""

from tilerosetta.errors import TileRosettaError


def patch(model, backend: str = "torch"):
    """Swap a transformers Llama model's RMSNorm, rotary, attention and MLP activation for `backend`'s ops.
    Imported lazily: transformers is an optional dependency. See tilerosetta/hf_patch.py."""
    from tilerosetta.hf_patch import patch as _patch
    return _patch(model, backend)


__all__ = ["TileRosettaError", "patch"]
__version__ = "0.1.0"
