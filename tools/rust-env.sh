# Sourced by build-rust.sh and test-rust.sh: the environment the cutile crates need to build and to
# compile kernels. Sets RUST_ENV_PROBLEM (empty when everything is in place).
#  * CUDA_TOOLKIT_PATH: cuda-bindings' build script runs bindgen on cuda.h (>= 13.0; cuTile-rs wants
#    13.2+ headers for its driver API surface) -> the pinned .toolchain/nvidia/cu13 (13.4).
#  * curand.h: cuda-bindings also binds cuRAND, which .toolchain lacks; torch's CUDA wheels ship it
#    (site-packages/nvidia/cu13/include). Added with -idirafter so cuda.h still comes from 13.4.
#  * libclang (bindgen): the PyPI libclang wheel in .venv (LIBCLANG_PATH), see below.
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
# libclang for bindgen: the PyPI `libclang` wheel that `make setup` installs into .venv (requirements.txt),
# never whatever the machine happens to have (Debian's base image ships libclang-cpp, which bindgen cannot
# load, and a hand-installed libclang-dev hides a missing step). LIBCLANG_PATH set by the caller wins.
# The wheel has libclang.so but not clang's resource headers (stddef.h, stdarg.h): bindgen gets the C
# compiler's own include directory instead.
if [ -z "${LIBCLANG_PATH:-}" ]; then
  for d in "$ROOT"/.venv/lib/python3*/site-packages/clang/native; do
    [ -f "$d/libclang.so" ] && export LIBCLANG_PATH="$d"
  done
fi
if [ -z "${LIBCLANG_PATH:-}" ] || [ ! -f "$LIBCLANG_PATH/libclang.so" ]; then
  [ -z "$RUST_ENV_PROBLEM" ] && RUST_ENV_PROBLEM="no libclang.so for bindgen (LIBCLANG_PATH=${LIBCLANG_PATH:-unset}; make setup installs the PyPI libclang wheel into .venv)"
else
  cc_include=$( (cc -print-file-name=include || gcc -print-file-name=include) 2>/dev/null | head -1)
  if [ -n "$cc_include" ] && [ -f "$cc_include/stddef.h" ]; then
    export BINDGEN_EXTRA_CLANG_ARGS="${BINDGEN_EXTRA_CLANG_ARGS:-} -idirafter $cc_include"
  fi
fi
