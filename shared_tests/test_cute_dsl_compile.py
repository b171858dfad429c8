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
from tilerosetta.kernels.cute_dsl import KERNEL_MODULES, MISSING, SCALAR_ONLY, variant_of
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
        if c not in seen:
            seen.append(c)
    return seen


SPECIALIZATIONS = [pytest.param(op, dt, var, cfg, id=f"{op}-{dtype_name(dt)}-{var}-{'-'.join(f'{k}{v}' for k, v in cfg.items())}")
                   for op in KERNEL_MODULES for dt in get_spec(op).dtypes
                   for var in (("scalar",) if op in SCALAR_ONLY else ("vec", "scalar"))
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
@pytest.mark.parametrize("tile", [32, 64])
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
