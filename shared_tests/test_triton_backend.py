"""Triton-specific checks beyond the shared suite: kernel variants the default configs do not reach on
the conformance shapes (looped row kernels, uneven attention blocks, several matmul groups), and the
tuning API (config_space / default_config / set_config).

Runs wherever the triton backend runs: compiled on a GPU, in Triton's interpreter on CPU tensors.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from tilerosetta import backends
from tilerosetta.harness import check_case
from tilerosetta.kernels.triton.config import ROW_OPS
from tilerosetta.specs import SPECS, Case, dtype_name

ALL = (torch.float32, torch.float16, torch.bfloat16)


@pytest.fixture
def triton_backend(request):
    from conftest import selected_backends, skip_or_fail_unavailable

    if "triton" not in selected_backends(request.config):
        pytest.skip("triton not selected (--backend)")
    b = backends.get("triton")
    skip_or_fail_unavailable(request.config, b)
    yield b
    for op in SPECS:  # never leak a forced config into other tests
        for dtype in ALL:
            b.set_config(op, dtype, None)


def _check(b, op, dtype, case, cfg, seed=0):
    b.set_config(op, dtype, cfg)
    result = check_case(b, SPECS[op], dtype, case, seed=seed)
    assert result.ok, f"{result} with config {cfg}"


@pytest.mark.parametrize("dtype", ALL, ids=dtype_name)
@pytest.mark.parametrize("op", ROW_OPS)
@pytest.mark.parametrize("m,n", [(1, 1), (3, 7), (5, 1000), (2, 4099)])
def test_looped_row_kernels(triton_backend, op, dtype, m, n):
    # single_max=0 forces the looped kernel; a 64-wide chunk gives many chunks and a ragged last one.
    _check(triton_backend, op, dtype, Case({"M": m, "N": n}), {"single_max": 0, "loop_block": 64}, seed=m * n)


# (x - max) * log2 e overflows to -inf for row 0's ordinary entries (about -3e38 * 1.44), as on the GPU: exp2 gives 0
@pytest.mark.filterwarnings("ignore:overflow encountered in multiply:RuntimeWarning")
@pytest.mark.parametrize("cfg", [{}, {"single_max": 0, "loop_block": 64}], ids=["block", "looped"])
def test_softmax_logits_near_float_max(triton_backend, cfg):
    # exp(x - max) takes x - max first: the one-FFMA form x * log2 e - max * log2 e overflows max * log2 e to inf
    # past FLT_MAX / log2 e (2.36e38) and gives NaN rows.
    b = triton_backend
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 300, generator=g)
    x[0, :2] = 3.0e38
    x[1] = -3.0e38 + 1e32 * torch.randn(300, generator=g)
    x[2, 7] = 2.5e38
    x = x.to(b.device_type)
    b.set_config("softmax", torch.float32, cfg or None)
    out = torch.empty_like(x)
    b.op("softmax")(x, out)
    ref = torch.softmax(x.double(), dim=-1)
    assert torch.isfinite(out).all(), out
    assert (out.double() - ref).abs().max().item() < 1e-6


@pytest.mark.parametrize("out_rows", [0, 1])
@pytest.mark.parametrize("m,n", [(1, 1), (17, 31), (100, 300), (300, 100)])
def test_transpose_both_tile_orders(triton_backend, out_rows, m, n):
    # 32 x 16 tiles: several row and column blocks, ragged on both sides, in either fastest-index order.
    _check(triton_backend, "transpose", torch.float32, Case({"M": m, "N": n}),
           {"BLOCK_M": 32, "BLOCK_N": 16, "OUT_ROWS": out_rows}, seed=m + n)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=dtype_name)
@pytest.mark.parametrize("blocks", [(32, 64), (64, 32), (16, 16)])
@pytest.mark.parametrize("s,causal", [(1, True), (17, True), (100, False), (100, True), (129, True)])
@pytest.mark.parametrize("tma", [0, 1], ids=["ptr", "tma"])
def test_attention_uneven_blocks(triton_backend, dtype, blocks, s, causal, tma):
    # BLOCK_M != BLOCK_N moves the causal diagonal inside key blocks and splits the two stages
    # differently from the default tiles. tma=1: tensor descriptors, whose zero-fill / clipping at S
    # (per head: H=2 puts a second head right after the first) replaces the masks.
    cfg = {"BLOCK_M": blocks[0], "BLOCK_N": blocks[1], "TMA": tma}
    _check(triton_backend, "attention", dtype, Case({"B": 1, "H": 2, "S": s, "D": 64}, {"causal": causal}), cfg,
           seed=s)


def test_attention_tma_builds_descriptors(triton_backend, monkeypatch):
    from tilerosetta.kernels.triton import attention

    made = []
    real = attention.TensorDescriptor.from_tensor
    monkeypatch.setattr(attention.TensorDescriptor, "from_tensor",
                        staticmethod(lambda t, block, **kw: made.append((tuple(t.shape), block)) or real(t, block, **kw)))
    _check(triton_backend, "attention", torch.float16, Case({"B": 2, "H": 1, "S": 40, "D": 64}, {"causal": True}),
           {"BLOCK_M": 32, "BLOCK_N": 16, "TMA": 1})
    assert made == [((2, 40, 64), [1, 32, 64]), ((2, 40, 64), [1, 16, 64]), ((2, 40, 64), [1, 16, 64]),
                    ((2, 40, 64), [1, 32, 64])]


@pytest.mark.parametrize("blocks", [(16, 16), (32, 16)])
@pytest.mark.parametrize("h,hkv,s,sk", [(8, 2, 1, 300), (8, 2, 3, 300), (4, 1, 17, 200), (2, 2, 100, 300),
                                        (8, 1, 2, 129)])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tma", [0, 1], ids=["ptr", "tma"])
@pytest.mark.parametrize("fixup", [1, 0], ids=["last-merges", "combine-kernel"])
def test_attention_gqa_packed_and_split_kv(triton_backend, blocks, h, hkv, s, sk, causal, tma, fixup):
    # 16-key tiles make every Sk >= 128 a split-KV (flash-decoding) launch with 64-key chunks: ragged last
    # chunks, and (S=100, causal) chunks that some rows of a block cannot see at all. G*S <= BLOCK_M packs
    # the G heads of a group into one tile (decode); (4, 1, 17) with 16 rows does not.
    from tilerosetta.kernels.triton import attention

    cfg = {"BLOCK_M": blocks[0], "BLOCK_N": blocks[1], "TMA": tma, "FIXUP": fixup}
    case = Case({"B": 2, "H": h, "Hkv": hkv, "S": s, "Sk": sk, "D": 64}, {"causal": causal})
    q, k = torch.empty(2, h, s, 64, dtype=torch.float16), torch.empty(2, hkv, sk, 64, dtype=torch.float16)
    launches = attention.prepare(q, k, k, q, {**triton_backend.default_config("attention", torch.float16, case.dims),
                                              **cfg}, causal, None)
    # FIXUP=1: the tile's last program merges the splits, no second launch
    assert [lx.kernel.fn.__name__ for lx in launches] == ["attention_kernel"] + ["combine_kernel"] * (1 - fixup)
    assert launches[0].constexprs["SPLIT"] and launches[0].constexprs["FIXUP"] == bool(fixup)
    _check(triton_backend, "attention", torch.float16, case, cfg, seed=s * sk)


def test_split_kv_plan():
    from tilerosetta.kernels.attention_split import packed_rows, split_plan

    assert split_plan(8, 4096, 64) == (16, 256)  # B=1 decode, Hkv=8: 8 tiles x 16 chunks of 4 key tiles
    assert split_plan(128, 4096, 64) == (2, 2048)  # B=16: at most 2 programs per SM (3 would be 1.45 waves)
    assert split_plan(512, 4096, 64) == (1, 4096)  # B=64: the tiles fill the GPU alone
    assert split_plan(8, 300, 64) == (1, 300)  # too few keys to be worth a combine
    for tiles in range(1, 132):  # under the SM count: split, and never past two programs per SM
        n, chunk = split_plan(tiles, 4096, 64)
        assert n >= 2 and tiles * n <= 2 * 132 and (n - 1) * chunk < 4096 <= n * chunk, tiles
    n, chunk = split_plan(2, 1000, 16)
    assert chunk % 16 == 0 and (n - 1) * chunk < 1000 <= n * chunk
    assert packed_rows(32, 8, 1, 16) and not packed_rows(32, 32, 1, 16) and not packed_rows(32, 8, 5, 16)


@pytest.mark.parametrize("dtype", ALL, ids=dtype_name)
@pytest.mark.parametrize("op", ["matmul", "bmm"])
def test_matmul_many_groups(triton_backend, op, dtype):
    # 16x16 tiles on 127x129: 8 tile-rows in groups of 3, so the last group is short.
    cfg = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 3}
    dims = {"M": 127, "N": 129, "K": 131} | ({"Bt": 2} if op == "bmm" else {})
    _check(triton_backend, op, dtype, Case(dims), cfg)


@pytest.mark.parametrize("dtype", ALL, ids=dtype_name)
@pytest.mark.parametrize("op", ["matmul", "bmm"])
def test_matmul_tma_tails(triton_backend, op, dtype):
    # TMA 1: descriptors of the 3-D views zero-fill the M, N, K tails and clip the stores (no masks). 16x16
    # tiles, BLOCK_K 32 on 127 x 136 x 72: ragged in all three; N and K multiples of 8 keep 16-byte row strides.
    cfg = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32, "GROUP_M": 3, "TMA": 1}
    dims = {"M": 127, "N": 136, "K": 72} | ({"Bt": 3} if op == "bmm" else {})
    (lx,) = _matmul_launches(op, dtype, dims, {**triton_backend.default_config(op, dtype, dims), **cfg})
    assert lx.kernel.fn.__name__ == "matmul_tma_kernel"
    _check(triton_backend, op, dtype, Case(dims), cfg)


@pytest.mark.parametrize("dtype", ALL, ids=dtype_name)
@pytest.mark.parametrize("op", ["matmul", "bmm"])
def test_matmul_tma_persistent_walks_every_tile_once(triton_backend, op, dtype, monkeypatch):
    # PERSIST 1 with 2 "SMs": 2 programs walk the 8 x 9 (x 3 entries) tiles of a ragged 127 x 136 x 72 product
    # in the grouped order, across batch entries, one program a tile fewer than the other; the result must
    # match the reference exactly as the one-program-per-tile kernel does.
    from tilerosetta.kernels.triton import matmul

    monkeypatch.setattr(matmul, "sm_count", lambda default=132, device=None: 2)
    cfg = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 32, "GROUP_M": 3, "TMA": 1, "PERSIST": 1}
    dims = {"M": 127, "N": 136, "K": 72} | ({"Bt": 3} if op == "bmm" else {})
    (lx,) = _matmul_launches(op, dtype, dims, {**triton_backend.default_config(op, dtype, dims), **cfg})
    assert (lx.kernel.fn.__name__, lx.grid) == ("matmul_tma_persistent_kernel", (2,)), lx
    _check(triton_backend, op, dtype, Case(dims), cfg)


def test_matmul_tma_only_where_a_descriptor_fits():
    # The descriptor kernel needs 16-byte aligned row strides and an unsplit K; elsewhere the pointer kernel.
    import triton

    from tilerosetta.kernels.triton import config

    def kernels(dims, dtype=torch.bfloat16, **force):
        cfg = {**config.default("matmul", dtype, dims, interpret=False), "TMA": 1, **force}
        return [(lx.kernel.fn.__name__, lx.grid[0]) for lx in _matmul_launches("matmul", dtype, dims, cfg)]

    tiles = triton.cdiv(4096, 128) * triton.cdiv(4096, 256)
    assert kernels({"M": 4096, "N": 4096, "K": 4096}) == [("matmul_tma_kernel", tiles)]
    assert kernels({"M": 4096, "N": 4096, "K": 4096}, TMA=0) == [("matmul_kernel", tiles)]
    assert kernels({"M": 4096, "N": 4096, "K": 4104})[0][0] == "matmul_tma_kernel"  # 8208-byte rows
    assert kernels({"M": 4096, "N": 4096, "K": 4100})[0][0] == "matmul_kernel"  # 8200-byte rows
    assert kernels({"M": 4096, "N": 4099, "K": 4096})[0][0] == "matmul_kernel"
    assert kernels({"M": 4096, "N": 4098, "K": 4096}, dtype=torch.float32)[0][0] == "matmul_kernel"
    assert kernels({"M": 1, "N": 4096, "K": 4096})[0][0] == "matmul_kernel", "a split K stays on pointers"
    # PERSIST: one program per SM walks the tiles, where there are more tiles than that (on this CPU sm_count
    # is the H200's 132)
    assert kernels({"M": 4096, "N": 4096, "K": 4096}, PERSIST=1) == [("matmul_tma_persistent_kernel", 132)]
    assert kernels({"M": 4096, "N": 4096, "K": 4096}, PERSIST=1, TMA=0) == [("matmul_kernel", tiles)]
    assert kernels({"M": 1024, "N": 1024, "K": 1024}, PERSIST=1)[0] == ("matmul_tma_kernel", 32)  # 32 tiles


@pytest.mark.parametrize("op", list(SPECS))
def test_config_api(triton_backend, op):
    b = triton_backend
    spec = SPECS[op]
    for dtype in spec.dtypes:
        space = b.config_space(op, dtype)
        assert space, f"triton.{op} has no config space"
        default = b.default_config(op, dtype, spec.cases[-1].dims)
        assert default and all(isinstance(v, int) for v in default.values()), default
        b.set_config(op, dtype, space[0])  # every listed config is accepted...
        assert b.config_for(op, dtype, spec.cases[-1].dims).items() >= space[0].items()
        b.set_config(op, dtype, None)  # ...and None restores the table
        assert b.config_for(op, dtype, spec.cases[-1].dims) == default
    dtype = spec.dtypes[0]
    with pytest.raises(ValueError, match="unknown config key 'BOGUS'"):
        b.set_config(op, dtype, {"BOGUS": 4})
    key = next(k for k in b.default_config(op, dtype, spec.cases[-1].dims) if k.startswith("BLOCK") or k == "num_warps")
    with pytest.raises(ValueError, match=f"'{key}' must be a power of two"):
        b.set_config(op, dtype, {key: 3})
    if "maxnreg" in default:  # the row ops' register cap: 0 (ptxas's choice) or a count ptxas takes
        for bad in (8, 256):
            with pytest.raises(ValueError, match=rf"triton.{op}: config 'maxnreg' must be 0 .* \[24, 255\], got {bad}"):
                b.set_config(op, dtype, {"maxnreg": bad})
        assert {c["maxnreg"] for c in space} >= {0}


def test_availability_and_versions(request):
    # Not through the skipping fixture: if triton is installed, the backend must be usable, and a
    # suite that lost it (e.g. triton.language imported before TRITON_INTERPRET=1 was set) must fail.
    from conftest import selected_backends

    if "triton" not in selected_backends(request.config):
        pytest.skip("triton not selected (--backend)")
    if importlib.util.find_spec("triton") is None:  # find, not import: importing first would break the interpreter
        pytest.skip("triton is not installed")
    b = backends.get("triton")
    ok, reason = b.is_available()
    assert ok, reason
    if not torch.cuda.is_available():
        assert b.device_type == "cpu" and "TRITON_INTERPRET=1" in reason
    assert b.versions()["triton"]
    assert not b.missing()


def test_matmul_split_k_plan():
    from tilerosetta.kernels.matmul_split import split_plan

    # Llama 3.1 8B decode, bf16, 16 x 64 tiles: M=1 q/o projection (64 tiles) -> 8 chunks of 512, 512 programs
    assert split_plan(64, 1, 4096, 128, 2) == (8, 512)
    assert split_plan(224, 16, 4096, 128, 2) == (3, 1408)  # M=16, N=14336: 672 programs
    assert split_plan(128256 // 64, 1, 4096, 128, 2) == (1, 4096)  # LM head: the tiles fill the GPU alone
    assert split_plan(64, 64, 4096, 128, 2) == (2, 2048)  # M=64: the partials' traffic caps the split
    assert split_plan(16, 128, 4096, 64, 2) == (1, 4096)  # M=128 (128x256 tiles): never split
    assert split_plan(64, 1, 200, 128, 2) == (1, 200)  # too shallow a K
    assert split_plan(4096, 4096, 4096, 64, 2, split_k=8) == (8, 512)  # forced
    assert split_plan(1, 1, 300, 64, 2, split_k=16) == (5, 64)  # forced, capped by K's tiles
    assert split_plan(1, 1, 4096, 64, 2, split_k=1) == (1, 4096)  # off
    n, chunk = split_plan(3, 5, 1000, 16, 4)
    assert n > 1 and chunk % 16 == 0 and (n - 1) * chunk < 1000 <= n * chunk


def _matmul_launches(op, dtype, dims, cfg):
    from tilerosetta.kernels.triton import matmul

    bt = (dims["Bt"],) if op == "bmm" else ()
    a = torch.empty(*bt, dims["M"], dims["K"], dtype=dtype, device="meta")
    b = torch.empty(*bt, dims["K"], dims["N"], dtype=dtype, device="meta")
    out = torch.empty(*bt, dims["M"], dims["N"], dtype=dtype, device="meta")
    return matmul.prepare_batched(a, b, out, bt[0] if bt else 1, dims["M"], dims["N"], dims["K"], cfg)


def test_matmul_decode_takes_split_k(triton_backend):
    # The GPU table's plan (what an H200 launches) on meta tensors: decode shapes split K, a large GEMM
    # and the LM head do not.
    from tilerosetta.kernels.triton import config

    def plan(m, n, k, **force):
        cfg = {**config.default("matmul", torch.bfloat16, {"M": m, "N": n, "K": k}, interpret=False), **force}
        return [(lx.kernel.fn.__name__, lx.grid[0], lx.constexprs.get("BLOCK_M"))
                for lx in _matmul_launches("matmul", torch.bfloat16, {"M": m, "N": n, "K": k}, cfg)]

    # 64 tiles x 8 splits, then a reduce over 512 outputs x 8 partials; FIXUP=1: each tile's last program
    # sums its 8 partials, no reduce launch
    assert plan(1, 4096, 4096) == [("matmul_kernel", 512, 16), ("splitk_reduce_kernel", 8, None)]
    assert plan(1, 4096, 4096, FIXUP=1) == [("matmul_kernel", 512, 16)]
    assert plan(16, 14336, 4096)[0] == ("matmul_kernel", 672, 16)
    assert [name for name, *_ in plan(64, 4096, 4096)] == ["matmul_kernel", "splitk_reduce_kernel"]
    assert plan(1, 128256, 4096) == [("matmul_kernel", 2004, 16)]
    assert plan(4096, 4096, 4096) == [("matmul_kernel", 512, 128)]


@pytest.mark.parametrize("dtype", ALL, ids=dtype_name)
@pytest.mark.parametrize("fixup", [1, 0], ids=["last-sums", "reduce-kernel"])
def test_matmul_small_m_split_k_runs(triton_backend, dtype, fixup):
    # The default config at M=1 against a deep K splits K; its result passes the spec's tolerance and is
    # the same bits on a second run (the splits are summed in split order, whichever program sums them).
    from tilerosetta.kernels.triton import matmul, run

    b = triton_backend
    dims = {"M": 1, "N": 200, "K": 1536}
    cfg = {**b.config_for("matmul", dtype, dims), "FIXUP": fixup}
    x, w = torch.randn(1, 1536, dtype=dtype), torch.randn(1536, 200, dtype=dtype)
    outs = [torch.full((1, 200), float("nan"), dtype=dtype) for _ in range(2)]
    for out in outs:
        launches = matmul.prepare(x.to(b.device_type), w.to(b.device_type), out_dev := out.to(b.device_type), cfg)
        assert [lx.kernel.fn.__name__ for lx in launches] == ["matmul_kernel"] + ["splitk_reduce_kernel"] * (1 - fixup)
        assert launches[0].constexprs["SPLIT"] and launches[0].args[-2] > 1
        run(launches)
        out.copy_(out_dev.cpu())
        if fixup:  # the summing programs set their tiles' counters back to zero for the next launch
            assert not launches[0].args[4].any(), "arrival counters left non-zero"
    assert torch.equal(outs[0], outs[1])
    _check(b, "matmul", dtype, Case(dims), {"FIXUP": fixup})


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_name)
@pytest.mark.parametrize("op", ["matmul", "bmm"])
@pytest.mark.parametrize("split_k", [1, 3, 64])
@pytest.mark.parametrize("fixup", [1, 0], ids=["last-sums", "reduce-kernel"])
def test_matmul_forced_split_k(triton_backend, op, dtype, split_k, fixup):
    # Forced chunk counts: off, a ragged last chunk (K=700 in 3 chunks of 256), more than K has tiles (capped);
    # bmm's batch entries count their tiles' arrivals apart.
    dims = {"M": 5, "N": 70, "K": 700} | ({"Bt": 3} if op == "bmm" else {})
    cfg = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 64, "SPLIT_K": split_k, "FIXUP": fixup}
    launches = _matmul_launches(op, dtype, dims, {**triton_backend.default_config(op, dtype, dims), **cfg})
    assert len(launches) == (1 if split_k == 1 or fixup else 2)
    _check(triton_backend, op, dtype, Case(dims), cfg, seed=split_k)


def test_pdl_extras_read_the_device_from_the_calls_tensors(monkeypatch):
    """A kept launch plan's template holds None where the call's tensors go: PDL must be decided from the
    call's own tensors (it was decided from the template, so on the H200 every kept plan lost PDL)."""
    from tilerosetta.kernels.triton import Launch, pdl, pdl_extras
    from tilerosetta.kernels.triton.rms_norm import rms_norm_block_kernel

    seen = []
    monkeypatch.setattr(pdl, "enabled", lambda device: seen.append(device) or device.type == "meta")
    x = torch.zeros(4, device="meta")  # a device only the call's tensors can name
    template = Launch(rms_norm_block_kernel, (1,), (None, None, None, 4, 1e-6), {"BLOCK_N": 4}, {})
    assert pdl_extras(template, (x, x, x, 4, 1e-6)) == {"PDL": True, "launch_pdl": True}
    assert seen == [x.device]
    assert pdl_extras(template) == {"PDL": False, "launch_pdl": False}  # no tensor in the template itself
    assert pdl_extras(template._replace(constexprs={"BLOCK_N": 4, "PDL": False}), (x,) * 3) == {}


@pytest.mark.parametrize("dtype", ALL, ids=dtype_name)
@pytest.mark.parametrize("cfg", [{"EVICT": 2, "WIDE": 0}, {"EVICT": 1, "WIDE": 1}], ids=["evict2-narrow", "evict1-wide"])
def test_rope_sweep_keys(triton_backend, dtype, cfg):
    # The eviction hints and 32-bit offsets change the addressing, not the arithmetic: every conformance case
    # (odd S, D 2..128, rows not a multiple of the block) must still match the reference.
    for case in SPECS["rope"].cases:
        _check(triton_backend, "rope", dtype, case, {**triton_backend.default_config("rope", dtype, case.dims), **cfg})
