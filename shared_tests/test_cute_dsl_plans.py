"""The cute_dsl adapter's per-signature launch plans (issue 14 item 7), on CPU: the compiled function, its
launch and the compaction of odd strides are worked out once per call signature and reused with each
call's own tensors; a new shape, alignment, param or set_config plans again. The compile and the launch
are stand-ins here (the CuTe DSL runtime and a GPU are not needed); the real launches are the GPU suite's."""

from __future__ import annotations

import pytest
import torch

from cuda_fakes import cuda_like

from tilerosetta.backends import cute_dsl as adapter
from tilerosetta.backends.cute_dsl import CuteDslBackend


@pytest.fixture()
def rig(monkeypatch):
    launches, compiles = [], []

    class _Module:
        @staticmethod
        def launch(compiled, *args, **kw):
            launches.append((compiled, args, kw))

    def compiled(self, op, dtype, variant, cfg, arch):
        compiles.append((op, dtype, variant, tuple(sorted(cfg.items()))))
        return f"compiled-{len(compiles)}"

    monkeypatch.setattr(adapter, "kernel_module", lambda op: _Module)
    monkeypatch.setattr(adapter, "_current_device", lambda: 0)
    monkeypatch.setattr(CuteDslBackend, "compiled", compiled)
    monkeypatch.setattr(CuteDslBackend, "_arch_of", staticmethod(lambda device: "sm_90a"))
    return CuteDslBackend(), launches, compiles


def test_one_plan_per_signature_each_call_its_own_tensors(rig):
    b, launches, compiles = rig
    fn = b._bind("rms_norm")
    seen = []
    for _ in range(3):
        x, w, out = cuda_like(torch.randn(4, 64), torch.randn(64), torch.empty(4, 64))
        fn(x, w, out, eps=1e-5)
        seen.append((x, w, out))
    assert len(compiles) == 1, "planned (and compiled) once for one signature"
    assert [l[1] for l in launches] == [tuple(t) for t in seen], "each call launches its own tensors"
    assert all(l[2] == {"eps": 1e-5} for l in launches)
    fn(*cuda_like(torch.randn(4, 128), torch.randn(128), torch.empty(4, 128)), eps=1e-5)
    assert len(compiles) == 2, "a new shape plans again"
    fn(*seen[0], eps=1e-3)
    assert len(launches) == 5 and launches[-1][2] == {"eps": 1e-3}


def test_alignment_is_part_of_the_signature(rig):
    b, launches, compiles = rig
    fn = b._bind("vector_add")
    buf = torch.randn(1025)
    a, c, out = cuda_like(torch.randn(1024), torch.randn(1024), torch.empty(1024))
    fn(a, c, out)
    fn(*cuda_like(buf[1:], torch.randn(1024), torch.empty(1024)))  # 4 bytes off: the scalar kernel
    assert [v for _, _, v, _ in compiles] == ["vec", "scalar"]


def test_odd_strides_of_extent_one_are_compacted_per_call(rig):
    b, launches, compiles = rig
    fn = b._bind("vector_add")
    for _ in range(2):
        t = torch.randn(1024, 1).t()  # (1, 1024) with strides (1, 1): TVM-FFI wants (1024, 1)
        a = cuda_like(t)[0]
        fn(a, *cuda_like(torch.randn(1, 1024), torch.empty(1, 1024)))
    assert len(compiles) == 1
    assert all(l[1][0].stride() == (1024, 1) for l in launches)
    assert launches[0][1][0].data_ptr() != launches[1][1][0].data_ptr()


def test_set_config_drops_the_plans(rig):
    b, launches, compiles = rig
    fn = b._bind("vector_add")
    args = cuda_like(torch.randn(1024), torch.randn(1024), torch.empty(1024))
    fn(*args)
    space = b.config_space("vector_add", torch.float32)
    if not space:
        pytest.skip("no vector_add config space to force")
    b.set_config("vector_add", torch.float32, space[-1])
    fn(*args)
    assert len(compiles) == 2


def test_host_tensors_keep_no_plan(rig):
    b, launches, compiles = rig
    fn = b._bind("vector_add")
    for _ in range(2):
        fn(torch.randn(1024), torch.randn(1024), torch.empty(1024))
    assert len(compiles) == 2


def test_decode_matmul_default_is_the_narrowest_wgmma_tile():
    from tilerosetta.kernels.cute_dsl import config as cd

    dec = cd.default_config("matmul", "bf16", {"M": 16, "N": 4096, "K": 4096})
    assert dec == {"BM": 64, "BN": 64, "STAGES": 6} and dec in cd.config_space("matmul", "bf16")
    cd.check_config("matmul", dec)
    assert cd.default_config("matmul", "bf16", {"M": 17, "N": 4096, "K": 4096})["BM"] == 128
    assert cd.default_config("bmm", "bf16", {"Bt": 2, "M": 1, "N": 4096, "K": 4096})["BM"] == 128
