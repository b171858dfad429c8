"""tile_cpp's driver plumbing without a GPU: the module is run against a recording stand-in libcuda.so.1
(tile_cpp_fake_libcuda.c) to check which cubin it loads, which kernel it looks up and exactly what it
passes to cuLaunchKernel (grid, 1x1x1 block, stream, parameter bytes), and that driver errors surface
with the driver's message. Whether the kernels compute the right thing is the GPU conformance suite's job.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("tilerosetta_tile_cpp",
                    reason="tilerosetta_tile_cpp not built here (run `make build-python`)")

HERE = Path(__file__).resolve().parent
CC = shutil.which("cc") or shutil.which("gcc")

# The head of a child script: the module and a contiguous CUDA-looking tensor at a given address.
CHILD_HEAD = textwrap.dedent("""
    import json, math, sys, torch
    import tilerosetta_tile_cpp as m

    class Fake:
        def __init__(self, shape, dtype, ptr):
            self.shape, self.dtype, self.device, self._ptr = tuple(shape), dtype, torch.device("cuda", 0), ptr
        def data_ptr(self):
            return self._ptr
        def stride(self):
            return tuple(math.prod(self.shape[i + 1:]) for i in range(len(self.shape)))
""")
# Runs in a child process so that dlopen("libcuda.so.1") finds the stand-in via LD_LIBRARY_PATH.
CHILD = CHILD_HEAD + textwrap.dedent("""
    kernel, shapes, dtype, params, stream = json.loads(sys.argv[1])
    # 1 GiB apart: separate tensors never overlap (the module refuses an output sharing bytes with an input)
    tensors = [Fake(s, getattr(torch, dtype), (i + 1) << 30) for i, s in enumerate(shapes)]
    try:
        m.launch(kernel, tensors, params, stream)
        print("ok")
    except Exception as exc:
        print(type(exc).__name__ + ": " + str(exc))
""")


@pytest.fixture(scope="module")
def fake_driver(tmp_path_factory):
    if CC is None:
        pytest.skip("no C compiler (cc/gcc) to build the stand-in libcuda.so.1")
    d = tmp_path_factory.mktemp("fake_libcuda")
    subprocess.run([CC, "-shared", "-fPIC", "-O1", "-o", str(d / "libcuda.so.1"),
                    str(HERE / "tile_cpp_fake_libcuda.c")], check=True)
    return d


def run_child(fake_driver, tmp_path, kinds, kernel, shapes, dtype, params, stream=0, **env_extra):
    log = tmp_path / "driver.log"
    env = dict(os.environ, LD_LIBRARY_PATH=f"{fake_driver}:{os.environ.get('LD_LIBRARY_PATH', '')}",
               TR_FAKE_LOG=str(log), TR_FAKE_KINDS=kinds, **env_extra)
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps([kernel, shapes, dtype, params, stream])],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip(), (log.read_text().splitlines() if log.exists() else [])


def test_launch_passes_grid_block_stream_and_parameters(fake_driver, tmp_path):
    result, log = run_child(fake_driver, tmp_path, "pppiif", "rms_norm_fp16_4_512_4_0",
                            [[257, 4099], [4099], [257, 4099]], "float16", {"eps": 0.25}, stream=123456)
    assert result == "ok", result
    assert log[0] == "load 7f454c46 class=2 machine=190"  # an ELF64 CUDA cubin
    assert log[1] == "function rms_norm_fp16_4_512_4_0_loop"  # N = 4099 > TN: the multi-chunk entry, generic twin
    assert log[2] == ("launch grid=65,1,1 block=1,1,1 shared=0 stream=123456 "
                      "params=p:1073741824 p:2147483648 p:3221225472 i:257 i:4099 f:0.25 ")


@pytest.mark.parametrize("n, function", [
    (4096, "layer_norm_bf16_1_4096_4_0_exact"),  # the row is the tile: the one-tile entry, its whole-tile twin
    (4088, "layer_norm_bf16_1_4096_4_0_a16"),  # narrower, 16-byte strided: the one-tile entry's aligned twin
    (2052, "layer_norm_bf16_1_4096_4_0"),  # narrower and not 16-byte strided: its generic twin
    (4104, "layer_norm_bf16_1_4096_4_0_loop_a16"),  # wider than the tile: the multi-chunk entry
    (4097, "layer_norm_bf16_1_4096_4_0_loop"),
])
def test_row_op_launches_the_entry_its_row_width_needs(fake_driver, tmp_path, n, function):
    result, log = run_child(fake_driver, tmp_path, "ppppiif", "layer_norm_bf16_1_4096_4_0",
                            [[5, n], [n], [n], [5, n]], "bfloat16", {"eps": 1e-5})
    assert result == "ok", result
    assert log[1] == f"function {function}"
    assert log[2].startswith("launch grid=5,1,1 block=1,1,1") and f"i:5 i:{n} f:" in log[2], log[2]


ATTENTION_KINDS = "ppppppp" "iiiiiii" "f" "i"  # q k v out, 3 workspaces; NR R S Sk GQ n_split CT; scale; causal
COMBINE_KINDS = "pppp" "ii"  # m_ws l_ws acc_ws out; R n_split


def test_attention_parameters(fake_driver, tmp_path):
    shape = [2, 3, 300, 64]
    result, log = run_child(fake_driver, tmp_path, ATTENTION_KINDS, "attention_bf16_64_128_64_8_0", [shape] * 4,
                            "bfloat16", {"causal": True, "scale": 0.5})
    assert result == "ok", result
    assert not any(line.startswith(("alloc", "free")) for line in log)  # one split: no workspace
    grid, params = log[2].split(" block=")[0], log[2].split("params=")[1].split()
    assert grid == "launch grid=18,1,1"  # one flat axis: 3 query blocks x B*H 6, one split (300 keys)
    assert params[:7] == [f"p:{i << 30}" for i in (1, 2, 3, 4)] + ["p:0"] * 3
    # NR = B*H, R = S, S, Sk, GQ = G, n_split, key tiles per split (ceil(300 / 64)), causal
    assert params[7:14] == ["i:6", "i:300", "i:300", "i:300", "i:1", "i:1", "i:5"] and params[15] == "i:1"
    assert float(params[14][2:]) == pytest.approx(0.5 * 1.4426950408889634, rel=1e-6)


def test_attention_grouped_heads_decode_parameters(fake_driver, tmp_path):
    # q (2, 8, 1, 64) against a 300-key cache of 2 K/V heads: G = 4 heads packed into one 4-row set per K/V
    # head; 300 keys are too few to split (kernels/attention_split.py: under 2 chunks of 4 key tiles).
    q, kv = [2, 8, 1, 64], [2, 2, 300, 64]
    result, log = run_child(fake_driver, tmp_path, ATTENTION_KINDS, "attention_bf16_64_128_64_8_0", [q, kv, kv, q],
                            "bfloat16", {"causal": True, "scale": None})
    assert result == "ok", result
    grid, params = log[2].split(" block=")[0], log[2].split("params=")[1].split()
    assert grid == "launch grid=4,1,1"
    assert params[7:14] == ["i:4", "i:4", "i:1", "i:300", "i:1", "i:1", "i:5"] and params[15] == "i:1"


def test_attention_split_kv_allocates_launches_the_combine_and_frees_on_the_stream(fake_driver, tmp_path):
    # B = 1 decode, 8 query heads on 2 K/V heads, 4099 keys: 2 packed row sets of 4 rows fill 2 of the H200's
    # 132 SMs, so the keys split: min(ceil(4099 / 512), ceil(264 / 2)) = 9 splits of 512 keys (4 key tiles).
    q, kv = [1, 8, 1, 64], [1, 2, 4099, 64]
    result, log = run_child(fake_driver, tmp_path, ATTENTION_KINDS + "|" + COMBINE_KINDS,
                            "attention_bf16_64_16_128_0_0", [q, kv, kv, q], "bfloat16", {"causal": True, "scale": None},
                            stream=77)
    assert result == "ok", result
    assert log[1:3] == ["function attention_bf16_64_16_128_0_0_a16", "function attention_bf16_64_16_128_0_0_combine"]
    rows = 2 * 9 * 16  # row sets x splits x (one 16-row tile per row set)
    base = 0x7000000000
    assert log[3] == f"alloc {rows * 4 * (2 + 64)} stream=77 -> {base}"  # m, l (rows) and acc (rows x D), fp32
    main, combine = log[4], log[5]
    assert main.startswith("launch grid=18,1,1 block=1,1,1 shared=0 stream=77 ")  # 9 splits x 2 row sets
    params = main.split("params=")[1].split()
    assert params[4:7] == [f"p:{base}", f"p:{base + rows * 4}", f"p:{base + rows * 8}"]
    assert params[7:14] == ["i:2", "i:4", "i:1", "i:4099", "i:1", "i:9", "i:4"]
    assert combine.startswith("launch grid=8,1,1 block=1,1,1 shared=0 stream=77 ")  # a block per row: 2 sets x 4
    assert combine.split("params=")[1].split() == [
        f"p:{base}", f"p:{base + rows * 4}", f"p:{base + rows * 8}", f"p:{4 << 30}", "i:4", "i:9"]
    assert log[6] == f"free {base} stream=77"  # stream-ordered: after both launches, on their stream
    assert len(log) == 7


def test_attention_split_plan_uses_the_device_sm_count(fake_driver, tmp_path):
    # The same call on a 2-SM device: its 2 row tiles already fill it, so no split and no workspace.
    q, kv = [1, 8, 1, 64], [1, 2, 4099, 64]
    result, log = run_child(fake_driver, tmp_path, ATTENTION_KINDS, "attention_bf16_64_16_128_0_0", [q, kv, kv, q],
                            "bfloat16", {"causal": True, "scale": None}, TR_FAKE_SMS="2")
    assert result == "ok", result
    assert log[2].startswith("launch grid=2,1,1") and "i:1 i:33 " in log[2], log[2]  # n_split 1, 33 key tiles
    assert not any(line.startswith(("alloc", "free")) for line in log)


def test_attention_workspace_allocation_failure_is_reported(fake_driver, tmp_path):
    q, kv = [1, 8, 1, 64], [1, 2, 4099, 64]
    result, log = run_child(fake_driver, tmp_path, ATTENTION_KINDS, "attention_bf16_64_16_128_0_0", [q, kv, kv, q],
                            "bfloat16", {"causal": True, "scale": None}, TR_FAKE_FAIL="cuMemAllocAsync")
    assert result.startswith("RuntimeError: tile_cpp.attention: cuMemAllocAsync(") and "failed" in result, result
    assert not any(line.startswith("launch") for line in log)


def test_bmm_folds_the_batch_into_grid_x(fake_driver, tmp_path):
    result, log = run_child(fake_driver, tmp_path, "pppiiii", "bmm_fp32_64_64_32_0_0",
                            [[5, 127, 131], [5, 131, 129], [5, 127, 129]], "float32", {})
    assert result == "ok", result
    assert log[1] == "function bmm_fp32_64_64_32_0_0"  # K, N not multiples of 4 floats: the generic twin
    assert log[2].startswith("launch grid=30,1,1 block=1,1,1")  # 6 output tiles x Bt 5
    assert log[2].endswith("i:5 i:127 i:129 i:131 ")  # Bt, M, N, K


def test_aligned_call_launches_the_a16_twin(fake_driver, tmp_path):
    result, log = run_child(fake_driver, tmp_path, "pppiii", "matmul_bf16_64_64_64_0_0",
                            [[100, 64], [64, 256], [100, 256]], "bfloat16", {})
    assert result == "ok", result
    assert log[1] == "function matmul_bf16_64_64_64_0_0_a16"
    assert log[2].startswith("launch grid=8,1,1 block=1,1,1")


def test_persistent_gemm_launches_one_block_per_sm(fake_driver, tmp_path):
    # P 1 (gemm.cuh): min(tiles, SMs) blocks walk the output tiles. 3 x 2 tiles of 128 x 256 on a 2-SM device:
    # 2 blocks; on a 16-SM one the 6 tiles get a block each.
    shapes = [[300, 64], [64, 512], [300, 512]]
    for sms, grid in (("2", 2), ("16", 6)):
        (tmp_path / sms).mkdir()  # a log of its own: the fake driver appends
        result, log = run_child(fake_driver, tmp_path / sms, "pppiii", "matmul_bf16_128_256_64_8_1", shapes, "bfloat16",
                                {}, TR_FAKE_SMS=sms)
        assert result == "ok", result
        assert log[1] == "function matmul_bf16_128_256_64_8_1_a16"
        assert log[2].startswith(f"launch grid={grid},1,1 block=1,1,1"), (sms, log[2])


@pytest.mark.skipif("sm_80" not in os.environ.get("TILEROSETTA_TILE_CPP_ARCHS", "sm_80"),
                    reason="this build of the module has no sm_80 cubins (a node bundle for another arch)")
def test_sm86_device_uses_the_sm80_cubin_and_sm75_is_refused(fake_driver, tmp_path):
    result, log = run_child(fake_driver, tmp_path, "pppi", "vector_add_fp32_1024", [[7], [7], [7]],
                            "float32", {}, TR_FAKE_CC="86")
    assert result == "ok" and log[0].startswith("load 7f454c46"), (result, log)
    (tmp_path / "sm75").mkdir()
    result, log = run_child(fake_driver, tmp_path / "sm75", "pppi", "vector_add_fp32_1024", [[7], [7], [7]],
                            "float32", {}, TR_FAKE_CC="75")
    assert result.startswith("RuntimeError: tile_cpp.vector_add: no embedded cubin"), result
    assert "sm_75" in result and "sm_80" in result


def test_driver_error_carries_the_driver_message(fake_driver, tmp_path):
    result, _ = run_child(fake_driver, tmp_path, "pppi", "vector_add_fp32_1024", [[7], [7], [7]], "float32",
                          {}, TR_FAKE_FAIL="cuModuleGetFunction")
    assert result.startswith("RuntimeError: tile_cpp.vector_add: cuModuleGetFunction(vector_add_fp32_1024)")
    assert "CUDA_ERROR_NOT_FOUND" in result and "named symbol not found" in result


def test_refused_call_never_reaches_the_driver(fake_driver, tmp_path):
    result, log = run_child(fake_driver, tmp_path, "pppi", "vector_add_fp32_1024", [[7], [8], [7]], "float32", {})
    assert result.startswith("ValueError: tile_cpp.vector_add: argument 'b'"), result
    assert log == []
