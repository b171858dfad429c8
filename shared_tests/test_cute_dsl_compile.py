"""cute_dsl without a GPU: every CuTe DSL kernel compiles to PTX and a cubin for sm_90a, and the adapter's
contract holds.

CuTe DSL compiles without a device: `cute.compile(..., options="--gpu-arch sm_90a")` on fake tensors with
symbolic extents runs the whole pipeline (MLIR -> NVVM -> PTX -> ptxas cubin) on the CPU; the module is
only loaded on the first launch. The specializations compiled here are the ones the adapter compiles on a
GPU: each op x dtype x variant ("vec": 128-bit accesses, "scalar") x the default config of each of the
op's conformance and bench cases. The vec variant must really move 128 bits per access
(ld.global.v4 / st.global.v4 in the PTX), else the "vectorised" claim is false; a row op that holds
its row in registers (CHUNKS > 0) must not spill (cuobjdump on the cubin, where one is found).

The runtime (nvidia-cutlass-dsl, ~260 MB) is not installed by CI: the compile tests then skip with the
reason, and the contract tests (no runtime needed) still run. Locally:
PYTHONPATH=python:/work/pkgs-cute:/work/pkgs-cute/nvidia_cutlass_dsl/dsl_packages pytest this file.
"""

from __future__ import annotations

import pytest
import torch

from tilerosetta import cubin, toolchain
from tilerosetta.backends import cute_dsl as adapter
from tilerosetta.kernels.cute_dsl import KERNEL_MODULES, MISSING, variant_of, variants
from tilerosetta.kernels.cute_dsl import config as cfgmod
from tilerosetta.specs import OP_NAMES, dtype_name, get_spec

ARCH = "sm_90a"
EM_CUDA = 190  # ELF e_machine of NVIDIA cubins
RUNTIME = adapter.runtime_problem()
needs_runtime = pytest.mark.skipif(RUNTIME is not None, reason=f"CuTe DSL runtime not installed: {RUNTIME}")


def _configs(op, dtype):
    """The distinct default configs the conformance and bench cases of op use."""
    spec, seen = get_spec(op), []
    for case in tuple(spec.cases) + tuple(spec.bench_cases):
        c = cfgmod.default_config(op, dtype_name(dtype), case.dims)
        if c not in seen:
            seen.append(c)
    return seen


# beyond the spec's cases: a row too long to stay in registers (the streaming path of the row ops)
LONG_ROW = {"M": 3, "N": 262144}


def _specializations(op, dtype, variant):
    """What the adapter compiles for op's conformance and bench cases (and LONG_ROW): config + CHUNKS."""
    spec, seen = get_spec(op), []
    extra = (LONG_ROW,) if op in cfgmod.ROW_OPS else ()
    for dims in [c.dims for c in tuple(spec.cases) + tuple(spec.bench_cases)] + list(extra):
        c = adapter.specialization(op, dtype, variant, dims, cfgmod.default_config(op, dtype_name(dtype), dims))
        # attention's wgmma kernel: also its simple form (PIPE=0, PACK=0: TILEROSETTA_CUTE_DSL_ATTENTION=simple)
        # transpose: also the other tile order (OUT_ROWS) and the 128 x 128 tile; silu_and_mul: 4 vectors a thread
        others = ([{**c, "PIPE": 0, "PACK": 0}] if op == "attention" and c.get("PIPE") else
                  [{**c, "OUT_ROWS": 1 - c["OUT_ROWS"]}, {**c, "TILE": 128}] if op == "transpose" else
                  [{**c, "ITEMS": max(cfgmod.SILU_ITEMS)}] if op == "silu_and_mul" else [])
        for c in [c] + others:
            if c not in seen:
                seen.append(c)
    return seen


SPECIALIZATIONS = [pytest.param(op, dt, var, cfg, id=f"{op}-{dtype_name(dt)}-{var}-{'-'.join(f'{k}{v}' for k, v in cfg.items())}")
                   for op in KERNEL_MODULES for dt in get_spec(op).dtypes
                   for var in variants(op, dt)
                   for cfg in _specializations(op, dt, var)]


def test_row_ops_compile_both_ways_through_a_row():
    chunks = {cfg["CHUNKS"] for p in SPECIALIZATIONS for op, _, _, cfg in [p.values] if op in cfgmod.ROW_OPS}
    assert 0 in chunks and any(c > 0 for c in chunks), chunks


@needs_runtime
@pytest.mark.parametrize("op,dtype,variant,cfg", SPECIALIZATIONS)
def test_compiles_for_sm90a(tmp_path, op, dtype, variant, cfg):
    from tilerosetta.kernels.cute_dsl import common, kernel_module

    fn, args = kernel_module(op).build(dtype, variant, cfg)
    compiled = common.compile_for(fn, args, ARCH, keep_dir=str(tmp_path))
    ptx = compiled.artifacts.PTX
    assert ptx and f".target {ARCH}" in ptx, f"{op}: no {ARCH} PTX"
    assert ".entry kernel_" in ptx, f"{op}: the PTX holds no kernel entry"
    cubins = sorted(tmp_path.glob(f"*.{ARCH}.cubin"))
    assert len(cubins) == 1, f"{op}: expected one {ARCH} cubin in the dump folder, found {cubins}"
    elf = cubins[0].read_bytes()
    assert elf[:4] == b"\x7fELF" and int.from_bytes(elf[18:20], "little") == EM_CUDA, f"{op}: not a CUDA cubin"
    if cfg.get("CHUNKS") and toolchain.binary_tool("cuobjdump") is not None:
        # the row held in registers must really stay there: no local memory, no spill stores
        for k in cubin.analyse(elf):
            assert k.local == 0 and k.spill_stores == 0, f"{op} {cfg}: {k.name} spills ({k.local} B local)"
    if cfg.get("CHUNKS", 0) >= 2 and toolchain.binary_tool("cuobjdump") is not None:
        # and its loads go out back to back: the row's vectors (x, and r for add_rms_norm) are all loaded
        # before the first reduction step, with no branch region (BSSY) opened among them (one that held a
        # load and its use waited there for the data: a thread's loads went to memory one after another)
        ops = _sass_opcodes(elf)
        before = ops[:ops.index("SHFL.BFLY")]
        loads = [i for i, o in enumerate(before) if o.startswith("LDG")]
        wanted = cfg["CHUNKS"] * (2 if op == "add_rms_norm" else 1)
        assert len(loads) >= wanted, f"{op} {cfg}: {len(loads)} loads before the reduction, expected {wanted}"
        assert "BSSY" not in before[loads[0]:loads[wanted - 1]], f"{op} {cfg}: a branch region among the row's loads"
    if op == "silu_and_mul" and toolchain.binary_tool("cuobjdump") is not None:
        # a thread's 2 * ITEMS loads all go out before its first exp, and no IEEE division check (FCHK: each
        # element's slow path in a branch region of its own) is left: the reciprocal is the approximate one
        ops = _sass_opcodes(elf)
        first_exp = ops.index("MUFU.EX2")
        loads = [i for i, o in enumerate(ops) if o.startswith("LDG")]
        assert len(loads) == 2 * cfg["ITEMS"] and max(loads) < first_exp, f"{op} {cfg}: loads {loads}, exp {first_exp}"
        assert "FCHK" not in ops, f"{op} {cfg}: an IEEE division (FCHK) in the SASS"
    if variant.startswith("wgmma"):
        # the Hopper path must really be one: TMA loads completing on mbarriers, warpgroup MMAs, no spills
        assert "cp.async.bulk.tensor" in ptx and "mbarrier::complete_tx" in ptx, f"{op}: no TMA load in the PTX"
        assert "wgmma.mma_async.sync.aligned.m64n" in ptx, f"{op}: no wgmma in the PTX"
        assert "st.global.b32" in ptx and "st.global.b16" not in ptx, f"{op}: epilogue pairs not stored as 32 bits"
        if toolchain.binary_tool("cuobjdump") is not None:
            kernels = cubin.analyse(elf)
            combines = [k for k in kernels if "_combine_kernel" in k.name]
            # the split-KV form: the split kernel and the combine kernel that merges its partials, no other
            assert len(combines) == (1 if cfg.get("SPLIT") else 0) and len(kernels) == 1 + len(combines), \
                f"{op} {cfg}: kernels {[k.name[:60] for k in kernels]}"
            for k in combines:
                assert k.local == 0 and k.spill_stores == 0, f"{op} {cfg}: {k.name} spills ({k.local} B local)"
                # D / 32 fp32 columns of each split's O per lane: one vector load (128 bits at D=128, 64 at 64)
                assert k.mix[f"LDG.E.{128 if '_d128' in variant else 64}"], f"{op} {cfg}: combine loads not vectorised"
            for k in kernels:
                if "_combine_kernel" in k.name:
                    continue
                assert k.local == 0 and k.spill_stores == 0, f"{op} {cfg}: {k.name} spills ({k.local} B local)"
                assert k.mix["HGMMA.64"] or any(i.startswith("HGMMA") for i in k.mix), f"{op}: no HGMMA in the SASS"
                assert any(i.startswith("UTMALDG") for i in k.mix), f"{op}: no TMA load (UTMALDG) in the SASS"
                if op == "attention":
                    # ptxas serialises the wgmmas (one WARPGROUP.ARRIVE per HGMMA, warning C7514) when it
                    # cannot prove accumulators retired before other code reads them: then nothing overlaps
                    assert k.mix["WARPGROUP.ARRIVE"] <= 4 < k.mix["HGMMA.64"], \
                        f"{op} {cfg}: wgmmas serialised ({k.mix['WARPGROUP.ARRIVE']} arrives, {k.mix['HGMMA.64']} HGMMA)"
    if variant == "vec":
        assert "ld.global.v4" in ptx or "ld.global.nc.v4" in ptx, f"{op} vec variant: no 128-bit load in the PTX"
        assert "st.global.v4" in ptx, f"{op} vec variant: no 128-bit store in the PTX"


# ---- the adapter's contract (no runtime, no GPU needed) --------------------------------------------------
def test_every_op_is_implemented_or_missing_with_a_reason():
    b = adapter.CuteDslBackend()
    names = set(KERNEL_MODULES) | set(MISSING)
    assert names == set(OP_NAMES), f"ops neither implemented nor listed missing: {set(OP_NAMES) - names}"
    assert not set(KERNEL_MODULES) & set(MISSING)
    for op, why in b.missing().items():
        assert op in MISSING and why == MISSING[op]


def test_unavailable_here_with_a_precise_reason():
    ok, reason = adapter.CuteDslBackend().available()
    if RUNTIME is not None:
        assert not ok and "nvidia-cutlass-dsl" in reason and "not importable" in reason
    elif not torch.cuda.is_available():
        assert not ok and "no CUDA GPU" in reason
        assert adapter.CuteDslBackend().state_when_unavailable() == "built"


def test_target_arch_is_the_arch_specific_variant():
    assert adapter.target_arch(9, 0) == "sm_90a" and adapter.target_arch(10, 0) == "sm_100a"


@pytest.mark.parametrize("dtype,n,expect", [(torch.bfloat16, 4096, "vec"), (torch.bfloat16, 4099, "scalar"),
                                            (torch.float32, 12, "vec"), (torch.float32, 6, "scalar")])
def test_variant_follows_the_row_length(dtype, n, expect):
    x = torch.zeros(3, n, dtype=dtype)
    assert variant_of("softmax", [x, torch.zeros_like(x)]) == expect


def test_variant_refuses_128_bit_access_to_a_misaligned_base():
    buf = torch.zeros(4097, dtype=torch.float16)
    a, out = buf[1:], torch.zeros(4096, dtype=torch.float16)  # a starts 2 bytes past an aligned address
    assert variant_of("vector_add", [a, out, out]) == "scalar"
    assert variant_of("vector_add", [buf[:4096], out, out]) == "vec"


def test_rope_variant_needs_whole_vectors_in_each_half():
    q = torch.zeros(1, 1, 4, 8, dtype=torch.bfloat16)  # halves of 4 bf16 = 64 bits: not one vector
    assert variant_of("rope", [q, q[0, 0], q[0, 0], q]) == "scalar"
    q = torch.zeros(1, 1, 4, 16, dtype=torch.bfloat16)
    assert variant_of("rope", [q, q[0, 0], q[0, 0], q]) == "vec"


@pytest.mark.parametrize("op", sorted(KERNEL_MODULES))
def test_default_configs_pass_their_own_rules(op):
    b = adapter.CuteDslBackend()
    for dt in get_spec(op).dtypes:
        for c in _configs(op, dt) + b.config_space(op, dt):
            b.check_config(op, dt, c)


def test_config_rules_refuse_what_cannot_run():
    b = adapter.CuteDslBackend()
    with pytest.raises(ValueError, match="THREADS"):
        b.check_config("vector_add", torch.float32, {"THREADS": 48})
    with pytest.raises(ValueError, match="unknown config key"):
        b.check_config("vector_add", torch.float32, {"BLOCK": 256})


class _FakeKernels:
    """Stands in for the kernel modules and the compiler: records what the adapter builds and launches."""

    def __init__(self):
        self.builds, self.launches = [], []

    def module(self, op):
        fake = self

        class Module:
            @staticmethod
            def build(dtype, variant, cfg):
                fake.builds.append((op, dtype, variant, dict(cfg)))
                return f"jit:{op}", ("fake args",)

            @staticmethod
            def launch(compiled, *tensors, **params):
                fake.launches.append((op, compiled, tensors, params))
        return Module


@pytest.fixture
def fake_backend(monkeypatch):
    kernels = _FakeKernels()
    monkeypatch.setattr(adapter, "kernel_module", kernels.module)
    monkeypatch.setattr(adapter.CuteDslBackend, "_compile", staticmethod(lambda fn, args, arch: f"compiled {fn} {arch}"))
    monkeypatch.setattr(adapter.CuteDslBackend, "_arch_of", staticmethod(lambda device: "sm_90a"))
    monkeypatch.setattr(torch.cuda, "device", lambda device: __import__("contextlib").nullcontext())
    return adapter.CuteDslBackend(), kernels


def test_adapter_compiles_once_per_specialization_and_records_the_time(fake_backend):
    b, kernels = fake_backend
    fn = b.implementations()["rms_norm"]
    x, w = torch.randn(4, 64, dtype=torch.bfloat16), torch.randn(64, dtype=torch.bfloat16)
    out = torch.empty_like(x)
    fn(x, w, out, eps=1e-6)
    fn(x, w, out, eps=1e-5)  # same specialization: no second compile
    assert kernels.builds == [("rms_norm", torch.bfloat16, "vec",
                               {**b.config_for("rms_norm", torch.bfloat16, {"M": 4, "N": 64}), "CHUNKS": 1})]
    assert [(op, c, p) for op, c, _, p in kernels.launches] == [("rms_norm", "compiled jit:rms_norm sm_90a", {"eps": 1e-6}),
                                                              ("rms_norm", "compiled jit:rms_norm sm_90a", {"eps": 1e-5})]
    assert all(t is u for t, u in zip(kernels.launches[0][2], (x, w, out)))  # the caller's tensors, in spec order
    assert set(b.record_extras("rms_norm", torch.bfloat16, {})) == {"compile_ms"}
    assert b.record_extras("softmax", torch.bfloat16, {}) == {}
    x2 = torch.randn(4, 63, dtype=torch.bfloat16)  # a row that is not whole vectors: the scalar variant
    fn(x2, torch.randn(63, dtype=torch.bfloat16), torch.empty_like(x2), eps=1e-6)
    assert kernels.builds[-1][2] == "scalar"


def test_adapter_uses_the_forced_config(fake_backend):
    b, kernels = fake_backend
    b.set_config("softmax", torch.float32, {"WARPS_PER_ROW": 2, "ROWS": 2})
    x = torch.randn(3, 40)
    b.implementations()["softmax"](x, torch.empty_like(x))
    # 10 vectors of 4 over 64 threads: one vector each, held in registers
    assert kernels.builds[-1] == ("softmax", torch.float32, "vec", {"WARPS_PER_ROW": 2, "ROWS": 2, "CHUNKS": 1})


@needs_runtime
@pytest.mark.parametrize("tile", cfgmod.TRANSPOSE_TILES)
@pytest.mark.parametrize("vec", [1, 4, 8])
def test_transpose_threads_cover_the_tile_exactly(tile, vec):
    from tilerosetta.kernels.cute_dsl import transpose

    threads = transpose._threads(tile, vec)
    per_row = tile // vec
    assert threads <= transpose.MAX_THREADS and threads % per_row == 0
    step = threads // per_row
    assert step <= tile and tile % step == 0  # every tile row visited once, none past the tile


@needs_runtime
def test_inspect_reads_the_cubin_of_the_bench_call():
    if toolchain.binary_tool("cuobjdump") is None:
        pytest.skip("no cuobjdump here (make setup, or the triton wheel, provides one)")
    from tilerosetta.commands.inspect import inspect

    found = inspect("cute_dsl", "rms_norm", "bf16", arch="sm_90")
    assert found and all(k.kernel.regs > 0 for k in found)
    label = found[0].label
    assert "sm_90a" in label and "vec variant" in label and "'CHUNKS': 4" in label, label  # 8192 bf16 = 1024 vectors over 256 threads
    assert found[0].kernel.threads == 256


def test_target_arch_keeps_sm80_plain():
    assert adapter.target_arch(8, 0) == "sm_80"


def test_extent_one_dims_get_row_major_strides():
    x = torch.arange(4.0).reshape(4, 1).t()  # (1, 4), strides (1, 1): contiguous, not row-major
    assert x.is_contiguous() and x.stride() == (1, 1)
    y = adapter._compact(x)
    assert y.stride() == (4, 1) and torch.equal(y, x) and y.data_ptr() == x.data_ptr()
    z = torch.zeros(3, 5)
    assert adapter._compact(z) is z


# ---- the GEMMs (matmul, bmm) ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gemm_takes_wgmma_when_tma_can_load_the_operands(fake_backend, dtype):
    b, kernels = fake_backend
    decode, gemm = {"BM": 64, "BN": 64, "STAGES": 6}, {"BM": 128, "BN": 256, "STAGES": 4}
    for m, n, k in ((4096, 4096, 4096), (1, 64, 64), (97, 32, 1024)):  # any M; K, N multiples of 8
        a, w = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
        b.implementations()["matmul"](a, w, torch.empty(m, n, dtype=dtype))
        assert kernels.builds[-1][:3] == ("matmul", dtype, "wgmma"), (m, n, k)
        # M <= 16 (decode) takes the narrow 64 x 64 tile with a deeper ring, the rest the 128 x 256 GEMM tile
        assert b.config_for("matmul", dtype, {"M": m, "N": n, "K": k}) == (decode if m <= 16 else gemm), (m, n, k)
    # one compile per tile (97 x 32 reuses the 128 x 256 kernel), each the config its calls asked for
    assert [bld[3] for bld in kernels.builds if bld[0] == "matmul"] == [gemm, decode]
    a, w = torch.randn(3, 7, 16, dtype=dtype), torch.randn(3, 16, 24, dtype=dtype)
    b.implementations()["bmm"](a, w, torch.empty(3, 7, 24, dtype=dtype))
    assert kernels.builds[-1][:3] == ("bmm", dtype, "wgmma")
    square = torch.zeros(64, 64, dtype=dtype)
    misaligned = torch.zeros(64 * 64 + 1, dtype=dtype)[1:].view(64, 64)  # base 2 bytes past a 16-byte boundary
    assert variant_of("matmul", [square, square, square]) == "wgmma"
    assert variant_of("matmul", [misaligned, square, square]) == "simt"
    assert variant_of("matmul", [square.float()] * 3) == "simt"


def test_gemm_simt_can_be_forced_for_a_gpu_diagnosis(monkeypatch):
    square = torch.zeros(64, 64, dtype=torch.bfloat16)
    monkeypatch.setenv("TILEROSETTA_CUTE_DSL_GEMM", "simt")
    assert variant_of("bmm", [square[None]] * 3) == "simt"
    monkeypatch.delenv("TILEROSETTA_CUTE_DSL_GEMM")
    assert variant_of("bmm", [square[None]] * 3) == "wgmma"


@needs_runtime
@pytest.mark.parametrize("m_tiles,n_tiles,batch", [(1, 1, 1), (32, 16, 1), (13, 5, 3), (8, 1, 2), (3, 7, 65537)])
def test_gemm_wgmma_grid_visits_every_tile_once(m_tiles, n_tiles, batch):
    from tilerosetta.kernels.cute_dsl.gemm_wgmma import GROUP_M, _tile_of

    tiles = [_tile_of(x, m_tiles, n_tiles) for x in range(m_tiles * n_tiles * batch)]
    assert sorted(tiles) == sorted((i, j, b) for i in range(m_tiles) for j in range(n_tiles) for b in range(batch))
    if m_tiles >= GROUP_M:  # the first CTAs walk down M first
        assert [t[:2] for t in tiles[:GROUP_M]] == [(i, 0) for i in range(GROUP_M)]


def test_gemm_configs_refuse_what_does_not_fit():
    b = adapter.CuteDslBackend()
    with pytest.raises(ValueError, match="shared memory"):
        b.check_config("matmul", torch.bfloat16, {"BM": 128, "BN": 256, "STAGES": 5})  # 240 KB
    with pytest.raises(ValueError, match="BN"):
        b.check_config("bmm", torch.bfloat16, {"BM": 128, "BN": 32, "STAGES": 4})
    assert {"BM": 128, "BN": 256, "STAGES": 4} in b.config_space("matmul", torch.bfloat16)


@needs_runtime
@pytest.mark.parametrize("bm,bn,stages", [(128, 256, 4), (64, 128, 3)])
def test_gemm_wgmma_warp_specialised_form_compiles_within_the_register_file(tmp_path, bm, bn, stages):
    """WS=1: BM / 64 consumer warpgroups plus the producer one (128 more threads), every K tile loaded by TMA
    from the producer, wgmmas only in the consumers; with no setmaxnreg every thread gets the kernel's
    register count, so it must fit 65536 / threads, and nothing may spill."""
    from tilerosetta.kernels.cute_dsl import common, gemm_wgmma

    if toolchain.binary_tool("cuobjdump") is None:
        pytest.skip("no cuobjdump here (make setup, or the triton wheel, provides one)")
    for ws in (0, 1):
        out = tmp_path / f"ws{ws}"
        out.mkdir()
        fn, args = gemm_wgmma.build(torch.bfloat16, {"BM": bm, "BN": bn, "STAGES": stages, "WS": ws})
        ptx = common.compile_for(fn, args, ARCH, keep_dir=str(out)).artifacts.PTX
        assert "cp.async.bulk.tensor" in ptx and "wgmma.mma_async" in ptx
        (k,) = cubin.analyse(next(out.glob(f"*.{ARCH}.cubin")).read_bytes())
        assert k.threads == 2 * bm + 128 * ws, f"WS={ws}: {k.threads} threads"
        assert k.local == 0 and k.spill_stores == 0, f"WS={ws}: spills ({k.local} B local)"
        assert k.regs * k.threads <= 65536, f"WS={ws}: {k.regs} registers x {k.threads} threads"
        assert k.mix["HGMMA.64"] and any(i.startswith("UTMALDG") for i in k.mix)


def test_gemm_ws_is_a_config_of_the_wgmma_kernel(fake_backend):
    b, kernels = fake_backend
    assert {"BM": 128, "BN": 256, "STAGES": 4, "WS": 1} in b.config_space("matmul", torch.bfloat16)
    with pytest.raises(ValueError, match="WS"):
        b.check_config("matmul", torch.bfloat16, {"BM": 128, "BN": 256, "STAGES": 4, "WS": 2})
    b.set_config("matmul", torch.bfloat16, {"WS": 1})
    a = torch.randn(64, 64, dtype=torch.bfloat16)
    b.implementations()["matmul"](a, a, torch.empty_like(a))
    assert kernels.builds[-1] == ("matmul", torch.bfloat16, "wgmma", {"BM": 128, "BN": 256, "STAGES": 4, "WS": 1})


def test_gemm_simt_serves_fp32_and_unaligned_shapes(fake_backend):
    b, kernels = fake_backend
    for dtype, (m, n, k) in ((torch.float32, (64, 64, 64)), (torch.bfloat16, (7, 13, 5)), (torch.float16, (127, 129, 131))):
        a, w = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
        b.implementations()["matmul"](a, w, torch.empty(m, n, dtype=dtype))
        assert kernels.builds[-1][:3] == ("matmul", dtype, "simt"), (dtype, m, n, k)


def test_matmul_launches_rank3_views_of_its_operands(fake_backend):
    b, kernels = fake_backend
    a, w, out = torch.randn(7, 5), torch.randn(5, 13), torch.empty(7, 13)
    b.implementations()["matmul"](a, w, out)
    from tilerosetta.kernels.cute_dsl import matmul  # pure Python: needs no runtime

    seen = []
    matmul.launch(lambda *t: seen.extend(t), a, w, out)
    assert [t.shape for t in seen] == [(1, 7, 5), (1, 5, 13), (1, 7, 13)]
    assert [t.data_ptr() for t in seen] == [a.data_ptr(), w.data_ptr(), out.data_ptr()]
    assert all(t.stride() == (t.shape[1] * t.shape[2], t.shape[2], 1) for t in seen)  # row-major, as compiled


@needs_runtime
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gemm_simt_is_an_fp32_fma_tile_without_spills(tmp_path, dtype):
    from tilerosetta.kernels.cute_dsl import common, gemm_simt

    fn, args = gemm_simt.build(dtype)
    ptx = common.compile_for(fn, args, ARCH, keep_dir=str(tmp_path)).artifacts.PTX
    per_thread = gemm_simt.TM * gemm_simt.TN * gemm_simt.BK  # one FMA per output per k of a K step
    assert ptx.count("fma.rn.f32") >= per_thread, "the inner K step is not unrolled into FMAs"
    assert "wgmma" not in ptx and "mma.sync" not in ptx
    if toolchain.binary_tool("cuobjdump") is not None:
        for k in cubin.analyse(next(tmp_path.glob(f"*.{ARCH}.cubin")).read_bytes()):
            assert k.local == 0 and k.spill_stores == 0, f"gemm_simt {dtype}: {k.name} spills"


# ---- attention -------------------------------------------------------------------------------------------
def test_attention_compiles_its_head_dim_in(fake_backend):
    b, kernels = fake_backend
    for d in (64, 128):
        q = torch.randn(1, 2, 17, d, dtype=torch.bfloat16)
        b.implementations()["attention"](q, q, q, torch.empty_like(q), causal=True, scale=None)
        assert kernels.builds[-1][:3] == ("attention", torch.bfloat16, f"wgmma_d{d}")
    assert kernels.launches[-1][3] == {"causal": True, "scale": None}


def test_attention_takes_wgmma_when_tma_can_load_and_the_config_allows(fake_backend, monkeypatch):
    b, kernels = fake_backend
    attn = b.implementations()["attention"]
    q = torch.randn(1, 4, 100, 64, dtype=torch.float16)
    kv = torch.randn(1, 2, 33, 64, dtype=torch.float16)  # GQA, Sk != Sq
    attn(q, kv, kv, torch.empty_like(q), causal=False, scale=None)
    assert kernels.builds[-1] == ("attention", torch.float16, "wgmma_d64",  # 128 rows: warp-specialised
                                  {"WGMMA": 1, "BM": 128, "BN": 128, "STAGES": 3, "PIPE": 1, "PACK": 1, "WS": 1})
    dec = torch.randn(2, 8, 1, 128, dtype=torch.bfloat16)  # decode: one warpgroup of 64 rows
    cache = torch.randn(2, 2, 300, 128, dtype=torch.bfloat16)
    attn(dec, cache, cache, torch.empty_like(dec), causal=True, scale=None)
    assert kernels.builds[-1] == ("attention", torch.bfloat16, "wgmma_d128",
                                  {"WGMMA": 1, "BM": 64, "BN": 128, "STAGES": 3, "PIPE": 1, "PACK": 1})
    # a base TMA cannot address (2 bytes past a 16-byte boundary): the SIMT kernel, which has no knobs
    odd = torch.zeros(1 * 4 * 100 * 64 + 1, dtype=torch.float16)[1:].view(1, 4, 100, 64)
    attn(odd, kv, kv, torch.empty_like(q), causal=False, scale=None)
    assert kernels.builds[-1] == ("attention", torch.float16, "d64", {})
    # the switches that take the wgmma kernel out without a code change: the config knob, the env var
    b.set_config("attention", torch.float16, {"WGMMA": 0})
    attn(q, kv, kv, torch.empty_like(q), causal=False, scale=None)
    assert kernels.builds[-1] == ("attention", torch.float16, "d64", {})
    b.set_config("attention", torch.float16, None)
    monkeypatch.setenv("TILEROSETTA_CUTE_DSL_ATTENTION", "simple")  # the wgmma kernel's simple form
    attn(q, kv, kv, torch.empty_like(q), causal=False, scale=None)
    assert kernels.builds[-1] == ("attention", torch.float16, "wgmma_d64",
                                  {"WGMMA": 1, "BM": 128, "BN": 128, "STAGES": 3, "PIPE": 0, "PACK": 0, "WS": 0})
    monkeypatch.setenv("TILEROSETTA_CUTE_DSL_ATTENTION", "simt")
    assert variant_of("attention", [q, kv, kv, q], {"WGMMA": 1}) == "d64"
    monkeypatch.delenv("TILEROSETTA_CUTE_DSL_ATTENTION")
    assert variant_of("attention", [q, kv, kv, q], {"WGMMA": 1}) == "wgmma_d64"


def test_attention_configs_refuse_what_cannot_run():
    b = adapter.CuteDslBackend()
    with pytest.raises(ValueError, match="WGMMA"):
        b.check_config("attention", torch.bfloat16, {"WGMMA": 2})
    with pytest.raises(ValueError, match="PIPE"):
        b.check_config("attention", torch.bfloat16, {"PIPE": True})
    with pytest.raises(ValueError, match="PACK"):
        b.check_config("attention", torch.bfloat16, {"PACK": 2})
    with pytest.raises(ValueError, match="BN"):
        b.check_config("attention", torch.bfloat16, {"BM": 128, "BN": 256, "STAGES": 2})
    with pytest.raises(ValueError, match="shared memory"):
        b.check_config("attention", torch.bfloat16, {"BM": 128, "BN": 128, "STAGES": 4})  # 288 KB at D=128
    assert {"WGMMA": 0} in b.config_space("attention", torch.bfloat16)


# ---- attention, warp-specialised form (WS=1) -----------------------------------------------------------------
PREFILL = {"B": 2, "H": 8, "S": 4096, "D": 128}


def test_attention_ws_is_a_config_of_the_wgmma_kernel(fake_backend):
    """WS=1 is a knob of the wgmma attention like the GEMMs' (0 or 1, not a bool), in the sweep space with
    every tile (the default prefill tile included), and a forced WS=1 reaches the compiled specialization."""
    b, kernels = fake_backend
    space = b.config_space("attention", torch.bfloat16)
    default = b.config_for("attention", torch.bfloat16, PREFILL)
    assert default["BM"] == 128 and default["WS"] == 1, "measured faster at BM 128 on the H200: the default"
    assert default in space
    decode = b.config_for("attention", torch.bfloat16, {"B": 2, "H": 8, "Hkv": 2, "S": 1, "Sk": 300, "D": 128})
    assert decode["BM"] == 64 and "WS" not in decode, "BM 64 with WS is not measured: not the default"
    assert {(c["BM"], c["BN"], c["STAGES"], c["PIPE"], c["PACK"]) for c in space if c.get("WS") == 1} == \
        {(bm, bn, st, pipe, pack) for bm in (64, 128) for bn in (64, 128) for st in (2, 3) for pipe in (1, 0)
         for pack in (1, 0)}
    for bad in (2, True, "1"):
        with pytest.raises(ValueError, match="WS"):
            b.check_config("attention", torch.bfloat16, {**default, "WS": bad})
    b.set_config("attention", torch.bfloat16, {"WS": 1})
    q = torch.randn(2, 8, 300, 64, dtype=torch.bfloat16)
    b.implementations()["attention"](q, q, q, torch.empty_like(q), causal=True, scale=None)
    tile = cfgmod.default_config("attention", "bf16", {"B": 2, "H": 8, "S": 300, "D": 64})
    del tile["SPLIT_MIN_BLOCKS"]  # host-side: not compiled in
    assert kernels.builds[-1] == ("attention", torch.bfloat16, "wgmma_d64", {**tile, "WS": 1})


def _sass_opcodes(elf: bytes) -> list[str]:
    """The kernel's SASS opcodes in code order (one cubin, one kernel)."""
    import re

    text = cubin._run("-sass", cubin=elf)
    return [m.group(1) for line in text.splitlines()
            if (m := re.match(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line))]


@needs_runtime
@pytest.mark.parametrize("d,bm,bn,pipe", [(64, 128, 128, 1), (128, 128, 128, 1), (128, 128, 128, 0), (128, 64, 128, 1),
                                          (64, 128, 64, 1)])
def test_attention_wgmma_warp_specialised_form_compiles_clean(tmp_path, d, bm, bn, pipe):
    """WS=1 (the unsplit kernel; causal is a runtime argument, so one compile serves causal and not): BM / 64
    consumer warpgroups plus the producer one; no spills, the wgmmas not serialised (ptxas warning C7514
    gives one WARPGROUP.ARRIVE per HGMMA), and every TMA load (UTMALDG) in the producer's code, laid out
    before the consumers' first HGMMA (the plain pipelined form refills between its HGMMAs: checked on its
    twin). At
    BM=128 (384 threads, 168 registers a thread at launch) setmaxnreg hands the producer's registers to the
    consumers: USETMAXREG down to 24 before the loads, up to 240 before the HGMMAs, and the CTA's launch
    registers cover 128 x 24 + 256 x 240 (else the consumers' increase could never be served); ptxas drops
    both instructions where every thread fits the launch registers."""
    from tilerosetta.kernels.cute_dsl import attention_wgmma, common

    if toolchain.binary_tool("cuobjdump") is None:
        pytest.skip("no cuobjdump here (make setup, or the triton wheel, provides one)")
    cfg = {"WGMMA": 1, "BM": bm, "BN": bn, "STAGES": 3 if bn == 128 else 2, "PIPE": pipe, "PACK": 1}
    regs = attention_wgmma.ws_registers(bm)
    assert (regs is not None) == (bm == 128)
    for ws in (1, 0):
        out = tmp_path / f"ws{ws}"
        out.mkdir()
        fn, args = attention_wgmma.build(torch.bfloat16, d, {**cfg, "WS": ws})
        ptx = common.compile_for(fn, args, ARCH, keep_dir=str(out)).artifacts.PTX
        elf = next(out.glob(f"*.{ARCH}.cubin")).read_bytes()
        (k,) = cubin.analyse(elf)
        assert k.threads == 2 * bm + 128 * ws, f"WS={ws}: {k.threads} threads"
        assert k.local == 0 and k.spill_stores == 0, f"WS={ws} {cfg}: spills ({k.local} B local, {k.spill_stores} STL)"
        assert k.mix["WARPGROUP.ARRIVE"] <= 4 < k.mix["HGMMA.64"], \
            f"WS={ws} {cfg}: wgmmas serialised ({k.mix['WARPGROUP.ARRIVE']} arrives, {k.mix['HGMMA.64']} HGMMA)"
        ops = _sass_opcodes(elf)
        loads = [i for i, o in enumerate(ops) if o.startswith("UTMALDG")]
        mmas = [i for i, o in enumerate(ops) if o.startswith("HGMMA")]
        assert loads and mmas
        if not ws:
            # the pipelined plain form refills at the end of an iteration, after its HGMMAs (the simple one
            # at the top, before them: there the order tells nothing, the setmaxnreg bracket below does)
            assert not pipe or loads[-1] > mmas[0], "the plain form should refill the ring between its HGMMAs"
            assert "setmaxnreg" not in ptx and not any(o.startswith("USETMAXREG") for o in ops)
            continue
        assert loads[-1] < mmas[0], f"{cfg}: a TMA load after the first HGMMA: not all in the producer"
        dealloc = [i for i, o in enumerate(ops) if o.startswith("USETMAXREG.DEALLOC")]
        alloc = [i for i, o in enumerate(ops) if o.startswith("USETMAXREG.TRY_ALLOC")]
        if regs is None:
            assert not dealloc and not alloc and "setmaxnreg" not in ptx
            assert k.regs * k.threads <= 65536
            continue
        assert f"setmaxnreg.dec.sync.aligned.u32 \t{regs[0]};" in ptx and \
            f"setmaxnreg.inc.sync.aligned.u32 \t{regs[1]};" in ptx, "setmaxnreg counts"
        assert len(dealloc) == len(alloc) <= 1, "ptxas keeps both reallocations or neither"
        if not alloc:
            # ptxas drops both when every thread fits the launch registers (small tiles: BN=64 at D=64 takes
            # 106); the pipelined 128 x 128 tile must keep them, it needs more than 168
            assert not (bn == 128 and pipe), f"{cfg}: no register reallocation in the SASS"
            assert k.regs * k.threads <= 65536
            continue
        assert dealloc[0] < loads[0] and loads[-1] < alloc[0] < mmas[0], "loads outside the producer's registers"
        assert 128 * regs[0] + 2 * bm * regs[1] <= k.regs * k.threads <= 65536, (k.regs, regs)


@needs_runtime
def test_attention_split_form_ignores_ws():
    """A call that splits compiles the split kernel with or without WS: the same function and arguments."""
    from tilerosetta.kernels.cute_dsl import attention_wgmma

    cfg = {"WGMMA": 1, "BM": 64, "BN": 128, "STAGES": 3, "PIPE": 1, "PACK": 1, "SPLIT": 1}
    fn0, args0 = attention_wgmma.build(torch.bfloat16, 128, cfg)
    fn1, args1 = attention_wgmma.build(torch.bfloat16, 128, {**cfg, "WS": 1})
    assert fn0 is fn1 is attention_wgmma.attention_wgmma_split
    assert len(args0) == len(args1) and args0[-6:] == args1[-6:]  # the compiled knobs: D, BM, BN, STAGES, PIPE, PACK
    fn, args = attention_wgmma.build(torch.bfloat16, 128, {**cfg, "SPLIT": 0, "WS": 1})
    assert fn is attention_wgmma.attention_wgmma and args[-1] is True


def _replay_ring(aw, n_tiles, stages, warps, pipelined, rng):
    """The WS=1 ring on the CPU: the producer (_produce: tile j into stage j % STAGES, from j >= STAGES after
    waiting on the stage's empty barrier with aw.refill_parity) against `warps` consumer warps running the
    waits and releases of _consume (pipelined: Q K(j+1)ᵀ reads stage (j+1) % STAGES before P(j) V reads stage
    j % STAGES, then the release of j; simple: wait, both products on stage j % STAGES, release), in a random
    interleaving. mbarrier semantics: a wait on parity p passes once completed phases % 2 != p. A load lands
    at once (the earliest a refill could overwrite a stage). Every read checks the stage holds its tile; a
    consumer's wgmmas read until the release, so reads are checked again just before it."""
    full_done, empty_done, empty_arrivals = [0] * stages, [0] * stages, [0] * stages
    holds = [None] * stages
    reads = []

    def producer():
        for j in range(n_tiles):
            s = j % stages
            if j >= stages:
                while empty_done[s] % 2 == aw.refill_parity(j, stages):
                    yield
            holds[s] = j
            full_done[s] += 1
            yield

    def wait_full(s, parity):
        while full_done[s] % 2 == parity:
            yield

    def read(s, tile, w):
        assert holds[s] == tile, f"warp {w} reads tile {tile} from stage {s}, which holds {holds[s]}"
        reads.append((w, tile))

    def release(s):
        empty_arrivals[s] += 1
        if empty_arrivals[s] == warps:
            empty_arrivals[s] = 0
            empty_done[s] += 1

    def consumer(w):
        if pipelined:
            yield from wait_full(0, 0)
            read(0, 0, w)
            for j in range(n_tiles):
                s, jn = j % stages, min(j + 1, n_tiles - 1)
                yield from wait_full(jn % stages, (jn // stages) % 2)
                read(jn % stages, jn, w)
                yield
                read(s, j, w)
                yield
                read(jn % stages, jn, w)
                read(s, j, w)
                release(s)
                yield
        else:
            for j in range(n_tiles):
                s = j % stages
                yield from wait_full(s, (j // stages) % 2)
                read(s, j, w)
                yield
                read(s, j, w)
                release(s)
                yield

    actors = [producer()] + [consumer(w) for w in range(warps)]
    for _ in range(100000):
        if not actors:
            break
        a = rng.choice(actors)
        try:
            next(a)
        except StopIteration:
            actors.remove(a)
    assert not actors, f"deadlock: {len(actors)} actors still waiting (n_tiles {n_tiles}, stages {stages})"
    assert {t for _, t in reads} == set(range(n_tiles))


@needs_runtime
@pytest.mark.parametrize("pipelined", [1, 0])
@pytest.mark.parametrize("stages", [2, 3])
def test_attention_ws_ring_replayed_on_the_cpu_never_overwrites_a_stage_in_use(pipelined, stages):
    import random

    from tilerosetta.kernels.cute_dsl import attention_wgmma as aw

    rng = random.Random(stages * 10 + pipelined)
    for n_tiles in (1, 2, 3, 4, 7, 32):
        for _ in range(20):
            _replay_ring(aw, n_tiles, stages, 8, pipelined, rng)


@needs_runtime
def test_attention_ws_ring_replay_catches_a_wrong_parity():
    """The replay can fail: a producer that waits for the parity of the release it needs next (off by one
    phase) overwrites a stage some warp still reads."""
    import random
    import types

    wrong = types.SimpleNamespace(refill_parity=lambda j, stages: (j // stages) % 2)
    with pytest.raises(AssertionError, match="reads tile"):
        for seed in range(20):
            _replay_ring(wrong, 12, 2, 8, 1, random.Random(seed))


@needs_runtime
@pytest.mark.parametrize("bm,bn,d", [(64, 64, 64), (128, 128, 128), (64, 128, 64)])
def test_attention_p_reuses_the_score_registers(bm, bn, d):
    """The wgmma attention feeds P to the P V wgmma from the registers that held S, converted element for
    element, and reads a value's row slot as (i // 2) % 2. Both rest on the two MMAs' thread-value layouts:
    value v of a thread's S fragment must be the (row, column) of value v % 8 of its A fragment in K block
    v // 8 (16 columns further per block), and values 2, 3 of each 4 lie 8 rows below values 0, 1 (so
    values 0 and 2 give the query positions of the thread's two rows)."""
    import cutlass
    import cutlass.cute as cute

    from tilerosetta.kernels.cute_dsl import attention_wgmma

    seen = {}

    @cute.jit
    def probe():
        qk, pv = attention_wgmma.mmas(cutlass.BFloat16, bm, bn, d)
        c, a = qk.tv_layout_C_tiled, pv.tv_layout_A_tiled  # (thread, value) -> row + BM * column
        seen["s"] = [[cute.crd2idx((t, v), c) for v in range(bn // 2)] for t in range(cute.size(qk))]
        seen["p"] = [[cute.crd2idx((t, v), a) for v in range(8)] for t in range(cute.size(pv))]

    cute.compile(probe, options=f"--gpu-arch {ARCH}")
    assert len(seen["s"]) == len(seen["p"]) == 2 * bm
    for s_row, p_row in zip(seen["s"], seen["p"]):
        assert s_row == [p_row[v % 8] + bm * 16 * (v // 8) for v in range(bn // 2)]
        rows = [x % bm for x in s_row]
        assert all(rows[v] == rows[0] + 8 * ((v // 2) % 2) for v in range(bn // 2))  # two rows per thread


@needs_runtime
def test_attention_launch_passes_the_base2_scale_and_the_causal_flag():
    import math

    from tilerosetta.kernels.cute_dsl import attention

    seen = []
    q, kv = torch.zeros(1, 4, 5, 64), torch.zeros(1, 2, 9, 64)  # GQA: 4 query heads over 2 kv heads, Sk != Sq
    attention.launch(lambda *a: seen.extend(a), q, kv, kv, q, causal=True, scale=None)
    assert seen[4] == 1 and seen[5] == pytest.approx(math.log2(math.e) / 8)
    seen.clear()
    attention.launch(lambda *a: seen.extend(a), q, kv, kv, q, causal=False, scale=0.3)
    assert seen[4] == 0 and seen[5] == pytest.approx(0.3 * math.log2(math.e))


@needs_runtime
def test_attention_is_a_shared_memory_simt_kernel_without_spills(tmp_path):
    from tilerosetta.kernels.cute_dsl import attention, common

    fn, args = attention.build(torch.float16, "d128", {})
    ptx = common.compile_for(fn, args, ARCH, keep_dir=str(tmp_path)).artifacts.PTX
    assert "ex2.approx" in ptx, "the online softmax's exp2 is missing"
    assert "shfl.sync.idx" in ptx and "shfl.sync.bfly" in ptx  # p_j broadcast; warp max / sum
    if toolchain.binary_tool("cuobjdump") is not None:
        for k in cubin.analyse(next(tmp_path.glob(f"*.{ARCH}.cubin")).read_bytes()):
            assert k.local == 0 and k.spill_stores == 0, f"attention d128: {k.name} spills"
            assert k.threads == 32 * attention.ROWS


def _attention_case(case, gen):
    """One attention conformance case in float64, as the CPU replays of the kernels' schedules take it:
    (B, H, S, D, Hkv, Sk), (q, k, v) drawn from gen, the spec's reference output, the scale, causal as 0/1
    and the end-aligned shift Sk - S."""
    import math

    spec = get_spec("attention")
    dims, params = case.dims, {"causal": False, "scale": None, **case.params}
    b, h, s, d = dims["B"], dims["H"], dims["S"], dims["D"]
    hkv, sk = dims.get("Hkv", h), dims.get("Sk", s)
    q = torch.randn(b, h, s, d, generator=gen, dtype=torch.float64)
    k, v = (torch.randn(b, hkv, sk, d, generator=gen, dtype=torch.float64) for _ in range(2))
    ref = spec.reference(params, q, k, v)["out"]
    scale = params["scale"] if params["scale"] is not None else 1 / math.sqrt(d)
    return (b, h, s, d, hkv, sk), (q, k, v), ref, scale, int(bool(params["causal"])), sk - s


@needs_runtime
@pytest.mark.parametrize("pack", [1, 0])
@pytest.mark.parametrize("bm,bn", [(64, 128), (128, 128), (128, 64)])
def test_attention_wgmma_schedule_replayed_on_the_cpu_matches_the_reference(pack, bm, bn):
    """The wgmma attention's index arithmetic (CTA -> query tile / head group / batch, K/V head, packed rows,
    causal key-tile count), run with ints through the kernel's own helpers on every conformance case. Per
    CTA: its rows (row i = position i % Sq of head group-head i // Sq) get exact softmax attention over the
    key tiles it loads, TMA's zero rows past Sk included and masked as the kernel masks them. Must hold:
    every output row written once and equal to the spec's reference, no skipped key tile holds a visible
    key, and a tile the kernel does not mask (its mask-needed test, mirrored here) has no masked key."""
    from tilerosetta.kernels.cute_dsl import attention_wgmma as aw

    gen = torch.Generator().manual_seed(0)
    for case in get_spec("attention").cases:
        (b, h, s, d, hkv, sk), (q, k, v), ref, scale, causal, shift = _attention_case(case, gen)
        gp = h // hkv if pack else 1
        rows, groups = gp * s, h // gp
        m_tiles = -(-rows // bm)
        out = torch.full_like(q, float("nan"))
        for bx in range(m_tiles * groups * b):
            mt, hg, bb = aw.cta_coords(bx, m_tiles, groups)
            m0 = mt * bm
            min_pos, max_pos = aw.query_span(m0, bm, rows, s)
            n = aw.key_tiles(sk, bn, causal, max_pos, shift)
            hk = aw.kv_head(hg, gp, h, hkv)
            r = torch.arange(m0, min(m0 + bm, rows))
            heads, pos = hg * gp + r // s, r % s
            assert min_pos <= int(pos.min()) and int(pos.max()) <= max_pos, (case, bx)
            keys = torch.arange(max(n * bn, sk))
            visible = (keys[None] < sk) & ((causal == 0) | (keys[None] <= pos[:, None] + shift))
            assert not visible[:, n * bn:].any(), f"{case}: CTA {bx} skips a key tile with visible keys"
            for t in range(n):
                kv0 = t * bn
                if not (kv0 + bn > sk or (causal and kv0 + bn - 1 > min_pos + shift)):
                    assert visible[:, kv0:kv0 + bn].all(), f"{case}: CTA {bx} leaves key tile {t} unmasked"
            kk, vv = (torch.zeros(n * bn, d, dtype=torch.float64) for _ in range(2))  # TMA: zeros past Sk
            kk[:min(sk, n * bn)], vv[:min(sk, n * bn)] = k[bb, hk, :n * bn], v[bb, hk, :n * bn]
            scores = (q[bb, heads, pos] @ kk.T * scale).masked_fill(~visible[:, :n * bn], float("-inf"))
            assert out[bb, heads, pos].isnan().all(), f"{case}: a row written twice (CTA {bx})"
            out[bb, heads, pos] = torch.softmax(scores, dim=-1) @ vv
        assert not out.isnan().any(), f"{case}: rows no CTA wrote"
        torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-9, msg=lambda m: f"{case}: {m}")


# ---- attention split-KV (flash-decoding) ---------------------------------------------------------------------
LLAMA_DECODE = {"B": 1, "H": 32, "Hkv": 8, "S": 1, "Sk": 4096, "D": 128}


def _decode_call(b, sk=4096):
    q = torch.randn(b, 32, 1, 128, dtype=torch.bfloat16)
    cache = torch.randn(b, 8, sk, 128, dtype=torch.bfloat16)
    return q, cache, cache, torch.empty_like(q)


def test_attention_decode_at_b1_takes_the_split_and_sizes_its_workspaces(fake_backend):
    """Llama 3.1 8B decode at B=1: 8 CTAs (one per K/V head, its 4 query rows packed) for 132 SMs. The call
    compiles the split form (SPLIT=1; SPLIT_MIN_BLOCKS stays host-side) and launches with the plan: 16 chunks
    of 2 key tiles (256 keys), 128 CTAs, one wave; the partials' workspaces fit that plan exactly."""
    from tilerosetta.kernels.cute_dsl import attention_plan

    b, kernels = fake_backend
    q, k, v, out = _decode_call(1)
    b.implementations()["attention"](q, k, v, out, causal=True, scale=None)
    assert kernels.builds[-1] == ("attention", torch.bfloat16, "wgmma_d128",
                                  {"WGMMA": 1, "BM": 64, "BN": 128, "STAGES": 3, "PIPE": 1, "PACK": 1, "SPLIT": 1})
    split = kernels.launches[-1][3]["split"]
    assert split == attention_plan.Split(n_split=16, chunk=256, chunk_tiles=2, pack=1)
    assert attention_plan.tiles(LLAMA_DECODE, kernels.builds[-1][3]) * split.n_split <= 132  # one wave
    m_ws, l_ws, acc_ws = attention_plan.workspaces(q, k, split)
    assert m_ws.shape == l_ws.shape == (8, 16, 4) and acc_ws.shape == (8, 16, 4, 128)  # (B*Hkv, splits, G*Sq, D)
    assert {t.dtype for t in (m_ws, l_ws, acc_ws)} == {torch.float32} and m_ws.data_ptr() != l_ws.data_ptr()
    assert len({t.device for t in (m_ws, l_ws, acc_ws, q)}) == 1


@pytest.mark.parametrize("batch", [16, 64])
def test_attention_decode_that_fills_the_gpu_stays_the_unsplit_kernel(fake_backend, batch):
    """B=16 (128 CTAs: a split would turn one wave of 32 key tiles into three of 11) and B=64 compile and
    launch exactly what they did before split-KV: the same config, no split argument."""
    b, kernels = fake_backend
    b.implementations()["attention"](*_decode_call(batch), causal=True, scale=None)
    assert kernels.builds[-1] == ("attention", torch.bfloat16, "wgmma_d128",
                                  {"WGMMA": 1, "BM": 64, "BN": 128, "STAGES": 3, "PIPE": 1, "PACK": 1})
    assert kernels.launches[-1][3] == {"causal": True, "scale": None}


def test_attention_split_can_be_turned_off_and_spares_the_simt_kernel(fake_backend):
    b, kernels = fake_backend
    attn = b.implementations()["attention"]
    b.set_config("attention", torch.bfloat16, {"SPLIT_MIN_BLOCKS": 0})
    attn(*_decode_call(1), causal=True, scale=None)
    assert "SPLIT" not in kernels.builds[-1][3] and "split" not in kernels.launches[-1][3]
    b.set_config("attention", torch.bfloat16, {"WGMMA": 0})
    attn(*_decode_call(1), causal=True, scale=None)
    assert kernels.builds[-1][2:] == ("d128", {}) and "split" not in kernels.launches[-1][3]
    with pytest.raises(ValueError, match="SPLIT_MIN_BLOCKS"):
        b.check_config("attention", torch.bfloat16, {"SPLIT_MIN_BLOCKS": -1})


@pytest.mark.parametrize("sk", [129, 256, 1000, 4096, 4099, 32768])
@pytest.mark.parametrize("batch,heads,kv_heads,sq", [(1, 32, 8, 1), (1, 16, 2, 1), (2, 8, 2, 1), (1, 4, 1, 40),
                                                     (1, 2, 2, 300)])
@pytest.mark.parametrize("min_blocks", [1, 2, 4])
def test_attention_split_plan_covers_the_keys_once_and_only_where_it_pays(sk, batch, heads, kv_heads, sq, min_blocks):
    from tilerosetta.kernels.cute_dsl import attention_plan

    dims = {"B": batch, "H": heads, "Hkv": kv_heads, "S": sq, "Sk": sk, "D": 128}
    for bm, bn in ((64, 128), (128, 64)):
        cfg = {"BM": bm, "BN": bn, "STAGES": 2, "PACK": 1, "SPLIT_MIN_BLOCKS": min_blocks}
        n_split, chunk = attention_plan.plan(dims, cfg)
        if n_split == 1:
            assert chunk == sk
            continue
        assert chunk % bn == 0 and chunk >= min_blocks * bn, (cfg, chunk)
        assert (n_split - 1) * chunk < sk <= n_split * chunk, (cfg, n_split, chunk)  # every chunk starts below Sk
        ctas, slots = attention_plan.tiles(dims, cfg), 132 * attention_plan.ctas_per_sm(cfg, 128)
        assert -(-ctas * n_split // slots) * (chunk // bn) <= 0.75 * -(-ctas // slots) * -(-sk // bn)


def test_attention_split_occupancy_follows_shared_memory():
    from tilerosetta.kernels.cute_dsl import attention_plan

    assert attention_plan.ctas_per_sm({"BM": 64, "BN": 128, "STAGES": 3}, 128) == 1  # 208 KB
    assert attention_plan.ctas_per_sm({"BM": 64, "BN": 64, "STAGES": 2}, 128) == 2  # 80 KB
    assert attention_plan.ctas_per_sm({"BM": 128, "BN": 64, "STAGES": 2}, 64) == 1  # 256 threads x 255 registers
    # WS=1: the producer warpgroup's 128 threads count too (80 KB, but 256 threads x 255 registers)
    assert attention_plan.ctas_per_sm({"BM": 64, "BN": 64, "STAGES": 2, "WS": 1}, 128) == 1


def _split_cases():
    """Every attention conformance case with keys for two or more chunks, split into chunks of 1 and 3 key
    tiles whatever the plan would say (so that prefill and causal cases meet the split form too)."""
    spec = get_spec("attention")
    return [(case, chunk_tiles) for case in spec.cases for chunk_tiles in (1, 3)
            if case.dims.get("Sk", case.dims["S"]) > 64 * chunk_tiles]


@needs_runtime
@pytest.mark.parametrize("pack", [1, 0])
@pytest.mark.parametrize("bm,bn", [(64, 128), (128, 64)])
def test_attention_split_schedule_and_combine_replayed_on_the_cpu_match_the_reference(pack, bm, bn):
    """The split kernel's index arithmetic (CTA -> split, query tile, head group, batch; its chunk's key
    tiles, cut at its rows' causal limit) run with ints through the kernel's own helpers, its partials
    computed as it computes them (m = row max in log2 units, -inf for a row that saw no key; l; unnormalised
    O over the tiles it loads, TMA zeros past Sk), and the combine's formula: must give the reference on
    every case, with every (row, split) partial written exactly once and no visible key outside the tiles
    loaded. A chunk past every row's causal limit loads one fully masked tile (weight 0)."""
    import math

    from tilerosetta.kernels.cute_dsl import attention_wgmma as aw

    gen = torch.Generator().manual_seed(1)
    empty_chunks = no_key_rows = 0
    for case, chunk_tiles in _split_cases():
        (b, h, s, d, hkv, sk), (q, k, v), ref, scale, causal, shift = _attention_case(case, gen)
        log2e = math.log2(math.e)
        gp = h // hkv if pack else 1
        rows, groups = gp * s, h // gp
        m_tiles = -(-rows // bm)
        n_split = -(-sk // (chunk_tiles * bn))
        m_ws = torch.full((b * groups, n_split, rows), float("nan"), dtype=torch.float64)
        l_ws = torch.full_like(m_ws, float("nan"))
        acc_ws = torch.full((*m_ws.shape, d), float("nan"), dtype=torch.float64)
        for bx in range(m_tiles * groups * b * n_split):
            sp, rest = aw.split_coords(bx, n_split)
            mt, hg, bb = aw.cta_coords(rest, m_tiles, groups)
            m0 = mt * bm
            min_pos, max_pos = aw.query_span(m0, bm, rows, s)
            t0, n = aw.chunk_of(aw.key_tiles(sk, bn, causal, max_pos, shift), sp, chunk_tiles)
            assert n >= 1 and t0 * bn < sk, (case, bx)  # the tiles it loads exist
            hk = aw.kv_head(hg, gp, h, hkv)
            r = torch.arange(m0, min(m0 + bm, rows))
            heads, pos = hg * gp + r // s, r % s
            keys = torch.arange(t0 * bn, (t0 + n) * bn)
            visible = (keys[None] < sk) & ((causal == 0) | (keys[None] <= pos[:, None] + shift))
            chunk = torch.arange(sp * chunk_tiles * bn, min((sp + 1) * chunk_tiles * bn, sk))
            in_chunk = (causal == 0) | (chunk[None] <= pos[:, None] + shift)
            assert int(visible.sum()) == int(in_chunk.sum()), f"{case}: CTA {bx} misses visible keys of its chunk"
            empty_chunks += int(not visible.any())
            for t in range(n):
                kv0 = (t0 + t) * bn
                if not (kv0 + bn > sk or (causal and kv0 + bn - 1 > min_pos + shift)):
                    assert visible[:, t * bn:(t + 1) * bn].all(), f"{case}: CTA {bx} leaves key tile {t0 + t} unmasked"
            kk, vv = (torch.zeros(n * bn, d, dtype=torch.float64) for _ in range(2))  # TMA: zeros past Sk
            real = min(sk, (t0 + n) * bn) - t0 * bn
            kk[:real], vv[:real] = k[bb, hk, t0 * bn:t0 * bn + real], v[bb, hk, t0 * bn:t0 * bn + real]
            scores = (q[bb, heads, pos] @ kk.T).masked_fill(~visible, float("-inf"))  # raw S, as in the kernel
            row_max = scores.max(dim=-1).values
            base = torch.where(row_max == float("-inf"), 0.0, row_max * scale * log2e)
            p = torch.exp2(scores * scale * log2e - base[:, None])
            nq = bb * groups + hg
            assert m_ws[nq, sp, r].isnan().all(), f"{case}: partial written twice (CTA {bx})"
            m_ws[nq, sp, r], l_ws[nq, sp, r], acc_ws[nq, sp, r] = row_max * scale * log2e, p.sum(-1), p @ vv
            no_key_rows += int((row_max == float("-inf")).sum())
        assert not m_ws.isnan().any() and not acc_ws.isnan().any(), f"{case}: partials no CTA wrote"
        # the combine kernel's formula, per output row (n, r)
        w = torch.exp2(m_ws - m_ws.max(dim=1, keepdim=True).values)
        merged = (w[..., None] * acc_ws).sum(1) / (w * l_ws).sum(1)[..., None]  # (B * groups, rows, D)
        out = merged.reshape(b, groups, gp, s, d).reshape(b, h, s, d)
        torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-9, msg=lambda m: f"{case} chunk {chunk_tiles}: {m}")
    assert empty_chunks and no_key_rows  # the causal cases reach both corners


def test_limits_name_the_fallback_kernels():
    b = adapter.CuteDslBackend()
    assert "SIMT kernel" in b.limits("attention") and "TILEROSETTA_CUTE_DSL_ATTENTION=simt" in b.limits("attention")
    assert "SIMT GEMM" in b.limits("matmul") and "SIMT" not in b.limits("softmax")
