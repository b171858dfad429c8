#!/usr/bin/env bash
# Builds the cutile_rs backend: the Rust crate in rust/ as an abi3 wheel (maturin, PyO3) into
# build/wheels/, then installs it into .venv. No cargo (or one too old) is an environmental reason: the
# step is skipped, saying so. Anything else that breaks the build fails it (exit 1): the CUDA headers,
# tileiras and libclang all come from `make setup`, so their absence is a bug, not the machine's state.
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/build-status.sh
source tools/rust-env.sh
start=$SECONDS
skip() { status_skipped rust "$*"; exit 0; }
fail() { status_failed rust "$*"; exit 1; }
command -v cargo >/dev/null 2>&1 || skip "cargo not found (needs Rust >= 1.89, e.g. https://rustup.rs)"
rustv=$(rustc --version | grep -o '[0-9]*\.[0-9]*' | head -1)
if [ "$(printf '%s\n1.89\n' "$rustv" | sort -V | head -1)" != "1.89" ]; then
  skip "rustc $rustv is older than 1.89 (the cutile crates' minimum)"
fi
[ -n "$RUST_ENV_PROBLEM" ] && fail "$RUST_ENV_PROBLEM"
[ -x .venv/bin/maturin ] || fail ".venv/bin/maturin missing (run make setup)"
echo "build-rust: libclang for bindgen: $LIBCLANG_PATH/libclang.so"
mkdir -p build/wheels
rm -f build/wheels/tilerosetta_cutile_rs-*.whl
log=build/build-rust.log
echo "build-rust: maturin build --release (the first build compiles the cutile crates: several minutes; log: $log)"
# cargo prints one "Compiling <crate>" line per crate: show them with the elapsed time so a long build is
# never silent, and keep the whole log for errors.
.venv/bin/maturin build --release --manifest-path rust/Cargo.toml --interpreter .venv/bin/python \
    --out build/wheels 2>&1 | tee "$log" | while IFS= read -r line; do
  case "$line" in *Compiling*|*Finished*|*"Built wheel"*) printf 'build-rust: [%4ds] %s\n' $((SECONDS - start)) "${line#"${line%%[![:space:]]*}"}";; esac
done
if [ "${PIPESTATUS[0]}" != 0 ]; then
  grep -E "^(error|warning: unused)|error\[|failed|fatal" "$log" | head -20
  tail -15 "$log"
  fail "maturin build failed after $((SECONDS - start)) s (log: $log)"
fi
wheel=$(ls build/wheels/tilerosetta_cutile_rs-*.whl | head -1)
.venv/bin/python -m pip install -q --force-reinstall --no-deps "$wheel" || fail "pip install $wheel failed"
status_built rust "$(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB) in $((SECONDS - start)) s, libclang $LIBCLANG_PATH/libclang.so"
