"""cutile_py softmax's sweep knobs change the sm_90 code as softmax.py says (bench/GAPS.md, cutile_py softmax).
Checked without a GPU, on the bf16 bench shapes:

- defaults (EXACT=0, LOAD_TMA=1, STORE_TMA=1): predicated LDG loads, output staged in shared memory and
  stored by TMA (UTMASTG), no STG;
- STORE_TMA=0: STG stores, no UTMASTG and no mbarrier (SYNCS) traffic;
- EXACT=1 on whole tiles: no predicated LDG/STG (with LOAD_TMA=0), or x by TMA (LOAD_TMA=1);
- EXACT=1 falls back to the bounds-checked kernel when a tile is not whole, and the sweep can select the knobs.
"""

from __future__ import annotations

import re

import pytest
import torch

from tilerosetta.bench import sweep
from tilerosetta.kernels.cutile import config
from tilerosetta.specs import SPECS

BENCH = [(c.dims["M"], c.dims["N"]) for c in SPECS["softmax"].bench_cases]
_PREDICATED = re.compile(r"@!?U?P[T0-9]+\s+(LDG|STG)\.")


def _softmax():
    try:
        import cuda.tile  # noqa: F401
    except Exception as exc:
        pytest.skip(f"cuda.tile not importable: {type(exc).__name__}: {exc}")
    from tilerosetta.kernels.cutile import softmax

    return softmax


def _launch(m, n, **knobs):
    x = torch.empty(m, n, dtype=torch.bfloat16, device="meta")
    cfg = {**config.default_config("softmax", "bf16"), **knobs}
    config.check_config("softmax", cfg)
    (lx,) = _softmax().prepare(x, torch.empty_like(x), cfg)
    return lx


def test_defaults_keep_the_bounds_checked_tma_store_kernel():
    for dt in ("fp32", "fp16", "bf16"):
        d = config.default_config("softmax", dt)
        assert (d["EXACT"], d["LOAD_TMA"], d["STORE_TMA"]) == (0, 1, 1), d
    for m, n in BENCH:
        assert _launch(m, n).args[4:] == (True, True, True)  # CHECK, LOAD_TMA, STORE_TMA


def test_exact_only_on_whole_tiles():
    for m, n in BENCH:
        assert _launch(m, n, EXACT=1, LOAD_TMA=0).args[4:] == (False, False, True)
    assert _launch(4097, 4096, EXACT=1).args[4] is True  # BM=2 does not divide M
    assert _launch(4096, 4000, EXACT=1).args[4] is True  # padded columns
    assert _launch(4096, 4000, EXACT=1, LOAD_TMA=0).args[5] is True  # LOAD_TMA only matters on exact tiles
    assert _launch(8, 65536, EXACT=1, STORE_TMA=0).args[-1] is False  # the looped kernel takes STORE_TMA too
    with pytest.raises(ValueError, match="EXACT=2"):
        config.check_config("softmax", {"EXACT": 2})
    with pytest.raises(ValueError, match="unknown config key"):
        config.check_config("rms_norm", {"EXACT": 1})  # softmax's knobs only


def test_sweep_selects_each_flag_setting():
    space = config.config_space("softmax", "bf16")
    flags = ("EXACT", "LOAD_TMA", "STORE_TMA")
    picked = sweep.select(space, [sweep.parse_where("EXACT=1"), sweep.parse_where("STORE_TMA=0")])
    got = {tuple(c[k] for k in flags) for c in picked}
    assert got == {(1, 1, 1), (1, 0, 1), (0, 1, 0), (1, 1, 0), (1, 0, 0)}, got
    assert all(c[k] == config.default_config("softmax", "bf16")[k] for c in picked for k in ("ROW_ELEMS", "WARPS"))


def _sass_facts(lx):
    from tilerosetta import cubin as cubin_mod
    from tilerosetta.kernels.cutile import export

    cubin = export.compile_cubin(lx, export.signature(lx), "sm_90")
    (k,) = cubin_mod.analyse(cubin)
    count = lambda prefix: sum(c for o, c in k.mix.items() if o.startswith(prefix))  # noqa: E731
    predicated = len(_PREDICATED.findall(cubin_mod._run("-sass", cubin=cubin)))
    return {"LDG": count("LDG"), "STG": count("STG"), "UTMALDG": count("UTMALDG"), "UTMASTG": count("UTMASTG"),
            "SYNCS": count("SYNCS"), "predicated": predicated, "spills": k.spill_stores}


@pytest.mark.parametrize("m,n", BENCH)
def test_knobs_change_the_sm90_code(m, n):
    _softmax()
    from tilerosetta import toolchain

    ok, why = toolchain.activate().can_target("sm_90")
    if not ok:
        pytest.skip(why)
    base = _sass_facts(_launch(m, n))
    assert base["UTMASTG"] > 0 and base["STG"] == 0 and base["LDG"] > 0 and base["predicated"] > 0, base

    stg = _sass_facts(_launch(m, n, STORE_TMA=0))
    assert stg["UTMASTG"] == 0 and stg["STG"] > 0 and stg["SYNCS"] == 0, stg

    exact_ldg = _sass_facts(_launch(m, n, EXACT=1, LOAD_TMA=0, STORE_TMA=0))
    assert exact_ldg["LDG"] > 0 and exact_ldg["STG"] > 0 and exact_ldg["predicated"] == 0, exact_ldg
    assert exact_ldg["UTMALDG"] == exact_ldg["UTMASTG"] == exact_ldg["SYNCS"] == 0, exact_ldg

    exact_tma = _sass_facts(_launch(m, n, EXACT=1))
    assert exact_tma["UTMALDG"] > 0 and exact_tma["LDG"] == 0 and exact_tma["UTMASTG"] > 0, exact_tma
    assert all(f["spills"] == 0 for f in (base, stg, exact_ldg, exact_tma))
