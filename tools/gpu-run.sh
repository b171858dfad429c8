#!/usr/bin/env bash
# Run TileRosetta on a GPU node from a checkout plus gpu-bundle/ (see tools/gpu-bundle.sh).
#   gpu-bundle/run.sh test  [pytest args]      conformance suite for every backend that runs there
#   gpu-bundle/run.sh bench [bench args]       the benchmark
#   gpu-bundle/run.sh doctor | list | shell CMD
# Logs go to $LOGDIR (default: ./gpu-logs).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
work=${TILEROSETTA_WORK:-/tmp/tilerosetta-node}
mkdir -p "$work"
if [ ! -x "$work/toolchain/nvidia/cu13/bin/tileiras" ]; then
  mkdir -p "$work/toolchain" && tar -C "$work/toolchain" -xJf "$here/toolchain.tar.xz"
fi
if [ "$here/site.tar.xz" -nt "$work/site" ] || [ ! -d "$work/site" ]; then
  rm -rf "$work/site" && mkdir -p "$work/site" && tar -C "$work/site" -xJf "$here/site.tar.xz"
fi
export TILEROSETTA_TOOLCHAIN="$work/toolchain/nvidia/cu13"
# A system CUDA (e.g. 13.0) at CUDA_HOME would make tileiras 13.4 use the wrong ptxas/libnvvm.
[ -n "${CUDA_HOME:-}" ] && export TILEROSETTA_ORIGINAL_CUDA_HOME="$CUDA_HOME"
unset CUDA_HOME CUDA_PATH
export PATH="$TILEROSETTA_TOOLCHAIN/bin:$PATH"
export PYTHONPATH="$repo/python:$work/site${PYTHONPATH:+:$PYTHONPATH}"
# The optional peers' runtime (Quack, FA4, Liger, CuTe DSL), once tools/gpu-peers-stage.sh unpacked it. The
# cutlass wheel's .pth is not processed on PYTHONPATH, hence its dsl_packages folder named here.
peers=${PEERS_SITE:-/tmp/peers-site}
if [ -f "$peers/.complete" ] && [[ ":$PYTHONPATH:" != *":$peers:"* ]]; then
  export PYTHONPATH="$PYTHONPATH:$peers:$peers/nvidia_cutlass_dsl/dsl_packages"
fi
export PYTHONUNBUFFERED=1
# The C++ extension in this bundle may hold cubins for the node's arch only (gpu-bundle NODE_ARCHS).
[ -f "$here/tile-cpp-archs" ] && export TILEROSETTA_TILE_CPP_ARCHS=$(cat "$here/tile-cpp-archs")
logs=${LOGDIR:-$repo/gpu-logs}; mkdir -p "$logs"
cmd=${1:-test}; shift || true
case "$cmd" in
  test)   python3 -m tilerosetta test -- -rs "$@" 2>&1 | tee "$logs/test.log" ;;
  bench)  python3 -m tilerosetta bench "$@" 2>&1 | tee "$logs/bench.log" ;;
  doctor) python3 -m tilerosetta doctor "$@" ;;
  list)   python3 -m tilerosetta list ;;
  shell)  "$@" ;;
  *) echo "usage: run.sh test|bench|doctor|list|shell CMD" >&2; exit 2 ;;
esac
