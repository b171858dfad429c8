"""Every Triton kernel variant the backend launches on the spec's sizes compiles for sm_90 (H200) to a
cubin and fits Hopper's shared memory — checked without a GPU (Triton ships ptxas).

The CPU interpreter runs the kernels' arithmetic but not the compiler, so this is the CI check of the
compiled path. It runs in a subprocess with TRITON_INTERPRET=0: this process may already have imported
the kernels in interpreter mode.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tilerosetta.specs import OP_NAMES

PYTHON_DIR = Path(__file__).resolve().parents[1] / "python"


@pytest.fixture(scope="module")
def aot_report(request):
    from conftest import selected_backends

    if "triton" not in selected_backends(request.config):
        pytest.skip("triton not selected (--backend)")
    if importlib.util.find_spec("triton") is None:  # find, not import: importing first would break the interpreter
        pytest.skip("triton is not installed")
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=str(PYTHON_DIR))
    proc = subprocess.run([sys.executable, "-m", "tilerosetta.kernels.triton.aot_check", "--arch", "90"],
                          env=env, capture_output=True, text=True, timeout=1800)
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"aot_check crashed (rc={proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")


@pytest.mark.parametrize("op", OP_NAMES)
def test_compiles_for_sm90(aot_report, op):
    compiled = [line for line in aot_report["ok"] if line.startswith(f"{op}/")]
    failed = [line for line in aot_report["fail"] if line.startswith(f"{op}/")]
    assert not failed, "\n".join(failed)
    assert compiled, f"no {op} kernel was compiled"


def _probe(code: str) -> list[dict]:
    """Run a compile probe (code printing JSON) in a subprocess with TRITON_INTERPRET=0; its rows."""
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed")
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=str(PYTHON_DIR))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)


_CAP_PROBE = r"""
import json, sys
import torch
from tilerosetta import cubin as cubin_mod
from tilerosetta.kernels.triton import config
from tilerosetta.kernels.triton.aot_check import compile_one, variants

out = []
for op, caps in config._ROW_CAPS.items():
    for n, cfg in caps:
        assert cfg in config.space(op, torch.bfloat16), (op, cfg)
        for capped in (cfg, {**cfg, "maxnreg": 0}):
            dims = {"M": 4096, "N": n}
            ((kernel, sig, consts, warps, stages, extra, _div),) = variants(op, torch.bfloat16, dims, capped)
            (k,) = cubin_mod.analyse(compile_one(kernel, sig, consts, warps, stages, 90, True, extra).asm["cubin"])
            k.threads = warps * 32
            out.append({"op": op, "cfg": capped, "options": extra, "regs": k.regs, "stl": k.spill_stores,
                        "blocks": k.occupancy("sm_90")[0]})
print(json.dumps(out))
"""


def test_row_register_caps_fit_more_rows_per_sm_without_spills():
    """Each capped row config of the sweep space (config._ROW_CAPS, on the row width it is for) reaches the
    kernel as maxnreg, keeps every value in registers, and puts more one-row programs on an SM than the same
    config uncapped."""
    rows = _probe(_CAP_PROBE)
    assert {r["op"] for r in rows} >= {"softmax", "rms_norm"}, rows
    for capped, free in zip(rows[::2], rows[1::2]):
        cap = capped["cfg"]["maxnreg"]
        assert capped["options"] == {"maxnreg": cap} and free["options"] == {}, (capped, free)
        assert capped["regs"] <= cap and capped["stl"] == 0, capped
        assert capped["blocks"] > free["blocks"], (capped, free)


_SOFTMAX_PROBE = r"""
import json
import torch
from tilerosetta import cubin as cubin_mod
from tilerosetta.kernels.triton import config
from tilerosetta.kernels.triton.aot_check import compile_one, variants

out = []
single_max = config.default("softmax", torch.bfloat16, {"M": 4096, "N": 4096}, False)["single_max"]
for n in (4096, 16384, single_max + 1):  # the bench widths (one block) and the looped kernel
    dims = {"M": 4096, "N": n}
    cfg = config.default("softmax", torch.bfloat16, dims, False)
    ((kernel, sig, consts, warps, stages, extra, _div),) = variants("softmax", torch.bfloat16, dims, cfg)
    (k,) = cubin_mod.analyse(compile_one(kernel, sig, consts, warps, stages, 90, True, extra).asm["cubin"])
    fam = lambda p: sum(c for op, c in k.mix.items() if op.startswith(p))
    out.append({"n": n, "kernel": kernel.fn.__name__, "ex2": fam("MUFU.EX2"), "fsetp": fam("FSETP"),
                "rcp": fam("MUFU.RCP")})
print(json.dumps(out))
"""


def test_softmax_exponentials_are_bare_ex2_and_one_reciprocal_per_row():
    """softmax's exp(x - max) is tl.exp2 of (x - max) * log2 e (ex2.approx.ftz: a bare MUFU.EX2; tl.exp's non-ftz ex2
    puts an FSETP beside each) and the row sum is inverted once, not divided into every element (a division
    is a MUFU.RCP and its fix-up per element), in the sm_90 code of the configs the bench runs."""
    rows = _probe(_SOFTMAX_PROBE)
    assert {r["kernel"] for r in rows} == {"softmax_block_kernel", "softmax_loop_kernel"}, rows
    for r in rows:
        assert r["ex2"] > 0 and r["fsetp"] * 4 < r["ex2"], r
        assert r["rcp"] <= 2, r


_MATMUL_TMA_PROBE = r"""
import json
import torch
from tilerosetta import cubin as cubin_mod
from tilerosetta.kernels.triton import config
from tilerosetta.kernels.triton.aot_check import compile_one, variants

out = []
for op, dims in (("matmul", {"M": 8192, "N": 8192, "K": 8192}), ("bmm", {"Bt": 4, "M": 4096, "N": 4096, "K": 4096})):
    for tma, persist in ((0, 0), (1, 0), (1, 1)):
        cfg = {**config.default(op, torch.bfloat16, dims, False), "TMA": tma, "PERSIST": persist}
        ((kernel, sig, consts, w, stages, extra, _div),) = variants(op, torch.bfloat16, dims, cfg)
        compiled = compile_one(kernel, sig, consts, w, stages, 90, True, extra)
        (k,) = cubin_mod.analyse(compiled.asm["cubin"])
        fam = lambda p: sum(c for o, c in k.mix.items() if o.startswith(p))
        out.append({"op": op, "tma": tma + persist, "kernel": kernel.fn.__name__, "regs": k.regs,
                    "stl": k.spill_stores, "utmaldg": fam("UTMALDG"), "ldgsts": fam("LDGSTS"), "hgmma": fam("HGMMA"),
                    "smem": compiled.metadata.shared})
print(json.dumps(out))
"""


def test_matmul_tma_loads_through_the_copy_engine():
    """TMA 1 runs the descriptor kernel for the bench's GEMMs (8192^3, Bt 4 x 4096^3): its tiles arrive by TMA
    (UTMALDG, no cp.async LDGSTS issued by every warp), the same wgmma, fewer registers, no spills (sm_90:
    204 -> 154 registers at the default 128 x 256 tile)."""
    rows = {(r["op"], r["tma"]): r for r in _probe(_MATMUL_TMA_PROBE)}
    for op in ("matmul", "bmm"):
        ptr, tma = rows[op, 0], rows[op, 1]
        assert (ptr["kernel"], tma["kernel"]) == ("matmul_kernel", "matmul_tma_kernel"), (ptr, tma)
        # PERSIST 1 (rows[op, 2]): the same loads and MMAs in one flattened loop over the program's tiles, no
        # spills, one CTA per SM's shared memory (sm_90: 167 registers, 213016 B with the store's staging)
        walk = rows[op, 2]
        assert walk["kernel"] == "matmul_tma_persistent_kernel" and walk["stl"] == 0, walk
        assert (walk["utmaldg"], walk["hgmma"], walk["ldgsts"]) == (tma["utmaldg"], tma["hgmma"], 0), (tma, walk)
        assert walk["smem"] <= 232448, walk  # the sm_90 opt-in limit per block
        assert ptr["ldgsts"] > 0 and ptr["utmaldg"] == 0, ptr
        assert tma["utmaldg"] > 0 and tma["ldgsts"] == 0 and tma["stl"] == 0, tma
        assert tma["hgmma"] == ptr["hgmma"] and tma["regs"] < ptr["regs"], (ptr, tma)


_ROPE_EVICT_PROBE = r"""
import json, re
import torch
from tilerosetta.kernels.triton import config
from tilerosetta.kernels.triton.aot_check import compile_one, variants

dims = {"B": 4, "H": 32, "S": 4096, "D": 128}
out = []
for evict in (0, 1, 2):
    cfg = {**config.default("rope", torch.bfloat16, dims, False), "EVICT": evict}
    ((kernel, sig, consts, w, stages, extra, div),) = variants("rope", torch.bfloat16, dims, cfg)
    ptx = compile_one(kernel, sig, consts, w, stages, 90, div, extra).asm["ptx"]
    ops = re.findall(r"\b((?:ld|st)\.global[.\w:]*)", ptx)
    out.append({"evict": evict, "loads": sorted(o for o in ops if o.startswith("ld")),
                "stores": sorted(o for o in ops if o.startswith("st"))})
print(json.dumps(out))
"""


def test_rope_eviction_hints_reach_the_ptx():
    """EVICT 1 marks the 4 cos/sin loads evict_last (each table row serves all B*H rows of its position, as
    inductor marks broadcast loads) and leaves q and out plain; EVICT 2 also marks q's 2 loads and out's 2
    stores evict_first; EVICT 0 (the default) emits no hint."""
    rows = {r["evict"]: r for r in _probe(_ROPE_EVICT_PROBE)}
    hinted = lambda ops, hint: sum(f"evict_{hint}" in o for o in ops)
    assert len(rows[0]["loads"]) == 6 and len(rows[0]["stores"]) == 2, rows[0]
    assert not any("evict" in o for o in rows[0]["loads"] + rows[0]["stores"]), rows[0]
    assert (hinted(rows[1]["loads"], "last"), hinted(rows[1]["loads"], "first")) == (4, 0), rows[1]
    assert hinted(rows[1]["stores"], "first") == 0, rows[1]
    assert (hinted(rows[2]["loads"], "last"), hinted(rows[2]["loads"], "first")) == (4, 2), rows[2]
    assert hinted(rows[2]["stores"], "first") == 2, rows[2]


_ROPE_WIDE_PROBE = r"""
import json
import torch
from tilerosetta import cubin as cubin_mod
from tilerosetta.kernels.triton import config
from tilerosetta.kernels.triton.aot_check import compile_one, variants

out = []
for dims in ({"B": 4, "H": 32, "S": 4096, "D": 128}, {"B": 64, "H": 64, "S": 4096, "D": 128}):
    for wide in (1, 0):
        cfg = {**config.default("rope", torch.bfloat16, dims, False), "WIDE": wide}
        ((kernel, sig, consts, w, stages, extra, div),) = variants("rope", torch.bfloat16, dims, cfg)
        (k,) = cubin_mod.analyse(compile_one(kernel, sig, consts, w, stages, 90, div, extra).asm["cubin"])
        out.append({"elements": dims["B"] * dims["H"] * dims["S"] * dims["D"], "wide": wide,
                    "compiled_wide": consts["WIDE"], "calls": sum(c for o, c in k.mix.items() if o.startswith("CALL")),
                    "instructions": sum(k.mix.values())})
print(json.dumps(out))
"""


def test_rope_narrow_offsets_drop_the_64_bit_division():
    """WIDE 0 computes `rows % S` in 32 bits (no call to the 64-bit division routine before the loads: sm_90, 304 ->
    200 instructions at the bench case), and only where every offset fits: 2**31 elements of q or more keep
    64-bit offsets whatever the config asks."""
    rows = {(r["elements"] < 2**31, r["wide"]): r for r in _probe(_ROPE_WIDE_PROBE)}
    assert rows[True, 1]["compiled_wide"] and rows[True, 1]["calls"] >= 1, rows[True, 1]
    assert not rows[True, 0]["compiled_wide"] and rows[True, 0]["calls"] == 0, rows[True, 0]
    assert rows[True, 0]["instructions"] < rows[True, 1]["instructions"], rows
    assert rows[False, 0]["compiled_wide"], rows[False, 0]  # 2**31 elements: 64-bit offsets regardless
