"""cutile_py on a GPU: the non-default kernels and hints give the reference's answer too.

The conformance suite runs every case with the default config, which no longer reaches the looped row
kernels (rows up to 16384 are one tile) and runs every kernel with one set of compiler hints. This
file forces the other paths with set_config on shapes with tails (rows just past a tile, odd M, M=1)
and checks them against the reference with the harness's tolerance: the looped row kernels, each
row-op hint the sweep tries, and the matmul/attention tile and warp choices of the sweep space.
Skipped (with the backend's reason) where cutile_py cannot run; TILEROSETTA_REQUIRE=cutile_py turns
that skip into a failure.
"""

from __future__ import annotations

import pytest
import torch

from tilerosetta import backends
from tilerosetta.harness import check_case
from tilerosetta.kernels.cutile import config as cfg
from tilerosetta.specs import SPECS, Case

ROW_CASES = [Case({"M": 3, "N": 16385}), Case({"M": 33, "N": 4097}), Case({"M": 1, "N": 20000}),
             Case({"M": 130, "N": 4096})]
ROW_CONFIGS = [{"MAX_SINGLE": 4096, "LOOP_TN": 1024},  # looped kernels, several tiles and a tail
               {"MAX_SINGLE": 4096, "LOOP_TN": 4096, "WARPS": 8},
               {"ROW_ELEMS": 16384, "SM_ELEMS": 65536},  # 4 rows per block at 4096 (one partial block)
               {"WARPS": 8, "MAX_SINGLE": 32768}]


@pytest.fixture(scope="module")
def cutile():
    b = backends.get("cutile_py")
    ok, why = b.is_available()
    if not ok:
        import os

        if "cutile_py" in os.environ.get("TILEROSETTA_REQUIRE", "").split(","):
            pytest.fail(f"cutile_py is required here but unavailable: {why}")
        pytest.skip(f"cutile_py unavailable: {why}")
    return b


def _check(b, op, dtype, case, config):
    spec = SPECS[op]
    full = {**cfg.default_config(op, "bf16" if dtype == torch.bfloat16 else "fp16" if dtype == torch.float16
                                 else "fp32", case.dims), **config}
    cfg.check_config(op, full)
    b.set_config(op, dtype, config)
    try:
        res = check_case(b, spec, dtype, case, seed=3)
    finally:
        b.set_config(op, dtype, None)
    assert res.ok, f"{op} {case.name} {config}: {res}"


@pytest.mark.parametrize("config", ROW_CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("op", list(cfg.ROW_OPS))
def test_row_kernels_under_other_configs(cutile, op, dtype, config):
    for case in ROW_CASES:
        _check(cutile, op, dtype, case, config)


MM_CONFIGS = [{"BM": 128, "BN": 256, "BK": 64, "WARPS": 8}, {"BM": 128, "BN": 256, "BK": 64, "WARPS": 0, "CTAS": 2},
              {"BM": 256, "BN": 128, "BK": 64, "WARPS": 8}, {"BM": 128, "BN": 128, "BK": 64, "WARPS": 0},
              {"BM": 128, "BN": 256, "BK": 64, "WARPS": 8, "PERSIST": 1},
              {"BM": 128, "BN": 256, "BK": 32, "WARPS": 0, "CTAS": 2, "PERSIST": 1}]


@pytest.mark.parametrize("config", MM_CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_matmul_tiles_and_hints(cutile, config):
    # The last two cases have more 128 x 256 tiles than an H200 has SMs (153 and 150), ragged in M, N and K, so
    # PERSIST's blocks walk several tiles each, some one fewer than others, across batch entries in bmm; 153
    # is odd, so with CTAS 2 one cluster's walk holds a tile past the last (loaded, never stored).
    for case in (Case({"M": 300, "N": 520, "K": 200}), Case({"M": 1, "N": 4096, "K": 257}),
                 Case({"M": 1024, "N": 1024, "K": 1024}), Case({"M": 2100, "N": 2080, "K": 136})):
        _check(cutile, "matmul", torch.bfloat16, case, config)
    for case in (Case({"Bt": 3, "M": 257, "N": 384, "K": 130}), Case({"Bt": 5, "M": 600, "N": 1300, "K": 72})):
        _check(cutile, "bmm", torch.float16, case, config)


ATTN_CONFIGS = [{"BM": 128, "BN": 128, "OCC": 0, "WARPS": 8}, {"BM": 128, "BN": 64, "OCC": 0, "WARPS": 0},
                {"BM": 64, "BN": 64, "OCC": 2, "WARPS": 0}, {"BM": 256, "BN": 64, "OCC": 0, "WARPS": 8}]


@pytest.mark.parametrize("config", ATTN_CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("causal", [False, True])
def test_attention_tiles_and_hints(cutile, config, causal):
    for d in (64, 128):
        for s in (300, 1024):  # a tail tile and an exact multiple
            case = Case({"B": 1, "H": 3, "S": s, "D": d}, {"causal": causal})
            _check(cutile, "attention", torch.bfloat16, case, config)


@pytest.mark.parametrize("scale", [-0.4, 0.0])
def test_attention_nonpositive_scale_is_refused(cutile, scale):
    """The spec declares scale a finite float > 0 (issue 16): refused before launch, output untouched."""
    from tilerosetta.errors import TileRosettaError

    q, k, v = (torch.randn(1, 2, 77, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    out = torch.full_like(q, float("nan"))
    with pytest.raises(TileRosettaError, match=r"cutile_py\.attention: argument 'scale'"):
        cutile.op("attention")(q, k, v, out, causal=False, scale=scale)
    assert torch.isnan(out).all()


@pytest.mark.parametrize("config", [{"TS": 64, "OCC": 4}, {"TS": 16, "OCC": 0}, {"TS": 32, "OCC": 8}],
                         ids=str)
def test_rope_blocks_and_occupancy(cutile, config):
    for case in (Case({"B": 2, "H": 3, "S": 77, "D": 128}), Case({"B": 1, "H": 2, "S": 5, "D": 6})):
        _check(cutile, "rope", torch.float32, case, config)
