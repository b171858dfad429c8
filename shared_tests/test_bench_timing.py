"""Timing statistics and the host timers (CPU); the GPU timer itself runs only with a GPU."""

import time

import pytest
import torch

from tilerosetta.bench import timing


def test_percentile_interpolates():
    s = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert timing.percentile(s, 0.0) == 1.0
    assert timing.percentile(s, 1.0) == 5.0
    assert timing.percentile(s, 0.5) == 3.0
    assert timing.percentile(s, 0.2) == pytest.approx(1.8)
    with pytest.raises(ValueError):
        timing.percentile([], 0.5)


def test_summarize_orders_and_spreads():
    t = timing.summarize([5.0, 1.0, 3.0, 2.0, 4.0], timing.GRAPH, flush=True)
    assert (t.min_ms, t.median_ms, t.max_ms, t.n) == (1.0, 3.0, 5.0, 5)
    assert t.p20_ms == pytest.approx(1.8) and t.p80_ms == pytest.approx(4.2)
    assert t.spread == pytest.approx((4.2 - 1.8) / 3.0)
    j = t.to_json()
    assert "samples_ms" not in j and j["method"] == "cuda_graph" and j["flush"] is True


def test_rep_count_clamps():
    assert timing.rep_count(100, 1.0, 10, 1000) == 100
    assert timing.rep_count(100, 50.0, 10, 1000) == 10
    assert timing.rep_count(100, 1e-6, 10, 1000) == 1000
    assert timing.rep_count(100, 0.0, 10, 1000) == 1000


def test_time_host_measures_the_call():
    t = timing.time_host(lambda: time.sleep(0.002), warmup_ms=2, rep_ms=20, min_reps=5)
    assert t.method == timing.CPU_WALL and "not comparable" in t.note
    assert t.n >= 5
    assert 2.0 <= t.median_ms < 50.0  # at least the sleep; generous upper bound on a loaded CI box


def test_launch_overhead_is_host_time_per_call():
    calls = []
    us = timing.launch_overhead_us(lambda: calls.append(1), "cpu", calls=50, rounds=3)
    assert len(calls) == 20 + 50 * 3
    assert 0 < us < 1000


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: times kernels with CUDA events")
def test_time_gpu_graph_and_fallback():
    a = torch.randn(1 << 22, device="cuda")
    b = torch.randn_like(a)
    out = torch.empty_like(a)

    def verify_with(expected):
        def verify(run):
            out.fill_(float("nan"))
            run()
            torch.cuda.synchronize()
            return None if torch.allclose(out, expected) else "output differs"
        return verify

    t = timing.time_gpu(lambda: torch.add(a, b, out=out), warmup_ms=5, rep_ms=20, verify=verify_with(a + b))
    assert t.method == timing.GRAPH and t.flush and t.n >= 10 and 0 < t.min_ms <= t.median_ms <= t.max_ms
    # A "backend" launching on another stream is not captured: the replay computes nothing -> fallback.
    other = torch.cuda.Stream()

    def off_stream():
        with torch.cuda.stream(other):
            torch.add(a, b, out=out)
        other.synchronize()
    t2 = timing.time_gpu(off_stream, warmup_ms=5, rep_ms=20, verify=verify_with(a + b))
    assert t2.method == timing.STREAM and t2.note
    # the abandoned capture left the default generator usable (it raised "Offset increment outside graph
    # capture" in every later test of the process before)
    assert torch.randn(8, device="cuda").isfinite().all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: the flush runs on the device")
def test_l2_flush_reads_its_buffer_and_writes_nothing_to_it():
    # A zeroing flush leaves the L2 full of dirty lines the timed call pays to write back
    # (tools/l2_flush_probe.py); the flush must only read its buffer.
    f = timing.L2Flusher()
    assert f.nbytes >= 2 * torch.cuda.get_device_properties(0).L2_cache_size
    f.buffer[:4] = 7
    f()
    torch.cuda.synchronize()
    assert f.kind == "read" and f.sink.item() == 28 and int(f.buffer[:4].sum()) == 28
