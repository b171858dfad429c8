#!/usr/bin/env bash
# One GPU session in one call: doctor, the conformance suite for every backend, then the benchmark.
# Usage: tools/gpu-session.sh OUTDIR [test-backends] [bench args...]
# Expects gpu-bundle/ next to the checkout (make gpu-bundle). Writes logs and results into OUTDIR.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?OUTDIR}; shift
backends=${1:-torch,cutile_py,triton,tile_cpp,cutile_rs}; shift || true
mkdir -p "$out"
export LOGDIR="$out"
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
  echo "CUDA_HOME=${CUDA_HOME:-unset}"
  python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
} 2>&1 | tee "$out/machine.txt"
t0=$(date +%s)
gpu-bundle/run.sh doctor 2>&1 | tee -a "$out/machine.txt"
echo "== unpack+doctor: $(( $(date +%s) - t0 )) s"
gpu-bundle/run.sh test --backend "$backends" --junitxml="$out/junit.xml" -p no:randomly
echo "== suite done: $(( $(date +%s) - t0 )) s"
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  gpu-bundle/run.sh bench --out "$out" "$@"
  echo "== bench done: $(( $(date +%s) - t0 )) s"
fi
