#!/usr/bin/env bash
# cargo test for the cutile_rs crate: argument validation, configuration tables, and every kernel
# compiled to Tile IR and assembled for sm_90 by the pinned tileiras (no GPU needed). Exits non-zero
# on failure; skips (exit 0, saying why) only where there is no Rust toolchain at all.
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/rust-env.sh
if ! command -v cargo >/dev/null 2>&1; then echo "test-rust: skipped because cargo is not found"; exit 0; fi
if [ -n "$RUST_ENV_PROBLEM" ]; then echo "test-rust: FAILED because $RUST_ENV_PROBLEM"; exit 1; fi
echo "test-rust: libclang for bindgen: $LIBCLANG_PATH/libclang.so"
start=$SECONDS
# tests/sass.rs reads the cubins with cuobjdump (not in the pinned toolchain; Triton's wheel bundles
# one). Without any, that file is left out and the log says so; with one, it must pass.
targets=(--tests)
if [ -z "${CUOBJDUMP:-}" ] && ! command -v cuobjdump >/dev/null 2>&1 \
   && ! ls .venv/lib/python3*/site-packages/triton/backends/nvidia/bin/cuobjdump >/dev/null 2>&1; then
  echo "test-rust: SKIPPED tests/sass.rs: no cuobjdump (set CUOBJDUMP, or pip install triton into .venv)"
  targets=()
  for f in rust/tests/*.rs; do
    name=$(basename "$f" .rs)
    [ "$name" = sass ] || targets+=(--test "$name")
  done
fi
# --release shares the dependency build with maturin's (same profile and dependency features).
log=$(mktemp)
(cd rust && cargo test --release --no-fail-fast --lib "${targets[@]}" "$@") 2>&1 | tee "$log"  # doc-tests: none exist
rc=${PIPESTATUS[0]}
# One line with the totals over every test binary (cargo prints one "test result:" line per binary).
totals=$(grep -o "test result: [A-Za-z]*\. [0-9]* passed; [0-9]* failed; [0-9]* ignored" "$log" \
  | awk '{p+=$4; f+=$6; i+=$8} END {printf "%d passed, %d failed, %d ignored in %d test binaries", p, f, i, NR}')
rm -f "$log"
echo "test-rust: cargo test: $totals; exit $rc in $((SECONDS - start)) s"
exit $rc
