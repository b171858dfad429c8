"""The Triton adapter's direct launches (backends/triton_direct.py) on a GPU: a kept plan's launch goes
past JITFunction.run from its second call, with each call's own tensors, and falls back to run() where
the compiled kernel's assumptions do not hold. Skipped without a CUDA GPU (the interpreter has no
launcher)."""

from __future__ import annotations

import pytest
import torch

from tilerosetta import backends
from tilerosetta.backends import triton_direct

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (Triton's launcher)")


@pytest.fixture()
def tb():
    b = backends.get("triton")
    ok, why = b.available()
    if not ok:
        pytest.skip(why)
    return b


def _warm_vector_add(tb, n):
    """vector_add of n elements called 3 times (plan, build the direct launch, launch directly); its
    tensors and op."""
    op = tb.op("vector_add")
    a, b, out = (torch.randn(n, device="cuda") for _ in range(3))
    for _ in range(3):
        op(a, b, out)
    return op, a, b, out


def _direct_for(tb, n):
    """The direct launch kept for vector_add of n elements (its last planned argument)."""
    return next(d for lx, d in tb._direct.values() if d is not None and lx.args[-1] == n)


def _entries(b, kernel_name):
    return [d for lx, d in b._direct.values() if lx.kernel.fn.__name__ == kernel_name]


def test_internals_available():
    ok, why = triton_direct.available()
    assert ok, why


def test_second_call_is_direct_with_its_own_tensors(tb):
    op = tb.op("vector_add")
    n = 4096 + 37  # a signature no other test uses
    for seed in range(4):  # call 1 plans, 2 builds the direct launch, 3 and 4 launch directly
        g = torch.Generator(device="cuda").manual_seed(seed)
        a, b = (torch.randn(n, device="cuda", generator=g) for _ in range(2))
        out = torch.empty_like(a)
        op(a, b, out)
        torch.testing.assert_close(out, a + b, rtol=0, atol=0)
    built = _entries(tb, "vector_add_kernel")
    assert built and any(d is not None for d in built), "no direct launch was kept for vector_add"


def test_misaligned_view_falls_back_and_is_right(tb):
    op = tb.op("vector_add")
    n = 4096 + 41
    a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty(n + 1, device="cuda")
    for _ in range(3):
        op(a, b, out[:n])
    d = _direct_for(tb, n)
    shifted = out[1:]  # 4 bytes past a 16-byte boundary: the kernel compiled for aligned pointers must not see it
    assert triton_direct.launch(d, (a, b, shifted, n)) is False
    shifted.zero_()
    op(a, b, shifted)
    torch.testing.assert_close(shifted, a + b, rtol=0, atol=0)


def test_host_tensor_is_refused_by_direct_launch(tb):
    n = 4096 + 43
    _op, a, b, out = _warm_vector_add(tb, n)
    assert triton_direct.launch(_direct_for(tb, n), (a, b.cpu(), out, n)) is False


def test_pdl_kernels_keep_launch_pdl(tb):
    """The decode path's kernels (kernels/triton/pdl.py) launch with PDL on sm_90+ through the adapter too."""
    op = tb.op("rms_norm")
    x, w = torch.randn(3, 4096 + 64, device="cuda", dtype=torch.bfloat16), torch.randn(4096 + 64, device="cuda",
                                                                                     dtype=torch.bfloat16)
    out = torch.empty_like(x)
    for _ in range(3):
        op(x, w, out)
    ds = [d for d in _entries(tb, "rms_norm_block_kernel") + _entries(tb, "rms_norm_loop_kernel") if d is not None]
    assert ds, "no direct launch kept for rms_norm"
    want = torch.cuda.get_device_capability()[0] >= 9
    assert all(bool(d.head[2]) == want for d in ds)
    ref = torch.nn.functional.rms_norm(x.float(), (x.shape[-1],), w.float(), 1e-6).to(x.dtype)
    torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-2)


def test_graph_capture_replays_direct_launch(tb):
    n = 4096 + 47
    op, a, b, out = _warm_vector_add(tb, n)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        op(a, b, out)
    a.copy_(torch.randn(n, device="cuda"))
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, a + b, rtol=0, atol=0)


def test_ab_switch_turns_it_off(monkeypatch):
    monkeypatch.setenv("TILEROSETTA_TRITON_DIRECT", "0")
    from tilerosetta.backends.triton_lang import TritonBackend

    fresh = TritonBackend()
    assert fresh._direct is None
    op = fresh.op("vector_add")
    a, b = torch.randn(1000, device="cuda"), torch.randn(1000, device="cuda")
    out = torch.empty_like(a)
    for _ in range(3):
        op(a, b, out)
    torch.testing.assert_close(out, a + b, rtol=0, atol=0)
