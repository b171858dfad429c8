"""Zeroed int32 counters for split kernels whose last-arriving program merges the partials.

A split-K matmul or a split-KV attention writes fp32 partials from several programs per output tile. The
classic schedule merges them in a second kernel; in a decode step those small merge kernels cost a launch
each (about 1.5-2 us in a CUDA graph on the H200, tools/decode_profile.py). Instead each program bumps its
tile's counter after storing its partial, and the program that sees the count reach N_SPLIT - 1 merges the
tile and sets the counter back to zero: one launch.

The counters must be zero when a launch starts and must not be shared by launches that can run at once:
  - eager calls: one region per (device, stream). Kernels of one stream run in order and every launch
    leaves its counters zero, so the region is reused by the stream's next call; calls from other threads
    on other streams get other regions.
  - a launch being captured into a CUDA graph: a region of its own, never handed out again (a graph may be
    replayed later on any stream, beside eager calls and other graphs).
Regions come from one arena per device, zeroed once, outside any capture (a zero-fill inside a capture
would be replayed on every step). `region()` returns None when none can be had (the first call of the
process is inside a capture, the arena is spent, or a launch has more tiles than a region): the caller
then launches its separate merge kernel, which is always correct.
"""

from __future__ import annotations

import threading

import torch

REGION = 1024  # counters per region: a split launch has fewer output tiles than about 2 x SMs
ARENA_REGIONS = 1024  # 4 MB of int32 per device: enough for hundreds of captured split launches

_lock = threading.Lock()
_arenas: dict[torch.device, list] = {}  # device -> [arena tensor, next unused region]
_eager: dict[tuple, torch.Tensor] = {}  # (device, stream or thread) -> region


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def _owner(device: torch.device):
    """Who may reuse a region: the current stream on a GPU; the calling thread elsewhere (Triton's CPU
    interpreter runs a launch's programs one after another, in the calling thread)."""
    if device.type == "cuda":
        return torch._C._cuda_getCurrentRawStream(device.index if device.index is not None else torch.cuda.current_device())
    return threading.get_ident()


def region(device: torch.device, n: int) -> torch.Tensor | None:
    """n zeroed int32 counters the caller's launch may use (and must leave zero), or None."""
    if n > REGION:
        return None
    if device.type == "meta":  # ahead-of-time compile checks: only the argument's type matters
        return torch.zeros(n, dtype=torch.int32, device=device)
    capturing = _capturing(device)
    key = (device, _owner(device))
    if not capturing:
        reg = _eager.get(key)
        if reg is not None:
            return reg[:n]
    with _lock:
        arena = _arenas.get(device)
        if arena is None:
            if capturing:
                return None
            arena = _arenas[device] = [torch.zeros(ARENA_REGIONS * REGION, dtype=torch.int32, device=device), 0]
        if arena[1] >= ARENA_REGIONS:
            return None
        reg = arena[0][arena[1] * REGION:(arena[1] + 1) * REGION]
        arena[1] += 1
        if not capturing:
            _eager[key] = reg
    return reg[:n]
