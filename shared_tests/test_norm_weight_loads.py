"""The norms' weight (and bias) loads are in flight with x's, at the occupancy the kernels had before
(bench/GAPS.md: cutile_py rms_norm / layer_norm, triton layer_norm 4096x8192). Checked without a GPU:

- cutile_py: whole-tile shapes take the exact kernels, whose w (and b) come by TMA, issued by the
  producer warp with x at the start of the block: the sm_90 cubin has no LDG left and keeps 4 blocks/SM.
  Other shapes keep the bounds-checked kernels. The sweep's LOAD_TMA=0 / STORE_TMA=0 turn the exact kernels
  into plain LDG / STG ones without the producer warpgroup.
- triton layer_norm: w and b are loaded before the first block barrier, and the launch's register cap
  keeps 3 programs/SM at 16 warps (compiled in a subprocess with TRITON_INTERPRET=0, as
  test_triton_compile does: this process may have imported the kernels for the interpreter).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

PYTHON_DIR = Path(__file__).resolve().parents[1] / "python"
BENCH = ((4096, 8192), (16384, 4096))  # the bench shapes of both norms (M, N)
_PREDICATED = re.compile(r"@!?U?P[T0-9]+\s+(LDG|STG)\.")


def _cutile():
    try:
        import cuda.tile  # noqa: F401
    except Exception as exc:
        pytest.skip(f"cuda.tile not importable: {type(exc).__name__}: {exc}")
    from tilerosetta.kernels.cutile import add_rms_norm, config, layer_norm, rms_norm

    return config, {"rms_norm": rms_norm, "layer_norm": layer_norm, "add_rms_norm": add_rms_norm}


def _launch(modules, config, op, m, n, dtype=torch.bfloat16, **knobs):
    def t(*shape):
        return torch.empty(shape, dtype=dtype, device="meta")

    args = {"rms_norm": (t(m, n), t(n), t(m, n)), "layer_norm": (t(m, n), t(n), t(n), t(m, n)),
            "add_rms_norm": (t(m, n), t(m, n), t(n), t(m, n), t(m, n))}[op]
    cfg = {**config.default_config(op, {torch.bfloat16: "bf16", torch.float32: "fp32"}[dtype]), **knobs}
    config.check_config(op, cfg)
    (lx,) = modules[op].prepare(*args, cfg, eps=1e-5)
    return lx


def _tma_args(lx):
    return lx.args[-3:]  # the exact kernels' (LOAD_TMA, WB_TMA, STORE_TMA)


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm", "add_rms_norm"])
def test_cutile_exact_kernel_only_for_whole_tiles(op):
    config, modules = _cutile()
    from tilerosetta.kernels.cutile.export import kernel_name

    for m, n in BENCH:
        lx = _launch(modules, config, op, m, n)
        assert kernel_name(lx) == f"{op}_exact_kernel", (m, n)
        assert _tma_args(lx) == (True, True, True)  # x, w/b by TMA at these widths; the output by TMA
        assert _tma_args(_launch(modules, config, op, m, n, LOAD_TMA=0)) == (False, False, True)  # w/b with x
        assert _tma_args(_launch(modules, config, op, m, n, STORE_TMA=0)) == (True, True, False)
    assert kernel_name(_launch(modules, config, op, 2048, 16384)) == f"{op}_exact_kernel"
    assert _tma_args(_launch(modules, config, op, 2048, 16384)) == (True, False, True)  # 16384: w/b on LDG (smem)
    assert kernel_name(_launch(modules, config, op, 4097, 4096)) == f"{op}_single_kernel"  # BM 2 does not divide M
    assert kernel_name(_launch(modules, config, op, 4096, 4000)) == f"{op}_single_kernel"  # padded columns


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm", "add_rms_norm"])
def test_cutile_exact_kernel_loads_weights_by_tma_at_4_blocks(op):
    config, modules = _cutile()
    from tilerosetta import cubin as cubin_mod
    from tilerosetta import toolchain
    from tilerosetta.kernels.cutile import export

    tc = toolchain.activate()
    ok, why = tc.can_target("sm_90")
    if not ok:
        pytest.skip(why)
    for m, n in BENCH:
        lx = _launch(modules, config, op, m, n)
        (k,) = cubin_mod.analyse(export.compile_cubin(lx, export.signature(lx), "sm_90"))
        ldg = sum(c for o, c in k.mix.items() if o.startswith("LDG"))
        tma = sum(c for o, c in k.mix.items() if o.startswith("UTMALDG.1D"))
        assert ldg == 0 and tma > 0, (op, m, n, dict(k.mix))
        assert k.occupancy("sm_90")[0] >= 4, (op, m, n, k)
        assert k.spill_stores == 0, (op, m, n, k)



@pytest.mark.parametrize("op", ["rms_norm", "layer_norm", "add_rms_norm"])
def test_cutile_exact_kernel_without_tma_drops_the_producer_warpgroup(op):
    """LOAD_TMA=0 STORE_TMA=0: plain LDG / STG, no TMA and no mbarrier traffic, 128 threads (no producer warps),
    unpredicated (whole tiles), no spills; each switch alone removes only its own side's TMA."""
    config, modules = _cutile()
    from tilerosetta import cubin as cubin_mod
    from tilerosetta import toolchain
    from tilerosetta.kernels.cutile import export

    ok, why = toolchain.activate().can_target("sm_90")
    if not ok:
        pytest.skip(why)

    def facts(**knobs):
        lx = _launch(modules, config, op, *BENCH[0], **knobs)
        cubin = export.compile_cubin(lx, export.signature(lx), "sm_90")
        (k,) = cubin_mod.analyse(cubin)
        count = lambda prefix: sum(c for o, c in k.mix.items() if o.startswith(prefix))  # noqa: E731
        got = {p: count(p) for p in ("LDG", "STG", "UTMALDG", "UTMASTG", "SYNCS")}
        got["predicated"] = len(_PREDICATED.findall(cubin_mod._run("-sass", cubin=cubin)))
        return k, got

    k, plain = facts(LOAD_TMA=0, STORE_TMA=0)
    assert plain["LDG"] > 0 and plain["STG"] > 0 and plain["predicated"] == 0, plain  # whole tiles: no predicates
    assert plain["UTMALDG"] == plain["UTMASTG"] == plain["SYNCS"] == 0, plain
    assert k.threads == 128 and k.spill_stores == 0, (k.threads, k.regs, k.spill_stores)
    _, ldg_only = facts(LOAD_TMA=0)
    assert ldg_only["UTMALDG"] == 0 and ldg_only["UTMASTG"] > 0, ldg_only
    _, stg_only = facts(STORE_TMA=0)
    assert stg_only["UTMALDG"] > 0 and stg_only["UTMASTG"] == 0 and stg_only["STG"] > 0, stg_only


_TRITON_PROBE = r"""
import json, sys
import torch
from tilerosetta import cubin as cubin_mod
from tilerosetta.kernels.triton import config
from tilerosetta.kernels.triton.aot_check import compile_one, variants

out = []
for m, n in json.loads(sys.argv[1]):
    cfg = config.default("layer_norm", torch.bfloat16, {"M": m, "N": n}, interpret=False)
    ((kernel, sig, consts, warps, stages, extra, _div),) = variants("layer_norm", torch.bfloat16, {"M": m, "N": n}, cfg)
    cubin = compile_one(kernel, sig, consts, warps, stages, 90, True, extra).asm["cubin"]
    (k,) = cubin_mod.analyse(cubin)
    k.threads = warps * 32
    sass = cubin_mod._run("-sass", cubin=cubin)
    seq = [mm.group(1) for mm in map(cubin_mod._SASS_INSTR.match, sass.splitlines()) if mm]
    out.append({"m": m, "n": n, "options": extra, "regs": k.regs, "stl": k.spill_stores,
                "blocks": k.occupancy("sm_90")[0], "seq": seq})
print(json.dumps(out))
"""


def test_triton_layer_norm_loads_w_b_with_x_at_the_old_occupancy():
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed")
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=str(PYTHON_DIR))
    proc = subprocess.run([sys.executable, "-c", _TRITON_PROBE, json.dumps(BENCH)], env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    by_shape = {(r["m"], r["n"]): r for r in json.loads(proc.stdout)}
    for shape, blocks in (((4096, 8192), 3), ((16384, 4096), 6)):
        r = by_shape[shape]
        assert r["options"].get("maxnreg") == 40 and r["regs"] <= 40, r["options"]
        assert r["blocks"] == blocks, (shape, r["regs"], r["blocks"])
        seq = r["seq"]
        first_bar = seq.index("BAR.SYNC.DEFER_BLOCKING")
        loads = [i for i, op in enumerate(seq) if op.startswith("LDG")]
        assert len(loads) == 6 and max(loads) < first_bar, (shape, loads, first_bar)  # x, w, b before the reductions
    assert by_shape[(4096, 8192)]["stl"] == 0  # no spill at 16 warps
