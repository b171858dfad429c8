"""`tilerosetta inspect`: the cubin reader on canned cuobjdump text, the refusals, and (where the compilers
are here) a real kernel per language, all without a GPU.

The real compiles run the CLI in a subprocess with TRITON_INTERPRET=0: this process may hold the Triton
kernels in interpreter mode, which compiles nothing.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tilerosetta import cubin, toolchain
from tilerosetta.commands import inspect as insp

PYTHON_DIR = Path(__file__).resolve().parents[1] / "python"

RESOURCES = """
Resource usage:
 Common:
  GLOBAL:64 CONSTANT[4]:8
 Function softmax_single_kernel_X:
  REG:128 STACK:0 SHARED:33936 LOCAL:0 CONSTANT[0]:704 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function spilly:
  REG:32 STACK:40 SHARED:0 LOCAL:24 CONSTANT[0]:400 TEXTURE:0 SURFACE:0 SAMPLER:0
"""
ELF = """
.nv.info.softmax_single_kernel_X
\t<0x14>
\tAttribute:\tEIATTR_MAXREG_COUNT
\tFormat:\tEIFMT_HVAL
\tValue:\t0x80
\t<0x24>
\tAttribute:\tEIATTR_REQNTID
\tFormat:\tEIFMT_SVAL
\tValue:\t0x100 0x1 0x1 
.section .strtab
\tAttribute:\tEIATTR_REQNTID
\tValue:\t0x400 0x1 0x1 
"""
SASS = """
\t\tFunction : softmax_single_kernel_X
        /*0000*/                   LDC R1, c[0x0][0x28] ;          /* 0x00000a00ff017b82 */
                                                                   /* 0x000fe20000000800 */
        /*0040*/               @P0 BRA 0x1e0 ;                     /* 0x0000000000640947 */
        /*0050*/              @!P1 LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0060*/                   LDG.E.128 R8, desc[UR4][R2.64+0x10] ;
        /*0070*/                   MUFU.EX2 R3, R3 ;
\t\tFunction : spilly
        /*0000*/                   STL [R1], R2 ;
        /*0010*/                   STL [R1+0x4], R3 ;
        /*0020*/                   LDL R2, [R1] ;
        /*0030*/                   EXIT ;
"""


def test_parsers_read_resources_attributes_and_opcodes():
    k = cubin.parse_resources(RESOURCES)
    assert (k["softmax_single_kernel_X"].regs, k["softmax_single_kernel_X"].shared) == (128, 33936)
    assert (k["spilly"].regs, k["spilly"].stack, k["spilly"].local) == (32, 40, 24)
    attrs = cubin.parse_elf_attrs(ELF)
    assert attrs == {"softmax_single_kernel_X": {"EIATTR_MAXREG_COUNT": [0x80], "EIATTR_REQNTID": [0x100, 1, 1]}}
    mix = cubin.parse_sass(SASS)
    assert mix["softmax_single_kernel_X"] == {"LDC": 1, "BRA": 1, "LDG.E.128": 2, "MUFU.EX2": 1}
    spilly = cubin.Kernel("spilly", mix=mix["spilly"])
    assert (spilly.spill_stores, spilly.spill_loads) == (2, 1)


@pytest.mark.parametrize("regs, threads, shared, arch, expect", [
    (128, 256, 33936, "sm_90", (2, "registers")),       # 128 x 256 = 32 K regs per block
    (64, 256, 214120, "sm_90", (1, "shared memory")),   # a GEMM's staging buffers
    (16, 1024, 0, "sm_90", (2, "warps")),               # 32 warps per block, 64 per SM
    (16, 32, 0, "sm_90", (32, "blocks")),
    (64, 256, 60000, "sm_120", (1, "shared memory")),   # consumer Blackwell: 99 KB per SM
])
def test_occupancy_estimate(regs, threads, shared, arch, expect):
    assert cubin.Kernel("k", regs=regs, threads=threads, shared=shared).occupancy(arch) == expect
    assert cubin.Kernel("k", regs=regs, threads=None).occupancy(arch) is None


@pytest.mark.parametrize("kwargs, says", [
    ({"backend": "cutile_rs", "op": "softmax"}, r"cutile_rs\.softmax: cuTile-rs .*cargo test.*supports cutile_py"),
    ({"backend": "cutile_jl", "op": "matmul"}, r"cutile_jl\.matmul: .*Julia"),
    ({"backend": "torch", "op": "matmul"}, r"torch\.matmul: not one of our kernel languages"),
    ({"backend": "cuda_c", "op": "matmul"}, r"unknown backend 'cuda_c'"),
    ({"backend": "cutile_py", "op": "gelu"}, r"cutile_py: unknown op 'gelu'"),
    ({"backend": "triton", "op": "attention", "dtype": "fp32"}, r"triton\.attention: dtype 'fp32' not in"),
    ({"backend": "triton", "op": "softmax", "arch": "sm_70"}, r"triton\.softmax: arch 'sm_70' is not"),
    ({"backend": "tile_cpp", "op": "rope", "size": 9}, r"rope: --size 9 out of range"),
])
def test_refusals_name_backend_op_and_reason(kwargs, says):
    with pytest.raises(insp.Refused, match=says):
        insp.inspect(**kwargs)


def _cli(*args: str):
    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=os.pathsep.join(
        [str(PYTHON_DIR)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    return subprocess.run([sys.executable, "-m", "tilerosetta", "inspect", *args], capture_output=True,
                          text=True, env=env, timeout=600)


def test_cli_refusal_exits_2_with_the_reason():
    res = _cli("--backend", "cutile_rs", "--op", "softmax")
    assert res.returncode == 2 and "cutile_rs.softmax" in res.stderr and not res.stdout, res
    res = _cli("--backend", "cutile_py", "--op", "softmax", "--config", "BM")
    assert res.returncode == 2 and "not KEY=VALUE" in res.stderr, res
    if importlib.util.find_spec("triton") is not None:  # the backend's own config check refuses, before compiling
        res = _cli("--backend", "triton", "--op", "matmul", "--config", "BLOCK_Q=64")
        assert res.returncode == 2 and "unknown config key 'BLOCK_Q'" in res.stderr, res


def _need_cuobjdump():
    if toolchain.binary_tool("cuobjdump") is None:
        pytest.skip("no cuobjdump (neither beside tileiras nor in the triton wheel nor on PATH)")


def _section(out: str, field: str) -> str:
    m = re.search(rf"^  {field}\s+(.*)$", out, re.M)
    assert m, f"no '{field}' line in:\n{out}"
    return m.group(1)


def test_cutile_py_softmax_sm90():
    _need_cuobjdump()
    if importlib.util.find_spec("cuda.tile") is None:
        pytest.skip("cuda.tile not installed")
    ok, why = toolchain.find().can_target("sm_90")
    if not ok:
        pytest.skip(f"tileiras cannot target sm_90 here: {why}")
    res = _cli("--backend", "cutile_py", "--op", "softmax", "--arch", "sm_90")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "softmax_single_kernel" in out
    # A one-pass row softmax: one exp2 per element, no spills, a thread count from EIATTR_REQNTID.
    assert int(_section(out, "threads")) in (128, 256, 384, 512)
    assert 0 < int(_section(out, "registers").split()[0]) <= 255
    assert re.search(r"^\s+\d+\s+MUFU\.EX2$", out, re.M), out
    assert re.match(r"\d+ blocks/SM on sm_90", _section(out, "occupancy")), out


def _inspect_triton(*args: str):
    """`tilerosetta inspect --backend triton ARGS`, which must succeed (skipped without triton or cuobjdump)."""
    _need_cuobjdump()
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton not installed")
    res = _cli("--backend", "triton", *args)
    assert res.returncode == 0, res.stderr
    return res


def test_triton_matmul_sm90(tmp_path):
    res = _inspect_triton("--op", "matmul", "--top", "40", "--save", str(tmp_path))
    saved = list(tmp_path.glob("*.cubin"))
    assert len(saved) == 1 and saved[0].read_bytes()[:4] == b"\x7fELF", saved
    assert "matmul_kernel" in res.stdout and _section(res.stdout, "threads") == "256"
    assert re.search(r"^\s+\d+\s+HGMMA\.", res.stdout, re.M), res.stdout  # wgmma on sm_90


def test_triton_inspect_compiles_with_the_launch_register_cap():
    # layer_norm's launch at N 8192 and 16 warps caps registers at 40 (kernels/triton/layer_norm.py); without the
    # cap the kernel inspect shows takes ~49 and is not the one that runs. 16 warps named: the tuned table may
    # choose another count for this size.
    res = _inspect_triton("--op", "layer_norm", "--size", "0", "--config", "num_warps=16")
    assert "maxnreg 40" in res.stdout and _section(res.stdout, "registers") == "40 (cap 40)", res.stdout


def test_triton_inspect_specialises_each_16_divisible_size_as_the_launcher_does():
    # At M = 1 the strides and N, K are still multiples of 16: Triton's launcher specialises on each such
    # argument, so the decode GEMV that runs loads with 128-bit cp.async. Marking the sizes divisible only
    # when every dim is (M = 1 is not) showed a scalar-load kernel that never runs.
    res = _inspect_triton("--op", "matmul", "--size", "2", "--top", "60")
    assert "M1_N4096_K4096" in res.stdout and re.search(r"LDGSTS\.E\.BYPASS\.128", res.stdout), res.stdout
    assert not re.search(r"LDG\.E\.U16", res.stdout), res.stdout


def test_tile_cpp_symbol_of_the_default_config():
    _need_cuobjdump()
    if importlib.util.find_spec("tilerosetta_tile_cpp") is None:
        pytest.skip("tilerosetta_tile_cpp not built here (make build-python)")
    res = _cli("--backend", "tile_cpp", "--op", "rms_norm")
    assert res.returncode == 0, res.stderr
    # The three twins of the default config, the one the (whole-tile, aligned) case launches first: `_exact`,
    # then `_a16`, both with 128-bit loads (the one-tile body loads without TMA, cpp/kernels/rms_norm.cu), and
    # the generic twin, which loads element by element; `_exact` has no bounds branch region (BSSY).
    names = re.findall(r"^  function\s+(\S+)$", res.stdout, re.M)
    assert len(names) == 3 and names[:2] == [names[2] + "_exact", names[2] + "_a16"], names
    exact, rest = res.stdout.split("\n" + names[1] + " config")
    a16, generic = rest.split("\n" + names[2] + " config")
    assert re.search(r"^\s+\d+\s+LDG\.E\.128", exact, re.M), res.stdout
    assert re.search(r"^\s+\d+\s+LDG\.E\.128", a16, re.M), res.stdout
    assert not re.search(r"^\s+\d+\s+LDG\.E\.128", generic, re.M), res.stdout
    assert not re.search(r"\bBSSY\b", exact), res.stdout


def test_tile_cpp_row_wider_than_the_tile_shows_the_loop_entry():
    # layer_norm's first bench case is 8192 wide: with TN 1024 the call runs the multi-chunk entry.
    _need_cuobjdump()
    if importlib.util.find_spec("tilerosetta_tile_cpp") is None:
        pytest.skip("tilerosetta_tile_cpp not built here (make build-python)")
    res = _cli("--backend", "tile_cpp", "--op", "layer_norm", "--size", "0", "--config", "TN=1024")
    assert res.returncode == 0, res.stderr
    names = re.findall(r"^  function\s+(\S+)$", res.stdout, re.M)
    assert names == ["layer_norm_bf16_1_1024_4_0_loop_a16", "layer_norm_bf16_1_1024_4_0_loop"], names
