"""tile_cpp without a GPU: the built module, its embedded cubins, argument checking and launch plans.

The conformance suite runs the kernels on a GPU; these tests check on any machine what can be checked
without one. Fake tensors (duck-typed objects with data_ptr/shape/stride/dtype/device) stand in for CUDA
tensors: the module validates before it touches the driver, so a bad call must be refused here too.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import struct

import pytest
import torch

from tilerosetta import toolchain
from tilerosetta.specs import OP_NAMES, SPECS, Case, dtype_name

mod = pytest.importorskip(
    "tilerosetta_tile_cpp",
    reason="tilerosetta_tile_cpp not built here (run `make build-python`; needs the pinned nvcc 13.4)")

EM_CUDA = 190


SLOT = 1 << 30  # fake tensors get addresses 1 GiB apart: distinct tensors never overlap (ops.cpp refuses that)
_slots = itertools.count(4)


class FakeTensor:
    """Looks like a CUDA tensor to the module; its data_ptr is never dereferenced. Each one gets its own
    address (no two overlap) unless `ptr` says otherwise."""

    def __init__(self, shape, dtype=torch.float32, device="cuda", strides=None, ptr=None):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.device = torch.device(device, 0) if device == "cuda" else torch.device(device)
        self._strides = strides or tuple(math.prod(self.shape[i + 1:]) for i in range(len(self.shape)))
        self._ptr = next(_slots) * SLOT if ptr is None else ptr

    def data_ptr(self):
        return self._ptr

    def stride(self):
        return self._strides


def kernels_of(op, dtype=None):
    return [k for k in mod.kernels() if k["op"] == op and (dtype is None or k["dtype"] == dtype)]


def fakes(op, dims, dtype=torch.float32):
    spec = SPECS[op]
    shapes = spec.shapes(Case(dims))
    return [FakeTensor(shapes[n], dtype) for n in list(spec.inputs) + list(spec.outputs)]


# ---- the embedded cubins ----------------------------------------------------------------------------
# The committed build (CI) embeds all four archs; a GPU node's bundle is built for its own arch only
# (tools/gpu-bundle.sh NODE_ARCHS), and run.sh says so through TILEROSETTA_TILE_CPP_ARCHS.
EXPECTED_ARCHS = tuple(a for a in os.environ.get("TILEROSETTA_TILE_CPP_ARCHS", ",".join(toolchain.COMPILE_ARCHS))
                       .split(",") if a)


def test_every_op_dtype_has_a_cubin_for_each_arch():
    listed = {(op, dt, arch) for op, dt, arch, _size in mod.cubins()}
    want = {(op, dtype_name(d), arch) for op in OP_NAMES for d in SPECS[op].dtypes
            for arch in EXPECTED_ARCHS}
    assert not want - listed, f"missing cubins: {sorted(want - listed)}"
    assert sorted(mod.ARCHS) == sorted(EXPECTED_ARCHS)


@pytest.mark.parametrize("arch", EXPECTED_ARCHS)
@pytest.mark.parametrize("op", OP_NAMES)
def test_cubin_is_a_cuda_elf_holding_every_kernel(op, arch):
    blob = mod.cubin(op, arch)
    sizes = {size for o, _dt, a, size in mod.cubins() if (o, a) == (op, arch)}
    assert sizes == {len(blob)}
    assert blob[:4] == b"\x7fELF", "not an ELF file"
    assert blob[4] == 2, "not a 64-bit ELF"
    (machine,) = struct.unpack_from("<H", blob, 18)
    assert machine == EM_CUDA, f"e_machine {machine}, expected EM_CUDA ({EM_CUDA})"
    for k in kernels_of(op):  # the launcher finds kernels by these symbol names (and their aligned twins)
        # a row op's multi-chunk entry too, exactly where its chunk is narrow enough (tr_kernels.h)
        loop = SPECS[op].family == "rows" and k["config"]["TN"] <= mod.ROW_LOOP_MAX_TN
        # and the `_exact` twin (whole tiles, compile-time extents: cpp/kernels/common.cuh) of a row op's one-tile
        # entry, of silu_and_mul and of rope
        rows = SPECS[op].family == "rows" or op in ("silu_and_mul", "rope")
        for e in ("", "_loop"):
            for a in ("", "_a16", "_exact"):
                name = k["name"] + e + a
                held = b"\0" + name.encode() + b"\0" in blob
                want = (e == "" or loop) and (a != "_exact" or (rows and e == ""))
                assert held == want, f"{name} {'not ' if not held else ''}in {op} {arch} cubin"


def test_kernel_table_covers_every_op_and_dtype():
    for op in OP_NAMES:
        for d in SPECS[op].dtypes:
            assert kernels_of(op, dtype_name(d)), f"no kernel instantiated for {op} {dtype_name(d)}"


# ---- refusals, before the driver is touched ---------------------------------------------------------
def refused(kernel, tensors, params=None, *, op, arg, exc=ValueError, match=""):
    for call in (lambda: mod.plan(kernel, tensors, params or {}),
                 lambda: mod.launch(kernel, tensors, params or {}, 0)):
        with pytest.raises(exc) as info:
            call()
        msg = str(info.value)
        assert f"tile_cpp.{op}" in msg and f"'{arg}'" in msg, msg
        assert match in msg, msg


def test_refuses_wrong_dtype():
    x, out = fakes("softmax", {"M": 17, "N": 129})
    out.dtype = torch.float16
    refused("softmax_fp32_1_1024_4_0", [x, out], op="softmax", arg="out", match="fp16")
    a, b, o = fakes("vector_add", {"N": 7}, torch.float64)
    refused("vector_add_fp32_1024", [a, b, o], op="vector_add", arg="a", match="float64")


class _DtypeLike:
    """Not a torch.dtype: the module must read its str on every call (it keeps only torch's own dtypes)."""

    def __init__(self, text):
        self.text = text

    def __str__(self):
        return self.text


def test_dtype_and_device_are_read_on_every_call():
    """The module keeps the short name of each torch.dtype it has seen and reads the rest of each tensor
    through a fast path (issue 14 item 7: host cost): none of it may serve a stale answer."""
    kernel = "vector_add_fp32_1024"
    a, b, o = fakes("vector_add", {"N": 1000})
    assert mod.plan(kernel, [a, b, o], {})
    for dt in (torch.float16, torch.bfloat16, torch.float32):  # the same kernel, each dtype in turn
        o.dtype = dt
        if dt == torch.float32:
            assert mod.plan(kernel, [a, b, o], {})
        else:
            refused(kernel, [a, b, o], op="vector_add", arg="out", match=dtype_name(dt))
    like = _DtypeLike("torch.float32")
    o.dtype = like
    assert mod.plan(kernel, [a, b, o], {})
    like.text = "torch.float16"  # a stand-in whose answer changes is not taken from a cache
    refused(kernel, [a, b, o], op="vector_add", arg="out", match="fp16")
    o.dtype = torch.float32
    o.device = torch.device("cuda", 1)  # the index is read too, not just the type
    refused(kernel, [a, b, o], op="vector_add", arg="out", match="cuda:1")
    o.device = torch.device("cuda", 0)
    o.shape = (1000.0,)  # a float extent is refused, not truncated
    refused(kernel, [a, b, o], op="vector_add", arg="out", exc=TypeError, match="FakeTensor")
    o.shape = (1000,)
    assert mod.plan(kernel, [a, b, o], {})["dims"] == {"N": 1000}


def test_a_property_that_raises_is_reported():
    class Raising(FakeTensor):
        @property
        def device(self):
            raise RuntimeError("device went away")

        @device.setter
        def device(self, value):
            pass

    a, b, o = fakes("vector_add", {"N": 8})
    bad = Raising((8,))
    refused("vector_add_fp32_1024", [a, b, bad], op="vector_add", arg="out", exc=TypeError, match="device went away")
    del b._strides  # stride() now fails inside the call (AttributeError of its own): named, not a crash
    refused("vector_add_fp32_1024", [a, b, o], op="vector_add", arg="b", exc=TypeError, match="_strides")


def test_refuses_wrong_shape_and_rank():
    x, out = fakes("softmax", {"M": 17, "N": 129})
    out.shape = (17, 128)
    refused("softmax_fp32_1_1024_4_0", [x, out], op="softmax", arg="out", match="N=128")
    x, out = fakes("silu_and_mul", {"M": 3, "H": 7})
    x.shape, x._strides = (3, 15), (15, 1)  # not 2*H
    refused("silu_and_mul_fp32_4_256_0", [x, out], op="silu_and_mul", arg="x", match="expected shape")
    a, b, o = fakes("matmul", {"M": 4, "N": 5, "K": 6})
    a.shape, a._strides = (1, 4, 6), (24, 6, 1)
    refused("matmul_fp32_64_64_32_0_0", [a, b, o], op="matmul", arg="a", match="2-D")


def test_refuses_non_contiguous_cpu_and_non_tensor():
    x, out = fakes("transpose", {"M": 17, "N": 31})
    x._strides = (1, 17)
    refused("transpose_fp32_32_32", [x, out], op="transpose", arg="x", match="contiguous")
    x, out = fakes("transpose", {"M": 17, "N": 31})
    out.device = torch.device("cpu")
    refused("transpose_fp32_32_32", [x, out], op="transpose", arg="out", match="cpu")
    x, out = fakes("transpose", {"M": 17, "N": 31})
    refused("transpose_fp32_32_32", [[1.0, 2.0], out], op="transpose", arg="x", exc=TypeError, match="list")
    refused("transpose_fp32_32_32", [x], op="transpose", arg="tensors", match="expected 2 tensors")


def test_refuses_bad_params_and_head_dim():
    x, w, out = fakes("rms_norm", {"M": 3, "N": 7})
    refused("rms_norm_fp32_1_1024_4_0", [x, w, out], {}, op="rms_norm", arg="eps", match="missing")
    refused("rms_norm_fp32_1_1024_4_0", [x, w, out], {"eps": "x"}, op="rms_norm", arg="eps", exc=TypeError)
    q = fakes("attention", {"B": 1, "H": 2, "S": 17, "D": 128}, torch.float16)
    refused("attention_fp16_64_128_64_8_0", q, {"causal": False, "scale": None}, op="attention", arg="q",
            match="D=128")
    r = fakes("rope", {"B": 1, "H": 1, "S": 3, "D": 5})
    refused("rope_fp32_16_64_4", r, op="rope", arg="q", match="even")


def test_refuses_param_values_the_spec_refuses():
    """The raw path reaches the module without the shared validation: it applies the same Param rules
    (specs/base.py): no str -> float conversion, no truthiness for causal, eps/scale finite and > 0."""
    x, w, out = fakes("rms_norm", {"M": 3, "N": 7})
    for eps in (True, "1e-5", [1e-5]):
        refused("rms_norm_fp32_1_1024_4_0", [x, w, out], {"eps": eps}, op="rms_norm", arg="eps", exc=TypeError)
    for eps in (0.0, -1e-5, float("nan"), float("inf")):
        refused("rms_norm_fp32_1_1024_4_0", [x, w, out], {"eps": eps}, op="rms_norm", arg="eps", match="> 0")
    q = fakes("attention", {"B": 1, "H": 2, "S": 17, "D": 64}, torch.float16)
    for causal in ("false", "yes", 1, None):
        refused("attention_fp16_64_128_64_8_0", q, {"causal": causal, "scale": None}, op="attention",
                arg="causal", exc=TypeError, match="bool")
    refused("attention_fp16_64_128_64_8_0", q, {"causal": True, "scale": -0.5}, op="attention", arg="scale",
            match="> 0")


def test_unknown_kernel_is_refused():
    with pytest.raises(ValueError, match="unknown kernel"):
        mod.plan("softmax_fp32_3_3_4_0", fakes("softmax", {"M": 1, "N": 1}), {})


# ---- launch plans: grid and scalar arguments --------------------------------------------------------
@pytest.mark.parametrize("kernel, op, dims, params, grid, ints", [
    ("vector_add_fp32_1024", "vector_add", {"N": 4099}, {}, (5, 1, 1), [4099]),
    ("vector_add_fp32_1024", "vector_add", {"N": 1}, {}, (1, 1, 1), [1]),
    # One flat grid axis x wherever a count could pass grid y's 65535 (issue 16): the kernels unflatten it.
    ("transpose_fp32_32_32", "transpose", {"M": 300, "N": 1000}, {}, (10 * 32, 1, 1), [300, 1000]),
    ("softmax_fp32_4_512_4_0", "softmax", {"M": 257, "N": 4099}, {}, (65, 1, 1), [257, 4099]),
    ("silu_and_mul_fp32_4_256_0", "silu_and_mul", {"M": 257, "H": 4099}, {}, (65 * 17, 1, 1), [257, 4099]),
    ("rope_fp32_16_64_4", "rope", {"B": 2, "H": 3, "S": 17, "D": 128}, {}, (2 * 6, 1, 1), [17, 128]),
    # matmul/bmm: x is batch entry * tiles + the output-tile index (swizzled in the kernel)
    ("matmul_fp32_64_64_32_0_0", "matmul", {"M": 127, "N": 129, "K": 131}, {}, (6, 1, 1), [1, 127, 129, 131]),
    ("bmm_fp32_64_64_32_0_0", "bmm", {"Bt": 5, "M": 127, "N": 129, "K": 131}, {}, (6 * 5, 1, 1), [5, 127, 129, 131]),
    # counts beyond grid y's 65535 fit grid x
    ("bmm_fp32_64_64_32_0_0", "bmm", {"Bt": 70000, "M": 1, "N": 1, "K": 1}, {}, (70000, 1, 1), [70000, 1, 1, 1]),
    ("transpose_fp32_32_32", "transpose", {"M": 2, "N": 65536 * 33}, {}, (65536 * 33 // 32, 1, 1),
     [2, 65536 * 33]),
])
def test_plan_grid(kernel, op, dims, params, grid, ints):
    plan = mod.plan(kernel, fakes(op, dims), params)
    assert tuple(plan["grid"]) == grid
    assert list(plan["ints"]) == ints


def test_plan_attention_scale_and_causal():
    q = fakes("attention", {"B": 2, "H": 3, "S": 300, "D": 128}, torch.bfloat16)
    plan = mod.plan("attention_bf16_128_128_64_0_0", q, {"causal": True, "scale": None})
    assert tuple(plan["grid"]) == (3 * 6, 1, 1)
    # NR = B*H row sets of R = S rows, S, Sk, GQ = H / Hkv, n_split, key tiles per split, causal
    assert list(plan["ints"]) == [6, 300, 300, 300, 1, 1, 5, 1]
    assert plan["floats"][0] == pytest.approx(math.log2(math.e) / math.sqrt(128), rel=1e-6)
    assert plan["workspace"] == 0 and plan["combine"] == ""
    plan = mod.plan("attention_bf16_128_128_64_0_0", q, {"causal": False, "scale": 0.3})
    assert list(plan["ints"]) == [6, 300, 300, 300, 1, 1, 5, 0]
    assert plan["floats"][0] == pytest.approx(0.3 * math.log2(math.e), rel=1e-6)


def test_plan_attention_gqa_and_kv_length():
    """k/v (B, Hkv, Sk, D): decode packs a group's G = H / Hkv heads into one row set, and 16 row tiles on
    the H200's 132 SMs split the 4099 keys (the same plan as kernels/attention_split.py)."""
    q = fakes("attention", {"B": 2, "H": 32, "Hkv": 8, "S": 1, "Sk": 4099, "D": 128}, torch.bfloat16)
    assert [tuple(t.shape) for t in q] == [(2, 32, 1, 128), (2, 8, 4099, 128), (2, 8, 4099, 128), (2, 32, 1, 128)]
    plan = mod.plan("attention_bf16_128_128_64_0_0", q, {"causal": True, "scale": None})
    # 16 row sets (B*Hkv) of 4 rows; min(ceil(4099 / 256), 264 // 16) = 16 splits, each chunk rounded up to
    # whole key tiles (5 x 64 = 320 keys), so ceil(4099 / 320) = 13 of them
    assert list(plan["ints"]) == [16, 4, 1, 4099, 1, 13, 5, 1]
    assert tuple(plan["grid"]) == (13 * 16, 1, 1)
    # the combine: one block per output row (16 row sets x 4 rows)
    assert plan["combine"] == "attention_bf16_128_128_64_0_0_combine" and tuple(plan["combine_grid"]) == (64, 1, 1)
    assert plan["workspace"] == 16 * 13 * 128 * 4 * (2 + 128)  # m, l, acc (D) per padded row, fp32
    bad = fakes("attention", {"B": 1, "H": 6, "Hkv": 4, "S": 5, "Sk": 5, "D": 128}, torch.bfloat16)
    refused("attention_bf16_128_128_64_0_0", bad, {"causal": False, "scale": None}, op="attention", arg="k",
            match="does not divide")
    short = fakes("attention", {"B": 1, "H": 2, "S": 5, "Sk": 3, "D": 128}, torch.bfloat16)
    refused("attention_bf16_128_128_64_0_0", short, {"causal": True, "scale": None}, op="attention", arg="q",
            match="S=5 queries > Sk=3")
    assert list(mod.plan("attention_bf16_128_128_64_0_0", short, {"causal": False, "scale": None})["ints"]) == \
        [2, 5, 5, 3, 1, 1, 1, 0]


@pytest.mark.parametrize("kernel, b, h, hkv, s, sk", [
    ("attention_bf16_128_16_128_0_0", 1, 32, 8, 1, 4096),     # Llama decode, B1: packed, split
    ("attention_bf16_128_16_128_0_0", 16, 32, 8, 1, 4096),    # B16: 128 tiles, still split (2 each)
    ("attention_bf16_128_16_128_0_0", 64, 32, 8, 1, 4096),    # B64: 512 tiles fill the GPU, no split
    ("attention_bf16_128_16_128_0_0", 1, 32, 8, 1, 4099),     # ragged last split
    ("attention_bf16_128_16_128_0_0", 1, 32, 32, 1, 4096),    # MHA decode: G = 1, not packed
    ("attention_bf16_128_16_128_0_0", 1, 32, 8, 5, 4096),     # G*S = 20 > 16 rows: not packed
    ("attention_bf16_64_16_128_0_0", 1, 16, 2, 1, 1000),      # the spec's split conformance case
    ("attention_bf16_64_128_64_8_0", 1, 4, 1, 40, 1500),  # prefill after a cache: G*S = 160 rows > 128, not packed
    ("attention_bf16_128_128_64_0_0", 1, 2, 2, 300, 1200),    # causal chunks without a visible key
    ("attention_bf16_128_128_64_0_0", 4, 32, 32, 4096, 4096),  # prefill: 1024 tiles, no split
])
def test_plan_attention_matches_the_python_schedule(kernel, b, h, hkv, s, sk):
    """The module's packing and split-KV plan is kernels/attention_split.py's, for the kernel's TQ and TK."""
    from tilerosetta.kernels.attention_split import cdiv, packed_rows, split_plan
    info = next(k for k in mod.kernels() if k["name"] == kernel)
    tq, tk, d = info["config"]["TQ"], info["config"]["TK"], info["config"]["D"]
    q = fakes("attention", {"B": b, "H": h, "Hkv": hkv, "S": s, "Sk": sk, "D": d}, torch.bfloat16)
    plan = mod.plan(kernel, q, {"causal": True, "scale": None})
    packed = packed_rows(h, hkv, s, tq)
    nr, r, gq = (b * hkv, h // hkv * s, 1) if packed else (b * h, s, h // hkv)
    n_split, chunk = split_plan(nr * cdiv(r, tq), sk, tk)
    assert list(plan["ints"]) == [nr, r, s, sk, gq, n_split, cdiv(chunk, tk), 1]
    assert tuple(plan["grid"]) == (n_split * cdiv(r, tq) * nr, 1, 1)
    assert (plan["combine"] != "") == (n_split > 1)
    if n_split > 1:
        assert tuple(plan["combine_grid"]) == (nr * r, 1, 1)  # one block per output row
    assert plan["workspace"] == (nr * n_split * cdiv(r, tq) * tq * 4 * (2 + d) if n_split > 1 else 0)


def test_plan_attention_split_min_blocks_is_a_host_key():
    """SPLIT_MIN_BLOCKS (host: it sizes the launch, no kernel of its own) sets split_plan's min_blocks: at B1
    decode 1 gives 32 splits of one 128-key tile (2 blocks per SM on 132), the default 4 gives 8. Another key,
    or a value that is not an int >= 1, is refused naming it."""
    from tilerosetta.kernels.attention_split import split_plan
    q = fakes("attention", {"B": 1, "H": 32, "Hkv": 8, "S": 1, "Sk": 4096, "D": 128}, torch.bfloat16)
    kernel, params = "attention_bf16_128_16_128_0_0", {"causal": True, "scale": None}
    for host, n_split in (({}, 8), ({"SPLIT_MIN_BLOCKS": 4}, 8), ({"SPLIT_MIN_BLOCKS": 2}, 16),
                          ({"SPLIT_MIN_BLOCKS": 1}, 32)):
        plan = mod.plan(kernel, q, params, None, host)
        assert plan["ints"][5] == n_split == split_plan(8, 4096, 128, min_blocks=host.get("SPLIT_MIN_BLOCKS", 4))[0]
        assert tuple(plan["grid"]) == (8 * n_split, 1, 1) and tuple(plan["combine_grid"]) == (32, 1, 1)
    for host, match in (({"SPLIT": 1}, "unknown host-side config key 'SPLIT'"),
                        ({"SPLIT_MIN_BLOCKS": 0}, "must be an int >= 1"),
                        ({"SPLIT_MIN_BLOCKS": True}, "must be an int >= 1")):
        with pytest.raises(ValueError, match=match) as e:
            mod.plan(kernel, q, params, None, host)
        assert "tile_cpp.attention: argument 'config'" in str(e.value)
    rows = fakes("rms_norm", {"M": 4, "N": 512}, torch.float16)
    with pytest.raises(ValueError, match="unknown host-side config key 'SPLIT_MIN_BLOCKS': expected EXACT"):
        mod.plan("rms_norm_fp16_4_512_4_0", rows, {"eps": 1e-6}, None, {"SPLIT_MIN_BLOCKS": 1})
    with pytest.raises(ValueError, match="this op takes none"):
        mod.plan("vector_add_fp16_1024", fakes("vector_add", {"N": 64}, torch.float16), {}, None, {"EXACT": 1})


def test_plan_rows_exact_is_a_host_key():
    """A row op's EXACT (host: it picks the twin, no kernel of its own): 1 (the default) launches `_exact` where
    every block's tile is whole, 0 keeps `_a16`; anything but 0 or 1 is refused, named."""
    kernel, params = "rms_norm_fp16_4_512_4_0", {"eps": 1e-6}
    whole, ragged = fakes("rms_norm", {"M": 8, "N": 512}, torch.float16), fakes("rms_norm", {"M": 6, "N": 512}, torch.float16)
    assert mod.plan(kernel, whole, params)["function"] == kernel + "_exact"
    assert mod.plan(kernel, whole, params, None, {"EXACT": 1})["function"] == kernel + "_exact"
    assert mod.plan(kernel, whole, params, None, {"EXACT": 0})["function"] == kernel + "_a16"
    assert mod.plan(kernel, ragged, params, None, {"EXACT": 1})["function"] == kernel + "_a16"  # 4 does not divide 6
    narrow = fakes("rms_norm", {"M": 8, "N": 504}, torch.float16)  # aligned, but the row is shorter than TN
    assert mod.plan(kernel, narrow, params)["function"] == kernel + "_a16"
    for bad in (2, -1, True, 1.0):
        with pytest.raises(ValueError, match=r"tile_cpp\.rms_norm: argument 'config': EXACT must be 0 or 1"):
            mod.plan(kernel, whole, params, None, {"EXACT": bad})


def test_plan_silu_and_mul_takes_exact_only_for_whole_tiles():
    from tilerosetta.backends.tile_cpp import exact_twin

    kernel, cfg = "silu_and_mul_bf16_2_1024_0", {"TM": 2, "TN": 1024, "AX": 0}
    for dims, exact in (({"M": 4, "H": 2048}, True), ({"M": 3, "H": 2048}, False), ({"M": 4, "H": 1536}, False)):
        plan = mod.plan(kernel, fakes("silu_and_mul", dims, torch.bfloat16), {})
        assert plan["aligned"] and plan["function"] == kernel + ("_exact" if exact else "_a16"), (dims, plan)
        assert exact_twin("silu_and_mul", cfg, dims) == exact, dims
        assert mod.plan(kernel, fakes("silu_and_mul", dims, torch.bfloat16), {}, None, {"EXACT": 0})["function"] == kernel + "_a16"
    assert not exact_twin("silu_and_mul", {**cfg, "EXACT": 0}, {"M": 4, "H": 2048})
    with pytest.raises(ValueError, match="EXACT must be 0 or 1"):
        mod.plan(kernel, fakes("silu_and_mul", {"M": 4, "H": 2048}, torch.bfloat16), {}, None, {"EXACT": 3})


def test_plan_rope_takes_exact_only_for_whole_tiles():
    """rope's `_exact` twin: TS divides S and TD divides D/2 (every chunk of every block whole), aligned, EXACT 1."""
    from tilerosetta.backends.tile_cpp import exact_twin

    kernel, cfg = "rope_bf16_32_64_4", {"TS": 32, "TD": 64, "OCC": 4}
    for dims, exact in (({"B": 1, "H": 2, "S": 64, "D": 128}, True), ({"B": 2, "H": 1, "S": 64, "D": 256}, True),
                        ({"B": 1, "H": 2, "S": 48, "D": 128}, False), ({"B": 1, "H": 2, "S": 64, "D": 96}, False),
                        ({"B": 1, "H": 2, "S": 64, "D": 64}, False)):
        plan = mod.plan(kernel, fakes("rope", dims, torch.bfloat16), {})
        assert plan["aligned"] and plan["function"] == kernel + ("_exact" if exact else "_a16"), (dims, plan)
        assert exact_twin("rope", cfg, dims) == exact, dims
        assert mod.plan(kernel, fakes("rope", dims, torch.bfloat16), {}, None, {"EXACT": 0})["function"] == kernel + "_a16"
    unaligned = fakes("rope", {"B": 1, "H": 1, "S": 64, "D": 128}, torch.bfloat16)
    unaligned[-1]._ptr = (1 << 20) + 2
    assert mod.plan(kernel, unaligned, {})["function"] == kernel  # whole tiles, but not aligned: generic
    assert not exact_twin("rope", {**cfg, "EXACT": 0}, {"S": 64, "D": 128})
    with pytest.raises(ValueError, match=r"tile_cpp\.rope: argument 'config': EXACT must be 0 or 1"):
        mod.plan(kernel, fakes("rope", {"B": 1, "H": 1, "S": 64, "D": 128}, torch.bfloat16), {}, None, {"EXACT": 2})


def test_adapter_configs_carry_the_host_keys():
    """The adapter's attention configs carry SPLIT_MIN_BLOCKS (default 4, sweep space 4/2/1 per kernel); it is
    left out of the kernel lookup (test_tile_cpp_prepared.py: and handed to prepare() as `host`)."""
    from tilerosetta.backends import tile_cpp as adapter
    b = adapter.TileCppBackend()
    dims = {"B": 1, "H": 32, "Hkv": 8, "S": 1, "Sk": 4096, "D": 128}
    assert b.builtin_config("attention", torch.bfloat16, dims)["SPLIT_MIN_BLOCKS"] == 4
    space = b.config_space("attention", torch.bfloat16)
    assert {c["SPLIT_MIN_BLOCKS"] for c in space} == {1, 2, 4}
    kernels = {tuple((n, v) for n, v in sorted(k["config"].items()) if n != "D") for k in mod.kernels()
               if k["op"] == "attention" and k["dtype"] == "bf16"}  # D is the call's, not a config key
    assert len(space) == 3 * len(kernels)
    b.set_config("attention", torch.bfloat16, {"TQ": 16, "TK": 128, "W": 0, "SPLIT_MIN_BLOCKS": 1})
    try:
        assert b.kernel_for("attention", torch.bfloat16, dims) == "attention_bf16_128_16_128_0_0"
        b.set_config("attention", torch.bfloat16, {"TQ": 16, "TK": 128, "W": 0, "OCC": 2, "SPLIT_MIN_BLOCKS": 1})
        assert b.kernel_for("attention", torch.bfloat16, dims) == "attention_bf16_128_16_128_0_2"
        assert b.host_config("attention", torch.bfloat16, dims) == {"SPLIT_MIN_BLOCKS": 1}
        with pytest.raises(ValueError, match="SPLIT_MIN_BLOCKS=0 must be an int >= 1"):
            b.check_config("attention", torch.bfloat16, {"TQ": 16, "SPLIT_MIN_BLOCKS": 0})
        with pytest.raises(ValueError, match=r"EXACT=2 must be an int in \[0, 1\]"):
            b.check_config("softmax", torch.bfloat16, {"TN": 4096, "EXACT": 2})
    finally:
        b.set_config("attention", torch.bfloat16, None)
    # a row op's configs carry EXACT (default 1; both values in the sweep space, per kernel), by family
    rows = {"M": 4096, "N": 4096}
    assert b.builtin_config("rms_norm", torch.bfloat16, rows)["EXACT"] == 1
    space = b.config_space("rms_norm", torch.bfloat16)
    assert {c["EXACT"] for c in space} == {0, 1} and len(space) == 2 * len(kernels_of("rms_norm", "bf16"))
    b.set_config("rms_norm", torch.bfloat16, {"TM": 1, "TN": 4096, "OCC": 4, "EXACT": 0})
    try:
        assert b.kernel_for("rms_norm", torch.bfloat16, rows) == "rms_norm_bf16_1_4096_4_0"
        assert b.host_config("rms_norm", torch.bfloat16, rows) == {"EXACT": 0}
    finally:
        b.set_config("rms_norm", torch.bfloat16, None)


def test_attention_default_config_takes_16_row_tiles_for_decode():
    from tilerosetta.backends.tile_cpp import DEFAULTS
    dims = {"B": 1, "H": 32, "Hkv": 8, "S": 1, "Sk": 4096, "D": 128}
    assert DEFAULTS["attention"](torch.bfloat16, dims) == {"TQ": 16, "TK": 128, "W": 0, "OCC": 0}
    assert DEFAULTS["attention"](torch.bfloat16, dict(dims, S=4096, Sk=4096))["TQ"] == 128
    assert DEFAULTS["attention"](torch.bfloat16, dict(dims, S=5))["TQ"] == 16  # 20 rows unpacked: 5 per head
    assert DEFAULTS["attention"](torch.bfloat16, dict(dims, S=17, Sk=4096))["TQ"] == 128
    assert DEFAULTS["attention"](torch.bfloat16, dict(dims, Hkv=32, S=1))["TQ"] == 16  # one row per head


# ---- the aligned (`_a16`, TMA / 128-bit) twin is chosen only when its assumptions hold ---------------
@pytest.mark.parametrize("kernel, op, dims, dtype, ptr, aligned", [
    ("matmul_fp16_64_64_64_0_0", "matmul", {"M": 1, "N": 64, "K": 64}, torch.float16, 1 << 20, True),
    ("matmul_fp16_64_64_64_0_0", "matmul", {"M": 64, "N": 64, "K": 63}, torch.float16, 1 << 20, False),  # K row stride
    ("matmul_fp16_64_64_64_0_0", "matmul", {"M": 64, "N": 60, "K": 64}, torch.float16, 1 << 20, False),  # N row stride
    ("matmul_fp16_64_64_64_0_0", "matmul", {"M": 64, "N": 64, "K": 64}, torch.float16, (1 << 20) + 2, False),
    ("bmm_fp32_64_64_32_0_0", "bmm", {"Bt": 3, "M": 5, "N": 4, "K": 12}, torch.float32, 1 << 20, True),
    ("bmm_fp32_64_64_32_0_0", "bmm", {"Bt": 3, "M": 5, "N": 6, "K": 12}, torch.float32, 1 << 20, False),
    ("vector_add_fp16_1024", "vector_add", {"N": 1 << 12}, torch.float16, 1 << 20, True),
    ("vector_add_fp16_1024", "vector_add", {"N": 4099}, torch.float16, 1 << 20, False),  # prime length
    ("transpose_fp32_32_32", "transpose", {"M": 8, "N": 12}, torch.float32, 1 << 20, True),
    ("transpose_fp32_32_32", "transpose", {"M": 1, "N": 12}, torch.float32, 1 << 20, False),  # M = out's row stride
    ("softmax_bf16_1_1024_4_0", "softmax", {"M": 1, "N": 4096}, torch.bfloat16, 1 << 20, True),
    ("softmax_bf16_1_1024_4_0", "softmax", {"M": 4096, "N": 4095}, torch.bfloat16, 1 << 20, False),
    ("silu_and_mul_fp16_4_256_0", "silu_and_mul", {"M": 3, "H": 8}, torch.float16, 1 << 20, True),
    ("silu_and_mul_fp16_4_256_0", "silu_and_mul", {"M": 3, "H": 12}, torch.float16, 1 << 20, False),  # 2nd half offset
    ("rope_bf16_16_64_4", "rope", {"B": 1, "H": 2, "S": 5, "D": 128}, torch.bfloat16, 1 << 20, True),
    ("rope_bf16_16_64_4", "rope", {"B": 1, "H": 2, "S": 5, "D": 24}, torch.bfloat16, 1 << 20, False),  # D/2 = 12
    ("add_rms_norm_bf16_1_1024_4_0", "add_rms_norm", {"M": 2, "N": 4096}, torch.bfloat16, 1 << 20, True),
    ("add_rms_norm_bf16_1_1024_4_0", "add_rms_norm", {"M": 2, "N": 4100}, torch.bfloat16, 1 << 20, False),
    ("attention_fp16_64_128_64_8_0", "attention", {"B": 1, "H": 1, "S": 7, "D": 64}, torch.float16, 1 << 20, True),
    ("attention_fp16_64_128_64_8_0", "attention", {"B": 1, "H": 1, "S": 7, "D": 64}, torch.float16, (1 << 20) + 8,
     False),
])
def test_plan_picks_the_aligned_twin_only_when_it_is_safe(kernel, op, dims, dtype, ptr, aligned):
    tensors = fakes(op, dims, dtype)
    tensors[-1]._ptr = ptr  # the output's pointer decides as much as any input's
    plan = mod.plan(kernel, tensors, {k: v for k, v in SPECS[op].full_params({}).items() if v is not None})
    assert plan["aligned"] is aligned
    # a row op's kernel of TN 1024 runs these rows (N > TN) through its multi-chunk entry
    entry = kernel + ("_loop" if SPECS[op].family == "rows" and dims["N"] > 1024 else "")
    assert plan["entry"] == entry
    assert plan["function"] == entry + ("_a16" if aligned else "")


ROW_OPS = tuple(op for op in OP_NAMES if SPECS[op].family == "rows")
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


@pytest.mark.parametrize("op", ROW_OPS)
def test_row_kernels_launch_the_loop_entry_exactly_for_rows_wider_than_the_tile(op):
    # The one-tile entry computes only the first TN columns of a row (cpp/kernels/common.cuh,
    # TR_ROW_ENTRIES): a row one element wider must go to `_loop`, whatever the twin.
    params = {k: v for k, v in SPECS[op].full_params({}).items() if v is not None}
    for k in kernels_of(op):
        tn, vec = k["config"]["TN"], 16 // (4 if k["dtype"] == "fp32" else 2)
        for n, loop in ((1, False), (tn - 1, False), (tn, False), (tn + 1, True), (tn + vec, True), (3 * tn, True)):
            tensors = fakes(op, {"M": 3, "N": n}, DTYPES[k["dtype"]])
            if loop and tn > mod.ROW_LOOP_MAX_TN:  # no chunk loop compiled for this tile: refused, named
                with pytest.raises(ValueError, match=rf"tile_cpp\.{op}: argument 'x': rows of N={n} columns .* "
                                                     rf"{k['name']}'s tile \(TN={tn}\)"):
                    mod.plan(k["name"], tensors, params)
                continue
            plan = mod.plan(k["name"], tensors, params)
            entry = k["name"] + ("_loop" if loop else "")
            assert plan["entry"] == entry, (k["name"], n)
            assert plan["aligned"] == (n % vec == 0), (k["name"], n)
            # `_exact` only where every block's tile is whole: a row of exactly TN, and TM dividing M = 3
            exact = plan["aligned"] and n == tn and 3 % k["config"]["TM"] == 0
            assert plan["function"] == entry + ("_exact" if exact else "_a16" if plan["aligned"] else ""), (k["name"], n)
            assert mod.plan(k["name"], tensors, params, a16=False)["function"] == entry, (k["name"], n)
            if plan["aligned"]:  # a16=True is the `_a16` twin itself, also where `_exact` would run
                assert mod.plan(k["name"], tensors, params, a16=True)["function"] == entry + "_a16", (k["name"], n)


@pytest.mark.parametrize("op", ROW_OPS)
def test_every_row_case_launches_an_entry_that_covers_its_row(adapter, op):
    # Every conformance and bench case with the adapter's config: the entry the module picks exists in
    # every cubin, is `_loop` exactly when N > TN, and is the one backends.tile_cpp.row_entry names (inspect).
    from tilerosetta.backends.tile_cpp import exact_twin, row_entry

    spec, kinds, kinds_exact = SPECS[op], set(), set()
    for dtype in spec.dtypes:
        for case in spec.cases + spec.bench_cases:
            dims, cfg = dict(case.dims), adapter.config_for(op, dtype, dict(case.dims))
            kernel = adapter.kernel_for(op, dtype, dims)
            plan = mod.plan(kernel, fakes(op, dims, dtype), spec.full_params(case.params))
            loop = dims["N"] > cfg["TN"]
            assert plan["entry"] == kernel + ("_loop" if loop else ""), (dtype, dims, cfg)
            assert row_entry(op, kernel, cfg, dims) == plan["entry"]
            exact = not loop and exact_twin(op, cfg, dims)  # the Python mirror agrees on the `_exact` twin
            twin = ("_exact" if exact else "_a16") if plan["aligned"] else ""
            assert plan["function"] == plan["entry"] + twin, (dtype, dims, cfg)
            kinds_exact.add(plan["function"].endswith("_exact"))
            for arch in mod.ARCHS:
                assert b"\0" + plan["function"].encode() + b"\0" in mod.cubin(op, arch), (plan["function"], arch)
            kinds.add(loop)
    assert kinds == {False, True}, f"{op}: the cases should exercise both entries, got loop in {kinds}"
    assert kinds_exact == {False, True}, f"{op}: the cases should exercise `_exact` and the others, got {kinds_exact}"


def test_python_mirror_knows_the_modules_widest_loop():
    from tilerosetta.backends import tile_cpp

    assert tile_cpp.ROW_LOOP_MAX_TN == mod.ROW_LOOP_MAX_TN
    assert any(k["config"]["TN"] > mod.ROW_LOOP_MAX_TN for k in kernels_of("softmax"))  # the rule bites


def test_plan_layer_norm_eps():
    plan = mod.plan("layer_norm_fp16_1_1024_4_0", fakes("layer_norm", {"M": 3, "N": 7}, torch.float16), {"eps": 1e-5})
    assert plan["floats"][0] == pytest.approx(1e-5)


def test_plan_add_rms_norm_passes_m_n_then_eps():
    plan = mod.plan("add_rms_norm_fp32_1_1024_4_0", fakes("add_rms_norm", {"M": 3, "N": 7}), {"eps": 1e-5})
    assert plan["ints"] == [3, 7] and plan["dims"] == {"M": 3, "N": 7}
    assert plan["floats"][0] == pytest.approx(1e-5) and plan["grid"][0] == 3
    # the two outputs are checked like the inputs: a short `sum` is refused before any launch
    x, r, w, s, out = fakes("add_rms_norm", {"M": 3, "N": 7})
    refused("add_rms_norm_fp32_1_1024_4_0", [x, r, w, FakeTensor((2, 7)), out], {"eps": 1e-5}, op="add_rms_norm",
            arg="sum", match="has M=2 but 'x' has M=3")


# ---- an output sharing memory with another argument (issue 16: the raw path skips the shared check) ---
def _with_ptrs(tensors, ptrs):
    for t, p in zip(tensors, ptrs):
        t._ptr = p
    return tensors


def _nbytes(t):
    return math.prod(t.shape) * t.dtype.itemsize


@pytest.mark.parametrize("op", OP_NAMES)
def test_an_output_overlapping_any_other_argument_is_refused(op):
    spec = SPECS[op]
    dtype = spec.dtypes[-1]
    kernel = kernels_of(op, dtype_name(dtype))[0]["name"]
    case = spec.cases[min(3, len(spec.cases) - 1)]
    params = {k: v for k, v in spec.full_params(case.params).items() if v is not None}
    if op == "attention":
        kernel = next(k["name"] for k in kernels_of(op, dtype_name(dtype)) if k["config"]["D"] == case.dims["D"])
    names = list(spec.inputs) + list(spec.outputs)
    base = [t._ptr for t in fakes(op, case.dims, dtype)]
    assert mod.plan(kernel, _with_ptrs(fakes(op, case.dims, dtype), base), params)  # no false alarm
    tried = 0
    for o, out_name in enumerate(names):
        if out_name not in spec.outputs:
            continue
        for n, other in enumerate(names):
            if n == o:
                continue
            for label, shift in (("same start", 0), ("partly", 1), ("ends inside", -1)):
                if shift == 0 and other in spec.inplace_ok.get(out_name, ()):
                    continue  # declared safe in place as the very same tensor (test_bad_inputs runs it)
                tensors = fakes(op, case.dims, dtype)
                ptrs = list(base)
                if shift == 0:
                    ptrs[o] = ptrs[n]
                elif shift == 1:  # the output starts at the other's last element
                    ptrs[o] = ptrs[n] + _nbytes(tensors[n]) - dtype.itemsize
                else:  # the output's last element is the other's first
                    ptrs[o] = ptrs[n] - _nbytes(tensors[o]) + dtype.itemsize
                first, second = (o, n) if other not in spec.outputs or o < n else (n, o)  # a pair of outputs: the first names it
                with pytest.raises(ValueError) as info:
                    mod.plan(kernel, _with_ptrs(tensors, ptrs), params)
                msg = str(info.value)
                assert msg.startswith(f"tile_cpp.{op}: argument '{names[first]}': output "), f"{label}: {msg}"
                assert f"'{names[second]}'" in msg and ("overlaps" in msg or "same memory" in msg), f"{label}: {msg}"
                tried += 1
                # just past the end: adjacent, accepted
                if shift == 1:
                    ptrs[o] += dtype.itemsize
                    assert mod.plan(kernel, _with_ptrs(fakes(op, case.dims, dtype), ptrs), params), label
    declared = sum(len(v) for v in spec.inplace_ok.values())
    assert tried == 3 * len(spec.outputs) * (len(names) - 1) - declared


def test_valid_call_without_driver_fails_cleanly():
    ok, why = mod.driver_status()
    if ok:
        pytest.skip("a CUDA driver is present: a fake-pointer launch would really run")
    with pytest.raises(RuntimeError) as info:
        mod.launch("vector_add_fp32_1024", fakes("vector_add", {"N": 7}), {}, 0)
    assert "tile_cpp.vector_add" in str(info.value) and why in str(info.value)


# ---- the adapter ------------------------------------------------------------------------------------
@pytest.fixture
def adapter():
    from tilerosetta.backends.tile_cpp import TileCppBackend

    return TileCppBackend()


def test_adapter_lists_every_op(adapter):
    assert set(adapter.implementations()) == set(OP_NAMES), adapter.missing()
    assert adapter.missing() == {}
    assert adapter.dtypes("attention") == SPECS["attention"].dtypes


def test_adapter_unavailable_reason_without_gpu(adapter):
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    ok, reason = adapter.available()
    assert not ok and reason.startswith("no CUDA GPU"), reason


@pytest.mark.parametrize("op", OP_NAMES)
def test_config_space_and_defaults(adapter, op):
    spec = SPECS[op]
    for dtype in spec.dtypes:
        space = adapter.config_space(op, dtype)
        assert space, f"{op} {dtype_name(dtype)} has no configs"
        for case in spec.cases + spec.bench_cases:
            dims = dict(case.dims)
            assert adapter.default_config(op, dtype, dims) in space
            name = adapter.kernel_for(op, dtype, dims)  # resolves to an instantiated kernel
            mod.plan(name, fakes(op, dims, dtype), spec.full_params(case.params))


def test_set_config_forces_and_restores(adapter):
    dims = {"M": 256, "N": 256, "K": 512}
    default = adapter.kernel_for("matmul", torch.float16, dims)
    other = [c for c in adapter.config_space("matmul", torch.float16)
             if c != adapter.default_config("matmul", torch.float16, dims)][0]
    adapter.set_config("matmul", torch.float16, other)
    forced = adapter.kernel_for("matmul", torch.float16, dims)
    assert forced != default and forced.endswith("_".join(str(v) for v in other.values()))
    adapter.set_config("matmul", torch.float16, None)
    assert adapter.kernel_for("matmul", torch.float16, dims) == default
    with pytest.raises(ValueError, match="not instantiated"):
        adapter.set_config("matmul", torch.float16, {"TM": 3, "TN": 3, "TK": 3})


# ---- no kernel may build TMA descriptors on the device ------------------------------------------------
# A tile view whose base pointer is computed in the kernel (q + bh * S * D) makes tileiras encode its TMA
# descriptor on the device, in a global workspace the kernel reads from a hidden parameter after the
# declared ones; cuLaunchKernel never fills it, which faulted on the H200 (cpp/kernels/gemm.cuh). Such a
# kernel is marked in .nv.info: attribute 0x5f has bit 0x4 (0x104 where the others have 0x101) and
# EIATTR_CBANK_PARAM_SIZE (0x19) exceeds the declared parameters without tensormap parameters.
def _nv_info(cubin: bytes) -> dict[str, list[tuple[int, int, object]]]:
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)
    hdrs = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names_at = hdrs[shstrndx][4]

    def name(off):
        return cubin[names_at + off:cubin.index(b"\0", names_at + off)].decode()

    out = {}
    for h in hdrs:
        sec = name(h[0])
        if not sec.startswith(".nv.info."):
            continue
        data, i, attrs = cubin[h[4]:h[4] + h[5]], 0, []
        while i < len(data):
            if data[i] == 0:  # padding
                i += 1
                continue
            fmt, aid = data[i], data[i + 1]
            i += 2
            if fmt == 1:
                val = None
            elif fmt == 2:
                val, i = data[i], i + 1
            elif fmt == 3:
                val, i = struct.unpack_from("<H", data, i)[0], i + 2
            elif fmt == 4:
                n = struct.unpack_from("<H", data, i)[0]
                val, i = data[i + 2:i + 2 + n], i + 2 + n
            else:
                raise AssertionError(f"{sec}: unknown .nv.info format {fmt} at {i}")
            attrs.append((aid, fmt, val))
        out[sec[len(".nv.info."):]] = attrs
    return out


# The row ops too: their `_exact` twins view memory at a base the kernel computes (tr::row_tiles).
@pytest.mark.parametrize("op", ["matmul", "bmm", "attention", "rope", "silu_and_mul", *ROW_OPS])
def test_no_kernel_builds_tma_descriptors_on_the_device(op):
    if "sm_90" not in mod.ARCHS:
        pytest.skip(f"module built without sm_90 (has {mod.ARCHS})")
    info = _nv_info(mod.cubin(op, "sm_90"))
    names = {k["name"] for k in mod.kernels() if k["op"] == op}
    assert names and names <= set(info) and {n + "_a16" for n in names} <= set(info)
    bad = [k for k, attrs in info.items() if any(a == 0x5F and f == 3 and v & 0x4 for a, f, v in attrs)]
    assert not bad, f"kernels with device-built TMA descriptors (hidden workspace parameter): {bad}"


def _cuobjdump():
    import shutil
    from pathlib import Path

    try:
        import triton

        bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        if bundled.exists():
            return str(bundled)
    except ImportError:
        pass
    return shutil.which("cuobjdump")


def _sm90_cubin(op, tmp_path):
    """(cuobjdump, the path of op's sm_90 cubin written under tmp_path); skips where there is no cuobjdump or no
    sm_90 cubin."""
    tool = _cuobjdump()
    if tool is None:
        pytest.skip("no cuobjdump (neither triton's bundled one nor on PATH)")
    if "sm_90" not in mod.ARCHS:
        pytest.skip(f"module built without sm_90 (has {mod.ARCHS})")
    path = tmp_path / f"{op}.cubin"
    path.write_bytes(mod.cubin(op, "sm_90"))
    return tool, path


def _sm90_stats(op, tmp_path):
    """repro/sass_stats.py's facts per kernel of op's sm_90 cubin (its own cuobjdump runs: resources, .nv.info and
    SASS); skips as _sm90_cubin does."""
    import sys
    from pathlib import Path

    _tool, path = _sm90_cubin(op, tmp_path)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "repro"))
    from sass_stats import stats

    return stats(str(path))


def _sm90_functions(op, tmp_path):
    """The SASS of each kernel in op's sm_90 cubin (cuobjdump -sass, one text per function, its name first)."""
    import subprocess

    tool, path = _sm90_cubin(op, tmp_path)
    sass = subprocess.run([tool, "-sass", str(path)], capture_output=True, text=True, check=True).stdout
    return sass.split("Function : ")[1:]


@pytest.mark.parametrize("op", ["matmul", "bmm", "attention"])
def test_sass_reads_no_device_descriptor_workspace(op, tmp_path):
    # The same fault seen in the SASS: the device-side descriptor path loads its workspace base from the
    # driver constant c[0x0][0x1c0] and writes descriptors with ATOMG + UTMACCTL.IV.
    funcs = _sm90_functions(op, tmp_path)
    # Two bodies per kernel; attention adds its split-KV `_combine` (attention.cu).
    per_kernel = 3 if op == "attention" else 2
    assert len(funcs) == per_kernel * len([k for k in mod.kernels() if k["op"] == op])
    if op == "attention":
        assert {f.split()[0] for f in funcs} >= {k["name"] + "_combine" for k in mod.kernels() if k["op"] == op}
    bad = [f.split()[0] for f in funcs if "c[0x0][0x1c0]" in f or "UTMACCTL.IV" in f]
    assert not bad, f"kernels building TMA descriptors on the device: {bad}"
    tma = [f.split()[0] for f in funcs if "UTMALDG" in f]
    assert all(f.endswith("_a16") for f in tma) and tma, "the _a16 twins should load with TMA"
    if op == "attention":  # its aligned body is all TMA and holds in registers (attention.cu: no lambdas)
        a16 = [f for f in funcs if f.split()[0].endswith("_a16")]
        # An occupancy-capped kernel (name ends _<OCC>_a16, OCC > 0) may trade a few spills for a second CTA (the
        # prefill OCC 2 tile: 21 STL); the lambda-captured views this guards against spilled 905.
        capped = {k["name"] + "_a16" for k in mod.kernels() if k["op"] == op and k["config"]["OCC"]}
        bad = [f.split()[0] for f in a16 if "UTMALDG" not in f or re.search(r"\bLDG\b", f)
               or len(re.findall(r"\bSTL\b", f)) > (32 if f.split()[0] in capped else 0)]
        assert a16 and not bad, f"attention _a16 kernels without TMA, with LDG loads or with spills: {bad}"


# ---- tools/probe_tile_cpp.py (the GPU run is the lead's; here its CPU-side logic) -------------------------
def _probe():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "tools" / "probe_tile_cpp.py"
    spec = importlib.util.spec_from_file_location("probe_tile_cpp", path)
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    return probe


def test_probe_lists_every_twin_of_every_kernel_and_every_op():
    probe = _probe()
    assert set(probe.CASES) <= set(OP_NAMES)
    assert probe.case_of("softmax") == (SPECS["softmax"].bench_cases[0].dims, {})  # not listed: the spec's
    variants = probe._variants(list(OP_NAMES))
    exact_ops = {*ROW_OPS, "silu_and_mul", "rope"}
    assert {(v["kernel"], v["twin"]) for v in variants} == {
        (k["name"], t) for k in mod.kernels() for t in ("exact", "a16", "generic")
        if t != "exact" or k["op"] in exact_ops}
    suffix = {"exact": "_exact", "a16": "_a16", "generic": ""}
    for v in variants:  # every probe case is a valid call of its kernel and twin (attention takes D from it)
        case = probe._case(v)
        dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[v["dtype"]]
        a16, host = probe.TWINS[v["twin"]]
        plan = mod.plan(v["kernel"], fakes(v["op"], case.dims, dtype), SPECS[v["op"]].full_params(case.params),
                        a16, host)
        assert plan["entry"] in (v["kernel"], v["kernel"] + "_loop")  # a row op's entry by N (see above)
        assert plan["function"] == plan["entry"] + suffix[v["twin"]], (v, case.dims)


@pytest.mark.skipif(mod.driver_status()[0], reason="a CUDA driver is present: this checks the no-GPU path")
def test_probe_child_reports_an_error_not_a_fault_without_gpu():
    probe = _probe()
    v = probe._variants(["vector_add"])[0]
    r = probe._run_child(v, timeout=120)
    assert r["status"] == "ERROR", r
    assert "FAULT" not in probe._fmt(r) and "vector_add" in probe._fmt(r)


@pytest.mark.parametrize("op", [*ROW_OPS, "silu_and_mul", "rope"])
def test_exact_twins_have_no_bounds_branch_regions(op, tmp_path):
    # The reason for `_exact` (cpp/kernels/common.cuh, row_tiles / tile_at): with compile-time extents tileiras
    # drops the bounds check that puts loads in BSSY branch regions. sm_90 SASS: no `_exact` kernel has more BSSY
    # regions than its `_a16` twin, and none at all outside softmax, whose `1 / sum` keeps one slow-path region
    # per row (at most TM).
    bssy = {f.split()[0]: f.count(" BSSY ") for f in _sm90_functions(op, tmp_path)}
    kernels = kernels_of(op)
    assert kernels and all(k["name"] + "_exact" in bssy for k in kernels), sorted(bssy)
    for k in kernels:
        exact, a16 = bssy[k["name"] + "_exact"], bssy[k["name"] + "_a16"]
        most = k["config"]["TM"] if op == "softmax" else 0
        assert exact <= a16 and exact <= most, f"{k['name']}_exact: {exact} BSSY regions (_a16: {a16}; at most {most})"


@pytest.mark.parametrize("op", ROW_OPS)
def test_row_worker_warps_hint_gives_256_threads_without_spills(op, tmp_path):
    # W 8 (num_worker_warps_per_cta) is why the wide row configs exist (cpp/include/tr_kernels.h): 256 threads share
    # the row, at the register budget OCC leaves them, without spilling, for the op's bench rows (sm_90 `_exact`
    # twins, the ones the bench launches; a norm's 16384 tile, w beside the row, spills and no bench row uses it;
    # W 0 stays at the compiler's 128 threads).
    found = _sm90_stats(op, tmp_path)
    kernels, widest = kernels_of(op), max(c.dims["N"] for c in SPECS[op].bench_cases)
    assert any(k["config"]["W"] == 8 for k in kernels), f"{op}: no W 8 config instantiated"
    for k in kernels:
        row = found[k["name"] + "_exact"]
        want = 256 if k["config"]["W"] == 8 else 128
        assert row["threads"] == want, f"{k['name']}_exact: {row['threads']} threads, expected {want}"
        if k["config"]["W"] == 8 and k["config"]["TN"] <= widest:
            assert row.get("LOCAL", 0) == 0 and row.get("STL", 0) == 0, f"{k['name']}_exact spills: {row}"


def test_attention_decode_occupancy_2_fits_two_ctas_per_sm(tmp_path):
    # The OCC 2 decode config (cpp/include/tr_kernels.h) exists to put two CTAs, each with its own K/V ring, on an
    # SM: its `_a16` kernel (the one decode launches) must fit two in the registers and the 227 KB of shared memory
    # an SM gives its CTAs, without spills (sm_90 SASS); the OCC 0 twin fits one.
    found = _sm90_stats("attention", tmp_path)
    occ2 = [k for k in kernels_of("attention") if k["config"]["OCC"] == 2 and k["config"]["TQ"] == 16]
    assert occ2, "no OCC 2 decode attention config instantiated"
    for k in occ2:
        row, alone = found[k["name"] + "_a16"], found[k["name"].rsplit("_", 1)[0] + "_0_a16"]  # the OCC 0 twin
        assert row["REG"] * row["threads"] * 2 <= 65536 and 2 * row["SHARED"] <= 227 * 1024, (k["name"], row)
        assert row.get("LOCAL", 0) == 0 and row.get("STL", 0) == 0, (k["name"], row)
        assert alone["REG"] * alone["threads"] * 2 > 65536 or 2 * alone["SHARED"] > 227 * 1024, alone


def test_attention_prefill_occupancy_2_fits_two_ctas_per_sm(tmp_path):
    # The OCC 2 prefill tile (D 128, TQ 128: a sweep option, cpp/include/tr_kernels.h) trades its second consumer
    # warpgroup and a few spills for two CTAs per SM: its `_a16` kernel fits two in the registers and shared memory
    # (sm_90 SASS), all loads by TMA, at most 32 spill stores; its OCC 0 twin (the default) fits one.
    found = _sm90_stats("attention", tmp_path)
    occ2 = [k for k in kernels_of("attention") if k["config"]["OCC"] == 2 and k["config"]["TQ"] == 128]
    assert occ2, "no OCC 2 prefill attention config instantiated"
    for k in occ2:
        row, alone = found[k["name"] + "_a16"], found[k["name"].rsplit("_", 1)[0] + "_0_a16"]
        assert row["REG"] * row["threads"] * 2 <= 65536 and 2 * row["SHARED"] <= 227 * 1024, (k["name"], row)
        assert row.get("UTMALDG", 0) > 0 and row.get("LOCAL", 0) == 0 and row.get("STL", 0) <= 32, (k["name"], row)
        assert alone["REG"] * alone["threads"] * 2 > 65536 or 2 * alone["SHARED"] > 227 * 1024, alone


@pytest.mark.parametrize("op", ROW_OPS)
def test_row_occupancy_8_fits_8_ctas_without_spills(op, tmp_path):
    # OCC 8 (1 x 4096, cpp/include/tr_kernels.h) exists to hold 8 rows per SM: its `_exact` twin must fit 8 CTAs in
    # an SM's 64K registers, with nothing spilled to local memory (sm_90 SASS).
    found = _sm90_stats(op, tmp_path)
    occ8 = [k for k in kernels_of(op) if k["config"]["OCC"] == 8]
    assert occ8, f"{op}: no OCC 8 config instantiated"
    for k in occ8:
        row = found[k["name"] + "_exact"]
        assert row["REG"] * row["threads"] * 8 <= 65536, f"{k['name']}_exact: {row['REG']} registers x {row['threads']}"
        assert row.get("LOCAL", 0) == 0 and row.get("STL", 0) == 0, f"{k['name']}_exact spills: {row}"


def test_silu_and_mul_exp2_switch_frees_registers(tmp_path):
    # AX 1 (a sweep option, cpp/kernels/silu_and_mul.cu): exp2 with flushed subnormals instead of ct::exp drops the
    # exp's range reduction, so each 16-bit AX 1 `_exact` kernel has fewer instructions and registers than its AX 0
    # twin (sm_90, 2 x 1024: 392 -> 296 instructions, 67 -> 55 registers, 7 -> 9 CTAs per SM), the same MUFU.EX2
    # per element, its loads outside branch regions and nothing spilled.
    found = _sm90_stats("silu_and_mul", tmp_path)
    kernels = kernels_of("silu_and_mul")
    ax1 = [k for k in kernels if k["config"]["AX"] == 1]
    assert ax1, "no AX 1 silu_and_mul config instantiated"
    for k in ax1:
        twin = [t for t in kernels if t["dtype"] == k["dtype"] and t["config"] == {**k["config"], "AX": 0}]
        assert len(twin) == 1, (k["name"], "no single AX 0 twin with the same tile", twin)
        fast, exact = found[k["name"] + "_exact"], found[twin[0]["name"] + "_exact"]
        assert fast["instr"] < exact["instr"] and fast["REG"] < exact["REG"], (k["name"], fast, exact)
        assert fast["MUFU.EX2"] == exact["MUFU.EX2"] > 0, (k["name"], fast, exact)
        assert (fast["ldg_in_bssy"], fast.get("STL", 0), fast.get("LOCAL", 0)) == (0, 0, 0), (k["name"], fast)


@pytest.mark.parametrize("op", ["matmul", "bmm"])
def test_persistent_gemm_keeps_the_tile_kernels_resources(op, tmp_path):
    # P 1 (gemm.cuh): the one-tile body in a walk over tiles. In the _a16 twins (the aligned calls: every bench
    # shape) tileiras keeps the warp-specialised layout (sm_90, 128 x 256: 384 threads, 168 registers, the same
    # TMA loads, stores and HGMMA, no spills) and adds the walk's instructions (bf16: 848 -> 1016). The generic
    # twin (unaligned operands, no TMA) of the walk spills (255 registers, 632 B of stack, where the one-tile
    # generic kernel holds 228): P is a sweep option for aligned shapes.
    found = _sm90_stats(op, tmp_path)
    kernels = kernels_of(op)
    walks = [k for k in kernels if k["config"]["P"] == 1]
    assert walks, f"no P 1 {op} config instantiated"
    for k in walks:
        twin = [t for t in kernels if t["dtype"] == k["dtype"] and t["config"] == {**k["config"], "P": 0}]
        assert len(twin) == 1, (k["name"], twin)
        walk, one = found[k["name"] + "_a16"], found[twin[0]["name"] + "_a16"]
        same = ("threads", "REG", "UTMALDG", "UTMASTG", "HGMMA")
        assert [walk.get(f) for f in same] == [one.get(f) for f in same], (k["name"], walk, one)
        assert walk.get("STL", 0) == 0 and walk["instr"] > one["instr"], (k["name"], walk, one)
