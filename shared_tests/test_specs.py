"""The op specs themselves: references, counts, validation. Runs everywhere, no backend needed."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tilerosetta.errors import TileRosettaError
from tilerosetta import specs
from tilerosetta.harness import make_case_tensors, reference
from tilerosetta.specs import OP_NAMES, SPECS, Case, rel_error

SPECS_DIR = Path(specs.__file__).parent


def test_every_spec_module_is_an_op_in_its_order():
    """specs/__init__.py finds the ops by listing the package: every module but base is one op, named
    like its file, and OP_NAMES follows the specs' `order`."""
    modules = sorted(p.stem for p in SPECS_DIR.glob("*.py") if p.stem not in ("__init__", "base"))
    assert sorted(OP_NAMES) == modules
    assert [SPECS[op].order for op in OP_NAMES] == sorted(SPECS[op].order for op in OP_NAMES)
    assert OP_NAMES[:3] == ("vector_add", "transpose", "softmax")  # the order tables and reports keep


def _discover_with(tmp_path, monkeypatch, source):
    """specs._discover() over the real package plus one extra module written to tmp_path."""
    (tmp_path / "zz_extra.py").write_text(source)
    monkeypatch.setattr(specs, "__path__", [*specs.__path__, str(tmp_path)])
    monkeypatch.delitem(sys.modules, "tilerosetta.specs.zz_extra", raising=False)
    try:
        return specs._discover()
    finally:
        sys.modules.pop("tilerosetta.specs.zz_extra", None)


EXTRA = """
from tilerosetta.specs.base import OpSpec
class ZzExtra(OpSpec):
    name = {name!r}
    order = {order}
"""


def test_discovery_takes_a_new_module_without_registration(tmp_path, monkeypatch):
    found = _discover_with(tmp_path, monkeypatch, EXTRA.format(name="zz_extra", order=10**6))
    assert tuple(found)[:-1] == OP_NAMES and tuple(found)[-1] == "zz_extra"


@pytest.mark.parametrize("name, order, message", [
    ("zz_extra", 10, "share an order value"),           # vector_add's
    ("other_name", 10**6, "lives in specs/<name>.py"),
    ("zz_extra", "'1'", "order must be an int"),
])
def test_discovery_refuses_a_malformed_spec_module(tmp_path, monkeypatch, name, order, message):
    with pytest.raises(ImportError, match=re.escape(message)):
        _discover_with(tmp_path, monkeypatch, EXTRA.format(name=name, order=order))


@pytest.mark.parametrize("op", OP_NAMES)
def test_spec_is_complete(op):
    spec = SPECS[op]
    assert spec.cases and spec.bench_cases and spec.dtypes and spec.summary
    names = [c.name for c in spec.cases]
    assert len(names) == len(set(names)), f"duplicate case names in {op}"
    dims = [c.dims for c in spec.cases]
    assert any(min(d.values()) == 1 for d in dims), f"{op} has no size-1 case"
    assert any(any(v % 2 for v in d.values() if v > 2) for d in dims), f"{op} has no odd (untileable) size"
    for case in spec.bench_cases:
        assert spec.bytes_moved(case, torch.bfloat16) > 0
        assert spec.flops(case) >= 0


def _ref(op, case, dtype=torch.float32):
    spec = SPECS[op]
    inputs, _ = make_case_tensors(spec, case, dtype, "cpu", seed=3)
    return inputs, reference(spec, case, inputs)["out"]


def test_softmax_reference_is_stable_and_matches_torch():
    inputs, ref = _ref("softmax", Case({"M": 4, "N": 300}))
    assert torch.isfinite(ref).all()
    assert torch.allclose(ref.sum(-1), torch.ones(4, dtype=torch.float64))
    assert rel_error(torch.softmax(inputs["x"].double(), -1), ref) < 1e-12


def test_norm_references_match_torch_functional():
    inputs, ref = _ref("rms_norm", Case({"M": 5, "N": 33}))
    x, w = inputs["x"].double(), inputs["w"].double()
    assert rel_error(F.rms_norm(x, (33,), w, 1e-6), ref) < 1e-12
    inputs, ref = _ref("layer_norm", Case({"M": 5, "N": 33}))
    x, w, b = (inputs[n].double() for n in "xwb")
    assert rel_error(F.layer_norm(x, (33,), w, b, 1e-5), ref) < 1e-12


def test_add_rms_norm_reference_is_the_add_then_rms_norm():
    spec = SPECS["add_rms_norm"]
    case = Case({"M": 5, "N": 33})
    inputs, _ = make_case_tensors(spec, case, torch.float32, "cpu", seed=3)
    ref = reference(spec, case, inputs)
    s = inputs["x"].double() + inputs["residual"].double()
    assert rel_error(s, ref["sum"]) < 1e-12
    assert rel_error(F.rms_norm(s, (33,), inputs["weight"].double(), 1e-6), ref["out"]) < 1e-12
    assert rel_error(F.rms_norm(inputs["x"].double(), (33,), inputs["weight"].double(), 1e-6), ref["out"]) > 0.1


def test_attention_reference_matches_sdpa():
    for causal in (False, True):
        case = Case({"B": 1, "H": 2, "S": 19, "D": 64}, {"causal": causal})
        inputs, ref = _ref("attention", case, torch.float16)
        q, k, v = (inputs[n].double() for n in "qkv")
        assert rel_error(F.scaled_dot_product_attention(q, k, v, is_causal=causal), ref) < 1e-10


@pytest.mark.parametrize("hkv,s,sk", [(2, 5, 5), (1, 1, 23), (4, 7, 20), (2, 9, 20)])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_gqa_reference_matches_sdpa_lower_right(hkv, s, sk, causal):
    """GQA and S < Sk: torch SDPA with enable_gqa and, for causal, the lower-right (end-aligned) bias."""
    from torch.nn.attention.bias import causal_lower_right

    case = Case({"B": 2, "H": 8, "Hkv": hkv, "S": s, "Sk": sk, "D": 64}, {"causal": causal})
    inputs, ref = _ref("attention", case, torch.float16)
    q, k, v = (inputs[n].double() for n in "qkv")
    assert k.shape == (2, hkv, sk, 64)
    kr, vr = (t.repeat_interleave(8 // hkv, dim=1) for t in (k, v))
    mask = causal_lower_right(s, sk) if causal else None
    want = F.scaled_dot_product_attention(q, kr, vr, attn_mask=mask)
    assert rel_error(want, ref) < 1e-10
    if causal and s < sk:  # top-left is_causal differs: the reference really is end-aligned
        assert rel_error(F.scaled_dot_product_attention(q, kr, vr, is_causal=True), ref) > 1e-3


def test_attention_refuses_bad_gqa_and_causal_lengths():
    spec = SPECS["attention"]
    q, out = torch.zeros(1, 6, 4, 64, dtype=torch.float16), torch.zeros(1, 6, 4, 64, dtype=torch.float16)
    kv = torch.zeros(1, 4, 8, 64, dtype=torch.float16)
    with pytest.raises(TileRosettaError, match=r"attention.*argument 'k'.*Hkv=4.*does not divide.*H=6"):
        spec.validate("demo", "cpu", {"q": q, "k": kv, "v": kv.clone(), "out": out}, {})
    short = torch.zeros(1, 2, 3, 64, dtype=torch.float16)
    with pytest.raises(TileRosettaError, match=r"argument 'q'.*causal with S=4 queries > Sk=3 keys"):
        spec.validate("demo", "cpu", {"q": q, "k": short, "v": short.clone(), "out": out}, {"causal": True})
    dims = spec.validate("demo", "cpu", {"q": q, "k": short, "v": short.clone(), "out": out}, {"causal": False})
    assert dims == {"B": 1, "H": 6, "S": 4, "D": 64, "Hkv": 2, "Sk": 3}


def test_rope_reference_rotates_pairs():
    inputs, ref = _ref("rope", Case({"B": 1, "H": 1, "S": 5, "D": 8}))
    q, cos, sin = (inputs[n].double() for n in ("q", "cos", "sin"))
    # position 0 has angle 0: identity
    assert rel_error(ref[0, 0, 0], q[0, 0, 0]) < 1e-6
    # a rotation preserves the norm of each (i, i + D/2) pair, up to the rounding of cos/sin to fp32
    pairs_in = q[..., :4] ** 2 + q[..., 4:] ** 2
    pairs_out = ref[..., :4] ** 2 + ref[..., 4:] ** 2
    assert torch.allclose(pairs_in, pairs_out, rtol=1e-5)


def test_flop_and_byte_counts():
    mm = SPECS["matmul"]
    c = Case({"M": 4096, "N": 4096, "K": 4096})
    assert mm.flops(c) == 2 * 4096**3
    assert mm.bytes_moved(c, torch.bfloat16) == 3 * 4096 * 4096 * 2
    att = SPECS["attention"]
    nc = Case({"B": 4, "H": 32, "S": 4096, "D": 128}, {"causal": False})
    cc = Case({"B": 4, "H": 32, "S": 4096, "D": 128}, {"causal": True})
    assert att.flops(nc) == 4 * 4 * 32 * 4096 * 4096 * 128 == 2 * att.flops(cc)
    # End-aligned causal mask: S * (Sk - S) full rows plus the S x S triangle counted as S^2 / 2.
    dec = Case({"B": 2, "H": 32, "Hkv": 8, "S": 1, "Sk": 4096, "D": 128}, {"causal": True})
    assert att.flops(dec) == 4 * 2 * 32 * (4095 + 0.5) * 128
    pre = Case({"B": 1, "H": 4, "Hkv": 1, "S": 3, "Sk": 10, "D": 64}, {"causal": True})
    assert att.flops(pre) == 4 * 4 * (3 * 7 + 4.5) * 64
    assert att.flops(Case(pre.dims, {"causal": False})) == 4 * 4 * 30 * 64
    # k and v are (B, Hkv, Sk, D): bytes count them at their own size
    assert att.bytes_moved(dec, torch.bfloat16) == (2 * 2 * 32 * 128 + 2 * 2 * 8 * 4096 * 128) * 2
    sm = SPECS["silu_and_mul"]
    assert sm.bytes_moved(Case({"M": 10, "H": 3}), torch.float32) == (10 * 6 + 10 * 3) * 4


def test_validation_names_the_argument():
    spec = SPECS["silu_and_mul"]
    x = torch.randn(4, 10)
    out = torch.empty(4, 6)
    with pytest.raises(TileRosettaError, match=r"argument 'x'.*expected shape \(4, 12\)"):
        spec.validate("demo", "cpu", {"x": x, "out": out}, {})
    assert spec.validate("demo", "cpu", {"x": x, "out": torch.empty(4, 5)}, {}) == {"M": 4, "H": 5}


def test_attention_rejects_unsupported_head_dim():
    spec = SPECS["attention"]
    t = torch.randn(1, 1, 4, 32, dtype=torch.float16)
    with pytest.raises(TileRosettaError, match="head dim D=32"):
        spec.validate("demo", "cpu", {"q": t, "k": t, "v": t, "out": t.clone()}, {})


def test_rel_error_never_passes_nan():
    ref = torch.ones(4)
    out = torch.ones(4)
    out[2] = float("nan")
    assert math.isinf(rel_error(out, ref))
    assert rel_error(torch.ones(4), ref) == 0.0


def test_decode_panel_is_the_widest_panel_with_enough_blocks():
    from tilerosetta.specs import decode_panel
    from tilerosetta.specs.base import DECODE_MIN_BLOCKS, DECODE_PANELS

    assert [decode_panel(n) for n in (1, 4096, 8192, 14336, 1 << 20)] == [32, 32, 64, 128, 128]
    for n in range(1, 40000, 37):
        bn = decode_panel(n)
        wider = [p for p in DECODE_PANELS if p > bn]
        assert bn == DECODE_PANELS[-1] or -(-n // bn) >= DECODE_MIN_BLOCKS, n
        assert all(-(-n // p) < DECODE_MIN_BLOCKS for p in wider), n  # no wider panel had blocks enough
