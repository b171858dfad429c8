"""The machine's ceilings: what a result is compared with.

* copy bandwidth (memory-bound ops), measured at the start of every run with the same timing method as
  results: the faster of two large fp32 copies, bytes = read + written: dst.copy_(src) (torch turns it
  into cudaMemcpyAsync, which on the H200 streams only ~2.8 TB/s) and a streaming elementwise kernel
  (torch.neg(src, out=dst): one read, one write, ~4.3 TB/s). An achievable ceiling, not the datasheet
  number; both figures are kept in the details.
* matrix rate (compute-bound ops), two figures, never one run's torch.mm median alone (that made torch
  ~100% by construction and moved 722 -> 685 TFLOP/s between two runs of one day):
  - datasheet: the vendor's dense tensor-core peak for the GPU's name (DATASHEET below; fp32 means the tf32
    rate, the precision the fp32 matmul/bmm specs accept). An unknown GPU has no datasheet figure, and
    the report says so.
  - measured peak: the BEST of a few large GEMM shapes (MEASURED_SHAPES), per dtype, with the SM clock
    read before, under load and after (a throttled clock explains a low peak).
  Compute-bound results are reported as % of the measured peak ("pct_of_ceiling") and % of the datasheet.

Old results files (before the measured peak) hold one torch.mm 8192^3 median per dtype; they still load:
their figure is kept as the measured peak, flagged `legacy`, and the datasheet figure is looked up from
the run's GPU name (results.load does that).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field

import torch

from tilerosetta.bench import timing

COPY_ELEMS = 1 << 28  # 1 GiB of fp32: far beyond any L2
# (M, N, K) of the GEMMs whose best rate is the measured peak: square, tall and deep, all large enough
# to fill 132 SMs many times over; ~0.2 s of GPU time per dtype at the default budgets. 4096^3 is among
# them because the H200 holds a higher SM clock on it: bf16 torch.mm ran 716 TFLOP/s there and 673-680 on
# the 8192+ shapes (run 20261201T010635Z), so a peak from the large shapes alone was beaten by a contestant.
MEASURED_SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (16384, 8192, 8192), (8192, 8192, 16384))
QUICK_SHAPES = MEASURED_SHAPES[:1]
LOAD_MS = 300.0  # GEMMs queued while the clock is read "under load" (nvidia-smi takes ~0.1 s to answer)

# Dense (no 2:4 sparsity) tensor-core peaks in TFLOP/s from NVIDIA's datasheets, per dtype; fp32 = tf32.
# Matched against torch.cuda.get_device_name() in order; first match wins. Keep it small and sure.
DATASHEET = (
    (r"H200(?!.*NVL)", "NVIDIA H200 SXM datasheet", {"bf16": 989.4, "fp16": 989.4, "fp32": 494.7}),
    (r"H100.*(SXM|HBM3)", "NVIDIA H100 SXM datasheet", {"bf16": 989.4, "fp16": 989.4, "fp32": 494.7}),
    (r"GH200", "NVIDIA GH200 datasheet", {"bf16": 989.4, "fp16": 989.4, "fp32": 494.7}),
    (r"A100", "NVIDIA A100 datasheet", {"bf16": 312.0, "fp16": 312.0, "fp32": 156.0}),
)


def datasheet_for(gpu_name: str | None) -> tuple[dict[str, float], str]:
    """(TFLOP/s per dtype, source) for a GPU name; ({}, why) when the table does not know it."""
    for pattern, source, peaks in DATASHEET:
        if gpu_name and re.search(pattern, gpu_name):
            return dict(peaks), source
    return {}, f"no datasheet figure for GPU '{gpu_name or '?'}' (not in ceilings.DATASHEET)"


@dataclass
class Ceilings:
    copy_gbps: float  # GB/s (1e9 bytes/s), read + written
    mm_tflops: dict[str, float]  # dtype name -> measured peak TFLOP/s (best of MEASURED_SHAPES)
    details: dict = field(default_factory=dict)
    datasheet_tflops: dict[str, float] = field(default_factory=dict)  # dtype -> vendor dense peak
    datasheet_source: str = ""  # where datasheet_tflops comes from, or why there is none
    clocks: dict = field(default_factory=dict)  # SM clock (MHz) before / under load / after the GEMMs
    legacy: bool = False  # an old record: mm_tflops is one torch.mm 8192^3 median (circular for torch)

    def to_json(self) -> dict:
        return {"copy_gbps": self.copy_gbps, "mm_tflops": dict(self.mm_tflops), "details": self.details,
                "datasheet_tflops": dict(self.datasheet_tflops), "datasheet_source": self.datasheet_source,
                "clocks": self.clocks, "mm_method": "best of " + ", ".join(
                    "x".join(map(str, s)) for s in self.details.get("mm_shapes", MEASURED_SHAPES))}

    @classmethod
    def from_json(cls, d: dict | None, gpu_name: str | None = None) -> "Ceilings | None":
        """Reads new and old records. An old one (no datasheet_tflops) keeps its torch.mm figure as the
        measured peak, marked legacy; its datasheet figure is looked up from gpu_name."""
        if not d:
            return None
        legacy = "datasheet_tflops" not in d
        sheet, source = (dict(d["datasheet_tflops"]), d.get("datasheet_source", "")) if not legacy \
            else datasheet_for(gpu_name)
        return cls(float(d["copy_gbps"]), {k: float(v) for k, v in d["mm_tflops"].items()}, d.get("details", {}),
                   {k: float(v) for k, v in sheet.items()}, source, d.get("clocks", {}), legacy)

    def _key(self, table: dict, dtype: str) -> str | None:
        return dtype if dtype in table else ("bf16" if "bf16" in table else None)

    def for_result(self, bound: str, dtype: str) -> tuple[str, float]:
        """(kind, value) of the ceiling a result's % is taken of: ('copy_gbps', GB/s) or
        ('mm_tflops:bf16', measured TFLOP/s). A dtype without its own rate falls back to bf16's."""
        if bound == "compute":
            key = self._key(self.mm_tflops, dtype)
            return f"mm_tflops:{key}", self.mm_tflops[key]
        return "copy_gbps", self.copy_gbps

    def datasheet(self, dtype: str) -> float | None:
        """The datasheet dense peak of a dtype (bf16's where the dtype has none), None when unknown."""
        key = self._key(self.datasheet_tflops, dtype)
        return self.datasheet_tflops[key] if key else None

    def describe_compute(self) -> str:
        """One line for reports: both compute figures and where they come from."""
        meas = ", ".join(f"{k} {v:.0f}" for k, v in self.mm_tflops.items())
        how = ("one torch.mm 8192^3 median per dtype (an old results file: circular for torch)" if self.legacy
               else "best of " + ", ".join("x".join(map(str, s)) for s in
                                          self.details.get("mm_shapes", MEASURED_SHAPES)) + " (torch.mm)")
        text = f"measured peak {meas} TFLOP/s ({how})"
        if self.datasheet_tflops:
            text += "; datasheet " + ", ".join(f"{k} {v:.0f}" for k, v in self.datasheet_tflops.items()) + \
                f" TFLOP/s ({self.datasheet_source}; fp32 = tf32)"
        else:
            text += f"; {self.datasheet_source or 'no datasheet figure'}"
        if self.clocks:
            text += "; SM clock MHz " + ", ".join(f"{k} {v}" for k, v in self.clocks.items()
                                                 if k in ("before", "under_load", "after", "max"))
        return text


# ---- the SM clock ---------------------------------------------------------------------------------
def sm_clock() -> dict:
    """Current and max SM clock (MHz) of the current device: torch.cuda.clock_rate (needs pynvml), else
    nvidia-smi. {'error': why} when neither works (the run goes on)."""
    try:
        return {"sm_mhz": int(torch.cuda.clock_rate()), "source": "pynvml"}
    except Exception as exc:  # no pynvml in the bundle: ask nvidia-smi
        why = f"torch.cuda.clock_rate: {type(exc).__name__}"
    try:
        idx = torch.cuda.current_device()
        out = subprocess.run(["nvidia-smi", "-i", str(idx), "--query-gpu=clocks.sm,clocks.max.sm",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10)
        cur, mx = (int(x.strip()) for x in out.stdout.strip().splitlines()[0].split(","))
        return {"sm_mhz": cur, "max_mhz": mx, "source": "nvidia-smi"}
    except Exception as exc:
        return {"error": f"{why}; nvidia-smi: {type(exc).__name__}: {str(exc)[:100]}"}


def _clock_summary(before: dict, load: dict, after: dict) -> dict:
    out = {}
    for name, c in (("before", before), ("under_load", load), ("after", after)):
        out[name] = c.get("sm_mhz", c.get("error", "?"))
    mx = load.get("max_mhz") or before.get("max_mhz")
    if mx:
        out["max"] = mx
    out["source"] = load.get("source") or before.get("source") or "none"
    return out


# ---- measurement (GPU only) -----------------------------------------------------------------------
def measure_copy(gen, warmup_ms: float, rep_ms: float) -> tuple[float, dict]:
    src = torch.randn(COPY_ELEMS, device="cuda", generator=gen)
    dst = torch.empty_like(src)
    copy_bytes = 2 * src.numel() * src.element_size()
    details, rates = {}, {}
    copies = {"copy": lambda: dst.copy_(src), "copy_kernel": lambda: torch.neg(src, out=dst)}
    for name, fn in copies.items():
        t = timing.time_gpu(fn, warmup_ms=warmup_ms, rep_ms=rep_ms, flush=False)
        details[name] = {"bytes": copy_bytes, **t.to_json()}
        rates[name] = copy_bytes / (t.median_ms * 1e-3) / 1e9
    details["copy_source"] = max(rates, key=rates.get)
    return max(rates.values()), details


def measure_gemm_peak(dtypes: dict, shapes, gen, warmup_ms: float, rep_ms: float,
                      device: str = "cuda") -> tuple[dict, dict, dict]:
    """Best TFLOP/s per dtype over `shapes`, the per-shape timings, and the SM clock around them."""
    peak, details = {}, {"mm_shapes": [list(s) for s in shapes]}
    before = sm_clock()
    under_load: dict = {}
    prev_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        for name, dt in dtypes.items():
            torch.backends.cuda.matmul.allow_tf32 = dt == torch.float32  # fp32 ceiling = tf32 rate
            for m, n, k in shapes:
                a = torch.randn(m, k, device=device, generator=gen).to(dt)
                b = torch.randn(k, n, device=device, generator=gen).to(dt)
                c = torch.empty(m, n, device=device, dtype=dt)
                torch.mm(a, b, out=c)
                if not under_load:  # queue ~LOAD_MS of GEMMs, read the clock while they run
                    t0 = timing.time_gpu(lambda: torch.mm(a, b, out=c), warmup_ms=1, rep_ms=1, flush=False,
                                         graph=False, min_reps=1, max_reps=3)
                    for _ in range(max(1, int(LOAD_MS / max(t0.median_ms, 1e-3)))):
                        torch.mm(a, b, out=c)
                    under_load = sm_clock()
                    if device == "cuda":
                        torch.cuda.synchronize()
                t = timing.time_gpu(lambda: torch.mm(a, b, out=c), warmup_ms=warmup_ms, rep_ms=rep_ms,
                                    flush=False)
                rate = 2 * m * n * k / (t.median_ms * 1e-3) / 1e12
                details[f"mm_{name}_{m}x{n}x{k}"] = {"tflops": rate, "tf32": dt == torch.float32, **t.to_json()}
                if rate > peak.get(name, 0.0):
                    peak[name] = rate
                    details[f"mm_{name}_best"] = [m, n, k]
                del a, b, c
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev_tf32
    return peak, details, _clock_summary(before, under_load, sm_clock())


def measure(quick: bool = False, warmup_ms: float = 25.0, rep_ms: float = 100.0) -> Ceilings:
    """Measure on the current CUDA device (GPU only). About 3 s of GPU time (quick: ~0.8 s)."""
    if quick:
        warmup_ms, rep_ms = min(warmup_ms, 10.0), min(rep_ms, 40.0)
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234)
    copy_gbps, details = measure_copy(gen, warmup_ms, rep_ms)
    torch.cuda.empty_cache()
    dtypes = {"bf16": torch.bfloat16} if quick else {"bf16": torch.bfloat16, "fp16": torch.float16,
                                                       "fp32": torch.float32}
    peak, mm_details, clocks = measure_gemm_peak(dtypes, QUICK_SHAPES if quick else MEASURED_SHAPES, gen,
                                                 warmup_ms, rep_ms)
    details.update(mm_details)
    torch.cuda.empty_cache()
    sheet, source = datasheet_for(torch.cuda.get_device_name())
    return Ceilings(copy_gbps, peak, details, sheet, source, clocks)
