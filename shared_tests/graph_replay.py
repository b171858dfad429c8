"""A call run eagerly and as a replayed CUDA graph, for the GPU tests of launch paths that allocate or plan on
the side (split-KV workspaces): the graph must capture all of it and give the eager call's bits."""

from __future__ import annotations

import torch


def eager_and_graphed(call, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(eager, graphed): call(out) into a fresh output like `like`, first eagerly (it compiles and plans outside
    the capture), then warmed up on a side stream and captured in a CUDA graph, whose replay writes an output
    that starts as NaN (so an element the graph leaves unwritten cannot match)."""
    eager, graphed = torch.empty_like(like), torch.empty_like(like)
    call(eager)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call(graphed)  # warm-up on the capture stream
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    graphed.fill_(float("nan"))
    with torch.cuda.graph(graph):
        call(graphed)
    graph.replay()
    torch.cuda.synchronize()
    return eager, graphed


def decode_qkv(sk: int, dtype=torch.bfloat16, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Seeded inputs of one Llama-3.1-8B decode step's attention: q (1, 32, 1, 128), k and v (1, 8, sk, 128)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(1, 32, 1, 128, device="cuda", dtype=dtype, generator=gen)
    k, v = (torch.randn(1, 8, sk, 128, device="cuda", dtype=dtype, generator=gen) for _ in range(2))
    return q, k, v
