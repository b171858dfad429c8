"""cute_dsl attention's warp-specialised form (config WS=1, attention_wgmma.py) on the GPU.

WS=1 is a config, not the default, so the conformance suite (default configs) never runs it: these force it
on prefill shapes (B=2, H=8, S 1000 and 4096, D 64 and 128, causal and not; GQA H=32 / Hkv=8) in bf16 and
fp16, and check each output twice with the spec's tolerance: against the spec's float64 reference
(harness.check_case, as conformance does) and against torch SDPA (the spec's baseline call). S=1000 leaves a
ragged last query and key tile; the causal cases skip the key tiles past each CTA's diagonal, so the producer
loads fewer tiles than a full row. Two more WS tiles (the simple loop at BM=128 and one consumer warpgroup at
BM=64, both in the sweep space) run on two cases each. Every call is checked to compile the WS=1 kernel and not
to take the split-KV form (which ignores WS).

Without a GPU and the CuTe DSL runtime they skip (required: TILEROSETTA_REQUIRE=cute_dsl fails instead); the
same kernel is compiled for sm_90a on the CPU by test_cute_dsl_compile.py, and its ring replayed there.
"""

from __future__ import annotations

import pytest
import torch

from conftest import skip_or_fail_unavailable
from tilerosetta import harness
from tilerosetta.backends import cute_dsl as adapter
from tilerosetta.kernels.cute_dsl import attention_plan
from tilerosetta.specs import get_spec, rel_error
from tilerosetta.specs.base import Case

DEFAULT_WS = {"WGMMA": 1, "BM": 128, "BN": 128, "STAGES": 3, "PIPE": 1, "PACK": 1, "WS": 1}  # the prefill tile + WS
OTHER_WS = [{"WGMMA": 1, "BM": 128, "BN": 64, "STAGES": 2, "PIPE": 0, "PACK": 0, "WS": 1},
            {"WGMMA": 1, "BM": 64, "BN": 128, "STAGES": 3, "PIPE": 1, "PACK": 1, "WS": 1}]

MHA = [{"B": 2, "H": 8, "S": s, "D": d} for s in (1000, 4096) for d in (64, 128)]
GQA = [{"B": 2, "H": 32, "Hkv": 8, "S": s, "D": 128} for s in (1000, 4096)]
DTYPES = [torch.bfloat16, torch.float16]


@pytest.fixture
def backend(request):
    b = adapter.CuteDslBackend()
    skip_or_fail_unavailable(request.config, b)
    yield b
    for dtype in DTYPES:
        b.set_config("attention", dtype, None)


def _check(b, cfg, dims, causal, dtype):
    spec = get_spec("attention")
    b.set_config("attention", dtype, cfg)
    plan_cfg = b.config_for("attention", dtype, dims)
    assert plan_cfg.get("WS") == 1, plan_cfg
    assert attention_plan.split_of(dims, plan_cfg, adapter.sm_count(device="cuda")) is None, \
        f"{dims}: the call would take the split-KV form, which ignores WS"
    case = Case(dims, {"causal": causal})
    result = harness.check_case(b, spec, dtype, case, device="cuda")
    assert result.ok, str(result)
    assert any(key[:3] == ("attention", dtype, f"wgmma_d{dims['D']}") and dict(key[3]).get("WS") == 1
               and "SPLIT" not in dict(key[3]) for key in b._compiled), f"{dims}: the WS=1 kernel was not compiled"
    # and against torch SDPA on the same inputs, with the same tolerance
    inputs, outputs = harness.make_case_tensors(spec, case, dtype, "cuda", seed=1)
    b.op("attention")(*inputs.values(), *outputs.values(), causal=causal, scale=None)
    sdpa = spec.baseline(*inputs.values(), causal=causal, scale=None)
    torch.cuda.synchronize()
    assert not outputs["out"].isnan().any(), f"{dims}: rows left unwritten"
    err = rel_error(outputs["out"].double(), sdpa.double())
    assert err <= spec.tolerance(dtype), f"{dims} causal={causal}: rel_err {err:.3g} vs SDPA > {spec.tolerance(dtype)}"


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dims", MHA + GQA, ids=lambda d: "-".join(f"{k}{v}" for k, v in d.items()))
def test_attention_ws_matches_the_reference_and_sdpa(backend, dims, causal, dtype):
    _check(backend, DEFAULT_WS, dims, causal, dtype)


@pytest.mark.parametrize("cfg", OTHER_WS, ids=lambda c: f"BM{c['BM']}-BN{c['BN']}-PIPE{c['PIPE']}-PACK{c['PACK']}")
@pytest.mark.parametrize("dims,causal", [({"B": 2, "H": 8, "S": 1000, "D": 128}, True),
                                         ({"B": 2, "H": 32, "Hkv": 8, "S": 1000, "D": 64}, False)],
                         ids=["mha-d128-causal", "gqa-d64-full"])
def test_attention_ws_other_tiles(backend, cfg, dims, causal):
    _check(backend, cfg, dims, causal, torch.bfloat16)
