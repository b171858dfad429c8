#!/usr/bin/env bash
# The H200 timings the upstream reports leave "to be measured" (docs/upstream/README.md), one line per
# variant: label, microseconds, TB/s of the bytes the kernel must move, and the relative error against a
# torch reference (checked after the first launch). ~20-30 s in all, most of it JIT compiles.
#   gpu-bundle/run.sh shell bash repro/gpu_timings.sh      (from the checkout, as tools/gpu-session.sh runs tools)
set -uo pipefail
cd "$(dirname "$0")/.."
for r in bounds_checked_loads split_halves; do
  echo "== repro/cutile_py/$r.py --time"
  timeout 120 python3 "repro/cutile_py/$r.py" --time
done
