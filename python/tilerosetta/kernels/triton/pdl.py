"""Programmatic dependent launch (PDL, sm_90+) for the kernels of a decode step's path.

A decode step is a chain of ~100 small kernels; between two of them the GPU drains the first, then
launches and ramps up the second (about 0.4 us of idle time per boundary in a CUDA graph on the H200,
tools/decode_profile.py). A kernel launched with PDL (`launch_pdl`, CUDA's programmatic stream
serialization) may be scheduled while the kernel before it on the stream is still running, once every
program of that kernel has signalled `griddepcontrol.launch_dependents` (or exited). Each kernel here
signals it on entry, and waits with `griddepcontrol.wait` (which returns once the previous kernel has
completed and its memory is visible) BEFORE touching any memory, so no read or write can race the
previous kernel: what overlaps is launch and setup, never data. Stream capture records the overlap as
programmatic graph edges, so CUDA-graph replays keep it.

Kernels opt in with a `PDL: tl.constexpr = False` parameter and `enter(PDL)` as their first statement;
`run()` (kernels/triton/__init__.py) turns it on where `enabled(device)`: a CUDA device of compute
capability 9 or more, not Triton's interpreter, and TILEROSETTA_TRITON_PDL not "0" when the process starts
(the A/B switch).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait


@triton.jit
def enter(PDL: tl.constexpr):
    if PDL:
        gdc_wait()  # the previous kernel has completed and its writes are visible: safe to read and write
        gdc_launch_dependents()  # the next kernel may be scheduled as SMs free up


_CAPABLE: dict[int, bool] = {}
# Read once: run() asks on every call. TRITON_INTERPRET is settled before the kernel modules (which import
# this one) are imported (backends/triton_lang.py); Triton's own knob parses it.
_OFF = (os.environ.get("TILEROSETTA_TRITON_PDL", "1").strip() == "0") or triton.knobs.runtime.interpret


def enabled(device: torch.device) -> bool:
    if _OFF or device.type != "cuda":
        return False
    idx = device.index if device.index is not None else torch.cuda.current_device()
    ok = _CAPABLE.get(idx)
    if ok is None:
        ok = _CAPABLE[idx] = torch.cuda.get_device_capability(idx)[0] >= 9
    return ok
