# Sourced by build-rust.sh and test-rust.sh: the environment the cutile crates need to build and to
# compile kernels. Sets RUST_ENV_PROBLEM (empty when everything is in place).
#  * CUDA_TOOLKIT_PATH: cuda-bindings' build script runs bindgen on cuda.h (>= 13.0; cuTile-rs wants
#    13.2+ headers for its driver API surface) -> the pinned .toolchain/nvidia/cu13 (13.4).
#  * curand.h: cuda-bindings also binds cuRAND, which .toolchain lacks; torch's CUDA wheels ship it
#    (site-packages/nvidia/cu13/include). Added with -idirafter so cuda.h still comes from 13.4.
#  * libclang (bindgen): Debian's libclang-dev.
#  * CUTILE_TILEIRAS_PATH: the pinned tileiras 13.4 (sm_90 needs Tile IR bytecode >= 13.3);
#    CUDA_HOME removed (an older toolkit's ptxas breaks tileiras).
#  * CARGO_TARGET_DIR=rust/target: cargo test and maturin share one build.
RUST_ENV_PROBLEM=""
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CARGO_TARGET_DIR="$ROOT/rust/target"
unset CUDA_HOME CUDA_PATH
TOOLKIT="${TILEROSETTA_TOOLCHAIN:-$ROOT/.toolchain/nvidia/cu13}"
if [ ! -f "$TOOLKIT/include/cuda.h" ]; then
  RUST_ENV_PROBLEM="no CUDA headers at $TOOLKIT/include/cuda.h (run make setup)"
elif [ ! -x "$TOOLKIT/bin/tileiras" ]; then
  RUST_ENV_PROBLEM="no tileiras at $TOOLKIT/bin/tileiras (run make setup)"
fi
export CUDA_TOOLKIT_PATH="$TOOLKIT"
export CUTILE_TILEIRAS_PATH="$TOOLKIT/bin/tileiras"
export PATH="$TOOLKIT/bin:$PATH"
CURAND_DIR=""
if [ ! -f "$TOOLKIT/include/curand.h" ]; then
  for d in "$ROOT"/.venv/lib/python3*/site-packages/nvidia/cu13/include "$ROOT"/.venv/lib/python3*/site-packages/nvidia/curand/include; do
    if [ -f "$d/curand.h" ]; then CURAND_DIR="$d"; break; fi
  done
  if [ -z "$CURAND_DIR" ] && [ -z "$RUST_ENV_PROBLEM" ]; then
    RUST_ENV_PROBLEM="curand.h not found (cuda-bindings binds cuRAND): neither $TOOLKIT/include nor the venv's nvidia/cu13 or nvidia/curand wheels have it"
  fi
  export BINDGEN_EXTRA_CLANG_ARGS="-idirafter $CURAND_DIR"
fi
have_libclang() {
  [ -n "${LIBCLANG_PATH:-}" ] && return 0
  local f
  for f in /usr/lib/llvm-*/lib/libclang*.so* /usr/lib/*-linux-gnu/libclang*.so* /usr/lib64/libclang*.so*; do
    [ -e "$f" ] && return 0
  done
  return 1
}
