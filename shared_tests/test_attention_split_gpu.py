"""tile_cpp's and cutile_rs's split-KV attention on the GPU: the forms the conformance cases do not force.

The conformance cases reach the split form through each backend's default plan (decode at B=1 with 1000 and
4099 keys, prefills continuing a long cache), at most 9 splits: one chunk of the combine's 16-split loads.
SPLIT_MIN_BLOCKS=1 (chunks of one key tile) makes 33 splits of 4099 keys, the last of 3 keys: three chunks,
the last padded past n_split (m = -inf, weight 0), which the per-row combines must ignore. Also a causal
self-attention whose chunks lie past the first query tile's diagonal (such a split sees no key of some rows:
m = -inf, l = 0, weight 0), and the split call captured in a CUDA graph (its workspace comes from stream-
ordered scratch memory in both native layers). Without a GPU or the backend's build they skip (required:
TILEROSETTA_REQUIRE fails instead). cute_dsl's split form has its own file (test_cute_dsl_attention_split_gpu.py).
"""

from __future__ import annotations

import pytest
import torch

from conftest import skip_or_fail_unavailable
from graph_replay import decode_qkv, eager_and_graphed
from tilerosetta import backends as registry
from tilerosetta import harness
from tilerosetta.kernels.attention_split import cdiv, packed_rows, split_plan
from tilerosetta.specs import get_spec
from tilerosetta.specs.base import Case

# Each backend's names for the query tile, the key tile and the split floor.
TILE_KEYS = {"tile_cpp": ("TQ", "TK"), "cutile_rs": ("BM", "BN")}


@pytest.fixture(params=sorted(TILE_KEYS))
def backend(request):
    b = registry.get(request.param)
    skip_or_fail_unavailable(request.config, b)
    yield b
    for dtype in (torch.bfloat16, torch.float16):
        b.set_config("attention", dtype, None)


def n_split(b, dims, dtype=torch.bfloat16):
    """The split count of the backend's config for dims (kernels/attention_split.py, which both native plans
    follow: test_tile_cpp_module.py and rust/tests/args.rs check that on the CPU)."""
    cfg = b.config_for("attention", dtype, dims)
    tq_key, tk_key = TILE_KEYS[b.name]
    bm = cfg[tq_key]
    if b.name == "cutile_rs":  # cutile_rs clamps its tiles to the call (ops/attention.rs `schedule`)
        rows = dims["H"] // dims["Hkv"] * dims["S"] if packed_rows(dims["H"], dims["Hkv"], dims["S"], bm) else dims["S"]
        bm = max(16, min(bm, 1 << (rows - 1).bit_length()))
    bn = cfg[tk_key] if b.name == "tile_cpp" else max(16, min(cfg[tk_key], 1 << (dims["Sk"] - 1).bit_length()))
    packed = packed_rows(dims["H"], dims["Hkv"], dims["S"], bm)
    nr, r = (dims["B"] * dims["Hkv"], dims["H"] // dims["Hkv"] * dims["S"]) if packed else (dims["B"] * dims["H"], dims["S"])
    return split_plan(nr * cdiv(r, bm), dims["Sk"], bn, min_blocks=cfg["SPLIT_MIN_BLOCKS"])[0]


# (dims, causal, forced keys, splits at least): each must split (asserted) and match the reference.
SPLIT_CALLS = [
    ({"B": 1, "H": 32, "Hkv": 8, "S": 1, "Sk": 4096, "D": 128}, True, {}, 2),  # the bench's B=1 decode
    ({"B": 1, "H": 32, "Hkv": 8, "S": 1, "Sk": 4099, "D": 128}, False, {"SPLIT_MIN_BLOCKS": 1}, 33),
    ({"B": 2, "H": 16, "Hkv": 2, "S": 3, "Sk": 2000, "D": 64}, True, {"SPLIT_MIN_BLOCKS": 1}, 2),
    ({"B": 1, "H": 1, "Hkv": 1, "S": 1024, "Sk": 1024, "D": 128}, True, {"SPLIT_MIN_BLOCKS": 1}, 2),
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("dims,causal,forced,least", SPLIT_CALLS, ids=lambda x: str(x))
def test_split_form_matches_the_reference(backend, dims, causal, forced, least, dtype):
    if forced:
        backend.set_config("attention", dtype, forced)
    assert n_split(backend, dims, dtype) >= least, f"{backend.name} {dims} {forced}: too few splits"
    result = harness.check_case(backend, get_spec("attention"), dtype, Case(dims, {"causal": causal}), device="cuda")
    assert result.ok, str(result)


def test_split_form_replays_in_a_cuda_graph(backend):
    dims = SPLIT_CALLS[1][0]
    backend.set_config("attention", torch.bfloat16, {"SPLIT_MIN_BLOCKS": 1})
    assert n_split(backend, dims) == 33
    q, k, v = decode_qkv(4099)
    attn = backend.implementations()["attention"]
    eager, graphed = eager_and_graphed(lambda out: attn(q, k, v, out, causal=False, scale=None), q)
    assert torch.equal(graphed, eager), "the graph replay of the split call differs from the eager call"
    ref = get_spec("attention").reference({"causal": False, "scale": None}, q, k, v)["out"]
    torch.testing.assert_close(eager.float(), ref.float(), rtol=2e-2, atol=2e-2)
