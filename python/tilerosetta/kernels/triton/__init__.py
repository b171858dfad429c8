"""Triton kernels of the TileRosetta ops, one module per op (matmul's kernel also serves bmm).

Each module has the @triton.jit kernel(s) and `prepare(*inputs, *outputs, cfg, **params)`, the same
entry point as the cuTile Python modules: it returns the Launch list for one call without launching
anything. The backend runs them (`run`); aot_check.py reads each launch's argument types from the same
list (on meta tensors) instead of re-deriving the signatures. Tile sizes, warps and stages come from
config.py. Import through backends/triton_lang.py, which decides whether Triton compiles for the GPU or
runs its CPU interpreter (TRITON_INTERPRET must be set before the kernels are decorated, i.e. before
these modules are imported).
"""

from __future__ import annotations

from typing import Any, NamedTuple


class Launch(NamedTuple):
    """One kernel launch: kernel[grid](*args, **constexprs, **options)."""

    kernel: Any
    grid: tuple[int, ...]
    args: tuple  # runtime arguments, in the kernel's order (tensors, descriptors, ints, floats)
    constexprs: dict[str, Any]  # tl.constexpr arguments by name
    options: dict[str, int]  # launch options (num_warps, num_stages) the module sets; Triton's default otherwise


# Constexpr parameters run() fills in at launch (not in a Launch's constexprs): PDL (kernels/triton/pdl.py).
RUN_CONSTEXPRS = ("PDL",)


def run(launches: list[Launch]) -> None:
    for lx in launches:
        # kernel[grid](...) is Triton's KernelInterface.__getitem__: a lambda calling run(grid=grid,
        # warmup=False, ...) (JITFunction, the interpreter's InterpretedFunction, autotuners alike). Calling
        # run directly is the same launch without a lambda built per launch.
        lx.kernel.run(*lx.args, grid=lx.grid, warmup=False, **launch_kwargs(lx))


def launch_kwargs(lx: Launch, args: tuple | None = None) -> dict:
    """The keywords of lx's launch: its constexprs and options, and the PDL ones where the kernel opts in
    (pdl_extras; args as there)."""
    return {**lx.constexprs, **lx.options, **pdl_extras(lx, args)}


def pdl_extras(lx: Launch, args: tuple | None = None) -> dict[str, bool]:
    """The keywords run() adds to a launch of a kernel that opts in to programmatic dependent launch
    (a `PDL` constexpr, kernels/triton/pdl.py): {} for the others. args: the launch's arguments where they
    are not lx.args (a kept plan's template holds None where the call's tensors go, and the device is
    read from those tensors)."""
    if "PDL" not in lx.kernel.arg_names or "PDL" in lx.constexprs:
        return {}
    from tilerosetta.kernels.triton import pdl

    on = pdl.enabled(_device_of(lx.args if args is None else args))
    return {"PDL": on, "launch_pdl": on}


def _device_of(args: tuple):
    """The device of a launch: its first tensor argument's (a tensor descriptor's base tensor's)."""
    import torch

    for a in args:
        t = getattr(a, "base", a)
        if isinstance(t, torch.Tensor):
            return t.device
    return torch.device("cpu")


def row_launch(block_kernel, loop_kernel, tensors: tuple, scalars: tuple, cfg: dict[str, Any]) -> list[Launch]:
    """The row ops (one row per program): the whole row in one next_pow2(N) block up to cfg["single_max"],
    else the looped kernel over cfg["loop_block"]-wide chunks; cfg["maxnreg"] (0 or absent: none) caps
    the registers per thread."""
    import triton  # here, not at import: the backend decides TRITON_INTERPRET before triton is imported

    m, n = tensors[0].shape
    single = n <= cfg["single_max"]
    block = triton.next_power_of_2(n) if single else cfg["loop_block"]
    cap = {"maxnreg": cfg["maxnreg"]} if cfg.get("maxnreg") else {}
    return [Launch(block_kernel if single else loop_kernel, (m,), (*tensors, n, *scalars), {"BLOCK_N": block},
                   {"num_warps": cfg["num_warps"], **cap})]
