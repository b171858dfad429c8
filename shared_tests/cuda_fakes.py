"""Host tensors that say they are on CUDA device 0, for CPU tests of launch paths that keep per-signature
plans only for CUDA tensors (cutile_rs's requests, cute_dsl's launches). Only is_cuda and get_device()
change: the data stays on the host, so nothing may launch them for real."""

from __future__ import annotations

import torch


class OnCuda(torch.Tensor):
    is_cuda = True

    def get_device(self):
        return 0


def cuda_like(*ts: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(t.as_subclass(OnCuda) for t in ts)
