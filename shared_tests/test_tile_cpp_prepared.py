"""tile_cpp's kept plans without a GPU (issue 14 item 7): `prepare` checks a call once, `Prepared.launch` runs
later calls of the same signature with only their data pointers and stream.

Two levels: the module against the recording stand-in libcuda.so.1 of test_tile_cpp_driver.py (what reaches
cuLaunchKernel, and what is refused before it), and the adapter with a recording module (one prepare per call
signature, each call's own pointers and stream).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from cuda_fakes import cuda_like
from test_tile_cpp_driver import CHILD_HEAD, fake_driver  # noqa: F401  (fake_driver: the fixture, the stand-in libcuda.so.1)

mod = pytest.importorskip("tilerosetta_tile_cpp", reason="tilerosetta_tile_cpp not built here (run `make build-python`)")

# Prepares one call on fake tensors at 1 GiB apart, then launches it once per pointer tuple given.
CHILD = CHILD_HEAD + textwrap.dedent("""
    kernel, shapes, dtype, params, launches = json.loads(sys.argv[1])
    p = m.prepare(kernel, [Fake(s, getattr(torch, dtype), (i + 1) << 30) for i, s in enumerate(shapes)], params)
    print("prepared " + p.function)
    for pointers, stream in launches:
        try:
            p.launch(tuple(pointers), stream)
            print("ok")
        except Exception as exc:
            print(type(exc).__name__ + ": " + str(exc))
""")


def run_child(driver, tmp_path, kinds, kernel, shapes, dtype, params, launches):
    log = tmp_path / "driver.log"
    env = dict(os.environ, LD_LIBRARY_PATH=f"{driver}:{os.environ.get('LD_LIBRARY_PATH', '')}",
               TR_FAKE_LOG=str(log), TR_FAKE_KINDS=kinds)
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps([kernel, shapes, dtype, params, launches])],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines(), (log.read_text().splitlines() if log.exists() else [])


G = 1 << 30


def test_later_launches_carry_their_own_pointers_and_stream(fake_driver, tmp_path):
    shapes = [[257, 4099], [4099], [257, 4099]]
    result, log = run_child(fake_driver, tmp_path, "pppiif", "rms_norm_fp16_4_512_4_0", shapes, "float16",
                            {"eps": 0.25}, [[[5 * G, 6 * G, 7 * G], 11], [[8 * G, 9 * G, 10 * G], 22]])
    assert result == ["prepared rms_norm_fp16_4_512_4_0_loop", "ok", "ok"], result
    assert [line for line in log if line.startswith("function")] == ["function rms_norm_fp16_4_512_4_0_loop"]
    launches = [line for line in log if line.startswith("launch")]
    assert launches == [
        f"launch grid=65,1,1 block=1,1,1 shared=0 stream=11 params=p:{5 * G} p:{6 * G} p:{7 * G} i:257 i:4099 f:0.25 ",
        f"launch grid=65,1,1 block=1,1,1 shared=0 stream=22 params=p:{8 * G} p:{9 * G} p:{10 * G} i:257 i:4099 f:0.25 ",
    ]


@pytest.mark.parametrize("pointers, refusal", [
    ([5 * G, 6 * G], "argument 'pointers': expected 3 data pointers, got 2"),
    ([0, 6 * G, 7 * G], "argument 'a': data_ptr 0 is null or misaligned"),
    # the prepared call was 16-byte aligned, so it launches the _a16 twin: 8 bytes off is refused
    ([5 * G, 6 * G + 8, 7 * G], "argument 'b': data_ptr 6442450952 is null or misaligned (this plan launches "
                                "vector_add_fp32_1024_a16)"),
    ([5 * G, 6 * G, 5 * G + 64], "argument 'out': output partly overlaps 'a'"),
])
def test_pointers_are_checked_before_the_driver(fake_driver, tmp_path, pointers, refusal):
    result, log = run_child(fake_driver, tmp_path, "pppi", "vector_add_fp32_1024", [[1024]] * 3, "float32", {},
                            [[pointers, 0]])
    assert result[0] == "prepared vector_add_fp32_1024_a16"
    assert result[1].startswith(f"ValueError: tile_cpp.vector_add: {refusal}"), result[1]
    assert not [line for line in log if line.startswith("launch")]


def test_prepare_refuses_what_launch_refuses():
    fakes = [torch.empty(7), torch.empty(8), torch.empty(7)]
    with pytest.raises(ValueError) as prepared:
        mod.prepare("vector_add_fp32_1024", fakes, {})
    with pytest.raises(ValueError) as launched:
        mod.launch("vector_add_fp32_1024", fakes, {}, 0)
    assert str(prepared.value) == str(launched.value) and "tile_cpp.vector_add" in str(prepared.value)


class RecordingModule:
    """The real module for everything but prepare, whose handles record their launches."""

    def __init__(self, real):
        self._real, self.prepared, self.launches = real, [], []

    def __getattr__(self, name):
        return getattr(self._real, name)

    def prepare(self, kernel, tensors, params, a16, host):
        outer = self

        class Handle:
            def launch(self, pointers, stream):
                outer.launches.append((kernel, pointers, stream))

        self.prepared.append((kernel, tuple(t.shape for t in tensors), dict(params), dict(host)))
        return Handle()


@pytest.fixture
def recorded(monkeypatch):
    from tilerosetta.backends import base, tile_cpp

    rec = RecordingModule(mod)
    monkeypatch.setattr(tile_cpp, "_mod", rec)
    monkeypatch.setattr(base, "_raw_stream", lambda index: 4242)  # torch's current stream, without CUDA
    monkeypatch.setattr(tile_cpp, "current_stream_handle", lambda t: 4242)
    return tile_cpp.TileCppBackend(), rec


def test_adapter_prepares_once_per_signature(recorded):
    backend, rec = recorded
    fn = backend._make_fn("rms_norm")
    calls = [cuda_like(torch.randn(4, 512, dtype=torch.float16), torch.randn(512, dtype=torch.float16),
                       torch.empty(4, 512, dtype=torch.float16)) for _ in range(3)]
    for tensors in calls:
        fn(*tensors, eps=1e-5)
    assert len(rec.prepared) == 1 and rec.prepared[0][1] == ((4, 512), (512,), (4, 512))
    assert [pointers for _k, pointers, _s in rec.launches] == [tuple(t.data_ptr() for t in ts) for ts in calls]
    assert {stream for *_x, stream in rec.launches} == {4242}

    fn(*calls[0], eps=1e-6)  # another param value
    fn(*cuda_like(torch.randn(8, 512, dtype=torch.float16), torch.randn(512, dtype=torch.float16),
                  torch.empty(8, 512, dtype=torch.float16)), eps=1e-5)  # another shape
    fn(*cuda_like(torch.randn(4, 512), torch.randn(512), torch.empty(4, 512)), eps=1e-5)  # another dtype
    assert len(rec.prepared) == 4 and rec.prepared[1][2] == {"eps": 1e-6}


def test_adapter_prepares_again_for_another_alignment_and_after_set_config(recorded):
    backend, rec = recorded
    fn = backend._make_fn("vector_add")
    buf = torch.randn(2048)
    fn(*cuda_like(buf[:1024], torch.randn(1024), torch.empty(1024)))
    fn(*cuda_like(buf[1:1025], torch.randn(1024), torch.empty(1024)))  # 4 bytes off: the generic twin's plan
    assert len(rec.prepared) == 2
    config = next(c for c in backend.config_space("vector_add", torch.float32)
                  if rec.prepared[0][0] != f"vector_add_fp32_{c['TILE']}")
    backend.set_config("vector_add", torch.float32, config)
    fn(*cuda_like(buf[:1024], torch.randn(1024), torch.empty(1024)))
    assert len(rec.prepared) == 3 and rec.prepared[2][0] == f"vector_add_fp32_{config['TILE']}"


def test_adapter_hands_the_configs_host_keys_to_prepare(recorded):
    """attention's SPLIT_MIN_BLOCKS (default 4) is no part of the kernel's name: the adapter leaves it out of
    the kernel lookup and hands it to prepare() as `host`; set_config changes it (a new plan)."""
    backend, rec = recorded
    fn = backend._make_fn("attention")
    q, k, v, out = cuda_like(torch.randn(1, 32, 1, 128, dtype=torch.bfloat16),
                             *(torch.randn(1, 8, 4096, 128, dtype=torch.bfloat16) for _ in range(2)),
                             torch.empty(1, 32, 1, 128, dtype=torch.bfloat16))
    fn(q, k, v, out, causal=True, scale=None)
    backend.set_config("attention", torch.bfloat16, {"SPLIT_MIN_BLOCKS": 1})
    try:
        fn(q, k, v, out, causal=True, scale=None)
    finally:
        backend.set_config("attention", torch.bfloat16, None)
    assert [(p[0], p[3]) for p in rec.prepared] == [("attention_bf16_128_16_128_0_0", {"SPLIT_MIN_BLOCKS": 4}),
                                                    ("attention_bf16_128_16_128_0_0", {"SPLIT_MIN_BLOCKS": 1})]
