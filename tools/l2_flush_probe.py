#!/usr/bin/env python3
"""Does the benchmark's L2 flush charge its own write-back to the timed call? ~1 min on the H200.

    PYTHONPATH=python python tools/l2_flush_probe.py OUT.json

The timer flushes the L2 before each repetition. Zeroing a buffer (the flush up to 2026-12-01) leaves the
L2 full of dirty lines, which the next kernel (the timed one) must write back to DRAM before it can use
that cache space: tens of MB of traffic that is not the op's. Reading a buffer instead leaves clean lines
(evicted for free). This times torch calls (their users' calls; the same for every backend) with the
project's timer under each flush and, for the memory-bound ones, prints the bandwidth they reach.
"""
from __future__ import annotations

import json
import sys

import torch
import torch.nn.functional as F

from tilerosetta.bench.timing import L2Flusher, time_gpu


def flushers():
    read = L2Flusher()  # the timer's own flush; the others zero (part of) its buffer
    buf = read.buffer
    return read.nbytes // 2, {
        "none": None,
        "zero": lambda: buf.zero_(),
        read.kind: read,
        "zero_then_read": lambda: (buf[: buf.numel() // 2].zero_(), read()),
    }


def cases():
    g = torch.Generator(device="cuda").manual_seed(0)
    bf = torch.bfloat16

    def rn(*shape):
        return torch.randn(*shape, device="cuda", dtype=bf, generator=g)

    out = {}
    for m, n in ((1, 4096), (1, 14336), (16, 4096), (16, 14336)):
        a, b = rn(m, 4096), rn(4096, n) * 0.02
        out[f"mm M{m} N{n} K4096"] = (lambda a=a, b=b: torch.mm(a, b), 2 * (m * 4096 + 4096 * n + m * n))
    for mib in (32, 128, 512, 2048):
        src = torch.empty(mib << 18, dtype=torch.float32, device="cuda").normal_()
        dst = torch.empty_like(src)
        out[f"copy {mib} MiB"] = (lambda s=src, d=dst: d.copy_(s), 2 * src.numel() * 4)
    x, w = rn(4096, 8192), rn(8192)
    out["rms_norm 4096x8192"] = (lambda: F.rms_norm(x, (8192,), w, 1e-6), 2 * 2 * x.numel())
    y = rn(4096, 16384)
    out["softmax 4096x16384"] = (lambda: torch.softmax(y, -1), 2 * 2 * y.numel())
    return out


def main(path):
    l2, fl = flushers()
    rows = []
    for name, (fn, nbytes) in cases().items():
        fn()
        for mode, f in fl.items():
            t = time_gpu(fn, warmup_ms=10, rep_ms=60, flush=f is not None, flusher=f)
            row = {"case": name, "flush": mode, "median_us": t.median_ms * 1e3, "p20_us": t.p20_ms * 1e3,
                   "p80_us": t.p80_ms * 1e3, "n": t.n, "method": t.method, "bytes": nbytes,
                   "gbps": nbytes / (t.median_ms * 1e6)}
            rows.append(row)
            print(f"{name:22s} {mode:15s} {row['median_us']:9.1f} us  [{row['p20_us']:.1f}-{row['p80_us']:.1f}]"
                  f"  {row['gbps']:7.0f} GB/s", flush=True)
    for mode, f in fl.items():  # the flush's own time, for the record
        if f is not None:
            t = time_gpu(f, warmup_ms=10, rep_ms=60, flush=False)
            rows.append({"case": "flush itself", "flush": mode, "median_us": t.median_ms * 1e3})
    meta = {"gpu": torch.cuda.get_device_name(0), "l2_bytes": l2, "torch": torch.__version__}
    with open(path, "w") as fh:
        json.dump({"meta": meta, "rows": rows}, fh, indent=1)
    print(meta)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "l2_flush_probe.json")
