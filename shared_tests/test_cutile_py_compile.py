"""cutile_py without a GPU: every kernel of every op and dtype compiles to a cubin for each tile arch.

The launches come from the same `prepare` functions the backend uses (on meta tensors, so bench sizes
cost no memory), so the compiled signatures are the ones a GPU run would JIT: the tile sizes of the
default config table, the scalar constants (eps, causal, scale), the dtypes and ranks. Array arguments
get the assumptions cuda.tile's JIT derives from real tensors: last stride 1, and divisibility of
shapes/strides by up to 16 taken from the actual extents (so bench shapes compile the aligned, TMA
friendly variants, tail shapes the generic ones).

Which shapes: every op's bench cases, plus its first conformance case (smallest: tiles clamped to
the minimum), plus the first conformance case that reaches a kernel not reached yet (the looped
row kernels). TILEROSETTA_CUTILE_COMPILE=full compiles every conformance case as well.
TILEROSETTA_CUTILE_ARCHS=sm_90 (comma list) restricts the archs for quick local iteration.

Also here: pure-CPU tests of the host-side planning in kernels/cutile/config.py.
"""

from __future__ import annotations

import os

import pytest
import torch

from tilerosetta import toolchain
from tilerosetta.kernels.cutile import KERNEL_MODULES
from tilerosetta.kernels.cutile import config as cfg
from tilerosetta.kernels.cutile import export
from tilerosetta.specs import SPECS, dtype_name

ARCHS = [a for a in os.environ.get("TILEROSETTA_CUTILE_ARCHS", ",".join(toolchain.COMPILE_ARCHS)).split(",") if a]
FULL = os.environ.get("TILEROSETTA_CUTILE_COMPILE", "") == "full"
EM_CUDA = 190  # ELF e_machine of NVIDIA cubins
_CUBINS: dict[tuple, bytes] = {}  # per-session cache: (arch, kernel, signature) -> cubin


def _compiler_ready():
    try:
        import cuda.tile  # noqa: F401
        from cuda.tile.compilation import export_kernel  # noqa: F401
    except Exception as exc:
        return f"cuda.tile not importable: {type(exc).__name__}: {exc}"
    tc = toolchain.activate()
    if not tc.ok:
        return "tileiras not usable: " + "; ".join(tc.problems)
    return None


_signature = export.signature  # the constraints a real tensor's JIT derives (kernels/cutile/export.py)


def _launches(op: str, dtype: torch.dtype):
    """(case name, Launch) pairs to compile for op/dtype, deduplicated by (kernel, args' constraints)."""
    from tilerosetta.kernels.cutile import prepare_fn

    spec, prepare = SPECS[op], prepare_fn(op)
    names = list(spec.inputs) + list(spec.outputs)

    def of(case, **override):
        shapes = spec.shapes(case)
        tensors = [torch.empty(shapes[n], dtype=dtype, device="meta") for n in names]
        knobs = {**cfg.default_config(op, dtype_name(dtype), case.dims), **override}
        return prepare(*tensors, knobs, **spec.full_params(case.params))

    chosen, kernels_seen = list(spec.bench_cases) + [spec.cases[0]], set()
    for case in chosen:
        kernels_seen.update(id(lx.kernel) for lx in of(case))
    for case in spec.cases:
        if FULL or any(id(lx.kernel) not in kernels_seen for lx in of(case)):
            chosen.append(case)
            kernels_seen.update(id(lx.kernel) for lx in of(case))
    # The looped row kernels serve rows wider than MAX_SINGLE (16384 by default, wider than any
    # conformance row): compile them on the widest conformance case with the sweep's smallest
    # MAX_SINGLE, as `tilerosetta sweep` would run them.
    variants = [(case, {}) for case in chosen]
    if op in cfg.ROW_OPS:
        widest = max(spec.cases, key=lambda c: c.dims["N"])
        variants.append((widest, {"MAX_SINGLE": min(cfg.SPACES[op]["MAX_SINGLE"])}))
    if op == "transpose":  # both tile orders (OUT_ROWS), each on the bench shapes and the smallest case
        variants += [(case, {"OUT_ROWS": 1 - cfg.default_config(op, dtype_name(dtype), case.dims)["OUT_ROWS"]})
                     for case in chosen]
    if op in ("matmul", "bmm"):  # PERSIST's tile-walking kernel on the bench shapes (tiles outnumber the SMs)
        variants += [(case, {"PERSIST": 1}) for case in spec.bench_cases]
    out, keys = [], set()
    for case, override in variants:
        for lx in of(case, **override):
            sig = _signature(lx)
            key = (id(lx.kernel), repr(sig))  # constraints are not all hashable; repr tells 1, 1.0, True apart
            if key not in keys:
                keys.add(key)
                out.append((case.name, lx, sig))
    return out


def _compile(arch, launch, sig) -> bytes:
    key = (arch, id(launch.kernel), repr(sig))
    if key not in _CUBINS:
        _CUBINS[key] = export.compile_cubin(launch, sig, arch)
    return _CUBINS[key]


@pytest.mark.parametrize("op", list(SPECS))
@pytest.mark.parametrize("arch", ARCHS)
def test_every_kernel_compiles(arch, op):
    if arch not in toolchain.MIN_TILEIRAS_FOR_ARCH:
        pytest.fail(f"TILEROSETTA_CUTILE_ARCHS names {arch!r}; expected some of {list(toolchain.COMPILE_ARCHS)}")
    if why := _compiler_ready():
        pytest.skip(why)
    ok, why = toolchain.find().can_target(arch)
    if not ok:
        pytest.skip(why)
    failures, compiled = [], set()
    for dtype in SPECS[op].dtypes:
        for case_name, launch, sig in _launches(op, dtype):
            name = launch.kernel._annotated_function.pyfunc.__name__
            consts = [a for a in launch.args if not isinstance(a, torch.Tensor)]
            where = f"{op} {dtype_name(dtype)} {case_name}: {name}{consts} for {arch}"
            try:
                cubin = _compile(arch, launch, sig)
            except Exception as exc:
                failures.append(f"{where}: {type(exc).__name__}: {str(exc)[:2000]}")
                continue
            if cubin[:4] != b"\x7fELF" or int.from_bytes(cubin[18:20], "little") != EM_CUDA:
                failures.append(f"{where}: output is not a CUDA ELF cubin (starts {cubin[:20]!r})")
            compiled.add(name)
    assert not failures, "\n".join(failures)
    # Every kernel function the op's module defines was compiled at least once.
    import importlib
    import cuda.tile as ct

    module = importlib.import_module(f"tilerosetta.kernels.cutile.{KERNEL_MODULES[op][0]}")
    defined = {n for n, v in vars(module).items() if isinstance(v, ct.kernel)}
    assert defined <= compiled, f"{op}: kernels never compiled: {sorted(defined - compiled)}"


# ---- host-side planning (pure CPU, no cuda.tile) ---------------------------------------------------------
def test_next_pow2_and_cdiv():
    assert [cfg.next_pow2(n) for n in (1, 2, 3, 4, 5, 1000, 1024, 1025)] == [1, 2, 4, 4, 8, 1024, 1024, 2048]
    assert [cfg.cdiv(a, 4) for a in (1, 4, 5, 8, 9)] == [1, 1, 2, 2, 3]
    with pytest.raises(ValueError):
        cfg.next_pow2(0)


def test_every_op_has_a_complete_default_table():
    for op in SPECS:
        for dt in SPECS[op].dtypes:
            for case in SPECS[op].cases + SPECS[op].bench_cases:
                knobs = cfg.default_config(op, dtype_name(dt), case.dims)
                assert set(knobs) == set(cfg.SPACES[op]), (op, dt, knobs)
                cfg.check_config(op, knobs)
        space = cfg.config_space(op, "fp16")
        assert space and all(set(c) == set(cfg.SPACES[op]) for c in space)
        for c in space:
            cfg.check_config(op, c)
    assert cfg.default_config("attention", "fp16", {"D": 64}) == cfg.DEFAULTS["attention"]["D64"]


def test_check_config_refuses_bad_values():
    with pytest.raises(ValueError, match="power of two"):
        cfg.check_config("matmul", {"BM": 96})
    with pytest.raises(ValueError, match="unknown config"):
        cfg.check_config("matmul", {"BLOCK": 64})
    with pytest.raises(ValueError, match="power of two"):
        cfg.check_config("softmax", {"LOOP_TN": True})


def test_row_plan_switches_to_the_loop_past_max_single():
    knobs = {"MAX_SINGLE": 8192, "LOOP_TN": 1024, "ROW_ELEMS": 4096, "SM_ELEMS": 32768, "WARPS": 8}
    p = cfg.plan_rows(257, 4099, knobs)
    assert p == {"single": True, "exact": False, "BM": 1, "BN": 8192, "grid": (257, 1, 1), "OCC": 4, "WARPS": 8}
    p = cfg.plan_rows(3, 7, knobs)  # short rows: several rows per block, but not more than M rounded up
    assert p["single"] and not p["exact"] and p["BN"] == 8 and p["BM"] == 4 and p["grid"] == (1, 1, 1)
    p = cfg.plan_rows(5, 8193, knobs)
    assert p == {"single": False, "exact": False, "BM": 1, "BN": 1024, "grid": (5, 1, 1), "OCC": 4, "WARPS": 8}


def test_row_plan_occupancy_keeps_sm_elems_in_flight():
    """The bench shapes: the occupancy hint times the block's tile is SM_ELEMS, capped at 4 CTAs."""
    knobs = cfg.default_config("softmax", "bf16")
    assert knobs["MAX_SINGLE"] >= 16384  # 4096x16384 is one read of x, not the two-pass loop
    for m, n, bm, occ in ((32768, 4096, 2, 4), (16384, 4096, 2, 4), (4096, 8192, 1, 4), (4096, 16384, 1, 2)):
        p = cfg.plan_rows(m, n, knobs)
        assert p["single"] and p["exact"] and (p["BM"], p["OCC"]) == (bm, occ), (m, n, p)
        assert p["grid"][0] * p["BM"] >= m
    assert cfg.row_occupancy(1 << 20, knobs) == 1 and cfg.row_occupancy(8, knobs) == 4


def test_hint_knobs_accept_zero_and_refuse_nonsense():
    cfg.check_config("matmul", {"WARPS": 0, "CTAS": 0, "BM": 128})
    cfg.check_config("attention", {"OCC": 2, "WARPS": 8})
    with pytest.raises(ValueError, match="power of two"):
        cfg.check_config("attention", {"BM": 0})  # tile sizes have no 'auto'
    with pytest.raises(ValueError, match="WARPS"):
        cfg.check_config("softmax", {"WARPS": 16})
    with pytest.raises(ValueError, match="out of range"):
        cfg.check_config("rope", {"OCC": 64})


def test_matmul_plan_drops_hints_for_clamped_tiles():
    p = cfg.plan_matmul(1, 4096, 4096, 4096, cfg.default_config("matmul", "bf16"))
    assert (p["BM"], p["BN"], p["WARPS"]) == (128, 256, 8)  # 8 warps: the 128x256 accumulator fits
    p = cfg.plan_matmul(1, 1, 4096, 4096, cfg.default_config("matmul", "bf16"))
    assert p["BM"] == 16 and p["WARPS"] == 0 and p["CTAS"] == 0


def test_matmul_persist_plans_one_walk_per_sm_and_only_where_tiles_outnumber_blocks():
    base = {**cfg.default_config("matmul", "bf16"), "PERSIST": 1}
    p = cfg.plan_matmul(1, 4096, 4096, 4096, base, sms=132)
    assert p["persistent"] and p["grid"] == (132, 1, 1), p  # 512 tiles walked by 132 blocks
    assert cfg.plan_matmul(1, 4096, 4096, 4096, {**base, "PERSIST": 2}, sms=132)["grid"] == (264, 1, 1)
    p = cfg.plan_matmul(1, 4096, 4096, 4096, {**base, "CTAS": 2}, sms=133)
    assert p["grid"] == (132, 1, 1), p  # whole clusters of two
    p = cfg.plan_matmul(3, 300, 520, 200, base, sms=132)  # 27 tiles: a block each
    assert not p["persistent"] and p["grid"] == (27, 1, 1), p
    p = cfg.plan_matmul(1, 1, 4096, 4096, base, sms=132)  # clamped decode tiles: never
    assert not p["persistent"], p
    assert not cfg.plan_matmul(1, 4096, 4096, 4096, cfg.default_config("matmul", "bf16"), sms=132)["persistent"]
    with pytest.raises(ValueError, match="PERSIST"):
        cfg.check_config("matmul", {"PERSIST": 4})


def test_persistent_matmul_compiles_with_the_tile_kernels_resources():
    """PERSIST: the same tile body in a loop over tiles. tileiras keeps the warp-specialised layout (sm_90: 384
    threads, 168 registers, the same TMA loads, stores and wgmma waits) and gives the tile loop more
    instructions (the walk and the producer's own copy of it)."""
    if why := _compiler_ready():
        pytest.skip(why)
    if "sm_90" not in ARCHS:
        pytest.skip("TILEROSETTA_CUTILE_ARCHS leaves out sm_90")
    from tilerosetta import cubin as cubin_mod
    from tilerosetta.kernels.cutile import prepare_fn

    case = SPECS["matmul"].bench_cases[0]
    shapes = SPECS["matmul"].shapes(case)
    t = [torch.empty(shapes[n], dtype=torch.bfloat16, device="meta") for n in ("a", "b", "out")]
    found = {}
    for persist in (0, 1):
        [lx] = prepare_fn("matmul")(*t, {**cfg.default_config("matmul", "bf16", case.dims), "PERSIST": persist})
        name = export.kernel_name(lx)
        [k] = cubin_mod.analyse(_compile("sm_90", lx, _signature(lx)))
        found[persist] = (name, lx.grid, k)
    (n0, g0, k0), (n1, g1, k1) = found[0], found[1]
    assert (n0, n1) == ("matmul_kernel", "matmul_persistent_kernel") and g1[0] < g0[0], (found)
    assert (k1.threads, k1.regs, k1.spill_stores) == (k0.threads, k0.regs, 0), (k0, k1)
    for op in ("UTMALDG", "UTMASTG", "HGMMA"):
        assert sum(n for o, n in k1.mix.items() if o.startswith(op)) == sum(
            n for o, n in k0.mix.items() if o.startswith(op)) > 0, op
    assert sum(k1.mix.values()) > sum(k0.mix.values())


def test_sweep_spaces_are_small_and_valid():
    for op in SPECS:
        for dt in SPECS[op].dtypes:
            space = cfg.config_space(op, dtype_name(dt))
            assert cfg.default_config(op, dtype_name(dt)) in space, op  # the baseline is a candidate too
            assert len(space) <= 64, (op, len(space))  # each entry is one JIT compile in a sweep
            assert len({tuple(sorted(c.items())) for c in space}) == len(space), op
            for c in space:
                cfg.check_config(op, c)


def test_default_config_prefers_the_tuned_table(monkeypatch):
    from tilerosetta import backends, tuning
    from tilerosetta.backends import cutile_py

    b = backends.get("cutile_py")
    if type(b).__name__ != "CuTilePyBackend":
        pytest.skip(f"adapter did not import: {b.is_available()[1]}")
    calls = []

    def fake(backend, op, dtype, arch, dims, path=None):
        calls.append((backend, op, arch, dict(dims)))
        return {"BN": 128} if op == "matmul" else {"BOGUS": 1} if op == "bmm" else None

    monkeypatch.setattr(tuning, "lookup", fake)
    monkeypatch.setattr(cutile_py.toolchain, "device_arch", lambda: "sm_90")
    dims = {"M": 4096, "N": 4096, "K": 4096}
    got = b.default_config("matmul", torch.bfloat16, dims)
    assert got == {**cfg.DEFAULTS["matmul"]["*"], "BN": 128}
    assert calls[-1] == ("cutile_py", "matmul", "sm_90", dims)
    with pytest.warns(RuntimeWarning, match=r"cutile_py\.bmm: ignoring tuned config \{'BOGUS': 1\}"):
        assert b.default_config("bmm", torch.bfloat16, dims) == cfg.DEFAULTS["bmm"]["*"]  # stale entry ignored
    assert b.config_for("softmax", torch.float32, {"M": 1, "N": 1}) == cfg.DEFAULTS["softmax"]["fp32"]


def test_grids_cover_every_element():
    for m, n in ((1, 1), (17, 31), (300, 1000), (8192, 8192)):
        tm, tn, grid = cfg.plan_transpose(m, n, {"TM": 32, "TN": 32})
        assert grid[0] * tm * tn >= m * n and grid[0] == cfg.cdiv(m, tm) * cfg.cdiv(n, tn)
    tile, grid = cfg.plan_elementwise(65537, {"TILE": 1024})
    assert tile == 1024 and grid == (65, 1, 1)
    tile, grid = cfg.plan_elementwise(7, {"TILE": 1024})
    assert tile == 8 and grid == (1, 1, 1)
    tile, grid = cfg.plan_silu(257, 4099, {"TILE": 1024})
    assert grid == (257 * 5, 1, 1)
    ts, hp, grid = cfg.plan_rope(6, 17, 6, {"TS": 16})  # D=6: halves of 3 padded to 4
    assert (ts, hp, grid) == (16, 4, (12, 1, 1))


def test_matmul_and_attention_plans_clamp_tiles():
    p = cfg.plan_matmul(1, 1, 1000, 257, {"BM": 128, "BN": 128, "BK": 32, "GROUP_M": 8})
    assert (p["BM"], p["BN"], p["BK"]) == (16, 128, 32) and p["grid"] == (8, 1, 1)
    p = cfg.plan_matmul(5, 127, 129, 131, {"BM": 128, "BN": 128, "BK": 64, "GROUP_M": 8})
    assert p["grid"] == (2 * 5, 1, 1)  # flat: output tiles x batch entries
    p = cfg.plan_attention(4, 32, 32, 4096, 4096, 128, {"BM": 128, "BN": 64})
    assert p["grid"] == (32 * 128, 1, 1) and (p["BM"], p["BN"]) == (128, 64)  # flat: query blocks x B*H
    assert p["n_split"] == 1 and (p["NQ"], p["M"], p["GQ"]) == (128, 4096, 1)
    p = cfg.plan_attention(1, 1, 1, 1, 1, 64, {"BM": 128, "BN": 64})
    assert (p["BM"], p["BN"]) == (16, 16)
    # B*H beyond grid y's 65535 (issue 16): the flat axis x takes it.
    assert cfg.plan_attention(2, 35000, 35000, 64, 64, 64, {"BM": 64, "BN": 64})["grid"] == (70000, 1, 1)
    # GQA prefill: per-head row sets reading K/V head n // 4; decode: the 4 heads of a group packed into one
    # 16-row tile, 8 tiles for B=1, so the keys are split (flash-decoding) 16 ways + one combine block each.
    p = cfg.plan_attention(1, 32, 8, 2048, 2048, 128, {"BM": 128, "BN": 64})
    assert (p["NQ"], p["M"], p["GQ"], p["n_split"]) == (32, 2048, 4, 1)
    p = cfg.plan_attention(1, 32, 8, 1, 4096, 128, {"BM": 128, "BN": 64})
    assert (p["NQ"], p["M"], p["GQ"], p["BM"]) == (8, 4, 1, 16)
    assert (p["n_split"], p["CT"], p["grid"], p["combine_grid"]) == (16, 4, (128, 1, 1), (8, 1, 1))
    assert cfg.plan_attention(64, 32, 8, 1, 4096, 128, {"BM": 128, "BN": 64})["n_split"] == 1  # 512 tiles
    # SPLIT_MIN_BLOCKS (default 4): the chunk floor in key tiles; at 1 the B=1 decode's 64 key tiles are cut
    # as finely as 2 blocks per SM allow (at most 264 // 8 = 33 splits on the H200's 132 SMs): 2-tile
    # chunks, 32 of them.
    assert cfg.default_config("attention", "bf16", {"D": 128})["SPLIT_MIN_BLOCKS"] == 4
    p = cfg.plan_attention(1, 32, 8, 1, 4096, 128, {"BM": 128, "BN": 64, "SPLIT_MIN_BLOCKS": 1})
    assert (p["n_split"], p["CT"]) == (32, 2)
    p = cfg.plan_attention(1, 32, 8, 1, 4096, 128, {"BM": 16, "BN": 128, "SPLIT_MIN_BLOCKS": 2})
    assert (p["BM"], p["n_split"], p["CT"], p["grid"]) == (16, 16, 2, (128, 1, 1))
    assert {c["SPLIT_MIN_BLOCKS"] for c in cfg.config_space("attention", "bf16") if c["BM"] == 16} == {1, 2, 4}


def test_backend_says_why_it_cannot_run_here():
    from tilerosetta import backends

    b = backends.get("cutile_py")
    assert type(b).__name__ == "CuTilePyBackend", b.is_available()
    assert b.missing() == {}
    ok, why = b.available()
    if torch.cuda.is_available():
        pytest.skip(f"a GPU is visible; availability is {ok}: {why}")
    assert not ok
    if (ready := _compiler_ready()) is None:
        assert why == "no CUDA GPU visible to torch"
    else:
        assert why.startswith(("cuda.tile not importable", "cuda.tile ")), why


def test_prepare_plans_every_conformance_case():
    """The host half of every call (views, plans, grids) on meta tensors: no GPU, no compiler needed."""
    if why := _compiler_ready():
        pytest.skip(why)
    from tilerosetta.kernels.cutile import prepare_fn
    from tilerosetta.specs import Case

    extra = {"rope": [Case({"B": 1, "H": 2, "S": 5, "D": 6})],  # D/2 = 3: halves padded to 4
             "attention": [Case({"B": 1, "H": 1, "S": 2, "D": 128}, {"causal": True, "scale": 2.0})]}
    for op, spec in SPECS.items():
        names = list(spec.inputs) + list(spec.outputs)
        for dtype in spec.dtypes:
            for case in spec.cases + spec.bench_cases + tuple(extra.get(op, ())):
                shapes = spec.shapes(case)
                tensors = [torch.empty(shapes[n], dtype=dtype, device="meta") for n in names]
                knobs = cfg.default_config(op, dtype_name(dtype), case.dims)
                launches = prepare_fn(op)(*tensors, knobs, **spec.full_params(case.params))
                assert launches, (op, case.name)
                for lx in launches:
                    cfg.check_grid(lx.grid)
                    assert len(lx.grid) == 3
                    arrays = [a for a in lx.args if isinstance(a, torch.Tensor)]
                    assert all(a.is_contiguous() for a in arrays), (op, case.name)
                    # every kernel takes its output last (possibly as a view): all of it, nothing more
                    assert arrays[-1].numel() == tensors[-1].numel(), (op, case.name)


def test_set_config_overrides_only_its_op_and_dtype():
    from tilerosetta import backends

    b = backends.get("cutile_py")
    if type(b).__name__ != "CuTilePyBackend":
        pytest.skip(f"adapter did not import: {b.is_available()[1]}")
    f32, f16 = torch.float32, torch.float16
    try:
        b.set_config("matmul", f32, {"BM": 64})
        assert b.config_for("matmul", f32, {})["BM"] == 64
        assert b.config_for("matmul", f16, {})["BM"] == cfg.DEFAULTS["matmul"]["*"]["BM"]
        assert b.config_for("bmm", f32, {})["BM"] == cfg.DEFAULTS["bmm"]["fp32"]["BM"]
        with pytest.raises(ValueError, match="power of two"):
            b.set_config("matmul", f32, {"BK": 48})
    finally:
        b.set_config("matmul", f32, None)
    assert b.config_for("matmul", f32, {}) == cfg.DEFAULTS["matmul"]["fp32"]


def test_attention_nonpositive_scale_path_compiles():
    """scale <= 0 takes the unfolded branch of _step (the bench and conformance scales are positive)."""
    if why := _compiler_ready():
        pytest.skip(why)
    arch = ARCHS[0]
    ok, why = toolchain.find().can_target(arch)
    if not ok:
        pytest.skip(why)
    from tilerosetta.kernels.cutile import prepare_fn

    t = [torch.empty((1, 2, 77, 64), dtype=torch.float16, device="meta") for _ in range(4)]
    for scale in (-0.5, 0.0):
        for causal in (False, True):
            [lx] = prepare_fn("attention")(*t, cfg.default_config("attention", "fp16", {"D": 64}),
                                           causal=causal, scale=scale)
            cubin = _compile(arch, lx, _signature(lx))
            assert cubin[:4] == b"\x7fELF", (scale, causal)


def test_decode_matmul_takes_narrow_tiles_that_cover_the_sms():
    """M <= 16 streams the weight once: the default tiles give about one block per SM (N 4096 -> 128 blocks
    of 32 columns; the 128x256 GEMM tile gave 16) and keep their warp hint (not a clamped big tile)."""
    for n, blocks in ((4096, 128), (14336, 112)):
        c = cfg.default_config("matmul", "bf16", {"M": 1, "N": n, "K": 4096})
        assert c in cfg.config_space("matmul", "bf16")
        p = cfg.plan_matmul(1, 1, n, 4096, c)
        assert p["grid"][0] == blocks and p["BM"] == 16 and p["BK"] == 256, (n, p)
    decode = {**cfg.decode_config(4096), "WARPS": 4}
    assert cfg.plan_matmul(1, 16, 4096, 4096, decode)["WARPS"] == 4
    assert cfg.default_config("matmul", "bf16", {"M": 17, "N": 4096, "K": 4096}) == cfg.DEFAULTS["matmul"]["*"]
    assert cfg.default_config("matmul", "fp32", {"M": 1, "N": 4096, "K": 4096}) == cfg.DEFAULTS["matmul"]["fp32"]
