"""cutile_rs's kept launches (prepare() once per call signature, then Prepared.launch with each call's
pointers and stream) on a GPU: results equal torch's across calls with other tensors of the same signature,
a new shape gets its own handle, a pointer of another alignment still launches right (cuTile-rs
specialises on the borrowed pointer at launch), and a kept launch captured in a CUDA graph replays with
the captured tensors' current contents. No timing here (host cost: tools/host_cost_profile.py).
Skipped without a CUDA GPU or the built extension, with the adapter's own reason."""

from __future__ import annotations

import pytest
import torch

from tilerosetta import backends
from tilerosetta.harness import compare
from tilerosetta.specs import SPECS

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (launches)")


@pytest.fixture()
def rb():
    b = backends.get("cutile_rs")
    ok, why = b.available()
    if not ok:
        pytest.skip(why)
    return b


def _gen(seed):
    return torch.Generator(device="cuda").manual_seed(seed)


def test_vector_add_kept_launches_use_each_calls_tensors(rb):
    op = rb.op("vector_add")
    n = 4096 + 29  # a signature no other test uses
    handles = []
    for seed in range(3):  # call 1 prepares (and JIT-compiles), 2 and 3 launch the kept handle
        a, b = (torch.randn(n, device="cuda", generator=_gen(seed)) for _ in range(2))
        out = torch.full_like(a, float("nan"))
        op(a, b, out)
        torch.testing.assert_close(out, a + b, rtol=0, atol=0)
        handles.append(rb.prepared("vector_add", (a, b, out), {}))
    assert handles[0] is not None and all(h is handles[0] for h in handles), "one kept handle per signature"
    assert (handles[0].op, handles[0].num_tensors) == ("vector_add", 3)
    m = n + 1000  # a new shape: its own handle, right too
    a, b = (torch.randn(m, device="cuda", generator=_gen(9)) for _ in range(2))
    out = torch.empty_like(a)
    op(a, b, out)
    torch.testing.assert_close(out, a + b, rtol=0, atol=0)
    assert rb.prepared("vector_add", (a, b, out), {}) is not handles[0]


def test_kept_handle_with_a_pointer_of_other_alignment(rb):
    """Same signature (shape, strides, dtype), pointer 4 bytes past a 16-byte boundary: the kept handle
    launches it and cuTile-rs specialises for that pointer (its spec comes from the borrowed tensor)."""
    op = rb.op("vector_add")
    n = 4096 + 31
    a, b = (torch.randn(n, device="cuda", generator=_gen(1)) for _ in range(2))
    buf = torch.zeros(n + 1, device="cuda")
    op(a, b, buf[:n])
    shifted = buf[1:]
    assert shifted.data_ptr() % 16 == 4
    assert rb.prepared("vector_add", (a, b, shifted), {}) is rb.prepared("vector_add", (a, b, buf[:n]), {})
    # The whole request through launch() first: a failure there is cuTile-rs's with such a pointer, not the handle's.
    rb._mod.launch(*rb.request("vector_add", (a, b, shifted), {}))
    torch.testing.assert_close(shifted, a + b, rtol=0, atol=0, msg=lambda m: f"launch() itself: {m}")
    buf.zero_()
    op(a, b, shifted)  # the kept handle
    torch.testing.assert_close(shifted, a + b, rtol=0, atol=0)
    assert buf[0].item() == 0.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_kept_launches_match_torch(rb, dtype):
    op, spec = rb.op("rms_norm"), SPECS["rms_norm"]
    for m, n in [(7, 333), (7, 333), (7, 333), (3, 4099)]:  # 3 calls of one signature, then a new one
        x = torch.randn(m, n, device="cuda", dtype=dtype, generator=_gen(m * n))
        w = 1 + 0.5 * torch.randn(n, device="cuda", dtype=dtype, generator=_gen(n))
        out = torch.full_like(x, float("nan"))
        op(x, w, out, eps=1e-6)
        torch.cuda.synchronize()
        want = spec.reference({"eps": 1e-6}, x.double(), w.double())
        ok, err, _nan, msg = compare(spec, dtype, {"out": out}, want)  # the conformance suite's rule
        assert ok, f"rms_norm {dtype} ({m}, {n}): {msg}"
    kept = [k for k in rb._current_memo()[1] if k[0] == "rs-prepared" and k[1] == "rms_norm"]
    assert len({k[2] for k in kept}) >= 2, "one handle per (shape, dtype) signature"


def test_kept_launch_replays_in_a_cuda_graph(rb):
    """Captured on the graph's stream (torch's current stream inside capture), a kept launch replays with
    the captured tensors' contents at replay time."""
    op = rb.op("vector_add")
    n = 4096 + 33
    a, b, out = (torch.zeros(n, device="cuda") for _ in range(3))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):  # outside capture: prepare + JIT compile, then a kept launch
            op(a, b, out)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        op(a, b, out)
    for seed in range(3):
        a.copy_(torch.randn(n, device="cuda", generator=_gen(seed)))
        b.copy_(torch.randn(n, device="cuda", generator=_gen(seed + 10)))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, a + b, rtol=0, atol=0)
