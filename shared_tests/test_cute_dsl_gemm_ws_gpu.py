"""cute_dsl's warp-specialised Hopper GEMM (config WS=1, gemm_wgmma.py) on the GPU, against the reference.

WS=1 is a config, not the default, so the conformance suite (default configs) never runs it: these force it on
matmul and bmm shapes that reach each edge of the ring (K past a whole number of 64-wide stages, fewer K tiles
than stages, M and N past a tile, a batch). Without a GPU and the CuTe DSL runtime they skip (required:
TILEROSETTA_REQUIRE=cute_dsl fails instead); test_cute_dsl_compile.py compiles the same form on the CPU.
"""

from __future__ import annotations

import pytest
import torch

from conftest import skip_or_fail_unavailable
from tilerosetta import harness
from tilerosetta.backends import cute_dsl as adapter
from tilerosetta.specs import get_spec
from tilerosetta.specs.base import Case

WS_TILES = [{"BM": 128, "BN": 256, "STAGES": 4, "WS": 1}, {"BM": 64, "BN": 128, "STAGES": 3, "WS": 1}]
SHAPES = [("matmul", {"M": 1024, "N": 1024, "K": 4160}),  # 65 K tiles: the ring wraps many times, a ragged last
          ("matmul", {"M": 97, "N": 264, "K": 128}),  # 2 K tiles < STAGES; M, N past a tile
          ("bmm", {"Bt": 3, "M": 130, "N": 136, "K": 520})]


@pytest.mark.parametrize("cfg", WS_TILES, ids=lambda c: f"BM{c['BM']}-BN{c['BN']}-ST{c['STAGES']}")
@pytest.mark.parametrize("op,dims", SHAPES, ids=lambda x: str(x))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_gemm_wgmma_ws_matches_the_reference(request, cfg, op, dims, dtype):
    b = adapter.CuteDslBackend()
    skip_or_fail_unavailable(request.config, b)
    b.set_config(op, dtype, cfg)
    result = harness.check_case(b, get_spec(op), dtype, Case(dims), device="cuda")
    assert result.ok, str(result)
    assert any(key[:3] == (op, dtype, "wgmma") and dict(key[3]).get("WS") == 1 for key in b._compiled), \
        f"{op} {dims}: the call did not compile the WS=1 wgmma kernel"
