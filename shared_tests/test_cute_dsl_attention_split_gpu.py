"""cute_dsl attention's split-KV form on the GPU: what the conformance cases cannot force.

The conformance cases reach the split form through the default plan (decode at B=1 with 1000 and 4099 keys,
prefills continuing a long cache). These also run it where the plan alone would not go: chunks of one key
tile (SPLIT_MIN_BLOCKS=1, 33 chunks with a 3-key last one), a causal self-attention whose first query tile
has chunks entirely past its causal limit (each loads one fully masked tile and must weigh 0), and the split
call captured in a CUDA graph (the workspaces come from torch's caching allocator on the capturing stream).
Without a GPU and the CuTe DSL runtime they skip (required: TILEROSETTA_REQUIRE=cute_dsl fails instead);
the same schedule is replayed on the CPU by test_cute_dsl_compile.py.
"""

from __future__ import annotations

import pytest
import torch

from conftest import skip_or_fail_unavailable
from graph_replay import decode_qkv, eager_and_graphed
from tilerosetta import harness
from tilerosetta.backends import cute_dsl as adapter
from tilerosetta.kernels.cute_dsl import attention_plan
from tilerosetta.specs import get_spec
from tilerosetta.specs.base import Case


@pytest.fixture
def backend(request):
    b = adapter.CuteDslBackend()
    skip_or_fail_unavailable(request.config, b)
    yield b
    b.set_config("attention", torch.bfloat16, None)


def _split(b, dims, dtype=torch.bfloat16):
    cfg = b.config_for("attention", dtype, dims)
    return attention_plan.split_of(dims, cfg, adapter.sm_count(device="cuda"))


# (dims, causal, forced config): each must take the split form (asserted), and match the reference
SPLIT_CALLS = [
    ({"B": 1, "H": 32, "Hkv": 8, "S": 1, "Sk": 4096, "D": 128}, True, None),  # the bench's B=1 decode
    ({"B": 1, "H": 32, "Hkv": 8, "S": 1, "Sk": 4099, "D": 128}, False, {"SPLIT_MIN_BLOCKS": 1}),  # 33 chunks
    ({"B": 1, "H": 1, "S": 1024, "Sk": 1024, "D": 128}, True, None),  # chunks past the first tile's diagonal
    ({"B": 2, "H": 16, "Hkv": 2, "S": 3, "Sk": 2000, "D": 64}, True, {"SPLIT_MIN_BLOCKS": 1}),
]


@pytest.mark.parametrize("dims,causal,forced", SPLIT_CALLS, ids=lambda x: str(x))
def test_attention_split_form_matches_the_reference(backend, dims, causal, forced):
    spec = get_spec("attention")
    if forced:
        backend.set_config("attention", torch.bfloat16, forced)
    assert _split(backend, dims) is not None, f"{dims} {forced}: the plan does not split it"
    result = harness.check_case(backend, spec, torch.bfloat16, Case(dims, {"causal": causal}), device="cuda")
    assert result.ok, str(result)


def test_attention_split_form_replays_in_a_cuda_graph(backend):
    dims = SPLIT_CALLS[0][0]
    assert _split(backend, dims) is not None
    q, k, v = decode_qkv(4096)
    attn = backend.implementations()["attention"]
    eager, graphed = eager_and_graphed(lambda out: attn(q, k, v, out, causal=True, scale=None), q)
    assert torch.equal(graphed, eager), "the graph replay of the split call differs from the eager call"
