"""One way to time a call, for every backend.

GPU (`time_gpu`): the call is captured once into a CUDA graph (falling back to plain launches on the
current stream when a backend cannot be captured; the method is recorded with each result), warmed
up, then every repetition is bracketed by CUDA events on torch's current stream:

    [flush L2] [event start] [graph replay | fn()] [event end]

* The L2 is flushed before each repetition by reading a buffer twice the L2's size, so a small problem
  is not timed out of cache (the flush itself lies outside the events). A read leaves clean lines: the
  dirty ones (the timed call's own last outputs) are written back during the flush. Zeroing the buffer
  (the flush up to 2026-12-01, and triton's do_bench) leaves ~60 MB of dirty lines whose write-back the
  timed call then pays: on the H200, torch.mm at M=1 N=14336 K=4096 took 40.9 us after a zeroing flush and
  34.0 us after a reading one, a 128 MiB copy 68.6 vs 64.8 us (tools/l2_flush_probe.py,
  bench/results/flush/).
* A batch of repetitions is queued behind a GPU spin (`torch.cuda._sleep`) so the host has enqueued
  the whole batch before the GPU reaches it: the events then measure GPU time only, never a gap where
  the GPU waited for a slow Python launch.
* Statistics are over repetitions: median (the headline), p20/p80 (spread), min, max.

Budgets are in milliseconds of GPU time (like triton.testing.do_bench's warmup/rep): the number of
repetitions is the budget divided by a first estimate, clamped to [min_reps, max_reps].

Host (`time_host`): the same statistics from perf_counter around each call; used for CPU-only runs,
which are labelled "cpu_wall" and never compared with GPU results.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import torch

GRAPH = "cuda_graph"  # events around a CUDA-graph replay of one call
STREAM = "stream"  # events around plain launches on the current stream (backend not capturable)
CPU_WALL = "cpu_wall"  # host perf_counter; CPU tensors; NOT comparable with GPU numbers


@dataclass
class Timing:
    median_ms: float
    p20_ms: float
    p80_ms: float
    min_ms: float
    max_ms: float
    mean_ms: float
    n: int
    method: str
    flush: bool = False
    note: str = ""
    samples_ms: list[float] = field(default_factory=list, repr=False)

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("samples_ms")
        return d

    @property
    def spread(self) -> float:
        """(p80 - p20) / median: the relative noise used by `compare`."""
        return (self.p80_ms - self.p20_ms) / self.median_ms if self.median_ms > 0 else 0.0


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 1]) of an already sorted list."""
    if not sorted_values:
        raise ValueError("percentile of no samples")
    pos = q * (len(sorted_values) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(samples_ms: list[float], method: str, flush: bool = False, note: str = "") -> Timing:
    s = sorted(samples_ms)
    return Timing(median_ms=statistics.median(s), p20_ms=percentile(s, 0.2), p80_ms=percentile(s, 0.8),
                  min_ms=s[0], max_ms=s[-1], mean_ms=statistics.fmean(s), n=len(s), method=method,
                  flush=flush, note=note, samples_ms=list(samples_ms))


def rep_count(budget_ms: float, estimate_ms: float, lo: int, hi: int) -> int:
    if estimate_ms <= 0:
        return hi
    return max(lo, min(hi, int(budget_ms / estimate_ms)))


# ---- GPU ------------------------------------------------------------------------------------------
FLUSH_KIND = "read"  # recorded with every run's settings: results flushed otherwise ("zero") differ


class L2Flusher:
    """Reads a buffer of twice the L2 size (a sum into one scalar): evicts whatever the previous repetition
    left cached, writing back its dirty lines now, outside the timed region, and leaves clean lines."""

    kind = FLUSH_KIND

    def __init__(self, device=None):
        props = torch.cuda.get_device_properties(device or torch.cuda.current_device())
        l2 = getattr(props, "L2_cache_size", 0) or 64 << 20  # older torch: assume 64 MiB
        self.nbytes = 2 * l2
        self.buffer = torch.zeros(self.nbytes // 4, dtype=torch.int32, device="cuda")
        self.sink = torch.empty((), dtype=torch.int64, device="cuda")

    def __call__(self):
        torch.sum(self.buffer, 0, dtype=torch.int64, out=self.sink)


def _spin(ms: float):
    """Keep the GPU busy for about `ms` so the host can queue a batch ahead of it (~2 GHz clock assumed;
    a slower clock only spins longer)."""
    if ms > 0 and hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(int(ms * 2e6))


def release_rng_after_failed_capture() -> None:
    """A capture that CUDA invalidated (torch's capture_end raised) leaves the device's default CUDA generator
    marked as capturing, so every later random op on that device raises "Offset increment outside graph
    capture encountered unexpectedly" (seen on the H200: tests after this fallback in the same process
    failed). Its state is replaced by a copy with the same seed and offset, not capturing."""
    gen = torch.cuda.default_generators[torch.cuda.current_device()]
    gen.graphsafe_set_state(gen.clone_state())


def try_graph(fn: Callable[[], None], verify: Callable[[Callable[[], None]], str | None] | None = None):
    """Capture fn into a CUDA graph. Returns (replay, note): replay is None when capture is impossible or
    the replay does not reproduce fn's result (`verify(run) -> problem or None`); note says why."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # one warm call on a side stream, as torch's graph docs advise
            fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        torch.cuda.synchronize()
    except Exception as exc:  # capture refused (host sync, allocation, other stream, ...)
        try:
            torch.cuda.synchronize()
            release_rng_after_failed_capture()
        except Exception:
            pass
        return None, f"CUDA graph capture failed ({type(exc).__name__}: {str(exc)[:200]}); timed plain launches"
    if verify is not None:
        problem = verify(graph.replay)
        if problem:  # e.g. the backend launched on another stream: the graph holds no kernel
            return None, f"CUDA graph replay did not reproduce the result ({problem}); timed plain launches"
    return graph.replay, ""


def time_gpu(fn: Callable[[], None], *, warmup_ms: float = 25.0, rep_ms: float = 100.0, flush: bool = True,
             graph: bool = True, verify=None, min_reps: int = 10, max_reps: int = 1000,
             batch: int = 25, flusher: L2Flusher | None = None) -> Timing:
    """Median GPU time of fn() in ms (see module doc). fn must already have been called once (compiled)."""
    run, note, method = fn, "", STREAM
    if graph:
        replay, note = try_graph(fn, verify)
        if replay is not None:
            run, method = replay, GRAPH
    flusher = (flusher or L2Flusher()) if flush else None
    stream = torch.cuda.current_stream()

    def pre():
        if flusher is not None:
            flusher()

    # First estimate of one repetition (GPU time), to size warm-up and repetitions from the budgets.
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    pre()
    start.record(stream)
    for _ in range(3):
        run()
    end.record(stream)
    end.synchronize()
    estimate = max(start.elapsed_time(end) / 3, 1e-4)

    host_t0 = time.perf_counter()
    n_warm = rep_count(warmup_ms, estimate, 1, max_reps)
    for _ in range(n_warm):
        pre()
        run()
    host_per_rep_ms = (time.perf_counter() - host_t0) * 1e3 / n_warm  # upper bound of enqueue cost
    torch.cuda.synchronize()

    n = rep_count(rep_ms, estimate, min_reps, max_reps)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for b0 in range(0, n, batch):
        b1 = min(n, b0 + batch)
        _spin(min(20.0, 1.5 * host_per_rep_ms * (b1 - b0)))
        for i in range(b0, b1):
            pre()
            starts[i].record(stream)
            run()
            ends[i].record(stream)
    torch.cuda.synchronize()
    samples = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    return summarize(samples, method, flush=flusher is not None, note=note)


# ---- host -----------------------------------------------------------------------------------------
def _sync(device_type: str):
    if device_type == "cuda":
        torch.cuda.synchronize()


def wall_once(fn: Callable[[], None], device_type: str) -> float:
    """Host wall time of one call up to its completion (ms): first-call (compile) and warm-call time."""
    _sync(device_type)
    t0 = time.perf_counter()
    fn()
    _sync(device_type)
    return (time.perf_counter() - t0) * 1e3


def time_host(fn: Callable[[], None], *, warmup_ms: float = 25.0, rep_ms: float = 100.0, min_reps: int = 5,
              max_reps: int = 1000, device_type: str = "cpu") -> Timing:
    """Per-call host wall time statistics (each call synchronized). Labelled CPU_WALL."""
    estimate = wall_once(fn, device_type)
    for _ in range(rep_count(warmup_ms, estimate, 1, max_reps)):
        fn()
    _sync(device_type)
    samples = [wall_once(fn, device_type) for _ in range(rep_count(rep_ms, estimate, min_reps, max_reps))]
    return summarize(samples, CPU_WALL, note="host wall clock on CPU tensors: not comparable with GPU timings")


def launch_overhead_us(fn: Callable[[], None], device_type: str, calls: int = 200, rounds: int = 5) -> float:
    """Host time per call (µs) of an asynchronous call, median over rounds: what Python + the binding cost
    per launch. Measured on a tiny problem so the GPU never holds the host back."""
    for _ in range(20):
        fn()
    _sync(device_type)
    per_call = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        per_call.append((time.perf_counter() - t0) * 1e6 / calls)
        _sync(device_type)
    return statistics.median(per_call)


def interleaved_overhead_us(fns: dict[str, Callable[[], None]], device_type: str, calls: int = 200,
                            rounds: int = 21) -> dict[str, list[float]]:
    """Host µs per call of each of several asynchronous calls, per round: every round times `calls` calls of
    each, in an order rotated round by round, so a host that slows down or speeds up during the measurement
    (another tenant, clocks) moves every contestant's rounds alike and their ratios stay true."""
    names = list(fns)
    for fn in fns.values():
        for _ in range(20):
            fn()
    _sync(device_type)
    per_round = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            fn = fns[n]
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            per_round[n].append((time.perf_counter() - t0) * 1e6 / calls)
            _sync(device_type)
    return per_round


def eager_per_call(fn: Callable[[], None], device_type: str, *, estimate_ms: float | None = None,
                   budget_ms: float = 10.0, min_calls: int = 3, max_calls: int = 200) -> dict:
    """What one eager call costs without a CUDA graph: `calls` back-to-back calls (no sync between them,
    L2 not flushed), then one sync. host_us: CPU time per call to issue them (the launch cost: while the
    GPU is busy with earlier calls the host runs ahead); wall_us: per call until the GPU finished them,
    i.e. max(launch cost, GPU time) - what a Python loop of eager calls gets. Compare with the graph
    median to see launch cost at small sizes."""
    calls = rep_count(budget_ms, estimate_ms or 0.0, min_calls, max_calls)
    _sync(device_type)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    _sync(device_type)
    t2 = time.perf_counter()
    return {"host_us": (t1 - t0) * 1e6 / calls, "wall_us": (t2 - t0) * 1e6 / calls, "calls": calls}

