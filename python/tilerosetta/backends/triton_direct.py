"""Launching a planned Triton launch again without JITFunction.run (issue 14 item 7: host cost per call).

JITFunction.run binds the arguments, specialises each one (dtype, 16-byte alignment, value 1), hashes
that into the kernel cache key, looks the compiled kernel up, builds launch metadata and calls the
launcher: ~8 µs of every eager call on the H200, for an answer that cannot change while the call
signature does not. A launch the adapter keeps per call signature (Backend.launch_plan) fixes every
argument but the tensors, so after its first launch through run() this module keeps what run() found:
the compiled kernel, its bound argument list (constexprs included, as the launcher takes them) with
the tensors' slots empty, and the launcher. A later launch of the same planned launch checks only what
the specialisation and the launcher rely on, per tensor: on the device the kernel was loaded on and
16-byte aligned (as it was when compiled); then calls the launcher with the data pointers. Anything
else (a launch hook set, another current device, a misaligned view, async compile, scratch memory, a
launcher of another shape) goes through run() as before.

Relies on Triton 3.6's internals (JITFunction.device_caches' binder, CompiledKernel.run's CudaLauncher
and its `launch`); `available()` says when they are not there, and then every launch uses run().
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from tilerosetta.backends.base import _raw_stream
from tilerosetta.backends.base import current_device_index as _current_device



class Direct(NamedTuple):
    launch: Any  # the launcher's C entry point (CudaLauncher.launch)
    head: tuple  # function, cooperative grid, PDL, scratch (None, None), packed metadata, launch metadata
    grid: tuple[int, int, int]
    values: tuple  # every bound argument in signature order, None in the tensors' slots
    tensor_slots: tuple[int, ...]
    device: int


def available() -> tuple[bool, str]:
    try:
        import triton
        from triton.backends.nvidia.driver import CudaLauncher  # noqa: F401
        from triton.runtime.jit import JITFunction
    except ImportError as exc:
        return False, f"Triton's CUDA launcher not importable: {exc}"
    if not hasattr(JITFunction, "create_binder"):
        return False, f"Triton {triton.__version__}: JITFunction has no create_binder"
    return True, ""


def hooks_set() -> bool:
    """Whether a launch hook is installed (a profiler such as Proton): then every launch goes through run(),
    which calls them. Triton 3.6's hooks are HookChain objects, empty by default (never None)."""
    import triton

    rt = triton.knobs.runtime
    return any(h is not None and getattr(h, "calls", True) for h in (rt.launch_enter_hook, rt.launch_exit_hook))


def build(kernel, compiled, args: tuple, grid: tuple, kwargs: dict[str, Any]) -> Direct | None:
    """What a later launch of (kernel, args with other tensors, grid, kwargs) needs, from `compiled`, the
    CompiledKernel run() returned for it on the current device; None where this launch must keep going
    through run()."""
    import triton
    from triton.backends.nvidia.driver import CudaLauncher

    if compiled is None or hasattr(compiled, "result") or callable(grid) or hooks_set():
        return None
    launcher = compiled.run
    if type(launcher) is not CudaLauncher or launcher.global_scratch_size or launcher.profile_scratch_size:
        return None
    if getattr(launcher.launch, "__name__", "") == "inner":  # tensor-descriptor wrapper: not our path
        return None
    device = _current_device()
    binder = kernel.device_caches[device][4]
    bound, specialization, _options = binder(*args, **kwargs)
    values = list(bound.values())
    slots = tuple(i for i, a in enumerate(args) if isinstance(a, torch.Tensor))
    if any(args[i].data_ptr() & 15 for i in slots):  # compiled without the alignment a later call may have
        return None
    for i in slots:  # the compiled kernel assumes 16-byte aligned pointers: launch() checks each
        values[i] = None
    if any(isinstance(v, torch.Tensor) for v in values):  # a tensor passed by keyword: not planned here
        return None
    g = tuple(grid) + (1,) * (3 - len(grid))
    head = (compiled.function, launcher.launch_cooperative_grid, launcher.launch_pdl, None, None,
            compiled.packed_metadata, None, None, None)
    return Direct(launcher.launch, head, g, tuple(values), slots, device)


def launch(d: Direct, args) -> bool:
    """Launches d with this call's tensors (args as the planned launch's args); False, having launched
    nothing, when a tensor is not on d's device or not 16-byte aligned, or d's device is not current."""
    dev = d.device
    if _current_device() != dev or hooks_set():
        return False
    values = list(d.values)
    for i in d.tensor_slots:
        t = args[i]
        # get_device first: a host tensor's pointer must never reach the kernel (Triton's own launch path
        # asks the driver about each pointer; with plain integers nothing else would)
        if t.get_device() != dev:
            return False
        p = t.data_ptr()
        if p & 15:
            return False
        values[i] = p
    gx, gy, gz = d.grid
    d.launch(gx, gy, gz, _raw_stream(dev), *d.head, *values)
    return True
