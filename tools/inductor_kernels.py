"""Print the Triton kernels torch.compile (inductor) generates for an op's plain torch code, with the launch
config its autotuner kept: what the `torch_compile` peer runs, read instead of guessed.

    python3 tools/inductor_kernels.py --op rope [--dtype bf16] [--size 0]

Compiles the spec's `baseline` on the bench case (the code the peer compiles), runs it once, then prints each
generated kernel source and its `.best_config` from a fresh inductor cache directory. Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--op", required=True)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--size", type=int, default=0, help="index into the spec's bench cases")
    args = ap.parse_args(argv)
    cache = Path(tempfile.mkdtemp(prefix="inductor-"))
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache)  # before torch reads it: only this op's files land there
    import torch

    from tilerosetta.specs import SPECS
    from tilerosetta.specs.base import DTYPES_BY_NAME

    if not torch.cuda.is_available():
        print("inductor_kernels: no CUDA GPU here (inductor's CUDA code needs one to autotune)", file=sys.stderr)
        return 2
    spec = SPECS[args.op]
    case = spec.bench_cases[args.size]
    inputs = spec.make_bench_inputs(case, DTYPES_BY_NAME[args.dtype], "cuda", torch.Generator("cuda").manual_seed(0))
    fn = torch.compile(spec.baseline, dynamic=False, fullgraph=True)
    fn(**inputs, **spec.full_params(case.params))
    torch.cuda.synchronize()
    sources = sorted(p for p in cache.rglob("*.py") if "@triton.jit" in p.read_text(errors="replace"))
    print(f"# {args.op} {args.dtype} {case.dims}: {len(sources)} Triton kernel file(s) under {cache}")
    for p in sources:
        print(f"\n## {p.relative_to(cache)}\n{p.read_text(errors='replace')}")
    for p in sorted(cache.rglob("*.best_config")):
        print(f"\n## best config {p.relative_to(cache)}: {p.read_text(errors='replace')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
