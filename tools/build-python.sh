#!/usr/bin/env bash
# Installs the tilerosetta package into .venv (editable). Its CMake build compiles the CUDA Tile C++
# backend (cpp/): about 40 nvcc -tilecubin runs (10 ops x 4 archs), the longest step of a fresh build, so
# every finished kernel is printed with the elapsed time instead of a silent `pip -q`.
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/build-status.sh
start=$SECONDS
mkdir -p build
log=build/build-python.log
echo "build-python: pip install -e . (compiles the C++ tile kernels for every arch; log: $log)"
.venv/bin/python -m pip install -v --no-build-isolation -e . 2>&1 | tee "$log" | while IFS= read -r line; do
  case "$line" in
    *"nvcc -tilecubin"*|*"Linking CXX"*|*"tile_cpp backend NOT built"*)
      printf 'build-python: [%4ds] %s\n' $((SECONDS - start)) "$(sed -E 's/^ *(\[[0-9]+\/[0-9]+\] )?/\1/' <<<"$line")";;
  esac
done
if [ "${PIPESTATUS[0]}" != 0 ]; then
  tail -25 "$log"
  status_failed python "pip install -e . failed after $((SECONDS - start)) s (log: $log)"
  exit 1
fi
status_built python "tilerosetta $(.venv/bin/python -c 'import tilerosetta; print(tilerosetta.__version__)') (harness, torch, cutile_py, triton) in $((SECONDS - start)) s"
